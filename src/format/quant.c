/* quant.c: element-type traits (block sizes, names, which types cpulm computes with) and
 * the scalar reference quantize / dequantize routines for the float types and the 32-wide
 * "legacy" block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1) and MXFP4. K-quants live in
 * quant_k.c.
 *
 * Bit-compatibility with llama.cpp matters here: weights quantized by llama.cpp must
 * dequantize exactly, and re-quantizing the same F32 data must reproduce its bytes. That
 * is why the quantizers multiply by a reciprocal (x * id, not x / d) and round exactly the
 * way the reference does (roundf for Q8, "+ 8.5 then truncate" for Q4). No SIMD here; this
 * file is the oracle the kernels are tested against.
 */
#include "quant.h"

#include <ctype.h>
#include <math.h>
#include <string.h>

#include "base/fp16.h"
#include "base/status.h"

/* ---- traits ---- */

#define T(id, nm, blk, sz, q, comp, vdt)      \
    [CPULM_DTYPE_##id] = {.name = nm,         \
                          .block = blk,       \
                          .type_size = sz,    \
                          .quantized = q,     \
                          .computable = comp, \
                          .vec_dot_type = CPULM_DTYPE_##vdt}

/* Sizes are ggml's on-disk block sizes; names follow gguf-py / llama.cpp's file-type
 * spelling (upper case, K-quants "Q4_K"). vec_dot_type is only meaningful if computable. */
static const cpulm_dtype_traits traits[CPULM_DTYPE_COUNT] = {
    T(F32, "F32", 1, 4, false, true, F32),
    T(F16, "F16", 1, 2, false, true, F16),
    T(Q4_0, "Q4_0", 32, 18, true, true, Q8_0),
    T(Q4_1, "Q4_1", 32, 20, true, true, Q8_1),
    T(Q5_0, "Q5_0", 32, 22, true, true, Q8_0),
    T(Q5_1, "Q5_1", 32, 24, true, true, Q8_1),
    T(Q8_0, "Q8_0", 32, 34, true, true, Q8_0),
    T(Q8_1, "Q8_1", 32, 36, true, false, Q8_1),
    T(Q2_K, "Q2_K", 256, 84, true, false, Q8_K),
    T(Q3_K, "Q3_K", 256, 110, true, false, Q8_K),
    T(Q4_K, "Q4_K", 256, 144, true, true, Q8_K),
    T(Q5_K, "Q5_K", 256, 176, true, true, Q8_K),
    T(Q6_K, "Q6_K", 256, 210, true, true, Q8_K),
    T(Q8_K, "Q8_K", 256, 292, true, false, Q8_K),
    T(IQ2_XXS, "IQ2_XXS", 256, 66, true, false, Q8_K),
    T(IQ2_XS, "IQ2_XS", 256, 74, true, false, Q8_K),
    T(IQ3_XXS, "IQ3_XXS", 256, 98, true, false, Q8_K),
    T(IQ1_S, "IQ1_S", 256, 50, true, false, Q8_K),
    T(IQ4_NL, "IQ4_NL", 32, 18, true, false, Q8_0),
    T(IQ3_S, "IQ3_S", 256, 110, true, false, Q8_K),
    T(IQ2_S, "IQ2_S", 256, 82, true, false, Q8_K),
    T(IQ4_XS, "IQ4_XS", 256, 136, true, false, Q8_K),
    T(I8, "I8", 1, 1, false, false, I8),
    T(I16, "I16", 1, 2, false, false, I16),
    T(I32, "I32", 1, 4, false, false, I32),
    T(I64, "I64", 1, 8, false, false, I64),
    T(F64, "F64", 1, 8, false, false, F64),
    T(IQ1_M, "IQ1_M", 256, 56, true, false, Q8_K),
    T(BF16, "BF16", 1, 2, false, true, BF16),
    T(TQ1_0, "TQ1_0", 256, 54, true, false, Q8_K),
    T(TQ2_0, "TQ2_0", 256, 66, true, false, Q8_K),
    T(MXFP4, "MXFP4", 32, 17, true, true, Q8_0),
};
#undef T

const cpulm_dtype_traits *cpulm_dtype_traits_get(uint32_t type) {
    if (type >= CPULM_DTYPE_COUNT || !traits[type].name) return NULL;
    return &traits[type];
}

const char *cpulm_dtype_name(uint32_t type) {
    const cpulm_dtype_traits *tr = cpulm_dtype_traits_get(type);
    return tr ? tr->name : "?";
}

uint64_t cpulm_dtype_row_bytes(cpulm_dtype t, int64_t n) {
    const cpulm_dtype_traits *tr = cpulm_dtype_traits_get((uint32_t)t);
    CPULM_ASSERT(tr && n >= 0 && n % tr->block == 0);
    return (uint64_t)(n / tr->block) * (uint64_t)tr->type_size;
}

int cpulm_dtype_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < CPULM_DTYPE_COUNT; i++) {
        const char *a = traits[i].name, *b = name;
        if (!a) continue;
        while (*a && *b && toupper((unsigned char)*a) == toupper((unsigned char)*b))
            a++, b++;
        if (!*a && !*b) return i;
    }
    return -1;
}

