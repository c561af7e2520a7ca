/* test_bench.c: the pure parts of the bench tools: sweep lists and their combinations,
 * statistics, plan arithmetic (against hand-computed values, llama.cpp's published sizes
 * and the sizes of real quantized files), the price table, cost, SVG output, JSON output
 * with llama-bench's field names and --compare. No timing is asserted anywhere. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/json.h"
#include "model/model.h"
#include "bench.h"
#include "bench_plan.h"
#include "svg.h"
#include "toolkit/synth.h"
#include "test.h"

static int list_is(const bench_list *l, const int32_t *v, int n) {
    if (l->n != n) return 0;
    for (int i = 0; i < n; i++)
        if (l->v[i] != v[i]) return 0;
    return 1;
}

static int parse(const char *s, bench_list *l) {
    char err[128];
    memset(l, 0, sizeof *l);
    return bench_list_parse(s, 0, 512, l, err, sizeof err);
}

TEST(bench_list_forms) {
    bench_list l;
    CHECK(t, parse("1,2,4", &l) == 0 && list_is(&l, (const int32_t[]){1, 2, 4}, 3));
    CHECK(t, parse("7", &l) == 0 && list_is(&l, (const int32_t[]){7}, 1));
    CHECK(t, parse("1-4", &l) == 0 && list_is(&l, (const int32_t[]){1, 2, 3, 4}, 4));
    CHECK(t, parse("8-32+8", &l) == 0 && list_is(&l, (const int32_t[]){8, 16, 24, 32}, 4));
    CHECK(t, parse("1-16*2", &l) == 0 && list_is(&l, (const int32_t[]){1, 2, 4, 8, 16}, 5));
    CHECK(t, parse("1-10*3,64", &l) == 0 && list_is(&l, (const int32_t[]){1, 3, 9, 64}, 4));
    CHECK(t, parse("2,1-2", &l) == 0 && list_is(&l, (const int32_t[]){2, 1, 2}, 3));
}

TEST(bench_list_rejects) {
    bench_list l;
    const char *bad[] = {"",      "1,",  ",1",    "a",     "1;2",   "4-1", "0-8*2",
                         "1-8*1", "600", "1-600", "1-100", "1-4+0", "-1",  "1--2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = parse(bad[i], &l);
        if (rc == 0) fprintf(stderr, "  accepted '%s'\n", bad[i]);
        CHECK(t, rc == -1);
    }
    char err[128];
    memset(&l, 0, sizeof l);
    CHECK(t, bench_list_parse("0", 1, 512, &l, err, sizeof err) == -1 &&
                 strstr(err, "want an integer in [1, 512]"));
}

TEST(bench_kv_list) {
    bench_list l = {0};
    char err[128];
    REQUIRE(t, bench_kv_list_parse("f16,q8_0,f32", &l, err, sizeof err) == 0);
    CHECK(t,
          l.n == 3 && l.v[0] == CPULM_KV_F16 && l.v[1] == CPULM_KV_Q8_0 && l.v[2] == CPULM_KV_F32);
    CHECK(t, !strcmp(bench_kv_name(CPULM_KV_Q8_0), "q8_0") &&
                 !strcmp(bench_kv_name(CPULM_KV_F16), "f16"));
    memset(&l, 0, sizeof l);
    REQUIRE(t, bench_kv_list_parse("q4_0", &l, err, sizeof err) == 0);
    CHECK(t, l.n == 1 && l.v[0] == CPULM_KV_Q4_0 && !strcmp(bench_kv_name(CPULM_KV_Q4_0), "q4_0"));
    memset(&l, 0, sizeof l);
    CHECK(t, bench_kv_list_parse("q5_1", &l, err, sizeof err) == -1 && strstr(err, "q5_1"));
    memset(&l, 0, sizeof l);
    CHECK(t, bench_kv_list_parse("", &l, err, sizeof err) == -1);
}

TEST(bench_expand_defaults) {
    bench_params p;
    memset(&p, 0, sizeof p);
    bench_params_defaults(&p);
    bench_test tests[4];
    REQUIRE(t, bench_expand(&p, tests, 4) == 2);
    CHECK(t, tests[0].kind == BENCH_PP && tests[0].n_prompt == 512 && tests[0].n_batch == 2048 &&
                 tests[0].n_ubatch == 512 && tests[0].n_threads == 0 &&
                 tests[0].type_k == CPULM_KV_F16 && tests[0].n_parallel == 1);
    CHECK(t, tests[1].kind == BENCH_TG && tests[1].n_gen == 128 && tests[1].n_prompt == 0);
}

TEST(bench_expand_combinations) {
    bench_params p;
    memset(&p, 0, sizeof p);
    char err[128];
    REQUIRE(t, bench_list_parse("1,2", 1, 512, &p.threads, err, sizeof err) == 0);
    REQUIRE(t, bench_list_parse("256,512", 1, 4096, &p.n_batch, err, sizeof err) == 0);
    REQUIRE(t, bench_list_parse("64,128", 1, 4096, &p.n_prompt, err, sizeof err) == 0);
    REQUIRE(t, bench_list_parse("16", 1, 4096, &p.n_gen, err, sizeof err) == 0);
    REQUIRE(t, bench_list_parse("1,4", 1, 4096, &p.npl, err, sizeof err) == 0);
    REQUIRE(t, bench_list_parse("32", 1, 4096, &p.ttft, err, sizeof err) == 0);
    p.pg_prompt = (bench_list){{512}, 1};
    p.pg_gen = (bench_list){{128}, 1};
    bench_params_defaults(&p);
    CHECK(t, p.n_prompt.n == 2 && p.n_gen.n == 1); /* tests given: no llama-bench defaults added */
    /* 2 threads x 2 batches x (2 pp + 1 tg + 1 pg + 2 parallel + 1 ttft) */
    int n = bench_expand(&p, NULL, 0);
    CHECK_EQ_INT(t, n, 28);
    bench_test tests[28];
    REQUIRE(t, bench_expand(&p, tests, 28) == 28);
    CHECK(t, tests[0].n_batch == 256 && tests[0].n_threads == 1 && tests[0].kind == BENCH_PP &&
                 tests[0].n_prompt == 64);
    CHECK(t, tests[3].kind == BENCH_PG && tests[3].n_prompt == 512 && tests[3].n_gen == 128);
    CHECK(t, tests[5].kind == BENCH_PAR && tests[5].n_parallel == 4 && tests[5].n_prompt == 128 &&
                 tests[5].n_gen == 32);
    CHECK(t, tests[6].kind == BENCH_TTFT && tests[6].n_prompt == 32);
    CHECK(t, tests[7].n_threads == 2 && tests[7].n_batch == 256);
    CHECK(t, tests[14].n_batch == 512 && tests[14].n_threads == 1);
    /* the threads_batch axis multiplies the configurations */
    REQUIRE(t, bench_list_parse("1,2,4", 1, 512, &p.threads_batch, err, sizeof err) == 0);
    CHECK_EQ_INT(t, bench_expand(&p, NULL, 0), 84);
    /* a short output array is filled as far as it goes; the count is still the total */
    CHECK_EQ_INT(t, bench_expand(&p, tests, 3), 84);
}

