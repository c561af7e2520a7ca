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
# Usage: scripts/perf-model-check.sh [path/to/cpulm] [workdir]
#   (env: THREADS=2, TYPE=q4_0, ROUNDS=3)
set -eu
CPULM=${1:-./build/cpulm}
DIR=${2:-/tmp/perf-model-check}
T=${THREADS:-2}
TYPE=${TYPE:-q4_0}
ROUNDS=${ROUNDS:-3}
mkdir -p "$DIR"
for s in 1b 8b; do
  [ -f "$DIR/$s-$TYPE.gguf" ] || "$CPULM" synth --shape "$s" --type "$TYPE" -o "$DIR/$s-$TYPE.gguf" >/dev/null
done
errors() { # the generation and prompt errors of a check's table: "+5.1% -7.0%"
  awk -F'|' '/^\| (generation|prompt) \|/ { gsub(/ /, "", $5); printf "%s ", $5 }' "$1"
}
for r in $(seq 1 "$ROUNDS"); do
  "$CPULM" roofline -t 1 -m "$DIR/1b-$TYPE.gguf" -o json >"$DIR/1b-1t-$r.json"
  "$CPULM" roofline -t "$T" -m "$DIR/1b-$TYPE.gguf" -o json >"$DIR/1b-${T}t-$r.json"
  "$CPULM" roofline -t "$T" -m "$DIR/8b-$TYPE.gguf" -p 64 -n 16 -r 2 -o json >"$DIR/8b-${T}t-$r.json"
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
