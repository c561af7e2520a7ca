/* kvrot.h: the Hadamard rotation of a quantized KV cache, as llama.cpp applies it (its KV
 * cache's attn_rot_k / attn_rot_v, since PR #21038, on unless LLAMA_ATTN_ROT_DISABLE):
 * before a Q8_0 / Q4_0 cache stores them, each key and the queries are multiplied by the
 * normalized Walsh-Hadamard matrix H of size rot_k, each value by H of size 64, block by
 * block along the head; attention's output is multiplied by H of 64 again (H is symmetric
 * and its own inverse). Scores are unchanged in exact arithmetic (H q . H k = q . k); what
 * changes is what the quantizer sees: a head's outliers spread over its block, so the
 * per-32 scales fit the values better. Driven by model/attention.c (cpulm_attn_init plans it,
 * forward.c's store and the driver apply it). */
#ifndef CPULM_MODEL_KVROT_H
#define CPULM_MODEL_KVROT_H

#include <stdint.h>

#include "model.h"

/* The block sizes for a cache of type kv (a cpulm_dtype) on model m: *rot_k for keys and
 * queries (the largest power of two from 64 dividing the head size), *rot_v for values and
 * the output (64); 0 for no rotation: an unquantized cache, a head size that is not a
 * multiple of 64, or head sizes that differ between layers (llama.cpp's rule). */
void cpulm_kvrot_plan(const cpulm_model *m, int kv, int32_t *rot_k, int32_t *rot_v);

/* x[0..n) = H_blk x block by block (n a multiple of blk, a power of two): the unnormalized
 * fast Walsh-Hadamard butterflies in natural (Sylvester) order, then times 1 / sqrt(blk). */
void cpulm_kvrot_rows(float *x, int64_t n, int32_t blk);

#endif
