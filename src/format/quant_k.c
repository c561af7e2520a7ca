/* quant_k.c: scalar reference routines for the 256-element "K-quant" super-block formats
 * (Q2_K, Q3_K dequantize only; Q4_K, Q5_K, Q6_K, Q8_K both ways).
 *
 * A super-block holds 8 sub-blocks of 32 (Q4_K/Q5_K) or 16 of 16 (Q6_K), each with its own
 * small integer scale (and min), themselves scaled by fp16 super-block factors. Picking those
 * scales well is what makes K-quants good: for every sub-block we search a handful of
 * candidate scales and keep the weighted least-squares best one (weights favour large
 * magnitudes), as llama.cpp does when quantizing without an importance matrix.
 * Operation order follows the reference formulas so results match llama.cpp's
 * files byte for byte (tested); nothing relies on that for correctness.
 */
#include <math.h>
#include <string.h>

#include "base/fp16.h"
#include "quant.h"

#define QK      CPULM_QK_K
#define MAX_EPS 1e-15f /* below this a group is treated as all zeros */

/* Round to nearest, ties to even, for |f| < 2^22: adding 1.5 * 2^23 leaves the rounded
 * integer in the low mantissa bits. Defined for every input (no float->int overflow UB). */
static int nearest_int(float f) {
    float v = f + 12582912.0f;
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static int clampi(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---- asymmetric sub-block fit (Q4_K, Q5_K): x ~ scale * L - min, L in 0..nmax ---- */

typedef struct {
    int n, nmax;
    float rmin, rdelta; /* candidate inverse scales: (nmax + rmin + rdelta * k) / range */
    int nstep;
} fit_params;

/* Weighted squared error of x ~ scale * L + min. */
static float fit_error(const float *x, const float *w, const uint8_t *L, int n, float scale,
                       float min) {
    float err = 0.0f;
    for (int i = 0; i < n; i++) {
        float diff = scale * (float)L[i] + min - x[i];
        err += w[i] * (diff * diff);
    }
    return err;
}

static void quantize_with(const float *x, int n, int nmax, float iscale, float min, uint8_t *L) {
    for (int i = 0; i < n; i++)
        L[i] = (uint8_t)clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
}

/* Returns the scale and stores the (positive) min in *the_min; fills L with the chosen
 * quants. For each candidate inverse scale, quantize, then solve the 2x2 weighted least
 * squares for (scale, min) given those L; keep the candidate with the lowest error.
 * Long because it is one algorithm whose steps share all the accumulators. */
static float fit_scale_min(const fit_params *p, const float *x, const float *w, uint8_t *L,
                           float *the_min) {
    const int n = p->n;
    uint8_t Laux[32];
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0; /* the format subtracts a non-negative min only */
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.0f;
    }
    float iscale = (float)p->nmax / (max - min);
    float scale = 1.0f / iscale;
    quantize_with(x, n, p->nmax, iscale, min, L);
    float best_error = fit_error(x, w, L, n, scale, min);
    for (int is = 0; is <= p->nstep; is++) {
        iscale = (p->rmin + p->rdelta * (float)is + (float)p->nmax) / (max - min);
        quantize_with(x, n, p->nmax, iscale, min, Laux);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const float l = (float)Laux[i];
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0)) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        const float err = fit_error(x, w, Laux, n, this_scale, this_min);
        if (err < best_error) {
            memcpy(L, Laux, (size_t)n);
            best_error = err;
            scale = this_scale;
            min = this_min;
        }
    }
    *the_min = -min;
    return scale;
}

/* ---- Q4_K / Q5_K shared: 8 sub-blocks of 32 with 6-bit scales and mins ---- */

