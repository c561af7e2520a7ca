/* attention.h: the attention driver of a layer (attention.c): every batch row over the KV
 * cache in any of its types, GQA-grouped, masked causally and by an optional sliding window,
 * with optional attention sinks, by the tile ops of kernels.h (attn_*); and the scratch it
 * needs as a function of the shape only, so memory.c sizes it without the forward pass (the
 * header includes no context: it is a sizing header of the pass, like moe.h). */
#ifndef CPULM_MODEL_ATTENTION_H
#define CPULM_MODEL_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"
#include "../kernels/kernels.h"
#include "model.h"

/* Query rows per block (tokens x group heads): each K/V tile is converted once per block
 * (at 64 rows the conversions were ~20% of tiled prompt attention at head size 64; 256
 * against 128: a 512-token batch at depth 8192 0.92-0.94x the time, pp16384 1.03-1.05x,
 * docs/perf-log/2026-12-04-zen5-session-o.md). */
#define CPULM_ATT_ROWS      256
#define CPULM_ATT_SPLIT_MAX 16 /* batches of up to this many single tokens split over the cache */

static inline int cpulm_attn_group_size(const cpulm_hparams *hp) {
    return hp->n_head / hp->n_head_kv;
}

static inline int cpulm_attn_tokens_per_block(int gq) {
    return gq >= CPULM_ATT_ROWS ? 1 : CPULM_ATT_ROWS / gq;
}

/* Tokens per block of a call of n_tok tokens on nth threads: at most tpb_max, halved while
 * the blocks times the KV heads (the items) are under 2 a thread and a block has more than
 * 64 rows. Larger blocks convert each K/V tile for more rows; a many-core server needs the
 * items (at 128 rows a 512-token batch on the 1B shape made 128 items, 2 for each of 64
 * threads, and still does). */
static inline int cpulm_attn_block_tokens(int tpb_max, int gq, int n_kv, int32_t n_tok, int nth) {
    int tpb = tpb_max;
    while (tpb > 1 && tpb * gq > 64 && (int64_t)((n_tok + tpb - 1) / tpb) * n_kv < 2 * (int64_t)nth)
        tpb /= 2;
    return tpb;
}

/* KV heads a K/V tile holds at most: a generation item reads several heads' adjacent
 * slices of each cache row (as many as a block has tokens, at most every KV head), and
 * converts them together. */
static inline int cpulm_attn_tile_heads(const cpulm_hparams *hp) {
    int tpb = cpulm_attn_tokens_per_block(cpulm_attn_group_size(hp));
    return tpb < hp->n_head_kv ? tpb : hp->n_head_kv;
}

/* One thread's tiles: rows x (the exact path's transposed queries: d doubles; q, o, chunk
 * o: d each; m, l, chunk m, chunk l, a, position; a row of tile scores, one of the exact
 * path's scale factors), the K and V tiles of `heads` KV heads in f32 and as bf16 pairs,
 * slack; even, so every thread's doubles align. */
static inline size_t cpulm_attn_ws_floats(int rows, int d, int heads) {
    size_t n = (size_t)rows * (5 * (size_t)d + 5 + 2 * CPULM_ATTN_TILE + 1) +
               3 * (size_t)CPULM_ATTN_TILE * (size_t)d * (size_t)heads + 64;
    return (n + 1) / 2 * 2;
}

static inline int cpulm_attn_split_max(int32_t n_seq_max, int32_t n_batch) {
    int s = n_seq_max < CPULM_ATT_SPLIT_MAX ? n_seq_max : CPULM_ATT_SPLIT_MAX;
    return s < n_batch ? s : n_batch;
}

/* Floats of the split partials: [split_max][n_head][chunks][d + 2]. */
static inline uint64_t cpulm_attn_part_floats(const cpulm_hparams *hp, int32_t n_ctx,
                                              int split_max) {
    const uint64_t n_chunk = ((uint64_t)n_ctx + CPULM_ATTN_CHUNK - 1) / CPULM_ATTN_CHUNK;
    return (uint64_t)split_max * (uint64_t)hp->n_head * n_chunk * ((uint64_t)hp->head_dim + 2);
}

