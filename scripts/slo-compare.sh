#!/usr/bin/env bash
# slo-compare.sh: the SLO rate search of docs/BENCHMARKING.md against `cpulm serve` and
# llama-server on the same model file with matched settings (threads, slots, context per
# slot, continuous batching, the same requests), each searched twice. The four searches are
# interleaved (cpulm, llama, cpulm, llama; ORDER swaps the first), each on a freshly started
# server (a cold prompt cache for both), so a drift of the machine's load shows in both
# engines' repeats instead of in their ratio. Prints each server's two answers and whether they
# agree within TOL, the engines' ratio, and writes a perf-log-ready Markdown file. Each
# trial records the VM's steal share and the server's CPU use (loadtest --server-pid); a
# disturbed trial (steal over DSTEAL, or a missed trial whose server got under half the CPU
# of a met lower load) is run again instead of deciding the search (docs/BENCHMARKING.md),
# and each search's steal over its whole span goes to the sitting's table.
# Not a CI test. Each search's ~12 trials take TRIAL s each plus the drain of an overloaded
# one: expected under 10 minutes in all on a quiet 2-core machine; 14.4 minutes with TRIAL=8
# at load average 12-17 (docs/perf-log/2026-12-02-loaded-slo-compare.md).
# Usage: scripts/slo-compare.sh [path/to/cpulm] [workdir]
# Env (defaults): MODEL=$CPULM_SHARED/models/stories260K.gguf (a trained model both serve:
#   llama-server ends streams of random-weight models' text with an error, docs/BENCHMARKING.md),
#   LLAMA=$CPULM_SHARED/bench/llama.cpp, THREADS=2, NP=4 (slots), CTX=1024 (per slot;
#   llama-server gets NP x CTX, its -c being the total), WORKLOAD=rag, PSCALE=0.1,
#   OSCALE=0.1 (rag x0.1: ~300-token prompts, 25 output tokens), SLO=ttft_p99=2s,itl_p99=200ms,
#   START=2 (req/s, where each search starts; START_CPULM, START_LLAMA: per engine, which moves
#   only how many trials the search takes to reach its answer), TRIAL=10 (s per trial), WARM=2 (s not counted), TRIALS=3, PRECISION=0.1,
#   TOL=0.15, TIMEOUT=30 (s: a request slower than that is a failure, so an overloaded trial
#   ends instead of draining its queue for minutes), ORDER="cpulm llama", CPULM_ARGS="",
#   LLAMA_ARGS="" (extra server flags), DSTEAL=0.05 (loadtest --disturb-steal), DRETRIES=2
#   (--disturb-retries), ROUNDS="1 2" (which of the two rounds to run now: "1", then "2" with
#   the same workdir, splits the sitting into two shorter exclusive holds of the machine;
#   the tables are written from whatever rounds the workdir holds), PORT_BASE (cpulm serve
#   listens there, llama-server one above; default: ports the system picks)
set -u
CPULM=${1:-./build/cpulm}
DIR=${2:-/tmp/slo-compare}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/scripts/serve_port.sh"
SHARED=${CPULM_SHARED:-$ROOT/../shared}
MODEL=${MODEL:-$SHARED/models/stories260K.gguf}
LLAMA=${LLAMA:-$SHARED/bench/llama.cpp}
T=${THREADS:-2} NP=${NP:-4} CTX=${CTX:-1024}
WORKLOAD=${WORKLOAD:-rag} PSCALE=${PSCALE:-0.1} OSCALE=${OSCALE:-0.1}
SLO=${SLO:-ttft_p99=2s,itl_p99=200ms}
START=${START:-2} TRIAL=${TRIAL:-10} WARM=${WARM:-2} TRIALS=${TRIALS:-3}
PRECISION=${PRECISION:-0.1} TOL=${TOL:-0.15} TIMEOUT=${TIMEOUT:-30}
ORDER=${ORDER:-cpulm llama}
DSTEAL=${DSTEAL:-0.05} DRETRIES=${DRETRIES:-2} ROUNDS=${ROUNDS:-1 2}
for f in "$CPULM" "$MODEL" "$LLAMA/llama-server"; do
  [ -e "$f" ] || { echo "slo-compare: $f not found" >&2; exit 2; }
