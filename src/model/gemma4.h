/* gemma4.h: the Gemma 4 architecture's loading side (gemma4_load.c); its layer and
 * per-layer embeddings are in gemma4.c (the forward pass, forward_int.h).
 *
 * Facts (as llama.cpp build 9928 reads gemma4 files):
 * - attention.sliding_window (required) and attention.sliding_window_pattern, one boolean
 *   per layer (the converter writes the array; a scalar there would mean "every layer" to
 *   llama.cpp, so cpulm refuses it);
 * - the global layers' head size is attention.key_length (= value_length), the sliding
 *   layers' attention.key_length_swa (= value_length_swa); rope.dimension_count and
 *   rope.dimension_count_swa rotate that many dims of each head (NEOX pairs); sliding layers
 *   at rope.freq_base_swa (default 10000) unscaled, global layers at rope.freq_base with the
 *   file's scaling and rope_freqs.weight as per-pair divisors ("proportional" rope: 1 for the
 *   rotated quarter, 1e30 for the rest, so those pairs stay still);
 * - attention.shared_kv_layers n: the last n layers compute no keys or values; layer il of
 *   them attends over the KV of layer n_kv - 2 if it slides, n_kv - 1 if global (n_kv =
 *   n_layer - n, llama.cpp's reuse rule; cpulm checks those two layers are of those kinds);
 * - embedding_length_per_layer_input (required; 0: no per-layer embeddings);
 * - final_logit_softcapping when present; the attention scale is 1 (q and k are RMS-normed);
 * - norm weights are stored as multiplied (no +1 of Gemma 3's checkpoints to add);
 * - feed_forward_length and attention.head_count_kv may hold one value per layer (E2B's
 *   double-wide MLP on the shared tail, 31B's fewer KV heads on the global layers): the
 *   model's value is the largest, each layer binds and runs its own;
 * - expert_count > 0 (the 26B-A4B MoE) is refused: not implemented. */
#ifndef CPULM_MODEL_GEMMA4_H
#define CPULM_MODEL_GEMMA4_H

#include "model.h"

/* An arch key holding one integer per layer, each in [lo, hi]: the values into
 * vals[n_layer] (NULL: not wanted) and the largest into *max. CPULM_ERR_NOT_FOUND when the
 * key is absent or a single value; CPULM_ERR_FORMAT for an array of another kind. */
cpulm_status cpulm_gemma4_layer_ints(const cpulm_gguf *g, const char *arch, const char *suffix,
                                     int32_t n_layer, int64_t lo, int64_t hi, int32_t *vals,
                                     int32_t *max, cpulm_error *err);

/* Reads the keys above into hp (the common hyperparameters and the window already read). */
cpulm_status cpulm_gemma4_read_hparams(const cpulm_gguf *g, const char *arch, cpulm_hparams *hp,
                                       cpulm_error *err);

/* Checks the window pattern is a per-layer array and the shared layers' sources are of the
 * right kinds; sets every layer's head_dim and kv_src (windows already set). */
cpulm_status cpulm_gemma4_plan_layers(const cpulm_gguf *g, const char *arch,
                                      const cpulm_hparams *hp, cpulm_layer *layers,
                                      cpulm_error *err);

/* After binding: the tensors a layer needs for what it does (k and its norm on layers with
 * their own KV, the per-layer embedding set when n_pl > 0, rope_freqs with global layers). */
cpulm_status cpulm_gemma4_check_tensors(const cpulm_model *m, cpulm_error *err);

/* The KV cache layer global (slides = 0) or sliding layers of the shared tail read. */
static inline int32_t cpulm_gemma4_kv_source(int32_t n_layer, int32_t n_kv_shared, int slides) {
    return n_layer - n_kv_shared - (slides ? 2 : 1);
}

#endif
