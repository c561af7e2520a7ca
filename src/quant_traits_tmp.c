/* quant_traits_tmp.c: TEMPORARY stand-in for the type-traits part of quant.c, so the gguf
 * branch links before the quant branch lands. Only cpulm_dtype_traits_get, cpulm_dtype_name
 * and cpulm_dtype_row_bytes, with ggml's block sizes and byte sizes.
 * DELETE THIS FILE when merging the quant branch (src/quant.c defines the same symbols). */
#include <stddef.h>

#include "quant.h"

#define T(id, nm, blk, sz)        \
    [id] = {.name = nm,           \
            .block = blk,         \
            .type_size = sz,      \
            .quantized = blk > 1, \
            .computable = false,  \
            .vec_dot_type = CPULM_DTYPE_F32}

static const cpulm_dtype_traits traits[CPULM_DTYPE_COUNT] = {
    T(CPULM_DTYPE_F32, "F32", 1, 4),
    T(CPULM_DTYPE_F16, "F16", 1, 2),
    T(CPULM_DTYPE_Q4_0, "Q4_0", 32, 18),
    T(CPULM_DTYPE_Q4_1, "Q4_1", 32, 20),
    T(CPULM_DTYPE_Q5_0, "Q5_0", 32, 22),
    T(CPULM_DTYPE_Q5_1, "Q5_1", 32, 24),
    T(CPULM_DTYPE_Q8_0, "Q8_0", 32, 34),
    T(CPULM_DTYPE_Q8_1, "Q8_1", 32, 36),
    T(CPULM_DTYPE_Q2_K, "Q2_K", 256, 84),
    T(CPULM_DTYPE_Q3_K, "Q3_K", 256, 110),
    T(CPULM_DTYPE_Q4_K, "Q4_K", 256, 144),
    T(CPULM_DTYPE_Q5_K, "Q5_K", 256, 176),
    T(CPULM_DTYPE_Q6_K, "Q6_K", 256, 210),
    T(CPULM_DTYPE_Q8_K, "Q8_K", 256, 292),
    T(CPULM_DTYPE_IQ2_XXS, "IQ2_XXS", 256, 66),
    T(CPULM_DTYPE_IQ2_XS, "IQ2_XS", 256, 74),
    T(CPULM_DTYPE_IQ3_XXS, "IQ3_XXS", 256, 98),
    T(CPULM_DTYPE_IQ1_S, "IQ1_S", 256, 50),
    T(CPULM_DTYPE_IQ4_NL, "IQ4_NL", 32, 18),
    T(CPULM_DTYPE_IQ3_S, "IQ3_S", 256, 110),
    T(CPULM_DTYPE_IQ2_S, "IQ2_S", 256, 82),
    T(CPULM_DTYPE_IQ4_XS, "IQ4_XS", 256, 136),
    T(CPULM_DTYPE_I8, "I8", 1, 1),
    T(CPULM_DTYPE_I16, "I16", 1, 2),
    T(CPULM_DTYPE_I32, "I32", 1, 4),
    T(CPULM_DTYPE_I64, "I64", 1, 8),
    T(CPULM_DTYPE_F64, "F64", 1, 8),
    T(CPULM_DTYPE_IQ1_M, "IQ1_M", 256, 56),
    T(CPULM_DTYPE_BF16, "BF16", 1, 2),
    T(CPULM_DTYPE_TQ1_0, "TQ1_0", 256, 54),
    T(CPULM_DTYPE_TQ2_0, "TQ2_0", 256, 66),
};

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
    if (!tr || n < 0) return 0;
    return (uint64_t)(n / tr->block) * (uint64_t)tr->type_size;
}
