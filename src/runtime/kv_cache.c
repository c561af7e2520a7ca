/* kv_cache.c: allocation and sequence bookkeeping of the KV cache, and the pages it holds
 * (see kv_cache.h: reserved address space, pages returned when sequences shrink, pages
 * shared copy-on-write between sequences). */
#define _GNU_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE, madvise, mincore, memfd_create, fallocate */
#include "kv_cache.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
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

bool cpulm_kv_type_fits(cpulm_kv_type type, int64_t width) {
    if ((int)type < CPULM_KV_F16 || (int)type > CPULM_KV_Q4_0) return false;
    const int64_t blk = cpulm_dtype_traits_get((uint32_t)cpulm_kv_dtype(type))->block;
    return width > 0 && width % blk == 0;
}

uint64_t cpulm_kv_bytes_for(int32_t n_layer, int32_t n_ctx, int32_t kv_dim, cpulm_kv_type type) {
    uint64_t row = cpulm_dtype_row_bytes(cpulm_kv_dtype(type), kv_dim);
    return 2ull * (uint64_t)n_layer * (uint64_t)n_ctx * row;
}

static size_t page_bytes(void) {
    long pg = sysconf(_SC_PAGESIZE);
    return pg > 0 ? (size_t)pg : 4096;
}

static size_t run_bytes_for(size_t row_bytes, int32_t n_ctx) {
    const size_t pg = page_bytes();
    return ((size_t)n_ctx * row_bytes + pg - 1) / pg * pg;
}

uint64_t cpulm_kv_reserved_bytes(int32_t n_layer, int32_t n_seq, int32_t n_ctx, int32_t kv_dim,
                                 cpulm_kv_type type) {
    uint64_t row = cpulm_dtype_row_bytes(cpulm_kv_dtype(type), kv_dim);
    return 2ull * (uint64_t)n_layer * (uint64_t)n_seq * run_bytes_for(row, n_ctx) +
           3ull * sizeof(int32_t) * (uint64_t)n_seq;
}

/* Backs [map, map + n) by a memfd of n bytes (sparse: a page is allocated when written).
 * The anonymous reservation stays if this fails, and seq_cp then copies. */
static int back_by_memfd(void *map, size_t n) {
#ifdef MFD_CLOEXEC
    int fd = memfd_create("cpulm-kv", MFD_CLOEXEC);
    if (fd < 0) return -1;
    if (ftruncate(fd, (off_t)n) != 0 ||
        mmap(map, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        close(fd);
        return -1;
    }
    return fd;
#else
    (void)map;
    (void)n;
    return -1;
#endif
}

cpulm_status cpulm_kv_init(cpulm_kv *kv, int32_t n_layer, int32_t n_seq, int32_t n_ctx,
                           int32_t kv_dim, cpulm_kv_type type, cpulm_error *err) {
    memset(kv, 0, sizeof *kv);
    kv->fd = -1;
    if (n_layer < 1 || n_seq < 1 || n_ctx < 1 || kv_dim < 1)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "kv cache: bad dimensions");
    if ((int)type < CPULM_KV_F16 || (int)type > CPULM_KV_Q4_0)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "kv cache: unknown type %d", (int)type);
    if (!cpulm_kv_type_fits(type, kv_dim))
        return cpulm_errf(err, CPULM_ERR_UNSUPPORTED,
                          "kv cache: q8_0/q4_0 need a kv row of a multiple of 32, not %d", kv_dim);
    kv->n_layer = n_layer;
    kv->n_seq = n_seq;
    kv->n_ctx = n_ctx;
    kv->kv_dim = kv_dim;
    kv->type = type;
    kv->dtype = cpulm_kv_dtype(type);
    kv->row_bytes = (size_t)cpulm_dtype_row_bytes(kv->dtype, kv_dim);
    kv->page = page_bytes();
    if ((size_t)n_ctx > SIZE_MAX / 4 / kv->row_bytes)
        return cpulm_errf(err, CPULM_ERR_NOMEM, "kv cache: too large for the address space");
    kv->run_bytes = run_bytes_for(kv->row_bytes, n_ctx);
    const size_t runs = (size_t)n_layer * (size_t)n_seq;
    if (runs > SIZE_MAX / 2 / kv->run_bytes)
        return cpulm_errf(err, CPULM_ERR_NOMEM, "kv cache: too large for the address space");
    const size_t n = runs * kv->run_bytes;
    /* NORESERVE: no commit charge for the whole reservation, so slots x context may exceed
     * RAM; pages are taken as rows are written (zero-filled, as calloc gave them) */
    void *map = mmap(NULL, 2 * n, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    kv->len = calloc(3 * (size_t)n_seq, sizeof *kv->len);
    if (map == MAP_FAILED || !kv->len) {
        if (map != MAP_FAILED) munmap(map, 2 * n);
        cpulm_kv_release(kv);
        return cpulm_errf(err, CPULM_ERR_NOMEM, "kv cache: cannot reserve %zu bytes", 2 * n);
    }
    kv->owner = kv->len + n_seq;
    kv->n_alias = kv->len + 2 * (size_t)n_seq;
    for (int32_t s = 0; s < n_seq; s++)
        kv->owner[s] = -1;
    kv->fd = back_by_memfd(map, 2 * n);
    /* each alias splits the mapping in at most 2 more pieces per run (2 x n_layer runs); stay
     * far below the default limit of 65,530 mappings a process */
    kv->max_alias = (int32_t)(16384 / (4 * (int64_t)n_layer));
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
    if (kv->fd >= 0) close(kv->fd);
    free(kv->len);
    memset(kv, 0, sizeof *kv);
    kv->fd = -1;
}

