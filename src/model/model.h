/* model.h: hyperparameters and tensor views of a loaded model.
 *
 * Memory-order convention (ggml's): a 2-D weight with ne = [n_in, n_out] is n_out rows of
 * n_in contiguous elements; y = W x computes y[r] = dot(row r, x). Tensors are views into
 * the read-only file mapping; only small 1-D tensors stored in another type than F32 are
 * converted into model-owned F32 copies at load. The model is immutable after load.
 */
#ifndef CPULM_MODEL_MODEL_H
#define CPULM_MODEL_MODEL_H

#include <stdint.h>

#include "rope.h"
#include "../base/mmap.h"
#include "../format/gguf.h"
#include "../format/quant.h"
#include "arch.h"
#include "cpulm.h"

typedef struct cpulm_vocab cpulm_vocab;

/* A 2-D weight, or a stack of ne[2] equal 2-D weights (one per expert, 3-D in the file):
 * expert e's matrix starts expert_bytes * e into data. */
typedef struct cpulm_tensor {
    const void *data; /* NULL when the tensor is absent (optional tensors) */
    cpulm_dtype type;
    int64_t ne[3]; /* ne[0] = row length (contiguous), ne[1] = rows, ne[2] = experts (1) */
    uint64_t row_bytes;
    uint64_t expert_bytes; /* row_bytes * ne[1] */
    int packed; /* 0: row-major; else 1 + the CPULM_X16_* layout of its 16-row groups (repack.h,
                 * kernels.h); the data is then model-owned */
    const float *mins; /* Q4_1 / Q5_1 widened to Q8_0 (repack.c): each block's min, per 16-row
                        * group [block][16 rows] (cpulm_matmul_args.mins); else NULL */
} cpulm_tensor;

/* Expert e's 2-D matrix of a 3-D tensor (e = 0 of a 2-D one is itself). */
static inline cpulm_tensor cpulm_tensor_expert(const cpulm_tensor *t, int64_t e) {
    cpulm_tensor v = *t;
    v.data = (const uint8_t *)t->data + t->expert_bytes * (uint64_t)e;
    if (t->mins) v.mins = t->mins + (size_t)e * (size_t)t->ne[1] * (size_t)(t->ne[0] / 32);
    v.ne[2] = 1;
    return v;
}

