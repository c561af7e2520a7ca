#!/usr/bin/env bash
# check-layers.sh: checks the include dependency rule of docs/ARCHITECTURE.md ("Layers").
# Every `#include "..."` in src/ and tools/ is resolved to a file (next to the includer,
# then under src/, then include/), and every `#include <...>` that names a file under src/ or
# include/ too (the build puts both on the include path, so the brackets are no way round
# the rule); both files go to a module, and the include must stay within the module or go
# to a module the rule below lets it use. Prints each violation and exits 1 if there is any. Usage: scripts/check-layers.sh [repo root]  (ctest runs it as `layers`)
set -u
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT" || exit 2

find src tools -name '*.[ch]' | sort | xargs grep -H '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]' |
awk '
# The module a repository path belongs to.
function module_of(p) {
    if (p == "include/cpulm.h") return "public"
    if (p ~ /^src\/base\//) return "base"
    if (p ~ /^src\/format\/quant(_k)?\.[ch]$/) return "quant"
    if (p ~ /^src\/format\/gguf(_write)?\.[ch]$/) return "gguf"
    if (p ~ /^src\/kernels\//) return "kernels"
    if (p ~ /^src\/threads\//) return "threads"
    if (p ~ /^src\/tokenizer\//) return "tokenizer"
    if (p ~ /^src\/runtime\/(kv_cache|ssm_state)\.[ch]$/) return "kv"
    if (p ~ /^src\/model\/((forward|work)\.[ch]|attention\.c)$/) return "forward"
    # the MoE FFN, the recurrent layers, the gemma and encoder layers: parts of the pass
    if (p ~ /^src\/model\/(forward_int\.h|moe\.c|deltanet\.c|gemma\.c|gemma4\.c|encoder\.[ch])$/) return "forward"
    # scratch sizes of the pass (and the recurrent layer kernels), pure functions of the
    # hyperparameters that memory.c and the context size buffers with: not for the loader
    if (p ~ /^src\/model\/(attention|moe|deltanet)\.h$/) return "fwd_size"
    if (p ~ /^src\/model\//) return "model"
    if (p == "src/runtime/context.h") return "ctx_state"
    if (p == "src/runtime/context.c") return "context"
    if (p ~ /^src\/runtime\/memory\.[ch]$/) return "memory"
    if (p ~ /^src\/toolkit\/quantize_plan\.[ch]$/) return "qplan"
    if (p ~ /^src\/toolkit\/synth\.[ch]$/) return "synth"
    if (p ~ /^src\/sampling\/sampler\.[ch]$/) return "sampler"
    if (p ~ /^src\/chat\//) return "chat"
    if (p ~ /^src\/grammar\//) return "grammar"
    if (p ~ /^src\/spec\//) return "spec"
    if (p == "src/server/server.h") return "server_api"
    if (p ~ /^src\/server\//) return "server"
    if (p == "src/tools_api.h") return "tools_api"
    if (p ~ /^tools\//) return "tools"
    return "unknown"
}
function exists(p,   line, r) {
    r = (getline line < p)
    close(p)
    return r >= 0
}
# a/b/../c -> a/c, ./ dropped
function normalize(p,   n, i, k, parts, out) {
    n = split(p, parts, "/")
    k = 0
    for (i = 1; i <= n; i++) {
        if (parts[i] == "." || parts[i] == "") continue
        if (parts[i] == ".." && k > 0) { k--; continue }
        out[++k] = parts[i]
    }
    p = out[1]
    for (i = 2; i <= k; i++) p = p "/" out[i]
    return p
}
function resolve(dir, inc,   c) {
    c = normalize(dir "/" inc); if (exists(c)) return c
    c = "src/" inc; if (exists(c)) return c
    c = "include/" inc; if (exists(c)) return c
    return ""
}
BEGIN {
    # What each module may include besides itself and include/cpulm.h (lowest layers first).
    allow["base"] = ""
    allow["quant"] = "base"
    allow["gguf"] = "base quant"
    allow["kernels"] = "base quant"
    allow["threads"] = "base"
    allow["sampler"] = "base quant kernels"
    allow["chat"] = "base"
    allow["grammar"] = "base"
    allow["spec"] = "base"
    allow["tokenizer"] = "base gguf quant"
    allow["kv"] = "base quant"
    allow["model"] = "base gguf quant kernels threads tokenizer"
    allow["fwd_size"] = "base quant kernels model"
    allow["ctx_state"] = "base quant kernels threads kv model"
    allow["forward"] = "ctx_state fwd_size base quant kernels threads kv model"
    allow["memory"] = "fwd_size base quant kv model"
    allow["context"] = "ctx_state forward fwd_size memory base quant kernels threads kv model"
    allow["qplan"] = "base gguf quant"
    allow["synth"] = "base gguf quant qplan model"
    allow["server"] = "base grammar spec server_api"
    allow["server_api"] = "base server"
    allow["tools_api"] = "base gguf quant kernels threads model memory qplan synth server server_api grammar spec"
    # tools see the engine only through include/cpulm.h and the one tools interface
    allow["tools"] = "tools_api"
    bad = 0
}
{
    file = substr($0, 1, index($0, ":") - 1)
    inc = $0
    sub(/^[^#]*#[[:space:]]*include[[:space:]]*/, "", inc)
    angle = substr(inc, 1, 1) == "<"
    inc = substr(inc, 2)
    sub(/[">].*$/, "", inc)
    dir = file
    sub(/\/[^\/]*$/, "", dir)
    # headers the build generates (a leaf of macros only): cpulm_commit.h, cmake/version.cmake
    if (inc == "cpulm_commit.h") next
    if (angle) {
        # a system header unless the tree has it on the include path
        to_file = exists("src/" inc) ? "src/" inc : exists("include/" inc) ? "include/" inc : ""
        if (to_file == "") next
    } else {
        to_file = resolve(dir, inc)
    }
    if (to_file == "") { printf "%s: #include \"%s\" names no file in the tree\n", file, inc; bad = 1; next }
    from = module_of(file)
    to = module_of(to_file)
    if (from == "unknown" && !(file in told)) {
        printf "%s: in no module of the rule (add its folder to scripts/check-layers.sh and docs/ARCHITECTURE.md)\n", file
        told[file] = 1
        bad = 1
    }
    if (to == from || to == "public") next
    if (index(" " allow[from] " ", " " to " ") == 0) {
        printf "%s: #include %s%s%s (%s -> %s) breaks the dependency rule\n", file,
               angle ? "<" : "\"", inc, angle ? ">" : "\"", from, to
        bad = 1
    }
}
END {
    if (!bad) print "layers: every include follows the dependency rule"
    exit bad
}'
