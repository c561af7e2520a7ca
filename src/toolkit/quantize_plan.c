/* quantize_plan.c: per-tensor type choice for quantization presets (llama.cpp's rules; the
 * list is in quantize_plan.h). Knows names, shapes and hyper-parameters only; never touches
 * tensor data or files beyond reading metadata from an already parsed GGUF. */
#include "quantize_plan.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

/* llama.cpp's llama_ftype values (include/llama.h), the numbers general.file_type holds. */
enum {
    FT_ALL_F32 = 0,
    FT_F16 = 1,
    FT_Q4_0 = 2,
    FT_Q4_1 = 3,
    FT_Q8_0 = 7,
    FT_Q5_0 = 8,
    FT_Q5_1 = 9,
    FT_Q4_K_S = 14,
    FT_Q4_K_M = 15,
    FT_Q5_K_S = 16,
    FT_Q5_K_M = 17,
    FT_Q6_K = 18,
    FT_BF16 = 32,
    FT_MXFP4_MOE = 38,
};

/* Q2_K / Q3_K / IQ presets are absent: there is no reference quantizer for them here. */
static const cpulm_qplan_preset presets[] = {
    {"Q4_0", FT_Q4_0, CPULM_DTYPE_Q4_0, "4.5 bits/weight, legacy"},
    {"Q4_1", FT_Q4_1, CPULM_DTYPE_Q4_1, "5.0 bits/weight, legacy"},
    {"Q5_0", FT_Q5_0, CPULM_DTYPE_Q5_0, "5.5 bits/weight, legacy"},
    {"Q5_1", FT_Q5_1, CPULM_DTYPE_Q5_1, "6.0 bits/weight, legacy"},
    {"Q8_0", FT_Q8_0, CPULM_DTYPE_Q8_0, "8.5 bits/weight, near-lossless"},
    {"Q4_K_S", FT_Q4_K_S, CPULM_DTYPE_Q4_K,
     "Q4_K; Q5_K for the first 4 attn_v and first 1/8 of ffn_down"},
    {"Q4_K_M", FT_Q4_K_M, CPULM_DTYPE_Q4_K,
     "Q4_K, half of attn_v/ffn_down in Q6_K (the usual pick)"},
    {"Q5_K_S", FT_Q5_K_S, CPULM_DTYPE_Q5_K, "Q5_K"},
    {"Q5_K_M", FT_Q5_K_M, CPULM_DTYPE_Q5_K, "Q5_K, half of attn_v/ffn_down in Q6_K"},
    {"Q6_K", FT_Q6_K, CPULM_DTYPE_Q6_K, "6.6 bits/weight"},
    {"MXFP4_MOE", FT_MXFP4_MOE, CPULM_DTYPE_MXFP4,
     "MXFP4 experts (3-D expert tensors), Q8_0 everything else (gpt-oss style)"},
    {"F16", FT_F16, CPULM_DTYPE_F16, "16-bit float"},
    {"BF16", FT_BF16, CPULM_DTYPE_BF16, "bfloat16"},
    {"F32", FT_ALL_F32, CPULM_DTYPE_F32, "32-bit float (no quantization)"},
};
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

static bool eq_nocase(const char *a, const char *b) {
    while (*a && *b && tolower((unsigned char)*a) == tolower((unsigned char)*b))
        a++, b++;
    return *a == 0 && *b == 0;
}

const cpulm_qplan_preset *cpulm_qplan_preset_find(const char *name) {
    if (!name || !*name) return NULL;
    if (eq_nocase(name, "Q4_K")) name = "Q4_K_M"; /* llama-quantize's aliases */
    if (eq_nocase(name, "Q5_K")) name = "Q5_K_M";
    char *end;
    long num = strtol(name, &end, 10);
    bool numeric = isdigit((unsigned char)name[0]) && *end == 0;
    for (int i = 0; i < N_PRESETS; i++)
        if (numeric ? (long)presets[i].ftype == num : eq_nocase(name, presets[i].name))
            return &presets[i];
    return NULL;
}

const cpulm_qplan_preset *cpulm_qplan_preset_at(int i) {
    return i >= 0 && i < N_PRESETS ? &presets[i] : NULL;
}

cpulm_qplan_params cpulm_qplan_default_params(const cpulm_qplan_preset *preset) {
    return (cpulm_qplan_params){.preset = preset,
                                .pure = false,
                                .keep_output = false,
                                .output_type = -1,
                                .token_embd_type = -1};
}

bool cpulm_qplan_use_more_bits(int32_t i_layer, int32_t n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 ||
           (i_layer - n_layers / 8) % 3 == 2;
}