/* ---- pages ---- */

/* Start of run r of seq: r < n_layer are the K runs of each layer, then the V runs. */
static uint8_t *run_at(const cpulm_kv *kv, int32_t r, int32_t seq) {
    return r < kv->n_layer ? cpulm_kv_k(kv, r, seq, 0) : cpulm_kv_v(kv, r - kv->n_layer, seq, 0);
}

static size_t file_off(const cpulm_kv *kv, const uint8_t *p) {
    return (size_t)(p - (const uint8_t *)kv->map);
}

/* Maps [at, at + n) onto the file pages at `src` (an address of the identity mapping). */
static int map_file(const cpulm_kv *kv, uint8_t *at, size_t n, const uint8_t *src) {
    return mmap(at, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, kv->fd,
                (off_t)file_off(kv, src)) != MAP_FAILED;
}

/* Gives back the pages holding rows [from, to) of the run ending at run_end: those wholly
 * inside the run from `from` on, up to the page holding `to` (rows past `to` were never
 * written). They read as zeros afterwards and cost no memory until written again. The
 * range is the sequence's own (identity-mapped) pages: callers run own_from first. */
static void discard(const cpulm_kv *kv, uint8_t *from, uint8_t *to, uint8_t *run_end) {
    const uintptr_t pg = kv->page;
    uintptr_t a = ((uintptr_t)from + pg - 1) & ~(pg - 1);
    uintptr_t b = ((uintptr_t)to + pg - 1) & ~(pg - 1);
    if (b > (uintptr_t)run_end) b = (uintptr_t)run_end & ~(pg - 1);
    if (b <= a) return;
    if (kv->fd < 0) {
        madvise((void *)a, (size_t)(b - a), MADV_DONTNEED);
        return;
    }
    /* a shared file page is freed only by punching it out of the file */
    fallocate(kv->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)file_off(kv, (uint8_t *)a),
              (off_t)(b - a));
}

/* Gives seq its own pages [a, b) in every run again (its file pages there are holes), and
 * copies pages [a, keep) from its owner. The remapped tail of the alias joins the run's own
 * mapping after it, so this needs no mapping beyond the bound max_alias keeps (see
 * cpulm_kv_init), and a failure is a broken invariant: the rows could not be kept. */
static void unalias(cpulm_kv *kv, int32_t seq, int32_t a, int32_t b, int32_t keep) {
    const int32_t o = kv->owner[seq];
    const size_t pg = kv->page;
    CPULM_ASSERT(o >= 0 && a < b && b == kv->n_alias[seq] && keep <= b);
    for (int32_t r = 0; r < 2 * kv->n_layer; r++) {
        uint8_t *at = run_at(kv, r, seq) + (size_t)a * pg;
        const int mapped = map_file(kv, at, (size_t)(b - a) * pg, at);
        CPULM_ASSERT(mapped);
        if (keep > a) memcpy(at, run_at(kv, r, o) + (size_t)a * pg, (size_t)(keep - a) * pg);
    }
    __atomic_fetch_sub(&kv->shared_pages, 2 * (int64_t)kv->n_layer * (b - a), __ATOMIC_RELAXED);
    kv->n_alias[seq] = a;
    if (a == 0) {
        kv->owner[seq] = -1;
        kv->n_aliased--;
    }
}

/* Before seq's rows from r on are dropped or rewritten: the sequences that map seq's pages
 * from the page holding row r on get their own copies (they hold rows below their
 * lengths, all kept), and seq's own alias from that page on is dropped, copying that
 * page only if it holds rows below r. Afterwards seq's pages from there on are its own
 * and nobody else's, and every sequence reads what it read before below its length. */
static void own_from(cpulm_kv *kv, int32_t seq, int32_t r) {
    if (kv->fd < 0) return;
    const size_t at = (size_t)r * kv->row_bytes;
    const int32_t k = (int32_t)(at / kv->page);
    for (int32_t t = 0; t < kv->n_seq && kv->n_aliased > 0; t++)
        if (kv->owner[t] == seq && kv->n_alias[t] > k)
            unalias(kv, t, k, kv->n_alias[t], kv->n_alias[t]);
    if (kv->owner[seq] >= 0 && kv->n_alias[seq] > k)
        unalias(kv, seq, k, kv->n_alias[seq], at > (size_t)k * kv->page ? k + 1 : k);
}

