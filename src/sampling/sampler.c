/* sampler.c: turns a logits row into one token id through a fixed pipeline
 *   logit bias -> penalties -> top-k -> typical -> top-p -> min-p -> temperature -> draw
 * (temp <= 0: greedy argmax of the penalised logits, ties to the lowest id). The order is
 * llama.cpp's (its bias sampler comes first, typical between top-k and top-p).
 *
 * One sampler per sequence: it owns the RNG and the penalty history. Every buffer is
 * allocated in cpulm_sampler_new; sample() and accept() never allocate. The library's
 * qsort is avoided on purpose (glibc's may malloc): candidates are ordered with a
 * hand-written binary heap, popped lazily, so the common small top-k costs
 * O(n_vocab + k log n_vocab) rather than a full sort.
 *
 * With no cut at all (top-k off, top-p 1, min-p 0: the OpenAI defaults the server uses)
 * nothing needs an order, so the draw walks the penalised logits in id order instead
 * (draw_all): the kernels' SIMD softmax instead of a heap build and two libm exps per
 * token, which matters when a server step samples 16 streams over a 128k vocabulary on
 * one thread (31M -> 3.8M instructions per token at 128k, docs/SERVER.md).
 *
 * Candidate order is total and deterministic: higher logit first, equal logits by lower id.
 * NaN logits are treated as -inf (never drawn); if some logits are +inf, only those tokens
 * remain, with equal weight. If no token has a finite (or +inf) logit, sample() returns 0.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpulm.h"
#include "kernels/kernels.h"

/* LLAMA_DEFAULT_SEED's convention: this value asks for a seed drawn from the clock. */
#define SEED_FROM_CLOCK 0xFFFFFFFFu

typedef struct cand {
    int32_t id;
    float logit; /* penalised (temperature is applied only in the draw) */
    float p;     /* probability after the whole pipeline (valid in the kept set) */
} cand;

struct cpulm_sampler {
    cpulm_sampler_params p;
    int32_t n_vocab;
    uint64_t seed;   /* the effective seed (never SEED_FROM_CLOCK after _new) */
    uint64_t rng[4]; /* xoshiro256** state */

    /* penalty history: counts[id] = occurrences of id among the window's tokens.
     * With repeat_last_n > 0 the window is the ring; with -1 it is every accepted token. */
    int32_t *counts;   /* [n_vocab] */
    cpulm_token *ring; /* [repeat_last_n] or NULL */
    int32_t ring_len, ring_head;

    /* logit bias: bias[id] is added to logits[id] for the n_bias distinct ids in bias_ids */
    float *bias;       /* [n_vocab] or NULL */
    int32_t *bias_ids; /* [n_bias] */
    int32_t n_bias;

    cand *heap; /* [n_vocab] max-heap of candidates not yet popped */
    cand *kept; /* [n_vocab] popped candidates, in descending order */
    int32_t n_heap, n_kept;

    /* result of the last sample(), for cpulm_sampler_last_prob */
    int last_greedy; /* greedy: probabilities are the softmax of pen[] over everything */
    float *pen;      /* [n_vocab] penalised logits of the last sample() (greedy mode) */
    double pen_max;  /* pen[] of the greedy pick */
    /* kept[slot[id]] holds id's result iff stamp[id] == epoch: O(1) lookups without
     * clearing an n_vocab array per sample */
    int32_t *slot;   /* [n_vocab] */
    uint32_t *stamp; /* [n_vocab] */
    uint32_t epoch;
    /* draw_all's result: p(id) = all_p[id] / all_sum */
    int last_all;
    float *all_p;    /* [n_vocab] weights of the last draw_all */
    double all_sum;  /* their sum (1 up to rounding) */
    double *all_pre; /* [n_vocab / ALL_BLOCK + 1]: running weight sum before each block */
};

#define ALL_BLOCK 1024 /* tokens per block of draw_all's prefix sums */

cpulm_sampler_params cpulm_sampler_default_params(void) {
    cpulm_sampler_params p;
    memset(&p, 0, sizeof p);
    p.temp = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    p.seed = SEED_FROM_CLOCK;
    p.typical_p = 1.0f;
    return p;
}