TEST(bench_test_names_and_tokens) {
    char b[64];
    bench_test x = {.kind = BENCH_PP, .n_prompt = 512, .n_parallel = 1};
    bench_test_name(&x, b, sizeof b);
    CHECK(t, !strcmp(b, "pp512") && bench_test_tokens(&x) == 512);
    x = (bench_test){.kind = BENCH_TG, .n_gen = 128, .n_parallel = 1};
    bench_test_name(&x, b, sizeof b);
    CHECK(t, !strcmp(b, "tg128") && bench_test_tokens(&x) == 128);
    x = (bench_test){.kind = BENCH_PG, .n_prompt = 512, .n_gen = 128, .n_parallel = 1};
    bench_test_name(&x, b, sizeof b);
    CHECK(t, !strcmp(b, "pp512+tg128") && bench_test_tokens(&x) == 640);
    x = (bench_test){.kind = BENCH_PAR, .n_prompt = 128, .n_gen = 32, .n_parallel = 4};
    bench_test_name(&x, b, sizeof b);
    CHECK(t, !strcmp(b, "npl4 pp128+tg32") && bench_test_tokens(&x) == 640);
    x = (bench_test){.kind = BENCH_TTFT, .n_prompt = 256, .n_parallel = 1};
    bench_test_name(&x, b, sizeof b);
    CHECK(t, !strcmp(b, "ttft256") && bench_test_tokens(&x) == 256);
}

TEST(bench_stats_values) {
    const double x[] = {9, 4, 2, 5, 4, 7, 4, 5}; /* sorted: 2 4 4 4 5 5 7 9 */
    double copy[8];
    memcpy(copy, x, sizeof x);
    bench_stats s;
    bench_stats_compute(x, 8, &s);
    CHECK_EQ_INT(t, s.n, 8);
    CHECK_NEAR(t, s.mean, 5.0, 1e-12);
    CHECK_NEAR(t, s.stddev, sqrt(32.0 / 7.0), 1e-12); /* sum of squares 32, n - 1 = 7 */
    CHECK_NEAR(t, s.min, 2, 0);
    CHECK_NEAR(t, s.max, 9, 0);
    CHECK_NEAR(t, s.p50, 4.5, 1e-12);     /* rank 3.5 */
    CHECK_NEAR(t, s.p90, 7.6, 1e-12);     /* rank 6.3: 7 + 0.3 * 2 */
    CHECK_NEAR(t, s.p99, 8.86, 1e-12);    /* rank 6.93 */
    CHECK(t, !memcmp(copy, x, sizeof x)); /* input untouched */
    CHECK_NEAR(t, bench_percentile(x, 8, 25), 4.0, 1e-12);
    bench_stats_compute((const double[]){3.5}, 1, &s);
    CHECK(t, s.mean == 3.5 && s.stddev == 0 && s.p50 == 3.5 && s.p99 == 3.5);
    bench_stats_compute((const double[]){1e9 + 1, 1e9 + 3}, 2, &s);
    CHECK_NEAR(t, s.stddev, sqrt(2.0), 1e-6); /* no cancellation for large, close values */
}

TEST(bench_summarize_parallel) {
    bench_result r;
    memset(&r, 0, sizeof r);
    r.t = (bench_test){.kind = BENCH_PAR, .n_prompt = 16, .n_gen = 8, .n_parallel = 4};
    r.n_reps = 2;
    for (int i = 0; i < 2; i++) {
        r.pp_ns[i] = 1e9 * (i + 1); /* 1 s, 2 s */
        r.tg_ns[i] = 2e9;
        r.ns[i] = r.pp_ns[i] + r.tg_ns[i];
        r.ts[i] = 96 / (r.ns[i] * 1e-9);
    }
    bench_summary s;
    bench_summarize(&r, &s);
    CHECK_NEAR(t, s.pp_ts.mean, (64.0 + 32.0) / 2, 1e-9); /* 4 x 16 prompt tokens in 1 s and 2 s */
    CHECK_NEAR(t, s.tg_ts.mean, 16.0, 1e-9);              /* 4 x 8 tokens in 2 s */
    CHECK_NEAR(t, s.tg_seq.mean, 4.0, 1e-9);
    CHECK_NEAR(t, s.pp_ms.mean, 1500.0, 1e-9);
    CHECK_NEAR(t, s.ts.mean, (96 / 3.0 + 96 / 4.0) / 2, 1e-9);
}

