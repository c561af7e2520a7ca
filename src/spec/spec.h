/* spec.h: speculative decoding for one sequence of a target context. A drafter proposes the
 * next K tokens cheaply (n-grams found earlier in the prompt and output, or a small draft
 * model with the same vocabulary); the target model evaluates the pending token and the K
 * drafts in one decode (the prompt path's GEMMs: one pass over the weights for K + 1
 * tokens), and the drafts are checked against its logits row by row. Accepted drafts stay
 * in the KV cache, the rest are rolled back (cpulm_ctx_seq_rm), and the target's own token
 * at the first mismatch (or after the last draft) ends the step: 1 to K + 1 tokens per pass.
 *
 * Exactness: with point-mass drafts (n-grams; a draft model that drafts greedily) every
 * emitted token is drawn by the caller's own picking function from the target's logits row
 * for that position, after the same history, so the tokens are those plain decoding would
 * give with the same logits (same sampler, same RNG draws): greedy output is identical, and
 * sampling keeps the target's distribution (for a point mass, "accept with p(d), else draw
 * from p without d" is the same as "draw from p, accept if it is d"). A draft model that
 * samples uses the speculative sampling rule (accept d with min(1, p(d)/q(d)), else draw
 * from norm(max(0, p - q))), which keeps the target's distribution but not its draws.
 * Not thread-safe; one cpulm_spec per sequence. */
#ifndef CPULM_SPEC_SPEC_H
#define CPULM_SPEC_SPEC_H

#include "cpulm.h"

typedef enum cpulm_spec_kind {
    CPULM_SPEC_NONE = 0,
    CPULM_SPEC_NGRAM = 1, /* prompt lookup: the tokens that followed an earlier match */
    CPULM_SPEC_DRAFT = 2, /* a draft model */
} cpulm_spec_kind;

typedef struct cpulm_spec_params {
    cpulm_spec_kind kind;
    int32_t draft_max; /* most tokens drafted per target pass (16) */
    int32_t draft_min; /* a shorter draft is not verified: the step is a plain decode (0) */
    int32_t ngram_max; /* n-gram lookup: longest key tried first (3) ... */
    int32_t ngram_min; /* ... down to this one (2) */
    int adaptive;      /* 1 (default): the draft length follows the acceptance rate */
    float p_min;       /* greedy draft model: stop drafting below this probability (0: off) */
    float verify_cost; /* one more token in the verification decode, in plain decodes (0.2;
                        * the adaptive length's cost model, docs/TOOLS.md) */
    int measure_cost;  /* 1 (default): the adaptive length's costs come from timing the
                        * decodes (verify_cost and the draft's bytes ratio are the priors) */
    const cpulm_model *draft_model; /* CPULM_SPEC_DRAFT: borrowed, must outlive the spec */
    cpulm_ctx_params draft_ctx;     /* the draft model's context (n_ctx, threads) */
    cpulm_sampler_params draft_sp;  /* its sampling when the target samples (penalties
                                     * are ignored) */
} cpulm_spec_params;

cpulm_spec_params cpulm_spec_default_params(void);

typedef struct cpulm_spec_stats {
    int64_t passes;      /* target decodes made by steps */
    int64_t drafted;     /* draft tokens the target verified */
    int64_t accepted;    /* of those, accepted */
    int64_t emitted;     /* tokens steps returned (accepted + one per pass) */
    int64_t draft_evals; /* draft-model decodes (catch-up batches and drafted tokens) */
    int32_t draft_len;   /* the adaptive draft length now (0: backed off) */
    double cost;         /* a drafted token's cost in plain decodes, as the adaptive length
                          * uses it now (measured, or the prior) */
} cpulm_spec_stats;

/* How the caller picks a token from a logits row, as plain decoding does: fn draws the next
 * token (sampler, grammar mask, ...) and records it (cpulm_sampler_accept, grammar state).
 * It is called exactly once per emitted token, in order. smp: the sampler fn draws with,
 * when fn applies no mask and records nothing else; with it, a draft model samples its
 * drafts and the speculative sampling rule verifies them (the spec then calls
 * cpulm_sampler_dist / _uniform / _accept on smp itself for drafted positions). NULL: a
 * draft model drafts greedily. */
typedef struct cpulm_spec_pick {
    cpulm_token (*fn)(void *user, const float *logits);
    void *user;
    cpulm_sampler *smp;
} cpulm_spec_pick;

typedef struct cpulm_spec cpulm_spec;

