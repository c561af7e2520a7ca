/* x86_attnq.h: steps shared by the avx2 and avx512 attn_q* ops (avx2_attnq.c,
 * avx512_attnq.c): the cache-row hint and the block-scale gather of a tile. Static inline,
 * built with each including file's flags (AVX2 + F16C at least). */
#ifndef CPULM_KERNELS_X86_ATTNQ_H
#define CPULM_KERNELS_X86_ATTNQ_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

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
