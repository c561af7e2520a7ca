/* bench_run.c: the timed runs behind `cpulm bench`, with llama-bench semantics for pp, tg and
 * pg, llama-batched-bench semantics for parallel sequences, and a TTFT test.
 *
 * Rules every test follows: a fresh context per test (so its size matches the test, as
 * llama-bench does per configuration); one untimed warm-up decode (it faults the mapped
 * weights in and wakes the thread pool); the KV cache is cleared before every repetition;
 * times are CLOCK_MONOTONIC wall times around the decode calls only. Prompt tokens are
 * random (uniform over the vocabulary), so no tokenizer work is timed.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "common.h"
#include "tools_api.h"

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static uint64_t rng_next(uint64_t *s) { /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

/* Scratch of one test: the context and batch arrays sized for its largest decode call. */
typedef struct run_state {
    cpulm_ctx *ctx;
    const bench_test *t;
    int32_t n_vocab, n_ub; /* tokens per prompt decode call */
    uint64_t rng;
    cpulm_token *tok;
    int32_t *seq;
    int8_t *want;
    cpulm_sampler *smp; /* greedy: the TTFT test's first token */
    cpulm_spec *spec;   /* BENCH_SPEC */
    const bench_runner *br;
    char *err;
    size_t cap;
} run_state;

static int32_t ubatch_of(const bench_test *t) {
    int32_t ub = t->n_ubatch < t->n_batch ? t->n_ubatch : t->n_batch;
    return ub < 1 ? 1 : ub;
}

static int fail_decode(run_state *s, cpulm_status st) {
    snprintf(s->err, s->cap, "decode failed: %s", cpulm_status_str(st));
    return -1;
}

/* Back to the state before a repetition: every sequence holds the depth tokens only.
 * 0, or -1 with the message when a sequence cannot be cut (a hybrid model's recurrent state
 * belongs to its whole length: only -d 0 can start over). */
static int clear_kv(run_state *s) {
    for (int32_t q = 0; q < s->t->n_parallel; q++) {
        cpulm_status st = cpulm_ctx_seq_rm(s->ctx, q, s->t->n_depth);
        if (st != CPULM_OK) {
            snprintf(s->err, s->cap, "cannot cut the sequences back to depth %d: %s",
                     (int)s->t->n_depth, cpulm_status_str(st));
            return -1;
        }
    }
    return 0;
}

/* n random tokens of sequence 0 in decode calls of at most n_ub tokens; logits for the last
 * token of each call (what llama-bench's prompt test asks for). */
static int decode_prompt(run_state *s, int32_t n) {
    for (int32_t i = 0; i < n; i += s->n_ub) {
        int32_t k = n - i < s->n_ub ? n - i : s->n_ub;
        for (int32_t j = 0; j < k; j++)
            s->tok[j] = (cpulm_token)(rng_next(&s->rng) % (uint64_t)s->n_vocab);
        cpulm_batch b = {.n = k, .token = s->tok};
        cpulm_status st = cpulm_ctx_decode(s->ctx, &b);
        if (st != CPULM_OK) return fail_decode(s, st);
    }
    return 0;
}

/* n tokens of sequence 0, one decode call each, logits every time. */
static int decode_gen(run_state *s, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        cpulm_token t = (cpulm_token)(rng_next(&s->rng) % (uint64_t)s->n_vocab);
        cpulm_batch b = {.n = 1, .token = &t};
        cpulm_status st = cpulm_ctx_decode(s->ctx, &b);
        if (st != CPULM_OK) return fail_decode(s, st);
    }
    return 0;
}

/* Prompts of all npl sequences, packed into decode calls of n_ub tokens (sequences share
 * calls, as llama-batched-bench does); logits for each sequence's last prompt token. */
static int decode_par_prompts(run_state *s) {
    const bench_test *t = s->t;
    int64_t total = (int64_t)t->n_parallel * t->n_prompt;
    for (int64_t i = 0; i < total; i += s->n_ub) {
        int32_t k = total - i < s->n_ub ? (int32_t)(total - i) : s->n_ub;
        for (int32_t j = 0; j < k; j++) {
            int64_t g = i + j;
            s->tok[j] = (cpulm_token)(rng_next(&s->rng) % (uint64_t)s->n_vocab);
            s->seq[j] = (int32_t)(g / t->n_prompt);
            s->want[j] = g % t->n_prompt == t->n_prompt - 1;
        }
        cpulm_batch b = {.n = k, .token = s->tok, .seq = s->seq, .want_logits = s->want};
        cpulm_status st = cpulm_ctx_decode(s->ctx, &b);
        if (st != CPULM_OK) return fail_decode(s, st);
    }
    return 0;
}

