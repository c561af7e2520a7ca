#!/usr/bin/env python3
"""hybrid-ref.py: llama.cpp's reference log-probabilities for the hybrid (qwen35 family)
synthetic models, written to tests/data/hybrid-ref.json for tests/test_model.c.

For each case: `cpulm synth` writes the model (a named shape, a weight type, optionally
fewer layers: the test writes the same file from the same parameters), the shared
`llama-perplexity --kl-divergence-base` scores one chunk of the text, and this script keeps
the chunk's tokens, llama.cpp's perplexity and, for every scored position, the top-K
log-probabilities it stored (llama-perplexity stores each scored position's log-softmax
as 16-bit steps over the 16 nats below the maximum, so values are exact to ~1.3e-4).

usage: scripts/hybrid-ref.py [BUILD_DIR] (needs ../shared or $CPULM_SHARED)
"""
import json, math, os, struct, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
SHARED = os.environ.get("CPULM_SHARED", os.path.join(ROOT, "..", "shared"))
LLAMA = os.path.join(SHARED, "bench", "llama.cpp", "llama-perplexity")
TEXT = os.path.join(SHARED, "testdata", "text", "tinystories_valid_head.txt")
TOPK = 10
N_CTX = 512

# name, synth shape, weight type, layers (0: the shape's). Quantized types are missing: the
# shared llama.cpp build dies with SIGILL on them on the machine the data was made on.
CASES = [
    ("tiny-qwen35-f32", "tiny-qwen35", "f32", 0),
    ("tiny-qwen35-f16", "tiny-qwen35", "f16", 0),
    ("tiny-qwen35-bf16", "tiny-qwen35", "bf16", 0),
    ("tiny-qwen35moe-f32", "tiny-qwen35moe", "f32", 0),
    ("tiny-qwen3next-f32", "tiny-qwen3next", "f32", 0),
    ("tiny-qwen3next-ssm-in-f32", "tiny-qwen3next-ssm-in", "f32", 0),
]


def read_base(path):
    """The --kl-divergence-base file: magic, n_ctx, n_vocab, n_chunk, the tokens, then per
    chunk and scored position [scale f32, min_log_prob f32, n_vocab (padded even) u16]."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"_logits_", "not a llama-perplexity logits file"
    n_ctx, n_vocab, n_chunk = struct.unpack_from("<iii", data, 8)
    off = 20
    tokens = list(struct.unpack_from("<%di" % (n_ctx * n_chunk), data, off))
    off += 4 * n_ctx * n_chunk
    nv = 2 * ((n_vocab + 1) // 2) + 4
    first = n_ctx // 2
    rows, nll = [], 0.0
    for j in range(first, n_ctx - 1):  # the first chunk only
        scale, min_lp = struct.unpack_from("<ff", data, off)
        q = struct.unpack_from("<%dH" % n_vocab, data, off + 8)
        off += 2 * nv
        lp = [min_lp + scale * v for v in q]
        nll -= lp[tokens[j + 1]]
        top = sorted(range(n_vocab), key=lambda i: -lp[i])[:TOPK]
        rows.append([[i, round(lp[i], 6)] for i in top])
    return n_ctx, n_vocab, tokens[:n_ctx], rows, math.exp(nll / (n_ctx - 1 - first))


def main():
    out = {"source": "llama.cpp llama-perplexity --kl-divergence-base (shared build), "
                     "scripts/hybrid-ref.py", "n_ctx": N_CTX, "cases": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name, shape, wtype, layers in CASES:
            model = os.path.join(tmp, name + ".gguf")
            cmd = [os.path.join(BUILD, "cpulm"), "synth", "--shape", shape, "--type", wtype,
                   "-o", model]
            if layers:
                cmd += ["--layers", str(layers)]
            subprocess.run(cmd, check=True, capture_output=True)
            base = os.path.join(tmp, name + ".bin")
            r = subprocess.run([LLAMA, "-m", model, "-f", TEXT, "-c", str(N_CTX), "-b",
                                str(N_CTX), "--chunks", "1", "-t", "2",
                                "--kl-divergence-base", base],
                               check=True, capture_output=True, text=True)
            ppl = None
            for line in (r.stdout + r.stderr).splitlines():
                if "Final estimate: PPL =" in line:
                    ppl = float(line.split("PPL =")[1].split()[0])
            n_ctx, n_vocab, tokens, rows, ppl_lp = read_base(base)
            if ppl is None:  # its log line was lost: the same value from the stored log-probs
                ppl = round(ppl_lp, 4)
            out["cases"].append({"name": name, "shape": shape, "type": wtype,
                                 "layers": layers, "n_vocab": n_vocab, "ppl": ppl,
                                 "tokens": tokens, "first": n_ctx // 2, "logprobs_topk": rows})
            print(name, "ppl", ppl, file=sys.stderr)
    path = os.path.join(ROOT, "tests", "data", "hybrid-ref.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
