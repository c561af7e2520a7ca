/* attn_simd.h: the attention tile ops every SIMD level computes the same way, written once
 * over a small vector layer (contracts in kernels.h; bit-identical to generic/attn.c):
 *   attn_scores (the tiled f32 scores as a register-blocked micro-GEMM, one fma chain per
 *   score), attn_pv, attn_merge (the chunk fold) and attn_xpv (the exact numerics' f16
 *   accumulation);
 * and the helpers of the levels' attn_q* ops. Each op is per row and per element in a fixed
 * order, so the vector width and the register blocking never change a bit.
 *
 * Included by the level files that hold attention ops, built with the level's flags: first
 * for the helpers and constants; then once more by the file that holds the level's f32 ops
 * (avx2_attn.c, avx512.c, neon_attn.c), after it defines the layer:
 *   ASV_LEVEL        the op names' level: cpulm_<ASV_LEVEL>_attn_scores, ...
 *   ASV, ASV_W       the vector type and its float lanes
 *   asv_load(p), asv_store(p, x), asv_set1(x), asv_mul(a, b), asv_fma(a, b, c) (a * b + c,
 *   fused), asv_load_n(p, nl) / asv_store_n(p, x, nl) (the first nl lanes; the others 0 /
 *   untouched), asv_round_f16(x) (to f16, nearest even, and back)
 *   asv_transpose_keys(k, ldk, nk, dc, kt): kt[c * ATT_SK_KEYS + j] = k_j[c] for j < nk
 *   (lanes past nk may hold anything, never stored), c < dc (a multiple of ASV_W)
 *   ASV_SC_ROWS, ASV_SC_CASES(X)   scores: query rows per pass, the (rows, vectors) cases
 *   ASV_PV_ROWS, ASV_PV_VECS(rows), ASV_PV_DIMS_OUTER, ASV_PV_CASES(X)   P.V: rows per block,
 *   vectors per block, dims outer or rows outer, the cases; ASV_PV_BLOCK (optional): the
 *   level's own block, att_pv_block's signature
 *   ASV_XPV_VECS(rows), ASV_XPV_SUM_MAX, ASV_XPV_CASES(X)   xpv: vectors per block of rows,
 *   the most accumulators a block may carry the weight sums in (0: never), the cases
 *   ASV_XPV_NARROW   the xpv for d % ASV_W != 0 (a level with narrower vectors, or generic)
 *   ASV_EXP1 (optional) cpulm_generic_vexpf's bits inline (the merge's scales)
 *   asv_qvals(MODE, q, v): v[0..16 / ASV_W) = 16 values of a key as floats (MODE: ATT_VQ8,
 *   16 int8 at q; ATT_VQ4L / ATT_VQ4H, the low / high nibbles of 16 bytes at q minus 8),
 *   asv_scale(p): every lane the f16 block scale at p (2 bytes, any alignment), ASV_QPV_F32:
 *   attn_qpv dequantizes the values once for more than 4 rows and takes attn_pv's product,
 *   ASV_QPV_BLOCKS (1, 2): blocks per group, ASV_QPV_HALVES (1, or 2 ASV_QPV_BLOCKS): halves
 *   of 16 dims per pass over the keys (registers per row: ASV_QPV_HALVES * 16 / ASV_W)
 *   asv_absmax(m, x) (max(m, |x|)), asv_hmax(x) (the largest lane), asv_store_q8(p, x): the
 *   32 lanes of x[0..32 / ASV_W) (each |lane| < 127.5) as int8 at p, rounded half to even.
 *   A level without asv_qvals / asv_store_q8 has its own attn_qpv / attn_qquant.
 * and for the softmax family (attn_softmax_row, attn_softmaxz):
 *   asv_add(a, b), asv_sub(a, b), asv_max(a, b) (the level's lane max), asv_hmax(x) (the
 *   largest lane), asv_exp(x) / asv_expz(x) (cpulm_generic_vexpf / _vexpzf bits per lane)
 *   ASV_MASK, asv_live(nl) (the lanes below nl, 0 < nl < ASV_W), asv_select(k, a, b) (a in
 *   k's lanes, else b), asv_keep(x, k) (x in k's lanes, else 0)
 *   ASV_REDUCE16(acc) cpulm_generic_reduce16's tree over the 16 lanes of acc[0..16/ASV_W)
 * and attn_xweights: asv_gt(a, b) (mask of a > b, ordered), asv_ord(x) (mask of x not NaN),
 *   asv_any(k) (any lane set), asv_keep_max(a, b) (b where b > a, else a: ties keep a),
 *   asv_lanes_up(x, k, fill) (lane l takes lane l - k, lanes below k fill; k = 1, 2, 4, 8 <
 *   ASV_W), asv_last(x) (the last lane), asv_expf(x) (libm's expf bits per lane)
 */
#ifndef CPULM_KERNELS_ATTN_SIMD_H
#define CPULM_KERNELS_ATTN_SIMD_H

#include <stddef.h>
#include <stdint.h>

#include "base/fp16.h"
#include "format/quant.h"
#include "kernels/blocks.h"
#include "kernels/generic/generic.h"

#define ATT_SK_KEYS 64  /* keys per transposed block of attn_scores */
#define ATT_SK_DIMS 128 /* dims per transposed block (32 KiB); longer heads chain through s */
#define ATT_QKT     64  /* keys per pass of the attn_q* ops (scores' scale buffers, value slices) */
#define ATT_QWDIM   256 /* the largest head size the SIMD attn_q* ops take; others go generic */
enum { ATT_VQ8, ATT_VQ4L, ATT_VQ4H }; /* attn_qpv's value sources (asv_qvals) */

#define ASV_INLINE static inline __attribute__((always_inline))
/* for (i = 0; i < N; i++), N <= MAX a constant once inlined, fully unrolled: the literal
 * bound lets clang unroll before inlining (else the accumulators live on the stack) */
#if defined(__clang__)
#define ASV_FOR(i, N, MAX) _Pragma("unroll") for (int i = 0; i < (MAX); i++) if (i < (N))
#else
#define ASV_FOR(i, N, MAX) _Pragma("GCC unroll 16") for (int i = 0; i < (MAX); i++) if (i < (N))
#endif

/* A hint for the bytes [p, p + n) (no fault, no effect on results). The attn_q* ops hint the
 * rows their caller reads next (`next`: the next tile of the same head) while they compute,
 * a few lines per key: attention.c's hints of whole tiles came in bursts that stalled on the
 * miss buffers. */
