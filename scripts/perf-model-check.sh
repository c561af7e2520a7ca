#!/usr/bin/env bash
# perf-model-check.sh: the live check of the performance model (docs/BENCHMARKING.md,
# "Estimates for machines not at hand"): calibrated on 1 thread, does it predict 2 threads'
# generation and prompt speed? Calibrated on a 1B shape, does it predict an 8B shape's?
# Measures with `cpulm roofline -m` (ceilings measured next to each model run) and prints
# `cpulm plan --calibration A --check B` for each pair. On a shared machine the runs are
# interleaved (1B at 1 thread, 1B at T threads, 8B at T threads, then again) for ROUNDS rounds,
# each round checked on its own, and a last table gives every round's errors and their median:
# a ceiling measured a few seconds before a model run under changing load describes it only
# roughly, and the spread across rounds says how roughly. A few minutes per round on 2 cores
# (the 8B file is 4.4 GiB; synth writes it once).
# Then (RAG=1, the default) the serving part: calibrated on 1 thread, does the model predict
# the highest Poisson rate of the rag profile (scaled by RAG_SCALE, 0.1: 300-token prompts,
# 25 output tokens) meeting SLO on `cpulm serve -t THREADS -np NP`? The model is a LAYERS-layer
# cut of the 1B shape (a rate search on it takes minutes, not an hour); its rooflines at 1
# and THREADS threads, then the search (`cpulm loadtest --slo --trial-time TRIAL`) twice, each
# on a fresh server, into slo-1.json and slo-2.json (trials the host disturbed, by steal or by
# keeping the server from its CPUs, are run again: --server-pid), each checked by `plan --check
# --workload --measured` (slo-check-N.md), and whether the two agree within 15% (slo-agree.txt).
# The objective: unless SLO is given, the TTFT limit is TTFT_X (10) times a lone request's TTFT
# (its median over 5 requests one at a time, measured first on the same server), and the
# token-gap limit ITL (500 ms). A limit near one request's TTFT (the old fixed 1500 ms on this
# cut) is met only while no request ever waits: the search then finds the rate at which the
# noise of single prefills crosses the line, which no queueing model predicts (it read -91%).
# At ten service times the limit is crossed when the prefill queue is about half busy, the
# regime the model's queueing part is about, on a fast machine or a slow one alike.
# Everything a check needs besides the JSONs goes to WORKDIR/params.env (the recorded
# fixtures under tests/data/perf-model/ keep it: tests/perf_model_recorded_test.sh).
# On a shared machine whose timings go through a lock held a few minutes at a time, the run
# can be cut into parts, each its own hold, into the same workdir: PART=rounds with FIRST=R
# ROUNDS=R runs round R alone (the errors table then covers the rounds found so far), PART=rag
# the serving part alone (default PART=all: everything); SEARCHES=1, then SEARCHES=2 in a later
# hold, runs its two searches one per hold (the first hold also takes the cut's rooflines and
# the objective into params.env; a later hold reuses them). A trial the host's steal disturbed
# waits up to DISTURB_WAIT seconds for the steal to pass before it runs again.
# Usage: scripts/perf-model-check.sh [path/to/cpulm] [workdir]
#   (env: THREADS=2, TYPE=q4_0, ROUNDS=3, FIRST=1, PART=all, RAG=1, RAG_SCALE=0.1,
#    OUT_SCALE=RAG_SCALE, LAYERS=4, NP=8, TRIAL=15, PRECISION=0.1, START=1 (req/s),
#    SLO (default: ttft_p99=TTFT_X x the lone TTFT, itl_p99=ITL), TTFT_X=10, ITL=500ms,
#    DISTURB_WAIT=60, SEARCHES="1 2", SERVE_PORT=0: any free port)
set -eu
CPULM=${1:-./build/cpulm}
DIR=${2:-/tmp/perf-model-check}
. "$(dirname "$0")/serve_port.sh"
T=${THREADS:-2}
TYPE=${TYPE:-q4_0}
ROUNDS=${ROUNDS:-3}
FIRST=${FIRST:-1}
PART=${PART:-all}
mkdir -p "$DIR"
for s in 1b 8b; do
  [ -f "$DIR/$s-$TYPE.gguf" ] || "$CPULM" synth --shape "$s" --type "$TYPE" -o "$DIR/$s-$TYPE.gguf" >/dev/null
