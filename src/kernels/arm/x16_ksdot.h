/* x16_ksdot.h: the K-quant GEMM (gemm_x16 for Q4_K, Q5_K, Q6_K) over the shared 16-row
 * layout (kernels.h), SDOT by element as in x16_sdot.h: a 16-byte slice of a quant chunk
 * is 4 quants of 4 rows (a quad), so one SDOT advances 4 rows x 1 token by 4 elements.
 * Included only by dotprod.c after arm.h (i8mm and sve inherit the entries; SMMLA would
 * need the 8-byte row pairing, see docs/perf-log/2026-11-30-arm-llvm-mca.md).
 *
 * The generic contract rounds once per super-block (fma(d dy, float(sumi), acc)), so the
 * whole super-block stays in the integer domain: sumi = sum_j sc_j dot_j, exact in int32
 * (Q4_K: |sumi| <= 8 * 63 * 32 * 15 * 128 < 2^25). Starting a fresh chain per sub-block
 * costs a MOVI per sub-block and token; instead each token keeps one running SDOT chain
 * P_j = dot_0 + .. + dot_j and, after sub-block j, sumi += P_j * (sc_j - sc_{j+1})
 * (sc past the last sub-block = 0): summation by parts, the same integer (int32 wraps
 * mod 2^32 in between, and the final sum fits). Per token and sub-block that is one MLA
 * per 8 (Q4_K) or 4 (Q6_K) SDOTs; the scale differences are per quad, shared by the tile.
 * The running chain is one dependency chain per token: 1-cycle accumulate forwarding on
 * V1/V2, 2 on N1, so 8 tokens keep 4 SDOT pipes busy.
 *
 * Registers: per token P and sumi (16 for the 8-token tile), a sub-block's weight vectors
 * (8 for Q4_K / Q5_K, 4 for Q6_K), its scale difference and the token's activation
 * vectors. The float accumulators do not fit as well, so the tile accumulates in its
 * output (zeroed first): one load and one store per token and super-block, in the same
 * order of fmas as generic.
 * Q4_K / Q5_K min term: summ = sum_j m_j b32_j (b32: pairwise sums of the Q8_K bsums) by
 * SDOT on b32 split into two int8 halves (ks_split, ks_summ), the mins in their repacked
 * lanes. Q5_K: the weights (q, 0..31) come from the ARM layout of packed Q5_K (k5_layout.h:
 * 5 loads and 15 ops per 8 weight vectors, shared by the tile). Q6_K: the weights are
 * 4 (q - 32), signed, from the ARM layout of packed Q6_K
 * (k6_layout.h: 6 ops per 4 weight vectors, shared by the tile), so there is no bias term;
 * sumi is then 4 times generic's (|4 sumi| <= 4 * 16 * 128 * 16 * 32 * 128 = 2^29, exact)
 * and SCVTF #2 (one rounding of sumi4 / 4, exact) gives float(sumi) bit for bit.
 * llvm-mca-22 (scripts/arm-perf.sh, gcc 12 -O2), 8-token tile: Q4_K 61.9% of the SDOT peak
 * on V1/V2 and 56.2% on N1, Q5_K 55.4% / 51.4%, Q6_K 60.6% / 52.7% (vector-bound; where the
 * other micro-ops go: docs/perf-log/2026-11-30-arm-llvm-mca.md). Clang needs ARM_ORDER to bound its
 * load hoisting.
 */
#ifndef CPULM_KERNELS_ARM_X16_KSDOT_H
#define CPULM_KERNELS_ARM_X16_KSDOT_H

#include "arm.h"
#include "k5_layout.h"

#define KS_TILE 8

/* arm-perf.sh markers: the super-block loop of the full tile, per type. */
#define KS_MCA(WHAT, kind)                                                            \
    do {                                                                              \
        if (NT == KS_TILE && (kind) == 4) ARM_MCA_##WHAT(ARM_MCA_LEVEL "_gemm_q4_K"); \
        if (NT == KS_TILE && (kind) == 5) ARM_MCA_##WHAT(ARM_MCA_LEVEL "_gemm_q5_K"); \
        if (NT == KS_TILE && (kind) == 6) ARM_MCA_##WHAT(ARM_MCA_LEVEL "_gemm_q6_K"); \
    } while (0)

