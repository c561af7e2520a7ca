/* neon_unroll.h: the full unrolling that neon_attn.c's and dotprod_attn.c's register-blocked
 * loops rely on (aarch64 translation units only). */
#ifndef CPULM_KERNELS_ARM_NEON_UNROLL_H
#define CPULM_KERNELS_ARM_NEON_UNROLL_H

/* Full unrolling of the small constant loops over rows, keys and quarters, so the
 * accumulator arrays live in registers (clang ignores a GCC unroll count above the trip
 * count and keeps them on the stack). */
#if defined(__clang__)
#define NEON_UNROLL _Pragma("unroll")
#else
#define NEON_UNROLL _Pragma("GCC unroll 8")
#endif
/* for (i = 0; i < N; i++) with N <= MAX a constant only after inlining, written with the
 * literal bound MAX so the loop is fully unrolled before inlining: clang 14 does not unroll
 * a loop bounded by an inlined parameter even under "#pragma unroll" (the accumulators then
 * live on the stack); the guard folds away once N is known. */
#define NEON_FOR(i, N, MAX) NEON_UNROLL for (int i = 0; i < (MAX); i++) if (i < (N))

#endif