/* ---- float types ---- */

void cpulm_quantize_row_f32_ref(const float *x, void *y, int64_t n) {
    memmove(y, x, (size_t)n * sizeof(float));
}

void cpulm_dequantize_row_f32_ref(const void *x, float *y, int64_t n) {
    memmove(y, x, (size_t)n * sizeof(float));
}

/* F16 and BF16 rows: one conversion per element, each way. */
static void to_half(const float *x, uint16_t *h, int64_t n, uint16_t (*cvt)(float)) {
    for (int64_t i = 0; i < n; i++)
        h[i] = cvt(x[i]);
}

static void from_half(const uint16_t *h, float *y, int64_t n, float (*cvt)(uint16_t)) {
    for (int64_t i = 0; i < n; i++)
        y[i] = cvt(h[i]);
}

void cpulm_quantize_row_f16_ref(const float *x, void *y, int64_t n) {
    to_half(x, y, n, cpulm_f32_to_fp16);
}

void cpulm_dequantize_row_f16_ref(const void *x, float *y, int64_t n) {
    from_half(x, y, n, cpulm_fp16_to_f32);
}

void cpulm_quantize_row_bf16_ref(const float *x, void *y, int64_t n) {
    to_half(x, y, n, cpulm_f32_to_bf16);
}

void cpulm_dequantize_row_bf16_ref(const void *x, float *y, int64_t n) {
    from_half(x, y, n, cpulm_bf16_to_f32);
}

/* ---- block helpers ---- */

/* The element of largest magnitude, with its sign (first one wins on ties). */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max(const float *x, int n, float *mn, float *mx) {
    float lo = INFINITY, hi = -INFINITY;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

/* The scale of a block whose extreme value maps to -half (Q4_0: 8, Q5_0: 16): stores d
 * (fp16) and returns 1 / d (0 for a block of zeros). */
static float scale_sym(const float *x, float half, uint16_t *d16) {
    const float d = signed_absmax(x, 32) / -half;
    *d16 = cpulm_f32_to_fp16(d);
    return d != 0.0f ? 1.0f / d : 0.0f;
}

/* The scale and min of a block spread over 0..top (Q4_1: 15, Q5_1: 31): stores d and m
 * (fp16), sets *mn to the minimum and returns 1 / d (0 for a constant block). */
static float scale_min(const float *x, float top, uint16_t *d16, uint16_t *m16, float *mn) {
    float mx;
    min_max(x, 32, mn, &mx);
    const float d = (mx - *mn) / top;
    *d16 = cpulm_f32_to_fp16(d);
    *m16 = cpulm_f32_to_fp16(*mn);
    return d != 0.0f ? 1.0f / d : 0.0f;
}

/* Quants j and j + 16 of a 4-bit block (each clamped to 15) as one byte, j low. */
static uint8_t pack_nibbles(int q0, int q1) {
    q0 = q0 > 15 ? 15 : q0;
    q1 = q1 > 15 ? 15 : q1;
    return (uint8_t)(q0 | (q1 << 4));
}

/* ---- Q4_0: x = d * (q - 8), q in 0..15; d = max / -8 maps the extreme value to -8 ---- */

void cpulm_quantize_row_q4_0_ref(const float *x, void *vy, int64_t n) {
    cpulm_block_q4_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        const float id = scale_sym(x, 8.0f, &y[i].d);
        /* +8.5 then truncation = round half up in the shifted domain, as llama.cpp */
        for (int j = 0; j < 16; j++)
            y[i].qs[j] = pack_nibbles((int8_t)(x[j] * id + 8.5f), (int8_t)(x[j + 16] * id + 8.5f));
    }
}

