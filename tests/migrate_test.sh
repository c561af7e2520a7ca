#!/usr/bin/env bash
# migrate_test.sh: the command lines a llama.cpp user brings along. Each line below is one
# from llama.cpp's README (llama-cli, llama-simple, llama-run) or llama-bench's README, with
# the program name swapped for its cpulm command (llama-cli/-run/-simple -> cpulm run,
# llama-bench -> cpulm bench, llama-server -> cpulm serve, llama-perplexity -> cpulm
# perplexity, llama-quantize -> cpulm quantize) and the model file for stories260K. Each must
# run (exit 0, output, no abort) or fail with a clear one-line reason (exit 2, one stderr
# line saying why). To keep CI short, bench lines get `-r 1` appended (repetitions) and
# conversation lines `-n 32` (reply length); MIGRATE_TIMES=1 prints each line's seconds.
# Usage: migrate_test.sh path/to/cpulm
set -u
CPULM=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") # lines run in a scratch directory
SHARED=$(cd "${CPULM_SHARED:-../shared}" && pwd)
MODEL=$SHARED/models/stories260K.gguf
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export CPULM_MODEL=$MODEL # llama-bench lines without -m use its default model
unset CPULM_API_KEY
pass=0
fail=0
check() { # name, condition result (0 = ok)
  if [ "$2" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1"; fi
}
declare -A prog=([llama-cli]=run [llama-simple]=run [llama-run]=run [llama-bench]=bench
  [llama-server]=serve [llama-perplexity]=perplexity [llama-quantize]=quantize)
INPUT= # stdin of the next line (conversation mode reads it)
# One llama.cpp line: runs() expects it to work, fails() a one-line reason matching a pattern.
exec_line() { # llama.cpp argv...
  local -a cmd=("$CPULM" "${prog[$1]}" "${@:2}")
  local t0=$SECONDS rc
  [ "$1" = llama-bench ] && cmd+=(-r 1)
  [ -n "$INPUT" ] && cmd+=(-n 32) # replies of at most 32 tokens (chat's default is 1024)
  printf '%s' "$INPUT" | (cd "$TMP" && timeout 120 "${cmd[@]}") >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ -n "${MIGRATE_TIMES:-}" ] && echo "$((SECONDS - t0)) s: $*" >&2
  return $rc
}
runs() {
  exec_line "$@"
  local rc=$?
  [ $rc -eq 0 ] && [ -s "$TMP/out" ] && ! grep -qE 'BUG at|Sanitizer|runtime error:' "$TMP/err"
  local ok=$?
  [ $ok -ne 0 ] && echo "  $*: exit $rc; stderr: $(head -c 300 "$TMP/err")"
  check "runs: $*" $ok
}
fails() { # pattern, llama.cpp argv...
  local pat=$1
  shift
  exec_line "$@"
  local rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -qE -- "$pat" "$TMP/err"
  local ok=$?
  [ $ok -ne 0 ] && echo "  $*: exit $rc; stderr: $(head -c 300 "$TMP/err")"
  check "fails clearly: $*" $ok
}
M=$MODEL
mkdir -p "$TMP/grammars"
cat >"$TMP/grammars/json.gbnf" <<'EOF'
root ::= obj
obj ::= "{" ws (pair (ws "," ws pair)*)? ws "}"
pair ::= str ws ":" ws val
val ::= obj | str | num | "true" | "false" | "null"
str ::= "\"" [a-zA-Z0-9 ]* "\""
num ::= "-"? [0-9]+
ws ::= " "?
EOF
for i in $(seq 1 200); do echo "Once upon a time there was a cat number $i."; done >"$TMP/file.txt"
printf 'Once upon a time, a little cat\nwent to the park.\n' >"$TMP/prompt.txt"

