/* test_synth.c: synthetic models (src/synth.c): a tiny one of each weight type loads, decodes
 * to finite, non-degenerate logits and tokenizes text round trip; files depend only on the
 * parameters (seed, not thread count); named shapes have their real model's numbers. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpulm.h"
#include "format/gguf.h"
#include "toolkit/synth.h"
#include "test.h"

static const char *tmp_path(const char *name) {
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", test_tmp_dir(), name);
    return buf;
}

/* Decodes a short prompt and one more token; checks logits are finite and spread out. */
static void check_decodes(test_ctx *t, const cpulm_model *m) {
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    cpulm_ctx *ctx = cpulm_ctx_new(m, &cp, NULL);
    REQUIRE(t, ctx);
    cpulm_token toks[5] = {1, 300, 301, 302, 400};
    cpulm_batch b = {.n = 5, .token = toks};
    CHECK_EQ_INT(t, cpulm_ctx_decode(ctx, &b), CPULM_OK);
    cpulm_batch b1 = {.n = 1, .token = &toks[2]};
    CHECK_EQ_INT(t, cpulm_ctx_decode(ctx, &b1), CPULM_OK);
    const float *l = cpulm_ctx_logits(ctx, 0);
    int32_t V = cpulm_vocab_n(m);
    double sum = 0, sq = 0;
    int finite = 1;
    for (int32_t i = 0; l && i < V; i++) {
        finite &= isfinite(l[i]) != 0;
        sum += l[i];
        sq += (double)l[i] * l[i];
    }
    CHECK(t, l && finite);
    double sd = sqrt(sq / V - (sum / V) * (sum / V));
    CHECK(t, sd > 0.05 && sd < 50); /* random weights of std 0.02: logits of order 1 */
    cpulm_ctx_free(ctx);
}

static void check_roundtrip(test_ctx *t, const cpulm_model *m, const char *text) {
    cpulm_token toks[128];
    int32_t n = 0;
    REQUIRE(t, cpulm_tokenize(m, text, strlen(text), 1, 0, toks, 128, &n) == CPULM_OK);
    CHECK(t, n >= 2 && toks[0] == cpulm_token_bos(m));
    char out[512];
    size_t len = 0;
    for (int32_t i = 1; i < n; i++) {
        int32_t k = 0;
        REQUIRE(t, cpulm_token_to_piece(m, toks[i], 0, out + len, (int32_t)(sizeof out - len),
                                        &k) == CPULM_OK);
        len += (size_t)k;
    }
    /* the SPM decoder turns the leading word marker into a space */
    CHECK(t, len == strlen(text) + 1 && out[0] == ' ' && memcmp(out + 1, text, len - 1) == 0);
}

static cpulm_synth_params tiny(cpulm_dtype type) {
    cpulm_synth_params p;
    cpulm_synth_shape("tiny", &p);
    p.type = type;
    return p;
}

TEST(synth_tiny_q4_0_decodes_and_tokenizes) {
    cpulm_synth_params p = tiny(CPULM_DTYPE_Q4_0);
    cpulm_error err = {0};
    const char *path = tmp_path("synth_q4_0.gguf");
    REQUIRE(t, cpulm_synth_write(path, &p, &err) == CPULM_OK);
    cpulm_model *m = cpulm_model_load(path, NULL, &err);
    REQUIRE(t, m);
    cpulm_model_info info;
    cpulm_model_get_info(m, &info);
    CHECK_EQ_INT(t, cpulm_vocab_n(m), p.hp.n_vocab);
    check_decodes(t, m);
    check_roundtrip(t, m, "hello world, \xC3\xBCnicode \xE2\x82\xAC 123");
    cpulm_model_free(m);
}

TEST(synth_every_type_decodes) {
    static const cpulm_dtype types[] = {CPULM_DTYPE_Q8_0, CPULM_DTYPE_F16,  CPULM_DTYPE_BF16,
                                        CPULM_DTYPE_F32,  CPULM_DTYPE_Q4_K, CPULM_DTYPE_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        cpulm_synth_params p = tiny(types[i]);
        char name[64];
        snprintf(name, sizeof name, "synth_%s.gguf", cpulm_dtype_name(types[i]));
        const char *path = tmp_path(name);
        cpulm_error err = {0};
        CHECK_EQ_INT(t, cpulm_synth_write(path, &p, &err), CPULM_OK);
        cpulm_model *m = cpulm_model_load(path, NULL, &err);
        if (!m) fprintf(stderr, "  %s: %s\n", name, err.msg);
        CHECK(t, m);
        if (m) check_decodes(t, m);
        cpulm_model_free(m);
    }
}

