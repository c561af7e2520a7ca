/* amx_attn.c: the amx level's attn_qscores (contract in kernels.h) on a Q8_0 cache: the
 * integer block dots on int8 tiles, straight from the cache rows. Built with the amx flags
 * and reached only through cpulm_kernels_amx (amx.c's table); attn_softmaxz / attn_qpv and
 * Q4_0 caches stay the avx512 ones.
 *
 * Why: generation at depth is one query row per head (4 per KV head on a GQA-4 model)
 * against every cached key; on AVX-512 each key block's dot is a 16-lane int32 vector that
 * needs its own reduction tree (~2 shuffles per row, key and block, all on one port), so the
 * score ran ~20x under the int8 rate. A tile needs no reduction: TDPB*D sums the 32 products
 * of one block into one int32 per (key, row).
 *
 * The query is int8 (attn_qquant's Q8_0 blocks), so one TDPBSSD makes a block's dots.
 * A = 16 keys' quants of block b, loaded in place with the cache row stride; B = the block's
 * bytes of N <= 16 query rows, 4 per lane (made once per call); C = 16 keys x N rows; then
 * the generic float steps per (row, key) in block order. Keys past the last whole 16 go to the
 * avx512 op (the same bits): a tile load of 16 rows would read past the cache's last row.
 */
#if defined(__x86_64__)
#include <string.h>

#include "format/quant.h"
#include "kernels/attn_simd.h"
#include "x86.h"

#define KT   ATT_QKT /* keys per pass (their block scales) */
#define KEYS 16      /* keys per A tile */
#define NB   (ATT_QWDIM / 32)

/* Tile registers (literals after one macro expansion: the intrinsics paste them). */
#define T_A                 0
#define T_B                 1
#define T_C                 2
#define TILE_LOAD(t, p, s)  _tile_loadd(t, p, s)
#define TILE_STORE(t, p, s) _tile_stored(t, p, s)
#define TILE_ZERO(t)        _tile_zero(t)
#define TILE_SS(c, a, b)    _tile_dpbssd(c, a, b)

typedef struct amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

/* The tiles for N query rows: A 16 keys x 32 bytes, B 8 x 4N bytes, C 16 x N int32.
 * x86_amx_tiles (x86.h) tells amx.c's GEMM the tiles are not its own. */
static void configure(int N) {
    if (x86_amx_tiles == X86_AMX_ATTN + N) return;
    _Alignas(64) amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    c.rows[T_A] = KEYS, c.colsb[T_A] = 32;
    c.rows[T_B] = 8, c.colsb[T_B] = (uint16_t)(4 * N);
    c.rows[T_C] = KEYS, c.colsb[T_C] = (uint16_t)(4 * N);
    __asm__ volatile("ldtilecfg %0" : : "m"(c)); /* the whole block as operand (amx.c) */
    x86_amx_tiles = X86_AMX_ATTN + N;
}

/* Per N: the index vectors of the B tiles and of the [key][row] layout. */
typedef struct amx_idx {
    int32_t b[128];    /* B position p: dword (p % N) * 8 + p / N */
    __m512i key[16];   /* vector c, lane l: the key of element 16c + l, (16c + l) / N */
    __m512i rowof[16]; /* vector c, lane l: the row of element 16c + l, (16c + l) % N */
    __m512i row[16];   /* row n's 16 keys: elements t * N + n */
} amx_idx;

/* B tiles of rows q8 + n * d, n < N, every block: bq[b][r][n] = elements b * 32 + 4r .. + 3
 * of row n, as 8N dwords per block. */
