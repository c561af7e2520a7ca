#!/usr/bin/env bash
# spec-bench.sh: issue #32's prompt-lookup bars as a measurement (seconds to minutes; not a
# CI test). Builds a copy-heavy prompt for stories260K (the model's own story from "Once
# upon a time", regenerated after itself ITER times so that its continuation of "story \n
# Once upon a time" repeats the story), takes a TinyStories passage as the no-repeat prompt,
# then times `cpulm run` plain, with --spec ngram and plain again (plain2: the control pair,
# the noise floor), interleaved (order rotated every round), at each thread count. Prints one
# line per run (generation t/s, its process CPU time, and the speculation statistics) and
# the load average and the VM's stolen CPU ticks (/proc/stat) per round.
# Usage: scripts/spec-bench.sh path/to/cpulm [ROUNDS] [THREADS...]   (default 3 rounds, -t 1 2)
# Needs CPULM_SHARED (or ../shared). Writes only to a temp folder it removes.
set -u
CPULM=$1
ROUNDS=${2:-3}
shift $(($# < 2 ? $# : 2))
THREADS=${*:-1 2}
SHARED=${CPULM_SHARED:-../shared}
M=$SHARED/models/stories260K.gguf
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
P="Once upon a time"
gen() { "$CPULM" run -m "$M" -n 150 --temp 0 -t 1 --ignore-eos "$@" 2>/dev/null | head -c -1; }
gen -p "$P" >"$TMP/z"
for _ in 1 2 3 4; do # the story told after itself, four times (a near fixed point)
  { cat "$TMP/z"; printf '\n%s' "$P"; } >"$TMP/ctx"
  gen -f "$TMP/ctx" | tail -c +$(($(stat -c %s "$TMP/z") + 2)) >"$TMP/z2"
  mv "$TMP/z2" "$TMP/z"
done
{ cat "$TMP/z"; printf '\n%s' "$P"; } >"$TMP/copy"
sed -n 3p "$SHARED/testdata/text/tinystories_valid_head.txt" >"$TMP/norep"
steal() { awk '/^cpu /{print $9}' /proc/stat; }
one() { # prompt-file flags...: prints "t/s [spec statistics]"
  local f=$1; shift
  "$CPULM" run -m "$M" -f "$f" -n 120 --temp 0 --ignore-eos "$@" 2>&1 >/dev/null |
    grep "generation:" | sed 's/.*generation: [0-9]* tokens, [0-9.]* ms, \([0-9.]*\) t\/s, cpu \([0-9.]*\) ms.*threads \([0-9]*\).*kernels [a-z0-9]*\(.*\)/\1 t\/s, cpu \2 ms, -t \3\4/'
}
for prompt in copy norep; do
  for t in $THREADS; do
    for r in $(seq 1 "$ROUNDS"); do
      case $((r % 3)) in
      1) order="plain ngram plain2" ;;
      2) order="ngram plain2 plain" ;;
      0) order="plain2 plain ngram" ;;
      esac
      s0=$(steal)
      for c in $order; do
        if [ "$c" = ngram ]; then x=$(one "$TMP/$prompt" -t "$t" --spec ngram); else x=$(one "$TMP/$prompt" -t "$t"); fi
        echo "$prompt round $r $c: $x"
      done
      echo "$prompt round $r load $(cut -d' ' -f1-3 /proc/loadavg), steal $(($(steal) - s0)) ticks"
    done
  done
done
