/* synth.c: synthetic llama models (see synth.h).
 *
 * Every row of every tensor is generated from its own PRNG stream, seeded from (seed,
 * tensor index, row), so rows can be produced by any thread in any order with the same
 * bytes. Quantization uses the scalar reference routines (quant.h), which are the same on
 * every machine, so a seed names one file everywhere.
 */
#include "synth.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "format/gguf.h"
#include "model/arch.h"
#include "model/swa.h"
#include "quantize_plan.h"

#define SYNTH_N_SPECIAL 3   /* <unk>, <s>, </s> */
#define SYNTH_N_BYTE    256 /* <0x00> .. <0xFF> */
#define WEIGHT_STD      0.02f
#define SYNTH_N_TYPES   2 /* token types of an encoder file (BERT's two sentences) */

/* ---- shapes: the one table of model shapes (synth and `cpulm plan` share it) ---- */

/* Each row: the model it copies (desc), then its shape as cpulm_synth_params (synth.h), in
 * designated initialisers of cpulm_hparams (model/model.h). */
/* clang-format off */
static const cpulm_shape_preset shapes[] = {
    {"1b", "Llama 3.2 1B",
     {.name = "synth Llama-3.2-1B", .arch = "llama", .tied = 1,
      .hp = {.n_layer = 16, .n_embd = 2048, .n_ff = 8192, .n_head = 32, .n_head_kv = 8,
             .n_vocab = 128256, .n_ctx_train = 131072, .rope_base = 500000.0f}}},
    {"3b", "Llama 3.2 3B",
     {.name = "synth Llama-3.2-3B", .arch = "llama", .tied = 1,
      .hp = {.n_layer = 28, .n_embd = 3072, .n_ff = 8192, .n_head = 24, .n_head_kv = 8,
             .n_vocab = 128256, .n_ctx_train = 131072, .rope_base = 500000.0f}}},
    {"8b", "Llama 3.1 8B",
     {.name = "synth Llama-3-8B", .arch = "llama",
      .hp = {.n_layer = 32, .n_embd = 4096, .n_ff = 14336, .n_head = 32, .n_head_kv = 8,
             .n_vocab = 128256, .n_ctx_train = 8192, .rope_base = 500000.0f}}},
    {"70b", "Llama 3.1 70B",
     {.name = "synth Llama-3-70B", .arch = "llama",
      .hp = {.n_layer = 80, .n_embd = 8192, .n_ff = 28672, .n_head = 64, .n_head_kv = 8,
             .n_vocab = 128256, .n_ctx_train = 8192, .rope_base = 500000.0f}}},
    {"qwen3-0.6b", "Qwen3 0.6B",
     {.name = "synth Qwen3-0.6B", .arch = "qwen3", .tied = 1,
      .hp = {.n_layer = 28, .n_embd = 1024, .n_ff = 3072, .n_head = 16, .n_head_kv = 8,
             .n_vocab = 151936, .n_ctx_train = 40960, .rope_base = 1e6f, .head_dim = 128}}},
    {"qwen3-1.7b", "Qwen3 1.7B",
     {.name = "synth Qwen3-1.7B", .arch = "qwen3", .tied = 1,
      .hp = {.n_layer = 28, .n_embd = 2048, .n_ff = 6144, .n_head = 16, .n_head_kv = 8,
             .n_vocab = 151936, .n_ctx_train = 40960, .rope_base = 1e6f, .head_dim = 128}}},
    {"qwen3-4b", "Qwen3 4B",
     {.name = "synth Qwen3-4B", .arch = "qwen3", .tied = 1,
      .hp = {.n_layer = 36, .n_embd = 2560, .n_ff = 9728, .n_head = 32, .n_head_kv = 8,
             .n_vocab = 151936, .n_ctx_train = 40960, .rope_base = 1e6f, .head_dim = 128}}},
    {"qwen3-8b", "Qwen3 8B",
     {.name = "synth Qwen3-8B", .arch = "qwen3",
      .hp = {.n_layer = 36, .n_embd = 4096, .n_ff = 12288, .n_head = 32, .n_head_kv = 8,
             .n_vocab = 151936, .n_ctx_train = 40960, .rope_base = 1e6f, .head_dim = 128}}},
    {"qwen3-30b-a3b", "Qwen3 30B-A3B (MoE)",
     {.name = "synth Qwen3-30B-A3B", .arch = "qwen3moe", .tied = 1,
      .hp = {.n_layer = 48, .n_embd = 2048, .n_ff = 6144, .n_head = 32, .n_head_kv = 4,
             .n_vocab = 151936, .n_ctx_train = 40960, .rope_base = 1e6f, .head_dim = 128,
             .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 768}}},
    {"mixtral-8x7b", "Mixtral 8x7B (MoE)",
     {.name = "synth Mixtral-8x7B", .arch = "llama",
      .hp = {.n_layer = 32, .n_embd = 4096, .n_ff = 14336, .n_head = 32, .n_head_kv = 8,
             .n_vocab = 32000, .n_ctx_train = 32768, .rope_base = 1e6f, .n_expert = 8,
             .n_expert_used = 2, .n_ff_exp = 14336}}},
    {"qwen35-9b", "Qwen3.5 9B (hybrid)",
     {.name = "synth Qwen3.5-9B", .arch = "qwen35",
      .hp = {.n_layer = 32, .n_embd = 4096, .n_ff = 12288, .n_head = 16, .n_head_kv = 4,
             .n_vocab = 248320, .n_ctx_train = 262144, .rope_base = 1e7f, .head_dim = 256,
             .n_rot = 64, .ssm_conv = 4, .ssm_inner = 4096, .ssm_state = 128, .ssm_groups = 16,
             .ssm_heads = 32, .full_attn_interval = 4}}},
    {"qwen35-35b-a3b", "Qwen3.5 35B-A3B (hybrid MoE)",
     {.name = "synth Qwen3.5-35B-A3B", .arch = "qwen35moe",
      .hp = {.n_layer = 40, .n_embd = 2048, .n_ff = 512, .n_head = 16, .n_head_kv = 2,
             .n_vocab = 248320, .n_ctx_train = 262144, .rope_base = 1e7f, .head_dim = 256,
             .n_expert = 256, .n_expert_used = 8, .n_ff_exp = 512, .n_rot = 64, .ssm_conv = 4,
             .ssm_inner = 4096, .ssm_state = 128, .ssm_groups = 16, .ssm_heads = 32,
             .full_attn_interval = 4, .n_ff_shexp = 512}}},
    {"qwen3next-80b-a3b", "Qwen3-Next 80B-A3B (hybrid MoE)",
     {.name = "synth Qwen3-Next-80B-A3B", .arch = "qwen3next",
      .hp = {.n_layer = 48, .n_embd = 2048, .n_ff = 512, .n_head = 16, .n_head_kv = 2,
             .n_vocab = 151936, .n_ctx_train = 262144, .rope_base = 1e7f, .head_dim = 256,
             .n_expert = 512, .n_expert_used = 10, .n_ff_exp = 512, .n_rot = 64, .ssm_conv = 4,
             .ssm_inner = 4096, .ssm_state = 128, .ssm_groups = 16, .ssm_heads = 32,
             .full_attn_interval = 4, .n_ff_shexp = 512}}},
    {"tiny", "tiny test model",
     {.name = "synth tiny", .arch = "llama", .tied = 1,
      .hp = {.n_layer = 2, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2, .n_vocab = 512,
             .n_ctx_train = 512, .rope_base = 10000.0f}}},
    {"tiny-moe", "tiny MoE test model",
     {.name = "synth tiny MoE", .arch = "qwen3moe", .tied = 1,
      .hp = {.n_layer = 2, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2, .n_vocab = 512,
             .n_ctx_train = 512, .rope_base = 1e6f, .head_dim = 64, .n_expert = 8,
             .n_expert_used = 2, .n_ff_exp = 128}}},
    /* 4 layers: 3 Gated DeltaNet, 1 full attention; 2 key heads shared by 4 value heads;
     * half of each head rotated */
    {"tiny-qwen35", "tiny hybrid test model",
     {.name = "synth tiny qwen35", .arch = "qwen35", .tied = 1,
      .hp = {.n_layer = 4, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2, .n_vocab = 512,
             .n_ctx_train = 4096, .rope_base = 1e7f, .head_dim = 64, .n_rot = 32, .ssm_conv = 4,
             .ssm_inner = 128, .ssm_state = 32, .ssm_groups = 2, .ssm_heads = 4,
             .full_attn_interval = 4}}},
    {"tiny-qwen35moe", "tiny hybrid MoE test model",
     {.name = "synth tiny qwen35moe", .arch = "qwen35moe", .tied = 1,
      .hp = {.n_layer = 4, .n_embd = 256, .n_ff = 256, .n_head = 4, .n_head_kv = 2, .n_vocab = 512,
             .n_ctx_train = 4096, .rope_base = 1e7f, .head_dim = 64, .n_expert = 8,
             .n_expert_used = 2, .n_ff_exp = 128, .n_rot = 32, .ssm_conv = 4, .ssm_inner = 128,
             .ssm_state = 32, .ssm_groups = 2, .ssm_heads = 4, .full_attn_interval = 4,
             .n_ff_shexp = 192}}},
    {"tiny-qwen3next", "tiny qwen3next test model",
     {.name = "synth tiny qwen3next", .arch = "qwen3next", .tied = 1,
      .hp = {.n_layer = 4, .n_embd = 256, .n_ff = 256, .n_head = 4, .n_head_kv = 2, .n_vocab = 512,
             .n_ctx_train = 4096, .rope_base = 1e7f, .head_dim = 64, .n_expert = 8,
             .n_expert_used = 2, .n_ff_exp = 128, .n_rot = 32, .ssm_conv = 4, .ssm_inner = 128,
             .ssm_state = 32, .ssm_groups = 2, .ssm_heads = 4, .full_attn_interval = 4,
             .n_ff_shexp = 192}}},
    {"tiny-qwen3next-ssm-in", "tiny qwen3next, older converter's layout",
     {.name = "synth tiny qwen3next", .arch = "qwen3next", .tied = 1,
      .hp = {.n_layer = 4, .n_embd = 256, .n_ff = 256, .n_head = 4, .n_head_kv = 2, .n_vocab = 512,
             .n_ctx_train = 4096, .rope_base = 1e7f, .head_dim = 64, .n_expert = 8,
             .n_expert_used = 2, .n_ff_exp = 128, .n_rot = 32, .ssm_conv = 4, .ssm_inner = 128,
             .ssm_state = 32, .ssm_groups = 2, .ssm_heads = 4, .full_attn_interval = 4,
             .n_ff_shexp = 192, .ssm_joint_in = 1}}},
    {"gemma3-4b", "Gemma 3 4B",
     {.name = "synth Gemma-3-4B", .arch = "gemma3", .tied = 1, .rope_linear = 8.0f,
      .hp = {.n_layer = 34, .n_embd = 2560, .n_ff = 10240, .n_head = 8, .n_head_kv = 4,
             .n_vocab = 262144, .n_ctx_train = 131072, .rope_base = 1e6f, .head_dim = 256,
             .n_swa = 1024}}},
    /* 6 layers: 5 sliding (a window of 32) and 1 global; the global layer's rope scaled
     * linearly by 8, the sliding ones unscaled at base 10000 */
    {"tiny-gemma3", "tiny gemma3 test model",
     {.name = "synth tiny gemma3", .arch = "gemma3", .tied = 1, .rope_linear = 8.0f,
      .hp = {.n_layer = 6, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2, .n_vocab = 512,
             .n_ctx_train = 4096, .rope_base = 1e6f, .head_dim = 64, .n_swa = 32}}},
    /* Gemma 4 E4B: 35 sliding layers with heads of 256, 7 global ones (5, 11, ..., 41) with
     * heads of 512 and proportional rope, the last 18 layers reusing the KV of layers 22
     * and 23, per-layer embeddings of 256 */
    {"gemma4-e4b", "Gemma 4 E4B",
     {.name = "synth Gemma-4-E4B", .arch = "gemma4", .tied = 1,
      .hp = {.n_layer = 42, .n_embd = 2560, .n_ff = 10240, .n_head = 8, .n_head_kv = 2,
             .n_vocab = 262144, .n_ctx_train = 131072, .rope_base = 1e6f, .head_dim = 512,
             .n_swa = 512, .rope_base_swa = 10000.0f, .final_softcap = 30.0f,
             .head_dim_swa = 256, .n_pl = 256, .n_kv_shared = 18}}},
    /* 6 layers: 0, 1, 2 and 4 sliding (a window of 32, heads of 32), 3 and 5 global (heads
     * of 64, a quarter rotated); 4 and 5 reuse the KV of 2 and 3; per-layer embeddings of
     * 32 */
    {"tiny-gemma4", "tiny gemma4 test model",
     {.name = "synth tiny gemma4", .arch = "gemma4", .tied = 1,
      .hp = {.n_layer = 6, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2, .n_vocab = 512,
             .n_ctx_train = 4096, .rope_base = 1e6f, .head_dim = 64, .n_swa = 32,
             .rope_base_swa = 10000.0f, .final_softcap = 30.0f, .head_dim_swa = 32, .n_pl = 32,
             .n_kv_shared = 2}}},
    /* gpt-oss: MXFP4 experts (the default type), Q8_0 attention, F32 router; every other layer
     * a sliding window and YaRN */
    {"gpt-oss-20b", "gpt-oss 20B (MoE, MXFP4 experts)",
     {.name = "synth gpt-oss-20b", .arch = "gpt-oss", .yarn_factor = 32.0f, .yarn_orig_ctx = 4096,
      .hp = {.n_layer = 24, .n_embd = 2880, .n_ff = 2880, .n_head = 64, .n_head_kv = 8,
             .n_vocab = 201088, .n_ctx_train = 131072, .rope_base = 150000.0f, .head_dim = 64,
             .n_expert = 32, .n_expert_used = 4, .n_ff_exp = 2880, .n_swa = 128}}},
    {"gpt-oss-120b", "gpt-oss 120B (MoE, MXFP4 experts)",
     {.name = "synth gpt-oss-120b", .arch = "gpt-oss", .yarn_factor = 32.0f, .yarn_orig_ctx = 4096,
      .hp = {.n_layer = 36, .n_embd = 2880, .n_ff = 2880, .n_head = 64, .n_head_kv = 8,
             .n_vocab = 201088, .n_ctx_train = 131072, .rope_base = 150000.0f, .head_dim = 64,
             .n_expert = 128, .n_expert_used = 4, .n_ff_exp = 2880, .n_swa = 128}}},
    /* 4 layers (2 sliding, 2 full), 8 experts, 4 used */
    {"tiny-gpt-oss", "tiny gpt-oss test model",
     {.name = "synth tiny gpt-oss", .arch = "gpt-oss", .yarn_factor = 32.0f, .yarn_orig_ctx = 256,
      .hp = {.n_layer = 4, .n_embd = 256, .n_ff = 128, .n_head = 4, .n_head_kv = 2, .n_vocab = 512,
             .n_ctx_train = 8192, .rope_base = 150000.0f, .head_dim = 64, .n_expert = 8,
             .n_expert_used = 4, .n_ff_exp = 128, .n_swa = 32}}},
    /* encoders: BERT's LayerNorm epsilon */
    {"tiny-bert", "tiny BERT encoder (embeddings)",
     {.name = "synth tiny bert", .arch = "bert",
      .hp = {.n_layer = 2, .n_embd = 128, .n_ff = 256, .n_head = 4, .n_head_kv = 4, .n_vocab = 512,
             .n_ctx_train = 256, .rope_base = 10000.0f, .norm_eps = 1e-12f}}},
    {"tiny-nomic-bert", "tiny nomic-bert encoder (embeddings)",
     {.name = "synth tiny nomic-bert", .arch = "nomic-bert",
      .hp = {.n_layer = 2, .n_embd = 128, .n_ff = 256, .n_head = 4, .n_head_kv = 4, .n_vocab = 512,
             .n_ctx_train = 256, .rope_base = 1000.0f, .norm_eps = 1e-12f}}},
    {"custom", "tiny's numbers, to override",
     {.name = "synth custom", .arch = "llama", .tied = 1,
      .hp = {.n_layer = 2, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2, .n_vocab = 512,
             .n_ctx_train = 512, .rope_base = 10000.0f}}},
};
/* clang-format on */

