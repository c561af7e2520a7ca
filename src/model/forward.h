/* forward.h: the transformer forward pass over the batch staged in a context.
 *
 * Layering: the pass computes on a context's state (its scratch buffers, KV cache and
 * thread pool, declared in context.h), and context.c's decode calls it, so it sits between
 * the two: model <- context.h (state) <- model/forward.c <- context.c (API). No other file
 * under model/ sees a context. */
#ifndef CPULM_MODEL_FORWARD_H
#define CPULM_MODEL_FORWARD_H

#include "../runtime/context.h"

/* Runs the transformer over the batch in ctx (tok/pos/seq/out_idx filled, KV lengths not yet
 * advanced) and writes ctx->logits. Cannot fail: decode validated everything. */
void cpulm_forward(cpulm_ctx *ctx);

#endif
