/* forward.c: the transformer forward pass over a batch of tokens from one or more sequences.
 *
 * Every pool thread runs the whole pass (fwd_worker) and threads meet at barriers between
 * dependent steps, as ggml does, so a pass costs one wake-up, not one per op.
 * Determinism: every output element is computed by exactly one thread with a fixed
 * reduction order, so results do not depend on the thread count.
 * Shapes (T = tokens in the batch, E = n_embd, QD = n_head*head_dim, KVD = n_head_kv*head_dim,
 * F = n_ff): x, xn [T][E]; q, att [T][QD]; kc, vc [T][KVD]; g, u [T][F].
 * Matmuls convert activations once per weight vec_dot_type (Q8_0 for Q4_0/Q8_0 weights, as
 * the reference does), then every thread computes a slice of the output rows.
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <math.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "../base/status.h"
#include "forward.h"
#include "../kernels/matmul.h"
#include "attention.h"
#include "encoder.h"
#include "forward_int.h"
#include "repack.h"
#include "work.h"

/* Work sharing: see work.h. */

static int claim(cpulm_ctx *c, uint64_t end, uint64_t *item) {
    return cpulm_work_claim(c, end, item);
}

static uint64_t job_begin(cpulm_ctx *c, int ith, uint64_t n) {
    return cpulm_work_begin(c, ith, n);
}

#define MM_ITEMS_PER_THREAD 4 /* small enough to rebalance, large enough to amortise a claim */
/* A big matrix (the output projection: 175 MB at Q4_0 for a 151936-token vocabulary) gets
 * items of about this many weight bytes, so the thread finishing first waits at most about
 * one such slice (~60 us at 17 GB/s) instead of an eighth of the matrix. */
#define MM_ITEM_BYTES (1u << 20)

static int mm_n_items(const cpulm_tensor *w, int nth) {
    int64_t n = MM_ITEMS_PER_THREAD * nth;
    const int64_t by_bytes = (int64_t)(w->row_bytes * (uint64_t)w->ne[1] / MM_ITEM_BYTES);
    const int64_t max = w->ne[1] / 16 > n ? w->ne[1] / 16 : n; /* whole 16-row groups */
    if (by_bytes > n) n = by_bytes < max ? by_bytes : max;
    return (int)n;
}

static void mm_rows_run(cpulm_ctx *c, const mm_job *j, const uint8_t *act, size_t act_stride,
                        int64_t n_rows, int ith, int nth) {
    cpulm_matmul_args a = {.w = j->w->data,
                           .w_type = j->w->type,
                           .w_row_bytes = j->w->row_bytes,
                           .n_in = j->w->ne[0],
                           .n_out = j->w->ne[1],
                           .packed = j->w->packed,
                           .act = act,
                           .act_stride = act_stride,
                           .n_rows = n_rows,
                           .out = j->out,
                           .ld_out = j->ld_out,
                           .bias = j->bias,
                           .mins = j->w->mins,
                           .accumulate = j->accumulate};
    if (nth == 1) {
        cpulm_matmul(c->k, &a, 0, 1);
        return;
    }
    int n_items = mm_n_items(j->w, nth);
    uint64_t first = job_begin(c, ith, (uint64_t)n_items), item;
    while (claim(c, first + (uint64_t)n_items, &item))
        cpulm_matmul(c->k, &a, (int)(item - first), n_items);
}

/* Thread 0 times its share, as cpulm_attn_run does (cpulm_ctx_matmul_ns): two clock reads
 * per matmul, ~0.01% of a generated token. */
static void mm_rows(cpulm_ctx *c, const mm_job *j, const uint8_t *act, size_t act_stride,
                    int64_t n_rows, int ith, int nth) {
    const uint64_t t0 = ith == 0 ? cpulm_clock_ns() : 0;
    mm_rows_run(c, j, act, act_stride, n_rows, ith, nth);
    if (ith == 0) c->mm_ns += cpulm_clock_ns() - t0;
}

/* Runs the jobs (all reading x [n_rows][ldx], n_in = ne[0] of every weight). The caller has
 * a barrier before (x complete) and after (outputs complete). */
