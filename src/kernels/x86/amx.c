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

/* Tile registers: two of each kind so two blocks are in flight per step. Macros, not enum
 * constants: the compilers' tile intrinsics paste the register number into the assembly, so
 * it must be a literal after one level of macro expansion (the wrappers below). */
#define TC0                  0
#define TC1                  1
#define TA0                  2
#define TA1                  3
#define TB0                  4
#define TB1                  5
#define TILE_ZERO(t)         _tile_zero(t)
#define TILE_LOAD(t, p, s)   _tile_loadd(t, p, s)
#define TILE_STORE(t, p, s)  _tile_stored(t, p, s)
#define TILE_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

static _Thread_local int tiles_configured;

static void configure_tiles(void) {
    if (tiles_configured) return;
    _Alignas(64) tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = TC0; i <= TC1; i++)
        c.rows[i] = TOK, c.colsb[i] = 64; /* 16 tokens x 16 int32 */
    for (int i = TA0; i <= TA1; i++)
        c.rows[i] = TOK, c.colsb[i] = 32; /* 16 tokens x one block's 32 quants */
    for (int i = TB0; i <= TB1; i++)
        c.rows[i] = 8, c.colsb[i] = 64; /* 32 quants x 16 rows, 4 per lane */
    /* Not _tile_loadconfig: GCC 12's version names only the first 8 bytes as its memory
     * operand, so the stores of rows[] and colsb[] were optimized away (the tiles then stayed
     * unconfigured and the first tile instruction raised SIGILL). Here the operand is the
     * whole 64-byte block. */
    __asm__ volatile("ldtilecfg %0" : : "m"(c));
    tiles_configured = 1;
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

/* acc[t] = fma(dw, float(c[t]) * dx_t, acc[t]) for the 16 tokens: avx512vnni.c's float
 * steps on the 16 x 16 sums of one block. dx_t: token t's block scale (act extras). */
static inline __attribute__((always_inline)) void
epilogue(const int32_t *c, __m512 dw, const uint8_t *dx, uint64_t stride, __m512 acc[TOK]) {
    _Pragma("GCC unroll 16") for (int t = 0; t < TOK; t++) {
        float d;
        memcpy(&d, dx + (size_t)t * stride, 4);
        const __m512 f =
            _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * t)), _mm512_set1_ps(d));
        acc[t] = _mm512_fmadd_ps(dw, f, acc[t]);
    }
}

/* The integer sums of panel blocks i and i + 1 (if any) for 16 tokens, into c[0], c[1]. */
static inline void sums_pair(const panel *p, int64_t i, const uint8_t *act, uint64_t stride,
                             int32_t c[2][TOK * 16]) {
    const uint8_t *a = act + (size_t)(p->b0 + i) * sizeof(cpulm_block_q8_0) + 2;
    TILE_ZERO(TC0);
    TILE_LOAD(TA0, a, (long)stride);
    TILE_LOAD(TB0, p->b + (size_t)i * p->step, 64);
    TILE_DPBSSD(TC0, TA0, TB0);
    if (i + 1 < p->count) {
        TILE_ZERO(TC1);
        TILE_LOAD(TA1, a + sizeof(cpulm_block_q8_0), (long)stride);
        TILE_LOAD(TB1, p->b + (size_t)(i + 1) * p->step, 64);
        TILE_DPBSSD(TC1, TA1, TB1);
        TILE_STORE(TC1, c[1], 64);
    }
    TILE_STORE(TC0, c[0], 64);
}

/* 16 tokens (act rows, stride apart) over the panel's blocks; the running sums start at 0
 * (first panel) or from o (rows ld apart) and end there. Software-pipelined: the tiles of
 * the next pair of blocks are issued before the epilogue of this pair, into the other half
 * of c, so the tile unit and the vector ports work at once and no epilogue load waits for a
 * tile store in flight. acc[] stays in registers: every loop over it is unrolled. */
