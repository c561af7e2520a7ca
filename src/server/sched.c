/* sched.c: continuous batching over one cpulm_ctx (see sched.h for the model).
 *
 * Thread ownership: everything below "scheduler thread state" is touched only by the
 * scheduler thread; the submit/cancel lists are guarded by mu, the event queue by ev_mu.
 * Neither mutex is ever held across a decode, so the I/O thread never waits on the model.
 *
 * Slot invariant: slot->cache[0..n_cache) are exactly the tokens in the KV cache of
 * sequence slot->seq (n_cache == cpulm_ctx_seq_len). It holds for free slots too, which is
 * what makes prefix reuse safe. Requests that end during a step are freed at its end
 * (the dead list), so loops over a request's slots never see freed memory.
 *
 * KV memory: the context's cache returns a sequence's pages when it shrinks, so what a
 * slot costs is the tokens it holds. Free slots keep theirs for prefix reuse within
 * kv_idle tokens in all (trim_idle); the least recently freed give theirs up first.
 */
#define _GNU_SOURCE
#include "server/sched.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "grammar/grammar.h"
#include "server/deadline.h"
#include "server/hcache.h"
#include "server/pcache.h"
#include "server/sched_int.h"
#include "server/sched_spec.h"

/* ---- requests ---- */

cpulm_sched_params cpulm_sched_default_params(void) {
    cpulm_sched_params p = {.n_parallel = 4,
                            .n_ctx = 0,
                            .n_chunk = 256,
                            .prefill_every = CPULM_SCHED_PREFILL_EVERY,
                            .max_queue = 64,
                            .cache_ram_mib = CPULM_SCHED_CACHE_RAM_DEFAULT,
                            .kv_idle = CPULM_SCHED_KV_IDLE_AUTO,
                            .attn_fast = CPULM_ATTN_AUTO};
    p.spec = cpulm_spec_default_params(); /* kind NONE: off */
    return p;
}

cpulm_sched_req *cpulm_sched_req_new(void) {
    cpulm_sched_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->n_choices = 1;
    r->max_tokens = -1;
    r->sp = cpulm_sampler_default_params();
    r->logprobs = -1;
    r->spec_n_max = r->spec_n_min = -1;
    r->spec_p_min = -1.0f;
    return r;
}

void cpulm_sched_req_free(cpulm_sched_req *r) {
    if (!r) return;
    for (int32_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->prompt);
    free(r->bias);
    cpulm_grammar_free(r->grammar);
    free(r);
}

cpulm_status cpulm_sched_req_add_stop(cpulm_sched_req *r, const char *s, size_t n) {
    if (n == 0 || r->n_stop >= CPULM_SCHED_MAX_STOP) return CPULM_ERR_INVALID_ARG;
    char *c = malloc(n + 1);
    if (!c) return CPULM_ERR_NOMEM;
    memcpy(c, s, n);
    c[n] = 0;
    r->stop_len[r->n_stop] = n;
    r->stop[r->n_stop++] = c;
    return CPULM_OK;
}

static void sreq_free(sreq *q) {
    if (!q) return;
    cpulm_sched_req_free(q->r);
    free(q->slots);
    free(q);
}

/* ---- stop strings ---- */

size_t cpulm_sched_stop_scan(const char *text, size_t len, size_t emitted, char *const *stop,
                             const size_t *stop_len, int32_t n_stop, int *matched) {
    *matched = 0;
    size_t best = len, max_len = 0;
    for (int32_t i = 0; i < n_stop; i++) {
        size_t sl = stop_len[i];
        if (sl > max_len) max_len = sl;
        if (sl == 0 || len - emitted < sl) continue;
        const char *hit = memmem(text + emitted, len - emitted, stop[i], sl);
        if (hit && (size_t)(hit - text) < best) {
            best = (size_t)(hit - text);
            *matched = 1;
        }
    }
    if (*matched) return best;
    /* earliest k whose tail text[k..len) could still grow into a stop string */
    size_t k0 = len - emitted > max_len ? len - max_len + 1 : emitted;
    for (size_t k = k0; k < len; k++)
        for (int32_t i = 0; i < n_stop; i++) {
            size_t sl = stop_len[i];
            if (len - k < sl && memcmp(text + k, stop[i], len - k) == 0) return k;
        }
    return len;
}

/* ---- events ---- */

static cpulm_sched_event *ev_new(cpulm_sched *s, cpulm_sched_ev_kind kind, const sreq *q,
                                 int32_t choice, const char *text, size_t n) {
    cpulm_sched_event *e = malloc(sizeof *e + n + 1);
    if (!e) return NULL; /* the client then misses a piece; nothing else breaks */
    memset(e, 0, sizeof *e);
    e->id = q->r->id;
    e->kind = kind;
    e->choice = choice;
    e->n_text = n;
    if (n) memcpy(e->text, text, n);
    e->text[n] = 0;
    if (s->pend_tail)
        s->pend_tail->next = e;
    else
        s->pend_head = e;
    s->pend_tail = e;
    return e;
}

/* Moves this iteration's events to the shared queue; one wake-up per iteration. */
static void publish(cpulm_sched *s) {
    if (!s->pend_head) return;
    pthread_mutex_lock(&s->ev_mu);
    int was_empty = s->ev_head == NULL;
    if (s->ev_tail)
        s->ev_tail->next = s->pend_head;
    else
        s->ev_head = s->pend_head;
    s->ev_tail = s->pend_tail;
    pthread_cond_broadcast(&s->ev_cv);
    pthread_mutex_unlock(&s->ev_mu);
    s->pend_head = s->pend_tail = NULL;
    if (was_empty) {
        uint64_t one = 1;
        ssize_t w = write(s->efd, &one, sizeof one);
        (void)w; /* EAGAIN only if the counter is saturated, i.e. already readable */
    }
}

int cpulm_sched_event_fd(const cpulm_sched *s) {
    return s->efd;
}

cpulm_sched_event *cpulm_sched_drain(cpulm_sched *s) {
    uint64_t v;
    ssize_t r = read(s->efd, &v, sizeof v); /* before taking: a later push writes again */
    (void)r;
    pthread_mutex_lock(&s->ev_mu);
    cpulm_sched_event *e = s->ev_head;
    s->ev_head = s->ev_tail = NULL;
    pthread_mutex_unlock(&s->ev_mu);
    return e;
}

void cpulm_sched_wait(cpulm_sched *s, int timeout_ms) {
    struct timespec ts = cpulm_deadline_in(timeout_ms / 1000.0);
    pthread_mutex_lock(&s->ev_mu);
    if (!s->ev_head) pthread_cond_timedwait(&s->ev_cv, &s->ev_mu, &ts);
    pthread_mutex_unlock(&s->ev_mu);
}

/* ---- ending choices and requests ---- */

static void slot_release(cpulm_sched *s, slot *x) {
    x->freed_at = ++s->n_released;
    cpulm_sampler_free(x->smp);
    x->smp = NULL;
    cpulm_grammar_matcher_free(x->gm);
    x->gm = NULL;
    x->state = SLOT_FREE;
    x->q = NULL;
    cpulm_buf_reset(&x->text);
}

static void request_end(cpulm_sched *s, sreq *q) {
    for (int32_t c = 0; c < q->r->n_choices; c++) {
        slot *x = &s->slots[q->slots[c]];
        if (x->q == q) slot_release(s, x);
    }
    s->n_active--;
    s->kv_promised -= q->kv_need;
    q->kv_need = 0;
    q->next = s->dead;
    s->dead = q;
}

static void request_fail(cpulm_sched *s, sreq *q, int status, const char *msg) {
    cpulm_sched_event *e = ev_new(s, CPULM_SCHED_EV_ERROR, q, 0, NULL, 0);
    if (e) {
        e->error_status = status;
        e->error = msg;
    }
    cpulm_metrics_add(s->p.metrics, CPULM_METRIC_FINISH_ABORT, 1);
    request_end(s, q);
}

