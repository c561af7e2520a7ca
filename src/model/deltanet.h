/* deltanet.h: scratch of the hybrid models' layers (deltanet.c: the Gated DeltaNet layer
 * and the gated full-attention layer), owned by a context. */
#ifndef CPULM_MODEL_DELTANET_H
#define CPULM_MODEL_DELTANET_H

#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"
#include "../kernels/kernels.h"
#include "model.h"

typedef struct cpulm_dnet_scratch cpulm_dnet_scratch;

/* Bytes of scratch for batches of n_batch tokens on n_threads threads (0 for a model
 * without recurrent layers). */
uint64_t cpulm_dnet_scratch_bytes(const cpulm_hparams *hp, int64_t n_batch, int32_t n_threads);
/* *out = NULL for a model that is not hybrid. */
cpulm_status cpulm_dnet_scratch_new(cpulm_dnet_scratch **out, const cpulm_hparams *hp,
                                    int64_t n_batch, int32_t n_threads, cpulm_error *err);
void cpulm_dnet_scratch_free(cpulm_dnet_scratch *s);

/* Floats of one sequence's recurrent state per recurrent layer: the convolution's last
 * inputs ((taps - 1) x channels) and the delta rule's matrices (value heads x value head
 * size x key head size). */
int64_t cpulm_dnet_conv_floats(const cpulm_hparams *hp);
int64_t cpulm_dnet_state_floats(const cpulm_hparams *hp);

/* One token of the gated delta rule on one head (key and value head size n): with S the
 * [n][n] state (row r: value element r), S = exp(g) S; d = (v - S k) beta; S += d k^T;
 * o = S q / sqrt(n). The state is given transposed (T = S^T: T[i * n + r]). d: n floats of
 * scratch. The kernel table's dnet_step (the same bits at every level). */
void cpulm_dnet_step(const cpulm_kernels *kt, int64_t n, float *T, const float *q, const float *k,
                     const float *v, float beta, float g, float *o, float *d);

/* The chunked form of the same recurrence over n <= CPULM_DNET_CHUNK tokens: q, k, v are
 * [n][n_head_size] rows, beta and g [n], o [n][head size] out; the (transposed) state goes
 * from before the first token to after the last. Equal to n steps up to rounding (tested
 * against them and a float64 oracle), the same bits at every level (dnet_mm).
 * ws: cpulm_dnet_chunk_ws_floats(head size) floats. */
#define CPULM_DNET_CHUNK 64
void cpulm_dnet_chunk(const cpulm_kernels *kt, int64_t n, int64_t d, float *T, const float *q,
                      const float *k, const float *v, const float *beta, const float *g, float *o,
                      float *ws);
int64_t cpulm_dnet_chunk_ws_floats(int64_t d);

#endif