static void make_b(int64_t nb, int N, const amx_idx *x, const int8_t *q8, int32_t *bq) {
    const int32_t *idx = x->b;
    for (int64_t b = 0; b < nb; b++) {
        const int32_t *t = (const int32_t *)(const void *)(q8 + b * 32); /* [n][8 dwords] */
        for (int p = 0; p < 8 * N; p += 16) {
            const __mmask16 mk = (__mmask16)(8 * N - p >= 16 ? 0xffff : (1u << (8 * N - p)) - 1);
            /* dword (p % N) * 8 + p / N of the block is row p % N's, at (p % N) * nb * 8 */
            __m512i ix = _mm512_maskz_loadu_epi32(mk, idx + p);
            ix = _mm512_add_epi32(
                _mm512_and_si512(ix, _mm512_set1_epi32(7)),
                _mm512_mullo_epi32(_mm512_srli_epi32(ix, 3), _mm512_set1_epi32((int)(nb * 8))));
            _mm512_mask_storeu_epi32(bq + b * 8 * N + p, mk,
                                     _mm512_mask_i32gather_epi32(ix, mk, ix, t, 4));
        }
    }
}

/* x for N, kept per thread: made at every call, its divisions were ~8% of generation's
 * attention at depth 4096 (one call per KV head and tile), more with shorter calls. */
static const amx_idx *make_idx(int N) {
    static _Thread_local amx_idx x_of;
    static _Thread_local int n_of;
    amx_idx *x = &x_of;
    if (n_of == N) return x;
    _Alignas(64) int32_t v[16];
    for (int p = 0; p < 8 * N; p++)
        x->b[p] = (p % N) * 8 + p / N;
    for (int c = 0; c < N; c++) {
        for (int l = 0; l < 16; l++)
            v[l] = (16 * c + l) / N;
        x->key[c] = _mm512_load_si512(v);
        for (int l = 0; l < 16; l++)
            v[l] = (16 * c + l) % N;
        x->rowof[c] = _mm512_load_si512(v);
        for (int t = 0; t < 16; t++)
            v[t] = t * N + c;
        x->row[c] = _mm512_load_si512(v);
    }
    n_of = N;
    return x;
}

/* s[n * lds + t] = acc[t * 4 + n] * sc, n < 4, t < 16: each vector of 4 keys x 4 rows to
 * rows x keys, then the 4 x 4 transpose of the 128-bit lanes. */
static inline void store4(const float *acc, float sc, float *s, int64_t lds) {
    const __m512i rows = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m512 y[4];
    for (int c = 0; c < 4; c++)
        y[c] = _mm512_permutexvar_ps(rows, _mm512_load_ps(acc + 16 * c));
    const __m512 t0 = _mm512_shuffle_f32x4(y[0], y[1], 0x44),
                 t1 = _mm512_shuffle_f32x4(y[0], y[1], 0xEE),
                 t2 = _mm512_shuffle_f32x4(y[2], y[3], 0x44),
                 t3 = _mm512_shuffle_f32x4(y[2], y[3], 0xEE);
    const __m512 scv = _mm512_set1_ps(sc);
    _mm512_storeu_ps(s, _mm512_mul_ps(_mm512_shuffle_f32x4(t0, t2, 0x88), scv));
    _mm512_storeu_ps(s + lds, _mm512_mul_ps(_mm512_shuffle_f32x4(t0, t2, 0xDD), scv));
    _mm512_storeu_ps(s + 2 * lds, _mm512_mul_ps(_mm512_shuffle_f32x4(t1, t3, 0x88), scv));
    _mm512_storeu_ps(s + 3 * lds, _mm512_mul_ps(_mm512_shuffle_f32x4(t1, t3, 0xDD), scv));
}

/* s[n * lds + t] = acc[t * 16 + n] * sc, n, t < 16: the 16 x 16 transpose in registers. */
static inline void store16(const float *acc, float sc, float *s, int64_t lds) {
    __m512 a[16], r[16];
    _Pragma("GCC unroll 16") for (int t = 0; t < 16; t++) a[t] = _mm512_load_ps(acc + 16 * t);
    x86_transpose16_ps(a, r);
    _Pragma("GCC unroll 16") for (int n = 0; n < 16; n++)
        _mm512_storeu_ps(s + n * lds, _mm512_mul_ps(r[n], _mm512_set1_ps(sc)));
}

/* Scores of rows 0..N-1 (B tiles bq, block scales dqt[16 b + n]) x keys 0..15 at k: the
 * blocks in order into acc ([key][row], 16N floats), then s[n * lds + t] = acc[t][n] * sc.
 * ds: block b's key scales at ds[b * KT]. */