void cpulm_dequantize_row_q4_0_ref(const void *vx, float *y, int64_t n) {
    const cpulm_block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = cpulm_fp16_to_f32(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((x[i].qs[j] & 0xF) - 8) * d;
            y[j + 16] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

/* ---- Q4_1: x = d * q + m, q in 0..15 ---- */

void cpulm_quantize_row_q4_1_ref(const float *x, void *vy, int64_t n) {
    cpulm_block_q4_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float mn;
        const float id = scale_min(x, 15.0f, &y[i].d, &y[i].m, &mn);
        for (int j = 0; j < 16; j++)
            y[i].qs[j] = pack_nibbles((int8_t)((x[j] - mn) * id + 0.5f),
                                      (int8_t)((x[j + 16] - mn) * id + 0.5f));
    }
}

void cpulm_dequantize_row_q4_1_ref(const void *vx, float *y, int64_t n) {
    const cpulm_block_q4_1 *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = cpulm_fp16_to_f32(x[i].d), m = cpulm_fp16_to_f32(x[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(x[i].qs[j] & 0xF) * d + m;
            y[j + 16] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* ---- Q5_0 / Q5_1: Q4 plus a 5th bit per element, packed in qh (little-endian u32) ---- */

static uint32_t load_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void store_u32le(uint8_t *p, uint32_t v) {
    for (int k = 0; k < 4; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

/* Packs 32 5-bit values, each clamped to 31 first (in place): low nibbles of j and j+16
 * share qs[j]; bit 4 of value j goes to bit j of qh. */
static void pack5(int *q, uint8_t qs[16], uint8_t qh[4]) {
    uint32_t h = 0;
    for (int j = 0; j < 32; j++)
        q[j] = q[j] > 31 ? 31 : q[j];
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
        h |= (uint32_t)((q[j] >> 4) & 1) << j;
        h |= (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    store_u32le(qh, h);
}

static void unpack5(const uint8_t qs[16], const uint8_t qh[4], int *q) {
    const uint32_t h = load_u32le(qh);
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0xF) | (int)(((h >> j) & 1) << 4);
        q[j + 16] = (qs[j] >> 4) | (int)(((h >> (j + 16)) & 1) << 4);
    }
}

void cpulm_quantize_row_q5_0_ref(const float *x, void *vy, int64_t n) {
    cpulm_block_q5_0 *y = vy;
    int q[32];
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        const float id = scale_sym(x, 16.0f, &y[i].d);
        for (int j = 0; j < 32; j++)
            q[j] = (int8_t)(x[j] * id + 16.5f);
        pack5(q, y[i].qs, y[i].qh);
    }
}

void cpulm_dequantize_row_q5_0_ref(const void *vx, float *y, int64_t n) {
    const cpulm_block_q5_0 *x = vx;
    int q[32];
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = cpulm_fp16_to_f32(x[i].d);
        unpack5(x[i].qs, x[i].qh, q);
        for (int j = 0; j < 32; j++)
            y[j] = (float)(q[j] - 16) * d;
    }
}

/* Block i's 32 quants of a Q5_0, Q4_1 or Q5_1 row, as unsigned values. */
static void widen_quants(cpulm_dtype t, const void *vx, int64_t i, int q[32]) {
    if (t == CPULM_DTYPE_Q4_1) {
        const cpulm_block_q4_1 *x = (const cpulm_block_q4_1 *)vx + i;
        for (int j = 0; j < 16; j++)
            q[j] = x->qs[j] & 0xF, q[j + 16] = x->qs[j] >> 4;
    } else if (t == CPULM_DTYPE_Q5_1) {
        const cpulm_block_q5_1 *x = (const cpulm_block_q5_1 *)vx + i;
        unpack5(x->qs, x->qh, q);
    } else {
        const cpulm_block_q5_0 *x = (const cpulm_block_q5_0 *)vx + i;
        unpack5(x->qs, x->qh, q);
    }
}

int cpulm_widens_to_q8_0(cpulm_dtype t) {
    return t == CPULM_DTYPE_Q5_0 ? 1 : t == CPULM_DTYPE_Q4_1 || t == CPULM_DTYPE_Q5_1 ? 2 : 0;
}

void cpulm_widen_q8_0(cpulm_dtype t, const void *x, void *vy, float *mins, int64_t n) {
    cpulm_block_q8_0 *y = vy;
    const size_t bb = cpulm_dtype_traits_get(t)->type_size;
    const int bias = t == CPULM_DTYPE_Q5_0 ? 16 : 0;
    int q[32];
    for (int64_t i = 0; i < n / 32; i++) {
        uint16_t dm[2]; /* d, and m for Q4_1 / Q5_1 (Q5_0: d, then qh) */
        memcpy(dm, (const uint8_t *)x + (size_t)i * bb, sizeof dm);
        widen_quants(t, x, i, q);
        y[i].d = dm[0];
        for (int j = 0; j < 32; j++)
            y[i].qs[j] = (int8_t)(q[j] - bias);
        if (bias == 0) mins[i] = cpulm_fp16_to_f32(dm[1]);
    }
}

void cpulm_quantize_row_q5_1_ref(const float *x, void *vy, int64_t n) {
    cpulm_block_q5_1 *y = vy;
    int q[32];
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float mn;
        const float id = scale_min(x, 31.0f, &y[i].d, &y[i].m, &mn);
        for (int j = 0; j < 32; j++)
            q[j] = (uint8_t)((x[j] - mn) * id + 0.5f);
        pack5(q, y[i].qs, y[i].qh);
    }
}

void cpulm_dequantize_row_q5_1_ref(const void *vx, float *y, int64_t n) {
    const cpulm_block_q5_1 *x = vx;
    int q[32];
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = cpulm_fp16_to_f32(x[i].d), m = cpulm_fp16_to_f32(x[i].m);
        unpack5(x[i].qs, x[i].qh, q);
        for (int j = 0; j < 32; j++)
            y[j] = (float)q[j] * d + m;
    }
}

/* ---- Q8_0 / Q8_1: x = d * q, q in -127..127 (never -128: SIMD kernels rely on it) ---- */

/* Quantizes 32 values with d = amax / 127; returns d and the sum of the quants. */
static float quantize_block_q8(const float *x, int8_t *qs, int *sum) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int s = 0;
    for (int j = 0; j < 32; j++) {
        qs[j] = (int8_t)roundf(x[j] * id);
        s += qs[j];
    }
    *sum = s;
    return d;
}

