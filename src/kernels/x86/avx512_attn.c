/* avx512_attn.c: the avx512 level's attention tile ops (contracts in kernels.h), built with
 * the avx512 flags and reached only through cpulm_kernels_avx512 (the avx512vnni level
 * inherits them): first the scores straight from Q8_0 / Q4_0 cache rows (attn_qscores;
 * attn_qquant stays the avx2 one), then the f32 tiles, attn_qpv and the exact numerics
 * (attn_simd.h's ops over the 16-lane layer, attn_xscores, attn_xpv at head size 8).
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
#include <string.h>

#include "format/quant.h"
#include "kernels/attn_simd.h"
#include "x86.h"

#define A512_INLINE static inline __attribute__((always_inline))
#define KT          ATT_QKT

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

/* 4 rows' int32 lane sums p[r] to [r0 r1 r2 r3] per 128-bit lane, 4 lanes still to be added
 * (unpacks and adds: exact in any order). */
A512_INLINE __m512i rows_tree(const __m512i p[4]) {
    const __m512i t01 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(p[0], p[1]), _mm512_unpackhi_epi32(p[0], p[1]));
    const __m512i t23 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(p[2], p[3]), _mm512_unpackhi_epi32(p[2], p[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
}

/* 4 rows (query block at qr[r] + c) against one key block k, by rows_tree. */
A512_INLINE __m512i rows4(const int16_t *const qr[4], int64_t c, __m512i k) {
    __m512i p[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        p[r] = _mm512_madd_epi16(_mm512_loadu_si512((const void *)(qr[r] + c)), k);
    return rows_tree(p);
}

/* Lane pairs (0+1, 2+3) of a and b: [a01 a23 b01 b23]. */
A512_INLINE __m512i lanes_pair(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x88), _mm512_shuffle_i32x4(a, b, 0xdd));
}

/* Block b's scales of the 4 keys at kr[t] as f32 */
A512_INLINE __m128 scales4(const uint8_t *const kr[4], int64_t b, const int Q4) {
    const size_t o = (size_t)b * att_block_bytes(Q4);
    return _mm_cvtph_ps(_mm_setr_epi16(x86_half_at(kr[0] + o), x86_half_at(kr[1] + o),
                                       x86_half_at(kr[2] + o), x86_half_at(kr[3] + o), 0, 0, 0, 0));
}

/* Scores of 4 rows x 4 keys (rows kr[t]) over every block: lanes [k0: r0..r3 | k1 | k2 |
 * k3], times scv; the rows' block scales by block in dqt (att_rows4). The keys' block scales
 * are read with their quants (a gather of the tile's scales first waited on the rows' first
 * loads: a decode layer 0.94-0.96x the time without). */
A512_INLINE __m512 scores_4x4(int64_t d, const int Q4, const int16_t *const qr[4], const float *dqt,
                              __m512 scv, const uint8_t *const kr[4]) {
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < X86Q_MCA_D(d) / 32; b++) {
        __m512i x[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            x[t] = rows4(qr, b * 32, block_k16(kr[t], b, Q4));
        const __m512i tot = lanes_pair(lanes_pair(x[0], x[1]), lanes_pair(x[2], x[3]));
        const __m512 dk = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(scales4(kr, b, Q4)));
        const __m512 dq = _mm512_broadcast_f32x4(_mm_loadu_ps(dqt + 4 * b));
        acc = _mm512_fmadd_ps(_mm512_mul_ps(dk, dq), _mm512_cvtepi32_ps(tot), acc);
    }
    return _mm512_mul_ps(acc, scv);
}

/* Keys j..j+3 of the call's n (past n: key n - 1 again, never stored) at kr; hints the rows
 * at next (NULL: none). */
A512_INLINE void keys4(int j, int n, const uint8_t *k, uint64_t ldk, const uint8_t *next, size_t rb,
                       const uint8_t *kr[4]) {
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++) {
        if (next) att_hint_row(next + (uint64_t)(j + t) * ldk, rb);
        kr[t] = k + (uint64_t)(j + t < n ? j + t : n - 1) * ldk;
    }
}

/* Lanes [k0: r0..r3 | k1 | k2 | k3] of keys j.. stored to rows i..i+rows-1 of s. */
A512_INLINE void store4x4(__m512 x, int i, int rows, int j, int n, float *s, int64_t lds) {
    /* [k0: r0..r3 | k1 | k2 | k3] -> [r0: k0..k3 | r1 | r2 | r3] */
    const __m512i rowsidx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const __m512 y = _mm512_permutexvar_ps(rowsidx, x);
    const __mmask8 live = (__mmask8)(n - j < 4 ? (1u << (n - j)) - 1 : 15u);
    for (int r = 0; r < rows; r++) { /* row r: lanes 4r..4r+3 */
        const __m128 v = r == 0   ? _mm512_castps512_ps128(y)
                         : r == 1 ? _mm512_extractf32x4_ps(y, 1)
                         : r == 2 ? _mm512_extractf32x4_ps(y, 2)
                                  : _mm512_extractf32x4_ps(y, 3);
        _mm_mask_storeu_ps(s + (int64_t)(i + r) * lds + j, live, v);
    }
}

/* ---- scores with the keys transposed once per call (prompt items; every call at VNNI) ----
 * The 4 x 4 blocks above convert each key block again per 4 rows and reduce every (row,
 * key) dot across lanes. Here 16 keys' blocks are transposed once so that lane t holds key
 * t, and a row's broadcast query slot against them adds into 16 finished key dots, 4 rows x
 * 4 vectors of keys per register block. Two forms of a slot:
 * - int16 pairs (the avx512 level): per block 16 slots of 2 widened quants, vpmaddwd +
 *   vpaddd with the widened query pair;
 * - unsigned bytes (the avx512vnni level): per block 8 slots of 4 quants + bias (Q8_0: k ^
 *   0x80, k + 128; Q4_0: the stored nibbles, k + 8), one vpdpbusd with the int8 query's 4
 *   bytes; the dot starts from -bias * sum(q) of the row's block, so it ends exact.
 * The same bits: a block's int32 dot is exact in any order, and per (row, key) acc =
 * fma(dk * dq, dot, acc) runs in block order from 0, then times sc. */

#define RT_MIN_ROWS 8 /* fewer rows (generation: one token's heads) keep the 4 x 4 blocks */

/* acc + the sums of 4 products of unsigned u and signed s bytes per lane: vpdpbusd (by asm:
 * this file is built without -mavx512vnni and the unsigned form is reached only through the
 * avx512vnni table; the emulated test build has SIMDe's). No saturation: a lane adds at most
 * 8 * 4 * 255 * 128 to a start of at most 32 * 128 * 128 in magnitude. */
A512_INLINE __m512i dp_bytes(__m512i acc, __m512i u, __m512i s) {
#if defined(CPULM_TESTS_EMU_SIMDE_AVX512_H)
    return _mm512_dpbusd_epi32(acc, u, s);
#else
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
    return acc;
#endif
}

