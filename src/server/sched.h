/* sched.h: the continuous-batching scheduler: the only user of the server's cpulm_ctx.
 *
 * One scheduler thread owns the context. Each step it builds one batch holding one token
 * for every generating sequence plus prompt chunks of newly admitted requests, calls
 * cpulm_ctx_decode once, then samples, detokenizes, applies stop strings and publishes
 * events. With speculative decoding (params.spec, sched_spec.h) a generating sequence's
 * draft rides in the same batch, and the sequence may receive several tokens per step.
 * Latency-aware prefill: the step time is modelled as fixed + a cost per generating
 * sequence + a cost per prompt token (cpulm_sched_model: calibrated at start, then tracked
 * from every step). While prompts wait next to generating streams, a step is short or long.
 * A short step carries the prompt tokens that fit in the target (max_step_ms, by default an
 * undisturbed decode step of all slots), none if nothing fits: it sets the median gap. A
 * long step aims at CPULM_SCHED_LONG_STEP targets (at least n_chunk / 16 prompt tokens, so
 * prompts always progress) and may delay at most 1 in prefill_every of the tokens streams
 * receive (cpulm_sched_long_step): it sets the tail gap. With no stream generating a step
 * takes n_chunk prompt tokens. Prompts get the budget in order of priority, then arrival;
 * requests are admitted in the same order. Requests join and leave between
 * steps, so a long prompt is spread over several steps instead of stalling running streams.
 *
 * Slots: n_parallel sequences, each with the full n_ctx (never divided). A request with n
 * choices occupies n slots: the prompt is evaluated once and its KV copied (seq_cp).
 * A free slot keeps the tokens its KV cache holds; a new request goes to the free slot with
 * the longest common prefix and only the rest of its prompt is evaluated.
 * KV memory: the cache is reserved address space whose pages follow the tokens held (a
 * slot that shrinks gives its pages back), so RAM is the tokens in running sequences plus
 * at most kv_idle tokens that free slots keep for prefix reuse (least recently freed
 * trimmed first), not n_parallel x n_ctx.
 * Prompt cache: whole blocks of every prompt (once evaluated) and of every finished
 * sequence are copied into a RAM cache shared by all slots (pcache.h, cache_ram_mib); a
 * new request restores the longest cached prefix beyond what its slot already holds.
 *
 * Threads: submit/cancel/drain/stats may be called from any thread (the server calls them
 * from its I/O thread); they only take short mutexes, never wait for a decode. Events are
 * queued under a mutex and announced by writing the eventfd returned by
 * cpulm_sched_event_fd (level: drain until empty after the fd becomes readable).
 */
#ifndef CPULM_SERVER_SCHED_H
#define CPULM_SERVER_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "server/metrics.h"
#include "spec/spec.h"

#define CPULM_SCHED_MAX_TOP           20 /* top_logprobs limit (OpenAI's) */
#define CPULM_SCHED_MAX_STOP          16
#define CPULM_SCHED_CACHE_BLOCK       32   /* tokens per prompt-cache block */
#define CPULM_SCHED_CACHE_RAM_DEFAULT 2048 /* MiB */
#define CPULM_SCHED_KV_IDLE_AUTO      (-2) /* kv_idle: n_ctx with the prompt cache, else all */
/* A long step's target, in short-step targets: the tail gap over the median. 2 leaves room
 * for step-time noise (a quiet machine's p99 step is ~1.2x its typical one) under the
 * serving bar of a p99 gap at most 3x the median (issue #16). */
#define CPULM_SCHED_LONG_STEP     2.0
#define CPULM_SCHED_PREFILL_EVERY 3 /* default prefill_every */

typedef struct cpulm_sched cpulm_sched;
struct cpulm_grammar;