/* ---- plan ---- */

TEST(bench_plan_kv_llama3_8b) {
    const plan_shape *s = plan_shape_find("8b");
    REQUIRE(t, s != NULL);
    /* 2 x 32 layers x 8 KV heads x 128 dims x 2 bytes = 128 KiB */
    CHECK_EQ_INT(t, plan_kv_bytes_per_token(s, CPULM_KV_F16), 128 * 1024);
    CHECK_EQ_INT(t, plan_kv_bytes_per_token(s, CPULM_KV_Q8_0), 2 * 32 * (1024 / 32) * 34);
    CHECK_EQ_INT(t, plan_kv_bytes_per_token(s, CPULM_KV_F32), 256 * 1024);
    const plan_shape *s70 = plan_shape_find("70b");
    REQUIRE(t, s70 != NULL);
    CHECK_EQ_INT(t, plan_kv_bytes_per_token(s70, CPULM_KV_F16), 2 * 80 * 1024 * 2);
    CHECK(t, plan_shape_find("9b") == NULL);
}

TEST(bench_plan_weights_llama3_8b) {
    const plan_shape *s = plan_shape_find("8b");
    plan_weights w;
    REQUIRE(t, s && plan_weights_of(s, "q4_0", &w) == 0);
    /* by hand: 2 x 128256 x 4096 embedding/output, 32 x 218103808 2-D layer weights,
     * 32 x 2 x 4096 + 4096 norm weights */
    CHECK_EQ_INT(t, w.n_params, 8030261248LL);
    /* Q4_0 (18 bytes / 32): embedding 295501824 + layers 3925868544; output Q6_K (210 / 256)
     * 430940160; norms F32 1064960 */
    CHECK_EQ_INT(t, w.bytes, 4653375488LL);
    const double gib = 1024.0 * 1024 * 1024;
    /* llama-bench prints these model sizes for Llama 3 8B: 4.33 / 4.58 / 7.95 / 14.96 GiB */
    CHECK_NEAR(t, w.bytes / gib, 4.33, 0.005);
    REQUIRE(t, plan_weights_of(s, "q4_k_m", &w) == 0);
    CHECK_NEAR(t, w.bytes / gib, 4.58, 0.005);
    REQUIRE(t, plan_weights_of(s, "q8_0", &w) == 0);
    CHECK_NEAR(t, w.bytes / gib, 7.95, 0.005);
    REQUIRE(t, plan_weights_of(s, "f16", &w) == 0);
    CHECK_NEAR(t, w.bytes / gib, 14.96, 0.005);
    REQUIRE(t, plan_weights_of(plan_shape_find("70b"), "q4_k_m", &w) == 0);
    CHECK_NEAR(t, w.bytes / gib, 39.59, 0.005); /* llama 70B Q4_K - Medium: 39.59 GiB, 70.55 B */
    CHECK_NEAR(t, w.n_params / 1e9, 70.55, 0.005);
    CHECK(t, plan_weights_of(s, "q3_k", &w) == -1);
}

/* The type rules must give the byte size of real files quantized by llama.cpp. */
TEST(bench_plan_weights_match_files) {
    const char *types[] = {"q8_0", "f16", "bf16", "q4_k_m"};
    int checked = 0;
    for (int i = 0; i < 4; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "testdata/models/tiny-llama-%s.gguf", types[i]);
        const char *path = test_shared_path(rel);
        if (!path) continue;
        cpulm_model *m = cpulm_model_load(path, NULL, NULL);
        REQUIRE(t, m != NULL);
        cpulm_model_info in;
        cpulm_model_get_info(m, &in);
        plan_shape s;
        plan_shape_of_model(m, &s);
        plan_weights w;
        CHECK(t, plan_weights_of(&s, types[i], &w) == 0);
        if (w.bytes != in.weight_bytes)
            fprintf(stderr, "  %s: %llu != %llu\n", types[i], (unsigned long long)w.bytes,
                    (unsigned long long)in.weight_bytes);
        CHECK(t, w.bytes == in.weight_bytes);
        CHECK(t, w.n_params == in.n_params);
        CHECK(t, !s.tied);
        cpulm_model_free(m);
        checked++;
    }
    if (!checked) SKIP(t, "CPULM_SHARED tiny-llama models not found");
}

