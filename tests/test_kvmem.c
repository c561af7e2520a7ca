/* test_kvmem.c: the KV cache's memory follows the tokens it holds (src/kv_cache.c). Pages
 * are taken as rows are written and given back when a sequence shrinks (trim, seq_cp onto
 * a longer sequence, seq_set), measured both by the cache's own count (mincore) and by the
 * process's VmRSS; neighbouring sequences' rows survive every release. These checks fail
 * if pages are not returned. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/kv_cache.h"
#include "test.h"

/* The process's resident set in bytes (/proc/self/status), or -1. */
static long long vm_rss(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %lld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

static size_t page(void) {
    return (size_t)sysconf(_SC_PAGESIZE);
}

/* Writes positions [len, n) of seq in every layer (byte b), as a decode does. */
static void fill(cpulm_kv *kv, int32_t seq, int32_t n, uint8_t b) {
    int32_t p0 = kv->len[seq];
    for (int32_t il = 0; il < kv->n_layer; il++) {
        memset(cpulm_kv_k(kv, il, seq, p0), b, (size_t)(n - p0) * kv->row_bytes);
        memset(cpulm_kv_v(kv, il, seq, p0), b, (size_t)(n - p0) * kv->row_bytes);
    }
    kv->len[seq] = n;
}

/* Resident bytes when every (layer, seq) run starts on a page: each holds its rows
 * rounded up to a page, less the pages it maps from another sequence. */
static uint64_t aligned_pages(const cpulm_kv *kv) {
    const uint64_t pg = page();
    uint64_t b = 0;
    for (int32_t s = 0; s < kv->n_seq; s++)
        b += 2ull * (uint64_t)kv->n_layer *
             (((uint64_t)kv->len[s] * kv->row_bytes + pg - 1) / pg * pg);
    return b - cpulm_kv_shared_bytes(kv);
}

/* Every row of seq below its length holds byte b, in every layer. */
static int rows_hold(const cpulm_kv *kv, int32_t seq, uint8_t b) {
    for (int32_t il = 0; il < kv->n_layer; il++)
        for (int32_t p = 0; p < kv->len[seq]; p++)
            for (size_t i = 0; i < kv->row_bytes; i++)
                if (cpulm_kv_k(kv, il, seq, p)[i] != b || cpulm_kv_v(kv, il, seq, p)[i] != b)
                    return 0;
    return 1;
}

/* 8 sequences of a 2,048-token context (1 MiB per layer and K/V, page-aligned runs): one
 * long sequence and seven short ones hold what their tokens need, not 8 x 2,048 tokens;
 * trimming the long one gives its pages back, as mincore and VmRSS both see. */
TEST(kvmem_pages_follow_tokens) {
    cpulm_kv kv;
    REQUIRE(t, cpulm_kv_init(&kv, 4, 8, 2048, 256, CPULM_KV_F16, NULL) == CPULM_OK);
    const uint64_t MiB = 1 << 20, long_bytes = 2ull * 4 * 2048 * 512; /* 8 MiB */
    CHECK_EQ_INT(t, kv.map_bytes, 8 * long_bytes);
    CHECK_EQ_INT(t, cpulm_kv_resident_bytes(&kv), 0);
    long long rss0 = vm_rss();
    fill(&kv, 0, 2048, 0x11);
    for (int32_t s = 1; s < 8; s++)
        fill(&kv, s, 16, (uint8_t)(0x20 + s));
    CHECK_EQ_INT(t, cpulm_kv_tokens(&kv), 2048 + 7 * 16);
    CHECK_EQ_INT(t, cpulm_kv_resident_bytes(&kv), aligned_pages(&kv));
    CHECK(t, cpulm_kv_resident_bytes(&kv) < long_bytes + MiB); /* not 8 x 8 MiB */
    long long rss1 = vm_rss();
    fprintf(stderr, "  VmRSS +%.2f MiB after filling\n", (double)(rss1 - rss0) / MiB);
    CHECK(t, rss1 - rss0 >= (long long)(long_bytes * 9 / 10));

    cpulm_kv_seq_trim(&kv, 0, 16);
    CHECK_EQ_INT(t, kv.len[0], 16);
    CHECK_EQ_INT(t, cpulm_kv_resident_bytes(&kv), aligned_pages(&kv));
    CHECK(t, cpulm_kv_resident_bytes(&kv) <= MiB);
    long long rss2 = vm_rss();
    fprintf(stderr, "  VmRSS -%.2f MiB after trimming\n", (double)(rss1 - rss2) / MiB);
    CHECK(t, rss1 - rss2 >= (long long)(long_bytes * 9 / 10));
    CHECK(t, rows_hold(&kv, 0, 0x11));
    CHECK_EQ_INT(t, cpulm_kv_k(&kv, 3, 0, 16)[0], 0); /* a page given back reads zeros */
    for (int32_t s = 1; s < 8; s++)
        CHECK(t, rows_hold(&kv, s, (uint8_t)(0x20 + s)));

    /* seq_cp onto a longer sequence and seq_set drop what the target held past n */
    fill(&kv, 0, 1500, 0x11);
    cpulm_kv_seq_cp(&kv, 1, 0, 16);
    CHECK(t, rows_hold(&kv, 0, 0x21));
    CHECK_EQ_INT(t, cpulm_kv_resident_bytes(&kv), aligned_pages(&kv));
    fill(&kv, 2, 1200, 0x22);
    uint8_t *blob = malloc(cpulm_kv_state_bytes(&kv, 8));
    REQUIRE(t, blob);
    cpulm_kv_seq_get(&kv, 3, 0, 8, blob);
    cpulm_kv_seq_set(&kv, 2, 0, 8, blob);
    free(blob);
    CHECK_EQ_INT(t, kv.len[2], 8);
    CHECK(t, rows_hold(&kv, 2, 0x23));
    CHECK_EQ_INT(t, cpulm_kv_resident_bytes(&kv), aligned_pages(&kv));

    for (int32_t s = 0; s < 8; s++)
        cpulm_kv_seq_trim(&kv, s, 0);
    CHECK_EQ_INT(t, cpulm_kv_tokens(&kv), 0);
    CHECK_EQ_INT(t, cpulm_kv_resident_bytes(&kv), 0);
    cpulm_kv_release(&kv);
}

/* Rows that do not divide a page (q8_0 rows of 34 x 3 bytes, 1,000 cells): each run is
 * padded to whole pages, so a trim gives back every page wholly past the new length, the
 * neighbours' rows are never lost, and clearing every sequence leaves nothing resident. */
TEST(kvmem_unaligned_runs_keep_neighbours) {
    cpulm_kv kv;
    const int32_t n_layer = 3, n_seq = 5, n_ctx = 1000;
    REQUIRE(t, cpulm_kv_init(&kv, n_layer, n_seq, n_ctx, 96, CPULM_KV_Q8_0, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, kv.row_bytes, 102);
    const uint64_t pg = page();
    CHECK_EQ_INT(t, kv.run_bytes, (n_ctx * 102 + pg - 1) / pg * pg);
    for (int32_t s = 0; s < n_seq; s++)
        fill(&kv, s, n_ctx, (uint8_t)(0x40 + s));
    const uint64_t full = cpulm_kv_resident_bytes(&kv);
    CHECK_EQ_INT(t, full, kv.map_bytes);
    cpulm_kv_seq_trim(&kv, 2, 0);
    cpulm_kv_seq_trim(&kv, 4, 300);
    for (int32_t s = 0; s < n_seq; s++)
        CHECK(t, rows_hold(&kv, s, (uint8_t)(0x40 + s)));
    CHECK_EQ_INT(t, cpulm_kv_resident_bytes(&kv), aligned_pages(&kv));
    CHECK(t, cpulm_kv_resident_bytes(&kv) <= full * 33 / 50 + 2 * n_layer * pg); /* 3.3 of 5 */
    for (int32_t s = 0; s < n_seq; s++)
        cpulm_kv_seq_trim(&kv, s, 0);
    CHECK_EQ_INT(t, cpulm_kv_resident_bytes(&kv), 0);
    cpulm_kv_release(&kv);
}

/* ---- copy-on-write sharing: the cache against a plain-copy oracle ---- */

typedef struct {
    int32_t n_layer, n_seq, n_ctx;
    size_t rb;
    uint8_t *rows; /* [seq][run][n_ctx * rb], run = K of each layer then V of each layer */
    int32_t len[8];
} oracle;

static uint8_t *orow(oracle *o, int32_t seq, int32_t r, int32_t pos) {
    return o->rows + (((size_t)seq * 2 * o->n_layer + r) * o->n_ctx + pos) * o->rb;
}

static uint8_t *krow(const cpulm_kv *kv, int32_t r, int32_t seq, int32_t pos) {
    return r < kv->n_layer ? cpulm_kv_k(kv, r, seq, pos)
                           : cpulm_kv_v(kv, r - kv->n_layer, seq, pos);
}

static uint32_t rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

/* Every row below each length equal, lengths equal, and the cache's resident bytes exactly
 * the pages each sequence holds of its own. */
static int same(const cpulm_kv *kv, oracle *o) {
    for (int32_t s = 0; s < o->n_seq; s++) {
        if (kv->len[s] != o->len[s]) return 0;
        for (int32_t r = 0; r < 2 * o->n_layer; r++)
            if (o->len[s] && memcmp(krow(kv, r, s, 0), orow(o, s, r, 0), o->len[s] * o->rb))
                return 0;
    }
    return cpulm_kv_resident_bytes(kv) == aligned_pages(kv);
}

/* Random appends (as a decode writes rows), trims, seq_cp, seq_set and seq_get over 5
 * sequences, compared with plain copies after every step; rows of 512 bytes (dividing a
 * page) and of 102, 80 and 136 bytes (not dividing it). With max_alias 1 the bound on
 * mappings is hit and seq_cp copies. */
static void model_check(test_ctx *t, cpulm_kv_type type, int32_t kv_dim, int32_t max_alias) {
    cpulm_kv kv;
    const int32_t n_layer = 2, n_seq = 5, n_ctx = 300;
    REQUIRE(t, cpulm_kv_init(&kv, n_layer, n_seq, n_ctx, kv_dim, type, NULL) == CPULM_OK);
    if (max_alias >= 0) kv.max_alias = max_alias;
    oracle o = {n_layer, n_seq, n_ctx, kv.row_bytes, NULL, {0}};
    o.rows = calloc((size_t)n_seq * 2 * n_layer * n_ctx, o.rb);
    uint8_t *blob = malloc(cpulm_kv_state_bytes(&kv, n_ctx)),
            *got = malloc(cpulm_kv_state_bytes(&kv, n_ctx));
    REQUIRE(t, o.rows && blob && got);
    uint64_t seed = 0x1234u + (uint64_t)kv_dim * 7 + (uint64_t)max_alias, shared_max = 0;
    int bad = 0, step;
    for (step = 0; step < 3000 && !bad; step++) {
        const int32_t s = (int32_t)(rnd(&seed) % n_seq), d = (int32_t)(rnd(&seed) % n_seq);
        const uint32_t op = rnd(&seed) % 10;
        if (op < 4) { /* append k rows */
            int32_t k = (int32_t)(rnd(&seed) % 80), p0 = o.len[s];
            if (p0 + k > n_ctx) k = n_ctx - p0;
            for (int32_t r = 0; r < 2 * n_layer; r++)
                for (int32_t p = p0; p < p0 + k; p++) {
                    for (size_t i = 0; i < o.rb; i++)
                        orow(&o, s, r, p)[i] = (uint8_t)rnd(&seed);
                    memcpy(krow(&kv, r, s, p), orow(&o, s, r, p), o.rb);
                }
            o.len[s] = kv.len[s] = p0 + k;
        } else if (op < 6) { /* trim */
            const int32_t n = o.len[s] ? (int32_t)(rnd(&seed) % (uint32_t)(o.len[s] + 1)) : 0;
            cpulm_kv_seq_trim(&kv, s, n);
            if (n < o.len[s]) o.len[s] = n;
        } else if (op < 8) { /* seq_cp of up to src's length, often all of it */
            int32_t n = o.len[s];
            if (n && rnd(&seed) % 2) n = (int32_t)(rnd(&seed) % (uint32_t)(n + 1));
            cpulm_kv_seq_cp(&kv, s, d, n);
            if (s != d)
                for (int32_t r = 0; r < 2 * n_layer; r++)
                    memcpy(orow(&o, d, r, 0), orow(&o, s, r, 0), (size_t)n * o.rb);
            o.len[d] = n;
        } else if (op < 9) { /* seq_set: rows [p0, p0 + n) from a blob */
            const int32_t p0 = (int32_t)(rnd(&seed) % (uint32_t)(o.len[s] + 1));
            const int32_t n = (int32_t)(rnd(&seed) % (uint32_t)(n_ctx - p0 + 1)) % 100;
            const size_t run = (size_t)n * o.rb;
            for (size_t i = 0; i < 2 * n_layer * run; i++)
                blob[i] = (uint8_t)rnd(&seed);
            cpulm_kv_seq_set(&kv, s, p0, n, blob);
            for (int32_t il = 0; il < n_layer; il++) {
                memcpy(orow(&o, s, il, p0), blob + 2 * il * run, run);
                memcpy(orow(&o, s, n_layer + il, p0), blob + (2 * il + 1) * run, run);
            }
            o.len[s] = p0 + n;
        } else { /* seq_get of a window */
            const int32_t p0 = (int32_t)(rnd(&seed) % (uint32_t)(o.len[s] + 1));
            const int32_t n = (int32_t)(rnd(&seed) % (uint32_t)(o.len[s] - p0 + 1));
            const size_t run = (size_t)n * o.rb;
            cpulm_kv_seq_get(&kv, s, p0, n, got);
            for (int32_t il = 0; il < n_layer && !bad; il++)
                bad = memcmp(got + 2 * il * run, orow(&o, s, il, p0), run) ||
                      memcmp(got + (2 * il + 1) * run, orow(&o, s, n_layer + il, p0), run);
        }
        if (cpulm_kv_shared_bytes(&kv) > shared_max) shared_max = cpulm_kv_shared_bytes(&kv);
        bad = bad || !same(&kv, &o);
    }
    if (bad) fprintf(stderr, "  type %d dim %d: differs after step %d\n", type, kv_dim, step);
    CHECK(t, !bad);
    /* the checks saw sharing (or, with the bound at 0, none) */
    CHECK(t, max_alias == 0 ? shared_max == 0 : shared_max > 0);
    for (int32_t s = 0; s < n_seq; s++)
        cpulm_kv_seq_trim(&kv, s, 0);
    CHECK_EQ_INT(t, cpulm_kv_resident_bytes(&kv), 0);
    CHECK_EQ_INT(t, cpulm_kv_shared_bytes(&kv), 0);
    free(blob);
    free(got);
    free(o.rows);
    cpulm_kv_release(&kv);
}

TEST(kvmem_cow_model_check) {
    cpulm_kv probe;
    REQUIRE(t, cpulm_kv_init(&probe, 1, 1, 1, 32, CPULM_KV_F16, NULL) == CPULM_OK);
    const int memfd = probe.fd >= 0;
    cpulm_kv_release(&probe);
    if (!memfd) SKIP(t, "no memfd: seq_cp copies");
    model_check(t, CPULM_KV_F16, 256, -1);  /* 512-byte rows */
    model_check(t, CPULM_KV_Q8_0, 96, -1);  /* 102 */
    model_check(t, CPULM_KV_F16, 40, -1);   /* 80 */
    model_check(t, CPULM_KV_Q8_0, 128, -1); /* 136 */
    model_check(t, CPULM_KV_Q8_0, 96, 1);   /* the bound on mappings */
    model_check(t, CPULM_KV_F16, 256, 0);   /* no sharing at all */
}

/* A 3,000-token prefix copied to 3 more sequences is held once (not 4 times), by the
 * cache's count and by VmRSS; the copies then diverge, and dropping the owner leaves the
 * others their rows (now copies of their own). */
TEST(kvmem_cow_prefix_held_once) {
    cpulm_kv kv;
    REQUIRE(t, cpulm_kv_init(&kv, 4, 4, 4096, 256, CPULM_KV_F16, NULL) == CPULM_OK);
    if (kv.fd < 0) {
        cpulm_kv_release(&kv);
        SKIP(t, "no memfd: seq_cp copies");
    }
    const uint64_t one = 2ull * 4 * 3000 * 512; /* 11.7 MiB: 3,000 rows x 8 runs */
    fill(&kv, 0, 3000, 0x11);
    long long rss0 = vm_rss();
    for (int32_t s = 1; s < 4; s++)
        cpulm_kv_seq_cp(&kv, 0, s, 3000);
    long long rss1 = vm_rss();
    fprintf(stderr, "  resident %.2f MiB for 4 x %.2f MiB, VmRSS +%.2f MiB\n",
            (double)cpulm_kv_resident_bytes(&kv) / (1 << 20), (double)one / (1 << 20),
            (double)(rss1 - rss0) / (1 << 20));
    CHECK_EQ_INT(t, cpulm_kv_resident_bytes(&kv), one);
    CHECK_EQ_INT(t, cpulm_kv_shared_bytes(&kv), 3 * one);
    CHECK(t, rss1 - rss0 < (long long)(one / 10));
    for (int32_t s = 1; s < 4; s++) {
        CHECK(t, rows_hold(&kv, s, 0x11));
        cpulm_kv_seq_trim(&kv, s, 2999);     /* inside the last shared... */
        fill(&kv, s, 3100, (uint8_t)(0x11)); /* ...and past it */
    }
    CHECK_EQ_INT(t, cpulm_kv_resident_bytes(&kv), aligned_pages(&kv));
    CHECK(t, cpulm_kv_resident_bytes(&kv) < one * 5 / 4); /* + 100 rows or so each */
    cpulm_kv_seq_trim(&kv, 0, 0); /* the owner goes: the others copy what they map */
    CHECK_EQ_INT(t, cpulm_kv_shared_bytes(&kv), 0);
    for (int32_t s = 1; s < 4; s++)
        CHECK(t, rows_hold(&kv, s, 0x11));
    CHECK_EQ_INT(t, cpulm_kv_resident_bytes(&kv), aligned_pages(&kv));
    cpulm_kv_release(&kv);
}
