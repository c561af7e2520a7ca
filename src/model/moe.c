/* moe.c: the mixture-of-experts FFN (qwen3moe, Mixtral-style llama, gpt-oss), as llama.cpp
 * computes it:
 *   p = softmax(router x); the n_used largest p choose experts (renormalized to sum 1 when
 *   the model says so); y = sum over chosen e, in order of weight, of w_e * down_e(silu(gate_e x) *
 * up_e x). gpt-oss (arch flags): the router and every expert matrix have biases, the n_used
 * largest logits choose and a softmax over them weights, and the activation is the clamped
 * SwiGLU (swiglu_oai). Tokens are grouped by expert: after routing, the batch's (token, slot) pairs
 * are sorted by expert, each expert's activation rows are gathered contiguously, and each chosen
 * expert runs one GEMM over all its tokens (one GEMV row when generating), reading only the experts
 * some token chose. Work items are (expert, slice of output rows), sized by the expert's token
 * count, busiest experts first, and claimed from the shared counter, so uneven expert loads balance
 * over the threads. gate/up items and down items are one job: the thread finishing an expert's last
 * gate/up slice applies its SwiGLU and marks it ready, and a down item of that expert waits for
 * the mark (not for every expert, as a barrier would). Every (token, slot) row is computed by one
 * item with fixed arithmetic, so results do not depend on the thread count or on which other
 * tokens share the batch. */
#include "moe.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/matmul.h"
#include "forward_int.h"

#define MAX_PARTS        64 /* output-row slices of one expert's matmul */
#define ITEMS_PER_THREAD 8  /* enough items that a descheduled thread's share is taken over */

/* Where each phase's items come from: item i is slice part[i] of n_parts[i] of expert[i]. */
typedef struct moe_plan {
    int32_t n_items;
    int32_t *expert, *part, *n_parts; /* [n_expert * MAX_PARTS] */
} moe_plan;

struct cpulm_moe_scratch {
    int64_t n_slots;     /* n_batch * n_expert_used */
    float *router;       /* [n_batch][n_expert] logits, then probabilities */
    int32_t *sel;        /* [n_slots] chosen expert of (token, slot), slots by weight */
    float *wsel;         /* [n_slots] its weight */
    int32_t *cnt, *off;  /* [n_expert], [n_expert + 1]: rows of each expert in sorted order */
    int32_t *order;      /* [n_slots] sorted position -> (token * n_used + slot) */
    int32_t *pos;        /* [n_slots] the inverse */
    int32_t *eorder;     /* [n_expert] experts by token count, most first (ties: lower id) */
    atomic_int *gu_left; /* [n_expert] gate/up slices of the expert not finished yet */
    atomic_int *ready;   /* [n_expert] 1 once the expert's SwiGLU rows are converted for down */
    moe_plan plan_gu, plan_down;
    uint8_t *act; /* [n_slots] gathered activation rows, act_stride apart */
    size_t act_stride;
    float *g, *u; /* [n_slots][n_ff_exp] */
    float *y;     /* [n_slots][n_embd] each expert's output */
};

static size_t act_stride_for(const cpulm_hparams *hp) {
    int64_t w = hp->n_embd > hp->n_ff_exp ? hp->n_embd : hp->n_ff_exp;
    /* 4 bytes per element bounds every vec_dot_type, as the context's actq */
    return ((size_t)w * 4 + 63) / 64 * 64;
}

uint64_t cpulm_moe_scratch_bytes(const cpulm_hparams *hp, int64_t n_batch) {
    if (hp->n_expert == 0) return 0;
    uint64_t S = (uint64_t)n_batch * (uint64_t)hp->n_expert_used, X = (uint64_t)hp->n_expert;
    return 4 * (uint64_t)n_batch * X + S * (4 + 4 + 4 + 4) + 4 * (5 * X + 1) +
           2 * 3 * 4 * X * MAX_PARTS + S * act_stride_for(hp) +
           4 * S * (2 * (uint64_t)hp->n_ff_exp + (uint64_t)hp->n_embd);
}

static int plan_alloc(moe_plan *p, int64_t n) {
    p->expert = malloc(sizeof(int32_t) * (size_t)n);
    p->part = malloc(sizeof(int32_t) * (size_t)n);
    p->n_parts = malloc(sizeof(int32_t) * (size_t)n);
    return p->expert && p->part && p->n_parts;
}

