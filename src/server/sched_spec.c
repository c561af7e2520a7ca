/* sched_spec.c: drafting for the scheduler's slots (see sched_spec.h). N-gram drafts come
 * from each slot's own history; a draft model keeps one sequence per slot in its own
 * context, catches drafting slots up in shared batches (at most one batch of history per
 * step: a new prompt catches up over several steps, its slot drafting once it has), then
 * drafts greedily with one decode per draft position for all slots at once, so its cost
 * per step does not grow with the number of slots. */
#include "server/sched_spec.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "server/sched.h"

typedef struct spec_slot {
    cpulm_spec_adapt ad;
    int32_t n_max, n_min; /* the request's limits */
    float p_min;
    cpulm_token *draft; /* [draft_max] */
    int32_t n_draft;
    int32_t k_want;    /* this step's draft length (draft model) */
    cpulm_token *dtok; /* [n_ctx]: tokens in the draft model's sequence (DRAFT) */
    int32_t n_dtok;
    int32_t row; /* the draft model's logits row for this slot, -1: none */
} spec_slot;

struct cpulm_sched_spec {
    cpulm_spec_params p;
    int32_t n_parallel, n_ctx, n_vocab;
    cpulm_metrics *metrics;
    spec_slot *slots;
    cpulm_ctx *dctx; /* DRAFT */
    int32_t d_batch;
    cpulm_token *b_tok; /* [d_batch] */
    int32_t *b_seq;
    int8_t *b_want;
    double d_cost; /* a drafted token's cost in target steps: the draft's weight bytes over
                    * the target's (both decodes are bandwidth-bound) */
    atomic_ullong st_drafts, st_tokens, st_accepted, st_decodes;
};

static cpulm_status draft_setup(cpulm_sched_spec *sp, const cpulm_model *target, cpulm_error *err) {
    const cpulm_model *dm = sp->p.draft_model;
    if (!dm) return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "no draft model");
    cpulm_status st = cpulm_spec_check_vocab(target, dm, err);
    if (st != CPULM_OK) return st;
    cpulm_ctx_params cp = sp->p.draft_ctx;
    cp.n_ctx = sp->n_ctx;
    cp.n_seq_max = sp->n_parallel;
    cp.n_batch = 256 + sp->n_parallel; /* catch-up chunks, and one token per slot */
    cp.n_outputs_max = sp->n_parallel;
    cp.embeddings = CPULM_EMBD_OFF;
    if (!(sp->dctx = cpulm_ctx_new(dm, &cp, err))) return err ? err->code : CPULM_ERR_NOMEM;
    sp->d_batch = cp.n_batch;
    sp->b_tok = malloc(sizeof *sp->b_tok * (size_t)cp.n_batch);
    sp->b_seq = malloc(sizeof *sp->b_seq * (size_t)cp.n_batch);
    sp->b_want = malloc((size_t)cp.n_batch);
    if (!sp->b_tok || !sp->b_seq || !sp->b_want)
        return cpulm_errf(err, CPULM_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < sp->n_parallel; i++)
        if (!(sp->slots[i].dtok = malloc(sizeof(cpulm_token) * (size_t)sp->n_ctx)))
            return cpulm_errf(err, CPULM_ERR_NOMEM, "out of memory");
    cpulm_memory mt, md;
    if (cpulm_model_memory(target, NULL, &mt) == CPULM_OK &&
        cpulm_model_memory(dm, NULL, &md) == CPULM_OK && mt.weights > 0)
        sp->d_cost = (double)md.weights / (double)mt.weights;
    return CPULM_OK;
}