/* Byte k (0..3, a constant) of each 32-bit lane, zero-extended. */
ARM_INLINE int32x4_t ks_ubyte(uint8x16_t v, const int k) {
    const uint32x4_t u = vreinterpretq_u32_u8(v), ff = vdupq_n_u32(0xFF);
    switch (k) {
    case 0: return vreinterpretq_s32_u32(vandq_u32(u, ff));
    case 1: return vreinterpretq_s32_u32(vandq_u32(vshrq_n_u32(u, 8), ff));
    case 2: return vreinterpretq_s32_u32(vandq_u32(vshrq_n_u32(u, 16), ff));
    default: return vreinterpretq_s32_u32(vshrq_n_u32(u, 24));
    }
}

/* Byte k (0..3, a constant) of each 32-bit lane, sign-extended. */
ARM_INLINE int32x4_t ks_sbyte(int8x16_t v, const int k) {
    const int32x4_t s = vreinterpretq_s32_s8(v);
    switch (k) {
    case 0: return vshrq_n_s32(vshlq_n_s32(s, 24), 24);
    case 1: return vshrq_n_s32(vshlq_n_s32(s, 16), 24);
    case 2: return vshrq_n_s32(vshlq_n_s32(s, 8), 24);
    default: return vshrq_n_s32(s, 24);
    }
}

/* P += the 4 rows' dot with 16 activation bytes x, weights w[0..3] (elements 4i..4i+3). */
ARM_INLINE int32x4_t ks_dot4(int32x4_t p, const int8x16_t w[4], int8x16_t x) {
    p = vdotq_laneq_s32(p, w[0], x, 0);
    p = vdotq_laneq_s32(p, w[1], x, 1);
    p = vdotq_laneq_s32(p, w[2], x, 2);
    return vdotq_laneq_s32(p, w[3], x, 3);
}

/* The Q4_K / Q5_K float steps of the super-block for token t's 4 outputs o (the running
 * accumulator). */
ARM_INLINE void ks_float_step(float *o, float32x4_t d, float32x4_t dmin, float dy, int32x4_t sumi,
                              int32x4_t summ) {
    float32x4_t acc = vld1q_f32(o);
    acc = vfmaq_f32(acc, vmulq_n_f32(d, dy), vcvtq_f32_s32(sumi));
    acc = vfmsq_f32(acc, vmulq_n_f32(dmin, dy), vcvtq_f32_s32(summ));
    vst1q_f32(o, acc);
}

/* The min term's activations of one Q8_K block, staged once per tile and super-block (the 4
 * quad passes share them): b32 (pairwise sums of the bsums, |b32| <= 32 * 128) split as
 * 256 a + c with c its low byte (signed) and a = (b32 + 128) >> 8 (|a| <= 16), both int8:
 * {a0..a7, c0..c7}. */
ARM_INLINE int8x16_t ks_split(const int16_t *bsums) {
    const int16x8_t b32 = vpaddq_s16(vld1q_s16(bsums), vld1q_s16(bsums + 8));
    return vmovn_high_s16(vrshrn_n_s16(b32, 8), b32);
}

/* summ = sum_j m_j b32_j for the 4 rows by SDOT: mlo / mhi hold the 6-bit mins m0..m3 /
 * m4..m7 of each row in its 32-bit lane (the SDOT layout), ac = ks_split(bsums), so summ =
 * 256 (m . a) + m . c: the same integer (exact in int32), 4 SDOTs and a shift instead of
 * 8 widening multiplies and a transpose of the mins. */
ARM_INLINE int32x4_t ks_summ(int8x16_t mlo, int8x16_t mhi, int8x16_t ac) {
    int32x4_t acc = vdotq_laneq_s32(vdupq_n_s32(0), mlo, ac, 0);
    acc = vshlq_n_s32(vdotq_laneq_s32(acc, mhi, ac, 1), 8);
    acc = vdotq_laneq_s32(acc, mlo, ac, 2);
    return vdotq_laneq_s32(acc, mhi, ac, 3);
}

/* Q4_K / Q5_K scale differences sc_j - sc_{j+1} (sc_8 = 0) of the quad at gq, as signed
 * bytes (|.| <= 63) in the order of the 6-bit scales (cpulm_k4_scale_min): j = 0..3 in
 * the 4 bytes of each row's lane for half 0, j = 4..7 for half 1. Loaded per half: one
 * vector live instead of two. */
