/* avx512vnni.c: the avx512vnni kernel level (Cascade Lake, Ice Lake, Sapphire Rapids,
 * Zen 4), built with the avx512 flags plus -mavx512vnni. Extends avx512.
 *
 * VPDPBUSD multiplies unsigned bytes by signed bytes and adds groups of four straight into
 * int32 lanes: one instruction instead of maddubs + madd, and no int16 saturation. Our
 * weights are signed, so we make them unsigned: Q4_0 nibbles already are (0..15, the -8
 * comes off as 8 * sum(y)), and for Q8_0 we flip the sign bit (x + 128, 0..255) and take off
 * 128 * sum(y). sum(y) itself is one more VPDPBUSD against a constant. Every product and
 * correction is exact for the whole int8 range, -128 included, on both sides.
 */
#if defined(__x86_64__)
#include <string.h>

#include "kernels/kernels.h"
#include "x86.h"

static inline __m512i load_q8_pair(const cpulm_block_q8_0 *b) {
    return x86_join_si512(_mm256_loadu_si256((const __m256i *)b[0].qs),
                          _mm256_loadu_si256((const __m256i *)b[1].qs));
}

/* sum over each group of 4 of (u - bias) * y, with u unsigned and bias the byte in vbias */
static inline __m512i dot_biased_512(__m512i u, __m512i y, __m512i vbias) {
    const __m512i zero = _mm512_setzero_si512();
    return _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, u, y), _mm512_dpbusd_epi32(zero, vbias, y));
}

static inline __m256i dot_biased_256(__m256i u, __m256i y, __m256i vbias) {
    const __m256i zero = _mm256_setzero_si256();
    return _mm256_sub_epi32(_mm256_dpbusd_epi32(zero, u, y), _mm256_dpbusd_epi32(zero, vbias, y));
}

static void vec_dot_q8_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_q8_0 *x = vx, *y = vy;
    const int64_t nb = n / 32;
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m512i u = _mm512_xor_si512(load_q8_pair(x + i), bias); /* x + 128 */
        const __m512i p = dot_biased_512(u, load_q8_pair(y + i), bias);
        const __m512 d = x86_two_scales(x86_fp16(x[i].d) * x86_fp16(y[i].d),
                                        x86_fp16(x[i + 1].d) * x86_fp16(y[i + 1].d));
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc);
    }
    float sum = _mm512_reduce_add_ps(acc);
    if (i < nb) {
        const __m256i b256 = _mm256_set1_epi8((char)0x80);
        const __m256i u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x[i].qs), b256);
        const __m256i p = dot_biased_256(u, _mm256_loadu_si256((const __m256i *)y[i].qs), b256);
        sum += x86_fp16(x[i].d) * x86_fp16(y[i].d) * x86_hsum_ps256(_mm256_cvtepi32_ps(p));
    }
    *s = sum;
}

static void vec_dot_q4_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const cpulm_block_q4_0 *x = vx;
    const cpulm_block_q8_0 *y = vy;
    const int64_t nb = n / 32;
    const __m512i eight = _mm512_set1_epi8(8);
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m512i u = x86_join_si512(x86_nibbles_32(x[i].qs), x86_nibbles_32(x[i + 1].qs));
        const __m512i p = dot_biased_512(u, load_q8_pair(y + i), eight);
        const __m512 d = x86_two_scales(x86_fp16(x[i].d) * x86_fp16(y[i].d),
                                        x86_fp16(x[i + 1].d) * x86_fp16(y[i + 1].d));
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc);
    }
    float sum = _mm512_reduce_add_ps(acc);
    if (i < nb) {
        const __m256i p =
            dot_biased_256(x86_nibbles_32(x[i].qs), _mm256_loadu_si256((const __m256i *)y[i].qs),
                           _mm256_set1_epi8(8));
        sum += x86_fp16(x[i].d) * x86_fp16(y[i].d) * x86_hsum_ps256(_mm256_cvtepi32_ps(p));
    }
    *s = sum;
}

