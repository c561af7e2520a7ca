/* matmul.c: threading and tiling of y = W x over the kernel table (see matmul.h). */
#include "matmul.h"

#include <assert.h>
#include <string.h>

#include "../base/fp16.h"

#define ROW_BLOCK 16 /* weight rows kept hot in cache while every activation row visits them */
#define ROWS_TOK  16 /* activation rows per gemm_rows call */
#define TOK_CHUNK CPULM_MATMUL_TOK_CHUNK /* matmul.h */

uint64_t cpulm_matmul_act_bytes(cpulm_dtype vdt, int64_t n) {
    if (vdt == CPULM_DTYPE_Q8_0) return cpulm_pack_act_row_bytes(n);
    if (vdt == CPULM_DTYPE_Q8_K) return cpulm_pack_actk_row_bytes(n);
    return cpulm_dtype_row_bytes(vdt, n);
}

static void q8_0_extras(uint8_t *dst, int64_t n) {
    const int64_t nb = n / 32;
    const cpulm_block_q8_0 *b = (const cpulm_block_q8_0 *)dst;
    float *d = (float *)(dst + cpulm_pack_act_extras_offset(n));
    int32_t *c4 = (int32_t *)(d + nb), *c8 = c4 + nb;
    float *sd = (float *)(dst + cpulm_pack_act_sums_offset(n));
    for (int64_t i = 0; i < nb; i++) {
        int32_t s = 0;
        for (int j = 0; j < 32; j++)
            s += b[i].qs[j];
        d[i] = cpulm_fp16_to_f32(b[i].d);
        c4[i] = -8 * s;
        c8[i] = -128 * s;
        sd[i] = cpulm_fp16_to_f32(cpulm_f32_to_fp16((float)s * d[i]));
    }
}

/* Two int16 values as one int32 word, lo in the low half (what a pairwise int16 dot reads). */
static int32_t pair16(int lo, int hi) {
    return (int32_t)((uint32_t)(uint16_t)(int16_t)lo | (uint32_t)(uint16_t)(int16_t)hi << 16);
}

static void q8_K_extras(uint8_t *dst, int64_t n) {
    const cpulm_block_q8_K *b = (const cpulm_block_q8_K *)dst;
    int32_t *e = (int32_t *)(dst + cpulm_pack_actk_extras_offset(n));
    for (int64_t i = 0; i < n / CPULM_QK_K; i++, e += CPULM_PACK_ACTK_WORDS) {
        const int16_t *b16 = b[i].bsums;
        int b32[8];
        for (int j = 0; j < 8; j++)
            b32[j] = b16[2 * j] + b16[2 * j + 1]; /* |.| <= 32 * 127 */
        for (int h = 0; h < 2; h++) {
            e[2 * h] = pair16(b32[4 * h], b32[4 * h + 2]);
            e[2 * h + 1] = pair16(b32[4 * h + 1], b32[4 * h + 3]);
        }
        for (int c = 0; c < 4; c++) {
            e[4 + 2 * c] = pair16(b16[4 * c], b16[4 * c + 2]);
            e[5 + 2 * c] = pair16(b16[4 * c + 1], b16[4 * c + 3]);
        }
        for (int g = 0; g < 16; g++)
            e[12 + g] = -32 * b16[g];
    }
}

void cpulm_matmul_quantize_act(const cpulm_kernels *k, cpulm_dtype vdt, const float *x,
                               uint8_t *dst, int64_t n) {
    k->from_float[vdt](x, dst, n);
    if (vdt == CPULM_DTYPE_Q8_0) q8_0_extras(dst, n);
    if (vdt == CPULM_DTYPE_Q8_K) q8_K_extras(dst, n);
}

static void store(const cpulm_matmul_args *a, float *o, int64_t r, float s) {
    if (a->bias) s += a->bias[r];
    o[r] = a->accumulate ? o[r] + s : s;
}

/* Packed weights: this thread's 16-row groups, each visited by every chunk of tokens. A
 * level with x16_groups takes up to GROUPS_PER_CALL groups per call (it prepares the tokens
 * once for all of them). */