static void mm_group(cpulm_ctx *c, const float *x, int64_t ldx, int64_t n_rows, const mm_job *jobs,
                     int n_jobs, int ith, int nth) {
    int cur = -1;
    for (int i = 0; i < n_jobs; i++) {
        cpulm_dtype vdt = cpulm_dtype_traits_get(jobs[i].w->type)->vec_dot_type;
        if ((int)vdt != cur) {
            if (cur >= 0) cpulm_pool_barrier(c->pool); /* previous matmuls still read actq */
            if (vdt != CPULM_DTYPE_F32) {
                for (int64_t t = ith; t < n_rows; t += nth)
                    cpulm_matmul_quantize_act(c->k, vdt, x + t * ldx,
                                              (uint8_t *)c->actq + t * c->actq_stride,
                                              jobs[i].w->ne[0]);
                cpulm_pool_barrier(c->pool);
            }
            cur = (int)vdt;
        }
        if (vdt == CPULM_DTYPE_F32)
            mm_rows(c, &jobs[i], (const uint8_t *)x, sizeof(float) * (size_t)ldx, n_rows, ith, nth);
        else
            mm_rows(c, &jobs[i], c->actq, c->actq_stride, n_rows, ith, nth);
    }
}

/* ---- rope ---- */

void cpulm_fwd_rope_heads(const cpulm_kernels *k, float *v, int n_heads, int head_stride, int n_rot,
                          cpulm_rope_style style, const float *cs, const float *sn) {
    k->rope(v, n_heads, head_stride, n_rot, style == CPULM_ROPE_NEOX, cs, sn);
}

/* Per-head RMS norm of token t's q and k before rope (qwen3: attn_{q,k}_norm). */
static void qk_norm(cpulm_ctx *c, const cpulm_layer *ly, int64_t t) {
    const cpulm_hparams *hp = &c->m->hp;
    int d = hp->head_dim;
    float *q = c->q + t * (int64_t)hp->n_head * d, *k = c->kc + t * c->kv.kv_dim;
    for (int h = 0; h < hp->n_head; h++)
        c->k->rms_norm(d, q + h * d, q + h * d, ly->q_norm, hp->norm_eps);
    for (int h = 0; h < hp->n_head_kv; h++)
        c->k->rms_norm(d, k + h * d, k + h * d, ly->k_norm, hp->norm_eps);
}

/* Does rope pair i rotate with the token's position? Always, except in multi-section
 * (mrope) models, where text positions are equal in the first three sections and 0 in
 * the fourth: a pair rotates iff one of the first three covers it. Sections repeat over
 * the pairs with period sum(sections); interleaved (imrope) sections take every third
 * pair. */
static int rope_pair_rotates(const cpulm_model *m, int i) {
    const int32_t *s = m->hp.rope_sections;
    const int32_t sum = s[0] + s[1] + s[2] + s[3];
    if (!m->arch->mrope || sum == 0) return 1;
    const int sec = i % sum;
    if (m->arch->imrope) return sec < 3 * s[sec % 3];
    return sec < s[0] + s[1] + s[2];
}

/* Rope on q and k of token t (the scaling rs and theta_scale = base^(-2/n_rot) of its
 * layer), then its k and v go into the cache's layer il. */
static void rope_and_store(cpulm_ctx *c, int il, int64_t t, const cpulm_rope_scaling *rs,
                           float theta_scale, float *tmp) {
    const cpulm_hparams *hp = &c->m->hp;
    int half = hp->n_rot / 2;
    float *cs = tmp, *sn = tmp + half;
    /* the angles of pos (rope.h: scaling none, linear or YaRN) */
    cpulm_rope_angles(rs, hp->n_rot, theta_scale, c->m->rope_freqs, (float)c->pos[t], cs, sn);
    for (int i = 0; i < half; i++)
        if (!rope_pair_rotates(c->m, i)) { /* position 0: the identity */
            cs[i] = 1.0f;
            sn[i] = 0.0f;
        }
    int64_t qd = (int64_t)hp->n_head * hp->head_dim, kvd = c->kv.kv_dim;
    float *q = c->q + t * qd, *k = c->kc + t * kvd, *v = c->vc + t * kvd;
    cpulm_fwd_rope_heads(c->k, q, hp->n_head, hp->head_dim, hp->n_rot, c->m->arch->rope, cs, sn);
    cpulm_fwd_rope_heads(c->k, k, hp->n_head_kv, hp->head_dim, hp->n_rot, c->m->arch->rope, cs, sn);
    cpulm_attn_rotate_new(c, q, k, v);
    cpulm_from_float_fn store = c->k->from_float[c->kv.dtype];
    store(k, cpulm_kv_k(&c->kv, il, c->seq[t], c->pos[t]), kvd);
    store(v, cpulm_kv_v(&c->kv, il, c->seq[t], c->pos[t]), kvd);
}