ASV_INLINE void att_hint_row(const uint8_t *p, size_t n) {
    for (size_t o = 0; o < n; o += 64)
        __builtin_prefetch(p + o, 0, 3);
    __builtin_prefetch(p + n - 1, 0, 3);
}

/* Bytes of a Q4_0 (q4) or Q8_0 block. */
ASV_INLINE size_t att_block_bytes(const int q4) {
    return q4 ? sizeof(cpulm_block_q4_0) : sizeof(cpulm_block_q8_0);
}

/* The attn_qscores ops' group of 4 query rows from row i (rows <= 4 real ones; a short group
 * repeats its last row, and only real rows are stored): their int8 rows at qr[r] and their
 * block scales by block, dqt[4 b + r] (a block's 4 scales one vector). */
ASV_INLINE void att_rows4(int64_t d, const int8_t *q8, const float *qd, int i, int rows,
                          const int8_t *qr[4], float *dqt) {
#pragma GCC unroll 4 /* keeps qr in registers (docs/perf-log/2026-12-03-h28d.md) */
    for (int r = 0; r < 4; r++) {
        const int ri = i + (r < rows ? r : rows - 1);
        qr[r] = q8 + (int64_t)ri * d;
        for (int64_t b = 0; b < d / 32; b++)
            dqt[4 * b + r] = qd[(int64_t)ri * (d / 32) + b];
    }
}

/* att_rows4 with the rows widened to int16 into w (4 d), for the levels whose products take
 * int16 (qr16[r] = w + r * d): once per call, against every key of the call. */
ASV_INLINE void att_rows4_w(int64_t d, const int8_t *q8, const float *qd, int i, int rows,
                            int16_t *w, const int16_t *qr16[4], float *dqt) {
    const int8_t *qr[4];
    att_rows4(d, q8, qd, i, rows, qr, dqt);
    for (int r = 0; r < 4; r++) {
        for (int64_t b = 0; b < d / 32; b++) /* a constant trip: gcc -O2 vectorizes it */
            for (int e = 0; e < 32; e++)
                w[r * d + b * 32 + e] = qr[r][b * 32 + e];
        qr16[r] = w + r * d;
    }
}

/* X(r, ...) with r the rows of a pass (4, 3, 2 or 1; R < 1 as 1) as a constant. */
#define ATT_BY_ROWS(R, X, ...)         \
    switch (R) {                       \
    case 4: X(4, __VA_ARGS__); break;  \
    case 3: X(3, __VA_ARGS__); break;  \
    case 2: X(2, __VA_ARGS__); break;  \
    default: X(1, __VA_ARGS__); break; \
    }

#if defined(__x86_64__)
#include <immintrin.h>

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

/* 2^(i/32), i = 0..31, as glibc's expf tables it (avx2_attn.c; 64-byte aligned): the exact
 * expf of the avx2 and avx512 levels */
extern const double cpulm_x86_exp2_tab32[32];

/* The x86 exact expf's results f of 8 floats x with glibc's cases for |x| >= 88: overflow
 * to inf, underflow to 0, between log(2^-150) and log(2^-149) the smallest subnormal; NaN
 * gives x + x (the levels' xexpf8 call it only when a lane is there: the usual case is one
 * branch, the four fixups were ~a quarter of attn_xweights). */
ASV_INLINE __m256 x86_xexpf_special(__m256 f, __m256 x) {
    f = _mm256_blendv_ps(f, _mm256_set1_ps(0x1p-149f),
                         _mm256_cmp_ps(x, _mm256_set1_ps(-0x1.9d1d9ep6f), _CMP_LT_OQ));
    f = _mm256_blendv_ps(f, _mm256_setzero_ps(),
                         _mm256_cmp_ps(x, _mm256_set1_ps(-0x1.9fe368p6f), _CMP_LT_OQ));
    f = _mm256_blendv_ps(f, _mm256_set1_ps(INFINITY),
                         _mm256_cmp_ps(x, _mm256_set1_ps(0x1.62e42ep6f), _CMP_GT_OQ));
    return _mm256_blendv_ps(f, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* The 2 bytes at p (an f16 block scale, any alignment) for a broadcast. */
ASV_INLINE short x86_half_at(const uint8_t *p) {
    short h;
    __builtin_memcpy(&h, p, 2);
    return h;
}

/* The block scales of n <= ATT_QKT cache rows as f32, block-major: ds[b * ATT_QKT + j] (the
 * halves gathered, then converted 8 at a time: one vcvtph2ps per 8 keys instead of one per
 * key); entries n.. up to a multiple of 8 are 0. */
ASV_INLINE void x86q_block_scales(int64_t d, const uint8_t *x, uint64_t ld, int n, size_t bs,
                                  float *ds) {
    uint16_t h[ATT_QKT] __attribute__((aligned(16)));
    for (int64_t b = 0; b < d / 32; b++) {
        int j = 0;
        for (; j < n; j++)
            __builtin_memcpy(&h[j], x + (uint64_t)j * ld + (size_t)b * bs, 2);
        for (; j % 8; j++)
            h[j] = 0;
        for (int e = 0; e < j; e += 8)
            _mm256_storeu_ps(ds + b * ATT_QKT + e,
                             _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(h + e))));
    }
}
#if defined(__AVX512F__)
/* x86q_block_scales by gathers, 16 keys a step (its scalar loop of 2-byte copies cost ~2
 * cycles per key and block, called by both attn_q* ops of every tile); rows too far apart
 * for 32-bit offsets take the scalar one. The lanes past n up to a multiple of 16 are 0.
 * The tests' emulated avx512 build (SIMDe has no gathers) takes the scalar one too. */
ASV_INLINE void x86q_block_scales512(int64_t d, const uint8_t *x, uint64_t ld, int n, size_t bs,
                                     float *ds) {
#if defined(CPULM_TESTS_EMU_SIMDE_AVX512_H)
    x86q_block_scales(d, x, ld, n, bs, ds);
#else
    if (ld > ((uint64_t)1 << 24)) {
        x86q_block_scales(d, x, ld, n, bs, ds);
        return;
    }
    const __m512i off =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32((int)ld));
    for (int64_t b = 0; b < d / 32; b++)
        for (int j = 0; j < n; j += 16) {
            const __mmask16 mk = (__mmask16)(n - j >= 16 ? 0xffff : (1u << (n - j)) - 1);
            const __m512i h = _mm512_mask_i32gather_epi32(
                _mm512_setzero_si512(), mk, _mm512_add_epi32(off, _mm512_set1_epi32(j * (int)ld)),
                (const void *)(x + (size_t)b * bs), 1);
            _mm512_storeu_ps(ds + b * ATT_QKT + j, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)));
        }