typedef struct cpulm_sched_params {
    int32_t n_parallel;      /* slots; default 4 */
    int32_t n_ctx;           /* tokens per slot; 0 = min(model's context, 4096) */
    int32_t n_chunk;         /* most prompt tokens per step; default 256 */
    double max_step_ms;      /* target step time (the median inter-token gap) while prompts
                              * wait next to generating streams: a short step carries the
                              * prompt tokens that fit in it, a long one those that fit in
                              * CPULM_SCHED_LONG_STEP times it. 0: an undisturbed decode step
                              * of all n_parallel slots, measured; < 0: off (n_chunk every
                              * step) */
    int32_t prefill_every;   /* long steps delay at most 1 in N of the tokens generating
                              * streams receive (the others come after short steps); 1: every
                              * step long. Default 3 */
    int32_t max_queue;       /* requests waiting for slots before submit refuses; default 64 */
    int32_t n_threads;       /* decode threads; 0 = physical cores */
    int32_t n_threads_batch; /* threads for steps with prompt tokens; 0 = n_threads */
    int64_t
        cache_ram_mib; /* RAM prompt cache limit; default CPULM_SCHED_CACHE_RAM_DEFAULT; 0: off */
    int64_t kv_idle;   /* KV tokens free slots keep for prefix reuse, all together; -1: no
                        * limit; default CPULM_SCHED_KV_IDLE_AUTO: n_ctx when the prompt
                        * cache is on (it holds their blocks too), no limit when off */
    int64_t kv_budget; /* KV tokens the running requests may reserve in all; a request
                        * reserves n_choices x (prompt + max_tokens, or a whole context
                        * without max_tokens, at most n_ctx) and waits in the queue until that
                        * fits (first come first served: later ones do not overtake it); one
                        * request alone is always admitted. 0: no limit (default) */
    cpulm_kv_type kv_type;  /* KV cache type; default f16 */
    int attn_fast;          /* cpulm_ctx_params.attn_fast; default CPULM_ATTN_AUTO */
    int no_pin;             /* cpulm_ctx_params.no_pin */
    cpulm_metrics *metrics; /* borrowed, may be NULL; must outlive the scheduler */
    cpulm_ctx *embd_ctx;    /* borrowed, may be NULL: the pooled embeddings-only context that
                             * embedding requests run on (cpulm_sched_embed_submit); used by
                             * the scheduler thread only; must outlive the scheduler */
    cpulm_spec_params spec; /* speculative decoding (sched_spec.h): kind NONE (default) off;
                             * NGRAM or DRAFT (draft_model borrowed, must outlive the
                             * scheduler; draft_ctx gives its threads). draft_max, draft_min,
                             * ngram sizes, p_min, adaptive as in spec.h; verify_cost and
                             * draft_sp are not used (the cost comes from the step model, drafts
                             * are greedy) */
} cpulm_sched_params;

cpulm_sched_params cpulm_sched_default_params(void);

/* One generation request. Build with cpulm_sched_req_new, fill, submit. */
typedef struct cpulm_sched_req {
    uint64_t id;         /* caller's id, echoed in every event of this request */
    cpulm_token *prompt; /* owned (malloc'd) */
    int32_t n_prompt;
    int32_t n_choices;                /* 1..n_parallel */
    int32_t max_tokens;               /* > 0; -1: until an end token or the context is full */
    cpulm_sampler_params sp;          /* choice i samples with seed sp.seed + i; its
                                       * logit_bias points at bias (below) */
    cpulm_logit_bias *bias;           /* owned or NULL: sp.logit_bias's entries */
    char *stop[CPULM_SCHED_MAX_STOP]; /* owned byte strings (NUL bytes allowed: JSON's
                                       * "\u0000"), each followed by a NUL */
    /* the stop strings' lengths, > 0 */
    size_t stop_len[CPULM_SCHED_MAX_STOP];
    int32_t n_stop;
    int32_t logprobs;              /* -1: off; else 0..CPULM_SCHED_MAX_TOP alternatives per token */
    int ignore_eos;                /* keep generating past end-of-generation tokens */
    double timeout_s;              /* whole-request limit from submission; <= 0: none */
    struct cpulm_grammar *grammar; /* owned or NULL: every choice's output follows it (masked
                                    * sampling; end tokens only where it is complete) */
    int special;                   /* render control tokens as text (tool-call markers) */
    int32_t priority;              /* lower is served sooner (vLLM's convention); then first come
                                    * first served. Default 0 */
    /* speculation limits of this request (llama-server's speculative.n_max / n_min /
     * p_min): n_max 0 turns it off, at most the server's draft_max; < 0: the server's */
    int32_t spec_n_max, spec_n_min;
    float spec_p_min;
} cpulm_sched_req;

/* Returns owned (free with cpulm_sched_req_free unless submitted); NULL on OOM.
 * Defaults: 1 choice, max_tokens -1, greedy-free default sampler params, logprobs -1. */
cpulm_sched_req *cpulm_sched_req_new(void);
void cpulm_sched_req_free(cpulm_sched_req *r); /* NULL is a no-op */
/* Adds a stop string s[0..n) (copied; may contain NUL bytes). CPULM_ERR_INVALID_ARG when
 * empty or too many. */
cpulm_status cpulm_sched_req_add_stop(cpulm_sched_req *r, const char *s, size_t n);

