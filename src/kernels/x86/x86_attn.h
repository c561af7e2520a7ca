/* x86_attn.h: the x86 levels' attention tile ops that live outside their level's main file
 * (avx2_attn.c: f32 tiles, the exact numerics and Q8_0 / Q4_0 rows in place; avx512_attn.c:
 * Q8_0 / Q4_0 rows in place), for avx2.c's and avx512.c's tables, and the steps the attn_q*
 * ops share (static inline, built with each including file's flags: AVX2 + FMA + F16C at
 * least). Contracts are kernels.h's attn_* ops. Reached only through a level's table, after
 * dispatch.c verified the CPU. */
#ifndef CPULM_KERNELS_X86_ATTN_H
#define CPULM_KERNELS_X86_ATTN_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "format/quant.h"
void cpulm_avx2_attn_scores(int64_t d, int m, int n, const float *q, int64_t ldq, const float *k,
                            int64_t ldk, float scale, float *s, int64_t lds);
float cpulm_avx2_attn_softmax_row(int n, int lim, float *s, float *M, float *L);
void cpulm_avx2_attn_pv(int64_t d, int m, int n, const float *p, int64_t ldp, const float *v,
                        int64_t ldv, const float *a, float *o, int64_t ldo);
void cpulm_avx2_attn_merge(int64_t d, int m, const float *mc, const float *lc, const float *oc,
                           int64_t ldoc, float *M, float *L, float *o, int64_t ldo);
/* the exact path's steps; the avx512 levels call them for the head sizes
 * their own versions leave out */
void cpulm_avx2_attn_xscores(int64_t d, int m, int n, const double *qt, int64_t ldqt,
                             const float *k, int64_t ldk, float scale, float *s, int64_t lds);
void cpulm_avx2_attn_xweights(int n, float *s, float *ms, float *M);
void cpulm_avx2_attn_xpv(int64_t d, int m, int n, const float *ms, const float *vs, int64_t ldw,
                         const float *v, int64_t ldv, float *acc, int64_t lda, float *S);
/* 2^(i/32), i = 0..31, as glibc's expf tables it (avx2_attn.c; 64-byte aligned): the exact
 * expf of the avx2 and avx512 levels */
extern const double cpulm_x86_exp2_tab32[32];
/* the steps straight from Q8_0 / Q4_0 cache rows (kernels.h attn_q*) */
void cpulm_avx2_attn_qquant(int64_t d, int m, const float *q, int64_t ldq, float scale,
                            int16_t *q16, float *qs);
void cpulm_avx2_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int16_t *q16,
                             int64_t ldq, const float *qs, const uint8_t *k, uint64_t ldk, float *s,
                             int64_t lds, const uint8_t *next);
float cpulm_avx2_attn_softmaxz(int n, int lim, float *s, float *M, float *L);
void cpulm_avx2_attn_qpv(int64_t d, cpulm_dtype vt, int m, int n, const float *p, int64_t ldp,
                         const uint8_t *v, uint64_t ldv, const float *a, float *o, int64_t ldo,
                         const uint8_t *next);
/* the avx512 levels' Q8_0 / Q4_0 steps (avx512_attn.c) */
void cpulm_avx512_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int16_t *q16,
                               int64_t ldq, const float *qs, const uint8_t *k, uint64_t ldk,
                               float *s, int64_t lds, const uint8_t *next);
void cpulm_avx512_attn_qpv(int64_t d, cpulm_dtype vt, int m, int n, const float *p, int64_t ldp,
                           const uint8_t *v, uint64_t ldv, const float *a, float *o, int64_t ldo,
                           const uint8_t *next);

/* ---- shared by the attn_q* ops of avx2_attn.c and avx512_attn.c ---- */
/* llvm-mca markers for scripts/x86-mca-attnq.sh (as ARM_MCA_* in arm.h): nothing unless the
 * file is built with -DCPULM_MCA_MARKERS; then asm comment lines around one iteration of a
 * hot loop (an empty volatile asm: no instruction), and X86Q_MCA_D(d) pins the head size to
 * 64 so that a region's block loop unrolls into straight-line code as at d 64. */
#ifdef CPULM_MCA_MARKERS
#define X86Q_MCA_BEGIN(NAME) __asm__ volatile("# LLVM-MCA-BEGIN " NAME)
#define X86Q_MCA_END(NAME)   __asm__ volatile("# LLVM-MCA-END " NAME)
#define X86Q_MCA_D(d)        ((void)(d), (int64_t)64)
#else
#define X86Q_MCA_BEGIN(NAME) ((void)0)
#define X86Q_MCA_END(NAME)   ((void)0)
#define X86Q_MCA_D(d)        (d)
#endif

#define X86Q_KT   64  /* keys per pass of attn_qscores and attn_qpv (their scale buffers) */
#define X86Q_WDIM 256 /* the largest head size the SIMD ops take; others go generic */

/* A hint for the bytes [p, p + n) (no fault, no effect on results). The ops hint the rows
 * their caller reads next (`next`: the next tile of the same head) while they compute, a few
 * lines per key: attention.c's hints of whole tiles came in bursts that stalled on the miss
 * buffers. */
static inline __attribute__((always_inline)) void x86q_hint_row(const uint8_t *p, size_t n) {
    for (size_t o = 0; o < n; o += 64)
        __builtin_prefetch(p + o, 0, 3);
    __builtin_prefetch(p + n - 1, 0, 3);
}

/* The block scales of n <= X86Q_KT cache rows as f32, block-major: ds[b * X86Q_KT + j] (the
 * halves gathered, then converted 8 at a time: one vcvtph2ps per 8 keys instead of one per
 * key); entries n.. up to a multiple of 8 are 0. */
static inline __attribute__((always_inline)) void
x86q_block_scales(int64_t d, const uint8_t *x, uint64_t ld, int n, size_t bs, float *ds) {
    uint16_t h[X86Q_KT] __attribute__((aligned(16)));
    for (int64_t b = 0; b < d / 32; b++) {
        int j = 0;
        for (; j < n; j++)
            __builtin_memcpy(&h[j], x + (uint64_t)j * ld + (size_t)b * bs, 2);
        for (; j % 8; j++)
            h[j] = 0;
        for (int e = 0; e < j; e += 8)
            _mm256_storeu_ps(ds + b * X86Q_KT + e,
                             _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(h + e))));
    }
}

#endif
