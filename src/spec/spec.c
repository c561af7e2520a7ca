/* spec.c: one speculative step = draft (n-gram lookup or a draft model), one target decode
 * of the pending token plus the draft, row-by-row verification, KV rollback of what was
 * rejected (target and draft caches), and the adaptive draft length. See spec.h for the
 * exactness argument. Uses only the public API (cpulm.h) and base/: it sits above the
 * context like an application would, so the server and the tools can share it. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "spec/spec.h"

#define DECAY 0.875 /* weight of the acceptance history per verified pass */

/* The last COST_N timings of one kind. Medians, not means: on a shared machine a decode
 * that lost its core to another process for a time slice takes 10x its time, and a mean
 * of such samples made the cost of a verified token look 4x too small (2026-12-02). */
#define COST_N 15
typedef struct cost_window {
    double v[COST_N];
    int n, next;
} cost_window;

struct cpulm_spec {
    cpulm_spec_params p;
    int32_t n_vocab;
    cpulm_token *hist; /* the target cache's tokens of the sequence, then pending */
    int32_t n_hist, cap_hist;
    cpulm_token *draft; /* [draft_max] */
    cpulm_token *tok;   /* [draft_max + 1] the verification batch */
    int8_t *want;       /* [draft_max + 1] all 1 */
    cpulm_ctx *dctx;    /* the draft model's context (DRAFT) */
    cpulm_sampler *dsmp;
    int32_t d_batch;
    float *q;    /* [draft_max][n_vocab] the draft's distributions (sampled drafts) */
    float *pd;   /* [n_vocab] the target's distribution at a verified row */
    double cost; /* one drafted token's cost in plain decodes (verify + draft model): the
                  * prior, until the timings below have samples (measure_cost) */
    double t1, t_tok, t_draft; /* seconds, medians of recent samples: a 1-token target
                                * decode, one more verified token, one drafted token (0: no
                                * sample yet) */
    cost_window w1, w_tok, w_draft;
    int64_t t1_pass; /* the pass of the last 1-token time */
    cpulm_spec_adapt ad;
    cpulm_spec_stats st;
};

cpulm_spec_params cpulm_spec_default_params(void) {
    cpulm_spec_params p;
    memset(&p, 0, sizeof p);
    p.kind = CPULM_SPEC_NONE;
    p.draft_max = 16;
    p.draft_min = 0;
    p.ngram_max = 3;
    p.ngram_min = 2;
    p.adaptive = 1;
    p.verify_cost = 0.2f;
    p.measure_cost = 1;
    p.draft_ctx = cpulm_ctx_default_params();
    p.draft_sp = cpulm_sampler_default_params();
    return p;
}

cpulm_status cpulm_spec_kind_parse(const char *name, cpulm_spec_kind *out) {
    if (!strcmp(name, "none"))
        *out = CPULM_SPEC_NONE;
    else if (!strcmp(name, "ngram") || !strcmp(name, "ngram-simple"))
        *out = CPULM_SPEC_NGRAM;
    else if (!strcmp(name, "draft"))
        *out = CPULM_SPEC_DRAFT;
    else
        return CPULM_ERR_INVALID_ARG;
    return CPULM_OK;
}

const char *cpulm_spec_kind_name(cpulm_spec_kind k) {
    return k == CPULM_SPEC_NGRAM ? "ngram" : k == CPULM_SPEC_DRAFT ? "draft" : "none";
}

int32_t cpulm_spec_best_len(double a, double cost_per_draft, int32_t k_max) {
    int32_t best = 0;
    double best_r = 1.0; /* a plain decode: one token for one pass */
    for (int32_t k = 1; k <= k_max; k++) {
        double e = a >= 1.0 ? k + 1.0 : (1.0 - pow(a, k + 1)) / (1.0 - a);
        double r = e / (1.0 + k * cost_per_draft);
        if (r > best_r * (1.0 + 1e-9)) best = k, best_r = r;
    }
    return best;
}