static void keys16(int64_t nb, int N, const amx_idx *x, const int32_t *bq, const float *dqt,
                   float sc, const uint8_t *k, uint64_t ldk, const float *ds, float *s,
                   int64_t lds) {
    _Alignas(64) int32_t ci[KEYS * 16];
    _Alignas(64) float acc[KEYS * 16];
    const int ldc = 4 * N;
    for (int c = 0; c < N; c++)
        _mm512_store_ps(acc + 16 * c, _mm512_setzero_ps());
    for (int64_t b = 0; b < nb; b++) {
        TILE_LOAD(T_A, k + b * (int64_t)sizeof(cpulm_block_q8_0) + 2, (long)ldk);
        TILE_LOAD(T_B, bq + b * 8 * N, ldc);
        TILE_ZERO(T_C);
        TILE_SS(T_C, T_A, T_B);
        TILE_STORE(T_C, ci, ldc);
        const __m512 dk = _mm512_loadu_ps(ds + b * KT), dq = _mm512_loadu_ps(dqt + 16 * b);
        for (int c = 0; c < N; c++) {
            const __m512 w = _mm512_mul_ps(_mm512_permutexvar_ps(x->key[c], dk),
                                           _mm512_permutexvar_ps(x->rowof[c], dq));
            _mm512_store_ps(acc + 16 * c,
                            _mm512_fmadd_ps(w, _mm512_cvtepi32_ps(_mm512_load_si512(ci + 16 * c)),
                                            _mm512_load_ps(acc + 16 * c)));
        }
    }
    if (N == 4 || N == 16) { /* generation on a GQA-4 model; full groups of a prompt */
        (N == 4 ? store4 : store16)(acc, sc, s, lds);
        return;
    }
    for (int n = 0; n < N; n++)
        _mm512_storeu_ps(s + n * lds,
                         _mm512_mul_ps(_mm512_i32gather_ps(x->row[n], acc, 4), _mm512_set1_ps(sc)));
}

void cpulm_amx_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int8_t *q8,
                            const float *qd, float sc, const uint8_t *k, uint64_t ldk, float *s,
                            int64_t lds, const uint8_t *next) {
    if (kt != CPULM_DTYPE_Q8_0 || d % 32 != 0 || d > ATT_QWDIM || n < KEYS) {
        cpulm_avx512_attn_qscores(d, kt, m, n, q8, qd, sc, k, ldk, s, lds, next);
        return;
    }
    const int64_t nb = d / 32;
    const size_t rb = (size_t)nb * sizeof(cpulm_block_q8_0);
    _Alignas(64) int32_t bq[NB * 8 * 16];
    float ds[NB * KT], dqt[NB * 16];
    for (int j = 0; j < n; j += KT) {
        const int nk = n - j < KT ? n - j : KT, n16 = nk / KEYS * KEYS;
        const uint8_t *kj = k + (uint64_t)j * ldk;
        x86q_block_scales512(d, kj, ldk, nk, sizeof(cpulm_block_q8_0), ds);
        for (int i = 0; i < m; i += 16) {
            const int N = m - i < 16 ? m - i : 16;
            const amx_idx *x = make_idx(N);
            make_b(nb, N, x, q8 + i * d, bq);
            for (int64_t b = 0; b < nb; b++)
                for (int r = 0; r < N; r++)
                    dqt[16 * b + r] = qd[(i + r) * nb + b];
            configure(N);
            for (int t = 0; t < n16; t += KEYS) {
                if (i == 0 && next)
                    for (int u = 0; u < KEYS; u++)
                        att_hint_row(next + (uint64_t)(j + t + u) * ldk, rb);
                keys16(nb, N, x, bq, dqt, sc, kj + (uint64_t)t * ldk, ldk, ds + t,
                       s + i * lds + j + t, lds);
            }
        }
        if (n16 < nk)
            cpulm_avx512_attn_qscores(d, kt, m, nk - n16, q8, qd, sc, kj + (uint64_t)n16 * ldk, ldk,
                                      s + j + n16, lds,
                                      next ? next + (uint64_t)(j + n16) * ldk : NULL);
    }
}
#endif