static void dequantize_block_q8(uint16_t d16, const int8_t *qs, float *y) {
    const float d = cpulm_fp16_to_f32(d16);
    for (int j = 0; j < 32; j++)
        y[j] = (float)qs[j] * d;
}

void cpulm_quantize_row_q8_0_ref(const float *x, void *vy, int64_t n) {
    cpulm_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        int sum;
        y[i].d = cpulm_f32_to_fp16(quantize_block_q8(x, y[i].qs, &sum));
    }
}

void cpulm_dequantize_row_q8_0_ref(const void *vx, float *y, int64_t n) {
    const cpulm_block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32)
        dequantize_block_q8(x[i].d, x[i].qs, y);
}

void cpulm_quantize_row_q8_1_ref(const float *x, void *vy, int64_t n) {
    cpulm_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        int sum;
        const float d = quantize_block_q8(x, y[i].qs, &sum);
        y[i].d = cpulm_f32_to_fp16(d);
        y[i].s = cpulm_f32_to_fp16((float)sum * d); /* lets Q4_1/Q5_1 dots add m * sum(y) */
    }
}

void cpulm_dequantize_row_q8_1_ref(const void *vx, float *y, int64_t n) {
    const cpulm_block_q8_1 *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32)
        dequantize_block_q8(x[i].d, x[i].qs, y);
}

/* ---- MXFP4: x = values2[code] * 2^(e - 128), codes E2M1 (quant.h) ---- */

const int8_t cpulm_mxfp4_values2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* The code whose value times d is nearest x; the first one on ties (so 0, not -0). */
static uint8_t mxfp4_nearest(float x, float d) {
    int best = 0;
    float best_err = fabsf((float)cpulm_mxfp4_values2[0] * d - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf((float)cpulm_mxfp4_values2[i] * d - x);
        if (err < best_err) best = i, best_err = err;
    }
    return (uint8_t)best;
}

/* llama.cpp's rule: e = floor(log2(amax)) - 2 + 127, so amax lands in [4, 8) times the
 * unhalved scale, i.e. in the top of E2M1's range (values above 6 clip to 6). Blocks whose
 * amax is below 2^-125 would need a negative exponent (the reference's conversion is then
 * undefined); they get e = 0 here. */
void cpulm_quantize_row_mxfp4_ref(const float *x, void *vy, int64_t n) {
    cpulm_block_mxfp4 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        float ef = amax > 0.0f ? floorf(log2f(amax)) - 2 + 127 : 0.0f;
        ef = ef < 0.0f ? 0.0f : ef > 255.0f ? 255.0f : ef;
        y[i].e = (uint8_t)ef;
        const float d = cpulm_e8m0_half(y[i].e);
        for (int j = 0; j < 16; j++)
            y[i].qs[j] = (uint8_t)(mxfp4_nearest(x[j], d) | mxfp4_nearest(x[j + 16], d) << 4);
    }
}