/* The type of tensor name in the file at path, or -1. */
static int64_t file_tensor_type(const char *path, const char *name) {
    size_t n = 0;
    char *buf = test_read_file(path, &n);
    cpulm_gguf g;
    int64_t ty = -1;
    if (buf && cpulm_gguf_parse(&g, buf, n, NULL) == CPULM_OK) {
        const int64_t i = cpulm_gguf_find_tensor(&g, name);
        if (i >= 0) ty = g.tensors[i].type;
        cpulm_gguf_release(&g);
    }
    free(buf);
    return ty;
}

/* Logits of the last of 40 prompt tokens, then of one generated token, into out[2 * V]. */
static int logits_of(const char *path, int no_repack, float *out, int32_t V) {
    cpulm_model_params mp = cpulm_model_default_params();
    mp.no_repack = no_repack;
    cpulm_model *m = cpulm_model_load(path, &mp, NULL);
    if (!m) return 0;
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    cpulm_ctx *ctx = cpulm_ctx_new(m, &cp, NULL);
    cpulm_token toks[41];
    for (int i = 0; i < 41; i++)
        toks[i] = i ? 260 + (i * 37) % 250 : 1;
    cpulm_batch b = {.n = 40, .token = toks}, b1 = {.n = 1, .token = &toks[40]};
    int ok = ctx && cpulm_ctx_decode(ctx, &b) == CPULM_OK && cpulm_ctx_logits(ctx, 0);
    if (ok) memcpy(out, cpulm_ctx_logits(ctx, 0), sizeof(float) * (size_t)V);
    ok = ok && cpulm_ctx_decode(ctx, &b1) == CPULM_OK && cpulm_ctx_logits(ctx, 0);
    if (ok) memcpy(out + V, cpulm_ctx_logits(ctx, 0), sizeof(float) * (size_t)V);
    cpulm_ctx_free(ctx);
    cpulm_model_free(m);
    return ok;
}

/* --type mxfp4: MXFP4 FFN / expert matrices (as gpt-oss files), Q8_0 attention and
 * embeddings, F32 routers; the packed GEMM (prompt and generation) gives the row-major
 * vec_dot path's logits (the same integer sums; only the float order differs). */
TEST(synth_mxfp4_ffn_and_experts) {
    static const char *shapes[] = {"tiny", "tiny-moe"};
    for (int i = 0; i < 2; i++) {
        cpulm_synth_params p;
        REQUIRE(t, cpulm_synth_shape(shapes[i], &p) == CPULM_OK);
        p.type = CPULM_DTYPE_MXFP4;
        const char *path = tmp_path(i ? "synth_moe_mxfp4.gguf" : "synth_mxfp4.gguf");
        cpulm_error err = {0};
        REQUIRE(t, cpulm_synth_write(path, &p, &err) == CPULM_OK);
        const char *ffn = i ? "blk.1.ffn_down_exps.weight" : "blk.1.ffn_down.weight";
        CHECK_EQ_INT(t, file_tensor_type(path, ffn), CPULM_DTYPE_MXFP4);
        CHECK_EQ_INT(t, file_tensor_type(path, "blk.0.attn_q.weight"), CPULM_DTYPE_Q8_0);
        CHECK_EQ_INT(t, file_tensor_type(path, "token_embd.weight"), CPULM_DTYPE_Q8_0);
        if (i) CHECK_EQ_INT(t, file_tensor_type(path, "blk.0.ffn_gate_inp.weight"), 0);
        const int32_t V = p.hp.n_vocab;
        float *a = malloc(sizeof(float) * 2 * (size_t)V),
              *b = malloc(sizeof(float) * 2 * (size_t)V);
        REQUIRE(t, a && b);
        CHECK(t, logits_of(path, 0, a, V) && logits_of(path, 1, b, V));
        double worst = 0;
        for (int32_t k = 0; k < 2 * V; k++)
            worst = fmax(worst, fabs((double)a[k] - b[k]));
        /* 0.009 / 0.011 measured; Q4_0 files of these shapes differ by 0.007 / 0.010 the same
         * way (float order, amplified through the f16 attention); a wrong block is ~1 */
        if (!(worst < 0.05)) fprintf(stderr, "  %s: packed vs row-major %g\n", shapes[i], worst);
        CHECK(t, worst < 0.05);
        free(a);
        free(b);
    }
}