done
errors() { # the generation and prompt errors of a check's table: "+5.1% -7.0%"
  awk -F'|' '/^\| (generation|prompt) \|/ { gsub(/ /, "", $5); printf "%s ", $5 }' "$1"
}
rounds() { # the rounds of this part, then the errors of every round in DIR so far
  for r in $(seq "$FIRST" "$ROUNDS"); do
    "$CPULM" roofline -t 1 -m "$DIR/1b-$TYPE.gguf" -o json >"$DIR/1b-1t-$r.json"
    "$CPULM" roofline -t "$T" -m "$DIR/1b-$TYPE.gguf" -o json >"$DIR/1b-${T}t-$r.json"
    "$CPULM" roofline -t "$T" -m "$DIR/8b-$TYPE.gguf" -p 64 -n 16 -r 3 -o json >"$DIR/8b-${T}t-$r.json"
    echo "== round $r: 1 thread -> $T threads (1B $TYPE)"
    "$CPULM" plan --calibration "$DIR/1b-1t-$r.json" --check "$DIR/1b-${T}t-$r.json" | tee "$DIR/threads-$r.md"
    echo
    echo "== round $r: 1B -> 8B ($T threads, $TYPE)"
    "$CPULM" plan --calibration "$DIR/1b-${T}t-$r.json" --check "$DIR/8b-${T}t-$r.json" | tee "$DIR/size-$r.md"
    echo
  done
  echo "== errors of the prediction, per round (predicted / measured - 1)"
  echo "| round | 1->$T threads: tg | pp | 1B->8B: tg | pp |"
  echo "| ---: | ---: | ---: | ---: | ---: |"
  for r in $(seq 1 "$ROUNDS"); do
    [ -f "$DIR/size-$r.md" ] || continue
    # shellcheck disable=SC2046
    set -- $(errors "$DIR/threads-$r.md") $(errors "$DIR/size-$r.md")
    echo "| $r | ${1:-?} | ${2:-?} | ${3:-?} | ${4:-?} |"
  done | tee "$DIR/errors.md"
  median() { # the median of a column of errors.md ("+5.1%" values)
    cut -d'|' -f"$1" "$DIR/errors.md" | tr -d ' %+' | grep -v '^?*$' | sort -g |
      awk '{ v[NR] = $1 } END { if (!NR) { print "?"; exit }
        printf "%+.1f%%", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
  }
  echo "| median | $(median 3) | $(median 4) | $(median 5) | $(median 6) |"
}
[ "$PART" = rag ] || rounds

