#!/usr/bin/env bash
# arm-perf.sh: static throughput of the aarch64 kernels' hot loops on the Neoverse N1, V1
# and V2 scheduling models of llvm-mca-22 (no ARM machine needed; qemu cannot time).
#
# Builds src/kernels/arm/{dotprod,i8mm,neon_attn,dotprod_attn}.c to assembly with the project's own
# flags (the -march of cmake/kernels.cmake, -O2 -DNDEBUG -ffp-contract=off) plus
# -DCPULM_MCA_MARKERS, which turns the ARM_MCA_BEGIN/END markers in the sources into asm
# comment lines (arm.h). Each marked region is one iteration of a hot loop; a kernel below is a sum of
# regions times their trip counts per unit of work, and llvm-mca gives the cycles.
# Prints one JSON line per kernel x cpu x compiler:
#   {"kernel","level","cpu","compiler","cycles_per_iter","macs_per_cycle","pct_of_peak",
#    "bytes_per_cycle","macs_per_iter","peak","spills","insns"}
# cycles_per_iter is per unit of work (macs_per_iter int8 multiply-adds, weight bytes read);
# peak is int8 MACs per cycle: SDOT 32 on N1, 64 on V1/V2; SMMLA 128 (V1/V2) for i8mm
# kernels. For the float attention kernels (level neon, inherited by every ARM level) MACs
# are f32 multiply-adds, the peak is FMLA's (8 per cycle on N1: 2 FP pipes; 16 on V1/V2: 4)
# and the bytes are the K or V tile's f32 bytes. "spills" counts stack ([sp]) accesses in
# the kernel's regions (must be 0); "insns" the regions' instructions. Also checks that the
# marked build's instruction count per function is within 3% of the unmarked one's (the
# markers emit no instruction but bound the compiler's scheduling a little) and that each
# kernel's regions hold exactly its unit of work (16 MACs per SDOT, 32 per SMMLA, 4 per
# FMLA .4s): a failure is reported on stderr and makes the script exit 1.
#
# Usage: scripts/arm-perf.sh [--quick] [--compiler gcc|clang|both] [--keep DIR]
#   --quick: gcc only, 50 iterations (the ctest). Env LLVM_MCA overrides llvm-mca-22.
# Needs aarch64-linux-gnu-gcc (and clang for clang), llvm-mca-22 (scripts/deps.sh --perf).
set -euo pipefail
cd "$(dirname "$0")/.."

compilers="gcc clang"
iters=200
keep=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) compilers="gcc"; iters=50 ;;
    --compiler) shift; [ "$1" = both ] && compilers="gcc clang" || compilers="$1" ;;
    --keep) shift; keep="$1" ;;
    *) echo "usage: $0 [--quick] [--compiler gcc|clang|both] [--keep DIR]" >&2; exit 2 ;;
  esac
  shift
done

mca="${LLVM_MCA:-llvm-mca-22}"
command -v "$mca" >/dev/null || { echo "arm-perf: $mca not found (scripts/deps.sh --perf)" >&2; exit 3; }
command -v aarch64-linux-gnu-gcc >/dev/null ||
  { echo "arm-perf: aarch64-linux-gnu-gcc not found (scripts/deps.sh)" >&2; exit 3; }

if [ -n "$keep" ]; then mkdir -p "$keep"; work="$keep"; else work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; fi

# The project's flags: -march per file from cmake/kernels.cmake, the Release flags.
march_of() { grep -o "src/kernels/arm/$1.c|[^\"]*" cmake/kernels.cmake | cut -d'|' -f2; }
base_flags="-O2 -DNDEBUG -ffp-contract=off -std=c11 -Isrc"

cc_cmd() { # compiler -> command
  case "$1" in
    gcc) echo "aarch64-linux-gnu-gcc" ;;
    clang) echo "clang --target=aarch64-linux-gnu --sysroot=/usr/aarch64-linux-gnu" ;;
    *) echo "arm-perf: unknown compiler $1" >&2; exit 2 ;;
  esac
}