/* ---- the RAM prompt cache ---- */

/* Keeps the whole blocks of slot x's KV in the prompt cache (only new blocks are copied). */
static void cache_slot(cpulm_sched *s, const slot *x) {
    if (!s->pc || s->hc) return; /* hybrid: blocks without a checkpoint give nothing */
    cpulm_pcache_src f = {s->ctx, (int32_t)(x - s->slots), cpulm_pcache_block_tokens(s->pc)};
    cpulm_pcache_store(s->pc, x->cache, x->n_cache, cpulm_pcache_fill_from_ctx, &f);
}

/* Slot seq holds the first `have` tokens of prompt; copies cached blocks beyond them into
 * its KV. Returns how many prompt tokens its KV now holds. */
static int32_t restore_cached(cpulm_sched *s, int32_t seq, const cpulm_token *prompt,
                              int32_t n_prompt, int32_t have) {
    if (!s->pc) return have;
    if (s->hc) /* hybrid: up to a checkpoint before the last token (its logits are needed) */
        return cpulm_hcache_restore(s->hc, s->pc, seq, prompt, n_prompt - 1, have,
                                    &s->slots[seq].ckpt_fork);
    int32_t B = cpulm_pcache_block_tokens(s->pc);
    int32_t nb = cpulm_pcache_lookup(s->pc, prompt, n_prompt, s->blobs, s->n_ctx / B);
    int32_t got = have;
    for (int32_t b = have / B; b < nb && (b + 1) * B > have; b++) {
        if (cpulm_ctx_seq_state_set(s->ctx, seq, b * B, B, s->blobs[b]) != CPULM_OK) break;
        got = (b + 1) * B;
    }
    return got;
}

/* Cuts sequence seq to its first n tokens. A hybrid model's recurrent state cannot be cut
 * partway (the context refuses): then the whole sequence is cleared and its tokens are
 * evaluated again, which is slower but right. Returns the length the sequence now has. */
static int32_t seq_cut(cpulm_sched *s, int32_t seq, int32_t n) {
    if (cpulm_ctx_seq_rm(s->ctx, seq, n) == CPULM_OK) return n;
    (void)cpulm_ctx_seq_rm(s->ctx, seq, 0); /* clearing is always allowed */
    return 0;
}

/* Free slots keep their KV for prefix reuse, kv_idle tokens in all: beyond that, the least
 * recently freed slot gives up its tail first (its prefix is what a later prompt may share;
 * with the prompt cache on, its whole blocks are in RAM there anyway). */
static void trim_idle(cpulm_sched *s) {
    if (s->kv_idle < 0) return;
    int64_t held = 0;
    for (int32_t i = 0; i < s->p.n_parallel; i++)
        if (s->slots[i].state == SLOT_FREE) held += s->slots[i].n_cache;
    while (held > s->kv_idle) {
        int32_t old = -1;
        for (int32_t i = 0; i < s->p.n_parallel; i++) {
            const slot *x = &s->slots[i];
            if (x->state == SLOT_FREE && x->n_cache > 0 &&
                (old < 0 || x->freed_at < s->slots[old].freed_at))
                old = i;
        }
        slot *x = &s->slots[old];
        int64_t cut = held - s->kv_idle < x->n_cache ? held - s->kv_idle : x->n_cache;
        int32_t now = seq_cut(s, old, x->n_cache - (int32_t)cut);
        held -= x->n_cache - now;
        x->n_cache = now;
    }
}

static void finish_choice(cpulm_sched *s, slot *x, cpulm_sched_finish why) {
    sreq *q = x->q;
    cache_slot(s, x);
    cpulm_sched_event *e = ev_new(s, CPULM_SCHED_EV_FINISH, q, x->choice, NULL, 0);
    if (e) e->finish = why;
    if (e) e->stop_word = x->stop_hit;
    cpulm_metrics_add(
        s->p.metrics,
        why == CPULM_FINISH_STOP ? CPULM_METRIC_FINISH_STOP : CPULM_METRIC_FINISH_LENGTH, 1);
    slot_release(s, x);
    if (--q->n_live > 0) return;
    e = ev_new(s, CPULM_SCHED_EV_DONE, q, 0, NULL, 0);
    if (e) {
        e->n_prompt = q->r->n_prompt;
        e->n_cached = q->n_cached;
        e->n_completion = q->n_completion;
        e->n_drafted = q->n_drafted;
        e->n_draft_accepted = q->n_accepted;
        if (q->t_first > 0) { /* timed here: the I/O thread may take all events at once */
            e->prompt_s = q->t_first - q->t_start;
            e->predicted_s = cpulm_clock_s() - q->t_first;
        }
    }
    cpulm_metrics_observe(s->p.metrics, CPULM_METRIC_E2E, cpulm_clock_s() - q->t_arrival);
    request_end(s, q);
}

/* ---- per-token work ---- */

static void compute_lp(const float *logits, int32_t n_vocab, cpulm_token t, int32_t n_top,
                       cpulm_sched_lp *out) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++)
        if (logits[i] == logits[i]) sum += exp((double)logits[i] - mx);
    double lse = (double)mx + log(sum);
    out->token = t;
    out->logprob = (float)(logits[t] - lse);
    out->n_top = 0;
    for (int32_t i = 0; i < n_vocab && n_top > 0; i++) { /* insertion into a sorted top list */
        float v = logits[i];
        if (!(v == v) || (out->n_top == n_top && v <= out->top[n_top - 1].logprob)) continue;
        int32_t k = out->n_top < n_top ? out->n_top++ : n_top - 1;
        while (k > 0 && out->top[k - 1].logprob < v) {
            out->top[k] = out->top[k - 1];
            k--;
        }
        out->top[k] = (cpulm_sched_top){i, v};
    }
    for (int32_t k = 0; k < out->n_top; k++)
        out->top[k].logprob = (float)(out->top[k].logprob - lse);
}

/* Publishes text[n_emitted..upto) (and lp) as one TEXT event when there is something. */
static void emit_text(cpulm_sched *s, slot *x, size_t upto, const cpulm_sched_lp *lp) {
    if (upto <= x->n_emitted && !lp) return;
    size_t n = upto > x->n_emitted ? upto - x->n_emitted : 0;
    cpulm_sched_event *e =
        ev_new(s, CPULM_SCHED_EV_TEXT, x->q, x->choice, x->text.data + x->n_emitted, n);
    if (e && lp) {
        e->has_lp = 1;
        e->lp = *lp;
    }
    x->n_emitted += n;
}

static void flush_detok(slot *x) {
    char tail[64];
    int32_t n = cpulm_detok_flush(&x->dt, tail, sizeof tail);
    if (n > 0) cpulm_buf_append(&x->text, tail, (size_t)n);
}

static void timing(cpulm_sched *s, slot *x) {
    double now = cpulm_clock_s();
    sreq *q = x->q;
    if (q->t_first == 0) {
        q->t_first = now;
        cpulm_metrics_observe(s->p.metrics, CPULM_METRIC_TTFT, now - q->t_arrival);
    } else if (x->t_last > 0) {
        cpulm_metrics_observe(s->p.metrics, CPULM_METRIC_ITL, now - x->t_last);
    }
    x->t_last = now;
}

/* Samples the next token of slot x from logits and handles it: end token, stop strings,
 * limits, publication. */