cpulm_sched_spec *cpulm_sched_spec_new(const cpulm_spec_params *p, const cpulm_model *target,
                                       int32_t n_parallel, int32_t n_ctx, cpulm_metrics *metrics,
                                       cpulm_error *err) {
    if (p->kind == CPULM_SPEC_NONE || p->draft_max < 1 || p->draft_max > 256 || p->draft_min < 0 ||
        p->ngram_min < 1 || p->ngram_max < p->ngram_min) {
        cpulm_errf(err, CPULM_ERR_INVALID_ARG,
                   "speculation: draft lengths must be 0 <= min, 1 <= max <= 256, n-gram sizes "
                   "1 <= min <= max");
        return NULL;
    }
    cpulm_sched_spec *sp = calloc(1, sizeof *sp);
    if (!sp) return NULL;
    sp->p = *p;
    sp->n_parallel = n_parallel;
    sp->n_ctx = n_ctx;
    sp->n_vocab = cpulm_vocab_n(target);
    sp->metrics = metrics;
    sp->slots = calloc((size_t)n_parallel, sizeof *sp->slots);
    if (!sp->slots) goto oom;
    for (int32_t i = 0; i < n_parallel; i++) {
        if (!(sp->slots[i].draft = malloc(sizeof(cpulm_token) * (size_t)p->draft_max))) goto oom;
        cpulm_sched_spec_begin(sp, i, -1, -1, -1.0f);
    }
    if (p->kind == CPULM_SPEC_DRAFT && draft_setup(sp, target, err) != CPULM_OK) {
        cpulm_sched_spec_free(sp);
        return NULL;
    }
    return sp;
oom:
    cpulm_errf(err, CPULM_ERR_NOMEM, "out of memory");
    cpulm_sched_spec_free(sp);
    return NULL;
}

void cpulm_sched_spec_free(cpulm_sched_spec *sp) {
    if (!sp) return;
    for (int32_t i = 0; sp->slots && i < sp->n_parallel; i++) {
        free(sp->slots[i].draft);
        free(sp->slots[i].dtok);
    }
    free(sp->slots);
    cpulm_ctx_free(sp->dctx);
    free(sp->b_tok);
    free(sp->b_seq);
    free(sp->b_want);
    free(sp);
}

void cpulm_sched_spec_begin(cpulm_sched_spec *sp, int32_t slot, int32_t n_max, int32_t n_min,
                            float p_min) {
    spec_slot *x = &sp->slots[slot];
    cpulm_spec_adapt_init(&x->ad);
    /* a request starts from the server's acceptance so far, with the weight of the prior
     * of one half it replaces: relearning from one half, every request of a chat workload
     * with sampling (8% of n-gram drafts accepted) drafted for its first ~8 passes, which
     * cut the output rate 40% with 16 users (2026-12-02) */
    const double tok = (double)atomic_load(&sp->st_tokens);
    if (tok > 0) x->ad.succ = x->ad.tried * ((double)atomic_load(&sp->st_accepted) + 1) / (tok + 2);
    x->n_max = n_max < 0 || n_max > sp->p.draft_max ? sp->p.draft_max : n_max;
    x->n_min = n_min < 0 ? sp->p.draft_min : n_min;
    x->p_min = p_min < 0 ? sp->p.p_min : p_min;
    x->n_draft = 0;
}

const cpulm_token *cpulm_sched_spec_draft(const cpulm_sched_spec *sp, int32_t slot, int32_t *n) {
    *n = sp->slots[slot].n_draft;
    return sp->slots[slot].draft;
}

/* This step's draft length for slot x: its cap, the request's n_max, and the adaptive
 * length for the acceptance rate it has seen. */
static int32_t want_len(const cpulm_sched_spec *sp, spec_slot *x, int32_t k_cap, double cost) {
    int32_t k = k_cap < x->n_max ? k_cap : x->n_max;
    if (k <= 0) return 0;
    return sp->p.adaptive ? cpulm_spec_adapt_len(&x->ad, cost, k) : k;
}

/* ---- the draft model ---- */

