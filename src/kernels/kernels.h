/* kernels.h: the cpulm_kernels function table, the only interface between model code and
 * SIMD code.
 *
 * One table per ISA level (generic, avx2, avx512, avx512vnni, amx, neon, dotprod, i8mm, sve).
 * The table's entries come from one list, CPULM_KERNEL_TYPED_OPS and CPULM_KERNEL_OPS below.
 * The generic table is complete: every entry is non-NULL, written in portable C, and is the
 * oracle the tests compare every other level against. A level's NULL entry inherits from the
 * level below it. cpulm_kernels_get() merges the levels the running CPU supports (CPUID and
 * xgetbv on x86, HWCAP on ARM), once, honouring CPULM_ISA=<level> to force a lower level.
 *
 * Contracts: shapes and types were validated at model load, so kernels return void and
 * only assert preconditions in debug builds. Row lengths are multiples of the block size.
 * Pointers need only their element's natural alignment (4 bytes for f32 and Q8_K rows, 2
 * for fp16/bf16 and the other block types); no entry assumes vector alignment.
 */
#ifndef CPULM_KERNELS_H
#define CPULM_KERNELS_H

#include <stdint.h>

#include "../format/quant.h"

typedef struct cpulm_kernels cpulm_kernels;

/* s = dot(x, y) over n elements; x is a row of the weight type, y a row of its
 * vec_dot_type (cpulm_dtype_traits.vec_dot_type) made by from_float. */
typedef void (*cpulm_vec_dot_fn)(int64_t n, float *s, const void *x, const void *y);
/* Converts n floats into a row of the type (activation quantization). */
typedef void (*cpulm_from_float_fn)(const float *x, void *y, int64_t n);
/* Converts a row of the type into n floats. */
typedef void (*cpulm_to_float_fn)(const void *x, float *y, int64_t n);

/* ---- repacked weights (src/model/repack.c) ----
 * A weight whose row count is a multiple of CPULM_PACK_ROWS can be repacked at load into
 * groups of 16 rows, interleaved block by block so one 512-bit load holds 4 bytes of each
 * of the 16 rows. Groups are contiguous; within a group, blocks (32 elements for Q4_0/Q8_0,
 * 256-element super-blocks for the K-quants) follow in order, and each block holds the 16
 * rows' copies of the block's fields, field by field in the block struct's order: a 2-byte
 * field (a fp16 scale) or 1-byte field (an E8M0 exponent) as 16 values in row order; a field of 4k
 * bytes as k chunks of 64 bytes whose 4-byte lane r holds bytes 4c..4c+3 of the field of row r
 * (chunk c). So: Q4_0: d[16], qs 4 chunks (chunk t, lane r = qs[4t..4t+3] of row r: low nibbles are
 *         elements 4t..4t+3, high nibbles 16+4t..16+4t+3); 288 bytes.
 *   Q8_0: d[16], qs 8 chunks; 544 bytes.
 *   MXFP4: e[16], qs 4 chunks as Q4_0's (codes, not nibble - 8); 272 bytes.
 *   Q4_K: d[16], dmin[16], scales 3 chunks, qs 32 chunks; 2304 bytes.
 *   Q5_K: d[16], dmin[16], scales 3 chunks, qh 8 chunks, qs 32 chunks; 2816 bytes. In
 *         aarch64 builds the 40 chunks of qh and qs hold the quants in the layout of
 *         kernels/arm/k5_layout.h instead (as Q6_K below).
 *   Q6_K: ql 32 chunks, qh 16 chunks, scales 4 chunks, d[16]; 3360 bytes. In aarch64
 *         builds the 48 chunks of ql and qh hold the quants in the layout of
 *         kernels/arm/k6_layout.h instead (repack.c's per-arch hook; every reader agrees).
 * A group takes exactly the bytes of its 16 rows in the original layout.
 * Activations for these kernels are rows of the weight's vec_dot_type followed by
 * per-block extras: cpulm_pack_act_* (Q8_0) and cpulm_pack_actk_* (Q8_K).
 *
 * Layout variants: the layout above is CPULM_X16_STD. A level whose gemm_x16[t] reads
 * another one says so in x16_layout[t] of its table; the variant travels with the
 * gemm_x16 entry when levels merge (cpulm_kernels_overlay), the loader packs what the
 * chosen level reads, and a packed tensor records it (cpulm_tensor.packed = 1 + layout).
 *   CPULM_X16_PAIRS (Q4_0 and Q8_0; the aarch64 i8mm level: SMMLA multiplies 2 rows x 8
 *   elements at a time): d[16] as in STD, then per row pair p (rows 2p, 2p + 1) the qs
 *   fields in 16-byte vectors: vector j (at 32 + 2F p + 16 j, F = the qs field's bytes)
 *   holds bytes 8j..8j+7 of row 2p's qs, then those of row 2p + 1. Q4_0 bytes are stored
 *   XOR 0x88 (each nibble q as q ^ 8, i.e. q - 8 as a 4-bit two's complement number).
 *   Same sizes as STD (288 and 544 bytes per block). */