static void on_logits(cpulm_sched *s, slot *x, const float *logits) {
    sreq *q = x->q;
    const cpulm_sched_req *r = q->r;
    const uint32_t *allow = x->gm ? cpulm_grammar_mask(x->gm) : NULL;
    if (x->gm && !allow) { /* a grammar too ambiguous to follow is the client's: 400 */
        int client = 0;
        const char *why = cpulm_grammar_matcher_failure(x->gm, &client);
        request_fail(s, q, client ? 400 : 500, why ? why : "out of memory");
        return;
    }
    cpulm_token t = cpulm_sampler_sample_masked(x->smp, logits, allow);
    timing(s, x);
    if ((!r->ignore_eos || x->gm) && cpulm_token_is_eog(s->model, t)) {
        flush_detok(x);
        emit_text(s, x, x->text.len, NULL);
        finish_choice(s, x, CPULM_FINISH_STOP);
        return;
    }
    cpulm_sched_lp lp, *lpp = NULL;
    if (r->logprobs >= 0) {
        compute_lp(logits, s->n_vocab, t, r->logprobs, &lp);
        lpp = &lp;
    }
    cpulm_sampler_accept(x->smp, t);
    if (x->gm && cpulm_grammar_accept_token(x->gm, t) != CPULM_OK) {
        request_fail(s, q, 500, "the grammar rejected a masked token");
        return;
    }
    x->n_gen++;
    q->n_completion++;
    cpulm_metrics_add(s->p.metrics, CPULM_METRIC_GEN_TOKENS, 1);
    char piece[512];
    int32_t n = cpulm_detok_push(&x->dt, t, piece, sizeof piece);
    if (n > 0) cpulm_buf_append(&x->text, piece, (size_t)n);
    int at_limit = (r->max_tokens > 0 && x->n_gen >= r->max_tokens) || x->n_cache >= s->n_ctx;
    int done = x->gm && cpulm_grammar_must_end(x->gm); /* nothing can follow: a stop */
    if (at_limit || done) flush_detok(x);
    int matched;
    size_t upto = cpulm_sched_stop_scan(x->text.data, x->text.len, x->n_emitted, r->stop,
                                        r->stop_len, r->n_stop, &matched);
    if (matched || at_limit || done) {
        for (int32_t i = 0; matched && !x->stop_hit && i < r->n_stop; i++)
            if (x->text.len - upto >= r->stop_len[i] &&
                memcmp(x->text.data + upto, r->stop[i], r->stop_len[i]) == 0)
                x->stop_hit = i + 1; /* which one, for llama-server's stopping_word */
        emit_text(s, x, matched ? upto : x->text.len, lpp);
        finish_choice(s, x, matched || done ? CPULM_FINISH_STOP : CPULM_FINISH_LENGTH);
        return;
    }
    emit_text(s, x, upto, lpp);
    x->last = t;
}

/* The prompt of x's request is in x's KV: copy it to the sibling slots, then every
 * choice samples its first token from the same logits. */
static void prefill_done(cpulm_sched *s, slot *x, const float *logits) {
    sreq *q = x->q;
    int32_t n = q->r->n_choices, np = q->r->n_prompt;
    memcpy(s->tmp_idx, q->slots, sizeof(int32_t) * (size_t)n);
    for (int32_t c = 1; c < n; c++) {
        slot *y = &s->slots[s->tmp_idx[c]];
        if (cpulm_ctx_seq_cp(s->ctx, (int32_t)(x - s->slots), s->tmp_idx[c], np) != CPULM_OK) {
            request_fail(s, q, 500, "could not copy the prompt's KV cache");
            return;
        }
        memcpy(y->cache, x->cache, sizeof(cpulm_token) * (size_t)np);
        y->n_cache = np;
        y->state = SLOT_GEN;
    }
    x->state = SLOT_GEN;
    cache_slot(s, x); /* the prompt: later requests (and this one's siblings) find it */
    for (int32_t c = 0; c < n; c++) {
        slot *y = &s->slots[s->tmp_idx[c]];
        if (y->q == q && y->state == SLOT_GEN) on_logits(s, y, logits);
    }
}

/* ---- admission ---- */

