/* gemma4.c: the Gemma 4 layer and its per-layer embeddings (forward_int.h; the facts and the
 * loading side are in gemma4.h / gemma4_load.c).
 *
 * A layer: q (and, with its own KV, k and v) from norm(x); per-head RMS norms of q and k
 * (weighted) and v (unweighted; v is k's projection when the file has no attn_v); rope on
 * the layer's rotated dims; attention at scale 1 over its own KV or the layer it shares; then
 * Gemma 3's post-normed residual adds around the attention and the GELU-gated FFN; then, with
 * per-layer embeddings (PLE), x += norm(proj(gelu(inp_gate x) * ple_il)); then x *= the
 * layer's output scale.
 *
 * The attention driver has one head size, the model's (the global layers'). A sliding
 * layer's narrower heads go through it zero-padded: q, k and v of head h sit at h * d in
 * rows of the global width, the dims past the layer's head size are 0, so scores (sums of
 * products, the zeros adding nothing) and the values' weighted sums are the narrower
 * attention's, and the output's padding is dropped before attn_output. The cache rows of a
 * sliding layer are so padded too. A layer with fewer KV heads than the model's (31B's
 * global layers) has each repeated to the model's count, which groups the query heads as
 * its own count would. The driver's own scale 1/sqrt(d) is undone on q (exact when d is a
 * power of 4, as 64 and 256 are). */
#include "gemma4.h"

#include <math.h>
#include <string.h>

#include "attention.h"
#include "gemma.h"
#include "forward_int.h"
#include "repack.h"

/* ---- per-layer embedding inputs ---- */

/* Token t's inputs of every layer: ple[t] holds the projection of its scaled embedding; per
 * layer, (norm(proj / sqrt(E)) * w + row * sqrt(n_pl)) / sqrt(2), row its per-layer token
 * embedding (tmp: n_layer * n_pl floats). */
static void ple_token(cpulm_ctx *c, int64_t t, float *tmp) {
    const cpulm_model *m = c->m;
    const cpulm_hparams *hp = &m->hp;
    const int64_t P = hp->n_pl, all = P * hp->n_layer;
    const float proj_scale = 1.0f / sqrtf((float)hp->n_embd), tok_scale = sqrtf((float)P);
    const float in_scale = 1.0f / sqrtf(2.0f);
    cpulm_repack_get_row(c->k, &m->pl_tok_embd, c->tok[t], tmp);
    float *p = c->ple + t * all;
    for (int64_t i = 0; i < all; i++)
        p[i] *= proj_scale;
    for (int64_t l = 0; l < hp->n_layer; l++)
        c->k->rms_norm(P, p + l * P, p + l * P, m->pl_proj_norm, hp->norm_eps);
    for (int64_t i = 0; i < all; i++)
        p[i] = (p[i] + tmp[i] * tok_scale) * in_scale;
}

void cpulm_gemma4_inputs(cpulm_ctx *c, int ith, int nth) {
    const cpulm_model *m = c->m;
    if (!m->pl_tok_embd.data) return;
    const int64_t E = m->hp.n_embd, all = (int64_t)m->hp.n_pl * m->hp.n_layer;
    mm_job proj = {&m->pl_model_proj, c->ple, all, NULL, 0};
    cpulm_fwd_mm_group(c, c->x, E, c->n_tok, &proj, 1, ith, nth);
    cpulm_pool_barrier(c->pool);
    float *tmp = c->scores + (size_t)ith * c->scores_stride;
    for (int64_t t = ith; t < c->n_tok; t += nth)
        ple_token(c, t, tmp);
    cpulm_pool_barrier(c->pool);
}

/* ---- attention ---- */

/* Heads of a row: n_src laid out hd apart (compact) become n_dst d apart, the gaps zeroed,
 * each source head repeated n_dst / n_src times (a layer with fewer KV heads than the
 * model's: query head h reads KV head h / (n_head / n_dst), so copy j of source head i sits
 * at i * rep + j). In place, the last head first: a source head lies at or below every
 * place written before it is read. */
