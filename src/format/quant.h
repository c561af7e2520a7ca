/* quant.h: tensor element types (ggml type ids, bit-compatible block layouts) and their
 * scalar reference quantize / dequantize routines.
 *
 * Type ids are ggml's, because GGUF stores them. The block structs below are the on-disk
 * layouts; every field is little-endian and blocks are packed (no padding).
 * The reference routines here are the oracle the SIMD kernels are tested against; they are
 * written for clarity, not speed, and never touch anything but their arguments.
 */
#ifndef CPULM_QUANT_H
#define CPULM_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum cpulm_dtype {
    CPULM_DTYPE_F32 = 0,
    CPULM_DTYPE_F16 = 1,
    CPULM_DTYPE_Q4_0 = 2,
    CPULM_DTYPE_Q4_1 = 3,
    CPULM_DTYPE_Q5_0 = 6,
    CPULM_DTYPE_Q5_1 = 7,
    CPULM_DTYPE_Q8_0 = 8,
    CPULM_DTYPE_Q8_1 = 9,
    CPULM_DTYPE_Q2_K = 10,
    CPULM_DTYPE_Q3_K = 11,
    CPULM_DTYPE_Q4_K = 12,
    CPULM_DTYPE_Q5_K = 13,
    CPULM_DTYPE_Q6_K = 14,
    CPULM_DTYPE_Q8_K = 15,
    CPULM_DTYPE_IQ2_XXS = 16,
    CPULM_DTYPE_IQ2_XS = 17,
    CPULM_DTYPE_IQ3_XXS = 18,
    CPULM_DTYPE_IQ1_S = 19,
    CPULM_DTYPE_IQ4_NL = 20,
    CPULM_DTYPE_IQ3_S = 21,
    CPULM_DTYPE_IQ2_S = 22,
    CPULM_DTYPE_IQ4_XS = 23,
    CPULM_DTYPE_I8 = 24,
    CPULM_DTYPE_I16 = 25,
    CPULM_DTYPE_I32 = 26,
    CPULM_DTYPE_I64 = 27,
    CPULM_DTYPE_F64 = 28,
    CPULM_DTYPE_IQ1_M = 29,
    CPULM_DTYPE_BF16 = 30,
    CPULM_DTYPE_TQ1_0 = 34,
    CPULM_DTYPE_TQ2_0 = 35,
    CPULM_DTYPE_MXFP4 = 39,
    CPULM_DTYPE_COUNT = 40
} cpulm_dtype;

#define CPULM_QK4_0 32
#define CPULM_QK8_0 32
#define CPULM_QK_K  256

typedef struct {
    uint16_t d;     /* fp16 scale */
    uint8_t qs[16]; /* x[i] = d * ((qs[i] & 15) - 8), x[i+16] = d * ((qs[i] >> 4) - 8) */
} cpulm_block_q4_0;

typedef struct {
    uint16_t d, m; /* fp16 scale and min: x = d * q + m */
    uint8_t qs[16];
} cpulm_block_q4_1;

typedef struct {
    uint16_t d;
    uint8_t qh[4]; /* 5th bit of each of the 32 quants */
    uint8_t qs[16];
} cpulm_block_q5_0;

typedef struct {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[16];
} cpulm_block_q5_1;

typedef struct {
    uint16_t d;    /* fp16 scale */
    int8_t qs[32]; /* x[i] = d * qs[i] */
} cpulm_block_q8_0;

typedef struct {
    uint16_t d, s; /* s = d * sum(qs) */
    int8_t qs[32];
} cpulm_block_q8_1;

typedef struct {
    uint16_t d, dmin;   /* super-block scales for the 6-bit sub-scales and mins */
    uint8_t scales[12]; /* 8 x (6-bit scale, 6-bit min), packed */
    uint8_t qs[128];    /* 4-bit quants */
} cpulm_block_q4_K;

typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
} cpulm_block_q5_K;

