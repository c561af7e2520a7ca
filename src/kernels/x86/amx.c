/* amx.c: the amx level (Sapphire Rapids, Emerald Rapids, Granite Rapids), built with the
 * avx512vnni flags plus -mamx-tile -mamx-int8. Extends avx512vnni and replaces only the
 * prompt GEMM of the 32-element block types (Q4_0, Q8_0, MXFP4) on repacked groups.
 *
 * TDPBSSD multiplies a tile of signed bytes A (16 rows x K) by a tile B (K/4 rows of 16
 * 4-byte lanes) into 16 x 16 int32 sums. Our contract needs each block's exact integer dot
 * (kernels.h: acc += dw * (dx * float(isum)) per block, in order), so K is one block (32):
 * A = 16 tokens' Q8_0 quants of block b, loaded straight from the activation rows with the
 * row stride; B = the group's 16 rows of block b. The repacked layout already is B's layout
 * (chunk c, lane r = quants 4c..4c+3 of row r): Q8_0 blocks are loaded in place, Q4_0 and
 * MXFP4 blocks are widened to signed bytes (nibble - 8; doubled E2M1 values) per panel of
 * PANEL_BLOCKS blocks on the stack, never for the whole matrix. Signed x signed needs no
 * bias correction: each sum is exact (|isum| <= 32 * 128 * 128). The float steps run in an
 * AVX-512 epilogue on the stored sums, with the same operations as avx512vnni.c's tile, so
 * both levels give the same bits for every element. Token tails (nt % 16) and small
 * batches (generation) go to the avx512vnni kernel: a tile of 16 rows needs 16 tokens.
 *
 * Tiles are configured once per thread (palette 1, fixed shapes below). The OS permission
 * for the tile data state is requested by dispatch.c before this level is ever chosen.
 */
#if defined(__x86_64__)
#include <string.h>

#include "kernels/kernels.h"
#include "x86.h"

#define TOK          16  /* tokens per A tile (its rows) */
#define PANEL_BLOCKS 32  /* blocks staged per panel: 16 KB of widened quants, 2 KB of scales */
#define B_BYTES      512 /* one block of a group as a B tile: 8 rows of 64 bytes */

/* Tile registers: two of each kind so two blocks are in flight per step, and a second pair
 * of C tiles: consecutive steps alternate between C0/C1 and C2/C3, so a step's TILEZERO and
 * TDPBSSD never wait for the previous step's TILESTORE to have read the same tile. Macros,
 * not enum constants: the compilers' tile intrinsics paste the register number into the
 * assembly, so it must be a literal after one level of macro expansion (the wrappers below). */
#define TC0                  0
#define TC1                  1
#define TA0                  2
#define TA1                  3
#define TB0                  4
#define TB1                  5
#define TC2                  6
#define TC3                  7
#define TILE_ZERO(t)         _tile_zero(t)
#define TILE_LOAD(t, p, s)   _tile_loadd(t, p, s)
#define TILE_STORE(t, p, s)  _tile_stored(t, p, s)
#define TILE_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

_Thread_local int x86_amx_tiles; /* x86.h; here: rows of the A and C tiles as configured */

/* m: tokens per A / C tile (TOK, or fewer for an MXFP4 token tail). */
static void configure_tiles(int m) {
    if (x86_amx_tiles == m) return;
    _Alignas(64) tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    static const int cs[4] = {TC0, TC1, TC2, TC3};
    for (int i = 0; i < 4; i++)
        c.rows[cs[i]] = (uint8_t)m, c.colsb[cs[i]] = 64; /* m tokens x 16 int32 */
    for (int i = TA0; i <= TA1; i++)
        c.rows[i] = (uint8_t)m, c.colsb[i] = 32; /* m tokens x one block's 32 quants */
    for (int i = TB0; i <= TB1; i++)
        c.rows[i] = 8, c.colsb[i] = 64; /* 32 quants x 16 rows, 4 per lane */
    /* Not _tile_loadconfig: GCC 12's version names only the first 8 bytes as its memory
     * operand, so the stores of rows[] and colsb[] were optimized away (the tiles then stayed
     * unconfigured and the first tile instruction raised SIGILL). Here the operand is the
     * whole 64-byte block. */
    __asm__ volatile("ldtilecfg %0" : : "m"(c));
    x86_amx_tiles = m;
}