static void plan_free(moe_plan *p) {
    free(p->expert);
    free(p->part);
    free(p->n_parts);
}

cpulm_status cpulm_moe_scratch_new(cpulm_moe_scratch **out, const cpulm_hparams *hp,
                                   int64_t n_batch, cpulm_error *err) {
    *out = NULL;
    if (hp->n_expert == 0) return CPULM_OK;
    cpulm_moe_scratch *s = calloc(1, sizeof *s);
    if (!s) return cpulm_errf(err, CPULM_ERR_NOMEM, "context: out of memory for MoE scratch");
    const size_t X = (size_t)hp->n_expert, S = (size_t)n_batch * (size_t)hp->n_expert_used;
    s->n_slots = (int64_t)S;
    s->act_stride = act_stride_for(hp);
    s->router = malloc(sizeof(float) * (size_t)n_batch * X);
    s->sel = malloc(sizeof(int32_t) * S);
    s->wsel = malloc(sizeof(float) * S);
    s->cnt = malloc(sizeof(int32_t) * X);
    s->off = malloc(sizeof(int32_t) * (X + 1));
    s->order = malloc(sizeof(int32_t) * S);
    s->pos = malloc(sizeof(int32_t) * S);
    s->eorder = malloc(sizeof(int32_t) * X);
    s->gu_left = malloc(sizeof(atomic_int) * X);
    s->ready = malloc(sizeof(atomic_int) * X);
    s->act = aligned_alloc(64, s->act_stride * S);
    s->g = malloc(sizeof(float) * S * (size_t)hp->n_ff_exp);
    s->u = malloc(sizeof(float) * S * (size_t)hp->n_ff_exp);
    s->y = malloc(sizeof(float) * S * (size_t)hp->n_embd);
    int ok = plan_alloc(&s->plan_gu, (int64_t)X * MAX_PARTS) &&
             plan_alloc(&s->plan_down, (int64_t)X * MAX_PARTS);
    if (!ok || !s->router || !s->sel || !s->wsel || !s->cnt || !s->off || !s->order || !s->pos ||
        !s->eorder || !s->gu_left || !s->ready || !s->act || !s->g || !s->u || !s->y) {
        cpulm_moe_scratch_free(s);
        return cpulm_errf(err, CPULM_ERR_NOMEM, "context: out of memory for MoE scratch");
    }
    *out = s;
    return CPULM_OK;
}

void cpulm_moe_scratch_free(cpulm_moe_scratch *s) {
    if (!s) return;
    void *bufs[] = {
        s->router,          s->sel,           s->wsel, s->cnt, s->off, s->order, s->pos, s->eorder,
        (void *)s->gu_left, (void *)s->ready, s->act,  s->g,   s->u,   s->y};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    plan_free(&s->plan_gu);
    plan_free(&s->plan_down);
    free(s);
}

/* ---- routing ---- */

/* Token t's probabilities, its n_used best experts (ties: the lower id, as a stable sort
 * picks) and their weights. gpt-oss (CPULM_GATING_SOFTMAX_WEIGHT) picks by the logits and
 * softmaxes only the chosen ones. */
static void route_token(const cpulm_ctx *c, cpulm_moe_scratch *s, int64_t t) {
    const cpulm_hparams *hp = &c->m->hp;
    const int X = hp->n_expert, K = hp->n_expert_used;
    const bool weight_softmax = c->m->arch->gating == CPULM_GATING_SOFTMAX_WEIGHT;
    float *p = s->router + t * X;
    if (!weight_softmax) c->k->softmax(X, p);
    int32_t *sel = s->sel + t * K;
    float *w = s->wsel + t * K;
    double sum = 0;
    uint8_t taken[4096]; /* n_expert <= 4096 (loader) */
    memset(taken, 0, (size_t)X);
    for (int j = 0; j < K; j++) {
        int best = -1;
        for (int e = 0; e < X; e++)
            if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
        taken[best] = 1;
        sel[j] = best;
        w[j] = p[best];
        sum += w[j];
    }
    if (weight_softmax) c->k->softmax(K, w);
    if (!hp->moe_norm_weights) return;
    /* llama.cpp clamps the sum away from zero before dividing */
    float fs = (float)sum < 6.103515625e-5f ? 6.103515625e-5f : (float)sum;
    for (int j = 0; j < K; j++)
        w[j] /= fs;
}