/* ---- PRNG: xoshiro256** seeded through splitmix64 (both public-domain algorithms) ---- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(uint64_t s[4]) {
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

static void rng_seed(uint64_t s[4], uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        s[i] = splitmix64(&x); /* never all zero: splitmix is a bijection */
}

/* Uniform double in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4]) {
    return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

static uint64_t clock_seed(const void *salt) {
    struct timespec ts;
    if (timespec_get(&ts, TIME_UTC) == 0) ts.tv_sec = ts.tv_nsec = 0;
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    x ^= (uint64_t)(uintptr_t)salt; /* two samplers made in the same ns still differ */
    uint64_t seed = splitmix64(&x);
    return seed == SEED_FROM_CLOCK ? seed + 1 : seed;
}

/* ---- lifecycle ---- */

/* Copies p's logit_bias into a dense row (duplicates add up; -inf stays -inf) and the list
 * of distinct ids, so sample() touches only the biased tokens. counts[] (still zero) marks
 * the ids already listed and is cleared again. Returns -1 on OOM. */
static int copy_bias(cpulm_sampler *s, const cpulm_logit_bias *lb, int32_t n) {
    s->p.logit_bias = NULL; /* borrowed: never kept */
    s->p.n_logit_bias = 0;
    if (!lb || n <= 0) return 0;
    s->bias = calloc((size_t)s->n_vocab, sizeof *s->bias);
    s->bias_ids = malloc((size_t)n * sizeof *s->bias_ids);
    if (!s->bias || !s->bias_ids) return -1;
    for (int32_t i = 0; i < n; i++) {
        cpulm_token t = lb[i].token;
        float b = lb[i].bias;
        if (t < 0 || t >= s->n_vocab || b != b) continue;
        float *d = &s->bias[t];
        *d = *d == -INFINITY || b == -INFINITY ? -INFINITY : *d + b;
        if (!s->counts[t]) s->bias_ids[s->n_bias++] = t;
        s->counts[t] = 1;
    }
    for (int32_t i = 0; i < s->n_bias; i++)
        s->counts[s->bias_ids[i]] = 0;
    return 0;
}

cpulm_sampler *cpulm_sampler_new(const cpulm_sampler_params *p, int32_t n_vocab) {
    if (n_vocab <= 0) return NULL;
    cpulm_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = p ? *p : cpulm_sampler_default_params();
    if (!(s->p.repeat_penalty > 0.0f)) s->p.repeat_penalty = 1.0f; /* <= 0 or NaN: off */
    if (s->p.repeat_last_n < -1) s->p.repeat_last_n = 0;
    s->n_vocab = n_vocab;
    size_t n = (size_t)n_vocab;
    s->counts = calloc(n, sizeof *s->counts);
    s->heap = malloc(n * sizeof *s->heap);
    s->kept = malloc(n * sizeof *s->kept);
    s->pen = malloc(n * sizeof *s->pen);
    s->slot = malloc(n * sizeof *s->slot);
    s->stamp = calloc(n, sizeof *s->stamp);
    s->all_pre = malloc((n / ALL_BLOCK + 2) * sizeof *s->all_pre);
    s->all_p = malloc(n * sizeof *s->all_p);
    if (s->p.repeat_last_n > 0) s->ring = malloc((size_t)s->p.repeat_last_n * sizeof *s->ring);
    if (!s->counts || !s->heap || !s->kept || !s->pen || !s->slot || !s->stamp || !s->all_pre ||
        !s->all_p || (s->p.repeat_last_n > 0 && !s->ring))
        goto fail;
    if (copy_bias(s, s->p.logit_bias, s->p.n_logit_bias) < 0) goto fail;
    s->seed = s->p.seed == SEED_FROM_CLOCK ? clock_seed(s) : s->p.seed;
    rng_seed(s->rng, s->seed);
    return s;
fail:
    cpulm_sampler_free(s);
    return NULL;
}

void cpulm_sampler_free(cpulm_sampler *s) {
    if (!s) return;
    free(s->counts);
    free(s->ring);
    free(s->heap);
    free(s->kept);
    free(s->pen);
    free(s->slot);
    free(s->stamp);
    free(s->all_pre);
    free(s->all_p);
    free(s->bias);
    free(s->bias_ids);
    free(s);
}

/* Forgets the history and restarts the RNG from the same seed, so a reset sampler
 * repeats its draws. */