/* --type q5_0 / q4_1 / q5_1 (what Q4_K_M and Q5_K_M files hold where rows do not split into
 * 256-element blocks): the loader widens these matrices to Q8_0 (plus each block's min for
 * Q4_1 / Q5_1) and packs them where the kernel level has a Q8_0 GEMM, and the packed model
 * gives the row-major vec_dot path's logits up to float order (and, for the mins, s_b from
 * the rounded activation scale); its info counts the added bytes, which the file's tensor
 * bytes do not. */
static void widened_case(test_ctx *t, cpulm_dtype type, const char *shape, const char *file) {
    cpulm_synth_params p;
    REQUIRE(t, cpulm_synth_shape(shape, &p) == CPULM_OK);
    p.type = type;
    const char *path = tmp_path(file);
    REQUIRE(t, cpulm_synth_write(path, &p, NULL) == CPULM_OK);
    const int moe = p.hp.n_expert > 0;
    const char *ffn = moe ? "blk.1.ffn_down_exps.weight" : "blk.1.ffn_down.weight";
    CHECK_EQ_INT(t, file_tensor_type(path, ffn), type);
    cpulm_model *m = cpulm_model_load(path, NULL, NULL);
    REQUIRE(t, m);
    cpulm_model_info in;
    cpulm_model_get_info(m, &in);
    uint64_t file_bytes = 0, src_bytes = 0;
    for (int32_t k = 0; k < in.n_tensors; k++) {
        const char *tn;
        uint64_t nb;
        REQUIRE(t, cpulm_model_tensor(m, k, NULL, &tn, NULL, &nb) == CPULM_OK);
        file_bytes += nb;
        src_bytes += strcmp(tn, cpulm_dtype_name(type)) ? 0 : nb;
    }
    cpulm_model_free(m);
    CHECK(t, in.weight_bytes == file_bytes + in.widened_bytes);
    /* every such matrix widened where Q8_0 packs (34 bytes a block, + a 4-byte min), none
     * on the generic level */
    const uint64_t bs = (uint64_t)cpulm_dtype_traits_get(type)->type_size;
    const uint64_t grown = 34 + (type == CPULM_DTYPE_Q5_0 ? 0 : 4) - bs;
    const int packs = strcmp(cpulm_kernel_level(), "generic") != 0;
    CHECK(t, in.widened_bytes == (packs ? src_bytes / bs * grown : 0));
    const int32_t V = p.hp.n_vocab;
    float *a = malloc(sizeof(float) * 2 * (size_t)V), *b = malloc(sizeof(float) * 2 * (size_t)V);
    REQUIRE(t, a && b);
    CHECK(t, logits_of(path, 0, a, V) && logits_of(path, 1, b, V));
    double worst = 0, span = 0;
    for (int32_t k = 0; k < 2 * V; k++)
        worst = fmax(worst, fabs((double)a[k] - b[k])), span = fmax(span, fabs((double)b[k]));
    /* float order only, as the mxfp4 case above; a wrong block moves logits by ~1 */
    if (!(worst < 0.05 && span > 0.5))
        fprintf(stderr, "  %s %s: widened vs row-major %g (span %g)\n", shape,
                cpulm_dtype_name(type), worst, span);
    CHECK(t, worst < 0.05 && span > 0.5);
    free(a);
    free(b);
}

TEST(synth_q5_0_q4_1_q5_1_widened_to_q8_0) {
    widened_case(t, CPULM_DTYPE_Q5_0, "tiny", "synth_q5_0.gguf");
    widened_case(t, CPULM_DTYPE_Q5_0, "tiny-moe", "synth_moe_q5_0.gguf");
    widened_case(t, CPULM_DTYPE_Q4_1, "tiny", "synth_q4_1.gguf");
    widened_case(t, CPULM_DTYPE_Q5_1, "tiny", "synth_q5_1.gguf");
    widened_case(t, CPULM_DTYPE_Q5_1, "tiny-moe", "synth_moe_q5_1.gguf");
}