/* Item plan for one phase over the n_chosen experts of eorder: each gets slices of its n_out
 * rows in proportion to its share of the rows, at least 1 and at most one per 16-row group;
 * busiest experts first, so the items claimed last are the small ones and the threads finish
 * together. */
static void make_plan(moe_plan *p, const cpulm_moe_scratch *s, int n_chosen, int64_t n_slots,
                      int64_t n_out, int nth) {
    int64_t target = (int64_t)ITEMS_PER_THREAD * nth, groups = n_out / 16 > 0 ? n_out / 16 : 1;
    p->n_items = 0;
    for (int k = 0; k < n_chosen; k++) {
        const int e = s->eorder[k];
        int64_t n = (target * s->cnt[e] + n_slots - 1) / n_slots;
        if (n > groups) n = groups;
        if (n > MAX_PARTS) n = MAX_PARTS;
        if (n < 1) n = 1;
        for (int64_t i = 0; i < n; i++) {
            p->expert[p->n_items] = e;
            p->part[p->n_items] = (int32_t)i;
            p->n_parts[p->n_items++] = (int32_t)n;
        }
    }
}

/* Counting sort of the (token, slot) pairs by expert, and the two phases' plans (thread 0
 * alone; the others wait at the next barrier). */
static void group_by_expert(const cpulm_ctx *c, cpulm_moe_scratch *s, const cpulm_layer *ly,
                            int nth) {
    const cpulm_hparams *hp = &c->m->hp;
    const int X = hp->n_expert;
    const int64_t n = (int64_t)c->n_tok * hp->n_expert_used;
    memset(s->cnt, 0, sizeof(int32_t) * (size_t)X);
    for (int64_t i = 0; i < n; i++)
        s->cnt[s->sel[i]]++;
    s->off[0] = 0;
    for (int e = 0; e < X; e++)
        s->off[e + 1] = s->off[e] + s->cnt[e];
    int32_t fill[4096]; /* n_expert <= 4096 (loader) */
    memcpy(fill, s->off, sizeof(int32_t) * (size_t)X);
    for (int64_t i = 0; i < n; i++) {
        int32_t p = fill[s->sel[i]]++;
        s->order[p] = (int32_t)i;
        s->pos[i] = p;
    }
    /* insertion sort by count, most first; stable, so ties keep the lower id first */
    int nz = 0;
    for (int e = 0; e < X; e++) {
        if (!s->cnt[e]) continue;
        int k = nz++;
        for (; k > 0 && s->cnt[s->eorder[k - 1]] < s->cnt[e]; k--)
            s->eorder[k] = s->eorder[k - 1];
        s->eorder[k] = e;
        atomic_store_explicit(&s->ready[e], 0, memory_order_relaxed);
    }
    for (int k = nz; k < X; k++) /* unused experts: no items */
        s->eorder[k] = -1;
    make_plan(&s->plan_gu, s, nz, n, ly->gate_exps.ne[1], nth);
    for (int i = 0; i < s->plan_gu.n_items; i++)
        atomic_store_explicit(&s->gu_left[s->plan_gu.expert[i]], s->plan_gu.n_parts[i],
                              memory_order_relaxed);
    make_plan(&s->plan_down, s, nz, n, ly->down_exps.ne[1], nth);
}

/* ---- expert matmuls ---- */

/* Item i of the plan: rows [off[e], off[e] + cnt[e]) of the gathered activations times expert
 * e of each weight (up to two sharing the activations) into its output. */
static void run_item(cpulm_ctx *c, cpulm_moe_scratch *s, const moe_plan *p, int i,
                     const cpulm_tensor *const *w, float *const *out, int n_w) {
    const int e = p->expert[i];
    for (int j = 0; j < n_w; j++) {
        const cpulm_tensor we = cpulm_tensor_expert(w[j], e);
        cpulm_matmul_args a = {.w = we.data,
                               .w_type = we.type,
                               .w_row_bytes = we.row_bytes,
                               .n_in = we.ne[0],
                               .n_out = we.ne[1],
                               .packed = we.packed,
                               .act = s->act + (size_t)s->off[e] * s->act_stride,
                               .act_stride = s->act_stride,
                               .n_rows = s->cnt[e],
                               .out = out[j] + (int64_t)s->off[e] * we.ne[1],
                               .ld_out = we.ne[1],
                               .mins = we.mins};
        cpulm_matmul(c->k, &a, p->part[i], p->n_parts[i]);
    }
}