const cpulm_shape_preset *cpulm_shape_preset_at(int i) {
    return i >= 0 && i < (int)(sizeof shapes / sizeof shapes[0]) ? &shapes[i] : NULL;
}

const cpulm_shape_preset *cpulm_shape_preset_find(const char *name) {
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!strcmp(name, shapes[i].name)) return &shapes[i];
    return NULL;
}

cpulm_status cpulm_synth_shape(const char *name, cpulm_synth_params *p) {
    const cpulm_shape_preset *s = cpulm_shape_preset_find(name);
    if (!s) return CPULM_ERR_INVALID_ARG;
    *p = s->p;
    p->type = strcmp(p->arch, "gpt-oss") ? CPULM_DTYPE_Q4_0 : CPULM_DTYPE_MXFP4; /* as released */
    p->seed = 1;
    p->n_threads = 1;
    if (p->hp.norm_eps == 0)
        p->hp.norm_eps = p->hp.ssm_heads || !strncmp(p->arch, "gemma", 5) ? 1e-6f : 1e-5f;
    return CPULM_OK;
}

void cpulm_synth_set_layers(cpulm_synth_params *p, int32_t n_layer) {
    if (n_layer < 1 || n_layer == p->hp.n_layer) return;
    if (p->hp.n_kv_shared > 0) { /* the same share of the stack, at least 2 layers own KV */
        int32_t shared = (int32_t)((2 * (int64_t)n_layer * p->hp.n_kv_shared + p->hp.n_layer) /
                                   (2 * (int64_t)p->hp.n_layer));
        p->hp.n_kv_shared = shared < n_layer - 2 ? shared : n_layer - 2 > 0 ? n_layer - 2 : 0;
    }
    p->hp.n_layer = n_layer;
}