/* n_gen steps; each decodes one token of every sequence in one call, all with logits. */
static int decode_par_gen(run_state *s) {
    const bench_test *t = s->t;
    for (int32_t step = 0; step < t->n_gen; step++) {
        for (int32_t q = 0; q < t->n_parallel; q++) {
            s->tok[q] = (cpulm_token)(rng_next(&s->rng) % (uint64_t)s->n_vocab);
            s->seq[q] = q;
            s->want[q] = 1;
        }
        cpulm_batch b = {
            .n = t->n_parallel, .token = s->tok, .seq = s->seq, .want_logits = s->want};
        cpulm_status st = cpulm_ctx_decode(s->ctx, &b);
        if (st != CPULM_OK) return fail_decode(s, st);
    }
    return 0;
}

/* Prompt, then a greedy pick from its last logits: the first token a user would see. */
static int decode_ttft(run_state *s) {
    if (decode_prompt(s, s->t->n_prompt)) return -1;
    cpulm_token first = cpulm_sampler_sample(s->smp, cpulm_ctx_logits(s->ctx, 0));
    return first >= 0 ? 0 : -1;
}

static cpulm_token greedy_pick(void *user, const float *logits) {
    cpulm_sampler *smp = user;
    cpulm_token t = cpulm_sampler_sample(smp, logits);
    cpulm_sampler_accept(smp, t);
    return t;
}

/* BENCH_SPEC, untimed part: the text prompt into sequence 0 and the speculator. */
static int spec_prompt(run_state *s) {
    const bench_runner *br = s->br;
    for (int32_t i = 0; i < br->n_spec_prompt; i += s->n_ub) {
        int32_t k = br->n_spec_prompt - i < s->n_ub ? br->n_spec_prompt - i : s->n_ub;
        cpulm_batch b = {.n = k, .token = br->spec_prompt + i};
        cpulm_status st = cpulm_ctx_decode(s->ctx, &b);
        if (st != CPULM_OK) return fail_decode(s, st);
    }
    cpulm_sampler_reset(s->smp);
    cpulm_status st = cpulm_spec_begin(s->spec, br->spec_prompt, br->n_spec_prompt);
    return st == CPULM_OK ? 0 : fail_decode(s, st);
}

/* BENCH_SPEC, timed part: n_gen greedy tokens, as many per target pass as are accepted. */
static int spec_generate(run_state *s) {
    cpulm_spec_pick pick = {.fn = greedy_pick, .user = s->smp};
    cpulm_token out[257];
    out[0] = greedy_pick(s->smp, cpulm_ctx_logits(s->ctx, 0));
    int32_t got = 1, n = 1;
    while (got < s->t->n_gen) {
        cpulm_status st = cpulm_spec_step(s->spec, s->ctx, 0, out[n - 1], &pick, out, &n);
        if (st != CPULM_OK) return fail_decode(s, st);
        got += n;
    }
    return 0;
}

/* One repetition of an sg test: the statistics are this repetition's. */
static int run_rep_spec(run_state *s, bench_result *r, int i) {
    if (clear_kv(s) || spec_prompt(s)) return -1;
    cpulm_spec_stats a, b;
    cpulm_spec_stats_get(s->spec, &a);
    double t0 = now_ns();
    int rc = spec_generate(s);
    double t2 = now_ns();
    if (rc) return -1;
    cpulm_spec_stats_get(s->spec, &b);
    r->spec_passes = b.passes - a.passes + 1; /* + the prompt's pass, which gave token 0 */
    r->spec_drafted = b.drafted - a.drafted;
    r->spec_accepted = b.accepted - a.accepted;
    r->spec_emitted = b.emitted - a.emitted + 1;
    r->ns[i] = r->pp_ns[i] = t2 - t0;
    r->ts[i] = (double)s->t->n_gen / ((t2 - t0) * 1e-9);
    return 0;
}

/* One timed repetition of the test into slot i of r. */
static int run_rep(run_state *s, bench_result *r, int i) {
    const bench_test *t = s->t;
    if (t->kind == BENCH_SPEC) return run_rep_spec(s, r, i);
    if (clear_kv(s)) return -1;
    const uint64_t a0 = cpulm_ctx_attn_ns(s->ctx), m0 = cpulm_ctx_matmul_ns(s->ctx);
    double t0 = now_ns(), t1 = t0;
    int rc = 0;
    switch (t->kind) {
    case BENCH_PP: rc = decode_prompt(s, t->n_prompt); break;
    case BENCH_TG: rc = decode_gen(s, t->n_gen); break;
    case BENCH_PG: rc = decode_prompt(s, t->n_prompt) || decode_gen(s, t->n_gen); break;
    case BENCH_TTFT: rc = decode_ttft(s); break;
    case BENCH_SPEC: break; /* run_rep_spec */
    case BENCH_PAR:
        rc = decode_par_prompts(s);
        t1 = now_ns();
        rc = rc || decode_par_gen(s);
        break;
    }
    double t2 = now_ns();
    if (rc) return -1;
    r->ns[i] = t2 - t0;
    r->ts[i] = (double)bench_test_tokens(t) / ((t2 - t0) * 1e-9);
    r->attn_ns[i] = (double)(cpulm_ctx_attn_ns(s->ctx) - a0);
    r->mm_ns[i] = (double)(cpulm_ctx_matmul_ns(s->ctx) - m0);
    r->pp_ns[i] = t->kind == BENCH_PAR ? t1 - t0 : t2 - t0;
    r->tg_ns[i] = t->kind == BENCH_PAR ? t2 - t1 : 0;
    return 0;
}

