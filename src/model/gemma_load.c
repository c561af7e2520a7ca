/* gemma_load.c: the Gemma 3 architecture's loading side (gemma.h): its hyperparameters and
 * which layers use the sliding window. The layer itself is in gemma.c (the forward pass). */
#include "gemma.h"

#include <math.h>
#include <stdio.h>

#include "../base/status.h"

/* ---- hyperparameters ---- */

static const char *key_of(char *buf, size_t n, const char *arch, const char *suffix) {
    snprintf(buf, n, "%s.%s", arch, suffix);
    return buf;
}

/* An optional float key; def when absent. */
static cpulm_status opt_f64(const cpulm_gguf *g, const char *key, double def, double *out,
                            cpulm_error *err) {
    cpulm_status s = cpulm_gguf_get_f64(g, key, out, err);
    if (s == CPULM_ERR_NOT_FOUND)
        *out = def;
    else if (s != CPULM_OK)
        return s;
    if (!(*out == *out) || fabs(*out) > 1e30)
        return cpulm_errf(err, CPULM_ERR_FORMAT, "key '%s' is not a finite number", key);
    return CPULM_OK;
}

cpulm_status cpulm_gemma_read_hparams(const cpulm_gguf *g, const char *arch, cpulm_hparams *hp,
                                      cpulm_error *err) {
    char k[160];
    int64_t swa = 0;
    double base_swa, cap;
    cpulm_status s =
        cpulm_gguf_get_i64(g, key_of(k, sizeof k, arch, "attention.sliding_window"), &swa, err);
    if (s != CPULM_OK && s != CPULM_ERR_NOT_FOUND) return s;
    if (swa < 0 || swa > (1 << 30))
        return cpulm_errf(err, CPULM_ERR_FORMAT, "key '%s' = %lld out of range", k, (long long)swa);
    hp->n_swa = (int32_t)swa;
    if ((s = opt_f64(g, key_of(k, sizeof k, arch, "rope.freq_base_swa"), 10000.0, &base_swa, err)))
        return s;
    if (!(base_swa > 0)) return cpulm_errf(err, CPULM_ERR_FORMAT, "key '%s' must be positive", k);
    hp->rope_base_swa = (float)base_swa;
    /* the logits are soft-capped only when the file has the key (llama.cpp 9928, with or
     * without sliding windows) */
    if ((s = opt_f64(g, key_of(k, sizeof k, arch, "final_logit_softcapping"), 0.0, &cap, err)))
        return s;
    hp->final_softcap = cap > 0 ? (float)cap : 0.0f;
    /* gemma_pytorch's query_pre_attn_scalar: n_embd / n_head for the 27B model only */
    const int32_t qpa = hp->n_layer == 62 ? hp->n_embd / hp->n_head : hp->head_dim;
    hp->attn_scale = 1.0f / sqrtf((float)qpa);
    return CPULM_OK;
}

/* The pattern key: an integer period, or one boolean (or integer) per layer. */
static cpulm_status read_pattern(const cpulm_gguf *g, const char *key, int32_t n_layer,
                                 int32_t *period, const cpulm_gguf_arr **per_layer,
                                 cpulm_error *err) {
    const cpulm_gguf_kv *kv = cpulm_gguf_find(g, key);
    *period = 6;
    *per_layer = NULL;
    if (!kv) return CPULM_OK;
    if (kv->type == CPULM_GGUF_ARRAY) {
        const cpulm_gguf_arr *a = &kv->v.arr;
        if (a->n != (uint64_t)n_layer || cpulm_gguf_type_size(a->type) == 0 ||
            a->type == CPULM_GGUF_F32 || a->type == CPULM_GGUF_F64)
            return cpulm_errf(err, CPULM_ERR_FORMAT,
                              "key '%s' is not an integer or %d booleans (one per layer)", key,
                              n_layer);
        *per_layer = a;
        return CPULM_OK;
    }
    int64_t p;
    cpulm_status s = cpulm_gguf_get_i64(g, key, &p, err);
    if (s != CPULM_OK) return s;
    if (p < 0 || p > 4096)
        return cpulm_errf(err, CPULM_ERR_FORMAT, "key '%s' = %lld out of range [0, 4096]", key,
                          (long long)p);
    *period = (int32_t)p;
    return CPULM_OK;
}

cpulm_status cpulm_gemma_set_windows(const cpulm_gguf *g, const char *arch, cpulm_hparams *hp,
                                     cpulm_layer *layers, cpulm_error *err) {
    hp->n_layer_swa = 0;
    if (hp->n_swa == 0) return CPULM_OK;
    char k[160];
    int32_t period;
    const cpulm_gguf_arr *arr;
    cpulm_status s = read_pattern(g, key_of(k, sizeof k, arch, "attention.sliding_window_pattern"),
                                  hp->n_layer, &period, &arr, err);
    if (s != CPULM_OK) return s;
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const int slides =
            arr ? cpulm_gguf_arr_i64(arr, (uint64_t)il) != 0 : cpulm_gemma_layer_slides(il, period);
        layers[il].window = slides ? hp->n_swa : 0;
        hp->n_layer_swa += slides;
    }
    return CPULM_OK;
}