/* Runs all the plan's items, claimed from the shared counter. */
static void run_plan(cpulm_ctx *c, cpulm_moe_scratch *s, const moe_plan *p,
                     const cpulm_tensor *const *w, float *const *out, int n_w, int ith) {
    uint64_t first = cpulm_fwd_job_begin(c, ith, (uint64_t)p->n_items), item;
    while (cpulm_fwd_claim(c, first + (uint64_t)p->n_items, &item))
        run_item(c, s, p, (int)(item - first), w, out, n_w);
}

static cpulm_dtype vdt_of(const cpulm_tensor *w) {
    return cpulm_dtype_traits_get(w->type)->vec_dot_type;
}

/* Converts every token's xn row once into ctx->actq, as weights of type vdt read them. */
static void convert_tokens(cpulm_ctx *c, cpulm_dtype vdt, int ith, int nth) {
    const int64_t E = c->m->hp.n_embd;
    for (int64_t t = ith; t < c->n_tok; t += nth)
        cpulm_matmul_quantize_act(c->k, vdt, c->xn + t * E, (uint8_t *)c->actq + t * c->actq_stride,
                                  E);
}

/* Copies the converted row of token order[p] / n_used to gathered row p, for p in
 * [p0, n) stepping by step. */
static void gather_rows(cpulm_ctx *c, cpulm_moe_scratch *s, cpulm_dtype vdt, int64_t p0,
                        int64_t step) {
    const int64_t K = c->m->hp.n_expert_used, n = (int64_t)c->n_tok * K;
    const size_t rb = (size_t)cpulm_matmul_act_bytes(vdt, c->m->hp.n_embd);
    for (int64_t p = p0; p < n; p += step)
        memcpy(s->act + (size_t)p * s->act_stride,
               (const uint8_t *)c->actq + (size_t)(s->order[p] / K) * c->actq_stride, rb);
}

/* Few rows (generation, small batches) are copied by thread 0 while it groups, saving a
 * barrier; many are copied by every thread after it. */
#define GATHER_SERIAL_ROWS 64

/* gpt-oss's gated activation (arch.h, CPULM_ACT_SWIGLU_OAI) with its constants, in
 * ggml's swiglu_oai arithmetic: g = min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u) + 1)
 * (the kernel op swiglu_oai). */
#define OAI_ALPHA 1.702f
#define OAI_LIMIT 7.0f

/* The activation of sorted rows [p0, p1) (step apart), after the experts' gate and up
 * biases if any, converted for down_exps in place of their gathered activations (which
 * only their own expert's gate/up read). */
static void swiglu_rows(cpulm_ctx *c, cpulm_moe_scratch *s, const cpulm_layer *ly, int64_t p0,
                        int64_t p1, int64_t step) {
    const int64_t F = c->m->hp.n_ff_exp;
    const cpulm_dtype vdt = vdt_of(&ly->down_exps);
    const bool oai = c->m->arch->expert_act == CPULM_ACT_SWIGLU_OAI;
    for (int64_t p = p0; p < p1; p += step) {
        float *g = s->g + p * F, *u = s->u + p * F;
        if (ly->gate_exps_b) {
            const int64_t e = s->sel[s->order[p]];
            for (int64_t i = 0; i < F; i++) {
                g[i] += ly->gate_exps_b[e * F + i];
                u[i] += ly->up_exps_b[e * F + i];
            }
        }
        if (oai)
            c->k->swiglu_oai(F, g, g, u, OAI_ALPHA, OAI_LIMIT);
        else
            c->k->swiglu(F, g, g, u);
        cpulm_matmul_quantize_act(c->k, vdt, g, s->act + (size_t)p * s->act_stride, F);
    }
}

