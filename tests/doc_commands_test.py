#!/usr/bin/env python3
"""doc_commands_test.py: runs every `cpulm ...` command shown in a code block of README.md and
docs/*.md, so the docs cannot drift from the tool. Substitutions make them run here, quickly:
model.gguf (and any other *.gguf input) -> the shared stories260K model or a tiny synthetic
one, synth shapes -> tiny, /tmp paths -> a scratch directory, port 8080 -> the port a
`cpulm serve` from the docs got, text files -> a generated text, request counts -> 4,
report depths -> 0,16.
Each command must exit 0.

Skipped, and why (SKIPS below; the test prints each skip):
  - commands that read llama.cpp's own benchmark output (made by a llama.cpp binary);
  - commands under valgrind (minutes each; the same commands run without it);
  - commands that download from the internet (cpulm pull of a Hugging Face file);
  - the build line (`./scripts/deps.sh && cmake ...`): this test runs inside a build;
  - loadtest with a shipped workload profile (prompts longer than the test model's context)
    and loadtest against a server started by hand (a GPU host, llama-server);
  - docker, kubectl, curl and other non-cpulm lines are not collected at all;
  - docs/perf-log/ is not collected: a dated record of past sittings, whose commands name
    the flags and scripts of their day (docs/PERFORMANCE.md, the manual, is collected).
Usage: doc_commands_test.py SOURCE_DIR path/to/cpulm
"""
import os, re, shlex, shutil, signal, subprocess, sys, tempfile, time, urllib.error, urllib.request

SHARED = ""
SKIPS = [
    (re.compile(r"\bcpulm pull\b(?!.*--hash)"), "downloads from the internet"),
    (re.compile(r"scripts/deps\.sh"), "the build line; the test runs inside a build"),
    (re.compile(r"moe-llama"), "compares with llama.cpp's own output, made by a "
     "llama.cpp binary"),
    (re.compile(r"\bloadtest\b.*--workload (chat|rag|agent|summarize)\b"), "the profile's "
     "prompts (thousands of tokens) outgrow the doc test's model (stories260K, 512-token "
     "context); tests/capacity_test.sh runs loadtest with a small workload file"),
    (re.compile(r"\bcompare\b.*\bg6\.xlarge\.json"), "reads the results of the loadtest runs "
     "skipped above; tests/capacity_test.sh runs compare on loadtest and bench results"),
    (re.compile(r"\breport\b.*--measured \S*xlarge\.json"), "reads the results of the loadtest "
     "runs skipped above; tests/bench_test.sh runs report --measured on a loadtest result"),
    (re.compile(r"https?://(GPU-HOST|127\.0\.0\.1:8081)"), "a GPU server or llama-server started "
     "by hand"),
    (re.compile(r"\bvalgrind\b"), "instruction counting under callgrind takes minutes; the same "
     "command runs without valgrind elsewhere in the docs"),
]


SIZES = [
    (r"-p [\d,]+", "-p 32"), (r"-n [\d,]+", "-n 8"), (r"-d [\d,]+", "-d 0,16"),
    (r"-npl [\d,]+", "-npl 1,2"), (r"-r \d+", "-r 1"), (r"-pg \d+,\d+", "-pg 32,8"),
    (r"--parallel [\d,]+", "--parallel 1,2"), (r"--ttft [\d,]+", "--ttft 32"),
    (r"-npp \d+", "-npp 16"), (r"-ntg \d+", "-ntg 4"), (r"-c 512\b", "-c 64"),
    (r"--chunks \d+", "--chunks 2"), (r"roofline ", "roofline --time 0.02 --buffer-mib 64 "),
]


