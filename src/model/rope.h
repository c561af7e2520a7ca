/* rope.h: RoPE scaling (none, linear, YaRN) as GGUF files describe it and llama.cpp applies
 * it, and the per-pair rotation angles of one position.
 *
 * The keys (all under <arch>.rope.scaling.): type ("none", "linear", "yarn"), factor
 * (s >= 1: the context extension), original_context_length (YaRN's L, default the trained
 * context_length), attn_factor (default 1), yarn_ext_factor (default 1 for yarn, else 0),
 * yarn_beta_fast / yarn_beta_slow (default 32 / 1). yarn_log_multiplier is read by
 * llama.cpp only for DeepSeek-style architectures, none of which cpulm runs.
 *
 * YaRN (Peng et al. 2023, "YaRN: Efficient Context Window Extension of Large Language
 * Models"), as llama.cpp computes it: pair i (of n_rot / 2) has the extrapolated angle
 * te = pos * base^(-2i/n_rot) / freq_factor_i and the interpolated one ti = te / s; with
 * the ramp r_i = 1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1) over the pairs whose
 * wavelength spans between beta_fast and beta_slow rotations in L positions (lo = floor,
 * hi = ceil of n_rot * ln(L / (2 pi beta)) / (2 ln base), clamped to [0, n_rot - 1]), the
 * angle is ti * (1 - m) + te * m with m = r_i * ext_factor, and both cos and sin carry
 * mscale = attn_factor * (1 + 0.1 ln s) (so q.k grows by its square, the paper's
 * sqrt(1/t) = 0.1 ln s + 1 on each side). Linear scaling is the angle ti alone. */
#ifndef CPULM_MODEL_ROPE_H
#define CPULM_MODEL_ROPE_H

#include <stdint.h>

#include "../base/status.h"
#include "../format/gguf.h"

typedef enum {
    CPULM_ROPE_SCALING_NONE,
    CPULM_ROPE_SCALING_LINEAR,
    CPULM_ROPE_SCALING_YARN
} cpulm_rope_scaling_type;

typedef struct cpulm_rope_scaling {
    int type;               /* cpulm_rope_scaling_type */
    float freq_scale;       /* 1 / factor (1 for NONE) */
    float ext_factor;       /* YaRN's mix of the extrapolated angle (0: plain interpolation) */
    float corr_lo, corr_hi; /* YaRN's ramp, in pair indices */
    float mscale;           /* factor on cos and sin (1 unless YaRN or attn_factor) */
    int32_t n_ctx_orig;     /* YaRN's original context L */
} cpulm_rope_scaling;

/* Reads the rope.scaling keys of architecture prefix arch from g (rope base, rotated dims
 * and the trained context already known). CPULM_ERR_UNSUPPORTED for other scaling types,
 * CPULM_ERR_FORMAT for values out of range; messages name the key. */
cpulm_status cpulm_rope_scaling_read(const cpulm_gguf *g, const char *arch, int32_t n_rot,
                                     float rope_base, int32_t n_ctx_train, cpulm_rope_scaling *rs,
                                     cpulm_error *err);

/* cos and sin of the n_rot / 2 pair angles at position pos: theta_scale = base^(-2/n_rot)
 * (the angles' running float product, in the reference's order), freq_factors NULL or one
 * divisor per pair (rope_freqs.weight). */
void cpulm_rope_angles(const cpulm_rope_scaling *rs, int32_t n_rot, float theta_scale,
                       const float *freq_factors, float pos, float *cs, float *sn);

#endif