/* The draft must speak the target's tokens: same size, same text for every id. */
cpulm_status cpulm_spec_check_vocab(const cpulm_model *t, const cpulm_model *d, cpulm_error *err) {
    int32_t nt = cpulm_vocab_n(t), nd = cpulm_vocab_n(d);
    if (nt != nd)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG,
                          "the draft model's vocabulary has %d tokens, the target's %d", nd, nt);
    for (int32_t i = 0; i < nt; i++) {
        const char *a = cpulm_token_text(t, i), *b = cpulm_token_text(d, i);
        if (strcmp(a ? a : "", b ? b : ""))
            return cpulm_errf(err, CPULM_ERR_INVALID_ARG,
                              "the draft model's token %d is '%.40s', the target's '%.40s'", i,
                              b ? b : "", a ? a : "");
    }
    return CPULM_OK;
}

/* Draft model setup: context, sampler, distributions, and the cost of a drafted token
 * (decode is bandwidth-bound, so the draft's weight bytes over the target's). */
static cpulm_status draft_setup(cpulm_spec *s, const cpulm_model *target, cpulm_error *err) {
    const cpulm_spec_params *p = &s->p;
    if (!p->draft_model) return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "no draft model");
    cpulm_status st = cpulm_spec_check_vocab(target, p->draft_model, err);
    if (st != CPULM_OK) return st;
    cpulm_ctx_params cp = p->draft_ctx;
    cp.n_seq_max = 1;
    cp.embeddings = CPULM_EMBD_OFF;
    if (!(s->dctx = cpulm_ctx_new(p->draft_model, &cp, err))) return err ? err->code : -1;
    s->d_batch = cp.n_batch > 0 ? cp.n_batch : cpulm_ctx_default_params().n_batch;
    cpulm_sampler_params sp = p->draft_sp;
    sp.repeat_penalty = 1.0f; /* q needs no history: any q keeps the target's distribution */
    sp.presence_penalty = sp.frequency_penalty = 0.0f;
    size_t nq = (size_t)p->draft_max * (size_t)s->n_vocab;
    s->dsmp = cpulm_sampler_new(&sp, s->n_vocab);
    s->q = malloc(nq * sizeof *s->q);
    if (!s->dsmp || !s->q) return cpulm_errf(err, CPULM_ERR_NOMEM, "out of memory");
    cpulm_memory mt, md;
    if (cpulm_model_memory(target, NULL, &mt) == CPULM_OK &&
        cpulm_model_memory(p->draft_model, NULL, &md) == CPULM_OK && mt.weights > 0)
        s->cost += (double)md.weights / (double)mt.weights;
    return CPULM_OK;
}

cpulm_spec *cpulm_spec_new(const cpulm_spec_params *p, const cpulm_model *target,
                           cpulm_error *err) {
    if (p->draft_max < 1 || p->draft_max > 256 || p->draft_min < 0 || p->ngram_min < 1 ||
        p->ngram_max < p->ngram_min || !(p->verify_cost >= 0.0f)) {
        cpulm_errf(err, CPULM_ERR_INVALID_ARG,
                   "draft lengths must be 0 <= min, 1 <= max <= 256, n-gram sizes 1 <= min <= "
                   "max");
        return NULL;
    }
    cpulm_spec *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    s->n_vocab = cpulm_vocab_n(target);
    s->cost = p->verify_cost;
    cpulm_spec_adapt_init(&s->ad);
    size_t k = (size_t)p->draft_max + 1;
    s->draft = malloc(k * sizeof *s->draft);
    s->tok = malloc(k * sizeof *s->tok);
    s->want = malloc(k);
    s->pd = malloc((size_t)s->n_vocab * sizeof *s->pd);
    if (!s->draft || !s->tok || !s->want || !s->pd) {
        cpulm_errf(err, CPULM_ERR_NOMEM, "out of memory");
        goto fail;
    }
    memset(s->want, 1, k);
    if (p->kind == CPULM_SPEC_DRAFT && draft_setup(s, target, err) != CPULM_OK) goto fail;
    return s;
fail:
    cpulm_spec_free(s);
    return NULL;
}

void cpulm_spec_free(cpulm_spec *s) {
    if (!s) return;
    cpulm_ctx_free(s->dctx);
    cpulm_sampler_free(s->dsmp);
    free(s->q);
    free(s->pd);
    free(s->hist);
    free(s->draft);
    free(s->tok);
    free(s->want);
    free(s);
}