bool cpulm_synth_gemma4_slides(const cpulm_synth_params *p, int32_t il) {
    const int32_t n = p->hp.n_layer, n_kv = n - p->hp.n_kv_shared;
    const int32_t period = p->swa_period > 0 ? p->swa_period : 6;
    if (p->hp.n_kv_shared > 0 && il == n_kv - 1) return false; /* what the global tail reads */
    if (p->hp.n_kv_shared > 0 && il == n_kv - 2) return true;  /* what the sliding tail reads */
    if (il == n - 1) return false;
    return il % period != period - 1;
}

int32_t cpulm_synth_gemma4_ff(const cpulm_synth_params *p, int32_t il) {
    const bool tail = il >= p->hp.n_layer - p->hp.n_kv_shared;
    return p->double_wide_mlp && tail ? 2 * p->hp.n_ff : p->hp.n_ff;
}

int32_t cpulm_synth_gemma4_kv_heads(const cpulm_synth_params *p, int32_t il) {
    const bool global = !cpulm_synth_gemma4_slides(p, il);
    return p->kv_heads_global > 0 && global ? p->kv_heads_global : p->hp.n_head_kv;
}

static int gemma4_arrays(const cpulm_synth_params *p) {
    return !strcmp(p->arch, "gemma4") && (p->double_wide_mlp || p->kv_heads_global > 0);
}

static int32_t synth_head_dim(const cpulm_synth_params *p) {
    return p->hp.head_dim > 0 ? p->hp.head_dim : p->hp.n_embd / p->hp.n_head;
}

static int32_t synth_n_rot(const cpulm_synth_params *p) {
    return p->hp.n_rot > 0 ? p->hp.n_rot : synth_head_dim(p);
}

void cpulm_synth_hparams(const cpulm_synth_params *p, cpulm_hparams *hp) {
    const cpulm_arch_desc *a = cpulm_arch_find(p->arch, strlen(p->arch));
    *hp = p->hp; /* the shape; below, what the loader derives from the file synth writes */
    hp->head_dim = synth_head_dim(p);
    hp->n_rot = synth_n_rot(p);
    hp->moe_norm_weights = p->hp.n_expert > 0;
    memset(hp->rope_sections, 0, sizeof hp->rope_sections);
    if (a && a->mrope) { /* what the loader reads from rope.dimension_sections */
        int32_t half = hp->n_rot / 2, third = (half + 2) / 3;
        hp->rope_sections[0] = hp->rope_sections[1] = third;
        hp->rope_sections[2] = half - 2 * third;
    }
    hp->n_layer_attn = p->hp.n_layer;
    hp->n_layer_recr = 0;
    hp->encoder = a && a->encoder;
    hp->n_types = hp->encoder ? SYNTH_N_TYPES : 0;
    if (p->hp.ssm_heads) {
        hp->n_layer_attn = 0;
        for (int32_t il = 0; il < p->hp.n_layer; il++)
            if (cpulm_arch_layer_recurrent(il, p->hp.full_attn_interval))
                hp->n_layer_recr++;
            else
                hp->n_layer_attn++;
    }
    hp->rope = (cpulm_rope_scaling){.freq_scale = 1.0f, .mscale = 1.0f};
    if (!a || !a->swa_pattern) hp->n_swa = 0;
    hp->n_layer_swa = 0;
    const int32_t period = p->swa_period > 0 ? p->swa_period : a ? a->swa_pattern : 0;
    const int g4 = a && a->gemma4;
    for (int32_t il = 0; hp->n_swa > 0 && il < p->hp.n_layer; il++) /* the loader's rule */
        hp->n_layer_swa +=
            g4 ? cpulm_synth_gemma4_slides(p, il) : cpulm_swa_layer_slides(il, period);
    for (int32_t il = 0; g4 && gemma4_arrays(p) && il < p->hp.n_layer; il++) {
        const int32_t ff = cpulm_synth_gemma4_ff(p, il), kv = cpulm_synth_gemma4_kv_heads(p, il);
        hp->n_ff = ff > hp->n_ff ? ff : hp->n_ff; /* the loader's: the largest */
        hp->n_head_kv = kv > hp->n_head_kv ? kv : hp->n_head_kv;
    }
    if (g4) {
        hp->n_rot_swa = p->hp.n_rot_swa > 0 ? p->hp.n_rot_swa : p->hp.head_dim_swa;
        hp->n_layer_attn = p->hp.n_layer - p->hp.n_kv_shared;
        hp->attn_scale = 1.0f;
    }
}

/* The Gated DeltaNet sizes of a hybrid architecture (value head size = state size). */
static cpulm_status check_hybrid(const cpulm_synth_params *p, const cpulm_arch_desc *a, int32_t blk,
                                 cpulm_error *err) {
    if (!a->hybrid) return CPULM_OK;
    if (p->hp.ssm_conv < 1 || p->hp.ssm_conv > 64 || p->hp.ssm_state < 1 || p->hp.ssm_groups < 1 ||
        p->hp.ssm_heads < 1 || p->hp.ssm_heads % p->hp.ssm_groups ||
        p->hp.ssm_inner != p->hp.ssm_heads * p->hp.ssm_state || p->hp.full_attn_interval < 1)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG,
                          "%s needs conv taps 1-64, value heads a multiple of key heads, inner "
                          "size = value heads x state size and an attention interval >= 1",
                          p->arch);
    int32_t n_rot = synth_n_rot(p);
    if (n_rot % 2 || n_rot > synth_head_dim(p))
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "rotated dims %d: need even, <= head_dim",
                          n_rot);
    if (p->hp.ssm_inner % blk || p->hp.n_ff_shexp % blk)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG,
                          "inner size %d and shared expert ff %d must be multiples of %d",
                          p->hp.ssm_inner, p->hp.n_ff_shexp, blk);
    return CPULM_OK;
}

static int32_t g4_n_fixed(void); /* tokens of a gemma4 vocabulary before the generated ones */

/* Gemma 4: a window, sliding heads no wider than the global ones, whole blocks of the
 * per-layer embedding width, at least 2 layers with their own KV when some share, room in
 * the vocabulary for its special, byte and character tokens. */
static cpulm_status check_gemma4(const cpulm_synth_params *p, int32_t hd, int32_t blk,
                                 cpulm_error *err) {
    const int32_t hs = p->hp.head_dim_swa, rs = p->hp.n_rot_swa;
    if (p->hp.n_swa < 1 || hs < 2 || hs % 2 || hs > hd || (hs * p->hp.n_head) % blk || rs < 0 ||
        rs % 2 || rs > hs)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG,
                          "gemma4 needs a window >= 1 and an even sliding head size <= head_dim "
                          "%d (x heads a multiple of %d), rotating an even count <= it",
                          hd, blk);
    if (p->hp.n_pl < 0 || p->hp.n_pl % blk || p->hp.n_kv_shared < 0 ||
        (p->hp.n_kv_shared > 0 && p->hp.n_layer - p->hp.n_kv_shared < 2))
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG,
                          "gemma4: per-layer embedding width %d must be a multiple of %d; %d "
                          "shared-KV layers of %d leave fewer than 2 with their own",
                          p->hp.n_pl, blk, p->hp.n_kv_shared, p->hp.n_layer);
    const int32_t kg = p->kv_heads_global, kv = p->hp.n_head_kv;
    if (kg < 0 || (kg > 0 && (p->hp.n_head % kg || (kg > kv ? kg % kv : kv % kg))))
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG,
                          "gemma4: %d global KV heads must divide the %d heads and divide or "
                          "be a multiple of the %d KV heads",
                          kg, p->hp.n_head, kv);
    if (p->hp.n_vocab <= g4_n_fixed())
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "gemma4: vocab %d too small (at least %d)",
                          p->hp.n_vocab, g4_n_fixed() + 1);
    return CPULM_OK;
}

static int weight_type_ok(cpulm_dtype t) {
    return t == CPULM_DTYPE_F32 || t == CPULM_DTYPE_F16 || t == CPULM_DTYPE_BF16 ||
           t == CPULM_DTYPE_Q4_0 || t == CPULM_DTYPE_Q4_1 || t == CPULM_DTYPE_Q5_0 ||
           t == CPULM_DTYPE_Q5_1 || t == CPULM_DTYPE_Q8_0 || t == CPULM_DTYPE_Q4_K ||
           t == CPULM_DTYPE_Q6_K || t == CPULM_DTYPE_MXFP4;
}

