/* attn.c: the portable attention tile ops (contracts in kernels.h), the scalar definitions
 * every SIMD level reproduces bit for bit:
 * - attn_q*: straight from Q8_0 / Q4_0 cache rows: a score is exact integer block dots (the
 *   query quantized to Q8_0 as llama.cpp does, against the cache's int8 or 4-bit quants)
 *   scaled per block in block order;
 *   P.V folds the block scale into the weight, so neither step needs an f32 copy of the tile
 *   (scripts/arm-mca-generic-attnq.py names gcc 12's labels of their code: an edit of this
 *   file may renumber them);
 * - attn_f16: one query over an F16 cache with the reference's numerics (f16 accumulator),
 *   the oracle of the exact numerics (generic only); the accumulator lives in a small stack
 *   buffer in slices of ATT_MAX_D dims, so any head size works without allocation;
 * - attn_x*: the same recurrence split into tiles: a row's scores, then its key-by-key
 *   softmax weights, then the f16 accumulation of V, so a tile of keys serves many rows;
 * - attn_scores / softmax_row / pv / merge: the tiled f32 numerics. Every step is per row
 *   (and per element), so a row's result never depends on how many rows or keys share a
 *   call;
 * - attn_b*: the tiled numerics with bf16 products, by vdpbf16ps's pair step (bstep). */
#include <math.h>
#include <string.h>

#include "../../base/fp16.h"
#include "generic.h"

void cpulm_generic_attn_qquant(int64_t d, int m, const float *q, int64_t ldq, int8_t *q8,
                               float *qd) {
    for (int i = 0; i < m; i++)
        for (int64_t b = 0; b < d / 32; b++) {
            const float *x = q + (int64_t)i * ldq + b * 32;
            float amax = 0.0f;
            for (int e = 0; e < 32; e++)
                amax = fabsf(x[e]) > amax ? fabsf(x[e]) : amax;
            const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
            for (int e = 0; e < 32; e++) /* |x * id| < 127.5: no clamp */
                q8[(int64_t)i * d + b * 32 + e] = (int8_t)(int)nearbyintf(x[e] * id);
            qd[(int64_t)i * (d / 32) + b] = cpulm_fp16_to_f32(cpulm_f32_to_fp16(amax / 127.0f));
        }
}

/* Block b of a cache row: its scale and its 32 quants as ints. */
static float block_quants(cpulm_dtype t, const uint8_t *row, int64_t b, int q[32]) {
    if (t == CPULM_DTYPE_Q8_0) {
        const cpulm_block_q8_0 *x = (const cpulm_block_q8_0 *)row + b;
        for (int e = 0; e < 32; e++)
            q[e] = x->qs[e];
        return cpulm_fp16_to_f32(x->d);
    }
    const cpulm_block_q4_0 *x = (const cpulm_block_q4_0 *)row + b;
    for (int e = 0; e < 16; e++) {
        q[e] = (x->qs[e] & 15) - 8;
        q[e + 16] = (x->qs[e] >> 4) - 8;
    }
    return cpulm_fp16_to_f32(x->d);
}

void cpulm_generic_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int8_t *q8,
                                const float *qd, float sc, const uint8_t *k, uint64_t ldk, float *s,
                                int64_t lds, const uint8_t *next) {
    (void)next; /* a hint for the SIMD levels */
    int kq[32];
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            const int8_t *qi = q8 + (int64_t)i * d;
            float acc = 0.0f;
            for (int64_t b = 0; b < d / 32; b++) {
                const float dk = block_quants(kt, k + (uint64_t)j * ldk, b, kq);
                int32_t isum = 0;
                for (int e = 0; e < 32; e++)
                    isum += (int32_t)qi[b * 32 + e] * kq[e];
                acc = fmaf(dk * qd[(int64_t)i * (d / 32) + b], (float)isum, acc);
            }
            s[(int64_t)i * lds + j] = acc * sc;
        }
}

float cpulm_generic_attn_softmaxz(int n, int lim, float *s, float *M, float *L) {
    return cpulm_generic_softmax_with(n, lim, s, M, L, cpulm_generic_vexpzf);
}