typedef struct {
    uint8_t ql[128];   /* low 4 bits */
    uint8_t qh[64];    /* high 2 bits */
    int8_t scales[16]; /* 8-bit sub-block scales */
    uint16_t d;        /* fp16 super-block scale */
} cpulm_block_q6_K;

typedef struct {
    float d;
    int8_t qs[256];
    int16_t bsums[16]; /* sums of groups of 16 quants */
} cpulm_block_q8_K;

typedef struct {
    uint8_t scales[16]; /* 4-bit scale (low nibble) and 4-bit min (high nibble) per 16 */
    uint8_t qs[64];     /* 2-bit quants */
    uint16_t d, dmin;
} cpulm_block_q2_K;

typedef struct {
    uint8_t hmask[32];  /* high bit of each 3-bit quant (set means +0, clear means -4) */
    uint8_t qs[64];     /* low 2 bits */
    uint8_t scales[12]; /* 16 x 6-bit scales, biased by 32 */
    uint16_t d;
} cpulm_block_q3_K;

/* MXFP4 (OCP microscaling FP4, gpt-oss experts): 32 E2M1 values sharing one E8M0 scale.
 * x[i] = cpulm_mxfp4_values2[qs[i] & 15] * cpulm_e8m0_half(e) and x[i+16] likewise with
 * qs[i] >> 4, as ggml stores it: the E2M1 values are kept doubled (small integers, so the
 * int8 dot products are exact) and the scale halved, 2^(e - 128). */
typedef struct {
    uint8_t e;      /* E8M0 exponent, bias 127 */
    uint8_t qs[16]; /* E2M1 codes: sign bit 3, then 2 exponent bits and 1 mantissa bit */
} cpulm_block_mxfp4;

/* The 16 E2M1 values times 2: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives, doubled. */
extern const int8_t cpulm_mxfp4_values2[16];

/* 2^(e - 128), the E8M0 scale halved (exact: e = 0 and 1 give the subnormals 2^-128 and
 * 2^-127), built from its bits. */
static inline float cpulm_e8m0_half(uint8_t e) {
    union {
        uint32_t u;
        float f;
    } v;
    v.u = e >= 2 ? (uint32_t)(e - 1) << 23 : 0x00200000u << e;
    return v.f;
}

typedef struct cpulm_dtype_traits {
    const char *name;  /* "Q4_0", as llama.cpp prints it */
    int32_t block;     /* elements per block */
    int32_t type_size; /* bytes per block */
    bool quantized;
    bool computable;          /* cpulm has dot kernels for it as a weight type */
    cpulm_dtype vec_dot_type; /* what activations are converted to for dot products */
} cpulm_dtype_traits;

/* NULL for ids that are not a known ggml type. */
const cpulm_dtype_traits *cpulm_dtype_traits_get(uint32_t type);
const char *cpulm_dtype_name(uint32_t type); /* "?" when unknown */
/* Bytes of a row of n elements; n must be a multiple of the block size. */
uint64_t cpulm_dtype_row_bytes(cpulm_dtype t, int64_t n);
/* Parses "q4_0", "Q8_0", "f16", ... (case-insensitive); -1 when unknown. */
int cpulm_dtype_from_name(const char *name);

/* ---- scalar reference routines (the oracle) ----
 * n is the element count and a multiple of the type's block size. */
void cpulm_quantize_row_ref(cpulm_dtype t, const float *x, void *y, int64_t n);
void cpulm_dequantize_row_ref(cpulm_dtype t, const void *x, float *y, int64_t n);
/* Does the reference implementation exist for quantizing to / from t? */
bool cpulm_quantize_supported(cpulm_dtype t);
bool cpulm_dequantize_supported(cpulm_dtype t);

/* Per-type reference routines (same contract as above; signatures match the kernel
 * table's from_float / to_float so the generic table can point at them directly).
 * Quantizers are bit-compatible with llama.cpp's reference quantizers for F16, BF16, Q8_0,
 * Q8_1, Q4_0, Q4_1, Q5_0, Q5_1, Q8_K, MXFP4; the K-quant weight quantizers use the same
 * weighted least-squares scale search with the same arithmetic, and reproduce llama.cpp's
 * Q4_K / Q6_K files byte for byte on the test data (no importance matrix). */
