/* describe.h: which kernel level provides each entry of the merged kernel table, as text
 * for `cpulm info --cpu` (cpulm_kernel_describe in cpulm.h). An entry is provided by the
 * lowest level whose merged table holds the same function pointer as the final table: a
 * level that does not override an entry inherits its base's pointer, so the first match is
 * the level that wrote the function. */
#ifndef CPULM_KERNELS_DESCRIBE_H
#define CPULM_KERNELS_DESCRIBE_H

#include "base/buf.h"
#include "kernels/kernels.h"

typedef enum cpulm_kernels_entry {
    CPULM_KENTRY_VEC_DOT, /* per weight type */
    CPULM_KENTRY_FROM_FLOAT, /* per target type */
    CPULM_KENTRY_GEMM_X16, /* per weight type */
    CPULM_KENTRY_RMS_NORM,
    CPULM_KENTRY_SWIGLU,
    CPULM_KENTRY_SOFTMAX,
    CPULM_KENTRY_AXPY,
    CPULM_KENTRY_DOT_F32,
    CPULM_KENTRY_SCALE_F16,
    CPULM_KENTRY_MAD_F16,
    CPULM_KENTRY_ATTN_F16,
    CPULM_KENTRY_COUNT
} cpulm_kernels_entry;

/* Name of the lowest of levels[0..n) (lowest first) whose entry e (of type, for the per-type
 * entries) equals final's; "-" when final has none, "?" when no level matches. Borrowed:
 * a level's name. */
const char *cpulm_kernels_provider(const cpulm_kernels *const *levels, int n,
                                   const cpulm_kernels *final, cpulm_kernels_entry e,
                                   cpulm_dtype type);

/* Appends the per-type table and the attention / f32-op lines for final over levels. */
void cpulm_kernels_describe_table(cpulm_buf *b, const cpulm_kernels *const *levels, int n,
                                  const cpulm_kernels *final);

#endif
