/* test_memory.c: the one memory computation (src/memory.c). The estimate `cpulm info`,
 * `plan` and `report` print (cpulm_model_memory) must be what cpulm_ctx_new allocates:
 * measured with the allocator hook, over real tiny models of several architectures and
 * types and over synthesized shapes, at several context sizes, batch sizes, sequence and
 * thread counts and KV types. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "runtime/memory.h"
#include "toolkit/synth.h"
#include "test.h"

/* The context and pool structs themselves are the only allocations outside the estimate. */
#define SLACK 4096

typedef struct mem_case {
    int32_t n_ctx, n_seq, n_batch, n_threads, n_outputs;
    cpulm_kv_type kv;
    cpulm_embd_mode embd;
    cpulm_pooling pool;
} mem_case;

static const mem_case cases[] = {
    {64, 1, 16, 1, 0, CPULM_KV_F16, CPULM_EMBD_OFF, CPULM_POOLING_NONE},
    {256, 4, 512, 2, 0, CPULM_KV_F32, CPULM_EMBD_OFF, CPULM_POOLING_NONE},
    {128, 2, 7, 2, 5, CPULM_KV_Q8_0, CPULM_EMBD_OFF, CPULM_POOLING_NONE},
    {33, 3, 64, 1, 64, CPULM_KV_F16, CPULM_EMBD_OFF, CPULM_POOLING_NONE},
    /* embeddings: pooled only (no logits buffer), per token with logits */
    {64, 3, 32, 2, 0, CPULM_KV_F16, CPULM_EMBD_ONLY, CPULM_POOLING_MEAN},
    {64, 2, 32, 1, 8, CPULM_KV_F32, CPULM_EMBD_WITH_LOGITS, CPULM_POOLING_NONE},
};

/* Checks every case on m; returns the number of contexts made. */
static int check_model(test_ctx *t, const cpulm_model *m, const char *label) {
    int made = 0;
    cpulm_model_info in;
    cpulm_model_get_info(m, &in);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const mem_case *k = &cases[i];
        cpulm_ctx_params p = cpulm_ctx_default_params();
        p.n_ctx = k->n_ctx;
        p.n_seq_max = k->n_seq;
        p.n_batch = k->n_batch;
        p.n_threads = k->n_threads;
        p.n_outputs_max = k->n_outputs;
        p.kv_type = k->kv;
        p.embeddings = k->embd;
        p.pooling = k->pool;
        cpulm_memory est;
        const cpulm_status st = cpulm_model_memory(m, &p, &est);
        CHECK_EQ_INT(t, st, CPULM_OK);
        if (st != CPULM_OK) continue;
        test_alloc_count_begin();
        cpulm_ctx *c = cpulm_ctx_new(m, &p, NULL);
        const unsigned long long got = test_alloc_bytes();
        test_alloc_count_end();
        if (!c) continue; /* e.g. a q8_0 cache on a KV row that is not a multiple of 32 */
        made++;
        const unsigned long long want = est.kv + est.scratch + est.state;
        if (got < want || got - want > SLACK)
            fprintf(stderr, "  %s case %zu: allocated %llu, estimated %llu\n", label, i, got, want);
        CHECK(t, got >= want && got - want <= SLACK);
        CHECK_EQ_INT(t, cpulm_ctx_memory_bytes(c), want);
        CHECK_EQ_INT(t, est.weights, in.weight_bytes);
        CHECK_EQ_INT(t, est.total, est.weights + est.kv + est.scratch + est.state);
        CHECK_EQ_INT(t, est.kv_per_token, cpulm_model_kv_bytes(m, 1, k->kv));
        cpulm_ctx_free(c);
    }
    return made;
}

TEST(memory_estimate_matches_allocation_tiny_models) {
    static const char *const files[] = {
        "models/stories260K.gguf",
        "testdata/models/tiny-llama-q4_0.gguf",
        "testdata/models/tiny-llama3-q4_k_m.gguf",
        "testdata/models/tiny-qwen2-f16.gguf",
        "testdata/models/tiny-qwen2-q8_0.gguf",
        "testdata/models/tiny-llama-bf16.gguf",
    };
    int made = 0;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        const char *path = test_shared_path(files[i]);
        if (!path) continue;
        cpulm_model *m = cpulm_model_load(path, NULL, NULL);
        if (!m) fprintf(stderr, "  cannot load %s\n", path);
        REQUIRE(t, m != NULL);
        made += check_model(t, m, files[i]);
        cpulm_model_free(m);
    }
    if (!made) SKIP(t, "CPULM_SHARED models not found");
    CHECK(t, made >= 12);
}

TEST(memory_estimate_matches_allocation_synth) {
    /* shapes where the widest matmul input is n_ff, the query width or n_embd */
    static const struct {
        int32_t embd, ff, head, head_kv, vocab;
        cpulm_dtype type;
    } shapes[] = {
        {256, 512, 4, 2, 512, CPULM_DTYPE_Q4_0},
        {256, 128, 8, 8, 300, CPULM_DTYPE_F16},
        {512, 256, 8, 1, 1000, CPULM_DTYPE_Q8_0},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        cpulm_synth_params sp;
        REQUIRE(t, cpulm_synth_shape("tiny", &sp) == CPULM_OK);
        sp.hp.n_embd = shapes[i].embd;
        sp.hp.n_ff = shapes[i].ff;
        sp.hp.n_head = shapes[i].head;
        sp.hp.n_head_kv = shapes[i].head_kv;
        sp.hp.n_vocab = shapes[i].vocab;
        sp.type = shapes[i].type;
        sp.tied = (int)(i % 2);
        char path[512];
        snprintf(path, sizeof path, "%s/memory-%zu.gguf", test_tmp_dir(), i);
        REQUIRE(t, cpulm_synth_write(path, &sp, NULL) == CPULM_OK);
        cpulm_model *m = cpulm_model_load(path, NULL, NULL);
        REQUIRE(t, m != NULL);
        CHECK_EQ_INT(t, check_model(t, m, path), (int)(sizeof cases / sizeof cases[0]));
        cpulm_model_free(m);
        remove(path);
    }
}