enum { W_Q4_0, W_Q8_0, W_MXFP4 };

/* A panel: blocks [b0, b0 + count) of one group as B tiles (b: first tile, step bytes
 * apart) and their 16 row scales each. */
typedef struct panel {
    const int8_t *b;
    size_t step;
    int64_t b0, count;
    const float *dw; /* [count][16] */
} panel;

static size_t block_bytes(int wk) {
    return wk == W_Q8_0 ? 2 * 16 + 32 * 16 : wk == W_Q4_0 ? 2 * 16 + 16 * 16 : 16 + 16 * 16;
}

/* Widens the 4 nibble chunks of a Q4_0 / MXFP4 block into B's 8 rows of signed bytes: low
 * nibbles are elements 4t..4t+3 of each row (rows 0..3), high ones 16 + 4t.. (rows 4..7). */
static inline void widen_q4(const uint8_t *q, int8_t *out, int wk) {
    const __m512i m = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
    const __m512i lut = _mm512_broadcast_i32x4(_mm256_castsi256_si128(x86_mxfp4_lut256(0)));
    for (int t = 0; t < 4; t++) {
        const __m512i v = _mm512_loadu_si512(q + 64 * t);
        const __m512i lo = _mm512_and_si512(v, m);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
        _mm512_store_si512(out + 64 * t, wk == W_MXFP4 ? _mm512_shuffle_epi8(lut, lo)
                                                       : _mm512_sub_epi8(lo, eight));
        _mm512_store_si512(out + 64 * (t + 4), wk == W_MXFP4 ? _mm512_shuffle_epi8(lut, hi)
                                                             : _mm512_sub_epi8(hi, eight));
    }
}

/* Fills p with blocks [b0, b0 + count) of group w: scales always, quants widened into q
 * unless they are Q8_0 (then B reads the group in place). */
static void stage_panel(const uint8_t *w, int wk, int64_t b0, int64_t count, int8_t *q, float *dw,
                        panel *p) {
    const size_t blk = block_bytes(wk), qo = wk == W_MXFP4 ? 16 : 32;
    for (int64_t i = 0; i < count; i++) {
        const uint8_t *g = w + (size_t)(b0 + i) * blk;
        const __m512 d = wk == W_MXFP4 ? x86_mxfp4_scales_x16(g)
                                       : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
        _mm512_store_ps(dw + 16 * i, d);
        if (wk != W_Q8_0) widen_q4(g + qo, q + (size_t)i * B_BYTES, wk);
    }
    p->b0 = b0, p->count = count, p->dw = dw;
    if (wk == W_Q8_0) {
        p->b = (const int8_t *)(w + (size_t)b0 * blk + qo);
        p->step = blk;
    } else {
        p->b = q;
        p->step = B_BYTES;
    }
}

/* Where a 16-token tile's activations are, from the panel's first block on: block i of
 * token t has its quants at q + i * q_blk + t * q_row (the A tile's rows) and its float
 * scale at dx + i * dx_blk + t * dx_row (the activation rows: q_row = dx_row = stride). */
typedef struct a_src {
    const uint8_t *q, *dx;
    size_t q_blk, dx_blk, dx_row;
    long q_row;
} a_src;

/* acc[t] = fma(dw, float(c[t]) * dx_t, acc[t]) for the 16 tokens: avx512vnni.c's float
 * steps on the 16 x 16 sums of one block. dx_t: token t's block scale. */
static inline __attribute__((always_inline)) void
epilogue(const int32_t *c, __m512 dw, const uint8_t *dx, size_t dx_row, __m512 acc[TOK], int m) {
    _Pragma("GCC unroll 16") for (int t = 0; t < TOK; t++) {
        if (t >= m) break;
        float d;
        memcpy(&d, dx + (size_t)t * dx_row, 4);
        const __m512 f =
            _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * t)), _mm512_set1_ps(d));
        acc[t] = _mm512_fmadd_ps(dw, f, acc[t]);
    }
}

