/* test_pcache.c: the server's RAM prompt cache (src/server/pcache.c) as a data structure:
 * longest whole-block prefix lookup, shared prefixes stored once, blobs read back intact,
 * LRU eviction of leaves within the byte limit, failed fills. The scheduler's use of it
 * (restored KV gives the same text) is in test_sched.c. */
#include <string.h>

#include "server/pcache.h"
#include "test.h"

#define B  4
#define BB 16 /* blob bytes */

typedef struct filler {
    const cpulm_token *toks; /* the sequence being stored */
    int n_calls, fail_at;
} filler;

/* Blob of block i: its tokens' low bytes, repeated: checkable against the tokens. */
static int fill(void *user, int32_t block, uint8_t *dst) {
    filler *f = user;
    if (f->fail_at >= 0 && f->n_calls == f->fail_at) return 1;
    f->n_calls++;
    for (int j = 0; j < BB; j++)
        dst[j] = (uint8_t)f->toks[block * B + j % B];
    return 0;
}

static int32_t store(cpulm_pcache *pc, const cpulm_token *t, int32_t n, int *n_calls) {
    filler f = {t, 0, -1};
    int32_t k = cpulm_pcache_store(pc, t, n, fill, &f);
    if (n_calls) *n_calls = f.n_calls;
    return k;
}

static int blobs_match(const uint8_t **blobs, int32_t nb, const cpulm_token *t) {
    for (int32_t b = 0; b < nb; b++)
        for (int j = 0; j < BB; j++)
            if (blobs[b][j] != (uint8_t)t[b * B + j % B]) return 0;
    return 1;
}

TEST(pcache_longest_prefix_and_shared_blocks) {
    cpulm_pcache *pc = cpulm_pcache_new(B, BB, 1 << 20);
    REQUIRE(t, pc);
    cpulm_token a[14], c[14];
    for (int i = 0; i < 14; i++)
        a[i] = c[i] = 100 + i;
    c[9] = 7; /* c shares a's first two blocks, differs in the third */
    int calls;
    CHECK_EQ_INT(t, store(pc, a, 14, &calls), 3); /* 14 tokens: 3 whole blocks */
    CHECK_EQ_INT(t, calls, 3);
    CHECK_EQ_INT(t, store(pc, a, 14, &calls), 3); /* already there: nothing copied */
    CHECK_EQ_INT(t, calls, 0);
    CHECK_EQ_INT(t, store(pc, c, 14, &calls), 3); /* only the diverging block is new */
    CHECK_EQ_INT(t, calls, 1);
    const uint8_t *blobs[8];
    CHECK_EQ_INT(t, cpulm_pcache_lookup(pc, a, 14, blobs, 8), 3);
    CHECK(t, blobs_match(blobs, 3, a));
    CHECK_EQ_INT(t, cpulm_pcache_lookup(pc, c, 12, blobs, 8), 3);
    CHECK(t, blobs_match(blobs, 3, c));
    CHECK_EQ_INT(t, cpulm_pcache_lookup(pc, a, 11, blobs, 8), 2); /* whole blocks only */
    CHECK_EQ_INT(t, cpulm_pcache_lookup(pc, a, 14, blobs, 1), 1); /* max_blocks */
    cpulm_token d[8];
    memcpy(d, a, sizeof d);
    d[0] = 5; /* same second block under another first block: no match at all */
    CHECK_EQ_INT(t, cpulm_pcache_lookup(pc, d, 8, blobs, 8), 0);
    cpulm_pcache_stats st;
    cpulm_pcache_get_stats(pc, &st);
    CHECK_EQ_INT(t, st.n_blocks, 4);
    CHECK(t, st.bytes > 4 * BB && st.bytes <= st.max_bytes);
    cpulm_pcache_free(pc);
}

/* Room for exactly 4 blocks: a second 3-block sequence evicts the first one's leaves
 * (deepest first), never a block whose children are still cached. */
TEST(pcache_evicts_lru_leaves_within_limit) {
    cpulm_pcache *probe = cpulm_pcache_new(B, BB, 1 << 20);
    cpulm_token x[B] = {1, 2, 3, 4};
    store(probe, x, B, NULL);
    cpulm_pcache_stats one;
    cpulm_pcache_get_stats(probe, &one);
    cpulm_pcache_free(probe);
    cpulm_pcache *pc = cpulm_pcache_new(B, BB, 4 * one.bytes + one.bytes / 2);
    REQUIRE(t, pc);
    cpulm_token a[12], b[12];
    for (int i = 0; i < 12; i++)
        a[i] = 10 + i, b[i] = 50 + i;
    CHECK_EQ_INT(t, store(pc, a, 12, NULL), 3);
    CHECK_EQ_INT(t, store(pc, b, 12, NULL), 3);
    cpulm_pcache_stats st;
    cpulm_pcache_get_stats(pc, &st);
    CHECK_EQ_INT(t, st.n_blocks, 4);
    CHECK_EQ_INT(t, (int64_t)st.n_evicted, 2);
    CHECK(t, st.bytes <= st.max_bytes);
    const uint8_t *blobs[4];
    CHECK_EQ_INT(t, cpulm_pcache_lookup(pc, b, 12, blobs, 4), 3);
    CHECK(t, blobs_match(blobs, 3, b));
    CHECK_EQ_INT(t, cpulm_pcache_lookup(pc, a, 12, blobs, 4), 1); /* a's root survived */
    CHECK(t, blobs_match(blobs, 1, a));
    /* a was just used: storing a third sequence now evicts b's leaves, not a's root */
    cpulm_token c[8];
    for (int i = 0; i < 8; i++)
        c[i] = 90 + i;
    CHECK_EQ_INT(t, store(pc, c, 8, NULL), 2);
    CHECK_EQ_INT(t, cpulm_pcache_lookup(pc, a, 12, blobs, 4), 1);
    CHECK_EQ_INT(t, cpulm_pcache_lookup(pc, b, 12, blobs, 4), 1);
    CHECK_EQ_INT(t, cpulm_pcache_lookup(pc, c, 8, blobs, 4), 2);
    cpulm_pcache_free(pc);
}

TEST(pcache_failed_fill_and_tiny_limit) {
    cpulm_pcache *pc = cpulm_pcache_new(B, BB, 1 << 20);
    REQUIRE(t, pc);
    cpulm_token a[16];
    for (int i = 0; i < 16; i++)
        a[i] = i;
    filler f = {a, 0, 2}; /* the third fill fails: two blocks stay cached */
    CHECK_EQ_INT(t, cpulm_pcache_store(pc, a, 16, fill, &f), 2);
    const uint8_t *blobs[4];
    CHECK_EQ_INT(t, cpulm_pcache_lookup(pc, a, 16, blobs, 4), 2);
    CHECK(t, blobs_match(blobs, 2, a));
    cpulm_pcache_free(pc);
    cpulm_pcache *none = cpulm_pcache_new(B, BB, 10); /* cannot hold one block */
    REQUIRE(t, none);
    CHECK_EQ_INT(t, store(none, a, 16, NULL), 0);
    CHECK_EQ_INT(t, cpulm_pcache_lookup(none, a, 16, blobs, 4), 0);
    cpulm_pcache_free(none);
    CHECK(t, cpulm_pcache_new(0, BB, 100) == NULL);
}