void cpulm_dequantize_row_mxfp4_ref(const void *vx, float *y, int64_t n) {
    const cpulm_block_mxfp4 *x = vx;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = cpulm_e8m0_half(x[i].e);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)cpulm_mxfp4_values2[x[i].qs[j] & 0xF] * d;
            y[j + 16] = (float)cpulm_mxfp4_values2[x[i].qs[j] >> 4] * d;
        }
    }
}

/* ---- dispatch by type ---- */

static cpulm_quantize_fn quantize_fn(cpulm_dtype t) {
    switch (t) {
    case CPULM_DTYPE_F32: return cpulm_quantize_row_f32_ref;
    case CPULM_DTYPE_F16: return cpulm_quantize_row_f16_ref;
    case CPULM_DTYPE_BF16: return cpulm_quantize_row_bf16_ref;
    case CPULM_DTYPE_Q4_0: return cpulm_quantize_row_q4_0_ref;
    case CPULM_DTYPE_Q4_1: return cpulm_quantize_row_q4_1_ref;
    case CPULM_DTYPE_Q5_0: return cpulm_quantize_row_q5_0_ref;
    case CPULM_DTYPE_Q5_1: return cpulm_quantize_row_q5_1_ref;
    case CPULM_DTYPE_Q8_0: return cpulm_quantize_row_q8_0_ref;
    case CPULM_DTYPE_Q8_1: return cpulm_quantize_row_q8_1_ref;
    case CPULM_DTYPE_Q8_K: return cpulm_quantize_row_q8_K_ref;
    case CPULM_DTYPE_Q4_K: return cpulm_quantize_row_q4_K_ref;
    case CPULM_DTYPE_Q5_K: return cpulm_quantize_row_q5_K_ref;
    case CPULM_DTYPE_Q6_K: return cpulm_quantize_row_q6_K_ref;
    case CPULM_DTYPE_MXFP4: return cpulm_quantize_row_mxfp4_ref;
    default: return NULL;
    }
}

static cpulm_dequantize_fn dequantize_fn(cpulm_dtype t) {
    switch (t) {
    case CPULM_DTYPE_F32: return cpulm_dequantize_row_f32_ref;
    case CPULM_DTYPE_F16: return cpulm_dequantize_row_f16_ref;
    case CPULM_DTYPE_BF16: return cpulm_dequantize_row_bf16_ref;
    case CPULM_DTYPE_Q4_0: return cpulm_dequantize_row_q4_0_ref;
    case CPULM_DTYPE_Q4_1: return cpulm_dequantize_row_q4_1_ref;
    case CPULM_DTYPE_Q5_0: return cpulm_dequantize_row_q5_0_ref;
    case CPULM_DTYPE_Q5_1: return cpulm_dequantize_row_q5_1_ref;
    case CPULM_DTYPE_Q8_0: return cpulm_dequantize_row_q8_0_ref;
    case CPULM_DTYPE_Q8_1: return cpulm_dequantize_row_q8_1_ref;
    case CPULM_DTYPE_Q8_K: return cpulm_dequantize_row_q8_K_ref;
    case CPULM_DTYPE_Q2_K: return cpulm_dequantize_row_q2_K_ref;
    case CPULM_DTYPE_Q3_K: return cpulm_dequantize_row_q3_K_ref;
    case CPULM_DTYPE_Q4_K: return cpulm_dequantize_row_q4_K_ref;
    case CPULM_DTYPE_Q5_K: return cpulm_dequantize_row_q5_K_ref;
    case CPULM_DTYPE_Q6_K: return cpulm_dequantize_row_q6_K_ref;
    case CPULM_DTYPE_MXFP4: return cpulm_dequantize_row_mxfp4_ref;
    default: return NULL;
    }
}

bool cpulm_quantize_supported(cpulm_dtype t) {
    return quantize_fn(t) != NULL;
}

bool cpulm_dequantize_supported(cpulm_dtype t) {
    return dequantize_fn(t) != NULL;
}

void cpulm_quantize_row_ref(cpulm_dtype t, const float *x, void *y, int64_t n) {
    cpulm_quantize_fn fn = quantize_fn(t);
    CPULM_ASSERT(fn && n % traits[t].block == 0);
    fn(x, y, n);
}

void cpulm_dequantize_row_ref(cpulm_dtype t, const void *x, float *y, int64_t n) {
    cpulm_dequantize_fn fn = dequantize_fn(t);
    CPULM_ASSERT(fn && n % traits[t].block == 0);
    fn(x, y, n);
}
