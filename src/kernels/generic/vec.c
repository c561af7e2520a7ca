/* vec.c: portable-C f32 vector ops of the forward pass (norm, activation, softmax, axpy,
 * dot). The oracle for the SIMD versions. Where the reference engine's arithmetic is known
 * (rms sums, silu's exp, f16 accumulators), the same operations are done in the same order, so
 * logits of float models match it bit for bit; every SIMD level must compute exactly this. */
#include <math.h>

#include "generic.h"
#include "base/fp16.h"
#include "kernels/rope_body.h"

void cpulm_generic_rms_norm(int64_t n, float *y, const float *x, const float *w, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]); /* float squares, in order */
    const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = (x[i] * scale) * w[i];
}

void cpulm_generic_rope(float *v, int n_heads, int head_stride, int n_rot, int neox,
                        const float *cs, const float *sn) {
    cpulm_rope_body(v, n_heads, head_stride, n_rot, neox, cs, sn);
}

float cpulm_generic_vexpf(float x) {
    const float r = 0x1.8p23f; /* adding it rounds to an integer in the low mantissa bits */
    float z = fmaf(x, 0x1.715476p+0f, r);
    float n = z - r;                                                /* round(x / ln 2) */
    float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x)); /* x - n ln 2, two parts */
    float u = b * b;
    float j = fmaf(
        fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
        u, fmaf(0x1.ffffecp-1f, b, 1.0f));
    return ldexpf(j, (int)n); /* exact scaling, with overflow to inf and underflow to 0 */
}

/* silu(g) * u. Canonical: elements in whole groups of 16 use the polynomial exp above (what
 * vectorized code computes, lane by lane), the rest use libm's expf, as the reference does. */
void cpulm_generic_swiglu(int64_t n, float *y, const float *g, const float *u) {
    int64_t nv = n & ~(int64_t)15, i = 0;
    for (; i < nv; i++)
        y[i] = g[i] / (1.0f + cpulm_generic_vexpf(-g[i])) * u[i];
    for (; i < n; i++)
        y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* silu(x), the same arithmetic as swiglu with u = 1 */
void cpulm_generic_silu(int64_t n, float *y, const float *x) {
    int64_t nv = n & ~(int64_t)15, i = 0;
    for (; i < nv; i++)
        y[i] = x[i] / (1.0f + cpulm_generic_vexpf(-x[i]));
    for (; i < n; i++)
        y[i] = x[i] / (1.0f + expf(-x[i]));
}

void cpulm_generic_swiglu_oai(int64_t n, float *y, const float *g, const float *u, float alpha,
                              float limit) {
    for (int64_t i = 0; i < n; i++) {
        const float x = fminf(g[i], limit);
        const float v = fminf(fmaxf(u[i], -limit), limit);
        y[i] = x / (1.0f + expf(alpha * -x)) * (v + 1.0f);
    }
}

void cpulm_generic_softmax(int64_t n, float *x) {
    float max = x[0];
    for (int64_t i = 1; i < n; i++)
        max = fmaxf(max, x[i]);
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max); /* -inf (masked) gives exactly 0 */
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}

void cpulm_generic_gemm_mins(int64_t nb, int nt, int ng, const float *m, const uint8_t *s,
                             uint64_t ss, float *out, int64_t ld) {
    for (int j = 0; j < nt; j++) {
        const float *sj = (const float *)(s + (size_t)j * ss);
        for (int q = 0; q < ng; q++)
            for (int r = 0; r < 16; r++) {
                float acc = 0.0f;
                for (int64_t b = 0; b < nb; b++)
                    acc = fmaf(m[(q * nb + b) * 16 + r], sj[b], acc);
                out[j * ld + 16 * q + r] += acc;
            }
    }
}

void cpulm_generic_axpy(int64_t n, float *y, float a, const float *x) {
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

float cpulm_generic_dot_f32(int64_t n, const float *x, const float *y) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)x[i] * (double)y[i];
    return (float)sum;
}

void cpulm_generic_scale_f16(int64_t n, uint16_t *y, float v) {
    for (int64_t i = 0; i < n; i++)
        y[i] = cpulm_f32_to_fp16(cpulm_fp16_to_f32(y[i]) * v);
}

void cpulm_generic_mad_f16(int64_t n, uint16_t *y, const uint16_t *x, float v) {
    for (int64_t i = 0; i < n; i++)
        y[i] = cpulm_f32_to_fp16(fmaf(cpulm_fp16_to_f32(x[i]), v, cpulm_fp16_to_f32(y[i])));
}