#endif
}
#endif
#endif /* __x86_64__ */

#if defined(__aarch64__)
#include "kernels/arm/arm.h"

/* ---- the arm levels' attn_qscores (neon_attn.c, dotprod_attn.c): 4 rows x 2 keys a call */

/* Block b's 32 quants of a cache row as two int8 vectors (Q4_0: nibble - 8). */
ASV_INLINE void att_arm_block_k8(const uint8_t *row, int64_t b, const int Q4, int8x16_t k[2]) {
    if (Q4) {
        arm_q4_0_unpack(row + b * (int64_t)sizeof(cpulm_block_q4_0) + 2, &k[0], &k[1]);
    } else {
        const int8_t *qs = (const int8_t *)(row + b * (int64_t)sizeof(cpulm_block_q8_0) + 2);
        k[0] = vld1q_s8(qs);
        k[1] = vld1q_s8(qs + 16);
    }
}

/* The scale of block b of a cache row as f32 (exact). */
ASV_INLINE float att_arm_key_d(const uint8_t *row, int64_t b, const int Q4) {
    uint16_t h;
    __builtin_memcpy(&h, row + (size_t)b * att_block_bytes(Q4), 2);
    return arm_fp16(h);
}

/* A level's scores of 4 query rows (x: the level's form of them; dqt: their block scales by
 * block, att_rows4) x keys kr[0], kr[1], times scv: out[t] = key t's, rows in lanes. */
typedef void (*att_arm_keys2_fn)(int64_t d, const void *x, const float *dqt, float32x4_t scv,
                                 const uint8_t *const kr[2], float32x4_t out[2]);

/* KEYS2's two att_arm_keys2_fn, KEYS2##_q8 and KEYS2##_q4 (KEYS2(d, Q4, x, dqt, scv, kr, out)
 * with Q4 a constant): each a function of its own, so that its loop holds only its own
 * pointers in general registers (inlined into the rows' loop, gcc kept two of the row
 * pointers on the stack, and the mca markers moved its code by 7%). */
#define ATT_ARM_KEYS2_FNS(KEYS2)                                                                  \
    static __attribute__((noinline)) void KEYS2##_q8(int64_t d, const void *x, const float *dqt,  \
                                                     float32x4_t scv, const uint8_t *const kr[2], \
                                                     float32x4_t out[2]) {                        \
        KEYS2(d, 0, x, dqt, scv, kr, out);                                                        \
    }                                                                                             \
    static __attribute__((noinline)) void KEYS2##_q4(int64_t d, const void *x, const float *dqt,  \
                                                     float32x4_t scv, const uint8_t *const kr[2], \
                                                     float32x4_t out[2]) {                        \
        KEYS2(d, 1, x, dqt, scv, kr, out);                                                        \
    }

/* A group of rows (rows <= 4 real ones, row r at s + r * lds) x keys 0..n-1 by keys2, 2
 * keys a call (an odd last key as both: a key's scores do not depend on the other key);
 * hints the rows at hint (NULL: none), rb bytes each. */
ASV_INLINE void att_arm_rows(int64_t d, int rows, int n, const void *x, const float *dqt,
                             float32x4_t scv, att_arm_keys2_fn keys2, const uint8_t *k,
                             uint64_t ldk, const uint8_t *hint, size_t rb, float *s, int64_t lds) {
    for (int j = 0; j < n; j += 2) {
        const int j1 = j + 1 < n ? j + 1 : j;
        if (hint) {
            att_hint_row(hint + (uint64_t)j * ldk, rb);
            att_hint_row(hint + (uint64_t)j1 * ldk, rb);
        }
        const uint8_t *kr[2] = {k + (uint64_t)j * ldk, k + (uint64_t)j1 * ldk};
        float32x4_t o[2];
        keys2(d, x, dqt, scv, kr, o);
        /* [a0 b0 a1 b1], [a2 b2 a3 b3]: row r's two scores */
        const float32x4_t lo = vzip1q_f32(o[0], o[1]), hi = vzip2q_f32(o[0], o[1]);
        const float32x2_t rr[4] = {vget_low_f32(lo), vget_high_f32(lo), vget_low_f32(hi),
                                   vget_high_f32(hi)};
        for (int r = 0; r < rows; r++)
            if (j1 > j)
                vst1_f32(s + (int64_t)r * lds + j, rr[r]);
            else
                vst1_lane_f32(s + (int64_t)r * lds + j, rr[r], 0);
    }
}
#endif /* __aarch64__ */
#endif /* CPULM_KERNELS_ATTN_SIMD_H */

/* The ops, once per level: a second inclusion, after the level's vector layer. */
#if defined(ASV_LEVEL) && !defined(CPULM_KERNELS_ATTN_SIMD_OPS)
#define CPULM_KERNELS_ATTN_SIMD_OPS
#define ASV_NAME(l, n)  cpulm_##l##_##n
#define ASV_OP(n)       ASV_NAME_(ASV_LEVEL, n) /* cpulm_<level>_<n> */
#define ASV_NAME_(l, n) ASV_NAME(l, n)

/* ---- attn_scores: R rows x V vectors of keys over dc dims of the transposed tile ---- */

/* The chains start at 0 (first) or at the partials in s, and are stored scaled (last) or as
 * partials; the last vector has nl keys. Each kt vector feeds R fmas, each query element V. */
ASV_INLINE void att_scores_gemm(int dc, const float *q, int64_t ldq, const float *kt, float scale,
                                float *s, int64_t lds, int nl, int first, int last, const int R,
                                const int V) {
    ASV acc[6][4];
    ASV_FOR(r, R, 6)
    ASV_FOR(v, V, 4)
    acc[r][v] = first        ? asv_set1(0.0f)
                : v == V - 1 ? asv_load_n(s + r * lds + ASV_W * v, nl)
                             : asv_load(s + r * lds + ASV_W * v);
    for (int c = 0; c < dc; c++) {
        ASV kv[4];
        ASV_FOR(v, V, 4) kv[v] = asv_load(kt + c * ATT_SK_KEYS + ASV_W * v);
        ASV_FOR(r, R, 6) {
            const ASV qb = asv_set1(q[r * ldq + c]);
            ASV_FOR(v, V, 4) acc[r][v] = asv_fma(qb, kv[v], acc[r][v]);
        }
    }
    const ASV vs = asv_set1(scale);
    ASV_FOR(r, R, 6)
    ASV_FOR(v, V, 4) {
        const ASV x = last ? asv_mul(acc[r][v], vs) : acc[r][v];
        if (v == V - 1)
            asv_store_n(s + r * lds + ASV_W * v, x, nl);
        else
            asv_store(s + r * lds + ASV_W * v, x);
    }
}

