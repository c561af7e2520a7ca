#!/usr/bin/env python3
"""encoder_server_test.py: `cpulm serve` with encoder models (issue #29), against the
llama-server references of tests/data/encoder-ref.json (scripts/encoder-ref.py).

- tiny-bert F32 with --embeddings: /v1/embeddings (OpenAI), /embedding (llama-server),
  /api/embed (Ollama) give every reference text's vector (cosine >= 0.999 with
  llama-server's); llama-server's /tokenize gives its tokens; text generation is refused
  (501); rerank routes are refused without --rerank (501, as llama-server).
- tiny-bert with a classification head and --rerank: /v1/rerank, /rerank, /reranking and
  /v1/reranking on the 20 reference query/document sets give the documents in
  llama-server's order with its scores (within 1e-3); top_n, return_text and TEI's "texts"
  shape; embeddings are refused on a rerank server.

usage: encoder_server_test.py path/to/cpulm [path/to/encoder-ref.json]
Servers bind 127.0.0.1 on a free port; only the processes started here are stopped.
"""
import json, math, os, re, subprocess, sys, tempfile, time, urllib.error, urllib.request

CPULM = sys.argv[1]
REF = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "data", "encoder-ref.json")
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL", name, detail)


def start(tmp, model, *args):
    out = open(os.path.join(tmp, "serve.out"), "w+")
    p = subprocess.Popen([CPULM, "serve", "-m", model, "--port", "0", "-t", "1", *args],
                         stdout=out, stderr=subprocess.STDOUT)
    port = None
    for _ in range(200):  # bounded: 10 s
        out.seek(0)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", out.read())
        if m:
            port = int(m.group(1))
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/ready" % port, timeout=2) as r:
                    if r.status == 200:
                        return p, port
            except Exception:
                pass
        if p.poll() is not None:
            break
        time.sleep(0.05)
    out.seek(0)
    print("server did not start:", out.read()[-500:])
    p.kill()
    p.wait()
    return None, None


def post(port, path, body):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def cosine(a, b):
    ab = sum(x * y for x, y in zip(a, b))
    return ab / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b) + 1e-30)


def synth(tmp, case):
    path = os.path.join(tmp, case["name"] + ".gguf")
    cmd = [CPULM, "synth", "--shape", case["shape"], "--type", case["type"], "-o", path]
    if case["rerank"]:
        cmd.append("--rerank")
    subprocess.run(cmd, check=True, capture_output=True)
    return path


def embeddings(tmp, case):
    p, port = start(tmp, synth(tmp, case), "--embeddings")
    check("start embeddings server", p is not None)
    if not p:
        return
    try:
        items = case["items"]
        texts = [it["text"] for it in items]
        st, r = post(port, "/v1/embeddings", {"input": texts})
        check("/v1/embeddings status", st == 200, st)
        worst = min(cosine(d["embedding"], it["embedding"]) for d, it in zip(r["data"], items))
        check("/v1/embeddings cosine >= 0.999", len(r["data"]) == len(items) and worst >= 0.999,
              worst)
        st, r = post(port, "/api/embed", {"model": "x", "input": texts})
        worst = min(cosine(v, it["embedding"]) for v, it in zip(r["embeddings"], items))
        check("/api/embed cosine >= 0.999", st == 200 and worst >= 0.999, worst)
        for it in items[:4]:
            st, r = post(port, "/embedding", {"content": it["text"]})
            check("/embedding cosine", st == 200 and
                  cosine(r[0]["embedding"][0], it["embedding"]) >= 0.999, st)
            st, r = post(port, "/tokenize", {"content": it["text"], "add_special": True})
            check("/tokenize equals llama-server's", st == 200 and r["tokens"] == it["tokens"],
                  (r, it["tokens"]))
        st, r = post(port, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
        check("generation refused on an encoder", st == 501, st)
        st, r = post(port, "/v1/rerank", {"query": "a", "documents": ["b"]})
        check("rerank refused without --rerank", st == 501, st)
    finally:
        p.terminate()
        p.wait()


def ranked(scores):
    return sorted(range(len(scores)), key=lambda i: -scores[i])


def rerank(tmp, case):
    p, port = start(tmp, synth(tmp, case), "--rerank")
    check("start rerank server", p is not None)
    if not p:
        return
    try:
        paths = ["/v1/rerank", "/rerank", "/reranking", "/v1/reranking"]
        worst = 0.0
        for k, s in enumerate(case["sets"]):
            st, r = post(port, paths[k % 4], {"query": s["query"], "documents": s["documents"]})
            got = [x["index"] for x in r.get("results", [])]
            check("rerank order equals llama-server's", st == 200 and got == ranked(s["scores"]),
                  (s["query"], got, ranked(s["scores"])))
            for x in r.get("results", []):
                worst = max(worst, abs(x["relevance_score"] - s["scores"][x["index"]]))
        check("rerank scores within 1e-3", worst <= 1e-3, worst)
        s = case["sets"][3]
        st, r = post(port, "/v1/rerank", {"query": s["query"], "documents": s["documents"],
                                          "top_n": 2, "return_text": True})
        best = ranked(s["scores"])[:2]
        check("top_n and return_text", st == 200 and [x["index"] for x in r["results"]] == best
              and all(x["document"]["text"] == s["documents"][x["index"]] for x in r["results"]),
              r)
        check("usage counted", r.get("usage", {}).get("prompt_tokens", 0) > 0, r)
        st, r = post(port, "/rerank", {"query": s["query"], "texts": s["documents"],
                                       "return_text": True})
        check("TEI shape for texts", st == 200 and isinstance(r, list) and
              [x["index"] for x in r] == ranked(s["scores"]) and "score" in r[0] and
              r[0]["text"] == s["documents"][r[0]["index"]], r)
        st, r = post(port, "/v1/rerank", {"query": "x", "documents": []})
        check("empty documents refused", st == 400, st)
        st, r = post(port, "/v1/rerank", {"documents": ["x"]})
        check("missing query refused", st == 400, st)
        st, r = post(port, "/v1/embeddings", {"input": "x"})
        check("embeddings refused on a rerank server", st == 501, st)
    finally:
        p.terminate()
        p.wait()


def main():
    with open(REF) as f:
        ref = json.load(f)
    cases = {c["name"]: c for c in ref["cases"]}
    with tempfile.TemporaryDirectory() as tmp:
        embeddings(tmp, cases["tiny-bert-f32-mean"])
        embeddings(tmp, cases["tiny-nomic-bert-f32-mean"])
        rerank(tmp, cases["tiny-bert-rerank-f32"])
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