void cpulm_fwd_qk_rope_store(cpulm_ctx *c, const cpulm_layer *ly, int kv_il, int64_t t,
                             float *tmp) {
    if (ly->q_norm) qk_norm(c, ly, t);
    rope_and_store(c, kv_il, t, &c->m->hp.rope, c->theta_scale, tmp);
}

void cpulm_fwd_qk_rope_store_at(cpulm_ctx *c, const cpulm_layer *ly, int kv_il, int64_t t,
                                const cpulm_rope_scaling *rs, float theta_scale, float *tmp) {
    if (ly->q_norm) qk_norm(c, ly, t);
    rope_and_store(c, kv_il, t, rs, theta_scale, tmp);
}

/* ---- one layer ---- */

/* The shared expert (qwen35moe): x += sigmoid(gate_inp_shexp . xn) * SwiGLU FFN(xn), the
 * scalar gate applied to the down projection's input (the projection is linear). */
static void shared_expert(cpulm_ctx *c, const cpulm_layer *ly, int ith, int nth) {
    const cpulm_hparams *hp = &c->m->hp;
    const int64_t T = c->n_tok, E = hp->n_embd, F = hp->n_ff_shexp;
    mm_job gu[2] = {{&ly->gate_shexp, c->g, F, NULL, 0}, {&ly->up_shexp, c->u, F, NULL, 0}};
    mm_group(c, c->xn, E, T, gu, 2, ith, nth);
    cpulm_pool_barrier(c->pool);
    for (int64_t t = ith; t < T; t += nth) {
        float *g = c->g + t * F;
        c->k->swiglu(F, g, g, c->u + t * F);
        const float s = 1.0f / (1.0f + expf(-c->k->dot_f32(E, c->xn + t * E, ly->gate_inp_shexp)));
        for (int64_t i = 0; i < F; i++)
            g[i] *= s;
    }
    cpulm_pool_barrier(c->pool);
    mm_job down = {&ly->down_shexp, c->x, E, NULL, 1};
    mm_group(c, c->g, F, T, &down, 1, ith, nth);
    cpulm_pool_barrier(c->pool);
}

/* The FFN half of a layer: xn = norm(x), x += FFN(xn) (dense or MoE, plus a shared
 * expert). */
static void ffn(cpulm_ctx *c, const cpulm_layer *ly, int ith, int nth) {
    const cpulm_hparams *hp = &c->m->hp;
    const cpulm_kernels *k = c->k;
    int64_t T = c->n_tok, E = hp->n_embd, F = hp->n_ff;
    for (int64_t t = ith; t < T; t += nth)
        k->rms_norm(E, c->xn + t * E, c->x + t * E, ly->ffn_norm, hp->norm_eps);
    cpulm_pool_barrier(c->pool);
    if (ly->up_shexp.data) shared_expert(c, ly, ith, nth); /* reads xn, as the experts do */
    if (ly->gate_exps.data) {
        cpulm_moe_ffn(c, ly, ith, nth);
        return;
    }
    mm_job gu[2] = {{&ly->w_gate, c->g, F, NULL, 0}, {&ly->w_up, c->u, F, NULL, 0}};
    mm_group(c, c->xn, E, T, gu, 2, ith, nth);
    cpulm_pool_barrier(c->pool);
    for (int64_t t = ith; t < T; t += nth)
        k->swiglu(F, c->g + t * F, c->g + t * F, c->u + t * F);
    cpulm_pool_barrier(c->pool);
    mm_job down = {&ly->w_down, c->x, E, NULL, 1};
    mm_group(c, c->g, F, T, &down, 1, ith, nth);
    cpulm_pool_barrier(c->pool);
}