/* gate/up and down of every chosen expert as one job (gate and up read the same activation
 * type): gate/up items first, then down items. The thread that finishes an expert's last
 * gate/up slice (the counter's acq_rel chain makes every slice's g, u visible to it) applies
 * its SwiGLU and publishes ready; a down item of the expert waits for that. All gate/up items
 * are claimed before any down item, so a waiting thread only waits for running work. */
static void experts_fused(cpulm_ctx *c, cpulm_moe_scratch *s, const cpulm_layer *ly, int ith) {
    const cpulm_tensor *gu[2] = {&ly->gate_exps, &ly->up_exps}, *dw = &ly->down_exps;
    float *gu_out[2] = {s->g, s->u};
    const moe_plan *pg = &s->plan_gu, *pd = &s->plan_down;
    const uint64_t n = (uint64_t)pg->n_items + (uint64_t)pd->n_items;
    uint64_t first = cpulm_fwd_job_begin(c, ith, n), item;
    while (cpulm_fwd_claim(c, first + n, &item)) {
        const int i = (int)(item - first);
        if (i < pg->n_items) {
            const int e = pg->expert[i];
            run_item(c, s, pg, i, gu, gu_out, 2);
            if (atomic_fetch_sub_explicit(&s->gu_left[e], 1, memory_order_acq_rel) == 1) {
                swiglu_rows(c, s, ly, s->off[e], s->off[e] + s->cnt[e], 1);
                cpulm_pool_publish(c->pool, &s->ready[e]);
            }
        } else {
            const int j = i - pg->n_items;
            cpulm_pool_await(c->pool, &s->ready[pd->expert[j]]);
            run_item(c, s, pd, j, &dw, &s->y, 1);
        }
    }
    cpulm_pool_barrier(c->pool);
}

/* The same with gate and up of different activation types (a mixed quantization): up takes
 * its own turn, and SwiGLU its own phase. */
static void experts_phased(cpulm_ctx *c, cpulm_moe_scratch *s, const cpulm_layer *ly, int ith,
                           int nth) {
    const cpulm_tensor *gw = &ly->gate_exps, *uw = &ly->up_exps, *dw = &ly->down_exps;
    const int64_t n = (int64_t)c->n_tok * c->m->hp.n_expert_used;
    run_plan(c, s, &s->plan_gu, &gw, &s->g, 1, ith);
    cpulm_pool_barrier(c->pool);
    convert_tokens(c, vdt_of(uw), ith, nth);
    cpulm_pool_barrier(c->pool);
    gather_rows(c, s, vdt_of(uw), ith, nth);
    cpulm_pool_barrier(c->pool);
    run_plan(c, s, &s->plan_gu, &uw, &s->u, 1, ith);
    cpulm_pool_barrier(c->pool);
    swiglu_rows(c, s, ly, ith, n, nth);
    cpulm_pool_barrier(c->pool);
    run_plan(c, s, &s->plan_down, &dw, &s->y, 1, ith);
    cpulm_pool_barrier(c->pool);
}

/* x[t] += sum over slots, in weight order, of w * y, for columns [i0, i1): each product
 * rounded, then summed left to right, as the reference adds its weighted expert outputs.
 * Columns go 16 at a time through a local accumulator (fixed trip counts the compiler
 * vectorizes; the arithmetic per element is the same in the tail). */
#define COMBINE_COLS 16
static void combine_token(cpulm_ctx *c, cpulm_moe_scratch *s, int64_t t, int64_t i0, int64_t i1) {
    const int64_t E = c->m->hp.n_embd, K = c->m->hp.n_expert_used;
    const int32_t *pos = s->pos + t * K;
    const float *wt = s->wsel + t * K;
    float *x = c->x + t * E;
    int64_t i = i0;
    for (; i + COMBINE_COLS <= i1; i += COMBINE_COLS) {
        float acc[COMBINE_COLS];
        const float *y0 = s->y + (int64_t)pos[0] * E + i;
        for (int k = 0; k < COMBINE_COLS; k++)
            acc[k] = y0[k] * wt[0];
        for (int64_t j = 1; j < K; j++) {
            const float *y = s->y + (int64_t)pos[j] * E + i, w = wt[j];
            for (int k = 0; k < COMBINE_COLS; k++)
                acc[k] += y[k] * w;
        }
        for (int k = 0; k < COMBINE_COLS; k++)
            x[i + k] += acc[k];
    }
    for (; i < i1; i++) {
        float acc = s->y[(int64_t)pos[0] * E + i] * wt[0];
        for (int64_t j = 1; j < K; j++)
            acc += s->y[(int64_t)pos[j] * E + i] * wt[j];
        x[i] += acc;
    }
}

