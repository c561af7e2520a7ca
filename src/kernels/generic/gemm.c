/* gemm.c: portable reference GEMM over repacked 16-row weight groups (layouts in kernels.h).
 * It computes each block's exact integer dot product, then accumulates
 * acc += dw * (dx * isum) block by block, the order the SIMD levels follow. */
#include <string.h>

#include "../../base/fp16.h"
#include "generic.h"
#include "kernels/kernels.h"

#define R CPULM_PACK_ROWS

/* Exact sum over the block of w[r][k] * x[k] for the 16 rows, given the rows' quants as
 * signed bytes in original element order. */
static void block_isums(const int8_t w[R][32], const int8_t *x, int32_t *isum) {
    for (int r = 0; r < R; r++) {
        int32_t s = 0;
        for (int k = 0; k < 32; k++)
            s += (int32_t)w[r][k] * x[k];
        isum[r] = s;
    }
}

/* Un-interleaves block b of a Q4_0 group: quants minus 8, and the 16 scales. */
static void unpack_q4_0(const uint8_t *blk, int8_t w[R][32], float *dw) {
    const uint8_t *q = blk + 2 * R;
    for (int r = 0; r < R; r++) {
        dw[r] = cpulm_fp16_to_f32((uint16_t)(blk[2 * r] | blk[2 * r + 1] << 8));
        for (int t = 0; t < 4; t++)
            for (int c = 0; c < 4; c++) {
                uint8_t v = q[t * 64 + r * 4 + c];
                w[r][4 * t + c] = (int8_t)((v & 15) - 8);
                w[r][16 + 4 * t + c] = (int8_t)((v >> 4) - 8);
            }
    }
}

static void unpack_q8_0(const uint8_t *blk, int8_t w[R][32], float *dw) {
    const uint8_t *q = blk + 2 * R;
    for (int r = 0; r < R; r++) {
        dw[r] = cpulm_fp16_to_f32((uint16_t)(blk[2 * r] | blk[2 * r + 1] << 8));
        for (int s = 0; s < 8; s++)
            for (int c = 0; c < 4; c++)
                w[r][4 * s + c] = (int8_t)q[s * 64 + r * 4 + c];
    }
}

/* MXFP4: e[16] (one byte per row), then the codes in Q4_0's 4 chunks; dw = 2^(e - 128). */
static void unpack_mxfp4(const uint8_t *blk, int8_t w[R][32], float *dw) {
    const uint8_t *q = blk + R;
    for (int r = 0; r < R; r++) {
        dw[r] = cpulm_e8m0_half(blk[r]);
        for (int t = 0; t < 4; t++)
            for (int c = 0; c < 4; c++) {
                uint8_t v = q[t * 64 + r * 4 + c];
                w[r][4 * t + c] = cpulm_mxfp4_values2[v & 15];
                w[r][16 + 4 * t + c] = cpulm_mxfp4_values2[v >> 4];
            }
    }
}

static void gemm_x16(int64_t n, int nt, float *s, int64_t ld, const uint8_t *w, size_t blk_bytes,
                     void (*unpack)(const uint8_t *, int8_t[R][32], float *), const uint8_t *act,
                     uint64_t act_stride) {
    const int64_t nb = n / 32;
    const uint64_t xo = cpulm_pack_act_extras_offset(n);
    for (int j = 0; j < nt; j++) {
        const uint8_t *row = act + (size_t)j * act_stride;
        const cpulm_block_q8_0 *x = (const cpulm_block_q8_0 *)row;
        const float *dx = (const float *)(row + xo);
        float acc[R] = {0};
        for (int64_t b = 0; b < nb; b++) {
            int8_t wq[R][32];
            float dw[R];
            int32_t isum[R];
            unpack(w + (size_t)b * blk_bytes, wq, dw);
            block_isums((const int8_t(*)[32])wq, x[b].qs, isum);
            for (int r = 0; r < R; r++)
                acc[r] += dw[r] * (dx[b] * (float)isum[r]);
        }
        memcpy(s + (size_t)j * (size_t)ld, acc, sizeof acc);
    }
}

void cpulm_generic_gemm_q4_0_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                                 const uint8_t *act, uint64_t act_stride) {
    gemm_x16(n, nt, s, ld, w, 2 * R + 16 * R, unpack_q4_0, act, act_stride);
}

void cpulm_generic_gemm_q8_0_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                                 const uint8_t *act, uint64_t act_stride) {
    gemm_x16(n, nt, s, ld, w, 2 * R + 32 * R, unpack_q8_0, act, act_stride);
}

void cpulm_generic_gemm_mxfp4_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                                  const uint8_t *act, uint64_t act_stride) {
    gemm_x16(n, nt, s, ld, w, R + 16 * R, unpack_mxfp4, act, act_stride);
}
