#!/usr/bin/env bash
# x86-mca-attnq.sh: static throughput of the x86 quantized-KV attention ops (attn_qscores,
# attn_qpv on a Q8_0 cache; src/kernels/x86/avx2_attn.c, avx512_attn.c) on llvm-mca-22's
# Zen 3, Zen 4 and Sapphire Rapids models: a model, not a measurement, for CPUs this project
# cannot always run on (the AVX-512 ops on a machine without AVX-512). llvm-mca-22 has no
# Zen 5 model of its own (-mcpu=znver5 runs the Zen 4 one, 512-bit ops double-pumped).
#
# Builds the two files to assembly with their flags from cmake/kernels.cmake (-O2 -DNDEBUG)
# plus -DCPULM_MCA_MARKERS, which turns the X86Q_MCA_BEGIN/END markers (kernels/attn_simd.h) into asm
# comment lines around one iteration of each hot loop and pins the head size to 64 there.
# Regions: qscores, 4 keys x 4 query rows (one GQA group) x 64 dims per iteration; qpv, one
# key x 4 rows x 16 dims (avx2) or 64 dims (avx512). Prints, per level and CPU model, the
# cycles per key of a 4-row group at d 64 for each op:
#   scores = cycles(qscores region) / 4, pv = cycles(qpv region) x (64 / dims per iteration).
# Not counted: the block-scale gather and weight products per tile (a few cycles per key),
# the softmax (attn_softmaxz), memory.
#
# Usage: scripts/x86-mca-attnq.sh [--keep DIR]. Env LLVM_MCA overrides llvm-mca-22.
set -euo pipefail
cd "$(dirname "$0")/.."

mca="${LLVM_MCA:-llvm-mca-22}"
command -v "$mca" >/dev/null || { echo "x86-mca-attnq: $mca not found (scripts/deps.sh --perf)" >&2; exit 3; }
keep=""
if [ "${1:-}" = "--keep" ]; then keep="$2"; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
iters=200

flags_of() { # kernels.cmake entry of file $1 -> its flags
  grep -F "\"$1|" cmake/kernels.cmake | head -1 | cut -d'|' -f2 | cut -d'"' -f1
}

region() { # asm $1, region name $2 -> the region's lines, markers included, in its own file
  awk -v n="$2" '$0 ~ "LLVM-MCA-BEGIN " n "$" { on = 1; c++ } on && c == 1 { print }
                 $0 ~ "LLVM-MCA-END " n "$" { on = 0 }' "$1"
}

cycles() { # region file $1, cpu $2 -> cycles per iteration
  "$mca" -mtriple=x86_64 -mcpu="$2" -iterations="$iters" "$1" 2>/dev/null |
    awk -v it="$iters" '/^Total Cycles:/ { printf "%.1f\n", $3 / it }'
}

printf '%-8s %-15s %18s %18s %12s\n' level cpu "scores cyc/key" "pv cyc/key" "sum"
for lvl in avx2 avx512; do
  src="src/kernels/x86/${lvl}_attn.c"
  fl=$(flags_of "$src")
  [ -n "$fl" ] || { echo "x86-mca-attnq: no flags for $src in cmake/kernels.cmake" >&2; exit 1; }
  # shellcheck disable=SC2086
  gcc -O2 -DNDEBUG -DCPULM_MCA_MARKERS $fl -Iinclude -Isrc -Isrc/kernels/x86 -S "$src" \
    -o "$work/$lvl.s"
  region "$work/$lvl.s" "${lvl}_attn_qscores" >"$work/$lvl.scores.s"
  region "$work/$lvl.s" "${lvl}_attn_qpv" >"$work/$lvl.pv.s"
  for f in scores pv; do
    [ -s "$work/$lvl.$f.s" ] || { echo "x86-mca-attnq: region ${lvl}_attn_q$f not found" >&2; exit 1; }
  done
  pvmul=4; [ "$lvl" = avx512 ] && pvmul=1
  for cpu in znver3 znver4 sapphirerapids; do
    [ "$lvl" = avx512 ] && [ "$cpu" = znver3 ] && continue # no AVX-512 on Zen 3
    s=$(cycles "$work/$lvl.scores.s" "$cpu")
    p=$(cycles "$work/$lvl.pv.s" "$cpu")
    awk -v l="$lvl" -v c="$cpu" -v s="$s" -v p="$p" -v m="$pvmul" \
      'BEGIN { printf "%-8s %-15s %18.1f %18.1f %12.1f\n", l, c, s / 4, p * m, s / 4 + p * m }'
  done
done
if [ -n "$keep" ]; then mkdir -p "$keep" && cp "$work"/*.s "$keep"/; fi