cpulm_status cpulm_synth_check(const cpulm_synth_params *p, cpulm_error *err) {
    if (!weight_type_ok(p->type))
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "weight type %s not supported by synth",
                          cpulm_dtype_name(p->type));
    if (p->hp.n_layer < 1 || p->hp.n_embd < 1 || p->hp.n_ff < 1 || p->hp.n_head < 1 ||
        p->hp.n_head_kv < 1 || p->hp.n_ctx_train < 1 || p->n_threads < 1)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "every size must be positive");
    int32_t min_vocab = SYNTH_N_SPECIAL + SYNTH_N_BYTE + 1 + (p->fim ? 3 : 0); /* + FIM's */
    if (p->hp.n_vocab < min_vocab)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "vocab %d too small (at least %d)",
                          p->hp.n_vocab, min_vocab);
    const cpulm_arch_desc *a = p->arch ? cpulm_arch_find(p->arch, strlen(p->arch)) : NULL;
    if (!a)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "architecture '%s' not supported",
                          p->arch ? p->arch : "(none)");
    int32_t hd = synth_head_dim(p);
    if ((!p->hp.head_dim && p->hp.n_embd % p->hp.n_head) || p->hp.n_head % p->hp.n_head_kv ||
        hd % 2 || hd < 2)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG,
                          "embd %d, heads %d, kv heads %d: need embd = heads x even head_dim "
                          "(or an even --head-dim) and heads a multiple of kv heads",
                          p->hp.n_embd, p->hp.n_head, p->hp.n_head_kv);
    int moe = p->hp.n_expert > 0;
    if ((a->ffn == CPULM_FFN_MOE_ONLY && !moe) || (a->ffn == CPULM_FFN_DENSE_ONLY && moe))
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "%s %s experts", p->arch,
                          moe ? "has no" : "needs");
    if (moe && (p->hp.n_expert_used < 1 || p->hp.n_expert_used > p->hp.n_expert ||
                p->hp.n_ff_exp < 1 || p->hp.n_expert > 4096))
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG,
                          "experts %d, used %d, expert ff %d: need 1 <= used <= experts <= 4096",
                          p->hp.n_expert, p->hp.n_expert_used, p->hp.n_ff_exp);
    int32_t blk = cpulm_dtype_traits_get(p->type)->block;
    if (p->hp.n_embd % blk || p->hp.n_ff % blk || (moe && p->hp.n_ff_exp % blk) ||
        (hd * p->hp.n_head) % blk)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG,
                          "embd %d, ff %d (expert ff %d) and heads x head_dim must be multiples of "
                          "%s's block of %d",
                          p->hp.n_embd, p->hp.n_ff, p->hp.n_ff_exp, cpulm_dtype_name(p->type), blk);
    if (p->hp.rope_base <= 0 || p->hp.norm_eps <= 0)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "rope base and norm eps must be positive");
    if (a->swa_pattern && !a->swa_optional && p->hp.n_swa < 1)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "%s needs a sliding window >= 1", p->arch);
    if (p->yarn_factor != 0 && !(p->yarn_factor >= 1 && p->yarn_factor <= 1000))
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "yarn factor %g: need 1 .. 1000",
                          p->yarn_factor);
    if (p->rope_linear != 0 && (p->yarn_factor != 0 || !(p->rope_linear >= 1)))
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG,
                          "linear rope factor %g: need >= 1 and no YaRN factor", p->rope_linear);
    if (p->hp.n_swa < 0 || p->swa_period < 0 || p->hp.final_softcap < 0 ||
        ((p->hp.n_swa > 0 || p->swa_period > 0) && !a->swa_pattern) ||
        (p->hp.final_softcap > 0 && !a->gemma && !a->gemma4))
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG,
                          "sliding window %d, period %d: need >= 0, and an architecture with "
                          "sliding windows (gemma3, gpt-oss)",
                          p->hp.n_swa, p->swa_period);
    if (a->gemma4) {
        cpulm_status st = check_gemma4(p, hd, blk, err);
        if (st != CPULM_OK) return st;
    } else if (p->double_wide_mlp || p->kv_heads_global) {
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG,
                          "per-layer FFN widths and KV heads are gemma4's, not %s's", p->arch);
    }
    if (p->rerank && strcmp(p->arch, "bert"))
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG,
                          "a classification head (--rerank) needs --arch bert, not %s", p->arch);
    return check_hybrid(p, a, blk, err);
}

/* ---- the tensor list: the architecture's descriptor (model/arch.h) ---- */

enum { K_MATRIX, K_NORM, K_ROUTER };

typedef struct stensor {
    char name[64];
    int kind;
    int n_dims;
    int64_t ne[3]; /* ne[0] = row length; ne[2] experts (1 for 2-D) */
    float mean, std;
} stensor;

/* gpt-oss's biases are centred at 0 (qwen2's keep the norm-like init their seeded files
 * have). The sinks spread over +-4 so some outweigh a whole window of keys; the experts'
 * gate and up biases are wide enough that the activation's clamp at 7 is reached (about 2%
 * of the values), so the reference checks it. */
static int oai_init(stensor *t, const char *name) {
    if (strstr(name, "attn_sinks")) {
        t->mean = 0.0f;
        t->std = 2.0f;
    } else if (strstr(name, "_exps.bias") && !strstr(name, "down")) {
        t->mean = 0.0f;
        t->std = 3.0f;
    } else if (strstr(name, ".bias")) {
        t->mean = 0.0f;
        t->std = strstr(name, "gate_inp") ? 0.5f : 0.1f;
    } else {
        return 0;
    }
    return 1;
}

/* Gaussian parameters of a tensor's values. Gated DeltaNet tensors need their own: the
 * decay rates (ssm_a) must be negative (a positive one grows the state without bound) and
 * small, so the state remembers tens of tokens and long prompts test the recurrence. */
static void init_of(stensor *t, const char *name, const char *arch) {
    t->mean = t->kind == K_NORM ? 1.0f : 0.0f;
    t->std = t->kind == K_NORM ? 0.05f : WEIGHT_STD;
    if (!strcmp(arch, "gpt-oss") && oai_init(t, name)) return;
    if (!strcmp(arch, "gemma4") && strstr(name, "attn_") && strstr(name, "_norm.weight") &&
        !strstr(name, "attn_norm")) {
        /* gemma4 attends at scale 1 over RMS-normed q and k: norms near 1 make scores of
         * +-head size and a softmax that flips on rounding; learned models keep them small */
        t->mean = 0.3f;
        t->std = 0.03f;
        return;
    }
    if (strstr(name, "ssm_a") && !strstr(name, "ssm_alpha")) {
        t->mean = -0.06f;
        t->std = 0.015f;
    } else if (strstr(name, "ssm_dt.bias")) {
        t->mean = 0.0f;
        t->std = 0.5f;
    } else if (strstr(name, "gate_inp_shexp")) { /* a gate: sigmoid(w . x) near 1/2 */
        t->mean = 0.0f;
        t->std = 0.05f;
    } else if (strstr(name, "ssm_conv1d")) {
        t->mean = 0.0f;
        t->std = 0.5f;
    } else if (strstr(name, "layer_output_scale")) { /* far enough from 1 to matter */
        t->mean = 0.5f;
        t->std = 0.1f;
    }
}

/* gemma4's rope divisors, as the converter writes them for a "proportional" rope with a
 * quarter of each global head rotated: 1 for the first quarter of the pairs, 1e30 (no
 * rotation) for the rest. */
static void proportional_row(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] = i < n / 4 ? 1.0f : 1e30f;
}

/* Which of gemma4's optional tensors the file gets (layer il, -1 for the globals): k, its
 * norm and v on the layers with their own KV (no v on the global ones when k_eq_v), rope
 * divisors (the last layer is global), the per-layer embedding set, every output scale. */
static int gemma4_optional(const cpulm_synth_params *p, const char *name, int32_t il) {
    const cpulm_arch_desc *a = cpulm_arch_find(p->arch, strlen(p->arch));
    if (!a || !a->gemma4) return 0;
    const int own = il < p->hp.n_layer - p->hp.n_kv_shared;
    if (!strcmp(name, "attn_k.weight") || !strcmp(name, "attn_k_norm.weight")) return own;
    if (!strcmp(name, "attn_v.weight"))
        return own && !(p->k_eq_v && !cpulm_synth_gemma4_slides(p, il));
    if (!strncmp(name, "per_layer_", 10) || !strcmp(name, "inp_gate.weight") ||
        !strcmp(name, "proj.weight") || !strcmp(name, "post_norm.weight"))
        return p->hp.n_pl > 0;
    return !strcmp(name, "rope_freqs.weight") || !strcmp(name, "layer_output_scale.weight");
}

/* Which of qwen3next's alternative (optional) input projections the file gets. */
static int dnet_input(const cpulm_synth_params *p, const char *name) {
    if (!p->hp.ssm_heads) return 0; /* hybrid shapes only */
    if (!strcmp(name, "ssm_in.weight")) return p->hp.ssm_joint_in;
    if (!strcmp(name, "attn_qkv.weight") || !strcmp(name, "attn_gate.weight"))
        return !p->hp.ssm_joint_in;
    return 0;
}

/* Which optional tensors an encoder file gets: bert's separate projections with every
 * bias (and the classification head of a reranker), nomic-bert's fused projection. */
static int enc_optional(const cpulm_synth_params *p, const char *name) {
    const cpulm_arch_desc *a = cpulm_arch_find(p->arch, strlen(p->arch));
    if (!a || !a->encoder) return 0;
    if (!strcmp(name, "token_types.weight")) return 1;
    if (!strncmp(name, "cls.", 4)) return p->rerank;
    if (!a->global_tensors || strcmp(a->name, "bert")) return !strcmp(name, "attn_qkv.weight");
    return strncmp(name, "attn_qkv.", 9) != 0;
}

/* Encoder tensors' values: biases and the position / type rows centred at 0; the reranker's
 * head wide enough that documents get clearly different scores. */
static void enc_init(stensor *t, const char *name) {
    if (t->kind == K_MATRIX) /* about 1 / sqrt(n_embd): each layer moves every state */
        t->std = 0.08f;
    if (strstr(name, ".bias")) {
        t->mean = 0.0f;
        t->std = strstr(name, "norm") ? 0.05f : 0.02f;
    } else if (strstr(name, "position_embd") || strstr(name, "token_types")) {
        t->mean = 0.0f;
        t->std = 0.02f;
    }
    if (!strncmp(name, "cls", 3)) {
        t->mean = 0.0f;
        t->std = strstr(name, "output") ? 0.5f : 0.1f;
    }
}