/* A hybrid model's layer: x += (Gated DeltaNet or gated attention)(norm(x)), then the FFN
 * with the post-attention norm (bound as ffn_norm). */
static void hybrid_layer(cpulm_ctx *c, const cpulm_layer *ly, int ith, int nth) {
    const cpulm_hparams *hp = &c->m->hp;
    int64_t T = c->n_tok, E = hp->n_embd;
    for (int64_t t = ith; t < T; t += nth)
        c->k->rms_norm(E, c->xn + t * E, c->x + t * E, ly->attn_norm, hp->norm_eps);
    cpulm_pool_barrier(c->pool);
    if (ly->recurrent)
        cpulm_dnet_layer(c, ly, ith, nth);
    else
        cpulm_dnet_attn_layer(c, ly, ith, nth);
    ffn(c, ly, ith, nth);
}

static void layer(cpulm_ctx *c, int il, int ith, int nth) {
    const cpulm_model *m = c->m;
    const cpulm_hparams *hp = &m->hp;
    const cpulm_layer *ly = &m->layers[il];
    const cpulm_kernels *k = c->k;
    int64_t T = c->n_tok, E = hp->n_embd;
    int64_t QD = (int64_t)hp->n_head * hp->head_dim, KVD = c->kv.kv_dim;
    float *tmp = c->scores + (size_t)ith * c->scores_stride; /* rope angles */
    if (m->arch->hybrid) {
        hybrid_layer(c, ly, ith, nth);
        return;
    }
    if (m->arch->gemma) {
        cpulm_gemma_layer(c, ly, il, ith, nth);
        return;
    }
    if (m->arch->gemma4) {
        cpulm_gemma4_layer(c, ly, il, ith, nth);
        return;
    }

    for (int64_t t = ith; t < T; t += nth)
        k->rms_norm(E, c->xn + t * E, c->x + t * E, ly->attn_norm, hp->norm_eps);
    cpulm_pool_barrier(c->pool);
    mm_job qkv[3] = {{&ly->wq, c->q, QD, ly->bq, 0},
                     {&ly->wk, c->kc, KVD, ly->bk, 0},
                     {&ly->wv, c->vc, KVD, ly->bv, 0}};
    mm_group(c, c->xn, E, T, qkv, 3, ith, nth);
    cpulm_pool_barrier(c->pool);
    for (int64_t t = ith; t < T; t += nth) {
        if (ly->q_norm) qk_norm(c, ly, t);
        rope_and_store(c, il, t, &hp->rope, c->theta_scale, tmp);
    }
    cpulm_pool_barrier(c->pool);
    /* sliding-window layers (gpt-oss: every other one) and sinks: the model's options */
    const cpulm_attn_opts ao = {.window = ly->window, .sinks = ly->attn_sinks};
    cpulm_attn_run(c, il, &ao, ith, nth);
    cpulm_pool_barrier(c->pool);
    mm_job o = {&ly->wo, c->x, E, ly->bo, 1};
    mm_group(c, c->att, QD, T, &o, 1, ith, nth);
    cpulm_pool_barrier(c->pool);
    ffn(c, ly, ith, nth);
}

/* ---- embeddings ---- */

/* Pooled embeddings of every sequence in the batch from the final-norm hidden states: the
 * first (CLS) or last (LAST) token's, or the mean of all (MEAN, summed in batch order, then
 * scaled). One thread per sequence, so the arithmetic never depends on the thread count.
 * Ends on a barrier (xn is reused for the logits rows next). */
