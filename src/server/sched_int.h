/* sched_int.h: the scheduler's state, shared by its files (not an API: sched.h is):
 * sched.c (slots, steps, admission, lifecycle), sched_emb.c (embedding requests),
 * sched_cost.c (the step-cost model). The thread ownership and slot invariants are sched.c's
 * header comment. */
#ifndef CPULM_SERVER_SCHED_INT_H
#define CPULM_SERVER_SCHED_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "base/clock.h"
#include "base/buf.h"
#include "grammar/grammar.h"
#include "server/hcache.h"
#include "server/pcache.h"
#include "server/sched.h"
#include "server/sched_spec.h"

enum { SLOT_FREE, SLOT_PREFILL, SLOT_SIBLING, SLOT_GEN };

#define SEED_FROM_CLOCK 0xFFFFFFFFu /* cpulm_sampler_params.seed asking for a clock seed */

typedef struct sreq {
    cpulm_sched_req *r;
    struct sreq *next;
    double t_arrival, t_first, deadline;
    double t_start; /* when its first choice took a slot */
    uint64_t order; /* submission number: first come first served within a priority */
    int32_t *slots; /* [n_choices]: slot of each choice */
    int32_t n_live; /* choices still generating */
    int32_t n_completion, n_cached;
    int32_t n_drafted, n_accepted; /* speculation: draft tokens verified / accepted */
    int64_t kv_need;               /* KV tokens reserved while running (kv_budget) */
} sreq;

typedef struct slot {
    int state;
    sreq *q; /* NULL when free */
    int32_t choice;
    cpulm_token *cache; /* [n_ctx]: tokens in this sequence's KV cache */
    int32_t n_cache;
    cpulm_sampler *smp;
    cpulm_grammar_matcher *gm; /* the request's grammar state, or NULL */
    cpulm_detok dt;
    cpulm_buf text; /* generated text so far; [0..n_emitted) was published */
    size_t n_emitted;
    int32_t stop_hit; /* 1 + the stop string that ended the choice, else 0 */
    cpulm_token last; /* sampled, not yet decoded */
    int32_t n_gen;
    int32_t out_row;    /* logits row in the current step, -1 if none */
    int32_t n_in_batch; /* tokens this slot put in the current batch */
    int32_t n_draft;    /* of those, drafted tokens after `last` (speculation) */
    double t_last;
    uint64_t freed_at; /* when the slot last became free (a release counter) */
    int32_t ckpt_fork; /* hybrid: where its prompt left the prompt cache's chain (hcache.h) */
} slot;

struct cpulm_sched {
    const cpulm_model *model;
    cpulm_ctx *ctx;
    cpulm_sched_params p;
    int32_t n_vocab, n_ctx, n_batch;
    int64_t kv_idle;         /* tokens free slots may keep in all; -1: no limit */
    uint64_t kv_token_bytes; /* KV bytes of one token (all layers, K and V) */
    int whole_only; /* hybrid model: a sequence's recurrent state is kept whole or cleared */

    /* ---- guarded by mu ---- */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sreq *in_head, *in_tail;
    uint64_t *cancels;
    int32_t n_cancels, cap_cancels;
    int32_t n_queued; /* submitted, not yet admitted to slots */
    uint64_t n_submitted;
    int stop, closed;
    int exited;                                   /* the thread left its loop (exit_cv) */
    pthread_cond_t exit_cv;                       /* cpulm_sched_stop waits on it */
    cpulm_sched_embed *emb_in_head, *emb_in_tail; /* submitted embedding requests */

    /* ---- scheduler thread state ---- */
    slot *slots; /* [n_parallel] */
    sreq *wait_head, *wait_tail;
    sreq *dead;                               /* ended this step; freed at its end */
    uint64_t n_released;                      /* slots freed so far (slot.freed_at) */
    int32_t n_active;                         /* requests holding slots */
    int64_t kv_promised;                      /* their kv_need, summed */
    cpulm_token *b_tok;                       /* [n_batch] */
    int32_t *b_seq;                           /* [n_batch] */
    int8_t *b_want;                           /* [n_batch] */
    int32_t *tmp_idx;                         /* [n_parallel] */
    cpulm_grammar_vocab *gvocab;              /* token trie for grammar masks (built at start) */
    cpulm_pcache *pc;                         /* RAM prompt cache; NULL when off */
    cpulm_hcache *hc;                         /* hybrid: state checkpoints in pc; else NULL */
    const uint8_t **blobs;                    /* [n_ctx / block]: lookup results */
    cpulm_sched_event *pend_head, *pend_tail; /* events of this iteration */
    cpulm_sched_model est;                    /* step time model (seconds), see cpulm_sched_model */
    double long_credit; /* stream tokens a long step may still delay (cpulm_sched_long_step) */
    cpulm_sched_embed *emb_head, *emb_tail; /* embedding requests, served round-robin */
    double emb_pre;                         /* seconds per token of an embedding batch */
    cpulm_sched_spec *spec;                 /* speculative decoding; NULL when off */
    cpulm_sched_spec_in *spec_in;           /* [n_parallel] */
    int32_t spec_rows;                      /* most drafted tokens per slot and step (0: off) */

    /* ---- event queue, guarded by ev_mu ---- */
    pthread_mutex_t ev_mu;
    pthread_cond_t ev_cv;
    cpulm_sched_event *ev_head, *ev_tail;
    int efd;

    /* ---- stats ---- */
    atomic_int ready, st_running, st_waiting;
    atomic_llong st_kv_used, st_kv_cached, st_kv_promised;
    atomic_ullong st_steps, st_max_step, st_long_steps;
    atomic_llong st_pc_blocks, st_pc_bytes;
    atomic_ullong st_prefill; /* prompt tokens evaluated */
    _Atomic double st_target, st_fixed, st_gen, st_pre;
    atomic_int st_emb; /* embedding requests submitted and not yet handed back */
    atomic_ullong st_emb_batches, st_emb_inputs, st_emb_tokens;

    pthread_t thread;
    int thread_started;
};

static inline double target_step(const cpulm_sched *s) {
    return cpulm_sched_target_step(&s->est, s->p.max_step_ms, s->p.n_parallel);
}

/* ---- embedding requests (sched_emb.c) ---- */

/* One batch of the first embedding request in line, which then goes to the back of the
 * line (between two decode steps). */
void cpulm_sched_emb_step(cpulm_sched *s);
/* Hands back the embedding request id as cancelled; 0 when it is not in line. */
int cpulm_sched_emb_cancel(cpulm_sched *s, uint64_t id);
/* Frees an embedding request (its event, then its owner's destroy). */
void cpulm_sched_emb_destroy(cpulm_sched_embed *e);
void cpulm_sched_emb_free_list(cpulm_sched_embed *e);

#endif
