/* arch.c: the table of supported architectures. */
#include "arch.h"

#include <string.h>

static const cpulm_arch_desc archs[] = {
    {.name = "llama", .rope = CPULM_ROPE_NORM, .qkv_bias = false, .default_rope_base = 10000.0f,
     .default_norm_eps = 1e-5f},
    {.name = "qwen2", .rope = CPULM_ROPE_NEOX, .qkv_bias = true, .default_rope_base = 10000.0f,
     .default_norm_eps = 1e-6f},
};

const cpulm_arch_desc *cpulm_arch_find(const char *name, unsigned long len) {
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (strlen(archs[i].name) == len && memcmp(archs[i].name, name, len) == 0) return &archs[i];
    return NULL;
}

const char *cpulm_arch_supported(void) {
    return "llama, qwen2";
}
