/* arch.h: per-architecture descriptors as data. An architecture is a row in arch.c: its
 * GGUF name (also the metadata key prefix), rope style, defaults, and the list of its
 * tensors, each with the model/layer field it binds to, a shape rule over the
 * hyperparameters and whether it is optional. The loader (model.c), synth, quantize and
 * the memory/plan tools all walk the same list, so adding a dense variant is a new row plus
 * only the kernels it truly lacks (docs/ARCHITECTURE.md). Nothing here touches files. */
#ifndef CPULM_MODEL_ARCH_H
#define CPULM_MODEL_ARCH_H

#include <stdbool.h>
#include <stdint.h>

typedef enum cpulm_rope_style {
    CPULM_ROPE_NORM = 0, /* rotate adjacent pairs (x[2i], x[2i+1]): llama */
    CPULM_ROPE_NEOX = 2, /* rotate halves (x[i], x[i + n_rot/2]): qwen2, qwen3, gpt-neox */
} cpulm_rope_style;

/* A symbolic tensor dimension, resolved against the hyperparameters (cpulm_arch_dim). */
typedef enum cpulm_dim {
    CPULM_DIM_1 = 0,    /* unused trailing dimension */
    CPULM_DIM_EMBD,     /* n_embd */
    CPULM_DIM_VOCAB,    /* n_vocab */
    CPULM_DIM_Q,        /* n_head * head_dim (!= n_embd for qwen3) */
    CPULM_DIM_KV,       /* n_head_kv * head_dim */
    CPULM_DIM_HEAD,     /* head_dim (per-head q/k norms) */
    CPULM_DIM_ROT_HALF, /* n_rot / 2 (rope_freqs) */
    CPULM_DIM_FF,       /* n_ff of a dense FFN */
    CPULM_DIM_FF_EXP,   /* n_ff of one expert */
    CPULM_DIM_EXPERTS,  /* n_expert */
    /* hybrid (Gated DeltaNet) models: */
    CPULM_DIM_Q2,         /* 2 * n_head * head_dim: gated attention's query and gate */
    CPULM_DIM_SSM_CONV,   /* ssm.conv_kernel: taps of the causal convolution */
    CPULM_DIM_SSM_CH,     /* conv channels: 2 * key heads * state size + inner size */
    CPULM_DIM_SSM_INNER,  /* ssm.inner_size: value heads * value head size */
    CPULM_DIM_SSM_HEADS,  /* ssm.time_step_rank: value heads */
    CPULM_DIM_SSM_HEADS2, /* 2 * value heads (qwen3next's joint beta/alpha projection) */
    CPULM_DIM_SSM_VHEAD,  /* inner size / value heads */
    CPULM_DIM_SSM_QKVZ,   /* conv channels + inner size (qwen3next's joint input projection) */
    CPULM_DIM_FF_SHEXP,   /* n_ff of the shared expert */
    CPULM_DIM_HEADS,      /* n_head (per-head attention sinks) */
    /* encoders (bert, nomic-bert): */
    CPULM_DIM_CTX_TRAIN, /* context_length: rows of the absolute position embeddings */
    CPULM_DIM_TYPES,     /* tokenizer.ggml.token_type_count: rows of token_types */
    CPULM_DIM_QKV,       /* Q + 2 KV: a fused query-key-value projection */
    /* gemma4: per-layer head sizes and per-layer embeddings (PLE) */
    CPULM_DIM_PL,     /* embedding_length_per_layer_input: one layer's PLE width */
    CPULM_DIM_PL_ALL, /* PLE width x n_layer: a token's inputs of every layer */
} cpulm_dim;

/* When a layer tensor exists: always, or only for dense / mixture-of-experts FFNs (one
 * architecture such as llama has files of both kinds; expert_count decides). */
typedef enum cpulm_when { CPULM_WHEN_ALWAYS = 0, CPULM_WHEN_DENSE, CPULM_WHEN_MOE } cpulm_when;

/* Which layers of a hybrid model hold a tensor: every layer, only the full-attention ones,
 * or only the recurrent (Gated DeltaNet) ones. Non-hybrid models have only full-attention
 * layers. */
typedef enum cpulm_layer_kind {
    CPULM_LAYERS_ALL = 0,
    CPULM_LAYERS_ATTN,
    CPULM_LAYERS_RECR,
} cpulm_layer_kind;

typedef enum cpulm_tensor_kind {
    CPULM_TK_VECTOR, /* 1-D norm weight or bias, bound as const float * (converted to F32) */
    CPULM_TK_MATRIX, /* 2-D or 3-D (per-expert) weight, bound as cpulm_tensor */
    CPULM_TK_F32,    /* small 2-D array read element-wise (a convolution kernel), bound as
                        const float * like a vector (converted to F32) */
} cpulm_tensor_kind;

typedef struct cpulm_tensor_desc {
    const char *name; /* "attn_q.weight"; layer tensors are "blk.<i>." + name */
    uint16_t field;   /* offsetof the binding in cpulm_layer (layer) or cpulm_model (global) */
    uint8_t kind;     /* cpulm_tensor_kind */
    uint8_t when;     /* cpulm_when */
    uint8_t optional;
    uint8_t dims[3]; /* cpulm_dim, ne[0] first (ne[0] = row length) */
    uint8_t layers;  /* cpulm_layer_kind */
} cpulm_tensor_desc;

