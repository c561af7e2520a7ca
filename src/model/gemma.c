/* gemma.c: the Gemma 3 architecture (gemma.h, forward_int.h): its hyperparameters and
 * sliding-window pattern, and its layer: per-head q/k norms, rope with the layer's own base,
 * attention over a sliding window on most layers, RMS norms of the attention's and the
 * FFN's outputs before each residual add, and a GELU-gated FFN. */
#include "gemma.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "../base/fp16.h"
#include "../base/status.h"
#include "attention.h"
#include "forward_int.h"

/* ---- hyperparameters ---- */

static const char *key_of(char *buf, size_t n, const char *arch, const char *suffix) {
    snprintf(buf, n, "%s.%s", arch, suffix);
    return buf;
}

/* An optional float key; def when absent. */
static cpulm_status opt_f64(const cpulm_gguf *g, const char *key, double def, double *out,
                            cpulm_error *err) {
    cpulm_status s = cpulm_gguf_get_f64(g, key, out, err);
    if (s == CPULM_ERR_NOT_FOUND)
        *out = def;
    else if (s != CPULM_OK)
        return s;
    if (!(*out == *out) || fabs(*out) > 1e30)
        return cpulm_errf(err, CPULM_ERR_FORMAT, "key '%s' is not a finite number", key);
    return CPULM_OK;
}

cpulm_status cpulm_gemma_read_hparams(const cpulm_gguf *g, const char *arch, cpulm_hparams *hp,
                                      cpulm_error *err) {
    char k[160];
    int64_t swa = 0;
    double base_swa, cap;
    cpulm_status s =
        cpulm_gguf_get_i64(g, key_of(k, sizeof k, arch, "attention.sliding_window"), &swa, err);
    if (s != CPULM_OK && s != CPULM_ERR_NOT_FOUND) return s;
    if (swa < 0 || swa > (1 << 30))
        return cpulm_errf(err, CPULM_ERR_FORMAT, "key '%s' = %lld out of range", k, (long long)swa);
    hp->n_swa = (int32_t)swa;
    if ((s = opt_f64(g, key_of(k, sizeof k, arch, "rope.freq_base_swa"), 10000.0, &base_swa, err)))
        return s;
    if (!(base_swa > 0)) return cpulm_errf(err, CPULM_ERR_FORMAT, "key '%s' must be positive", k);
    hp->rope_base_swa = (float)base_swa;
    /* the logits are soft-capped only when the file has the key (llama.cpp 9928, with or
     * without sliding windows) */
    if ((s = opt_f64(g, key_of(k, sizeof k, arch, "final_logit_softcapping"), 0.0, &cap, err)))
        return s;
    hp->final_softcap = cap > 0 ? (float)cap : 0.0f;
    /* gemma_pytorch's query_pre_attn_scalar: n_embd / n_head for the 27B model only */
    const int32_t qpa = hp->n_layer == 62 ? hp->n_embd / hp->n_head : hp->head_dim;
    hp->attn_scale = 1.0f / sqrtf((float)qpa);
    return CPULM_OK;
}

/* The pattern key: an integer period, or one boolean (or integer) per layer. */
static cpulm_status read_pattern(const cpulm_gguf *g, const char *key, int32_t n_layer,
                                 int32_t *period, const cpulm_gguf_arr **per_layer,
                                 cpulm_error *err) {
    const cpulm_gguf_kv *kv = cpulm_gguf_find(g, key);
    *period = 6;
    *per_layer = NULL;
    if (!kv) return CPULM_OK;
    if (kv->type == CPULM_GGUF_ARRAY) {
        const cpulm_gguf_arr *a = &kv->v.arr;
        if (a->n != (uint64_t)n_layer || cpulm_gguf_type_size(a->type) == 0 ||
            a->type == CPULM_GGUF_F32 || a->type == CPULM_GGUF_F64)
            return cpulm_errf(err, CPULM_ERR_FORMAT,
                              "key '%s' is not an integer or %d booleans (one per layer)", key,
                              n_layer);
        *per_layer = a;
        return CPULM_OK;
    }
    int64_t p;
    cpulm_status s = cpulm_gguf_get_i64(g, key, &p, err);
    if (s != CPULM_OK) return s;
    if (p < 0 || p > 4096)
        return cpulm_errf(err, CPULM_ERR_FORMAT, "key '%s' = %lld out of range [0, 4096]", key,
                          (long long)p);
    *period = (int32_t)p;
    return CPULM_OK;
}

static void gelu_table_once(void);

cpulm_status cpulm_gemma_set_windows(const cpulm_gguf *g, const char *arch, cpulm_hparams *hp,
                                     cpulm_layer *layers, cpulm_error *err) {
    gelu_table_once(); /* at load, so a forward pass never waits for it */
    hp->n_layer_swa = 0;
    if (hp->n_swa == 0) return CPULM_OK;
    char k[160];
    int32_t period;
    const cpulm_gguf_arr *arr;
    cpulm_status s = read_pattern(g, key_of(k, sizeof k, arch, "attention.sliding_window_pattern"),
                                  hp->n_layer, &period, &arr, err);
    if (s != CPULM_OK) return s;
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const int slides =
            arr ? cpulm_gguf_arr_i64(arr, (uint64_t)il) != 0 : cpulm_gemma_layer_slides(il, period);
        layers[il].window = slides ? hp->n_swa : 0;
        hp->n_layer_swa += slides;
    }
    return CPULM_OK;
}

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

/* x += norm(xn) * w for every batch token (xn holds a sub-layer's output). */
static void post_norm_add(cpulm_ctx *c, const float *w, int ith, int nth) {
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
    post_norm_add(c, ly->attn_post_norm, ith, nth);
}

static void ffn_half(cpulm_ctx *c, const cpulm_layer *ly, int ith, int nth) {
    const cpulm_hparams *hp = &c->m->hp;
    const int64_t T = c->n_tok, E = hp->n_embd, F = hp->n_ff;
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
    post_norm_add(c, ly->ffn_post_norm, ith, nth);
}

void cpulm_gemma_layer(cpulm_ctx *c, const cpulm_layer *ly, int il, int ith, int nth) {
    attention_half(c, ly, il, ith, nth);
    ffn_half(c, ly, ith, nth);
}
