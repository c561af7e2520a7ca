/* test_pcache.c: the server's RAM prompt cache (src/server/pcache.c) as a data structure:
 * longest whole-block prefix lookup, shared prefixes stored once, blobs read back intact,
 * LRU eviction of leaves within the byte limit, failed fills. The scheduler's use of it
 * (restored KV gives the same text) is in test_sched.c. */
#include <string.h>

#include "server/hcache.h"
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

/* Checkpoint of the prefix ending at block k: bytes of value 100 + k. */
typedef struct ck_filler {
    int32_t k, n_calls, fail;
} ck_filler;

#define CB 64 /* checkpoint bytes: four blocks' worth */

static int fill_ck(void *user, uint8_t *dst) {
    ck_filler *f = user;
    if (f->fail) return 1;
    f->n_calls++;
    memset(dst, 100 + f->k, CB);
    return 0;
}

/* Checkpoints ride on cached blocks: only a cached chain takes one, lookup gives each
 * matched block's (or NULL), a second one is not filled again, failed fills change
 * nothing, their bytes count against the limit and leave with their block. */
TEST(pcache_checkpoints) {
    cpulm_pcache *pc = cpulm_pcache_new(B, BB, 1 << 20);
    REQUIRE(t, pc);
    cpulm_token a[16], c[16];
    for (int i = 0; i < 16; i++)
        a[i] = 10 + i, c[i] = i < 8 ? 10 + i : 70 + i; /* c shares a's first two blocks */
    ck_filler f = {2, 0, 0};
    CHECK_EQ_INT(t, cpulm_pcache_set_ckpt(pc, a, 8, CB, fill_ck, &f), -1); /* not cached */
    CHECK_EQ_INT(t, store(pc, a, 16, NULL), 4);
    CHECK_EQ_INT(t, cpulm_pcache_set_ckpt(pc, a, 7, CB, fill_ck, &f), -1); /* not a block end */
    CHECK_EQ_INT(t, cpulm_pcache_set_ckpt(pc, a, 8, CB, fill_ck, &f), 0);
    CHECK_EQ_INT(t, cpulm_pcache_set_ckpt(pc, a, 8, CB, fill_ck, &f), 0);
    CHECK_EQ_INT(t, f.n_calls, 1);
    ck_filler bad = {4, 0, 1};
    CHECK_EQ_INT(t, cpulm_pcache_set_ckpt(pc, a, 16, CB, fill_ck, &bad), -1);
    cpulm_pcache_stats st;
    cpulm_pcache_get_stats(pc, &st);
    CHECK_EQ_INT(t, st.n_ckpts, 1);
    const uint8_t *blobs[4], *cks[4];
    CHECK_EQ_INT(t, cpulm_pcache_lookup_ckpt(pc, c, 16, blobs, cks, 4), 2);
    CHECK(t, cks[0] == NULL && cks[1] && cks[1][0] == 102 && cks[1][CB - 1] == 102);
    CHECK_EQ_INT(t, cpulm_pcache_lookup_ckpt(pc, a, 16, blobs, cks, 4), 4);
    CHECK(t, cks[1] && !cks[2] && !cks[3]);
    cpulm_pcache_free(pc);

    /* room for 4 blocks + one checkpoint: a checkpoint on a second chain evicts the first's
     * least recent leaf, the checkpointed block, and its checkpoint with it */
    cpulm_pcache *probe = cpulm_pcache_new(B, BB, 1 << 20);
    store(probe, a, B, NULL);
    cpulm_pcache_get_stats(probe, &st);
    cpulm_pcache_free(probe);
    pc = cpulm_pcache_new(B, BB, 4 * st.bytes + CB + st.bytes / 2);
    REQUIRE(t, pc);
    cpulm_token d[8];
    for (int i = 0; i < 8; i++)
        d[i] = 200 + i;
    CHECK_EQ_INT(t, store(pc, a, 8, NULL), 2);
    CHECK_EQ_INT(t, cpulm_pcache_set_ckpt(pc, a, 8, CB, fill_ck, &f), 0);
    CHECK_EQ_INT(t, store(pc, d, 8, NULL), 2);
    ck_filler fd = {9, 0, 0};
    CHECK_EQ_INT(t, cpulm_pcache_set_ckpt(pc, d, 8, CB, fill_ck, &fd), 0);
    cpulm_pcache_get_stats(pc, &st);
    CHECK(t, st.bytes <= st.max_bytes);
    CHECK_EQ_INT(t, st.n_ckpts, 1);
    CHECK_EQ_INT(t, cpulm_pcache_lookup_ckpt(pc, a, 8, blobs, cks, 4), 1);
    CHECK(t, cks[0] == NULL);
    CHECK_EQ_INT(t, cpulm_pcache_lookup_ckpt(pc, d, 8, blobs, cks, 4), 2);
    CHECK(t, cks[1] && cks[1][0] == 109);
    cpulm_pcache_free(pc);
}

/* Hybrid checkpoint points (hcache.h): the last block boundary before the last token, the
 * fork, every `every` tokens; never 0 nor the prompt's end; spacing by memory. */
TEST(pcache_hybrid_checkpoint_points) {
    CHECK_EQ_INT(t, cpulm_hcache_every_for(57 << 10, 16 << 10, 32), 128);
    CHECK_EQ_INT(t, cpulm_hcache_every_for(1, 16 << 10, 32), 32);
    CHECK_EQ_INT(t, cpulm_hcache_every_for(48u << 20, 32u << 15, 32), 1536);
    /* a 230-token prompt, every 128, forked at 192 */
    int got[8], n = 0;
    for (int32_t p = 0; p <= 256 && n < 8; p++)
        if (cpulm_hcache_is_point(p, 230, 192, 32, 128)) got[n++] = p;
    CHECK_EQ_INT(t, n, 3);
    CHECK(t, got[0] == 128 && got[1] == 192 && got[2] == 224);
    CHECK(t, !cpulm_hcache_is_point(224, 224, 0, 32, 128)); /* 224 tokens: 192 is the last */
    CHECK(t, cpulm_hcache_is_point(192, 224, 0, 32, 128));
    CHECK(t, !cpulm_hcache_is_point(0, 100, 0, 32, 32));
}
