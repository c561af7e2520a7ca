/* arch.c: the table of supported architectures and their tensors (see arch.h). */
#include "arch.h"

#include <stddef.h>
#include <string.h>

#include "model.h"

#define L(f)       (uint16_t) offsetof(cpulm_layer, f)
#define M(f)       (uint16_t) offsetof(struct cpulm_model, f)
#define VEC        CPULM_TK_VECTOR
#define MAT        CPULM_TK_MATRIX
#define F32A       CPULM_TK_F32
#define ALW        CPULM_WHEN_ALWAYS
#define ATT        CPULM_LAYERS_ATTN
#define REC        CPULM_LAYERS_RECR
#define D(a, b, c) {CPULM_DIM_##a, CPULM_DIM_##b, CPULM_DIM_##c}, CPULM_LAYERS_ALL
/* a tensor of only one kind of layer (hybrid models) */
#define DL(a, b, c, k) {CPULM_DIM_##a, CPULM_DIM_##b, CPULM_DIM_##c}, k

const cpulm_tensor_desc cpulm_arch_global_tensors[] = {
    {"token_embd.weight", M(tok_embd), MAT, CPULM_WHEN_ALWAYS, 0, D(EMBD, VOCAB, 1)},
    {"output_norm.weight", M(output_norm), VEC, CPULM_WHEN_ALWAYS, 0, D(EMBD, 1, 1)},
    {"output.weight", M(output), MAT, CPULM_WHEN_ALWAYS, 1, D(EMBD, VOCAB, 1)}, /* tied if absent */
    {"rope_freqs.weight", M(rope_freqs), VEC, CPULM_WHEN_ALWAYS, 1, D(ROT_HALF, 1, 1)},
    {NULL, 0, 0, 0, 0, {0}, 0},
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
#define END \
    { NULL, 0, 0, 0, 0, {0}, 0 }

/* Hybrid models (qwen35 family): a pre-attention and a post-attention norm in every layer
 * (the latter is the FFN's input norm); the full-attention layers project the query and
 * its output gate together (per head: head_dim query values, then head_dim gate values);
 * the recurrent layers carry the Gated DeltaNet tensors. */
#define HYBRID_NORMS                                                          \
    {"attn_norm.weight", L(attn_norm), VEC, ALW, 0, D(EMBD, 1, 1)}, {         \
        "post_attention_norm.weight", L(ffn_norm), VEC, ALW, 0, D(EMBD, 1, 1) \
    }
#define GATED_ATTN                                                             \
    {"attn_q.weight", L(wq), MAT, ALW, 0, DL(EMBD, Q2, 1, ATT)},               \
        {"attn_k.weight", L(wk), MAT, ALW, 0, DL(EMBD, KV, 1, ATT)},           \
        {"attn_v.weight", L(wv), MAT, ALW, 0, DL(EMBD, KV, 1, ATT)},           \
        {"attn_output.weight", L(wo), MAT, ALW, 0, DL(Q, EMBD, 1, ATT)},       \
        {"attn_q_norm.weight", L(q_norm), VEC, ALW, 0, DL(HEAD, 1, 1, ATT)}, { \
        "attn_k_norm.weight", L(k_norm), VEC, ALW, 0, DL(HEAD, 1, 1, ATT)      \
    }
#define DELTANET_COMMON                                                             \
    {"ssm_conv1d.weight", L(ssm_conv), F32A, ALW, 0, DL(SSM_CONV, SSM_CH, 1, REC)}, \
        {"ssm_dt.bias", L(ssm_dt), VEC, ALW, 0, DL(SSM_HEADS, 1, 1, REC)},          \
        {"ssm_a", L(ssm_a), VEC, ALW, 0, DL(SSM_HEADS, 1, 1, REC)},                 \
        {"ssm_norm.weight", L(ssm_norm), VEC, ALW, 0, DL(SSM_VHEAD, 1, 1, REC)}, {  \
        "ssm_out.weight", L(ssm_out), MAT, ALW, 0, DL(SSM_INNER, EMBD, 1, REC)      \
    }
/* qwen35: separate q/k/v and z projections, separate beta and alpha */
#define DELTANET_SPLIT                                                                \
    {"attn_qkv.weight", L(ssm_qkv), MAT, ALW, 0, DL(EMBD, SSM_CH, 1, REC)},           \
        {"attn_gate.weight", L(ssm_z), MAT, ALW, 0, DL(EMBD, SSM_INNER, 1, REC)},     \
        {"ssm_beta.weight", L(ssm_beta), MAT, ALW, 0, DL(EMBD, SSM_HEADS, 1, REC)}, { \
        "ssm_alpha.weight", L(ssm_alpha), MAT, ALW, 0, DL(EMBD, SSM_HEADS, 1, REC)    \
    }

/* the shared expert of qwen35moe / qwen3next: a dense SwiGLU FFN beside the routed experts,
 * its output scaled by sigmoid(ffn_gate_inp_shexp . x) */
#define FFN_SHEXP                                                                               \
    {"ffn_gate_inp_shexp.weight", L(gate_inp_shexp), VEC, CPULM_WHEN_MOE, 0, D(EMBD, 1, 1)},    \
        {"ffn_gate_shexp.weight", L(gate_shexp), MAT, CPULM_WHEN_MOE, 0, D(EMBD, FF_SHEXP, 1)}, \
        {"ffn_up_shexp.weight", L(up_shexp), MAT, CPULM_WHEN_MOE, 0, D(EMBD, FF_SHEXP, 1)}, {   \
        "ffn_down_shexp.weight", L(down_shexp), MAT, CPULM_WHEN_MOE, 0, D(FF_SHEXP, EMBD, 1)    \
    }

/* qwen3next: beta and alpha from one projection, grouped by key head: per key head, its
 * value heads' beta, then their alpha. Files of the older converter have one joint input
 * projection (ssm_in: q, k, v, z interleaved per key head) instead of attn_qkv + attn_gate:
 * either pair is accepted (model.c checks one is there). */
#define DELTANET_BA                                                               \
    {"attn_qkv.weight", L(ssm_qkv), MAT, ALW, 1, DL(EMBD, SSM_CH, 1, REC)},       \
        {"attn_gate.weight", L(ssm_z), MAT, ALW, 1, DL(EMBD, SSM_INNER, 1, REC)}, \
        {"ssm_in.weight", L(ssm_in), MAT, ALW, 1, DL(EMBD, SSM_QKVZ, 1, REC)}, {  \
        "ssm_ba.weight", L(ssm_ba), MAT, ALW, 0, DL(EMBD, SSM_HEADS2, 1, REC)     \
    }

/* Gemma 3: the attention's and the FFN's outputs are normed before their residual adds */
#define GEMMA_POST_NORMS                                                             \
    {"post_attention_norm.weight", L(attn_post_norm), VEC, ALW, 0, D(EMBD, 1, 1)}, { \
        "post_ffw_norm.weight", L(ffn_post_norm), VEC, ALW, 0, D(EMBD, 1, 1)         \
    }
/* gpt-oss: biases on every attention projection and on the router and experts, a learned
 * sink logit per query head, and a post-attention norm (the FFN's input norm, bound as
 * ffn_norm). The expert biases are [n_ff_exp or n_embd] x n_expert arrays. */
#define OAI_ATTN                                                              \
    {"attn_output.bias", L(bo), VEC, ALW, 0, D(EMBD, 1, 1)},                  \
        {"attn_sinks.weight", L(attn_sinks), VEC, ALW, 0, D(HEADS, 1, 1)}, {  \
        "post_attention_norm.weight", L(ffn_norm), VEC, ALW, 0, D(EMBD, 1, 1) \
    }
#define OAI_MOE_BIAS                                                                            \
    {"ffn_gate_inp.bias", L(gate_inp_b), VEC, CPULM_WHEN_MOE, 0, D(EXPERTS, 1, 1)},             \
        {"ffn_gate_exps.bias", L(gate_exps_b), F32A, CPULM_WHEN_MOE, 0, D(FF_EXP, EXPERTS, 1)}, \
        {"ffn_up_exps.bias", L(up_exps_b), F32A, CPULM_WHEN_MOE, 0, D(FF_EXP, EXPERTS, 1)}, {   \
        "ffn_down_exps.bias", L(down_exps_b), F32A, CPULM_WHEN_MOE, 0, D(EMBD, EXPERTS, 1)      \
    }

static const cpulm_tensor_desc llama_tensors[] = {ATTN, FFN_NORM, FFN_DENSE, FFN_MOE, END};
static const cpulm_tensor_desc qwen2_tensors[] = {ATTN, QKV_BIAS, FFN_NORM, FFN_DENSE, END};
static const cpulm_tensor_desc qwen3_tensors[] = {ATTN, QK_NORM, FFN_NORM, FFN_DENSE, END};
static const cpulm_tensor_desc qwen3moe_tensors[] = {ATTN, QK_NORM, FFN_NORM, FFN_MOE, END};
static const cpulm_tensor_desc qwen35moe_tensors[] = {
    HYBRID_NORMS, GATED_ATTN, DELTANET_SPLIT, DELTANET_COMMON, FFN_MOE, FFN_SHEXP, END};
static const cpulm_tensor_desc qwen3next_tensors[] = {
    HYBRID_NORMS, GATED_ATTN, DELTANET_BA, DELTANET_COMMON, FFN_MOE, FFN_SHEXP, END};
static const cpulm_tensor_desc gptoss_tensors[] = {ATTN,    QKV_BIAS,     OAI_ATTN,
                                                   FFN_MOE, OAI_MOE_BIAS, END};
static const cpulm_tensor_desc qwen35_tensors[] = {HYBRID_NORMS,    GATED_ATTN, DELTANET_SPLIT,
                                                   DELTANET_COMMON, FFN_DENSE,  END};

static const cpulm_tensor_desc gemma3_tensors[] = {ATTN,      QK_NORM,          FFN_NORM,
                                                   FFN_DENSE, GEMMA_POST_NORMS, END};

/* Gemma 4 (gemma4.c): the head size is the layer's own (sliding layers have theirs: the
 * loader and synth bind each layer with hparams whose head_dim is that layer's); k and its norm are
 * absent on layers that reuse an earlier layer's KV, v is optional everywhere (absent: the keys'
 * projection is the values'); the per-layer embedding tensors (PLE) and the output scale are
 * optional (gemma4_load.c checks which the file needs). */
static const cpulm_tensor_desc gemma4_tensors[] = {
    {"attn_norm.weight", L(attn_norm), VEC, ALW, 0, D(EMBD, 1, 1)},
    {"attn_q.weight", L(wq), MAT, ALW, 0, D(EMBD, Q, 1)},
    {"attn_k.weight", L(wk), MAT, ALW, 1, D(EMBD, KV, 1)},
    {"attn_v.weight", L(wv), MAT, ALW, 1, D(EMBD, KV, 1)},
    {"attn_output.weight", L(wo), MAT, ALW, 0, D(Q, EMBD, 1)},
    {"attn_q_norm.weight", L(q_norm), VEC, ALW, 0, D(HEAD, 1, 1)},
    {"attn_k_norm.weight", L(k_norm), VEC, ALW, 1, D(HEAD, 1, 1)},
    FFN_NORM,
    FFN_DENSE,
    GEMMA_POST_NORMS,
    {"layer_output_scale.weight", L(out_scale), VEC, ALW, 1, D(1, 1, 1)},
    {"inp_gate.weight", L(pl_gate), MAT, ALW, 1, D(EMBD, PL, 1)},
    {"proj.weight", L(pl_proj), MAT, ALW, 1, D(PL, EMBD, 1)},
    {"post_norm.weight", L(pl_post_norm), VEC, ALW, 1, D(EMBD, 1, 1)},
    END};
static const cpulm_tensor_desc gemma4_globals[] = {
    {"token_embd.weight", M(tok_embd), MAT, ALW, 0, D(EMBD, VOCAB, 1)},
    {"output_norm.weight", M(output_norm), VEC, ALW, 0, D(EMBD, 1, 1)},
    {"output.weight", M(output), MAT, ALW, 1, D(EMBD, VOCAB, 1)},
    {"rope_freqs.weight", M(rope_freqs), VEC, ALW, 1, D(ROT_HALF, 1, 1)},
    {"per_layer_token_embd.weight", M(pl_tok_embd), MAT, ALW, 1, D(PL_ALL, VOCAB, 1)},
    {"per_layer_model_proj.weight", M(pl_model_proj), MAT, ALW, 1, D(EMBD, PL_ALL, 1)},
    {"per_layer_proj_norm.weight", M(pl_proj_norm), VEC, ALW, 1, D(PL, 1, 1)},
    END};

/* Encoders (bert, nomic-bert: encoder.c). Query, key and value come either as three
 * projections (with optional biases) or as one fused attn_qkv (model.c checks one form is
 * there); every LayerNorm has a bias; the output projection's and FFN's biases are optional.
 * nomic-bert adds ffn_gate (a SwiGLU FFN) and has no absolute positions (rotary instead). */
#define ENC_ATTN                                                                 \
    {"attn_q.weight", L(wq), MAT, ALW, 1, D(EMBD, Q, 1)},                        \
        {"attn_k.weight", L(wk), MAT, ALW, 1, D(EMBD, KV, 1)},                   \
        {"attn_v.weight", L(wv), MAT, ALW, 1, D(EMBD, KV, 1)},                   \
        {"attn_q.bias", L(bq), VEC, ALW, 1, D(Q, 1, 1)},                         \
        {"attn_k.bias", L(bk), VEC, ALW, 1, D(KV, 1, 1)},                        \
        {"attn_v.bias", L(bv), VEC, ALW, 1, D(KV, 1, 1)},                        \
        {"attn_qkv.weight", L(wqkv), MAT, ALW, 1, D(EMBD, QKV, 1)},              \
        {"attn_qkv.bias", L(bqkv), VEC, ALW, 1, D(QKV, 1, 1)},                   \
        {"attn_output.weight", L(wo), MAT, ALW, 0, D(Q, EMBD, 1)},               \
        {"attn_output.bias", L(bo), VEC, ALW, 1, D(EMBD, 1, 1)},                 \
        {"attn_output_norm.weight", L(attn_norm), VEC, ALW, 0, D(EMBD, 1, 1)}, { \
        "attn_output_norm.bias", L(attn_norm_b), VEC, ALW, 0, D(EMBD, 1, 1)      \
    }
#define ENC_FFN                                                                  \
    {"ffn_up.weight", L(w_up), MAT, ALW, 0, D(EMBD, FF, 1)},                     \
        {"ffn_up.bias", L(b_up), VEC, ALW, 1, D(FF, 1, 1)},                      \
        {"ffn_down.weight", L(w_down), MAT, ALW, 0, D(FF, EMBD, 1)},             \
        {"ffn_down.bias", L(b_down), VEC, ALW, 1, D(EMBD, 1, 1)},                \
        {"layer_output_norm.weight", L(ffn_norm), VEC, ALW, 0, D(EMBD, 1, 1)}, { \
        "layer_output_norm.bias", L(ffn_norm_b), VEC, ALW, 0, D(EMBD, 1, 1)      \
    }
static const cpulm_tensor_desc bert_tensors[] = {ENC_ATTN, ENC_FFN, END};
static const cpulm_tensor_desc nomic_bert_tensors[] = {
    ENC_ATTN, ENC_FFN, {"ffn_gate.weight", L(w_gate), MAT, ALW, 0, D(EMBD, FF, 1)}, END};

/* The encoders' model-level tensors: token type rows (only type 0 is used, as llama.cpp
 * does), the embedding LayerNorm, and for bert absolute positions and the optional
 * classification head of rerankers (cls: [E] -> [E] then tanh, cls.output: [E] -> 1). The
 * position, type and head tensors are read element-wise (converted to F32 at load). */
#define ENC_GLOBALS                                                            \
    {"token_embd.weight", M(tok_embd), MAT, ALW, 0, D(EMBD, VOCAB, 1)},        \
        {"token_types.weight", M(type_embd), F32A, ALW, 1, D(EMBD, TYPES, 1)}, \
        {"token_embd_norm.weight", M(tok_norm), VEC, ALW, 0, D(EMBD, 1, 1)}, { \
        "token_embd_norm.bias", M(tok_norm_b), VEC, ALW, 0, D(EMBD, 1, 1)      \
    }
static const cpulm_tensor_desc bert_globals[] = {
    ENC_GLOBALS,
    {"position_embd.weight", M(pos_embd), F32A, ALW, 0, D(EMBD, CTX_TRAIN, 1)},
    {"cls.weight", M(cls), F32A, ALW, 1, D(EMBD, EMBD, 1)},
    {"cls.bias", M(cls_b), VEC, ALW, 1, D(EMBD, 1, 1)},
    {"cls.output.weight", M(cls_out), F32A, ALW, 1, D(EMBD, 1, 1)},
    {"cls.output.bias", M(cls_out_b), VEC, ALW, 1, D(1, 1, 1)},
    END};
static const cpulm_tensor_desc nomic_bert_globals[] = {ENC_GLOBALS, END};

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
    {.name = "qwen35",
     .rope = CPULM_ROPE_NEOX,
     .ffn = CPULM_FFN_DENSE_ONLY,
     .default_rope_base = 10000000.0f,
     .default_norm_eps = 1e-6f,
     .hybrid = true,
     .mrope = true,
     .imrope = true,
     .layer_tensors = qwen35_tensors},
    {.name = "qwen35moe",
     .rope = CPULM_ROPE_NEOX,
     .ffn = CPULM_FFN_MOE_ONLY,
     .moe_norm_weights = true,
     .default_rope_base = 10000000.0f,
     .default_norm_eps = 1e-6f,
     .hybrid = true,
     .mrope = true,
     .imrope = true,
     .layer_tensors = qwen35moe_tensors},
    {.name = "qwen3next",
     .rope = CPULM_ROPE_NEOX,
     .ffn = CPULM_FFN_MOE_ONLY,
     .moe_norm_weights = true,
     .default_rope_base = 10000000.0f,
     .default_norm_eps = 1e-6f,
     .hybrid = true,
     .dnet_head_div = true,
     .layer_tensors = qwen3next_tensors},
    {.name = "gemma3",
     .rope = CPULM_ROPE_NEOX,
     .qk_norm = true,
     .ffn = CPULM_FFN_DENSE_ONLY,
     .default_rope_base = 1000000.0f,
     .default_norm_eps = 1e-6f,
     .gemma = true,
     .swa_pattern = 6,
     .swa_optional = true,
     .layer_tensors = gemma3_tensors},
    {.name = "gemma4",
     .rope = CPULM_ROPE_NEOX,
     .qk_norm = true,
     .ffn = CPULM_FFN_DENSE_ONLY,
     .default_rope_base = 1000000.0f,
     .default_norm_eps = 1e-6f,
     .gemma4 = true,
     .swa_pattern = 6,
     .layer_tensors = gemma4_tensors,
     .global_tensors = gemma4_globals},
    {.name = "gpt-oss",
     .rope = CPULM_ROPE_NEOX,
     .qkv_bias = true,
     .ffn = CPULM_FFN_MOE_ONLY,
     .default_rope_base = 10000.0f,
     .default_norm_eps = 1e-5f,
     .swa_pattern = 2,
     .gating = CPULM_GATING_SOFTMAX_WEIGHT,
     .expert_act = CPULM_ACT_SWIGLU_OAI,
     .layer_tensors = gptoss_tensors},
    {.name = "bert",
     .ffn = CPULM_FFN_DENSE_ONLY,
     .default_rope_base = 10000.0f,
     .default_norm_eps = 1e-12f,
     .encoder = true,
     .layer_tensors = bert_tensors,
     .global_tensors = bert_globals},
    {.name = "nomic-bert",
     .rope = CPULM_ROPE_NEOX,
     .ffn = CPULM_FFN_DENSE_ONLY,
     .default_rope_base = 10000.0f,
     .default_norm_eps = 1e-12f,
     .encoder = true,
     .layer_tensors = nomic_bert_tensors,
     .global_tensors = nomic_bert_globals},
};

