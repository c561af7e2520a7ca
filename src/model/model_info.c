/* model_info.c: read-only queries on a loaded model for tools (`cpulm info`, bench, plan):
 * hyperparameters, tensors, metadata as text, and memory estimates. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/status.h"
#include "model.h"

static char *dup_view(cpulm_str s) {
    char *p = malloc(s.len + 1);
    if (p) {
        memcpy(p, s.ptr, s.len);
        p[s.len] = 0;
    }
    return p;
}

cpulm_status cpulm_model_build_names(cpulm_model *m, cpulm_error *err) {
    const cpulm_gguf *g = &m->gguf;
    m->meta_keys = calloc(g->n_kv + 1, sizeof(char *));
    m->tensor_names = calloc(g->n_tensors + 1, sizeof(char *));
    if (!m->meta_keys || !m->tensor_names) return cpulm_errf(err, CPULM_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (!(m->meta_keys[i] = dup_view(g->kv[i].key)))
            return cpulm_errf(err, CPULM_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (!(m->tensor_names[i] = dup_view(g->tensors[i].name)))
            return cpulm_errf(err, CPULM_ERR_NOMEM, "out of memory");
    return CPULM_OK;
}

void cpulm_model_free_names(cpulm_model *m) {
    if (m->meta_keys)
        for (uint64_t i = 0; i < m->gguf.n_kv; i++)
            free(m->meta_keys[i]);
    if (m->tensor_names)
        for (uint64_t i = 0; i < m->gguf.n_tensors; i++)
            free(m->tensor_names[i]);
    free(m->meta_keys);
    free(m->tensor_names);
    m->meta_keys = m->tensor_names = NULL;
}

void cpulm_model_get_info(const cpulm_model *m, cpulm_model_info *o) {
    memset(o, 0, sizeof *o);
    const cpulm_hparams *hp = &m->hp;
    o->arch = m->arch_name;
    o->name = m->name;
    o->ftype = m->ftype;
    o->n_vocab = hp->n_vocab;
    o->n_ctx_train = hp->n_ctx_train;
    o->n_embd = hp->n_embd;
    o->n_layer = hp->n_layer;
    o->n_head = hp->n_head;
    o->n_head_kv = hp->n_head_kv;
    o->head_dim = hp->head_dim;
    o->n_ff = hp->n_ff;
    o->n_rot = hp->n_rot;
    o->rope_freq_base = hp->rope_base;
    o->norm_eps = hp->norm_eps;
    o->file_size = m->map.size;
    o->n_tensors = (int32_t)m->gguf.n_tensors;
    o->gguf_version = m->gguf.version;
    o->n_expert = hp->n_expert;
    o->n_expert_used = hp->n_expert_used;
    o->n_ff_exp = hp->n_ff_exp;
    o->n_layer_recurrent = hp->n_layer_recr;
    o->n_swa = hp->n_swa;
    o->n_layer_swa = hp->n_layer_swa;
    /* the sliding layers' own rope base (gemma3), else the model's (gpt-oss) */
    o->rope_freq_base_swa = hp->n_layer_swa == 0    ? 0.0f
                            : hp->rope_base_swa > 0 ? hp->rope_base_swa
                                                    : hp->rope_base;
    const int untied = cpulm_gguf_find_tensor(&m->gguf, "output.weight") >= 0;
    for (uint64_t i = 0; i < m->gguf.n_tensors; i++) {
        const cpulm_gguf_tensor *t = &m->gguf.tensors[i];
        const int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        o->n_params += n;
        o->weight_bytes += t->n_bytes;
        if (untied && !strcmp(m->tensor_names[i], "token_embd.weight")) continue;
        if (hp->n_expert > 0 && t->ne[2] == hp->n_expert && strstr(m->tensor_names[i], "_exps")) {
            /* a per-expert stack: a token reads n_used of its n_expert matrices */
            o->n_params_active += n / hp->n_expert * hp->n_expert_used;
            o->active_bytes += t->n_bytes / (uint64_t)hp->n_expert * (uint64_t)hp->n_expert_used;
        } else {
            o->n_params_active += n;
            o->active_bytes += t->n_bytes;
        }
    }
    o->widened_bytes = m->widened_bytes;
    o->weight_bytes += m->widened_bytes; /* what the process holds and a token reads */
    o->active_bytes += m->widened_active_bytes;
}

