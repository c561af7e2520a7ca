/* deltanet.c: the layers of hybrid models (qwen35): the Gated DeltaNet layer and the gated
 * full-attention layer, each from the normed input xn to x += its output.
 *
 * Gated DeltaNet, per token t of a sequence (H_k key heads of size S_k, H_v value heads of
 * size S_v = S_k, value head h reading key head h mod H_k, as the reference maps them):
 *   qkv = W_qkv xn; z = W_z xn; b = W_beta xn; a = W_alpha xn
 *   qkv = silu(causal depthwise conv of qkv over the last `taps` tokens), tap 0 the oldest
 *   q, k = l2-normalized per key head; v
 *   beta = sigmoid(b); g = softplus(a + dt_bias) * A (A < 0: a decay)
 *   per value head: S = exp(g) S; d = (v - S k) beta; S += d k^T; o = S q / sqrt(S_k)
 *   o = rms_norm(o per value head) * ssm_norm * silu(z);  x += W_out o
 * with S a [S_v][S_k] matrix per value head, stored transposed (T = S^T, [S_k][S_v]: row i
 * holds key element i's column of S), so every product of the rule walks contiguous rows
 * with one accumulator per value element and no horizontal sums (kernels.h: dnet_*).
 * The state (the conv's last inputs and T) lives per sequence in the context (ssm_state.h).
 * The batch may hold several sequences: the conv and the recurrence walk each sequence's
 * tokens in batch order; work items are (channel block) and (sequence, value head), so the
 * result does not depend on the thread count or on which sequences share the batch.
 *
 * Generation runs the token-by-token form (kernels.h dnet_step), prompts the chunked form
 * (cpulm_dnet_chunk, on dnet_mm); the convolution is dnet_conv. */
#include "deltanet.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/ssm_state.h"
#include "attention.h"
#include "forward_int.h"

struct cpulm_dnet_scratch {
    float *qkv;       /* [n_batch][channels]: projections, then conv + silu in place */
    float *z;         /* [n_batch][inner]: output gate */
    float *ba;        /* [n_batch][2 H_v]: beta, then alpha; replaced by sigmoid(beta) and g */
    float *o;         /* [n_batch][inner]: the delta rule's output, then normed and gated */
    float *qg;        /* [n_batch][2 n_head head_dim]: gated attention's query and gate */
    float *tmp;       /* [n_threads][thread_floats]: per-thread delta rule scratch */
    float *in;        /* [n_batch][channels + inner]: the joint projection of older qwen3next
                         files (ssm_in), before it is split into qkv and z */
    int32_t *by_seq;  /* [n_batch]: batch indices grouped by sequence, in batch order */
    int32_t *seq_off; /* [n_batch + 1]: where each batch sequence's indices start */
    int32_t *seq_id;  /* [n_batch]: the sequence of each group */
    int32_t n_groups; /* sequences in the batch */
    int64_t tmp_stride;
};

#define CONV_BLOCK    64 /* channels per conv work item */
#define CONV_TAPS_MAX 64 /* ssm.conv_kernel the loader accepts at most */

static int64_t channels(const cpulm_hparams *hp) {
    return 2 * (int64_t)hp->ssm_groups * hp->ssm_state + hp->ssm_inner;
}

int64_t cpulm_dnet_conv_floats(const cpulm_hparams *hp) {
    return hp->ssm_heads ? (int64_t)(hp->ssm_conv - 1) * channels(hp) : 0;
}

int64_t cpulm_dnet_state_floats(const cpulm_hparams *hp) {
    return (int64_t)hp->ssm_heads * hp->ssm_state * hp->ssm_state;
}

/* Per thread: the step's d, or a chunk's gathered q, k, v, o rows, beta, g and the chunk
 * workspace. */
static int64_t thread_floats(int64_t d) {
    return 4 * CPULM_DNET_CHUNK * d + 2 * CPULM_DNET_CHUNK + cpulm_dnet_chunk_ws_floats(d);
}