static void pool_embeddings(cpulm_ctx *c, int ith, int nth) {
    const cpulm_model *m = c->m;
    const int64_t E = m->hp.n_embd;
    const float eps = m->hp.norm_eps;
    if (c->p.pooling == CPULM_POOLING_MEAN) {
        for (int64_t t = ith; t < c->n_tok; t += nth)
            c->k->rms_norm(E, c->xn + t * E, c->x + t * E, m->output_norm, eps);
        cpulm_pool_barrier(c->pool);
    }
    for (int32_t s = ith; s < c->p.n_seq_max; s += nth) {
        const int32_t n = c->embd_count[s];
        if (n == 0) continue;
        float *out = c->embd + (int64_t)s * E;
        if (c->p.pooling != CPULM_POOLING_MEAN) {
            int64_t t = c->p.pooling == CPULM_POOLING_CLS ? c->embd_first[s] : c->embd_last[s];
            c->k->rms_norm(E, out, c->x + t * E, m->output_norm, eps);
            continue;
        }
        memset(out, 0, sizeof(float) * (size_t)E);
        for (int64_t t = c->embd_first[s]; t <= c->embd_last[s]; t++)
            if (c->seq[t] == s) c->k->axpy(E, out, 1.0f, c->xn + t * E);
        const float inv = 1.0f / (float)n;
        for (int64_t i = 0; i < E; i++)
            out[i] *= inv;
    }
    cpulm_pool_barrier(c->pool);
}

static void fwd_worker(void *arg, int ith, int nth) {
    cpulm_ctx *c = arg;
    const cpulm_model *m = c->m;
    int64_t E = m->hp.n_embd;
    c->work_base[ith].v = c->work_start;
    if (m->arch->encoder) {
        cpulm_encoder_pass(c, ith, nth);
        return;
    }
    for (int64_t t = ith; t < c->n_tok; t += nth) {
        cpulm_repack_get_row(c->k, &m->tok_embd, c->tok[t], c->x + t * E);
        if (m->arch->gemma || m->arch->gemma4) cpulm_gemma_scale_embd(c, c->x + t * E);
    }
    cpulm_pool_barrier(c->pool);
    if (m->arch->gemma4) cpulm_gemma4_inputs(c, ith, nth);
    for (int il = 0; il < m->hp.n_layer; il++)
        layer(c, il, ith, nth);
    if (c->pooled) pool_embeddings(c, ith, nth);
    if (c->n_outputs == 0) return;
    for (int64_t o = ith; o < c->n_outputs; o += nth)
        c->k->rms_norm(E, c->xn + o * E, c->x + (int64_t)c->out_idx[o] * E, m->output_norm,
                       m->hp.norm_eps);
    cpulm_pool_barrier(c->pool);
    if (c->embd && !c->pooled) /* per-token embeddings: the normed rows themselves */
        for (int64_t o = ith; o < c->n_outputs; o += nth)
            memcpy(c->embd + o * E, c->xn + o * E, sizeof(float) * (size_t)E);
    if (!c->logits) return; /* embeddings only: skip the output projection */
    mm_job out = {&m->output, c->logits, m->hp.n_vocab, NULL, 0};
    mm_group(c, c->xn, E, c->n_outputs, &out, 1, ith, nth);
    if (m->hp.final_softcap > 0) {
        cpulm_pool_barrier(c->pool);
        for (int64_t o = ith; o < c->n_outputs; o += nth)
            cpulm_gemma_softcap(m->hp.final_softcap, c->logits + o * m->hp.n_vocab, m->hp.n_vocab);
    }
}

/* ---- the helpers other FFN files share (forward_int.h) ---- */

int cpulm_fwd_claim(cpulm_ctx *c, uint64_t end, uint64_t *item) {
    return claim(c, end, item);
}

uint64_t cpulm_fwd_job_begin(cpulm_ctx *c, int ith, uint64_t n) {
    return job_begin(c, ith, n);
}

void cpulm_fwd_mm_group(cpulm_ctx *c, const float *x, int64_t ldx, int64_t n_rows,
                        const mm_job *jobs, int n_jobs, int ith, int nth) {
    mm_group(c, x, ldx, n_rows, jobs, n_jobs, ith, nth);
}

void cpulm_forward(cpulm_ctx *c) {
    int nth = c->n_tok == 1 ? c->p.n_threads : c->p.n_threads_batch;
    int cap = cpulm_pool_size(c->pool);
    c->work_start = atomic_load_explicit(&c->work_ctr, memory_order_relaxed);
    cpulm_attn_plan(c);
    cpulm_dnet_plan(c);
    cpulm_pool_run(c->pool, fwd_worker, c, nth < cap ? nth : cap);
}