static void tile16(const panel *p, const uint8_t *act, uint64_t stride, uint64_t xo, float *o,
                   int64_t ld) {
    _Alignas(64) int32_t c[2][2][TOK * 16];
    __m512 acc[TOK];
    _Pragma("GCC unroll 16") for (int t = 0; t < TOK; t++) acc[t] =
        p->b0 ? _mm512_loadu_ps(o + (size_t)t * (size_t)ld) : _mm512_setzero_ps();
    sums_pair(p, 0, act, stride, c[0]);
    for (int64_t i = 0; i < p->count; i += 2) {
        int32_t(*cur)[TOK * 16] = c[(i >> 1) & 1];
        if (i + 2 < p->count) sums_pair(p, i + 2, act, stride, c[((i >> 1) + 1) & 1]);
        const uint8_t *dx = act + xo + 4 * (size_t)(p->b0 + i);
        epilogue(cur[0], _mm512_load_ps(p->dw + 16 * i), dx, stride, acc);
        if (i + 1 < p->count)
            epilogue(cur[1], _mm512_load_ps(p->dw + 16 * (i + 1)), dx + 4, stride, acc);
    }
    _Pragma("GCC unroll 16") for (int t = 0; t < TOK; t++)
        _mm512_storeu_ps(o + (size_t)t * (size_t)ld, acc[t]);
}

/* Tokens [0, nt16) (a multiple of 16) against one group: panel by panel, every 16-token tile
 * visits the panel while it is hot; the running sums wait in s between panels. */
static void gemm_amx(int64_t n, int nt16, float *s, int64_t ld, const uint8_t *w, int wk,
                     const uint8_t *act, uint64_t stride) {
    _Alignas(64) int8_t q[PANEL_BLOCKS * B_BYTES];
    _Alignas(64) float dw[PANEL_BLOCKS * 16];
    const int64_t nb = n / 32;
    const uint64_t xo = cpulm_pack_act_extras_offset(n);
    configure_tiles();
    for (int64_t b0 = 0; b0 < nb; b0 += PANEL_BLOCKS) {
        panel p;
        stage_panel(w, wk, b0, nb - b0 < PANEL_BLOCKS ? nb - b0 : PANEL_BLOCKS, q, dw, &p);
        for (int j = 0; j < nt16; j += TOK)
            tile16(&p, act + (size_t)j * stride, stride, xo, s + (size_t)j * (size_t)ld, ld);
    }
}

static void gemm_x16(int64_t n, int nt, float *s, int64_t ld, const void *w, const uint8_t *act,
                     uint64_t stride, int wk, cpulm_dtype type) {
    const int nt16 = nt / TOK * TOK;
    if (nt16) gemm_amx(n, nt16, s, ld, w, wk, act, stride);
    if (nt > nt16)
        cpulm_kernels_avx512vnni.gemm_x16[type](n, nt - nt16, s + (size_t)nt16 * (size_t)ld, ld, w,
                                                act + (size_t)nt16 * stride, stride);
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

/* The 8 sub-block sums of super-block sb (panel-relative) for 16 tokens, into c[0..7]. */
static inline void sums_k(const int8_t *bq, int64_t b, const uint8_t *act, uint64_t stride,
                          int32_t c[8][TOK * 16]) {
    const uint8_t *a = act + (size_t)b * sizeof(cpulm_block_q8_K) + 4;
    for (int j = 0; j < 8; j += 2) {
        TILE_ZERO(TC0);
        TILE_ZERO(TC1);
        TILE_LOAD(TA0, a + 32 * j, (long)stride);
        TILE_LOAD(TB0, bq + B_BYTES * j, 64);
        TILE_LOAD(TA1, a + 32 * (j + 1), (long)stride);
        TILE_LOAD(TB1, bq + B_BYTES * (j + 1), 64);
        TILE_DPBSSD(TC0, TA0, TB0);
        TILE_DPBSSD(TC1, TA1, TB1);
        TILE_STORE(TC0, c[j], 64);
        TILE_STORE(TC1, c[j + 1], 64);
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
    configure_tiles();
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
    .gemm_x16 =
        {
            [CPULM_DTYPE_Q8_0] = gemm_q8_0_x16,
            [CPULM_DTYPE_Q4_0] = gemm_q4_0_x16,
            [CPULM_DTYPE_MXFP4] = gemm_mxfp4_x16,
            [CPULM_DTYPE_Q4_K] = gemm_q4_K_x16,
            [CPULM_DTYPE_Q5_K] = gemm_q5_K_x16,
        },
};
#endif