typedef struct cpulm_layer {
    const float *attn_norm;       /* [n_embd] */
    cpulm_tensor wq;              /* [n_embd] -> [n_head * head_dim] */
    cpulm_tensor wk;              /* [n_embd] -> [n_head_kv * head_dim] */
    cpulm_tensor wv;              /* [n_embd] -> [n_head_kv * head_dim] */
    cpulm_tensor wo;              /* [n_head * head_dim] -> [n_embd] */
    const float *bq, *bk, *bv;    /* NULL unless the architecture has qkv biases */
    const float *bo;              /* [n_embd] output projection bias (gpt-oss), or NULL */
    const float *attn_sinks;      /* [n_head] sink logits (gpt-oss), or NULL */
    const float *q_norm, *k_norm; /* [head_dim] per-head RMS norms before rope, or NULL */
    const float *ffn_norm;        /* [n_embd] */
    /* Gemma 3: RMS norms of the attention's and the FFN's outputs before the residual adds */
    const float *attn_post_norm, *ffn_post_norm; /* [n_embd] or NULL */
    int32_t window; /* > 0: a sliding-window layer (keys within the last `window` positions) */
    /* Gemma 4 (gemma4.c): the layer's head size (its sliding layers have their own), the KV
     * cache layer it attends over (its own index, or an earlier layer's when it shares
     * KV: then wk, wv and k_norm are absent), its scalar output scale or NULL, and its
     * per-layer embedding gate [n_embd] -> [n_pl], projection [n_pl] -> [n_embd] and norm */
    int32_t head_dim, kv_src;
    /* Gemma 4's per-layer arrays, 0 when the file has one value for all: the layer's FFN
     * width (E2B's double-wide tail) and KV heads (31B's global layers have fewer: gemma4.c
     * repeats them up to the model's n_head_kv, the largest) */
    int32_t n_ff, n_head_kv;
    const float *out_scale; /* [1] */
    cpulm_tensor pl_gate, pl_proj;
    const float *pl_post_norm; /* [n_embd] */
    cpulm_tensor w_gate;       /* [n_embd] -> [n_ff] */
    cpulm_tensor w_up;         /* [n_embd] -> [n_ff] */
    cpulm_tensor w_down;       /* [n_ff] -> [n_embd] */
    /* mixture of experts (n_expert > 0) instead of w_gate/w_up/w_down: */
    cpulm_tensor gate_inp;  /* router [n_embd] -> [n_expert] */
    cpulm_tensor gate_exps; /* [n_embd] -> [n_ff_exp], x n_expert */
    cpulm_tensor up_exps;   /* [n_embd] -> [n_ff_exp], x n_expert */
    cpulm_tensor down_exps; /* [n_ff_exp] -> [n_embd], x n_expert */
    /* gpt-oss: router and expert biases, or NULL: [n_expert], [n_expert][n_ff_exp] (gate,
     * up), [n_expert][n_embd] (down) */
    const float *gate_inp_b, *gate_exps_b, *up_exps_b, *down_exps_b;
    /* shared expert (qwen35moe): a dense FFN of n_ff_shexp added to the routed experts' sum,
     * scaled by sigmoid(gate_inp_shexp . xn) */
    const float *gate_inp_shexp;       /* [n_embd] */
    cpulm_tensor gate_shexp, up_shexp; /* [n_embd] -> [n_ff_shexp] */
    cpulm_tensor down_shexp;           /* [n_ff_shexp] -> [n_embd] */
    /* hybrid models: a recurrent (Gated DeltaNet) layer has these instead of wq..wo; its
     * slot is its index among the recurrent layers (its state), a full-attention layer's
     * its index among those (its KV cache layer) */
    int32_t recurrent, slot;
    cpulm_tensor ssm_qkv;   /* [n_embd] -> [conv channels]: q, k (key heads) then v */
    cpulm_tensor ssm_z;     /* [n_embd] -> [inner]: the output gate */
    cpulm_tensor ssm_beta;  /* [n_embd] -> [value heads] */
    cpulm_tensor ssm_alpha; /* [n_embd] -> [value heads] */
    cpulm_tensor ssm_in;    /* qwen3next, older files: [n_embd] -> [conv channels + inner],
                               per key head q, k, its value heads' v, their z (instead of
                               ssm_qkv, ssm_z) */
    cpulm_tensor ssm_ba;    /* qwen3next: [n_embd] -> [2 value heads], beta and alpha grouped
                               by key head (instead of ssm_beta, ssm_alpha) */
    cpulm_tensor ssm_out;   /* [inner] -> [n_embd] */
    const float *ssm_conv;  /* [conv channels][taps], tap 0 the oldest input */
    const float *ssm_dt;    /* [value heads] bias of alpha */
    const float *ssm_a;     /* [value heads] decay rate (negative) */
    const float *ssm_norm;  /* [value head size] gated RMS norm of the output */
    /* encoders (encoder.c): a fused projection instead of wq/wk/wv, and the LayerNorms'
     * biases (attn_norm / ffn_norm hold the post-attention and post-FFN norms' weights) */
    cpulm_tensor wqkv;          /* [n_embd] -> [Q + 2 KV] */
    const float *bqkv;          /* [Q + 2 KV] or NULL */
    const float *attn_norm_b;   /* [n_embd] */
    const float *ffn_norm_b;    /* [n_embd] */
    const float *b_up, *b_down; /* [n_ff], [n_embd] FFN biases, or NULL */
} cpulm_layer;