static bool has(const char *s, const char *sub) {
    return strstr(s, sub) != NULL;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

bool cpulm_qplan_is_quantizable(const char *name, int32_t n_dims) {
    static const char *const never[] = {"_norm.weight",
                                        "ffn_gate_inp.weight",
                                        "altup",
                                        "laurel",
                                        "per_layer_model_proj",
                                        "ssm_conv1d.weight",
                                        "shortconv.conv.weight",
                                        "time_mix_",
                                        "attn_rel_b.weight"};
    if (!ends_with(name, "weight") || n_dims < 2) return false;
    if (!strcmp(name, "position_embd.weight") || !strcmp(name, "token_types.weight")) return false;
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (has(name, never[i])) return false;
    return true;
}

/* ---- ordering: llama.cpp's loader sorts by layer number ("blk.N."), then by name ---- */

static int layer_of(const char *name) {
    if (strncmp(name, "blk.", 4) != 0) return -1;
    char *end;
    long v = strtol(name + 4, &end, 10);
    return end == name + 4 || v < 0 || v > 1000000 ? -1 : (int)v;
}

typedef struct sort_key {
    int layer;
    const char *name;
    int64_t src;
} sort_key;

static int cmp_key(const void *pa, const void *pb) {
    const sort_key *a = pa, *b = pb;
    if (a->layer != b->layer) return a->layer < b->layer ? -1 : 1;
    return strcmp(a->name, b->name);
}

static cpulm_status sort_tensors(const cpulm_qplan_tensor *t, int64_t n, cpulm_qplan_entry *out,
                                 cpulm_error *err) {
    sort_key *k = malloc(sizeof *k * (size_t)(n ? n : 1));
    if (!k) return cpulm_errf(err, CPULM_ERR_NOMEM, "quantize plan: out of memory");
    for (int64_t i = 0; i < n; i++)
        k[i] = (sort_key){layer_of(t[i].name), t[i].name, i};
    qsort(k, (size_t)n, sizeof *k, cmp_key);
    for (int64_t i = 0; i < n; i++)
        out[i] = (cpulm_qplan_entry){.src = k[i].src};
    free(k);
    return CPULM_OK;
}

/* ---- the rules ---- */

typedef struct qstate {
    const cpulm_qplan_params *p;
    const cpulm_qplan_model *m;
    uint32_t ft;
    bool falcon, is_70b, has_output;
    int32_t n_wv, i_wv, i_down, i_gate, i_up;
} qstate;

/* Layer index for the ffn counters: the running count, or the name's for MoE files (their
 * expert tensors are not one per layer in order). */
static cpulm_status layer_info(const qstate *q, int32_t counter, const char *name, int32_t *out,
                               cpulm_error *err) {
    *out = counter;
    if (q->m->n_expert <= 1) return CPULM_OK;
    int l = layer_of(name);
    if (l < 0 || l >= q->m->n_layer)
        return cpulm_errf(err, CPULM_ERR_FORMAT, "tensor '%s': cannot tell its layer (of %d)", name,
                          q->m->n_layer);
    *out = l;
    return CPULM_OK;
}

static cpulm_dtype output_rule(const qstate *q, const cpulm_qplan_tensor *t, cpulm_dtype ty) {
    if (q->p->output_type >= 0) return (cpulm_dtype)q->p->output_type;
    if (q->ft == FT_MXFP4_MOE) return CPULM_DTYPE_Q8_0;
    const cpulm_dtype_traits *tr = cpulm_dtype_traits_get(ty);
    if (q->falcon || t->ne[0] % tr->block != 0) return CPULM_DTYPE_Q8_0;
    return ty == CPULM_DTYPE_Q8_0 ? ty : CPULM_DTYPE_Q6_K;
}

static cpulm_dtype attn_v_rule(qstate *q, cpulm_dtype ty) {
    uint32_t ft = q->ft;
    if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && cpulm_qplan_use_more_bits(q->i_wv, q->n_wv))
        ty = CPULM_DTYPE_Q6_K;
    else if (ft == FT_Q4_K_S && q->i_wv < 4)
        ty = CPULM_DTYPE_Q5_K;
    /* 70B llamas share one attn_v among 8 heads: the tensor is small, so more bits are cheap */
    if (q->is_70b && (ty == CPULM_DTYPE_Q3_K || ty == CPULM_DTYPE_Q4_K)) ty = CPULM_DTYPE_Q5_K;
    if (q->m->n_expert == 8) ty = CPULM_DTYPE_Q8_0;
    q->i_wv++;
    return ty;
}