/* --yarn: the rope.scaling keys load (YaRN was refused before) and change the logits of
 * positions past the original context (40 tokens, original context 32). */
TEST(synth_yarn_keys_load) {
    cpulm_synth_params p = tiny(CPULM_DTYPE_F32);
    char plain[512];
    snprintf(plain, sizeof plain, "%s", tmp_path("synth_noyarn.gguf"));
    REQUIRE(t, cpulm_synth_write(plain, &p, NULL) == CPULM_OK);
    p.yarn_factor = 8;
    p.yarn_orig_ctx = 32;
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("synth_yarn.gguf"));
    cpulm_error err = {0};
    REQUIRE(t, cpulm_synth_write(path, &p, &err) == CPULM_OK);
    const int32_t V = p.hp.n_vocab;
    float *a = malloc(sizeof(float) * 2 * (size_t)V), *b = malloc(sizeof(float) * 2 * (size_t)V);
    REQUIRE(t, a && b);
    CHECK(t, logits_of(path, 0, a, V) && logits_of(plain, 0, b, V));
    double diff = 0;
    for (int32_t k = 0; k < 2 * V; k++)
        diff = fmax(diff, fabs((double)a[k] - b[k]));
    if (!(diff > 1e-4)) fprintf(stderr, "  yarn vs plain: %g\n", diff);
    CHECK(t, diff > 1e-4);
    free(a);
    free(b);
    p.yarn_factor = 0.5f; /* a factor below 1 is refused */
    CHECK_EQ_INT(t, cpulm_synth_check(&p, &err), CPULM_ERR_INVALID_ARG);
}

static char *read_all(const char *path, size_t *n) {
    return test_read_file(path, n);
}

TEST(synth_depends_on_seed_not_threads) {
    cpulm_synth_params p = tiny(CPULM_DTYPE_Q8_0);
    p.tied = 0;
    char a[512], b[512], c[512];
    snprintf(a, sizeof a, "%s", tmp_path("synth_t1.gguf"));
    snprintf(b, sizeof b, "%s", tmp_path("synth_t3.gguf"));
    snprintf(c, sizeof c, "%s", tmp_path("synth_s2.gguf"));
    p.n_threads = 1;
    REQUIRE(t, cpulm_synth_write(a, &p, NULL) == CPULM_OK);
    p.n_threads = 3;
    REQUIRE(t, cpulm_synth_write(b, &p, NULL) == CPULM_OK);
    p.seed = 2;
    REQUIRE(t, cpulm_synth_write(c, &p, NULL) == CPULM_OK);
    size_t na, nb, nc;
    char *da = read_all(a, &na), *db = read_all(b, &nb), *dc = read_all(c, &nc);
    REQUIRE(t, da && db && dc);
    CHECK(t, na == nb && memcmp(da, db, na) == 0);
    CHECK(t, na == nc && memcmp(da, dc, na) != 0);
    /* untied: the file has an output.weight too */
    cpulm_model *m = cpulm_model_load(a, NULL, NULL);
    CHECK(t, m);
    if (m) check_decodes(t, m);
    cpulm_model_free(m);
    free(da);
    free(db);
    free(dc);
}