typedef struct cpulm_hparams {
    int32_t n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_rot;
    float rope_base;
    cpulm_rope_scaling rope; /* <arch>.rope.scaling.* (rope.h) */
    float norm_eps;
    int32_t pooling; /* <arch>.pooling_type (cpulm_pooling); NONE when absent */
    int32_t n_expert, n_expert_used, n_ff_exp; /* 0, 0, 0 for dense models */
    int moe_norm_weights; /* renormalize the chosen experts' router weights to sum 1 */
    /* hybrid models (0 otherwise): Gated DeltaNet sizes (ssm.conv_kernel, inner_size,
     * state_size = key head size, group_count = key heads, time_step_rank = value heads),
     * the full-attention interval, and how many layers of each kind */
    int32_t ssm_conv, ssm_inner, ssm_state, ssm_groups, ssm_heads;
    int32_t full_attn_interval, n_layer_attn, n_layer_recr;
    int32_t n_ff_shexp;       /* shared expert width (0: none) */
    int32_t ssm_joint_in;     /* the recurrent layers have ssm_in (qwen3next's older layout) */
    int32_t rope_sections[4]; /* rope.dimension_sections (pairs per section), or zeros */
    int32_t n_layer_swa;      /* layers with a sliding window (swa.h), 0: none */
    /* Gemma 3 (gemma.c), 0 otherwise: the rope base of the sliding layers
     * (rope.freq_base_swa, unscaled), the query scale, and the final logit soft-cap
     * (logits = cap * tanh(logits / cap); 0: none) */
    float rope_base_swa, attn_scale, final_softcap;
    int32_t n_swa;   /* attention.sliding_window of the sliding layers (0: none); which layers
                        slide is each layer's window (swa.h's rule, for every architecture) */
    int32_t n_types; /* encoders: tokenizer.ggml.token_type_count (rows of token_types) */
    int32_t encoder; /* the arch is an encoder (bidirectional, embeddings only) */
    /* Gemma 4 (gemma4_load.c), 0 otherwise: the sliding layers' head size
     * (attention.key_length_swa) and rotated dims (rope.dimension_count_swa), the
     * per-layer embedding width (embedding_length_per_layer_input, 0: none) and the
     * trailing layers that reuse an earlier layer's KV (attention.shared_kv_layers) */
    int32_t head_dim_swa, n_rot_swa, n_pl, n_kv_shared;
} cpulm_hparams;

struct cpulm_model {
    cpulm_mmap map;
    cpulm_gguf gguf;
    cpulm_vocab *vocab; /* owned */
    const cpulm_arch_desc *arch;
    cpulm_hparams hp;
    char *path, *arch_name, *name, *ftype; /* owned, NUL-terminated */
    cpulm_tensor tok_embd;                 /* [n_embd] x n_vocab rows */
    cpulm_tensor output;                   /* [n_embd] -> [n_vocab]; tok_embd when tied */
    const float *output_norm;
    const float *rope_freqs; /* [n_rot / 2] divisors of each pair's frequency, or NULL (gemma4:
                              * its global layers' proportional rope only) */
    /* gemma4's per-layer embeddings: token rows [n_layer * n_pl] x n_vocab, the projection
     * of the embedding [n_embd] -> [n_layer * n_pl] and its norm [n_pl]; absent: no PLE */
    cpulm_tensor pl_tok_embd, pl_model_proj;
    const float *pl_proj_norm;
    /* encoders: token type rows [n_types][n_embd] (row 0 is added to every token) or NULL,
     * absolute positions [n_ctx_train][n_embd] (bert) or NULL, the embedding LayerNorm, and
     * the classification head of rerankers (NULL when absent): cls [n_embd][n_embd], cls_b
     * [n_embd], cls_out [n_embd], cls_out_b [1] */
    const float *type_embd, *pos_embd, *tok_norm, *tok_norm_b;
    const float *cls, *cls_b, *cls_out, *cls_out_b;
    cpulm_layer *layers; /* owned, [n_layer] */
    float **owned_f32;   /* converted 1-D tensors, freed with the model */
    int32_t n_owned_f32;
    void **owned_packed; /* repacked weights (repack.c), freed with the model */
    int32_t n_owned_packed;
    /* bytes repacking added by widening Q5_0 to Q8_0 (repack.c), in all and per token */
    uint64_t widened_bytes, widened_active_bytes;
    char **meta_keys;    /* [gguf.n_kv] NUL-terminated copies, owned */
    char **tensor_names; /* [gguf.n_tensors] NUL-terminated copies, owned */
    int vocab_only;
};

/* model_info.c: builds meta_keys / tensor_names after the GGUF is parsed. */
cpulm_status cpulm_model_build_names(cpulm_model *m, cpulm_error *err);
void cpulm_model_free_names(cpulm_model *m);

#endif