/* Blocks b and b + 1 of a cache row as unsigned quants + bias, 64 bytes (ONE: block b only,
 * the upper half 0). Q8: [b | b + 1] in element order; Q4: [lo b | lo b+1 | hi b | hi b+1]
 * by 16 bytes (lo: the low nibbles, elements 0-15; hi: 16-31). */
A512_INLINE __m512i key2_u8(const uint8_t *row, int64_t b, const int Q4, const int ONE) {
    if (!Q4) {
        const uint8_t *p = row + b * (int64_t)sizeof(cpulm_block_q8_0) + 2;
        const __m256i m = _mm256_set1_epi8((char)0x80);
        const __m256i x = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)p), m);
        if (ONE) return _mm512_inserti64x4(_mm512_setzero_si512(), x, 0);
        const __m256i y = _mm256_xor_si256(
            _mm256_loadu_si256((const __m256i *)(p + sizeof(cpulm_block_q8_0))), m);
        return _mm512_inserti64x4(_mm512_castsi256_si512(x), y, 1);
    }
    const uint8_t *p = row + b * (int64_t)sizeof(cpulm_block_q4_0) + 2;
    const __m128i x = _mm_loadu_si128((const __m128i *)p);
    const __m256i xy =
        ONE ? _mm256_inserti128_si256(_mm256_setzero_si256(), x, 0)
            : _mm256_inserti128_si256(
                  _mm256_castsi128_si256(x),
                  _mm_loadu_si128((const __m128i *)(p + sizeof(cpulm_block_q4_0))), 1);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i lo = _mm256_and_si256(xy, m4),
                  hi = _mm256_and_si256(_mm256_srli_epi16(xy, 4), m4);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* ---- generation's scores at the avx512vnni level: two key blocks a register ----
 * With 4 rows a call, transposing 16 keys (above) costs more than it saves: here, as in the
 * 4 x 4 blocks, a key's pair of blocks is one register (key2_u8) and each row's vpdpbusd
 * with its two query blocks (q2_rows' order) sums 64 products, starting from the row's
 * -bias * sum(q) in one lane of each block; rows4's tree reduces the lanes for two blocks
 * at once. */

/* The group's rows (att_rows4) for key2_u8, per block pair p: row r's 64 signed bytes at
 * qq[(p * 4 + r) * 64] in key2_u8's order (0 past the row), and its start cs[p * 4 + r]:
 * -bias * sum(q) of block 2p in lane 0 and of block 2p + 1 in a lane of that block's (Q8:
 * 8, Q4: 4), 0 elsewhere. */
A512_INLINE void q2_rows(int64_t d, const int Q4, const int8_t *const qr[4], int8_t *qq,
                         __m512i *cs) {
    const int64_t nb = d / 32, bias = Q4 ? 8 : 128;
    int32_t c[(ATT_QWDIM / 64) * 4][16];
    memset(c, 0, sizeof(int32_t) * 16 * (size_t)((nb + 1) / 2) * 4);
    if (nb % 2) /* the last pair's second block: 0 */
        for (int r = 0; r < 4; r++) {
            int8_t *o = qq + ((nb / 2) * 4 + r) * 64;
            memset(o + (Q4 ? 16 : 32), 0, Q4 ? 16 : 32);
            if (Q4) memset(o + 48, 0, 16);
        }
    for (int64_t b = 0; b < nb; b++)
        for (int r = 0; r < 4; r++) {
            const int8_t *x = qr[r] + b * 32;
            int8_t *o = qq + ((b / 2) * 4 + r) * 64;
            if (Q4) { /* 16-byte quarters: lo b, lo b+1, hi b, hi b+1 */
                memcpy(o + (b % 2) * 16, x, 16);
                memcpy(o + 32 + (b % 2) * 16, x + 16, 16);
            } else {
                memcpy(o + (b % 2) * 32, x, 32);
            }
            int32_t sum = 0;
            for (int e = 0; e < 32; e++)
                sum += x[e];
            c[(b / 2) * 4 + r][(b % 2) * (Q4 ? 4 : 8)] = (int32_t)(-bias * sum);
        }
    for (int64_t p = 0; p < (nb + 1) / 2 * 4; p++)
        cs[p] = _mm512_loadu_si512((const void *)c[p]);
}

/* 4 rows (q2_rows' pair at qp, starts at cs) x one key's pair u: per 128-bit lane [r0 r1 r2
 * r3] sums, as rows4. */
A512_INLINE __m512i rows4_u8(const int8_t *qp, const __m512i *cs, __m512i u) {
    __m512i x[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        x[r] = dp_bytes(cs[r], u, _mm512_load_si512((const void *)(qp + 64 * r)));
    return rows_tree(x);
}

/* Two keys' lane sums a, b to [a: block 0 | a: block 1 | b: block 0 | b: block 1] (Q8: the
 * blocks' lanes are 0-1 and 2-3; Q4: 0, 2 and 1, 3). */
A512_INLINE __m512i blocks_pair(__m512i a, __m512i b, const int Q4) {
    if (!Q4) return lanes_pair(a, b);
    return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x44), _mm512_shuffle_i32x4(a, b, 0xee));
}

/* Scores of 4 rows x 4 keys as scores_4x4, on q2_rows' bytes and starts. */
A512_INLINE __m512 scores_4x4_u8(int64_t d, const int Q4, const int8_t *qq, const __m512i *cs,
                                 const float *dqt, __m512 scv, const uint8_t *const kr[4]) {
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const int64_t nb = X86Q_MCA_D(d) / 32;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += 2) {
        const int one = b + 1 == nb;
        __m512i x[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            x[t] = rows4_u8(qq + (b / 2) * 256, cs + (b / 2) * 4,
                            one ? key2_u8(kr[t], b, Q4, 1) : key2_u8(kr[t], b, Q4, 0));
        /* [k0 b | k0 b+1 | k1 b | k1 b+1], the same of k2, k3: to block b's and b+1's */
        const __m512i y01 = blocks_pair(x[0], x[1], Q4), y23 = blocks_pair(x[2], x[3], Q4);
        const __m512i t0 = _mm512_shuffle_i32x4(y01, y23, 0x88);
        const __m512 dk0 =
            _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(scales4(kr, b, Q4)));
        const __m512 dq0 = _mm512_broadcast_f32x4(_mm_loadu_ps(dqt + 4 * b));
        acc = _mm512_fmadd_ps(_mm512_mul_ps(dk0, dq0), _mm512_cvtepi32_ps(t0), acc);
        if (one) break;
        const __m512i t1 = _mm512_shuffle_i32x4(y01, y23, 0xdd);
        const __m512 dk1 =
            _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(scales4(kr, b + 1, Q4)));
        const __m512 dq1 = _mm512_broadcast_f32x4(_mm_loadu_ps(dqt + 4 * (b + 1)));
        acc = _mm512_fmadd_ps(_mm512_mul_ps(dk1, dq1), _mm512_cvtepi32_ps(t1), acc);
    }
    return _mm512_mul_ps(acc, scv);
}

/* Rows i.. (rows <= 4) x keys 0..n-1 (any n), 4 keys at a time, by scores_4x4 on the rows
 * widened to int16 or (VNNI) by scores_4x4_u8 on their bytes; the first rows' pass hints the
 * rows at next (NULL: none). */
