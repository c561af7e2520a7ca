/* sched_spec.h: speculative decoding inside the continuous-batching scheduler (sched.c).
 *
 * Each step, every generating slot may put a draft of K tokens after its pending token in
 * the step's one batch (the other slots' tokens and prompt chunks ride in the same decode),
 * with a logits row for each; the scheduler then picks tokens row by row with the slot's own
 * sampler and grammar, as plain decoding would, and stops at the first token that differs
 * from the draft: the accepted drafts and that token are emitted, the rest of the draft is
 * cut from the slot's KV sequence. Drafts are point masses (n-gram lookup, or a draft model
 * drafting greedily), so every emitted token is the one plain decoding would pick from the
 * same logits with the same sampler draws: greedy output is identical and sampling keeps
 * the target's distribution (see spec/spec.h).
 *
 * This module drafts: n-grams from the slot's own prompt and output, or a draft model whose
 * context holds one sequence per slot and drafts for all slots together (one decode per
 * draft position). It also keeps each slot's adaptive draft length (cpulm_spec_adapt: a slot
 * whose drafts are rarely accepted backs off to plain decoding) and the counters.
 * Used by the scheduler thread only.
 */
#ifndef CPULM_SERVER_SCHED_SPEC_H
#define CPULM_SERVER_SCHED_SPEC_H

#include <stdint.h>

#include "server/metrics.h"
#include "spec/spec.h"

typedef struct cpulm_sched_spec cpulm_sched_spec;

/* p->kind must not be NONE. The draft model (kind DRAFT) must outlive it; its context gets
 * n_parallel sequences of n_ctx tokens and p->draft_ctx's threads. metrics may be NULL.
 * Returns owned, or NULL with err set (a vocabulary mismatch: CPULM_ERR_INVALID_ARG). */
cpulm_sched_spec *cpulm_sched_spec_new(const cpulm_spec_params *p, const cpulm_model *target,
                                       int32_t n_parallel, int32_t n_ctx, cpulm_metrics *metrics,
                                       cpulm_error *err);
void cpulm_sched_spec_free(cpulm_sched_spec *sp); /* NULL is a no-op */

/* Slot `slot` starts a request: its adaptive length starts afresh, and its limits are the
 * request's (n_max: most drafted tokens, 0 turns speculation off, < 0 the server's
 * draft_max; n_min < 0 and p_min < 0: the server's). */
void cpulm_sched_spec_begin(cpulm_sched_spec *sp, int32_t slot, int32_t n_max, int32_t n_min,
                            float p_min);

/* What one slot offers a step: hist[0..n_hist) = the tokens in its KV sequence, then its
 * pending token; k_cap = the most tokens it may draft now (room in the context, tokens left
 * to max_tokens); <= 0: the slot drafts nothing (not generating, or no room). */
typedef struct cpulm_sched_spec_in {
    const cpulm_token *hist;
    int32_t n_hist;
    int32_t k_cap;
} cpulm_sched_spec_in;

/* Drafts for every slot of in[0..n_parallel). cost: one drafted token's verification row
 * at this step's batch (cpulm_sched_draft_cost; the draft model's own cost is added here).
 * With the adaptive length, no slot drafts when the sum is not below
 * CPULM_SCHED_SPEC_COST_MAX (cpulm_sched_spec_open), and the slots' lengths and probe
 * counts stay as they were; else each slot's adaptive length decides. Afterwards
 * cpulm_sched_spec_draft gives each slot's draft (0 tokens when none). */
void cpulm_sched_spec_draft_all(cpulm_sched_spec *sp, const cpulm_sched_spec_in *in, double cost);
const cpulm_token *cpulm_sched_spec_draft(const cpulm_sched_spec *sp, int32_t slot, int32_t *n);

/* Slot `slot` verified its k > 0 drafted tokens and accepted the first n_acc: feeds its
 * adaptive length and the counters (and the vLLM-named metrics). */
void cpulm_sched_spec_learn(cpulm_sched_spec *sp, int32_t slot, int32_t k, int32_t n_acc);

typedef struct cpulm_sched_spec_stats {
    uint64_t drafts;        /* verified drafts (slot steps with at least one drafted token) */
    uint64_t draft_tokens;  /* tokens in them */
    uint64_t accepted;      /* of those, accepted */
    uint64_t draft_decodes; /* decodes of the draft model */
} cpulm_sched_spec_stats;

/* Any thread: the counters are atomics. */
void cpulm_sched_spec_get_stats(cpulm_sched_spec *sp, cpulm_sched_spec_stats *out);

#endif
