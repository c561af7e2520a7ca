#!/usr/bin/env python3
"""ref-logits.py: llama.cpp's reference log-probabilities for the synthetic models of one
architecture family, written to tests/data/ARCH-ref.json for tests/refcase.c (read by
tests/test_gemma.c, test_gptoss.c, test_hybrid.c and test_rope.c).

For each case of the family: `cpulm synth` writes the model (a named shape, a weight type,
optionally fewer layers and other synth options: the test writes the same file from the
same parameters), `llama-perplexity --kl-divergence-base` scores the first 512-token chunk
of the TinyStories text, and this script keeps the chunk's tokens, llama.cpp's perplexity
and, for every scored position, the top-10 log-probabilities it stored (llama-perplexity
stores each scored position's log-softmax as 16-bit steps over the 16 nats below the
maximum, so values are exact to ~1.3e-4).

usage: scripts/ref-logits.py ARCH [BUILD_DIR]
  ARCH: gemma (tiny-gemma3: 16 windows of 32 positions), gemma4 (tiny-gemma4), gptoss (tiny-gpt-oss: a 32-key
  window on every other layer, YaRN over 256 positions), hybrid (the qwen35 family), yarn
  (tiny llama and qwen3 files with YaRN scaling, read by tests/test_rope.c), kvq (quantized
  KV caches, `-ctk`/`-ctv` with flash attention, read by tests/test_attn.c)
  Needs ../shared or $CPULM_SHARED. The llama.cpp build is $LLAMA_PERPLEXITY, default the
  shared one; on a CPU where its sapphirerapids variant dies with SIGILL on quantized files,
  point it at a copy without that variant.
  $REF_CASES: ad-hoc cases for experiments (a JSON list of [name, shape, type, layers,
  {options}]); $REF_OUT: another output file.
"""
import json, math, os, struct, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("CPULM_SHARED", os.path.join(ROOT, "..", "shared"))
LLAMA = os.environ.get("LLAMA_PERPLEXITY",
                       os.path.join(SHARED, "bench", "llama.cpp", "llama-perplexity"))
TEXT = os.path.join(SHARED, "testdata", "text", "tinystories_valid_head.txt")
N_CTX = 512
TOPK = 10

# name, synth shape, weight type, layers (0: the shape's), other synth options (`cpulm
# synth` flags; the test reads them back from the case: "swa", "swa_period",
# "rope_linear", "softcap", "k_eq_v", "double_wide_mlp", "kv_heads_global", "yarn",
# "yarn_orig_ctx", "arch", "head_dim"); "kv" is not synth's but the KV cache type of both
# engines (llama-perplexity -ctk/-ctv, -fa on)
CASES = {
    "gemma": [
        ("tiny-gemma3-f32", "tiny-gemma3", "f32", 0, {}),
        ("tiny-gemma3-f16", "tiny-gemma3", "f16", 0, {}),
        ("tiny-gemma3-bf16", "tiny-gemma3", "bf16", 0, {}),
        ("tiny-gemma3-q8_0", "tiny-gemma3", "q8_0", 0, {}),
        # the period key written (3: layers 2 and 5 global), unscaled global rope
        ("tiny-gemma3-period3-f32", "tiny-gemma3", "f32", 0, {"swa_period": 3, "rope_linear": 0}),
        # no sliding window: every layer global at the file's base (llama.cpp's other graph)
        ("tiny-gemma3-global-f32", "tiny-gemma3", "f32", 0, {"swa": 0}),
        # the final logit soft-cap key (a small cap, so it matters), with and without windows
        ("tiny-gemma3-softcap-f32", "tiny-gemma3", "f32", 0, {"softcap": 0.5}),
        ("tiny-gemma3-global-softcap-f32", "tiny-gemma3", "f32", 0, {"swa": 0, "softcap": 0.5}),
    ],
    # tiny-gemma4: 4 sliding layers (heads of 32, window 32) and 2 global (heads of 64, a
    # quarter rotated), the last 2 layers reusing the KV of layers 2 and 3, per-layer
    # embeddings; the k_eq_v file has no attn_v on its global layers
    "gemma4": [
        ("tiny-gemma4-f32", "tiny-gemma4", "f32", 0, {}),
        ("tiny-gemma4-keqv-f32", "tiny-gemma4", "f32", 0, {"k_eq_v": 1}),
        ("tiny-gemma4-q8_0", "tiny-gemma4", "q8_0", 0, {}),
        # per-layer arrays: E2B's double-wide FFN on the shared tail; 31B's global layers
        # with one KV head of the sliding layers' two and no attn_v; global layers with 4 KV
        # heads (the sliding layers' 2 each serve two query heads: cpulm repeats them)
        ("tiny-gemma4-wide-f32", "tiny-gemma4", "f32", 0, {"double_wide_mlp": 1}),
        ("tiny-gemma4-kvg-f32", "tiny-gemma4", "f32", 0, {"kv_heads_global": 1, "k_eq_v": 1}),
        ("tiny-gemma4-kvg4-f32", "tiny-gemma4", "f32", 0, {"kv_heads_global": 4}),
    ],
    # "mxfp4": MXFP4 experts, Q8_0 attention, as released
    "gptoss": [
        ("tiny-gpt-oss-f32", "tiny-gpt-oss", "f32", 0, {}),
        ("tiny-gpt-oss-mxfp4", "tiny-gpt-oss", "mxfp4", 0, {}),
    ],
    # YaRN past the original context: the tiny shape as llama and as qwen3 (q/k norms),
    # scaled 8x over 32 positions, so every scored position (256-511) is far beyond it
    "yarn": [
        ("tiny-yarn8-f32", "tiny", "f32", 0, {"yarn": 8, "yarn_orig_ctx": 32}),
        ("tiny-qwen3-yarn8-f32", "tiny", "f32", 0,
         {"arch": "qwen3", "yarn": 8, "yarn_orig_ctx": 32}),
        ("tiny-qwen3-yarn4-q8_0", "tiny", "q8_0", 0,
         {"arch": "qwen3", "yarn": 4, "yarn_orig_ctx": 128}),
    ],
    # quantized KV caches: llama.cpp quantizes the query to Q8_0 and rotates queries, keys
    # (Hadamard of the largest power of two from 64 dividing the head) and values (of 64)
    # when the head is a multiple of 64; heads of 64, 128, 192 and 96 (no rotation)
    "kvq": [
        ("tiny-kvq8-f32", "tiny", "f32", 0, {"kv": "q8_0"}),
        ("tiny-kvq4-f32", "tiny", "f32", 0, {"kv": "q4_0"}),
        ("tiny-qwen3-h128-kvq8-f32", "tiny", "f32", 0, {"arch": "qwen3", "head_dim": 128, "kv": "q8_0"}),
        ("tiny-qwen3-h128-kvq4-f32", "tiny", "f32", 0, {"arch": "qwen3", "head_dim": 128, "kv": "q4_0"}),
        ("tiny-qwen3-h192-kvq8-f32", "tiny", "f32", 0, {"arch": "qwen3", "head_dim": 192, "kv": "q8_0"}),
        ("tiny-qwen3-h96-kvq8-f32", "tiny", "f32", 0, {"arch": "qwen3", "head_dim": 96, "kv": "q8_0"}),
    ],
    # quantized types are missing: the shared llama.cpp build dies with SIGILL on them on the
    # machine the data was made on
    "hybrid": [
        ("tiny-qwen35-f32", "tiny-qwen35", "f32", 0, {}),
        ("tiny-qwen35-f16", "tiny-qwen35", "f16", 0, {}),
        ("tiny-qwen35-bf16", "tiny-qwen35", "bf16", 0, {}),
        ("tiny-qwen35moe-f32", "tiny-qwen35moe", "f32", 0, {}),
        ("tiny-qwen3next-f32", "tiny-qwen3next", "f32", 0, {}),
        ("tiny-qwen3next-ssm-in-f32", "tiny-qwen3next-ssm-in", "f32", 0, {}),
    ],
}


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


