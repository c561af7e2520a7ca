/* avx512_attn.c: the avx512 level's attention steps straight from Q8_0 / Q4_0 cache rows
 * (contracts in kernels.h, attn_q*: scores and P.V; attn_qquant and attn_softmaxz stay the
 * avx2 ones), built with the avx512 flags and reached only through cpulm_kernels_avx512 (the
 * avx512vnni level inherits them).
 *
 * Why: generation at depth is these two ops (one query row per head against every cached
 * key), and on the avx2 ops a key block of 4 rows is 8 vpmaddwd plus a 256-bit reduction
 * tree, and P.V 32 fmas per key at d 64. Here a key block is one 512-bit register of int16
 * (4 vpmaddwd for 4 rows), the reduction tree is shared by 4 keys, and P.V is 16 fmas per
 * key with both blocks of a d-64 row in one pass over the keys. The same bits as the avx2
 * ops, by the same argument (docs/CORRECTNESS.md; registers blocked over rows and dims only,
 * never over keys).
 *
 * The loops of constant count (rows, keys of a group, blocks, accumulators) carry
 * `#pragma GCC unroll`: at -O2 GCC did not unroll them and kept their __m512 arrays on the
 * stack, every product and accumulator through memory (generation at depth 32768 on Zen 4:
 * 1.7x slower, docs/perf-log/2026-12-03-h28d.md).
 */
#if defined(__x86_64__)
#include <immintrin.h>

#include "format/quant.h"
#include "kernels/attn_simd.h"
#include "x86.h"

#define A512_INLINE static inline __attribute__((always_inline))
#define KT          ATT_QKT
#define VF_LD       64 /* floats per key in qpv's converted values (2 blocks) */

/* ---- scores ---- */

/* Block b of a cache row: its 32 quants as int16, in element order. Q4 is a constant. */
A512_INLINE __m512i block_k16(const uint8_t *row, int64_t b, const int Q4) {
    if (!Q4)
        return _mm512_cvtepi8_epi16(
            _mm256_loadu_si256((const __m256i *)(row + b * (int64_t)sizeof(cpulm_block_q8_0) + 2)));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m128i q =
        _mm_loadu_si128((const __m128i *)(row + b * (int64_t)sizeof(cpulm_block_q4_0) + 2));
    const __m256i lohi = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(q, m4)),
                                                 _mm_and_si128(_mm_srli_epi16(q, 4), m4), 1);
    return _mm512_cvtepi8_epi16(_mm256_sub_epi8(lohi, _mm256_set1_epi8(8))); /* -8..7 */
}

/* 4 rows (query block at qr[r] + c) against one key block k: the int32 sums per 128-bit
 * lane as [r0 r1 r2 r3], 4 lanes still to be added (unpacks and adds: exact in any order). */
A512_INLINE __m512i rows4(const int16_t *const qr[4], int64_t c, __m512i k) {
    __m512i p[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        p[r] = _mm512_madd_epi16(_mm512_loadu_si512((const void *)(qr[r] + c)), k);
    const __m512i t01 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(p[0], p[1]), _mm512_unpackhi_epi32(p[0], p[1]));
    const __m512i t23 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(p[2], p[3]), _mm512_unpackhi_epi32(p[2], p[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
}

/* Lane pairs (0+1, 2+3) of a and b: [a01 a23 b01 b23]. */
A512_INLINE __m512i lanes_pair(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x88), _mm512_shuffle_i32x4(a, b, 0xdd));
}

/* Scores of 4 rows x 4 keys (rows kr[t]) over every block: lanes [k0: r0..r3 | k1 | k2 |
 * k3], times qsv; ds: the keys' block scales (block b at ds[b * KT + t]). */
A512_INLINE __m512 scores_4x4(int64_t d, const int Q4, const int16_t *const qr[4], __m512 qsv,
                              const uint8_t *const kr[4], const float *ds) {
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < X86Q_MCA_D(d) / 32; b++) {
        __m512i x[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            x[t] = rows4(qr, b * 32, block_k16(kr[t], b, Q4));
        const __m512i tot = lanes_pair(lanes_pair(x[0], x[1]), lanes_pair(x[2], x[3]));
        const __m512 dk =
            _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_loadu_ps(ds + b * KT)));
        acc = _mm512_fmadd_ps(dk, _mm512_cvtepi32_ps(tot), acc);
    }
    return _mm512_mul_ps(acc, qsv);
}