TEST(bench_plan_compute_and_memory) {
    plan_shape tiny;
    memset(&tiny, 0, sizeof tiny);
    tiny.hp = (cpulm_hparams){.n_vocab = 512,
                              .n_embd = 256,
                              .n_layer = 2,
                              .n_head = 4,
                              .n_head_kv = 2,
                              .head_dim = 64,
                              .n_ff = 768,
                              .n_rot = 64};
    /* by hand, B = 512: activations 4 x 512 x (256 + 768 + 2x256 + 2x128 + 2x768) = 6815744;
     * quantized activations 3072 x 512 = 1572864; rope angles 4 x 64 x 2 threads = 512;
     * attention 4 x (2 threads x 312896 + 1 sequence x 4 heads x 1 chunk x 66) + 4 x 513 +
     * the blocks' numerics 513 + the sequences' rows 4 x 1 + split chunk counters 4 x 16 x 2
     * = 2506921 (see memory_scratch_by_hand); token/pos/seq 12
     * x 512 + out index 4 = 6148; logits 4 x 512 = 2048; work slots 64 x 2 = 128 */
    CHECK_EQ_INT(t, plan_compute_bytes(&tiny, 512, 256, 1, 2), 10904365);
    /* outputs are capped at the batch */
    CHECK_EQ_INT(
        t, plan_compute_bytes(&tiny, 2, 256, 8, 1) - plan_compute_bytes(&tiny, 2, 256, 2, 1), 0);
    plan_memory m;
    plan_memory_of(&tiny, 1000000, 256, 4, CPULM_KV_F16, 512, 2, &m);
    CHECK_EQ_INT(t, m.kv_per_token, 2 * 2 * 128 * 2);
    /* runs of 256 rows x 256 bytes are whole pages; + 3 int32 per sequence (length, and the
     * owner and count of the pages it shares) */
    CHECK_EQ_INT(t, m.kv_total, 1024 * 256 * 4 + 3 * 4 * 4);
    CHECK_EQ_INT(t, m.overhead, (100 << 20) + 1000000 / 4096 * 8);
    CHECK_EQ_INT(t, m.total, m.weights + m.kv_total + m.compute + m.overhead);
    /* + the split-attention partials of 3 more sequences (4 heads x 1 chunk x 66 floats) and
     * their rows (an int32 each) */
    CHECK_EQ_INT(t, m.compute, plan_compute_bytes(&tiny, 512, 256, 4, 2) + 4 * 3 * 4 * 66 + 4 * 3);
}

/* A hybrid shape (qwen35-9b: 32 layers, every 4th full attention): the KV cache counts the
 * 8 attention layers, the recurrent state of the 24 Gated DeltaNet layers is counted per
 * sequence and in the total, and the weights are the preset's tensors (as synth writes them). */
TEST(bench_plan_hybrid_kv_and_state) {
    const plan_shape *s = plan_shape_find("qwen35-9b");
    REQUIRE(t, s);
    CHECK_EQ_INT(t, plan_kv_layers(s), 8);
    CHECK_EQ_INT(t, plan_kv_bytes_per_token(s, CPULM_KV_F16), 2 * 8 * 4 * 256 * 2);
    plan_memory m;
    plan_memory_of(s, 1000000, 4096, 2, CPULM_KV_F16, 512, 2, &m);
    /* per layer and sequence: 32 value heads x 128 x 128 floats of delta-rule state, and the
     * last 3 inputs of the convolution over 4096 + 2 x 16 x 128 channels */
    const uint64_t per_layer = 32 * 128 * 128 * 4 + 3 * (4096 + 2 * 16 * 128) * 4;
    CHECK_EQ_INT(t, m.state, 2 * 24 * per_layer);
    CHECK_EQ_INT(t, m.total, m.weights + m.kv_total + m.compute + m.state + m.overhead);
    plan_weights w;
    REQUIRE(t, plan_weights_of(s, "q4_0", &w) == 0);
    cpulm_synth_params sp;
    REQUIRE(t, cpulm_synth_shape("qwen35-9b", &sp) == CPULM_OK);
    uint64_t bytes = 0;
    int64_t n_params = 0;
    REQUIRE(t, cpulm_synth_quantized_size(&sp, cpulm_qplan_preset_find("q4_0"), &bytes, &n_params,
                                          NULL) == CPULM_OK);
    CHECK_EQ_INT(t, w.bytes, bytes);
    CHECK_EQ_INT(t, w.n_params, n_params);
    const plan_shape *d = plan_shape_find("8b"); /* dense: every layer, no state */
    REQUIRE(t, d);
    CHECK_EQ_INT(t, plan_kv_layers(d), 32);
    plan_memory_of(d, 1000000, 4096, 2, CPULM_KV_F16, 512, 2, &m);
    CHECK_EQ_INT(t, m.state, 0);
}

static const char *price_text = "# test prices\n"
                                "# date: 2025-01-15\n"
                                "# source: hand-made for the test\n"
                                "instance\tvcpu\tmemory_gib\tarch\tusd_per_hour\n"
                                "a1.small\t2\t4\tarm64\t0.05\n"
                                "a1.big   8   16  arm64   0.20\n"
                                "\n"
                                "b2.small\t2\t8\tx86_64\t0.08\n"
                                "b2.big\t4\t32\tx86_64\t0.30\r\n"
                                "g1.big\t4\t16\tx86_64\t0.01\tL4-24GB\t2026-06\tsrc1\n"
                                "c9.big\t4\t64\tarm64\t0.50\t-\t2026-01\tsrc2\n";