#define CPULM_PACK_ROWS 16

enum { CPULM_X16_STD = 0, CPULM_X16_PAIRS = 1 };

/* Tiled attention (attn_* ops): keys per tile and per chunk (a multiple of the tile). One
 * tile per chunk: 64-key tiles cost 3-9% of a q8_0 prompt at depth and 3-4% of generation
 * there in per-tile work (Zen 5, docs/perf-log/2026-12-04-zen5-session-n.md). */
#define CPULM_ATTN_TILE  256
#define CPULM_ATTN_CHUNK 256

/* The repacking rule: is a weight of type t with n_rows rows repacked at load on level k?
 * Yes when the rows split into 16-row groups, t has a packed layout (a generic gemm_x16)
 * and k's gemm_x16 for t is faster than the portable one (not the generic entry). */
int cpulm_kernels_packs(const cpulm_kernels *k, cpulm_dtype t, int64_t n_rows);

/* The type a weight of type t is packed as: Q8_0 for Q5_0, Q4_1 and Q5_1, which have no GEMM
 * of their own and whose values are Q8_0's exactly (Q4_1 / Q5_1: plus a min per block, which
 * the matmul adds: cpulm_matmul_args.mins; format/quant.h cpulm_widen_q8_0), t itself
 * otherwise. The loader widens such a matrix first, when cpulm_kernels_packs says yes for
 * the packed type. */
cpulm_dtype cpulm_kernels_packs_as(cpulm_dtype t);

/* Extras of a Q8_0 activation row of n elements, starting at the first 4-byte boundary
 * after the Q8_0 blocks, nb = n/32 entries each: float d[nb] (block scales), int32
 * c4[nb] = -8 * sum(qs), int32 c8[nb] = -128 * sum(qs) (the bias corrections of unsigned
 * Q4_0 nibbles and sign-flipped Q8_0 quants), float s[nb] = fp16(d * sum(qs)) (Q8_1's s:
 * the mins of widened Q4_1 / Q5_1 weights, cpulm_matmul_args.mins). */
static inline uint64_t cpulm_pack_act_extras_offset(int64_t n) {
    return ((uint64_t)(n / 32) * sizeof(cpulm_block_q8_0) + 3) / 4 * 4;
}
static inline uint64_t cpulm_pack_act_sums_offset(int64_t n) { /* s[nb] */
    return cpulm_pack_act_extras_offset(n) + (uint64_t)(n / 32) * 12;
}
static inline uint64_t cpulm_pack_act_row_bytes(int64_t n) {
    return cpulm_pack_act_extras_offset(n) + (uint64_t)(n / 32) * 16;
}

/* Extras of a Q8_K activation row of n elements: right after the Q8_K blocks (whose size
 * is a multiple of 4), CPULM_PACK_ACTK_WORDS int32 per super-block, where b16[g] are the
 * block's bsums (sums of 16 quants) and b32[j] = b16[2j] + b16[2j+1] (sums of 32):
 *   [0..3]   int16 pairs {b32[0], b32[2]}, {b32[1], b32[3]}, {b32[4], b32[6]}, {b32[5], b32[7]}
 *            (low half first): the Q4_K / Q5_K min terms by pairwise int16 dots;
 *   [4..11]  int16 pairs {b16[4c], b16[4c+2]}, {b16[4c+1], b16[4c+3]} for c = 0..3: the
 *            Q6_K bias term sum(sc * b16) by pairwise int16 dots;
 *   [12..27] -32 * b16[g]: the Q6_K bias of group g, to seed an unsigned-quant dot. */
