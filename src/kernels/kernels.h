/* kernels.h: the cpulm_kernels function table, the only interface between model code and
 * SIMD code.
 *
 * One table per ISA level (generic, avx2, avx512, avx512vnni, neon, dotprod, i8mm, sve).
 * The generic table is complete: every entry is non-NULL, written in portable C, and is the
 * oracle the tests compare every other level against. A level's NULL entry inherits from the
 * level below it. cpulm_kernels_get() merges the levels the running CPU supports (CPUID and
 * xgetbv on x86, HWCAP on ARM), once, honouring CPULM_ISA=<level> to force a lower level.
 *
 * Contracts: shapes and types were validated at model load, so kernels return void and
 * only assert preconditions in debug builds. Row lengths are multiples of the block size.
 * Pointers need only their element's natural alignment (4 bytes for f32 and Q8_K rows, 2
 * for fp16/bf16 and the other block types); no entry assumes vector alignment.
 */
#ifndef CPULM_KERNELS_H
#define CPULM_KERNELS_H

#include <stdint.h>

#include "../quant.h"

/* s = dot(x, y) over n elements; x is a row of the weight type, y a row of its
 * vec_dot_type (cpulm_dtype_traits.vec_dot_type) made by from_float. */
typedef void (*cpulm_vec_dot_fn)(int64_t n, float *s, const void *x, const void *y);
/* Converts n floats into a row of the type (activation quantization). */
typedef void (*cpulm_from_float_fn)(const float *x, void *y, int64_t n);
/* Converts a row of the type into n floats. */
typedef void (*cpulm_to_float_fn)(const void *x, float *y, int64_t n);

/* ---- repacked weights (src/model/repack.c) ----
 * A weight whose row count is a multiple of CPULM_PACK_ROWS can be repacked at load into
 * groups of 16 rows, interleaved block by block so one 512-bit load holds 4 bytes of each
 * of the 16 rows. Per group and per 32-element block b (blocks in order, groups contiguous):
 *   Q4_0: 16 fp16 scales (row order), then 4 x 64 bytes: chunk t, lane r (4 bytes) = qs[4t..4t+3]
 *         of row r (low nibbles: elements 4t..4t+3, high nibbles: 16+4t..16+4t+3); 288 bytes.
 *   Q8_0: 16 fp16 scales, then 8 x 64 bytes: chunk s, lane r = qs[4s..4s+3] of row r; 544 bytes.
 * A group takes exactly the bytes of its 16 rows in the original layout.
 * Activations for these kernels are Q8_0 rows followed by per-block extras (see
 * cpulm_pack_act_extras): the block scale as a float and the sum of the block's quants. */
#define CPULM_PACK_ROWS 16

/* Extras of an activation row of n elements (Q8_0), starting at the first 4-byte boundary
 * after the Q8_0 blocks, nb = n/32 entries each: float d[nb] (block scales), int32
 * c4[nb] = -8 * sum(qs), int32 c8[nb] = -128 * sum(qs) (the bias corrections of unsigned
 * Q4_0 nibbles and sign-flipped Q8_0 quants). */
static inline uint64_t cpulm_pack_act_extras_offset(int64_t n) {
    return ((uint64_t)(n / 32) * sizeof(cpulm_block_q8_0) + 3) / 4 * 4;
}
static inline uint64_t cpulm_pack_act_row_bytes(int64_t n) {
    return cpulm_pack_act_extras_offset(n) + (uint64_t)(n / 32) * 12;
}

/* s[j * ld + r] = dot(row r of the 16-row group w, activation row j), r < 16, j < nt
 * (nt >= 1); n is the row length; act rows (cpulm_pack_act_row_bytes each, act_stride
 * apart) carry their extras. Every (r, j) element is computed with the same arithmetic
 * whatever nt is, so batching never changes a result. */
typedef void (*cpulm_gemm_fn)(int64_t n, int nt, float *s, int64_t ld, const void *w,
                              const uint8_t *act, uint64_t act_stride);