static cpulm_dtype ffn_down_rule(const qstate *q, int32_t i, cpulm_dtype ty) {
    int32_t n = q->m->n_layer;
    if (q->ft == FT_Q4_K_M) {
        if (q->falcon)
            ty = i < n / 16                        ? CPULM_DTYPE_Q6_K
                 : cpulm_qplan_use_more_bits(i, n) ? CPULM_DTYPE_Q5_K
                                                   : CPULM_DTYPE_Q4_K;
        else if (cpulm_qplan_use_more_bits(i, n))
            ty = CPULM_DTYPE_Q6_K;
    } else if (q->ft == FT_Q5_K_M && cpulm_qplan_use_more_bits(i, n)) {
        ty = CPULM_DTYPE_Q6_K;
    } else if (q->ft == FT_Q4_K_S && !q->falcon && i < n / 8) {
        ty = CPULM_DTYPE_Q5_K;
    }
    return ty;
}

static cpulm_dtype attn_output_rule(const qstate *q, cpulm_dtype ty) {
    if (!q->falcon && q->m->n_expert == 8 && (q->ft == FT_Q4_K_S || q->ft == FT_Q4_K_M))
        ty = CPULM_DTYPE_Q5_K;
    return ty;
}

static cpulm_dtype attn_qkv_rule(const qstate *q, cpulm_dtype ty) {
    if (q->ft == FT_Q4_K_M) return CPULM_DTYPE_Q5_K;
    if (q->ft == FT_Q5_K_M) return CPULM_DTYPE_Q6_K;
    return ty;
}

/* llama_tensor_get_type's name dispatch, in its order (the first matching branch wins). */
static cpulm_status rule_type(qstate *q, const cpulm_qplan_tensor *t, cpulm_dtype *ty,
                              cpulm_error *err) {
    const char *name = t->name;
    int32_t i_layer;
    cpulm_status st = CPULM_OK;
    if (!strcmp(name, "output.weight") || (!q->has_output && !strcmp(name, "token_embd.weight"))) {
        *ty = output_rule(q, t, *ty);
    } else if (q->ft == FT_MXFP4_MOE) { /* expert stacks MXFP4, every other matrix Q8_0 */
        *ty = t->n_dims >= 3 && t->ne[2] > 1 ? CPULM_DTYPE_MXFP4 : CPULM_DTYPE_Q8_0;
    } else if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight")) {
        if (q->p->token_embd_type >= 0) *ty = (cpulm_dtype)q->p->token_embd_type;
    } else if (has(name, "attn_v.weight")) {
        *ty = attn_v_rule(q, *ty);
    } else if (has(name, "attn_k.weight")) {
        if (q->m->n_expert == 8) *ty = CPULM_DTYPE_Q8_0;
    } else if (has(name, "attn_q.weight")) {
        /* only IQ3 presets change attn_q */
    } else if (has(name, "ffn_down")) {
        st = layer_info(q, q->i_down, name, &i_layer, err);
        if (st == CPULM_OK) *ty = ffn_down_rule(q, i_layer, *ty);
        q->i_down++;
    } else if (has(name, "attn_output.weight")) {
        *ty = attn_output_rule(q, *ty);
    } else if (has(name, "attn_qkv.weight")) {
        *ty = attn_qkv_rule(q, *ty);
    } else if (has(name, "ffn_gate")) {
        st = layer_info(q, q->i_gate++, name, &i_layer, err);
    } else if (has(name, "ffn_up")) {
        st = layer_info(q, q->i_up++, name, &i_layer, err);
    }
    return st;
}

/* A row must hold whole blocks: step down the way llama.cpp does, then to F16. */
static cpulm_status fit_row(const cpulm_qplan_tensor *t, cpulm_dtype *ty, cpulm_error *err) {
    int64_t nx = t->ne[0];
    if (nx % cpulm_dtype_traits_get(*ty)->block == 0) return CPULM_OK;
    cpulm_dtype f;
    switch (*ty) {
    case CPULM_DTYPE_Q4_K: f = CPULM_DTYPE_Q5_0; break;
    case CPULM_DTYPE_Q5_K: f = CPULM_DTYPE_Q5_1; break;
    case CPULM_DTYPE_Q6_K: f = CPULM_DTYPE_Q8_0; break;
    default:
        return cpulm_errf(err, CPULM_ERR_UNSUPPORTED,
                          "tensor '%s': rows of %lld values do not split into %s blocks of %d",
                          t->name, (long long)nx, cpulm_dtype_name(*ty),
                          cpulm_dtype_traits_get(*ty)->block);
    }
    *ty = nx % cpulm_dtype_traits_get(f)->block == 0 ? f : CPULM_DTYPE_F16;
    return CPULM_OK;
}

static cpulm_status check_fits(const cpulm_qplan_tensor *t, cpulm_dtype ty, cpulm_error *err) {
    const cpulm_dtype_traits *tr = cpulm_dtype_traits_get(ty);
    if (!tr || !cpulm_quantize_supported(ty))
        return cpulm_errf(err, CPULM_ERR_UNSUPPORTED, "tensor '%s': cannot quantize to %s", t->name,
                          cpulm_dtype_name(ty));
    if (t->ne[0] % tr->block != 0)
        return cpulm_errf(err, CPULM_ERR_UNSUPPORTED,
                          "tensor '%s': rows of %lld values do not split into %s blocks of %d",
                          t->name, (long long)t->ne[0], tr->name, tr->block);
    return CPULM_OK;
}

