/* attn_q.c: portable attention steps straight from Q8_0 / Q4_0 cache rows (contracts in
 * kernels.h, attn_q*): the scalar definitions the SIMD levels reproduce bit for bit. A score
 * is exact integer block dots (an int16 query against the cache's int8 or 4-bit quants)
 * scaled per block in block order; P.V folds the block scale into the weight, so neither
 * step needs an f32 copy of the tile. */
#include <math.h>

#include "../../base/fp16.h"
#include "generic.h"

void cpulm_generic_attn_qquant(int64_t d, int m, const float *q, int64_t ldq, float scale,
                               int16_t *q16, float *qs) {
    for (int i = 0; i < m; i++) {
        const float *qi = q + (int64_t)i * ldq;
        float amax = 0.0f;
        for (int64_t e = 0; e < d; e++)
            amax = fabsf(qi[e]) > amax ? fabsf(qi[e]) : amax;
        const float id = amax > 0.0f ? 32767.0f / amax : 0.0f;
        for (int64_t e = 0; e < d; e++) {
            float x = qi[e] * id;
            x = x > 32767.0f ? 32767.0f : x < -32767.0f ? -32767.0f : x; /* rounding of id */
            q16[(int64_t)i * d + e] = (int16_t)(int)(x + (x >= 0.0f ? 0.5f : -0.5f));
        }
        qs[i] = amax / 32767.0f * scale;
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

void cpulm_generic_attn_qscores(int64_t d, cpulm_dtype kt, int m, int n, const int16_t *q16,
                                int64_t ldq, const float *qs, const uint8_t *k, uint64_t ldk,
                                float *s, int64_t lds, const uint8_t *next) {
    (void)next; /* a hint for the SIMD levels */
    int kq[32];
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            const int16_t *qi = q16 + (int64_t)i * ldq;
            float acc = 0.0f;
            for (int64_t b = 0; b < d / 32; b++) {
                const float dk = block_quants(kt, k + (uint64_t)j * ldk, b, kq);
                int32_t isum = 0;
                for (int e = 0; e < 32; e++)
                    isum += (int32_t)qi[b * 32 + e] * kq[e];
                acc = fmaf(dk, (float)isum, acc);
            }
            s[(int64_t)i * lds + j] = acc * qs[i];
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
            oi[c] *= a[i];
        for (int j = 0; j < n; j++)
            for (int64_t b = 0; b < d / 32; b++) {
                const float w =
                    p[(int64_t)i * ldp + j] * block_quants(vt, v + (uint64_t)j * ldv, b, vq);
                for (int e = 0; e < 32; e++)
                    oi[b * 32 + e] = fmaf(w, (float)vq[e], oi[b * 32 + e]);
            }
    }
}