typedef struct cpulm_kernels {
    const char *name; /* "generic", "avx2", ... */
    cpulm_vec_dot_fn vec_dot[CPULM_DTYPE_COUNT];       /* indexed by weight type */
    cpulm_from_float_fn from_float[CPULM_DTYPE_COUNT]; /* indexed by target type */
    cpulm_to_float_fn to_float[CPULM_DTYPE_COUNT];     /* indexed by source type */

    /* ---- f32 vector ops used by the forward pass ---- */
    /* y[i] = x[i] * w[i] / sqrt(mean(x^2) + eps) */
    void (*rms_norm)(int64_t n, float *y, const float *x, const float *w, float eps);
    /* y[i] = silu(g[i]) * u[i] */
    void (*swiglu)(int64_t n, float *y, const float *g, const float *u);
    /* x[i] = exp(x[i] - max) / sum; returns nothing; n >= 1 */
    void (*softmax)(int64_t n, float *x);
    /* y += a * x */
    void (*axpy)(int64_t n, float *y, float a, const float *x);
    /* sum(x[i] * y[i]) over f32 */
    float (*dot_f32)(int64_t n, const float *x, const float *y);

    /* ---- f16 accumulators (attention over an F16 KV cache, reference numerics) ---- */
    /* y[i] = f16(f32(y[i]) * v) */
    void (*scale_f16)(int64_t n, uint16_t *y, float v);
    /* y[i] = f16(f32(y[i]) + f32(x[i]) * v) */
    void (*mad_f16)(int64_t n, uint16_t *y, const uint16_t *x, float v);
    /* One query over n >= 1 keys of an F16 cache, with the reference's F16 attention
     * numerics: scores s_j = dot(k_j, q16) * scale (q16 is the query rounded to f16), online
     * softmax, and the weighted sum of V accumulated in f16 (rounded after every key, as
     * scale_f16 / mad_f16 do). out[0..d) = that sum / the softmax denominator. Key j's
     * d halves start at k + j * stride bytes, value j's at v + j * stride. */
    void (*attn_f16)(int64_t d, int64_t n, const uint16_t *q16, const uint8_t *k,
                     const uint8_t *v, uint64_t stride, float scale, float *out);

    /* ---- repacked-weight GEMM (see CPULM_PACK_ROWS), indexed by weight type: Q4_0, Q8_0 ---- */
    cpulm_gemm_fn gemm_x16[CPULM_DTYPE_COUNT];
} cpulm_kernels;

extern const cpulm_kernels cpulm_kernels_generic;
/* Per-ISA tables: defined only when the build compiled that level's file (the build sets
 * CPULM_HAVE_<LEVEL>=1); referenced only from dispatch.c. NULL entries inherit. */
extern const cpulm_kernels cpulm_kernels_avx2, cpulm_kernels_avxvnni, cpulm_kernels_avx512,
    cpulm_kernels_avx512vnni, cpulm_kernels_avx512bf16;
extern const cpulm_kernels cpulm_kernels_neon, cpulm_kernels_dotprod, cpulm_kernels_i8mm,
    cpulm_kernels_sve;

/* The merged table for this CPU (cached after the first call; thread-safe). */
const cpulm_kernels *cpulm_kernels_get(void);
/* Every level this CPU offers, merged the same way, lowest first (generic is [0]).
 * Returns the count written (at most cap). For tests and benchmarks. */
int cpulm_kernels_levels(const cpulm_kernels **out, int cap);
/* Why CPULM_ISA was not honoured ("CPULM_ISA=foo: unknown level; using avx2"), or NULL
 * when it was honoured or is unset. Borrowed, static. */
const char *cpulm_kernels_isa_warning(void);
/* The CPU features detection saw, e.g. "x86_64: avx2 fma f16c avx512f/bw/vl/dq avx512vnni"
 * (for `cpulm info --cpu`). Borrowed, static. */
const char *cpulm_cpu_features(void);

#endif