TEST(bench_plan_prices_parse) {
    plan_prices p;
    char err[256];
    REQUIRE(t, plan_prices_parse(price_text, &p, err, sizeof err) == 0);
    CHECK_EQ_INT(t, p.n, 6);
    CHECK(t, !strcmp(p.date, "2025-01-15") && !strcmp(p.source, "hand-made for the test"));
    const plan_instance *g = plan_prices_find(&p, "g1.big"), *c9 = plan_prices_find(&p, "c9.big");
    REQUIRE(t, g && c9);
    CHECK(t,
          !strcmp(g->gpu, "L4-24GB") && !strcmp(g->date, "2026-06") && !strcmp(g->source, "src1"));
    CHECK(t,
          !c9->gpu[0] && !strcmp(c9->date, "2026-01") && !plan_prices_find(&p, "a1.big")->date[0]);
    const plan_instance *b = plan_prices_find(&p, "a1.big");
    REQUIRE(t, b != NULL);
    CHECK(t, b->vcpu == 8 && b->mem_gib == 16 && !strcmp(b->arch, "arm64") && b->usd_hour == 0.20);
    CHECK(t, plan_prices_find(&p, "b2.big")->usd_hour == 0.30);
    CHECK(t, plan_prices_find(&p, "zz") == NULL);
    plan_prices_release(&p);
    CHECK(t, plan_prices_parse("x1.a 2 4 arm64\n", &p, err, sizeof err) == -1 &&
                 strstr(err, "line 1"));
    CHECK(t, plan_prices_parse("# c\nx1.a 2 4 arm64 -1\n", &p, err, sizeof err) == -1 &&
                 strstr(err, "line 2"));
    CHECK(t, plan_prices_parse("x1.a two 4 arm64 0.1\n", &p, err, sizeof err) == -1);
    CHECK(t, plan_prices_parse("x1.a 2 4 arm64 0.1 L4 2026\n", &p, err, sizeof err) == -1);
}

TEST(bench_plan_shipped_prices) {
    plan_prices p;
    char err[512];
    REQUIRE(t, plan_prices_load(CPULM_PRICES_TSV, &p, err, sizeof err) == 0);
    CHECK(t, p.n >= 40);
    CHECK(t, p.date[0] && p.source[0]);
    const char *want[] = {"c7g.xlarge", "m7g.2xlarge", "r7g.large", "c8g.4xlarge", "c7i.2xlarge",
                          "m7i.xlarge", "c7a.xlarge",  "g5.xlarge", "g6.xlarge",   "g6e.xlarge"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const plan_instance *in = plan_prices_find(&p, want[i]);
        CHECK(t, in != NULL);
        if (in) CHECK(t, in->usd_hour > 0.01 && in->usd_hour < 20 && in->vcpu >= 1);
        if (in) CHECK(t, in->date[0] && in->source[0]); /* every row dated and sourced */
        if (in) CHECK(t, !in->gpu[0] == (want[i][0] != 'g'));
    }
    plan_prices_release(&p);
}

TEST(bench_plan_fitting) {
    plan_prices p;
    char err[256];
    REQUIRE(t, plan_prices_parse(price_text, &p, err, sizeof err) == 0);
    /* usable = 0.9 x memory - 1 GiB: 4 GiB -> 2.6, 8 -> 6.2, 16 -> 13.4, 32 -> 27.8 GiB */
    const plan_instance *small = plan_prices_find(&p, "a1.small");
    CHECK_NEAR(t, (double)plan_usable_bytes(small) / (1 << 30), 2.6, 1e-9);
    int idx[4];
    uint64_t three_gib = 3ull << 30;
    int n = plan_fitting(&p, three_gib, 0, idx, 4);
    REQUIRE(t, n == 4); /* g1.big (0.01) would hold it, but it is a GPU instance */
    CHECK(t, !strcmp(p.v[idx[0]].name, "b2.small")); /* 0.08: cheapest that holds 3 GiB */
    CHECK(t, !strcmp(p.v[idx[3]].name, "c9.big"));
    CHECK(t, !strcmp(p.v[idx[1]].name, "a1.big"));
    CHECK(t, !strcmp(p.v[idx[2]].name, "b2.big"));
    CHECK_EQ_INT(t, plan_fitting(&p, 1ull << 30, 1, idx, 4), 3); /* one per family */
    CHECK(t, !strcmp(p.v[idx[0]].name, "a1.small") && !strcmp(p.v[idx[1]].name, "b2.small"));
    CHECK_EQ_INT(t, plan_fitting(&p, 100ull << 30, 0, idx, 4), 0);
    plan_prices_release(&p);
}

TEST(bench_plan_cost) {
    /* 0.29 USD/h at 10 tokens/s: 36000 tokens per hour */
    CHECK_NEAR(t, plan_usd_per_mtok(0.29, 10), 0.29 / 36000 * 1e6, 1e-12);
    CHECK_NEAR(t, plan_usd_per_mtok(0.29, 10), 8.055555555555555, 1e-9);
    CHECK_NEAR(t, plan_tokens_per_usd(0.29, 10), 124137.93103448275, 1e-6);
    CHECK_NEAR(t, plan_usd_per_mtok(1.0, 1e6 / 3600.0), 1.0, 1e-12); /* 1M tokens per hour at $1 */
    CHECK(t, plan_usd_per_mtok(1, 0) == 0 && plan_tokens_per_usd(0, 5) == 0);
}

/* ---- SVG ---- */

