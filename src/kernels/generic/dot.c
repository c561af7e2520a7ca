/* dot.c: portable-C dot products of a weight row with an activation row, one per
 * (weight type, vec_dot_type) pair. The test oracle for every SIMD level.
 *
 * Quantized dots are computed the integer way, as the formats intend: per block an exact
 * int32 sum of quant products, then one float multiply by the two block scales, blocks
 * accumulated in order in float. SIMD kernels get the same int sums exactly and differ only
 * in float accumulation order. F32 and F16 dots follow one canonical order (below).
 */
#include <math.h>
#include <string.h>

#include "base/fp16.h"
#include "generic.h"
#include "format/quant.h"

#define QK CPULM_QK_K

/* ---- float types ---- */

/* The canonical order of float dot products (every level computes exactly this, so F32 and
 * F16 models give the same logits at every level, and the same as the reference engine's
 * 512-bit build): 16 lanes, lane l fuses the products of elements i == l (mod 16) in order,
 * then a tree sum of the lanes. Rows that are not a multiple of 16 use 4 x 16 lanes over
 * steps of 64, summed pairwise, then the remaining elements fused one by one. */
float cpulm_generic_reduce16(const float *a) {
    float h[8], g[4];
    for (int i = 0; i < 8; i++)
        h[i] = a[i + 8] + a[i];
    for (int i = 0; i < 4; i++)
        g[i] = h[i + 4] + h[i];
    return (g[0] + g[2]) + (g[1] + g[3]);
}

/* Sums 4 x 16 lanes into one value: (a0 + a2) + (a1 + a3) lane-wise, then the tree. */
static float reduce4x16(float acc[4][16]) {
    for (int l = 0; l < 16; l++) {
        acc[0][l] += acc[2][l];
        acc[1][l] += acc[3][l];
    }
    for (int l = 0; l < 16; l++)
        acc[0][l] += acc[1][l];
    return cpulm_generic_reduce16(acc[0]);
}

void cpulm_generic_vec_dot_f32(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    float acc[4][16];
    memset(acc, 0, sizeof acc);
    if (n % 16 == 0) {
        for (int64_t i = 0; i < n; i += 16)
            for (int l = 0; l < 16; l++)
                acc[0][l] = fmaf(x[i + l], y[i + l], acc[0][l]);
        *s = cpulm_generic_reduce16(acc[0]);
        return;
    }
    int64_t np = n & ~(int64_t)63;
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++)
                acc[j][l] = fmaf(x[i + 16 * j + l], y[i + 16 * j + l], acc[j][l]);
    float sum = reduce4x16(acc);
    for (int64_t i = np; i < n; i++)
        sum = fmaf(x[i], y[i], sum);
    *s = sum;
}

/* F16 x F16 products are exact in float, and a double holds sums of them exactly unless
 * their magnitudes span more than about 2^31, so this sum is, in practice, independent of
 * order: SIMD levels may add in any order. The reference's attention adds them in double too. */
void cpulm_generic_vec_dot_f16(int64_t n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(cpulm_fp16_to_f32(x[i]) * cpulm_fp16_to_f32(y[i]));
    *s = (float)sum;
}

void cpulm_generic_vec_dot_bf16(int64_t n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)cpulm_bf16_to_f32(x[i]) * (double)cpulm_bf16_to_f32(y[i]);
    *s = (float)sum;
}

/* The oracles of the multi-row kernels: each pair's own dot. */
void cpulm_generic_gemm_rows_f32(int64_t n, int nr, int nt, float *s, int64_t ld, const void *w,
                                 uint64_t w_stride, const uint8_t *act, uint64_t act_stride) {
    for (int j = 0; j < nt; j++)
        for (int r = 0; r < nr; r++)
            cpulm_generic_vec_dot_f32(n, s + j * ld + r, (const uint8_t *)w + r * w_stride,
                                      act + j * act_stride);
}

void cpulm_generic_gemm_rows_f16(int64_t n, int nr, int nt, float *s, int64_t ld, const void *w,
                                 uint64_t w_stride, const uint8_t *act, uint64_t act_stride) {
    for (int j = 0; j < nt; j++)
        for (int r = 0; r < nr; r++)
            cpulm_generic_vec_dot_f16(n, s + j * ld + r, (const uint8_t *)w + r * w_stride,
                                      act + j * act_stride);
}