cpulm_status cpulm_model_tensor(const cpulm_model *m, int32_t i, const char **name,
                                const char **type_name, int64_t ne[4], uint64_t *n_bytes) {
    if (i < 0 || (uint64_t)i >= m->gguf.n_tensors) return CPULM_ERR_INVALID_ARG;
    const cpulm_gguf_tensor *t = &m->gguf.tensors[i];
    if (name) *name = m->tensor_names[i];
    if (type_name) *type_name = cpulm_dtype_name(t->type);
    if (ne) memcpy(ne, t->ne, sizeof t->ne);
    if (n_bytes) *n_bytes = t->n_bytes;
    return CPULM_OK;
}

int32_t cpulm_model_meta_count(const cpulm_model *m) {
    return (int32_t)m->gguf.n_kv;
}

const char *cpulm_model_meta_key(const cpulm_model *m, int32_t i) {
    if (i < 0 || (uint64_t)i >= m->gguf.n_kv) return NULL;
    return m->meta_keys[i];
}

static size_t format_kv(const cpulm_gguf_kv *kv, char *buf, size_t cap) {
    switch (kv->type) {
    case CPULM_GGUF_STRING:
        if (cap) {
            size_t n = kv->v.s.len < cap - 1 ? kv->v.s.len : cap - 1;
            memcpy(buf, kv->v.s.ptr, n);
            buf[n] = 0;
        }
        return kv->v.s.len;
    case CPULM_GGUF_ARRAY:
        return (size_t)snprintf(buf, cap, "[%" PRIu64 " x %s]", kv->v.arr.n,
                                cpulm_gguf_type_name(kv->v.arr.type));
    case CPULM_GGUF_F32:
    case CPULM_GGUF_F64: return (size_t)snprintf(buf, cap, "%g", kv->v.f);
    case CPULM_GGUF_BOOL: return (size_t)snprintf(buf, cap, "%s", kv->v.u ? "true" : "false");
    case CPULM_GGUF_I8:
    case CPULM_GGUF_I16:
    case CPULM_GGUF_I32:
    case CPULM_GGUF_I64: return (size_t)snprintf(buf, cap, "%" PRId64, kv->v.i);
    default: return (size_t)snprintf(buf, cap, "%" PRIu64, kv->v.u);
    }
}

cpulm_status cpulm_model_meta(const cpulm_model *m, const char *key, char *buf, size_t cap,
                              size_t *n_out) {
    const cpulm_gguf_kv *kv = cpulm_gguf_find(&m->gguf, key);
    if (!kv) return CPULM_ERR_NOT_FOUND;
    size_t n = format_kv(kv, buf, cap);
    if (n_out) *n_out = n + 1;
    return n + 1 > cap ? CPULM_ERR_TOO_SMALL : CPULM_OK;
}

cpulm_pooling cpulm_model_pooling(const cpulm_model *m) {
    return (cpulm_pooling)m->hp.pooling;
}

static const char *const pooling_names[] = {"none", "mean", "cls", "last", "rank"};

cpulm_status cpulm_pooling_parse(const char *s, cpulm_pooling *out) {
    for (int i = 0; i < (int)(sizeof pooling_names / sizeof pooling_names[0]); i++)
        if (s && strcmp(s, pooling_names[i]) == 0) {
            *out = (cpulm_pooling)i;
            return CPULM_OK;
        }
    return CPULM_ERR_INVALID_ARG;
}

const char *cpulm_pooling_name(cpulm_pooling p) {
    if (p < CPULM_POOLING_NONE || p > CPULM_POOLING_RANK) return "unspecified";
    return pooling_names[p];
}