#define ATT_SC_CASE(R, V)                                                                         \
    att_scores_gemm(dc, q + (int64_t)i * ldq + c0, ldq, kt + 4 * ASV_W * h, scale,                \
                    s + (int64_t)i * lds + j0 + 4 * ASV_W * h, lds, nl, c0 == 0, c0 + dc == d, R, \
                    V)
/* The K tile transposed once per ATT_SK_KEYS keys and ATT_SK_DIMS dims, then passes of
 * ASV_SC_ROWS rows x 4 vectors of keys. */
void ASV_OP(attn_scores)(int64_t d, int m, int n, const float *q, int64_t ldq, const float *k,
                         int64_t ldk, float scale, float *s, int64_t lds) {
    if (d % ASV_W != 0) {
        cpulm_generic_attn_scores(d, m, n, q, ldq, k, ldk, scale, s, lds);
        return;
    }
    float kt[ATT_SK_DIMS * ATT_SK_KEYS];
    for (int j0 = 0; j0 < n; j0 += ATT_SK_KEYS) {
        const int nk = n - j0 < ATT_SK_KEYS ? n - j0 : ATT_SK_KEYS;
        for (int64_t c0 = 0; c0 < d; c0 += ATT_SK_DIMS) {
            const int dc = d - c0 < ATT_SK_DIMS ? (int)(d - c0) : ATT_SK_DIMS;
            asv_transpose_keys(k + (int64_t)j0 * ldk + c0, ldk, nk, dc, kt);
            for (int h = 0; 4 * ASV_W * h < nk; h++) { /* 4 vectors of keys per pass */
                const int nh = nk - 4 * ASV_W * h < 4 * ASV_W ? nk - 4 * ASV_W * h : 4 * ASV_W;
                const int vecs = (nh + ASV_W - 1) / ASV_W, nl = nh % ASV_W ? nh % ASV_W : ASV_W;
                for (int i = 0; i < m; i += ASV_SC_ROWS) {
                    const int rows = m - i < ASV_SC_ROWS ? m - i : ASV_SC_ROWS;
                    CPULM_BLOCKS_SWITCH(rows, vecs, ASV_SC_CASES(ATT_SC_CASE))
                }
            }
        }
    }
}
#undef ATT_SC_CASE

/* ---- attn_pv: R rows x V vectors of dims, o = o * a, then o = fma(p_j, v_j, o) by key ---- */

#ifndef ASV_PV_BLOCK
/* Every loaded value vector feeds R fmas. A lone row takes the values as memory operands (8
 * accumulators and 8 loaded vectors would not fit 16 registers). */
ASV_INLINE void att_pv_block(int n, const float *p, int64_t ldp, const float *v, int64_t ldv,
                             const float *a, float *o, int64_t ldo, const int R, const int V) {
    ASV acc[6][8];
    ASV_FOR(r, R, 6)
    ASV_FOR(c, V, 8) acc[r][c] = asv_mul(asv_load(o + r * ldo + ASV_W * c), asv_set1(a[r]));
    for (int j = 0; j < n; j++) {
        const float *vj = v + (int64_t)j * ldv;
        if (R == 1) {
            const ASV pj = asv_set1(p[j]);
            ASV_FOR(c, V, 8) acc[0][c] = asv_fma(pj, asv_load(vj + ASV_W * c), acc[0][c]);
            continue;
        }
        ASV vv[8];
        ASV_FOR(c, V, 8) vv[c] = asv_load(vj + ASV_W * c);
        ASV_FOR(r, R, 6) {
            const ASV pj = asv_set1(p[r * ldp + j]);
            ASV_FOR(c, V, 8) acc[r][c] = asv_fma(pj, vv[c], acc[r][c]);
        }
    }
    ASV_FOR(r, R, 6) ASV_FOR(c, V, 8) asv_store(o + r * ldo + ASV_W * c, acc[r][c]);
}
#define ASV_PV_BLOCK att_pv_block
#endif

#define ATT_PV_CASE(R, V) ASV_PV_BLOCK(n, p, ldp, v, ldv, a, o, ldo, R, V)
static void att_pv_rows(int rows, int vecs, int n, const float *p, int64_t ldp, const float *v,
                        int64_t ldv, const float *a, float *o, int64_t ldo) {
    CPULM_BLOCKS_SWITCH(rows, vecs, ASV_PV_CASES(ATT_PV_CASE))
}
#undef ATT_PV_CASE

/* Blocks of ASV_PV_ROWS rows x ASV_PV_VECS(rows) vectors; ASV_PV_DIMS_OUTER: every row group
 * over one slice of dims before the next (the V slice stays in L1: rows outer streamed a
 * whole 64 KiB tile at head 256 from L2 per group). */
void ASV_OP(attn_pv)(int64_t d, int m, int n, const float *p, int64_t ldp, const float *v,
                     int64_t ldv, const float *a, float *o, int64_t ldo) {
    if (d % ASV_W != 0) {
        cpulm_generic_attn_pv(d, m, n, p, ldp, v, ldv, a, o, ldo);
        return;
    }
    if (ASV_PV_DIMS_OUTER) {
        const int64_t step = ASV_W * ASV_PV_VECS(ASV_PV_ROWS);
        for (int64_t c = 0; c < d; c += step) {
            const int vecs = (int)((d - c < step ? d - c : step) / ASV_W);
            for (int i = 0; i < m; i += ASV_PV_ROWS)
                att_pv_rows(m - i < ASV_PV_ROWS ? m - i : ASV_PV_ROWS, vecs, n,
                            p + (int64_t)i * ldp, ldp, v + c, ldv, a + i, o + (int64_t)i * ldo + c,
                            ldo);
        }
        return;
    }
    for (int i = 0; i < m; i += ASV_PV_ROWS) {
        const int rows = m - i < ASV_PV_ROWS ? m - i : ASV_PV_ROWS;
        const int64_t step = ASV_W * ASV_PV_VECS(rows);
        for (int64_t c = 0; c < d; c += step)
            att_pv_rows(rows, (int)((d - c < step ? d - c : step) / ASV_W), n, p + (int64_t)i * ldp,
                        ldp, v + c, ldv, a + i, o + (int64_t)i * ldo + c, ldo);
    }
}