/* The tile ops of one step (blocks i, i + 1 if two) through the C tiles ca, cb. */
#define SUMS_PAIR(ca, cb)                           \
    do {                                            \
        TILE_ZERO(ca);                              \
        TILE_LOAD(TA0, a, x->q_row);                \
        TILE_LOAD(TB0, b, 64);                      \
        TILE_DPBSSD(ca, TA0, TB0);                  \
        if (two) {                                  \
            TILE_ZERO(cb);                          \
            TILE_LOAD(TA1, a + x->q_blk, x->q_row); \
            TILE_LOAD(TB1, b + p->step, 64);        \
            TILE_DPBSSD(cb, TA1, TB1);              \
            TILE_STORE(cb, c[1], 64);               \
        }                                           \
        TILE_STORE(ca, c[0], 64);                   \
    } while (0)

/* The integer sums of panel blocks i and i + 1 (if any) for 16 tokens, into c[0], c[1],
 * through the C tile pair of set (0: C0/C1, 1: C2/C3). */
static inline void sums_pair(const panel *p, int64_t i, const a_src *x, int set,
                             int32_t c[2][TOK * 16]) {
    const uint8_t *a = x->q + (size_t)i * x->q_blk;
    const int8_t *b = p->b + (size_t)i * p->step;
    const int two = i + 1 < p->count;
    if (set)
        SUMS_PAIR(TC2, TC3);
    else
        SUMS_PAIR(TC0, TC1);
}

/* m <= 16 tokens (x) over the panel's blocks (the tiles configured for m rows); the
 * running sums start at 0 (first panel) or from o (rows ld apart) and end there.
 * Software-pipelined: the tiles of the next pair of blocks are issued before the epilogue of
 * this pair, into the other half of c and the other C tile set, so the tile unit and the
 * vector ports work at once and no epilogue load waits for a tile store in flight. acc[]
 * stays in registers: every loop over it is unrolled (m constant in tile16: no guards). */
static inline __attribute__((always_inline)) void tile_m(const panel *p, const a_src *x, float *o,
                                                         int64_t ld, int m) {
    _Alignas(64) int32_t c[2][2][TOK * 16];
    __m512 acc[TOK];
    _Pragma("GCC unroll 16") for (int t = 0; t < TOK; t++) acc[t] =
        p->b0 && t < m ? _mm512_loadu_ps(o + (size_t)t * (size_t)ld) : _mm512_setzero_ps();
    sums_pair(p, 0, x, 0, c[0]);
    for (int64_t i = 0; i < p->count; i += 2) {
        const int set = (int)(i >> 1) & 1;
        int32_t(*cur)[TOK * 16] = c[set];
        if (i + 2 < p->count) sums_pair(p, i + 2, x, set ^ 1, c[set ^ 1]);
        const uint8_t *dx = x->dx + (size_t)i * x->dx_blk;
        epilogue(cur[0], _mm512_load_ps(p->dw + 16 * i), dx, x->dx_row, acc, m);
        if (i + 1 < p->count)
            epilogue(cur[1], _mm512_load_ps(p->dw + 16 * (i + 1)), dx + x->dx_blk, x->dx_row, acc,
                     m);
    }
    _Pragma("GCC unroll 16") for (int t = 0; t < TOK; t++) {
        if (t >= m) break;
        _mm512_storeu_ps(o + (size_t)t * (size_t)ld, acc[t]);
    }
}

static void tile16(const panel *p, const a_src *x, float *o, int64_t ld) {
    tile_m(p, x, o, ld, TOK);
}

/* A token tail of m < 16: the tiles' rows past m are neither loaded nor stored. */
static void tile_tail(const panel *p, const a_src *x, float *o, int64_t ld, int m) {
    tile_m(p, x, o, ld, m);
}

