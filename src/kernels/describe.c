/* describe.c: cpulm_kernel_describe, the kernel part of `cpulm info --cpu`: CPU features,
 * the chosen level, and which level provides each table entry (see describe.h). Entries and
 * their names come from kernels.h's op list. Whether a type is repacked at load comes from
 * cpulm_kernels_packs, the rule the loader (model/repack.c) applies. */
#include "kernels/describe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpulm.h"

/* Every function-pointer type converts to and from this one; comparisons go through it. */
typedef void (*any_fn)(void);

static any_fn entry(const cpulm_kernels *k, cpulm_kernels_entry e, cpulm_dtype t) {
    switch (e) {
#define ENTRY_TYPED(ID, name, fn) \
    case CPULM_KENTRY_##ID: return (any_fn)k->name[t];
        CPULM_KERNEL_TYPED_OPS(ENTRY_TYPED)
#undef ENTRY_TYPED
#define ENTRY_OP(ID, name, ret, params, group) \
    case CPULM_KENTRY_##ID: return (any_fn)k->name;
        CPULM_KERNEL_OPS(ENTRY_OP)
#undef ENTRY_OP
    default: return NULL;
    }
}

const char *cpulm_kernels_entry_name(cpulm_kernels_entry e) {
    static const char *const names[] = {
#define NAME_TYPED(ID, name, fn) #name,
        CPULM_KERNEL_TYPED_OPS(NAME_TYPED)
#undef NAME_TYPED
#define NAME_OP(ID, name, ret, params, group) #name,
            CPULM_KERNEL_OPS(NAME_OP)
#undef NAME_OP
    };
    return (unsigned)e < CPULM_KENTRY_COUNT ? names[e] : "?";
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
    CPULM_DTYPE_Q4_K, CPULM_DTYPE_Q5_K, CPULM_DTYPE_Q6_K, CPULM_DTYPE_MXFP4,
};

/* Would the loader repack a 16-row matrix of type t on final (as which type)? */
static const char *repacked(const cpulm_kernels *final, cpulm_dtype t) {
    const cpulm_dtype pt = cpulm_kernels_packs_as(t);
    if (!cpulm_kernels_packs(final, pt, CPULM_PACK_ROWS)) return "no";
    if (pt == t) return "yes";
    return cpulm_widens_to_q8_0(t) == 2 ? "yes, as Q8_0 + mins (exact)" : "yes, as Q8_0 (exact)";
}

/* One line: the plain ops of a describe group (kernels.h's list) and their providers. */
static void put_ops(cpulm_buf *b, const cpulm_kernels *const *lv, int n, const cpulm_kernels *final,
                    const char *label, const char *group) {
    cpulm_buf_printf(b, "%-15s", label);
    int i = 0;
#define PUT_OP(ID, name, ret, params, grp)        \
    if (!strcmp(#grp, group))                     \
        cpulm_buf_printf(                         \
            b, "%s%s %s", i++ ? ", " : "", #name, \
            cpulm_kernels_provider(lv, n, final, CPULM_KENTRY_##ID, CPULM_DTYPE_F32));
    CPULM_KERNEL_OPS(PUT_OP)
#undef PUT_OP
    cpulm_buf_puts(b, "\n");
}

void cpulm_kernels_describe_table(cpulm_buf *b, const cpulm_kernels *const *lv, int n,
                                  const cpulm_kernels *final) {
    cpulm_buf_printf(b, "%-6s %-12s %-18s %-12s %s\n", "type", "vec_dot", "activations", "gemm_x16",
                     "repacked at load");
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
    put_ops(b, lv, n, final, "attention:", "ATTN");
    put_ops(b, lv, n, final, "f32 ops:", "F32");
}

cpulm_status cpulm_kernel_describe(char *buf, size_t cap, size_t *n_out) {
    const cpulm_kernels *lv[16];
    const int n = cpulm_kernels_levels(lv, 16);
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_buf_printf(&b, "cpu features:  %s\nkernel level:  %s (usable:", cpulm_cpu_features(),
                     cpulm_kernel_level());
    for (int i = 0; i < n; i++)
        cpulm_buf_printf(&b, " %s", lv[i]->name);
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