void cpulm_generic_attn_qpv(int64_t d, cpulm_dtype vt, int m, int n, const float *p, int64_t ldp,
                            const uint8_t *v, uint64_t ldv, const float *a, float *o, int64_t ldo,
                            const uint8_t *next) {
    (void)next; /* a hint for the SIMD levels */
    int vq[32];
    for (int i = 0; i < m; i++) {
        float *oi = o + (int64_t)i * ldo;
        for (int64_t c = 0; c < d; c++)
            oi[c] = a[i] == 0.0f ? 0.0f : oi[c] * a[i];
        for (int j = 0; j < n; j++)
            for (int64_t b = 0; b < d / 32; b++) {
                const float w = p[(int64_t)i * ldp + j],
                            dv = block_quants(vt, v + (uint64_t)j * ldv, b, vq);
                for (int e = 0; e < 32; e++) /* dv * quant: exact in f32 */
                    oi[b * 32 + e] = fmaf(w, dv * (float)vq[e], oi[b * 32 + e]);
            }
    }
}

/* ---- the reference numerics (attn_f16) ---- */

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
            const float *qi = q + (int64_t)i * ldq, *kj = k + (int64_t)j * ldk;
            float x = 0.0f;
            for (int64_t c = 0; c < d; c++)
                x = fmaf(qi[c], kj[c], x);
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
        cpulm_attn_merge_row(&M[i], &L[i], mc[i], lc[i], &a, &b, cpulm_generic_vexpf);
        float *oi = o + (int64_t)i * ldo;
        const float *ci = oc + (int64_t)i * ldoc;
        for (int64_t c = 0; c < d; c++)
            oi[c] = fmaf(ci[c], b, oi[c] * a);
    }
}

/* ---- the tiled numerics with bf16 products ---- */

static inline float bf(uint32_t pair, int hi) {
    return cpulm_bf16_to_f32((uint16_t)(hi ? pair >> 16 : pair));
}

/* z(): an f32 of exponent field 0 as a zero of its sign (vdpbf16ps's DAZ / FTZ). */
static inline float flush(float x) {
    const uint32_t u = cpulm_f32_bits(x);
    return (u & 0x7f800000u) ? x : cpulm_bits_f32(u & 0x80000000u);
}

/* vdpbf16ps's lane: the high elements' product first, each step rounded (products exact). */
static inline float bstep(float acc, uint32_t x, uint32_t y) {
    acc = flush(fmaf(bf(x, 1), bf(y, 1), flush(acc)));
    return flush(fmaf(bf(x, 0), bf(y, 0), acc));
}

/* two halves as a bf16 pair (their f32 values are exact) */
static inline uint32_t hpair(uint16_t lo, uint16_t hi) {
    return cpulm_bf16_pair(cpulm_fp16_to_f32(lo), cpulm_fp16_to_f32(hi));
}

void cpulm_generic_attn_bpack(int64_t d, int n, const uint16_t *k, int64_t ldk, const uint16_t *v,
                              int64_t ldv, uint32_t *kp, uint32_t *vp) {
    const int nk = (n + 15) / 16 * 16;
    for (int64_t p = 0; p < d / 2; p++)
        for (int j = 0; j < nk; j++)
            kp[p * nk + j] = j < n ? hpair(k[j * ldk + 2 * p], k[j * ldk + 2 * p + 1]) : 0;
    for (int t = 0; 2 * t < n; t++)
        for (int64_t c = 0; c < d; c++) /* an odd tile's last pair: a value of 0 */
            vp[t * d + c] = hpair(v[2 * t * ldv + c], 2 * t + 1 < n ? v[(2 * t + 1) * ldv + c] : 0);
}

void cpulm_generic_attn_bscores(int64_t d, int m, int n, const uint32_t *qp, int64_t ldq,
                                const uint32_t *kp, int nk, float scale, float *s, int64_t lds) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float x = 0.0f;
            for (int64_t p = 0; p < d / 2; p++)
                x = bstep(x, qp[i * ldq + p], kp[p * nk + j]);
            s[(int64_t)i * lds + j] = x * scale;
        }
}

void cpulm_generic_attn_bpv(int64_t d, int m, int n, const float *p, int64_t ldp,
                            const uint32_t *vp, const float *a, float *o, int64_t ldo) {
    for (int i = 0; i < m; i++) {
        float *oi = o + (int64_t)i * ldo;
        const float *pi = p + (int64_t)i * ldp;
        for (int64_t c = 0; c < d; c++)
            oi[c] *= a[i];
        for (int t = 0; 2 * t < n; t++) {
            const int odd = 2 * t + 1 == n; /* the last pair's high half: weight and value 0 */
            const uint32_t w = cpulm_bf16_pair(pi[2 * t], odd ? 0.0f : pi[2 * t + 1]);
            const uint32_t keep = odd ? 0xffffu : 0xffffffffu;
            for (int64_t c = 0; c < d; c++)
                oi[c] = bstep(oi[c], w, vp[t * d + c] & keep);
        }
    }
}