void cpulm_sampler_reset(cpulm_sampler *s) {
    memset(s->counts, 0, (size_t)s->n_vocab * sizeof *s->counts);
    s->ring_len = s->ring_head = 0;
    s->n_kept = s->n_heap = 0;
    s->last_greedy = s->last_all = 0;
    rng_seed(s->rng, s->seed);
}

void cpulm_sampler_accept(cpulm_sampler *s, cpulm_token t) {
    if (t < 0 || t >= s->n_vocab) return; /* not a vocabulary token: nothing to penalise */
    int32_t n = s->p.repeat_last_n;
    if (n == 0) return;
    if (n > 0) {
        if (s->ring_len == n)
            s->counts[s->ring[s->ring_head]]--; /* evict the oldest */
        else
            s->ring_len++;
        s->ring[s->ring_head] = t;
        s->ring_head = (s->ring_head + 1) % n;
    }
    s->counts[t]++;
}

/* ---- penalties ---- */

static int penalties_active(const cpulm_sampler_params *p) {
    return p->repeat_last_n != 0 && (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f ||
                                     p->frequency_penalty != 0.0f);
}

/* llama.cpp's rule for the repeat penalty (dividing a negative logit would raise it), then
 * OpenAI's: logit -= count * frequency + (count > 0) * presence. NaN becomes -inf. */
static float penalise(const cpulm_sampler *s, float l, int32_t c) {
    const cpulm_sampler_params *p = &s->p;
    if (c > 0) {
        l = l <= 0.0f ? l * p->repeat_penalty : l / p->repeat_penalty;
        l -= (float)c * p->frequency_penalty + p->presence_penalty;
    }
    return isnan(l) ? -INFINITY : l;
}

/* pen[] = the logits, biased then penalised, with masked tokens at -inf. The bias goes
 * before the penalties, as llama.cpp chains them; only the biased ids are redone. */
static void apply_penalties(const cpulm_sampler *s, const float *logits, const uint32_t *allow) {
    int active = penalties_active(&s->p);
    if (!active && !allow) { /* the common case, in a loop the compiler vectorizes */
        for (int32_t i = 0; i < s->n_vocab; i++)
            s->pen[i] = logits[i] == logits[i] ? logits[i] : -INFINITY;
    } else {
        for (int32_t i = 0; i < s->n_vocab; i++) {
            if (allow && !((allow[i >> 5] >> (i & 31)) & 1)) /* masked out by a grammar */
                s->pen[i] = -INFINITY;
            else
                s->pen[i] = penalise(s, logits[i], active ? s->counts[i] : 0);
        }
    }
    for (int32_t k = 0; k < s->n_bias; k++) {
        int32_t i = s->bias_ids[k];
        if (allow && !((allow[i >> 5] >> (i & 31)) & 1)) continue;
        s->pen[i] = penalise(s, logits[i] + s->bias[i], active ? s->counts[i] : 0);
    }
}

/* ---- candidate heap (max by logit, ties to the lower id) ---- */