#define CPULM_PACK_ACTK_WORDS 28
static inline uint64_t cpulm_pack_actk_extras_offset(int64_t n) {
    return (uint64_t)(n / CPULM_QK_K) * sizeof(cpulm_block_q8_K);
}
static inline uint64_t cpulm_pack_actk_row_bytes(int64_t n) {
    return cpulm_pack_actk_extras_offset(n) +
           (uint64_t)(n / CPULM_QK_K) * 4 * CPULM_PACK_ACTK_WORDS;
}

/* s[j * ld + r] = dot(row r of the 16-row group w, activation row j), r < 16, j < nt
 * (nt >= 1); n is the row length; act rows (cpulm_pack_act_row_bytes or
 * cpulm_pack_actk_row_bytes each, act_stride apart) carry their extras. Every (r, j)
 * element is computed with the same arithmetic whatever nt is, so batching never changes a
 * result. Float steps, per block (super-block) b in order, acc starting at 0:
 *   Q4_0, Q8_0: acc += dw * (dx * float(isum))   (isum: the block's exact int dot)
 *   MXFP4:      the same, dw = 2^(e - 128) and isum over the doubled E2M1 values
 *   Q4_K, Q5_K: acc = fma(d * dy, float(sumi), acc); acc = fma(-(dmin * dy), float(summ), acc)
 *   Q6_K:       acc = fma(d * dy, float(sumi), acc)
 * with sumi, summ the super-block's exact int sums (those of the generic vec_dot); fma is
 * fused (one rounding) at every level, so K-quant levels agree bit for bit. */
typedef void (*cpulm_gemm_fn)(int64_t n, int nt, float *s, int64_t ld, const void *w,
                              const uint8_t *act, uint64_t act_stride);
/* gemm_x16 over ng >= 1 consecutive 16-row groups (group g at w + g * group_bytes) for the
 * same nt tokens: s[j * ld + 16 g + r] is the level's gemm_x16 result for group g, bit for
 * bit. Optional (x16_groups below): it lets a level prepare the tokens once for several
 * groups (the i8mm level interleaves token pairs for SMMLA). */
typedef void (*cpulm_gemm_groups_fn)(int64_t n, int nt, int ng, float *s, int64_t ld, const void *w,
                                     uint64_t group_bytes, const uint8_t *act, uint64_t act_stride);

/* Several weight rows against several activation rows in one pass (speculative
 * verification and batched decoding of float models load (F16: convert) each weight element
 * once for several tokens instead of once per token). s[j * ld + r] = vec_dot(row r,
 * activation row j) of the generic level, bit for bit, for r < nr, j < nt (nr, nt >= 1);
 * weight row r at w + r * w_stride bytes, activation row j (the vec_dot_type's row) at act +
 * j * act_stride. F32: each pair keeps the canonical order of generic/dot.c (16 lanes, the
 * tree sum, the fmaf tail), pairs side by side (F32 strides are multiples of 4 bytes). F16:
 * the generic dot adds exact products in double, a sum independent of order in practice
 * (generic/dot.c), so a level converts each element to double once per pass and fuses it into
 * several double accumulators (fma(w, x, acc) in double is the generic's acc + exact product)
 * in any order. BF16: no generic one; its SIMD vec_dot adds in float, faster than any double
 * path, and is not the generic's bits, so a level's gemm_rows[BF16] (avx512's) gives that
 * level's own vec_dot bits. */
typedef void (*cpulm_gemm_rows_fn)(int64_t n, int nr, int nt, float *s, int64_t ld, const void *w,
                                   uint64_t w_stride, const uint8_t *act, uint64_t act_stride);

/* ---- the op list: the one place an op is named ----
 * Per-type ops, X(ID, name, fn type): an array indexed by cpulm_dtype (weight type for
 * vec_dot and gemm_x16, target type for from_float, source type for to_float). */
#define CPULM_KERNEL_TYPED_OPS(X)                                                         \
    X(VEC_DOT, vec_dot, cpulm_vec_dot_fn)                                                 \
    X(FROM_FLOAT, from_float, cpulm_from_float_fn)                                        \
    X(TO_FLOAT, to_float, cpulm_to_float_fn)                                              \
    /* repacked-weight GEMM (see CPULM_PACK_ROWS): Q4_0, Q8_0, MXFP4, Q4_K, Q5_K, Q6_K */ \
    X(GEMM_X16, gemm_x16, cpulm_gemm_fn)                                                  \
    /* multi-row float GEMM (cpulm_gemm_rows_fn): F32, F16, BF16 (avx512) */              \
    X(GEMM_ROWS, gemm_rows, cpulm_gemm_rows_fn)

