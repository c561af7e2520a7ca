#!/usr/bin/env python3
"""ref-tokens.py: llama.cpp's token ids for the gemma4 tokenizer model, written to
tests/data/gemma4-tok.json for tests/test_gemma4_tok.c.

`cpulm synth --shape tiny-gemma4 --vocab 4096` writes a file with the vocabulary synth gives
gemma4 files (tokenizer.ggml.model "gemma4": Gemma 4's SentencePiece-style BPE), and the
shared `llama-tokenize` tokenizes each text of the set below (spaces, tabs, newline runs, CR,
digits, punctuation, CJK, emoji, accents, U+2581 itself, special tokens parsed and not, the
chat template's turn markers, invalid UTF-8, a TinyStories paragraph). The test tokenizes the
same texts with cpulm and wants these ids exactly; "roundtrip" cases must also detokenize
back to the text.

usage: scripts/ref-tokens.py [BUILD_DIR]
  Needs ../shared or $CPULM_SHARED; $LLAMA_TOKENIZE overrides the shared llama-tokenize.
"""
import json, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("CPULM_SHARED", os.path.join(ROOT, "..", "shared"))
LLAMA = os.environ.get("LLAMA_TOKENIZE",
                       os.path.join(SHARED, "bench", "llama.cpp", "llama-tokenize"))
STORY = os.path.join(SHARED, "testdata", "text", "tinystories_valid_head.txt")
SHAPE, N_VOCAB = "tiny-gemma4", 4096


def cases():
    with open(STORY, "rb") as f:
        story = f.read(1200).decode("utf-8", "ignore")
    chat = ("<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nWhat is 2+2?<turn|>\n"
            "<|turn>model\n<|channel>thought\n<channel|>")
    # name, text (str, or bytes that are not UTF-8), add_special, parse_special, roundtrip
    return [
        ("plain", "Hello world", 1, 1, 1),
        ("lower", "once upon a time there was a little cat named tom", 1, 1, 1),
        ("no-bos", "the cat sat on the mat", 0, 1, 1),
        ("spaces", "  two  spaces   three    four     five      six       seven", 1, 1, 1),
        ("edges", " leading and trailing ", 1, 1, 1),
        ("one-space", " ", 1, 1, 1),
        ("tabs", "\tindent\t\ttab\t \tmixed\t\t\t", 1, 1, 1),
        ("newlines", "line one\nline two\n\nline three\n\n\nfour\n\n\n\nfive\n\n\n\n\n\nsix",
         1, 1, 1),
        ("only-newlines", "\n\n\n\n\n", 1, 1, 1),
        ("newline-edges", "\n start and end \n", 1, 1, 1),
        ("crlf", "windows\r\nline\r\n\r\nend\r", 1, 1, 1),
        ("digits", "digits 0123456789, pi 3.14159 and 1,000,000 or 2026-12-02", 1, 1, 1),
        ("punct", "Hello, world! It's 2026 - isn't it? (yes) [no] {maybe} a/b c_d e-f #x @y",
         1, 1, 1),
        ("cjk", "你好，世界。中文 日本語のテキスト 한국어", 1, 1, 1),
        ("emoji", "smile \U0001F642 llama \U0001F999 thumbs \U0001F44D\U0001F3FD flag "
                  "\U0001F1EB\U0001F1F7", 1, 1, 1),
        ("accents", "Café naïve façade résumé über señor Straße Ångström", 1, 1, 1),
        ("quotes", "“Quoted” — and… ‘single’ don’t", 1, 1, 1),
        ("other-spaces", "a\u00a0b\u3000c\u2003d \u200b e", 1, 1, 1),
        ("u2581", "a\u2581b \u2581 c", 1, 1, 0),  # U+2581 itself reads as a space
        ("long-word", "a" * 200 + " " + "ab" * 60 + " " + "xyz" * 30, 1, 1, 1),
        ("story", story, 1, 1, 1),
        ("turns", "<|turn>user\nHi there<turn|>\n<|turn>model\n", 1, 1, 0),
        ("turns-as-text", "<|turn>user\nHi there<turn|>\n<|turn>model\n", 1, 0, 1),
        ("chat-prompt", chat, 0, 1, 0),
        ("visible", "<|channel>thought\n<channel|>The answer<|tool_call>call:f{a:<|\"|>x<|\"|>}"
                    "<tool_call|>", 1, 0, 1),
        ("tool-response", "<|tool_response>result<tool_response|>", 1, 1, 0),
        ("tool-response-as-text", "<|tool_response>result<tool_response|>", 1, 0, 0),
        ("bos-eos", "<bos>text<eos>", 1, 1, 0),
        ("other-specials", "end </s> of <unk> text <mask> <unused0> <|think|> <pad>", 1, 1, 0),
        ("other-specials-as-text", "end </s> of <unk> text <mask> <unused0> <|think|> <pad>",
         1, 0, 1),
        ("invalid-utf8", b"ok \xff\xfe bad \xc3( cut \xe2\x82 end \xf0\x9f", 1, 1, 0),
        ("byte-fallback", "Ωmega ∑ ∞ ⁂ \U0001F999\U0001F999", 1, 1, 1),
    ]


def llama_ids(model, data, add_special, parse_special, tmp):
    path = os.path.join(tmp, "text.txt")
    with open(path, "wb") as f:
        f.write(data)
    cmd = [LLAMA, "-m", model, "-f", path, "--ids", "--log-disable", "--no-escape"]
    if not add_special:
        cmd.append("--no-bos")
    if not parse_special:
        cmd.append("--no-parse-special")
    r = subprocess.run(cmd, check=True, capture_output=True)
    last = r.stdout.decode().strip().splitlines()[-1]
    return json.loads(last)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    out_path = os.path.join(ROOT, "tests", "data", "gemma4-tok.json")
    out = {"source": "llama.cpp llama-tokenize, scripts/ref-tokens.py", "shape": SHAPE,
           "n_vocab": N_VOCAB, "cases": []}
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "g4.gguf")
        subprocess.run([os.path.join(build, "cpulm"), "synth", "--shape", SHAPE, "--vocab",
                        str(N_VOCAB), "--type", "f32", "-o", model], check=True,
                       capture_output=True)
        for name, text, add, parse, trip in cases():
            data = text if isinstance(text, bytes) else text.encode("utf-8")
            case = {"name": name}
            if isinstance(text, bytes):
                case["hex"] = data.hex()
            else:
                case["text"] = text
            case.update({"add_special": add, "parse_special": parse, "roundtrip": trip,
                         "ids": llama_ids(model, data, add, parse, tmp)})
            out["cases"].append(case)
            print(name, len(case["ids"]), "tokens", file=sys.stderr)
    with open(out_path, "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