/* Tokens [0, nt16 + tail) (nt16 a multiple of 16, tail < 16) against one group, panel by
 * panel: every 16-token tile and the tail's tile (its own tile rows) visit the panel while
 * it is hot; the running sums wait in s between panels. LDTILECFG is slow (~2 us for six
 * per call here), so the tail goes first when the tiles still have its rows (the previous
 * panel's or group's tail): one reconfiguration per panel, not two. (A tail run as one 16-row tile
 * padded with zero rows was slower than avx512vnni's chains for it: MoE layer GEMMs 0.83-0.96x with
 * tails of 8+, see the perf log; tiles of the tail's own rows skip the padding's loads, stores and
 * epilogue.) */
static void gemm_amx(int64_t n, int nt16, int tail, float *s, int64_t ld, const uint8_t *w, int wk,
                     const uint8_t *act, uint64_t stride) {
    _Alignas(64) int8_t q[PANEL_BLOCKS * B_BYTES];
    _Alignas(64) float dw[PANEL_BLOCKS * 16];
    const int64_t nb = n / 32;
    const uint64_t xo = cpulm_pack_act_extras_offset(n);
    for (int64_t b0 = 0; b0 < nb; b0 += PANEL_BLOCKS) {
        const int64_t count = nb - b0 < PANEL_BLOCKS ? nb - b0 : PANEL_BLOCKS;
        panel p;
        stage_panel(w, wk, b0, count, q, dw, &p);
        a_src x = {.q = act + (size_t)b0 * sizeof(cpulm_block_q8_0) + 2,
                   .dx = act + xo + 4 * (size_t)b0,
                   .q_blk = sizeof(cpulm_block_q8_0),
                   .dx_blk = 4,
                   .dx_row = stride,
                   .q_row = (long)stride};
        a_src xt = x; /* the tail's rows */
        xt.q += (size_t)nt16 * stride, xt.dx += (size_t)nt16 * stride;
        float *st = s + (size_t)nt16 * (size_t)ld;
        const int tail_first = tail && x86_amx_tiles == tail; /* one LDTILECFG less */
        if (tail_first) tile_tail(&p, &xt, st, ld, tail);
        if (nt16) configure_tiles(TOK);
        for (int j = 0; j < nt16; j += TOK) {
            tile16(&p, &x, s + (size_t)j * (size_t)ld, ld);
            x.q += (size_t)TOK * stride, x.dx += (size_t)TOK * stride;
        }
        if (tail && !tail_first) {
            configure_tiles(tail);
            tile_tail(&p, &xt, st, ld, tail);
        }
    }
}

/* MXFP4 token tails of at least this many tokens run as tiles of their own rows, the
 * others go to avx512vnni: one 16-row group of 2880 inputs, 64 + tail tokens, interleaved,
 * thread CPU time (perf log 2026-12-03-gptoss-prompt): equal up to tails of 5, the tiles
 * 5-10% faster from 6 on, 20% at 15. */
#define AMX_TAIL_MIN 6

static void gemm_x16(int64_t n, int nt, float *s, int64_t ld, const void *w, const uint8_t *act,
                     uint64_t stride, int wk, cpulm_dtype type) {
    const int done = nt / TOK * TOK;
    const int tail = wk == W_MXFP4 && nt - done >= AMX_TAIL_MIN ? nt - done : 0;
    if (done || tail) gemm_amx(n, done, tail, s, ld, w, wk, act, stride);
    if (nt > done + tail)
        cpulm_kernels_avx512vnni.gemm_x16[type](n, nt - done, s + (size_t)done * (size_t)ld, ld, w,
                                                act + (size_t)done * stride, stride);
}

/* ---- Q4_K / Q5_K: the same tiles per 32-element sub-block ----
 * Sub-block j of super-block b: A = 16 tokens' Q8_K quants 32j..32j+31, B = the 16 rows'
 * quants widened to bytes (0..15, Q5_K 0..31: signed bytes as they are, no bias), C = the
 * exact sub-block dots. The epilogue is avx512vnni.c's integer and float steps: sumi =
 * sum_j C_j * sc_j (VPMULLD), summ = the min term by four VPDPWSSDs on the activation
 * extras, then acc = fma(d * dy, sumi, acc), acc = fnmadd(dmin * dy, summ, acc). Integer
 * sums are exact in any order, so every element is avx512vnni's (and generic's) bits. */

