/* kv_cache.c: allocation and sequence bookkeeping of the KV cache, and the pages it holds
 * (see kv_cache.h: reserved address space, pages returned when sequences shrink). */
#define _GNU_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE, madvise, mincore */
#include "kv_cache.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/status.h"

cpulm_dtype cpulm_kv_dtype(cpulm_kv_type type) {
    switch (type) {
    case CPULM_KV_F32: return CPULM_DTYPE_F32;
    case CPULM_KV_Q8_0: return CPULM_DTYPE_Q8_0;
    case CPULM_KV_Q4_0: return CPULM_DTYPE_Q4_0;
    case CPULM_KV_F16: break;
    }
    return CPULM_DTYPE_F16;
}

uint64_t cpulm_kv_bytes_for(int32_t n_layer, int32_t n_ctx, int32_t kv_dim, cpulm_kv_type type) {
    uint64_t row = cpulm_dtype_row_bytes(cpulm_kv_dtype(type), kv_dim);
    return 2ull * (uint64_t)n_layer * (uint64_t)n_ctx * row;
}

cpulm_status cpulm_kv_init(cpulm_kv *kv, int32_t n_layer, int32_t n_seq, int32_t n_ctx,
                           int32_t kv_dim, cpulm_kv_type type, cpulm_error *err) {
    memset(kv, 0, sizeof *kv);
    if (n_layer < 1 || n_seq < 1 || n_ctx < 1 || kv_dim < 1)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "kv cache: bad dimensions");
    if ((type == CPULM_KV_Q8_0 || type == CPULM_KV_Q4_0) && kv_dim % CPULM_QK8_0 != 0)
        return cpulm_errf(err, CPULM_ERR_UNSUPPORTED,
                          "kv cache: q8_0/q4_0 need a kv row of a multiple of 32, not %d", kv_dim);
    if ((int)type < CPULM_KV_F16 || (int)type > CPULM_KV_Q4_0)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "kv cache: unknown type %d", (int)type);
    kv->n_layer = n_layer;
    kv->n_seq = n_seq;
    kv->n_ctx = n_ctx;
    kv->kv_dim = kv_dim;
    kv->type = type;
    kv->dtype = cpulm_kv_dtype(type);
    kv->row_bytes = (size_t)cpulm_dtype_row_bytes(kv->dtype, kv_dim);
    const size_t cells = (size_t)n_layer * (size_t)n_seq * (size_t)n_ctx;
    if (cells > SIZE_MAX / 2 / kv->row_bytes)
        return cpulm_errf(err, CPULM_ERR_NOMEM, "kv cache: too large for the address space");
    const size_t n = cells * kv->row_bytes;
    /* NORESERVE: no commit charge for the whole reservation, so slots x context may exceed
     * RAM; pages are taken as rows are written (zero-filled, as calloc gave them) */
    void *map = mmap(NULL, 2 * n, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    kv->len = calloc((size_t)n_seq, sizeof *kv->len);
    if (map == MAP_FAILED || !kv->len) {
        if (map != MAP_FAILED) munmap(map, 2 * n);
        cpulm_kv_release(kv);
        return cpulm_errf(err, CPULM_ERR_NOMEM, "kv cache: cannot reserve %zu bytes", 2 * n);
    }
#ifdef MADV_NOHUGEPAGE
    madvise(map, 2 * n, MADV_NOHUGEPAGE); /* a hint: refused on some kernels, harmless */
#endif
    kv->map = map;
    kv->map_bytes = 2 * n;
    kv->k = map;
    kv->v = kv->k + n;
    return CPULM_OK;
}

void cpulm_kv_release(cpulm_kv *kv) {
    if (kv->map) munmap(kv->map, kv->map_bytes);
    free(kv->len);
    memset(kv, 0, sizeof *kv);
}

/* ---- pages ---- */

static size_t page_bytes(void) {
    long pg = sysconf(_SC_PAGESIZE);
    return pg > 0 ? (size_t)pg : 4096;
}

/* Gives back the pages holding rows [from, to) of the run [run, run_end): those wholly
 * inside the run from `from` on, up to the page holding `to` (rows past `to` were never
 * written). Pages shared with live rows or the neighbouring run are kept. They read as
 * zeros afterwards and cost no memory until written again. */
static void discard(uint8_t *from, uint8_t *to, uint8_t *run_end) {
    const uintptr_t pg = page_bytes();
    uintptr_t a = ((uintptr_t)from + pg - 1) & ~(pg - 1);
    uintptr_t b = ((uintptr_t)to + pg - 1) & ~(pg - 1);
    if (b > (uintptr_t)run_end) b = (uintptr_t)run_end & ~(pg - 1);
    if (b > a) madvise((void *)a, (size_t)(b - a), MADV_DONTNEED);
}