/* Appends the present, non-optional tensors of list (output.weight unless tied) of layer il
 * (-1: the model's own). */
static int add_list(const cpulm_synth_params *p, const cpulm_tensor_desc *list, const char *prefix,
                    stensor *t, int n, bool recurrent, int32_t il) {
    cpulm_hparams hp; /* as the loader will read them back: the tensors' shapes */
    cpulm_synth_hparams(p, &hp);
    if (il >= 0 && p->hp.head_dim_swa > 0 && cpulm_synth_gemma4_slides(p, il))
        hp.head_dim = p->hp.head_dim_swa; /* gemma4's sliding layers: their own head size */
    if (il >= 0 && gemma4_arrays(p)) {    /* and each layer's FFN width and KV heads */
        hp.n_ff = cpulm_synth_gemma4_ff(p, il);
        hp.n_head_kv = cpulm_synth_gemma4_kv_heads(p, il);
    }
    for (const cpulm_tensor_desc *td = list; td->name; td++) {
        int is_output = strcmp(td->name, "output.weight") == 0;
        if (!cpulm_arch_tensor_present(td, hp.n_expert, recurrent)) continue;
        if (td->optional && !(is_output && !p->tied) && !dnet_input(p, td->name) &&
            !enc_optional(p, td->name) && !gemma4_optional(p, td->name, il))
            continue;
        snprintf(t[n].name, sizeof t[n].name, "%s%s", prefix, td->name);
        t[n].kind = td->kind == CPULM_TK_MATRIX ? K_MATRIX : K_NORM;
        /* MoE routers stay F32 in real files (llama.cpp's quantizer never quantizes them) */
        if (td->dims[1] == CPULM_DIM_EXPERTS) t[n].kind = K_ROUTER;
        init_of(&t[n], td->name, p->arch);
        if (strstr(p->arch, "bert")) enc_init(&t[n], td->name);
        t[n].n_dims = 1;
        for (int i = 0; i < 3; i++) {
            t[n].ne[i] = cpulm_arch_dim(&hp, (cpulm_dim)td->dims[i]);
            if (td->dims[i] != CPULM_DIM_1) t[n].n_dims = i + 1;
        }
        n++;
    }
    return n;
}

static int max_tensors(const cpulm_synth_params *p) {
    return 16 + 24 * p->hp.n_layer; /* more than any descriptor lists */
}

/* Fills t (capacity max_tensors) in file order; returns the count. */
static int tensor_list(const cpulm_synth_params *p, stensor *t) {
    const cpulm_arch_desc *a = cpulm_arch_find(p->arch, strlen(p->arch));
    int n = add_list(p, cpulm_arch_globals(a), "", t, 0, false, -1);
    char prefix[32];
    for (int il = 0; il < p->hp.n_layer; il++) {
        snprintf(prefix, sizeof prefix, "blk.%d.", il);
        bool recr = a->hybrid && cpulm_arch_layer_recurrent(il, p->hp.full_attn_interval);
        n = add_list(p, a->layer_tensors, prefix, t, n, recr, il);
    }
    return n;
}

/* MXFP4 goes where gpt-oss files have it, the FFN (expert) matrices; the other matrices
 * get Q8_0, as llama.cpp's MXFP4_MOE preset gives them. */
static cpulm_dtype tensor_type(const cpulm_synth_params *p, const stensor *t) {
    if (t->kind != K_MATRIX) return CPULM_DTYPE_F32;
    if (p->type == CPULM_DTYPE_MXFP4 && !strstr(t->name, "ffn_")) return CPULM_DTYPE_Q8_0;
    return p->type;
}

uint64_t cpulm_synth_weight_bytes(const cpulm_synth_params *p) {
    stensor *t = malloc(sizeof *t * (size_t)max_tensors(p));
    if (!t) return 0;
    int n = tensor_list(p, t);
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += cpulm_dtype_row_bytes(tensor_type(p, &t[i]), t[i].ne[0]) * (uint64_t)t[i].ne[1] *
                 (uint64_t)t[i].ne[2];
    free(t);
    return total;
}

cpulm_status cpulm_synth_quantized_size(const cpulm_synth_params *p,
                                        const cpulm_qplan_preset *preset, uint64_t *bytes,
                                        int64_t *n_params, cpulm_error *err) {
    const int cap = max_tensors(p);
    stensor *t = malloc(sizeof *t * (size_t)cap);
    cpulm_qplan_tensor *qt = malloc(sizeof *qt * (size_t)cap);
    cpulm_qplan_entry *e = malloc(sizeof *e * (size_t)cap);
    cpulm_status s = CPULM_ERR_NOMEM;
    if (!t || !qt || !e) goto done;
    const int n = tensor_list(p, t);
    for (int i = 0; i < n; i++) /* the F32 model the quantizer would start from */
        qt[i] = (cpulm_qplan_tensor){.name = t[i].name,
                                     .type = CPULM_DTYPE_F32,
                                     .n_dims = t[i].n_dims,
                                     .ne = {t[i].ne[0], t[i].ne[1], t[i].ne[2], 1}};
    cpulm_qplan_model qm = {.n_layer = p->hp.n_layer,
                            .n_head = p->hp.n_head,
                            .n_head_kv = p->hp.n_head_kv,
                            .n_expert = p->hp.n_expert};
    snprintf(qm.arch, sizeof qm.arch, "%s", p->arch);
    const cpulm_qplan_params qp = cpulm_qplan_default_params(preset);
    if ((s = cpulm_qplan_build(&qp, &qm, qt, n, e, err)) != CPULM_OK) goto done;
    *bytes = 0;
    *n_params = 0;
    for (int i = 0; i < n; i++) {
        const stensor *x = &t[e[i].src];
        const uint32_t type = e[i].convert ? e[i].type : CPULM_DTYPE_F32;
        *bytes += cpulm_dtype_row_bytes((cpulm_dtype)type, x->ne[0]) * (uint64_t)x->ne[1] *
                  (uint64_t)x->ne[2];
        *n_params += x->ne[0] * x->ne[1] * x->ne[2];
    }
done:
    free(t);
    free(qt);
    free(e);
    return s == CPULM_ERR_NOMEM ? cpulm_errf(err, s, "out of memory") : s;
}

/* ---- random rows ---- */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Near-normal numbers: the sum of four 16-bit uniforms (Irwin-Hall, std 1 after scaling)
 * costs one 64-bit draw per number; the tails are cut at +-3.5 sigma, which is harmless
 * here. */
static void gaussian_row(float *x, int64_t n, uint64_t seed, float mean, float std) {
    uint64_t s = seed;
    const float k = std / 37837.23f; /* 65536 * sqrt(4 / 12) */
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = splitmix(&s);
        int32_t sum = (int32_t)(r & 0xFFFF) + (int32_t)((r >> 16) & 0xFFFF) +
                      (int32_t)((r >> 32) & 0xFFFF) + (int32_t)(r >> 48) - 2 * 65535;
        x[i] = mean + (float)sum * k;
    }
}

typedef struct fill_job {
    const cpulm_synth_params *p;
    const stensor *t;
    int64_t i_tensor;
    uint8_t *dst;
    int ith, nth;
    cpulm_status st;
} fill_job;

static void *fill_rows(void *arg) {
    fill_job *j = arg;
    const stensor *t = j->t;
    cpulm_dtype type = tensor_type(j->p, t);
    uint64_t rb = cpulm_dtype_row_bytes(type, t->ne[0]);
    const int64_t rows = t->ne[1] * t->ne[2];
    int64_t r0 = rows * j->ith / j->nth, r1 = rows * (j->ith + 1) / j->nth;
    float *row = malloc(sizeof(float) * (size_t)t->ne[0]);
    if (!row) {
        j->st = CPULM_ERR_NOMEM;
        return NULL;
    }
    uint64_t base = j->p->seed * 0xD1B54A32D192ED03ull ^ ((uint64_t)j->i_tensor << 40);
    for (int64_t r = r0; r < r1; r++) {
        uint64_t s = base ^ (uint64_t)r;
        splitmix(&s); /* decorrelate neighbouring rows */
        gaussian_row(row, t->ne[0], s, t->mean, t->std);
        if (!strcmp(t->name, "rope_freqs.weight")) proportional_row(row, t->ne[0]);
        cpulm_quantize_row_ref(type, row, j->dst + (size_t)r * rb, t->ne[0]);
    }
    free(row);
    j->st = CPULM_OK;
    return NULL;
}

typedef struct fill_ctx {
    const cpulm_synth_params *p;
    const stensor *t;
    int32_t n;                      /* tensors in all */
    uint64_t bytes_done, bytes_all; /* for p->progress */
} fill_ctx;

enum { MAX_THREADS = 64 };

