/* model.c: loads a GGUF model: maps the file, parses and validates it, reads the
 * hyperparameters of its architecture, builds the vocabulary and binds tensor views with
 * shape and type checks, so the forward pass never sees a tensor it cannot compute with.
 * Errors name the file and what is wrong; nothing is printed here. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/fp16.h"
#include "../base/status.h"
#include "../tokenizer/vocab.h"
#include "gemma.h"
#include "gemma4.h"
#include "repack.h"
#include "swa.h"
#include "../threads/numa.h"

typedef struct loader {
    cpulm_model *m;
    cpulm_error *err;
    char key[256];
} loader;

static const char *akey(loader *L, const char *suffix) {
    snprintf(L->key, sizeof L->key, "%s.%s", L->m->arch->name, suffix);
    return L->key;
}

static char *dup_str(cpulm_str s) {
    char *p = malloc(s.len + 1);
    if (!p) return NULL;
    memcpy(p, s.ptr, s.len);
    p[s.len] = 0;
    return p;
}

/* Reads an integer hyperparameter; absent keys give def (or an error when def < 0). */
static cpulm_status get_int(loader *L, const char *suffix, int64_t def, int64_t lo, int64_t hi,
                            int32_t *out) {
    int64_t v;
    cpulm_status s = cpulm_gguf_get_i64(&L->m->gguf, akey(L, suffix), &v, L->err);
    if (s == CPULM_ERR_NOT_FOUND) {
        if (def < 0) return cpulm_errf(L->err, CPULM_ERR_FORMAT, "missing key '%s'", L->key);
        v = def;
    } else if (s != CPULM_OK) {
        return s;
    }
    if (v < lo || v > hi)
        return cpulm_errf(L->err, CPULM_ERR_FORMAT, "key '%s' = %lld out of range [%lld, %lld]",
                          L->key, (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return CPULM_OK;
}

/* get_int, except that a gemma4 file may hold one value per layer (E2B's FFN widths, 31B's
 * KV heads): then the largest (gemma4_load.c reads each layer's when planning the layers). */
static cpulm_status get_int_or_max(loader *L, const char *suffix, int64_t def, int64_t lo,
                                   int64_t hi, int32_t *out) {
    if (!L->m->arch->gemma4) return get_int(L, suffix, def, lo, hi, out);
    cpulm_status s = cpulm_gemma4_layer_ints(&L->m->gguf, L->m->arch->name, suffix,
                                             L->m->hp.n_layer, lo, hi, NULL, out, L->err);
    return s == CPULM_ERR_NOT_FOUND ? get_int(L, suffix, def, lo, hi, out) : s;
}

static cpulm_status get_float(loader *L, const char *suffix, double def, float *out) {
    double v;
    cpulm_status s = cpulm_gguf_get_f64(&L->m->gguf, akey(L, suffix), &v, L->err);
    if (s == CPULM_ERR_NOT_FOUND)
        v = def;
    else if (s != CPULM_OK)
        return s;
    if (!(v == v) || v > 1e30 || v < -1e30)
        return cpulm_errf(L->err, CPULM_ERR_FORMAT, "key '%s' is not a finite number", L->key);
    *out = (float)v;
    return CPULM_OK;
}

static cpulm_status read_rope_scaling(loader *L) {
    const cpulm_hparams *hp = &L->m->hp;
    return cpulm_rope_scaling_read(&L->m->gguf, L->m->arch->name, hp->n_rot, hp->rope_base,
                                   hp->n_ctx_train, &L->m->hp.rope, L->err);
}

/* Mixture-of-experts keys: expert_count (required for MoE-only architectures, ignored by
 * dense-only ones), expert_used_count, expert_feed_forward_length (Mixtral files have none:
 * each expert is a feed_forward_length FFN) and expert_weights_norm when present. */
static cpulm_status read_experts(loader *L) {
    cpulm_hparams *hp = &L->m->hp;
    const cpulm_arch_desc *a = L->m->arch;
    if (a->ffn == CPULM_FFN_DENSE_ONLY) return CPULM_OK;
    cpulm_status s;
    int64_t def = a->ffn == CPULM_FFN_MOE_ONLY ? -1 : 0;
    if ((s = get_int(L, "expert_count", def, 0, 4096, &hp->n_expert))) return s;
    if (hp->n_expert == 0) {
        if (a->ffn == CPULM_FFN_MOE_ONLY)
            return cpulm_errf(L->err, CPULM_ERR_FORMAT, "key '%s' must be positive", L->key);
        return CPULM_OK;
    }
    if ((s = get_int(L, "expert_used_count", -1, 1, hp->n_expert, &hp->n_expert_used)) ||
        (s = get_int(L, "expert_feed_forward_length", hp->n_ff, 1, 1 << 20, &hp->n_ff_exp)))
        return s;
    if (a->hybrid && (s = get_int(L, "expert_shared_feed_forward_length", hp->n_ff, 1, 1 << 20,
                                  &hp->n_ff_shexp)))
        return s;
    bool norm = a->moe_norm_weights;
    s = cpulm_gguf_get_bool(&L->m->gguf, akey(L, "expert_weights_norm"), &norm, L->err);
    if (s != CPULM_OK && s != CPULM_ERR_NOT_FOUND) return s;
    hp->moe_norm_weights = norm;
    return CPULM_OK;
}

/* rope.dimension_sections: up to 4 integers, the pairs each position section rotates.
 * Text positions are equal in every section except the fourth (always 0 for text), so
 * a pair rotates with the position iff a text section covers it (forward.c's rope). */
static cpulm_status read_rope_sections(loader *L) {
    cpulm_hparams *hp = &L->m->hp;
    const cpulm_gguf_kv *kv = cpulm_gguf_find(&L->m->gguf, akey(L, "rope.dimension_sections"));
    if (!kv) return cpulm_errf(L->err, CPULM_ERR_FORMAT, "missing key '%s'", L->key);
    if (kv->type != CPULM_GGUF_ARRAY || kv->v.arr.n < 1 || kv->v.arr.n > 4 ||
        cpulm_gguf_type_size(kv->v.arr.type) == 0 || kv->v.arr.type == CPULM_GGUF_F32 ||
        kv->v.arr.type == CPULM_GGUF_F64)
        return cpulm_errf(L->err, CPULM_ERR_FORMAT, "key '%s' is not an array of 1-4 integers",
                          L->key);
    int64_t sum = 0;
    for (uint64_t i = 0; i < kv->v.arr.n; i++) {
        int64_t v = cpulm_gguf_arr_i64(&kv->v.arr, i);
        if (v < 0 || v > 4096)
            return cpulm_errf(L->err, CPULM_ERR_FORMAT, "key '%s' has a bad section size", L->key);
        hp->rope_sections[i] = (int32_t)v;
        sum += v;
    }
    if (sum == 0) return cpulm_errf(L->err, CPULM_ERR_FORMAT, "key '%s' has no pairs", L->key);
    return CPULM_OK;
}

/* Gated DeltaNet sizes and the layer pattern of a hybrid model. Files may append NextN
 * (multi-token prediction) layers after the main stack (nextn_predict_layers): they are
 * not run, and their tensors are not bound (the speculative decoding issue may use them). */
static cpulm_status read_hybrid(loader *L) {
    cpulm_hparams *hp = &L->m->hp;
    const int64_t big = 1 << 20;
    int32_t nextn = 0;
    cpulm_status s;
    if ((s = get_int(L, "ssm.conv_kernel", -1, 1, 64, &hp->ssm_conv)) ||
        (s = get_int(L, "ssm.inner_size", -1, 1, big, &hp->ssm_inner)) ||
        (s = get_int(L, "ssm.state_size", -1, 1, 4096, &hp->ssm_state)) ||
        (s = get_int(L, "ssm.group_count", -1, 1, 4096, &hp->ssm_groups)) ||
        (s = get_int(L, "ssm.time_step_rank", -1, 1, 4096, &hp->ssm_heads)) ||
        (s = get_int(L, "full_attention_interval", 4, 1, 4096, &hp->full_attn_interval)) ||
        (s = get_int(L, "nextn_predict_layers", 0, 0, hp->n_layer - 1, &nextn)))
        return s;
    if (hp->ssm_heads % hp->ssm_groups || hp->ssm_inner % hp->ssm_heads ||
        hp->ssm_inner / hp->ssm_heads != hp->ssm_state)
        return cpulm_errf(L->err, CPULM_ERR_UNSUPPORTED,
                          "Gated DeltaNet sizes not supported: inner %d, state %d, %d key heads, "
                          "%d value heads (need value heads a multiple of key heads and value "
                          "head size = state size)",
                          hp->ssm_inner, hp->ssm_state, hp->ssm_groups, hp->ssm_heads);
    hp->n_layer -= nextn;
    for (int32_t il = 0; il < hp->n_layer; il++)
        if (cpulm_arch_layer_recurrent(il, hp->full_attn_interval))
            hp->n_layer_recr++;
        else
            hp->n_layer_attn++;
    return CPULM_OK;
}

/* Encoders: LayerNorm epsilon (attention.layer_norm_epsilon), the token type count
 * (a tokenizer key in llama.cpp's files), and attention.causal, which must be false. */
static cpulm_status read_encoder(loader *L) {
    cpulm_hparams *hp = &L->m->hp;
    cpulm_status s;
    if ((s = get_float(L, "attention.layer_norm_epsilon", L->m->arch->default_norm_eps,
                       &hp->norm_eps)))
        return s;
    if (!(hp->norm_eps > 0))
        return cpulm_errf(L->err, CPULM_ERR_FORMAT, "key '%s' must be positive", L->key);
    int64_t n = 0;
    s = cpulm_gguf_get_i64(&L->m->gguf, "tokenizer.ggml.token_type_count", &n, L->err);
    if (s != CPULM_OK && s != CPULM_ERR_NOT_FOUND) return s;
    if (n < 0 || n > 1024)
        return cpulm_errf(L->err, CPULM_ERR_FORMAT, "tokenizer.ggml.token_type_count %lld",
                          (long long)n);
    hp->n_types = (int32_t)n;
    bool causal = false;
    s = cpulm_gguf_get_bool(&L->m->gguf, akey(L, "attention.causal"), &causal, L->err);
    if (s != CPULM_OK && s != CPULM_ERR_NOT_FOUND) return s;
    if (causal)
        return cpulm_errf(L->err, CPULM_ERR_UNSUPPORTED,
                          "key '%s' = true: only bidirectional encoders are supported", L->key);
    hp->encoder = 1;
    return CPULM_OK;
}

static cpulm_status read_hparams(loader *L) {
    cpulm_hparams *hp = &L->m->hp;
    const int64_t big = 1 << 20;
    /* a MoE-only file may have no dense FFN width: its experts have their own key */
    const bool moe_only = L->m->arch->ffn == CPULM_FFN_MOE_ONLY;
    cpulm_status s;
    if ((s = get_int(L, "context_length", 2048, 1, 1 << 24, &hp->n_ctx_train)) ||
        (s = get_int(L, "embedding_length", -1, 1, big, &hp->n_embd)) ||
        (s = get_int(L, "block_count", -1, 1, 4096, &hp->n_layer)) ||
        (s = get_int_or_max(L, "feed_forward_length", moe_only ? 0 : -1, moe_only ? 0 : 1, big,
                            &hp->n_ff)) ||
        (s = get_int(L, "attention.head_count", -1, 1, 4096, &hp->n_head)) ||
        (s = get_int_or_max(L, "attention.head_count_kv", hp->n_head, 1, hp->n_head,
                            &hp->n_head_kv)))
        return s;
    if (hp->n_head % hp->n_head_kv != 0)
        return cpulm_errf(L->err, CPULM_ERR_FORMAT,
                          "head_count %d not a multiple of head_count_kv %d", hp->n_head,
                          hp->n_head_kv);
    int32_t def_hd = hp->n_embd / hp->n_head;
    if ((s = get_int(L, "attention.key_length", def_hd, 1, 4096, &hp->head_dim))) return s;
    int32_t vlen;
    if ((s = get_int(L, "attention.value_length", hp->head_dim, 1, 4096, &vlen))) return s;
    if (vlen != hp->head_dim)
        return cpulm_errf(L->err, CPULM_ERR_UNSUPPORTED, "key_length %d != value_length %d",
                          hp->head_dim, vlen);
    if ((s = get_int(L, "rope.dimension_count", hp->head_dim, 0, hp->head_dim, &hp->n_rot)))
        return s;
    if (hp->n_rot % 2)
        return cpulm_errf(L->err, CPULM_ERR_FORMAT, "rope.dimension_count %d is odd", hp->n_rot);
    if ((s = get_float(L, "rope.freq_base", L->m->arch->default_rope_base, &hp->rope_base)) ||
        (s = get_float(L, "attention.layer_norm_rms_epsilon", L->m->arch->default_norm_eps,
                       &hp->norm_eps)))
        return s;
    if (!(hp->rope_base > 0))
        return cpulm_errf(L->err, CPULM_ERR_FORMAT, "rope.freq_base must be positive");
    /* llama.cpp's default for a model without the key is NONE (decoders) */
    if ((s = get_int(L, "pooling_type", CPULM_POOLING_NONE, CPULM_POOLING_NONE, CPULM_POOLING_RANK,
                     &hp->pooling)))
        return s;
    if ((s = read_rope_scaling(L)) != CPULM_OK) return s;
    if (L->m->arch->mrope && (s = read_rope_sections(L)) != CPULM_OK) return s;
    if ((s = cpulm_swa_read(&L->m->gguf, L->m->arch, hp, L->err)) != CPULM_OK) return s;
    hp->n_layer_attn = hp->n_layer;
    if (L->m->arch->encoder && (s = read_encoder(L)) != CPULM_OK) return s;
    if (L->m->arch->gemma &&
        (s = cpulm_gemma_read_hparams(&L->m->gguf, L->m->arch->name, hp, L->err)) != CPULM_OK)
        return s;
    if (L->m->arch->gemma4 &&
        (s = cpulm_gemma4_read_hparams(&L->m->gguf, L->m->arch->name, hp, L->err)) != CPULM_OK)
        return s;
    if (L->m->arch->hybrid) {
        hp->n_layer_attn = 0;
        if ((s = read_hybrid(L)) != CPULM_OK) return s;
    }
    return read_experts(L);
}

/* ---- tensor binding ---- */

static const cpulm_gguf_tensor *find_tensor(loader *L, const char *name) {
    int64_t i = cpulm_gguf_find_tensor(&L->m->gguf, name);
    return i < 0 ? NULL : &L->m->gguf.tensors[i];
}

/* Weights are read in place by the kernels through typed pointers (float, or block structs
 * holding fp16 scales), so their data must have that type's natural alignment. A file
 * with general.alignment 1 or 2 can place them anywhere: refuse it with a clear error
 * rather than run misaligned (undefined) loads. */
static cpulm_status check_aligned(loader *L, const char *name, const cpulm_gguf_tensor *t) {
    size_t a = t->type == CPULM_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    if ((uintptr_t)t->data % a == 0) return CPULM_OK;
    return cpulm_errf(L->err, CPULM_ERR_FORMAT,
                      "tensor '%s': data at file offset %llu is not %zu-byte aligned for %s "
                      "(general.alignment %llu is too small; rewrite the file with 32)",
                      name, (unsigned long long)((const uint8_t *)t->data - L->m->gguf.base), a,
                      cpulm_dtype_name(t->type), (unsigned long long)L->m->gguf.alignment);
}

/* Binds a weight of shape [n_in, n_out] or [n_in, n_out, n_exp] (per-expert stack) that the
 * kernels can compute with. */
static cpulm_status bind_matrix(loader *L, const char *name, const int64_t ne[3], int optional,
                                cpulm_tensor *out) {
    const cpulm_gguf_tensor *t = find_tensor(L, name);
    memset(out, 0, sizeof *out);
    if (!t) {
        if (optional) return CPULM_OK;
        return cpulm_errf(L->err, CPULM_ERR_FORMAT, "missing tensor '%s'", name);
    }
    if (t->ne[0] != ne[0] || t->ne[1] != ne[1] || t->ne[2] != ne[2] || t->ne[3] != 1)
        return cpulm_errf(
            L->err, CPULM_ERR_FORMAT,
            "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld]", name,
            (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
            (long long)ne[0], (long long)ne[1], (long long)ne[2]);
    const cpulm_dtype_traits *tr = cpulm_dtype_traits_get(t->type);
    if (!tr || !tr->computable)
        return cpulm_errf(L->err, CPULM_ERR_UNSUPPORTED, "tensor '%s': type %s not supported", name,
                          cpulm_dtype_name(t->type));
    cpulm_status st = check_aligned(L, name, t);
    if (st != CPULM_OK) return st;
    out->data = t->data;
    out->type = (cpulm_dtype)t->type;
    memcpy(out->ne, ne, sizeof out->ne);
    out->row_bytes = cpulm_dtype_row_bytes(out->type, ne[0]);
    out->expert_bytes = out->row_bytes * (uint64_t)ne[1];
    return CPULM_OK;
}

/* Binds a 1-D F32 vector (or a small 2-D array, ne[0] x ne[1]) read element-wise; other
 * types are converted into an owned copy. */
static cpulm_status bind_vector(loader *L, const char *name, const int64_t ne[3], int optional,
                                const float **out) {
    const cpulm_gguf_tensor *t = find_tensor(L, name);
    *out = NULL;
    if (!t) {
        if (optional) return CPULM_OK;
        return cpulm_errf(L->err, CPULM_ERR_FORMAT, "missing tensor '%s'", name);
    }
    const int64_t n = ne[0] * ne[1];
    if (t->ne[0] != ne[0] || t->ne[1] != ne[1] || t->ne[2] != 1 || t->ne[3] != 1)
        return cpulm_errf(L->err, CPULM_ERR_FORMAT,
                          "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                          name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                          (long long)t->ne[3], (long long)ne[0], (long long)ne[1]);
    if (t->type == CPULM_DTYPE_F32 && ((uintptr_t)t->data % sizeof(float)) == 0) {
        *out = t->data;
        return CPULM_OK;
    }
    if (!cpulm_dequantize_supported((cpulm_dtype)t->type))
        return cpulm_errf(L->err, CPULM_ERR_UNSUPPORTED, "tensor '%s': type %s not supported", name,
                          cpulm_dtype_name(t->type));
    cpulm_model *m = L->m;
    float **list = realloc(m->owned_f32, sizeof(float *) * (size_t)(m->n_owned_f32 + 1));
    if (!list) return cpulm_errf(L->err, CPULM_ERR_NOMEM, "out of memory");
    m->owned_f32 = list;
    float *v = malloc(sizeof(float) * (size_t)n);
    if (!v) return cpulm_errf(L->err, CPULM_ERR_NOMEM, "out of memory");
    list[m->n_owned_f32++] = v;
    cpulm_dequantize_row_ref((cpulm_dtype)t->type, t->data, v, n);
    *out = v;
    return CPULM_OK;
}

/* Binds every tensor of a descriptor list present for this model into the struct at base
 * (a cpulm_layer, or the model for the global list); prefix is "blk.<i>." or "". hp: the
 * model's hyperparameters as this list's shapes read them (a gemma4 layer's own head size). */
static cpulm_status bind_list(loader *L, const cpulm_tensor_desc *list, const char *prefix,
                              void *base, bool recurrent, const cpulm_hparams *hp) {
    char name[160];
    for (const cpulm_tensor_desc *t = list; t->name; t++) {
        if (!cpulm_arch_tensor_present(t, hp->n_expert, recurrent)) continue;
        snprintf(name, sizeof name, "%s%s", prefix, t->name);
        int64_t ne[3];
        for (int i = 0; i < 3; i++)
            ne[i] = cpulm_arch_dim(hp, (cpulm_dim)t->dims[i]);
        void *field = (char *)base + t->field;
        cpulm_status s = t->kind != CPULM_TK_MATRIX
                             ? bind_vector(L, name, ne, t->optional, (const float **)field)
                             : bind_matrix(L, name, ne, t->optional, (cpulm_tensor *)field);
        if (s != CPULM_OK) return s;
    }
    return CPULM_OK;
}

static cpulm_status bind_tensors(loader *L) {
    cpulm_model *m = L->m;
    const cpulm_hparams *hp = &m->hp;
    cpulm_status s;
    if ((s = bind_list(L, cpulm_arch_globals(m->arch), "", m, false, hp)) != CPULM_OK) return s;
    if (!m->output.data && !m->arch->encoder) m->output = m->tok_embd; /* tied embeddings */
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return cpulm_errf(L->err, CPULM_ERR_NOMEM, "out of memory");
    /* windows first: a gemma4 layer's head size (its tensors' shapes) depends on it */
    if ((s = cpulm_swa_set_layers(&m->gguf, m->arch, &m->hp, m->layers, L->err)) != CPULM_OK)
        return s;
    if (m->arch->gemma4 &&
        (s = cpulm_gemma4_plan_layers(&m->gguf, m->arch->name, hp, m->layers, L->err)) != CPULM_OK)
        return s;
    int32_t n_recr = 0, n_attn = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "blk.%d.", il);
        cpulm_layer *ly = &m->layers[il];
        ly->recurrent = m->arch->hybrid && cpulm_arch_layer_recurrent(il, hp->full_attn_interval);
        ly->slot = ly->recurrent ? n_recr++ : n_attn++;
        cpulm_hparams hl = *hp;
        if (ly->head_dim) hl.head_dim = ly->head_dim; /* 0 (the model's) except in gemma4 */
        if (ly->n_ff) hl.n_ff = ly->n_ff;             /* gemma4's per-layer arrays */
        if (ly->n_head_kv) hl.n_head_kv = ly->n_head_kv;
        if ((s = bind_list(L, m->arch->layer_tensors, prefix, ly, ly->recurrent, &hl)) != CPULM_OK)
            return s;
        if (ly->recurrent && !ly->ssm_in.data && !(ly->ssm_qkv.data && ly->ssm_z.data))
            return cpulm_errf(L->err, CPULM_ERR_FORMAT,
                              "missing tensor '%sattn_qkv.weight' (or '%sattn_gate.weight', or "
                              "the older '%sssm_in.weight')",
                              prefix, prefix, prefix);
        if (ly->ssm_in.data) m->hp.ssm_joint_in = 1;
        if (m->arch->encoder && !ly->wqkv.data && !(ly->wq.data && ly->wk.data && ly->wv.data))
            return cpulm_errf(L->err, CPULM_ERR_FORMAT,
                              "missing tensor '%sattn_qkv.weight' (or '%sattn_q.weight', "
                              "'%sattn_k.weight' and '%sattn_v.weight')",
                              prefix, prefix, prefix, prefix);
    }
    return m->arch->gemma4 ? cpulm_gemma4_check_tensors(m, L->err) : CPULM_OK;
}

/* The most common type among 2-D tensors, as a label like llama.cpp's file type. */
static const char *main_type(const cpulm_gguf *g) {
    int counts[CPULM_DTYPE_COUNT] = {0};
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].n_dims >= 2 && g->tensors[i].type < CPULM_DTYPE_COUNT)
            counts[g->tensors[i].type]++;
    int best = -1;
    for (int t = 0; t < CPULM_DTYPE_COUNT; t++)
        if (counts[t] && (best < 0 || counts[t] > counts[best])) best = t;
    return best < 0 ? "none" : cpulm_dtype_name((uint32_t)best);
}

