/* describe.c: cpulm_kernel_describe, the kernel part of `cpulm info --cpu`: CPU features,
 * the chosen level, and which level provides each table entry (see describe.h).
 * It asks model/repack.h whether a type is repacked at load, the one place kernels/ looks
 * up at the model layer: the answer must come from the rule the loader applies, not a copy. */
#include "kernels/describe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpulm.h"
#include "model/repack.h"

/* Every function-pointer type converts to and from this one; comparisons go through it. */
typedef void (*any_fn)(void);

static any_fn entry(const cpulm_kernels *k, cpulm_kernels_entry e, cpulm_dtype t) {
    switch (e) {
    case CPULM_KENTRY_VEC_DOT: return (any_fn)k->vec_dot[t];
    case CPULM_KENTRY_FROM_FLOAT: return (any_fn)k->from_float[t];
    case CPULM_KENTRY_GEMM_X16: return (any_fn)k->gemm_x16[t];
    case CPULM_KENTRY_RMS_NORM: return (any_fn)k->rms_norm;
    case CPULM_KENTRY_SWIGLU: return (any_fn)k->swiglu;
    case CPULM_KENTRY_SOFTMAX: return (any_fn)k->softmax;
    case CPULM_KENTRY_AXPY: return (any_fn)k->axpy;
    case CPULM_KENTRY_DOT_F32: return (any_fn)k->dot_f32;
    case CPULM_KENTRY_SCALE_F16: return (any_fn)k->scale_f16;
    case CPULM_KENTRY_MAD_F16: return (any_fn)k->mad_f16;
    case CPULM_KENTRY_ATTN_F16: return (any_fn)k->attn_f16;
    default: return NULL;
    }
}

const char *cpulm_kernels_provider(const cpulm_kernels *const *levels, int n,
                                   const cpulm_kernels *final, cpulm_kernels_entry e,
                                   cpulm_dtype type) {
    const any_fn want = entry(final, e, type);
    if (!want) return "-";
    for (int i = 0; i < n; i++)
        if (entry(levels[i], e, type) == want) return levels[i]->name;
    return "?";
}

/* The weight types cpulm computes with, in the order llama.cpp users think of them. */
static const cpulm_dtype weight_types[] = {
    CPULM_DTYPE_F32,  CPULM_DTYPE_F16,  CPULM_DTYPE_BF16, CPULM_DTYPE_Q8_0,
    CPULM_DTYPE_Q4_0, CPULM_DTYPE_Q4_1, CPULM_DTYPE_Q5_0, CPULM_DTYPE_Q5_1,
    CPULM_DTYPE_Q4_K, CPULM_DTYPE_Q5_K, CPULM_DTYPE_Q6_K,
};

/* Would the loader repack a 16-row matrix of type t on final? (model/repack.c's rule) */
static const char *repacked(const cpulm_kernels *final, cpulm_dtype t) {
    static const uint8_t any_byte;
    const cpulm_tensor probe = {.data = &any_byte, .type = t, .ne = {256, CPULM_PACK_ROWS}};
    if (!cpulm_repack_supported(final, &probe)) return "no";
    return getenv("CPULM_NO_REPACK") ? "no (CPULM_NO_REPACK)" : "yes";
}

static void put_ops(cpulm_buf *b, const cpulm_kernels *const *lv, int n,
                    const cpulm_kernels *final, const char *label, const char *const *names,
                    const cpulm_kernels_entry *es, int n_es) {
    cpulm_buf_printf(b, "%-15s", label);
    for (int i = 0; i < n_es; i++)
        cpulm_buf_printf(b, "%s%s %s", i ? ", " : "", names[i],
                         cpulm_kernels_provider(lv, n, final, es[i], CPULM_DTYPE_F32));
    cpulm_buf_puts(b, "\n");
}

void cpulm_kernels_describe_table(cpulm_buf *b, const cpulm_kernels *const *lv, int n,
                                  const cpulm_kernels *final) {
    cpulm_buf_printf(b, "%-6s %-12s %-18s %-12s %s\n", "type", "vec_dot", "activations",
                     "gemm_x16", "repacked at load");
    for (size_t i = 0; i < sizeof weight_types / sizeof weight_types[0]; i++) {
        const cpulm_dtype t = weight_types[i];
        const cpulm_dtype act = cpulm_dtype_traits_get(t)->vec_dot_type;
        char acts[32];
        snprintf(acts, sizeof acts, "%s %s", cpulm_dtype_name(act),
                 cpulm_kernels_provider(lv, n, final, CPULM_KENTRY_FROM_FLOAT, act));
        cpulm_buf_printf(b, "%-6s %-12s %-18s %-12s %s\n", cpulm_dtype_name(t),
                         cpulm_kernels_provider(lv, n, final, CPULM_KENTRY_VEC_DOT, t), acts,
                         cpulm_kernels_provider(lv, n, final, CPULM_KENTRY_GEMM_X16, t),
                         repacked(final, t));
    }
    static const char *const attn_names[] = {"attn_f16", "scale_f16", "mad_f16"};
    static const cpulm_kernels_entry attn[] = {CPULM_KENTRY_ATTN_F16, CPULM_KENTRY_SCALE_F16,
                                               CPULM_KENTRY_MAD_F16};
    put_ops(b, lv, n, final, "attention:", attn_names, attn, 3);
    static const char *const f32_names[] = {"rms_norm", "swiglu", "softmax", "axpy", "dot_f32"};
    static const cpulm_kernels_entry f32[] = {CPULM_KENTRY_RMS_NORM, CPULM_KENTRY_SWIGLU,
                                              CPULM_KENTRY_SOFTMAX, CPULM_KENTRY_AXPY,
                                              CPULM_KENTRY_DOT_F32};
    put_ops(b, lv, n, final, "f32 ops:", f32_names, f32, 5);
}

cpulm_status cpulm_kernel_describe(char *buf, size_t cap, size_t *n_out) {
    const cpulm_kernels *lv[16];
    const int n = cpulm_kernels_levels(lv, 16);
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_buf_printf(&b, "cpu features:  %s\nkernel level:  %s (usable:", cpulm_cpu_features(),
                     cpulm_kernel_level());
    for (int i = 0; i < n; i++) cpulm_buf_printf(&b, " %s", lv[i]->name);
    cpulm_buf_puts(&b, ")\n");
    const char *warn = cpulm_kernels_isa_warning();
    if (warn) cpulm_buf_printf(&b, "warning:       %s\n", warn);
    cpulm_kernels_describe_table(&b, lv, n, cpulm_kernels_get());
    cpulm_status s = cpulm_buf_status(&b);
    if (s == CPULM_OK) {
        if (n_out) *n_out = b.len + 1;
        if (cap > 0) {
            const size_t k = b.len < cap - 1 ? b.len : cap - 1;
            memcpy(buf, b.data, k);
            buf[k] = '\0';
        }
        if (b.len + 1 > cap) s = CPULM_ERR_TOO_SMALL;
    }
    cpulm_buf_release(&b);
    return s;
}
