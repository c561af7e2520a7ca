/* test_gemma4.c: the gemma4 architecture. Logits of synthetic files against llama.cpp's
 * (tests/data/gemma4-ref.json, made by scripts/ref-logits.py gemma4 with llama-perplexity)
 * over a prompt 16 sliding windows long; the keys the loader reads and the files it refuses;
 * batches of several sequences against each alone and generation against the prompt (the
 * shared-KV layers and the padded sliding heads on every attention path). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "cpulm.h"
#include "model/gemma4.h"
#include "model/swa.h"
#include "refcase.h"
#include "runtime/memory.h"
#include "toolkit/synth.h"
#include "test.h"

/* The stored log-probabilities are exact to ~1.3e-4; the tolerances are the reference
 * cases' for the weight type (docs/CORRECTNESS.md) plus that step, as for gemma3; the
 * `ref` F16-accumulation numerics are held to the F16 tolerance. */
static double tolerance_of(const char *type, int fast) {
    double tol = 0.002;
    if (!strcmp(type, "q8_0")) tol = 0.14;
    if (!fast && tol < 0.010) tol = 0.010;
    return tol + 2e-4;
}

static int check_case(const cpulm_json *c, int32_t step, int fast, double *worst) {
    const char *type = cpulm_json_str(cpulm_json_get(c, "type"));
    return refcase_check(c, step, fast, tolerance_of(type ? type : "", fast), worst);
}

#define EMULATED_WHY "minutes under emulation: run natively; its kernels are checked by kern"

/* tiny-gemma4 in F32 (attn_v everywhere, and none on the global layers) and Q8_0: the 255
 * scored positions of a 512-token chunk (16 windows of 32), with tiled numerics as one
 * prompt and in batches of 7, and with the ref numerics as one prompt. */
TEST(gemma4_ref_tiny) {
    if (test_emulated()) NOT_APPLICABLE(t, EMULATED_WHY);
    cpulm_json_doc *d = refcase_load("gemma4-ref.json");
    REQUIRE(t, d);
    const cpulm_json *cases = cpulm_json_get(cpulm_json_root(d), "cases");
    REQUIRE(t, cpulm_json_len(cases) >= 3);
    for (size_t i = 0; i < cpulm_json_len(cases); i++) {
        const cpulm_json *c = cpulm_json_at(cases, i);
        double w1 = 0, w2 = 0, w3 = 0;
        /* sanitizer builds (CI time): every numerics on the first case, the second's own
         * code path (no attn_v) once, not the quantized one (the kernels are kern's) */
        if (test_sanitized() && i >= 2) continue;
        const int all = i == 0 || !test_sanitized();
        CHECK_EQ_INT(t, check_case(c, 512, 1, &w1), 0);
        if (all) CHECK_EQ_INT(t, check_case(c, 7, 1, &w2), 0);
        if (all) CHECK_EQ_INT(t, check_case(c, 512, 0, &w3), 0);
        fprintf(stderr,
                "  %s: worst |diff| %.5f (tiled), %.5f (tiled, batches of 7), %.5f "
                "(ref numerics)\n",
                cpulm_json_str(cpulm_json_get(c, "name")), w1, w2, w3);
    }
    cpulm_json_free(d);
}

/* ---- the file's keys ---- */

/* The keys of a 6-layer file with w's extra keys, read as the loader reads them (global
 * head 64, window 16); the pattern: layers 3 and 5 global. */
static cpulm_status read_keys(cpulm_gguf_writer *w, int pattern_array, cpulm_hparams *hp,
                              cpulm_layer *layers) {
    const uint8_t flags[6] = {1, 1, 1, 0, 1, 0};
    cpulm_gguf_writer_set_u32(w, "gemma4.attention.sliding_window", 16);
    if (pattern_array)
        cpulm_gguf_writer_set_arr(w, "gemma4.attention.sliding_window_pattern", CPULM_GGUF_BOOL,
                                  flags, 6);
    else
        cpulm_gguf_writer_set_u32(w, "gemma4.attention.sliding_window_pattern", 6);
    uint8_t *buf = NULL;
    uint64_t size = 0;
    cpulm_gguf g;
    cpulm_error err = {0};
    memset(hp, 0, sizeof *hp);
    memset(layers, 0, 6 * sizeof *layers);
    hp->n_layer = 6;
    hp->head_dim = hp->n_rot = 64;
    hp->n_head = 4;
    hp->n_head_kv = 2; /* the largest of a per-layer array (the model's loader takes it) */
    cpulm_status s = cpulm_gguf_writer_to_buf(w, &buf, &size);
    if (s == CPULM_OK) s = cpulm_gguf_parse(&g, buf, size, &err);
    if (s == CPULM_OK) {
        const cpulm_arch_desc *a = cpulm_arch_find("gemma4", 6);
        s = cpulm_swa_read(&g, a, hp, &err);
        if (s == CPULM_OK) s = cpulm_gemma4_read_hparams(&g, "gemma4", hp, &err);
        if (s == CPULM_OK) s = cpulm_swa_set_layers(&g, a, hp, layers, &err);
        if (s == CPULM_OK) s = cpulm_gemma4_plan_layers(&g, "gemma4", hp, layers, &err);
        cpulm_gguf_release(&g);
    }
    if (s != CPULM_OK) fprintf(stderr, "  (expected?) %s\n", err.msg);
    free(buf);
    cpulm_gguf_writer_free(w);
    return s;
}

