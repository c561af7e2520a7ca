/* pcache.h: the server's RAM prompt cache: KV state of token prefixes kept after requests
 * end, shared by every slot, looked up by the longest cached prefix of a new prompt.
 *
 * The cache holds blocks of block_tokens tokens. Block i of a sequence is identified by
 * its parent (block i-1, or the root) and its own tokens, so a block stands for the whole
 * prefix that ends with it (a hash chain, as vLLM's automatic prefix caching does). Each
 * block owns a copy of its tokens' KV state (block_bytes, an opaque blob the caller fills
 * and reads back), so entries never alias a live sequence and a restored block is plain
 * data: nothing to pin, nothing to copy on write.
 *
 * Memory is bounded by max_bytes (blobs, checkpoints and bookkeeping). When a new block does not
 * fit, the least recently used block without children is evicted; a lookup or store touches the
 * blocks of its chain deepest first, so a chain's ancestors stay younger than its leaves and
 * prefixes shared by many prompts (system prompts) survive longest. Single-threaded: the scheduler
 * thread is its only user.
 */
#ifndef CPULM_SERVER_PCACHE_H
#define CPULM_SERVER_PCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "cpulm.h"

typedef struct cpulm_pcache cpulm_pcache;

/* Returns owned; NULL on OOM or bad sizes (block_tokens < 1, block_bytes < 1). A cache
 * whose max_bytes cannot hold one block is valid and never stores anything. */
cpulm_pcache *cpulm_pcache_new(int32_t block_tokens, size_t block_bytes, uint64_t max_bytes);
void cpulm_pcache_free(cpulm_pcache *pc); /* NULL is a no-op */

int32_t cpulm_pcache_block_tokens(const cpulm_pcache *pc);
int64_t cpulm_pcache_capacity(const cpulm_pcache *pc); /* blocks that fit max_bytes */

/* Finds the longest run of cached whole blocks that prefixes toks[0..n): stores at most
 * max_blocks blob pointers in blobs[] (valid until the next store or free) and returns how
 * many blocks matched. Marks them recently used. */
int32_t cpulm_pcache_lookup(cpulm_pcache *pc, const cpulm_token *toks, int32_t n,
                            const uint8_t **blobs, int32_t max_blocks);

/* Fills dst with the KV state of block index `block` (positions [block*B, (block+1)*B)).
 * Returns 0 on success; nonzero stops the store. */
typedef int (*cpulm_pcache_fill_fn)(void *user, int32_t block, uint8_t *dst);

/* Makes sure every whole block of toks[0..n) is cached: existing ones are touched, missing
 * ones are created (evicting old blocks) and filled through fill. Stops early, keeping
 * what is stored, when memory cannot be found or fill fails. Returns the number of whole
 * blocks of toks now cached. */
int32_t cpulm_pcache_store(cpulm_pcache *pc, const cpulm_token *toks, int32_t n,
                           cpulm_pcache_fill_fn fill, void *user);

/* The fill of blocks read from a context: user is a cpulm_pcache_src, the block's KV state
 * comes from cpulm_ctx_seq_state_get over its positions. */
typedef struct cpulm_pcache_src {
    cpulm_ctx *ctx;
    int32_t seq, block_tokens;
} cpulm_pcache_src;
int cpulm_pcache_fill_from_ctx(void *user, int32_t block, uint8_t *dst);

/* Checkpoints (hybrid models: a recurrent state stands for a whole prefix, so a prefix is
 * only usable up to a block that carries the state after its last token). */

/* Fills dst with a checkpoint. Returns 0 on success. */
typedef int (*cpulm_pcache_ckpt_fn)(void *user, uint8_t *dst);

/* Gives the block that ends toks[0..n) (n a multiple of block_tokens; the whole chain
 * cached, cpulm_pcache_store) a checkpoint of `bytes` bytes through fill, evicting old blocks
 * for room; a block that has one keeps it. Touches the chain. Returns 0 when the block holds
 * a checkpoint now; -1 (nothing changed) when the chain is not cached, memory cannot be
 * found or fill fails. The checkpoint goes when its block is evicted. */
int cpulm_pcache_set_ckpt(cpulm_pcache *pc, const cpulm_token *toks, int32_t n, size_t bytes,
                          cpulm_pcache_ckpt_fn fill, void *user);

/* cpulm_pcache_lookup, also giving each matched block's checkpoint in ckpts[] (NULL: none;
 * valid as blobs are). ckpts may be NULL. */
int32_t cpulm_pcache_lookup_ckpt(cpulm_pcache *pc, const cpulm_token *toks, int32_t n,
                                 const uint8_t **blobs, const uint8_t **ckpts, int32_t max_blocks);

typedef struct cpulm_pcache_stats {
    int64_t n_blocks; /* blocks held */
    uint64_t bytes;   /* memory held (blobs and bookkeeping) */
    uint64_t max_bytes;
    uint64_t n_evicted; /* blocks evicted so far */
    int64_t n_ckpts;    /* checkpoints held (their bytes are in bytes) */
} cpulm_pcache_stats;

void cpulm_pcache_get_stats(const cpulm_pcache *pc, cpulm_pcache_stats *out);

#endif