ARM_INLINE int8x16_t ks_k4_dscale(const uint8_t *gq, int half) {
    const uint8x16_t s0 = vld1q_u8(gq + 64), s2 = vld1q_u8(gq + 192);
    const uint8x16_t schi =
        vorrq_u8(vandq_u8(s2, vdupq_n_u8(0x0F)), vandq_u8(vshrq_n_u8(s0, 2), vdupq_n_u8(0x30)));
    const uint32x4_t hi32 = vreinterpretq_u32_u8(schi);
    if (half)
        return vreinterpretq_s8_u8(vsubq_u8(schi, vreinterpretq_u8_u32(vshrq_n_u32(hi32, 8))));
    const uint8x16_t sclo = vandq_u8(s0, vdupq_n_u8(0x3F));
    const uint32x4_t nxt = vsliq_n_u32(vshrq_n_u32(vreinterpretq_u32_u8(sclo), 8), hi32, 24);
    return vreinterpretq_s8_u8(vsubq_u8(sclo, vreinterpretq_u8_u32(nxt)));
}

/* Q5_K sub-block j's weights of the quad (q, 0..31) from the ARM layout (k5_layout.h):
 * slices a..e of chunks 5j..5j+4, low 5 bits each for elements 4k..4k+3 (k = 0..4); their
 * top 3 bits make elements 20.., 24.., 28..: 15 ops for 8 vectors (the qh / qs layout took
 * ~24 and 16 loads). */
ARM_INLINE void ks_k5_weights(const uint8_t *gq, const int j, int8x16_t wv[8]) {
    const uint8_t *c = gq + CPULM_K5A_OFF + 64 * 5 * j;
    const uint8x16_t a = vld1q_u8(c), b = vld1q_u8(c + 64), cc = vld1q_u8(c + 128),
                     d = vld1q_u8(c + 192), e = vld1q_u8(c + 256), m5 = vdupq_n_u8(0x1F);
    wv[0] = vreinterpretq_s8_u8(vandq_u8(a, m5));
    wv[1] = vreinterpretq_s8_u8(vandq_u8(b, m5));
    wv[2] = vreinterpretq_s8_u8(vandq_u8(cc, m5));
    wv[3] = vreinterpretq_s8_u8(vandq_u8(d, m5));
    wv[4] = vreinterpretq_s8_u8(vandq_u8(e, m5));
    /* q5 = a[7:5] b[7:6]; q7 = e[7:5] d[6:5]: SLI keeps the low 2 bits of its destination */
    wv[5] = vreinterpretq_s8_u8(vsliq_n_u8(vshrq_n_u8(b, 6), vshrq_n_u8(a, 5), 2));
    wv[7] = vreinterpretq_s8_u8(vsliq_n_u8(vshrq_n_u8(d, 5), vshrq_n_u8(e, 5), 2));
    /* q6 = b[5] c[7:5] d[7], built at the top by SRIs (which keep the destination's top
     * bits) and shifted down */
    const uint8x16_t t = vsriq_n_u8(vsriq_n_u8(vshlq_n_u8(b, 2), cc, 1), d, 4);
    wv[6] = vreinterpretq_s8_u8(vshrq_n_u8(t, 3));
}

/* Q4_K (q5 = 0) / Q5_K: quad `quad` x NT tokens over super-blocks b0..b1-1, into o (zeroed
 * before the first). split: the staged ks_split of those blocks ([b - b0][KS_TILE]), or NULL
 * to split here. Unsigned lanes for sumi, whose partial sums may wrap (mod 2^32; the final
 * value is exact). */