/* ---- GEMM over repacked 16-row groups (layouts in kernels.h) ----
 * One zmm holds 4 consecutive quants of each of 16 rows, so VPDPBUSD against 4 activation
 * bytes broadcast to every lane advances 16 dot products by 4 elements. A block's 8 such
 * vectors are unpacked once and reused for up to 8 tokens, whose 8 independent chains hide
 * the instruction's latency (and blocks overlap, each starting a fresh chain). Weights
 * enter unsigned (Q4_0 nibbles u = q + 8; Q8_0 u = q + 128 by flipping the sign bit; MXFP4
 * u = v + 12, its doubled E2M1 value v by a byte shuffle); each chain starts from the bias
 * correction (-8, -128 or -12 times sum(x), from the activation
 * row's extras), so it ends at the exact integer dot. Per block and token:
 * acc = fma(dw, dx * float(isum), acc), in block order, the same for every tile size.
 * The constant-count loops carry unroll pragmas: at -O2 GCC keeps them rolled, which puts
 * wv[] and acc[] on the stack and halves the throughput.
 * The chains are issued k-major (the k-th VPDPBUSD of every token, then the (k+1)-th), not
 * token by token: written token-major, each token's 8 dependent VPDPBUSDs (40+ cycles of
 * latency) sit in the scheduler together and fill it long before the two VNNI ports do,
 * and GCC does not reorder them. k-major, neighbours are independent. Integer sums are exact,
 * so the order changes no bit. Measured on Emerald Rapids, one thread (scripts/gemm_bench.c
 * and docs/perf-log/2026-12-02-emerald-rapids-moe-gemm.md): 1.27-1.33x on cache-resident
 * 64-token tiles, more on streamed weights with the prefetch below.
 * The first tile of a call also prefetches the group's weights PF_BLOCKS blocks ahead: the
 * weights of a call are then read from memory once (a MoE expert's, or a few tokens'
 * GEMV-like batch), and at 8-16 tokens per group the hardware prefetcher alone leaves the
 * chains waiting at every page. Later tiles find the group in L1/L2. One token (a GEMV)
 * does not prefetch: its few instructions per byte leave the hardware prefetcher ahead, and
 * the 5 prefetches per 288-byte block only cost issue slots and fill buffers. On Zen 4 at 2
 * threads, token by token in one process (docs/perf-log/2026-12-04-q35tg.md), dropping them
 * made generation 1.08x (1B), 1.11x (Qwen3.5-35B-A3B cut) and 1.02x (Qwen3-30B-A3B cut). */

#define TILE_T    8
#define PF_BLOCKS 4

static inline void unpack_q4_x16(const uint8_t *q, __m512i w[8]) {
    const __m512i m = _mm512_set1_epi8(0x0F);
    _Pragma("GCC unroll 8") for (int t = 0; t < 4; t++) {
        const __m512i v = _mm512_loadu_si512(q + 64 * t);
        w[t] = _mm512_and_si512(v, m);
        w[t + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
    }
}

static inline void unpack_q8_x16(const uint8_t *q, __m512i w[8]) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    _Pragma("GCC unroll 8") for (int s = 0; s < 8; s++) w[s] =
        _mm512_xor_si512(_mm512_loadu_si512(q + 64 * s), flip);
}

static inline __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* MXFP4 codes (Q4_0's chunks) looked up as their doubled E2M1 values plus 12 (0..24,
 * unsigned); the chain's seed takes off 12 * sum(x). */
static inline void unpack_mxfp4_x16(const uint8_t *q, __m512i w[8]) {
    const __m512i m = _mm512_set1_epi8(0x0F);
    const __m512i lut = _mm512_broadcast_i32x4(_mm256_castsi256_si128(x86_mxfp4_lut256(12)));
    _Pragma("GCC unroll 8") for (int t = 0; t < 4; t++) {
        const __m512i v = _mm512_loadu_si512(q + 64 * t);
        w[t] = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m));
        w[t + 4] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m));
    }
}

enum { W_Q4_0, W_Q8_0, W_MXFP4 };

