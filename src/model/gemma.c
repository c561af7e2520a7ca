/* gemma.c: the Gemma 3 layer (forward_int.h; its loading side is gemma_load.c): per-head q/k
 * norms, rope with the layer's own base, attention over a sliding window on most layers, RMS
 * norms of the attention's and the FFN's outputs before each residual add, and a GELU-gated
 * FFN. */
#include "gemma.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "../base/fp16.h"
#include "../base/status.h"
#include "attention.h"
#include "forward_int.h"

/* ---- GELU: the reference's f32 op reads a table over every f16 input ---- */

static float gelu_table[1 << 16];

static float gelu_tanh(float x) {
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876f, a = 0.044715f;
    return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + a * x * x)));
}

static void gelu_table_init(void) {
    for (uint32_t i = 0; i < (1u << 16); i++)
        gelu_table[i] =
            cpulm_fp16_to_f32(cpulm_f32_to_fp16(gelu_tanh(cpulm_fp16_to_f32((uint16_t)i))));
}

static void gelu_table_once(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, gelu_table_init);
}

float cpulm_gemma_gelu(float x) {
    gelu_table_once();
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    return gelu_table[cpulm_f32_to_fp16(x)];
}

void cpulm_gemma_geglu(int64_t n, float *y, const float *g, const float *u) {
    gelu_table_once();
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i];
        y[i] = x <= -10.0f ? 0.0f : x >= 10.0f ? x * u[i] : gelu_table[cpulm_f32_to_fp16(x)] * u[i];
    }
}

/* ---- the layer ---- */

void cpulm_gemma_scale_embd(const cpulm_ctx *c, float *row) {
    const int64_t E = c->m->hp.n_embd;
    const float s = sqrtf((float)E);
    for (int64_t i = 0; i < E; i++)
        row[i] *= s;
}

void cpulm_gemma_softcap(float cap, float *logits, int64_t n) {
    const float inv = 1.0f / cap;
    for (int64_t i = 0; i < n; i++)
        logits[i] = tanhf(logits[i] * inv) * cap;
}

void cpulm_gemma_post_norm_add(cpulm_ctx *c, const float *w, int ith, int nth) {
    const cpulm_hparams *hp = &c->m->hp;
    const int64_t E = hp->n_embd;
    for (int64_t t = ith; t < c->n_tok; t += nth) {
        float *o = c->xn + t * E;
        c->k->rms_norm(E, o, o, w, hp->norm_eps);
        c->k->axpy(E, c->x + t * E, 1.0f, o);
    }
    cpulm_pool_barrier(c->pool);
}

/* q/k norms, rope at the layer's base, k and v into the cache; the query scale beyond the
 * attention's own 1/sqrt(head_dim) (only the 27B model has one) goes on q. */
static void prepare_token(cpulm_ctx *c, const cpulm_layer *ly, int il, int64_t t, float *tmp) {
    const cpulm_hparams *hp = &c->m->hp;
    if (ly->window > 0) {
        const cpulm_rope_scaling none = {
            .type = CPULM_ROPE_SCALING_NONE, .freq_scale = 1.0f, .mscale = 1.0f};
        const float theta_scale = powf(hp->rope_base_swa, -2.0f / (float)hp->n_rot);
        cpulm_fwd_qk_rope_store_at(c, ly, il, t, &none, theta_scale, tmp);
    } else {
        cpulm_fwd_qk_rope_store(c, ly, il, t, tmp);
    }
    const float extra = hp->attn_scale * sqrtf((float)hp->head_dim);
    if (extra == 1.0f) return;
    const int64_t qd = (int64_t)hp->n_head * hp->head_dim;
    float *q = c->q + t * qd;
    for (int64_t i = 0; i < qd; i++)
        q[i] *= extra;
}

static void attention_half(cpulm_ctx *c, const cpulm_layer *ly, int il, int ith, int nth) {
    const cpulm_hparams *hp = &c->m->hp;
    const int64_t T = c->n_tok, E = hp->n_embd, QD = (int64_t)hp->n_head * hp->head_dim;
    const int64_t KVD = c->kv.kv_dim;
    float *tmp = c->scores + (size_t)ith * c->scores_stride; /* rope angles */
    for (int64_t t = ith; t < T; t += nth)
        c->k->rms_norm(E, c->xn + t * E, c->x + t * E, ly->attn_norm, hp->norm_eps);
    cpulm_pool_barrier(c->pool);
    mm_job qkv[3] = {{&ly->wq, c->q, QD, NULL, 0},
                     {&ly->wk, c->kc, KVD, NULL, 0},
                     {&ly->wv, c->vc, KVD, NULL, 0}};
    cpulm_fwd_mm_group(c, c->xn, E, T, qkv, 3, ith, nth);
    cpulm_pool_barrier(c->pool);
    for (int64_t t = ith; t < T; t += nth)
        prepare_token(c, ly, il, t, tmp);
    cpulm_pool_barrier(c->pool);
    const cpulm_attn_opts o = {.window = ly->window, .sinks = NULL};
    cpulm_attn_run(c, il, &o, ith, nth);
    cpulm_pool_barrier(c->pool);
    mm_job out = {&ly->wo, c->xn, E, NULL, 0}; /* xn is free again: the output goes there */
    cpulm_fwd_mm_group(c, c->att, QD, T, &out, 1, ith, nth);
    cpulm_pool_barrier(c->pool);
    cpulm_gemma_post_norm_add(c, ly->attn_post_norm, ith, nth);
}

void cpulm_gemma_ffn_half(cpulm_ctx *c, const cpulm_layer *ly, int ith, int nth) {
    const cpulm_hparams *hp = &c->m->hp;
    /* the layer's own width when it has one (gemma4's per-layer arrays; g and u hold the
     * largest) */
    const int64_t T = c->n_tok, E = hp->n_embd, F = ly->n_ff ? ly->n_ff : hp->n_ff;
    for (int64_t t = ith; t < T; t += nth)
        c->k->rms_norm(E, c->xn + t * E, c->x + t * E, ly->ffn_norm, hp->norm_eps);
    cpulm_pool_barrier(c->pool);
    mm_job gu[2] = {{&ly->w_gate, c->g, F, NULL, 0}, {&ly->w_up, c->u, F, NULL, 0}};
    cpulm_fwd_mm_group(c, c->xn, E, T, gu, 2, ith, nth);
    cpulm_pool_barrier(c->pool);
    for (int64_t t = ith; t < T; t += nth)
        cpulm_gemma_geglu(F, c->g + t * F, c->g + t * F, c->u + t * F);
    cpulm_pool_barrier(c->pool);
    mm_job down = {&ly->w_down, c->xn, E, NULL, 0};
    cpulm_fwd_mm_group(c, c->g, F, T, &down, 1, ith, nth);
    cpulm_pool_barrier(c->pool);
    cpulm_gemma_post_norm_add(c, ly->ffn_post_norm, ith, nth);
}

void cpulm_gemma_layer(cpulm_ctx *c, const cpulm_layer *ly, int il, int ith, int nth) {
    attention_half(c, ly, il, ith, nth);
    cpulm_gemma_ffn_half(c, ly, ith, nth);
}