static cpulm_status fill_tensor(int64_t i, void *dst, uint64_t n_bytes, void *user) {
    fill_ctx *fc = user;
    int nth = fc->p->n_threads < MAX_THREADS ? fc->p->n_threads : MAX_THREADS;
    if (fc->t[i].ne[1] * fc->t[i].ne[2] < nth) nth = 1;
    fill_job jobs[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    int started = 1;
    for (int k = 0; k < nth; k++)
        jobs[k] = (fill_job){.p = fc->p,
                             .t = &fc->t[i],
                             .i_tensor = i,
                             .dst = dst,
                             .ith = k,
                             .nth = nth,
                             .st = CPULM_ERR_NOMEM};
    for (int k = 1; k < nth; k++, started++)
        if (pthread_create(&th[k], NULL, fill_rows, &jobs[k]) != 0) break;
    fill_rows(&jobs[0]);
    for (int k = started; k < nth; k++)
        fill_rows(&jobs[k]); /* threads that failed to start */
    for (int k = 1; k < started; k++)
        pthread_join(th[k], NULL);
    for (int k = 0; k < nth; k++)
        if (jobs[k].st != CPULM_OK) return jobs[k].st;
    fc->bytes_done += n_bytes;
    if (fc->p->progress)
        fc->p->progress(fc->p->progress_user, (int32_t)i + 1, fc->n, fc->bytes_done, fc->bytes_all);
    return CPULM_OK;
}

/* ---- vocabulary ---- */

/* Filler piece k: the SPM word marker U+2581 alone for k = 0 (so spaces are one token and
 * decode to ' '), then bijective base-26 letters ("a".."z", "aa", ...), with the marker in
 * front for odd k, so real text finds multi-letter pieces to merge into. */
static void filler_piece(int32_t k, char *out) {
    if (k == 0) {
        memcpy(out, "\xE2\x96\x81", 4);
        return;
    }
    k--;
    char letters[16];
    int n = 0;
    for (int32_t v = k / 2 + 1; v > 0 && n < 15; v = (v - 1) / 26)
        letters[n++] = (char)('a' + (v - 1) % 26);
    int o = 0;
    if (k % 2 == 0) {
        memcpy(out, "\xE2\x96\x81", 3);
        o = 3;
    }
    while (n > 0)
        out[o++] = letters[--n];
    out[o] = 0;
}

/* WordPiece vocabulary of an encoder file, in llama.cpp's converted form (word-initial
 * pieces carry U+2581, continuation pieces are bare): [PAD] [UNK] [CLS] [SEP] [MASK], then
 * every printable ASCII character both ways, then common English words and two-letter
 * pieces in a fixed order, so any ASCII text tokenizes (into several pieces a word). */
static const char *const wpm_words[] = {
    "the",    "of",       "and",   "to",    "in",      "is",     "it",     "that",   "for",
    "on",     "with",     "as",    "was",   "are",     "be",     "by",     "this",   "at",
    "from",   "or",       "an",    "what",  "how",     "why",    "who",    "which",  "can",
    "cat",    "dog",      "sat",   "mat",   "capital", "france", "paris",  "berlin", "germany",
    "city",   "river",    "water", "fish",  "bird",    "tree",   "sky",    "blue",   "red",
    "green",  "house",    "car",   "train", "food",    "eat",    "run",    "play",   "music",
    "book",   "read",     "write", "code",  "data",    "model",  "search", "query",  "document",
    "answer", "question", "sun",   "moon",  "star",    "rain",   "ing",    "ed",     "er",
    "es",     "ly",       "tion",  "th",    "he",      "in",     "re",     "on",     "at",
    "en",     "an",       "nd"};

/* Candidate piece i (and its token type), in order; the writer skips repeats. */
static int wpm_piece(int32_t i, char *s) {
    static const char *const special[5] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    const int32_t n_words = (int32_t)(sizeof wpm_words / sizeof wpm_words[0]);
    const char *mark = "\xE2\x96\x81";
    if (i < 5) return snprintf(s, 24, "%s", special[i]), 3;
    i -= 5;
    if (i < 2 * 94) /* '!' .. '~', word-initial then bare */
        return snprintf(s, 24, "%s%c", i % 2 ? "" : mark, '!' + i / 2), 1;
    i -= 2 * 94;
    if (i < 2 * n_words) return snprintf(s, 24, "%s%s", i % 2 ? "" : mark, wpm_words[i / 2]), 1;
    i -= 2 * n_words;
    if (i < 2 * 26 * 26) { /* two-letter pieces */
        const int pair = i / 2;
        return snprintf(s, 24, "%s%c%c", i % 2 ? "" : mark, 'a' + pair / 26, 'a' + pair % 26), 1;
    }
    return snprintf(s, 24, "[unused%d]", i - 2 * 26 * 26), 5;
}

static cpulm_status set_vocab_wpm(cpulm_gguf_writer *w, const cpulm_synth_params *p) {
    const int32_t V = p->hp.n_vocab;
    char *text = malloc((size_t)V * 24);
    const char **strs = malloc(sizeof *strs * (size_t)V);
    int32_t *types = malloc(sizeof *types * (size_t)V);
    cpulm_status st = CPULM_ERR_NOMEM;
    if (!text || !strs || !types) goto out;
    for (int32_t i = 0, k = 0; i < V; k++) { /* skip a candidate already taken */
        char *t = text + (size_t)i * 24;
        const int type = wpm_piece(k, t);
        int dup = 0;
        for (int32_t j = 0; j < i && !dup; j++)
            dup = !strcmp(strs[j], t);
        if (dup) continue;
        types[i] = type;
        strs[i++] = t;
    }
    if ((st = cpulm_gguf_writer_set_str(w, "tokenizer.ggml.model", "bert")) ||
        (st = cpulm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, (uint64_t)V)) ||
        (st = cpulm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CPULM_GGUF_I32, types,
                                        (uint64_t)V)) ||
        (st = cpulm_gguf_writer_set_u32(w, "tokenizer.ggml.token_type_count", SYNTH_N_TYPES)) ||
        (st = cpulm_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 0)) ||
        (st = cpulm_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 1)) ||
        (st = cpulm_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 2)) ||
        (st = cpulm_gguf_writer_set_u32(w, "tokenizer.ggml.seperator_token_id", 3)) ||
        (st = cpulm_gguf_writer_set_u32(w, "tokenizer.ggml.mask_token_id", 4)))
        goto out;
    st = CPULM_OK;
out:
    free(text);
    free(strs);
    free(types);
    return st;
}

/* ---- Gemma 4's vocabulary (tokenizer.ggml.model "gemma4") ---- */

/* As the converter writes a Gemma 4 vocabulary: scores of -1000, the special tokens typed
 * control (3), the markers the chat parser must see typed user-defined (4, they render), the
 * 256 <0xXX> byte tokens (6), then normal text pieces with U+2581 for a space, every piece of
 * two or more characters made by a merge of its text without the last character and that
 * character, ranked in vocabulary order (newline runs have no merge: llama.cpp takes a run
 * that is a token whole). */
#define G4_LEN 24 /* bytes of the longest piece + 1 */

static const struct {
    const char *text;
    int type;
} g4_special[] = {{"<pad>", 3},
                  {"<eos>", 3},
                  {"<bos>", 3},
                  {"<unk>", 3},
                  {"<mask>", 3},
                  {"<|turn>", 3},
                  {"<turn|>", 3},
                  {"<|think|>", 3},
                  {"<|channel>", 4},
                  {"<channel|>", 4},
                  {"<|tool_call>", 4},
                  {"<tool_call|>", 4},
                  {"<|tool_response>", 4},
                  {"<tool_response|>", 4},
                  {"<|\"|>", 4},
                  {"<|tool>", 3},
                  {"<tool|>", 3},
                  {"<|image>", 3},
                  {"<image|>", 3},
                  {"<unused0>", 3},
                  {"<unused1>", 3}};
enum { G4_PAD = 0, G4_EOS = 1, G4_BOS = 2, G4_UNK = 3 };

/* Pieces without a merge, then (after the printable ASCII characters) pieces with one. */
static const char *const g4_plain[] = {"</s>",
                                       "\n",
                                       "\n\n",
                                       "\n\n\n",
                                       "\t",
                                       "\xE2\x96\x81", /* U+2581 */
                                       "\xC3\xA9",
                                       "\xC3\xA8",
                                       "\xC3\xAA",
                                       "\xC3\xA0",
                                       "\xC3\xA7",
                                       "\xC3\xB1",
                                       "\xC3\xBC",
                                       "\xC3\xB6",
                                       "\xC3\x9F", /* é è ê à ç ñ ü ö ß */
                                       "\xE2\x80\x99",
                                       "\xE2\x80\x9C",
                                       "\xE2\x80\x9D",
                                       "\xE2\x80\x94",
                                       "\xE2\x80\xA6", /* ’“”—… */
                                       "\xE4\xB8\xAD",
                                       "\xE6\x96\x87",
                                       "\xE4\xBD\xA0",
                                       "\xE5\xA5\xBD",
                                       "\xE4\xB8\x96",
                                       "\xE7\x95\x8C",
                                       "\xE6\x97\xA5",
                                       "\xE6\x9C\xAC",      /* 中文你好世界日本 */
                                       "\xF0\x9F\x99\x82"}; /* U+1F642 */
