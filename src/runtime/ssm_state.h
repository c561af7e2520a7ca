/* ssm_state.h: the recurrent state of the Gated DeltaNet layers of hybrid models, per
 * sequence, beside the KV cache of their full-attention layers (kv_cache.h).
 *
 * A recurrent layer keeps, per sequence, a fixed amount of state whatever the length:
 * the last (taps - 1) inputs of its causal convolution ([taps - 1][channels] floats,
 * oldest first) and one matrix per value head, stored transposed: [key head size][value
 * head size] (row i holds key element i's weight for every value element; the delta rule
 * reads and writes it row by row, see deltanet.c). The state after position p - 1 is what position
 * p starts from, so a sequence's state always belongs to its whole length (kv.len): it can be
 * cleared or copied whole, not cut at an earlier position. Plain memory (calloc'd, so pages take
 * RAM when first written).
 *
 * A sequence's whole state can be saved and put back (cpulm_ssm_seq_get/set: the server's
 * checkpoints at block boundaries). A sequence whose attention KV was written without its
 * recurrent state (cpulm_ctx_seq_state_set) is stale until its state is set: the context
 * refuses to decode it, so a missing checkpoint cannot silently give wrong logits. */
#ifndef CPULM_SSM_STATE_H
#define CPULM_SSM_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "cpulm.h"

typedef struct cpulm_ssm {
    int32_t n_layer, n_seq; /* recurrent layers, sequences */
    int64_t conv_floats;    /* per (layer, sequence): (taps - 1) * channels */
    int64_t state_floats;   /* per (layer, sequence): value heads * value head * key head */
    float *conv, *state;    /* [n_layer][n_seq][...], owned */
    uint8_t *stale;         /* [n_seq]: 1 while the state does not belong to the length */
} cpulm_ssm;

/* Bytes cpulm_ssm_init allocates. */
uint64_t cpulm_ssm_bytes_for(int32_t n_layer, int32_t n_seq, int64_t conv_floats,
                             int64_t state_floats);
/* n_layer 0 (no recurrent layer) allocates nothing. */
cpulm_status cpulm_ssm_init(cpulm_ssm *s, int32_t n_layer, int32_t n_seq, int64_t conv_floats,
                            int64_t state_floats, cpulm_error *err);
void cpulm_ssm_release(cpulm_ssm *s);

static inline float *cpulm_ssm_conv(const cpulm_ssm *s, int32_t il, int32_t seq) {
    return s->conv + ((size_t)il * (size_t)s->n_seq + (size_t)seq) * (size_t)s->conv_floats;
}
static inline float *cpulm_ssm_state(const cpulm_ssm *s, int32_t il, int32_t seq) {
    return s->state + ((size_t)il * (size_t)s->n_seq + (size_t)seq) * (size_t)s->state_floats;
}

/* The state of an empty sequence: zeros. */
void cpulm_ssm_seq_clear(cpulm_ssm *s, int32_t seq);
/* dst's state becomes a copy of src's (every layer). */
void cpulm_ssm_seq_cp(cpulm_ssm *s, int32_t src, int32_t dst);

/* Bytes of one sequence's whole state (every layer's conv inputs and matrices). */
uint64_t cpulm_ssm_seq_bytes(const cpulm_ssm *s);
/* Copies seq's state into dst (cpulm_ssm_seq_bytes bytes, layer by layer: conv, then
 * matrices). */
void cpulm_ssm_seq_get(const cpulm_ssm *s, int32_t seq, uint8_t *dst);
/* seq's state becomes src (a cpulm_ssm_seq_get blob of the same model); not stale. */
void cpulm_ssm_seq_set(cpulm_ssm *s, int32_t seq, const uint8_t *src);

#endif