#define GROUPS_PER_CALL 8
static void matmul_packed(const cpulm_kernels *k, const cpulm_matmul_args *a, int ith, int nth) {
    const int64_t ng = a->n_out / CPULM_PACK_ROWS;
    const int64_t g0 = ng * ith / nth, g1 = ng * (ith + 1) / nth;
    const size_t group_bytes = (size_t)a->w_row_bytes * CPULM_PACK_ROWS;
    cpulm_gemm_fn gemm = k->gemm_x16[a->w_type];
    cpulm_gemm_groups_fn groups = k->x16_groups[a->w_type];
    assert(a->packed == 1 + k->x16_layout[a->w_type]); /* packed for this level's GEMM */
    /* plain stores: the kernel writes the output rows themselves (through the tile and a
     * copy they were ~3% of a 1B pp512); a bias, a residual add or mins take the tile */
    const int direct = !a->bias && !a->accumulate && !a->mins;
    float tile[TOK_CHUNK * CPULM_PACK_ROWS * GROUPS_PER_CALL];
    for (int64_t t0 = 0; t0 < a->n_rows; t0 += TOK_CHUNK) {
        const int nt = (int)(a->n_rows - t0 < TOK_CHUNK ? a->n_rows - t0 : TOK_CHUNK);
        const uint8_t *x = a->act + (size_t)t0 * a->act_stride;
        for (int64_t g = g0; g < g1;) {
            const int gn = groups ? (int)(g1 - g < GROUPS_PER_CALL ? g1 - g : GROUPS_PER_CALL) : 1;
            const int w = gn * CPULM_PACK_ROWS; /* tile row width */
            const uint8_t *wg = (const uint8_t *)a->w + (size_t)g * group_bytes;
            float *s = direct ? a->out + t0 * a->ld_out + g * CPULM_PACK_ROWS : tile;
            const int64_t ld = direct ? a->ld_out : w;
            if (groups)
                groups(a->n_in, nt, gn, s, ld, wg, group_bytes, x, a->act_stride);
            else
                gemm(a->n_in, nt, s, ld, wg, x, a->act_stride);
            if (a->mins) /* the widened Q4_1 / Q5_1 min term: the rows' s_b from the extras */
                k->gemm_mins(a->n_in / 32, nt, gn,
                             a->mins + (size_t)g * (size_t)(a->n_in / 32) * 16,
                             x + cpulm_pack_act_sums_offset(a->n_in), a->act_stride, tile, w);
            for (int j = 0; j < nt && !direct; j++) {
                float *o = a->out + (t0 + j) * a->ld_out;
                const float *v = tile + j * w;
                float *og = o + g * CPULM_PACK_ROWS;
                /* the common cases as straight loops the compiler vectorizes */
                if (a->bias)
                    for (int r = 0; r < w; r++)
                        store(a, o, g * CPULM_PACK_ROWS + r, v[r]);
                else if (a->accumulate)
                    for (int r = 0; r < w; r++)
                        og[r] += v[r];
                else
                    memcpy(og, v, sizeof(float) * (size_t)w);
            }
            g += gn;
        }
    }
}

/* tile[j * ROW_BLOCK + r] into output rows t0 + j, columns rb + r, as store() does, with the
 * bias and accumulate tests out of the loops (element by element they were ~20% of a
 * speculative verification's F32 matrix time on stories260K: 16 x 16 stores per call). */
static void store_rows(const cpulm_matmul_args *a, const float *tile, int64_t t0, int nt,
                       int64_t rb, int nr) {
    const float *bias = a->bias ? a->bias + rb : NULL;
    for (int j = 0; j < nt; j++) {
        float *o = a->out + (t0 + j) * a->ld_out + rb;
        const float *v = tile + j * ROW_BLOCK;
        if (!bias && !a->accumulate)
            memcpy(o, v, sizeof(float) * (size_t)nr);
        else if (!bias)
            for (int r = 0; r < nr; r++)
                o[r] += v[r];
        else
            for (int r = 0; r < nr; r++)
                o[r] = a->accumulate ? o[r] + (v[r] + bias[r]) : v[r] + bias[r];
    }
}

/* Multi-row kernel (F32, F16): per block of ROW_BLOCK weight rows, ROWS_TOK activation
 * rows per call (the kernel reads each weight element once per few tokens, not per token). */
static void matmul_rows(cpulm_gemm_rows_fn gemm, const cpulm_matmul_args *a, int64_t r0,
                        int64_t r1) {
    float tile[ROWS_TOK * ROW_BLOCK];
    for (int64_t rb = r0; rb < r1; rb += ROW_BLOCK) {
        const int nr = (int)(r1 - rb < ROW_BLOCK ? r1 - rb : ROW_BLOCK);
        for (int64_t t0 = 0; t0 < a->n_rows; t0 += ROWS_TOK) {
            const int nt = (int)(a->n_rows - t0 < ROWS_TOK ? a->n_rows - t0 : ROWS_TOK);
            gemm(a->n_in, nr, nt, tile, ROW_BLOCK,
                 (const uint8_t *)a->w + (size_t)rb * a->w_row_bytes, a->w_row_bytes,
                 a->act + (size_t)t0 * a->act_stride, a->act_stride);
            store_rows(a, tile, t0, nt, rb, nr);
        }
    }
}

void cpulm_matmul(const cpulm_kernels *k, const cpulm_matmul_args *a, int ith, int nth) {
    if (a->packed) {
        matmul_packed(k, a, ith, nth);
        return;
    }
    int64_t r0 = a->n_out * ith / nth, r1 = a->n_out * (ith + 1) / nth;
    if (k->gemm_rows[a->w_type]) { /* every batch size: one arithmetic whatever the batch */
        matmul_rows(k->gemm_rows[a->w_type], a, r0, r1);
        return;
    }
    cpulm_vec_dot_fn dot = k->vec_dot[a->w_type];
    const uint8_t *wd = a->w;
    for (int64_t rb = r0; rb < r1; rb += ROW_BLOCK) {
        int64_t re = rb + ROW_BLOCK < r1 ? rb + ROW_BLOCK : r1;
        for (int64_t t = 0; t < a->n_rows; t++) {
            const uint8_t *x = a->act + (size_t)t * a->act_stride;
            float *o = a->out + t * a->ld_out;
            for (int64_t r = rb; r < re; r++) {
                float s;
                dot(a->n_in, &s, wd + (size_t)r * a->w_row_bytes, x);
                store(a, o, r, s);
            }
        }
    }
}