def run_case(build, tmp, name, shape, wtype, layers, opts):
    model = os.path.join(tmp, name + ".gguf")
    cmd = [os.path.join(build, "cpulm"), "synth", "--shape", shape, "--type", wtype, "-o", model]
    if layers:
        cmd += ["--layers", str(layers)]
    for k, v in opts.items():
        if k != "kv":
            cmd += ["--" + k.replace("_", "-"), str(v)]
    subprocess.run(cmd, check=True, capture_output=True)
    base = os.path.join(tmp, name + ".bin")
    kv = ["-ctk", opts["kv"], "-ctv", opts["kv"], "-fa", "on"] if "kv" in opts else []
    r = subprocess.run([LLAMA, "-m", model, "-f", TEXT, "-c", str(N_CTX), "-b", str(N_CTX),
                        "--chunks", "1", "-t", "2", "--kl-divergence-base", base] + kv,
                       check=True, capture_output=True, text=True)
    ppl = None
    for line in (r.stdout + r.stderr).splitlines():
        if "Final estimate: PPL =" in line:
            ppl = float(line.split("PPL =")[1].split()[0])
    n_ctx, n_vocab, tokens, rows, ppl_lp = read_base(base)
    if ppl is None:  # its log line was lost: the same value from the stored log-probs
        ppl = round(ppl_lp, 4)
    print(name, "ppl", ppl, file=sys.stderr)
    return {"name": name, "shape": shape, "type": wtype, "layers": layers, "n_vocab": n_vocab,
            "ppl": ppl, **opts, "tokens": tokens, "first": n_ctx // 2, "logprobs_topk": rows}


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in CASES:
        sys.exit("usage: scripts/ref-logits.py {%s} [BUILD_DIR]" % ",".join(CASES))
    arch = sys.argv[1]
    build = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "build")
    cases = CASES[arch]
    if os.environ.get("REF_CASES"):
        cases = [tuple(c) for c in json.loads(os.environ["REF_CASES"])]
    out_path = os.environ.get("REF_OUT", os.path.join(ROOT, "tests", "data", arch + "-ref.json"))
    out = {"source": "llama.cpp llama-perplexity --kl-divergence-base, scripts/ref-logits.py "
                     + arch, "n_ctx": N_CTX, "cases": []}
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            out["cases"].append(run_case(build, tmp, *case))
    with open(out_path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