static void spread_heads(float *row, int n_src, int n_dst, int64_t hd, int64_t d) {
    if (hd == d && n_src == n_dst) return;
    const int rep = n_dst / n_src;
    for (int h = n_dst - 1; h >= 0; h--) {
        memmove(row + h * d, row + (h / rep) * hd, sizeof(float) * (size_t)hd);
        memset(row + h * d + hd, 0, sizeof(float) * (size_t)(d - hd));
    }
}

/* The reverse: heads d apart packed hd apart (the first head first, each moving down). */
static void pack_heads(float *row, int n_heads, int64_t hd, int64_t d) {
    if (hd == d) return;
    for (int h = 1; h < n_heads; h++)
        memmove(row + h * hd, row + h * d, sizeof(float) * (size_t)hd);
}

/* v's per-head RMS norm without a weight: the generic rms_norm's arithmetic with w = 1. */
static void norm_plain(float *v, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(v[i] * v[i]);
    const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    for (int64_t i = 0; i < n; i++)
        v[i] *= scale;
}

/* Rope of token t's q and k at the layer's rotation: sliding layers at rope.freq_base_swa
 * unscaled, global ones at the file's base, scaling and proportional divisors. */
static void rope_token(cpulm_ctx *c, const cpulm_layer *ly, int64_t t, float *q, float *k,
                       float *tmp) {
    const cpulm_hparams *hp = &c->m->hp;
    const int slides = ly->window > 0;
    const int32_t n_rot = slides ? hp->n_rot_swa : hp->n_rot;
    const cpulm_rope_scaling none = {
        .type = CPULM_ROPE_SCALING_NONE, .freq_scale = 1.0f, .mscale = 1.0f};
    const float theta_scale =
        slides ? powf(hp->rope_base_swa, -2.0f / (float)n_rot) : c->theta_scale;
    float *cs = tmp, *sn = tmp + n_rot / 2;
    cpulm_rope_angles(slides ? &none : &hp->rope, n_rot, theta_scale,
                      slides ? NULL : c->m->rope_freqs, (float)c->pos[t], cs, sn);
    cpulm_fwd_rope_heads(c->k, q, hp->n_head, hp->head_dim, n_rot, c->m->arch->rope, cs, sn);
    if (k)
        cpulm_fwd_rope_heads(c->k, k, hp->n_head_kv, hp->head_dim, n_rot, c->m->arch->rope, cs, sn);
}

/* Token t after the projections (compact heads): padded, normed, roped, q scaled for the
 * driver, k and v stored in the layer's cache (own KV only). */
static void prepare_token(cpulm_ctx *c, const cpulm_layer *ly, int il, int64_t t, float *tmp) {
    const cpulm_hparams *hp = &c->m->hp;
    const int64_t d = hp->head_dim, hd = ly->head_dim, KVD = c->kv.kv_dim;
    float *q = c->q + t * (int64_t)hp->n_head * d;
    const int own = ly->kv_src == il, n_kv = ly->n_head_kv ? ly->n_head_kv : hp->n_head_kv;
    float *k = own ? c->kc + t * KVD : NULL, *v = own ? c->vc + t * KVD : NULL;
    if (own && !ly->wv.data) memcpy(v, k, sizeof(float) * (size_t)(n_kv * hd));
    spread_heads(q, hp->n_head, hp->n_head, hd, d);
    for (int h = 0; h < hp->n_head; h++)
        c->k->rms_norm(hd, q + h * d, q + h * d, ly->q_norm, hp->norm_eps);
    if (own) { /* the layer's n_kv heads, repeated to the model's count */
        spread_heads(k, n_kv, hp->n_head_kv, hd, d);
        spread_heads(v, n_kv, hp->n_head_kv, hd, d);
        for (int h = 0; h < hp->n_head_kv; h++) {
            c->k->rms_norm(hd, k + h * d, k + h * d, ly->k_norm, hp->norm_eps);
            norm_plain(v + h * d, hd, hp->norm_eps);
        }
    }
    rope_token(c, ly, t, q, k, tmp);
    const float undo = sqrtf((float)d); /* the driver scales by 1/sqrt(d); Gemma 4 by 1 */
    for (int64_t i = 0; i < (int64_t)hp->n_head * d; i++)
        q[i] *= undo;
    cpulm_attn_rotate_new(c, q, k, v); /* off while the head sizes differ by layer */
    if (!own) return;
    cpulm_from_float_fn store = c->k->from_float[c->kv.dtype];
    store(k, cpulm_kv_k(&c->kv, il, c->seq[t], c->pos[t]), KVD);
    store(v, cpulm_kv_v(&c->kv, il, c->seq[t], c->pos[t]), KVD);
}