static cpulm_status load_metadata(loader *L) {
    cpulm_model *m = L->m;
    cpulm_str arch, name = {"", 0};
    cpulm_status s = cpulm_gguf_get_str(&m->gguf, "general.architecture", &arch, L->err);
    if (s == CPULM_ERR_NOT_FOUND)
        return cpulm_errf(L->err, CPULM_ERR_FORMAT, "missing key 'general.architecture'");
    if (s != CPULM_OK) return s;
    m->arch = cpulm_arch_find(arch.ptr, (unsigned long)arch.len);
    if (!(m->arch_name = dup_str(arch)))
        return cpulm_errf(L->err, CPULM_ERR_NOMEM, "out of memory");
    if (cpulm_gguf_get_str(&m->gguf, "general.name", &name, NULL) != CPULM_OK) name.len = 0;
    if (!(m->name = dup_str(name))) return cpulm_errf(L->err, CPULM_ERR_NOMEM, "out of memory");
    const char *ft = main_type(&m->gguf);
    if (!(m->ftype = dup_str((cpulm_str){ft, strlen(ft)})))
        return cpulm_errf(L->err, CPULM_ERR_NOMEM, "out of memory");
    if ((s = cpulm_vocab_load(&m->vocab, &m->gguf, L->err)) != CPULM_OK) return s;
    if (!m->arch) {
        if (m->vocab_only) return CPULM_OK;
        return cpulm_errf(L->err, CPULM_ERR_UNSUPPORTED,
                          "architecture '%s' not supported (supported: %s)", m->arch_name,
                          cpulm_arch_supported());
    }
    if ((s = read_hparams(L)) != CPULM_OK) return s;
    m->hp.n_vocab = cpulm_vocab_n_tokens(m->vocab);
    return CPULM_OK;
}