/* One embedding request: n inputs (token arrays) whose pooled raw vectors the scheduler
 * writes to out. It runs as batches of whole inputs, one batch between two decode steps
 * (see sched.c: embed_step), so generation keeps going while a large request is embedded,
 * and a cancel stops it at the next batch. The caller fills the first block and owns the
 * memory; between a successful cpulm_sched_embed_submit and the CPULM_SCHED_EV_EMBED event
 * that hands it back (finished, failed or cancelled) only the scheduler touches it. */
typedef struct cpulm_sched_embed {
    uint64_t id;                                  /* caller's id (cancels and the event carry it) */
    int32_t n;                                    /* inputs, >= 1 */
    const cpulm_token *const *tok;                /* [n]: each input's tokens */
    const int32_t *n_tok;                         /* [n]: each >= 1 and <= the context's n_ctx */
    float *out;                                   /* [n * n_embd] */
    void (*destroy)(struct cpulm_sched_embed *e); /* frees it (and its owner) when the
                                                   * scheduler is freed with it inside */
    double timeout_s; /* limit from submission; <= 0: none. Past it: CANCELLED, timed_out */
    /* ---- the scheduler's ---- */
    struct cpulm_sched_embed *next;
    int32_t n_done;               /* inputs embedded so far */
    cpulm_status status;          /* when handed back: OK, CPULM_ERR_CANCELLED or the embed error */
    int timed_out;                /* CANCELLED because timeout_s ran out */
    double deadline;              /* monotonic seconds, from timeout_s; 0: none */
    struct cpulm_sched_event *ev; /* its EMBED event, allocated at submission (never lost) */
} cpulm_sched_embed;

typedef enum cpulm_sched_submit_result {
    CPULM_SCHED_ACCEPTED = 0,
    CPULM_SCHED_QUEUE_FULL, /* answer 429 */
    CPULM_SCHED_TOO_LONG,   /* prompt + 1 token does not fit n_ctx: answer 400 */
    CPULM_SCHED_INVALID,    /* no prompt tokens, bad n_choices or token ids: answer 400 */
    CPULM_SCHED_STOPPING,   /* shutting down: answer 503 */
} cpulm_sched_submit_result;

typedef enum cpulm_sched_ev_kind {
    CPULM_SCHED_EV_TEXT,   /* text (maybe empty) and/or one token's logprobs for a choice */
    CPULM_SCHED_EV_FINISH, /* a choice ended; finish says why */
    CPULM_SCHED_EV_DONE,   /* the whole request ended; usage counts set. Last event. */
    CPULM_SCHED_EV_ERROR,  /* the request failed (timeout, decode error, grammar). Last event. */
    CPULM_SCHED_EV_EMBED,  /* an embedding request comes back (embed; its status says how);
                            * the only event of one, sent even after a cancel */
} cpulm_sched_ev_kind;

typedef enum cpulm_sched_finish {
    CPULM_FINISH_STOP = 0,
    CPULM_FINISH_LENGTH = 1
} cpulm_sched_finish;

typedef struct cpulm_sched_top {
    cpulm_token token;
    float logprob;
} cpulm_sched_top;

/* Log-probabilities of one generated token under the model (log-softmax of the raw
 * logits, before penalties and temperature), with the n_top most likely alternatives. */
typedef struct cpulm_sched_lp {
    cpulm_token token;
    float logprob;
    int32_t n_top;
    cpulm_sched_top top[CPULM_SCHED_MAX_TOP];
} cpulm_sched_lp;

typedef struct cpulm_sched_event {
    struct cpulm_sched_event *next;
    uint64_t id;
    cpulm_sched_ev_kind kind;
    int32_t choice;
    /* FINISH: why, and 1 + the index in the request's stop[] of the stop string that
     * ended the choice (0 when none did) */
    cpulm_sched_finish finish;
    int32_t stop_word;
    int32_t n_prompt, n_cached, n_completion; /* DONE: usage (completion summed over choices) */
    int32_t n_drafted, n_draft_accepted;      /* DONE: draft tokens verified / accepted */
    double prompt_s, predicted_s;             /* DONE: to the first token, then the end */
    int error_status;                         /* ERROR: HTTP status to report (500, 504) */
    const char *error;                        /* ERROR: static message */
    cpulm_sched_embed *embed;                 /* EMBED: the request, the receiver's again */
    int has_lp;                               /* TEXT: lp is set */
    cpulm_sched_lp lp;
    size_t n_text; /* TEXT: UTF-8 bytes in text[] */
    char text[];   /* NUL-terminated */
} cpulm_sched_event;

/* Creates the context (all KV memory allocated here) and starts the scheduler thread,
 * which warms the model up with one decode before reporting ready. The model must
 * outlive the scheduler. Returns owned; NULL with err on failure. */