/* Floats of every buffer, in the order they are carved out of one block. */
static void sizes(const cpulm_hparams *hp, int64_t B, int32_t nth, int64_t f[7]) {
    f[0] = B * channels(hp);
    f[1] = B * hp->ssm_inner;
    f[2] = B * 2 * hp->ssm_heads;
    f[3] = B * hp->ssm_inner;
    f[4] = hp->n_layer_attn ? B * 2 * (int64_t)hp->n_head * hp->head_dim : 0;
    f[5] = (int64_t)nth * ((thread_floats(hp->ssm_state) + 15) / 16 * 16);
    f[6] = hp->ssm_joint_in ? B * (channels(hp) + hp->ssm_inner) : 0;
}

uint64_t cpulm_dnet_scratch_bytes(const cpulm_hparams *hp, int64_t n_batch, int32_t n_threads) {
    if (hp->ssm_heads == 0) return 0;
    int64_t f[7], n = 0;
    sizes(hp, n_batch, n_threads, f);
    for (int i = 0; i < 7; i++)
        n += f[i];
    return sizeof(cpulm_dnet_scratch) + sizeof(float) * (uint64_t)n +
           sizeof(int32_t) * (3 * (uint64_t)n_batch + 1);
}

cpulm_status cpulm_dnet_scratch_new(cpulm_dnet_scratch **out, const cpulm_hparams *hp,
                                    int64_t n_batch, int32_t n_threads, cpulm_error *err) {
    *out = NULL;
    if (hp->ssm_heads == 0) return CPULM_OK;
    int64_t f[7], n = 0;
    sizes(hp, n_batch, n_threads, f);
    for (int i = 0; i < 7; i++)
        n += f[i];
    cpulm_dnet_scratch *s = calloc(1, sizeof *s);
    float *block = s ? malloc(sizeof(float) * (size_t)n) : NULL;
    int32_t *ib = block ? malloc(sizeof(int32_t) * (3 * (size_t)n_batch + 1)) : NULL;
    if (!ib) {
        free(block);
        free(s);
        return cpulm_errf(err, CPULM_ERR_NOMEM, "context: out of memory for recurrent scratch");
    }
    float **bufs[7] = {&s->qkv, &s->z, &s->ba, &s->o, &s->qg, &s->tmp, &s->in};
    for (int i = 0; i < 7; i++) {
        *bufs[i] = block;
        block += f[i];
    }
    s->tmp_stride = f[5] / n_threads;
    s->by_seq = ib;
    s->seq_id = ib + n_batch;
    s->seq_off = ib + 2 * n_batch;
    *out = s;
    return CPULM_OK;
}

void cpulm_dnet_scratch_free(cpulm_dnet_scratch *s) {
    if (!s) return;
    free(s->qkv); /* the block */
    free(s->by_seq);
    free(s);
}

/* Groups the batch's indices by sequence (single-threaded, before the pass). */
void cpulm_dnet_plan(cpulm_ctx *c) {
    cpulm_dnet_scratch *s = c->dnet;
    if (!s) return;
    int32_t n = 0, k = 0;
    for (int32_t i = 0; i < c->n_tok; i++) {
        int32_t g = 0;
        while (g < n && s->seq_id[g] != c->seq[i])
            g++;
        if (g == n) s->seq_id[n++] = c->seq[i];
    }
    for (int32_t g = 0; g < n; g++) {
        s->seq_off[g] = k;
        for (int32_t i = 0; i < c->n_tok; i++)
            if (c->seq[i] == s->seq_id[g]) s->by_seq[k++] = i;
    }
    s->seq_off[n] = k;
    s->n_groups = n;
}

/* The key head value head h reads: h mod key heads (qwen35), or h / (value heads per key
 * head) when the reference repeats each key head in place (qwen3next). */
static int64_t key_head(const cpulm_ctx *c, int64_t h) {
    const cpulm_hparams *hp = &c->m->hp;
    return c->m->arch->dnet_head_div ? h / (hp->ssm_heads / hp->ssm_groups) : h % hp->ssm_groups;
}

/* ---- the causal convolution ---- */