/* Rows i.. (rows <= 4) x keys 0..n-1 (n <= KT), 4 keys at a time; the first rows' pass hints
 * the rows at next (NULL: none). */
A512_INLINE void scores_rows(int64_t d, const int Q4, int i, int rows, int n, const int16_t *q16,
                             int64_t ldq, const float *qs, const uint8_t *k, uint64_t ldk,
                             const float *ds, float *s, int64_t lds, const uint8_t *next) {
    const int16_t *qr[4];
    float qsr[4];
    att_rows4(q16, ldq, qs, i, rows, qr, qsr);
    const __m512 qsv = _mm512_broadcast_f32x4(_mm_loadu_ps(qsr));
    /* [k0: r0..r3 | k1 | k2 | k3] -> [r0: k0..k3 | r1 | r2 | r3] */
    const __m512i rowsidx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const size_t rb = (size_t)(d / 32) * att_block_bytes(Q4);
    for (int j = 0; j < n; j += 4) {
        if (!Q4) X86Q_MCA_BEGIN("avx512_attn_qscores");
        const uint8_t *kr[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            if (i == 0 && next) att_hint_row(next + (uint64_t)(j + t) * ldk, rb);
            kr[t] = k + (uint64_t)(j + t < n ? j + t : n - 1) * ldk;
        }
        /* the scales past n are 0 (x86q_block_scales): their lanes are not stored */
        const __m512 y = _mm512_permutexvar_ps(rowsidx, scores_4x4(d, Q4, qr, qsv, kr, ds + j));
        const __mmask8 live = (__mmask8)(n - j < 4 ? (1u << (n - j)) - 1 : 15u);
        for (int r = 0; r < rows; r++) { /* row r: lanes 4r..4r+3 */
            const __m128 x = r == 0   ? _mm512_castps512_ps128(y)
                             : r == 1 ? _mm512_extractf32x4_ps(y, 1)
                             : r == 2 ? _mm512_extractf32x4_ps(y, 2)
                                      : _mm512_extractf32x4_ps(y, 3);
            _mm_mask_storeu_ps(s + (int64_t)(i + r) * lds + j, live, x);
        }
        if (!Q4) X86Q_MCA_END("avx512_attn_qscores");
    }
}

A512_INLINE void qscores_tile(int64_t d, const int Q4, int m, int n, const int16_t *q16,
                              int64_t ldq, const float *qs, const uint8_t *k, uint64_t ldk,
                              float *s, int64_t lds, const uint8_t *next) {
    float ds[ATT_QWDIM / 32 * KT];
    x86q_block_scales512(d, k, ldk, n, att_block_bytes(Q4), ds);
    for (int i = 0; i < m; i += 4)
        scores_rows(d, Q4, i, m - i < 4 ? m - i : 4, n, q16, ldq, qs, k, ldk, ds, s, lds, next);
}

/* ---- scores of many rows (prompt items): the keys transposed once per pass ----
 * A prompt item has 128 rows (32 tokens x a KV head's query heads): the 4 x 4 blocks above
 * convert each key block again per 4 rows and reduce every (row, key) dot across lanes.
 * Here 16 keys' blocks are transposed once into int16 pairs (lane t: key t), so a row's
 * broadcast query pair against them adds into 16 finished key dots, 4 rows x 4 vectors of
 * keys per register block. The same bits: a block's int32 dot is exact in any order, and
 * per (row, key) acc = fma(dk, dot, acc) runs in block order from 0, then times qs. */

#define RT_MIN_ROWS 8 /* fewer rows (generation: one token's heads) keep the 4 x 4 blocks */

/* int32 lanes += the pairwise int16 products of a and b: vpmaddwd + vpaddd, or with VNNI
 * one vpdpwssd (by asm: this file is built without -mavx512vnni and the op is reached only
 * through the avx512vnni table; the emulated test build has SIMDe's). */
A512_INLINE __m512i dot_pairs(__m512i acc, __m512i a, __m512i b, const int VNNI) {
    if (!VNNI) return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
#if defined(CPULM_TESTS_EMU_SIMDE_AVX512_H)
    return _mm512_dpwssd_epi32(acc, a, b);
#else
    __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
#endif
}