TEST(synth_shapes_and_errors) {
    cpulm_synth_params p;
    REQUIRE(t, cpulm_synth_shape("1b", &p) == CPULM_OK);
    CHECK(t, p.hp.n_embd == 2048 && p.hp.n_layer == 16 && p.hp.n_ff == 8192 && p.hp.n_head == 32 &&
                 p.hp.n_head_kv == 8 && p.hp.n_vocab == 128256 && p.tied &&
                 p.hp.rope_base == 500000.0f);
    /* Q4_0 1B with tied Q4_0 embeddings: 16 layers of (2048x(2048+2x512+2048) + 3x2048x8192)
     * plus 2048 x 128256, 18 bytes per 32 weights, plus the f32 norms */
    uint64_t per_layer = (2048ull * 5120 + 3ull * 2048 * 8192) / 32 * 18 + 2 * 2048 * 4;
    CHECK_EQ_INT(t, cpulm_synth_weight_bytes(&p),
                 16 * per_layer + 2048ull * 128256 / 32 * 18 + 2048 * 4);
    REQUIRE(t, cpulm_synth_shape("8b", &p) == CPULM_OK);
    CHECK(t, p.hp.n_embd == 4096 && p.hp.n_layer == 32 && p.hp.n_ff == 14336 && !p.tied);
    REQUIRE(t, cpulm_synth_shape("70b", &p) == CPULM_OK);
    CHECK(t, p.hp.n_embd == 8192 && p.hp.n_layer == 80 && p.hp.n_ff == 28672 && p.hp.n_head == 64);
    CHECK_EQ_INT(t, cpulm_synth_shape("13b", &p), CPULM_ERR_INVALID_ARG);
    cpulm_error err = {0};
    p = tiny(CPULM_DTYPE_Q4_K);
    p.hp.n_embd = 128; /* not a multiple of Q4_K's 256 */
    CHECK_EQ_INT(t, cpulm_synth_check(&p, &err), CPULM_ERR_INVALID_ARG);
    p = tiny(CPULM_DTYPE_Q8_K); /* an activation type, never a weight */
    CHECK_EQ_INT(t, cpulm_synth_check(&p, &err), CPULM_ERR_INVALID_ARG);
    p = tiny(CPULM_DTYPE_Q4_0);
    p.hp.n_head_kv = 3;
    CHECK_EQ_INT(t, cpulm_synth_check(&p, &err), CPULM_ERR_INVALID_ARG);
    p = tiny(CPULM_DTYPE_Q4_0);
    p.hp.n_vocab = 100;
    CHECK_EQ_INT(t, cpulm_synth_write(tmp_path("bad.gguf"), &p, &err), CPULM_ERR_INVALID_ARG);
}

/* Architectures come from the descriptors: a tiny qwen3moe file (3-D expert tensors, router,
 * q/k norms) and a tiny qwen3 one load and decode; the Qwen3-30B-A3B shape has its numbers. */
TEST(synth_moe_and_qwen3_shapes) {
    cpulm_synth_params p;
    REQUIRE(t, cpulm_synth_shape("qwen3-30b-a3b", &p) == CPULM_OK);
    CHECK(t, p.hp.n_embd == 2048 && p.hp.n_layer == 48 && p.hp.n_head == 32 &&
                 p.hp.n_head_kv == 4 && p.hp.head_dim == 128 && p.hp.n_expert == 128 &&
                 p.hp.n_expert_used == 8 && p.hp.n_ff_exp == 768 && p.hp.n_vocab == 151936 &&
                 p.tied && !strcmp(p.arch, "qwen3moe"));
    p.hp.n_layer = 12;
    /* per layer: q, k, v, o (2048x4096, 2048x512 x2, 4096x2048), router 2048x128 f32, 3 x 128
     * experts of 2048x768, norms (2 x 2048 + 2 x 128 f32); plus the Q4_0 embeddings */
    uint64_t per_layer =
        (2048ull * (4096 + 512 + 512) + 4096ull * 2048 + 3ull * 128 * 2048 * 768) / 32 * 18 +
        2048ull * 128 * 4 + (2 * 2048 + 2 * 128) * 4;
    CHECK_EQ_INT(t, cpulm_synth_weight_bytes(&p),
                 12 * per_layer + 2048ull * 151936 / 32 * 18 + 2048 * 4);
    const char *shapes[] = {"tiny-moe", "qwen3-0.6b"};
    for (int i = 0; i < 2; i++) {
        REQUIRE(t, cpulm_synth_shape(shapes[i], &p) == CPULM_OK);
        if (i == 1) { /* Qwen3-0.6B's attention with a tiny FFN and vocab */
            p.hp.n_layer = 1;
            p.hp.n_ff = 256;
            p.hp.n_vocab = 512;
        }
        p.type = CPULM_DTYPE_Q8_0;
        const char *path = tmp_path(i ? "synth_qwen3.gguf" : "synth_moe.gguf");
        cpulm_error err = {0};
        REQUIRE(t, cpulm_synth_write(path, &p, &err) == CPULM_OK);
        cpulm_model *m = cpulm_model_load(path, NULL, &err);
        CHECK(t, m != NULL);
        if (m) check_decodes(t, m);
        cpulm_model_free(m);
    }
    REQUIRE(t, cpulm_synth_shape("tiny-moe", &p) == CPULM_OK);
    p.hp.n_expert_used = 9; /* more than the 8 experts */
    cpulm_error err = {0};
    CHECK_EQ_INT(t, cpulm_synth_check(&p, &err), CPULM_ERR_INVALID_ARG);
    p.hp.n_expert_used = 2;
    p.hp.n_expert = 0; /* qwen3moe needs experts */
    CHECK_EQ_INT(t, cpulm_synth_check(&p, &err), CPULM_ERR_INVALID_ARG);
}