/* combine_token with the experts' down biases (gpt-oss): each expert's output is
 * down x + b, rounded, before its weight multiplies it, as the reference adds the bias. */
static void combine_token_bias(cpulm_ctx *c, cpulm_moe_scratch *s, const float *b, int64_t t,
                               int64_t i0, int64_t i1) {
    const int64_t E = c->m->hp.n_embd, K = c->m->hp.n_expert_used;
    const int32_t *pos = s->pos + t * K, *sel = s->sel + t * K;
    const float *wt = s->wsel + t * K;
    float *x = c->x + t * E;
    for (int64_t i = i0; i < i1; i++) {
        float acc = (s->y[(int64_t)pos[0] * E + i] + b[sel[0] * E + i]) * wt[0];
        for (int64_t j = 1; j < K; j++)
            acc += (s->y[(int64_t)pos[j] * E + i] + b[sel[j] * E + i]) * wt[j];
        x[i] += acc;
    }
}

static void combine_cols(cpulm_ctx *c, cpulm_moe_scratch *s, const cpulm_layer *ly, int64_t t,
                         int64_t i0, int64_t i1) {
    if (ly->down_exps_b)
        combine_token_bias(c, s, ly->down_exps_b, t, i0, i1);
    else
        combine_token(c, s, t, i0, i1);
}

/* Tokens split over the threads; fewer tokens than threads (generation) split the columns,
 * so no thread combines alone while the others wait. */
static void combine(cpulm_ctx *c, cpulm_moe_scratch *s, const cpulm_layer *ly, int ith, int nth) {
    const int64_t E = c->m->hp.n_embd;
    if (c->n_tok >= nth) {
        for (int64_t t = ith; t < c->n_tok; t += nth)
            combine_cols(c, s, ly, t, 0, E);
    } else {
        const int64_t i0 = E * ith / nth / 16 * 16,
                      i1 = ith == nth - 1 ? E : E * (ith + 1) / nth / 16 * 16;
        for (int64_t t = 0; t < c->n_tok; t++)
            combine_cols(c, s, ly, t, i0, i1);
    }
    cpulm_pool_barrier(c->pool);
}

/* Barriers: router and conversion | routing, grouping (and a small gather) on thread 0 |
 * (a large gather) | gate, up, SwiGLU and down as one job | combine. */
void cpulm_moe_ffn(cpulm_ctx *c, const cpulm_layer *ly, int ith, int nth) {
    cpulm_moe_scratch *s = c->moe;
    const int64_t X = c->m->hp.n_expert;
    const int64_t n = (int64_t)c->n_tok * c->m->hp.n_expert_used;
    mm_job router = {&ly->gate_inp, s->router, X, ly->gate_inp_b, 0};
    cpulm_fwd_mm_group(c, c->xn, c->m->hp.n_embd, c->n_tok, &router, 1, ith, nth);
    if (vdt_of(&ly->gate_inp) != CPULM_DTYPE_F32) /* a quantized router used actq too */
        cpulm_pool_barrier(c->pool);
    convert_tokens(c, vdt_of(&ly->gate_exps), ith, nth);
    cpulm_pool_barrier(c->pool);
    if (ith == 0) { /* a few hundred exps and scans per token: cheaper than a barrier */
        for (int64_t t = 0; t < c->n_tok; t++)
            route_token(c, s, t);
        group_by_expert(c, s, ly, nth);
        if (n <= GATHER_SERIAL_ROWS) gather_rows(c, s, vdt_of(&ly->gate_exps), 0, 1);
    }
    cpulm_pool_barrier(c->pool);
    if (n > GATHER_SERIAL_ROWS) {
        gather_rows(c, s, vdt_of(&ly->gate_exps), ith, nth);
        cpulm_pool_barrier(c->pool);
    }
    if (vdt_of(&ly->gate_exps) == vdt_of(&ly->up_exps))
        experts_fused(c, s, ly, ith);
    else
        experts_phased(c, s, ly, ith, nth);
    combine(c, s, ly, ith, nth);
}