cpulm_sched *cpulm_sched_new(const cpulm_model *m, const cpulm_sched_params *p, cpulm_error *err);
/* Stops the thread (requests in flight are dropped without events) and frees everything.
 * NULL is a no-op. */
void cpulm_sched_free(cpulm_sched *s);
/* Asks the thread to stop after its current step and waits for it at most timeout_s.
 * Returns 1 when it stopped (cpulm_sched_free then returns at once), 0 when it is still
 * inside a step: the caller must then neither free the scheduler nor the model (process
 * exit ends it). For a bounded shutdown. */
int cpulm_sched_stop(cpulm_sched *s, double timeout_s);

/* Queues r. On CPULM_SCHED_ACCEPTED the scheduler owns r; otherwise the caller still does. */
cpulm_sched_submit_result cpulm_sched_submit(cpulm_sched *s, cpulm_sched_req *r);
/* Queues an embedding request (see cpulm_sched_embed). CPULM_SCHED_INVALID when the
 * scheduler has no embeddings context or e is malformed; QUEUE_FULL when max_queue
 * requests (generation and embedding) already wait; STOPPING after close. */
cpulm_sched_submit_result cpulm_sched_embed_submit(cpulm_sched *s, cpulm_sched_embed *e);
/* Drops the request with this id (waiting or running) as soon as the scheduler sees it;
 * no further events are guaranteed after the call, but some may already be queued (an
 * embedding request still comes back in its EMBED event, status CPULM_ERR_CANCELLED). */
void cpulm_sched_cancel(cpulm_sched *s, uint64_t id);
/* Refuses new submissions from now on (CPULM_SCHED_STOPPING); running work continues. */
void cpulm_sched_close(cpulm_sched *s);

/* Readable when events are queued (an eventfd; the caller reads it to re-arm). */
int cpulm_sched_event_fd(const cpulm_sched *s);
/* Takes all queued events, oldest first. Returns owned list: free each with free(). */
cpulm_sched_event *cpulm_sched_drain(cpulm_sched *s);
/* Blocks until an event is queued or timeout_ms passes (tests and simple clients). */
void cpulm_sched_wait(cpulm_sched *s, int timeout_ms);

typedef struct cpulm_sched_stats {
    int ready;                  /* warm-up done */
    int32_t n_waiting;          /* submitted, not yet in slots */
    int32_t n_running;          /* requests holding slots */
    int64_t kv_used;            /* tokens in KV of running sequences */
    int64_t kv_total;           /* n_parallel * n_ctx */
    int64_t kv_cached;          /* tokens in KV of all slots: running, and kept by free slots */
    uint64_t kv_token_bytes;    /* KV bytes of one token */
    uint64_t kv_reserved_bytes; /* address space of the whole cache (kv_total tokens) */
    int64_t kv_idle_max;        /* tokens free slots may keep (resolved kv_idle; -1: all) */
    int64_t kv_budget;          /* kv_budget (0: none) */
    int64_t kv_budget_used;     /* KV tokens the running requests reserve against it */
    int32_t n_parallel, n_ctx;
    int32_t n_threads;         /* the context's decode threads (physical cores by default) */
    uint64_t n_steps;          /* decode calls so far */
    uint64_t n_long_steps;     /* of which long steps (see max_step_ms) */
    uint64_t max_step_tokens;  /* largest batch so far */
    uint64_t n_prefill_tokens; /* prompt tokens evaluated so far (cached ones are not) */
    double step_ms_target;     /* the current short-step target (ms); 0 when off */
    double est_fixed_ms, est_gen_ms, est_token_ms; /* step time model (cpulm_sched_model):
                                                    * fixed, per generating sequence, per
                                                    * prompt token */
    int64_t cache_blocks, cache_blocks_max; /* prompt cache: blocks held / that fit its limit */
    int64_t cache_bytes, cache_max_bytes;   /* prompt cache: memory held / its limit */
    int32_t cache_block_tokens;  /* tokens per prompt-cache block; 0 when the cache is off */
    int32_t n_embed;             /* embedding requests queued or being embedded */
    uint64_t n_embed_batches;    /* embedding batches (decodes of the embeddings context) */
    uint64_t n_embed_inputs;     /* inputs embedded so far */
    uint64_t n_embed_tokens;     /* their tokens */
    int32_t spec_draft_max;      /* speculative decoding: its draft_max; 0: off */
    uint64_t spec_drafts;        /* drafts verified (a slot's step with drafted tokens) */
    uint64_t spec_draft_tokens;  /* tokens in them */
    uint64_t spec_accepted;      /* of those, accepted */
    uint64_t spec_draft_decodes; /* decodes of the draft model */
} cpulm_sched_stats;

