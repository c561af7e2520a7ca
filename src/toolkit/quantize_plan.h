/* quantize_plan.h: which type each tensor gets when a model is quantized to a preset
 * (Q4_K_M, Q8_0, ...), following llama.cpp's llama-quantize rules so files made by
 * `cpulm quantize` have the same per-tensor types (and, with the byte-exact reference
 * quantizers, the same bytes) as files made by llama.cpp.
 *
 * Pure logic over names, shapes and a few hyper-parameters: no I/O, no tensor data.
 * The rules, as llama.cpp applies them without an importance matrix:
 *   - only tensors whose name ends in "weight", with >= 2 dims, that are not "*_norm.weight",
 *     expert gates (ffn_gate_inp), position embeddings or token types are converted; the rest
 *     (norms, biases, rope_freqs) are copied unchanged;
 *   - output.weight (token_embd.weight when there is no output.weight) gets Q6_K unless the
 *     preset is Q8_0, and Q8_0 when its rows don't split into the preset's blocks;
 *   - Q4_K_M / Q5_K_M give Q6_K to attn_v and ffn_down in the layers use_more_bits() picks
 *     (first and last eighth, and every third layer between), Q4_K_S gives Q5_K to the first
 *     four attn_v and the first eighth of ffn_down; attn_qkv gets one step more in K_M;
 *   - MXFP4_MOE: expert stacks (3-D, more than one expert) get MXFP4, every other converted
 *     tensor Q8_0 (output.weight included);
 *   - a row length that is not a multiple of the chosen block falls back
 *     Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16 if that still does not fit;
 *   - tensors are written in llama.cpp's loader order: non-layer tensors first, then by
 *     layer number, then by name (the per-layer counters above depend on this order).
 */
#ifndef CPULM_QUANTIZE_PLAN_H
#define CPULM_QUANTIZE_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "cpulm.h"
#include "format/gguf.h"
#include "format/quant.h"

typedef struct cpulm_qplan_preset {
    const char *name; /* "Q4_K_M", as llama-quantize spells it */
    uint32_t ftype;   /* llama.cpp's LLAMA_FTYPE_MOSTLY_* value, stored in general.file_type */
    cpulm_dtype base; /* type of most converted tensors */
    const char *desc; /* one line for --help */
} cpulm_qplan_preset;

/* Case-insensitive name ("q4_k_m"), llama-quantize's aliases "Q4_K" / "Q5_K" (the _M
 * variants), or the ftype number ("15"). NULL when unknown or not supported here. */
const cpulm_qplan_preset *cpulm_qplan_preset_find(const char *name);
/* The i-th supported preset, NULL past the end (for listing). */
const cpulm_qplan_preset *cpulm_qplan_preset_at(int i);

typedef struct cpulm_qplan_params {
    const cpulm_qplan_preset *preset;
    bool pure;               /* every converted tensor gets preset->base (llama-quantize --pure) */
    bool keep_output;        /* leave output.weight as it is (--leave-output-tensor) */
    int32_t output_type;     /* a cpulm_dtype forced on output.weight, or -1 */
    int32_t token_embd_type; /* a cpulm_dtype forced on token_embd.weight, or -1 */
} cpulm_qplan_params;

cpulm_qplan_params cpulm_qplan_default_params(const cpulm_qplan_preset *preset);

/* The hyper-parameters the rules look at. */
typedef struct cpulm_qplan_model {
    char arch[32];             /* general.architecture ("llama", "qwen2", "falcon", ...) */
    int32_t n_layer;           /* {arch}.block_count */
    int32_t n_head, n_head_kv; /* 0 when absent (only used to spot a 70B llama) */
    int32_t n_expert;          /* {arch}.expert_count, 0 when absent */
} cpulm_qplan_model;

typedef struct cpulm_qplan_tensor { /* one input tensor, as the file describes it */
    const char *name;               /* NUL-terminated, borrowed */
    uint32_t type;
    int32_t n_dims;
    int64_t ne[4];
} cpulm_qplan_tensor;

typedef struct cpulm_qplan_entry { /* one output tensor, in output order */
    int64_t src;                   /* index into the input tensor list */
    uint32_t type;                 /* output type */
    uint32_t wanted;               /* what the rules chose before the row-length fallback */
    bool convert;                  /* false: the input bytes are copied unchanged */
} cpulm_qplan_entry;

/* Fills out[0..n) with the output order and types. Errors (CPULM_ERR_UNSUPPORTED, message
 * naming the tensor): a row length no type in the fallback chain can hold, a chosen type
 * with no reference quantizer. Does not check that sources can be dequantized. */
cpulm_status cpulm_qplan_build(const cpulm_qplan_params *p, const cpulm_qplan_model *m,
                               const cpulm_qplan_tensor *t, int64_t n, cpulm_qplan_entry *out,
                               cpulm_error *err);

/* Reads arch, block_count, head counts and expert_count from a parsed file. Missing keys
 * give 0; CPULM_ERR_FORMAT when general.architecture is missing or too long. */
cpulm_status cpulm_qplan_model_from_gguf(const cpulm_gguf *g, cpulm_qplan_model *m,
                                         cpulm_error *err);

/* Whether a tensor of this name and rank is one llama.cpp converts at all. */
bool cpulm_qplan_is_quantizable(const char *name, int32_t n_dims);

/* llama.cpp's use_more_bits(i_layer, n_layers): the layers that get more bits in K_M mixes. */
bool cpulm_qplan_use_more_bits(int32_t i_layer, int32_t n_layers);

#endif
