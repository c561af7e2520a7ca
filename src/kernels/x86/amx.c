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
    _tile_loadconfig(&c);
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
        },
};
#endif