/* ---- 32-element blocks against Q8_0 / Q8_1 ---- */

static int dot32_i8(const int8_t *a, const int8_t *b) {
    int sum = 0;
    for (int j = 0; j < 32; j++)
        sum += a[j] * b[j];
    return sum;
}

/* Unpacks 16 bytes of nibbles: element j is the low nibble of qs[j], j + 16 the high one. */
static void unpack_nibbles(const uint8_t qs[16], int8_t q[32], int bias) {
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)((qs[j] & 0xF) - bias);
        q[j + 16] = (int8_t)((qs[j] >> 4) - bias);
    }
}

/* Adds the 5th bit from qh (bit j for element j) to 32 unpacked nibbles, then the bias. */
static void add_high_bits(const uint8_t qh[4], int8_t q[32], int bias) {
    uint32_t h;
    memcpy(&h, qh, 4); /* little-endian hosts only, like the rest of the format code */
    for (int j = 0; j < 32; j++)
        q[j] = (int8_t)(q[j] + (int)(((h >> j) & 1) << 4) - bias);
}

void cpulm_generic_vec_dot_q8_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_q8_0 *x = vx, *y = vy;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        const int sumi = dot32_i8(x[i].qs, y[i].qs);
        sum += (float)sumi * (cpulm_fp16_to_f32(x[i].d) * cpulm_fp16_to_f32(y[i].d));
    }
    *s = sum;
}

void cpulm_generic_vec_dot_q4_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_q4_0 *x = vx;
    const cpulm_block_q8_0 *y = vy;
    float sum = 0.0f;
    int8_t q[32];
    for (int64_t i = 0; i < n / 32; i++) {
        unpack_nibbles(x[i].qs, q, 8);
        const int sumi = dot32_i8(q, y[i].qs);
        sum += (float)sumi * (cpulm_fp16_to_f32(x[i].d) * cpulm_fp16_to_f32(y[i].d));
    }
    *s = sum;
}

/* MXFP4: the doubled E2M1 values are int8, so the block sum is exact as for Q4_0; the
 * scale 2^(e - 128) is a power of two. */
void cpulm_generic_vec_dot_mxfp4_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_mxfp4 *x = vx;
    const cpulm_block_q8_0 *y = vy;
    float sum = 0.0f;
    int8_t q[32];
    for (int64_t i = 0; i < n / 32; i++) {
        for (int j = 0; j < 16; j++) {
            q[j] = cpulm_mxfp4_values2[x[i].qs[j] & 0xF];
            q[j + 16] = cpulm_mxfp4_values2[x[i].qs[j] >> 4];
        }
        const int sumi = dot32_i8(q, y[i].qs);
        sum += (float)sumi * (cpulm_e8m0_half(x[i].e) * cpulm_fp16_to_f32(y[i].d));
    }
    *s = sum;
}

void cpulm_generic_vec_dot_q5_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_q5_0 *x = vx;
    const cpulm_block_q8_0 *y = vy;
    float sum = 0.0f;
    int8_t q[32];
    for (int64_t i = 0; i < n / 32; i++) {
        unpack_nibbles(x[i].qs, q, 0);
        add_high_bits(x[i].qh, q, 16);
        const int sumi = dot32_i8(q, y[i].qs);
        sum += (float)sumi * (cpulm_fp16_to_f32(x[i].d) * cpulm_fp16_to_f32(y[i].d));
    }
    *s = sum;
}

/* x = d*q + m, so dot = dx*dy*sum(q*qy) + m * (dy*sum(qy)), and Q8_1 stores dy*sum(qy). */
void cpulm_generic_vec_dot_q4_1_q8_1(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_q4_1 *x = vx;
    const cpulm_block_q8_1 *y = vy;
    float sum = 0.0f;
    int8_t q[32];
    for (int64_t i = 0; i < n / 32; i++) {
        unpack_nibbles(x[i].qs, q, 0);
        const int sumi = dot32_i8(q, y[i].qs);
        sum += (float)sumi * (cpulm_fp16_to_f32(x[i].d) * cpulm_fp16_to_f32(y[i].d)) +
               cpulm_fp16_to_f32(x[i].m) * cpulm_fp16_to_f32(y[i].s);
    }
    *s = sum;
}

