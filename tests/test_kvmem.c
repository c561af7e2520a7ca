/* test_kvmem.c: the KV cache's memory follows the tokens it holds (src/kv_cache.c). Pages
 * are taken as rows are written and given back when a sequence shrinks (trim, seq_cp onto
 * a longer sequence, seq_set), measured both by the cache's own count (mincore) and by the
 * process's VmRSS; neighbouring sequences' rows survive every release. These checks fail
 * if pages are not returned. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv_cache.h"
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
 * rounded up to a page. */
static uint64_t aligned_pages(const cpulm_kv *kv) {
    const uint64_t pg = page();
    uint64_t b = 0;
    for (int32_t s = 0; s < kv->n_seq; s++)
        b += 2ull * (uint64_t)kv->n_layer *
             (((uint64_t)kv->len[s] * kv->row_bytes + pg - 1) / pg * pg);
    return b;
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

/* Runs that are not page multiples (q8_0 rows of 34 x 3 bytes, 1,000 cells): a trim keeps
 * the pages its run shares with its neighbours, so their rows are never lost, and only
 * those boundary pages stay behind. */
TEST(kvmem_unaligned_runs_keep_neighbours) {
    cpulm_kv kv;
    const int32_t n_layer = 3, n_seq = 5, n_ctx = 1000;
    REQUIRE(t, cpulm_kv_init(&kv, n_layer, n_seq, n_ctx, 96, CPULM_KV_Q8_0, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, kv.row_bytes, 102);
    for (int32_t s = 0; s < n_seq; s++)
        fill(&kv, s, n_ctx, (uint8_t)(0x40 + s));
    const uint64_t pg = page(), full = cpulm_kv_resident_bytes(&kv);
    CHECK(t, full >= kv.map_bytes && full < kv.map_bytes + pg);
    cpulm_kv_seq_trim(&kv, 2, 0);
    cpulm_kv_seq_trim(&kv, 4, 300);
    for (int32_t s = 0; s < n_seq; s++)
        CHECK(t, rows_hold(&kv, s, (uint8_t)(0x40 + s)));
    const uint64_t run = (uint64_t)n_ctx * kv.row_bytes, runs = 2ull * n_layer;
    const uint64_t freed = runs * run + runs * (n_ctx - 300) * kv.row_bytes;
    const uint64_t now = cpulm_kv_resident_bytes(&kv);
    CHECK(t, now <= full - freed + 4 * runs * pg); /* at most 2 shared pages per run stay */
    CHECK(t, now >= full - freed);
    for (int32_t s = 0; s < n_seq; s++)
        cpulm_kv_seq_trim(&kv, s, 0);
    CHECK(t, cpulm_kv_resident_bytes(&kv) <= (runs * n_seq + 1) * pg); /* boundary pages */
    cpulm_kv_release(&kv);
}
