/* synth.h: writes synthetic llama-architecture GGUF models with random weights of a real
 * model's shape (Llama-3.2-1B/3B, Llama-3-8B/70B, tiny, custom), for benchmarks and tests.
 *
 * The weights are random but sane (N(0, 0.02)-like matrices, norms near 1), so activations
 * stay finite and every kernel runs on realistic data sizes. The tokenizer is an SPM vocab
 * (<unk>, <s>, </s>, 256 byte tokens, then filler pieces) that tokenizes and detokenizes any
 * text; gemma4 files get a "gemma4" vocabulary as Gemma 4's converter writes it (its special
 * and user-defined tokens, 256 byte tokens, newline runs, characters, merged filler pieces
 * with their merges, a chat template of Gemma 4's turns). Tensors are streamed to the file row by
 * row, so an 8B model never sits in RAM. The output depends only on the parameters (seed included),
 * not on the thread count.
 */
#ifndef CPULM_SYNTH_H
#define CPULM_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "cpulm.h"
#include "model/model.h"
#include "format/quant.h"
#include "quantize_plan.h"

/* What synth writes: the model's hyperparameters (cpulm_hparams, model/model.h: the one
 * struct of them, as the loader reads them back) and the file's own choices.
 * Of hp, synth reads the shape: n_layer, n_embd, n_ff, n_head, n_head_kv, n_vocab,
 * n_ctx_train (context_length), rope_base, norm_eps, head_dim (0: n_embd / n_head), n_rot
 * (0: head_dim), the experts (n_expert, n_expert_used, n_ff_exp; 0: dense), n_swa
 * (attention.sliding_window of gpt-oss and gemma3; 0: none), final_softcap (gemma3's
 * final_logit_softcapping, 0: not written), and the hybrid sizes (ssm_conv, ssm_inner,
 * ssm_state = key head size, ssm_groups = key heads, ssm_heads = value heads,
 * full_attn_interval, n_ff_shexp, ssm_joint_in: qwen3next's older joint ssm_in layout).
 * The fields a loader derives (layer counts per kind, rope sections and scaling, scales)
 * are ignored here; cpulm_synth_hparams computes them. */
typedef struct cpulm_synth_params {
    cpulm_hparams hp;
    int tied;         /* no output.weight: the output projection reuses token_embd */
    cpulm_dtype type; /* type of every 2-D weight (F32, F16, BF16, Q4_0, Q8_0, Q4_K, Q6_K) */
    uint64_t seed;
    int n_threads;      /* generation threads (>= 1); does not change the output */
    const char *name;   /* general.name */
    const char *arch;   /* general.architecture: llama, qwen2, qwen3, qwen3moe (model/arch.h) */
    uint32_t alignment; /* general.alignment; 0: not written (the GGUF default, 32) */
    /* gemma3: the period written as attention.sliding_window_pattern (0: not written, the
     * architecture's default applies) and a linear rope scaling factor of the global layers
     * (rope.scaling.type "linear"; 0: none) */
    int32_t swa_period;
    float rope_linear;
    /* YaRN rope scaling (rope.scaling.type "yarn", .factor, .original_context_length):
     * yarn_factor 0 writes no scaling keys; yarn_orig_ctx 0 means hp.n_ctx_train */
    float yarn_factor;
    int32_t yarn_orig_ctx;
    int k_eq_v; /* gemma4: the global layers have no attn_v (their keys' projection is the
                 * values', as in the 31B model) */
    /* gemma4's per-layer arrays, written as the converter does (one value per layer):
     * double_wide_mlp doubles the FFN width of the shared-KV tail (E2B); kv_heads_global > 0
     * gives the global layers that many KV heads (31B: fewer than the sliding layers') */
    int double_wide_mlp;
    int32_t kv_heads_global;
    int rerank; /* encoders: a classification head (cls, cls.output) and pooling type rank */
    int fim;    /* the last three tokens are Qwen's fill-in-the-middle control tokens
                 * (<|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>) instead of fillers */
    /* Called after each tensor's data is written, with tensors and weight bytes done so far
     * and in all (a large shape takes a minute: the CLI shows a progress line). NULL: none. */
    void (*progress)(void *user, int32_t done, int32_t total, uint64_t bytes_done,
                     uint64_t bytes_total);
    void *progress_user;
} cpulm_synth_params;