/* ---- attn_merge ---- */

#ifndef ASV_EXP1 /* a level's scalar cpulm_generic_vexpf, if it has one inline */
#define ASV_EXP1 cpulm_generic_vexpf
#endif

void ASV_OP(attn_merge)(int64_t d, int m, const float *mc, const float *lc, const float *oc,
                        int64_t ldoc, float *M, float *L, float *o, int64_t ldo) {
    for (int i = 0; i < m; i++) {
        if (mc[i] == -INFINITY) continue;
        float a, b;
        cpulm_attn_merge_row(&M[i], &L[i], mc[i], lc[i], &a, &b, ASV_EXP1);
        float *oi = o + (int64_t)i * ldo;
        const float *ci = oc + (int64_t)i * ldoc;
        const ASV va = asv_set1(a), vb = asv_set1(b);
        int64_t c = 0;
        for (; c + ASV_W <= d; c += ASV_W)
            asv_store(oi + c, asv_fma(asv_load(ci + c), vb, asv_mul(asv_load(oi + c), va)));
        for (; c < d; c++)
            oi[c] = fmaf(ci[c], b, oi[c] * a);
    }
}

/* ---- attn_xpv: R rows x V vectors, the f16 accumulators in registers ---- */

/* Values stay exactly f16 (rounded after every step, as attn_f16). WS: the rows' weight sums
 * S[r] = fmaf(S[r], ms, vs) ride in the key step, R chains whose FMA latency hides behind the
 * vector work (after the blocks, one chain at a time, they were ~15% of the op at d = 64). */
ASV_INLINE void att_xpv_block(int n, const float *ms, const float *vs, int64_t ldw, const float *v,
                              int64_t ldv, float *acc, int64_t lda, float *S, const int R,
                              const int V, const int WS) {
    ASV a[4][4];
    float sum[4] = {0};
    ASV_FOR(r, R, 4) {
        if (WS) sum[r] = S[r];
        ASV_FOR(c, V, 4) a[r][c] = asv_load(acc + r * lda + ASV_W * c);
    }
    for (int j = 0; j < n; j++) {
        ASV vv[4];
        ASV_FOR(c, V, 4) vv[c] = asv_load(v + (int64_t)j * ldv + ASV_W * c);
        ASV_FOR(r, R, 4) {
            const float mij = ms[r * ldw + j], vij = vs[r * ldw + j];
            if (WS) sum[r] = fmaf(sum[r], mij, vij);
            if (mij != 1.0f) { /* attn_f16 scales only when the max moves */
                const ASV vm = asv_set1(mij);
                ASV_FOR(c, V, 4) a[r][c] = asv_round_f16(asv_mul(a[r][c], vm));
            }
            const ASV vw = asv_set1(vij);
            ASV_FOR(c, V, 4) a[r][c] = asv_round_f16(asv_fma(vv[c], vw, a[r][c]));
        }
    }
    ASV_FOR(r, R, 4) {
        if (WS) S[r] = sum[r];
        ASV_FOR(c, V, 4) asv_store(acc + r * lda + ASV_W * c, a[r][c]);
    }
}

#define ATT_XPV_CASE(R, V)                                                                 \
    if (S && R * V <= ASV_XPV_SUM_MAX)                                                     \
        att_xpv_block(n, ms, vs, ldw, v, ldv, acc, lda, S, R, V, R *V <= ASV_XPV_SUM_MAX); \
    else                                                                                   \
        att_xpv_block(n, ms, vs, ldw, v, ldv, acc, lda, S, R, V, 0)
static void att_xpv_rows(int rows, int vecs, int n, const float *ms, const float *vs, int64_t ldw,
                         const float *v, int64_t ldv, float *acc, int64_t lda, float *S) {
    CPULM_BLOCKS_SWITCH(rows, vecs, ASV_XPV_CASES(ATT_XPV_CASE))
}
#undef ATT_XPV_CASE

/* Columns are independent, so blocks of rows x dims in any order give the generic bits. The
 * weight sums ride in a row group's last block when it has at most ASV_XPV_SUM_MAX
 * accumulators; otherwise four rows' chains side by side after the blocks. */
void ASV_OP(attn_xpv)(int64_t d, int m, int n, const float *ms, const float *vs, int64_t ldw,
                      const float *v, int64_t ldv, float *acc, int64_t lda, float *S) {
    if (d % ASV_W != 0) {
        ASV_XPV_NARROW(d, m, n, ms, vs, ldw, v, ldv, acc, lda, S);
        return;
    }
    for (int i = 0; i < m; i += 4) {
        const int rows = m - i < 4 ? m - i : 4, maxv = ASV_XPV_VECS(rows);
        const float *mi = ms + (int64_t)i * ldw, *vi = vs + (int64_t)i * ldw;
        int summed = 0;
        for (int64_t c = 0; c < d; c += ASV_W * maxv) {
            const int vecs = d - c < ASV_W * maxv ? (int)((d - c) / ASV_W) : maxv;
            const int last = c + ASV_W * maxv >= d && rows * vecs <= ASV_XPV_SUM_MAX;
            att_xpv_rows(rows, vecs, n, mi, vi, ldw, v + c, ldv, acc + (int64_t)i * lda + c, lda,
                         last ? S + i : NULL);
            summed |= last;
        }
        if (summed) continue;
        if (rows == 4) {
            float sr[4] = {S[i], S[i + 1], S[i + 2], S[i + 3]};
            for (int j = 0; j < n; j++)
                ASV_FOR(r, 4, 4) sr[r] = fmaf(sr[r], mi[r * ldw + j], vi[r * ldw + j]);
            ASV_FOR(r, 4, 4) S[i + r] = sr[r];
        } else
            for (int r = 0; r < rows; r++) {
                float si = S[i + r];
                for (int j = 0; j < n; j++)
                    si = fmaf(si, mi[r * ldw + j], vi[r * ldw + j]);
                S[i + r] = si;
            }
    }
}

/* ---- quantized family (attna) ---- */

#define ASV_STR_(x) #x
#define ASV_STR(x)  ASV_STR_(x)
/* llvm-mca markers as X86Q_MCA_* / ARM_MCA_*, the region named <level>_NAME */
#ifdef CPULM_MCA_MARKERS
#define ASV_MCA(EDGE, NAME) __asm__ volatile("# LLVM-MCA-" EDGE " " ASV_STR(ASV_LEVEL) "_" NAME)
#else
#define ASV_MCA(EDGE, NAME) ((void)0)
#endif

