#!/usr/bin/env python3
"""encoder-ref.py: llama.cpp's reference embeddings and rerank scores for the synthetic
encoder models (bert, nomic-bert), written to tests/data/encoder-ref.json for
tests/test_encoder.c.

For each case `cpulm synth` writes the model (a named shape, a weight type, optionally the
reranker's classification head: the test writes the same file from the same parameters),
the shared `llama-server` serves it on 127.0.0.1 (`--embedding --pooling P`, or `--rerank`;
`-fa off`, see FA below)
and this script keeps, for every text, llama-server's tokens (/tokenize with the special
tokens) and its L2-normalized embedding (/v1/embeddings), and for the reranker its scores
(/v1/rerank) of each query's documents.

usage: scripts/encoder-ref.py [BUILD_DIR] (needs ../shared or $CPULM_SHARED)
"""
import json, os, socket, subprocess, sys, tempfile, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
SHARED = os.environ.get("CPULM_SHARED", os.path.join(ROOT, "..", "shared"))
SERVER = os.path.join(SHARED, "bench", "llama.cpp", "llama-server")
# llama-server's non-flash attention path, f32 as cpulm's encoder attention; its flash path
# (the default, "auto", on for CPUs) rounds at f16 level: against it the embeddings still
# agree to cosine 1.000000 and rerank scores within ~0.005.
FA = ["-fa", "off"]

# name, synth shape, weight type, pooling (llama-server's --pooling), reranker head
CASES = [
    ("tiny-bert-f32-mean", "tiny-bert", "f32", "mean", False),
    ("tiny-bert-f16-cls", "tiny-bert", "f16", "cls", False),
    ("tiny-nomic-bert-f32-mean", "tiny-nomic-bert", "f32", "mean", False),
    ("tiny-nomic-bert-f16-last", "tiny-nomic-bert", "f16", "last", False),
    ("tiny-bert-rerank-f32", "tiny-bert", "f32", "rank", True),
]

TEXTS = [
    "What is the capital of France?",
    "Paris is the capital of France.",
    "The cat sat on the mat.",
    "A dog ran in the rain, and the bird sang!",
    "Berlin (Germany) is a city on a river; the water is blue.",
    "how to write code that can read data from a document",
    "zzyzx qwerty xylophone",
    "price: 5\u20ac in \u6771\u4eac",  # words the vocabulary cannot cover: [UNK]
    "Numbers: 3.14, 42 and 1e-9 -- symbols #@$%^&*()[]{}<>~`|",
    "  leading and trailing spaces  \t\n  ",
    "a",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
    "Caf\u00e9 \u00c9COLE na\u00efve \u0130stanbul \u03a9mega Stra\u00dfe \u00c5ngstr\u00f6m",
    "music, books, food: what do you play, read and eat?",
]

QUERIES = [
    "capital of France", "cat on a mat", "dog in the rain", "river water", "write code",
    "read a book", "blue sky", "green tree", "eat fish", "play music", "red car",
    "train to Berlin", "search query", "answer the question", "sun and moon", "star in the sky",
    "city house", "bird song", "data model", "the document",
]
DOCS = [
    "Paris is the capital of France.", "The cat sat on the mat.", "A dog ran in the rain.",
    "The river water is blue.", "Write code to read data.", "Read a book about music.",
    "The sky is blue and the sun is bright.", "A green tree by the house.",
    "Fish is food to eat.", "Play music on the train.", "A red car in the city.",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def wait_ready(port, proc):
    for _ in range(300):
        if proc.poll() is not None:
            raise RuntimeError("llama-server exited")
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.1)
    raise RuntimeError("llama-server did not start")


def run_case(tmp, name, shape, wtype, pooling, rerank):
    model = os.path.join(tmp, name + ".gguf")
    cmd = [os.path.join(BUILD, "cpulm"), "synth", "--shape", shape, "--type", wtype, "-o", model]
    if rerank:
        cmd.append("--rerank")
    subprocess.run(cmd, check=True, capture_output=True)
    port = free_port()
    args = [SERVER, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-c", "256",
            "-b", "256", "-ub", "256", "-np", "1", "-t", "2"] + FA
    args += ["--rerank"] if rerank else ["--embedding", "--pooling", pooling]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, proc)
        case = {"name": name, "shape": shape, "type": wtype, "pooling": pooling,
                "rerank": rerank}
        if rerank:
            sets = []
            for i, q in enumerate(QUERIES):  # 20 sets of 4-7 documents
                docs = [DOCS[(i + 3 * k) % len(DOCS)] for k in range(4 + i % 4)]
                r = post(port, "/v1/rerank", {"query": q, "documents": docs, "top_n": len(docs)})
                scores = [0.0] * len(docs)
                for x in r["results"]:
                    scores[x["index"]] = x["relevance_score"]
                sets.append({"query": q, "documents": docs, "scores": scores})
            case["sets"] = sets
        else:
            items = []
            r = post(port, "/v1/embeddings", {"input": TEXTS})
            for text, d in zip(TEXTS, r["data"]):
                tok = post(port, "/tokenize", {"content": text, "add_special": True})["tokens"]
                items.append({"text": text, "tokens": tok,
                              "embedding": [round(v, 7) for v in d["embedding"]]})
            case["items"] = items
        return case
    finally:
        proc.terminate()
        proc.wait()


def main():
    out = {"source": "llama.cpp llama-server (shared build) --embedding --pooling P / --rerank, "
                     "scripts/encoder-ref.py", "cases": []}
    with tempfile.TemporaryDirectory() as tmp:
        for c in CASES:
            out["cases"].append(run_case(tmp, *c))
            print(c[0], "done", file=sys.stderr)
    path = os.path.join(ROOT, "tests", "data", "encoder-ref.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