/* NT (1..TILE_T) tokens against one group of weight kind wk. Inlined per NT and kind. */
static inline __attribute__((always_inline)) void gemm_tile(int64_t n, const uint8_t *w, int wk,
                                                            const uint8_t *act, uint64_t stride,
                                                            float *s, int64_t ld, const int NT,
                                                            int prefetch) {
    const int64_t nb = n / 32;
    const size_t blk = wk == W_Q8_0 ? 2 * 16 + 32 * 16 : wk == W_Q4_0 ? 2 * 16 + 16 * 16 : 272;
    const uint64_t xo = cpulm_pack_act_extras_offset(n);
    const int64_t corr = wk == W_Q8_0 ? 2 * nb : nb; /* offset of c8 or c4 in int32s after d */
    __m512 acc[TILE_T];
    _Pragma("GCC unroll 8") for (int j = 0; j < NT; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *g = w + (size_t)b * blk;
        if (prefetch) { /* an integer address: past the end is harmless, never a pointer */
            const uintptr_t p = (uintptr_t)g + PF_BLOCKS * blk;
            for (size_t o = 0; o < blk; o += 64)
                __builtin_prefetch((const void *)(p + o), 0, 3);
        }
        __m512 dw;
        __m512i wv[8];
        if (wk == W_MXFP4) {
            dw = x86_mxfp4_scales_x16(g);
            unpack_mxfp4_x16(g + 16, wv);
        } else {
            dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
            if (wk == W_Q8_0)
                unpack_q8_x16(g + 32, wv);
            else
                unpack_q4_x16(g + 32, wv);
        }
        __m512i is[TILE_T];
        _Pragma("GCC unroll 8") for (int j = 0; j < NT; j++) {
            int32_t c;
            memcpy(&c, (const float *)(act + (size_t)j * stride + xo) + corr + b, 4);
            if (wk == W_MXFP4) c += c / 2; /* -8 * sum(x) -> -12 * sum(x) */
            is[j] = _mm512_set1_epi32(c);
        }
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) /* k-major: see above */
            _Pragma("GCC unroll 8") for (int j = 0; j < NT; j++) {
            const int8_t *xq = ((const cpulm_block_q8_0 *)(act + (size_t)j * stride))[b].qs;
            is[j] = _mm512_dpbusd_epi32(is[j], wv[k], bcast4(xq + 4 * k));
        }
        _Pragma("GCC unroll 8") for (int j = 0; j < NT; j++) {
            const float *ex = (const float *)(act + (size_t)j * stride + xo);
            const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(is[j]), _mm512_set1_ps(ex[b]));
            acc[j] = _mm512_fmadd_ps(dw, f, acc[j]);
        }
    }
    _Pragma("GCC unroll 8") for (int j = 0; j < NT; j++)
        _mm512_storeu_ps(s + (size_t)j * (size_t)ld, acc[j]);
}

static inline __attribute__((always_inline)) void gemm_x16(int64_t n, int nt, float *s, int64_t ld,
                                                           const void *w, const uint8_t *act,
                                                           uint64_t stride, int wk) {
    /* Tiles of 8 whatever nt (with the k-major chains and the prefetch, 8-token tiles beat
     * the 4-token ones the token-major version needed for 8-16 tokens: 1.5x at 8 and 16
     * tokens on streamed weights). Per element the arithmetic is the same whatever the
     * tiling. */
    int j = 0;
    for (; j + TILE_T <= nt; j += TILE_T)
        gemm_tile(n, w, wk, act + j * stride, stride, s + j * ld, ld, TILE_T, j == 0);
    const uint8_t *a = act + j * stride;
    float *o = s + j * ld;
    const int pf = j == 0 && nt > 1; /* a GEMV leaves it to the hardware: see above */
    switch (nt - j) {
    case 7: gemm_tile(n, w, wk, a, stride, o, ld, 7, pf); break;
    case 6: gemm_tile(n, w, wk, a, stride, o, ld, 6, pf); break;
    case 5: gemm_tile(n, w, wk, a, stride, o, ld, 5, pf); break;
    case 4: gemm_tile(n, w, wk, a, stride, o, ld, 4, pf); break;
    case 3: gemm_tile(n, w, wk, a, stride, o, ld, 3, pf); break;
    case 2: gemm_tile(n, w, wk, a, stride, o, ld, 2, pf); break;
    case 1: gemm_tile(n, w, wk, a, stride, o, ld, 1, pf); break;
    default: break;
    }
}

static void gemm_q4_0_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    gemm_x16(n, nt, s, ld, w, act, stride, W_Q4_0);
}