done
command -v jq >/dev/null || { echo "slo-compare: needs jq" >&2; exit 2; }
mkdir -p "$DIR"
SPID=
cleanup() { [ -n "$SPID" ] && kill "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

start() { # engine log: starts the server, sets SPID and PORT
  if [ "$1" = cpulm ]; then
    "$CPULM" serve -m "$MODEL" -t "$T" -np "$NP" -c "$CTX" --port "${PORT_BASE:-0}" ${CPULM_ARGS:-} >"$2" 2>&1 &
    SPID=$!
    PORT=$(serve_port "$2" "$SPID")
  else
    if [ -n "${PORT_BASE:-}" ]; then PORT=$((PORT_BASE + 1)); else PORT=$(free_port); fi
    "$LLAMA/llama-server" -m "$MODEL" -t "$T" -np "$NP" -c $((NP * CTX)) --host 127.0.0.1 \
      --port "$PORT" ${LLAMA_ARGS:-} >"$2" 2>&1 &
    SPID=$!
  fi
  [ -n "$PORT" ] || { echo "slo-compare: $1 did not start: $(tail -n 3 "$2")" >&2; exit 1; }
}

start_of() { if [ "$1" = cpulm ]; then echo "${START_CPULM:-$START}"; else echo "${START_LLAMA:-$START}"; fi; }

steal_ticks() { awk '/^cpu / { print $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat 2>/dev/null; }

search() { # engine n: one search on a fresh server -> $DIR/ENGINE-N.json
  local log=$DIR/$1-$2.log s0 s1
  start "$1" "$DIR/$1-$2.server.log"
  s0=$(steal_ticks)
  echo "== $1 search $2 ($(date -u +%H:%M:%S) UTC, $(uptime | sed 's/.*load average/load average/'))" | tee -a "$DIR/sitting.txt"
  # loadtest waits for readiness (/ready, or llama-server's /health) and sizes the prompts in
  # the model's tokens before its warm-up request
  "$CPULM" loadtest --url "http://127.0.0.1:$PORT" --workload "$WORKLOAD" --prompt-scale "$PSCALE" \
    --output-scale "$OSCALE" --rate "$(start_of "$1")" --slo "$SLO" --trial-time "$TRIAL" --trial-warmup "$WARM" \
    --trials "$TRIALS" --requests 4 --search-precision "$PRECISION" --timeout "$TIMEOUT" \
    --wait 60 --server-pid "$SPID" --disturb-steal "$DSTEAL" --disturb-retries "$DRETRIES" -o json \
    >"$DIR/$1-$2.json" 2>"$log"
  echo "   exit $?; answer $(jq -r '.slo.best.rate // "none"' "$DIR/$1-$2.json") req/s, bracket $(jq -r '"\(.slo.best.rate // "-")-\(.slo.lowest_missed // "-")"' "$DIR/$1-$2.json"), $(jq '.levels | length' "$DIR/$1-$2.json") trials" | tee -a "$DIR/sitting.txt"
  s1=$(steal_ticks)
  # the search's steal share over its whole span, and its disturbed / rerun trials
  awk -v a="$s0" -v b="$s1" 'BEGIN { split(a, x, " "); split(b, y, " ");
    printf "%s", (y[2] > x[2]) ? sprintf("%.2f", 100 * (y[1] - x[1]) / (y[2] - x[2])) : "-" }' >"$DIR/$1-$2.steal"
  echo "   steal $(cat "$DIR/$1-$2.steal")% of the CPUs' time; $(jq -r '"\(.disturbance.disturbed_trials // "-") trials disturbed, \(.disturbance.rerun_trials // "-") run again"' "$DIR/$1-$2.json")" | tee -a "$DIR/sitting.txt"
  kill "$SPID" 2>/dev/null
  wait "$SPID" 2>/dev/null
  SPID=
}

cpu() { # the CPU as /proc/cpuinfo names it, and cpulm's kernel level
  awk -F': ' '/^model name/ && !n { n = $2 } /^cpu family/ && !f { f = $2 } /^model\t/ && !m { m = $2 }
    END { printf "%s (family %s model %s)", n, f, m }' /proc/cpuinfo
  echo ", $(nproc) CPUs, cpulm $("$CPULM" info --cpu 2>/dev/null | sed -n 's/^kernel level: *\([^ ]*\).*/kernel level \1/p')"
}
case " $ROUNDS " in *" 1 "*) : >"$DIR/sitting.txt" ;; esac
echo "CPU: $(cpu); $(uptime)" | tee -a "$DIR/sitting.txt"
for n in $ROUNDS; do
  for e in $ORDER; do search "$e" "$n"; done
done
uptime | tee -a "$DIR/sitting.txt"

answer() { jq -r '.slo.best.rate // empty' "$DIR/$1-$2.json" 2>/dev/null; }
ok=1
summary() { # engine -> "a1 a2 spread agree"
  local a b
  a=$(answer "$1" 1) b=$(answer "$1" 2)
  if [ -z "$a" ] || [ -z "$b" ]; then
    echo "${a:--} ${b:--} - no"
    return
  fi
  awk -v a="$a" -v b="$b" -v t="$TOL" 'BEGIN { hi = a > b ? a : b; lo = a < b ? a : b;
    s = hi / lo - 1; printf "%.4g %.4g %.1f%% %s\n", a, b, s * 100, s <= t ? "yes" : "NO" }'
}
read -r c1 c2 cs cagree <<<"$(summary cpulm)"
read -r l1 l2 ls lagree <<<"$(summary llama)"
[ "$cagree" = yes ] && [ "$lagree" = yes ] || ok=0
ratio=$(awk -v a="$c1" -v b="$c2" -v c="$l1" -v d="$l2" 'BEGIN {
  if (a + 0 > 0 && b + 0 > 0 && c + 0 > 0 && d + 0 > 0) printf "%.2f", (a < b ? a : b) / (c < d ? c : d); else print "-" }')

MD=$DIR/slo-compare.md
{
  echo "CPU: $(cpu)"
  echo
  echo "Model \`$(basename "$MODEL")\`, workload $WORKLOAD x$PSCALE/$OSCALE, objective \`$SLO\`;"
  echo "both servers \`-t $T -np $NP\`, $CTX tokens per slot (\`cpulm serve -c $CTX\`, \`llama-server -c $((NP * CTX))\`);"
  echo "\`cpulm loadtest --rate $(start_of cpulm) (llama-server: $(start_of llama)) --trial-time $TRIAL --trial-warmup $WARM --trials $TRIALS --search-precision $PRECISION --timeout $TIMEOUT\`,"
  echo "searches interleaved ($ORDER, twice), each on a freshly started server."
  echo
  echo "| engine | search 1 req/s | search 2 req/s | spread | agree (<= $(awk -v t="$TOL" 'BEGIN { print t * 100 }')%) |"
  echo "| --- | ---: | ---: | ---: | --- |"
  echo "| cpulm serve | $c1 | $c2 | $cs | $cagree |"
  echo "| llama-server | $l1 | $l2 | $ls | $lagree |"
  echo
  echo "cpulm / llama-server (lower answers): $ratio"
  echo
  echo "| engine | search | steal % (search) | disturbed / rerun trials |"
  echo "| --- | ---: | ---: | --- |"
  for n in 1 2; do
    for e in $ORDER; do
      echo "| $e | $n | $(cat "$DIR/$e-$n.steal" 2>/dev/null) | $(jq -r '"\(.disturbance.disturbed_trials) / \(.disturbance.rerun_trials)"' "$DIR/$e-$n.json" 2>/dev/null) |"
    done
  done
  echo
  echo "| engine | search | rate | realised arrivals | ok | failed | prompt/output tokens (asked) | TTFT p99 ms | ITL p99 ms | steal % | server CPUs | verdict |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
  for n in 1 2; do
    for e in $ORDER; do
      jq -r --arg e "$e" --arg n "$n" '.levels[] | "| \($e) | \($n) | \(.rate * 1000 | round / 1000) | \(.arrivals_realised_per_s * 100 | round / 100) | \(.ok) | \(.errors) | \(.mean_prompt_tokens | round)/\(.mean_output_tokens | round) (\(.target_prompt_tokens | round)/\(.target_output_tokens | round)) | \(.ttft_ms.p99 // "-" | if type == "number" then round else . end) | \(.itl_ms.p99 // "-" | if type == "number" then round else . end) | \(.host.steal_share // null | if type == "number" then (. * 1000 | round / 10) else "-" end) | \(.host.server_cpus // null | if type == "number" then (. * 100 | round / 100) else "-" end) | \(if .counted == false then "DISTURBED, rerun: " elif .disturbed then "disturbed: " else "" end)\(.slo_verdict) |"' \
        "$DIR/$e-$n.json" 2>/dev/null
    done
  done
  echo
  echo "Calibration (prompt sizing): cpulm $(jq -c .calibration "$DIR/cpulm-1.json" 2>/dev/null), llama-server $(jq -c .calibration "$DIR/llama-1.json" 2>/dev/null)"
  echo
  echo '```'
  cat "$DIR/sitting.txt"
  echo '```'
} >"$MD"
echo
sed -n '1,/^cpulm \/ llama-server/p' "$MD"
echo
echo "(full table: $MD)"
[ "$ok" = 1 ]