static int32_t common_prefix(const cpulm_token *a, int32_t na, const cpulm_token *b, int32_t nb) {
    int32_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

/* The tokens of prompt[0..n) that slot x's sequence can give without evaluating them. With
 * a hybrid model the recurrent state stands for all of its n_cache tokens, so only a
 * prefix that covers the whole sequence (a conversation that grows) counts. */
static int32_t usable_prefix(const cpulm_sched *s, const slot *x, const cpulm_token *prompt,
                             int32_t n) {
    int32_t l = common_prefix(x->cache, x->n_cache, prompt, n);
    return s->whole_only && l < x->n_cache ? 0 : l;
}

static int slot_begin(cpulm_sched *s, slot *x, sreq *q, int32_t choice, int state) {
    cpulm_sampler_params sp = q->r->sp;
    if (sp.seed != SEED_FROM_CLOCK) sp.seed += (uint64_t)choice; /* else each draws its own */
    x->smp = cpulm_sampler_new(&sp, s->n_vocab);
    if (!x->smp) return -1;
    if (q->r->grammar) {
        if (!s->gvocab) s->gvocab = cpulm_grammar_vocab_new(s->model);
        x->gm = s->gvocab ? cpulm_grammar_matcher_new(q->r->grammar, s->gvocab) : NULL;
        if (!x->gm) {
            cpulm_sampler_free(x->smp);
            x->smp = NULL;
            return -1;
        }
        /* close the grammar before max_tokens or the context would cut it mid-sentence */
        int32_t budget = s->n_ctx - q->r->n_prompt;
        if (q->r->max_tokens > 0 && q->r->max_tokens < budget) budget = q->r->max_tokens;
        cpulm_grammar_matcher_set_budget(x->gm, budget > 0 ? budget : 1);
    }
    x->state = state;
    x->q = q;
    if (q->t_start == 0) q->t_start = cpulm_clock_s();
    x->choice = choice;
    cpulm_detok_init(&x->dt, s->model, q->r->special);
    cpulm_buf_reset(&x->text);
    x->n_emitted = 0;
    x->stop_hit = 0;
    x->n_gen = 0;
    x->t_last = 0;
    q->slots[choice] = (int32_t)(x - s->slots);
    if (s->spec)
        cpulm_sched_spec_begin(s->spec, (int32_t)(x - s->slots), q->r->spec_n_max, q->r->spec_n_min,
                               q->r->spec_p_min);
    return 0;
}

/* KV tokens a request may come to hold: each choice its prompt and max_tokens (a whole
 * context without it), at most a context. */
static int64_t kv_need(const cpulm_sched *s, const cpulm_sched_req *r) {
    int64_t per = (int64_t)r->n_prompt + (r->max_tokens > 0 ? r->max_tokens : s->n_ctx);
    return (per < s->n_ctx ? per : s->n_ctx) * r->n_choices;
}

/* Slot dst holds the first `have` tokens of prompt: if another slot's KV holds a longer
 * prefix of prompt[0..n), dst maps it (cpulm_ctx_seq_cp: the whole pages are shared
 * copy-on-write, see kv_cache.h) and its cache says so. Any slot may be the source, running
 * or free: its rows below its length stay as they are while it appends, and the KV cache
 * gives dst its own copy before the source rewrites them. Returns what dst now holds. */
static int32_t share_from_slot(cpulm_sched *s, int32_t dst, const cpulm_token *prompt, int32_t n,
                               int32_t have) {
    int32_t src = -1, best = have;
    for (int32_t i = 0; i < s->p.n_parallel; i++) {
        const slot *y = &s->slots[i];
        if (i == dst) continue;
        int32_t l = usable_prefix(s, y, prompt, n);
        if (l > best) best = l, src = i;
    }
    if (src < 0 || cpulm_ctx_seq_cp(s->ctx, src, dst, best) != CPULM_OK) return have;
    slot *x = &s->slots[dst];
    memcpy(x->cache + have, prompt + have, sizeof(cpulm_token) * (size_t)(best - have));
    x->n_cache = best;
    return best;
}

/* Puts q into free slots: choice 0 where the longest prefix of its prompt is cached (in its
 * own KV, mapped from another slot's, or restored from the prompt cache). */
static void assign(cpulm_sched *s, sreq *q) {
    const cpulm_sched_req *r = q->r;
    int32_t best = -1, best_lcp = -1;
    int32_t last = r->n_prompt - 1; /* the last prompt token is evaluated: its logits are needed */
    int32_t n_match = s->whole_only ? last : r->n_prompt;
    for (int32_t i = 0; i < s->p.n_parallel; i++) {
        slot *x = &s->slots[i];
        if (x->state != SLOT_FREE) continue;
        int32_t l = usable_prefix(s, x, r->prompt, n_match);
        /* hybrid: a slot that gives nothing loses its whole sequence, so the shortest goes */
        if (l > best_lcp || (s->whole_only && l == best_lcp && x->n_cache < s->slots[best].n_cache))
            best_lcp = l, best = i;
    }
    slot *x0 = &s->slots[best];
    int32_t have = seq_cut(s, best, best_lcp < last ? best_lcp : last);
    x0->n_cache = have;
    have = share_from_slot(s, best, r->prompt, last, have);
    int32_t reuse = restore_cached(s, best, r->prompt, r->n_prompt, have);
    reuse = seq_cut(s, best, reuse < last ? reuse : last);
    if (reuse > have)
        memcpy(x0->cache + have, r->prompt + have, sizeof(cpulm_token) * (size_t)(reuse - have));
    x0->n_cache = reuse;
    q->n_cached = reuse;
    q->n_live = r->n_choices;
    s->n_active++;
    q->kv_need = kv_need(s, r);
    s->kv_promised += q->kv_need;
    cpulm_metrics_add(s->p.metrics, CPULM_METRIC_PROMPT_TOKENS, (uint64_t)r->n_prompt);
    cpulm_metrics_add(s->p.metrics, CPULM_METRIC_CACHED_TOKENS, (uint64_t)reuse);
    int ok = slot_begin(s, x0, q, 0, SLOT_PREFILL) == 0;
    for (int32_t c = 1, i = 0; ok && c < r->n_choices; c++) {
        while (s->slots[i].state != SLOT_FREE)
            i++;
        ok = slot_begin(s, &s->slots[i], q, c, SLOT_SIBLING) == 0;
    }
    if (!ok) request_fail(s, q, 500, "out of memory");
}

static int32_t n_free_slots(const cpulm_sched *s) {
    int32_t n = 0;
    for (int32_t i = 0; i < s->p.n_parallel; i++)
        n += s->slots[i].state == SLOT_FREE;
    return n;
}

/* Admission by KV memory: reservations are worst cases, so running requests never run out
 * of cache and nothing has to be preempted; the head waits rather than be overtaken. */
static int kv_fits(const cpulm_sched *s, const sreq *q) {
    return s->p.kv_budget <= 0 || s->n_active == 0 ||
           s->kv_promised + kv_need(s, q->r) <= s->p.kv_budget;
}

static void admit(cpulm_sched *s) {
    while (s->wait_head && n_free_slots(s) >= s->wait_head->r->n_choices &&
           kv_fits(s, s->wait_head)) {
        sreq *q = s->wait_head;
        s->wait_head = q->next;
        if (!s->wait_head) s->wait_tail = NULL;
        q->next = NULL;
        pthread_mutex_lock(&s->mu);
        s->n_queued--;
        pthread_mutex_unlock(&s->mu);
        assign(s, q);
    }
}

/* ---- one step: build the batch, decode, sample ---- */

static int32_t add_tok(cpulm_sched *s, int32_t n, cpulm_token t, int32_t seq, int want) {
    s->b_tok[n] = t;
    s->b_seq[n] = seq;
    s->b_want[n] = (int8_t)want;
    return n + 1;
}

/* The prefill budget of the next step beside n_gen streams (prompts: some are waiting).
 * Short steps fill up to the target without a floor; a long step (its credit allows one,
 * see cpulm_sched_long_step) aims at CPULM_SCHED_LONG_STEP targets with a floor of
 * n_chunk / 16 tokens, so prompts always progress. */
static int32_t step_budget(cpulm_sched *s, int32_t n_gen, int32_t n_rows, int prompts) {
    double T = target_step(s);
    if (n_gen == 0 || T <= 0) return s->p.n_chunk;
    if (!cpulm_sched_long_step(&s->long_credit, n_gen, prompts, s->p.prefill_every,
                               s->p.n_parallel))
        return cpulm_sched_prefill_budget(&s->est, T, n_rows, s->p.n_chunk, 0);
    atomic_fetch_add(&s->st_long_steps, 1);
    int32_t floor = s->p.n_chunk / 16 > 0 ? s->p.n_chunk / 16 : 1;
    return cpulm_sched_prefill_budget(&s->est, CPULM_SCHED_LONG_STEP * T, n_rows, s->p.n_chunk,
                                      floor);
}

static void publish_model(cpulm_sched *s) {
    atomic_store(&s->st_target, target_step(s));
    atomic_store(&s->st_fixed, s->est.fixed);
    atomic_store(&s->st_gen, s->est.gen);
    atomic_store(&s->st_pre, s->est.pre);
}

/* Lower priority value first, then earlier submission. */
static int served_before(const sreq *a, const sreq *b) {
    if (a->r->priority != b->r->priority) return a->r->priority < b->r->priority;
    return a->order < b->order;
}

/* Speculation: how many tokens each generating slot may draft this step (room in its
 * context, tokens left to max_tokens), and the drafts (sched_spec.c). A drafted token costs
 * one more generating row in the step: cpulm_sched_draft_cost at this step's streams is the
 * adaptive length's cost, and above CPULM_SCHED_SPEC_COST_MAX no slot drafts (sched.h). */
static void spec_prepare(cpulm_sched *s) {
    int32_t n_gen = 0;
    for (int32_t i = 0; i < s->p.n_parallel; i++) {
        slot *x = &s->slots[i];
        cpulm_sched_spec_in *in = &s->spec_in[i];
        in->k_cap = 0;
        if (x->state != SLOT_GEN) continue;
        n_gen++;
        x->cache[x->n_cache] = x->last; /* n_cache < n_ctx while generating */
        in->hist = x->cache;
        in->n_hist = x->n_cache + 1;
        in->k_cap = s->n_ctx - in->n_hist;
        int32_t left = x->q->r->max_tokens > 0 ? x->q->r->max_tokens - x->n_gen - 1 : in->k_cap;
        if (left < in->k_cap) in->k_cap = left;
    }
    cpulm_sched_spec_draft_all(s->spec, s->spec_in, cpulm_sched_draft_cost(&s->est, n_gen));
}

/* Fills the batch: one token per generating slot (then its draft, each with a logits row),
 * then prompt chunks within the budget, in priority-then-arrival order. Returns the batch
 * size; sets out_row/n_in_batch/n_draft of the slots involved. */
static int32_t build_batch(cpulm_sched *s, int32_t *n_gen) {
    int32_t n = 0, n_out = 0, n_pre = 0, n_streams = 0;
    if (s->spec) spec_prepare(s);
    for (int32_t i = 0; i < s->p.n_parallel; i++) {
        slot *x = &s->slots[i];
        x->out_row = -1;
        x->n_in_batch = 0;
        x->n_draft = 0;
        if (x->state != SLOT_GEN) continue;
        n = add_tok(s, n, x->last, i, 1);
        x->out_row = n_out++;
        n_streams++;
        const cpulm_token *d = s->spec ? cpulm_sched_spec_draft(s->spec, i, &x->n_draft) : NULL;
        for (int32_t j = 0; j < x->n_draft; j++, n_out++)
            n = add_tok(s, n, d[j], i, 1);
        x->n_in_batch = 1 + x->n_draft;
    }
    for (int32_t i = 0; i < s->p.n_parallel; i++) { /* insertion sort: few slots */
        if (s->slots[i].state != SLOT_PREFILL) continue;
        int32_t k = n_pre++;
        while (k > 0 && served_before(s->slots[i].q, s->slots[s->tmp_idx[k - 1]].q)) {
            s->tmp_idx[k] = s->tmp_idx[k - 1];
            k--;
        }
        s->tmp_idx[k] = i;
    }
    *n_gen = n;
    /* always: streams earn long credit */
    int32_t budget = step_budget(s, n_streams, n_out, n_pre > 0);
    if (n_pre == 0) budget = 0;
    for (int32_t p = 0; p < n_pre && budget > 0; p++) {
        int32_t i = s->tmp_idx[p];
        slot *x = &s->slots[i];
        const cpulm_sched_req *r = x->q->r;
        int32_t k = r->n_prompt - x->n_cache;
        if (k > budget) k = budget;
        if (s->hc) k = cpulm_hcache_clip(s->hc, x->n_cache, k, r->n_prompt, x->ckpt_fork);
        for (int32_t j = 0; j < k; j++) {
            int last = x->n_cache + j + 1 == r->n_prompt;
            n = add_tok(s, n, r->prompt[x->n_cache + j], i, last);
            if (last) x->out_row = n_out++;
        }
        x->n_in_batch = k;
        budget -= k;
    }
    return n;
}

/* After a successful decode: the batch's tokens are now in the slots' KV caches. */
static void commit_batch(cpulm_sched *s) {
    for (int32_t i = 0; i < s->p.n_parallel; i++) {
        slot *x = &s->slots[i];
        if (x->n_in_batch == 0) continue;
        if (x->state == SLOT_GEN) {
            x->cache[x->n_cache] = x->last;
            int32_t nd;
            const cpulm_token *d = x->n_draft ? cpulm_sched_spec_draft(s->spec, i, &nd) : NULL;
            if (d) memcpy(x->cache + x->n_cache + 1, d, sizeof(cpulm_token) * (size_t)nd);
        } else {
            memcpy(x->cache + x->n_cache, x->q->r->prompt + x->n_cache,
                   sizeof(cpulm_token) * (size_t)x->n_in_batch);
            atomic_fetch_add(&s->st_prefill, (unsigned long long)x->n_in_batch);
        }
        x->n_cache += x->n_in_batch;
        if (s->hc && x->state == SLOT_PREFILL) /* at a checkpoint point: save the state */
            cpulm_hcache_after(s->hc, s->pc, i, x->cache, x->n_cache, x->q->r->n_prompt,
                               x->ckpt_fork);
    }
}

/* Slot x's rows after a decode that carried its pending token and n_draft drafts: tokens
 * are picked row by row exactly as plain decoding would (on_logits: its sampler, grammar,
 * stop strings, limits), while each picked token equals the next draft; the first that
 * differs (or the one after the last draft) ends the step as the new pending token. The
 * rejected drafts leave the KV sequence. */
static void verify_slot(cpulm_sched *s, slot *x) {
    sreq *q = x->q;
    int32_t i = (int32_t)(x - s->slots), k = x->n_draft;
    int32_t p0 = x->n_cache - x->n_in_batch; /* the pending token's position */
    const cpulm_token *d = x->cache + p0 + 1;
    q->n_drafted += k; /* before any row: the request may end in on_logits */
    int32_t j = 0;
    for (;; j++) {
        if (j > 0) q->n_accepted++;
        x->n_cache = p0 + 1 + j; /* what plain decoding would have in the cache here */
        on_logits(s, x, cpulm_ctx_logits(s->ctx, x->out_row + j));
        if (j == k || x->q != q || x->state != SLOT_GEN || x->last != d[j]) break;
    }
    if (j < k) x->n_cache = seq_cut(s, i, p0 + 1 + j); /* never partway-refused: not hybrid */
    cpulm_sched_spec_learn(s->spec, i, k, j);
}

static void step(cpulm_sched *s) {
    int32_t n_gen;
    int32_t n = build_batch(s, &n_gen);
    if (n == 0) return;
    cpulm_batch b = {.n = n, .token = s->b_tok, .seq = s->b_seq, .want_logits = s->b_want};
    double t0 = cpulm_clock_s();
    cpulm_status st = cpulm_ctx_decode(s->ctx, &b);
    if (st == CPULM_OK) {
        cpulm_sched_model_observe(&s->est, n_gen, n - n_gen, cpulm_clock_s() - t0);
        publish_model(s);
    }
    atomic_fetch_add(&s->st_steps, 1);
    if ((uint64_t)n > atomic_load(&s->st_max_step)) atomic_store(&s->st_max_step, (uint64_t)n);
    if (st != CPULM_OK) { /* all-or-nothing: the caches are unchanged; fail who took part */
        for (int32_t i = 0; i < s->p.n_parallel; i++)
            if (s->slots[i].n_in_batch > 0 && s->slots[i].q)
                request_fail(s, s->slots[i].q, 500, "decode failed");
        return;
    }
    commit_batch(s);
    for (int32_t i = 0; i < s->p.n_parallel; i++) {
        slot *x = &s->slots[i];
        if (x->out_row < 0 || !x->q) continue;
        const float *logits = cpulm_ctx_logits(s->ctx, x->out_row);
        if (x->state == SLOT_PREFILL)
            prefill_done(s, x, logits);
        else if (x->state == SLOT_GEN && x->n_draft > 0)
            verify_slot(s, x);
        else if (x->state == SLOT_GEN)
            on_logits(s, x, logits);
    }
}

/* ---- inputs: submissions, cancellations, deadlines ---- */

static void cancel_one(cpulm_sched *s, uint64_t id) {
    if (cpulm_sched_emb_cancel(s, id)) return;
    for (sreq **pp = &s->wait_head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next) {
        if ((*pp)->r->id != id) continue;
        sreq *q = *pp;
        *pp = q->next;
        if (s->wait_tail == q) s->wait_tail = prev;
        s->n_queued--; /* mu is held */
        sreq_free(q);
        return;
    }
    for (int32_t i = 0; i < s->p.n_parallel; i++) {
        sreq *q = s->slots[i].q;
        if (q && q->r->id == id) {
            cpulm_metrics_add(s->p.metrics, CPULM_METRIC_FINISH_ABORT, 1);
            request_end(s, q);
            return;
        }
    }
}

/* Takes new submissions and cancellations; sleeps while there is nothing to do.
 * Returns 0 when the scheduler must stop. */
static int take_inputs(cpulm_sched *s) {
    pthread_mutex_lock(&s->mu);
    while (!s->stop && !s->in_head && !s->n_cancels && !s->n_active && !s->wait_head &&
           !s->emb_in_head && !s->emb_head)
        pthread_cond_wait(&s->cv, &s->mu);
    if (s->stop) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    while (s->in_head) { /* into the waiting list by priority, then arrival */
        sreq *q = s->in_head;
        s->in_head = q->next;
        sreq **pp = &s->wait_head;
        while (*pp && !served_before(q, *pp))
            pp = &(*pp)->next;
        q->next = *pp;
        *pp = q;
        if (!q->next) s->wait_tail = q;
    }
    s->in_tail = NULL;
    if (s->emb_in_head) { /* behind the embedding requests already in line */
        if (s->emb_tail)
            s->emb_tail->next = s->emb_in_head;
        else
            s->emb_head = s->emb_in_head;
        s->emb_tail = s->emb_in_tail;
        s->emb_in_head = s->emb_in_tail = NULL;
    }
    for (int32_t i = 0; i < s->n_cancels; i++)
        cancel_one(s, s->cancels[i]);
    s->n_cancels = 0;
    pthread_mutex_unlock(&s->mu);
    return 1;
}

static void expire(cpulm_sched *s) {
    double now = cpulm_clock_s();
    for (int32_t i = 0; i < s->p.n_parallel; i++) {
        sreq *q = s->slots[i].q;
        if (q && q->deadline > 0 && now > q->deadline) request_fail(s, q, 504, "request timed out");
    }
    for (sreq **pp = &s->wait_head, *prev = NULL; *pp;) {
        sreq *q = *pp;
        if (!(q->deadline > 0 && now > q->deadline)) {
            prev = q;
            pp = &q->next;
            continue;
        }
        *pp = q->next;
        if (s->wait_tail == q) s->wait_tail = prev;
        pthread_mutex_lock(&s->mu);
        s->n_queued--;
        pthread_mutex_unlock(&s->mu);
        s->n_active++; /* request_fail's accounting expects a running request */
        request_fail(s, q, 504, "request timed out while queued");
    }
}

static void update_stats(cpulm_sched *s) {
    int64_t kv = 0, all = 0;
    for (int32_t i = 0; i < s->p.n_parallel; i++) {
        if (s->slots[i].state != SLOT_FREE) kv += s->slots[i].n_cache;
        all += s->slots[i].n_cache;
    }
    atomic_store(&s->st_kv_used, kv);
    atomic_store(&s->st_kv_cached, all);
    atomic_store(&s->st_running, s->n_active);
    atomic_store(&s->st_kv_promised, s->kv_promised);
    if (s->pc) {
        cpulm_pcache_stats ps;
        cpulm_pcache_get_stats(s->pc, &ps);
        atomic_store(&s->st_pc_blocks, ps.n_blocks);
        atomic_store(&s->st_pc_bytes, (long long)ps.bytes);
    }
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->st_waiting, s->n_queued);
    pthread_mutex_unlock(&s->mu);
}