/* Byte offset of the first F32 2-D weight's data in the file, mod 4 (the file parsed from
 * a malloc'd copy, whose base is 16-byte aligned like the mmap's). -1 on failure. */
static int first_f32_weight_misalignment(const char *path) {
    size_t n = 0;
    char *buf = test_read_file(path, &n);
    cpulm_gguf g;
    int r = -1;
    if (buf && cpulm_gguf_parse(&g, buf, n, NULL) == CPULM_OK) {
        for (uint64_t i = 0; i < g.n_tensors && r < 0; i++)
            if (g.tensors[i].type == CPULM_DTYPE_F32 && g.tensors[i].n_dims == 2)
                r = (int)((uintptr_t)g.tensors[i].data % 4);
        cpulm_gguf_release(&g);
    }
    free(buf);
    return r;
}

/* Issue #9, item 4: an F32 model written (by the project's own writer) with
 * general.alignment 1 or 2 places weights at addresses that are not float-aligned; the
 * loader refuses it with an error naming the alignment instead of running misaligned
 * loads (UBSan: misaligned float loads in the F32 dot kernels before). Alignment 4 F32 and
 * alignment 2 Q8_0 (fp16-scaled blocks) load and decode. */
TEST(synth_misaligned_weights_rejected_at_load) {
    int rejected = 0;
    for (uint32_t align = 1; align <= 2; align++) {
        /* the name's length moves the data section: find one that misaligns the weights */
        const char *names[] = {"a", "ab", "abc", "abcd"};
        for (size_t k = 0; k < 4; k++) {
            cpulm_synth_params p = tiny(CPULM_DTYPE_F32);
            p.alignment = align;
            p.name = names[k];
            const char *path = tmp_path("synth_misaligned.gguf");
            cpulm_error err = {0};
            REQUIRE(t, cpulm_synth_write(path, &p, &err) == CPULM_OK);
            int mis = first_f32_weight_misalignment(path);
            REQUIRE(t, mis >= 0);
            cpulm_model *m = cpulm_model_load(path, NULL, &err);
            if (mis) {
                CHECK(t, m == NULL);
                CHECK_EQ_INT(t, err.code, CPULM_ERR_FORMAT);
                CHECK(t, strstr(err.msg, "aligned") && strstr(err.msg, "general.alignment"));
                rejected++;
            } else {
                CHECK(t, m);
                if (m) check_decodes(t, m);
            }
            cpulm_model_free(m);
        }
    }
    CHECK(t, rejected >= 2); /* both alignments produced (and refused) misaligned files */
    const cpulm_dtype ok_types[] = {CPULM_DTYPE_F32, CPULM_DTYPE_Q8_0};
    const uint32_t ok_align[] = {4, 2};
    for (int i = 0; i < 2; i++) {
        cpulm_synth_params p = tiny(ok_types[i]);
        p.alignment = ok_align[i];
        const char *path = tmp_path("synth_aligned_small.gguf");
        cpulm_error err = {0};
        REQUIRE(t, cpulm_synth_write(path, &p, &err) == CPULM_OK);
        cpulm_model *m = cpulm_model_load(path, NULL, &err);
        if (!m) fprintf(stderr, "  alignment %u: %s\n", ok_align[i], err.msg);
        CHECK(t, m);
        if (m) check_decodes(t, m);
        cpulm_model_free(m);
    }
}

/* Shape of tensor `name` in g, or all -1 when absent. */
static void tensor_shape(const cpulm_gguf *g, const char *name, int64_t ne[2]) {
    int64_t i = cpulm_gguf_find_tensor(g, name);
    ne[0] = i < 0 ? -1 : g->tensors[i].ne[0];
    ne[1] = i < 0 ? -1 : g->tensors[i].ne[1];
}

/* qwen35 (hybrid): every full_attention_interval-th layer has the gated attention (query and
 * gate projected together), the others the Gated DeltaNet tensors with llama.cpp's names and
 * shapes; the metadata has the ssm keys and the rope sections. */