/* Plain ops, X(ID, name, return type, (parameters), describe group): the table field, its
 * generic implementation cpulm_generic_<name> (declared from this list in generic.h and
 * put into the generic table by table.c), the level overlay (dispatch.c), the describe
 * line and the "every op has a generic version" test all come from this list. Adding an op
 * is one entry here plus its implementations. Groups: F32 (f32 vector ops of the forward
 * pass), ATTN (attention over an F16 KV cache, reference numerics). */
#define CPULM_KERNEL_OPS(X)                                                                       \
    /* y[i] = x[i] * w[i] / sqrt(mean(x^2) + eps) */                                              \
    X(RMS_NORM, rms_norm, void, (int64_t n, float *y, const float *x, const float *w, float eps), \
      F32)                                                                                        \
    /* y[i] = silu(g[i]) * u[i] */                                                                \
    X(SWIGLU, swiglu, void, (int64_t n, float *y, const float *g, const float *u), F32)           \
    /* x[i] = exp(x[i] - max) / sum; n >= 1 */                                                    \
    X(SOFTMAX, softmax, void, (int64_t n, float *x), F32)                                         \
    /* y += a * x */                                                                              \
    X(AXPY, axpy, void, (int64_t n, float *y, float a, const float *x), F32)                      \
    /* sum(x[i] * y[i]) over f32 */                                                               \
    X(DOT_F32, dot_f32, float, (int64_t n, const float *x, const float *y), F32)                  \
    /* y[i] = silu(x[i]), canonical as swiglu (Gated DeltaNet's conv output and gate) */          \
    X(SILU, silu, void, (int64_t n, float *y, const float *x), F32)                               \
    /* rope on n_heads heads (head h at v + h * head_stride): its first n_rot dims by pairs       \
     * (x[i], x[i + n_rot / 2]) when neox, else (x[2i], x[2i + 1]), angle i's cs[i], sn[i]:       \
     * x0' = fma(x0, cs, -(x1 * sn)), x1' = fma(x0, sn, x1 * cs) (rope_body.h) */                 \
    X(ROPE, rope, void,                                                                           \
      (float *v, int n_heads, int head_stride, int n_rot, int neox, const float *cs,              \
       const float *sn),                                                                          \
      F32)                                                                                        \
    /* gpt-oss's gate (ggml's swiglu_oai): x = fminf(g[i], limit), v = fminf(fmaxf(u[i],          \
     * -limit), limit), y[i] = x / (1 + expf(alpha * -x)) * (v + 1) with libm's expf (the         \
     * reference's scalar arithmetic), so every level is generic's bits. y may be g. */           \
    X(SWIGLU_OAI, swiglu_oai, void,                                                               \
      (int64_t n, float *y, const float *g, const float *u, float alpha, float limit), F32)       \
    /* the min term of Q4_1 / Q5_1 weights widened to Q8_0 (matmul.c, cpulm_matmul_args.mins):    \
     * for token j < nt and row r < 16 of group q < ng, out[j * ld + 16 q + r] += acc, with acc   \
     * one fma chain from 0 over blocks b = 0..nb-1 of m[(q * nb + b) * 16 + r] times s_j[b],     \
     * s_j = (const float *)(s + j * ss) */                                                       \
    X(GEMM_MINS, gemm_mins, void,                                                                 \
      (int64_t nb, int nt, int ng, const float *m, const uint8_t *s, uint64_t ss, float *out,     \
       int64_t ld),                                                                               \
      F32)                                                                                        \
    /* ---- Gated DeltaNet (hybrid models; driven by src/model/deltanet.c) ----                   \
     * Every output element is one fma chain in the order stated (no reduction tree), so          \
     * every level is bit-identical to the generic one. */                                        \
    /* One token of the gated delta rule on one head, its n x n state transposed                  \
     * (T[i * n + r]: key element i, value element r): d[r] = fma chain over i = 0..n-1 of        \
     * k[i] * T[i][r] from 0, then d[r] = (v[r] - decay * d[r]) * beta (three roundings);         \
     * for i = 0..n-1 in order, T[i][r] = fma(k[i], d[r], decay * T[i][r]) and o[r] =             \
     * fma(q[i], T[i][r], o[r]) (the new T, o from 0); then o[r] *= scale. d: n floats of         \
     * scratch (holds the update on return). */                                                   \
    X(DNET_STEP, dnet_step, void,                                                                 \
      (int64_t n, float *T, const float *q, const float *k, const float *v, float beta,           \
       float decay, float scale, float *o, float *d),                                             \
      F32)                                                                                        \
    /* c[i * ldc + j] = fma chain over p = 0..k-1 of a[i * lda + p] * b[p * ldb + j],             \
     * starting from c[i * ldc + j] when acc, else from 0; i < m, j < n (the chunk's              \
     * products). */                                                                              \
    X(DNET_MM, dnet_mm, void,                                                                     \
      (int m, int n, int k, const float *a, int64_t lda, const float *b, int64_t ldb, float *c,   \
       int64_t ldc, int acc),                                                                     \
      F32)                                                                                        \
    /* One token of the causal depthwise convolution over n channels, taps >= 1: with in_j =      \
     * win[j * ldwin + c] for j < taps - 1 (oldest first) and in_{taps-1} = x[c], x[c] = fma      \
     * chain over j = 0..taps-1 of in_j * w[j * ldw + c] from 0; then the window moves on one     \
     * token (win[j] = in_{j+1}). Both tap-major. */                                              \
    X(DNET_CONV, dnet_conv, void,                                                                 \
      (int64_t n, int taps, float *x, float *win, int64_t ldwin, const float *w, int64_t ldw),    \
      F32)                                                                                        \
    /* One query over n >= 1 keys of an F16 cache, with the reference's F16 attention             \
     * numerics: scores s_j = dot(k_j, q16) * scale (q16 is the query rounded to f16), online     \
     * softmax, and the weighted sum of V accumulated in f16 (rounded after every key:            \
     * f16(acc * ms), f16(fma(v, vs, acc))). out[0..d) = that sum / the softmax denominator.      \
     * Key j's d halves start at k + j * stride bytes, value j's at v + j * stride. Generic       \
     * only: the oracle of the exact numerics (attn_x*) and of the driver's walk. */              \
    X(ATTN_F16, attn_f16, void,                                                                   \
      (int64_t d, int64_t n, const uint16_t *q16, const uint8_t *k, const uint8_t *v,             \
       uint64_t stride, float scale, float *out),                                                 \
      ATTN)                                                                                       \
    /* ---- tiled attention (issue #11; driven by src/model/attention.c) ----                     \
     * One query row's attention over keys 0..pos is, at every level and whatever the batch       \
     * or thread count: keys in chunks of CPULM_ATTN_CHUNK (aligned at 0), each chunk in          \
     * tiles of at most CPULM_ATTN_TILE keys; per tile attn_scores, attn_softmax_row, attn_pv,    \
     * from M = -inf, L = 0, o = 0; the chunks' partials folded in order by attn_merge;           \
     * out = o * (1 / L). Each step's arithmetic per row and element is fixed below, so every     \
     * level is bit-identical to the generic one. */                                              \
    /* s[i * lds + j] = x * scale for i < m, j < n, x the fma chain over c = 0..d-1 in order      \
     * of q_i[c] * k_j[c] from 0 (q_i = q + i * ldq, k_j = k + j * ldk): one chain per score, so  \
     * a level puts keys (or rows) in vector lanes, a micro-GEMM with no reduction tree. */       \
    X(ATTN_SCORES, attn_scores, void,                                                             \
      (int64_t d, int m, int n, const float *q, int64_t ldq, const float *k, int64_t ldk,         \
       float scale, float *s, int64_t lds),                                                       \
      ATTN)                                                                                       \
    /* One row's online-softmax step over a tile of n scores of which the first lim count         \
     * (1 <= lim <= n): mx = max(*M, s[j < lim]); s[j] = vexp(s[j] - mx) for j < lim, 0 for       \
     * lim <= j < n (vexp: cpulm_generic_vexpf); sum = the 16-lane sum of s (lane l adds          \
     * j == l mod 16 in order, then the reduce16 tree); a = *M == -inf ? 0 : vexp(*M - mx);       \
     * *L = fma(*L, a, sum); *M = mx. Returns a. */                                               \
    X(ATTN_SOFTMAX_ROW, attn_softmax_row, float, (int n, int lim, float *s, float *M, float *L),  \
      ATTN)                                                                                       \
    /* o_i[c] = o_i[c] * a[i], then o_i[c] = fma(p[i * ldp + j], v_j[c], o_i[c]) for              \
     * j = 0..n-1 in order; i < m, c < d; v_j = v + j * ldv, o_i = o + i * ldo. */                \
    X(ATTN_PV, attn_pv, void,                                                                     \
      (int64_t d, int m, int n, const float *p, int64_t ldp, const float *v, int64_t ldv,         \
       const float *a, float *o, int64_t ldo),                                                    \
      ATTN)                                                                                       \
    /* Folds a chunk's partial (mc, lc, oc) into the running (M, L, o) of m rows: mx =            \
     * max(M, mc); a = M == -inf ? 0 : vexp(M - mx); b = vexp(mc - mx); L = fma(L, a, lc*b);      \
     * o[c] = fma(oc[c], b, o[c] * a); M = mx. Rows with mc == -inf are left alone. */            \
    X(ATTN_MERGE, attn_merge, void,                                                               \
      (int64_t d, int m, const float *mc, const float *lc, const float *oc, int64_t ldoc,         \
       float *M, float *L, float *o, int64_t ldo),                                                \
      ATTN)                                                                                       \
    /* ---- exact tiled attention (attn_x*; driven by src/model/attention.c) ----                 \
     * attn_f16's per-row result, bit for bit, computed by tiles: per row, from M = -inf,         \
     * S = 0, acc = 0 (f32 values that are exactly f16), every tile of keys in order:             \
     * attn_xscores, attn_xweights, attn_xpv; out = acc * (S == 0 ? 0 : 1 / S). Queries,          \
     * keys and values are f32 holding f16 values (the query rounded to f16 once). */             \
    /* s[i * lds + j] = (float)sum_c(qt[c * ldqt + i] * (double)k_j[c]) * scale, the double       \
     * sum in c order (vec_dot_f16's sum for f16 values); i < m, j < n. The queries come          \
     * transposed, as doubles (row i of the block is column i), made once per block. */           \
    X(ATTN_XSCORES, attn_xscores, void,                                                           \
      (int64_t d, int m, int n, const double *qt, int64_t ldqt, const float *k, int64_t ldk,      \
       float scale, float *s, int64_t lds),                                                       \
      ATTN)                                                                                       \
    /* One row's softmax weights, attn_f16's key step, for j = 0..n-1 in order: x = s[j];         \
     * if x > *M: ms[j] = expf(*M - x), s[j] = 1, *M = x; else ms[j] = 1, s[j] =                  \
     * expf(x - *M). expf is libm's (a level may use its own where it is the same bits). */       \
    X(ATTN_XWEIGHTS, attn_xweights, void, (int n, float *s, float *ms, float *M), ATTN)           \
    /* For i < m, j = 0..n-1 in order: if ms_ij != 1 (the max moved), acc_i[c] =                  \
     * h(acc_i[c] * ms_ij) for c < d; then acc_i[c] = h(fma(v_j[c], vs_ij, acc_i[c]));            \
     * S[i] = fma(S[i], ms_ij, vs_ij). h rounds to f16 (nearest even) and back; ms_ij =           \
     * ms[i * ldw + j], vs_ij = vs[i * ldw + j], v_j = v + j * ldv, acc_i = acc + i * lda. */     \
    X(ATTN_XPV, attn_xpv, void,                                                                   \
      (int64_t d, int m, int n, const float *ms, const float *vs, int64_t ldw, const float *v,    \
       int64_t ldv, float *acc, int64_t lda, float *S),                                           \
      ATTN)                                                                                       \
    /* ---- tiles straight from a Q8_0 / Q4_0 cache (attn_q*; attention.c on such caches) ----    \
     * The attn_* structure above (chunks, tiles, attn_merge), but per tile attn_qscores,         \
     * attn_softmaxz, attn_qpv on the cache rows themselves (no f32 tile), with the query         \
     * rows quantized once per work item by attn_qquant. Bit-identical at every level. Each of    \
     * attn_qscores / attn_qpv may hint (prefetch, never read into a result) the n rows at next + \
     * j * ld, the rows the caller reads after this tile (NULL: none). */                         \
    /* llama.cpp's query on a quantized cache: Q8_0 blocks. Row i (q + i * ldq, d elements, d     \
     * % 32 == 0), block b of 32: amax = max |q|; q8[i * d + 32 b + e] = the int8 nearest         \
     * q[32 b + e] * (127 / amax) (halves to even; all 0 when amax is 0); qd[i * (d / 32) + b]    \
     * = amax / 127 rounded to f16 (as f32). Finite q. */                                         \
    X(ATTN_QQUANT, attn_qquant, void,                                                             \
      (int64_t d, int m, const float *q, int64_t ldq, int8_t *q8, float *qd), ATTN)               \
    /* kt Q8_0 or Q4_0, d % 32 == 0: key j is d elements of kt at k + j * ldk bytes; query row i  \
     * is attn_qquant's (q8 + i * d, qd + i * (d / 32)). For i < m, j < n: acc = 0; per block b   \
     * of 32 in order, acc = fma(dk_jb * dq_ib, (float)isum_ijb, acc) with isum the exact int32   \
     * dot of the row's and the key's block quants (Q4_0: nibble - 8); s[i * lds + j] = acc *     \
     * sc. */                                                                                     \
    X(ATTN_QSCORES, attn_qscores, void,                                                           \
      (int64_t d, cpulm_dtype kt, int m, int n, const int8_t *q8, const float *qd, float sc,      \
       const uint8_t *k, uint64_t ldk, float *s, int64_t lds, const uint8_t *next),               \
      ATTN)                                                                                       \
    /* attn_softmax_row with vexpz(x) = x < -87 ? 0 : vexp(x) for vexp (for the scores and        \
     * for a): below -87 the result would not be a normal float (the libm ldexpf path of          \
     * vexp); flushed, a weight errs by < 2^-125 against the row max's weight of 1. */            \
    X(ATTN_SOFTMAXZ, attn_softmaxz, float, (int n, int lim, float *s, float *M, float *L), ATTN)  \
    /* vt Q8_0 or Q4_0, d % 32 == 0: o_i[c] = o_i[c] * a[i] (0 when a[i] == 0: o_i is then not    \
     * read, so a first tile needs no cleared output), then for j = 0..n-1 in order:              \
     * o_i[c] = fma(p[i * ldp + j], dv_jb * (float)quant_jc, o_i[c]) for block b's c (the         \
     * dequantized value, exact in f32); value j at v + j * ldv bytes, o_i = o + i * ldo;         \
     * i < m. */                                                                                  \
    X(ATTN_QPV, attn_qpv, void,                                                                   \
      (int64_t d, cpulm_dtype vt, int m, int n, const float *p, int64_t ldp, const uint8_t *v,    \
       uint64_t ldv, const float *a, float *o, int64_t ldo, const uint8_t *next),                 \
      ATTN)                                                                                       \
    /* ---- tiles with bf16 products (attn_b*; attention.c under CPULM_ATTN_BF16) ----            \
     * The attn_* structure (chunks, tiles, attn_softmax_row, attn_merge), with the products      \
     * of the scores and the values taken on bf16 operands by pair steps: b(x) = x rounded to     \
     * bf16 nearest even, x of exponent field 0 taken as +-0 first (cpulm_f32_to_bf16_daz);       \
     * step(acc, x0, x1, y0, y1) = z(fma(x0, y0, z(fma(x1, y1, z(acc))))) with z flushing an      \
     * f32 of exponent field 0 to +-0 (AVX512-BF16's vdpbf16ps lane, whose products are exact).   \
     * A u32 pair holds two bf16: the first element in the low half. */                           \
    /* kp[p * nk + j] = pair (b(k_j[2p]), b(k_j[2p + 1])), p < d / 2, j < nk = n rounded up to    \
     * 16 (0 for j >= n); vp[t * d + c] = pair (b(v_2t[c]), b(v_2t+1[c])), t < (n + 1) / 2, with  \
     * v_n = 0 for odd n; k_j = k + j * ldk, v_j = v + j * ldv: F16 rows (an F16 cache's, read    \
     * in place; b of the exact f32 value); d % 16 == 0. A tile packed for n keys serves any      \
     * n' <= n: attn_bscores takes its nk, attn_bpv reads no key past n'. */                      \
    X(ATTN_BPACK, attn_bpack, void,                                                               \
      (int64_t d, int n, const uint16_t *k, int64_t ldk, const uint16_t *v, int64_t ldv,          \
       uint32_t *kp, uint32_t *vp),                                                               \
      ATTN)                                                                                       \
    /* s[i * lds + j] = x * scale for i < m, j < n: x = step over pairs p = 0..d/2-1 in order     \
     * from 0 of qp_i[p] (qp_i = qp + i * ldq, pairs of the query rounded by b) and key j's pair  \
     * p of kp (attn_bpack's layout with nk keys a pair row: n <= nk, nk % 16 == 0). */           \
    X(ATTN_BSCORES, attn_bscores, void,                                                           \
      (int64_t d, int m, int n, const uint32_t *qp, int64_t ldq, const uint32_t *kp, int nk,      \
       float scale, float *s, int64_t lds),                                                       \
      ATTN)                                                                                       \
    /* o_i[c] = o_i[c] * a[i], then for key pairs t = 0..(n+1)/2-1 in order: o_i[c] =             \
     * step(o_i[c], b(p_i,2t), b(p_i,2t+1), vp's pair t at c) with p_i,n = 0 and v_n = 0 for odd  \
     * n (the pair's high half unread); p_i,j = p[i * ldp + j], o_i = o + i * ldo; i < m, c < d   \
     * (vp: attn_bpack's layout). */                                                              \
    X(ATTN_BPV, attn_bpv, void,                                                                   \
      (int64_t d, int m, int n, const float *p, int64_t ldp, const uint32_t *vp, const float *a,  \
       float *o, int64_t ldo),                                                                    \
      ATTN)