/* Channels [c0, c1) (at most CONV_BLOCK) of every batch sequence: out = sum over taps of
 * w * input (tap 0 the oldest), the conv state (tap-major, [taps - 1][channels]) supplying
 * the inputs before the batch and sliding on in place; qkv is overwritten. A sequence
 * starting at position 0 starts from zeros whatever its stored state. */
static void conv_block(cpulm_ctx *c, const cpulm_layer *ly, int64_t c0, int64_t c1) {
    const cpulm_hparams *hp = &c->m->hp;
    const cpulm_dnet_scratch *s = c->dnet;
    const int64_t CH = channels(hp), n = c1 - c0;
    const int K = hp->ssm_conv;
    float wt[CONV_TAPS_MAX * CONV_BLOCK]; /* the block's weights, tap-major */
    for (int64_t ch = 0; ch < n; ch++)
        for (int k = 0; k < K; k++)
            wt[k * CONV_BLOCK + ch] = ly->ssm_conv[(c0 + ch) * K + k];
    for (int32_t g = 0; g < s->n_groups; g++) {
        float *st = cpulm_ssm_conv(&c->ssm, ly->slot, s->seq_id[g]) + c0;
        if (c->pos[s->by_seq[s->seq_off[g]]] == 0)
            for (int k = 0; k < K - 1; k++)
                memset(st + k * CH, 0, sizeof(float) * (size_t)n);
        for (int32_t j = s->seq_off[g]; j < s->seq_off[g + 1]; j++)
            c->k->dnet_conv(n, K, s->qkv + (int64_t)s->by_seq[j] * CH + c0, st, CH, wt, CONV_BLOCK);
    }
}

/* ---- per-token element-wise steps ---- */

/* Older qwen3next files: token t's joint projection (per key head: q, k, then its R value
 * heads' v and z) split into the conv input (all q, all k, all v) and z. */
static void split_joint(cpulm_ctx *c, int64_t t) {
    const cpulm_hparams *hp = &c->m->hp;
    const cpulm_dnet_scratch *s = c->dnet;
    const int64_t CH = channels(hp), I = hp->ssm_inner, Sk = hp->ssm_state, Hk = hp->ssm_groups;
    const int64_t RV = I / Hk, G = 2 * Sk + 2 * RV; /* one key head's values */
    const float *in = s->in + t * (CH + I);
    float *qkv = s->qkv + t * CH, *z = s->z + t * I;
    for (int64_t g = 0; g < Hk; g++) {
        const float *x = in + g * G;
        memcpy(qkv + g * Sk, x, sizeof(float) * (size_t)Sk);
        memcpy(qkv + (Hk + g) * Sk, x + Sk, sizeof(float) * (size_t)Sk);
        memcpy(qkv + 2 * Hk * Sk + g * RV, x + 2 * Sk, sizeof(float) * (size_t)RV);
        memcpy(z + g * RV, x + 2 * Sk + RV, sizeof(float) * (size_t)RV);
    }
}

static float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}

static float softplusf(float x) {
    return x > 20.0f ? x : logf(1.0f + expf(x));
}

/* x / max(|x|, eps) */
static void l2_norm(int64_t n, float *x, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
    for (int64_t i = 0; i < n; i++)
        x[i] *= scale;
}

/* Token t after the conv: silu, q and k normalized, beta and the decay exponent g. */
static void prepare_token(cpulm_ctx *c, const cpulm_layer *ly, int64_t t) {
    const cpulm_hparams *hp = &c->m->hp;
    const cpulm_dnet_scratch *s = c->dnet;
    const int64_t CH = channels(hp), Sk = hp->ssm_state, Hv = hp->ssm_heads;
    float *x = s->qkv + t * CH;
    c->k->silu(CH, x, x);
    for (int64_t h = 0; h < 2 * hp->ssm_groups; h++) /* q heads, then k heads */
        l2_norm(Sk, x + h * Sk, hp->norm_eps);
    float *ba = s->ba + t * 2 * Hv;
    if (ly->ssm_ba.data) { /* grouped by key head: [beta x R, alpha x R] per group */
        const int64_t R = Hv / hp->ssm_groups;
        float tmp[2 * 4096];
        memcpy(tmp, ba, sizeof(float) * (size_t)(2 * Hv));
        for (int64_t h = 0; h < Hv; h++) {
            ba[h] = tmp[(h / R) * 2 * R + h % R];
            ba[Hv + h] = tmp[(h / R) * 2 * R + R + h % R];
        }
    }
    for (int64_t h = 0; h < Hv; h++) {
        ba[h] = sigmoidf(ba[h]);
        ba[Hv + h] = softplusf(ba[Hv + h] + ly->ssm_dt[h]) * ly->ssm_a[h];
    }
}