typedef void (*cpulm_quantize_fn)(const float *x, void *y, int64_t n);
typedef void (*cpulm_dequantize_fn)(const void *x, float *y, int64_t n);

void cpulm_quantize_row_f32_ref(const float *x, void *y, int64_t n);
void cpulm_quantize_row_f16_ref(const float *x, void *y, int64_t n);
void cpulm_quantize_row_bf16_ref(const float *x, void *y, int64_t n);
void cpulm_quantize_row_q4_0_ref(const float *x, void *y, int64_t n);
void cpulm_quantize_row_q4_1_ref(const float *x, void *y, int64_t n);
void cpulm_quantize_row_q5_0_ref(const float *x, void *y, int64_t n);
void cpulm_quantize_row_q5_1_ref(const float *x, void *y, int64_t n);
void cpulm_quantize_row_q8_0_ref(const float *x, void *y, int64_t n);
void cpulm_quantize_row_q8_1_ref(const float *x, void *y, int64_t n);
void cpulm_quantize_row_q8_K_ref(const float *x, void *y, int64_t n);
void cpulm_quantize_row_q4_K_ref(const float *x, void *y, int64_t n);
void cpulm_quantize_row_q5_K_ref(const float *x, void *y, int64_t n);
void cpulm_quantize_row_q6_K_ref(const float *x, void *y, int64_t n);
void cpulm_quantize_row_mxfp4_ref(const float *x, void *y, int64_t n);

void cpulm_dequantize_row_f32_ref(const void *x, float *y, int64_t n);
void cpulm_dequantize_row_f16_ref(const void *x, float *y, int64_t n);
void cpulm_dequantize_row_bf16_ref(const void *x, float *y, int64_t n);
void cpulm_dequantize_row_q4_0_ref(const void *x, float *y, int64_t n);
void cpulm_dequantize_row_q4_1_ref(const void *x, float *y, int64_t n);
void cpulm_dequantize_row_q5_0_ref(const void *x, float *y, int64_t n);
void cpulm_dequantize_row_q5_1_ref(const void *x, float *y, int64_t n);
void cpulm_dequantize_row_q8_0_ref(const void *x, float *y, int64_t n);
void cpulm_dequantize_row_q8_1_ref(const void *x, float *y, int64_t n);
void cpulm_dequantize_row_q8_K_ref(const void *x, float *y, int64_t n);
void cpulm_dequantize_row_q2_K_ref(const void *x, float *y, int64_t n);
void cpulm_dequantize_row_q3_K_ref(const void *x, float *y, int64_t n);
void cpulm_dequantize_row_q4_K_ref(const void *x, float *y, int64_t n);
void cpulm_dequantize_row_q5_K_ref(const void *x, float *y, int64_t n);
void cpulm_dequantize_row_q6_K_ref(const void *x, float *y, int64_t n);
void cpulm_dequantize_row_mxfp4_ref(const void *x, float *y, int64_t n);

/* The loader's widening of matrices without a GEMM of their own to Q8_0 (exact):
 * cpulm_widens_to_q8_0(t) is 1 for Q5_0, whose values (q - 16) * d are Q8_0's with the same
 * d; 2 for Q4_1 and Q5_1, whose values q * d + m are Q8_0's of quants q (0..15, 0..31) and
 * scale d, plus the block's min m; 0 for other types. cpulm_widen_q8_0 writes n elements of
 * such a type t as Q8_0 blocks into y and, for the second kind, each block's m (as float)
 * into mins[n / 32]; each Q8_0 value (+ m) is then the source's value, bit for bit. */
int cpulm_widens_to_q8_0(cpulm_dtype t);
void cpulm_widen_q8_0(cpulm_dtype t, const void *x, void *y, float *mins, int64_t n);

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block's scales[12]. */
static inline void cpulm_k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

#endif