#define KSB_PANEL 4 /* super-blocks staged per panel: 4 x 8 sub-blocks x 512 B = 16 KB */
#define Q4K_SB    (16 * 144)
#define Q5K_SB    (16 * 176)

/* Super-block g's 8 sub-blocks as B tiles (out + 512 j): sub-block j is nibble j & 1 of
 * qs chunks 8 (j / 2) .. 8 (j / 2) + 7; Q5_K adds bit j of the qh chunks as bit 4. */
static void widen_k4(const uint8_t *g, int q5, int8_t *out) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
    const uint8_t *qs = g + (q5 ? 48 * 16 : 16 * 16);
    for (int j = 0; j < 8; j++) {
        const __m128i lo = _mm_cvtsi32_si128(4 * (j & 1));
        for (int k = 0; k < 8; k++) {
            const __m512i v = _mm512_loadu_si512(qs + 512 * (j / 2) + 64 * k);
            __m512i w = _mm512_and_si512(_mm512_srl_epi16(v, lo), m4);
            if (q5) {
                const __m512i h = _mm512_loadu_si512(g + 256 + 64 * k);
                const __m512i hs = j < 4 ? _mm512_sll_epi16(h, _mm_cvtsi32_si128(4 - j))
                                         : _mm512_srl_epi16(h, _mm_cvtsi32_si128(j - 4));
                w = _mm512_ternarylogic_epi32(w, hs, b4, 0xF8); /* w | (hs & b4) */
            }
            _mm512_store_si512(out + 512 * j + 64 * k, w);
        }
    }
}

/* Sub-blocks j, j + 1 through the C tiles ca, cb. */
#define SUMS_K_PAIR(ca, cb, j)                            \
    do {                                                  \
        TILE_ZERO(ca);                                    \
        TILE_ZERO(cb);                                    \
        TILE_LOAD(TA0, a + 32 * (j), (long)stride);       \
        TILE_LOAD(TB0, bq + B_BYTES * (j), 64);           \
        TILE_LOAD(TA1, a + 32 * ((j) + 1), (long)stride); \
        TILE_LOAD(TB1, bq + B_BYTES * ((j) + 1), 64);     \
        TILE_DPBSSD(ca, TA0, TB0);                        \
        TILE_DPBSSD(cb, TA1, TB1);                        \
        TILE_STORE(ca, c[j], 64);                         \
        TILE_STORE(cb, c[(j) + 1], 64);                   \
    } while (0)

/* The 8 sub-block sums of super-block b for 16 tokens, into c[0..7]. */
static inline void sums_k(const int8_t *bq, int64_t b, const uint8_t *act, uint64_t stride,
                          int32_t c[8][TOK * 16]) {
    const uint8_t *a = act + (size_t)b * sizeof(cpulm_block_q8_K) + 4;
    for (int j = 0; j < 8; j += 4) { /* sub-block pairs alternate between the C tile sets */
        SUMS_K_PAIR(TC0, TC1, j);
        SUMS_K_PAIR(TC2, TC3, j + 2);
    }
}

/* Super-block b's float steps for 16 tokens from its 8 stored sub-block sums; the running
 * sums are in o (rows ld apart; zero before the first super-block). g: the group's
 * super-block (d, dmin, scales). */