# ---- llama-cli (README: "llama-cli") ----
runs llama-cli -m "$M"
runs llama-cli -m "$M" -p "I believe the meaning of life is" -n 128
head -c 32 "$TMP/out" | grep -q "^I believe the meaning of life is"; check cli_prompt_echoed $?
runs llama-cli -m "$M" -p "I believe the meaning of life is" -n 128 -no-cnv
# speculative decoding (llama.cpp's docs/speculative.md flag names)
runs llama-cli -m "$M" -md "$M" --draft-max 8 --draft-min 1 -p "I believe" -n 16
runs llama-cli -m "$M" --spec-type ngram-simple --draft 16 -p "I believe" -n 16
runs llama-cli -m "$M" -n 256 --grammar-file grammars/json.gbnf -p 'Request: schedule a call at 8pm; Command:'
sed 's/^Request: schedule a call at 8pm; Command://' "$TMP/out" | grep -q '^{'; check cli_grammar_json $?
INPUT=$'hi, who are you?\n'
runs llama-cli -m "$M" -cnv --chat-template chatml
runs llama-cli -m "$M" -p "You are a helpful assistant" -cnv
runs llama-cli -m "$M" -cnv -n 64 --color -ngl 99 -fa on --no-warmup
INPUT=
fails "in-prefix is not supported: .*chat template" \
  llama-cli -m "$M" -cnv --in-prefix 'User: ' --reverse-prompt 'User:'
fails "-hf is not supported: .*cpulm pull" llama-cli -hf ggml-org/gemma-3-1b-it-GGUF
runs llama-cli -m "$M" -f prompt.txt -n 16 -c 2048 -t 1 --temp 0.7 --top-k 40 --top-p 0.9
runs llama-cli -m "$M" -p "Once" -n -1 -c 64 -ngl 0 --mlock --no-mmap

# ---- llama-simple (README: "llama-simple") ----
runs llama-simple -m "$M" "Hello my name is"
head -c 16 "$TMP/out" | grep -q "^Hello my name is"; check simple_prompt_echoed $?
runs llama-simple -m "$M" -n 32 -ngl 99 "Hello my name is"

# ---- llama-run (README: "llama-run") ----
runs llama-run "$M"
runs llama-run "file://$M"
runs llama-run --ngl 999 "$M" Hello World
head -c 11 "$TMP/out" | grep -q "^Hello World"; check run_words_joined $?
fails "not a model file; cpulm does not fetch models" llama-run granite-code
fails "not a model file; cpulm does not fetch models" llama-run ollama://smollm:135m
fails "not a model file; cpulm does not fetch models" \
  llama-run hf://QuantFactory/SmolLM-135M-GGUF/SmolLM-135M.Q2_K.gguf
fails "no such file|No such file" llama-run some-file2.gguf

# ---- llama-bench (its README) ----
runs llama-bench -m "$M"
runs llama-bench -m "$M" -p 0 -n 128,256,512
[ "$(grep -c '| tg' "$TMP/out")" -eq 3 ]; check bench_three_tg $?
fails "one model per run" llama-bench -m "$M" -m "$SHARED/models/other.gguf" -p 0 -n 128,256,512
runs llama-bench -n 0 -p 1024 -b 128,256,512,1024
[ "$(grep -c '| pp1024' "$TMP/out")" -eq 4 ]; check bench_four_batches $?
runs llama-bench -n 0 -n 16 -p 64 -t 1,2,4,8,16,32
[ "$(grep -c '| pp64\|| tg16' "$TMP/out")" -eq 12 ]; check bench_thread_sweep $?
runs llama-bench -ngl 10,20,30,31,32,33,34,35
runs llama-bench -o csv
runs llama-bench -o json
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert len(r) == 2 and r[0]["n_prompt"] == 512' "$TMP/out"
check bench_json $?
runs llama-bench -o jsonl
runs llama-bench -o md
runs llama-bench -o sql
grep -q "^CREATE TABLE IF NOT EXISTS test" "$TMP/out" && [ "$(grep -c '^INSERT INTO test' "$TMP/out")" -eq 2 ]
check bench_sql $?
runs llama-bench -m "$M" -p 512 -n 128 -pg 512,128 -fa 1 -mmp 0 -d 0,512
# quantized KV needs 32-wide heads (stories260K's are 8): the tiny llama
runs llama-bench -m "$SHARED/testdata/models/tiny-llama-f32.gguf" -ctk q8_0 -ctv q8_0 -p 64 -n 16

# ---- llama-server, llama-perplexity, llama-quantize (their README lines) ----
fails "draft.gguf: No such file" llama-server -m "$M" -md draft.gguf
fails "--lora is not supported" llama-server -m "$M" --lora my_lora.gguf
runs llama-perplexity -m "$M" -f file.txt -c 128
grep -q "^Final estimate: PPL = " "$TMP/out"; check perplexity_final $?
runs llama-quantize "$M" "$TMP/q.gguf" Q4_K_M 2
grep -q "q.gguf" "$TMP/out"; check quantize_threads_positional $?

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