static void free_dead(cpulm_sched *s) {
    while (s->dead) {
        sreq *q = s->dead;
        s->dead = q->next;
        sreq_free(q);
    }
}

/* Times one decode of n copies of token t: appended to sequence 0, or with spread one
 * token to each of sequences 0..n-1 (a decode step of n streams). */
static double timed_decode(cpulm_sched *s, cpulm_token t, int32_t n, int spread) {
    for (int32_t i = 0; i < n; i++) {
        s->b_tok[i] = t;
        s->b_seq[i] = spread ? i : 0;
        s->b_want[i] = spread || i == n - 1;
    }
    cpulm_batch b = {.n = n, .token = s->b_tok, .seq = s->b_seq, .want_logits = s->b_want};
    double t0 = cpulm_clock_s();
    (void)cpulm_ctx_decode(s->ctx, &b); /* a failed warm-up decode only mistimes the model */
    return cpulm_clock_s() - t0;
}

/* One decode of a single token, so the first request does not pay for page faults of
 * the weights and scratch; then the step time model is calibrated (a few hundred
 * milliseconds on a 1B model): a 1-token step, a k-token prompt (per prompt token) and
 * a step of one token in each of g sequences (per generating sequence; more than a
 * prompt token: each carries its own logits row and attention); then the cache cleared. */