/* ---- attn_qquant: per block of 32 the largest |q|, then its 32 / ASV_W vectors to int8 ---- */
#ifdef asv_store_q8
void ASV_OP(attn_qquant)(int64_t d, int m, const float *q, int64_t ldq, int8_t *q8, float *qd) {
    for (int i = 0; i < m; i++)
        for (int64_t b = 0; b < d / 32; b++) {
            const float *x = q + (int64_t)i * ldq + b * 32;
            ASV v[32 / ASV_W], vmax = asv_set1(0.0f);
            ASV_FOR(t, 32 / ASV_W, 32 / ASV_W) {
                v[t] = asv_load(x + t * ASV_W);
                vmax = asv_absmax(vmax, v[t]);
            }
            const float amax = asv_hmax(vmax);
            const ASV vid = asv_set1(amax > 0.0f ? 127.0f / amax : 0.0f);
            ASV_FOR(t, 32 / ASV_W, 32 / ASV_W) v[t] = asv_mul(v[t], vid);
            asv_store_q8(q8 + (int64_t)i * d + b * 32, v);
            qd[(int64_t)i * (d / 32) + b] = cpulm_fp16_to_f32(cpulm_f32_to_fp16(amax / 127.0f));
        }
}
#endif

/* ---- attn_qpv: o = fma(p_ij, v_jc, o) by key, the values dequantized (exact: an f16
 * scale times a quant of at most 8 bits needs at most 19 of f32's 24 bits, so every level
 * and the generic op get the same value however they form it) ---- */
#ifdef asv_qvals /* the levels with this op */

#define ATT_QV (16 / ASV_W)      /* vectors of 16 dims */
#define ATT_QB ASV_QPV_BLOCKS    /* blocks per pass group */
#define ATT_QH ASV_QPV_HALVES    /* halves per pass: 1, or 2 ATT_QB (the group's blocks) */
#define ATT_QA (ATT_QH * ATT_QV) /* accumulators per row */

/* One pass: R rows x NH halves of 16 dims (from column c of orow[r]) over n keys, in key
 * order. Half t: block t / 2 of the pass (bs bytes on; its f16 scale of key j at
 * vs + j * ldv, read with the quants), its quants of key j at vq + j * ldv (MODE ATT_VQ8: the
 * half's 16 int8, 16 bytes on for an odd t; ATT_VQ4L / ATT_VQ4H: the low or high nibbles, flipping
 * with t); row r's weight of key j at pw[r * ldp + j]. R, NH, MODE and PF are constants at every
 * call (att_qpv_pass_any), so the key loop has no test; PF hints the rows pf + j * ldv (pfn
 * bytes) as it goes. */
ASV_INLINE void att_qpv_pass(int n, const uint8_t *vq, const uint8_t *vs, uint64_t ldv, size_t bs,
                             const float *pw, int64_t ldp, float *const orow[4], int64_t c,
                             const uint8_t *pf, size_t pfn, const int R, const int NH,
                             const int MODE, const int PF) {
    ASV acc[4][ATT_QA];
    ASV_FOR(r, R, 4) ASV_FOR(t, NH * ATT_QV, ATT_QA) acc[r][t] = asv_load(orow[r] + c + ASV_W * t);
    for (int j = 0; j < n; j++) {
        if (R == 4 && NH == ATT_QH && MODE == ATT_VQ8 && !PF) ASV_MCA("BEGIN", "attn_qpv");
        if (PF) att_hint_row(pf + (uint64_t)j * ldv, pfn);
        ASV v[ATT_QA];
        ASV_FOR(t, NH, ATT_QH) {
            const uint8_t *q = vq + (uint64_t)j * ldv + (size_t)(t / 2) * bs;
            if (MODE == ATT_VQ8)
                asv_qvals(ATT_VQ8, q + 16 * (t % 2), v + t * ATT_QV);
            else
                asv_qvals((MODE - ATT_VQ4L + t) % 2 ? ATT_VQ4H : ATT_VQ4L, q, v + t * ATT_QV);
            const ASV dj = asv_scale(vs + (uint64_t)j * ldv + (size_t)(t / 2) * bs);
            ASV_FOR(u, ATT_QV, ATT_QV) v[t * ATT_QV + u] = asv_mul(v[t * ATT_QV + u], dj);
        }
        ASV_FOR(r, R, 4) {
            const ASV pj = asv_set1(pw[r * ldp + j]);
            ASV_FOR(u, NH * ATT_QV, ATT_QA) acc[r][u] = asv_fma(pj, v[u], acc[r][u]);
        }
        if (R == 4 && NH == ATT_QH && MODE == ATT_VQ8 && !PF) ASV_MCA("END", "attn_qpv");
    }
    ASV_FOR(r, R, 4) ASV_FOR(t, NH * ATT_QV, ATT_QA) asv_store(orow[r] + c + ASV_W * t, acc[r][t]);
}

#define ATT_QPV_R(R, NH, MODE, PF) \
    att_qpv_pass(n, vq, vs, ldv, bs, pw, ldp, orow, c, pf, pfn, R, NH, MODE, PF)
#define ATT_QPV_RS(NH, MODE, PF) ATT_BY_ROWS(R, ATT_QPV_R, NH, MODE, PF)
#define ATT_QPV_MODES(NH)                                  \
    switch (mode + 4 * (pf != NULL)) {                     \
    case ATT_VQ8: ATT_QPV_RS(NH, ATT_VQ8, 0); break;       \
    case ATT_VQ4L: ATT_QPV_RS(NH, ATT_VQ4L, 0); break;     \
    case ATT_VQ4H: ATT_QPV_RS(NH, ATT_VQ4H, 0); break;     \
    case 4 + ATT_VQ8: ATT_QPV_RS(NH, ATT_VQ8, 1); break;   \
    case 4 + ATT_VQ4L: ATT_QPV_RS(NH, ATT_VQ4L, 1); break; \
    default: ATT_QPV_RS(NH, ATT_VQ4H, 1); break;           \
    }
/* att_qpv_pass with its constants chosen here, once per pass; nh: ATT_QH, or a lone last
 * block's 2. */
static void att_qpv_pass_any(int R, int nh, int mode, int n, const uint8_t *vq, const uint8_t *vs,
                             uint64_t ldv, size_t bs, const float *pw, int64_t ldp,
                             float *const orow[4], int64_t c, const uint8_t *pf, size_t pfn) {
#if ATT_QH > 2
    if (nh < ATT_QH) {
        ATT_QPV_MODES(2)
        return;
    }
#endif
    (void)nh;
    ATT_QPV_MODES(ATT_QH)
}
#undef ATT_QPV_MODES
#undef ATT_QPV_RS
#undef ATT_QPV_R