/* ---- the delta rule ---- */

void cpulm_dnet_step(const cpulm_kernels *kt, int64_t n, float *T, const float *q, const float *k,
                     const float *v, float beta, float g, float *o, float *d) {
    kt->dnet_step(n, T, q, k, v, beta, expf(g), 1.0f / sqrtf((float)n), o, d);
}

/* The chunked form over n <= CPULM_DNET_CHUNK tokens (rows of q, k, v contiguous, d
 * floats each; T the transposed state, T[i][r] = S[r][i]). With G_t = exp(cumulative g up
 * to t) and S0 the state before the chunk, the delta rule unrolls to
 *   D = solve((I + A), B), A[t][j] = beta_t (k_t . k_j) G_t / G_j (j < t),
 *                          b_t = beta_t (v_t - G_t S0 k_t)
 *   o_t = (G_t S0 q_t + sum_{j <= t} (G_t / G_j) (k_j . q_t) d_j) / sqrt(d)
 *   S = G_n S0 + sum_j (G_n / G_j) d_j k_j^T
 * so the state is read three times per chunk instead of per token, and everything is a
 * product of [n][d], [d][d] and [n][n] blocks (the kernel table's dnet_mm; the triangular
 * ones by row blocks up to the diagonal). ws: cpulm_dnet_chunk_ws_floats(d) floats. */
#define TRI 4 /* rows per block of the triangular products */
void cpulm_dnet_chunk(const cpulm_kernels *kt, int64_t n, int64_t d, float *T, const float *q,
                      const float *k, const float *v, const float *beta, const float *g, float *o,
                      float *ws) {
    const int64_t C = CPULM_DNET_CHUNK;
    float *lg = ws, *gt = lg + C, *kT = gt + C, *D = kT + d * C, *A = D + C * d, *P = A + C * C;
    const int N = (int)n, K = (int)d;
    float cum = 0.0f;
    for (int64_t t = 0; t < n; t++) {
        lg[t] = cum += g[t];
        gt[t] = expf(lg[t]);
    }
    for (int64_t t = 0; t < n; t++) /* k^T: [d][C], the right operand of k . k and q . k */
        for (int64_t i = 0; i < d; i++)
            kT[i * C + t] = k[t * d + i];
    /* B = beta (v - G S0 k) in D, and the inter-chunk part of o: G S0 q */
    kt->dnet_mm(N, K, K, k, d, T, d, D, d, 0);
    kt->dnet_mm(N, K, K, q, d, T, d, o, d, 0);
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = 0; r < d; r++) {
            D[t * d + r] = (v[t * d + r] - gt[t] * D[t * d + r]) * beta[t];
            o[t * d + r] *= gt[t];
        }
    /* k_t . k_j and q_t . k_j for j up to the diagonal block */
    for (int t0 = 0; t0 < N; t0 += TRI) {
        const int rows = N - t0 < TRI ? N - t0 : TRI, cols = t0 + rows;
        kt->dnet_mm(rows, cols, K, k + t0 * d, d, kT, C, A + t0 * C, C, 0);
        kt->dnet_mm(rows, cols, K, q + t0 * d, d, kT, C, P + t0 * C, C, 0);
    }
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < n; j++) {
            const float decay = j <= t ? expf(lg[t] - lg[j]) : 0.0f;
            A[t * C + j] = j < t ? -(beta[t] * A[t * C + j] * decay) : 0.0f;
            P[t * C + j] = j <= t ? P[t * C + j] * decay : 0.0f;
        }
    /* forward substitution through (I + A), rows in order: d_t = b_t - sum_j A[t][j] d_j */
    for (int t = 1; t < N; t++)
        kt->dnet_mm(1, K, t, A + t * C, C, D, d, D + t * d, d, 1);
    /* intra-chunk attention: o_t += sum_{j <= t} (G_t / G_j)(k_j . q_t) d_j */
    for (int t0 = 0; t0 < N; t0 += TRI) {
        const int rows = N - t0 < TRI ? N - t0 : TRI;
        kt->dnet_mm(rows, K, t0 + rows, P + t0 * C, C, D, d, o + t0 * d, d, 1);
    }
    const float scale = 1.0f / sqrtf((float)d);
    for (int64_t i = 0; i < n * d; i++)
        o[i] *= scale;
    /* S = G_n S0 + sum_j (G_n / G_j) d_j k_j^T, i.e. T = G_n T + k^T (M D) */
    const float gn = gt[n - 1];
    for (int64_t j = 0; j < n; j++) {
        const float m = expf(lg[n - 1] - lg[j]);
        for (int64_t r = 0; r < d; r++)
            D[j * d + r] *= m;
    }
    for (int64_t i = 0; i < d * d; i++)
        T[i] *= gn;
    kt->dnet_mm(K, K, N, kT, C, D, d, T, d, 1);
}