/* Checks the draft model's vocabulary against target's (same size, same text for every id,
 * else CPULM_ERR_INVALID_ARG naming the first difference) and makes its context.
 * Returns owned, or NULL with err filled. */
cpulm_spec *cpulm_spec_new(const cpulm_spec_params *p, const cpulm_model *target, cpulm_error *err);
void cpulm_spec_free(cpulm_spec *s); /* NULL is a no-op */
/* The check cpulm_spec_new makes of a draft model: CPULM_OK, or CPULM_ERR_INVALID_ARG with
 * err naming the first difference. */
cpulm_status cpulm_spec_check_vocab(const cpulm_model *target, const cpulm_model *draft,
                                    cpulm_error *err);

/* Starts a sequence whose target KV cache holds toks[0..n) (the prompt): the draft model
 * evaluates them now, keeping the part of its cache that toks shares with the previous
 * history (a chat's earlier turns). The statistics keep adding up. Errors of the draft's
 * decode pass through (CPULM_ERR_KV_FULL: its context is too small). */
cpulm_status cpulm_spec_begin(cpulm_spec *s, const cpulm_token *toks, int32_t n);

/* One target pass on sequence seq of ctx. pending: the last emitted token, not yet in the
 * cache. Decodes it with a draft (ctx needs n_batch and n_outputs_max >= draft_max + 1;
 * the draft is cut to the room left in the context) and writes the emitted tokens, at
 * least one, to out[0..*n_out) (cap draft_max + 1): the accepted drafts, then the target's
 * token, which is the next pending one. Errors of the decodes pass through
 * (CPULM_ERR_KV_FULL when pending does not fit); the cache is then as before the call. */
cpulm_status cpulm_spec_step(cpulm_spec *s, cpulm_ctx *ctx, int32_t seq, cpulm_token pending,
                             const cpulm_spec_pick *pick, cpulm_token *out, int32_t *n_out);

void cpulm_spec_stats_get(const cpulm_spec *s, cpulm_spec_stats *out);

/* "none", "ngram", "draft" <-> enum (llama.cpp's "ngram-simple" is ngram). */
cpulm_status cpulm_spec_kind_parse(const char *name, cpulm_spec_kind *out);
const char *cpulm_spec_kind_name(cpulm_spec_kind k);

/* Prompt lookup: the most recent earlier occurrence of the last n tokens of hist[0..n_hist)
 * (n from n_max down to n_min), and up to k_max tokens that followed it into out.
 * Returns how many (0: no match). */
int32_t cpulm_spec_ngram_draft(const cpulm_token *hist, int32_t n_hist, int32_t n_min,
                               int32_t n_max, int32_t k_max, cpulm_token *out);

/* The adaptive draft length: the K in [1, k_max] that maximizes expected tokens per pass
 * (1 - a^(K+1)) / (1 - a) over the pass's cost 1 + K * cost_per_draft, for acceptance
 * rate a; 0 when no K beats a plain decode. */
int32_t cpulm_spec_best_len(double a, double cost_per_draft, int32_t k_max);

/* The adaptive draft length of one sequence: a decayed acceptance rate (a prior of one
 * half, soon forgotten), best_len over it, and while that is 0 (drafts do not pay: backed
 * off) a 1-token probe keeps the rate current: after CPULM_SPEC_PROBE_EVERY passes, and
 * each rejected probe doubles the wait up to CPULM_SPEC_PROBE_MAX passes (a useless draft
 * then costs under 1% of the plain passes; an accepted probe or drafting again resets it).
 * The step above and the server's scheduler (one per slot) share it. */
#define CPULM_SPEC_PROBE_EVERY 16
#define CPULM_SPEC_PROBE_MAX   256
typedef struct cpulm_spec_adapt {
    double succ, tried; /* decayed counts of accepted / verified draft tokens */
    int32_t since_probe, last_len;
    int32_t probe_every; /* passes between probes while backed off */
} cpulm_spec_adapt;

void cpulm_spec_adapt_init(cpulm_spec_adapt *a);
/* The draft length for the next pass (0: a plain decode), at most k_max. */
int32_t cpulm_spec_adapt_len(cpulm_spec_adapt *a, double cost_per_draft, int32_t k_max);
/* k tokens were drafted and verified, the first n_acc accepted. */
void cpulm_spec_adapt_learn(cpulm_spec_adapt *a, int32_t k, int32_t n_acc);

#endif