TEST(bench_svg_axis) {
    double top, step;
    svg_nice_axis(0, 17.3, 6, &top, &step);
    CHECK(t, step == 5 && top == 20);
    svg_nice_axis(0, 0.93, 6, &top, &step);
    CHECK_NEAR(t, step, 0.2, 1e-12);
    CHECK_NEAR(t, top, 1.0, 1e-12);
    svg_nice_axis(0, 100, 5, &top, &step);
    CHECK(t, step == 20 && top == 100);
    svg_nice_axis(0, 0, 5, &top, &step); /* empty range still gives an axis */
    CHECK(t, top > 0 && step > 0);
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

TEST(bench_svg_charts) {
    const double x[] = {1, 2, 4, 8}, y1[] = {10, 19, 35, 60}, y2[] = {5, NAN, 7, 8};
    svg_series s[2] = {{"pp <512> & more", x, y1, 4}, {"tg \"128\"", x, y2, 4}};
    svg_chart c = {.title = "t/s vs threads",
                   .x_label = "threads",
                   .y_label = "tokens/s",
                   .log2_x = 1,
                   .series = s,
                   .n_series = 2,
                   .note = "a < b"};
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    svg_line_chart(&b, &c);
    REQUIRE(t, cpulm_buf_status(&b) == CPULM_OK);
    CHECK(t, !strncmp(b.data, "<svg xmlns=\"http://www.w3.org/2000/svg\"", 39));
    CHECK(t, strstr(b.data, "</svg>\n") == b.data + b.len - 7);
    CHECK(t, strstr(b.data, "data-name=\"pp &lt;512&gt; &amp; more\"") != NULL);
    CHECK(t, strstr(b.data, "data-name=\"tg &quot;128&quot;\"") != NULL);
    CHECK(t, strstr(b.data, "a &lt; b") != NULL);
    CHECK(t, strstr(b.data, "<512>") == NULL);
    CHECK_EQ_INT(t, count(b.data, "<g class=\"series\""), 2);
    CHECK_EQ_INT(t, count(b.data, "<circle"), 7); /* the NaN point is left out */
    CHECK_EQ_INT(t, count(b.data, "<polyline"), 2);
    CHECK_EQ_INT(t, count(b.data, "<text"), count(b.data, "</text>"));
    CHECK_EQ_INT(t, count(b.data, "<g "), count(b.data, "</g>"));
    cpulm_buf_reset(&b);
    const char *cats[] = {"c7g.large", "m7i.xlarge", "r8g.medium"};
    const double v1[] = {1.5, 2.5, 0.5}, v2[] = {0.5, 1.0, 0.25};
    svg_series bs[2] = {{"single", NULL, v1, 3}, {"batched", NULL, v2, 3}};
    svg_chart bc = {.title = "cost",
                    .x_label = "instance",
                    .y_label = "USD per 1M tokens",
                    .series = bs,
                    .n_series = 2,
                    .categories = cats,
                    .n_categories = 3};
    svg_bar_chart(&b, &bc);
    CHECK_EQ_INT(t, count(b.data, "<rect x="), 6 + 1); /* 6 bars + the plot frame */
    CHECK_EQ_INT(t, count(b.data, "class=\"legend\""), 2);
    CHECK(t, strstr(b.data, ">m7i.xlarge</text>") != NULL);
    cpulm_buf_release(&b);
}

TEST(bench_svg_error_bars) {
    const double x[] = {1, 2, 4, 8}, y[] = {10, 20, 40, 60}, e[] = {1, NAN, -2, 30};
    svg_series s = {"tg", x, y, 4};
    const double *err[1] = {e};
    svg_chart c = {.title = "t", .x_label = "x", .y_label = "y", .series = &s, .n_series = 1};
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    svg_line_chart(&b, &c);
    CHECK_EQ_INT(t, count(b.data, "class=\"err\""), 0);
    CHECK(t, strstr(b.data, ">80</text>") != NULL); /* axis to 60 * 1.08 -> 80 */
    CHECK(t, strstr(b.data, ">100</text>") == NULL);
    cpulm_buf_reset(&b);
    c.err = err;
    svg_line_chart(&b, &c);
    REQUIRE(t, cpulm_buf_status(&b) == CPULM_OK);
    CHECK_EQ_INT(t, count(b.data, "class=\"err\""), 2); /* NaN and negative draw none */
    CHECK(t, strstr(b.data, ">100</text>") != NULL);    /* the axis holds 60 + 30 */
    cpulm_buf_reset(&b);
    const char *cats[] = {"a", "b"};
    const double v[] = {5, 50}, ve[] = {0.5, 0}, *berr[1] = {ve};
    svg_series bs = {"single", NULL, v, 2};
    svg_chart bc = {.title = "bars",
                    .x_label = "x",
                    .y_label = "y",
                    .series = &bs,
                    .n_series = 1,
                    .categories = cats,
                    .n_categories = 2,
                    .err = berr};
    svg_bar_chart(&b, &bc);
    CHECK_EQ_INT(t, count(b.data, "class=\"err\""), 1); /* a 0 half-width draws none */
    CHECK_EQ_INT(t, count(b.data, "<g stroke=\"#222\">"), 1);
    CHECK_EQ_INT(t, count(b.data, "<g "), count(b.data, "</g>"));
    cpulm_buf_release(&b);
}

/* ---- JSON output and --compare ---- */

static void fake_result(bench_result *r, bench_kind kind, int np, int ng, double scale) {
    memset(r, 0, sizeof *r);
    r->t = (bench_test){.kind = kind,
                        .n_prompt = np,
                        .n_gen = ng,
                        .n_parallel = 1,
                        .n_batch = 2048,
                        .n_ubatch = 512,
                        .n_threads = 2};
    r->n_threads_used = r->n_threads_batch_used = 2;
    r->n_reps = 3;
    snprintf(r->test_time, sizeof r->test_time, "2025-01-01T00:00:00Z");
    for (int i = 0; i < 3; i++) {
        r->ns[i] = r->pp_ns[i] = (1 + 0.1 * i) * 1e9;
        r->ts[i] = scale * (np + ng) / (r->ns[i] * 1e-9);
    }
}

static const cpulm_json *json_file(const char *path, cpulm_json_doc **doc) {
    size_t n;
    char *text = test_read_file(path, &n);
    *doc = NULL;
    if (text) cpulm_json_parse(text, n, NULL, doc, NULL, NULL);
    free(text);
    return *doc ? cpulm_json_root(*doc) : NULL;
}

TEST(bench_json_llama_bench_fields) {
    bench_env e = {.version = "0.1.0 (abc1234)",
                   .commit = "abc1234",
                   .kernels = "avx2",
                   .cpu = "Test CPU \"9000\"",
                   .model_file = "m.gguf",
                   .model_type = "llama 1B Q4_0",
                   .model_size = 1000,
                   .n_params = 2000};
    bench_result r[2];
    fake_result(&r[0], BENCH_PP, 512, 0, 1);
    fake_result(&r[1], BENCH_TG, 0, 128, 1);
    char path[512];
    snprintf(path, sizeof path, "%s/bench_a.json", test_tmp_dir());
    FILE *f = fopen(path, "w");
    REQUIRE(t, f && bench_write(f, BENCH_FMT_JSON, &e, r, 2) == 0);
    fclose(f);
    cpulm_json_doc *doc;
    const cpulm_json *root = json_file(path, &doc);
    REQUIRE(t, root && root->type == CPULM_JSON_ARRAY && cpulm_json_len(root) == 2);
    const char *fields[] = {
        "build_commit", "build_number",   "cpu_info",     "model_filename", "model_type",
        "model_size",   "model_n_params", "n_batch",      "n_ubatch",       "n_threads",
        "type_k",       "type_v",         "n_prompt",     "n_gen",          "test_time",
        "avg_ns",       "stddev_ns",      "avg_ts",       "stddev_ts",      "samples_ns",
        "samples_ts",   "cpulm_version",  "kernel_level", "cpu_name",       "date"};
    const cpulm_json *o = cpulm_json_at(root, 0);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (!cpulm_json_get(o, fields[i])) fprintf(stderr, "  missing %s\n", fields[i]);
        CHECK(t, cpulm_json_get(o, fields[i]) != NULL);
    }
    CHECK(t, !strcmp(cpulm_json_str(cpulm_json_get(o, "cpu_info")), "Test CPU \"9000\""));
    CHECK_EQ_INT(t, cpulm_json_len(cpulm_json_get(o, "samples_ns")), 3);
    CHECK_EQ_INT(t, cpulm_json_num(cpulm_json_get(o, "avg_ns"), 0), 1100000000);
    double mean_ts = (512 / 1.0 + 512 / 1.1 + 512 / 1.2) / 3;
    CHECK_NEAR(t, cpulm_json_num(cpulm_json_get(o, "avg_ts"), 0), mean_ts, 1e-6);
    CHECK(t, !strcmp(cpulm_json_str(cpulm_json_get(cpulm_json_at(root, 1), "test")), "tg128"));
    CHECK_EQ_INT(t, cpulm_json_num(cpulm_json_get(cpulm_json_at(root, 1), "n_gen"), 0), 128);
    cpulm_json_free(doc);
}