int64_t cpulm_dnet_chunk_ws_floats(int64_t d) {
    const int64_t C = CPULM_DNET_CHUNK;
    return 2 * C + d * C + C * d + 2 * C * C;
}

/* Tokens [j0, j1) of a batch sequence (in by_seq order), value head h, as one chunk:
 * rows gathered, the chunked form, outputs scattered. */
static void delta_chunk(cpulm_ctx *c, int64_t h, float *T, int32_t j0, int32_t j1, float *w) {
    const cpulm_hparams *hp = &c->m->hp;
    const cpulm_dnet_scratch *s = c->dnet;
    const int64_t CH = channels(hp), d = hp->ssm_state, Hk = hp->ssm_groups, Hv = hp->ssm_heads;
    const int64_t C = CPULM_DNET_CHUNK;
    float *q = w, *k = q + C * d, *v = k + C * d, *o = v + C * d, *beta = o + C * d;
    float *gg = beta + C, *ws = gg + C;
    for (int32_t j = j0; j < j1; j++) {
        const int64_t t = s->by_seq[j], r = j - j0;
        const float *x = s->qkv + t * CH;
        memcpy(q + r * d, x + key_head(c, h) * d, sizeof(float) * (size_t)d);
        memcpy(k + r * d, x + (Hk + key_head(c, h)) * d, sizeof(float) * (size_t)d);
        memcpy(v + r * d, x + (2 * Hk + h) * d, sizeof(float) * (size_t)d);
        beta[r] = s->ba[t * 2 * Hv + h];
        gg[r] = s->ba[t * 2 * Hv + Hv + h];
    }
    cpulm_dnet_chunk(c->k, j1 - j0, d, T, q, k, v, beta, gg, o, ws);
    for (int32_t j = j0; j < j1; j++)
        memcpy(s->o + (int64_t)s->by_seq[j] * hp->ssm_inner + h * d, o + (int64_t)(j - j0) * d,
               sizeof(float) * (size_t)d);
}

/* One value head h of batch sequence g: a run of at least CHUNK_MIN tokens (a prompt) in
 * chunks of CPULM_DNET_CHUNK, shorter ones (generation) token by token. Which form runs
 * depends only on the sequence's tokens in this batch. */
