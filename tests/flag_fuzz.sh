#!/usr/bin/env bash
# flag_fuzz.sh: every subcommand (from `cpulm --help`) with every flag its --help lists, each
# at boundary values (missing, "", -1, 0, 1, 2^40, "abc"), on small models. Asserts that
# nothing aborts: the exit code is 0, 1 or 2, never a signal, and stderr shows no "BUG at"
# (CPULM_ASSERT) nor sanitizer report. Also: every command on every model in
# $CPULM_SHARED/models. A run still going after its time limit (serve, which serves until
# stopped, or a long measurement) is stopped with SIGTERM and counts as no abort.
# Not fuzzed here (owned by issue #11, the quantized KV cache): KV-type *values* such as
# q8_0 on models whose KV rows q8_0 cannot hold; only the values above are tried.
# Also every spelling of every row of the option table (tools/options.def, `cpulm help
# --flags CMD`) alone in every command that lists it: parsed, or refused with its reason.
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

# Base arguments that make each command quick (small sizes, local-only URLs).
base_args() {
  case $1 in
  run) echo "-m $MODEL -n 2 -c 32 -t 1 -p hi" ;;
  chat) echo "-m $MODEL -n 2 -c 32 -t 1" ;;
  template) echo "-m $MODEL --messages $TMP/msgs.json" ;;
  info | tokenize) echo "-m $MODEL -p hi" ;;
  logits) echo "-m $MODEL -p hi -t 1" ;;
  quantize) echo "$MODEL $TMP/q.gguf q8_0 -q" ;;
  perplexity) echo "-m $MODEL -f $TMP/text -c 64 --chunks 1 -t 1" ;;
  pull) echo "nobody/none/x.gguf --url http://127.0.0.1:9 -q" ;;
  bench) echo "-m $MODEL -p 4 -n 2 -r 1 -t 1" ;;
  roofline) echo "-t 1 --buffer-mib 1 --time 0.01" ;;
  plan) echo "--shape 1b --type q4_0" ;;
  report) echo "-m $MODEL -o $TMP/report --quick -t 1 -r 1" ;;
  synth) echo "--shape tiny --type f32 -o $TMP/s.gguf" ;;
  serve) echo "-m $MODEL --port 0 -t 1" ;;
  loadtest) echo "--url http://127.0.0.1:9 --requests 1 --concurrency 1 --max-time 1 --wait 0" ;;
  *) echo "" ;;
  esac
}
limit_for() { case $1 in serve) echo 0.7 ;; *) echo 10 ;; esac; }
# report runs the whole study when its flags are valid: a trailing unknown flag stops it after
# the flags were checked (its runs are covered by bench_test.sh's report test).
trailer_for() { case $1 in report) echo "--fuzz-stop" ;; *) echo "" ;; esac; }

# One run; prints a line starting with ABORT for an abort, else nothing. Args: command,
# then its arguments. $W: a scratch directory of this worker.
try() {
  local cmd=$1 rc
  shift
  echo run >>"$W/runs"
  if [ "$cmd" = chat ]; then
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

commands=$("$CPULM" --help | awk '/^commands:/ {on = 1; next} on && NF {print $1} on && !NF {exit}')
[ -n "$commands" ] || { echo "no commands found in cpulm --help"; exit 1; }
values=("" "-1" "0" "1" "1099511627776" "abc")
fuzz_command() { # cmd: every flag of its --help (the first name of each line) at every value
  local cmd=$1 f v
  local -a base trail
  read -r -a base <<<"$(base_args "$cmd")"
  read -r -a trail <<<"$(trailer_for "$cmd")"
  flags=$("$CPULM" "$cmd" --help 2>/dev/null | grep -oE '^ +-[-a-zA-Z0-9]+' | tr -d ' ' | sort -u)
  try "$cmd" "${base[@]}"
  for f in $flags; do
    [ "$f" = -h ] || [ "$f" = --help ] && continue
    try "$cmd" "${base[@]}" "$f" # missing value, or a switch
    for v in "${values[@]}"; do try "$cmd" "${base[@]}" "$f" "$v" "${trail[@]}"; done
  done
}
fuzz_models() { # every shared model through the model-reading commands
for m in "$SHARED"/models/*.gguf "$SHARED"/models/llama2c/* "$SHARED/models"; do
  for cmd in info run logits tokenize bench plan template quantize perplexity; do
    case $cmd in
    quantize) try quantize "$m" "$TMP/q.gguf" q4_k_m -q ;;
    template) try template -m "$m" --messages "$TMP/msgs.json" --tokens ;;
    perplexity) try perplexity -m "$m" -f "$TMP/text" -c 32 --chunks 1 ;;
    bench) try bench -m "$m" -p 4 -n 2 -r 1 -t 1 ;;
    plan) try plan -m "$m" ;;
    *) try "$cmd" -m "$m" -p hi -n 2 ;;
    esac
  done
  try chat -m "$m" -n 2
done
}
fuzz_table() { # every spelling of every option-table row alone, in every command listing it:
  # it parses (an unknown flag after it then stops the command) or is refused with a reason
  local c kind main flag v1 v2 want rc
  for c in $commands; do
    while IFS=$'\t' read -r kind main flag v1 v2; do
      local -a a=("$flag")
      [ -n "$v1" ] && a+=("$v1")
      [ -n "$v2" ] && a+=("$v2")
      echo run >>"$W/runs"
      "$CPULM" "$c" "${a[@]}" --zz-stop </dev/null >/dev/null 2>"$W/err"
      rc=$?
      if [ "$kind" = refused ]; then want="is not supported"; else want="unknown option '--zz-stop'"; fi
      if [ $rc -ne 2 ] || ! grep -q -- "$want" "$W/err"; then
        echo "ABORT (table row $main, exit $rc): cpulm $c ${a[*]}"
        head -c 300 "$W/err"
      fi
    done < <("$CPULM" help --flags "$c")
  done
}
# Workers in parallel: most of a run is process start-up and model mapping, not CPU.
jobs=0
for cmd in $commands models table; do
  W=$TMP/w.$cmd
  mkdir -p "$W"
  ( start=$SECONDS
    case $cmd in models) fuzz_models ;; table) fuzz_table ;; *) fuzz_command "$cmd" ;; esac
    echo "$cmd: $((SECONDS - start)) s" >"$W/time" ) >"$W/out" &
  jobs=$((jobs + 1))
  [ $jobs -ge 6 ] && { wait -n; jobs=$((jobs - 1)); }
done
wait
cat "$TMP"/w.*/out
cat "$TMP"/w.*/time | tr '\n' ' '
echo
runs=$(cat "$TMP"/w.*/runs | wc -l)
bad=$(cat "$TMP"/w.*/out | grep -c '^ABORT')
echo "flag fuzz: $runs runs, $bad aborts"
[ "$bad" -eq 0 ] && [ "$runs" -gt 500 ]
