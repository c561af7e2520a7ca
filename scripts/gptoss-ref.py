#!/usr/bin/env python3
"""gptoss-ref.py: llama.cpp's reference log-probabilities for the synthetic gpt-oss models,
written to tests/data/gptoss-ref.json for tests/test_gptoss.c.

The same procedure and file format as scripts/hybrid-ref.py (whose reader of the
--kl-divergence-base file this reuses): `cpulm synth` writes the model, llama-perplexity
scores one 512-token chunk, the chunk's tokens, llama.cpp's perplexity and every scored
position's top-K log-probabilities are kept. tiny-gpt-oss slides a 32-key window on every
other layer, so the chunk is 16 windows long, and its YaRN context is 256 positions.

usage: scripts/gptoss-ref.py [BUILD_DIR] (needs ../shared or $CPULM_SHARED). The llama.cpp
build is $LLAMA_PERPLEXITY, default the shared one; on CPUs where that one dies with SIGILL
on quantized files, point it at a build without the sapphirerapids CPU library.
"""
import importlib.util, json, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
SHARED = os.environ.get("CPULM_SHARED", os.path.join(ROOT, "..", "shared"))
LLAMA = os.environ.get("LLAMA_PERPLEXITY",
                       os.path.join(SHARED, "bench", "llama.cpp", "llama-perplexity"))
TEXT = os.path.join(SHARED, "testdata", "text", "tinystories_valid_head.txt")
N_CTX = 512

# name, synth shape, weight type ("mxfp4": MXFP4 experts, Q8_0 attention, as released)
CASES = [
    ("tiny-gpt-oss-f32", "tiny-gpt-oss", "f32", 0),
    ("tiny-gpt-oss-mxfp4", "tiny-gpt-oss", "mxfp4", 0),
]


def hybrid_ref():
    spec = importlib.util.spec_from_file_location(
        "hybrid_ref", os.path.join(ROOT, "scripts", "hybrid-ref.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    read_base = hybrid_ref().read_base
    out = {"source": "llama.cpp llama-perplexity --kl-divergence-base, scripts/gptoss-ref.py",
           "n_ctx": N_CTX, "cases": []}
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
            if ppl is None:
                ppl = round(ppl_lp, 4)
            out["cases"].append({"name": name, "shape": shape, "type": wtype,
                                 "layers": layers, "n_vocab": n_vocab, "ppl": ppl,
                                 "tokens": tokens, "first": n_ctx // 2, "logprobs_topk": rows})
            print(name, "ppl", ppl, file=sys.stderr)
    path = os.path.join(ROOT, "tests", "data", "gptoss-ref.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