#define CHUNK_MIN 16
static void delta_item(cpulm_ctx *c, const cpulm_layer *ly, int32_t g, int64_t h, float *w) {
    const cpulm_hparams *hp = &c->m->hp;
    const cpulm_dnet_scratch *s = c->dnet;
    const int64_t CH = channels(hp), Sk = hp->ssm_state, Sv = Sk, Hk = hp->ssm_groups;
    const int64_t Hv = hp->ssm_heads;
    float *T = cpulm_ssm_state(&c->ssm, ly->slot, s->seq_id[g]) + h * Sv * Sk; /* [Sk][Sv] */
    if (c->pos[s->by_seq[s->seq_off[g]]] == 0) memset(T, 0, sizeof(float) * (size_t)(Sv * Sk));
    const int32_t j0 = s->seq_off[g], j1 = s->seq_off[g + 1];
    if (j1 - j0 >= CHUNK_MIN) {
        for (int32_t j = j0; j < j1; j += CPULM_DNET_CHUNK)
            delta_chunk(c, h, T, j, j1 - j < CPULM_DNET_CHUNK ? j1 : j + CPULM_DNET_CHUNK, w);
        return;
    }
    for (int32_t j = j0; j < j1; j++) {
        const int64_t t = s->by_seq[j];
        const float *q = s->qkv + t * CH + key_head(c, h) * Sk;
        const float *k = q + Hk * Sk;
        const float *v = s->qkv + t * CH + 2 * Hk * Sk + h * Sv;
        cpulm_dnet_step(c->k, Sk, T, q, k, v, s->ba[t * 2 * Hv + h], s->ba[t * 2 * Hv + Hv + h],
                        s->o + t * hp->ssm_inner + h * Sv, w);
    }
}

/* o = rms_norm(o per value head) * ssm_norm * silu(z), token t (z is silu'd in place). */
static void gate_token(cpulm_ctx *c, const cpulm_layer *ly, int64_t t) {
    const cpulm_hparams *hp = &c->m->hp;
    const cpulm_dnet_scratch *s = c->dnet;
    const int64_t I = hp->ssm_inner, Sv = hp->ssm_state;
    float *o = s->o + t * I, *z = s->z + t * I;
    c->k->silu(I, z, z);
    for (int64_t h = 0; h < hp->ssm_heads; h++)
        c->k->rms_norm(Sv, o + h * Sv, o + h * Sv, ly->ssm_norm, hp->norm_eps);
    for (int64_t i = 0; i < I; i++)
        o[i] *= z[i];
}

void cpulm_dnet_layer(cpulm_ctx *c, const cpulm_layer *ly, int ith, int nth) {
    const cpulm_hparams *hp = &c->m->hp;
    cpulm_dnet_scratch *s = c->dnet;
    const int64_t T = c->n_tok, E = hp->n_embd, CH = channels(hp), Hv = hp->ssm_heads;
    mm_job in[4] = {{&ly->ssm_qkv, s->qkv, CH, NULL, 0},
                    {&ly->ssm_z, s->z, hp->ssm_inner, NULL, 0},
                    {&ly->ssm_beta, s->ba, 2 * Hv, NULL, 0},
                    {&ly->ssm_alpha, s->ba + Hv, 2 * Hv, NULL, 0}};
    int n_in = 4;
    if (ly->ssm_ba.data) {
        in[2] = (mm_job){&ly->ssm_ba, s->ba, 2 * Hv, NULL, 0};
        n_in = 3;
    }
    if (ly->ssm_in.data) { /* the joint projection, split below */
        in[0] = (mm_job){&ly->ssm_in, s->in, CH + hp->ssm_inner, NULL, 0};
        in[1] = in[2];
        n_in = 2;
    }
    cpulm_fwd_mm_group(c, c->xn, E, T, in, n_in, ith, nth);
    cpulm_pool_barrier(c->pool);
    if (ly->ssm_in.data) {
        for (int64_t t = ith; t < T; t += nth)
            split_joint(c, t);
        cpulm_pool_barrier(c->pool);
    }
    const uint64_t n_blk = (uint64_t)((CH + CONV_BLOCK - 1) / CONV_BLOCK);
    uint64_t first = cpulm_fwd_job_begin(c, ith, n_blk), item;
    while (cpulm_fwd_claim(c, first + n_blk, &item)) {
        int64_t c0 = (int64_t)(item - first) * CONV_BLOCK;
        conv_block(c, ly, c0, c0 + CONV_BLOCK < CH ? c0 + CONV_BLOCK : CH);
    }
    cpulm_pool_barrier(c->pool);
    for (int64_t t = ith; t < T; t += nth)
        prepare_token(c, ly, t);
    cpulm_pool_barrier(c->pool);
    const uint64_t n_items = (uint64_t)s->n_groups * (uint64_t)Hv;
    first = cpulm_fwd_job_begin(c, ith, n_items);
    float *d = s->tmp + (int64_t)ith * s->tmp_stride;
    while (cpulm_fwd_claim(c, first + n_items, &item)) {
        uint64_t i = item - first;
        delta_item(c, ly, (int32_t)(i / (uint64_t)Hv), (int64_t)(i % (uint64_t)Hv), d);
    }
    cpulm_pool_barrier(c->pool);
    for (int64_t t = ith; t < T; t += nth)
        gate_token(c, ly, t);
    cpulm_pool_barrier(c->pool);
    mm_job out = {&ly->ssm_out, c->x, E, NULL, 1};
    cpulm_fwd_mm_group(c, s->o, hp->ssm_inner, T, &out, 1, ith, nth);
    cpulm_pool_barrier(c->pool);
}