A512_INLINE void scores_rows(int64_t d, const int Q4, int i, int rows, int n, const int8_t *q8,
                             const float *qd, float sc, const uint8_t *k, uint64_t ldk, float *s,
                             int64_t lds, const uint8_t *next, const int VNNI) {
    const int8_t *qr[4];
    const int16_t *qr16[4];
    int16_t w[4 * ATT_QWDIM];
    _Alignas(64) int8_t qq[(ATT_QWDIM / 64) * 4 * 64];
    __m512i cs[(ATT_QWDIM / 64) * 4];
    float dqt[4 * (ATT_QWDIM / 32)];
    if (VNNI) {
        att_rows4(d, q8, qd, i, rows, qr, dqt);
        q2_rows(d, Q4, qr, qq, cs);
    } else {
        att_rows4_w(d, q8, qd, i, rows, w, qr16, dqt);
    }
    const __m512 scv = _mm512_set1_ps(sc);
    const size_t rb = (size_t)(d / 32) * att_block_bytes(Q4);
    for (int j = 0; j < n; j += 4) {
        if (!Q4 && !VNNI) X86Q_MCA_BEGIN("avx512_attn_qscores");
        const uint8_t *kr[4];
        keys4(j, n, k, ldk, i == 0 ? next : NULL, rb, kr);
        store4x4(VNNI ? scores_4x4_u8(d, Q4, qq, cs, dqt, scv, kr)
                      : scores_4x4(d, Q4, qr16, dqt, scv, kr),
                 i, rows, j, n, s, lds);
        if (!Q4 && !VNNI) X86Q_MCA_END("avx512_attn_qscores");
    }
}

A512_INLINE void qscores_tile(int64_t d, const int Q4, int m, int n, const int8_t *q8,
                              const float *qd, float sc, const uint8_t *k, uint64_t ldk, float *s,
                              int64_t lds, const uint8_t *next, const int VNNI) {
    for (int i = 0; i < m; i += 4)
        scores_rows(d, Q4, i, m - i < 4 ? m - i : 4, n, q8, qd, sc, k, ldk, s, lds, next, VNNI);
}

/* Keys 0..n-1 (n <= KT; past n: key n-1 again, never stored) transposed: unit u's slot c of
 * vector g (keys 16g..16g+15) at kt[(u * 16 + c) * nv + g]; a unit is a block of 16 int16
 * pair slots, or (U8) a pair of blocks of 8 byte slots each in key2_u8's order. Hints the
 * rows at next. */
A512_INLINE void keys_t(int64_t d, const int Q4, int n, int nv, const uint8_t *k, uint64_t ldk,
                        const uint8_t *next, __m512i *kt, const int U8) {
    const int64_t nb = d / 32;
    const size_t rb = (size_t)nb * att_block_bytes(Q4);
    for (int g = 0; g < nv; g++) {
        const uint8_t *kr[16];
        for (int t = 0; t < 16; t++) {
            const int j = 16 * g + t;
            if (next && j < n) att_hint_row(next + (uint64_t)j * ldk, rb);
            kr[t] = k + (uint64_t)(j < n ? j : n - 1) * ldk;
        }
        for (int64_t u = 0; u < (U8 ? (nb + 1) / 2 : nb); u++) {
            __m512 x[16], xt[16]; /* slots moved as 32-bit lanes: no arithmetic */
            const int one = U8 && 2 * u + 1 == nb;
#pragma GCC unroll 16
            for (int t = 0; t < 16; t++)
                x[t] = _mm512_castsi512_ps(!U8   ? block_k16(kr[t], u, Q4)
                                           : one ? key2_u8(kr[t], 2 * u, Q4, 1)
                                                 : key2_u8(kr[t], 2 * u, Q4, 0));
            x86_transpose16_ps(x, xt); /* xt[c] lane t: key t's slot c */
#pragma GCC unroll 16
            for (int c = 0; c < 16; c++)
                kt[(u * 16 + c) * nv + g] = _mm512_castps_si512(xt[c]);
        }
    }
}

/* The query rows of rt_block: int8 (qr8, U8, with each block's start c0[4 * b + r] = -bias
 * * sum(q)) or widened to int16 (qr16), and their block scales by block (dqt). */
typedef struct rt_rows {
    const int8_t *qr8[4];
    const int16_t *qr16[4];
    int32_t c0[4 * (ATT_QWDIM / 32)];
    float dqt[4 * (ATT_QWDIM / 32)];
    int16_t w[4 * ATT_QWDIM];
} rt_rows;

A512_INLINE void rt_rows_of(int64_t d, const int Q4, const int8_t *q8, const float *qd, int i,
                            int rows, rt_rows *x, const int U8) {
    if (!U8) {
        att_rows4_w(d, q8, qd, i, rows, x->w, x->qr16, x->dqt);
        return;
    }
    att_rows4(d, q8, qd, i, rows, x->qr8, x->dqt);
    for (int64_t b = 0; b < d / 32; b++)
        for (int r = 0; r < 4; r++) {
            int32_t sum = 0;
            for (int e = 0; e < 32; e++)
                sum += x->qr8[r][b * 32 + e];
            x->c0[4 * b + r] = -(Q4 ? 8 : 128) * sum;
        }
}

/* Rows x->...[0..3] (rows real ones) x V vectors of keys from vector v0: per block the int32
 * dots in registers, then the float step with the running acc in s (masked to the n keys). */
A512_INLINE void rt_block(int64_t d, const int Q4, const rt_rows *x, float sc, int rows,
                          const __m512i *kt, int nv, int v0, int n, const float *ds, float *s,
                          int64_t lds, const int V, const int U8) {
    for (int64_t b = 0; b < d / 32; b++) {
        __m512i acc[4][4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                acc[r][v] = U8 ? _mm512_set1_epi32(x->c0[4 * b + r]) : _mm512_setzero_si512();
        for (int e = 0; e < (U8 ? 8 : 16); e++) {
            /* the slot's place in its unit (key2_u8's order for bytes) */
            const int64_t c = !U8 ? e : !Q4 ? (b % 2) * 8 + e : (e / 4) * 8 + (b % 2) * 4 + e % 4;
            const __m512i *kp = kt + ((U8 ? b / 2 : b) * 16 + c) * nv + v0;
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                int32_t qs; /* the slot's 4 int8 or 2 int16 query elements */
                if (U8)
                    __builtin_memcpy(&qs, x->qr8[r] + b * 32 + 4 * e, sizeof qs);
                else
                    __builtin_memcpy(&qs, x->qr16[r] + b * 32 + 2 * e, sizeof qs);
                const __m512i qb = _mm512_set1_epi32(qs);
#pragma GCC unroll 4
                for (int v = 0; v < V; v++)
                    acc[r][v] = U8 ? dp_bytes(acc[r][v], kp[v], qb)
                                   : _mm512_add_epi32(acc[r][v], _mm512_madd_epi16(qb, kp[v]));
            }
        }
        for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
            for (int v = 0; v < V; v++) {
                const int j = 16 * (v0 + v);
                const __mmask16 mk = (__mmask16)(n - j >= 16 ? 0xffffu : (1u << (n - j)) - 1);
                float *sp = s + (int64_t)r * lds + j;
                const __m512 prev = b == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mk, sp);
                const __m512 w = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, ds + b * KT + j),
                                               _mm512_set1_ps(x->dqt[4 * b + r]));
                __m512 y = _mm512_fmadd_ps(w, _mm512_cvtepi32_ps(acc[r][v]), prev);
                if (b == d / 32 - 1) y = _mm512_mul_ps(y, _mm512_set1_ps(sc));
                _mm512_mask_storeu_ps(sp, mk, y);
            }
    }
}