static cpulm_ctx *make_ctx(const bench_runner *br, const bench_test *t, char *err, size_t cap) {
    cpulm_ctx_params cp = cli_ctx_default_params();
    int32_t n_ub = ubatch_of(t);
    /* + 1: the warm-up's generation step */
    cp.n_ctx = t->n_depth + t->n_prompt + t->n_gen + 1;
    cp.n_seq_max = t->n_parallel;
    /* a generation step of a parallel test is one call of n_parallel tokens */
    cp.n_batch = n_ub > t->n_parallel ? n_ub : t->n_parallel;
    cp.n_threads = t->n_threads;
    cp.n_threads_batch = t->n_threads_batch;
    cp.kv_type = t->type_k;
    cp.attn_fast = br->attn_fast;
    cp.n_outputs_max = t->n_parallel;
    if (t->kind == BENCH_SPEC) { /* a verification decodes draft_max + 1 tokens, all rows */
        int32_t k = br->spec->draft_max + 1;
        cp.n_ctx += k;
        cp.n_outputs_max = k;
        if (cp.n_batch < k) cp.n_batch = k;
    }
    cpulm_error e = {0};
    cpulm_ctx *ctx = cpulm_ctx_new(br->m, &cp, &e);
    if (!ctx) snprintf(err, cap, "%s", e.msg);
    return ctx;
}

/* Untimed: a short prompt call (up to 32 tokens: enough to take the batched path and touch
 * every weight) and one generation call. */
static int warm_up(run_state *s) {
    int32_t n = s->t->n_prompt < s->n_ub ? s->t->n_prompt : s->n_ub;
    if (n > 32) n = 32;
    int rc = (n > 0 ? decode_prompt(s, n) : 0) || decode_gen(s, 1);
    for (int32_t q = 0; q < s->t->n_parallel; q++)
        (void)cpulm_ctx_seq_rm(s->ctx, q, 0); /* clearing (p0 = 0) cannot fail */
    return rc;
}

/* Untimed, once per test: n_depth random tokens into sequence 0, copied to the others (so
 * every sequence of a parallel test starts at the depth). Repetitions truncate back to it. */
static int fill_depth(run_state *s) {
    int32_t d = s->t->n_depth;
    if (d <= 0) return 0;
    if (decode_prompt(s, d)) return -1;
    for (int32_t q = 1; q < s->t->n_parallel; q++)
        if (cpulm_ctx_seq_cp(s->ctx, 0, q, d) != CPULM_OK)
            return fail_decode(s, CPULM_ERR_INVALID_ARG);
    return 0;
}

static int valid_test(const bench_test *t, int reps, char *err, size_t cap) {
    if (reps < 1 || reps > BENCH_MAX_REPS || t->n_parallel < 1 || t->n_prompt < 0 || t->n_gen < 0 ||
        t->n_depth < 0 || bench_test_tokens(t) < 1 ||
        ((t->kind == BENCH_PAR || t->kind == BENCH_TTFT) && t->n_prompt < 1)) {
        snprintf(err, cap, "invalid test (repetitions 1..%d, lengths >= 1)", BENCH_MAX_REPS);
        return -1;
    }
    if (t->kind == BENCH_SPEC && (t->n_depth || t->n_prompt < 1)) {
        snprintf(err, cap, "an sg test needs a text prompt and no -d (its prompt is the depth)");
        return -1;
    }
    return 0;
}

/* The speculator of an sg test: the runner's parameters with the test's kind, the draft
 * model's context as large as the target's and with the test's threads. */
static int spec_open(run_state *s, const bench_test *t) {
    cpulm_spec_params p = *s->br->spec;
    p.kind = (cpulm_spec_kind)t->spec_kind;
    p.draft_ctx.n_ctx = cpulm_ctx_n_ctx(s->ctx);
    p.draft_ctx.n_threads = t->n_threads;
    p.draft_ctx.n_threads_batch = t->n_threads_batch;
    cpulm_error e = {0};
    if (!(s->spec = cpulm_spec_new(&p, s->br->m, &e))) snprintf(s->err, s->cap, "%s", e.msg);
    return s->spec ? 0 : -1;
}

