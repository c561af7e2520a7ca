/* gemm_k.c: portable reference GEMM over repacked 16-row groups of K-quant weights
 * (Q4_K, Q5_K, Q6_K; layouts and float steps in kernels.h, cpulm_gemm_fn). The oracle of
 * the SIMD levels: it rebuilds each row's super-block from the group, takes the exact
 * integer sums the generic vec_dot takes (min and bias terms from the Q8_K block's own
 * bsums, not from the activation extras, so the extras get checked too), and applies the
 * per-super-block float steps with explicit fmaf (the build disables contraction). */
#include <math.h>
#include <string.h>

#include "../../base/fp16.h"
#include "generic.h"
#include "kernels/kernels.h"
#if defined(__aarch64__) /* packed Q5_K / Q6_K quants in the ARM layouts (repack.c's hook) */
#include "../arm/k5_layout.h"
#include "../arm/k6_layout.h"
#endif

#define R  CPULM_PACK_ROWS
#define QK CPULM_QK_K

/* Field bytes [0, sz) of row r from a packed field at f (sz a multiple of 4: 64-byte
 * chunks of 4-byte lanes). */
static void gather(const uint8_t *f, int r, uint8_t *out, int sz) {
    for (int c = 0; c < sz / 4; c++)
        memcpy(out + 4 * c, f + 64 * c + 4 * r, 4);
}

static float half_at(const uint8_t *f, int r) {
    return cpulm_fp16_to_f32((uint16_t)(f[2 * r] | f[2 * r + 1] << 8));
}

/* One row's Q4_K / Q5_K super-block: quants 0..31 in element order, scales, mins. */
typedef struct k4_row {
    float d, dmin;
    uint8_t sc[8], m[8];
    int8_t q[QK];
} k4_row;

/* Group super-block g (Q4_K when !q5: d, dmin, scales, qs; Q5_K: d, dmin, scales, qh, qs). */
static void unpack_k4(const uint8_t *g, int r, int q5, k4_row *o) {
    uint8_t scales[12], qh[32] = {0}, qs[128];
    o->d = half_at(g, r);
    o->dmin = half_at(g + 2 * R, r);
    gather(g + 4 * R, r, scales, 12);
#if defined(__aarch64__)
    if (q5)
        cpulm_k5a_get_row(g + CPULM_K5A_OFF, r, qh, qs);
    else
        gather(g + 16 * R, r, qs, 128);
#else
    if (q5) gather(g + 16 * R, r, qh, 32);
    gather(g + (q5 ? 48 : 16) * R, r, qs, 128);
#endif
    for (int j = 0; j < 8; j++) {
        cpulm_k4_scale_min(j, scales, &o->sc[j], &o->m[j]);
        for (int l = 0; l < 32; l++) { /* sub-block j: nibble j%2 of qs[32*(j/2) + l] */
            const int v = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
            o->q[32 * j + l] = (int8_t)(v | ((qh[l] >> j) & 1) << 4);
        }
    }
}

static float k4_superblock(const k4_row *w, const cpulm_block_q8_K *y, float acc) {
    int32_t sumi = 0, summ = 0;
    for (int j = 0; j < 8; j++) {
        int32_t dot = 0;
        for (int l = 0; l < 32; l++)
            dot += w->q[32 * j + l] * y->qs[32 * j + l];
        sumi += w->sc[j] * dot;
        summ += w->m[j] * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
    }
    acc = fmaf(w->d * y->d, (float)sumi, acc);
    return fmaf(-(w->dmin * y->d), (float)summ, acc);
}

/* One row's Q6_K super-block: quants minus 32, in element order, and the 16 scales. */
typedef struct k6_row {
    float d;
    int8_t sc[16];
    int8_t q[QK];
} k6_row;

/* Group super-block g: ql (32 chunks), qh (16 chunks), scales (4 chunks), d[16]. */
static void unpack_k6(const uint8_t *g, int r, k6_row *o) {
    uint8_t ql[128], qh[64];
#if defined(__aarch64__)
    cpulm_k6a_get_row(g, r, ql, qh);
#else
    gather(g, r, ql, 128);
    gather(g + 128 * R, r, qh, 64);
#endif
    gather(g + 192 * R, r, (uint8_t *)o->sc, 16);
    o->d = half_at(g + 208 * R, r);
    for (int c = 0; c < 2; c++) /* element 128c + 32s + l: see cpulm_block_q6_K */
        for (int s = 0; s < 4; s++)
            for (int l = 0; l < 32; l++) {
                const int lo = (ql[64 * c + 32 * (s & 1) + l] >> (4 * (s >> 1))) & 0xF;
                const int hi = (qh[32 * c + l] >> (2 * s)) & 3;
                o->q[128 * c + 32 * s + l] = (int8_t)((lo | hi << 4) - 32);
            }
}

static float k6_superblock(const k6_row *w, const cpulm_block_q8_K *y, float acc) {
    int32_t sumi = 0;
    for (int g = 0; g < 16; g++) {
        int32_t dot = 0;
        for (int l = 0; l < 16; l++)
            dot += w->q[16 * g + l] * y->qs[16 * g + l];
        sumi += w->sc[g] * dot;
    }
    return fmaf(w->d * y->d, (float)sumi, acc);
}

/* type: 4, 5 or 6 (Q4_K, Q5_K, Q6_K); sb_bytes: a group's bytes per super-block. */
static void gemm_k(int64_t n, int nt, float *s, int64_t ld, const uint8_t *w, int type,
                   size_t sb_bytes, const uint8_t *act, uint64_t act_stride) {
    const int64_t nsb = n / QK;
    for (int j = 0; j < nt; j++) {
        const cpulm_block_q8_K *y = (const cpulm_block_q8_K *)(act + (size_t)j * act_stride);
        for (int r = 0; r < R; r++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nsb; b++) {
                const uint8_t *g = w + (size_t)b * sb_bytes;
                if (type == 6) {
                    k6_row row;
                    unpack_k6(g, r, &row);
                    acc = k6_superblock(&row, &y[b], acc);
                } else {
                    k4_row row;
                    unpack_k4(g, r, type == 5, &row);
                    acc = k4_superblock(&row, &y[b], acc);
                }
            }
            s[(size_t)j * (size_t)ld + (size_t)r] = acc;
        }
    }
}

void cpulm_generic_gemm_q4_K_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                                 const uint8_t *act, uint64_t act_stride) {
    gemm_k(n, nt, s, ld, w, 4, sizeof(cpulm_block_q4_K) * R, act, act_stride);
}

void cpulm_generic_gemm_q5_K_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                                 const uint8_t *act, uint64_t act_stride) {
    gemm_k(n, nt, s, ld, w, 5, sizeof(cpulm_block_q5_K) * R, act, act_stride);
}

void cpulm_generic_gemm_q6_K_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                                 const uint8_t *act, uint64_t act_stride) {
    gemm_k(n, nt, s, ld, w, 6, sizeof(cpulm_block_q6_K) * R, act, act_stride);
}