static void epilogue_k(const int32_t c[8][TOK * 16], const uint8_t *g, int64_t b,
                       const uint8_t *act, uint64_t stride, uint64_t xo, float *o, int64_t ld) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + 32)));
    __m512i sc[2], mn[2], scj[8];
    x86_k4_scales_x16(g + 64, sc, mn);
    for (int j = 0; j < 8; j++)
        scj[j] = _mm512_and_si512(_mm512_srl_epi32(sc[j / 4], _mm_cvtsi32_si128(8 * (j % 4))),
                                  _mm512_set1_epi32(0xff));
    const __m512i lo8 = _mm512_set1_epi32(0x00ff00ff);
    const __m512i mp[4] = {_mm512_and_si512(mn[0], lo8), _mm512_srli_epi16(mn[0], 8),
                           _mm512_and_si512(mn[1], lo8), _mm512_srli_epi16(mn[1], 8)};
    for (int t = 0; t < TOK; t++) {
        const uint8_t *row = act + (size_t)t * stride;
        __m512i sumi = _mm512_setzero_si512(), summ = _mm512_setzero_si512();
        _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) sumi =
            _mm512_add_epi32(sumi, _mm512_mullo_epi32(_mm512_load_si512(c[j] + 16 * t), scj[j]));
        const int32_t *ex = (const int32_t *)(row + xo) + b * CPULM_PACK_ACTK_WORDS;
        _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) summ =
            _mm512_dpwssd_epi32(summ, mp[q], _mm512_set1_epi32(ex[q]));
        const __m512 dy = _mm512_set1_ps(((const cpulm_block_q8_K *)row)[b].d);
        float *ot = o + (size_t)t * (size_t)ld;
        __m512 acc = b ? _mm512_loadu_ps(ot) : _mm512_setzero_ps();
        acc = _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(sumi), acc);
        acc = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dy), _mm512_cvtepi32_ps(summ), acc);
        _mm512_storeu_ps(ot, acc);
    }
}

/* Tokens [0, nt16) against one Q4_K / Q5_K group, panel by panel; within a 16-token tile
 * the next super-block's tiles are issued before this one's epilogue (as tile16 does). */
static void gemm_amx_k4(int64_t n, int nt16, float *s, int64_t ld, const uint8_t *w, int q5,
                        const uint8_t *act, uint64_t stride) {
    _Alignas(64) int8_t q[KSB_PANEL * 8 * B_BYTES];
    _Alignas(64) int32_t c[2][8][TOK * 16];
    const int64_t nsb = n / CPULM_QK_K;
    const size_t sb = q5 ? Q5K_SB : Q4K_SB;
    const uint64_t xo = cpulm_pack_actk_extras_offset(n);
    configure_tiles(TOK);
    for (int64_t b0 = 0; b0 < nsb; b0 += KSB_PANEL) {
        const int64_t count = nsb - b0 < KSB_PANEL ? nsb - b0 : KSB_PANEL;
        for (int64_t i = 0; i < count; i++)
            widen_k4(w + (size_t)(b0 + i) * sb, q5, q + (size_t)i * 8 * B_BYTES);
        for (int j = 0; j < nt16; j += TOK) {
            const uint8_t *a = act + (size_t)j * stride;
            float *o = s + (size_t)j * (size_t)ld;
            sums_k(q, b0, a, stride, c[0]);
            for (int64_t i = 0; i < count; i++) {
                if (i + 1 < count)
                    sums_k(q + (size_t)(i + 1) * 8 * B_BYTES, b0 + i + 1, a, stride,
                           c[(i + 1) & 1]);
                epilogue_k((const int32_t(*)[TOK * 16]) c[i & 1], w + (size_t)(b0 + i) * sb, b0 + i,
                           a, stride, xo, o, ld);
            }
        }
    }
}

static void gemm_k4_x16(int64_t n, int nt, float *s, int64_t ld, const void *w, const uint8_t *act,
                        uint64_t stride, int q5) {
    const cpulm_dtype type = q5 ? CPULM_DTYPE_Q5_K : CPULM_DTYPE_Q4_K;
    const int nt16 = nt / TOK * TOK;
    if (nt16) gemm_amx_k4(n, nt16, s, ld, w, q5, act, stride);
    if (nt > nt16)
        cpulm_kernels_avx512vnni.gemm_x16[type](n, nt - nt16, s + (size_t)nt16 * (size_t)ld, ld, w,
                                                act + (size_t)nt16 * stride, stride);
}

/* ---- Q6_K: one A tile per 32 elements, one C tile per 16-element group ----
 * Q6_K scales every 16 elements, so a C tile must hold one group's dots: the group's B
 * tile keeps the A tile's K = 32 (one tile configuration for every type) with the other
 * group's half zero (group 2j in B rows 0..3, group 2j + 1 in rows 4..7). Quants enter as
 * signed q - 32 (no bias term). The integer step sumi = sum_g C_g * sc_g (VPMULLD) runs
 * per group pair on sums in registers, the float step per super-block: avx512vnni.c's
 * acc = fma(d * dy, float(sumi), acc) on the same exact sumi, so the same bits. */