/* m rows x keys 0..n-1 (n <= KT) by rt_block, the keys transposed once. */
A512_INLINE void qscores_rt(int64_t d, const int Q4, int m, int n, const int8_t *q8,
                            const float *qd, float sc, const uint8_t *k, uint64_t ldk, float *s,
                            int64_t lds, const uint8_t *next, const int U8) {
    float ds[ATT_QWDIM / 32 * KT];
    __m512i kt[ATT_QWDIM / 32 * 16 * (KT / 16)];
    rt_rows x;
    const int nv = (n + 15) / 16;
    x86q_block_scales512(d, k, ldk, n, att_block_bytes(Q4), ds);
    keys_t(d, Q4, n, nv, k, ldk, next, kt, U8);
    for (int i = 0; i < m; i += 4) {
        const int rows = m - i < 4 ? m - i : 4;
        rt_rows_of(d, Q4, q8, qd, i, rows, &x, U8);
        float *si = s + (int64_t)i * lds;
        int v0 = 0;
        for (; v0 + 4 <= nv; v0 += 4)
            rt_block(d, Q4, &x, sc, rows, kt, nv, v0, n, ds, si, lds, 4, U8);
        switch (nv - v0) {
        case 3: rt_block(d, Q4, &x, sc, rows, kt, nv, v0, n, ds, si, lds, 3, U8); break;
        case 2: rt_block(d, Q4, &x, sc, rows, kt, nv, v0, n, ds, si, lds, 2, U8); break;
        case 1: rt_block(d, Q4, &x, sc, rows, kt, nv, v0, n, ds, si, lds, 1, U8); break;
        default: break;
        }
    }
}

/* The op of both levels; VNNI a constant (int8 products by vpdpbusd). Generation's rows are
 * made ready once per call, not per KT keys: q2_rows per 64 keys was a third of the avx512vnni
 * decode scores' time (a decode layer at depth 4096: 0.92-0.94x the time once per call). */
A512_INLINE void qscores_op(int64_t d, cpulm_dtype kt, int m, int n, const int8_t *q8,
                            const float *qd, float sc, const uint8_t *k, uint64_t ldk, float *s,
                            int64_t lds, const uint8_t *next, const int VNNI) {
    if (d % 32 != 0 || d > ATT_QWDIM || (kt != CPULM_DTYPE_Q8_0 && kt != CPULM_DTYPE_Q4_0)) {
        cpulm_generic_attn_qscores(d, kt, m, n, q8, qd, sc, k, ldk, s, lds, next);
        return;
    }
    const int q4 = kt == CPULM_DTYPE_Q4_0;
    if (m < RT_MIN_ROWS) { /* generation: the rows made ready once for all n keys */
        if (q4)
            qscores_tile(d, 1, m, n, q8, qd, sc, k, ldk, s, lds, next, VNNI);
        else
            qscores_tile(d, 0, m, n, q8, qd, sc, k, ldk, s, lds, next, VNNI);
        return;
    }
    for (int j = 0; j < n; j += KT) {
        const int nk = n - j < KT ? n - j : KT;
        const uint8_t *kj = k + (uint64_t)j * ldk, *nj = next ? next + (uint64_t)j * ldk : NULL;
        if (q4)
            qscores_rt(d, 1, m, nk, q8, qd, sc, kj, ldk, s + j, lds, nj, VNNI);
        else
            qscores_rt(d, 0, m, nk, q8, qd, sc, kj, ldk, s + j, lds, nj, VNNI);
    }
}

void cpulm_avx512_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int8_t *q8,
                               const float *qd, float sc, const uint8_t *k, uint64_t ldk, float *s,
                               int64_t lds, const uint8_t *next) {
    qscores_op(d, kt, m, n, q8, qd, sc, k, ldk, s, lds, next, 0);
}

/* The avx512vnni level's (its table): every call's dots by vpdpbusd. */
void cpulm_avx512vnni_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int8_t *q8,
                                   const float *qd, float sc, const uint8_t *k, uint64_t ldk,
                                   float *s, int64_t lds, const uint8_t *next) {
    qscores_op(d, kt, m, n, q8, qd, sc, k, ldk, s, lds, next, 1);
}

/* ======== f32 tiles and the exact numerics (attn_scores ... attn_x*) ======== */

/* The lanes below rem (0 < rem < 16). */
A512_INLINE __mmask16 tail_mask(int64_t rem) {
    return (__mmask16)((1u << rem) - 1);
}

/* ---- the vector layer of attn_simd.h (attn_scores, attn_pv, attn_merge, attn_xpv, the
 * softmax family, attn_xweights) ---- */

/* kt[c * ATT_SK_KEYS + j] = k_j[c] for j < nk (lanes past nk repeat key nk - 1 and are never
 * stored), c < dc (a multiple of 16), by 16 x 16 register transposes. */
static void asv_transpose_keys(const float *k, int64_t ldk, int nk, int dc, float *kt) {
    for (int j0 = 0; j0 < nk; j0 += 16)
        for (int c = 0; c < dc; c += 16) {
            __m512 r[16], t[16];
            _Pragma("GCC unroll 16") for (int x = 0; x < 16; x++) r[x] =
                _mm512_loadu_ps(k + (int64_t)(j0 + x < nk ? j0 + x : nk - 1) * ldk + c);
            x86_transpose16_ps(r, t);
            float *o = kt + (int64_t)c * ATT_SK_KEYS + j0;
            _Pragma("GCC unroll 16") for (int x = 0; x < 16; x++)
                _mm512_storeu_ps(o + x * ATT_SK_KEYS, t[x]);
        }
}

/* ---- attn_xpv at head size 8: two rows per register ----
 * attn_xpv's recurrence per row and key (scale and round when the max moved, fused
 * multiply-add and round, the weight sum's fmaf), rows 2p and 2p + 1 in the halves of one
 * vector and up to 8 rows per pass: a row's chain of f16 roundings is ~15 cycles per key,
 * and the 256-bit op took 4 rows per pass (stories260K's verification batches were
 * latency-bound there, 2026-12-03). A pair scales when either row's max moved: the other's
 * factor is 1, and an f16 value times 1 rounds to itself. */
#define XPV8_ROUND(x) \
    _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
static inline __attribute__((always_inline)) __m512 xpv8_pair(float lo, float hi) {
    return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(lo), _mm512_set1_ps(hi));
}

/* Up to 8 rows as P pairs (row 2p in the low half of a[p], 2p + 1 in the high half) and their
 * weight sums: loaded, stepped key by key, stored. */
