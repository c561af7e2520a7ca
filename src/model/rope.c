/* rope.c: RoPE scaling keys and per-position rotation angles (formulas in rope.h). The
 * float steps follow the reference's order so linear and unscaled files keep their bits:
 * with ext_factor 0 and mscale 1 the angles are freq_scale * (theta / freq_factor), as
 * before YaRN existed here. */
#include "rope.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static cpulm_status get_f32(const cpulm_gguf *g, const char *key, float def, float *out,
                            cpulm_error *err) {
    double v;
    cpulm_status s = cpulm_gguf_get_f64(g, key, &v, err);
    if (s == CPULM_ERR_NOT_FOUND) {
        *out = def;
        return CPULM_OK;
    }
    if (s != CPULM_OK) return s;
    if (!(v > -1e30 && v < 1e30))
        return cpulm_errf(err, CPULM_ERR_FORMAT, "key '%s' is not a finite number", key);
    *out = (float)v;
    return CPULM_OK;
}

/* n_rot * ln(L / (2 pi beta)) / (2 ln base): the pair whose wavelength fits beta times in L. */
static float corr_dim(int32_t n_rot, int32_t n_ctx_orig, float beta, float base) {
    return (float)n_rot * logf((float)n_ctx_orig / (beta * 2.0f * 3.14159265358979323846f)) /
           (2.0f * logf(base));
}

/* llama.cpp's mscale split: attn_factor * m(s) / (1 + 0.1 ln s) on the host, times
 * (1 + 0.1 ln(1 / freq_scale)) in the rope op, with m(s) = 0.1 ln s + 1 (1 for s <= 1). */
static float yarn_mscale(float freq_scale, float attn_factor) {
    const float s = 1.0f / freq_scale;
    float a = s <= 1.0f ? 1.0f : 0.1f * 1.0f * logf(s) + 1.0f;
    a *= 1.0f / (1.0f + 0.1f * logf(s));
    a *= attn_factor;
    return a * (1.0f + 0.1f * logf(1.0f / freq_scale));
}

static cpulm_status read_yarn(const cpulm_gguf *g, const char *arch, int32_t n_rot, float rope_base,
                              int32_t n_ctx_train, cpulm_rope_scaling *rs, float attn_factor,
                              cpulm_error *err) {
    char key[128];
    float beta_fast, beta_slow, orig;
    cpulm_status s;
    snprintf(key, sizeof key, "%s.rope.scaling.yarn_ext_factor", arch);
    if ((s = get_f32(g, key, 1.0f, &rs->ext_factor, err))) return s;
    snprintf(key, sizeof key, "%s.rope.scaling.yarn_beta_fast", arch);
    if ((s = get_f32(g, key, 32.0f, &beta_fast, err))) return s;
    snprintf(key, sizeof key, "%s.rope.scaling.yarn_beta_slow", arch);
    if ((s = get_f32(g, key, 1.0f, &beta_slow, err))) return s;
    snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", arch);
    if ((s = get_f32(g, key, (float)n_ctx_train, &orig, err))) return s;
    if (!(orig >= 1 && orig <= (float)(1 << 24)) || !(beta_fast > 0) || !(beta_slow > 0) ||
        !(rs->ext_factor >= 0 && rs->ext_factor <= 1))
        return cpulm_errf(err, CPULM_ERR_FORMAT,
                          "%s.rope.scaling: original_context_length %g, yarn_beta_fast %g, "
                          "yarn_beta_slow %g, yarn_ext_factor %g out of range",
                          arch, orig, beta_fast, beta_slow, rs->ext_factor);
    rs->n_ctx_orig = (int32_t)orig;
    rs->corr_lo = fmaxf(0.0f, floorf(corr_dim(n_rot, rs->n_ctx_orig, beta_fast, rope_base)));
    rs->corr_hi =
        fminf((float)(n_rot - 1), ceilf(corr_dim(n_rot, rs->n_ctx_orig, beta_slow, rope_base)));
    rs->mscale = rs->ext_factor != 0.0f ? yarn_mscale(rs->freq_scale, attn_factor) : attn_factor;
    return CPULM_OK;
}

cpulm_status cpulm_rope_scaling_read(const cpulm_gguf *g, const char *arch, int32_t n_rot,
                                     float rope_base, int32_t n_ctx_train, cpulm_rope_scaling *rs,
                                     cpulm_error *err) {
    memset(rs, 0, sizeof *rs);
    rs->freq_scale = 1.0f;
    rs->mscale = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    cpulm_str type;
    cpulm_status s = cpulm_gguf_get_str(g, key, &type, err);
    if (s == CPULM_ERR_NOT_FOUND || (s == CPULM_OK && cpulm_str_eq(type, "none"))) return CPULM_OK;
    if (s != CPULM_OK) return s;
    const int yarn = cpulm_str_eq(type, "yarn");
    if (!yarn && !cpulm_str_eq(type, "linear"))
        return cpulm_errf(err, CPULM_ERR_UNSUPPORTED, "rope scaling type '%.*s' not supported",
                          (int)type.len, type.ptr);
    float factor, attn_factor;
    snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
    if ((s = get_f32(g, key, 1.0f, &factor, err))) return s;
    if (!(factor >= 1e-3f && factor <= 1e3f))
        return cpulm_errf(err, CPULM_ERR_FORMAT, "rope scaling factor %g out of range", factor);
    snprintf(key, sizeof key, "%s.rope.scaling.attn_factor", arch);
    if ((s = get_f32(g, key, 1.0f, &attn_factor, err))) return s;
    if (!(attn_factor > 0 && attn_factor < 1e3f))
        return cpulm_errf(err, CPULM_ERR_FORMAT, "rope attn_factor %g out of range", attn_factor);
    rs->type = yarn ? CPULM_ROPE_SCALING_YARN : CPULM_ROPE_SCALING_LINEAR;
    rs->freq_scale = 1.0f / factor;
    rs->mscale = attn_factor;
    if (!yarn) return CPULM_OK;
    return read_yarn(g, arch, n_rot, rope_base, n_ctx_train, rs, attn_factor, err);
}

void cpulm_rope_angles(const cpulm_rope_scaling *rs, int32_t n_rot, float theta_scale,
                       const float *freq_factors, float pos, float *cs, float *sn) {
    float theta = pos;
    for (int32_t i = 0; i < n_rot / 2; i++) {
        const float te = theta / (freq_factors ? freq_factors[i] : 1.0f);
        float th = rs->freq_scale * te;
        if (rs->ext_factor != 0.0f) {
            const float y = ((float)i - rs->corr_lo) / fmaxf(0.001f, rs->corr_hi - rs->corr_lo);
            const float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * rs->ext_factor;
            th = th * (1.0f - mix) + te * mix;
        }
        cs[i] = cosf(th) * rs->mscale;
        sn[i] = sinf(th) * rs->mscale;
        theta *= theta_scale;
    }
}
