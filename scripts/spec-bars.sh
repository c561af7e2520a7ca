#!/usr/bin/env bash
# spec-bars.sh: issue #32's speed bars 1, 2 and 4 as a measurement (minutes; not a CI test),
# each arm beside a plain-vs-plain control pair in the same rounds, so the noise floor is in
# the same table. Bar 3 (prompt lookup) is scripts/spec-bench.sh.
#   run MODE: per round, in an order rotated every round, `cpulm run -p "Once upon a time"
#     -n N --temp 0 --ignore-eos -t T` with: P (plain target), P2 (plain again: the control),
#     D (the draft file alone: its cost c = D / P), S (target + -md DRAFT --spec-fixed
#     --draft-max K: bar 1) and R (target + -md RANDOM, adaptive: bar 2).
#   serve MODE: per round, a fresh `cpulm serve -np U -t T` per arm (none, none2 = the
#     control, ngram = --spec ngram), `cpulm loadtest --concurrency U` against it (prompts of
#     PL tokens, MT output tokens, a trial of S seconds whose first fifth is not counted).
# Prints one line per run (wall and CPU time or throughput and inter-token gaps, the
# speculation's counts) and the VM's stolen CPU ticks (/proc/stat) per round.
# Usage: scripts/spec-bars.sh run CPULM TARGET DRAFT RANDOM [ROUNDS]
#        scripts/spec-bars.sh serve CPULM MODEL [ROUNDS]
# Env: N=48 K=2 T=2 (run); U=16 PL=128 MT=64 S=25 T=2 PORT=18400 (serve).
set -u
MODE=$1
CPULM=$2
steal() { awk '/^cpu /{print $9}' /proc/stat; }
rotate() { # round words...: the words rotated by round - 1 places
  local r=$1
  shift
  local a=("$@") n=$# i
  for ((i = 0; i < n; i++)); do printf '%s ' "${a[$(((i + r - 1) % n))]}"; done
}

run_one() { # model extra-flags...: "wall ms, cpu ms[, spec statistics]" of the generation
  local m=$1
  shift
  "$CPULM" run -m "$m" -p "Once upon a time" -n "${N:-48}" --temp 0 --ignore-eos -t "${T:-2}" "$@" \
    2>&1 >/dev/null | grep "generation:" |
    sed 's/.*generation: [0-9]* tokens, \([0-9.]*\) ms, [0-9.]* t\/s, cpu \([0-9.]*\) ms[^|]*|[^|]*\(.*\)/wall \1 ms, cpu \2 ms\3/'
}

bars_run() {
  local target=$1 draft=$2 random=$3 rounds=${4:-5} r c s0
  for r in $(seq "$rounds"); do
    s0=$(steal)
    for c in $(rotate "$r" P S D P2 R); do
      case $c in
      P | P2) x=$(run_one "$target") ;;
      D) x=$(run_one "$draft") ;;
      S) x=$(run_one "$target" -md "$draft" --spec-fixed --draft-max "${K:-2}") ;;
      R) x=$(run_one "$target" -md "$random") ;;
      esac
      echo "round $r $c: $x"
    done
    echo "round $r steal $(($(steal) - s0)) ticks, load $(cut -d' ' -f1-3 /proc/loadavg)"
  done
}

serve_one() { # model port extra-flags...: one server, one loadtest; prints the figures
  local m=$1 port=$2 pid i
  shift 2
  "$CPULM" serve -m "$m" -np "${U:-16}" -c 1024 -t "${T:-2}" --port "$port" "$@" >/dev/null 2>&1 &
  pid=$!
  for i in $(seq 300); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/ready")" = 200 ] && break
    sleep 0.2
  done
  "$CPULM" loadtest --url "http://127.0.0.1:$port" --concurrency "${U:-16}" --prompt-len "${PL:-128}" \
    --max-tokens "${MT:-64}" --trial-time "${S:-25}" --server-pid "$pid" -o json --no-progress \
    >"$TMPF" 2>/dev/null
  curl -s "http://127.0.0.1:$port/metrics" >"$TMPF.m"
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null
  jq -r '.levels[0] | "out \(.output_tokens_per_s | floor) t/s, itl p50 \(.itl_ms.p50 * 100 | round / 100) p99 \(.itl_ms.p99 * 100 | round / 100) ms, server cpu \(.host.server_cpus * 1000 / .output_tokens_per_s * 1000 | round / 1000) ms/tok, steal \(.host.steal_share * 1000 | round / 10)%"' "$TMPF"
  printf ', drafts %s tokens %s accepted %s\n' \
    "$(sed -n 's/^vllm:spec_decode_num_drafts_total{[^}]*} //p' "$TMPF.m")" \
    "$(sed -n 's/^vllm:spec_decode_num_draft_tokens_total{[^}]*} //p' "$TMPF.m")" \
    "$(sed -n 's/^vllm:spec_decode_num_accepted_tokens_total{[^}]*} //p' "$TMPF.m")"
}

bars_serve() {
  local m=$1 rounds=${2:-3} r c s0 port=${PORT:-18400}
  TMPF=$(mktemp)
  trap 'rm -f "$TMPF" "$TMPF.m"' EXIT
  for r in $(seq "$rounds"); do
    s0=$(steal)
    for c in $(rotate "$r" none ngram none2); do
      case $c in
      none | none2) x=$(serve_one "$m" "$port") ;;
      ngram) x=$(serve_one "$m" "$port" --spec ngram) ;;
      esac
      echo "round $r $c: $(echo "$x" | tr -d '\n')"
    done
    echo "round $r steal $(($(steal) - s0)) ticks, load $(cut -d' ' -f1-3 /proc/loadavg)"
  done
}

case $MODE in
run) bars_run "${@:3}" ;;
serve) bars_serve "${@:3}" ;;
*) echo "usage: $0 run|serve CPULM ..." >&2 && exit 2 ;;
esac