# Instructions per function in an assembly file: "name count" lines (labels, directives and
# comments are not instructions).
insn_counts() {
  awk '/^[A-Za-z_][A-Za-z0-9_.]*:/ { f = $1; sub(":", "", f); next }
       /^[ \t]*(\.|#|\/\/|$)/ { next }
       /^\.L/ { next }
       f != "" && /^[ \t]+[a-z]/ { n[f]++ }
       END { for (k in n) print k, n[k] }' "$1" | sort
}

# Region NAME (the first one of that name) of an assembly file into its own file: the
# whole loop body around the markers, from the loop's header label (the nearest label above
# BEGIN) to the branch back to it after END, because the compilers may schedule a few
# instructions of an iteration across the markers (an empty asm orders nothing else).
# Without such a branch within 600 lines (the marked loop was not a simple loop), just the
# lines between the markers. Comments, directives and labels are dropped.
extract() { # asm name out
  awk -v name="$2" '
    { line[NR] = $0 }
    $0 ~ ("LLVM-MCA-BEGIN " name "$") && !b { b = NR }
    b && !e && $0 ~ ("LLVM-MCA-END " name "$") { e = NR }
    END {
      if (!b || !e) exit
      lab = ""
      for (i = b - 1; i > 0 && i > b - 200; i--)
        if (line[i] ~ /^[.A-Za-z_$][^ \t]*:/) { lab = line[i]; sub(/:.*/, "", lab); hl = i; break }
      from = b; to = e
      if (lab != "")
        for (i = e + 1; i <= NR && i < e + 600; i++) {
          n = split(line[i], f, /[ \t,]+/)
          if (f[2] ~ /^(b|b\..*|cbz|cbnz|tbz|tbnz)$/ && f[n] == lab) { from = hl; to = i; break }
          if (line[i] ~ /^[.A-Za-z_$][^ \t]*:/ && line[i] !~ /^\.Ltmp/) break
        }
      for (i = from + 1; i <= to; i++) {
        l = line[i]
        if (l ~ /^[ \t]*(#|\/\/|\.|$)/ || l ~ /^[.A-Za-z_$][^ \t]*:/) continue
        print l
      }
    }' "$1" > "$3"
}

# multiply-adds the code of a region file performs: 16 int8 per SDOT, 32 per SMMLA; for an
# fmla kernel (second argument) 4 f32 per FMLA on .4s (vector or by element) instead; for
# an smlal kernel 4 int16 products per SMULL / SMLAL (or their "2" forms) into .4s.
code_macs() {
  awk -v f="$2" 'f != "fmla" && f != "smlal" && $1 == "sdot" { m += 16 }
       f != "fmla" && f != "smlal" && $1 == "smmla" { m += 32 }
       f == "fmla" && $1 == "fmla" && $2 ~ /\.4s/ { m += 4 }
       f == "smlal" && $1 ~ /^sm(ull|lal)2?$/ && $2 ~ /\.4s/ { m += 4 } END { print m + 0 }' "$1"
}

# Kernels: "kernel level peak macs wbytes region*count ...". Units of work:
#   gemm (dotprod): 16 rows x 8 tokens x 1 block = 4096 MACs, 288 (Q4_0) / 544 (Q8_0) bytes of
#     weights: 4 quad passes plus the per-call activation staging of 8 tokens.
#   gemm (i8mm): the same unit: 4 quad passes of 8 tokens (2 of 16 with GCC, whose tile is
#     16 tokens: "auto" counts the loop region by its SMMLAs, after the other regions) plus
#     the staging of 4 token pairs, which one x16_groups call shares among 8 groups
#     (matmul's calls): 4 / 8 = 0.5 pair stagings. A count may be fractional.
#   gemv: 16 rows x 1 token x 1 block (one-token decode): 4 quad passes + 1 staging.
#   dot_q4_K / dot_q6_K: one row x one token x one 256-element super-block (vec_dot).
#   attn_pv: 4 keys x 4 rows x 16 dims of P.V (256 MACs, 256 bytes of values); a key x row
#     at head size 128 is half a unit.
#   attn_qscores (neon_attn.c, a Q8_0 / Q4_0 cache read in place): 4 query rows x 2 keys x
#     one 32-element block (256 int16 x int8 MACs by SMULL / SMLAL, 68 bytes of Q8_0 keys);
#     a key at head size 64 is one unit. attn_qpv: 1 key x 4 rows x 16 dims of Q8_0 values
#     (64 f32 MACs, 16 bytes of quants); a key at head size 64 is 4 units. The dotprod
#     attn_qscores (dotprod_attn.c): the same unit as 256 int8 MACs by SDOT (the query is
#     int8, attn_qquant's Q8_0; until 2026-12-05 it was int16 in two int8 halves, 512 MACs
#     plus 64 for the keys' sums).
#   gemm_q4_K / q5_K / q6_K (x16_ksdot.h, which i8mm and sve inherit): 16 rows x 8 tokens x
#     one super-block = 32768 MACs, 4 quad passes (no staging: the tile reads Q8_K directly).
#     Q4_K / Q5_K also compute the min term by SDOT: 4 SDOTs per quad, token and super-block,
#     2048 MACs per unit that are not the GEMM's own ("32768+2048": checked against the code,
#     not counted as useful work), on activation splits staged once per tile and
#     super-block for Q4_K (stage_k4: 8 tokens, shared by the 4 quad passes).
kernels=(
  "gemm_q4_0 dotprod sdot 4096 288 dotprod_gemm_q4_0*4"
  "gemm_q8_0 dotprod sdot 4096 544 dotprod_gemm_q8_0*4"
  "gemv_q4_0 dotprod sdot 512 288 dotprod_gemv_q4_0*1"
  "gemv_q8_0 dotprod sdot 512 544 dotprod_gemv_q8_0*1"
  "dot_q4_K dotprod sdot 256 144 dotprod_dot_q4_K*1"
  "dot_q6_K dotprod sdot 256 210 dotprod_dot_q6_K*1"
  "gemm_q4_K dotprod sdot 32768+2048 2304 dotprod_gemm_q4_K*4 dotprod_stage_k4*1"
  "gemm_q5_K dotprod sdot 32768+2048 2816 dotprod_gemm_q5_K*4"
  "gemm_q6_K dotprod sdot 32768 3360 dotprod_gemm_q6_K*4"
  "gemm_q4_0 i8mm smmla 4096 288 i8mm_stage_q4_0*0.5 i8mm_gemm_q4_0*auto"
  "gemm_q8_0 i8mm smmla 4096 544 i8mm_stage_q8_0*0.5 i8mm_gemm_q8_0*auto"
  "gemv_q4_0 i8mm sdot 512 288 i8mm_gemv_q4_0*1"
  "gemv_q8_0 i8mm sdot 512 544 i8mm_gemv_q8_0*1"
  "attn_pv neon_attn fmla 256 256 neon_attn_pv*1"
  "attn_qscores neon_attn smlal 256 68 neon_attn_qscores*1"
  "attn_qpv neon_attn fmla 64 16 neon_attn_qpv*1"
  "attn_qscores dotprod_attn sdot 256 68 dotprod_attn_qscores*1"
)

mca_cycles() { # region-file cpu -> cycles per iteration
  local out
  out=$("$mca" -mtriple=aarch64-linux-gnu -mcpu="$2" -mattr=+dotprod,+i8mm -iterations="$iters" \
        -resource-pressure=false -instruction-info=false "$1" 2>&1) ||
    { echo "arm-perf: $mca failed on $1: $out" >&2; exit 1; }
  echo "$out" | awk -v it="$iters" '/^Total Cycles:/ { printf "%.3f\n", $3 / it }'
}

status=0
for comp in $compilers; do
  cc=$(cc_cmd "$comp")
  if ! command -v ${cc%% *} >/dev/null; then echo "arm-perf: ${cc%% *} missing, $comp skipped" >&2; continue; fi
  for lvl in dotprod i8mm neon_attn dotprod_attn; do
    src="src/kernels/arm/$lvl.c"
    flags="$base_flags $(march_of "$lvl")"
    # shellcheck disable=SC2086
    $cc $flags -S "$src" -o "$work/$comp-$lvl.plain.s"
    # shellcheck disable=SC2086
    $cc $flags -DCPULM_MCA_MARKERS -S "$src" -o "$work/$comp-$lvl.s"
    # An empty asm still bounds the compiler's scheduling a little: allow 3% per function.
    if ! join <(insn_counts "$work/$comp-$lvl.plain.s") <(insn_counts "$work/$comp-$lvl.s") |
         awk -v w="$comp $lvl" '{ d = $3 - $2; if (d < 0) d = -d
              if (d > 0.03 * $2) { printf "arm-perf: %s %s: %d instructions unmarked, %d marked\n", w, $1, $2, $3; bad = 1 } }
              END { exit bad }' >&2; then
      echo "arm-perf: $comp $lvl: the markers changed the code above by more than 3%" >&2
      status=1
    fi
  done
  for k in "${kernels[@]}"; do
    read -r kernel lvl peak_kind macs wbytes regions <<<"$k"
    aux=0 # auxiliary MACs (see the table): in the code, not in the unit of work
    case "$macs" in *+*) aux=${macs#*+} macs=${macs%+*} ;; esac
    for cpu in neoverse-n1 neoverse-v1 neoverse-v2; do
      # N1 has no i8mm: the i8mm level never runs there
      [ "$cpu" = neoverse-n1 ] && [ "$lvl" = i8mm ] && continue
      case "$cpu/$peak_kind" in
        neoverse-n1/fmla) peak=8 ;;
        neoverse-n1/smlal) peak=4 ;;
        */smlal) peak=8 ;;
        */fmla) peak=16 ;;
        neoverse-n1/sdot) peak=32 ;;
        */sdot) peak=64 ;;
        */smmla) peak=128 ;;
      esac
      cycles=0 spills=0 insns=0 missing="" cmacs=0
      for rc in $regions; do
        r=${rc%\**} cnt=${rc##*\*}
        f="$work/$comp-$r.rs"
        extract "$work/$comp-$lvl.s" "$r" "$f"
        if [ ! -s "$f" ]; then missing="$missing $r"; continue; fi
        # "auto": as many of the region as make up the unit's MACs with the others' (a tile
        # whose size depends on the compiler)
        if [ "$cnt" = auto ]; then
          cnt=$(awk -v t="$macs" -v o="$cmacs" -v m="$(code_macs "$f" "$peak_kind")" 'BEGIN { print (t - o) / m }')
        fi
        c=$(mca_cycles "$f" "$cpu")
        cycles=$(awk -v a="$cycles" -v b="$c" -v n="$cnt" 'BEGIN { printf "%.3f", a + b * n }')
        spills=$((spills + $(grep -cE '\[sp(,|\])' "$f" || true)))
        insns=$((insns + $(wc -l <"$f")))
        cmacs=$(awk -v a="$cmacs" -v n="$cnt" -v m="$(code_macs "$f" "$peak_kind")" 'BEGIN { print a + n * m }')
      done
      if [ -n "$missing" ]; then
        echo "arm-perf: $comp $lvl $kernel: region(s)$missing not found" >&2
        status=1
        continue
      fi
      # the regions must hold exactly the unit of work the table says (a check on both)
      if [ "$cmacs" != $((macs + aux)) ]; then
        echo "arm-perf: $comp $lvl $kernel: the regions do $cmacs int8 MACs per unit, the table says $((macs + aux))" >&2
        status=1
        continue
      fi
      awk -v k="$kernel" -v l="${lvl%%_*}" -v cpu="${cpu#neoverse-}" -v comp="$comp" -v cyc="$cycles" \
          -v macs="$macs" -v wb="$wbytes" -v peak="$peak" -v sp="$spills" -v ins="$insns" 'BEGIN {
        mpc = macs / cyc
        printf "{\"kernel\":\"%s\",\"level\":\"%s\",\"cpu\":\"%s\",\"compiler\":\"%s\",", k, l, cpu, comp
        printf "\"cycles_per_iter\":%.2f,\"macs_per_cycle\":%.2f,\"pct_of_peak\":%.1f,", cyc, mpc, 100 * mpc / peak
        printf "\"bytes_per_cycle\":%.2f,\"macs_per_iter\":%d,\"peak\":%d,\"spills\":%d,\"insns\":%d}\n", wb / cyc, macs, peak, sp, ins
      }'
    done
  done
done
exit $status