def commands(src):
    files = [os.path.join(src, "README.md")] + sorted(
        os.path.join(src, "docs", f) for f in os.listdir(os.path.join(src, "docs")) if f.endswith(".md"))
    out = []
    for path in files:
        blocks, cur = [], None
        for line in open(path, encoding="utf-8"):
            if line.startswith("```"):
                if cur is not None:
                    blocks.append(cur)
                cur = None if cur is not None else []
            elif cur is not None:
                cur.append(line.rstrip("\n"))
        for block in blocks:
            # a block with "$ " prompts is a transcript: only the prompted lines are commands
            transcript = any(l.startswith("$ ") for l in block)
            cont = ""
            for line in block:
                if transcript and not cont and not line.startswith("$ "):
                    continue
                line = cont + line
                if line.endswith("\\"):
                    cont = line[:-1] + " "
                    continue
                cont = ""
                s = re.sub(r"^\$ ", "", line.strip())
                if re.search(r"(^|[ /])cpulm [a-z]", s) and not s.startswith(("#", "|")):
                    out.append((os.path.relpath(path, src), s))
    return out


def strip_comment(cmd):
    # a trailing "# ..." comment outside quotes
    try:
        lex = shlex.shlex(cmd, posix=True, punctuation_chars=False)
        lex.whitespace_split = True
        lex.commenters = "#"
        toks = list(lex)
    except ValueError:
        return cmd
    idx = cmd.find(" #")
    return cmd[:idx] if idx >= 0 and len(shlex.split(cmd[:idx], comments=False)) == len(toks) else cmd


def substitute(cmd, tmp, port, model, tiny):
    cmd = strip_comment(cmd).strip()
    cmd = re.sub(r"(^|[\s=])(\./build/)?cpulm(?= )", lambda m: m.group(1) + "CPULM_BIN", cmd)
    if re.search(r"\bsynth\b", cmd):
        cmd = re.sub(r"--shape (qwen3-30b-a3b|mixtral-8x7b)\b", "--shape tiny-moe", cmd)
        cmd = re.sub(r"--shape (1b|3b|8b|70b|qwen3-[\d.]+b)\b", "--shape tiny", cmd)
        cmd = re.sub(r"--shape gemma3-4b\b", "--shape tiny-gemma3", cmd)
        cmd = re.sub(r"--shape gemma4-e4b\b", "--shape tiny-gemma4", cmd)
        cmd = re.sub(r"--layers \d+", "", cmd)
    # sizes: the same tests, smaller, so the whole list runs in minutes on a busy machine
    if re.search(r"CPULM_BIN (bench|roofline|perplexity|grammar-bench)\b", cmd):
        for rx, rep in SIZES:
            cmd = re.sub(rx, rep, cmd)
    # the report's depth section would fill up to 32k tokens: two shallow depths instead
    if re.search(r"CPULM_BIN report\b", cmd) and "--help" not in cmd:
        cmd = re.sub(r" --depths [\d,]+", "", cmd) + " --depths 0,16"
    cmd = cmd.replace("/tmp/", tmp + "/")
    # shell-script blocks: $F is the block's model file, $i its loop counter
    cmd = cmd.replace("$F", "/tmp/doc-model.gguf".replace("/tmp", tmp)).replace("$i", "1")
    cmd = cmd.replace("../shared/", SHARED + "/")
    # quantized KV caches need a head size that is a multiple of 32 (stories260K's is 8)
    if re.search(r"(-ctk|-ctv|--kv) \S*q[48]_0", cmd):
        model = os.path.join(SHARED, "testdata", "models", "tiny-llama-f32.gguf")
    cmd = re.sub(r"(?<![\w/.-])Qwen3-Embedding[\w.-]*\.gguf",
                 os.path.join(SHARED, "testdata", "models", "tiny-qwen3-q8_0.gguf"), cmd)
    ins = {"model.gguf": model, "stories260K.gguf": model, "model-f16.gguf": tiny,
           "model-f32.gguf": tiny}
    for k, v in ins.items():
        cmd = re.sub(r"(?<![\w/.-])" + re.escape(k), v, cmd)
    cmd = re.sub(r"(?<![\w/.-])(wiki\.test\.raw|tinystories_valid_head\.txt)", tmp + "/text.txt", cmd)
    cmd = re.sub(r"--requests \d+", "--requests 4", cmd)
    cmd = re.sub(r"--concurrency [\d,]+", "--concurrency 1,2", cmd)
    if port:
        cmd = cmd.replace("127.0.0.1:8080", "127.0.0.1:%d" % port)
    return cmd.replace("CPULM_BIN", shlex.quote(CPULM))


