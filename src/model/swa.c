/* swa.c: sliding-window layers, one rule for every architecture (see swa.h). */
#include "swa.h"

#include <stdio.h>

#include "../base/status.h"

static const char *key_of(char *buf, size_t n, const char *arch, const char *suffix) {
    snprintf(buf, n, "%s.%s", arch, suffix);
    return buf;
}

cpulm_status cpulm_swa_read(const cpulm_gguf *g, const cpulm_arch_desc *a, cpulm_hparams *hp,
                            cpulm_error *err) {
    hp->n_swa = 0;
    if (a->swa_pattern == 0) return CPULM_OK;
    char k[160];
    int64_t swa = 0;
    cpulm_status s =
        cpulm_gguf_get_i64(g, key_of(k, sizeof k, a->name, "attention.sliding_window"), &swa, err);
    if (s == CPULM_ERR_NOT_FOUND && a->swa_optional) return CPULM_OK;
    if (s == CPULM_ERR_NOT_FOUND) return cpulm_errf(err, CPULM_ERR_FORMAT, "missing key '%s'", k);
    if (s != CPULM_OK) return s;
    if (swa < (a->swa_optional ? 0 : 1) || swa > (1 << 30))
        return cpulm_errf(err, CPULM_ERR_FORMAT, "key '%s' = %lld out of range", k, (long long)swa);
    hp->n_swa = (int32_t)swa;
    return CPULM_OK;
}

/* The pattern key: an integer period, or one boolean (or integer) per layer; absent: the
 * architecture's period. */
static cpulm_status read_pattern(const cpulm_gguf *g, const char *key, int32_t n_layer,
                                 int32_t *period, const cpulm_gguf_arr **per_layer,
                                 cpulm_error *err) {
    const cpulm_gguf_kv *kv = cpulm_gguf_find(g, key);
    *per_layer = NULL;
    if (!kv) return CPULM_OK;
    if (kv->type == CPULM_GGUF_ARRAY) {
        const cpulm_gguf_arr *arr = &kv->v.arr;
        if (arr->n != (uint64_t)n_layer || cpulm_gguf_type_size(arr->type) == 0 ||
            arr->type == CPULM_GGUF_F32 || arr->type == CPULM_GGUF_F64)
            return cpulm_errf(err, CPULM_ERR_FORMAT,
                              "key '%s' is not an integer or %d booleans (one per layer)", key,
                              n_layer);
        *per_layer = arr;
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

cpulm_status cpulm_swa_set_layers(const cpulm_gguf *g, const cpulm_arch_desc *a, cpulm_hparams *hp,
                                  cpulm_layer *layers, cpulm_error *err) {
    hp->n_layer_swa = 0;
    if (hp->n_swa == 0) return CPULM_OK; /* the layers' windows stay 0, as bound */
    char k[160];
    int32_t period = a->swa_pattern;
    const cpulm_gguf_arr *arr;
    cpulm_status s =
        read_pattern(g, key_of(k, sizeof k, a->name, "attention.sliding_window_pattern"),
                     hp->n_layer, &period, &arr, err);
    if (s != CPULM_OK) return s;
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const bool slides =
            arr ? cpulm_gguf_arr_i64(arr, (uint64_t)il) != 0 : cpulm_swa_layer_slides(il, period);
        layers[il].window = slides ? hp->n_swa : 0;
        hp->n_layer_swa += slides;
    }
    return CPULM_OK;
}