typedef struct xpv8_pairs {
    __m512 a[4];
    float sum[8];
} xpv8_pairs;

static inline __attribute__((always_inline)) void xpv8_pairs_load(xpv8_pairs *b, int rows,
                                                                  const float *acc, int64_t lda,
                                                                  const float *S, const int P) {
    for (int r = 0; r < 8; r++)
        b->sum[r] = r < rows ? S[r] : 0.0f;
    ASV_FOR(p, P, 4) {
        const __m256 lo = _mm256_loadu_ps(acc + 2 * p * lda);
        const __m256 hi =
            2 * p + 1 < rows ? _mm256_loadu_ps(acc + (2 * p + 1) * lda) : _mm256_setzero_ps();
        b->a[p] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)),
                                                      _mm256_castps_pd(hi), 1));
    }
}

/* Key j (its value row in both halves of vv). */
static inline __attribute__((always_inline)) void xpv8_pairs_key(xpv8_pairs *b, int rows, int j,
                                                                 const float *ms, const float *vs,
                                                                 int64_t ldw, __m512 vv,
                                                                 const int P) {
    ASV_FOR(p, P, 4) {
        const int r0 = 2 * p, r1 = 2 * p + 1 < rows ? 2 * p + 1 : 2 * p;
        const float m0 = ms[r0 * ldw + j], m1 = ms[r1 * ldw + j];
        const float w0 = vs[r0 * ldw + j], w1 = vs[r1 * ldw + j];
        b->sum[r0] = fmaf(b->sum[r0], m0, w0);
        b->sum[r0 + 1] = fmaf(b->sum[r0 + 1], m1, w1); /* r1 == r0: a dead lane's sum */
        if (m0 != 1.0f || m1 != 1.0f)
            b->a[p] = XPV8_ROUND(_mm512_mul_ps(b->a[p], xpv8_pair(m0, m1)));
        b->a[p] = XPV8_ROUND(_mm512_fmadd_ps(vv, xpv8_pair(w0, w1), b->a[p]));
    }
}

static inline __attribute__((always_inline)) void
xpv8_pairs_store(const xpv8_pairs *b, int rows, float *acc, int64_t lda, float *S, const int P) {
    ASV_FOR(p, P, 4) {
        _mm256_storeu_ps(acc + 2 * p * lda, _mm512_castps512_ps256(b->a[p]));
        if (2 * p + 1 < rows)
            _mm256_storeu_ps(acc + (2 * p + 1) * lda, _mm256_castpd_ps(_mm512_extractf64x4_pd(
                                                          _mm512_castps_pd(b->a[p]), 1)));
    }
    for (int r = 0; r < rows; r++)
        S[r] = b->sum[r];
}

/* v_j in both halves */
static inline __m512 xpv8_value(const float *v, int64_t ldv, int j) {
    return _mm512_castpd_ps(
        _mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(v + (int64_t)j * ldv))));
}

static inline __attribute__((always_inline)) void
xpv8_block(int rows, int n, const float *ms, const float *vs, int64_t ldw, const float *v,
           int64_t ldv, float *acc, int64_t lda, float *S, const int P) {
    xpv8_pairs b;
    xpv8_pairs_load(&b, rows, acc, lda, S, P);
    for (int j = 0; j < n; j++)
        xpv8_pairs_key(&b, rows, j, ms, vs, ldw, xpv8_value(v, ldv, j), P);
    xpv8_pairs_store(&b, rows, acc, lda, S, P);
}
#undef XPV8_ROUND

/* ---- attn_xpv at head size 8, many rows (a verification's tokens): rows in the lanes ----
 * Up to 16 rows per pass, the accumulators transposed to 8 vectors (dim c; lane = row), so a
 * key is 8 fused steps (its value element broadcast), each rounded, and one vector sum for
 * the 16 weight sums: no per-row scalar work, 8 chains in flight. Per 16 keys the rows'
 * weights are transposed to one vector per key, and the factors only when some row's max
 * moved on one of those keys (a row that did not move has factor 1: an f16 value times 1
 * rounds to itself). */
#define XPV_LANES_MIN 16 /* fewer rows: the pairs above (at 9-15 rows they were as fast) */

/* rows (<= 16) rows of 16 floats at p + r * ld (keys: the columns read) transposed: out[x]
 * lane r = row r's column x (0 for rows past rows and masked columns). */
static inline void xpv_t16(const float *p, int64_t ld, int rows, __mmask16 keys, __m512 out[16]) {
    __m512 in[16];
    for (int r = 0; r < 16; r++)
        in[r] = r < rows ? _mm512_maskz_loadu_ps(keys, p + r * ld) : _mm512_setzero_ps();
    x86_transpose16_ps(in, out);
}

#define XPV8_ROUND16(x) \
    _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
static inline __attribute__((always_inline)) void
xpv8_lanes(int rows, int n, const float *ms, const float *vs, int64_t ldw, const float *v,
           int64_t ldv, float *acc, int64_t lda, float *S, int extra, const int P) {
    const __mmask16 live = rows >= 16 ? 0xFFFF : tail_mask(rows);
    __m512 t[16], a[8], w[16], f[16];
    for (int r = 0; r < 16; r++)
        t[r] = r < rows ? _mm512_maskz_loadu_ps(0x00FF, acc + r * lda) : _mm512_setzero_ps();
    x86_transpose16_ps(t, w); /* w as scratch: the dims in w[0..7] */
    for (int c = 0; c < 8; c++)
        a[c] = w[c];
    __m512 sum = _mm512_maskz_loadu_ps(live, S);
    const __m512 one = _mm512_set1_ps(1.0f);
    xpv8_pairs b; /* rows 16.. (extra of them): pairs stepped in the same key loop, so their
                   * latency chains overlap the lanes' (one pass after another, the pairs
                   * of a verification's last 2-8 rows were latency-bound) */
    const float *mx = ms + 16 * ldw, *vx = vs + 16 * ldw;
    if (P) xpv8_pairs_load(&b, extra, acc + 16 * lda, lda, S + 16, P);
    for (int j0 = 0; j0 < n; j0 += 16) {
        const __mmask16 keys = n - j0 >= 16 ? 0xFFFF : tail_mask(n - j0);
        __mmask16 moved = 0;
        for (int r = 0; r < rows; r++)
            moved |= _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(keys, ms + r * ldw + j0), one,
                                        _CMP_NEQ_UQ);
        moved &= keys;
        xpv_t16(vs + j0, ldw, rows, keys, w);
        if (moved) xpv_t16(ms + j0, ldw, rows, keys, f);
        const int nk = n - j0 < 16 ? n - j0 : 16;
        for (int jj = 0; jj < nk; jj++) {
            const float *vj = v + (int64_t)(j0 + jj) * ldv;
            if (moved >> jj & 1) {
                _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) a[c] =
                    XPV8_ROUND16(_mm512_mul_ps(a[c], f[jj]));
                sum = _mm512_fmadd_ps(sum, f[jj], w[jj]);
            } else {
                sum = _mm512_add_ps(sum, w[jj]); /* fmaf(S, 1, w) */
            }
            _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) a[c] =
                XPV8_ROUND16(_mm512_fmadd_ps(_mm512_set1_ps(vj[c]), w[jj], a[c]));
            if (P) xpv8_pairs_key(&b, extra, j0 + jj, mx, vx, ldw, xpv8_value(v, ldv, j0 + jj), P);
        }
    }
    if (P) xpv8_pairs_store(&b, extra, acc + 16 * lda, lda, S + 16, P);
    for (int c = 0; c < 16; c++)
        t[c] = c < 8 ? a[c] : _mm512_setzero_ps();
    x86_transpose16_ps(t, w);
    for (int r = 0; r < rows; r++)
        _mm256_storeu_ps(acc + r * lda, _mm512_castps512_ps256(w[r]));
    _mm512_mask_storeu_ps(S, live, sum);
}
#undef XPV8_ROUND16