static void warmup(cpulm_sched *s) {
    cpulm_token t = cpulm_token_bos(s->model);
    if (t < 0) t = 0;
    if (cpulm_model_is_encoder(s->model)) { /* sequences are whole in a decode: one prompt */
        int32_t k = s->n_batch < 64 ? s->n_batch : 64;
        s->est.pre = timed_decode(s, t, k, 0) / k + 1e-7;
        (void)cpulm_ctx_seq_rm(s->ctx, 0, 0); /* clearing (p0 = 0) cannot fail */
        publish_model(s);
        return;
    }
    timed_decode(s, t, 1, 0);
    int32_t k = s->n_batch < 64 ? s->n_batch : 64;
    if (k > s->n_ctx - 2) k = s->n_ctx - 2;
    int32_t g = s->p.n_parallel;
    double t1 = timed_decode(s, t, 1, 0), tk = k > 1 ? timed_decode(s, t, k, 0) : t1;
    double tg = g > 1 ? timed_decode(s, t, g, 1) : t1;
    cpulm_sched_model *m = &s->est;
    m->pre = k > 1 && tk > t1 ? (tk - t1) / (k - 1) : t1;
    if (m->pre < 1e-7) m->pre = 1e-7;
    m->gen = g > 1 && tg > t1 ? (tg - t1) / (g - 1) : m->pre;
    m->fixed = t1 > m->gen ? t1 - m->gen : 0;
    for (int32_t i = 0; i < g; i++)
        (void)cpulm_ctx_seq_rm(s->ctx, i, 0); /* clearing (p0 = 0) cannot fail */
    publish_model(s);
}