ARM_INLINE void ks_quad_k4(int64_t b0, int64_t b1, const uint8_t *w, int q5, int quad,
                           const uint8_t *act, uint64_t stride, const int8_t *split, float *o,
                           int64_t ld, const int NT) {
    const size_t sb = q5 ? 16 * 176 : 16 * 144, qs_off = 16 * 16;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m6 = vdupq_n_u8(0x3F);
    for (int64_t b = b0; b < b1; b++) {
        KS_MCA(BEGIN, q5 ? 5 : 4);
        const uint8_t *g = w + (size_t)b * sb, *gq = g + 16 * quad;
        int32x4_t p[KS_TILE];
        uint32x4_t sumi[KS_TILE];
        _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) { /* sumi from 0: see ks_quad_k6 */
            p[t] = vdupq_n_s32(0);
            sumi[t] = vdupq_n_u32(0);
        }
        int8x16_t dsc = vdupq_n_s8(0);
        _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {
            if (ARM_IS_CLANG && j > 0) ARM_ORDER(gq, sumi[NT - 1]); /* 32 registers */
            if (j % 4 == 0) dsc = ks_k4_dscale(gq, j / 4);
            const uint32x4_t delta = vreinterpretq_u32_s32(ks_sbyte(dsc, j % 4));
            const uint8_t *q = gq + qs_off + 64 * 8 * (j / 2);
            int8x16_t wv[8];
            if (q5)
                ks_k5_weights(gq, j, wv);
            else
                _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
                    const uint8x16_t u = vld1q_u8(q + 64 * k);
                    wv[k] = vreinterpretq_s8_u8(j % 2 ? vshrq_n_u8(u, 4) : vandq_u8(u, m4));
                }
            _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) {
                const int8_t *y = ((const cpulm_block_q8_K *)(act + (size_t)t * stride))[b].qs;
                if (ARM_IS_CLANG && t > 0) ARM_ORDER(y, p[t - 1]); /* clang hoists and spills */
                p[t] = ks_dot4(p[t], wv, vld1q_s8(y + 32 * j));
                p[t] = ks_dot4(p[t], wv + 4, vld1q_s8(y + 32 * j + 16));
                const uint32x4_t pu = vreinterpretq_u32_s32(p[t]);
                sumi[t] = vmlaq_u32(sumi[t], pu, delta);
            }
        }
        ARM_ORDER(gq, sumi[NT - 1]); /* reload the mins' chunks: 2 registers fewer above */
        const uint8x16_t s1 = vld1q_u8(gq + 128), s2m = vld1q_u8(gq + 192);
        const uint8x16_t mlo = vandq_u8(s1, m6);
        const uint8x16_t mhi =
            vorrq_u8(vshrq_n_u8(s2m, 4), vandq_u8(vshrq_n_u8(s1, 2), vdupq_n_u8(0x30)));
        const float32x4_t d = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(g + 8 * quad)));
        const float32x4_t dmin = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(g + 32 + 8 * quad)));
        _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) {
            const cpulm_block_q8_K *y = (const cpulm_block_q8_K *)(act + (size_t)t * stride) + b;
            const int8x16_t ac =
                split ? vld1q_s8(split + 16 * ((size_t)(b - b0) * KS_TILE + (size_t)t))
                      : ks_split(y->bsums);
            ks_float_step(o + (size_t)t * (size_t)ld + 4 * quad, d, dmin, y->d,
                          vreinterpretq_s32_u32(sumi[t]),
                          ks_summ(vreinterpretq_s8_u8(mlo), vreinterpretq_s8_u8(mhi), ac));
        }
        KS_MCA(END, q5 ? 5 : 4);
    }
}

/* Q6_K sub-block gi's weights of the quad as 4 (q - 32), from the ARM layout (k6_layout.h):
 * three slices a, b, c masked to their top 6 bits are elements 4k..4k+3 (k = 0, 1, 2);
 * their low bit pairs, a's highest, make elements 12..15: ((((a << 2) | b & 3) << 2) |
 * c & 3) << 2, two SLIs and a shift. 6 ops for 4 vectors (the ql / qh layout took 15). */
ARM_INLINE void ks_k6_weights(const uint8_t *gq, const int gi, int8x16_t wv[4]) {
    const uint8x16_t fc = vdupq_n_u8(0xFC);
    const uint8x16_t a = vld1q_u8(gq + 192 * gi), b = vld1q_u8(gq + 192 * gi + 64),
                     c = vld1q_u8(gq + 192 * gi + 128);
    wv[0] = vreinterpretq_s8_u8(vandq_u8(a, fc));
    wv[1] = vreinterpretq_s8_u8(vandq_u8(b, fc));
    wv[2] = vreinterpretq_s8_u8(vandq_u8(c, fc));
    wv[3] = vreinterpretq_s8_u8(vshlq_n_u8(vsliq_n_u8(c, vsliq_n_u8(b, a, 2), 2), 2));
}