static void xpv_narrow(int64_t d, int m, int n, const float *ms, const float *vs, int64_t ldw,
                       const float *v, int64_t ldv, float *acc, int64_t lda, float *S) {
    if (d != 8) {
        cpulm_avx2_attn_xpv(d, m, n, ms, vs, ldw, v, ldv, acc, lda, S);
        return;
    }
    int i = 0;
    while (m - i >= XPV_LANES_MIN) {
        const int rows = m - i < 16 ? m - i : 16, e = m - i - rows;
        const int extra = e >= XPV_LANES_MIN ? 0 : e < 8 ? e : 8; /* rows riding along */
        const float *mi = ms + (int64_t)i * ldw, *vi = vs + (int64_t)i * ldw;
        float *ai = acc + (int64_t)i * lda;
        switch ((extra + 1) / 2) {
        case 0: xpv8_lanes(rows, n, mi, vi, ldw, v, ldv, ai, lda, S + i, 0, 0); break;
        case 1: xpv8_lanes(rows, n, mi, vi, ldw, v, ldv, ai, lda, S + i, extra, 1); break;
        case 2: xpv8_lanes(rows, n, mi, vi, ldw, v, ldv, ai, lda, S + i, extra, 2); break;
        case 3: xpv8_lanes(rows, n, mi, vi, ldw, v, ldv, ai, lda, S + i, extra, 3); break;
        default: xpv8_lanes(rows, n, mi, vi, ldw, v, ldv, ai, lda, S + i, extra, 4); break;
        }
        i += rows + extra;
    }
    for (; i < m; i += 8) {
        const int rows = m - i < 8 ? m - i : 8;
        const float *mi = ms + (int64_t)i * ldw, *vi = vs + (int64_t)i * ldw;
        float *ai = acc + (int64_t)i * lda;
        switch ((rows + 1) / 2) {
        case 1: xpv8_block(rows, n, mi, vi, ldw, v, ldv, ai, lda, S + i, 1); break;
        case 2: xpv8_block(rows, n, mi, vi, ldw, v, ldv, ai, lda, S + i, 2); break;
        case 3: xpv8_block(rows, n, mi, vi, ldw, v, ldv, ai, lda, S + i, 3); break;
        default: xpv8_block(rows, n, mi, vi, ldw, v, ldv, ai, lda, S + i, 4); break;
        }
    }
}

/* expf of 8 floats, the same bits as glibc's expf (2.28 and later, the x86_64 FMA variant
 * that glibc selects on CPUs with FMA): x * 32/ln2 = k + r by one fused multiply-add with
 * the 1.5 * 2^52 shift, r by a fused multiply-subtract, 2^(k/32) from the table of
 * 2^(i/32) rounded to double, y = fma(fma(C0, r, C1), r*r, fma(C2, r, 1)) * 2^(k/32),
 * rounded to float; its special cases x86_xexpf_special. attn_xweights_expf_is_libms compares it
 * (through attn_xweights) with this process's libm over floats in [-104, 0], the arguments
 * attention passes; the level uses it only when built against glibc (otherwise libm's expf per
 * key). */
static inline __m256 xexpf8(__m256 x) {
    const __m512d invln2n = _mm512_set1_pd(0x1.71547652b82fep+0 * 32);
    const __m512d shift = _mm512_set1_pd(0x1.8p52);
    const __m512d xd = _mm512_cvtps_pd(x);
    const __m512d kd = _mm512_fmadd_pd(invln2n, xd, shift);
    const __m512i ki = _mm512_castpd_si512(kd);
    const __m512d r = _mm512_fmsub_pd(invln2n, xd, _mm512_sub_pd(kd, shift));
    const __m512i i = _mm512_and_si512(ki, _mm512_set1_epi64(31));
    const double *tab = cpulm_x86_exp2_tab32;
    const __m512d t0 = _mm512_permutex2var_pd(_mm512_load_pd(tab), i, _mm512_load_pd(tab + 8));
    const __m512d t1 =
        _mm512_permutex2var_pd(_mm512_load_pd(tab + 16), i, _mm512_load_pd(tab + 24));
    const __m512d t =
        _mm512_mask_blend_pd(_mm512_test_epi64_mask(i, _mm512_set1_epi64(16)), t0, t1);
    /* 2^(k/32) = 2^(i/32) * 2^((k - i)/32): add (k - i)/32 to the exponent field */
    const __m512i e = _mm512_slli_epi64(_mm512_andnot_si512(_mm512_set1_epi64(31), ki), 47);
    const __m512d sc = _mm512_castsi512_pd(_mm512_add_epi64(_mm512_castpd_si512(t), e));
    const __m512d z = _mm512_fmadd_pd(r, _mm512_set1_pd(0x1.c6af84b912394p-5 / 32 / 32 / 32),
                                      _mm512_set1_pd(0x1.ebfce50fac4f3p-3 / 32 / 32));
    const __m512d r2 = _mm512_mul_pd(r, r);
    const __m512d y0 =
        _mm512_fmadd_pd(r, _mm512_set1_pd(0x1.62e42ff0c52d6p-1 / 32), _mm512_set1_pd(1.0));
    const __m512d y = _mm512_mul_pd(_mm512_fmadd_pd(z, r2, y0), sc);
    __m256 f = _mm512_cvtpd_ps(y);
    /* no lane in a special range (nor NaN): the usual case, one branch */
    const __mmask8 sp = _mm256_cmp_ps_mask(x, _mm256_set1_ps(-0x1.9d1d9ep6f), _CMP_NGE_UQ) |
                        _mm256_cmp_ps_mask(x, _mm256_set1_ps(0x1.62e42ep6f), _CMP_GT_OQ);
    return sp ? x86_xexpf_special(f, x) : f;
}

#if defined(__GLIBC__)
#define XEXP_EXACT 1
#else
#define XEXP_EXACT 0
#endif