static void *sched_main(void *arg) {
    cpulm_sched *s = arg;
    warmup(s);
    /* the grammar masks' token trie, built before ready so the first constrained request
     * does not stall the running streams (~1 s for a 128k vocabulary; retried lazily) */
    s->gvocab = cpulm_grammar_vocab_new(s->model);
    atomic_store(&s->ready, 1);
    s->emb_pre = s->est.pre; /* the embeddings context's cost per token, until measured */
    while (take_inputs(s)) {
        expire(s);
        admit(s);
        step(s);
        publish(s);
        cpulm_sched_emb_step(s); /* at most one embedding batch between two decode steps */
        publish(s);
        free_dead(s);
        trim_idle(s);
        update_stats(s);
    }
    pthread_mutex_lock(&s->mu);
    s->exited = 1;
    pthread_cond_broadcast(&s->exit_cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- lifecycle and the thread-safe API ---- */

static cpulm_status alloc_state(cpulm_sched *s) {
    int32_t np = s->p.n_parallel;
    s->slots = calloc((size_t)np, sizeof *s->slots);
    s->b_tok = malloc(sizeof(cpulm_token) * (size_t)s->n_batch);
    s->b_seq = malloc(sizeof(int32_t) * (size_t)s->n_batch);
    s->b_want = malloc((size_t)s->n_batch);
    s->tmp_idx = malloc(sizeof(int32_t) * (size_t)np);
    if (!s->slots || !s->b_tok || !s->b_seq || !s->b_want || !s->tmp_idx) return CPULM_ERR_NOMEM;
    if (s->spec_rows > 0 && !(s->spec_in = calloc((size_t)np, sizeof *s->spec_in)))
        return CPULM_ERR_NOMEM;
    if (s->p.cache_ram_mib > 0) {
        size_t bb = (size_t)cpulm_ctx_seq_state_bytes(s->ctx, CPULM_SCHED_CACHE_BLOCK);
        s->pc = cpulm_pcache_new(CPULM_SCHED_CACHE_BLOCK, bb, (uint64_t)s->p.cache_ram_mib << 20);
        s->blobs = malloc(sizeof *s->blobs * (size_t)(s->n_ctx / CPULM_SCHED_CACHE_BLOCK + 1));
        if (!s->pc || !s->blobs) return CPULM_ERR_NOMEM;
        if (s->whole_only && !(s->hc = cpulm_hcache_new(s->ctx, CPULM_SCHED_CACHE_BLOCK)))
            return CPULM_ERR_NOMEM;
    }
    for (int32_t i = 0; i < np; i++) {
        cpulm_buf_init(&s->slots[i].text, 0);
        s->slots[i].cache = malloc(sizeof(cpulm_token) * (size_t)s->n_ctx);
        if (!s->slots[i].cache) return CPULM_ERR_NOMEM;
    }
    return CPULM_OK;
}

static cpulm_status make_ctx(cpulm_sched *s, cpulm_error *err) {
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.n_ctx = s->p.n_ctx;
    cp.n_seq_max = s->p.n_parallel;
    /* one token and one logits row per slot per step, and its draft's when speculating
     * (not on a hybrid model: its recurrent state cannot drop rejected drafts) */
    cpulm_model_info mi;
    cpulm_model_get_info(s->model, &mi);
    s->spec_rows = s->p.spec.kind != CPULM_SPEC_NONE ? s->p.spec.draft_max : 0;
    if (s->spec_rows > 0 && mi.n_layer_recurrent > 0) {
        cpulm_logf(CPULM_LOG_INFO, "speculative decoding off: this model's recurrent state "
                                   "cannot roll rejected drafts back");
        s->spec_rows = 0;
    }
    cp.n_batch = s->p.n_chunk + s->p.n_parallel * (1 + s->spec_rows);
    cp.n_outputs_max = s->p.n_parallel * (1 + s->spec_rows);
    cp.n_threads = s->p.n_threads;
    cp.n_threads_batch = s->p.n_threads_batch;
    cp.kv_type = s->p.kv_type;
    cp.attn_fast = s->p.attn_fast;
    cp.no_pin = s->p.no_pin;
    if (cpulm_model_is_encoder(s->model)) { /* it serves embeddings only (routes refuse the */
        cp.embeddings = CPULM_EMBD_ONLY;    /* generating requests): a context that decodes, */
        cp.pooling = CPULM_POOLING_NONE;    /* within the model's absolute positions */
        if (cp.n_ctx <= 0 || cp.n_ctx > mi.n_ctx_train) cp.n_ctx = mi.n_ctx_train;
    }
    s->ctx = cpulm_ctx_new(s->model, &cp, err);
    if (!s->ctx) return err ? err->code : CPULM_ERR_NOMEM;
    s->n_ctx = cpulm_ctx_n_ctx(s->ctx);
    s->n_batch = cp.n_batch;
    s->kv_token_bytes = cpulm_ctx_seq_state_bytes(s->ctx, 1);
    cpulm_memory mem; /* no state blobs for hybrid models: their KV rows from the sizing */
    if (s->kv_token_bytes == 0 && cpulm_model_memory(s->model, &cp, &mem) == CPULM_OK)
        s->kv_token_bytes = mem.kv_per_token;
    s->whole_only = mi.n_layer_recurrent > 0;
    if (s->p.cache_ram_mib > 0 && cpulm_ctx_seq_state_bytes(s->ctx, CPULM_SCHED_CACHE_BLOCK) == 0) {
        /* no KV to save in blocks: no prompt cache to fill */
        cpulm_logf(CPULM_LOG_INFO, "prompt cache off: this context has no KV state to save in "
                                   "blocks (--cache-ram ignored)");
        s->p.cache_ram_mib = 0;
    }
    /* auto: one context's worth while the prompt cache also holds finished sequences'
     * blocks; without it, free slots are the only prefix reuse, so they keep everything */
    s->kv_idle = s->p.kv_idle != CPULM_SCHED_KV_IDLE_AUTO ? s->p.kv_idle
                 : s->p.cache_ram_mib > 0                 ? s->n_ctx
                                                          : -1;
    return CPULM_OK;
}

/* After make_ctx: the scheduler's state, the speculation's, then its thread. */
static cpulm_status start(cpulm_sched *s, cpulm_error *err) {
    if (alloc_state(s) != CPULM_OK)
        return cpulm_errf(err, CPULM_ERR_NOMEM, "scheduler: out of memory");
    if (s->spec_rows > 0 && !(s->spec = cpulm_sched_spec_new(&s->p.spec, s->model, s->p.n_parallel,
                                                             s->n_ctx, s->p.metrics, err)))
        return err ? err->code : CPULM_ERR_NOMEM; /* a draft of another vocabulary, memory */
    if (pthread_create(&s->thread, NULL, sched_main, s) != 0)
        return cpulm_errf(err, CPULM_ERR_NOMEM, "scheduler: cannot start its thread");
    return CPULM_OK;
}

cpulm_sched *cpulm_sched_new(const cpulm_model *m, const cpulm_sched_params *p, cpulm_error *err) {
    cpulm_sched_params dp = cpulm_sched_default_params();
    if (!p) p = &dp;
    if (p->n_parallel < 1 || p->n_parallel > 256 || p->n_chunk < 1 || p->n_chunk > 65536 ||
        p->prefill_every < 1 || p->prefill_every > 1000 || p->max_queue < 0 || p->n_ctx < 0 ||
        p->cache_ram_mib < 0 || (p->kv_idle < -1 && p->kv_idle != CPULM_SCHED_KV_IDLE_AUTO) ||
        p->kv_budget < 0) {
        cpulm_errf(err, CPULM_ERR_INVALID_ARG, "scheduler: parameters out of range");
        return NULL;
    }
    cpulm_sched *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->model = m;
    s->p = *p;
    s->n_vocab = cpulm_vocab_n(m);
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->exit_cv, NULL);
    pthread_mutex_init(&s->ev_mu, NULL);
    pthread_cond_init(&s->ev_cv, NULL);
    if (s->efd < 0) {
        cpulm_errf(err, CPULM_ERR_IO, "scheduler: eventfd: %s", strerror(errno));
    } else if (make_ctx(s, err) == CPULM_OK && start(s, err) == CPULM_OK) {
        s->thread_started = 1;
    }
    if (!s->thread_started) {
        cpulm_sched_free(s);
        return NULL;
    }
    return s;
}

static void free_list(sreq *q) {
    while (q) {
        sreq *n = q->next;
        sreq_free(q);
        q = n;
    }
}

/* Frees queued events; an EMBED event's request goes with it (nobody will receive it). */
static void free_events(cpulm_sched_event *e) {
    while (e) {
        cpulm_sched_event *n = e->next;
        if (e->kind == CPULM_SCHED_EV_EMBED && e->embed) cpulm_sched_emb_destroy(e->embed);
        free(e);
        e = n;
    }
}

int cpulm_sched_stop(cpulm_sched *s, double timeout_s) {
    if (!s || !s->thread_started) return 1;
    struct timespec dl = cpulm_deadline_in(timeout_s);
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    while (!s->exited)
        if (pthread_cond_timedwait(&s->exit_cv, &s->mu, &dl) == ETIMEDOUT) break;
    int done = s->exited;
    pthread_mutex_unlock(&s->mu);
    return done;
}

void cpulm_sched_free(cpulm_sched *s) {
    if (!s) return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    for (int32_t i = 0; s->slots && i < s->p.n_parallel; i++) {
        slot *x = &s->slots[i];
        if (x->q) request_end(s, x->q); /* moves each running request to the dead list */
        cpulm_buf_release(&x->text);
        free(x->cache);
    }
    free_dead(s);
    free_list(s->in_head);
    free_list(s->wait_head);
    cpulm_sched_emb_free_list(s->emb_in_head);
    cpulm_sched_emb_free_list(s->emb_head);
    free_events(cpulm_sched_drain(s));
    free_events(s->pend_head);
    free(s->slots);
    free(s->b_tok);
    free(s->b_seq);
    free(s->b_want);
    free(s->tmp_idx);
    free(s->blobs);
    cpulm_pcache_free(s->pc);
    cpulm_hcache_free(s->hc);
    free(s->cancels);
    cpulm_grammar_vocab_free(s->gvocab);
    cpulm_sched_spec_free(s->spec);
    free(s->spec_in);
    cpulm_ctx_free(s->ctx);
    if (s->efd >= 0) close(s->efd);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->exit_cv);
    pthread_mutex_destroy(&s->ev_mu);
    pthread_cond_destroy(&s->ev_cv);
    free(s);
}

