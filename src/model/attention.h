/* attention.h: the attention step of a layer (attention.c): tiled, flash-attention style,
 * over the KV cache in any of its types, GQA-grouped, split over the cache when the batch is
 * a few single tokens (generation), with the canonical arithmetic of kernels.h (attn_*). */
#ifndef CPULM_MODEL_ATTENTION_H
#define CPULM_MODEL_ATTENTION_H

#include "../context.h"
#include "attention_size.h"

/* Allocates c->attn (after the pool and KV cache exist). */
cpulm_status cpulm_attn_init(cpulm_ctx *c, cpulm_error *err);
void cpulm_attn_free(cpulm_ctx *c);
/* Plans the batch in c (token blocks, split or not); single-threaded, before the pass. */
void cpulm_attn_plan(cpulm_ctx *c);
/* att = attention of every batch token in layer il (q roped, k and v stored in the cache).
 * Called by every pool thread; the caller has barriers before and after. */
void cpulm_attn_layer(cpulm_ctx *c, int il, int ith, int nth);

#endif
