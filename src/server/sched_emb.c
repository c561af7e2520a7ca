/* sched_emb.c: the scheduler's embedding requests (see sched_int.h), on the scheduler
 * thread. */
#define _GNU_SOURCE
#include "server/sched_int.h"

#include <stdlib.h>

/* ---- embedding requests ----
 * They run on the embeddings context (params.embd_ctx) between decode steps: each loop
 * iteration embeds at most one batch of whole inputs of one request (round-robin over the
 * requests), packed as cpulm_ctx_embed packs them, so vectors equal a one-call embed. The
 * batch's size comes from the time it may take: CPULM_SCHED_EMBED_BATCH_S when nothing
 * else runs (a cancel or a new request waits at most that), a long step's target while
 * generation runs or waits (so streams keep their gaps up to one long step); but at least
 * 4 fixed costs of a step (reading the weights), so a large model's batches still amortize
 * them. In tokens by the step model's fixed part and the measured cost per embedded token;
 * always at least one input. Beside generating streams a batch runs only when the long-step
 * credit allows (emb_may_run). */

#define CPULM_SCHED_EMBED_BATCH_S 0.05

/* Queues e's event (allocated at submission) and hands e back. */
static void emb_return(cpulm_sched *s, cpulm_sched_embed *e, cpulm_status st) {
    cpulm_sched_event *ev = e->ev;
    e->ev = NULL;
    e->next = NULL;
    e->status = st;
    ev->kind = CPULM_SCHED_EV_EMBED;
    ev->id = e->id;
    ev->embed = e;
    if (s->pend_tail)
        s->pend_tail->next = ev;
    else
        s->pend_head = ev;
    s->pend_tail = ev;
    atomic_fetch_sub(&s->st_emb, 1);
}

/* Unlinks e from the scheduler's list. */
static void emb_unlink(cpulm_sched *s, cpulm_sched_embed *e) {
    for (cpulm_sched_embed **pp = &s->emb_head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            if (s->emb_tail == e) s->emb_tail = prev;
            e->next = NULL;
            return;
        }
}

/* How many of e's next inputs the coming batch takes (>= 1); their tokens in *tokens. */
static int32_t emb_take(const cpulm_sched *s, const cpulm_sched_embed *e, int64_t *tokens) {
    int live = s->n_active > 0 || s->wait_head != NULL;
    double T = target_step(s), budget = CPULM_SCHED_EMBED_BATCH_S;
    if (live && T > 0 && CPULM_SCHED_LONG_STEP * T < budget) budget = CPULM_SCHED_LONG_STEP * T;
    if (budget < 4 * s->est.fixed) budget = 4 * s->est.fixed;
    int32_t n_batch = cpulm_ctx_n_ctx(s->p.embd_ctx), n_seq = cpulm_ctx_n_seq_max(s->p.embd_ctx);
    double room = budget - s->est.fixed;
    double fit = room > 0 ? room / (s->emb_pre > 1e-9 ? s->emb_pre : 1e-9) : 0;
    int64_t max_tok = fit < (double)n_batch ? (int64_t)fit : n_batch;
    int32_t k = 0;
    *tokens = 0;
    while (e->n_done + k < e->n && k < n_seq) {
        int32_t t = e->n_tok[e->n_done + k];
        if (k > 0 && *tokens + t > max_tok) break;
        *tokens += t;
        k++;
    }
    return k;
}

/* Whether an embedding batch may run now. Beside generating streams it delays their next
 * token like a long step, so it spends the same credit (cpulm_sched_long_step: the steps
 * earn it): at most about 1 in prefill_every of the tokens streams receive wait for a long
 * step or an embedding batch, and the median gap stays a short step. */
static int emb_may_run(cpulm_sched *s) {
    int32_t g = 0;
    for (int32_t i = 0; i < s->p.n_parallel; i++)
        g += s->slots[i].state == SLOT_GEN;
    if (g == 0 || target_step(s) <= 0) return 1;
    if (s->long_credit < g - 1e-9) return 0;
    s->long_credit -= g;
    return 1;
}

/* One batch of the first request in line, which then goes to the back of the line. */
void cpulm_sched_emb_step(cpulm_sched *s) {
    cpulm_sched_embed *e = s->emb_head;
    if (!e || !emb_may_run(s)) return;
    if (e->deadline > 0 && cpulm_clock_s() > e->deadline) {
        emb_unlink(s, e);
        e->timed_out = 1;
        emb_return(s, e, CPULM_ERR_CANCELLED);
        return;
    }
    int64_t tokens;
    int32_t k = emb_take(s, e, &tokens);
    size_t E = (size_t)cpulm_ctx_n_embd(s->p.embd_ctx);
    double t0 = cpulm_clock_s();
    cpulm_status st = cpulm_ctx_embed(s->p.embd_ctx, e->tok + e->n_done, e->n_tok + e->n_done, k,
                                      e->out + (size_t)e->n_done * E);
    double dt = cpulm_clock_s() - t0;
    if (st == CPULM_OK && tokens > 0) { /* the cost per token beyond the fixed part */
        double c = (dt - s->est.fixed) / (double)tokens;
        s->emb_pre = 0.8 * s->emb_pre + 0.2 * (c > 1e-7 ? c : 1e-7);
    }
    atomic_fetch_add(&s->st_emb_batches, 1);
    emb_unlink(s, e);
    if (st != CPULM_OK) {
        emb_return(s, e, st);
        return;
    }
    e->n_done += k;
    atomic_fetch_add(&s->st_emb_inputs, (unsigned long long)k);
    atomic_fetch_add(&s->st_emb_tokens, (unsigned long long)tokens);
    if (e->n_done == e->n) {
        emb_return(s, e, CPULM_OK);
        return;
    }
    if (s->emb_tail) /* round-robin: the next request's batch comes first */
        s->emb_tail->next = e;
    else
        s->emb_head = e;
    s->emb_tail = e;
}

int cpulm_sched_emb_cancel(cpulm_sched *s, uint64_t id) {
    for (cpulm_sched_embed *e = s->emb_head; e; e = e->next)
        if (e->id == id) {
            emb_unlink(s, e);
            emb_return(s, e, CPULM_ERR_CANCELLED);
            return 1;
        }
    return 0;
}

void cpulm_sched_emb_destroy(cpulm_sched_embed *e) {
    free(e->ev);
    e->ev = NULL;
    if (e->destroy) e->destroy(e);
}

void cpulm_sched_emb_free_list(cpulm_sched_embed *e) {
    while (e) {
        cpulm_sched_embed *n = e->next;
        cpulm_sched_emb_destroy(e);
        e = n;
    }
}