/* A named model shape: the one table of shapes, used by `cpulm synth` to write a file of
 * that shape and by `cpulm plan` to size a model that is not on disk. p holds the shape
 * (name: general.name of a synthesized file); its type, seed and threads are set by
 * cpulm_synth_shape, and norm_eps when 0 (1e-5, 1e-6 for hybrid and gemma3 shapes). */
typedef struct cpulm_shape_preset {
    const char *name; /* "8b" */
    const char *desc; /* "Llama 3.1 8B": the model whose dimensions these are */
    cpulm_synth_params p;
} cpulm_shape_preset;

/* NULL when unknown / past the end. "1b", "3b", "8b", "70b" (Llama), "qwen3-0.6b",
 * "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-30b-a3b" (MoE), "mixtral-8x7b",
 * "qwen35-9b" (hybrid), "gemma3-4b", "tiny", "tiny-moe", "tiny-qwen35", "tiny-gemma3",
 * "custom". */
const cpulm_shape_preset *cpulm_shape_preset_find(const char *name);
const cpulm_shape_preset *cpulm_shape_preset_at(int i);

/* Fills *p with a named shape (cpulm_shape_preset_find; "custom" is tiny's numbers as a
 * starting point for overrides). Type Q4_0, seed 1, one thread.
 * CPULM_ERR_INVALID_ARG for an unknown name. */
cpulm_status cpulm_synth_shape(const char *shape, cpulm_synth_params *p);

/* Cuts (or grows) the stack to n_layer layers: gemma4's shared-KV tail keeps its share of
 * the stack (rounded; at least 2 layers keep their own KV). */
void cpulm_synth_set_layers(cpulm_synth_params *p, int32_t n_layer);

/* Gemma 4 layer il's FFN width and KV heads in the files synth writes (the per-layer
 * arrays; the shape's n_ff and n_head_kv without them). */
int32_t cpulm_synth_gemma4_ff(const cpulm_synth_params *p, int32_t il);
int32_t cpulm_synth_gemma4_kv_heads(const cpulm_synth_params *p, int32_t il);

/* Does gemma4 layer il slide in the files synth writes? Global: every period-th layer
 * (swa_period, default 6), the last layer, and the last layer with its own KV (what the
 * global shared layers read); the one before that slides (what the sliding ones read). */
bool cpulm_synth_gemma4_slides(const cpulm_synth_params *p, int32_t il);

/* Checks the parameters (divisibility by the type's block, head counts, vocab >= 260, or
 * >= 407 for gemma4). */
cpulm_status cpulm_synth_check(const cpulm_synth_params *p, cpulm_error *err);

/* Bytes the file's weights will take (tensor data only). */
uint64_t cpulm_synth_weight_bytes(const cpulm_synth_params *p);

/* The hyperparameters of the model p describes (head_dim, experts as synth writes them), for
 * memory estimates (memory.h). */
void cpulm_synth_hparams(const cpulm_synth_params *p, cpulm_hparams *hp);

/* Bytes and element count of p's weights as llama-quantize's preset would write them from
 * an F32 file of this shape: quantize_plan.c's per-tensor rules and quant.c's block sizes,
 * the same code `cpulm quantize` runs. CPULM_ERR_UNSUPPORTED as cpulm_qplan_build. */
cpulm_status cpulm_synth_quantized_size(const cpulm_synth_params *p,
                                        const cpulm_qplan_preset *preset, uint64_t *bytes,
                                        int64_t *n_params, cpulm_error *err);

/* Writes the model to path (through a temporary file renamed at the end). */
cpulm_status cpulm_synth_write(const char *path, const cpulm_synth_params *p, cpulm_error *err);

#endif