/* Keys 0..n-1 (n <= KT; past n: key n-1 again, never stored) transposed: block b's pair p
 * of vector g (keys 16g..16g+15) at kt[(b * 16 + p) * nv + g]; hints the rows at next. */
A512_INLINE void keys_t(int64_t d, const int Q4, int n, int nv, const uint8_t *k, uint64_t ldk,
                        const uint8_t *next, __m512i *kt) {
    const size_t rb = (size_t)(d / 32) * att_block_bytes(Q4);
    for (int g = 0; g < nv; g++) {
        const uint8_t *kr[16];
        for (int t = 0; t < 16; t++) {
            const int j = 16 * g + t;
            if (next && j < n) att_hint_row(next + (uint64_t)j * ldk, rb);
            kr[t] = k + (uint64_t)(j < n ? j : n - 1) * ldk;
        }
        for (int64_t b = 0; b < d / 32; b++) {
            __m512 x[16], xt[16]; /* int16 pairs moved as 32-bit lanes: no arithmetic */
#pragma GCC unroll 16
            for (int t = 0; t < 16; t++)
                x[t] = _mm512_castsi512_ps(block_k16(kr[t], b, Q4));
            x86_transpose16_ps(x, xt); /* xt[p] lane t: key t's pair p */
#pragma GCC unroll 16
            for (int p = 0; p < 16; p++)
                kt[(b * 16 + p) * nv + g] = _mm512_castps_si512(xt[p]);
        }
    }
}

/* Rows qr[0..3] (rows real ones) x V vectors of keys from vector v0: per block the int32
 * dots in registers, then the float step with the running acc in s (masked to the n keys). */
A512_INLINE void rt_block(int64_t d, const int16_t *const qr[4], const float qsr[4], int rows,
                          const __m512i *kt, int nv, int v0, int n, const float *ds, float *s,
                          int64_t lds, const int V, const int VNNI) {
    for (int64_t b = 0; b < d / 32; b++) {
        __m512i acc[4][4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                acc[r][v] = _mm512_setzero_si512();
        for (int p = 0; p < 16; p++) {
            const __m512i *kp = kt + (b * 16 + p) * nv + v0;
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                int32_t qp;
                __builtin_memcpy(&qp, qr[r] + b * 32 + 2 * p, sizeof qp);
                const __m512i qb = _mm512_set1_epi32(qp);
#pragma GCC unroll 4
                for (int v = 0; v < V; v++)
                    acc[r][v] = dot_pairs(acc[r][v], qb, kp[v], VNNI);
            }
        }
        for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
            for (int v = 0; v < V; v++) {
                const int j = 16 * (v0 + v);
                const __mmask16 mk = (__mmask16)(n - j >= 16 ? 0xffffu : (1u << (n - j)) - 1);
                float *sp = s + (int64_t)r * lds + j;
                const __m512 prev = b == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mk, sp);
                __m512 x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, ds + b * KT + j),
                                           _mm512_cvtepi32_ps(acc[r][v]), prev);
                if (b == d / 32 - 1) x = _mm512_mul_ps(x, _mm512_set1_ps(qsr[r]));
                _mm512_mask_storeu_ps(sp, mk, x);
            }
    }
}

/* m rows x keys 0..n-1 (n <= KT) by rt_block, the keys transposed once. */
A512_INLINE void qscores_rt(int64_t d, const int Q4, int m, int n, const int16_t *q16, int64_t ldq,
                            const float *qs, const uint8_t *k, uint64_t ldk, float *s, int64_t lds,
                            const uint8_t *next, const int VNNI) {
    float ds[ATT_QWDIM / 32 * KT];
    __m512i kt[ATT_QWDIM / 32 * 16 * (KT / 16)];
    const int nv = (n + 15) / 16;
    x86q_block_scales512(d, k, ldk, n, att_block_bytes(Q4), ds);
    keys_t(d, Q4, n, nv, k, ldk, next, kt);
    for (int i = 0; i < m; i += 4) {
        const int rows = m - i < 4 ? m - i : 4;
        const int16_t *qr[4];
        float qsr[4];
        att_rows4(q16, ldq, qs, i, rows, qr, qsr);
        float *si = s + (int64_t)i * lds;
        int v0 = 0;
        for (; v0 + 4 <= nv; v0 += 4)
            rt_block(d, qr, qsr, rows, kt, nv, v0, n, ds, si, lds, 4, VNNI);
        switch (nv - v0) {
        case 3: rt_block(d, qr, qsr, rows, kt, nv, v0, n, ds, si, lds, 3, VNNI); break;
        case 2: rt_block(d, qr, qsr, rows, kt, nv, v0, n, ds, si, lds, 2, VNNI); break;
        case 1: rt_block(d, qr, qsr, rows, kt, nv, v0, n, ds, si, lds, 1, VNNI); break;
        default: break;
        }
    }
}