/* The scratch, sampler and context of a run sized for test t (which s->t points to). */
static int state_open(run_state *s, const bench_runner *br, const bench_test *t, char *err,
                      size_t cap) {
    *s = (run_state){.t = t,
                     .n_vocab = cpulm_vocab_n(br->m),
                     .n_ub = ubatch_of(t),
                     .rng = br->seed ? br->seed : 0x9E3779B97F4A7C15ULL,
                     .br = br,
                     .err = err,
                     .cap = cap};
    size_t nb = (size_t)(s->n_ub > t->n_parallel ? s->n_ub : t->n_parallel);
    s->tok = malloc(sizeof(cpulm_token) * nb);
    s->seq = malloc(sizeof(int32_t) * nb);
    s->want = malloc(nb);
    cpulm_sampler_params sp = cpulm_sampler_default_params();
    sp.temp = 0;
    s->smp = cpulm_sampler_new(&sp, s->n_vocab);
    if (!s->tok || !s->seq || !s->want || !s->smp) {
        snprintf(err, cap, "out of memory");
        return -1;
    }
    if (!(s->ctx = make_ctx(br, t, err, cap))) return -1;
    return t->kind == BENCH_SPEC ? spec_open(s, t) : 0;
}

static void state_close(run_state *s) {
    cpulm_spec_free(s->spec);
    cpulm_ctx_free(s->ctx);
    cpulm_sampler_free(s->smp);
    free(s->tok);
    free(s->seq);
    free(s->want);
}

/* Runs the timed repetitions of t on the warmed, filled context of s into r. */
static int run_reps(const bench_runner *br, run_state *s, const bench_test *t, int reps,
                    bench_result *r) {
    memset(r, 0, sizeof *r);
    r->t = *t;
    bench_now_iso(r->test_time, sizeof r->test_time);
    r->n_threads_used = cpulm_ctx_threads(s->ctx);
    r->n_threads_batch_used = t->n_threads_batch > 0 ? t->n_threads_batch : r->n_threads_used;
    r->n_ctx = cpulm_ctx_n_ctx(s->ctx);
    r->ctx_bytes = cpulm_ctx_memory_bytes(s->ctx);
    s->t = t;
    for (int i = 0; i < reps; i++) {
        if (br->progress) br->progress(br->progress_user, t, i, reps);
        if (run_rep(s, r, i)) return -1;
        r->n_reps = i + 1;
    }
    return 0;
}

static int run_test(const bench_runner *br, const bench_test *t, int reps, bench_result *r,
                    char *err, size_t cap) {
    memset(r, 0, sizeof *r);
    r->t = *t;
    if (valid_test(t, reps, err, cap)) return -1;
    run_state s;
    int rc = state_open(&s, br, t, err, cap);
    if (!rc && br->progress) br->progress(br->progress_user, t, -1, reps);
    rc = rc || warm_up(&s) || fill_depth(&s) || run_reps(br, &s, t, reps, r);
    state_close(&s);
    return rc ? -1 : 0;
}

int bench_run_test(const bench_runner *br, const bench_test *t, int reps, bench_result *r,
                   char *err, size_t cap) {
    return run_test(br, t, reps, r, err, cap);
}

/* The context of a depth pair holds the depth and the longer of the two tests (+ 1 for the
 * warm-up's generation step, as make_ctx adds). */
int bench_run_depth(const bench_runner *br, const bench_test *pp, const bench_test *tg, int reps,
                    bench_result *rpp, bench_result *rtg, char *err, size_t cap) {
    memset(rpp, 0, sizeof *rpp);
    memset(rtg, 0, sizeof *rtg);
    if (valid_test(pp, reps, err, cap) || valid_test(tg, reps, err, cap)) return -1;
    if (pp->kind != BENCH_PP || tg->kind != BENCH_TG || pp->n_parallel != 1 ||
        tg->n_parallel != 1 || pp->n_depth != tg->n_depth) {
        snprintf(err, cap, "a depth pair is one pp and one tg test at the same depth");
        return -1;
    }
    bench_test size = *pp;
    size.n_prompt = pp->n_prompt > tg->n_gen ? pp->n_prompt : tg->n_gen;
    size.n_gen = 0;
    run_state s;
    int rc = state_open(&s, br, &size, err, cap);
    if (!rc && br->progress) br->progress(br->progress_user, pp, -1, reps);
    rc = rc || warm_up(&s) || fill_depth(&s) || run_reps(br, &s, pp, reps, rpp) ||
         run_reps(br, &s, tg, reps, rtg);
    state_close(&s);
    return rc ? -1 : 0;
}
