/* repack.h: load-time repacking of weight matrices into the 16-row interleaved layout of
 * the gemm_x16 kernels (layouts in kernels/kernels.h), so each loaded weight block feeds 16
 * rows of VPDPBUSD lanes and is reused across tokens.
 * The model owns the repacked copies; the file pages they came from are released
 * (cpulm_mmap_discard), so resident memory stays about one copy of the weights. Weights the
 * running kernel level has no fast GEMM for stay row-major (vec_dot path). */
#ifndef CPULM_MODEL_REPACK_H
#define CPULM_MODEL_REPACK_H

#include "../kernels/kernels.h"
#include "model.h"

/* Can t be repacked, and is it worth it on the kernel level k (a gemm_x16 entry that is
 * not the portable one)? */
int cpulm_repack_supported(const cpulm_kernels *k, const cpulm_tensor *t);

/* Repacks row-major src (ne[1] % 16 == 0 rows of row_bytes) into dst (same size), in the
 * layout variant `layout` (CPULM_X16_*, kernels.h: the x16_layout[type] of the kernel table
 * that will read it; a type without that variant packs as CPULM_X16_STD). */
void cpulm_repack_x16(cpulm_dtype type, int layout, const void *src, void *dst, int64_t n_in,
                      int64_t n_out);

/* The same on up to nth threads (the caller is one), each a contiguous range of 16-row
 * groups; the bytes written do not depend on nth. */
void cpulm_repack_x16_mt(cpulm_dtype type, int layout, const void *src, void *dst, int64_t n_in,
                         int64_t n_out, int nth);

/* Repacks every matrix of the model the kernel level supports (tied embeddings: the shared
 * tensor once, used for both), large ones on as many threads as the process has cores.
 * CPULM_ERR_NOMEM leaves the model valid (row-major). */
cpulm_status cpulm_repack_model(cpulm_model *m, const cpulm_kernels *k, cpulm_error *err);

/* Row r of t as floats (n = ne[0]), row-major or packed in the layout t->packed records
 * (embedding lookups). */
void cpulm_repack_get_row(const cpulm_kernels *k, const cpulm_tensor *t, int64_t r, float *out);

#endif