void cpulm_generic_vec_dot_q5_1_q8_1(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_q5_1 *x = vx;
    const cpulm_block_q8_1 *y = vy;
    float sum = 0.0f;
    int8_t q[32];
    for (int64_t i = 0; i < n / 32; i++) {
        unpack_nibbles(x[i].qs, q, 0);
        add_high_bits(x[i].qh, q, 0);
        const int sumi = dot32_i8(q, y[i].qs);
        sum += (float)sumi * (cpulm_fp16_to_f32(x[i].d) * cpulm_fp16_to_f32(y[i].d)) +
               cpulm_fp16_to_f32(x[i].m) * cpulm_fp16_to_f32(y[i].s);
    }
    *s = sum;
}

/* ---- K-quants against Q8_K ---- */

/* Unpacks a Q4_K / Q5_K super-block's quants (0..15 or 0..31) in element order. */
static void unpack_k4(const uint8_t qs[128], const uint8_t *qh, int8_t q[QK]) {
    for (int j = 0; j < 8; j++) {
        const uint8_t *src = qs + 32 * (j / 2);
        const int shift = 4 * (j % 2);
        for (int l = 0; l < 32; l++) {
            int v = (src[l] >> shift) & 0xF;
            if (qh) v |= ((qh[l] >> j) & 1) << 4;
            q[32 * j + l] = (int8_t)v;
        }
    }
}

/* x = d*sc_j*q - dmin*m_j: the min term needs only sum(qy) per sub-block, from bsums. */
static float dot_k4_superblock(const cpulm_block_q8_K *y, const int8_t q[QK],
                               const uint8_t scales[12], uint16_t d, uint16_t dmin) {
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        cpulm_k4_scale_min(j, scales, &sc, &m);
        int dot = 0;
        for (int l = 0; l < 32; l++)
            dot += q[32 * j + l] * y->qs[32 * j + l];
        sumi += sc * dot;
        summ += m * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
    }
    return y->d * cpulm_fp16_to_f32(d) * (float)sumi - y->d * cpulm_fp16_to_f32(dmin) * (float)summ;
}

void cpulm_generic_vec_dot_q4_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_q4_K *x = vx;
    const cpulm_block_q8_K *y = vy;
    float sum = 0.0f;
    int8_t q[QK];
    for (int64_t i = 0; i < n / QK; i++) {
        unpack_k4(x[i].qs, NULL, q);
        sum += dot_k4_superblock(&y[i], q, x[i].scales, x[i].d, x[i].dmin);
    }
    *s = sum;
}

void cpulm_generic_vec_dot_q5_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_q5_K *x = vx;
    const cpulm_block_q8_K *y = vy;
    float sum = 0.0f;
    int8_t q[QK];
    for (int64_t i = 0; i < n / QK; i++) {
        unpack_k4(x[i].qs, x[i].qh, q);
        sum += dot_k4_superblock(&y[i], q, x[i].scales, x[i].d, x[i].dmin);
    }
    *s = sum;
}

/* Unpacks a Q6_K super-block's quants to -32..31 in element order. */
static void unpack_q6_K(const cpulm_block_q6_K *b, int8_t q[QK]) {
    for (int c = 0; c < 2; c++) {
        const uint8_t *ql = b->ql + 64 * c, *qh = b->qh + 32 * c;
        int8_t *o = q + 128 * c;
        for (int l = 0; l < 32; l++) {
            o[l] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
            o[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

void cpulm_generic_vec_dot_q6_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_q6_K *x = vx;
    const cpulm_block_q8_K *y = vy;
    float sum = 0.0f;
    int8_t q[QK];
    for (int64_t i = 0; i < n / QK; i++) {
        unpack_q6_K(&x[i], q);
        int sumi = 0;
        for (int g = 0; g < 16; g++) {
            int dot = 0;
            for (int l = 0; l < 16; l++)
                dot += q[16 * g + l] * y[i].qs[16 * g + l];
            sumi += x[i].scales[g] * dot;
        }
        sum += cpulm_fp16_to_f32(x[i].d) * y[i].d * (float)sumi;
    }
    *s = sum;
}