/* Bytes: per-thread tiles, split partials, the block plan [n_batch + 1], the blocks' numerics
 * [n_batch + 1] (bytes), the sequences' rows [n_seq_max] and chunk counters
 * [CPULM_ATT_SPLIT_MAX][n_head_kv] (attention.c allocates exactly these). */
static inline uint64_t cpulm_attn_scratch_bytes(const cpulm_hparams *hp, int32_t n_ctx,
                                                int32_t n_seq_max, int32_t n_batch, int n_threads) {
    int gq = cpulm_attn_group_size(hp), rows = gq * cpulm_attn_tokens_per_block(gq);
    return 4 * ((uint64_t)n_threads *
                    cpulm_attn_ws_floats(rows, hp->head_dim, cpulm_attn_tile_heads(hp)) +
                cpulm_attn_part_floats(hp, n_ctx, cpulm_attn_split_max(n_seq_max, n_batch))) +
           5 * (uint64_t)(n_batch + 1) + 4 * (uint64_t)n_seq_max +
           4 * (uint64_t)CPULM_ATT_SPLIT_MAX * (uint64_t)hp->n_head_kv;
}

/* bf16 numerics (CPULM_ATTN_BF16, an F16 cache): the shared tiles of one layer, each KV
 * head's K and V of CPULM_ATTN_TILE keys, for n_seq runs of n_ctx positions; and their bytes
 * (K and V as bf16 pairs, a tag per tile, each sequence's end: attention.c's bf16_init). */
static inline size_t cpulm_attn_bf16_tiles(const cpulm_hparams *hp, int32_t n_ctx, int32_t n_seq) {
    return (size_t)n_seq * (size_t)((n_ctx + CPULM_ATTN_TILE - 1) / CPULM_ATTN_TILE) *
           (size_t)hp->n_head_kv;
}

/* Bytes of one shared tile: K then V, CPULM_ATTN_TILE keys of head_dim / 2 bf16 pairs each. */
static inline size_t cpulm_attn_bf16_tile_bytes(const cpulm_hparams *hp) {
    return 2 * (size_t)CPULM_ATTN_TILE * (size_t)hp->head_dim / 2 * sizeof(uint32_t);
}

static inline uint64_t cpulm_attn_bf16_bytes(const cpulm_hparams *hp, int32_t n_ctx,
                                             int32_t n_seq) {
    const uint64_t tiles = cpulm_attn_bf16_tiles(hp, n_ctx, n_seq);
    return tiles * (cpulm_attn_bf16_tile_bytes(hp) + 8) + 4 * (uint64_t)n_seq;
}

/* A layer's attention parameters beyond the shape. */
typedef struct cpulm_attn_opts {
    int32_t window;     /* > 0: a query at position p sees keys p - window + 1 .. p only */
    const float *sinks; /* [n_head] or NULL: per query head, a logit whose weight joins the
                         * softmax denominator (a key with a value of 0) */
} cpulm_attn_opts;

/* Allocates c->attn (after the pool and KV cache exist). */
cpulm_status cpulm_attn_init(cpulm_ctx *c, cpulm_error *err);
void cpulm_attn_free(cpulm_ctx *c);
/* Plans the batch in c (token blocks, numerics, split or not); single-threaded, before the
 * pass. */
void cpulm_attn_plan(cpulm_ctx *c);
/* One token's new query (n_head heads), key and value (n_head_kv heads each), roped, as the
 * cache stores them: on a quantized cache, rotated (model/kvrot.h) in place; else as they
 * are. Every store into the cache and every query takes this before the layer's attention. */
void cpulm_attn_rotate_new(const cpulm_ctx *c, float *q, float *k, float *v);
/* att = attention of every batch token in layer il (q roped and cpulm_attn_rotate_new'd, k
 * and v stored in the cache), with the options o (NULL: none). Called by every pool thread;
 * the caller has barriers before and after. */
void cpulm_attn_run(cpulm_ctx *c, int il, const cpulm_attn_opts *o, int ith, int nth);
/* cpulm_attn_run with the model's options for layer il. */
void cpulm_attn_layer(cpulm_ctx *c, int il, int ith, int nth);

#endif