static cpulm_gguf_writer *keys(int32_t head_swa, int32_t n_pl, int32_t shared) {
    cpulm_gguf_writer *w = cpulm_gguf_writer_new();
    if (head_swa) cpulm_gguf_writer_set_u32(w, "gemma4.attention.key_length_swa", head_swa);
    if (n_pl >= 0) cpulm_gguf_writer_set_u32(w, "gemma4.embedding_length_per_layer_input", n_pl);
    if (shared >= 0) cpulm_gguf_writer_set_u32(w, "gemma4.attention.shared_kv_layers", shared);
    return w;
}

/* Head sizes, rotations, the per-layer embedding width, which layers share whose KV; a
 * missing required key, experts, a scalar pattern, a sliding head wider than the global one
 * and a shared tail whose sources are of the wrong kinds are refused. */
TEST(gemma4_keys_and_refusals) {
    cpulm_hparams hp;
    cpulm_layer ly[6];
    REQUIRE(t, read_keys(keys(32, 16, 2), 1, &hp, ly) == CPULM_OK);
    CHECK_EQ_INT(t, hp.head_dim_swa, 32);
    CHECK_EQ_INT(t, hp.n_rot_swa, 32);
    CHECK_EQ_INT(t, hp.n_pl, 16);
    CHECK_EQ_INT(t, hp.n_kv_shared, 2);
    CHECK_EQ_INT(t, hp.n_layer_attn, 4);
    CHECK_EQ_INT(t, hp.n_layer_swa, 4);
    CHECK_NEAR(t, hp.rope_base_swa, 10000.0, 0);
    CHECK_NEAR(t, hp.attn_scale, 1.0, 0);
    const int32_t head[6] = {32, 32, 32, 64, 32, 64}, src[6] = {0, 1, 2, 3, 2, 3};
    for (int il = 0; il < 6; il++) {
        CHECK_EQ_INT(t, ly[il].head_dim, head[il]);
        CHECK_EQ_INT(t, ly[il].kv_src, src[il]);
    }
    /* no sharing: every layer its own KV */
    REQUIRE(t, read_keys(keys(32, 0, -1), 1, &hp, ly) == CPULM_OK);
    CHECK_EQ_INT(t, hp.n_kv_shared, 0);
    CHECK_EQ_INT(t, ly[5].kv_src, 5);

    CHECK_EQ_INT(t, read_keys(keys(0, 16, 0), 1, &hp, ly), CPULM_ERR_FORMAT);  /* no swa head */
    CHECK_EQ_INT(t, read_keys(keys(32, -1, 0), 1, &hp, ly), CPULM_ERR_FORMAT); /* no PLE key */
    CHECK_EQ_INT(t, read_keys(keys(128, 0, 0), 1, &hp, ly), CPULM_ERR_UNSUPPORTED);
    CHECK_EQ_INT(t, read_keys(keys(32, 0, 0), 0, &hp, ly), CPULM_ERR_FORMAT); /* scalar */
    /* 3 shared: the tail reads layers 2 (must be global: it slides) and 1 */
    CHECK_EQ_INT(t, read_keys(keys(32, 0, 3), 1, &hp, ly), CPULM_ERR_UNSUPPORTED);
    CHECK_EQ_INT(t, read_keys(keys(32, 0, 5), 1, &hp, ly), CPULM_ERR_FORMAT); /* 1 own layer */
    cpulm_gguf_writer *w = keys(32, 0, 0);
    cpulm_gguf_writer_set_u32(w, "gemma4.expert_count", 128);
    CHECK_EQ_INT(t, read_keys(w, 1, &hp, ly), CPULM_ERR_UNSUPPORTED); /* the MoE model */
}

/* Per-layer arrays of FFN widths (E2B) and KV heads (31B): each layer's own; 0 (the
 * model's) without them; refused: an array of another length, a layer's KV heads that do
 * not divide the query heads and the model's KV heads. */
