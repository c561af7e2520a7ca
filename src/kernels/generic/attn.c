/* attn.c: the portable attention tile ops (contracts in kernels.h), the scalar definitions
 * every SIMD level reproduces bit for bit:
 * - attn_f16: one query over an F16 cache with the reference's numerics (f16 accumulator),
 *   the oracle of the exact numerics; the accumulator lives in a small stack buffer in
 *   slices of ATT_MAX_D dims, so any head size works without allocation;
 * - attn_x*: the same recurrence split into tiles: a row's scores, then its key-by-key
 *   softmax weights, then the f16 accumulation of V, so a tile of keys serves many rows;
 * - attn_scores / softmax_row / pv / merge: the tiled f32 numerics. Every step is per row
 *   (and per element), so a row's result never depends on how many rows or keys share a
 *   call.
 * The Q8_0 / Q4_0 ops are in attn_q.c. */
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

/* ---- the exact numerics (attn_x*) ---- */

void cpulm_generic_attn_xscores(int64_t d, int m, int n, const double *qt, int64_t ldqt,
                                const float *k, int64_t ldk, float scale, float *s, int64_t lds) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            const float *kj = k + (int64_t)j * ldk;
            /* double products of floats are exact: for f16 values they equal the f32
             * products vec_dot_f16 adds, so the sum is the same, in the same order */
            double sum = 0.0;
            for (int64_t c = 0; c < d; c++)
                sum += qt[c * ldqt + i] * (double)kj[c];
            s[(int64_t)i * lds + j] = (float)sum * scale;
        }
}

void cpulm_generic_attn_xweights(int n, float *s, float *ms, float *M) {
    float m = *M;
    for (int j = 0; j < n; j++) {
        const float x = s[j];
        if (x > m) {
            ms[j] = expf(m - x);
            s[j] = 1.0f;
            m = x;
        } else {
            ms[j] = 1.0f;
            s[j] = expf(x - m);
        }
    }
    *M = m;
}

static inline float round_f16(float x) {
    return cpulm_fp16_to_f32(cpulm_f32_to_fp16(x));
}

/* Skipping the scale when ms == 1 is attn_f16's arithmetic: it scales only when the max
 * moves, and a move by so little that expf rounds to 1 multiplies f16 values by 1. */
void cpulm_generic_attn_xpv(int64_t d, int m, int n, const float *ms, const float *vs, int64_t ldw,
                            const float *v, int64_t ldv, float *acc, int64_t lda, float *S) {
    for (int i = 0; i < m; i++) {
        float *a = acc + (int64_t)i * lda;
        for (int j = 0; j < n; j++) {
            const float mij = ms[(int64_t)i * ldw + j], vij = vs[(int64_t)i * ldw + j];
            const float *vj = v + (int64_t)j * ldv;
            if (mij != 1.0f)
                for (int64_t c = 0; c < d; c++)
                    a[c] = round_f16(a[c] * mij);
            for (int64_t c = 0; c < d; c++)
                a[c] = round_f16(fmaf(vj[c], vij, a[c]));
            S[i] = fmaf(S[i], mij, vij);
        }
    }
}

/* ---- the tiled f32 numerics ---- */

void cpulm_generic_attn_scores(int64_t d, int m, int n, const float *q, int64_t ldq, const float *k,
                               int64_t ldk, float scale, float *s, int64_t lds) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float x;
            cpulm_generic_vec_dot_f32(d, &x, q + (int64_t)i * ldq, k + (int64_t)j * ldk);
            s[(int64_t)i * lds + j] = x * scale;
        }
}

float cpulm_generic_attn_softmax_row(int n, int lim, float *s, float *M, float *L) {
    return cpulm_generic_softmax_with(n, lim, s, M, L, cpulm_generic_vexpf);
}

void cpulm_generic_attn_pv(int64_t d, int m, int n, const float *p, int64_t ldp, const float *v,
                           int64_t ldv, const float *a, float *o, int64_t ldo) {
    for (int i = 0; i < m; i++) {
        float *oi = o + (int64_t)i * ldo;
        for (int64_t c = 0; c < d; c++)
            oi[c] *= a[i];
        for (int j = 0; j < n; j++) {
            const float pij = p[(int64_t)i * ldp + j];
            const float *vj = v + (int64_t)j * ldv;
            for (int64_t c = 0; c < d; c++)
                oi[c] = fmaf(pij, vj[c], oi[c]);
        }
    }
}

void cpulm_generic_attn_merge(int64_t d, int m, const float *mc, const float *lc, const float *oc,
                              int64_t ldoc, float *M, float *L, float *o, int64_t ldo) {
    for (int i = 0; i < m; i++) {
        if (mc[i] == -INFINITY) continue;
        float a, b;
        cpulm_attn_merge_row(&M[i], &L[i], mc[i], lc[i], &a, &b);
        float *oi = o + (int64_t)i * ldo;
        const float *ci = oc + (int64_t)i * ldoc;
        for (int64_t c = 0; c < d; c++)
            oi[c] = fmaf(ci[c], b, oi[c] * a);
    }
}
