/* hcache.h: the RAM prompt cache for hybrid models (qwen35, qwen35moe, qwen3next): state
 * checkpoints at block boundaries, so a prompt that shares a prefix with an earlier one
 * (a growing chat, a shared RAG or system prefix) starts from the recurrent state after
 * that prefix instead of evaluating it again.
 *
 * A hybrid model's recurrent state stands for a sequence's whole length: it cannot be cut
 * back to a shorter prefix. So the scheduler stops a prompt's evaluation at chosen block
 * boundaries (checkpoint points, cpulm_hcache_clip) and there saves the prefix's attention
 * KV as ordinary prompt-cache blocks and the recurrent state as a checkpoint on the last
 * block (cpulm_pcache_set_ckpt). A later prompt restores the deepest checkpointed block of
 * its cached prefix: the KV blocks up to it, then the state.
 *
 * Checkpoint points of a prompt of n tokens, positions p with 0 < p < n, p a multiple of the
 * block (B tokens):
 *  - the last block boundary before its last token, ((n - 1) / B) * B: the next turn of a
 *    conversation (whose prompt extends this one's) or a repeat restores it;
 *  - where it leaves the cached chain it matched (the fork): the second prompt on a shared
 *    prefix saves the state there, every later one restores it;
 *  - every `every` tokens: a checkpoint is large (48 MiB for a 9B model), so `every` spaces
 *    them so that checkpoints take about as much memory as the KV blocks they ride on.
 * The cache's LRU eviction bounds the total (--cache-ram).
 * Single-threaded: the scheduler thread is its only user. */
#ifndef CPULM_SERVER_HCACHE_H
#define CPULM_SERVER_HCACHE_H

#include <stdint.h>

#include "cpulm.h"
#include "server/pcache.h"

typedef struct cpulm_hcache cpulm_hcache;

/* For ctx's model (it must have recurrent layers) and blocks of block_tokens; returns owned,
 * NULL on OOM or a model without recurrent state. */
cpulm_hcache *cpulm_hcache_new(cpulm_ctx *ctx, int32_t block_tokens);
void cpulm_hcache_free(cpulm_hcache *h); /* NULL is a no-op */

/* The spacing of intermediate checkpoints: B * ceil(ckpt_bytes / block_bytes), at least B. */
int32_t cpulm_hcache_every_for(uint64_t ckpt_bytes, uint64_t block_bytes, int32_t B);
int32_t cpulm_hcache_every(const cpulm_hcache *h);

/* Whether sequence length p is a checkpoint point of a prompt of n_prompt tokens that left
 * the cached chain at fork (0: none). */
int cpulm_hcache_is_point(int32_t p, int32_t n_prompt, int32_t fork, int32_t B, int32_t every);

/* A prompt chunk of k tokens after position start: shortened to end at the first checkpoint
 * point inside it (one ending exactly there is kept whole). */
int32_t cpulm_hcache_clip(const cpulm_hcache *h, int32_t start, int32_t k, int32_t n_prompt,
                          int32_t fork);

/* After a decode left sequence seq at length n with toks[0..n) of a prompt of n_prompt
 * tokens: at a checkpoint point, saves its KV blocks and its state in pc. Returns 1 when a
 * checkpoint was taken (or was there), 0 when n is no point, -1 when it could not be saved. */
int cpulm_hcache_after(cpulm_hcache *h, cpulm_pcache *pc, int32_t seq, const cpulm_token *toks,
                       int32_t n, int32_t n_prompt, int32_t fork);

/* Sequence seq holds the first `have` tokens of prompt (its state is theirs). Restores the
 * deepest checkpointed block of prompt[0..limit) cached in pc beyond `have`: its KV blocks,
 * then its state. Returns the tokens seq now holds (have when nothing deeper is cached; 0
 * when a restore failed half-way and the sequence was cleared). *fork: where the prompt
 * leaves the cached chain when no checkpoint is there yet, else 0. */
int32_t cpulm_hcache_restore(cpulm_hcache *h, cpulm_pcache *pc, int32_t seq,
                             const cpulm_token *prompt, int32_t limit, int32_t have, int32_t *fork);

#endif