static int32_t common_prefix(const cpulm_token *a, int32_t na, const cpulm_token *b, int32_t nb) {
    int32_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

/* Cuts slot i's draft sequence to what it shares with hist, leaving at least the last token
 * of hist to evaluate (its logits give the first draft). */
static void draft_sync(cpulm_sched_spec *sp, int32_t i, const cpulm_sched_spec_in *in) {
    spec_slot *x = &sp->slots[i];
    int32_t keep = common_prefix(x->dtok, x->n_dtok, in->hist, in->n_hist);
    if (keep >= in->n_hist) keep = in->n_hist - 1;
    if (keep < x->n_dtok && cpulm_ctx_seq_rm(sp->dctx, i, keep) != CPULM_OK) {
        (void)cpulm_ctx_seq_rm(sp->dctx, i, 0); /* a recurrent draft: start over (cannot fail) */
        keep = 0;
    }
    x->n_dtok = keep;
}

static int draft_decode(cpulm_sched_spec *sp, int32_t n) {
    cpulm_batch b = {.n = n, .token = sp->b_tok, .seq = sp->b_seq, .want_logits = sp->b_want};
    atomic_fetch_add(&sp->st_decodes, 1);
    return cpulm_ctx_decode(sp->dctx, &b) == CPULM_OK;
}

/* Appends hist[n_dtok..upto) of every drafting slot to its draft sequence: without last,
 * the history before the final token, one batch of at most d_batch tokens (a new prompt
 * catches up over several steps instead of stalling this one); with last, the final token
 * each (upto = n_hist), with a logits row (spec_slot.row). Returns 0 when a decode failed. */
static int draft_feed(cpulm_sched_spec *sp, const cpulm_sched_spec_in *in, int last) {
    int32_t i = 0, n_out = 0;
    while (i < sp->n_parallel) {
        int32_t n = 0;
        for (; i < sp->n_parallel && n < sp->d_batch; i++) {
            spec_slot *x = &sp->slots[i];
            int32_t upto = in[i].n_hist - (last ? 0 : 1), take = upto - x->n_dtok;
            if (x->k_want <= 0 || take <= 0) continue;
            int32_t k = take < sp->d_batch - n ? take : sp->d_batch - n;
            for (int32_t j = 0; j < k; j++) {
                sp->b_tok[n] = in[i].hist[x->n_dtok + j];
                sp->b_seq[n] = i;
                sp->b_want[n++] = (int8_t)last;
            }
            if (last) x->row = n_out++;
            memcpy(x->dtok + x->n_dtok, in[i].hist + x->n_dtok, sizeof(cpulm_token) * (size_t)k);
            x->n_dtok += k;
            if (k < take) break; /* the batch is full: this slot goes on in the next one */
        }
        if (n > 0 && !draft_decode(sp, n)) return 0;
        if (!last) break;
    }
    return 1;
}

/* The argmax of logits l, or -1 when its probability is below p_min (> 0). */
static cpulm_token greedy(const float *l, int32_t n, float p_min) {
    cpulm_token best = 0;
    for (int32_t i = 1; i < n; i++)
        if (l[i] > l[best]) best = i;
    if (p_min > 0.0f) {
        double sum = 0.0;
        for (int32_t i = 0; i < n; i++)
            sum += exp((double)l[i] - l[best]);
        if (1.0 / sum < p_min) return -1;
    }
    return best;
}

/* One draft position for every slot still drafting: read its row, then decode the drafted
 * tokens of the slots that want more. Returns 0 when there is nothing left to do. */
static int draft_position(cpulm_sched_spec *sp) {
    int32_t n = 0;
    for (int32_t i = 0; i < sp->n_parallel; i++) {
        spec_slot *x = &sp->slots[i];
        if (x->k_want <= 0 || x->row < 0) continue;
        cpulm_token d = greedy(cpulm_ctx_logits(sp->dctx, x->row), sp->n_vocab, x->p_min);
        x->row = -1;
        if (d < 0) {
            x->k_want = 0; /* not sure enough: the draft ends here */
            continue;
        }
        x->draft[x->n_draft++] = d;
        if (x->n_draft == x->k_want) continue; /* the last draft needs no draft logits */
        sp->b_tok[n] = d;
        sp->b_seq[n] = i;
        sp->b_want[n] = 1;
        x->dtok[x->n_dtok++] = d;
        x->row = n++;
    }
    if (n == 0) return 0;
    if (draft_decode(sp, n)) return 1;
    for (int32_t i = 0; i < sp->n_parallel; i++) /* failed: the drafts end here */
        if (sp->slots[i].row >= 0) sp->slots[i].n_dtok--, sp->slots[i].row = -1;
    return 0;
}

static void draft_model_all(cpulm_sched_spec *sp, const cpulm_sched_spec_in *in) {
    int any = 0;
    for (int32_t i = 0; i < sp->n_parallel; i++)
        if (sp->slots[i].k_want > 0) draft_sync(sp, i, &in[i]), any = 1;
    if (!any) return;
    /* the history first (prompts: many tokens, no rows), then the last token of every slot
     * in one batch, so all rows come from the same decode */
    int ok = draft_feed(sp, in, 0);
    for (int32_t i = 0; i < sp->n_parallel; i++) /* still behind: drafts from a later step */
        if (sp->slots[i].n_dtok < in[i].n_hist - 1) sp->slots[i].k_want = 0;
    if (!ok || !draft_feed(sp, in, 1)) {
        for (int32_t i = 0; i < sp->n_parallel; i++) { /* resynchronized next step */
            (void)cpulm_ctx_seq_rm(sp->dctx, i, 0);    /* clearing (p0 = 0) cannot fail */
            sp->slots[i].n_dtok = 0;
        }
        return;
    }
    while (draft_position(sp)) {
    }
}

void cpulm_sched_spec_draft_all(cpulm_sched_spec *sp, const cpulm_sched_spec_in *in, double cost) {
    if (sp->p.kind == CPULM_SPEC_DRAFT) cost += sp->d_cost;
    /* --spec-fixed drafts whatever it costs; a closed step leaves the adaptive lengths
     * alone (no probe is due after it) */
    const int open = !sp->p.adaptive || cpulm_sched_spec_open(cost);
    for (int32_t i = 0; i < sp->n_parallel; i++) {
        spec_slot *x = &sp->slots[i];
        x->n_draft = 0;
        x->row = -1;
        x->k_want = open && in[i].k_cap > 0 ? want_len(sp, x, in[i].k_cap, cost) : 0;
        if (x->k_want > 0 && sp->p.kind == CPULM_SPEC_NGRAM)
            x->n_draft = cpulm_spec_ngram_draft(in[i].hist, in[i].n_hist, sp->p.ngram_min,
                                                sp->p.ngram_max, x->k_want, x->draft);
    }
    if (sp->p.kind == CPULM_SPEC_DRAFT) draft_model_all(sp, in);
    for (int32_t i = 0; i < sp->n_parallel; i++) {
        spec_slot *x = &sp->slots[i];
        if (x->n_draft < x->n_min || x->n_draft < 1) x->n_draft = 0;
    }
}

void cpulm_sched_spec_learn(cpulm_sched_spec *sp, int32_t slot, int32_t k, int32_t n_acc) {
    cpulm_spec_adapt_learn(&sp->slots[slot].ad, k, n_acc);
    atomic_fetch_add(&sp->st_drafts, 1);
    atomic_fetch_add(&sp->st_tokens, (unsigned long long)k);
    atomic_fetch_add(&sp->st_accepted, (unsigned long long)n_acc);
    cpulm_metrics_add(sp->metrics, CPULM_METRIC_SPEC_DRAFTS, 1);
    cpulm_metrics_add(sp->metrics, CPULM_METRIC_SPEC_DRAFT_TOKENS, (uint64_t)k);
    cpulm_metrics_add(sp->metrics, CPULM_METRIC_SPEC_ACCEPTED, (uint64_t)n_acc);
    for (int32_t i = 0; i < n_acc && i < CPULM_METRICS_SPEC_POS; i++)
        cpulm_metrics_add(sp->metrics, (cpulm_metric_counter)(CPULM_METRIC_SPEC_POS_0 + i), 1);
}

void cpulm_sched_spec_get_stats(cpulm_sched_spec *sp, cpulm_sched_spec_stats *out) {
    out->drafts = atomic_load(&sp->st_drafts);
    out->draft_tokens = atomic_load(&sp->st_tokens);
    out->accepted = atomic_load(&sp->st_accepted);
    out->draft_decodes = atomic_load(&sp->st_decodes);
}
