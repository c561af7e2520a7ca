/* arch.c: the table of supported architectures and their tensors (see arch.h). */
#include "arch.h"

#include <stddef.h>
#include <string.h>

#include "model.h"

#define L(f) (uint16_t) offsetof(cpulm_layer, f)
#define M(f) (uint16_t) offsetof(struct cpulm_model, f)
#define VEC  CPULM_TK_VECTOR
#define MAT  CPULM_TK_MATRIX
#define D(a, b, c) \
    { CPULM_DIM_##a, CPULM_DIM_##b, CPULM_DIM_##c }

const cpulm_tensor_desc cpulm_arch_global_tensors[] = {
    {"token_embd.weight", M(tok_embd), MAT, CPULM_WHEN_ALWAYS, 0, D(EMBD, VOCAB, 1)},
    {"output_norm.weight", M(output_norm), VEC, CPULM_WHEN_ALWAYS, 0, D(EMBD, 1, 1)},
    {"output.weight", M(output), MAT, CPULM_WHEN_ALWAYS, 1, D(EMBD, VOCAB, 1)}, /* tied if absent */
    {"rope_freqs.weight", M(rope_freqs), VEC, CPULM_WHEN_ALWAYS, 1, D(ROT_HALF, 1, 1)},
    {NULL, 0, 0, 0, 0, {0}},
};

/* The pieces layers are made of; an architecture's list is their concatenation. */
#define ATTN                                                                      \
    {"attn_norm.weight", L(attn_norm), VEC, CPULM_WHEN_ALWAYS, 0, D(EMBD, 1, 1)}, \
        {"attn_q.weight", L(wq), MAT, CPULM_WHEN_ALWAYS, 0, D(EMBD, Q, 1)},       \
        {"attn_k.weight", L(wk), MAT, CPULM_WHEN_ALWAYS, 0, D(EMBD, KV, 1)},      \
        {"attn_v.weight", L(wv), MAT, CPULM_WHEN_ALWAYS, 0, D(EMBD, KV, 1)}, {    \
        "attn_output.weight", L(wo), MAT, CPULM_WHEN_ALWAYS, 0, D(Q, EMBD, 1)     \
    }
#define QKV_BIAS                                                          \
    {"attn_q.bias", L(bq), VEC, CPULM_WHEN_ALWAYS, 0, D(Q, 1, 1)},        \
        {"attn_k.bias", L(bk), VEC, CPULM_WHEN_ALWAYS, 0, D(KV, 1, 1)}, { \
        "attn_v.bias", L(bv), VEC, CPULM_WHEN_ALWAYS, 0, D(KV, 1, 1)      \
    }
#define QK_NORM                                                                    \
    {"attn_q_norm.weight", L(q_norm), VEC, CPULM_WHEN_ALWAYS, 0, D(HEAD, 1, 1)}, { \
        "attn_k_norm.weight", L(k_norm), VEC, CPULM_WHEN_ALWAYS, 0, D(HEAD, 1, 1)  \
    }
#define FFN_NORM \
    { "ffn_norm.weight", L(ffn_norm), VEC, CPULM_WHEN_ALWAYS, 0, D(EMBD, 1, 1) }
#define FFN_DENSE                                                               \
    {"ffn_gate.weight", L(w_gate), MAT, CPULM_WHEN_DENSE, 0, D(EMBD, FF, 1)},   \
        {"ffn_up.weight", L(w_up), MAT, CPULM_WHEN_DENSE, 0, D(EMBD, FF, 1)}, { \
        "ffn_down.weight", L(w_down), MAT, CPULM_WHEN_DENSE, 0, D(FF, EMBD, 1)  \
    }
#define FFN_MOE                                                                                   \
    {"ffn_gate_inp.weight", L(gate_inp), MAT, CPULM_WHEN_MOE, 0, D(EMBD, EXPERTS, 1)},            \
        {"ffn_gate_exps.weight", L(gate_exps), MAT, CPULM_WHEN_MOE, 0, D(EMBD, FF_EXP, EXPERTS)}, \
        {"ffn_up_exps.weight", L(up_exps), MAT, CPULM_WHEN_MOE, 0, D(EMBD, FF_EXP, EXPERTS)}, {   \
        "ffn_down_exps.weight", L(down_exps), MAT, CPULM_WHEN_MOE, 0, D(FF_EXP, EMBD, EXPERTS)    \
    }
#define END                 \
    {                       \
        NULL, 0, 0, 0, 0, { \
            0               \
        }                   \
    }

static const cpulm_tensor_desc llama_tensors[] = {ATTN, FFN_NORM, FFN_DENSE, FFN_MOE, END};
static const cpulm_tensor_desc qwen2_tensors[] = {ATTN, QKV_BIAS, FFN_NORM, FFN_DENSE, END};
static const cpulm_tensor_desc qwen3_tensors[] = {ATTN, QK_NORM, FFN_NORM, FFN_DENSE, END};
static const cpulm_tensor_desc qwen3moe_tensors[] = {ATTN, QK_NORM, FFN_NORM, FFN_MOE, END};

static const cpulm_arch_desc archs[] = {
    {.name = "llama",
     .rope = CPULM_ROPE_NORM,
     .ffn = CPULM_FFN_DENSE_OR_MOE,
     .moe_norm_weights = true,
     .default_rope_base = 10000.0f,
     .default_norm_eps = 1e-5f,
     .layer_tensors = llama_tensors},
    {.name = "qwen2",
     .rope = CPULM_ROPE_NEOX,
     .qkv_bias = true,
     .ffn = CPULM_FFN_DENSE_ONLY,
     .default_rope_base = 10000.0f,
     .default_norm_eps = 1e-6f,
     .layer_tensors = qwen2_tensors},
    {.name = "qwen3",
     .rope = CPULM_ROPE_NEOX,
     .qk_norm = true,
     .ffn = CPULM_FFN_DENSE_ONLY,
     .default_rope_base = 1000000.0f,
     .default_norm_eps = 1e-6f,
     .layer_tensors = qwen3_tensors},
    {.name = "qwen3moe",
     .rope = CPULM_ROPE_NEOX,
     .qk_norm = true,
     .ffn = CPULM_FFN_MOE_ONLY,
     .moe_norm_weights = true,
     .default_rope_base = 1000000.0f,
     .default_norm_eps = 1e-6f,
     .layer_tensors = qwen3moe_tensors},
};

int64_t cpulm_arch_dim(const cpulm_arch_dims *d, cpulm_dim dim) {
    switch (dim) {
    case CPULM_DIM_1: return 1;
    case CPULM_DIM_EMBD: return d->n_embd;
    case CPULM_DIM_VOCAB: return d->n_vocab;
    case CPULM_DIM_Q: return d->n_head * d->head_dim;
    case CPULM_DIM_KV: return d->n_head_kv * d->head_dim;
    case CPULM_DIM_HEAD: return d->head_dim;
    case CPULM_DIM_ROT_HALF: return d->n_rot / 2;
    case CPULM_DIM_FF: return d->n_ff;
    case CPULM_DIM_FF_EXP: return d->n_ff_exp;
    case CPULM_DIM_EXPERTS: return d->n_expert;
    }
    return 1;
}

bool cpulm_arch_tensor_present(const cpulm_tensor_desc *t, int64_t n_expert) {
    if (t->when == CPULM_WHEN_DENSE) return n_expert == 0;
    if (t->when == CPULM_WHEN_MOE) return n_expert > 0;
    return true;
}

const cpulm_arch_desc *cpulm_arch_find(const char *name, unsigned long len) {
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (strlen(archs[i].name) == len && memcmp(archs[i].name, name, len) == 0) return &archs[i];
    return NULL;
}

const char *cpulm_arch_supported(void) {
    return "llama (dense and Mixtral-style MoE), qwen2, qwen3, qwen3moe";
}