/* The op of both levels; VNNI a constant. */
A512_INLINE void qscores_op(int64_t d, cpulm_dtype kt, int m, int n, const int16_t *q16,
                            int64_t ldq, const float *qs, const uint8_t *k, uint64_t ldk, float *s,
                            int64_t lds, const uint8_t *next, const int VNNI) {
    if (d % 32 != 0 || d > ATT_QWDIM || (kt != CPULM_DTYPE_Q8_0 && kt != CPULM_DTYPE_Q4_0)) {
        cpulm_generic_attn_qscores(d, kt, m, n, q16, ldq, qs, k, ldk, s, lds, next);
        return;
    }
    const int q4 = kt == CPULM_DTYPE_Q4_0;
    for (int j = 0; j < n; j += KT) {
        const int nk = n - j < KT ? n - j : KT;
        const uint8_t *kj = k + (uint64_t)j * ldk, *nj = next ? next + (uint64_t)j * ldk : NULL;
        if (m >= RT_MIN_ROWS && q4)
            qscores_rt(d, 1, m, nk, q16, ldq, qs, kj, ldk, s + j, lds, nj, VNNI);
        else if (m >= RT_MIN_ROWS)
            qscores_rt(d, 0, m, nk, q16, ldq, qs, kj, ldk, s + j, lds, nj, VNNI);
        else if (q4)
            qscores_tile(d, 1, m, nk, q16, ldq, qs, kj, ldk, s + j, lds, nj);
        else
            qscores_tile(d, 0, m, nk, q16, ldq, qs, kj, ldk, s + j, lds, nj);
    }
}

void cpulm_avx512_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int16_t *q16,
                               int64_t ldq, const float *qs, const uint8_t *k, uint64_t ldk,
                               float *s, int64_t lds, const uint8_t *next) {
    qscores_op(d, kt, m, n, q16, ldq, qs, k, ldk, s, lds, next, 0);
}

/* The avx512vnni level's (its table): the prompt rows' dots by vpdpwssd. */
void cpulm_avx512vnni_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int16_t *q16,
                                   int64_t ldq, const float *qs, const uint8_t *k, uint64_t ldk,
                                   float *s, int64_t lds, const uint8_t *next) {
    qscores_op(d, kt, m, n, q16, ldq, qs, k, ldk, s, lds, next, 1);
}

/* ---- P.V ---- */

/* Block b of value row q as two f32 vectors (elements 0-15, 16-31). Q4 is a constant. */
A512_INLINE void block_vals(const uint8_t *row, int64_t b, const int Q4, __m512 *v0, __m512 *v1) {
    if (!Q4) {
        const uint8_t *q = row + b * (int64_t)sizeof(cpulm_block_q8_0) + 2;
        *v0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q)));
        *v1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + 16))));
        return;
    }
    const __m128i m4 = _mm_set1_epi8(0x0f), b8 = _mm_set1_epi8(8);
    const __m128i x =
        _mm_loadu_si128((const __m128i *)(row + b * (int64_t)sizeof(cpulm_block_q4_0) + 2));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(x, m4), b8);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(x, 4), m4), b8);
    *v0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo));
    *v1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi));
}