#define Q6K_SB (16 * 210)

/* Super-block g's 16 groups as B tiles (out + B_BYTES gi). Element 16 gi + 4 i + (0..3)
 * of a row: nibble sq >> 1 of ql chunk 16 h + 8 (sq & 1) + i0 + i, crumb sq of qh chunk
 * 8 h + i0 + i (h = gi / 8, sq = gi % 8 / 2, i0 = 4 (gi % 2); kernels.h's layout). */
static void widen_k6(const uint8_t *g, int8_t *out) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i b32 = _mm512_set1_epi8(32);
    for (int gi = 0; gi < 16; gi++) {
        const int h = gi / 8, sq = gi % 8 / 2, i0 = 4 * (gi % 2);
        const __m128i sl = _mm_cvtsi32_si128(sq < 2 ? 4 - 2 * sq : 0);
        const __m128i sr = _mm_cvtsi32_si128(sq < 2 ? 0 : 2 * sq - 4);
        const __m128i nib = _mm_cvtsi32_si128(4 * (sq >> 1));
        int8_t *o = out + B_BYTES * gi;
        for (int i = 0; i < 4; i++) {
            const __m512i l = _mm512_loadu_si512(g + 64 * (16 * h + 8 * (sq & 1) + i0 + i));
            const __m512i hh = _mm512_loadu_si512(g + 2048 + 64 * (8 * h + i0 + i));
            const __m512i hs = _mm512_srl_epi16(_mm512_sll_epi16(hh, sl), sr);
            const __m512i lo = _mm512_srl_epi16(l, nib);
            /* (lo & 0x0F) | (hs & 0x30), then - 32 */
            const __m512i q = _mm512_ternarylogic_epi32(lo, _mm512_and_si512(hs, m30), m4, 0xEC);
            _mm512_store_si512(o + 256 * (gi & 1) + 64 * i, _mm512_sub_epi8(q, b32));
            _mm512_store_si512(o + 256 * (~gi & 1) + 64 * i, _mm512_setzero_si512());
        }
    }
}

/* Groups 2j, 2j + 1 of the super-block (ab: token 0's quants of it) for 16 tokens, into
 * c[0], c[1], through the A tile ta and the C tiles ca, cb. */
#define SUMS_K6(ta, ca, cb)                             \
    do {                                                \
        TILE_ZERO(ca);                                  \
        TILE_ZERO(cb);                                  \
        TILE_LOAD(ta, ab + 32 * j, (long)stride);       \
        TILE_LOAD(TB0, bq + B_BYTES * (2 * j), 64);     \
        TILE_LOAD(TB1, bq + B_BYTES * (2 * j + 1), 64); \
        TILE_DPBSSD(ca, ta, TB0);                       \
        TILE_DPBSSD(cb, ta, TB1);                       \
        TILE_STORE(ca, c[0], 64);                       \
        TILE_STORE(cb, c[1], 64);                       \
    } while (0)

static inline void sums_k6(const int8_t *bq, const uint8_t *ab, uint64_t stride, int j, int set,
                           int32_t c[2][TOK * 16]) {
    if (set)
        SUMS_K6(TA1, TC2, TC3);
    else
        SUMS_K6(TA0, TC0, TC1);
}

/* Super-block b of one group (g: its repacked bytes, bq: widened) for 16 tokens (act rows,
 * stride apart); the running sums are in o (rows ld apart; zero before b = 0). The next
 * pair's tiles are issued before this pair's integer step (as tile16 does). */
