/* encoder.c: the forward pass of BERT-style encoders (bert, nomic-bert): token + type (+
 * absolute position) embeddings and a LayerNorm, then per layer bidirectional attention
 * within each sequence of the batch, a post-attention LayerNorm, a GELU (bert) or SwiGLU
 * (nomic-bert, with rotary positions) FFN and a post-FFN LayerNorm. No output head: the
 * final hidden states are the embeddings, pooled per sequence (mean, CLS, last) or scored
 * by a reranker's classification head (rank). The KV cache is not used: every sequence is
 * whole in its batch (context.c checks it starts there).
 * Determinism: each output element is computed by one thread in a fixed order, as in
 * forward.c. Shapes: x [T][E] the residual stream; q/kc/vc [T][Q or KV]; att [T][Q];
 * g, u [T][F]; xn [T][Q + 2 KV] the fused projection's output. */
#include "encoder.h"

#include <math.h>
#include <string.h>

#include "forward_int.h"
#include "gemma.h"
#include "repack.h"

/* y = (x - mean) / sqrt(var + eps) * w + b, with sums in double as the reference's norm. */
static void layer_norm(int64_t n, float *y, const float *x, const float *w, const float *b,
                       float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += x[i];
    const float mean = (float)(sum / (double)n);
    double var = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const float d = x[i] - mean;
        y[i] = d;
        var += (double)(d * d);
    }
    const float scale = 1.0f / sqrtf((float)(var / (double)n) + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = y[i] * scale * w[i] + (b ? b[i] : 0.0f);
}

static void embed_tokens(cpulm_ctx *c, int ith, int nth) {
    const cpulm_model *m = c->m;
    const int64_t E = m->hp.n_embd;
    for (int64_t t = ith; t < c->n_tok; t += nth) {
        float *x = c->x + t * E;
        cpulm_repack_get_row(c->k, &m->tok_embd, c->tok[t], x);
        if (m->type_embd) /* token type 0 ("sentence A") for every token, as llama.cpp */
            for (int64_t i = 0; i < E; i++)
                x[i] += m->type_embd[i];
        if (m->pos_embd) {
            const float *p = m->pos_embd + (int64_t)c->pos[t] * E;
            for (int64_t i = 0; i < E; i++)
                x[i] += p[i];
        }
        layer_norm(E, x, x, m->tok_norm, m->tok_norm_b, m->hp.norm_eps);
    }
    cpulm_pool_barrier(c->pool);
}

/* NEOX rotation of the first n_rot dims of each head (nomic-bert). */
static void rope_neox(float *v, int n_heads, int hd, int n_rot, const float *cs, const float *sn) {
    const int half = n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *x = v + (size_t)h * hd;
        for (int i = 0; i < half; i++) {
            const float x0 = x[i], x1 = x[i + half];
            x[i] = fmaf(x0, cs[i], -(x1 * sn[i]));
            x[i + half] = fmaf(x0, sn[i], x1 * cs[i]);
        }
    }
}

/* q, kc, vc of every token from x: three projections, or the fused one split. */
static void project_qkv(cpulm_ctx *c, const cpulm_layer *ly, int ith, int nth) {
    const cpulm_hparams *hp = &c->m->hp;
    const int64_t T = c->n_tok, E = hp->n_embd, QD = (int64_t)hp->n_head * hp->head_dim;
    const int64_t KVD = (int64_t)hp->n_head_kv * hp->head_dim, W = QD + 2 * KVD;
    if (!ly->wqkv.data) {
        mm_job j[3] = {{&ly->wq, c->q, QD, ly->bq, 0},
                       {&ly->wk, c->kc, KVD, ly->bk, 0},
                       {&ly->wv, c->vc, KVD, ly->bv, 0}};
        cpulm_fwd_mm_group(c, c->x, E, T, j, 3, ith, nth);
        cpulm_pool_barrier(c->pool);
        return;
    }
    mm_job j = {&ly->wqkv, c->xn, W, ly->bqkv, 0};
    cpulm_fwd_mm_group(c, c->x, E, T, &j, 1, ith, nth);
    cpulm_pool_barrier(c->pool);
    for (int64_t t = ith; t < T; t += nth) {
        const float *r = c->xn + t * W;
        memcpy(c->q + t * QD, r, sizeof(float) * (size_t)QD);
        memcpy(c->kc + t * KVD, r + QD, sizeof(float) * (size_t)KVD);
        memcpy(c->vc + t * KVD, r + QD + KVD, sizeof(float) * (size_t)KVD);
    }
    cpulm_pool_barrier(c->pool);
}