static int cand_before(const cand *a, const cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static void sift_down(cand *h, int32_t n, int32_t i) {
    cand x = h[i];
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_before(&h[c + 1], &h[c])) c++;
        if (!cand_before(&h[c], &x)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

/* Moves the best remaining candidate to the end of the kept list. */
static void pop_one(cpulm_sampler *s) {
    s->kept[s->n_kept++] = s->heap[0];
    s->heap[0] = s->heap[--s->n_heap];
    if (s->n_heap > 0) sift_down(s->heap, s->n_heap, 0);
}

/* Fills the heap with the drawable tokens: finite logits, or only the +inf ones if any. */
static void build_heap(cpulm_sampler *s) {
    int any_posinf = 0;
    for (int32_t i = 0; i < s->n_vocab; i++)
        any_posinf |= s->pen[i] == INFINITY;
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        float l = s->pen[i];
        if (any_posinf ? l != INFINITY : !isfinite(l)) continue;
        s->heap[n].id = i;
        s->heap[n].logit = any_posinf ? 0.0f : l;
        s->heap[n].p = 0.0f;
        n++;
    }
    s->n_heap = n;
    s->n_kept = 0;
    for (int32_t i = n / 2 - 1; i >= 0; i--)
        sift_down(s->heap, n, i);
}

/* ---- cuts (each leaves kept[0..n_kept) sorted; later stages only shorten it) ---- */

/* Softmax normaliser sum(exp(l - max)) over kept and, if include_heap, the heap too. */
static double softmax_sum(const cpulm_sampler *s, double max, int include_heap) {
    double sum = 0.0;
    for (int32_t i = 0; i < s->n_kept; i++)
        sum += exp((double)s->kept[i].logit - max);
    if (include_heap)
        for (int32_t i = 0; i < s->n_heap; i++)
            sum += exp((double)s->heap[i].logit - max);
    return sum;
}

/* top-k: keep the k best. Precondition: the heap is non-empty, nothing popped yet. */
static void cut_top_k(cpulm_sampler *s) {
    if (s->p.top_k > 0 && s->p.top_k < s->n_heap) {
        while (s->n_kept < s->p.top_k)
            pop_one(s);
        s->n_heap = 0; /* the rest is cut */
    }
}

static int typical_on(const cpulm_sampler_params *p) {
    return p->typical_p > 0.0f && p->typical_p < 1.0f;
}

/* Locally typical sampling (Meister et al. 2022, as llama.cpp does it): with p the softmax
 * of the candidates (temperature 1) and H its entropy, keep the tokens whose surprise
 * -log p is closest to H, in that order, until their probability reaches typical_p (the
 * crossing token stays). Needs every candidate, so it sorts them all (only when on). The
 * kept set is then put back in logit order for the later cuts. */
static void cut_typical(cpulm_sampler *s) {
    if (!typical_on(&s->p)) return;
    while (s->n_heap > 0)
        pop_one(s);
    double max = s->kept[0].logit, sum = softmax_sum(s, max, 0), ent = 0.0;
    double lsum = log(sum);
    for (int32_t i = 0; i < s->n_kept; i++) {
        double lp = (double)s->kept[i].logit - max - lsum;
        ent -= exp(lp) * lp;
    }
    /* heap by closeness to H: the key is -|-log p - H| (the heap pops the largest first);
     * p carries the logit meanwhile */
    for (int32_t i = 0; i < s->n_kept; i++) {
        double lp = (double)s->kept[i].logit - max - lsum;
        s->heap[i] =
            (cand){.id = s->kept[i].id, .logit = (float)-fabs(-lp - ent), .p = s->kept[i].logit};
    }
    int32_t n = s->n_heap = s->n_kept, m = 0;
    for (int32_t i = n / 2 - 1; i >= 0; i--)
        sift_down(s->heap, n, i);
    double cum = 0.0;
    s->n_kept = 0;
    while (s->n_heap > 0 && !(cum > s->p.typical_p)) { /* kept[] is free: all in the heap */
        pop_one(s);
        cum += exp((double)s->kept[m].p - max) / sum;
        m++;
    }
    for (int32_t i = 0; i < m; i++) /* back to logit order: a heap of the kept ones */
        s->heap[i] = (cand){.id = s->kept[i].id, .logit = s->kept[i].p, .p = 0.0f};
    s->n_heap = m;
    s->n_kept = 0;
    for (int32_t i = m / 2 - 1; i >= 0; i--)
        sift_down(s->heap, m, i);
    while (s->n_heap > 0)
        pop_one(s);
}

/* top-p: of the candidates left, the shortest prefix whose probability (softmax over
 * them) reaches top_p, as llama.cpp counts it (the crossing token stays). */
static void cut_top_p(cpulm_sampler *s) {
    if (!(s->p.top_p < 1.0f)) return;
    if (s->n_kept == 0) pop_one(s);
    double max = s->kept[0].logit;
    double sum = softmax_sum(s, max, 1);
    double cum = 0.0;
    int32_t i = 0;
    for (;; i++) {
        if (i == s->n_kept) {
            if (s->n_heap == 0) break; /* rounding kept cum below top_p: keep everything */
            pop_one(s);                /* top-k was off: order only as far as top-p needs */
        }
        cum += exp((double)s->kept[i].logit - max) / sum;
        if (cum >= s->p.top_p) {
            i++;
            break;
        }
    }
    s->n_kept = i;
    s->n_heap = 0;
}

/* min-p: keep tokens whose probability is at least min_p times the best one's, i.e.
 * logit >= max + log(min_p). Pops lazily when nothing before sorted the candidates. */
static void cut_min_p(cpulm_sampler *s) {
    if (!(s->p.min_p > 0.0f)) return;
    if (s->n_kept == 0) pop_one(s);
    double min_logit = (double)s->kept[0].logit + log((double)s->p.min_p);
    int32_t i = 1;
    for (;; i++) {
        if (i == s->n_kept) {
            if (s->n_heap == 0) break;
            if (s->heap[0].logit < min_logit) break;
            pop_one(s);
        }
        if (s->kept[i].logit < min_logit) break;
    }
    s->n_kept = i;
    s->n_heap = 0;
}

/* ---- sampling ---- */

/* Nothing allowed has a finite logit: the lowest allowed id (0 if none at all). */
/* The cuts of the chain, in order, over the heap (sampling and cpulm_sampler_dist alike). */
static void cut_all(cpulm_sampler *s) {
    cut_top_k(s);
    cut_typical(s);
    cut_top_p(s);
    cut_min_p(s);
}

static cpulm_token first_allowed(const cpulm_sampler *s, const uint32_t *allow) {
    for (int32_t i = 0; i < s->n_vocab; i++)
        if ((allow[i >> 5] >> (i & 31)) & 1) return i;
    return 0;
}

static cpulm_token argmax(const cpulm_sampler *s) {
    int32_t best = 0;
    for (int32_t i = 1; i < s->n_vocab; i++)
        if (s->pen[i] > s->pen[best]) best = i; /* strict: ties keep the lower id */
    return best;
}

/* Greedy mode keeps the penalised logits for last_prob(), which sums their softmax when
 * asked: summed at every pick it was ~4% of a speculative run's generation on stories260K
 * (n_vocab exps per token) for a probability nothing in a plain run reads. */
static cpulm_token sample_greedy(cpulm_sampler *s) {
    cpulm_token t = argmax(s);
    s->last_greedy = 1;
    s->pen_max = s->pen[t];
    return t;
}

/* The softmax denominator of the last greedy pick (0 when its logit is not finite). */
static double greedy_sum(const cpulm_sampler *s) {
    double sum = 0.0;
    if (isfinite(s->pen_max))
        for (int32_t i = 0; i < s->n_vocab; i++)
            sum += exp((double)s->pen[i] - s->pen_max);
    return sum;
}

/* Records where each kept token sits, for cpulm_sampler_last_prob. */
static void index_kept(cpulm_sampler *s) {
    if (++s->epoch == 0) { /* wrapped: old stamps could alias the new epoch */
        memset(s->stamp, 0, (size_t)s->n_vocab * sizeof *s->stamp);
        s->epoch = 1;
    }
    for (int32_t i = 0; i < s->n_kept; i++) {
        s->slot[s->kept[i].id] = i;
        s->stamp[s->kept[i].id] = s->epoch;
    }
}

/* Moves the still unsorted candidates (no cut asked for an order) into the kept set, as they
 * are, and returns the sum of its weights exp((l - *max) * *inv_t): in double, so there is
 * no overflow however small temp is. */
static double kept_weight_sum(cpulm_sampler *s, double *max, double *inv_t) {
    while (s->n_heap > 0)
        s->kept[s->n_kept++] = s->heap[--s->n_heap];
    double sum = 0.0;
    *inv_t = 1.0 / (double)s->p.temp;
    *max = -INFINITY;
    for (int32_t i = 0; i < s->n_kept; i++)
        if (s->kept[i].logit > *max) *max = s->kept[i].logit;
    for (int32_t i = 0; i < s->n_kept; i++)
        sum += exp(((double)s->kept[i].logit - *max) * *inv_t);
    return sum;
}

/* Temperature, softmax over the kept set, then one uniform draw along the cumulative sum. */
static cpulm_token draw(cpulm_sampler *s) {
    double max, inv_t, sum = kept_weight_sum(s, &max, &inv_t);
    double u = rng_uniform(s->rng) * sum, cum = 0.0;
    int32_t pick = -1;
    for (int32_t i = 0; i < s->n_kept; i++) {
        double w = exp(((double)s->kept[i].logit - max) * inv_t);
        cum += w;
        s->kept[i].p = (float)(w / sum);
        if (pick < 0 && u < cum) pick = i;
    }
    if (pick < 0) pick = s->n_kept - 1; /* u landed in the rounding slack at the top */
    index_kept(s);
    return s->kept[pick].id;
}

/* ---- no cuts: the whole distribution, in id order ---- */

static int no_cuts(const cpulm_sampler *s) {
    const cpulm_sampler_params *p = &s->p;
    return !(p->top_k > 0 && p->top_k < s->n_vocab) && !(p->top_p < 1.0f) && !(p->min_p > 0.0f) &&
           !typical_on(p);
}

/* Fills all_p with the distribution at temperature temp: the kernels' softmax (SIMD) of
 * (pen - max) / temp, or equal weights on the +inf tokens if there are any. Masked and
 * -inf tokens get exactly 0. Returns 0 when no token has a finite or +inf logit. */
static int all_probs(cpulm_sampler *s) {
    const float *pen = s->pen;
    float *w = s->all_p, lane[8], max = -INFINITY;
    int32_t i = 0;
    for (int k = 0; k < 8; k++) /* 8 lanes so the compiler can use vector max */
        lane[k] = -INFINITY;
    for (; i + 8 <= s->n_vocab; i += 8)
        for (int k = 0; k < 8; k++)
            lane[k] = pen[i + k] > lane[k] ? pen[i + k] : lane[k];
    for (; i < s->n_vocab; i++)
        max = pen[i] > max ? pen[i] : max;
    for (int k = 0; k < 8; k++)
        max = lane[k] > max ? lane[k] : max;
    if (max == -INFINITY) return 0;
    if (max == INFINITY) {
        for (i = 0; i < s->n_vocab; i++)
            w[i] = pen[i] == INFINITY ? 1.0f : 0.0f;
        return 1;
    }
    const float inv_t = 1.0f / s->p.temp;
    for (i = 0; i < s->n_vocab; i++)
        w[i] = (pen[i] - max) * inv_t; /* <= 0; -inf stays -inf */
    cpulm_kernels_get()->softmax(s->n_vocab, w);
    for (i = 0; i < s->n_vocab; i++)
        w[i] = pen[i] == -INFINITY ? 0.0f : w[i];
    return 1;
}

/* Sum of w[0..n) in 8 float lanes (vectorizable; n <= ALL_BLOCK keeps it accurate). */
static double block_sum(const float *w, int32_t n) {
    float lane[8] = {0};
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            lane[k] += w[i + k];
    double sum = 0.0;
    for (; i < n; i++)
        sum += w[i];
    for (int k = 0; k < 8; k++)
        sum += lane[k];
    return sum;
}

/* The draw over every token, in id order: block sums give the running sum at each block
 * start, the uniform picks a block, and only that block is walked token by token. (The
 * walk adds in another order than block_sum: if rounding leaves u past the block's last
 * weighted token, that token is drawn, an error of the order of 1e-7 of one block.)
 * Returns -1 when no token can be drawn. */
static cpulm_token draw_all(cpulm_sampler *s) {
    if (!all_probs(s)) return -1;
    const float *w = s->all_p;
    int32_t nb = (s->n_vocab + ALL_BLOCK - 1) / ALL_BLOCK;
    double cum = 0.0;
    for (int32_t b = 0; b < nb; b++) {
        s->all_pre[b] = cum;
        int32_t end = (b + 1) * ALL_BLOCK < s->n_vocab ? (b + 1) * ALL_BLOCK : s->n_vocab;
        cum += block_sum(w + b * ALL_BLOCK, end - b * ALL_BLOCK);
    }
    s->all_pre[nb] = cum;
    s->all_sum = cum;
    s->last_all = 1;
    double u = rng_uniform(s->rng) * cum;
    int32_t b = 0;
    while (b + 1 < nb && !(u < s->all_pre[b + 1]))
        b++;
    cpulm_token last = -1;
    cum = s->all_pre[b];
    int32_t end = (b + 1) * ALL_BLOCK < s->n_vocab ? (b + 1) * ALL_BLOCK : s->n_vocab;
    for (int32_t i = b * ALL_BLOCK; i < end; i++) {
        if (!(w[i] > 0.0f)) continue;
        cum += w[i];
        if (u < cum) return i;
        last = i;
    }
    /* rounding: u is past the block's walk (or the block had no weight; then the last
     * token with weight anywhere) */
    for (int32_t i = s->n_vocab - 1; last < 0 && i >= 0; i--)
        if (w[i] > 0.0f) last = i;
    return last;
}

cpulm_token cpulm_sampler_sample(cpulm_sampler *s, const float *logits) {
    return cpulm_sampler_sample_masked(s, logits, NULL);
}

cpulm_token cpulm_sampler_sample_masked(cpulm_sampler *s, const float *logits,
                                        const uint32_t *allow) {
    apply_penalties(s, logits, allow);
    s->last_all = 0;
    if (!(s->p.temp > 0.0f)) {
        cpulm_token t = sample_greedy(s);
        return allow && !((allow[t >> 5] >> (t & 31)) & 1) ? first_allowed(s, allow) : t;
    }
    s->last_greedy = 0;
    if (no_cuts(s)) {
        s->n_kept = 0;
        cpulm_token t = draw_all(s);
        if (t >= 0) return t;
        s->last_all = 0;
        return allow ? first_allowed(s, allow) : 0; /* documented fallback */
    }
    build_heap(s);
    if (s->n_heap == 0) return allow ? first_allowed(s, allow) : 0; /* documented fallback */
    cut_all(s);
    return draw(s);
}

float cpulm_sampler_last_prob(const cpulm_sampler *s, cpulm_token t) {
    if (t < 0 || t >= s->n_vocab) return 0.0f;
    if (s->last_greedy) {
        const double sum = isfinite(s->pen[t]) ? greedy_sum(s) : 0.0;
        if (!(sum > 0.0)) return 0.0f;
        return (float)(exp((double)s->pen[t] - s->pen_max) / sum);
    }
    if (s->last_all) return (float)(s->all_p[t] / s->all_sum);
    if (s->n_kept == 0 || s->stamp[t] != s->epoch) return 0.0f;
    return s->kept[s->slot[t]].p;
}

/* ---- the distribution itself, for speculative decoding ---- */

/* One point mass (the documented fallbacks and greedy). */
static void dist_point(const cpulm_sampler *s, cpulm_token t, float *probs) {
    memset(probs, 0, (size_t)s->n_vocab * sizeof *probs);
    probs[t] = 1.0f;
}

/* draw()'s weights over the kept set (and what is left in the heap), normalized. */
static void dist_kept(cpulm_sampler *s, float *probs) {
    double max, inv_t, sum = kept_weight_sum(s, &max, &inv_t);
    memset(probs, 0, (size_t)s->n_vocab * sizeof *probs);
    for (int32_t i = 0; i < s->n_kept; i++) {
        double w = exp(((double)s->kept[i].logit - max) * inv_t);
        s->kept[i].p = (float)(w / sum);
        probs[s->kept[i].id] = s->kept[i].p;
    }
    index_kept(s);
}

void cpulm_sampler_dist(cpulm_sampler *s, const float *logits, const uint32_t *allow,
                        float *probs) {
    apply_penalties(s, logits, allow);
    s->last_all = 0;
    if (!(s->p.temp > 0.0f)) {
        cpulm_token t = sample_greedy(s);
        if (allow && !((allow[t >> 5] >> (t & 31)) & 1)) t = first_allowed(s, allow);
        dist_point(s, t, probs);
        return;
    }
    s->last_greedy = 0;
    if (no_cuts(s)) {
        s->n_kept = 0;
        if (!all_probs(s)) {
            dist_point(s, allow ? first_allowed(s, allow) : 0, probs);
            return;
        }
        double sum = 0.0;
        for (int32_t i = 0; i < s->n_vocab; i++)
            sum += s->all_p[i];
        s->all_sum = sum;
        s->last_all = 1;
        for (int32_t i = 0; i < s->n_vocab; i++)
            probs[i] = (float)(s->all_p[i] / sum);
        return;
    }
    build_heap(s);
    if (s->n_heap == 0) {
        dist_point(s, allow ? first_allowed(s, allow) : 0, probs);
        return;
    }
    cut_all(s);
    dist_kept(s, probs);
}

double cpulm_sampler_uniform(cpulm_sampler *s) {
    return rng_uniform(s->rng);
}