struct cpulm_kernels {
    const char *name; /* "generic", "avx2", ... */
#define CPULM_KERNEL_TYPED_FIELD(ID, name, fn) fn name[CPULM_DTYPE_COUNT];
    CPULM_KERNEL_TYPED_OPS(CPULM_KERNEL_TYPED_FIELD)
#undef CPULM_KERNEL_TYPED_FIELD
    /* The packed layout gemm_x16[t] reads (CPULM_X16_*; 0 = STD): set with the entry */
    unsigned char x16_layout[CPULM_DTYPE_COUNT];
    /* gemm_x16[t] over several groups per call (NULL: matmul calls gemm_x16 per group); set
     * with the entry, like x16_layout */
    cpulm_gemm_groups_fn x16_groups[CPULM_DTYPE_COUNT];
#define CPULM_KERNEL_FIELD(ID, name, ret, params, group) ret(*name) params;
    CPULM_KERNEL_OPS(CPULM_KERNEL_FIELD)
#undef CPULM_KERNEL_FIELD
};

extern const cpulm_kernels cpulm_kernels_generic;
/* Per-ISA tables: defined only when the build compiled that level's file (the build sets
 * CPULM_HAVE_<LEVEL>=1); referenced only from dispatch.c. NULL entries inherit. */
extern const cpulm_kernels cpulm_kernels_avx2, cpulm_kernels_avx512, cpulm_kernels_avx512vnni,
    cpulm_kernels_avx512bf16, cpulm_kernels_amx;
extern const cpulm_kernels cpulm_kernels_neon, cpulm_kernels_dotprod, cpulm_kernels_i8mm,
    cpulm_kernels_sve;

/* The merged table for this CPU (cached after the first call; thread-safe). */
const cpulm_kernels *cpulm_kernels_get(void);
/* Every level this CPU offers, merged the same way, lowest first (generic is [0]).
 * Returns the count written (at most cap). For tests and benchmarks. */
int cpulm_kernels_levels(const cpulm_kernels **out, int cap);
/* Lays lvl's name and non-NULL entries over k: how dispatch.c makes a level's merged table
 * from its base's (also used by the tests' emulated avx512 levels, tests/levels.c). */
void cpulm_kernels_overlay(cpulm_kernels *k, const cpulm_kernels *lvl);
/* Why CPULM_ISA was not honoured ("CPULM_ISA=foo: unknown level; using avx2"), or NULL
 * when it was honoured or is unset. Borrowed, static. */
const char *cpulm_kernels_isa_warning(void);
/* The CPU features detection saw, e.g. "x86_64: avx2 fma f16c avx512f/bw/vl/dq avx512vnni"
 * (for `cpulm info --cpu`). Borrowed, static. */
const char *cpulm_cpu_features(void);

#endif