/* ---- the gated full-attention layer ---- */

/* Token t: the query heads out of qg (per head: query, then gate) into c->q; q/k norms,
 * rope, k and v into the cache at the layer's KV slot. */
static void split_query(cpulm_ctx *c, const cpulm_layer *ly, int64_t t, float *tmp) {
    const cpulm_hparams *hp = &c->m->hp;
    const int64_t d = hp->head_dim, QD = (int64_t)hp->n_head * d;
    const float *qg = c->dnet->qg + t * 2 * QD;
    for (int64_t h = 0; h < hp->n_head; h++)
        memcpy(c->q + t * QD + h * d, qg + 2 * h * d, sizeof(float) * (size_t)d);
    cpulm_fwd_qk_rope_store(c, ly, ly->slot, t, tmp);
}

/* att *= sigmoid(gate), token t. */
static void gate_attention(cpulm_ctx *c, int64_t t) {
    const cpulm_hparams *hp = &c->m->hp;
    const int64_t d = hp->head_dim, QD = (int64_t)hp->n_head * d;
    const float *qg = c->dnet->qg + t * 2 * QD;
    float *att = c->att + t * QD;
    for (int64_t h = 0; h < hp->n_head; h++)
        for (int64_t i = 0; i < d; i++)
            att[h * d + i] *= sigmoidf(qg[(2 * h + 1) * d + i]);
}

void cpulm_dnet_attn_layer(cpulm_ctx *c, const cpulm_layer *ly, int ith, int nth) {
    const cpulm_hparams *hp = &c->m->hp;
    const int64_t T = c->n_tok, E = hp->n_embd, QD = (int64_t)hp->n_head * hp->head_dim;
    const int64_t KVD = c->kv.kv_dim;
    float *tmp = c->scores + (size_t)ith * c->scores_stride; /* rope angles */
    mm_job qkv[3] = {{&ly->wq, c->dnet->qg, 2 * QD, NULL, 0},
                     {&ly->wk, c->kc, KVD, NULL, 0},
                     {&ly->wv, c->vc, KVD, NULL, 0}};
    cpulm_fwd_mm_group(c, c->xn, E, T, qkv, 3, ith, nth);
    cpulm_pool_barrier(c->pool);
    for (int64_t t = ith; t < T; t += nth)
        split_query(c, ly, t, tmp);
    cpulm_pool_barrier(c->pool);
    cpulm_attn_layer(c, ly->slot, ith, nth);
    cpulm_pool_barrier(c->pool);
    for (int64_t t = ith; t < T; t += nth)
        gate_attention(c, t);
    cpulm_pool_barrier(c->pool);
    mm_job o = {&ly->wo, c->x, E, NULL, 1};
    cpulm_fwd_mm_group(c, c->att, QD, T, &o, 1, ith, nth);
    cpulm_pool_barrier(c->pool);
}