/* The NUMA mode's memory policy covers the weights' first touch: file pages (pre-faulted
 * for DISTRIBUTE) and the repacked copies written here. */
static cpulm_status place_and_repack(cpulm_model *m, const cpulm_model_params *p, cpulm_error *e) {
    cpulm_numa_mem saved;
    cpulm_numa_mem_begin(p->numa, &m->map, &saved);
    cpulm_status s = CPULM_OK;
    if (!p->no_repack) s = cpulm_repack_model(m, cpulm_kernels_get(), e);
    cpulm_numa_mem_end(&saved);
    return s;
}

cpulm_model_params cpulm_model_default_params(void) {
    cpulm_model_params p = {.vocab_only = 0, .use_mlock = 0};
    return p;
}

cpulm_model *cpulm_model_load(const char *path, const cpulm_model_params *params,
                              cpulm_error *err) {
    cpulm_model_params p = params ? *params : cpulm_model_default_params();
    cpulm_error local;
    cpulm_error *e = err ? err : &local;
    cpulm_model *m = calloc(1, sizeof *m);
    if (!m) {
        cpulm_errf(err, CPULM_ERR_NOMEM, "%s: out of memory", path);
        return NULL;
    }
    m->vocab_only = p.vocab_only;
    loader L = {.m = m, .err = e};
    cpulm_status s = cpulm_mmap_open(&m->map, path, e); /* message already names the path */
    if (s != CPULM_OK) goto fail_noprefix;
    if (!(m->path = dup_str((cpulm_str){path, strlen(path)}))) {
        s = cpulm_errf(e, CPULM_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((s = cpulm_gguf_parse(&m->gguf, m->map.data, m->map.size, e)) != CPULM_OK) goto fail;
    if ((s = cpulm_model_build_names(m, e)) != CPULM_OK) goto fail;
    if ((s = load_metadata(&L)) != CPULM_OK) goto fail;
    if (!p.vocab_only && (s = bind_tensors(&L)) != CPULM_OK) goto fail;
    if (!p.vocab_only && (s = place_and_repack(m, &p, e)) != CPULM_OK) goto fail;
    if (p.use_mlock) cpulm_mmap_lock(&m->map);
    return m;
fail : {
    char msg[sizeof e->msg];
    snprintf(msg, sizeof msg, "%s", e->msg);
    cpulm_errf(e, s, "%s: %s", path, msg);
}
fail_noprefix:
    cpulm_model_free(m);
    return NULL;
}

void cpulm_model_free(cpulm_model *m) {
    if (!m) return;
    cpulm_vocab_free(m->vocab);
    cpulm_model_free_names(m);
    cpulm_gguf_release(&m->gguf);
    cpulm_mmap_close(&m->map);
    for (int i = 0; i < m->n_owned_f32; i++)
        free(m->owned_f32[i]);
    free(m->owned_f32);
    for (int i = 0; i < m->n_owned_packed; i++)
        free(m->owned_packed[i]);
    free(m->owned_packed);
    free(m->layers);
    free(m->path);
    free(m->arch_name);
    free(m->name);
    free(m->ftype);
    free(m);
}