static void rotate_qk(cpulm_ctx *c, int ith, int nth) {
    const cpulm_hparams *hp = &c->m->hp;
    const int64_t QD = (int64_t)hp->n_head * hp->head_dim,
                  KVD = (int64_t)hp->n_head_kv * hp->head_dim;
    float *cs = c->scores + (size_t)ith * c->scores_stride, *sn = cs + hp->n_rot / 2;
    for (int64_t t = ith; t < c->n_tok; t += nth) {
        cpulm_rope_angles(&hp->rope, hp->n_rot, c->theta_scale, c->m->rope_freqs, (float)c->pos[t],
                          cs, sn);
        rope_neox(c->q + t * QD, hp->n_head, hp->head_dim, hp->n_rot, cs, sn);
        rope_neox(c->kc + t * KVD, hp->n_head_kv, hp->head_dim, hp->n_rot, cs, sn);
    }
    cpulm_pool_barrier(c->pool);
}

/* att[t][h] = softmax over the tokens u of t's sequence of q.k / sqrt(hd), times v. One
 * (token, head) item per step; the thread's scores row holds T floats. */
static void attention(cpulm_ctx *c, int ith, int nth) {
    const cpulm_hparams *hp = &c->m->hp;
    const int hd = hp->head_dim, H = hp->n_head, G = hp->n_head / hp->n_head_kv;
    const int64_t T = c->n_tok, QD = (int64_t)H * hd, KVD = (int64_t)hp->n_head_kv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float *s = c->scores + (size_t)ith * c->scores_stride;
    for (int64_t it = ith; it < T * H; it += nth) {
        const int64_t t = it / H, h = it % H, kvh = h / G;
        const float *q = c->q + t * QD + h * hd;
        float mx = -INFINITY;
        for (int64_t u = 0; u < T; u++) {
            s[u] = -INFINITY;
            if (c->seq[u] != c->seq[t]) continue;
            s[u] = c->k->dot_f32(hd, q, c->kc + u * KVD + kvh * hd) * scale;
            if (s[u] > mx) mx = s[u];
        }
        double sum = 0.0;
        for (int64_t u = 0; u < T; u++) {
            s[u] = s[u] == -INFINITY ? 0.0f : expf(s[u] - mx);
            sum += s[u];
        }
        float *o = c->att + t * QD + h * hd;
        memset(o, 0, sizeof(float) * (size_t)hd);
        const float inv = (float)(1.0 / sum);
        for (int64_t u = 0; u < T; u++)
            if (s[u] != 0.0f) c->k->axpy(hd, o, s[u] * inv, c->vc + u * KVD + kvh * hd);
    }
    cpulm_pool_barrier(c->pool);
}

/* x = LN(x + W x_in + b) over every token: the residual add and post-norm. */
static void add_and_norm(cpulm_ctx *c, const float *w, const float *b, int ith, int nth) {
    const int64_t E = c->m->hp.n_embd;
    for (int64_t t = ith; t < c->n_tok; t += nth)
        layer_norm(E, c->x + t * E, c->x + t * E, w, b, c->m->hp.norm_eps);
    cpulm_pool_barrier(c->pool);
}

static void ffn(cpulm_ctx *c, const cpulm_layer *ly, int ith, int nth) {
    const cpulm_hparams *hp = &c->m->hp;
    const int64_t T = c->n_tok, E = hp->n_embd, F = hp->n_ff;
    if (ly->w_gate.data) { /* nomic-bert: silu(gate x) * up x, no biases */
        mm_job gu[2] = {{&ly->w_gate, c->g, F, NULL, 0}, {&ly->w_up, c->u, F, NULL, 0}};
        cpulm_fwd_mm_group(c, c->x, E, T, gu, 2, ith, nth);
        cpulm_pool_barrier(c->pool);
        for (int64_t t = ith; t < T; t += nth)
            c->k->swiglu(F, c->g + t * F, c->g + t * F, c->u + t * F);
    } else { /* bert: gelu(up x + b) */
        mm_job up = {&ly->w_up, c->g, F, ly->b_up, 0};
        cpulm_fwd_mm_group(c, c->x, E, T, &up, 1, ith, nth);
        cpulm_pool_barrier(c->pool);
        for (int64_t t = ith; t < T; t += nth)
            for (int64_t i = 0; i < F; i++)
                c->g[t * F + i] = cpulm_gemma_gelu(c->g[t * F + i]);
    }
    cpulm_pool_barrier(c->pool);
    mm_job down = {&ly->w_down, c->x, E, ly->w_gate.data ? NULL : ly->b_down, 1};
    cpulm_fwd_mm_group(c, c->g, F, T, &down, 1, ith, nth);
    cpulm_pool_barrier(c->pool);
}