/* Rows are only ever written at the length (decode appends, seq_set and seq_cp write a
 * prefix), so what is resident past n lies below the old length: only that range is
 * given back (madvise over untouched address space still costs about 1 ms per 32 MiB). */
void cpulm_kv_seq_trim(cpulm_kv *kv, int32_t seq, int32_t n) {
    CPULM_ASSERT(seq >= 0 && seq < kv->n_seq && n >= 0);
    const int32_t old = kv->len[seq];
    if (n >= old) return;
    kv->len[seq] = n;
    for (int32_t il = 0; il < kv->n_layer; il++) {
        discard(cpulm_kv_k(kv, il, seq, n), cpulm_kv_k(kv, il, seq, old),
                cpulm_kv_k(kv, il, seq, 0) + (size_t)kv->n_ctx * kv->row_bytes);
        discard(cpulm_kv_v(kv, il, seq, n), cpulm_kv_v(kv, il, seq, old),
                cpulm_kv_v(kv, il, seq, 0) + (size_t)kv->n_ctx * kv->row_bytes);
    }
}

int64_t cpulm_kv_tokens(const cpulm_kv *kv) {
    int64_t n = 0;
    for (int32_t s = 0; s < kv->n_seq; s++)
        n += kv->len[s];
    return n;
}

/* mincore in chunks of a fixed vector: no allocation, one system call per 128 MiB
 * (4 KiB pages); the vector is summed 8 pages at a time. */
uint64_t cpulm_kv_resident_bytes(const cpulm_kv *kv) {
    if (!kv->map) return 0;
    const size_t pg = page_bytes();
    uint64_t vec[4096]; /* 32 KiB of one byte per page */
    const size_t span = sizeof vec * pg;
    uint64_t pages = 0;
    for (size_t off = 0; off < kv->map_bytes; off += span) {
        size_t len = kv->map_bytes - off < span ? kv->map_bytes - off : span;
        size_t n = (len + pg - 1) / pg;
        memset((uint8_t *)vec + n, 0, (8 - n % 8) % 8); /* the last word's unused bytes */
        if (mincore((uint8_t *)kv->map + off, len, (unsigned char *)vec) != 0) return 0;
        for (size_t i = 0; i < (n + 7) / 8; i++) /* bit 0 of each byte: resident */
            pages += (uint64_t)__builtin_popcountll(vec[i] & 0x0101010101010101ull);
    }
    return pages * pg;
}

void cpulm_kv_seq_cp(cpulm_kv *kv, int32_t src, int32_t dst, int32_t n) {
    CPULM_ASSERT(src >= 0 && src < kv->n_seq && dst >= 0 && dst < kv->n_seq && n >= 0 &&
                 n <= kv->n_ctx);
    cpulm_kv_seq_trim(kv, dst, n);
    if (src != dst) {
        for (int32_t il = 0; il < kv->n_layer; il++) {
            memcpy(cpulm_kv_k(kv, il, dst, 0), cpulm_kv_k(kv, il, src, 0),
                   (size_t)n * kv->row_bytes);
            memcpy(cpulm_kv_v(kv, il, dst, 0), cpulm_kv_v(kv, il, src, 0),
                   (size_t)n * kv->row_bytes);
        }
    }
    kv->len[dst] = n;
}

size_t cpulm_kv_state_bytes(const cpulm_kv *kv, int32_t n) {
    return 2 * (size_t)kv->n_layer * (size_t)n * kv->row_bytes;
}

void cpulm_kv_seq_get(const cpulm_kv *kv, int32_t seq, int32_t p0, int32_t n, uint8_t *dst) {
    CPULM_ASSERT(seq >= 0 && seq < kv->n_seq && p0 >= 0 && n >= 0 && p0 + n <= kv->n_ctx);
    size_t run = (size_t)n * kv->row_bytes;
    for (int32_t il = 0; il < kv->n_layer; il++) {
        memcpy(dst, cpulm_kv_k(kv, il, seq, p0), run);
        memcpy(dst + run, cpulm_kv_v(kv, il, seq, p0), run);
        dst += 2 * run;
    }
}

void cpulm_kv_seq_set(cpulm_kv *kv, int32_t seq, int32_t p0, int32_t n, const uint8_t *src) {
    CPULM_ASSERT(seq >= 0 && seq < kv->n_seq && p0 >= 0 && n >= 0 && p0 + n <= kv->n_ctx);
    cpulm_kv_seq_trim(kv, seq, p0 + n);
    size_t run = (size_t)n * kv->row_bytes;
    for (int32_t il = 0; il < kv->n_layer; il++) {
        memcpy(cpulm_kv_k(kv, il, seq, p0), src, run);
        memcpy(cpulm_kv_v(kv, il, seq, p0), src + run, run);
        src += 2 * run;
    }
    kv->len[seq] = p0 + n;
}