def start_server(cmd, tmp):
    cmd = re.sub(r"--port \d+", "", cmd) + " --port 0"
    log = open(os.path.join(tmp, "serve.log"), "w")
    p = subprocess.Popen(cmd, shell=True, cwd=tmp, stdout=subprocess.PIPE, stderr=log, text=True,
                         start_new_session=True)
    line = p.stdout.readline()
    m = re.search(r"listening on http://[\d.]+:(\d+)", line)
    if not m:
        p.kill()
        return None, None
    # the port opens before the model is loaded (/health is liveness, 503 on requests while
    # loading): wait for readiness, as a load balancer would, before the next command
    port = int(m.group(1))
    for _ in range(600):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/ready" % port, timeout=5) as r:
                if r.status == 200:
                    return p, port
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    return p, None


def main():
    global CPULM, SHARED
    src, CPULM = sys.argv[1], os.path.abspath(sys.argv[2])
    shared = os.path.abspath(os.environ.get("CPULM_SHARED", os.path.join(src, "..", "shared")))
    SHARED = shared
    model = os.path.join(shared, "models", "stories260K.gguf")
    tmp = tempfile.mkdtemp(prefix="cpulm-doc-")
    with open(os.path.join(tmp, "text.txt"), "w") as f:
        for i in range(400):
            f.write("Once upon a time there was a little cat called Tom number %d.\n" % i)
    with open(os.path.join(tmp, "msgs.json"), "w") as f:
        f.write('[{"role": "user", "content": "hi"}]\n')
    subprocess.run([CPULM, "synth", "--shape", "tiny-moe", "--type", "q4_0", "-o",
                    os.path.join(tmp, "doc-model.gguf")], check=True, stdout=subprocess.DEVNULL)
    tiny = os.path.join(tmp, "tiny-f32.gguf")
    subprocess.run([CPULM, "synth", "--shape", "tiny", "--type", "f32", "-o", tiny], check=True,
                   stdout=subprocess.DEVNULL)
    servers, port, fails, ran, failed = [], None, 0, 0, []
    for path, raw in commands(src):
        why = next((w for rx, w in SKIPS if rx.search(raw)), None)
        if why:
            print("SKIP %s: %s (%s)" % (path, raw, why), flush=True)
            continue
        cmd = substitute(raw, tmp, port, model, tiny)
        if "--compare a.json b.json" in cmd and os.path.exists(os.path.join(tmp, "a.json")):
            subprocess.run(["cp", os.path.join(tmp, "a.json"), os.path.join(tmp, "b.json")])
        ran += 1
        t0 = time.time()
        if re.search(r"\bserve\b", cmd.split("#")[0]) and "--help" not in cmd:
            p, port_ = start_server(cmd, tmp)
            ok, err = p is not None and port_ is not None, "no 'listening on' line, or not ready"
            if p is not None:
                servers.append(p)
            if ok:
                port = port_
        else:
            try:
                r = subprocess.run(cmd, shell=True, cwd=tmp, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   timeout=120)
                ok, err = r.returncode == 0, r.stderr.strip()[-400:]
            except subprocess.TimeoutExpired:
                ok, err = False, "timed out after 120 s"
        print("%s %s: %s  [%.1f s]" % ("ok  " if ok else "FAIL", path, raw, time.time() - t0),
              flush=True)
        if not ok:
            fails += 1
            print("     ran: %s\n     %s" % (cmd, err))
            failed.append("FAIL %s: %s\n     %s" % (path, raw, err))
    for p in servers:  # the whole process group: the shell and the server it started
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for f in failed:  # again at the end, where a truncated log still shows them
        print(f)
    if os.environ.get("CPULM_TEST_KEEP_TMP", "0") in ("", "0"):
        shutil.rmtree(tmp, ignore_errors=True)  # ~24 MB a run, 42 runs had piled up
    print("doc commands: %d run, %d failed" % (ran, fails))
    return 1 if fails or ran < 20 else 0


if __name__ == "__main__":
    sys.exit(main())