typedef enum cpulm_ffn_style {
    CPULM_FFN_DENSE_ONLY,   /* expert keys ignored */
    CPULM_FFN_DENSE_OR_MOE, /* MoE when <arch>.expert_count > 0 (Mixtral is "llama") */
    CPULM_FFN_MOE_ONLY,     /* expert_count required */
} cpulm_ffn_style;

/* How the router's outputs weight the chosen experts: softmax over all experts, then the top
 * n_used (qwen3moe, Mixtral); or the top n_used logits, then softmax over those (gpt-oss). */
typedef enum cpulm_gating { CPULM_GATING_SOFTMAX = 0, CPULM_GATING_SOFTMAX_WEIGHT } cpulm_gating;

/* The experts' gated activation: silu(g) * u, or gpt-oss's clamped variant
 * min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1). */
typedef enum cpulm_expert_act { CPULM_ACT_SWIGLU = 0, CPULM_ACT_SWIGLU_OAI } cpulm_expert_act;

typedef struct cpulm_arch_desc {
    const char *name; /* general.architecture value, also the metadata key prefix */
    cpulm_rope_style rope;
    bool qkv_bias; /* attn_{q,k,v}.bias present (required) */
    bool qk_norm;  /* per-head RMS norm of q and k before rope (qwen3) */
    cpulm_ffn_style ffn;
    bool moe_norm_weights;   /* renormalize the top-k router weights unless the file's
                                <arch>.expert_weights_norm says otherwise */
    float default_rope_base; /* when <arch>.rope.freq_base is absent */
    float default_norm_eps;  /* when <arch>.attention.layer_norm_rms_epsilon is absent */
    bool hybrid;             /* Gated DeltaNet layers with a full (gated) attention layer every
                                <arch>.full_attention_interval layers (qwen35, qwen35moe, qwen3next) */
    bool mrope;              /* <arch>.rope.dimension_sections present (multi-section rope; text
                                positions make it a plain NEOX rope over the sections' pairs) */
    bool imrope;             /* the sections interleave (qwen35) rather than follow each other */
    bool dnet_head_div;      /* Gated DeltaNet value head h reads key head h / (value heads per key
                                head) (qwen3next); otherwise h mod key heads (qwen35) */
    bool gemma;              /* Gemma 3 layers (gemma.c): embeddings scaled by sqrt(n_embd),
                                post-attention and post-FFN norms, GELU-gated FFN, per-head q/k
                                norms, sliding-window layers with their own rope base */
    uint8_t swa_pattern;     /* > 0: sliding-window layers, by default of every swa_pattern layers
                                the last has full attention (swa.h's rule: gpt-oss 2, gemma3 6) */
    bool swa_optional;       /* the window key may be absent or 0 (every layer global: gemma3) */
    uint8_t gating;          /* cpulm_gating */
    uint8_t expert_act;      /* cpulm_expert_act */
    bool gemma4;             /* Gemma 4 layers (gemma4.c): gemma's plus per-layer embeddings, a
                                head size of its own on sliding layers, layers that reuse an
                                earlier layer's KV, V normed (or K reused as V), attention scale
                                1, proportional rope on global layers, a per-layer output scale */
    bool encoder;            /* a BERT-style encoder (encoder.c): absolute or rotary positions,
                                post-LayerNorm, bidirectional attention within each sequence, no
                                output head; it computes embeddings (and rank scores) only */
    const cpulm_tensor_desc *layer_tensors;  /* terminated by a NULL name */
    const cpulm_tensor_desc *global_tensors; /* NULL: cpulm_arch_global_tensors */
} cpulm_arch_desc;

/* The model-level tensor list of an architecture. */
const cpulm_tensor_desc *cpulm_arch_globals(const cpulm_arch_desc *a);

/* The model-level tensors (embeddings, output norm and head, rope_freqs), the same for every
 * architecture so far; terminated by a NULL name. */
extern const cpulm_tensor_desc cpulm_arch_global_tensors[];

/* The model's hyperparameters (model.h: the one struct of them, read from the GGUF by the
 * loader, from a shape preset by synth). */
typedef struct cpulm_hparams cpulm_hparams;

/* A tensor dimension's size for a model with hyperparameters hp (in 64 bits: the loader
 * bounds each field, not their products). */
int64_t cpulm_arch_dim(const cpulm_hparams *hp, cpulm_dim dim);

/* Does tensor t exist in a layer of a model with n_expert experts (0: dense), that layer
 * being recurrent (a Gated DeltaNet layer of a hybrid model) or not? */
bool cpulm_arch_tensor_present(const cpulm_tensor_desc *t, int64_t n_expert, bool recurrent);

/* Is layer il of a hybrid model recurrent, with a full-attention layer every `interval`
 * layers (the interval-th, 2 x interval-th, ...: llama.cpp's rule)? */
static inline bool cpulm_arch_layer_recurrent(int32_t il, int32_t interval) {
    return interval > 0 && (il + 1) % interval != 0;
}

/* NULL when the architecture is not supported. */
const cpulm_arch_desc *cpulm_arch_find(const char *name, unsigned long len);
/* Comma-separated list of supported names, for error messages. */
const char *cpulm_arch_supported(void);

#endif