const cpulm_tensor_desc *cpulm_arch_globals(const cpulm_arch_desc *a) {
    return a->global_tensors ? a->global_tensors : cpulm_arch_global_tensors;
}

int64_t cpulm_arch_dim(const cpulm_hparams *hp, cpulm_dim dim) {
    const int64_t heads = hp->n_head, kv_heads = hp->n_head_kv, head_dim = hp->head_dim;
    const int64_t groups = hp->ssm_groups, state = hp->ssm_state, inner = hp->ssm_inner;
    switch (dim) {
    case CPULM_DIM_1: return 1;
    case CPULM_DIM_EMBD: return hp->n_embd;
    case CPULM_DIM_VOCAB: return hp->n_vocab;
    case CPULM_DIM_Q: return heads * head_dim;
    case CPULM_DIM_KV: return kv_heads * head_dim;
    case CPULM_DIM_HEAD: return head_dim;
    case CPULM_DIM_ROT_HALF: return hp->n_rot / 2;
    case CPULM_DIM_FF: return hp->n_ff;
    case CPULM_DIM_FF_EXP: return hp->n_ff_exp;
    case CPULM_DIM_EXPERTS: return hp->n_expert;
    case CPULM_DIM_Q2: return 2 * heads * head_dim;
    case CPULM_DIM_SSM_CONV: return hp->ssm_conv;
    case CPULM_DIM_SSM_CH: return 2 * groups * state + inner;
    case CPULM_DIM_SSM_INNER: return inner;
    case CPULM_DIM_SSM_HEADS: return hp->ssm_heads;
    case CPULM_DIM_SSM_HEADS2: return 2 * (int64_t)hp->ssm_heads;
    case CPULM_DIM_SSM_VHEAD: return hp->ssm_heads ? inner / hp->ssm_heads : 0;
    case CPULM_DIM_SSM_QKVZ: return 2 * groups * state + 2 * inner;
    case CPULM_DIM_FF_SHEXP: return hp->n_ff_shexp;
    case CPULM_DIM_HEADS: return heads;
    case CPULM_DIM_CTX_TRAIN: return hp->n_ctx_train;
    case CPULM_DIM_TYPES: return hp->n_types;
    case CPULM_DIM_QKV: return (heads + 2 * kv_heads) * head_dim;
    case CPULM_DIM_PL: return hp->n_pl;
    case CPULM_DIM_PL_ALL: return (int64_t)hp->n_pl * hp->n_layer;
    }
    return 1;
}

bool cpulm_arch_tensor_present(const cpulm_tensor_desc *t, int64_t n_expert, bool recurrent) {
    if (t->layers == CPULM_LAYERS_ATTN && recurrent) return false;
    if (t->layers == CPULM_LAYERS_RECR && !recurrent) return false;
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
    return "llama (dense and Mixtral-style MoE), qwen2, qwen3, qwen3moe, qwen35, qwen35moe, "
           "qwen3next, gemma3, gemma4 (dense), gpt-oss, bert and nomic-bert (encoders: embeddings "
           "and rank scores)";
}