TEST(synth_qwen35_hybrid_layout) {
    cpulm_synth_params p;
    REQUIRE(t, cpulm_synth_shape("qwen35-9b", &p) == CPULM_OK);
    CHECK(t, p.hp.n_embd == 4096 && p.hp.n_layer == 32 && p.hp.head_dim == 256 &&
                 p.hp.n_rot == 64 && p.hp.ssm_inner == 4096 && p.hp.ssm_state == 128 &&
                 p.hp.ssm_groups == 16 && p.hp.ssm_heads == 32 && p.hp.full_attn_interval == 4 &&
                 !strcmp(p.arch, "qwen35"));
    REQUIRE(t, cpulm_synth_shape("tiny-qwen35", &p) == CPULM_OK);
    p.type = CPULM_DTYPE_Q8_0;
    const char *path = tmp_path("synth_qwen35.gguf");
    cpulm_error err = {0};
    REQUIRE(t, cpulm_synth_write(path, &p, &err) == CPULM_OK);
    size_t n = 0;
    char *buf = test_read_file(path, &n);
    cpulm_gguf g;
    REQUIRE(t, buf && cpulm_gguf_parse(&g, buf, n, NULL) == CPULM_OK);
    int64_t ne[2];
    const int64_t ch = 2 * 2 * 32 + 128; /* q, k of 2 key heads of 32, then v (inner 128) */
    tensor_shape(&g, "blk.0.ssm_conv1d.weight", ne);
    CHECK(t, ne[0] == 4 && ne[1] == ch);
    tensor_shape(&g, "blk.0.attn_qkv.weight", ne);
    CHECK(t, ne[0] == 256 && ne[1] == ch);
    tensor_shape(&g, "blk.2.ssm_alpha.weight", ne);
    CHECK(t, ne[0] == 256 && ne[1] == 4);
    tensor_shape(&g, "blk.2.ssm_a", ne);
    CHECK(t, ne[0] == 4);
    tensor_shape(&g, "blk.0.attn_q.weight", ne);
    CHECK(t, ne[0] == -1);
    tensor_shape(&g, "blk.3.attn_q.weight", ne); /* 4 heads of 64: query and gate */
    CHECK(t, ne[0] == 256 && ne[1] == 512);
    tensor_shape(&g, "blk.3.ssm_out.weight", ne);
    CHECK(t, ne[0] == -1);
    tensor_shape(&g, "blk.3.post_attention_norm.weight", ne);
    CHECK(t, ne[0] == 256);
    int64_t v = 0;
    CHECK(t, cpulm_gguf_get_i64(&g, "qwen35.ssm.group_count", &v, NULL) == CPULM_OK && v == 2);
    CHECK(t,
          cpulm_gguf_get_i64(&g, "qwen35.rope.dimension_count", &v, NULL) == CPULM_OK && v == 32);
    cpulm_gguf_arr a;
    CHECK(t,
          cpulm_gguf_get_arr(&g, "qwen35.rope.dimension_sections", CPULM_GGUF_I32, &a, NULL) ==
                  CPULM_OK &&
              a.n == 4 &&
              cpulm_gguf_arr_i64(&a, 0) + cpulm_gguf_arr_i64(&a, 1) + cpulm_gguf_arr_i64(&a, 2) ==
                  16);
    cpulm_gguf_release(&g);
    free(buf);
    p.hp.ssm_inner = 96; /* != value heads x state size */
    CHECK_EQ_INT(t, cpulm_synth_check(&p, &err), CPULM_ERR_INVALID_ARG);
}

/* --fim: the last three tokens become FIM control tokens; a vocabulary too small to hold
 * them beside the byte tokens is refused rather than losing bytes. */
TEST(synth_fim_tokens) {
    cpulm_synth_params p;
    REQUIRE(t, cpulm_synth_shape("tiny", &p) == CPULM_OK);
    cpulm_error err = {0};
    p.fim = 1;
    p.hp.n_vocab = 262;
    CHECK_EQ_INT(t, cpulm_synth_check(&p, &err), CPULM_ERR_INVALID_ARG);
    p.hp.n_vocab = 263;
    CHECK_EQ_INT(t, cpulm_synth_check(&p, &err), CPULM_OK);
}