static void layer(cpulm_ctx *c, const cpulm_layer *ly, int ith, int nth) {
    const cpulm_hparams *hp = &c->m->hp;
    const int64_t QD = (int64_t)hp->n_head * hp->head_dim;
    project_qkv(c, ly, ith, nth);
    if (c->m->arch->rope == CPULM_ROPE_NEOX && !c->m->pos_embd) rotate_qk(c, ith, nth);
    attention(c, ith, nth);
    mm_job o = {&ly->wo, c->x, hp->n_embd, ly->bo, 1}; /* x += Wo att + bo */
    cpulm_fwd_mm_group(c, c->att, QD, c->n_tok, &o, 1, ith, nth);
    cpulm_pool_barrier(c->pool);
    add_and_norm(c, ly->attn_norm, ly->attn_norm_b, ith, nth);
    ffn(c, ly, ith, nth);
    add_and_norm(c, ly->ffn_norm, ly->ffn_norm_b, ith, nth);
}

/* A reranker's score of hidden state x: cls_out . tanh(cls x + cls_b) + cls_out_b (without
 * cls, the state goes to cls_out directly; without cls_out, the first output of cls). */
static float rank_score(const cpulm_kernels *k, const cpulm_model *m, const float *x, float *h) {
    const int64_t E = m->hp.n_embd;
    const float *v = x;
    if (m->cls) {
        for (int64_t i = 0; i < E; i++)
            h[i] = tanhf(k->dot_f32(E, m->cls + i * E, x) + (m->cls_b ? m->cls_b[i] : 0.0f));
        v = h;
    }
    if (!m->cls_out) return v[0];
    return k->dot_f32(E, m->cls_out, v) + (m->cls_out_b ? m->cls_out_b[0] : 0.0f);
}

/* The outputs: per-token rows (pooling none) or one row per sequence; one thread per
 * sequence, so the bits do not depend on the thread count. */
static void outputs(cpulm_ctx *c, int ith, int nth) {
    const cpulm_model *m = c->m;
    const int64_t E = m->hp.n_embd;
    if (!c->pooled) {
        for (int64_t o = ith; o < c->n_outputs; o += nth)
            memcpy(c->embd + o * E, c->x + (int64_t)c->out_idx[o] * E, sizeof(float) * (size_t)E);
        return;
    }
    float *h = c->scores + (size_t)ith * c->scores_stride; /* >= n_embd floats (memory.c) */
    for (int32_t s = ith; s < c->p.n_seq_max; s += nth) {
        const int32_t n = c->embd_count[s];
        if (n == 0) continue;
        float *out = c->embd + (int64_t)s * E;
        const int64_t first = c->embd_first[s], last = c->embd_last[s];
        switch (c->p.pooling) {
        case CPULM_POOLING_MEAN:
            memset(out, 0, sizeof(float) * (size_t)E);
            for (int64_t t = first; t <= last; t++)
                if (c->seq[t] == s) c->k->axpy(E, out, 1.0f / (float)n, c->x + t * E);
            break;
        case CPULM_POOLING_RANK:
            memset(out, 0, sizeof(float) * (size_t)E);
            out[0] = rank_score(c->k, m, c->x + first * E, h);
            break;
        default:
            memcpy(out, c->x + (c->p.pooling == CPULM_POOLING_CLS ? first : last) * E,
                   sizeof(float) * (size_t)E);
        }
    }
}

void cpulm_encoder_pass(cpulm_ctx *c, int ith, int nth) {
    embed_tokens(c, ith, nth);
    for (int il = 0; il < c->m->hp.n_layer; il++)
        layer(c, &c->m->layers[il], ith, nth);
    outputs(c, ith, nth);
}