static void attention_half(cpulm_ctx *c, const cpulm_layer *ly, int il, int ith, int nth) {
    const cpulm_hparams *hp = &c->m->hp;
    const int64_t T = c->n_tok, E = hp->n_embd, QD = (int64_t)hp->n_head * hp->head_dim;
    const int64_t KVD = c->kv.kv_dim, hd = ly->head_dim;
    float *tmp = c->scores + (size_t)ith * c->scores_stride; /* rope angles */
    for (int64_t t = ith; t < T; t += nth)
        c->k->rms_norm(E, c->xn + t * E, c->x + t * E, ly->attn_norm, hp->norm_eps);
    cpulm_pool_barrier(c->pool);
    /* rows of the padded widths; the layer's compact heads land at their starts */
    mm_job jobs[3] = {{&ly->wq, c->q, QD, NULL, 0},
                      {&ly->wk, c->kc, KVD, NULL, 0},
                      {&ly->wv, c->vc, KVD, NULL, 0}};
    const int n_jobs = ly->kv_src != il ? 1 : ly->wv.data ? 3 : 2;
    cpulm_fwd_mm_group(c, c->xn, E, T, jobs, n_jobs, ith, nth);
    cpulm_pool_barrier(c->pool);
    for (int64_t t = ith; t < T; t += nth)
        prepare_token(c, ly, il, t, tmp);
    cpulm_pool_barrier(c->pool);
    const cpulm_attn_opts o = {.window = ly->window, .sinks = NULL};
    cpulm_attn_run(c, ly->kv_src, &o, ith, nth);
    cpulm_pool_barrier(c->pool);
    for (int64_t t = ith; t < T; t += nth)
        pack_heads(c->att + t * QD, hp->n_head, hd, hp->head_dim);
    cpulm_pool_barrier(c->pool);
    mm_job out = {&ly->wo, c->xn, E, NULL, 0}; /* xn is free again: the output goes there */
    cpulm_fwd_mm_group(c, c->att, QD, T, &out, 1, ith, nth);
    cpulm_pool_barrier(c->pool);
    cpulm_gemma_post_norm_add(c, ly->attn_post_norm, ith, nth);
}

/* ---- per-layer embedding, output scale ---- */

static void ple_half(cpulm_ctx *c, const cpulm_layer *ly, int il, int ith, int nth) {
    const cpulm_hparams *hp = &c->m->hp;
    const int64_t T = c->n_tok, E = hp->n_embd, P = hp->n_pl, all = P * hp->n_layer;
    mm_job gate = {&ly->pl_gate, c->g, P, NULL, 0};
    cpulm_fwd_mm_group(c, c->x, E, T, &gate, 1, ith, nth);
    cpulm_pool_barrier(c->pool);
    for (int64_t t = ith; t < T; t += nth)
        cpulm_gemma_geglu(P, c->g + t * P, c->g + t * P, c->ple + t * all + (int64_t)il * P);
    cpulm_pool_barrier(c->pool);
    mm_job proj = {&ly->pl_proj, c->xn, E, NULL, 0};
    cpulm_fwd_mm_group(c, c->g, P, T, &proj, 1, ith, nth);
    cpulm_pool_barrier(c->pool);
    cpulm_gemma_post_norm_add(c, ly->pl_post_norm, ith, nth);
}

void cpulm_gemma4_layer(cpulm_ctx *c, const cpulm_layer *ly, int il, int ith, int nth) {
    attention_half(c, ly, il, ith, nth);
    cpulm_gemma_ffn_half(c, ly, ith, nth);
    if (c->ple) ple_half(c, ly, il, ith, nth);
    if (!ly->out_scale) return;
    const int64_t E = c->m->hp.n_embd;
    const float s = ly->out_scale[0];
    for (int64_t t = ith; t < c->n_tok; t += nth)
        for (int64_t i = 0; i < E; i++)
            c->x[t * E + i] *= s;
    cpulm_pool_barrier(c->pool);
}