static void gemm_q8_0_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    gemm_x16(n, nt, s, ld, w, act, stride, W_Q8_0);
}

static void gemm_mxfp4_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                           const uint8_t *act, uint64_t stride) {
    gemm_x16(n, nt, s, ld, w, act, stride, W_MXFP4);
}

/* ---- K-quant GEMM over repacked 16-row groups (layouts, float steps in kernels.h) ----
 * The same scheme per 256-element super-block: a sub-block's (Q4_K/Q5_K: 32 elements) or
 * group's (Q6_K: 16) weight vectors are unpacked once, then each token runs a chain of
 * VPDPBUSDs over them (unsigned quants x signed Q8_K bytes) and adds chain * scale into its
 * super-block sum with VPMULLD, all exact in int32 (|sum| < 2^27). Q6_K quants enter as
 * 0..63, each group's chain seeded with -32 * (its activation sum) from the row's extras,
 * so it ends at the exact sum((q - 32) * y). The Q4_K/Q5_K min term sum(m_j * b32_j) is
 * four VPDPWSSDs of (m, m) int16 pairs against the extras' (b32, b32) pairs. Then per
 * super-block and token: acc = fma(d * dy, sumi, acc) (and -= dmin * dy * summ, fused). */

#define TILE_K 8
#define Q4K_SB (16 * 144) /* group bytes per super-block */
#define Q5K_SB (16 * 176)
#define Q6K_SB (16 * 210)

static inline __m512i splat(uint32_t v) {
    return _mm512_set1_epi32((int)v);
}

/* Byte i (0..3) of every 32-bit lane, zero- or sign-extended. */
static inline __m512i lane_byte_u(__m512i v, int i) {
    return _mm512_and_si512(_mm512_srli_epi32(v, 8 * i), splat(0xff));
}
static inline __m512i lane_byte_s(__m512i v, int i) {
    return _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * i), 24);
}

static inline __m512i bcast_i32(const int32_t *p) {
    return _mm512_set1_epi32(*p);
}

/* One token (a GEMV) streams the weights from memory and does too little work per byte for
 * the out-of-order window to keep enough lines in flight, and a super-block's lines are
 * not read in address order (fields interleaved, sub-blocks re-read), which the hardware
 * prefetcher follows poorly: a GEMV over a 57 MB Q4_K matrix ran at 22 GB/s (Q6_K: 21)
 * against 39 for Q4_0 and 58 for a plain read. Prefetching the super-block 2 ahead, in
 * address order, brings both to 40-48 GB/s. Batched tiles do it too: the first tile of a
 * token chunk streams the group (Q4_K_M pp512 +3-8%), later ones find it cached.
 * __builtin_prefetch: with GCC 12, _mm_prefetch here emitted nothing.
 * Prefetches never fault, so running past the end of the weights is harmless (the address
 * is formed as an integer: no out-of-bounds pointer arithmetic). */
#define K_PREFETCH_SB 2
static inline void prefetch_ahead(const uint8_t *g, size_t sb) {
    const uintptr_t p = (uintptr_t)g + K_PREFETCH_SB * sb;
    for (size_t o = 0; o < sb; o += 64)
        __builtin_prefetch((const void *)(p + o), 0, 3);
}

