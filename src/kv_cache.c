/* kv_cache.c: allocation and sequence bookkeeping of the KV cache. */
#include "kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

cpulm_dtype cpulm_kv_dtype(cpulm_kv_type type) {
    switch (type) {
    case CPULM_KV_F32: return CPULM_DTYPE_F32;
    case CPULM_KV_Q8_0: return CPULM_DTYPE_Q8_0;
    case CPULM_KV_Q4_0: return CPULM_DTYPE_Q4_0;
    case CPULM_KV_F16: break;
    }
    return CPULM_DTYPE_F16;
}

uint64_t cpulm_kv_bytes_for(int32_t n_layer, int32_t n_ctx, int32_t kv_dim, cpulm_kv_type type) {
    uint64_t row = cpulm_dtype_row_bytes(cpulm_kv_dtype(type), kv_dim);
    return 2ull * (uint64_t)n_layer * (uint64_t)n_ctx * row;
}

cpulm_status cpulm_kv_init(cpulm_kv *kv, int32_t n_layer, int32_t n_seq, int32_t n_ctx,
                           int32_t kv_dim, cpulm_kv_type type, cpulm_error *err) {
    memset(kv, 0, sizeof *kv);
    if (n_layer < 1 || n_seq < 1 || n_ctx < 1 || kv_dim < 1)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "kv cache: bad dimensions");
    if ((type == CPULM_KV_Q8_0 || type == CPULM_KV_Q4_0) && kv_dim % CPULM_QK8_0 != 0)
        return cpulm_errf(err, CPULM_ERR_UNSUPPORTED,
                          "kv cache: q8_0/q4_0 need a kv row of a multiple of 32, not %d", kv_dim);
    if ((int)type < CPULM_KV_F16 || (int)type > CPULM_KV_Q4_0)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "kv cache: unknown type %d", (int)type);
    kv->n_layer = n_layer;
    kv->n_seq = n_seq;
    kv->n_ctx = n_ctx;
    kv->kv_dim = kv_dim;
    kv->type = type;
    kv->dtype = cpulm_kv_dtype(type);
    kv->row_bytes = (size_t)cpulm_dtype_row_bytes(kv->dtype, kv_dim);
    size_t n = (size_t)n_layer * (size_t)n_seq * (size_t)n_ctx * kv->row_bytes;
    /* calloc: untouched pages cost no memory until a sequence reaches them */
    kv->k = calloc(1, n);
    kv->v = calloc(1, n);
    kv->len = calloc((size_t)n_seq, sizeof *kv->len);
    if (!kv->k || !kv->v || !kv->len) {
        cpulm_kv_release(kv);
        return cpulm_errf(err, CPULM_ERR_NOMEM, "kv cache: cannot allocate %zu bytes", 2 * n);
    }
    return CPULM_OK;
}

void cpulm_kv_release(cpulm_kv *kv) {
    free(kv->k);
    free(kv->v);
    free(kv->len);
    memset(kv, 0, sizeof *kv);
}

void cpulm_kv_seq_cp(cpulm_kv *kv, int32_t src, int32_t dst, int32_t n) {
    CPULM_ASSERT(src >= 0 && src < kv->n_seq && dst >= 0 && dst < kv->n_seq && n >= 0 &&
                 n <= kv->n_ctx);
    if (src != dst) {
        for (int32_t il = 0; il < kv->n_layer; il++) {
            memcpy(cpulm_kv_k(kv, il, dst, 0), cpulm_kv_k(kv, il, src, 0),
                   (size_t)n * kv->row_bytes);
            memcpy(cpulm_kv_v(kv, il, dst, 0), cpulm_kv_v(kv, il, src, 0),
                   (size_t)n * kv->row_bytes);
        }
    }
    kv->len[dst] = n;
}

size_t cpulm_kv_state_bytes(const cpulm_kv *kv, int32_t n) {
    return 2 * (size_t)kv->n_layer * (size_t)n * kv->row_bytes;
}

void cpulm_kv_seq_get(const cpulm_kv *kv, int32_t seq, int32_t p0, int32_t n, uint8_t *dst) {
    CPULM_ASSERT(seq >= 0 && seq < kv->n_seq && p0 >= 0 && n >= 0 && p0 + n <= kv->n_ctx);
    size_t run = (size_t)n * kv->row_bytes;
    for (int32_t il = 0; il < kv->n_layer; il++) {
        memcpy(dst, cpulm_kv_k(kv, il, seq, p0), run);
        memcpy(dst + run, cpulm_kv_v(kv, il, seq, p0), run);
        dst += 2 * run;
    }
}

void cpulm_kv_seq_set(cpulm_kv *kv, int32_t seq, int32_t p0, int32_t n, const uint8_t *src) {
    CPULM_ASSERT(seq >= 0 && seq < kv->n_seq && p0 >= 0 && n >= 0 && p0 + n <= kv->n_ctx);
    size_t run = (size_t)n * kv->row_bytes;
    for (int32_t il = 0; il < kv->n_layer; il++) {
        memcpy(cpulm_kv_k(kv, il, seq, p0), src, run);
        memcpy(cpulm_kv_v(kv, il, seq, p0), src + run, run);
        src += 2 * run;
    }
    kv->len[seq] = p0 + n;
}