/* Maps the first p pages of every run of dst (which holds no rows) onto owner o's file
 * pages; 0 if a mapping fails (dst is then as before). */
static int alias(cpulm_kv *kv, int32_t o, int32_t dst, int32_t p) {
    const size_t n = (size_t)p * kv->page;
    for (int32_t r = 0; r < 2 * kv->n_layer; r++) {
        if (map_file(kv, run_at(kv, r, dst), n, run_at(kv, r, o))) continue;
        for (int32_t u = 0; u <= r; u++) { /* back to its own (empty) pages */
            const int mapped = map_file(kv, run_at(kv, u, dst), n, run_at(kv, u, dst));
            CPULM_ASSERT(mapped);
        }
        return 0;
    }
    kv->owner[dst] = o;
    kv->n_alias[dst] = p;
    kv->n_aliased++;
    __atomic_fetch_add(&kv->shared_pages, 2 * (int64_t)kv->n_layer * p, __ATOMIC_RELAXED);
    return 1;
}

/* Rows are only ever written at the length (decode appends, seq_set and seq_cp write a
 * prefix), so what is resident past n lies below the old length: only that range is
 * given back (madvise over untouched address space still costs about 1 ms per 32 MiB). */
void cpulm_kv_seq_trim(cpulm_kv *kv, int32_t seq, int32_t n) {
    CPULM_ASSERT(seq >= 0 && seq < kv->n_seq && n >= 0);
    const int32_t old = kv->len[seq];
    if (n >= old) return;
    own_from(kv, seq, n);
    kv->len[seq] = n;
    for (int32_t r = 0; r < 2 * kv->n_layer; r++) {
        uint8_t *run = run_at(kv, r, seq);
        discard(kv, run + (size_t)n * kv->row_bytes, run + (size_t)old * kv->row_bytes,
                run + kv->run_bytes);
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
    if (kv->fd >= 0) { /* the file's pages: each counted once however many map it */
        struct stat st;
        return fstat(kv->fd, &st) == 0 ? (uint64_t)st.st_blocks * 512u : 0;
    }
    const size_t pg = kv->page;
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

uint64_t cpulm_kv_shared_bytes(const cpulm_kv *kv) {
    return (uint64_t)__atomic_load_n(&kv->shared_pages, __ATOMIC_RELAXED) * kv->page;
}

/* dst maps the whole pages of src's first n rows (those of src's owner when src itself
 * maps another's pages, as far as that alias goes) and copies the rest. */
void cpulm_kv_seq_cp(cpulm_kv *kv, int32_t src, int32_t dst, int32_t n) {
    CPULM_ASSERT(src >= 0 && src < kv->n_seq && dst >= 0 && dst < kv->n_seq && n >= 0 &&
                 n <= kv->n_ctx);
    if (src == dst) {
        cpulm_kv_seq_trim(kv, dst, n);
        kv->len[dst] = n;
        return;
    }
    own_from(kv, dst, 0); /* every row of dst is rewritten */
    /* pages wholly below n and below src's length (src writes past its length) */
    const int32_t held = n < kv->len[src] ? n : kv->len[src];
    int32_t p = (int32_t)((size_t)held * kv->row_bytes / kv->page), o = src;
    if (kv->owner[src] >= 0) {
        o = kv->owner[src];
        if (p > kv->n_alias[src]) p = kv->n_alias[src];
    }
    if (p > 0 && kv->fd >= 0 && kv->n_aliased < kv->max_alias) {
        cpulm_kv_seq_trim(kv, dst, 0); /* its pages become holes under the alias */
        if (!alias(kv, o, dst, p)) p = 0;
    } else {
        p = 0;
    }
    if (p == 0) cpulm_kv_seq_trim(kv, dst, n);
    const size_t from = (size_t)p * kv->page, to = (size_t)n * kv->row_bytes;
    if (to > from)
        for (int32_t r = 0; r < 2 * kv->n_layer; r++)
            memcpy(run_at(kv, r, dst) + from, run_at(kv, r, src) + from, to - from);
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
    own_from(kv, seq, p0); /* rows from p0 on are rewritten */
    cpulm_kv_seq_trim(kv, seq, p0 + n);
    size_t run = (size_t)n * kv->row_bytes;
    for (int32_t il = 0; il < kv->n_layer; il++) {
        memcpy(cpulm_kv_k(kv, il, seq, p0), src, run);
        memcpy(cpulm_kv_v(kv, il, seq, p0), src + run, run);
        src += 2 * run;
    }
    kv->len[seq] = p0 + n;
}
