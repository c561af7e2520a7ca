/* gemma_load.c: the Gemma 3 architecture's loading side (gemma.h): its hyperparameters
 * (which layers slide is swa.c's rule, the same for every architecture). The layer itself is
 * in gemma.c (the forward pass). */
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
    double base_swa, cap;
    cpulm_status s;
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