TEST(gemma4_per_layer_arrays) {
    cpulm_hparams hp;
    cpulm_layer ly[6];
    const int32_t ff[6] = {64, 64, 64, 64, 128, 128}, kv[6] = {2, 2, 2, 1, 2, 1};
    const int32_t bad_kv[6] = {2, 2, 2, 3, 2, 1};
    cpulm_gguf_writer *w = keys(32, 16, 2);
    cpulm_gguf_writer_set_arr(w, "gemma4.feed_forward_length", CPULM_GGUF_I32, ff, 6);
    cpulm_gguf_writer_set_arr(w, "gemma4.attention.head_count_kv", CPULM_GGUF_I32, kv, 6);
    REQUIRE(t, read_keys(w, 1, &hp, ly) == CPULM_OK);
    for (int il = 0; il < 6; il++) {
        CHECK_EQ_INT(t, ly[il].n_ff, ff[il]);
        CHECK_EQ_INT(t, ly[il].n_head_kv, kv[il]);
    }
    REQUIRE(t, read_keys(keys(32, 16, 2), 1, &hp, ly) == CPULM_OK);
    CHECK(t, ly[4].n_ff == 0 && ly[3].n_head_kv == 0);
    w = keys(32, 16, 2);
    cpulm_gguf_writer_set_arr(w, "gemma4.feed_forward_length", CPULM_GGUF_I32, ff, 5);
    CHECK_EQ_INT(t, read_keys(w, 1, &hp, ly), CPULM_ERR_FORMAT);
    w = keys(32, 16, 2);
    cpulm_gguf_writer_set_arr(w, "gemma4.attention.head_count_kv", CPULM_GGUF_I32, bad_kv, 6);
    CHECK_EQ_INT(t, read_keys(w, 1, &hp, ly), CPULM_ERR_UNSUPPORTED);
}

/* The synthesized tiny-gemma4 file loads as described: windows, head sizes, KV sources,
 * the per-layer embedding tensors, no k on the shared layers; its KV cache holds 4 layers.
 * gemma4-e4b's shape: 35 sliding layers, 24 with their own KV, and a 4-layer cut keeps 2
 * of them sharing. */
TEST(gemma4_synth_file) {
    cpulm_synth_params p;
    REQUIRE(t, cpulm_synth_shape("tiny-gemma4", &p) == CPULM_OK);
    p.type = CPULM_DTYPE_F32;
    cpulm_model *m = refcase_synth_load(&p, "tiny-gemma4-f32-gen.gguf");
    REQUIRE(t, m);
    const cpulm_hparams *hp = &m->hp;
    CHECK_EQ_INT(t, hp->n_layer_swa, 4);
    CHECK_EQ_INT(t, hp->n_pl, 32);
    CHECK(t, m->pl_tok_embd.data && m->pl_model_proj.data && m->pl_proj_norm && m->rope_freqs);
    CHECK(t, m->rope_freqs && m->rope_freqs[7] == 1.0f && m->rope_freqs[8] == 1e30f);
    for (int il = 0; il < 6; il++) {
        const cpulm_layer *ly = &m->layers[il];
        CHECK_EQ_INT(t, ly->head_dim, il == 3 || il == 5 ? 64 : 32);
        CHECK_EQ_INT(t, ly->kv_src, il < 4 ? il : il - 2);
        CHECK(t, (ly->wk.data != NULL) == (il < 4));
        CHECK(t, ly->pl_gate.data && ly->pl_proj.data && ly->pl_post_norm && ly->out_scale);
        CHECK_EQ_INT(t, (int)ly->wq.ne[1], 4 * ly->head_dim);
    }
    cpulm_mem_dims d;
    cpulm_mem_dims_of(hp, &d);
    CHECK_EQ_INT(t, d.n_layer_kv, 4);
    cpulm_model_free(m);

    REQUIRE(t, cpulm_synth_shape("gemma4-e4b", &p) == CPULM_OK);
    cpulm_hparams e;
    cpulm_synth_hparams(&p, &e);
    CHECK_EQ_INT(t, e.n_layer_swa, 35);
    CHECK_EQ_INT(t, e.n_layer_attn, 24);
    for (int il = 0; il < 42; il++)
        CHECK_EQ_INT(t, cpulm_synth_gemma4_slides(&p, il), il % 6 != 5);
    cpulm_synth_set_layers(&p, 4);
    CHECK_EQ_INT(t, p.hp.n_kv_shared, 2);
    const int slides[4] = {1, 0, 1, 0};
    for (int il = 0; il < 4; il++)
        CHECK_EQ_INT(t, cpulm_synth_gemma4_slides(&p, il), slides[il]);
}

/* ---- batches and generation ---- */

/* Four sequences longer than the window (23..64 tokens, window 32) decoded together, their
 * prompts interleaved, then 5 single tokens each: every logit bit for bit the one each
 * sequence gets alone. */
