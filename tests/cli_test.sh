#!/usr/bin/env bash
# cli_test.sh: end-to-end checks of the cpulm command: exit codes, messages, and outputs
# on the shared stories260K model. Usage: cli_test.sh path/to/cpulm
set -u
CPULM=$1
SHARED=${CPULM_SHARED:-../shared}
MODEL=$SHARED/models/stories260K.gguf
. "$(dirname "$0")/../scripts/serve_port.sh"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0
check() { # name, condition result (0 = ok)
  if [ "$2" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1"; fi
}
expect_rc() { # name, expected rc, command...
  local name=$1 want=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  [ "$rc" -eq "$want" ]; local ok=$?
  [ $ok -ne 0 ] && echo "  $name: exit $rc, wanted $want; stderr: $(head -c 300 "$TMP/err")"
  check "$name" $ok
}

expect_rc help 0 "$CPULM" --help
expect_rc run_help 0 "$CPULM" run --help
expect_rc unknown_command 2 "$CPULM" frobnicate
expect_rc unknown_flag 2 "$CPULM" run --frobnicate
grep -q "unknown option '--frobnicate'" "$TMP/err"; check unknown_flag_message $?
expect_rc bad_value 2 "$CPULM" run -m "$MODEL" -n abc
grep -q "bad value 'abc' for -n" "$TMP/err"; check bad_value_message $?
expect_rc missing_value 2 "$CPULM" run -m
expect_rc missing_file 2 "$CPULM" run -m "$TMP/nope.gguf"
grep -q "nope.gguf" "$TMP/err"; check missing_file_message $?

if [ -f "$MODEL" ]; then
  expect_rc run_greedy 0 "$CPULM" run -m "$MODEL" -p "Once upon a time" -n 40 --temp 0
  grep -q "^Once upon a time, there was a little girl named Lily. She loved to play outside in the park" "$TMP/out"
  check run_greedy_text $?
  grep -q "prompt: 5 tokens" "$TMP/err"; check run_stats $?
  expect_rc run_default_model 0 env CPULM_MODEL="$MODEL" "$CPULM" run -n 4 --seed 7
  "$CPULM" run -m "$MODEL" -p "Tom" -n 30 --seed 42 --temp 1 >"$TMP/a" 2>/dev/null
  "$CPULM" run -m "$MODEL" -p "Tom" -n 30 --seed 42 --temp 1 >"$TMP/b" 2>/dev/null
  cmp -s "$TMP/a" "$TMP/b"; check same_seed_same_text $?
  expect_rc tokenize 0 "$CPULM" tokenize -m "$MODEL" -p "Once upon a time" --ids
  [ "$(cat "$TMP/out")" = "[1, 403, 407, 261, 378]" ]; check tokenize_ids $?
  expect_rc info 0 "$CPULM" info -m "$MODEL" -c 512
  grep -q "architecture:  llama" "$TMP/out" && grep -q "F32 .* 48 tensors" "$TMP/out"
  check info_text $?
  expect_rc logits_json 0 "$CPULM" logits -m "$MODEL" --tokens 1,403,407 --top 3 --json
  if command -v python3 >/dev/null; then
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["tokens"]==[1,403,407]; assert len(d["logits_topk"])==3 and len(d["logits_topk"][0])==3; assert d["logits_topk"][0][0][0]==403' "$TMP/out"
    check logits_json_shape $?
  fi
  # a truncated model: clean one-line error naming the file, no crash
  head -c 5000 "$MODEL" >"$TMP/trunc.gguf"
  "$CPULM" info -m "$TMP/trunc.gguf" >/dev/null 2>"$TMP/err"
  rc=$?
  [ $rc -eq 1 ] && grep -q "trunc.gguf: " "$TMP/err" && [ "$(wc -l <"$TMP/err")" -eq 1 ]
  check truncated_model $?
  # chat: two turns from a pipe; the second reuses the first turn's KV cache
  printf 'Hello\nTell me more\n' | "$CPULM" chat -m "$MODEL" -n 16 --temp 0 >"$TMP/out" 2>"$TMP/err"
  [ $? -eq 0 ] && [ "$(wc -l <"$TMP/out")" -ge 2 ]; check chat_two_turns $?
  expect_rc chat_bad_template 2 "$CPULM" chat -m "$MODEL" --chat-template /nonexistent.jinja
else
  echo "skip model checks: $MODEL not found"; skipped=1
fi
# template: the llama3 built-in over a system + user conversation
printf '[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]' >"$TMP/m.json"
expect_rc template_llama3 0 "$CPULM" template --chat-template llama3 --messages "$TMP/m.json" --bos '<|begin_of_text|>'
printf '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n' >"$TMP/want"
cmp -s "$TMP/out" "$TMP/want"; check template_llama3_text $?
expect_rc template_no_messages 2 "$CPULM" template --chat-template llama3
# info --cpu: kernel levels per weight type, threads and NUMA, with no model needed
expect_rc info_cpu 0 "$CPULM" info --cpu
grep -q "^kernel level:  " "$TMP/out" && grep -q "^Q4_0 " "$TMP/out" && grep -q "^attention: " "$TMP/out" &&
  grep -q "^threads:       [0-9]* by default" "$TMP/out" && grep -q "^numa nodes:    [0-9]" "$TMP/out"
check info_cpu_text $?
! grep -q "^architecture:" "$TMP/out"; check info_cpu_no_model $?
n_types=$(awk '/^type /{t=1; next} /^attention:/{t=0} t{n++} END{print n+0}' "$TMP/out")
expect_rc info_cpu_generic 0 env CPULM_ISA=generic "$CPULM" info --cpu
# every provider column (vec_dot, activation quantizer, gemm_x16) and op says generic
awk -v want="$n_types" '/^type /{t=1; rows=0; next}
     /^attention:|^f32 ops:/{sub(/^[^:]*: */, ""); n=split($0, a, ", ");
       for(i=1;i<=n;i++){split(a[i], w, " "); if(w[2]!="generic") bad=1}; ops++; t=0; next}
     t{rows++; if($2!="generic" || $4!="generic" || ($5!="generic" && $5!="-")) bad=1}
     END{exit bad || rows!=want || want<12 || ops!=2}' "$TMP/out" # the same types as the default
check info_cpu_generic_all_generic $?
expect_rc info_cpu_numa 0 "$CPULM" info --cpu --numa distribute
grep -q "^numa mode:     distribute" "$TMP/out"; check info_cpu_numa_text $?
expect_rc info_bad_numa 2 "$CPULM" info --cpu --numa mirror
grep -q "bad value 'mirror' for --numa" "$TMP/err"; check info_bad_numa_message $?
for c in run bench serve; do
  "$CPULM" $c --help 2>&1 | grep -q -- "--numa MODE"; check "${c}_help_numa" $?
  expect_rc "${c}_bad_numa" 2 "$CPULM" $c --numa mirror
done
if [ -f "$MODEL" ]; then
  expect_rc info_cpu_model 0 "$CPULM" info --cpu -m "$MODEL"
  grep -q "^kernel level:" "$TMP/out" && grep -q "^architecture:  llama" "$TMP/out"; check info_cpu_model_text $?
  # every NUMA mode runs end to end; on a single-node machine it generates the default's text
  "$CPULM" run -m "$MODEL" -p "Once upon a time" -n 24 --temp 0 >"$TMP/numa_ref" 2>/dev/null
  single=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)
  for mode in distribute isolate numactl; do
    expect_rc "run_numa_$mode" 0 "$CPULM" run -m "$MODEL" -p "Once upon a time" -n 24 --temp 0 --numa $mode
    if [ "$single" -le 1 ]; then cmp -s "$TMP/out" "$TMP/numa_ref"; check "run_numa_${mode}_same_text" $?; fi
  done
  expect_rc bench_numa 0 "$CPULM" bench -m "$MODEL" -p 16 -n 4 -r 1 -o csv --numa distribute
  "$CPULM" serve -m "$MODEL" --port 0 --numa isolate -t 1 -tb 2 >"$TMP/serve.out" 2>"$TMP/serve.err" &
  spid=$!
  port=$(serve_port "$TMP/serve.out" "$spid")
  [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null; check serve_numa_health $?
  grep -q "^cpulm serve: threads: 1 for generation, 2 for prompt steps$" "$TMP/serve.err"
  check serve_threads_batch_line $?
  # loadtest with --progress: the live line goes to stderr, stdout stays one JSON document;
  # it first waits for /ready itself (/health answers while the model loads: slow under ASan)
  if [ -n "$port" ]; then
    "$CPULM" loadtest --url "http://127.0.0.1:$port" --requests 3 --concurrency 1,2 \
      --max-tokens 4 --prompt-len 8 -o json --progress >"$TMP/lt.out" 2>"$TMP/lt.err"
    check loadtest_progress_rc $?
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert [l["ok"] for l in d["levels"]] == [3, 3]' "$TMP/lt.out"
    check loadtest_progress_json $?
    grep -q "cpulm loadtest: concurrency 2: 3/3 requests, 0 errors" "$TMP/lt.err"; check loadtest_progress_line $?
    "$CPULM" loadtest --url "http://127.0.0.1:$port" --requests 1 --concurrency 1 \
      --max-tokens 2 --prompt-len 4 -o json >/dev/null 2>"$TMP/lt.err"
    [ ! -s "$TMP/lt.err" ]; check loadtest_no_progress_off_tty $?
  fi
  kill -TERM "$spid" 2>/dev/null; wait "$spid"; check serve_numa_exit $?
  # loadtest waits for a server that is not up yet (--wait), and gives up on one that never is
  free_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$CPULM" loadtest --url "http://127.0.0.1:$free_port" --requests 2 --concurrency 1 \
    --max-tokens 2 --prompt-len 4 -o json --wait 60 >"$TMP/lw.out" 2>"$TMP/lw.err" &
  lpid=$!
  sleep 1
  "$CPULM" serve -m "$MODEL" --port "$free_port" -t 1 >/dev/null 2>&1 &
  spid=$!
  wait "$lpid"; check loadtest_waits_for_server $?
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert [l["ok"] for l in d["levels"]] == [2]' "$TMP/lw.out"
  check loadtest_waits_all_ok $?
  kill -TERM "$spid" 2>/dev/null; wait "$spid"
  expect_rc loadtest_wait_gives_up 1 "$CPULM" loadtest --url "http://127.0.0.1:$free_port" --wait 0.5
  grep -q "not ready after 0.5 s (--wait)" "$TMP/err"; check loadtest_wait_message $?
  # progress lines: synth with --progress; none by default off a terminal; model loading on a
  # terminal (script gives the command a pty) shows a line and erases it
  expect_rc synth_progress 0 "$CPULM" synth --shape tiny --type q8_0 -o "$TMP/s.gguf" --progress
  grep -q "cpulm synth: tensor \([0-9]*\)/\1, " "$TMP/err" && [ ! -s "$TMP/out" ]
  check synth_progress_line $?
  expect_rc synth_quiet 0 "$CPULM" synth --shape tiny --type q8_0 -o "$TMP/s.gguf"
  ! grep -q "tensor [0-9]*/" "$TMP/err"; check synth_no_progress_off_tty $?
  if script -qec true /dev/null >/dev/null 2>&1; then
    script -qec "$(printf '%q ' "$CPULM" info -m "$MODEL")" /dev/null >"$TMP/tty" 2>&1
    grep -q "cpulm: loading .*stories260K.gguf" "$TMP/tty" && grep -q $'\r\033\[K' "$TMP/tty" &&
      grep -q "architecture:  llama" "$TMP/tty"
    check load_progress_tty $?
  fi
  "$CPULM" info -m "$MODEL" >/dev/null 2>"$TMP/err"
  ! grep -q "loading" "$TMP/err"; check load_no_progress_off_tty $?
fi
# The option table (tools/options.def): docs/FLAGS.md is generated from it, and every
# spelling of every row parses in every command that lists it. Parsing alone is checked: an
# unknown flag after it (--zz-stop) stops the command with exit 2 once the row was read.
SRC=$(cd "$(dirname "$0")/.." && pwd)
"$CPULM" help --markdown | cmp -s - "$SRC/docs/FLAGS.md"
check flags_doc_matches_table $?
[ $? -eq 0 ] || echo "  docs/FLAGS.md differs: cpulm help --markdown >docs/FLAGS.md"
# docs/SERVER.md's hand-written flag table (with the long explanations): every spelling in its
# first column is a row of serve in the table (and so parses, above)
"$CPULM" help --flags serve | cut -f3 | sort -u >"$TMP/serve_flags"
awk '/^## Flags/ {on = 1; next} on && /^## / {exit} on && /^\| `-/' "$SRC/docs/SERVER.md" |
  cut -d'|' -f2 | grep -oE '(^|[ `(])-[-a-z0-9]+' | tr -d ' `(' | sort -u >"$TMP/doc_flags"
[ -s "$TMP/doc_flags" ] && ! comm -23 "$TMP/doc_flags" "$TMP/serve_flags" | grep .
check server_doc_flags_in_table $?
# embed -f twice: both files' lines are inputs (the first file's used to point into freed
# memory); the same as giving them in one file
if [ -f "$MODEL" ]; then
  printf 'Once upon a time\nThe cat\n' >"$TMP/e1"; printf 'A dog\n' >"$TMP/e2"; cat "$TMP/e1" "$TMP/e2" >"$TMP/e12"
  "$CPULM" embed -m "$MODEL" -f "$TMP/e1" -f "$TMP/e2" --json >"$TMP/e_two" 2>/dev/null
  "$CPULM" embed -m "$MODEL" -f "$TMP/e12" --json >"$TMP/e_one" 2>/dev/null
  [ -s "$TMP/e_one" ] && cmp -s "$TMP/e_two" "$TMP/e_one"; check embed_two_files $?
fi
# K and V share one type: -ctk and -ctv that differ are refused (bench used to run both)
expect_rc bench_kv_differ 2 "$CPULM" bench -ctk q8_0 -ctv f16
grep -q "K and V share one cache type" "$TMP/err"; check bench_kv_differ_message $?
expect_rc run_kv_same_ok 2 "$CPULM" run --kv q8_0 -ctv q8_0 --zz-stop
grep -q "unknown option '--zz-stop'" "$TMP/err"; check run_kv_spelling $?
# All the rows of a command on one line (tests/flag_fuzz.sh tries each spelling alone), and
# one refused llama.cpp flag; run's conversation flags hand the line to chat, so alone.
flags_ok() { # command, args...: exit 2 naming --zz-stop, the flag after them
  local c=$1; shift
  "$CPULM" "$c" "$@" --zz-stop </dev/null >/dev/null 2>"$TMP/ferr"
  [ $? -eq 2 ] && grep -q -- "unknown option '--zz-stop'" "$TMP/ferr" && return 0
  echo "  $c $*: $(head -c 300 "$TMP/ferr")"; return 1
}
for c in $("$CPULM" --help | awk '/^commands:/ {on = 1; next} on && NF {print $1} on && !NF {exit}'); do
  args=()
  while IFS=$'\t' read -r kind main flag v1 v2; do
    [ "$kind" = ok ] || continue
    if [ "$c" = run ] && [ "$main" = -cnv ]; then flags_ok run "$flag"; check "flags_parse_run_$flag" $?; continue; fi
    args+=("$flag")
    [ -n "$v1" ] && args+=("$v1")
    [ -n "$v2" ] && args+=("$v2")
  done < <("$CPULM" help --flags "$c")
  [ ${#args[@]} -gt 10 ] && flags_ok "$c" "${args[@]}"; check "flags_parse_$c" $?
  "$CPULM" "$c" --lora x </dev/null >/dev/null 2>"$TMP/ferr"
  [ $? -eq 2 ] && grep -q -- "--lora is not supported" "$TMP/ferr"; check "flags_refused_$c" $?
done
echo "$pass passed, $fail failed${skipped:+, model checks skipped}"
[ "$fail" -eq 0 ] || exit 1
[ -z "${skipped:-}" ] || exit 77 # ctest lists the test as skipped