/* Q4_K (q5 = 0) / Q5_K: NT (1..TILE_K) tokens against one group. */
static inline __attribute__((always_inline)) void gemm_k4_tile(int64_t n, const uint8_t *w, int q5,
                                                               const uint8_t *act, uint64_t stride,
                                                               float *s, int64_t ld, const int NT) {
    const int64_t nsb = n / CPULM_QK_K;
    const size_t sb = q5 ? Q5K_SB : Q4K_SB, qs_off = q5 ? 48 * 16 : 16 * 16;
    const uint64_t xo = cpulm_pack_actk_extras_offset(n);
    const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
    __m512 acc[TILE_K];
    _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++) {
        const uint8_t *g = w + (size_t)b * sb;
        prefetch_ahead(g, sb);
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
        const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + 32)));
        __m512i sc[2], mn[2], sumi[TILE_K];
        x86_k4_scales_x16(g + 64, sc, mn);
        _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) sumi[t] = _mm512_setzero_si512();
        _Pragma("GCC unroll 8") /* shift counts must be immediates */
            for (int j = 0; j < 8; j++) {
            const uint8_t *q = g + qs_off + 512 * (j / 2);
            __m512i wv[8];
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
                const __m512i v = _mm512_loadu_si512(q + 64 * k);
                wv[k] = _mm512_and_si512(j & 1 ? _mm512_srli_epi16(v, 4) : v, m4);
                if (q5) { /* 5th bit: bit j of the qh bytes, moved to bit 4 */
                    const __m512i h = _mm512_loadu_si512(g + 256 + 64 * k);
                    const __m512i hs =
                        j < 4 ? _mm512_slli_epi16(h, 4 - j) : _mm512_srli_epi16(h, j - 4);
                    wv[k] = _mm512_ternarylogic_epi32(wv[k], hs, b4, 0xF8); /* w | (hs & b4) */
                }
            }
            const __m512i scj = lane_byte_u(sc[j / 4], j % 4);
            _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) {
                const int8_t *y =
                    ((const cpulm_block_q8_K *)(act + (size_t)t * stride))[b].qs + 32 * j;
                __m512i is = _mm512_setzero_si512();
                _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) is =
                    _mm512_dpbusd_epi32(is, wv[k], bcast4(y + 4 * k));
                sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(is, scj));
            }
        }
        /* min pairs {m0, m2}, {m1, m3}, {m4, m6}, {m5, m7}: the extras' b32 pairing */
        const __m512i lo8 = splat(0x00ff00ffu);
        const __m512i mp[4] = {_mm512_and_si512(mn[0], lo8), _mm512_srli_epi16(mn[0], 8),
                               _mm512_and_si512(mn[1], lo8), _mm512_srli_epi16(mn[1], 8)};
        _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) {
            const uint8_t *row = act + (size_t)t * stride;
            const int32_t *ex = (const int32_t *)(row + xo) + b * CPULM_PACK_ACTK_WORDS;
            __m512i summ = _mm512_setzero_si512();
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) summ =
                _mm512_dpwssd_epi32(summ, mp[p], bcast_i32(ex + p));
            const __m512 dy = _mm512_set1_ps(((const cpulm_block_q8_K *)row)[b].d);
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(sumi[t]), acc[t]);
            acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dy), _mm512_cvtepi32_ps(summ), acc[t]);
        }
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++)
        _mm512_storeu_ps(s + (size_t)t * (size_t)ld, acc[t]);
}

/* Q6_K: NT (1..TILE_K) tokens against one group. Element 128h + 32s + 4i + (0..3) is
 * nibble s>>1 of ql chunk 16h + 8(s&1) + i, high crumb s of qh chunk 8h + i. */
static inline __attribute__((always_inline)) void gemm_k6_tile(int64_t n, const uint8_t *w,
                                                               const uint8_t *act, uint64_t stride,
                                                               float *s, int64_t ld, const int NT) {
    const int64_t nsb = n / CPULM_QK_K;
    const uint64_t xo = cpulm_pack_actk_extras_offset(n);
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    __m512 acc[TILE_K];
    _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++) {
        const uint8_t *g = w + (size_t)b * Q6K_SB;
        prefetch_ahead(g, Q6K_SB);
        __m512i sumi[TILE_K];
        _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) sumi[t] = _mm512_setzero_si512();
        _Pragma("GCC unroll 16")              /* shift counts must be immediates */
            for (int gi = 0; gi < 16; gi++) { /* 16-element group: h = gi / 8, s = gi % 8 / 2 */
            const int h = gi / 8, sq = gi % 8 / 2, i0 = 4 * (gi % 2);
            __m512i wv[4];
            _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
                const __m512i l = _mm512_loadu_si512(g + 64 * (16 * h + 8 * (sq & 1) + i0 + i));
                const __m512i hh = _mm512_loadu_si512(g + 2048 + 64 * (8 * h + i0 + i));
                const __m512i hs =
                    sq < 2 ? _mm512_slli_epi16(hh, 4 - 2 * sq) : _mm512_srli_epi16(hh, 2 * sq - 4);
                const __m512i lo = sq >> 1 ? _mm512_srli_epi16(l, 4) : l;
                /* (lo & 0x0F) | (hs & 0x30) */
                wv[i] = _mm512_ternarylogic_epi32(lo, _mm512_and_si512(hs, m30), m4, 0xEC);
            }
            const __m512i scg = lane_byte_s(_mm512_loadu_si512(g + 3072 + 64 * (gi / 4)), gi % 4);
            _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) {
                const uint8_t *row = act + (size_t)t * stride;
                const int8_t *y = ((const cpulm_block_q8_K *)row)[b].qs + 16 * gi;
                const int32_t *ex = (const int32_t *)(row + xo) + b * CPULM_PACK_ACTK_WORDS;
                __m512i is = bcast_i32(ex + 12 + gi);
                _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) is =
                    _mm512_dpbusd_epi32(is, wv[i], bcast4(y + 4 * i));
                sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(is, scg));
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + 3328)));
        _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) {
            const __m512 dy =
                _mm512_set1_ps(((const cpulm_block_q8_K *)(act + (size_t)t * stride))[b].d);
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(sumi[t]), acc[t]);
        }
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++)
        _mm512_storeu_ps(s + (size_t)t * (size_t)ld, acc[t]);
}

