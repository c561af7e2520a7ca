/* gemma4_load.c: the Gemma 4 architecture's loading side (gemma4.h): hyperparameters, the
 * layers' head sizes and KV sources, and the tensors each layer needs. The layer itself is
 * in gemma4.c (the forward pass). */
#include "gemma4.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../base/status.h"

static const char *key_of(char *buf, size_t n, const char *arch, const char *suffix) {
    snprintf(buf, n, "%s.%s", arch, suffix);
    return buf;
}

/* An integer key in [lo, hi]; def when absent (def < 0: required). */
static cpulm_status int_key(const cpulm_gguf *g, const char *arch, const char *suffix, int64_t def,
                            int64_t lo, int64_t hi, int32_t *out, cpulm_error *err) {
    char k[160];
    int64_t v;
    cpulm_status s = cpulm_gguf_get_i64(g, key_of(k, sizeof k, arch, suffix), &v, err);
    if (s == CPULM_ERR_NOT_FOUND && def < 0)
        return cpulm_errf(err, CPULM_ERR_FORMAT, "missing key '%s'", k);
    if (s == CPULM_ERR_NOT_FOUND)
        v = def;
    else if (s != CPULM_OK)
        return s;
    if (v < lo || v > hi)
        return cpulm_errf(err, CPULM_ERR_FORMAT, "key '%s' = %lld out of range [%lld, %lld]", k,
                          (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return CPULM_OK;
}

static cpulm_status float_key(const cpulm_gguf *g, const char *arch, const char *suffix, double def,
                              double *out, cpulm_error *err) {
    char k[160];
    cpulm_status s = cpulm_gguf_get_f64(g, key_of(k, sizeof k, arch, suffix), out, err);
    if (s == CPULM_ERR_NOT_FOUND)
        *out = def;
    else if (s != CPULM_OK)
        return s;
    if (!(*out == *out) || fabs(*out) > 1e30)
        return cpulm_errf(err, CPULM_ERR_FORMAT, "key '%s' is not a finite number", k);
    return CPULM_OK;
}

cpulm_status cpulm_gemma4_layer_ints(const cpulm_gguf *g, const char *arch, const char *suffix,
                                     int32_t n_layer, int64_t lo, int64_t hi, int32_t *vals,
                                     int32_t *max, cpulm_error *err) {
    char k[160];
    const cpulm_gguf_kv *kv = cpulm_gguf_find(g, key_of(k, sizeof k, arch, suffix));
    if (!kv || kv->type != CPULM_GGUF_ARRAY) return CPULM_ERR_NOT_FOUND;
    const cpulm_gguf_arr *a = &kv->v.arr;
    const bool ints =
        a->type <= CPULM_GGUF_I32 || a->type == CPULM_GGUF_U64 || a->type == CPULM_GGUF_I64;
    if (!ints || a->n != (uint64_t)n_layer)
        return cpulm_errf(err, CPULM_ERR_FORMAT,
                          "key '%s': an array must hold one integer per layer (%d)", k, n_layer);
    *max = 0;
    for (int32_t il = 0; il < n_layer; il++) {
        const int64_t v = cpulm_gguf_arr_i64(a, (uint64_t)il);
        if (v < lo || v > hi)
            return cpulm_errf(err, CPULM_ERR_FORMAT,
                              "key '%s'[%d] = %lld out of range [%lld, %lld]", k, il, (long long)v,
                              (long long)lo, (long long)hi);
        if (vals) vals[il] = (int32_t)v;
        if (v > *max) *max = (int32_t)v;
    }
    return CPULM_OK;
}

/* The sliding layers' head size and rotated dims; the per-layer embedding width and the
 * shared tail. */
static cpulm_status read_sizes(const cpulm_gguf *g, const char *arch, cpulm_hparams *hp,
                               cpulm_error *err) {
    int32_t vlen;
    cpulm_status s;
    if ((s = int_key(g, arch, "attention.key_length_swa", -1, 2, 4096, &hp->head_dim_swa, err)) ||
        (s = int_key(g, arch, "attention.value_length_swa", hp->head_dim_swa, 1, 4096, &vlen,
                     err)) ||
        (s = int_key(g, arch, "rope.dimension_count_swa", hp->head_dim_swa, 0, hp->head_dim_swa,
                     &hp->n_rot_swa, err)) ||
        (s = int_key(g, arch, "embedding_length_per_layer_input", -1, 0, 1 << 16, &hp->n_pl,
                     err)) ||
        (s = int_key(g, arch, "attention.shared_kv_layers", 0, 0, hp->n_layer, &hp->n_kv_shared,
                     err)))
        return s;
    if (vlen != hp->head_dim_swa)
        return cpulm_errf(err, CPULM_ERR_UNSUPPORTED, "key_length_swa %d != value_length_swa %d",
                          hp->head_dim_swa, vlen);
    /* the sliding layers' heads are kept in the cache rows of the global ones, zero-padded
     * (gemma4.c): they must not be wider */
    if (hp->head_dim_swa > hp->head_dim || hp->n_rot_swa % 2)
        return cpulm_errf(err, CPULM_ERR_UNSUPPORTED,
                          "sliding head size %d (rotated %d) with global head size %d: need it "
                          "no wider and an even rotation",
                          hp->head_dim_swa, hp->n_rot_swa, hp->head_dim);
    if (hp->n_kv_shared > 0 && hp->n_layer - hp->n_kv_shared < 2)
        return cpulm_errf(err, CPULM_ERR_FORMAT,
                          "%d of %d layers share KV: at least 2 layers must have their own",
                          hp->n_kv_shared, hp->n_layer);
    return CPULM_OK;
}

cpulm_status cpulm_gemma4_read_hparams(const cpulm_gguf *g, const char *arch, cpulm_hparams *hp,
                                       cpulm_error *err) {
    char k[160];
    double base_swa, cap;
    int32_t n_expert = 0;
    cpulm_status s;
    if ((s = int_key(g, arch, "expert_count", 0, 0, 1 << 16, &n_expert, err))) return s;
    if (n_expert > 0)
        return cpulm_errf(err, CPULM_ERR_UNSUPPORTED,
                          "gemma4 with experts (the 26B-A4B MoE) is not supported yet: only the "
                          "dense gemma4 models (E2B, E4B, 31B) run");
    if ((s = read_sizes(g, arch, hp, err))) return s;
    if ((s = float_key(g, arch, "rope.freq_base_swa", 10000.0, &base_swa, err))) return s;
    if (!(base_swa > 0))
        return cpulm_errf(err, CPULM_ERR_FORMAT, "key '%s' must be positive",
                          key_of(k, sizeof k, arch, "rope.freq_base_swa"));
    hp->rope_base_swa = (float)base_swa;
    if ((s = float_key(g, arch, "final_logit_softcapping", 0.0, &cap, err))) return s;
    hp->final_softcap = cap > 0 ? (float)cap : 0.0f;
    hp->attn_scale = 1.0f;
    hp->n_layer_attn = hp->n_layer - hp->n_kv_shared; /* layers with a KV cache of their own */
    return CPULM_OK;
}

/* Each layer's FFN width and KV heads when the file has arrays of them (read_hparams took
 * the largest as the model's): a layer's KV heads must divide its query heads and the
 * model's KV heads, which repeat them (gemma4.c). */
static cpulm_status per_layer_arrays(const cpulm_gguf *g, const char *arch, const cpulm_hparams *hp,
                                     cpulm_layer *layers, cpulm_error *err) {
    int32_t max, *v = malloc(sizeof(int32_t) * (size_t)hp->n_layer);
    if (!v) return cpulm_errf(err, CPULM_ERR_NOMEM, "out of memory");
    for (int32_t il = 0; il < hp->n_layer; il++)
        layers[il].n_ff = layers[il].n_head_kv = 0; /* the model's */
    cpulm_status s = cpulm_gemma4_layer_ints(g, arch, "feed_forward_length", hp->n_layer, 1,
                                             1 << 20, v, &max, err);
    for (int32_t il = 0; s == CPULM_OK && il < hp->n_layer; il++)
        layers[il].n_ff = v[il];
    if (s == CPULM_OK || s == CPULM_ERR_NOT_FOUND)
        s = cpulm_gemma4_layer_ints(g, arch, "attention.head_count_kv", hp->n_layer, 1, hp->n_head,
                                    v, &max, err);
    for (int32_t il = 0; s == CPULM_OK && il < hp->n_layer; il++) {
        layers[il].n_head_kv = v[il];
        if (hp->n_head % v[il] || hp->n_head_kv % v[il])
            s = cpulm_errf(err, CPULM_ERR_UNSUPPORTED,
                           "layer %d: %d KV heads must divide its %d query heads and the "
                           "model's %d KV heads",
                           il, v[il], hp->n_head, hp->n_head_kv);
    }
    free(v);
    return s == CPULM_ERR_NOT_FOUND ? CPULM_OK : s;
}

cpulm_status cpulm_gemma4_plan_layers(const cpulm_gguf *g, const char *arch,
                                      const cpulm_hparams *hp, cpulm_layer *layers,
                                      cpulm_error *err) {
    char k[160];
    const cpulm_gguf_kv *kv =
        cpulm_gguf_find(g, key_of(k, sizeof k, arch, "attention.sliding_window_pattern"));
    if (!kv || kv->type != CPULM_GGUF_ARRAY)
        return cpulm_errf(err, CPULM_ERR_FORMAT,
                          "key '%s' must be one boolean per layer (gemma4 files have the array)",
                          k);
    cpulm_status s = per_layer_arrays(g, arch, hp, layers, err);
    if (s != CPULM_OK) return s;
    const int32_t n_kv = hp->n_layer - hp->n_kv_shared;
    for (int32_t il = 0; il < hp->n_layer; il++) {
        cpulm_layer *ly = &layers[il];
        ly->head_dim = ly->window > 0 ? hp->head_dim_swa : hp->head_dim;
        ly->kv_src =
            il < n_kv ? il : cpulm_gemma4_kv_source(hp->n_layer, hp->n_kv_shared, ly->window > 0);
    }
    if (hp->n_kv_shared > 0 && (layers[n_kv - 1].window > 0 || layers[n_kv - 2].window == 0))
        return cpulm_errf(err, CPULM_ERR_UNSUPPORTED,
                          "the layers that share KV read layers %d (must be global) and %d (must "
                          "slide); this file's are not of those kinds",
                          n_kv - 1, n_kv - 2);
    return CPULM_OK;
}

/* Layer il's own-KV and per-layer embedding tensors. */
static cpulm_status check_layer(const cpulm_model *m, int32_t il, cpulm_error *err) {
    const cpulm_layer *ly = &m->layers[il];
    if (ly->kv_src == il && (!ly->wk.data || !ly->k_norm))
        return cpulm_errf(err, CPULM_ERR_FORMAT,
                          "missing tensor 'blk.%d.attn_k.weight' or 'blk.%d.attn_k_norm.weight' "
                          "(the layer has its own KV)",
                          il, il);
    if (m->hp.n_pl > 0 && (!ly->pl_gate.data || !ly->pl_proj.data || !ly->pl_post_norm))
        return cpulm_errf(err, CPULM_ERR_FORMAT,
                          "missing tensor 'blk.%d.inp_gate.weight', 'blk.%d.proj.weight' or "
                          "'blk.%d.post_norm.weight' (per-layer embeddings)",
                          il, il, il);
    return CPULM_OK;
}

cpulm_status cpulm_gemma4_check_tensors(const cpulm_model *m, cpulm_error *err) {
    const cpulm_hparams *hp = &m->hp;
    if (hp->n_pl > 0 && (!m->pl_tok_embd.data || !m->pl_model_proj.data || !m->pl_proj_norm))
        return cpulm_errf(err, CPULM_ERR_FORMAT,
                          "missing tensor 'per_layer_token_embd.weight', "
                          "'per_layer_model_proj.weight' or 'per_layer_proj_norm.weight'");
    if (hp->n_layer_swa < hp->n_layer && !m->rope_freqs)
        return cpulm_errf(err, CPULM_ERR_FORMAT,
                          "missing tensor 'rope_freqs.weight' (the global layers' rope)");
    for (int32_t il = 0; il < hp->n_layer; il++) {
        cpulm_status s = check_layer(m, il, err);
        if (s != CPULM_OK) return s;
    }
    return CPULM_OK;
}