static inline __m512 xexpf16(__m512 x) {
    if (!XEXP_EXACT) {
        float a[16];
        _mm512_storeu_ps(a, x);
        for (int l = 0; l < 16; l++)
            a[l] = expf(a[l]);
        return _mm512_loadu_ps(a);
    }
    const __m256 lo = xexpf8(_mm512_castps512_ps256(x));
    const __m256 hi = xexpf8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

/* Lane l takes lane l - k of p (lanes below k take fill); k a constant at every call. */
static inline __attribute__((always_inline)) __m512 lanes_up(__m512 p, int k, __m512 fill) {
    const __m512i idx =
        _mm512_sub_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(k));
    return _mm512_mask_permutexvar_ps(fill, (__mmask16)(0xFFFFu << k), idx, p);
}

/* 16 values of a key as floats (asv_qvals): 16 int8, or the low or high nibbles of 16
 * bytes minus 8. */
A512_INLINE void avx512_qvals(const int MODE, const void *q, __m512 v[1]) {
    __m128i x = _mm_loadu_si128((const __m128i *)q);
    if (MODE == ATT_VQ4H) x = _mm_srli_epi16(x, 4);
    if (MODE != ATT_VQ8) x = _mm_sub_epi8(_mm_and_si128(x, _mm_set1_epi8(0x0f)), _mm_set1_epi8(8));
    v[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(x));
}

/* cpulm_generic_vexpf(x) in one lane: the same bits, without ldexpf's libm call per row */
static inline float vexp1(float x) {
    return _mm512_cvtss_f32(x86_vexp_ps512(_mm512_set1_ps(x)));
}
/* vexpz on 16 lanes: vexp's scalef, lanes below -87 flushed to 0 */
static inline __m512 vexpz16(__m512 x) {
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
    return _mm512_maskz_mov_ps(keep, x86_vexp_ps512(x));
}
#define ASV_EXP1              vexp1
#define ASV_LEVEL             avx512
#define ASV                   __m512
#define ASV_W                 16
#define asv_load(p)           _mm512_loadu_ps(p)
#define asv_store(p, x)       _mm512_storeu_ps(p, x)
#define asv_set1(x)           _mm512_set1_ps(x)
#define asv_mul(a, b)         _mm512_mul_ps(a, b)
#define asv_fma(a, b, c)      _mm512_fmadd_ps(a, b, c)
#define asv_load_n(p, nl)     _mm512_maskz_loadu_ps(tail_mask(nl), p)
#define asv_store_n(p, x, nl) _mm512_mask_storeu_ps(p, tail_mask(nl), x)
#define asv_round_f16(x) \
    _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define asv_add(a, b)       _mm512_add_ps(a, b)
#define asv_sub(a, b)       _mm512_sub_ps(a, b)
#define asv_max(a, b)       _mm512_max_ps(a, b)
#define asv_hmax(x)         _mm512_reduce_max_ps(x)
#define asv_exp(x)          x86_vexp_ps512(x)
#define asv_expz(x)         vexpz16(x)
#define ASV_MASK            __mmask16
#define asv_live(nl)        tail_mask(nl)
#define asv_select(k, a, b) _mm512_mask_mov_ps(b, k, a)
#define asv_keep(x, k)      _mm512_maskz_mov_ps(k, x)
#define ASV_REDUCE16(acc)   x86_reduce16_512(acc[0])
#define asv_gt(a, b)        _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ)
#define asv_ord(x)          _mm512_cmp_ps_mask(x, x, _CMP_ORD_Q)
#define asv_any(k)          (k)
#define asv_keep_max(a, b)  _mm512_max_ps(b, a) /* vmaxps: the second operand on ties */
#define asv_lanes_up        lanes_up
#define asv_last(x)         _mm512_cvtss_f32(_mm512_permutexvar_ps(_mm512_set1_epi32(15), x))
#define asv_expf(x)         xexpf16(x)
/* scores: 6 rows x 4 vectors (no reduction tree per score: the canonical 16-lane dot spent
 * ~45 shuffles and adds per 16 scores, on the FMA ports); xpv: 4 x 4, the sums riding */
#define ASV_SC_ROWS        6
#define ASV_SC_CASES(X)    CPULM_BLOCKS_UPTO4(6, X) CPULM_BLOCKS_UPTO4(5, X) CPULM_BLOCKS_4X4(X)
#define ASV_XPV_VECS(rows) 4
#define ASV_XPV_SUM_MAX    16
#define ASV_XPV_CASES(X)   CPULM_BLOCKS_4X4(X)
#define ASV_XPV_NARROW     xpv_narrow /* head_dim 8 above; others (40) the 256-bit op's */
/* P.V: 6 rows x 4 vectors (6 rows were 1.25x faster than 4 at head 64), dims outer */
#define ASV_PV_ROWS       6
#define ASV_PV_VECS(rows) 4
#define ASV_PV_DIMS_OUTER 1
#define ASV_PV_CASES(X)   CPULM_BLOCKS_UPTO4(6, X) CPULM_BLOCKS_UPTO4(5, X) CPULM_BLOCKS_4X4(X)
/* attn_qpv: 2 blocks a pass (4 registers a row: 16 accumulators), each pair of blocks
 * converted once for more than 4 rows (int8 -> f32 was a third of the pass's work when every
 * group of 4 rows converted it again) */
#define ASV_QPV_F32           1
#define ASV_QPV_BLOCKS        2
#define ASV_QPV_HALVES        4
#define asv_qvals(MODE, q, v) avx512_qvals(MODE, q, v)
#define asv_scale(p)          _mm512_cvtph_ps(_mm256_set1_epi16(x86_half_at(p)))
#include "kernels/attn_simd.h"

/* ---- exact tiled attention (numerics in kernels.h: attn_x*) ---- */

/* Scores with query rows in the lanes: 8 rows per vector of doubles, each key's elements
 * broadcast, so every (row, key) lane adds its exact products in c order, as the generic
 * double sum does (one fused multiply-add of an exact product = one rounded addition). */

/* Rows i0.. (NV vectors, the last one masked to the rows left) x KJ keys (kd: [KJ][d]
 * doubles) into s. The loops unroll fully, so the NV * KJ accumulators live in registers. */
static inline __attribute__((always_inline)) void
xscores_keys(int64_t d, const double *qt, int64_t ldqt, int rows, const double *kd, float scale,
             float *s, int64_t lds, const int NV, const int KJ) {
    __m512d acc[12];
    const __mmask8 last =
        rows - 8 * (NV - 1) >= 8 ? 0xFF : (__mmask8)((1u << (rows - 8 * (NV - 1))) - 1);
    _Pragma("GCC unroll 12") for (int u = 0; u < NV * KJ; u++) acc[u] = _mm512_setzero_pd();
    for (int64_t c = 0; c < d; c++) {
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) {
            const __m512d qv =
                _mm512_maskz_loadu_pd(v == NV - 1 ? last : 0xFF, qt + c * ldqt + 8 * v);
            _Pragma("GCC unroll 8") for (int kk = 0; kk < KJ; kk++) acc[v * KJ + kk] =
                _mm512_fmadd_pd(qv, _mm512_set1_pd(kd[kk * d + c]), acc[v * KJ + kk]);
        }
    }
    const __m256 vs = _mm256_set1_ps(scale);
    _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) {
        _Pragma("GCC unroll 8") for (int kk = 0; kk < KJ; kk++) {
            float out[8];
            _mm256_storeu_ps(out, _mm256_mul_ps(_mm512_cvtpd_ps(acc[v * KJ + kk]), vs));
            for (int l = 0; l < 8 && 8 * v + l < rows; l++)
                s[(8 * v + l) * lds + kk] = out[l];
        }
    }
}

