#!/usr/bin/env bash
# flag_fuzz.sh: every subcommand (from `cpulm --help`) with every flag its --help lists, each
# at boundary values (missing, "", -1, 0, 1, 2^40, "abc"), on small models. Asserts that
# nothing aborts: the exit code is 0, 1 or 2, never a signal, and stderr shows no "BUG at"
# (CPULM_ASSERT) nor sanitizer report. Also: every command on every model in
# $CPULM_SHARED/models. A run still going after its time limit (a long measurement) is
# stopped with SIGTERM and counts as no abort; serve runs until its model is loaded (its
# "model loaded" log line) or it exits, then gets SIGTERM and must stop cleanly (exit 0).
# Speed: the runs are many small jobs (one per command and flag, one per model) spread over
# 4 workers by xargs: most of a run is process start-up, mapping and waiting, not CPU.
# Not fuzzed here (owned by issue #11, the quantized KV cache): KV-type *values* such as
# q8_0 on models whose KV rows q8_0 cannot hold; only the values above are tried.
# Usage: flag_fuzz.sh path/to/cpulm
set -u
CPULM=$1
SHARED=${CPULM_SHARED:-../shared}
MODEL=$SHARED/models/stories260K.gguf
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export CPULM_MODEL=$MODEL CPULM_CACHE=$TMP/cache
unset CPULM_API_KEY
for i in $(seq 1 300); do echo "Once upon a time there was a cat number $i."; done >"$TMP/text"
echo '[{"role": "user", "content": "hi"}]' >"$TMP/msgs.json"

# Base arguments that make each command quick (small sizes, local-only URLs); outputs go to
# the job's own directory $W, as jobs of one command run at the same time.
base_args() {
  case $1 in
  run) echo "-m $MODEL -n 2 -c 32 -t 1 -p hi" ;;
  chat) echo "-m $MODEL -n 2 -c 32 -t 1" ;;
  template) echo "-m $MODEL --messages $TMP/msgs.json" ;;
  info | tokenize) echo "-m $MODEL -p hi" ;;
  logits) echo "-m $MODEL -p hi -t 1" ;;
  quantize) echo "$MODEL $W/q.gguf q8_0 -q" ;;
  perplexity) echo "-m $MODEL -f $TMP/text -c 64 --chunks 1 -t 1" ;;
  pull) echo "nobody/none/x.gguf --url http://127.0.0.1:9 -q" ;;
  bench) echo "-m $MODEL -p 4 -n 2 -r 1 -t 1" ;;
  roofline) echo "-t 1 --buffer-mib 1 --time 0.01" ;;
  plan) echo "--shape 1b --type q4_0" ;;
  report) echo "-m $MODEL -o $W/report --quick -t 1 -r 1" ;;
  synth) echo "--shape tiny --type f32 -o $W/s.gguf" ;;
  serve) echo "-m $MODEL --port 0 -t 1" ;;
  loadtest) echo "--url http://127.0.0.1:9 --requests 1 --concurrency 1 --max-time 1" ;;
  *) echo "" ;;
  esac
}
limit_for() { echo 10; }
# report runs the whole study when its flags are valid: a trailing unknown flag stops it after
# the flags were checked (its runs are covered by bench_test.sh's report test).
trailer_for() { case $1 in report) echo "--fuzz-stop" ;; *) echo "" ;; esac; }

# One run; prints a line starting with ABORT for an abort, else nothing. Args: command,
# then its arguments. $W: a scratch directory of this worker.
try() {
  local cmd=$1 rc
  shift
  echo run >>"$W/runs"
  if [ "$cmd" = serve ]; then
    try_serve "$@"
    return
  elif [ "$cmd" = chat ]; then
    echo hi | timeout "$(limit_for "$cmd")" "$CPULM" "$cmd" "$@" >/dev/null 2>"$W/err"
  else
    timeout "$(limit_for "$cmd")" "$CPULM" "$cmd" "$@" </dev/null >/dev/null 2>"$W/err"
  fi
  rc=$?
  if { [ $rc -gt 2 ] && [ $rc -ne 124 ]; } ||
    grep -qE 'BUG at|Sanitizer|runtime error:' "$W/err"; then
    echo "ABORT (exit $rc): cpulm $cmd $*"
    head -c 400 "$W/err"
  fi
}