/* Appends n tokens, keeping room for draft_max more, so a step's accepted drafts always
 * fit without an allocation that could fail after the cache has changed. */
static cpulm_status hist_push(cpulm_spec *s, const cpulm_token *t, int32_t n) {
    int32_t need = s->n_hist + n + s->p.draft_max;
    if (need > s->cap_hist) {
        int32_t cap = s->cap_hist ? s->cap_hist : 256;
        while (cap < need)
            cap *= 2;
        cpulm_token *h = realloc(s->hist, (size_t)cap * sizeof *h);
        if (!h) return CPULM_ERR_NOMEM;
        s->hist = h, s->cap_hist = cap;
    }
    memcpy(s->hist + s->n_hist, t, (size_t)n * sizeof *t);
    s->n_hist += n;
    return CPULM_OK;
}

static double draft_cost(const cpulm_spec *s);

void cpulm_spec_stats_get(const cpulm_spec *s, cpulm_spec_stats *out) {
    *out = s->st;
    out->draft_len = s->ad.last_len;
    out->cost = draft_cost(s);
}

void cpulm_spec_adapt_init(cpulm_spec_adapt *a) {
    memset(a, 0, sizeof *a);
    a->succ = 1.0, a->tried = 2.0; /* a prior of one half, soon forgotten */
    a->probe_every = CPULM_SPEC_PROBE_EVERY;
}

int32_t cpulm_spec_adapt_len(cpulm_spec_adapt *a, double cost_per_draft, int32_t k_max) {
    int32_t k = cpulm_spec_best_len(a->succ / a->tried, cost_per_draft, k_max);
    a->last_len = k;
    if (k > 0) {
        a->since_probe = 0;
        a->probe_every = CPULM_SPEC_PROBE_EVERY;
        return k;
    }
    if (++a->since_probe < a->probe_every || k_max < 1) return 0;
    a->since_probe = 0;
    return 1;
}

void cpulm_spec_adapt_learn(cpulm_spec_adapt *a, int32_t k, int32_t n_acc) {
    a->succ = a->succ * DECAY + n_acc;
    a->tried = a->tried * DECAY + (n_acc < k ? n_acc + 1 : k);
    if (a->last_len > 0) return;
    /* a probe: rejected, the next one waits twice as long (a useless draft's probes,
     * with the draft model's catch-up over the passes between, cost ~6% at every 16) */
    if (n_acc == 0 && a->probe_every < CPULM_SPEC_PROBE_MAX)
        a->probe_every *= 2;
    else if (n_acc > 0)
        a->probe_every = CPULM_SPEC_PROBE_EVERY;
}

/* The calling thread's CPU time: the costs are ratios of work, and the caller works as the
 * pool's thread 0 in every decode (its waits for the others spin a bounded time, then
 * block). Wall time also counted the time slices other processes took: at load 5-10 on 2
 * cores one round's measured cost of a verified token read 0.34 and the next 0.78, and a
 * low reading kept drafting at 32% acceptance (2026-12-03). */
static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Adds sample x to w and sets *med to the window's median. */
static void timing(cost_window *w, double *med, double x) {
    w->v[w->next] = x;
    w->next = (w->next + 1) % COST_N;
    if (w->n < COST_N) w->n++;
    double a[COST_N];
    for (int i = 0; i < w->n; i++) { /* insertion sort: at most 15 values */
        int j = i;
        for (; j > 0 && a[j - 1] > w->v[i]; j--)
            a[j] = a[j - 1];
        a[j] = w->v[i];
    }
    *med = w->n % 2 ? a[w->n / 2] : 0.5 * (a[w->n / 2 - 1] + a[w->n / 2]);
}

/* A drafted token's cost in plain decodes: measured (one more verified token's time, plus
 * a drafted token's for a draft model, over a 1-token decode's) once there are samples,
 * else the prior. On a tiny model a pass is mostly fixed overhead (thread wake-up,
 * barriers), so a verified token costs a few percent of a decode, not the 0.2 of a
 * bandwidth-bound 1B F16 model; on a draft model the measured time replaces the weight
 * bytes ratio, which misses its own fixed overhead. */
