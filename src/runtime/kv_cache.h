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
 * gives the pages wholly past its new length back to the OS. Each (layer, seq) run of rows
 * is padded to whole pages, so a sequence's resident memory is its tokens rounded up to a
 * page per (layer, K/V). Transparent huge pages are refused for the region: a 2 MiB page
 * per (layer, sequence) would make a 10-token sequence cost megabytes.
 *
 * Copy-on-write sharing: the region is backed by a memfd (MAP_SHARED), the identity
 * mapping giving every run its own file pages. cpulm_kv_seq_cp maps the whole pages of the
 * copied prefix of dst's runs onto the file pages of the sequence that owns them (one
 * mapping per run, pages [0, n_alias) of it) and copies only the partial last page. An
 * aliasing sequence's own file pages under the alias are holes. Invariant: no sequence
 * ever writes a page another sequence maps. Rows are only written at a sequence's length
 * or after a trim / seq_set / seq_cp onto it, and those first call own_from (kv_cache.c),
 * which gives the aliasers of the sequence's pages from the rewrite point on their own
 * copies and drops the sequence's own alias there. Owners never alias (a copy from an
 * aliasing sequence maps its owner), so chains stay one level deep. Without memfd, or past
 * a bound on the number of mappings, seq_cp copies rows as before.
 */
#ifndef CPULM_KV_CACHE_H
#define CPULM_KV_CACHE_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "cpulm.h"
#include "format/quant.h"

typedef struct cpulm_kv {
    int32_t n_layer, n_seq, n_ctx, kv_dim;
    cpulm_kv_type type;
    cpulm_dtype dtype; /* the element type of a row */
    size_t row_bytes;  /* bytes of one [kv_dim] row */
    size_t run_bytes;  /* bytes of one (layer, seq) run: n_ctx rows padded to whole pages */
    size_t page;       /* the OS page size */
    uint8_t *k, *v;    /* views into map: K runs of every layer, then V runs */
    int32_t *len;      /* [n_seq]: positions stored */
    int32_t *owner;    /* [n_seq]: the sequence whose file pages seq maps, or -1 */
    int32_t *n_alias;  /* [n_seq]: pages at the start of each of seq's runs so mapped */
    void *map;         /* owned: the reserved region */
    size_t map_bytes;
    int fd;                       /* the memfd backing map, or -1: private memory, no sharing */
    int32_t n_aliased, max_alias; /* sequences with an alias, and the bound on them */
    int64_t shared_pages;         /* pages mapped by aliases; read atomically by other threads */
} cpulm_kv;

cpulm_status cpulm_kv_init(cpulm_kv *kv, int32_t n_layer, int32_t n_seq, int32_t n_ctx,
                           int32_t kv_dim, cpulm_kv_type type, cpulm_error *err);
void cpulm_kv_release(cpulm_kv *kv);
uint64_t cpulm_kv_bytes_for(int32_t n_layer, int32_t n_ctx, int32_t kv_dim, cpulm_kv_type type);
/* Bytes cpulm_kv_init reserves and allocates for n_seq sequences: runs padded to pages,
 * plus the per-sequence bookkeeping. */
uint64_t cpulm_kv_reserved_bytes(int32_t n_layer, int32_t n_seq, int32_t n_ctx, int32_t kv_dim,
                                 cpulm_kv_type type);
cpulm_dtype cpulm_kv_dtype(cpulm_kv_type type);
/* The one rule of which cache types a model can use (-ctk/-ctv): type is a cpulm_kv_type, and
 * a quantized one (q8_0, q4_0) stores whole 32-element blocks of each width-element piece
 * of a row: the context asks it of the head size (attention reads one head's slice), memory.c
 * sizes a cache that fails it at 0, kv_init refuses rows that fail it. */
bool cpulm_kv_type_fits(cpulm_kv_type type, int64_t width);

static inline uint8_t *cpulm_kv_k(const cpulm_kv *kv, int32_t il, int32_t seq, int32_t pos) {
    return kv->k + ((size_t)il * kv->n_seq + seq) * kv->run_bytes + (size_t)pos * kv->row_bytes;
}
static inline uint8_t *cpulm_kv_v(const cpulm_kv *kv, int32_t il, int32_t seq, int32_t pos) {
    return kv->v + ((size_t)il * kv->n_seq + seq) * kv->run_bytes + (size_t)pos * kv->row_bytes;
}

/* Drops positions >= n of seq (n = 0 clears it) and returns the pages wholly past them to
 * the OS. A no-op when the sequence holds n positions or fewer. */
void cpulm_kv_seq_trim(cpulm_kv *kv, int32_t seq, int32_t n);

/* Positions held, summed over the sequences. */
int64_t cpulm_kv_tokens(const cpulm_kv *kv);
/* Bytes of the cache in RAM as the kernel reports them (the memfd's allocated blocks, so a
 * page shared by several sequences counts once; mincore over the region without memfd).
 * Reads no sequence state, so it may run on another thread while the owner decodes. */
uint64_t cpulm_kv_resident_bytes(const cpulm_kv *kv);
/* Bytes that sequences map from another sequence's pages instead of holding a copy (safe
 * from another thread, like cpulm_kv_resident_bytes). */
uint64_t cpulm_kv_shared_bytes(const cpulm_kv *kv);

/* Copies the first n positions of seq src to dst (all layers) and sets dst's length
 * (what dst held past n is dropped, its pages returned). The whole pages of the copy are
 * shared with src's pages (copy-on-write, see above); rows past src's length are copied. */
void cpulm_kv_seq_cp(cpulm_kv *kv, int32_t src, int32_t dst, int32_t n);

/* Positions [p0, p0 + n) of seq as one blob: per layer, the n K rows then the n V rows.
 * cpulm_kv_seq_set also sets the sequence's length to p0 + n (trimming what was past it). The
 * layout is private to this file, so a different cell layout only has to change these two
 * functions. */
size_t cpulm_kv_state_bytes(const cpulm_kv *kv, int32_t n);
void cpulm_kv_seq_get(const cpulm_kv *kv, int32_t seq, int32_t p0, int32_t n, uint8_t *dst);
void cpulm_kv_seq_set(cpulm_kv *kv, int32_t seq, int32_t p0, int32_t n, const uint8_t *src);

#endif