static cpulm_status plan_one(qstate *q, const cpulm_qplan_tensor *t, cpulm_qplan_entry *e,
                             cpulm_error *err) {
    const cpulm_qplan_params *p = q->p;
    e->type = e->wanted = t->type;
    e->convert = false;
    if (!cpulm_qplan_is_quantizable(t->name, t->n_dims)) return CPULM_OK;
    if (p->keep_output && !strcmp(t->name, "output.weight")) return CPULM_OK;
    cpulm_dtype ty = p->preset->base;
    const cpulm_dtype_traits *base = cpulm_dtype_traits_get(ty);
    cpulm_status st = CPULM_OK;
    if (!p->pure && base->quantized) {
        st = rule_type(q, t, &ty, err);
        e->wanted = ty;
        if (st == CPULM_OK) st = fit_row(t, &ty, err);
    }
    if (p->token_embd_type >= 0 && !strcmp(t->name, "token_embd.weight"))
        ty = (cpulm_dtype)p->token_embd_type;
    if (p->output_type >= 0 && !strcmp(t->name, "output.weight")) ty = (cpulm_dtype)p->output_type;
    if (st == CPULM_OK) st = check_fits(t, ty, err);
    if (p->pure || !base->quantized) e->wanted = ty;
    e->type = ty;
    e->convert = ty != (cpulm_dtype)t->type;
    return st;
}

static void count_model(qstate *q, const cpulm_qplan_tensor *t, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const char *name = t[i].name;
        if (has(name, "attn_v.weight") || has(name, "attn_qkv.weight") ||
            has(name, "attn_kv_b.weight"))
            q->n_wv++;
        else if (!strcmp(name, "output.weight"))
            q->has_output = true;
    }
}

static bool is_70b(const cpulm_qplan_model *m) {
    if (m->n_layer != 80) return false;
    if (!strcmp(m->arch, "llama")) return m->n_expert != 8 && m->n_head != m->n_head_kv;
    return !strcmp(m->arch, "qwen2") || !strcmp(m->arch, "deci") || !strcmp(m->arch, "olmoe");
}

cpulm_status cpulm_qplan_build(const cpulm_qplan_params *p, const cpulm_qplan_model *m,
                               const cpulm_qplan_tensor *t, int64_t n, cpulm_qplan_entry *out,
                               cpulm_error *err) {
    if (!p || !p->preset || !m || (n && (!t || !out)) || n < 0)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "quantize plan: bad arguments");
    cpulm_status st = sort_tensors(t, n, out, err);
    if (st != CPULM_OK) return st;
    qstate q = {.p = p,
                .m = m,
                .ft = p->preset->ftype,
                .falcon = !strcmp(m->arch, "falcon"),
                .is_70b = is_70b(m)};
    count_model(&q, t, n);
    for (int64_t i = 0; i < n; i++) {
        st = plan_one(&q, &t[out[i].src], &out[i], err);
        if (st != CPULM_OK) return st;
    }
    return CPULM_OK;
}

static int32_t get_i32(const cpulm_gguf *g, const char *arch, const char *suffix) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v = 0;
    if (cpulm_gguf_get_i64(g, key, &v, NULL) != CPULM_OK || v < 0 || v > INT32_MAX) return 0;
    return (int32_t)v;
}

cpulm_status cpulm_qplan_model_from_gguf(const cpulm_gguf *g, cpulm_qplan_model *m,
                                         cpulm_error *err) {
    memset(m, 0, sizeof *m);
    cpulm_str a;
    if (cpulm_gguf_get_str(g, "general.architecture", &a, NULL) != CPULM_OK)
        return cpulm_errf(err, CPULM_ERR_FORMAT, "general.architecture is missing");
    if (a.len == 0 || a.len >= sizeof m->arch || memchr(a.ptr, 0, a.len))
        return cpulm_errf(err, CPULM_ERR_FORMAT, "general.architecture is not a short name");
    memcpy(m->arch, a.ptr, a.len);
    m->n_layer = get_i32(g, m->arch, "block_count");
    m->n_head = get_i32(g, m->arch, "attention.head_count");
    m->n_head_kv = get_i32(g, m->arch, "attention.head_count_kv");
    if (!m->n_head_kv) m->n_head_kv = m->n_head; /* llama.cpp's default */
    m->n_expert = get_i32(g, m->arch, "expert_count");
    return CPULM_OK;
}