/* Q6_K: quad `quad` x NT tokens over all super-blocks, into o (zeroed). */
ARM_INLINE void ks_quad_k6(int64_t n, const uint8_t *w, int quad, const uint8_t *act,
                           uint64_t stride, float *o, int64_t ld, const int NT) {
    const size_t sb = 16 * 210;
    for (int64_t b = 0; b < n / CPULM_QK_K; b++) {
        KS_MCA(BEGIN, 6);
        const uint8_t *g = w + (size_t)b * sb, *gq = g + 16 * quad;
        int32x4_t p[KS_TILE];
        uint32x4_t sumi[KS_TILE];
        /* sumi from 0 by MLA (gcc folds the first into a MUL): a MUL at gi == 0 in the source
         * made gcc rotate the chains through ~16 register copies per pass */
        _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) {
            p[t] = vdupq_n_s32(0);
            sumi[t] = vdupq_n_u32(0);
        }
        int32x4_t sc = ks_sbyte(vld1q_s8((const int8_t *)gq + 3072), 0);
        _Pragma("GCC unroll 16") for (int gi = 0; gi < 16; gi++) {
            if (ARM_IS_CLANG && gi > 0) ARM_ORDER(gq, sumi[NT - 1]); /* clang: no hoisting */
            const int8_t *scn = (const int8_t *)gq + 3072 + 64 * ((gi + 1) / 4);
            const int32x4_t next =
                gi == 15 ? vdupq_n_s32(0) : ks_sbyte(vld1q_s8(scn), (gi + 1) % 4);
            const uint32x4_t delta = vreinterpretq_u32_s32(vsubq_s32(sc, next)); /* |.| <= 255 */
            sc = next;
            int8x16_t wv[4];
            ks_k6_weights(gq, gi, wv);
            _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) {
                const int8_t *y = ((const cpulm_block_q8_K *)(act + (size_t)t * stride))[b].qs;
                if (ARM_IS_CLANG && t > 0) ARM_ORDER(y, p[t - 1]); /* clang hoists and spills */
                p[t] = ks_dot4(p[t], wv, vld1q_s8(y + 16 * gi));
                const uint32x4_t pu = vreinterpretq_u32_s32(p[t]);
                sumi[t] = vmlaq_u32(sumi[t], pu, delta);
            }
        }
        const float32x4_t d = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(g + 3328 + 8 * quad)));
        _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) { /* sumi[t] = 4 x generic's */
            const cpulm_block_q8_K *y = (const cpulm_block_q8_K *)(act + (size_t)t * stride) + b;
            float *ot = o + (size_t)t * (size_t)ld + 4 * quad;
            const float32x4_t fs = vcvtq_n_f32_s32(vreinterpretq_s32_u32(sumi[t]), 2);
            vst1q_f32(ot, vfmaq_f32(vld1q_f32(ot), vmulq_n_f32(d, y->d), fs));
        }
        KS_MCA(END, 6);
    }
}

/* NT tokens against the whole group, a quad at a time (the tile's activations stay in L1
 * while the group is read 4 times, 16 of every 64 bytes per pass). kind: 4, 5 or 6.
 * Q4_K goes by chunks of KS_CHUNK super-blocks, whose min-term splits are staged first
 * (2 KB); each output still adds its super-blocks in order. Q5_K splits in its quad loop:
 * the staged splits' pointer made gcc spill a general register there. */
#define KS_CHUNK 16
ARM_INLINE void ks_tile(int kind, int64_t n, const uint8_t *w, const uint8_t *act, uint64_t stride,
                        float *s, int64_t ld, const int NT) {
    _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++)
        memset(s + (size_t)t * (size_t)ld, 0, 16 * sizeof(float));
    if (kind != 4) {
        for (int quad = 0; quad < 4; quad++)
            if (kind == 6)
                ks_quad_k6(n, w, quad, act, stride, s, ld, NT);
            else
                ks_quad_k4(0, n / CPULM_QK_K, w, 1, quad, act, stride, NULL, s, ld, NT);
        return;
    }
    int8_t split[KS_CHUNK * KS_TILE * 16];
    const int64_t nsb = n / CPULM_QK_K;
    for (int64_t b0 = 0; b0 < nsb; b0 += KS_CHUNK) {
        const int64_t b1 = b0 + KS_CHUNK < nsb ? b0 + KS_CHUNK : nsb;
        for (int64_t b = b0; b < b1; b++) {
            if (NT == KS_TILE) ARM_MCA_BEGIN(ARM_MCA_LEVEL "_stage_k4");
            _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) {
                const cpulm_block_q8_K *y =
                    (const cpulm_block_q8_K *)(act + (size_t)t * stride) + b;
                vst1q_s8(split + 16 * ((size_t)(b - b0) * KS_TILE + (size_t)t), ks_split(y->bsums));
            }
            if (NT == KS_TILE) ARM_MCA_END(ARM_MCA_LEVEL "_stage_k4");
        }
        for (int quad = 0; quad < 4; quad++)
            ks_quad_k4(b0, b1, w, 0, quad, act, stride, split, s, ld, NT);
    }
}

ARM_INLINE void ks_gemm(int kind, int64_t n, int nt, float *s, int64_t ld, const void *w,
                        const uint8_t *act, uint64_t stride) {
#define KS_CALL(j0, NT) ks_tile(kind, n, w, act + (size_t)(j0)*stride, stride, s + (j0)*ld, ld, NT)
    ARM_X16_TILES(KS_TILE, KS_CALL);
#undef KS_CALL
}

#endif