void cpulm_sched_get_stats(cpulm_sched *s, cpulm_sched_stats *out);
/* The KV cache's pages in RAM, a shared page once (the memfd's blocks: one fstat; any
 * thread). Kept out of get_stats, which the readiness probe calls: without memfd this walks
 * the whole reservation with mincore, about 1 ms per GiB reserved. */
uint64_t cpulm_sched_kv_resident_bytes(cpulm_sched *s);
/* KV bytes slots map from another slot's pages (n > 1 siblings' prompt; any thread). */
uint64_t cpulm_sched_kv_shared_bytes(cpulm_sched *s);

/* ---- the step time model and the prefill budget (exposed for tests) ----
 * A step of n_gen generating sequences (one token each) and n_pre prompt tokens takes
 * fixed + gen * n_gen + pre * n_pre seconds. A generating sequence costs more than a prompt
 * token (its own logits row over the vocabulary, attention over its whole context): one
 * per-token cost for both made the budget too small under load (docs/SERVER.md). */
typedef struct cpulm_sched_model {
    double fixed, gen, pre;
} cpulm_sched_model;

/* The short step's target (seconds): max_step_ms when > 0, 0 (off) when < 0, else an
 * undisturbed decode step of all n_parallel slots. */
double cpulm_sched_target_step(const cpulm_sched_model *m, double max_step_ms, int32_t n_parallel);
/* Prompt tokens a step may carry next to n_gen generating sequences so that it takes about
 * target_s: at least floor, at most n_chunk; n_chunk when nothing generates or
 * target_s <= 0. */
int32_t cpulm_sched_prefill_budget(const cpulm_sched_model *m, double target_s, int32_t n_gen,
                                   int32_t n_chunk, int32_t floor);
/* Whether a step of n_gen generating streams is long (want: prompts are waiting). Each
 * stream token earns 1/every of credit (kept within cap); a long step spends one per
 * stream it delays. So over any stretch of steps at most about 1 in `every` of the tokens
 * streams receive come after a long step, and long steps go where few streams run. */
int cpulm_sched_long_step(double *credit, int32_t n_gen, int want, int32_t every, int32_t cap);
/* Folds one measured step into m (exponentially weighted; see sched.c). */
void cpulm_sched_model_observe(cpulm_sched_model *m, int32_t n_gen, int32_t n_pre, double dt);

/* Speculation's cost at the current batch (sched_spec.h). A drafted token adds one row to a
 * step of n_gen generating rows: gen seconds more, while the step gives its n_gen streams a
 * token each in fixed + gen * n_gen. So a drafted token costs
 *     c = gen * n_gen / (fixed + gen * n_gen)
 * tokens at the step's rate: the adaptive length's cost per draft (cpulm_spec_best_len: K
 * drafts accepted at rate a pay when their expected extra tokens exceed K c, i.e. the step's
 * throughput rises). c is small while a step is bound by reading the weights (few streams:
 * fixed dominates) and nears 1 when it is compute-bound (many streams: a verified row costs
 * what it can return at best). 1 when nothing generates or the model is unknown. */
double cpulm_sched_draft_cost(const cpulm_sched_model *m, int32_t n_gen);
/* Whether slots may draft at all (probes included) in a step whose drafted token costs c
 * (the draft model's share added): c < CPULM_SCHED_SPEC_COST_MAX. At 0.9 even the acceptance
 * prompt lookup reaches on copied text (0.93-0.97 here) gains at most 2.6-3.7% (K = 1-2),
 * less than the error of a model calibrated on a shared machine, while every drafted row
 * delays all the step's streams; the adaptive length's 1-token probes of backed-off slots
 * would only add rows. Below it, each slot's adaptive length decides. */
#define CPULM_SCHED_SPEC_COST_MAX 0.9
int cpulm_sched_spec_open(double c);

/* ---- stop strings (exposed for tests) ----
 * text[0..len) is a choice's generated text, of which [0..emitted) was already sent;
 * stop[i] has stop_len[i] bytes (byte strings: a NUL byte is matched like any other).
 * Returns how far output may now go: the start of the earliest stop string found in
 * text[emitted..) (then *matched = 1), else the start of the longest tail that is a
 * proper prefix of some stop string (it must be held back), else len. */
size_t cpulm_sched_stop_scan(const char *text, size_t len, size_t emitted, char *const *stop,
                             const size_t *stop_len, int32_t n_stop, int *matched);

#endif