static const char *const g4_merged[] = {"\t\t",
                                        "\xE2\x96\x81\xE2\x96\x81",
                                        "\xE2\x96\x81\xE2\x96\x81\xE2\x96\x81",
                                        "\xE2\x96\x81\xE2\x96\x81\xE2\x96\x81\xE2\x96\x81",
                                        "\xE4\xB8\xAD\xE6\x96\x87",  /* 中文 */
                                        "\xE4\xBD\xA0\xE5\xA5\xBD"}; /* 你好 */

#define N_OF(a) ((int32_t)(sizeof(a) / sizeof((a)[0])))

static int32_t g4_n_fixed(void) {
    return N_OF(g4_special) + SYNTH_N_BYTE + N_OF(g4_plain) + 94 + N_OF(g4_merged);
}

typedef struct g4_vocab {
    char *text, *merge_text; /* [V][G4_LEN], [V][2 * G4_LEN] */
    const char **strs, **merges;
    float *scores;
    int32_t *types;
    int32_t n, n_merges;
} g4_vocab;

static void g4_add(g4_vocab *b, const char *s, int type, int merged) {
    char *t = b->text + (size_t)b->n * G4_LEN;
    snprintf(t, G4_LEN, "%s", s);
    b->strs[b->n] = t;
    b->scores[b->n] = -1000.0f;
    b->types[b->n++] = type;
    if (!merged) return;
    size_t last = strlen(t);
    do /* the start of the last UTF-8 character */
        last--;
    while (last > 0 && ((unsigned char)t[last] & 0xC0) == 0x80);
    char *m = b->merge_text + (size_t)b->n_merges * 2 * G4_LEN;
    snprintf(m, 2 * G4_LEN, "%.*s %s", (int)last, t, t + last);
    b->merges[b->n_merges++] = m;
}

/* The pieces in vocabulary order; the generated ones are synth's filler words (filler_piece)
 * without the bare letters, which are pieces already. */
static void g4_fill(g4_vocab *b, int32_t V) {
    char s[G4_LEN];
    for (int32_t i = 0; i < N_OF(g4_special); i++)
        g4_add(b, g4_special[i].text, g4_special[i].type, 0);
    for (int c = 0; c < SYNTH_N_BYTE; c++) {
        snprintf(s, sizeof s, "<0x%02X>", c);
        g4_add(b, s, 6, 0);
    }
    for (int32_t i = 0; i < N_OF(g4_plain); i++)
        g4_add(b, g4_plain[i], 1, 0);
    for (char c = '!'; c <= '~'; c++)
        g4_add(b, (char[]){c, 0}, 1, 0);
    for (int32_t i = 0; i < N_OF(g4_merged); i++)
        g4_add(b, g4_merged[i], 1, 1);
    for (int32_t k = 1; b->n < V; k++) {
        filler_piece(k, s);
        if (s[1]) g4_add(b, s, 1, 1);
    }
}

/* The chat template of the files: Gemma 4's turns, the generation prompt with the empty
 * thought channel of thinking off (src/chat's gemma4 built-in renders the same). */
static const char g4_template[] =
    "{{- bos_token -}}{%- for m in messages -%}"
    "{{- '<|turn>' + ('model' if m['role'] == 'assistant' else m['role']) + '\\n' + "
    "(m['content'] or '') | trim + '<turn|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|turn>model\\n<|channel>thought\\n<channel|>' -}}"
    "{%- endif -%}";

static cpulm_status set_vocab_gemma4(cpulm_gguf_writer *w, const cpulm_synth_params *p) {
    const int32_t V = p->hp.n_vocab;
    g4_vocab b = {malloc((size_t)V * G4_LEN),
                  malloc((size_t)V * 2 * G4_LEN),
                  malloc(sizeof(char *) * (size_t)V),
                  malloc(sizeof(char *) * (size_t)V),
                  malloc(sizeof(float) * (size_t)V),
                  malloc(sizeof(int32_t) * (size_t)V),
                  0,
                  0};
    cpulm_status st = CPULM_ERR_NOMEM;
    if (!b.text || !b.merge_text || !b.strs || !b.merges || !b.scores || !b.types) goto out;
    g4_fill(&b, V);
    if ((st = cpulm_gguf_writer_set_str(w, "tokenizer.ggml.model", "gemma4")) ||
        (st = cpulm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", b.strs, (uint64_t)V)) ||
        (st = cpulm_gguf_writer_set_arr(w, "tokenizer.ggml.scores", CPULM_GGUF_F32, b.scores,
                                        (uint64_t)V)) ||
        (st = cpulm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CPULM_GGUF_I32, b.types,
                                        (uint64_t)V)) ||
        (st = cpulm_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", b.merges,
                                            (uint64_t)b.n_merges)) ||
        (st = cpulm_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", G4_BOS)) ||
        (st = cpulm_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", G4_EOS)) ||
        (st = cpulm_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", G4_UNK)) ||
        (st = cpulm_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", G4_PAD)) ||
        (st = cpulm_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true)) ||
        (st = cpulm_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false)) ||
        (st = cpulm_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", false)) ||
        (st = cpulm_gguf_writer_set_str(w, "tokenizer.chat_template", g4_template)))
        goto out;
    st = CPULM_OK;
out:
    free(b.text);
    free(b.merge_text);
    free(b.strs);
    free(b.merges);
    free(b.scores);
    free(b.types);
    return st;
}

static cpulm_status set_vocab(cpulm_gguf_writer *w, const cpulm_synth_params *p) {
    if (strstr(p->arch, "bert")) return set_vocab_wpm(w, p);
    if (!strcmp(p->arch, "gemma4")) return set_vocab_gemma4(w, p);
    int32_t V = p->hp.n_vocab;
    char *text = malloc((size_t)V * 24);
    const char **strs = malloc(sizeof *strs * (size_t)V);
    float *scores = malloc(sizeof *scores * (size_t)V);
    int32_t *types = malloc(sizeof *types * (size_t)V);
    cpulm_status st = CPULM_ERR_NOMEM;
    if (!text || !strs || !scores || !types) goto out;
    static const char *special[SYNTH_N_SPECIAL] = {"<unk>", "<s>", "</s>"};
    for (int32_t i = 0; i < V; i++) {
        char *s = text + (size_t)i * 24;
        if (i < SYNTH_N_SPECIAL)
            snprintf(s, 24, "%s", special[i]);
        else if (i < SYNTH_N_SPECIAL + SYNTH_N_BYTE)
            snprintf(s, 24, "<0x%02X>", i - SYNTH_N_SPECIAL);
        else
            filler_piece(i - SYNTH_N_SPECIAL - SYNTH_N_BYTE, s);
        strs[i] = s;
        scores[i] = i < SYNTH_N_SPECIAL + SYNTH_N_BYTE ? 0.0f : -(float)i;
        types[i] = i == 0                               ? 2
                   : i < SYNTH_N_SPECIAL                ? 3
                   : i < SYNTH_N_SPECIAL + SYNTH_N_BYTE ? 6
                                                        : 1;
    }
    static const char *const fim[3] = {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"};
    for (int k = 0; p->fim && k < 3; k++) { /* control tokens, as Qwen's vocabularies have */
        strs[V - 3 + k] = fim[k];
        types[V - 3 + k] = 3;
    }
    if ((st = cpulm_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama")) ||
        (st = cpulm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, (uint64_t)V)) ||
        (st = cpulm_gguf_writer_set_arr(w, "tokenizer.ggml.scores", CPULM_GGUF_F32, scores,
                                        (uint64_t)V)) ||
        (st = cpulm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CPULM_GGUF_I32, types,
                                        (uint64_t)V)) ||
        (st = cpulm_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0)) ||
        (st = cpulm_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1)) ||
        (st = cpulm_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2)) ||
        (st = cpulm_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true)))
        goto out;
    st = CPULM_OK;
out:
    free(text);
    free(strs);
    free(scores);
    free(types);
    return st;
}

static cpulm_status set_u32(cpulm_gguf_writer *w, const cpulm_synth_params *p, const char *key,
                            int32_t v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", p->arch, key);
    return cpulm_gguf_writer_set_u32(w, k, (uint32_t)v);
}

static cpulm_status set_f32(cpulm_gguf_writer *w, const cpulm_synth_params *p, const char *key,
                            float v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", p->arch, key);
    return cpulm_gguf_writer_set_f32(w, k, v);
}

/* The Gated DeltaNet keys, and the rope sections: the rotated pairs split in three text
 * sections as the real files do (the fourth, never used by text, empty). */
static cpulm_status set_hybrid(cpulm_gguf_writer *w, const cpulm_synth_params *p) {
    const cpulm_arch_desc *a = cpulm_arch_find(p->arch, strlen(p->arch));
    cpulm_status st;
    if (!a->hybrid) return CPULM_OK;
    int32_t half = synth_n_rot(p) / 2, third = (half + 2) / 3;
    int32_t sec[4] = {third, third, half - 2 * third, 0};
    char k[128];
    snprintf(k, sizeof k, "%s.rope.dimension_sections", p->arch);
    if ((st = set_u32(w, p, "ssm.conv_kernel", p->hp.ssm_conv)) ||
        (st = set_u32(w, p, "ssm.inner_size", p->hp.ssm_inner)) ||
        (st = set_u32(w, p, "ssm.state_size", p->hp.ssm_state)) ||
        (st = set_u32(w, p, "ssm.group_count", p->hp.ssm_groups)) ||
        (st = set_u32(w, p, "ssm.time_step_rank", p->hp.ssm_heads)) ||
        (st = set_u32(w, p, "full_attention_interval", p->hp.full_attn_interval)))
        return st;
    if (a->mrope && (st = cpulm_gguf_writer_set_arr(w, k, CPULM_GGUF_I32, sec, 4))) return st;
    if (p->hp.n_ff_shexp > 0 &&
        (st = set_u32(w, p, "expert_shared_feed_forward_length", p->hp.n_ff_shexp)))
        return st;
    return CPULM_OK;
}