TEST(bench_compare_ratio) {
    bench_env e = {.version = "v",
                   .commit = "c",
                   .kernels = "k",
                   .cpu = "cpu",
                   .model_file = "m",
                   .model_type = "t"};
    bench_result a[2], b[1];
    fake_result(&a[0], BENCH_PP, 512, 0, 1);
    fake_result(&a[1], BENCH_TG, 0, 128, 1);
    fake_result(&b[0], BENCH_PP, 512, 0, 2); /* twice as fast */
    char pa[512], pb[512], po[512];
    snprintf(pa, sizeof pa, "%s/cmp_a.json", test_tmp_dir());
    snprintf(pb, sizeof pb, "%s/cmp_b.jsonl", test_tmp_dir());
    snprintf(po, sizeof po, "%s/cmp_out.md", test_tmp_dir());
    FILE *f = fopen(pa, "w");
    REQUIRE(t, f && bench_write(f, BENCH_FMT_JSON, &e, a, 2) == 0);
    fclose(f);
    f = fopen(pb, "w");
    REQUIRE(t, f && bench_write(f, BENCH_FMT_JSONL, &e, b, 1) == 0);
    fclose(f);
    f = fopen(po, "w");
    REQUIRE(t, f && bench_compare(f, pa, pb) == 0);
    fclose(f);
    char *out = test_read_file(po, NULL);
    REQUIRE(t, out != NULL);
    CHECK(t, strstr(out, "| pp512 | 2 | 2048/512 | f16 |") != NULL);
    CHECK(t, strstr(out, "| 2.000 |") != NULL);                     /* B/A of pp512 */
    CHECK(t, strstr(out, "| tg128 |") && strstr(out, "| - | - |")); /* only in A */
    free(out);
    f = fopen(po, "w");
    char missing[600];
    snprintf(missing, sizeof missing, "%s/none.json", test_tmp_dir());
    CHECK(t, bench_compare(f, pa, missing) == -1);
    fclose(f);
}