/* K rows (KJ of them, f32) as doubles into kd [KJ][d]. */
static inline __attribute__((always_inline)) void xscores_kd(int64_t d, const float *k, int64_t ldk,
                                                             double *kd, const int KJ) {
    for (int kk = 0; kk < KJ; kk++)
        for (int64_t c = 0; c < d; c += 8)
            _mm512_storeu_pd(kd + kk * d + c, _mm512_cvtps_pd(_mm256_loadu_ps(k + kk * ldk + c)));
}

/* Up to 8 * NV rows x every key, KJ keys at a time (the last ones one by one). */
static inline __attribute__((always_inline)) void
xscores_pass(int64_t d, int rows, const double *qt, int64_t ldqt, int n, const float *k,
             int64_t ldk, float scale, float *s, int64_t lds, const int NV, const int KJ) {
    double kd[8 * 256];
    int j = 0;
    for (; j + KJ <= n; j += KJ) {
        xscores_kd(d, k + j * ldk, ldk, kd, KJ);
        xscores_keys(d, qt, ldqt, rows, kd, scale, s + j, lds, NV, KJ);
    }
    for (; j < n; j++) {
        xscores_kd(d, k + j * ldk, ldk, kd, 1);
        xscores_keys(d, qt, ldqt, rows, kd, scale, s + j, lds, NV, 1);
    }
}

/* Head size 8 (stories260K): keys in the lanes instead, 16 per step. With rows in the lanes
 * a score was a scalar store and a generation's 2 rows left 6 of 8 lanes idle; here each
 * row's 16 scores are 16 fused steps (2 vectors x 8 dims, the query element broadcast) and
 * one store, the key tile transposed once for all rows. Each lane still adds its exact
 * products in c order from 0, so the same double sums. */

/* Key x of the tile (8 floats), or zeros past the n keys. */
static inline __m256 xkey8(const float *k, int64_t ldk, int x, int n) {
    return x < n ? _mm256_loadu_ps(k + x * ldk) : _mm256_setzero_ps();
}

/* Keys j..j+15 (those below n) as kt[c] (c < 8): dim c of keys 0-7 in kt[c][0], of keys 8-15
 * in kt[c][1], as doubles. Register r holds keys a and a + 4 (a = r, then r + 4), so that
 * the 8x8 transposes of the two 256-bit halves (unpacks and shuffles within 128-bit lanes)
 * end, after one 128-bit lane shuffle, with the 16 keys in order. */
static inline __attribute__((always_inline)) void xscores_kt8(const float *k, int64_t ldk, int n,
                                                              __m512d kt[8][2]) {
    __m512 in[8], t[8], u[8];
    for (int r = 0; r < 8; r++) {
        const int a = r < 4 ? r : r + 4;
        in[r] = _mm512_insertf32x8(_mm512_castps256_ps512(xkey8(k, ldk, a, n)),
                                   xkey8(k, ldk, a + 4, n), 1);
    }
    for (int h = 0; h < 8; h += 4) {
        t[h] = _mm512_unpacklo_ps(in[h], in[h + 1]);
        t[h + 1] = _mm512_unpackhi_ps(in[h], in[h + 1]);
        t[h + 2] = _mm512_unpacklo_ps(in[h + 2], in[h + 3]);
        t[h + 3] = _mm512_unpackhi_ps(in[h + 2], in[h + 3]);
        u[h] = _mm512_shuffle_ps(t[h], t[h + 2], 0x44);     /* 128-bit lane L: dims 0 (L even), 4 */
        u[h + 1] = _mm512_shuffle_ps(t[h], t[h + 2], 0xEE); /* dims 1, 5 */
        u[h + 2] = _mm512_shuffle_ps(t[h + 1], t[h + 3], 0x44); /* dims 2, 6 */
        u[h + 3] = _mm512_shuffle_ps(t[h + 1], t[h + 3], 0xEE); /* dims 3, 7 */
    }
    for (int c = 0; c < 4; c++)
        for (int hi = 0; hi < 2; hi++) { /* dim c: lanes 0 and 2; dim c + 4: lanes 1 and 3 */
            const __m512 z = hi ? _mm512_shuffle_f32x4(u[c], u[c + 4], 0xDD)
                                : _mm512_shuffle_f32x4(u[c], u[c + 4], 0x88);
            kt[c + 4 * hi][0] = _mm512_cvtps_pd(_mm512_castps512_ps256(z));
            kt[c + 4 * hi][1] =
                _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z), 1)));
        }
}

static void xscores_d8(int m, int n, const double *qt, int64_t ldqt, const float *k, int64_t ldk,
                       float scale, float *s, int64_t lds) {
    const __m512 vs = _mm512_set1_ps(scale);
    for (int j = 0; j < n; j += 16) {
        const __mmask16 keys = n - j >= 16 ? 0xFFFF : tail_mask(n - j);
        __m512d kt[8][2];
        xscores_kt8(k + j * ldk, ldk, n - j, kt);
        for (int i = 0; i < m; i++) {
            __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
            _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) {
                const __m512d q = _mm512_set1_pd(qt[c * ldqt + i]);
                a0 = _mm512_fmadd_pd(q, kt[c][0], a0);
                a1 = _mm512_fmadd_pd(q, kt[c][1], a1);
            }
            const __m512 f = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(a0)),
                                                _mm512_cvtpd_ps(a1), 1);
            _mm512_mask_storeu_ps(s + i * lds + j, keys, _mm512_mul_ps(f, vs));
        }
    }
}

void cpulm_avx512_attn_xscores(int64_t d, int m, int n, const double *qt, int64_t ldqt,
                               const float *k, int64_t ldk, float scale, float *s, int64_t lds) {
    if (d == 8) {
        xscores_d8(m, n, qt, ldqt, k, ldk, scale, s, lds);
        return;
    }
    if (d % 8 != 0 || d > 256) { /* the 256-bit version takes any d up to 256 */
        cpulm_avx2_attn_xscores(d, m, n, qt, ldqt, k, ldk, scale, s, lds);
        return;
    }
    for (int i0 = 0; i0 < m; i0 += 32) {
        const int rows = m - i0 < 32 ? m - i0 : 32;
        const double *q = qt + i0;
        float *si = s + (int64_t)i0 * lds;
        switch ((rows + 7) / 8) { /* >= 8 accumulators: enough in flight for the latency */
        case 1: xscores_pass(d, rows, q, ldqt, n, k, ldk, scale, si, lds, 1, 8); break;
        case 2: xscores_pass(d, rows, q, ldqt, n, k, ldk, scale, si, lds, 2, 4); break;
        case 3: xscores_pass(d, rows, q, ldqt, n, k, ldk, scale, si, lds, 3, 3); break;
        default: xscores_pass(d, rows, q, ldqt, n, k, ldk, scale, si, lds, 4, 3); break;
        }
    }
}
#endif