#if ASV_QPV_F32
enum { ATT_QDIMS = 128, ATT_QROWS = 96 }; /* dims per dequantized slice; rows per attn_pv */
#define ATT_QPV_PV ASV_OP(attn_pv)

/* Keys 0..nk-1 of the nb blocks at vb (block 0's quants in key 0, bs bytes apart, each
 * block's scale 2 bytes before its quants) dequantized: vf[j * 32 * nb + 32 * b + e]. */
ASV_INLINE void att_qpv_dequant(const uint8_t *vb, uint64_t ldv, size_t bs, int nb, int nk, int q4,
                                float *vf) {
    for (int j = 0; j < nk; j++)
        for (int b = 0; b < nb; b++) {
            const uint8_t *q = vb + (uint64_t)j * ldv + (size_t)b * bs;
            const ASV dj = asv_scale(q - 2);
            for (int t = 0; t < 2; t++) {
                ASV x[ATT_QV];
                if (q4)
                    asv_qvals(t ? ATT_VQ4H : ATT_VQ4L, q, x);
                else
                    asv_qvals(ATT_VQ8, q + 16 * t, x);
                ASV_FOR(u, ATT_QV, ATT_QV)
                asv_store(vf + (j * nb + b) * 32 + 16 * t + ASV_W * u, asv_mul(x[u], dj));
            }
        }
}

/* More than 4 rows (a prompt's), n > 0: each chunk's values dequantized once for all rows,
 * slice by slice of dims, then attn_pv's register-blocked product (the passes below ran
 * prompts at ~63% of the FMA rate, their weights and values per 4 rows). The first chunk's
 * attn_pv scales o by a; the later ones by 1 (exact). */
static void att_qpv_f32(int64_t d, int q4, int m, int n, const float *p, int64_t ldp,
                        const uint8_t *v, uint64_t ldv, const float *a, float *o, int64_t ldo) {
    const size_t bs = att_block_bytes(q4);
    float vf[ATT_QKT * ATT_QDIMS], ones[ATT_QROWS];
    for (int i = 0; i < ATT_QROWS; i++)
        ones[i] = 1.0f;
    for (int j0 = 0; j0 < n; j0 += ATT_QKT) {
        const int nk = n - j0 < ATT_QKT ? n - j0 : ATT_QKT;
        const uint8_t *vj0 = v + (uint64_t)j0 * ldv;
        for (int64_t c0 = 0; c0 < d; c0 += ATT_QDIMS) {
            const int dc = d - c0 < ATT_QDIMS ? (int)(d - c0) : ATT_QDIMS, b0 = (int)(c0 / 32);
            att_qpv_dequant(vj0 + (size_t)b0 * bs + 2, ldv, bs, dc / 32, nk, q4, vf);
            for (int i = 0; i < m; i += ATT_QROWS) {
                const int rows = m - i < ATT_QROWS ? m - i : ATT_QROWS;
                float *oi = o + (int64_t)i * ldo + c0;
                ATT_QPV_PV(dc, rows, nk, p + (int64_t)i * ldp + j0, ldp, vf, dc,
                           j0 == 0 ? a + i : ones, oi, ldo);
            }
        }
    }
}
#undef ATT_QPV_PV
#endif

/* o_i *= a[i], or 0 when a[i] == 0 (o_i not read: a split item's first tile then needs no
 * cleared output, whose loads missed: ~3% of generation at depth 32768); ZERO_ONLY: only
 * those rows. */
static void att_qpv_scale(int64_t d, int m, const float *a, float *o, int64_t ldo,
                          const int ZERO_ONLY) {
    for (int i = 0; i < m; i++) {
        float *oi = o + (int64_t)i * ldo;
        const ASV va = asv_set1(a[i]);
        if (a[i] == 0.0f)
            for (int64_t c = 0; c < d; c += ASV_W)
                asv_store(oi + c, asv_set1(0.0f));
        else if (!ZERO_ONLY)
            for (int64_t c = 0; c < d; c += ASV_W)
                asv_store(oi + c, asv_mul(asv_load(oi + c), va));
    }
}

/* ASV_QPV_F32 and more than 4 rows: att_qpv_f32. Otherwise o *= a first (the per-key fmas
 * follow), then per tile of ATT_QKT keys, group of ATT_QB blocks and 4 rows the passes over
 * the cache rows themselves (each key's block scale read where its quants are: a gather of
 * the tile's scales first cost ~20% of a decode's value pass, waiting on the rows' first
 * loads). */
void ASV_OP(attn_qpv)(int64_t d, cpulm_dtype vt, int m, int n, const float *p, int64_t ldp,
                      const uint8_t *v, uint64_t ldv, const float *a, float *o, int64_t ldo,
                      const uint8_t *next) {
    if (d % 32 != 0 || d > ATT_QWDIM || (vt != CPULM_DTYPE_Q8_0 && vt != CPULM_DTYPE_Q4_0)) {
        cpulm_generic_attn_qpv(d, vt, m, n, p, ldp, v, ldv, a, o, ldo, next);
        return;
    }
    const int q4 = vt == CPULM_DTYPE_Q4_0, nbt = (int)(d / 32);
    const size_t bs = att_block_bytes(q4), pfn = (size_t)nbt * bs;
#if ASV_QPV_F32
    if (m > 4 && n > 0) { /* attn_pv scales the rest */
        att_qpv_scale(d, m, a, o, ldo, 1);
        att_qpv_f32(d, q4, m, n, p, ldp, v, ldv, a, o, ldo);
        return;
    }
#endif
    att_qpv_scale(d, m, a, o, ldo, 0);
    for (int j0 = 0; j0 < n; j0 += ATT_QKT) {
        const int nk = n - j0 < ATT_QKT ? n - j0 : ATT_QKT;
        const uint8_t *vj0 = v + (uint64_t)j0 * ldv;
        for (int b0 = 0; b0 < nbt; b0 += ATT_QB) {
            const int nb = nbt - b0 < ATT_QB ? nbt - b0 : ATT_QB;
            const uint8_t *vb = vj0 + (size_t)b0 * bs + 2; /* block b0's quants in key 0 */
            for (int i = 0; i < m; i += 4) {
                const int R = m - i < 4 ? m - i : 4;
                float *orow[4];
                for (int r = 0; r < R; r++)
                    orow[r] = o + (int64_t)(i + r) * ldo;
                for (int h = 0; h < 2 * nb; h += ATT_QH) {
                    /* the first pass over the keys hints the next rows */
                    const uint8_t *pf =
                        next && b0 == 0 && h == 0 && i == 0 ? next + (uint64_t)j0 * ldv : NULL;
                    const int mode = q4 ? ATT_VQ4L + h % 2 : ATT_VQ8;
                    att_qpv_pass_any(R, 2 * nb - h < ATT_QH ? 2 * nb - h : ATT_QH, mode, nk,
                                     vb + (size_t)(h / 2) * bs + (q4 ? 0 : 16 * (h % 2)),
                                     vj0 + (size_t)(b0 + h / 2) * bs, ldv, bs,
                                     p + (int64_t)i * ldp + j0, ldp, orow, b0 * 32 + h * 16, pf,
                                     pfn);
                }
            }
        }
    }
}
#endif /* asv_qvals */
/* ---- softmax family (attnx) ---- */

