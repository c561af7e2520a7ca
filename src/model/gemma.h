/* gemma.h: the Gemma 3 architecture's loading side (gemma_load.c): its hyperparameters; and
 * its GELU (gemma.c, with the layer: forward_int.h).
 *
 * Facts (as llama.cpp reads gemma3 files): which layers slide is swa.h's rule (the window
 * optional: absent or 0, every layer attends to all keys; default period 6, so every 6th
 * layer is global); sliding layers rotate with <arch>.rope.freq_base_swa
 * (default 10000) and no rope scaling, global ones with rope.freq_base and the file's
 * scaling. Queries are scaled by 1/sqrt(head_dim), except in the 62-layer (27B) model:
 * 1/sqrt(n_embd / n_head). <arch>.final_logit_softcapping c, when present, caps the logits
 * (c * tanh(l / c)). The converter stores norm weights with Gemma's +1 already added,
 * so they multiply as every other RMS norm's. */
#ifndef CPULM_MODEL_GEMMA_H
#define CPULM_MODEL_GEMMA_H

#include "model.h"

/* Reads the keys above into hp (the common hyperparameters and the window already read). */
cpulm_status cpulm_gemma_read_hparams(const cpulm_gguf *g, const char *arch, cpulm_hparams *hp,
                                      cpulm_error *err);
/* GELU (tanh form) as the reference's f32 path computes it: the input rounded to f16, the
 * result looked up as an f16; 0 at x <= -10 and x at x >= 10. */
float cpulm_gemma_gelu(float x);
/* y[i] = gelu(g[i]) * u[i] (y may be g). */
void cpulm_gemma_geglu(int64_t n, float *y, const float *g, const float *u);

#endif