static void pack_scales_k4(uint8_t out[12], const uint8_t ls[8], const uint8_t lm[8]) {
    memset(out, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            out[j] = ls[j];
            out[j + 4] = lm[j];
        } else {
            out[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            out[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            out[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* Quantizes one super-block to levels L[256] in 0..nmax with packed scales; writes d, dmin. */
static void quantize_superblock_k4(const float *x, const fit_params *fp, uint8_t L[QK],
                                   uint8_t packed[12], uint16_t *d_out, uint16_t *dmin_out) {
    float scales[8], mins[8], w[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += xs[l] * xs[l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            w[l] = av_x + fabsf(xs[l]);
        scales[j] = fit_scale_min(fp, xs, w, L + 32 * j, &mins[j]);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        ls[j] = (uint8_t)clampi(nearest_int(inv_scale * scales[j]), 0, 63);
        lm[j] = (uint8_t)clampi(nearest_int(inv_min * mins[j]), 0, 63);
    }
    pack_scales_k4(packed, ls, lm);
    *d_out = cpulm_f32_to_fp16(max_scale / 63.0f);
    *dmin_out = cpulm_f32_to_fp16(max_min / 63.0f);
    /* Re-quantize against the scales as stored (6-bit, fp16), not the ideal ones. */
    const float d = cpulm_fp16_to_f32(*d_out), dmin = cpulm_fp16_to_f32(*dmin_out);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        cpulm_k4_scale_min(j, packed, &sc, &m);
        const float ds = d * sc;
        if (ds == 0.0f) continue;
        const float dm = dmin * m;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)clampi(nearest_int((x[32 * j + l] + dm) / ds), 0, fp->nmax);
    }
}

void cpulm_quantize_row_q4_K_ref(const float *x, void *vy, int64_t n) {
    static const fit_params fp = {.n = 32, .nmax = 15, .rmin = -1.0f, .rdelta = 0.1f, .nstep = 20};
    cpulm_block_q4_K *y = vy;
    uint8_t L[QK];
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        quantize_superblock_k4(x, &fp, L, y[i].scales, &y[i].d, &y[i].dmin);
        /* 64 elements per 32 bytes: low nibbles are elements 0..31, high 32..63 */
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

void cpulm_quantize_row_q5_K_ref(const float *x, void *vy, int64_t n) {
    static const fit_params fp = {.n = 32, .nmax = 31, .rmin = -0.5f, .rdelta = 0.1f, .nstep = 15};
    cpulm_block_q5_K *y = vy;
    uint8_t L[QK];
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        quantize_superblock_k4(x, &fp, L, y[i].scales, &y[i].d, &y[i].dmin);
        memset(y[i].qh, 0, sizeof y[i].qh);
        /* chunk c (64 elements): low nibbles as Q4_K, 5th bits in qh bit 2c / 2c+1 */
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                const int l1 = L[64 * c + l], l2 = L[64 * c + 32 + l];
                y[i].qs[32 * c + l] = (uint8_t)((l1 & 0xF) | ((l2 & 0xF) << 4));
                y[i].qh[l] |= (uint8_t)(((l1 >> 4) << (2 * c)) | ((l2 >> 4) << (2 * c + 1)));
            }
        }
    }
}

/* One Q4_K or Q5_K block's 256 values: 8 sub-blocks of 32, x = d * sc * q - dmin * m, q the
 * 4 low bits from qs and, for Q5_K, the fifth from qh (NULL for Q4_K). */
static void dequantize_k45(float d, float dmin, const uint8_t *scales, const uint8_t *qs,
                           const uint8_t *qh, float *y) {
    for (int j = 0; j < 8; j++, y += 32) {
        uint8_t sc, m;
        cpulm_k4_scale_min(j, scales, &sc, &m);
        const float d1 = d * sc, m1 = dmin * m;
        const uint8_t *q = qs + 32 * (j / 2);
        const int shift = 4 * (j % 2);
        for (int l = 0; l < 32; l++) {
            const int v = ((q[l] >> shift) & 0xF) | (qh ? ((qh[l] >> j) & 1) << 4 : 0);
            y[l] = d1 * (float)v - m1;
        }
    }
}

void cpulm_dequantize_row_q4_K_ref(const void *vx, float *y, int64_t n) {
    const cpulm_block_q4_K *x = vx;
    for (int64_t i = 0; i < n / QK; i++, y += QK)
        dequantize_k45(cpulm_fp16_to_f32(x[i].d), cpulm_fp16_to_f32(x[i].dmin), x[i].scales,
                       x[i].qs, NULL, y);
}

void cpulm_dequantize_row_q5_K_ref(const void *vx, float *y, int64_t n) {
    const cpulm_block_q5_K *x = vx;
    for (int64_t i = 0; i < n / QK; i++, y += QK)
        dequantize_k45(cpulm_fp16_to_f32(x[i].d), cpulm_fp16_to_f32(x[i].dmin), x[i].scales,
                       x[i].qs, x[i].qh, y);
}

/* ---- Q6_K: 16 sub-blocks of 16, symmetric, int8 scales; x = d * sc * (q - 32) ---- */

/* Symmetric fit of n values to L in 0..2*nmax-1 (i.e. -nmax..nmax-1 biased by nmax),
 * weights x^2; tries 19 inverse scales around nmax / max. Returns the scale. */
static float fit_scale_sym(int n, int nmax, const float *x, uint8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    }
    if (amax < MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float best = 0, scale = 0;
    for (int is = 0; is <= 18; is++) {
        /* is == 0 is the plain candidate; then -9..9 without 0 */
        const int k = is == 0 ? 0 : (is <= 9 ? is - 10 : is - 9);
        const float iscale = is == 0 ? -(float)nmax / max : -((float)nmax + 0.1f * (float)k) / max;
        float sumlx = 0, suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        const bool better = is == 0 || (suml2 > 0 && sumlx * sumlx > best * suml2);
        if (!better) continue;
        for (int i = 0; i < n; i++)
            L[i] = (uint8_t)(nmax + clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1));
        scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
        best = scale * sumlx;
    }
    return scale;
}

static void pack_q6_K(const uint8_t L[QK], cpulm_block_q6_K *b) {
    for (int c = 0; c < 2; c++) { /* 128 elements per chunk: 64 bytes of ql, 32 of qh */
        const uint8_t *Lc = L + 128 * c;
        uint8_t *ql = b->ql + 64 * c, *qh = b->qh + 32 * c;
        for (int l = 0; l < 32; l++) {
            ql[l] = (uint8_t)((Lc[l] & 0xF) | ((Lc[l + 64] & 0xF) << 4));
            ql[l + 32] = (uint8_t)((Lc[l + 32] & 0xF) | ((Lc[l + 96] & 0xF) << 4));
            qh[l] = (uint8_t)((Lc[l] >> 4) | ((Lc[l + 32] >> 4) << 2) | ((Lc[l + 64] >> 4) << 4) |
                              ((Lc[l + 96] >> 4) << 6));
        }
    }
}

void cpulm_quantize_row_q6_K_ref(const float *x, void *vy, int64_t n) {
    cpulm_block_q6_K *y = vy;
    uint8_t L[QK];
    float scales[16];
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ib++) {
            scales[ib] = fit_scale_sym(16, 32, x + 16 * ib, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        memset(&y[i], 0, sizeof y[i]);
        if (max_abs_scale < MAX_EPS) continue; /* all zeros: d = 0 */
        const float iscale = -128.0f / max_scale;
        y[i].d = cpulm_f32_to_fp16(1.0f / iscale);
        for (int ib = 0; ib < 16; ib++) {
            const int v = nearest_int(iscale * scales[ib]);
            y[i].scales[ib] = (int8_t)(v < 127 ? v : 127);
        }
        const float d = cpulm_fp16_to_f32(y[i].d);
        for (int j = 0; j < 16; j++) {
            const float dj = d * (float)y[i].scales[j];
            if (dj == 0.0f) continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)(clampi(nearest_int(x[16 * j + l] / dj), -32, 31) + 32);
        }
        pack_q6_K(L, &y[i]);
    }
}