#define ATT_EX(x, Z) ((Z) ? asv_expz(x) : asv_exp(x))

/* s[j..j+nl) = ex(s - mx) where j + lane < lim, else 0 (nl >= ASV_W: a whole vector);
 * returns the values, 0 past nl. Dead lanes are not exponentiated (their scores may be
 * anything: a huge one would take vexp's ldexpf path). */
ASV_INLINE ASV att_exp_live(float *s, int j, int nl, int lim, ASV vm, const int Z) {
    ASV e;
    if (j + ASV_W <= lim) {
        e = ATT_EX(asv_sub(asv_load(s + j), vm), Z);
    } else if (j >= lim) {
        e = asv_set1(0.0f);
    } else {
        const ASV_MASK live = asv_live(lim - j);
        const ASV x = asv_select(live, asv_load_n(s + j, lim - j), vm); /* dead: exp(0) */
        e = asv_keep(ATT_EX(asv_sub(x, vm), Z), live);
    }
    if (nl >= ASV_W)
        asv_store(s + j, e);
    else
        asv_store_n(s + j, e, nl);
    return e;
}

/* kernels.h's attn_softmax_row (Z = 0) or attn_softmaxz (Z = 1: vexpz): the running max,
 * then the 16 lane sums (key j in lane j % 16 of vector t = j % 16 / ASV_W, in order; the
 * lanes past n add 0), *L and *M updated; returns the old sum's scale. */
ASV_INLINE float att_softmax(int n, int lim, float *s, float *M, float *L, const int Z) {
    ASV vmax = asv_set1(*M);
    int j = 0;
    for (; j + ASV_W <= lim; j += ASV_W)
        vmax = asv_max(vmax, asv_load(s + j));
    if (j < lim) /* the last live scores; the other lanes repeat vmax */
        vmax = asv_max(vmax, asv_select(asv_live(lim - j), asv_load_n(s + j, lim - j), vmax));
    const float mx = asv_hmax(vmax);
    const ASV vm = asv_set1(mx);
    ASV acc[4];
    ASV_FOR(t, 16 / ASV_W, 4) acc[t] = asv_set1(0.0f);
    for (j = 0; j + 16 <= n; j += 16)
        ASV_FOR(t, 16 / ASV_W, 4)
    acc[t] = asv_add(acc[t], att_exp_live(s, j + ASV_W * t, ASV_W, lim, vm, Z));
    ASV_FOR(t, 16 / ASV_W, 4)
    if (j + ASV_W * t < n)
        acc[t] = asv_add(acc[t], att_exp_live(s, j + ASV_W * t, n - j - ASV_W * t, lim, vm, Z));
    /* -inf (nothing seen yet) would make vexp's range reduction NaN: its weight is 0 */
    const float x = *M - mx;
    const float a = *M == -INFINITY || (Z && x < -87.0f) ? 0.0f : ASV_EXP1(x);
    *L = fmaf(*L, a, ASV_REDUCE16(acc));
    *M = mx;
    return a;
}
#undef ATT_EX

float ASV_OP(attn_softmax_row)(int n, int lim, float *s, float *M, float *L) {
    return att_softmax(n, lim, s, M, L, 0);
}

float ASV_OP(attn_softmaxz)(int n, int lim, float *s, float *M, float *L) {
    return att_softmax(n, lim, s, M, L, 1);
}
/* ---- attn_xweights: ASV_W keys at once ---- */

/* The running max before each key is a prefix max (ties keep the earlier value, as "x > M"
 * does), so every key's exponent is known before any expf. A tail is padded with -inf. */
void ASV_OP(attn_xweights)(int n, float *s, float *ms, float *M) {
    const ASV ninf = asv_set1(-INFINITY), one = asv_set1(1.0f);
    float m = *M;
    for (int j = 0; j < n; j += ASV_W) {
        const int nl = n - j;
        const ASV x =
            nl >= ASV_W ? asv_load(s + j) : asv_select(asv_live(nl), asv_load_n(s + j, nl), ninf);
        const ASV vm = asv_set1(m);
        ASV w = one, e;
        /* the usual group: no key above the running max (NaN is not), so it stays m, every
         * key's weight is expf(x - m) and its factor 1: no prefix max */
        if (!asv_any(asv_gt(x, vm))) {
            e = asv_expf(asv_sub(x, vm));
        } else {
            /* a NaN score never becomes the max ("x > M" is false): -inf in the scan */
            ASV p = asv_select(asv_ord(x), x, ninf);
            /* the steps written out: a loop kept its shift in a register (~15% of the avx512
             * op on stories260K's scores) */
            p = asv_keep_max(asv_lanes_up(p, 1, ninf), p);
            p = asv_keep_max(asv_lanes_up(p, 2, ninf), p);
#if ASV_W > 4
            p = asv_keep_max(asv_lanes_up(p, 4, ninf), p);
#endif
#if ASV_W > 8
            p = asv_keep_max(asv_lanes_up(p, 8, ninf), p);
#endif
            const ASV incl = asv_keep_max(vm, p), prev = asv_lanes_up(incl, 1, vm);
            const ASV_MASK up = asv_gt(x, prev);
            const ASV f = asv_expf(asv_select(up, asv_sub(prev, x), asv_sub(x, prev)));
            w = asv_select(up, f, one);
            e = asv_select(up, one, f);
            m = asv_last(incl);
        }
        if (nl >= ASV_W) {
            asv_store(ms + j, w);
            asv_store(s + j, e);
        } else {
            asv_store_n(ms + j, w, nl);
            asv_store_n(s + j, e, nl);
        }
    }
    *M = m;
}
#endif /* ASV_LEVEL */
