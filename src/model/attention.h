/* attention.h: the attention driver of a layer (attention.c): every batch row over the KV
 * cache in any of its types, GQA-grouped, masked causally and by an optional sliding window,
 * with optional attention sinks, by the tile ops of kernels.h (attn_*). */
#ifndef CPULM_MODEL_ATTENTION_H
#define CPULM_MODEL_ATTENTION_H

#include "../runtime/context.h"
#include "attention_size.h"

/* A layer's attention parameters beyond the shape. */
typedef struct cpulm_attn_opts {
    int32_t window;     /* > 0: a query at position p sees keys p - window + 1 .. p only */
    const float *sinks; /* [n_head] or NULL: per query head, a logit whose weight joins the
                         * softmax denominator (a key with a value of 0) */
} cpulm_attn_opts;

/* Allocates c->attn (after the pool and KV cache exist). */
cpulm_status cpulm_attn_init(cpulm_ctx *c, cpulm_error *err);
void cpulm_attn_free(cpulm_ctx *c);
/* Plans the batch in c (token blocks, numerics, split or not); single-threaded, before the
 * pass. */
void cpulm_attn_plan(cpulm_ctx *c);
/* att = attention of every batch token in layer il (q roped, k and v stored in the cache),
 * with the options o (NULL: none). Called by every pool thread; the caller has barriers
 * before and after. */
void cpulm_attn_run(cpulm_ctx *c, int il, const cpulm_attn_opts *o, int ith, int nth);
/* cpulm_attn_run with the model's options for layer il. */
void cpulm_attn_layer(cpulm_ctx *c, int il, int ith, int nth);

#endif