static cpulm_sched_submit_result validate(const cpulm_sched *s, const cpulm_sched_req *r) {
    if (r->n_prompt < 1 || !r->prompt || r->n_choices < 1 || r->n_choices > s->p.n_parallel ||
        r->max_tokens == 0 || r->max_tokens < -1 || r->logprobs > CPULM_SCHED_MAX_TOP)
        return CPULM_SCHED_INVALID;
    for (int32_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= s->n_vocab) return CPULM_SCHED_INVALID;
    if (r->n_prompt + 1 > s->n_ctx) return CPULM_SCHED_TOO_LONG;
    return CPULM_SCHED_ACCEPTED;
}

cpulm_sched_submit_result cpulm_sched_submit(cpulm_sched *s, cpulm_sched_req *r) {
    cpulm_sched_submit_result v = validate(s, r);
    if (v != CPULM_SCHED_ACCEPTED) return v;
    sreq *q = calloc(1, sizeof *q);
    int32_t *slots = calloc((size_t)r->n_choices, sizeof(int32_t));
    if (!q || !slots) {
        free(q);
        free(slots);
        return CPULM_SCHED_QUEUE_FULL; /* out of memory: the client may retry */
    }
    q->r = r;
    q->slots = slots;
    q->t_arrival = cpulm_clock_s();
    q->deadline = r->timeout_s > 0 ? q->t_arrival + r->timeout_s : 0;
    pthread_mutex_lock(&s->mu);
    if (s->closed || s->stop)
        v = CPULM_SCHED_STOPPING;
    else if (s->n_queued >= s->p.max_queue)
        v = CPULM_SCHED_QUEUE_FULL;
    if (v == CPULM_SCHED_ACCEPTED) {
        if (s->in_tail)
            s->in_tail->next = q;
        else
            s->in_head = q;
        s->in_tail = q;
        q->order = s->n_submitted++;
        s->n_queued++;
        atomic_store(&s->st_waiting, s->n_queued);
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (v != CPULM_SCHED_ACCEPTED) {
        q->r = NULL; /* the caller keeps r */
        sreq_free(q);
    }
    return v;
}

cpulm_sched_submit_result cpulm_sched_embed_submit(cpulm_sched *s, cpulm_sched_embed *e) {
    if (!s->p.embd_ctx || !e || e->n < 1 || !e->tok || !e->n_tok || !e->out)
        return CPULM_SCHED_INVALID;
    for (int32_t i = 0; i < e->n; i++)
        if (!e->tok[i] || e->n_tok[i] < 1 || e->n_tok[i] > cpulm_ctx_n_ctx(s->p.embd_ctx))
            return CPULM_SCHED_INVALID;
    cpulm_sched_event *ev = calloc(1, sizeof *ev + 1);
    if (!ev) return CPULM_SCHED_QUEUE_FULL; /* out of memory: the client may retry */
    cpulm_sched_submit_result v = CPULM_SCHED_ACCEPTED;
    pthread_mutex_lock(&s->mu);
    if (s->closed || s->stop)
        v = CPULM_SCHED_STOPPING;
    else if (atomic_load(&s->st_emb) >= s->p.max_queue)
        v = CPULM_SCHED_QUEUE_FULL;
    if (v == CPULM_SCHED_ACCEPTED) {
        e->next = NULL;
        e->n_done = 0;
        e->status = CPULM_OK;
        e->timed_out = 0;
        e->deadline = e->timeout_s > 0 ? cpulm_clock_s() + e->timeout_s : 0;
        e->ev = ev;
        if (s->emb_in_tail)
            s->emb_in_tail->next = e;
        else
            s->emb_in_head = e;
        s->emb_in_tail = e;
        atomic_fetch_add(&s->st_emb, 1);
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (v != CPULM_SCHED_ACCEPTED) free(ev);
    return v;
}

void cpulm_sched_cancel(cpulm_sched *s, uint64_t id) {
    pthread_mutex_lock(&s->mu);
    if (s->n_cancels == s->cap_cancels) {
        int32_t cap = s->cap_cancels ? s->cap_cancels * 2 : 16;
        uint64_t *c = realloc(s->cancels, sizeof(uint64_t) * (size_t)cap);
        if (c) s->cancels = c, s->cap_cancels = cap;
    }
    if (s->n_cancels < s->cap_cancels) s->cancels[s->n_cancels++] = id;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void cpulm_sched_close(cpulm_sched *s) {
    pthread_mutex_lock(&s->mu);
    s->closed = 1;
    pthread_mutex_unlock(&s->mu);
}

void cpulm_sched_get_stats(cpulm_sched *s, cpulm_sched_stats *out) {
    memset(out, 0, sizeof *out);
    out->ready = atomic_load(&s->ready);
    out->n_waiting = atomic_load(&s->st_waiting);
    out->n_running = atomic_load(&s->st_running);
    out->kv_used = atomic_load(&s->st_kv_used);
    out->n_parallel = s->p.n_parallel;
    out->n_ctx = s->n_ctx;
    out->n_threads = cpulm_ctx_threads(s->ctx); /* fixed once the context exists */
    out->kv_total = (int64_t)s->p.n_parallel * s->n_ctx;
    out->kv_cached = atomic_load(&s->st_kv_cached);
    out->kv_token_bytes = s->kv_token_bytes;
    out->kv_reserved_bytes = s->kv_token_bytes * (uint64_t)out->kv_total;
    out->kv_idle_max = s->kv_idle;
    out->kv_budget = s->p.kv_budget;
    out->kv_budget_used = atomic_load(&s->st_kv_promised);
    out->n_steps = atomic_load(&s->st_steps);
    out->max_step_tokens = atomic_load(&s->st_max_step);
    out->n_long_steps = atomic_load(&s->st_long_steps);
    out->n_prefill_tokens = atomic_load(&s->st_prefill);
    out->step_ms_target = atomic_load(&s->st_target) * 1e3;
    out->est_fixed_ms = atomic_load(&s->st_fixed) * 1e3;
    out->est_gen_ms = atomic_load(&s->st_gen) * 1e3;
    out->est_token_ms = atomic_load(&s->st_pre) * 1e3;
    out->cache_blocks = atomic_load(&s->st_pc_blocks);
    out->cache_bytes = atomic_load(&s->st_pc_bytes);
    out->cache_max_bytes = (int64_t)s->p.cache_ram_mib << 20;
    out->cache_block_tokens = s->pc ? CPULM_SCHED_CACHE_BLOCK : 0;
    out->cache_blocks_max = s->pc ? cpulm_pcache_capacity(s->pc) : 0;
    out->n_embed = atomic_load(&s->st_emb);
    out->n_embed_batches = atomic_load(&s->st_emb_batches);
    out->n_embed_inputs = atomic_load(&s->st_emb_inputs);
    out->n_embed_tokens = atomic_load(&s->st_emb_tokens);
    if (s->spec) { /* created before the thread, fixed after */
        cpulm_sched_spec_stats ss;
        cpulm_sched_spec_get_stats(s->spec, &ss);
        out->spec_draft_max = s->spec_rows;
        out->spec_drafts = ss.drafts;
        out->spec_draft_tokens = ss.draft_tokens;
        out->spec_accepted = ss.accepted;
        out->spec_draft_decodes = ss.draft_decodes;
    }
}

uint64_t cpulm_sched_kv_resident_bytes(cpulm_sched *s) {
    return cpulm_ctx_kv_resident_bytes(s->ctx); /* the context is fixed once created */
}

uint64_t cpulm_sched_kv_shared_bytes(cpulm_sched *s) {
    return cpulm_ctx_kv_shared_bytes(s->ctx);
}