TEST(gemma4_batch_of_4_equals_each_alone) {
    if (test_emulated()) NOT_APPLICABLE(t, EMULATED_WHY);
    cpulm_synth_params p;
    REQUIRE(t, cpulm_synth_shape("tiny-gemma4", &p) == CPULM_OK);
    p.type = CPULM_DTYPE_Q8_0;
    cpulm_model *m = refcase_synth_load(&p, "tiny-gemma4-q8_0-batch.gguf");
    REQUIRE(t, m);
    CHECK_EQ_INT(t, refcase_batch4_diffs(m), 0);
    cpulm_model_free(m);
}

/* 300 tokens (9 windows) as one prompt, and as a 200-token prompt then 100 single tokens
 * (generation: split over the cache on the tiled numerics, the shared layers reading the
 * tokens their sources stored in the same step): the same logits up to rounding, with both
 * numerics and with an F32 cache. */
TEST(gemma4_generation_equals_prompt) {
    if (test_emulated()) NOT_APPLICABLE(t, EMULATED_WHY);
    cpulm_synth_params p;
    REQUIRE(t, cpulm_synth_shape("tiny-gemma4", &p) == CPULM_OK);
    p.type = CPULM_DTYPE_F32;
    cpulm_model *m = refcase_synth_load(&p, "tiny-gemma4-f32-gen.gguf");
    REQUIRE(t, m);
    const int32_t V = cpulm_vocab_n(m), n = 300, n_prompt = 200;
    int32_t toks[300];
    for (int32_t i = 0; i < n; i++)
        toks[i] = i == 0 ? 1 : 3 + (int32_t)((i * 7919) % 509);
    /* sanitizer builds: the tiled numerics only (the split generation path) */
    for (int fast = test_sanitized() ? 1 : 0; fast <= 1; fast++) {
        cpulm_ctx *c = refcase_ctx(m, 512, n, 1, 2, fast);
        REQUIRE(t, c);
        float *whole = refcase_logits(c, toks, n, n, V);
        cpulm_ctx_free(c);
        c = refcase_ctx(m, 512, n, 1, 2, fast);
        REQUIRE(t, c);
        float *a = refcase_logits(c, toks, n_prompt, n_prompt, V);
        float *b = refcase_logits(c, toks + n_prompt, n - n_prompt, 1, V);
        REQUIRE(t, whole && a && b);
        double worst = 0;
        for (size_t i = 0; i < (size_t)(n - n_prompt) * V; i++)
            worst = fmax(worst, fabs(whole[(size_t)n_prompt * V + i] - b[i]));
        fprintf(stderr, "  %s numerics: prompt vs generation worst |diff| %.2e\n",
                fast ? "tiled" : "ref", worst);
        CHECK(t, worst < 5e-4);
        free(whole);
        free(a);
        free(b);
        cpulm_ctx_free(c);
    }
    cpulm_model_free(m);
}

/* ---- the chat format ---- */

/* Gemma 4's format (the model's template, text only, thinking off): <bos>, a system turn
 * for a system prompt, "<|turn>" + role (the assistant is "model") + "\n" + trimmed content
 * + "<turn|>\n" per message, and a model turn with an empty thought channel to reply; the
 * "gemma4" built-in renders it and a template with <|turn> is detected as it. */
TEST(gemma4_chat_template) {
    const cpulm_chat_msg msgs[] = {{"system", " Answer briefly. "},
                                   {"user", " What is 2+2? "},
                                   {"assistant", "4"},
                                   {"user", "And 3+3?"}};
    const char *want = "<bos><|turn>system\nAnswer briefly.<turn|>\n"
                       "<|turn>user\nWhat is 2+2?<turn|>\n"
                       "<|turn>model\n4<turn|>\n"
                       "<|turn>user\nAnd 3+3?<turn|>\n"
                       "<|turn>model\n<|channel>thought\n<channel|>";
    const char *src = cpulm_chat_builtin("gemma4");
    REQUIRE(t, src);
    char *out = NULL;
    cpulm_error err = {0};
    CHECK_EQ_INT(t, cpulm_chat_render(src, msgs, 4, 1, "<bos>", "<eos>", &out, &err), CPULM_OK);
    CHECK(t, out && !strcmp(out, want));
    if (out && strcmp(out, want)) fprintf(stderr, "  got: [%s]\n", out);
    free(out);
    out = NULL;
    CHECK_EQ_INT(t, cpulm_chat_render(src, msgs + 1, 1, 0, "<bos>", "", &out, &err), CPULM_OK);
    CHECK(t, out && !strcmp(out, "<bos><|turn>user\nWhat is 2+2?<turn|>\n"));
    free(out);
    CHECK(t, cpulm_chat_detect(src) && !strcmp(cpulm_chat_detect(src), "gemma4"));
    CHECK(t, cpulm_chat_detect("{{ '<start_of_turn>user' }}") &&
                 !strcmp(cpulm_chat_detect("{{ '<start_of_turn>user' }}"), "gemma"));
}