void cpulm_dequantize_row_q6_K_ref(const void *vx, float *y, int64_t n) {
    const cpulm_block_q6_K *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = cpulm_fp16_to_f32(x[i].d);
        for (int c = 0; c < 2; c++, y += 128) {
            const uint8_t *ql = x[i].ql + 64 * c, *qh = x[i].qh + 32 * c;
            const int8_t *sc = x[i].scales + 8 * c;
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

/* ---- Q8_K: activations for K-quant dots; float d, bsums of 16 for the min terms ---- */

void cpulm_quantize_row_q8_K_ref(const float *x, void *vy, int64_t n) {
    cpulm_block_q8_K *y = vy;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float max = 0, amax = 0;
        for (int j = 0; j < QK; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        memset(&y[i], 0, sizeof y[i]);
        if (amax == 0.0f) continue;
        /* negative scale when max < 0 keeps the extreme at -127, so q stays in -127..127 */
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK; j++) {
            const int v = nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < QK / 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++)
                s += y[i].qs[16 * j + l];
            y[i].bsums[j] = (int16_t)s;
        }
        y[i].d = 1.0f / iscale;
    }
}

void cpulm_dequantize_row_q8_K_ref(const void *vx, float *y, int64_t n) {
    const cpulm_block_q8_K *x = vx;
    for (int64_t i = 0; i < n / QK; i++, y += QK)
        for (int j = 0; j < QK; j++)
            y[j] = x[i].d * (float)x[i].qs[j];
}

/* ---- Q2_K / Q3_K: dequantize only (so such files can be inspected and converted) ---- */

void cpulm_dequantize_row_q2_K_ref(const void *vx, float *y, int64_t n) {
    const cpulm_block_q2_K *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = cpulm_fp16_to_f32(x[i].d), dmin = cpulm_fp16_to_f32(x[i].dmin);
        /* 16 groups of 16; group g: bytes qs[32*(g/8) + 16*(g%2) ..], bits 2*((g/2)%4) */
        for (int g = 0; g < 16; g++, y += 16) {
            const uint8_t sc = x[i].scales[g];
            const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
            const uint8_t *q = x[i].qs + 32 * (g / 8) + 16 * (g % 2);
            const int shift = 2 * ((g / 2) % 4);
            for (int l = 0; l < 16; l++)
                y[l] = dl * (float)((q[l] >> shift) & 3) - ml;
        }
    }
}

void cpulm_dequantize_row_q3_K_ref(const void *vx, float *y, int64_t n) {
    const cpulm_block_q3_K *x = vx;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = cpulm_fp16_to_f32(x[i].d);
        const uint8_t *s = x[i].scales;
        for (int g = 0; g < 16; g++, y += 16) {
            /* 6-bit scale g: low 4 bits from s[g % 8] (nibble g / 8), high 2 from s[8..11] */
            const int lo = g < 8 ? (s[g] & 0xF) : (s[g - 8] >> 4);
            const int hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
            const float dl = d * (float)((lo | (hi << 4)) - 32);
            const int off = 16 * (g % 2), shift = 2 * ((g / 2) % 4);
            const uint8_t *q = x[i].qs + 32 * (g / 8) + off;
            const uint8_t m = (uint8_t)(1u << (g / 2));
            for (int l = 0; l < 16; l++) {
                const int v = ((q[l] >> shift) & 3) - ((x[i].hmask[off + l] & m) ? 0 : 4);
                y[l] = dl * (float)v;
            }
        }
    }
}
