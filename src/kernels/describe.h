/* describe.h: which kernel level provides each entry of the merged kernel table, as text
 * for `cpulm info --cpu` (cpulm_kernel_describe in cpulm.h). An entry is provided by the
 * lowest level whose merged table holds the same function pointer as the final table: a
 * level that does not override an entry inherits its base's pointer, so the first match is
 * the level that wrote the function. */
#ifndef CPULM_KERNELS_DESCRIBE_H
#define CPULM_KERNELS_DESCRIBE_H

#include "base/buf.h"
#include "kernels/kernels.h"

/* One entry per op of kernels.h's list: CPULM_KENTRY_VEC_DOT, ..., CPULM_KENTRY_RMS_NORM, ... */
typedef enum cpulm_kernels_entry {
#define CPULM_KENTRY_TYPED(ID, name, fn) CPULM_KENTRY_##ID,
    CPULM_KERNEL_TYPED_OPS(CPULM_KENTRY_TYPED)
#undef CPULM_KENTRY_TYPED
#define CPULM_KENTRY_OP(ID, name, ret, params, group) CPULM_KENTRY_##ID,
        CPULM_KERNEL_OPS(CPULM_KENTRY_OP)
#undef CPULM_KENTRY_OP
            CPULM_KENTRY_COUNT
} cpulm_kernels_entry;

/* Name of the lowest of levels[0..n) (lowest first) whose entry e (of type, for the per-type
 * entries) equals final's; "-" when final has none, "?" when no level matches. Borrowed:
 * a level's name. */
const char *cpulm_kernels_provider(const cpulm_kernels *const *levels, int n,
                                   const cpulm_kernels *final, cpulm_kernels_entry e,
                                   cpulm_dtype type);

/* The op's name in the list ("rms_norm"). Borrowed, static. */
const char *cpulm_kernels_entry_name(cpulm_kernels_entry e);

/* Appends the per-type table and the attention / f32-op lines for final over levels. */
void cpulm_kernels_describe_table(cpulm_buf *b, const cpulm_kernels *const *levels, int n,
                                  const cpulm_kernels *final);

#endif
