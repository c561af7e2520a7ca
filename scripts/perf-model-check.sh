#!/usr/bin/env bash
# perf-model-check.sh: the live check of the performance model (docs/BENCHMARKING.md,
# "Estimates for machines not at hand"): calibrated on 1 thread, does it predict 2 threads'
# generation and prompt speed? Calibrated on a 1B shape, does it predict an 8B shape's?
# Measures with `cpulm roofline -m` (ceilings next to each model run) and prints
# `cpulm plan --calibration A --check B` for each pair. Takes a few minutes on 2 cores (the 8B
# file is 4.4 GiB; synth writes it once); run it on a quiet machine.
# Usage: scripts/perf-model-check.sh [path/to/cpulm] [workdir]   (env: THREADS=2, TYPE=q4_0)
set -eu
CPULM=${1:-./build/cpulm}
DIR=${2:-/tmp/perf-model-check}
T=${THREADS:-2}
TYPE=${TYPE:-q4_0}
mkdir -p "$DIR"
for s in 1b 8b; do
  [ -f "$DIR/$s-$TYPE.gguf" ] || "$CPULM" synth --shape "$s" --type "$TYPE" -o "$DIR/$s-$TYPE.gguf" >/dev/null
done
"$CPULM" roofline -t 1 -m "$DIR/1b-$TYPE.gguf" -o json >"$DIR/1b-1t.json"
"$CPULM" roofline -t "$T" -m "$DIR/1b-$TYPE.gguf" -o json >"$DIR/1b-${T}t.json"
"$CPULM" roofline -t "$T" -m "$DIR/8b-$TYPE.gguf" -p 64 -n 16 -r 2 -o json >"$DIR/8b-${T}t.json"
echo "== 1 thread -> $T threads (1B $TYPE)"
"$CPULM" plan --calibration "$DIR/1b-1t.json" --check "$DIR/1b-${T}t.json"
echo
echo "== 1B -> 8B ($T threads, $TYPE)"
"$CPULM" plan --calibration "$DIR/1b-${T}t.json" --check "$DIR/8b-${T}t.json"