/* Sliding-window keys (model/swa.h), and the linear rope scaling of the global layers. */
static cpulm_status set_swa(cpulm_gguf_writer *w, const cpulm_synth_params *p) {
    cpulm_status st;
    if (p->hp.n_swa > 0 && (st = set_u32(w, p, "attention.sliding_window", p->hp.n_swa))) return st;
    if (p->swa_period > 0 && !p->hp.head_dim_swa &&
        (st = set_u32(w, p, "attention.sliding_window_pattern", p->swa_period)))
        return st;
    if (p->hp.final_softcap > 0 &&
        (st = set_f32(w, p, "final_logit_softcapping", p->hp.final_softcap)))
        return st;
    if (p->rope_linear > 0) {
        char key[96];
        snprintf(key, sizeof key, "%s.rope.scaling.type", p->arch);
        if ((st = cpulm_gguf_writer_set_str(w, key, "linear")) ||
            (st = set_f32(w, p, "rope.scaling.factor", p->rope_linear)))
            return st;
    }
    return CPULM_OK;
}

/* A key with one value for every layer, or with gemma4's per-layer arrays one per layer
 * (an INT32 array, as the converter writes Python integers). */
static cpulm_status set_layer_u32(cpulm_gguf_writer *w, const cpulm_synth_params *p,
                                  const char *key, int32_t all,
                                  int32_t (*of_layer)(const cpulm_synth_params *, int32_t)) {
    if (!gemma4_arrays(p)) return set_u32(w, p, key, all);
    int32_t *v = malloc(sizeof(int32_t) * (size_t)p->hp.n_layer);
    if (!v) return CPULM_ERR_NOMEM;
    for (int32_t il = 0; il < p->hp.n_layer; il++)
        v[il] = of_layer(p, il);
    char k[128];
    snprintf(k, sizeof k, "%s.%s", p->arch, key);
    cpulm_status st = cpulm_gguf_writer_set_arr(w, k, CPULM_GGUF_I32, v, (uint64_t)p->hp.n_layer);
    free(v);
    return st;
}

/* Gemma 4's keys: the sliding layers' head and rotation, their rope base, the per-layer
 * embedding width, the shared tail and the window pattern as one boolean per layer (as the
 * converter writes it). */
static cpulm_status set_gemma4(cpulm_gguf_writer *w, const cpulm_synth_params *p) {
    const cpulm_arch_desc *a = cpulm_arch_find(p->arch, strlen(p->arch));
    if (!a->gemma4) return CPULM_OK;
    const int32_t hs = p->hp.head_dim_swa, rs = p->hp.n_rot_swa > 0 ? p->hp.n_rot_swa : hs;
    uint8_t *pat = malloc((size_t)p->hp.n_layer);
    if (!pat) return CPULM_ERR_NOMEM;
    for (int32_t il = 0; il < p->hp.n_layer; il++)
        pat[il] = cpulm_synth_gemma4_slides(p, il);
    char k[128];
    snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", p->arch);
    cpulm_status st =
        cpulm_gguf_writer_set_arr(w, k, CPULM_GGUF_BOOL, pat, (uint64_t)p->hp.n_layer);
    free(pat);
    if (st || (st = set_u32(w, p, "attention.key_length_swa", hs)) ||
        (st = set_u32(w, p, "attention.value_length_swa", hs)) ||
        (st = set_u32(w, p, "rope.dimension_count_swa", rs)) ||
        (st = set_f32(w, p, "rope.freq_base_swa",
                      p->hp.rope_base_swa > 0 ? p->hp.rope_base_swa : 10000.0f)) ||
        (st = set_u32(w, p, "embedding_length_per_layer_input", p->hp.n_pl)) ||
        (st = set_u32(w, p, "attention.shared_kv_layers", p->hp.n_kv_shared)))
        return st;
    return CPULM_OK;
}

static cpulm_status set_hparams(cpulm_gguf_writer *w, const cpulm_synth_params *p) {
    cpulm_status st;
    int32_t hd = synth_head_dim(p);
    if ((st = cpulm_gguf_writer_set_str(w, "general.architecture", p->arch)) ||
        (st = cpulm_gguf_writer_set_str(w, "general.name", p->name ? p->name : "synth")) ||
        (st = set_u32(w, p, "context_length", p->hp.n_ctx_train)) ||
        (st = set_u32(w, p, "embedding_length", p->hp.n_embd)) ||
        (st = set_u32(w, p, "block_count", p->hp.n_layer)) ||
        (st = set_layer_u32(w, p, "feed_forward_length", p->hp.n_ff, cpulm_synth_gemma4_ff)) ||
        (st = set_u32(w, p, "attention.head_count", p->hp.n_head)) ||
        (st = set_layer_u32(w, p, "attention.head_count_kv", p->hp.n_head_kv,
                            cpulm_synth_gemma4_kv_heads)) ||
        (st = set_u32(w, p, "rope.dimension_count", synth_n_rot(p))) ||
        (st = set_f32(w, p, "rope.freq_base", p->hp.rope_base)) ||
        (st = set_f32(w, p,
                      strstr(p->arch, "bert") ? "attention.layer_norm_epsilon"
                                              : "attention.layer_norm_rms_epsilon",
                      p->hp.norm_eps)) ||
        (st = set_u32(w, p, "vocab_size", p->hp.n_vocab)))
        return st;
    const cpulm_arch_desc *a = cpulm_arch_find(p->arch, strlen(p->arch));
    if (a->encoder) { /* bidirectional; mean pooling, or rank with a classification head */
        char k[128];
        snprintf(k, sizeof k, "%s.attention.causal", p->arch);
        if ((st = cpulm_gguf_writer_set_bool(w, k, false)) ||
            (st = set_u32(w, p, "pooling_type",
                          p->rerank ? CPULM_POOLING_RANK : CPULM_POOLING_MEAN)))
            return st;
    }
    if (p->hp.head_dim && ((st = set_u32(w, p, "attention.key_length", hd)) ||
                           (st = set_u32(w, p, "attention.value_length", hd))))
        return st;
    if (p->hp.n_expert > 0 && ((st = set_u32(w, p, "expert_count", p->hp.n_expert)) ||
                               (st = set_u32(w, p, "expert_used_count", p->hp.n_expert_used)) ||
                               (st = set_u32(w, p, "expert_feed_forward_length", p->hp.n_ff_exp))))
        return st;
    if (p->alignment && (st = cpulm_gguf_writer_set_u32(w, "general.alignment", p->alignment)))
        return st; /* small alignments make misaligned files for the loader's tests */
    if ((st = set_swa(w, p)) != CPULM_OK || (st = set_gemma4(w, p)) != CPULM_OK) return st;
    if (p->yarn_factor > 0) {
        char key[96];
        snprintf(key, sizeof key, "%s.rope.scaling.type", p->arch);
        if ((st = cpulm_gguf_writer_set_str(w, key, "yarn")) ||
            (st = set_f32(w, p, "rope.scaling.factor", p->yarn_factor)) ||
            (st = set_u32(w, p, "rope.scaling.original_context_length",
                          p->yarn_orig_ctx ? p->yarn_orig_ctx : p->hp.n_ctx_train)))
            return st;
    }
    return set_hybrid(w, p);
}

cpulm_status cpulm_synth_write(const char *path, const cpulm_synth_params *p, cpulm_error *err) {
    cpulm_status st = cpulm_synth_check(p, err);
    if (st != CPULM_OK) return st;
    stensor *t = malloc(sizeof *t * (size_t)max_tensors(p));
    cpulm_gguf_writer *w = cpulm_gguf_writer_new();
    if (!t || !w) {
        st = cpulm_errf(err, CPULM_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((st = set_hparams(w, p)) != CPULM_OK || (st = set_vocab(w, p)) != CPULM_OK) {
        cpulm_errf(err, st, "building the metadata failed");
        goto out;
    }
    int n = tensor_list(p, t);
    for (int i = 0; i < n; i++) {
        int64_t ne[3] = {t[i].ne[0], t[i].ne[1], t[i].ne[2]};
        st = cpulm_gguf_writer_add_tensor(w, t[i].name, tensor_type(p, &t[i]), t[i].n_dims, ne,
                                          NULL);
        if (st != CPULM_OK) {
            cpulm_errf(err, st, "tensor '%s' rejected", t[i].name);
            goto out;
        }
    }
    fill_ctx fc = {.p = p, .t = t, .n = n, .bytes_all = cpulm_synth_weight_bytes(p)};
    st = cpulm_gguf_writer_write_file(w, path, fill_tensor, &fc, err);
out:
    cpulm_gguf_writer_free(w);
    free(t);
    return st;
}