# serve until its model is loaded (or it exits by itself), then SIGTERM: a clean stop is exit 0.
try_serve() {
  local pid rc i
  "$CPULM" serve "$@" </dev/null >/dev/null 2>"$W/err" &
  pid=$!
  for i in $(seq 1 250); do # at most ~5 s
    grep -q 'model loaded' "$W/err" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  kill -TERM "$pid" 2>/dev/null
  wait "$pid"
  rc=$?
  if { [ $rc -gt 2 ] && [ $rc -ne 143 ]; } || grep -qE 'BUG at|Sanitizer|runtime error:' "$W/err"; then
    echo "ABORT (exit $rc): cpulm serve $*"
    head -c 400 "$W/err"
  fi
}

commands=$("$CPULM" --help | awk '/^commands:/ {on = 1; next} on && NF {print $1} on && !NF {exit}')
[ -n "$commands" ] || { echo "no commands found in cpulm --help"; exit 1; }
fuzz_flag() { # cmd, flag: the flag missing its value (or as a switch), then at every value
  local cmd=$1 f=$2 v
  local -a base trail values=("" "-1" "0" "1" "1099511627776" "abc")
  read -r -a base <<<"$(base_args "$cmd")"
  read -r -a trail <<<"$(trailer_for "$cmd")"
  if [ "$f" = BASE ]; then try "$cmd" "${base[@]}"; return; fi
  # tests bind 127.0.0.1 only: "0" would be 0.0.0.0 (every interface)
  [ "$cmd $f" = "serve --host" ] && values=("" "-1" "1" "1099511627776" "abc")
  try "$cmd" "${base[@]}" "$f"
  for v in "${values[@]}"; do try "$cmd" "${base[@]}" "$f" "$v" "${trail[@]}"; done
}
fuzz_model() { # one shared model (or a directory) through the model-reading commands
  local m=$1 cmd
  for cmd in info run logits tokenize bench plan template quantize perplexity; do
    case $cmd in
    quantize) try quantize "$m" "$W/q.gguf" q4_k_m -q ;;
    template) try template -m "$m" --messages "$TMP/msgs.json" --tokens ;;
    perplexity) try perplexity -m "$m" -f "$TMP/text" -c 32 --chunks 1 ;;
    bench) try bench -m "$m" -p 4 -n 2 -r 1 -t 1 ;;
    plan) try plan -m "$m" ;;
    *) try "$cmd" -m "$m" -p hi -n 2 ;;
    esac
  done
  try chat -m "$m" -n 2
}
job() { # one line of the job list: "flag CMD FLAG" or "model PATH"
  W=$(mktemp -d -p "$TMP" job.XXXXXX) # the job's scratch: outputs, stderr, run count
  if [ "$1" = model ]; then fuzz_model "$2"; else fuzz_flag "$2" "$3"; fi >"$W/out"
  echo "$SECONDS $*" >"$W/time"
}
export -f try try_serve base_args limit_for trailer_for fuzz_flag fuzz_model job
export CPULM SHARED MODEL TMP

# The job list: every command's base run and each of its --help flags, then every model.
for cmd in $commands; do
  echo "flag $cmd BASE"
  "$CPULM" "$cmd" --help 2>/dev/null | grep -oE '^ +-[-a-zA-Z0-9]+' | tr -d ' ' | sort -u |
    grep -vxE -- '-h|--help' | sed "s/^/flag $cmd /"
done >"$TMP/jobs"
for m in "$SHARED"/models/*.gguf "$SHARED"/models/llama2c/* "$SHARED/models"; do
  echo "model $m"
done >>"$TMP/jobs"
# serve jobs wait for a model load: start them first so they overlap the CPU-bound rest
{ grep '^flag serve ' "$TMP/jobs"; grep -v '^flag serve ' "$TMP/jobs"; } >"$TMP/jobs.sorted"
t0=$SECONDS
xargs -P 4 -L 1 bash -c 'job "$@"' _ <"$TMP/jobs.sorted"
cat "$TMP"/job.*/out
echo "flag fuzz: $(wc -l <"$TMP/jobs") jobs in $((SECONDS - t0)) s; slowest:" \
  "$(cat "$TMP"/job.*/time | sort -rn | head -3 | tr '\n' ';')"
runs=$(cat "$TMP"/job.*/runs | wc -l)
bad=$(cat "$TMP"/job.*/out | grep -c '^ABORT')
echo "flag fuzz: $runs runs, $bad aborts"
[ "$bad" -eq 0 ] && [ "$runs" -gt 500 ]