/* -d is a config axis; zero-length tests are dropped; names follow llama-bench ("@ dN"). */
TEST(bench_depth_and_zero_lengths) {
    bench_params p;
    memset(&p, 0, sizeof p);
    char err[128], b[64];
    REQUIRE(t, bench_list_parse("0,512", 0, 1 << 20, &p.n_prompt, err, sizeof err) == 0);
    REQUIRE(t, bench_list_parse("0", 0, 1 << 20, &p.n_gen, err, sizeof err) == 0);
    REQUIRE(t, bench_list_parse("0,4096", 0, 1 << 20, &p.n_depth, err, sizeof err) == 0);
    p.pg_prompt = (bench_list){{0, 0}, 2};
    p.pg_gen = (bench_list){{16, 0}, 2};
    bench_params_defaults(&p);
    bench_test tests[8];
    int n = bench_expand(&p, tests, 8);
    REQUIRE(t, n == 4); /* (pp512, pg 0,16) x depths 0, 4096; pg 0,0 and -n 0 dropped */
    CHECK(t, tests[0].kind == BENCH_PP && tests[0].n_prompt == 512 && tests[0].n_depth == 0);
    CHECK(t, tests[3].kind == BENCH_PG && tests[3].n_gen == 16 && tests[3].n_depth == 4096);
    bench_test_name(&tests[2], b, sizeof b);
    CHECK(t, !strcmp(b, "pp512 @ d4096"));
    bench_test_name(&tests[3], b, sizeof b);
    CHECK(t, !strcmp(b, "tg16 @ d4096"));
}

/* pp's int8 work per prompt token: 2 per matmul weight, the output matrix (the logits) for
 * the last prompt token only; the output matrix, tied (the token embedding) or not. */
TEST(bench_pp_ops_output_once) {
    CHECK(t, bench_pp_ops_per_token(1000, 200, 4) == 2.0 * 800 + 2.0 * 200 / 4);
    CHECK(t, bench_pp_ops_per_token(1000, 200, 1) == 2.0 * 1000);
    CHECK(t, bench_pp_ops_per_token(1000, 200, 0) == 0);
    const char *rels[] = {"models/stories260K.gguf", "testdata/models/tiny-llama-q8_0.gguf"};
    int checked = 0;
    for (int i = 0; i < 2; i++) {
        const char *path = test_shared_path(rels[i]);
        if (!path) continue;
        cpulm_model *m = cpulm_model_load(path, NULL, NULL);
        REQUIRE(t, m != NULL);
        cpulm_model_info in;
        cpulm_model_get_info(m, &in);
        const int64_t out = bench_output_params(m), all = bench_matmul_params(m);
        CHECK_EQ_INT(t, out, (int64_t)in.n_vocab * in.n_embd);
        CHECK(t, all > out);
        cpulm_model_free(m);
        checked++;
    }
    if (!checked) SKIP(t, "CPULM_SHARED models not found");
}

/* The roofline's attention work: 4 flops per (query head, element, key seen), causal, cut
 * by sliding windows; its rate and the GEMM share outside attention from measured shares. */
/* The read ceiling of a tg run: the median of the windows between its repetitions (an
 * outlier window, as the shared VM's 2-thread reads have, does not set it); none: kept. */
TEST(bench_roof_read_median) {
    bench_roof r = {.bw = 99, .n_bw_windows = 4, .bw_windows = {40, 30, 57, 31}};
    bench_roof_read_median(&r);
    CHECK(t, r.bw == 35.5);
    r.n_bw_windows = 3; /* 40, 30, 57 */
    bench_roof_read_median(&r);
    CHECK(t, r.bw == 40);
    bench_roof z = {.bw = 99};
    bench_roof_read_median(&z);
    CHECK(t, z.bw == 99);
}

TEST(bench_attn_flops_and_share) {
    bench_roof r = {.pp_ts = 100, .attn_frac = 0.25, .pp_frac = 0.3};
    bench_roof_attention(&r, 1e9, 200); /* 2 s of pp, 0.5 s of it attention */
    CHECK(t, r.attn_flops == 2e9);
    CHECK(t, r.gemm_frac == 0.3 / 0.75);
    bench_roof z = {.pp_ts = 100};
    bench_roof_attention(&z, 1e9, 200);
    CHECK(t, z.attn_flops == 0 && z.gemm_frac == 0);
    const char *path = test_shared_path("models/stories260K.gguf");
    if (!path) SKIP(t, "CPULM_SHARED models not found");
    cpulm_model *m = cpulm_model_load(path, NULL, NULL);
    REQUIRE(t, m != NULL);
    const cpulm_hparams *hp = &m->hp;
    const double per_key = 4.0 * hp->n_head * hp->head_dim * hp->n_layer;
    CHECK(t, bench_attn_flops(m, 4) == per_key * (1 + 2 + 3 + 4));
    for (int32_t il = 0; il < hp->n_layer; il++)
        m->layers[il].window = 2; /* keys seen: 1, 2, 2, 2 */
    CHECK(t, bench_attn_flops(m, 4) == per_key * 7);
    for (int32_t il = 0; il < hp->n_layer; il++)
        m->layers[il].window = 0;
    /* the context counts its attention time: some, and no more than the decode's wall */
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.n_ctx = 64;
    cp.n_threads = cp.n_threads_batch = 2;
    cpulm_ctx *c = cpulm_ctx_new(m, &cp, NULL);
    REQUIRE(t, c != NULL);
    CHECK(t, cpulm_ctx_attn_ns(c) == 0);
    cpulm_token tok[48];
    for (int i = 0; i < 48; i++)
        tok[i] = 1 + i * 7 % 500;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    const cpulm_batch bt = {.n = 48, .token = tok};
    cpulm_status st = cpulm_ctx_decode(c, &bt);
    clock_gettime(CLOCK_MONOTONIC, &b);
    CHECK(t, st == CPULM_OK);
    const double wall = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
    CHECK(t, cpulm_ctx_attn_ns(c) > 0 && (double)cpulm_ctx_attn_ns(c) <= wall);
    cpulm_ctx_free(c);
    cpulm_model_free(m);
}