static double draft_cost(const cpulm_spec *s) {
    if (!s->p.measure_cost || !(s->t1 > 0.0) || !(s->t_tok > 0.0)) return s->cost;
    if (s->p.kind == CPULM_SPEC_DRAFT && !(s->t_draft > 0.0)) return s->cost;
    /* the medians come from different samples: a verified token never costs above a decode */
    return ((s->t_tok < s->t1 ? s->t_tok : s->t1) + s->t_draft) / s->t1;
}

/* Learns from one target decode of 1 + k tokens that took dt seconds (k drafts; a k-token
 * sample needs a 1-token time first). An extra token's sample is clamped to [0, t1]:
 * another process's time slice inside one decode must not make drafts look dearer than
 * whole decodes. */
static void learn_time(cpulm_spec *s, int32_t k, double dt) {
    if (k == 0) {
        timing(&s->w1, &s->t1, dt);
        s->t1_pass = s->st.passes;
    } else if (s->t1 > 0.0) {
        double x = (dt - s->t1) / k;
        timing(&s->w_tok, &s->t_tok, x < 0.0 ? 1e-9 * s->t1 : x > s->t1 ? s->t1 : x);
    }
}

/* Should this pass be a plain decode, to time one? The cost is relative to a 1-token
 * decode, which a sequence that drafts at every pass (a copy-heavy prompt) never makes:
 * its first pass, and one in every T1_EVERY later (under 1% of the tokens at ten per
 * pass), keep that time current as the machine's speed drifts. */
#define T1_EVERY 128
static int time_plain(cpulm_spec *s) {
    if (!s->p.measure_cost || !s->p.adaptive) return 0;
    return !(s->t1 > 0.0) || s->st.passes - s->t1_pass >= T1_EVERY;
}

/* The draft length for this pass (adaptive: cpulm_spec_adapt_len). */
static int32_t next_len(cpulm_spec *s) {
    if (!s->p.adaptive) return s->p.draft_max;
    return cpulm_spec_adapt_len(&s->ad, draft_cost(s), s->p.draft_max);
}

/* Index drawn from probs[0..n) by the uniform u in [0, 1) (inverse CDF; rounding slack goes
 * to the last token with weight). */
static cpulm_token draw_from(const float *probs, int32_t n, double u, double total) {
    double cum = 0.0;
    cpulm_token last = 0;
    u *= total;
    for (int32_t i = 0; i < n; i++) {
        if (!(probs[i] > 0.0f)) continue;
        cum += probs[i];
        last = i;
        if (u < cum) return i;
    }
    return last;
}

static cpulm_token argmax_p(const float *l, int32_t n, float p_min) {
    cpulm_token best = 0;
    for (int32_t i = 1; i < n; i++)
        if (l[i] > l[best]) best = i;
    if (p_min > 0.0f) { /* softmax probability of the best token */
        double sum = 0.0;
        for (int32_t i = 0; i < n; i++)
            sum += exp((double)l[i] - l[best]);
        if (1.0 / sum < p_min) return -1;
    }
    return best;
}

/* Cuts the draft cache back to its first n tokens; a recurrent (hybrid) draft, whose state
 * cannot be cut, starts over: only the draft's speed depends on it (drafts are verified). */
static void draft_cut(cpulm_spec *s, int32_t n) {
    if (cpulm_ctx_seq_rm(s->dctx, 0, n) != CPULM_OK) (void)cpulm_ctx_seq_rm(s->dctx, 0, 0);
}

/* Brings the draft cache up to hist (the tokens it has not seen, pending included) in
 * batches; its logits then predict the first draft token. */
static cpulm_status draft_catch_up(cpulm_spec *s) {
    int32_t have = cpulm_ctx_seq_len(s->dctx, 0);
    if (have > s->n_hist) { /* never: begin and step keep it within the history */
        draft_cut(s, 0);
        have = 0;
    }
    for (int32_t i = have; i < s->n_hist; i += s->d_batch) {
        int32_t k = s->n_hist - i < s->d_batch ? s->n_hist - i : s->d_batch;
        cpulm_batch b = {.n = k, .token = s->hist + i};
        cpulm_status st = cpulm_ctx_decode(s->dctx, &b);
        if (st != CPULM_OK) return st;
        s->st.draft_evals++;
    }
    return CPULM_OK;
}