static void tile16_k6(const int8_t *bq, const uint8_t *g, int64_t b, const uint8_t *act,
                      uint64_t stride, float *o, int64_t ld) {
    _Alignas(64) int32_t c[2][2][TOK * 16];
    __m512i sumi[TOK];
    const uint8_t *ab = act + (size_t)b * sizeof(cpulm_block_q8_K) + 4;
    _Pragma("GCC unroll 16") for (int t = 0; t < TOK; t++) sumi[t] = _mm512_setzero_si512();
    sums_k6(bq, ab, stride, 0, 0, c[0]);
    for (int j = 0; j < 8; j++) {
        const int set = j & 1;
        if (j + 1 < 8) sums_k6(bq, ab, stride, j + 1, set ^ 1, c[set ^ 1]);
        /* scales of groups 2j, 2j + 1: bytes 2 (j % 2), 2 (j % 2) + 1 of chunk j / 2 */
        const __m512i v = _mm512_loadu_si512(g + 3072 + 64 * (j / 2));
        const __m512i s0 =
            _mm512_srai_epi32(_mm512_sll_epi32(v, _mm_cvtsi32_si128(24 - 16 * (j % 2))), 24);
        const __m512i s1 =
            _mm512_srai_epi32(_mm512_sll_epi32(v, _mm_cvtsi32_si128(16 - 16 * (j % 2))), 24);
        _Pragma("GCC unroll 16") for (int t = 0; t < TOK; t++) {
            const __m512i p0 = _mm512_mullo_epi32(_mm512_load_si512(c[set][0] + 16 * t), s0);
            const __m512i p1 = _mm512_mullo_epi32(_mm512_load_si512(c[set][1] + 16 * t), s1);
            sumi[t] = _mm512_add_epi32(sumi[t], _mm512_add_epi32(p0, p1));
        }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + 3328)));
    _Pragma("GCC unroll 16") for (int t = 0; t < TOK; t++) {
        const __m512 dy =
            _mm512_set1_ps(((const cpulm_block_q8_K *)(act + (size_t)t * stride))[b].d);
        float *ot = o + (size_t)t * (size_t)ld;
        const __m512 acc = b ? _mm512_loadu_ps(ot) : _mm512_setzero_ps();
        _mm512_storeu_ps(ot,
                         _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(sumi[t]), acc));
    }
}

static void gemm_q6_K_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    const int nt16 = nt / TOK * TOK;
    if (nt16) {
        _Alignas(64) int8_t q[16 * B_BYTES];
        configure_tiles(TOK);
        for (int64_t b = 0; b < n / CPULM_QK_K; b++) {
            const uint8_t *g = (const uint8_t *)w + (size_t)b * Q6K_SB;
            widen_k6(g, q);
            for (int j = 0; j < nt16; j += TOK)
                tile16_k6(q, g, b, act + (size_t)j * stride, stride, s + (size_t)j * (size_t)ld,
                          ld);
        }
    }
    if (nt > nt16)
        cpulm_kernels_avx512vnni.gemm_x16[CPULM_DTYPE_Q6_K](n, nt - nt16,
                                                            s + (size_t)nt16 * (size_t)ld, ld, w,
                                                            act + (size_t)nt16 * stride, stride);
}

static void gemm_q4_K_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    gemm_k4_x16(n, nt, s, ld, w, act, stride, 0);
}

static void gemm_q5_K_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    gemm_k4_x16(n, nt, s, ld, w, act, stride, 1);
}

static void gemm_q4_0_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    gemm_x16(n, nt, s, ld, w, act, stride, W_Q4_0, CPULM_DTYPE_Q4_0);
}

static void gemm_q8_0_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    gemm_x16(n, nt, s, ld, w, act, stride, W_Q8_0, CPULM_DTYPE_Q8_0);
}

static void gemm_mxfp4_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                           const uint8_t *act, uint64_t stride) {
    gemm_x16(n, nt, s, ld, w, act, stride, W_MXFP4, CPULM_DTYPE_MXFP4);
}

const cpulm_kernels cpulm_kernels_amx = {
    .name = "amx",
    .attn_qscores = cpulm_amx_attn_qscores,
    .gemm_x16 =
        {
            [CPULM_DTYPE_Q8_0] = gemm_q8_0_x16,
            [CPULM_DTYPE_Q4_0] = gemm_q4_0_x16,
            [CPULM_DTYPE_MXFP4] = gemm_mxfp4_x16,
            [CPULM_DTYPE_Q4_K] = gemm_q4_K_x16,
            [CPULM_DTYPE_Q5_K] = gemm_q5_K_x16,
            [CPULM_DTYPE_Q6_K] = gemm_q6_K_x16,
        },
};
#endif
