/* encoder.h: the forward pass of BERT-style encoders (bert, nomic-bert; encoder.c). */
#ifndef CPULM_MODEL_ENCODER_H
#define CPULM_MODEL_ENCODER_H

#include "../runtime/context.h"

/* The whole pass over the context's batch, run by every pool thread (forward.c's worker
 * calls it for encoder models): embeddings, layers, then the outputs (per-token rows or
 * per-sequence pooled vectors / rank scores into c->embd). */
void cpulm_encoder_pass(cpulm_ctx *c, int ith, int nth);

#endif