cpulm_status cpulm_spec_begin(cpulm_spec *s, const cpulm_token *toks, int32_t n) {
    int32_t keep = 0; /* the draft cache holds hist[0..have): keep what toks shares (chat) */
    if (s->dctx) {
        int32_t have = cpulm_ctx_seq_len(s->dctx, 0);
        while (keep < have && keep < s->n_hist && keep < n && s->hist[keep] == toks[keep])
            keep++;
        draft_cut(s, keep);
    }
    s->n_hist = 0;
    cpulm_status st = hist_push(s, toks, n);
    if (st != CPULM_OK || !s->dctx) return st;
    return draft_catch_up(s); /* the draft's prompt pass belongs to the prompt's time */
}

/* The drafting loop of draft_model: the draft cache holds the history. */
static int32_t draft_tokens(cpulm_spec *s, int32_t kmax, int sample) {
    int32_t k = 0;
    for (; k < kmax; k++) {
        const float *l = cpulm_ctx_logits(s->dctx, 0);
        cpulm_token d;
        if (sample) {
            float *q = s->q + (size_t)k * (size_t)s->n_vocab;
            cpulm_sampler_dist(s->dsmp, l, NULL, q);
            d = draw_from(q, s->n_vocab, cpulm_sampler_uniform(s->dsmp), 1.0);
        } else if ((d = argmax_p(l, s->n_vocab, s->p.p_min)) < 0) {
            break;
        }
        s->draft[k] = d;
        if (k + 1 == kmax) return k + 1; /* the last draft needs no draft logits */
        cpulm_batch b = {.n = 1, .token = &d};
        if (cpulm_ctx_decode(s->dctx, &b) != CPULM_OK) return k + 1;
        s->st.draft_evals++;
    }
    return k;
}

/* Up to kmax tokens from the draft model into s->draft; sampled (q kept) when sample.
 * The time it took goes into t_draft per drafted token; a catch-up of more than the usual
 * one or two tokens (the history of the passes it was backed off for) is not counted,
 * being the price of having backed off rather than of drafting. */
static int32_t draft_model(cpulm_spec *s, int32_t kmax, int sample) {
    double t0 = thread_cpu_s();
    int32_t behind = s->n_hist - cpulm_ctx_seq_len(s->dctx, 0);
    if (draft_catch_up(s) != CPULM_OK) return 0;
    if (behind > 2) t0 = thread_cpu_s();
    int32_t k = draft_tokens(s, kmax, sample);
    if (k > 0) timing(&s->w_draft, &s->t_draft, (thread_cpu_s() - t0) / k);
    return k;
}

/* The speculative sampling rule at one row: accept d with min(1, p(d)/q(d)), else draw from
 * norm(max(0, p - q)). Records the token in smp. Returns it; *ok: d was accepted. */
static cpulm_token verify_sampled(cpulm_spec *s, cpulm_sampler *smp, const float *row,
                                  cpulm_token d, const float *q, int *ok) {
    float *p = s->pd;
    cpulm_sampler_dist(smp, row, NULL, p);
    double u = cpulm_sampler_uniform(smp);
    cpulm_token t;
    if ((*ok = u * (double)q[d] < (double)p[d])) {
        t = d;
    } else {
        double sum = 0.0;
        for (int32_t i = 0; i < s->n_vocab; i++) { /* p becomes the residual */
            p[i] = p[i] > q[i] ? p[i] - q[i] : 0.0f;
            sum += p[i];
        }
        if (!(sum > 0.0)) cpulm_sampler_dist(smp, row, NULL, p), sum = 1.0; /* p == q */
        t = draw_from(p, s->n_vocab, cpulm_sampler_uniform(smp), sum);
    }
    cpulm_sampler_accept(smp, t);
    return t;
}

/* Verifies k drafts against the rows of the last decode; returns tokens emitted (accepted
 * drafts, then the target's own), *n_acc the accepted count. */
