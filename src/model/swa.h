/* swa.h: which layers attend through a sliding window: one rule for every architecture,
 * read by the loader (model.c) and followed by synth.
 *
 * Facts (as llama.cpp reads the files): the arch table's swa_pattern is the default period
 * p (gpt-oss 2, gemma3 6; 0: the architecture has no sliding windows);
 * <arch>.attention.sliding_window is the window (required, unless the arch table's
 * swa_optional: absent or 0 then means every layer attends to all keys);
 * <arch>.attention.sliding_window_pattern, an integer period or one boolean per layer,
 * replaces the default. Layer il slides iff p == 0 || il % p < p - 1: the last layer of
 * every p is global (gpt-oss: layer 0 slides, 1 does not, ...; p = 0: every layer slides). */
#ifndef CPULM_MODEL_SWA_H
#define CPULM_MODEL_SWA_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

/* Does layer il slide under period p (the rule above)? */
static inline bool cpulm_swa_layer_slides(int32_t il, int32_t period) {
    return period == 0 || il % period < period - 1;
}

/* Reads the window into hp->n_swa (0 for an architecture without sliding windows).
 * CPULM_ERR_FORMAT when a required window is missing or out of range. */
cpulm_status cpulm_swa_read(const cpulm_gguf *g, const cpulm_arch_desc *a, cpulm_hparams *hp,
                            cpulm_error *err);

/* Sets layers[0 .. hp->n_layer).window (hp->n_swa or 0) from the pattern and counts
 * hp->n_layer_swa; without a window the layers are left as they are (0 from binding).
 * CPULM_ERR_FORMAT for a malformed pattern. */
cpulm_status cpulm_swa_set_layers(const cpulm_gguf *g, const cpulm_arch_desc *a, cpulm_hparams *hp,
                                  cpulm_layer *layers, cpulm_error *err);

#endif
