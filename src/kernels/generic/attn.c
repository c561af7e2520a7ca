/* attn.c: portable attention of one query over an F16 cache (contract in kernels.h): the
 * scalar definition the SIMD levels reproduce. The accumulator lives in a small stack
 * buffer in chunks of ATT_CHUNK dims, so any head size works without allocation. */
#include <math.h>
#include <string.h>

#include "../../base/fp16.h"
#include "generic.h"

#define ATT_MAX_D 1024 /* larger heads are processed in slices of this many dims */

/* The online softmax over keys gives every dim slice the same weights, so slices of the
 * head can run one after another; the scores are recomputed per slice only when d is
 * larger than ATT_MAX_D, which no supported model has. */
static void attn_slice(int64_t d, int64_t d0, int64_t dn, int64_t n, const uint16_t *q16,
                       const uint8_t *k, const uint8_t *v, uint64_t stride, float scale,
                       float *out) {
    uint16_t acc[ATT_MAX_D];
    memset(acc, 0, sizeof(uint16_t) * (size_t)dn);
    float M = -INFINITY, S = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        const uint16_t *kr = (const uint16_t *)(k + (size_t)j * stride);
        const uint16_t *vr = (const uint16_t *)(v + (size_t)j * stride) + d0;
        float x;
        cpulm_generic_vec_dot_f16(d, &x, kr, q16);
        x *= scale;
        float ms = 1.0f, vs = 1.0f;
        if (x > M) {
            ms = expf(M - x);
            M = x;
            cpulm_generic_scale_f16(dn, acc, ms);
        } else {
            vs = expf(x - M);
        }
        cpulm_generic_mad_f16(dn, acc, vr, vs);
        S = fmaf(S, ms, vs);
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int64_t i = 0; i < dn; i++)
        out[d0 + i] = cpulm_fp16_to_f32(acc[i]) * inv;
}

void cpulm_generic_attn_f16(int64_t d, int64_t n, const uint16_t *q16, const uint8_t *k,
                            const uint8_t *v, uint64_t stride, float scale, float *out) {
    for (int64_t d0 = 0; d0 < d; d0 += ATT_MAX_D)
        attn_slice(d, d0, d - d0 < ATT_MAX_D ? d - d0 : ATT_MAX_D, n, q16, k, v, stride, scale,
                   out);
}