[ "${RAG:-1}" = 1 ] && [ "$PART" != rounds ] || exit 0
SCALE=${RAG_SCALE:-0.1}
OSCALE=${OUT_SCALE:-$SCALE}
LAYERS=${LAYERS:-4}
NP=${NP:-8}
CUT=$DIR/1b-l$LAYERS-$TYPE.gguf
[ -f "$CUT" ] || "$CPULM" synth --shape 1b --layers "$LAYERS" --type "$TYPE" -o "$CUT" >/dev/null
SPID=
trap '[ -n "$SPID" ] && kill $SPID 2>/dev/null' EXIT
serve() { # starts cpulm serve on the cut: SPID, PORT
  "$CPULM" serve -m "$CUT" -t "$T" -np "$NP" -c 1024 --port "${SERVE_PORT:-0}" >"$DIR/serve.out" 2>"$DIR/serve.err" &
  SPID=$!
  PORT=$(serve_port "$DIR/serve.out" "$SPID") || { cat "$DIR/serve.err"; exit 1; }
}
stop() { kill "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null; SPID=; }
if [ ! -f "$DIR/params.env" ]; then # the first hold: the cut's rooflines and the objective
  "$CPULM" roofline -t 1 -m "$CUT" -o json >"$DIR/cut-1t.json"
  "$CPULM" roofline -t "$T" -m "$CUT" -o json >"$DIR/cut-${T}t.json"
  serve
  echo
  echo "== rag x$SCALE/$OSCALE on cpulm serve -t $T -np $NP ($LAYERS-layer 1B cut): a lone request's TTFT"
  "$CPULM" loadtest --url "http://127.0.0.1:$PORT" --workload rag --prompt-scale "$SCALE" \
    --output-scale "$OSCALE" --concurrency 1 --requests 5 -o json >"$DIR/lone.json"
  stop
  LONE_MS=$(jq -r '.levels[0].ttft_ms.p50' "$DIR/lone.json")
  echo "lone request: TTFT p50 ${LONE_MS} ms"
  awk -v t="$LONE_MS" 'BEGIN { exit !(t + 0 > 0) }' || { echo "no lone TTFT (see $DIR/lone.json)"; exit 1; }
  if [ -z "${SLO:-}" ]; then # ten service times, rounded up to 100 ms
    SLO="ttft_p99=$(awk -v t="$LONE_MS" -v x="${TTFT_X:-10}" \
      'BEGIN { v = t * x; printf "%d", int((v + 99) / 100) * 100 }')ms,itl_p99=${ITL:-500ms}"
  fi
  {
    echo "# the parameters of this run of scripts/perf-model-check.sh (read by its fixture test)"
    echo "THREADS=$T TYPE=$TYPE LAYERS=$LAYERS NP=$NP"
    echo "RAG_SCALE=$SCALE OUT_SCALE=$OSCALE"
    echo "SLO=$SLO"
    echo "LONE_TTFT_MS=$LONE_MS"
  } >"$DIR/params.env"
fi
# a later hold keeps the first one's objective and scales (params.env)
SLO=$(sed -n 's/^SLO=//p' "$DIR/params.env")
SCALE=$(sed -n 's/^RAG_SCALE=\([^ ]*\).*/\1/p' "$DIR/params.env")
OSCALE=$(sed -n 's/^.* OUT_SCALE=\([^ ]*\).*/\1/p' "$DIR/params.env")
for n in ${SEARCHES:-1 2}; do # each search on a fresh server, written to slo-N.json
  serve
  echo
  echo "== rag x$SCALE/$OSCALE on cpulm serve -t $T -np $NP ($LAYERS-layer 1B cut), $SLO: rate search $n"
  uptime
  rc=0
  "$CPULM" loadtest --url "http://127.0.0.1:$PORT" --workload rag --prompt-scale "$SCALE" \
    --output-scale "$OSCALE" --rate "${START:-1}" --slo "$SLO" --trial-time "${TRIAL:-15}" --requests 10 \
    --search-precision "${PRECISION:-0.1}" --server-pid "$SPID" \
    --disturb-wait "${DISTURB_WAIT:-60}" -o json >"$DIR/slo-$n.json" || rc=$?
  uptime
  stop
  jq -r --arg n "$n" '"search \($n): \(.slo.best.rate) req/s (lowest missed \(.slo.lowest_missed))"' "$DIR/slo-$n.json" 2>/dev/null
  [ "$rc" -eq 0 ] || echo "(the search exited $rc)"
  echo
  echo "== rag x$SCALE/$OSCALE: search $n's SLO rate predicted from the 1-thread calibration"
  "$CPULM" plan --calibration "$DIR/cut-1t.json" --check "$DIR/cut-${T}t.json" --workload rag \
    --prompt-scale "$SCALE" --output-scale "$OSCALE" --slo "$SLO" --max-batch "$NP" \
    --measured "$DIR/slo-$n.json" | tee "$DIR/slo-check-$n.md"
done
if [ -f "$DIR/slo-1.json" ] && [ -f "$DIR/slo-2.json" ]; then # the repeat agreement of #26
  jq -rn --slurpfile a "$DIR/slo-1.json" --slurpfile b "$DIR/slo-2.json" \
    '[$a[0].slo.best.rate, $b[0].slo.best.rate] | "searches 1 and 2: \(.[0]) and \(.[1]) req/s, \((max / min - 1) * 1000 | round / 10)% apart (agree within 15%: \(max / min - 1 <= 0.15))"' |
    tee "$DIR/slo-agree.txt"
fi
