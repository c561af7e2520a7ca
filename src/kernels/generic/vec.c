/* vec.c: portable-C f32 vector ops of the forward pass (norm, activation, softmax, axpy,
 * dot). The oracle for the SIMD versions: sums are accumulated in double, in index order,
 * so results are deterministic and as accurate as a float output allows. */
#include <math.h>

#include "generic.h"
#include "base/fp16.h"

void cpulm_generic_rms_norm(int64_t n, float *y, const float *x, const float *w, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)x[i] * (double)x[i];
    const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
}

void cpulm_generic_swiglu(int64_t n, float *y, const float *g, const float *u) {
    for (int64_t i = 0; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void cpulm_generic_softmax(int64_t n, float *x) {
    float max = x[0];
    for (int64_t i = 1; i < n; i++) max = fmaxf(max, x[i]);
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max); /* -inf (masked) gives exactly 0 */
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void cpulm_generic_axpy(int64_t n, float *y, float a, const float *x) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

float cpulm_generic_dot_f32(int64_t n, const float *x, const float *y) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)x[i] * (double)y[i];
    return (float)sum;
}

void cpulm_generic_scale_f16(int64_t n, uint16_t *y, float v) {
    for (int64_t i = 0; i < n; i++) y[i] = cpulm_f32_to_fp16(cpulm_fp16_to_f32(y[i]) * v);
}

void cpulm_generic_mad_f16(int64_t n, uint16_t *y, const uint16_t *x, float v) {
    for (int64_t i = 0; i < n; i++)
        y[i] = cpulm_f32_to_fp16(cpulm_fp16_to_f32(y[i]) + cpulm_fp16_to_f32(x[i]) * v);
}
