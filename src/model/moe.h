/* moe.h: scratch of the mixture-of-experts FFN (moe.c), owned by a context. */
#ifndef CPULM_MODEL_MOE_H
#define CPULM_MODEL_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"
#include "model.h"

typedef struct cpulm_moe_scratch cpulm_moe_scratch;

/* Bytes of MoE scratch for batches of n_batch tokens (0 for a dense model). */
uint64_t cpulm_moe_scratch_bytes(const cpulm_hparams *hp, int64_t n_batch);
/* *out = NULL for a dense model. */
cpulm_status cpulm_moe_scratch_new(cpulm_moe_scratch **out, const cpulm_hparams *hp,
                                   int64_t n_batch, cpulm_error *err);
void cpulm_moe_scratch_free(cpulm_moe_scratch *s);

#endif