static int32_t verify(cpulm_spec *s, cpulm_ctx *ctx, const cpulm_spec_pick *pick, int32_t k,
                      int sampled, cpulm_token *out, int32_t *n_acc) {
    int32_t n = 0;
    for (int32_t i = 0; i < k; i++) {
        const float *row = cpulm_ctx_logits(ctx, i);
        int ok;
        cpulm_token t;
        if (sampled) {
            t = verify_sampled(s, pick->smp, row, s->draft[i],
                               s->q + (size_t)i * (size_t)s->n_vocab, &ok);
        } else {
            t = pick->fn(pick->user, row);
            ok = t == s->draft[i];
        }
        out[n++] = t;
        if (!ok) {
            *n_acc = i;
            return n;
        }
    }
    *n_acc = k;
    out[n++] = pick->fn(pick->user, cpulm_ctx_logits(ctx, k));
    return n;
}

static void learn(cpulm_spec *s, int32_t k, int32_t n_acc) {
    cpulm_spec_adapt_learn(&s->ad, k, n_acc);
    s->st.drafted += k;
    s->st.accepted += n_acc;
}

cpulm_status cpulm_spec_step(cpulm_spec *s, cpulm_ctx *ctx, int32_t seq, cpulm_token pending,
                             const cpulm_spec_pick *pick, cpulm_token *out, int32_t *n_out) {
    int32_t p0 = cpulm_ctx_seq_len(ctx, seq), room = cpulm_ctx_n_ctx(ctx) - p0;
    *n_out = 0;
    if (room < 1) return CPULM_ERR_KV_FULL;
    cpulm_status st = hist_push(s, &pending, 1);
    if (st != CPULM_OK) return st;
    int32_t kmax = s->p.kind == CPULM_SPEC_NONE ? 0 : next_len(s), k = 0;
    if (kmax > room - 1) kmax = room - 1;
    if (kmax > 0 && time_plain(s)) kmax = 0;
    int sampled = s->p.kind == CPULM_SPEC_DRAFT && pick->smp && s->p.draft_sp.temp > 0.0f;
    if (kmax > 0 && s->p.kind == CPULM_SPEC_NGRAM)
        k = cpulm_spec_ngram_draft(s->hist, s->n_hist, s->p.ngram_min, s->p.ngram_max, kmax,
                                   s->draft);
    else if (kmax > 0 && s->p.kind == CPULM_SPEC_DRAFT)
        k = draft_model(s, kmax, sampled);
    if (k < s->p.draft_min) k = 0;
    s->tok[0] = pending;
    memcpy(s->tok + 1, s->draft, (size_t)k * sizeof *s->tok);
    int32_t seqs[257];
    for (int32_t i = 0; i <= k; i++)
        seqs[i] = seq;
    cpulm_batch b = {.n = k + 1, .token = s->tok, .seq = seqs, .want_logits = s->want};
    double t0 = thread_cpu_s();
    if ((st = cpulm_ctx_decode(ctx, &b)) != CPULM_OK) { /* the target cache is unchanged */
        s->n_hist--;
        if (s->dctx && cpulm_ctx_seq_len(s->dctx, 0) > s->n_hist) draft_cut(s, s->n_hist);
        return st;
    }
    learn_time(s, k, thread_cpu_s() - t0);
    int32_t n_acc;
    *n_out = verify(s, ctx, pick, k, sampled, out, &n_acc);
    /* the rejected drafts leave the target's cache; a hybrid target cannot drop them (its
     * recurrent state is the whole sequence's): an error, never a wrong continuation */
    if (n_acc < k && (st = cpulm_ctx_seq_rm(ctx, seq, p0 + 1 + n_acc)) != CPULM_OK) return st;
    hist_push(s, s->draft, n_acc); /* cannot fail: the room was kept */
    if (s->dctx && cpulm_ctx_seq_len(s->dctx, 0) > s->n_hist) draft_cut(s, s->n_hist);
    if (k > 0) learn(s, k, n_acc);
    s->st.passes++;
    s->st.emitted += *n_out;
    return CPULM_OK;
}