/* kind: 4, 5 (Q4_K, Q5_K) or 6 (Q6_K); each tile size gets its own unrolled copy. */
static inline __attribute__((always_inline)) void k_tile(int kind, int64_t n, const uint8_t *w,
                                                         const uint8_t *a, uint64_t stride,
                                                         float *o, int64_t ld, const int NT) {
    if (kind == 6)
        gemm_k6_tile(n, w, a, stride, o, ld, NT);
    else
        gemm_k4_tile(n, w, kind == 5, a, stride, o, ld, NT);
}

static inline __attribute__((always_inline)) void gemm_k_x16(int kind, int64_t n, int nt, float *s,
                                                             int64_t ld, const void *w,
                                                             const uint8_t *act, uint64_t stride) {
    int j = 0;
    for (; j + TILE_K <= nt; j += TILE_K)
        k_tile(kind, n, w, act + j * stride, stride, s + j * ld, ld, TILE_K);
    const uint8_t *a = act + j * stride;
    float *o = s + j * ld;
    switch (nt - j) {
    case 7: k_tile(kind, n, w, a, stride, o, ld, 7); break;
    case 6: k_tile(kind, n, w, a, stride, o, ld, 6); break;
    case 5: k_tile(kind, n, w, a, stride, o, ld, 5); break;
    case 4: k_tile(kind, n, w, a, stride, o, ld, 4); break;
    case 3: k_tile(kind, n, w, a, stride, o, ld, 3); break;
    case 2: k_tile(kind, n, w, a, stride, o, ld, 2); break;
    case 1: k_tile(kind, n, w, a, stride, o, ld, 1); break;
    default: break;
    }
}

static void gemm_q4_K_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    gemm_k_x16(4, n, nt, s, ld, w, act, stride);
}

static void gemm_q5_K_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    gemm_k_x16(5, n, nt, s, ld, w, act, stride);
}

static void gemm_q6_K_x16(int64_t n, int nt, float *s, int64_t ld, const void *w,
                          const uint8_t *act, uint64_t stride) {
    gemm_k_x16(6, n, nt, s, ld, w, act, stride);
}

const cpulm_kernels cpulm_kernels_avx512vnni = {
    .name = "avx512vnni",
    .vec_dot =
        {
            [CPULM_DTYPE_Q8_0] = vec_dot_q8_0_q8_0,
            [CPULM_DTYPE_Q4_0] = vec_dot_q4_0_q8_0,
        },
    .gemm_x16 =
        {
            [CPULM_DTYPE_Q8_0] = gemm_q8_0_x16,
            [CPULM_DTYPE_Q4_0] = gemm_q4_0_x16,
            [CPULM_DTYPE_Q4_K] = gemm_q4_K_x16,
            [CPULM_DTYPE_Q5_K] = gemm_q5_K_x16,
            [CPULM_DTYPE_Q6_K] = gemm_q6_K_x16,
            [CPULM_DTYPE_MXFP4] = gemm_mxfp4_x16,
        },
    .attn_qscores = cpulm_avx512vnni_attn_qscores,
};
#endif
