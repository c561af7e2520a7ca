#!/usr/bin/env python3
"""gemma-ref.py: llama.cpp's reference log-probabilities for the synthetic gemma3 files,
written to tests/data/gemma-ref.json for tests/test_gemma.c.

The same procedure and file format as scripts/hybrid-ref.py (whose reader this reuses):
`cpulm synth` writes each case's model, `llama-perplexity --kl-divergence-base` scores the
first 512-token chunk of the TinyStories text, and the chunk's tokens, llama.cpp's
perplexity and the top-10 log-probabilities of every scored position are kept. The prompt
is 16 windows of tiny-gemma3's 32 positions long.

usage: scripts/gemma-ref.py [BUILD_DIR] [LLAMA_DIR]
  LLAMA_DIR: a llama.cpp build with llama-perplexity (default $CPULM_SHARED/bench/llama.cpp;
  on a CPU where its sapphirerapids variant dies with SIGILL on quantized files, a copy of
  the folder without that variant)
"""
import importlib.util, json, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
SHARED = os.environ.get("CPULM_SHARED", os.path.join(ROOT, "..", "shared"))
LLAMA_DIR = sys.argv[2] if len(sys.argv) > 2 else os.path.join(SHARED, "bench", "llama.cpp")
TEXT = os.path.join(SHARED, "testdata", "text", "tinystories_valid_head.txt")
N_CTX = 512

# name, synth shape, weight type, layers (0: the shape's), other synth options (the test
# reads them back from the case: "swa", "swa_period", "rope_linear")
CASES = [
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
]
if os.environ.get("GEMMA_REF_CASES"):  # ad-hoc cases for experiments: a JSON list of the above
    CASES = [tuple(c) for c in json.loads(os.environ["GEMMA_REF_CASES"])]
OUT = os.environ.get("GEMMA_REF_OUT", os.path.join(ROOT, "tests", "data", "gemma-ref.json"))


def hybrid_ref():
    spec = importlib.util.spec_from_file_location(
        "hybrid_ref", os.path.join(ROOT, "scripts", "hybrid-ref.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    read_base = hybrid_ref().read_base
    out = {"source": "llama.cpp llama-perplexity --kl-divergence-base, scripts/gemma-ref.py",
           "n_ctx": N_CTX, "cases": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name, shape, wtype, layers, opts in CASES:
            model = os.path.join(tmp, name + ".gguf")
            cmd = [os.path.join(BUILD, "cpulm"), "synth", "--shape", shape, "--type", wtype,
                   "-o", model]
            if layers:
                cmd += ["--layers", str(layers)]
            for k, v in opts.items():
                cmd += ["--" + k.replace("_", "-"), str(v)]
            subprocess.run(cmd, check=True, capture_output=True)
            base = os.path.join(tmp, name + ".bin")
            r = subprocess.run([os.path.join(LLAMA_DIR, "llama-perplexity"), "-m", model, "-f",
                                TEXT, "-c", str(N_CTX), "-b", str(N_CTX), "--chunks", "1",
                                "-t", "2", "--kl-divergence-base", base],
                               check=True, capture_output=True, text=True)
            ppl = None
            for line in (r.stdout + r.stderr).splitlines():
                if "Final estimate: PPL =" in line:
                    ppl = float(line.split("PPL =")[1].split()[0])
            n_ctx, n_vocab, tokens, rows, ppl_lp = read_base(base)
            if ppl is None:
                ppl = round(ppl_lp, 4)
            out["cases"].append({"name": name, "shape": shape, "type": wtype,
                                 "layers": layers, "n_vocab": n_vocab, "ppl": ppl,
                                 **opts, "tokens": tokens, "first": n_ctx // 2, "logprobs_topk": rows})
            print(name, "ppl", ppl, file=sys.stderr)
    with open(OUT, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