/* A hybrid model (qwen35): the KV cache of its full-attention layers only, the recurrent
 * state (a fixed size per sequence) and the Gated DeltaNet scratch are what a context
 * allocates. */
TEST(memory_estimate_matches_allocation_hybrid) {
    cpulm_synth_params sp;
    REQUIRE(t, cpulm_synth_shape("tiny-qwen35", &sp) == CPULM_OK);
    sp.type = CPULM_DTYPE_Q8_0;
    char path[512];
    snprintf(path, sizeof path, "%s/memory-hybrid.gguf", test_tmp_dir());
    REQUIRE(t, cpulm_synth_write(path, &sp, NULL) == CPULM_OK);
    cpulm_model *m = cpulm_model_load(path, NULL, NULL);
    REQUIRE(t, m != NULL);
    CHECK_EQ_INT(t, check_model(t, m, path), (int)(sizeof cases / sizeof cases[0]));
    cpulm_ctx_params p = cpulm_ctx_default_params();
    p.n_ctx = 256;
    p.n_seq_max = 3;
    cpulm_memory est;
    REQUIRE(t, cpulm_model_memory(m, &p, &est) == CPULM_OK);
    /* 3 recurrent layers x 3 sequences x (3 conv inputs of 256 channels + 4 heads of 32x32) */
    CHECK_EQ_INT(t, est.state, 4ull * 3 * 3 * (3 * 256 + 4 * 32 * 32));
    /* one full-attention layer: K and V rows of 2 x 64 f16 per token */
    CHECK_EQ_INT(t, est.kv_per_token, 2ull * 2 * 64 * 2);
    cpulm_model_free(m);
    remove(path);
}

TEST(memory_scratch_by_hand) {
    /* n_embd 256, 4 heads of 64, 2 KV heads, n_ff 768, vocab 512; batch 8, n_ctx 100,
     * 2 outputs, 3 threads */
    const cpulm_hparams hp = {.n_vocab = 512,
                              .n_embd = 256,
                              .n_layer = 2,
                              .n_head = 4,
                              .n_head_kv = 2,
                              .head_dim = 64,
                              .n_ff = 768};
    const cpulm_mem_ctx c = {.n_ctx = 100,
                             .n_seq_max = 2,
                             .n_batch = 8,
                             .n_outputs_max = 2,
                             .n_threads = 3,
                             .kv_type = CPULM_KV_F16};
    cpulm_mem_scratch s;
    cpulm_mem_scratch_of(&hp, &c, &s);
    CHECK_EQ_INT(t, s.xn, 4 * 8 * 768); /* n_ff is the widest here */
    CHECK_EQ_INT(t, s.kc, 4 * 8 * 128);
    CHECK_EQ_INT(t, s.actq_stride, 768 * 4);
    CHECK_EQ_INT(t, s.scores_stride, 64); /* head_dim rounded up to 16: rope angles */
    CHECK_EQ_INT(t, s.scores, 4 * 64 * 3);
    /* attention: per thread 256 rows (2 query heads per KV head x 128 tokens) x (2 x 64
     * transposed queries (doubles) + 3 x 64 + 5 + 2 x 256 tile scores and scale factors + 1)
     * + 3 x 256 x 2 x 64 K/V tiles of both KV heads (f32, then half as much again for their
     * bf16 pairs) + 64 = 312896 floats; split partials for 2
     * sequences x 4 heads x 1 chunk x (64 + 2); the block plan 4 x 9 and the blocks' numerics
     * 9 bytes; the sequences' rows 4 x 2; the split chunk counters 4 x 16 x 2 KV heads */
    CHECK_EQ_INT(t, s.attn, 4 * (3 * 312896 + 2 * 4 * 66) + 4 * 9 + 9 + 4 * 2 + 4 * 16 * 2);
    CHECK_EQ_INT(t, s.logits, 4 * 2 * 512);
    /* x 8192 + xn 24576 + q 8192 + kc 4096 + vc 4096 + att 8192 + g 24576 + u 24576 +
     * actq 24576 + scores 768 + attn 3757045 + tok/pos/seq 96 + out_idx 8 + logits 4096 +
     * work 192 */
    CHECK_EQ_INT(t, cpulm_mem_scratch_total(&s), 3893277);
    cpulm_memory m;
    cpulm_mem_need(&hp, 1000, &c, &m);
    CHECK_EQ_INT(t, m.kv_per_token, 2 * 2 * 128 * 2); /* K and V, 2 layers, 128 halves */
    /* 2 layers x K/V x 2 sequences of 100 rows of 256 bytes, each run padded to pages, and
     * 3 int32 of bookkeeping per sequence */
    const uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE), run = (100 * 256 + pg - 1) / pg * pg;
    CHECK_EQ_INT(t, m.kv, 2 * 2 * 2 * run + 3 * 4 * 2);
    CHECK_EQ_INT(t, m.total, 1000 + m.kv + 3893277);
}