/* One pass: R rows x NB blocks (from block b0: columns b0 * 32 ..) over keys 0..n-1 in
 * order, o = fma(w, v, o); row r's weight for key j and block b0 + bb at
 * w[(r * nbt + b0 + bb) * KT + j]. SC: scale the rows by a[r] first (the call's first keys).
 * Q4 = 2: the values are floats already, key j's blocks b0.. at vf + j * VF_LD (vf_fill).
 * R, NB, Q4, SC are constants at every call (pv_pass_any). Hints pf + j * ldv (pfn bytes). */
A512_INLINE void pv_pass(int n, const uint8_t *v, uint64_t ldv, const float *vf, int64_t b0,
                         int nbt, const float *w, const float *a, float *const orow[4],
                         const uint8_t *pf, size_t pfn, const int R, const int NB, const int Q4,
                         const int SC) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int h = 0; h < 2 * NB; h++) {
            const __m512 x = _mm512_loadu_ps(orow[r] + b0 * 32 + h * 16);
            acc[r][h] = SC ? _mm512_mul_ps(x, _mm512_set1_ps(a[r])) : x;
        }
    for (int j = 0; j < n; j++) {
        if (R == 4 && NB == 2 && !Q4 && !SC) X86Q_MCA_BEGIN("avx512_attn_qpv");
        if (pf) att_hint_row(pf + (uint64_t)j * ldv, pfn);
        __m512 val[4];
#pragma GCC unroll 2
        for (int bb = 0; bb < NB; bb++)
            if (Q4 == 2) {
                val[2 * bb] = _mm512_loadu_ps(vf + j * VF_LD + bb * 32);
                val[2 * bb + 1] = _mm512_loadu_ps(vf + j * VF_LD + bb * 32 + 16);
            } else {
                block_vals(v + (uint64_t)j * ldv, b0 + bb, Q4, &val[2 * bb], &val[2 * bb + 1]);
            }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 2
            for (int bb = 0; bb < NB; bb++) {
                const __m512 wj = _mm512_set1_ps(w[(r * nbt + b0 + bb) * KT + j]);
                acc[r][2 * bb] = _mm512_fmadd_ps(wj, val[2 * bb], acc[r][2 * bb]);
                acc[r][2 * bb + 1] = _mm512_fmadd_ps(wj, val[2 * bb + 1], acc[r][2 * bb + 1]);
            }
        if (R == 4 && NB == 2 && !Q4 && !SC) X86Q_MCA_END("avx512_attn_qpv");
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int h = 0; h < 2 * NB; h++)
            _mm512_storeu_ps(orow[r] + b0 * 32 + h * 16, acc[r][h]);
}

#define PV(R, NB, Q4, SC) pv_pass(n, v, ldv, vf, b0, nbt, w, a, orow, pf, pfn, R, NB, Q4, SC)
#define PV_R(NB, Q4, SC)  ATT_BY_ROWS(R, PV, NB, Q4, SC)
#define PV_Q(NB, SC)    \
    if (q4 == 2) {      \
        PV_R(NB, 2, SC) \
    } else if (q4) {    \
        PV_R(NB, 1, SC) \
    } else {            \
        PV_R(NB, 0, SC) \
    }

/* pv_pass with its constants chosen here, once per pass (q4 2: values from vf). */
static void pv_pass_any(int R, int nb, int q4, int sc, int n, const uint8_t *v, uint64_t ldv,
                        const float *vf, int64_t b0, int nbt, const float *w, const float *a,
                        float *const orow[4], const uint8_t *pf, size_t pfn) {
    if (nb == 2) {
        if (sc) PV_Q(2, 1) else PV_Q(2, 0)
    } else {
        if (sc) PV_Q(1, 1) else PV_Q(1, 0)
    }
}
#undef PV_Q
#undef PV_R
#undef PV

/* Rows i.. (R <= 4) x keys j0.. (nk <= KT) x blocks [bs, be): the weights p * dv once, then
 * passes of up to 2 blocks (4 registers per row) over the keys; the first pass of the first
 * rows hints next. vf (or NULL): the keys' blocks bs..bs+1 as floats (vf_fill; be <= bs + 2). */
