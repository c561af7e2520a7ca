/* kv_cache.h: keys and values of every layer for n_seq independent sequences.
 *
 * Each sequence owns n_ctx cells and the cell index is the token position, so a sequence's
 * context is exactly n_ctx tokens (never divided among sequences), truncation is setting a
 * length, and prefix reuse needs no bookkeeping. Layout per layer and sequence:
 * [n_ctx][kv_dim] rows in the cache type (F32, F16, or Q8_0 blocks).
 * The cache knows nothing about attention; it stores and returns rows.
 *
 * Memory follows the tokens held, not n_seq x n_ctx: the cache is address space reserved
 * with mmap (MAP_NORESERVE), so a page costs RAM only once a row in it is written, and
 * every shrink of a sequence (cpulm_kv_seq_trim, and seq_cp / seq_set onto a longer one)
 * gives the pages wholly past its new length back to the OS (MADV_DONTNEED). Since a
 * sequence's rows are contiguous per layer, its resident memory is its tokens rounded up
 * to a page per (layer, K/V). Transparent huge pages are refused for the region: a 2 MiB
 * page per (layer, sequence) would make a 10-token sequence cost megabytes.
 */
#ifndef CPULM_KV_CACHE_H
#define CPULM_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "cpulm.h"
#include "quant.h"

typedef struct cpulm_kv {
    int32_t n_layer, n_seq, n_ctx, kv_dim;
    cpulm_kv_type type;
    cpulm_dtype dtype; /* the element type of a row */
    size_t row_bytes;  /* bytes of one [kv_dim] row */
    uint8_t *k, *v;    /* views into map: K rows of every layer, then V rows */
    int32_t *len;      /* [n_seq]: positions stored */
    void *map;         /* owned: the reserved region (anonymous mmap) */
    size_t map_bytes;
} cpulm_kv;

cpulm_status cpulm_kv_init(cpulm_kv *kv, int32_t n_layer, int32_t n_seq, int32_t n_ctx,
                           int32_t kv_dim, cpulm_kv_type type, cpulm_error *err);
void cpulm_kv_release(cpulm_kv *kv);
uint64_t cpulm_kv_bytes_for(int32_t n_layer, int32_t n_ctx, int32_t kv_dim, cpulm_kv_type type);
cpulm_dtype cpulm_kv_dtype(cpulm_kv_type type);

static inline uint8_t *cpulm_kv_k(const cpulm_kv *kv, int32_t il, int32_t seq, int32_t pos) {
    return kv->k + (((size_t)il * kv->n_seq + seq) * kv->n_ctx + pos) * kv->row_bytes;
}
static inline uint8_t *cpulm_kv_v(const cpulm_kv *kv, int32_t il, int32_t seq, int32_t pos) {
    return kv->v + (((size_t)il * kv->n_seq + seq) * kv->n_ctx + pos) * kv->row_bytes;
}

/* Drops positions >= n of seq (n = 0 clears it) and returns the pages wholly past them to
 * the OS. A no-op when the sequence holds n positions or fewer. */
void cpulm_kv_seq_trim(cpulm_kv *kv, int32_t seq, int32_t n);

/* Positions held, summed over the sequences. */
int64_t cpulm_kv_tokens(const cpulm_kv *kv);
/* Bytes of the cache in RAM as the kernel reports them (mincore over the region). Reads no
 * sequence state, so it may run on another thread while the owner decodes. */
uint64_t cpulm_kv_resident_bytes(const cpulm_kv *kv);

/* Copies the first n positions of seq src to dst (all layers) and sets dst's length
 * (what dst held past n is dropped, its pages returned). */
void cpulm_kv_seq_cp(cpulm_kv *kv, int32_t src, int32_t dst, int32_t n);

/* Positions [p0, p0 + n) of seq as one blob: per layer, the n K rows then the n V rows.
 * cpulm_kv_seq_set also sets the sequence's length to p0 + n (trimming what was past it). The
 * layout is private to this file, so a different cell layout only has to change these two
 * functions. */
size_t cpulm_kv_state_bytes(const cpulm_kv *kv, int32_t n);
void cpulm_kv_seq_get(const cpulm_kv *kv, int32_t seq, int32_t p0, int32_t n, uint8_t *dst);
void cpulm_kv_seq_set(cpulm_kv *kv, int32_t seq, int32_t p0, int32_t n, const uint8_t *src);

#endif
