/* arch.h: per-architecture descriptors as data. Adding an architecture is a new row in
 * arch.c: its GGUF name, rope style, which optional tensors it has, and defaults.
 * Nothing here touches tensors or files. */
#ifndef CPULM_MODEL_ARCH_H
#define CPULM_MODEL_ARCH_H

#include <stdbool.h>

typedef enum cpulm_rope_style {
    CPULM_ROPE_NORM = 0, /* rotate adjacent pairs (x[2i], x[2i+1]): llama */
    CPULM_ROPE_NEOX = 2, /* rotate halves (x[i], x[i + n_rot/2]): qwen2, gpt-neox */
} cpulm_rope_style;

typedef struct cpulm_arch_desc {
    const char *name;         /* general.architecture value, also the metadata key prefix */
    cpulm_rope_style rope;
    bool qkv_bias;            /* attn_{q,k,v}.bias present (required) */
    float default_rope_base;  /* when <arch>.rope.freq_base is absent */
    float default_norm_eps;   /* when <arch>.attention.layer_norm_rms_epsilon is absent */
} cpulm_arch_desc;

/* NULL when the architecture is not supported. */
const cpulm_arch_desc *cpulm_arch_find(const char *name, unsigned long len);
/* Comma-separated list of supported names, for error messages. */
const char *cpulm_arch_supported(void);

#endif