static void qpv_rows(int64_t d, int q4, int i, int R, int j0, int nk, int bs, int be,
                     const float *p, int64_t ldp, const uint8_t *v, uint64_t ldv, const float *vf,
                     const float *dv, const float *a, float *o, int64_t ldo, const uint8_t *next) {
    const int nbt = (int)(d / 32);
    float w[4 * ATT_QWDIM / 32 * KT];
    float *orow[4];
    for (int r = 0; r < R; r++) {
        const float *pr = p + (int64_t)(i + r) * ldp + j0;
        for (int b = bs; b < be; b++) {
            float *wb = w + (r * nbt + b) * KT;
            const float *db = dv + b * KT;
            int j = 0;
            for (; j + 16 <= nk; j += 16)
                _mm512_storeu_ps(wb + j,
                                 _mm512_mul_ps(_mm512_loadu_ps(pr + j), _mm512_loadu_ps(db + j)));
            if (j < nk) {
                const __mmask16 mk = (__mmask16)((1u << (nk - j)) - 1);
                _mm512_mask_storeu_ps(wb + j, mk,
                                      _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, pr + j),
                                                    _mm512_maskz_loadu_ps(mk, db + j)));
            }
        }
        orow[r] = o + (int64_t)(i + r) * ldo;
    }
    const size_t pfn = (size_t)nbt * att_block_bytes(q4);
    for (int b0 = bs; b0 < be; b0 += 2) {
        const uint8_t *pf = next && i == 0 && b0 == 0 ? next + (uint64_t)j0 * ldv : NULL;
        pv_pass_any(R, be - b0 < 2 ? 1 : 2, vf ? 2 : q4, j0 == 0, nk, v + (uint64_t)j0 * ldv, ldv,
                    vf, b0, nbt, w, a + i, orow, pf, pfn);
    }
}

/* Keys 0..nk-1's blocks b0..b0+nb-1 (nb <= 2) as floats: key j's at vf + j * VF_LD. */
static void vf_fill(const uint8_t *v, uint64_t ldv, int nk, int b0, int nb, int q4, float *vf) {
    for (int j = 0; j < nk; j++)
        for (int bb = 0; bb < nb; bb++) {
            __m512 x0, x1;
            block_vals(v + (uint64_t)j * ldv, b0 + bb, q4, &x0, &x1);
            _mm512_storeu_ps(vf + j * VF_LD + bb * 32, x0);
            _mm512_storeu_ps(vf + j * VF_LD + bb * 32 + 16, x1);
        }
}

void cpulm_avx512_attn_qpv(int64_t d, cpulm_dtype vt, int m, int n, const float *p, int64_t ldp,
                           const uint8_t *v, uint64_t ldv, const float *a, float *o, int64_t ldo,
                           const uint8_t *next) {
    if (d % 32 != 0 || d > ATT_QWDIM || (vt != CPULM_DTYPE_Q8_0 && vt != CPULM_DTYPE_Q4_0) ||
        n <= 0) {
        cpulm_generic_attn_qpv(d, vt, m, n, p, ldp, v, ldv, a, o, ldo, next);
        return;
    }
    const int q4 = vt == CPULM_DTYPE_Q4_0, nbt = (int)(d / 32);
    float dv[ATT_QWDIM / 32 * KT];
    for (int j0 = 0; j0 < n; j0 += KT) { /* o *= a rides in the first keys' passes */
        const int nk = n - j0 < KT ? n - j0 : KT;
        const uint8_t *vj = v + (uint64_t)j0 * ldv;
        x86q_block_scales512(d, vj, ldv, nk, att_block_bytes(q4), dv);
        if (m <= 4) { /* one group of rows: the values converted in its passes */
            qpv_rows(d, q4, 0, m, j0, nk, 0, nbt, p, ldp, v, ldv, NULL, dv, a, o, ldo, next);
            continue;
        }
        /* more: each pair of blocks converted once for all the rows (int8 -> f32 was a
         * third of the pass's work when every group of 4 rows converted it again) */
        float vf[KT * VF_LD];
        for (int b0 = 0; b0 < nbt; b0 += 2) {
            const int be = nbt - b0 < 2 ? nbt : b0 + 2;
            vf_fill(vj, ldv, nk, b0, be - b0, q4, vf);
            for (int i = 0; i < m; i += 4)
                qpv_rows(d, q4, i, m - i < 4 ? m - i : 4, j0, nk, b0, be, p, ldp, v, ldv, vf, dv, a,
                         o, ldo, next);
        }
    }
}
#endif
