/* test_gemma.c: the gemma3 architecture. Logits of synthetic files against llama.cpp's
 * (tests/data/gemma-ref.json, made by scripts/ref-logits.py gemma with llama-perplexity) over a
 * prompt 16 sliding windows long, the sliding-window pattern and hyperparameters read from
 * the file, the reference's GELU, batches of several sequences against each alone, and the
 * family's chat format through the template interpreter. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp16.h"
#include "base/json.h"
#include "cpulm.h"
#include "model/gemma.h"
#include "model/swa.h"
#include "refcase.h"
#include "toolkit/synth.h"
#include "test.h"

/* The stored log-probabilities are exact to ~1.3e-4; the tolerances are the llama.cpp
 * reference cases' for the weight type (docs/CORRECTNESS.md) plus that step. The shared
 * llama.cpp (build 9928) accumulates prompt attention in f32: cpulm's tiled numerics
 * (attn_fast) are held to these; its `ref` F16-accumulation numerics (the older
 * reference's) differ by up to ~0.006 on these files, where Gemma's post-attention norm
 * scales the attention output up to unit size, and are held to the F16 tolerance. */
static double tolerance_of(const char *type, int fast) {
    double tol = 0.002;
    if (!strcmp(type, "f16")) tol = 0.010;
    if (!strcmp(type, "bf16")) tol = 0.040;
    if (!strcmp(type, "q8_0")) tol = 0.14;
    if (!fast && tol < 0.010) tol = 0.010;
    return tol + 2e-4;
}

/* One case decoded in batches of `step` with the tiled (fast) or the ref (F16-accumulation)
 * numerics. */
static int check_case(const cpulm_json *c, int32_t step, int fast, double *worst) {
    const char *type = cpulm_json_str(cpulm_json_get(c, "type"));
    return refcase_check(c, step, fast, tolerance_of(type ? type : "", fast), worst);
}

/* Under qemu a 512-token prompt over 4 weight types takes minutes; the layer's arithmetic is
 * the kernel table's (checked per level by kern), so this runs natively only. */
#define EMULATED_WHY "minutes under emulation: run natively; its kernels are checked by kern"

/* tiny-gemma3 (5 sliding layers with a window of 32 at rope base 10000, 1 global layer with
 * linear rope scaling 8) in F32, F16, BF16 and Q8_0, then in F32 with the period key 3 (2
 * global layers), with no window at all, and with a final logit soft-cap of 0.5 with and
 * without windows: the 255 scored positions of a 512-token chunk,
 * with tiled numerics as one prompt and in batches of 7 (windows crossing batch
 * boundaries), and with the ref numerics as one prompt. */
TEST(gemma_ref_tiny_types) {
    if (test_emulated()) NOT_APPLICABLE(t, EMULATED_WHY);
    cpulm_json_doc *d = refcase_load("gemma-ref.json");
    REQUIRE(t, d);
    const cpulm_json *cases = cpulm_json_get(cpulm_json_root(d), "cases");
    REQUIRE(t, cpulm_json_len(cases) >= 6);
    for (size_t i = 0; i < cpulm_json_len(cases); i++) {
        const cpulm_json *c = cpulm_json_at(cases, i);
        double w1 = 0, w2 = 0, w3 = 0;
        /* sanitizer builds: every case as one prompt, the batches of 7 and the ref
         * numerics on the first case only (the same code paths) */
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

/* Parses a metadata-only GGUF with gemma3.block_count = n_layer and the keys w holds, then
 * reads the Gemma keys and the layers' windows as the loader does. */
static cpulm_status read_keys(cpulm_gguf_writer *w, int32_t n_layer, cpulm_hparams *hp,
                              cpulm_layer *layers) {
    uint8_t *buf = NULL;
    uint64_t size = 0;
    cpulm_gguf g;
    cpulm_error err = {0};
    memset(hp, 0, sizeof *hp);
    hp->n_layer = n_layer;
    hp->n_embd = 5376;
    hp->n_head = 32;
    hp->head_dim = 128;
    hp->n_rot = 128;
    cpulm_status s = cpulm_gguf_writer_to_buf(w, &buf, &size);
    if (s == CPULM_OK) s = cpulm_gguf_parse(&g, buf, size, &err);
    if (s == CPULM_OK) {
        const cpulm_arch_desc *a = cpulm_arch_find("gemma3", 6);
        s = cpulm_swa_read(&g, a, hp, &err);
        if (s == CPULM_OK) s = cpulm_gemma_read_hparams(&g, "gemma3", hp, &err);
        if (s == CPULM_OK) s = cpulm_swa_set_layers(&g, a, hp, layers, &err);
        cpulm_gguf_release(&g);
    }
    free(buf);
    cpulm_gguf_writer_free(w);
    return s;
}

/* Windows by the default period 6, a period key, period 0 (all slide), a per-layer array,
 * and none without attention.sliding_window; a malformed pattern is refused. */
TEST(gemma_window_pattern) {
    cpulm_hparams hp;
    cpulm_layer ly[12];
    cpulm_gguf_writer *w = cpulm_gguf_writer_new();
    cpulm_gguf_writer_set_u32(w, "gemma3.attention.sliding_window", 512);
    REQUIRE(t, read_keys(w, 12, &hp, ly) == CPULM_OK);
    CHECK_EQ_INT(t, hp.n_swa, 512);
    CHECK_EQ_INT(t, hp.n_layer_swa, 10);
    for (int il = 0; il < 12; il++)
        CHECK_EQ_INT(t, ly[il].window, il == 5 || il == 11 ? 0 : 512);
    CHECK_NEAR(t, hp.rope_base_swa, 10000.0, 0);
    CHECK_NEAR(t, hp.final_softcap, 0.0, 0);
    CHECK_NEAR(t, hp.attn_scale, 1.0 / sqrt(128.0), 1e-7);

    w = cpulm_gguf_writer_new();
    cpulm_gguf_writer_set_u32(w, "gemma3.attention.sliding_window", 64);
    cpulm_gguf_writer_set_u32(w, "gemma3.attention.sliding_window_pattern", 3);
    cpulm_gguf_writer_set_f32(w, "gemma3.rope.freq_base_swa", 20000.0f);
    REQUIRE(t, read_keys(w, 7, &hp, ly) == CPULM_OK);
    CHECK_EQ_INT(t, hp.n_layer_swa, 5);
    for (int il = 0; il < 7; il++)
        CHECK_EQ_INT(t, ly[il].window, il % 3 == 2 ? 0 : 64);
    CHECK_NEAR(t, hp.rope_base_swa, 20000.0, 0);
    CHECK_NEAR(t, hp.final_softcap, 0.0, 0);

    w = cpulm_gguf_writer_new();
    cpulm_gguf_writer_set_u32(w, "gemma3.attention.sliding_window", 64);
    cpulm_gguf_writer_set_u32(w, "gemma3.attention.sliding_window_pattern", 0);
    cpulm_gguf_writer_set_f32(w, "gemma3.final_logit_softcapping", 0.5f);
    REQUIRE(t, read_keys(w, 4, &hp, ly) == CPULM_OK);
    CHECK_EQ_INT(t, hp.n_layer_swa, 4);
    CHECK_NEAR(t, hp.final_softcap, 0.5, 0);

    const uint8_t flags[5] = {1, 0, 0, 1, 1};
    w = cpulm_gguf_writer_new();
    cpulm_gguf_writer_set_u32(w, "gemma3.attention.sliding_window", 16);
    cpulm_gguf_writer_set_arr(w, "gemma3.attention.sliding_window_pattern", CPULM_GGUF_BOOL, flags,
                              5);
    REQUIRE(t, read_keys(w, 5, &hp, ly) == CPULM_OK);
    for (int il = 0; il < 5; il++)
        CHECK_EQ_INT(t, ly[il].window, flags[il] ? 16 : 0);
    w = cpulm_gguf_writer_new();
    cpulm_gguf_writer_set_u32(w, "gemma3.attention.sliding_window", 16);
    cpulm_gguf_writer_set_arr(w, "gemma3.attention.sliding_window_pattern", CPULM_GGUF_BOOL, flags,
                              4);
    CHECK_EQ_INT(t, read_keys(w, 5, &hp, ly), CPULM_ERR_FORMAT);

    /* no window: every layer global; the 62-layer model's query scale; a soft-cap key */
    w = cpulm_gguf_writer_new();
    cpulm_gguf_writer_set_f32(w, "gemma3.final_logit_softcapping", 30.0f);
    REQUIRE(t, read_keys(w, 62, &hp, ly) == CPULM_OK);
    CHECK_EQ_INT(t, hp.n_swa, 0);
    CHECK_EQ_INT(t, hp.n_layer_swa, 0);
    CHECK_EQ_INT(t, ly[5].window, 0);
    CHECK_NEAR(t, hp.final_softcap, 30.0, 0);
    CHECK_NEAR(t, hp.attn_scale, 1.0 / sqrt(168.0), 1e-7);
}

/* ---- GELU ---- */

/* The reference's f32 GELU reads an f16 table: every result is an f16 value, within f16
 * rounding (of the input and the output) of the exact tanh form; 0 below -10, x above 10;
 * geglu is gelu(g) * u. */
TEST(gemma_gelu_is_the_reference_table) {
    int bad = 0, not_f16 = 0;
    for (int i = -24000; i <= 24000; i++) {
        const float x = (float)i * 4.3e-4f;
        const double xd = x,
                     e = 0.5 * xd * (1 + tanh(0.7978845608028654 * xd * (1 + 0.044715 * xd * xd)));
        const float y = cpulm_gemma_gelu(x);
        const double tol = 1.2 * fabs(xd) / 2048 + fabs(e) / 1024 + 6e-8;
        bad += !(fabs(y - e) <= tol);
        not_f16 += fabsf(x) < 10.0f && cpulm_fp16_to_f32(cpulm_f32_to_fp16(y)) != y;
    }
    CHECK_EQ_INT(t, bad, 0);
    CHECK_EQ_INT(t, not_f16, 0);
    CHECK(t, cpulm_gemma_gelu(-10.0f) == 0.0f && cpulm_gemma_gelu(-30.0f) == 0.0f);
    CHECK(t, cpulm_gemma_gelu(10.0f) == 10.0f && cpulm_gemma_gelu(12.345f) == 12.345f);
    const float g[4] = {-11.0f, 0.5f, 3.0f, 11.0f}, u[4] = {2.0f, 3.0f, -1.0f, 0.5f};
    float y[4];
    cpulm_gemma_geglu(4, y, g, u);
    for (int i = 0; i < 4; i++)
        CHECK(t, y[i] == cpulm_gemma_gelu(g[i]) * u[i]);
}

/* ---- batches and generation ---- */

/* Four sequences longer than the window (23..64 tokens, window 32) decoded together, their
 * prompts interleaved token by token, then 5 single tokens each: every logit bit for bit
 * the one each sequence gets alone. */
TEST(gemma_batch_of_4_equals_each_alone) {
    if (test_emulated()) NOT_APPLICABLE(t, EMULATED_WHY);
    cpulm_synth_params p;
    REQUIRE(t, cpulm_synth_shape("tiny-gemma3", &p) == CPULM_OK);
    p.type = CPULM_DTYPE_Q8_0;
    cpulm_model *m = refcase_synth_load(&p, "tiny-gemma3-q8_0-batch.gguf");
    REQUIRE(t, m);
    CHECK_EQ_INT(t, refcase_batch4_diffs(m), 0);
    cpulm_model_free(m);
}

/* 300 tokens (9 windows) as one prompt, and as a 200-token prompt then 100 single tokens
 * (generation: the window's keys only, split over the cache on the tiled numerics): the
 * same logits up to rounding, with both numerics. */
TEST(gemma_generation_equals_prompt) {
    if (test_emulated()) NOT_APPLICABLE(t, EMULATED_WHY);
    cpulm_synth_params p;
    REQUIRE(t, cpulm_synth_shape("tiny-gemma3", &p) == CPULM_OK);
    p.type = CPULM_DTYPE_F32;
    cpulm_model *m = refcase_synth_load(&p, "tiny-gemma3-f32-gen.gguf");
    REQUIRE(t, m);
    const int32_t V = cpulm_vocab_n(m), n = 300, n_prompt = 200;
    int32_t toks[300];
    for (int32_t i = 0; i < n; i++)
        toks[i] = i == 0 ? 1 : 3 + (int32_t)((i * 7919) % 509);
    for (int fast = 0; fast <= 1; fast++) {
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

/* The chat template Gemma 3 instruction-tuned files carry (tokenizer.chat_template), a
 * fixture: the model's own data, rendered by the interpreter. */
static const char gemma3_template[] =
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate "
    "user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\\n'}}\n"
    "{%- endif -%}\n";

/* The family's documented format: <bos>, then per turn "<start_of_turn>" + role (the
 * assistant is "model") + "\n" + trimmed content + "<end_of_turn>\n", the system prompt
 * and a blank line opening the first user turn, and "<start_of_turn>model\n" to reply.
 * The file's template, the "gemma" built-in (which a template with <start_of_turn> falls
 * back to) and the detection agree; roles that do not alternate are an error. */
TEST(gemma_chat_template) {
    const cpulm_chat_msg msgs[] = {{"system", "Answer briefly."},
                                   {"user", " What is 2+2? "},
                                   {"assistant", "4"},
                                   {"user", "And 3+3?"}};
    const char *want = "<bos><start_of_turn>user\nAnswer briefly.\n\nWhat is 2+2?<end_of_turn>\n"
                       "<start_of_turn>model\n4<end_of_turn>\n"
                       "<start_of_turn>user\nAnd 3+3?<end_of_turn>\n"
                       "<start_of_turn>model\n";
    const char *srcs[2] = {gemma3_template, cpulm_chat_builtin("gemma")};
    REQUIRE(t, srcs[1]);
    for (int i = 0; i < 2; i++) {
        char *out = NULL;
        cpulm_error err = {0};
        CHECK_EQ_INT(t, cpulm_chat_render(srcs[i], msgs, 4, 1, "<bos>", "<eos>", &out, &err),
                     CPULM_OK);
        CHECK(t, out && !strcmp(out, want));
        if (out && strcmp(out, want)) fprintf(stderr, "  got: [%s]\n", out);
        free(out);
    }
    CHECK(t, cpulm_chat_detect(gemma3_template) &&
                 !strcmp(cpulm_chat_detect(gemma3_template), "gemma"));
    char *out = NULL;
    cpulm_error err = {0};
    CHECK_EQ_INT(t, cpulm_chat_render(gemma3_template, msgs + 1, 1, 0, "<bos>", "", &out, &err),
                 CPULM_OK);
    CHECK(t, out && !strcmp(out, "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n"));
    free(out);
    out = NULL;
    CHECK(t,
          cpulm_chat_render(gemma3_template, msgs + 2, 2, 1, "<bos>", "", &out, &err) != CPULM_OK);
    free(out);
}

/* A synthesized tiny-gemma3 file loads with its windows (5 of 6 layers), reported by
 * cpulm_model_get_info; gemma3-4b's shape cut to 12 layers has 10 sliding ones. */
TEST(gemma_synth_file_info) {
    cpulm_synth_params p;
    REQUIRE(t, cpulm_synth_shape("tiny-gemma3", &p) == CPULM_OK);
    p.type = CPULM_DTYPE_Q8_0;
    cpulm_model *m = refcase_synth_load(&p, "tiny-gemma3-q8_0-batch.gguf");
    REQUIRE(t, m);
    cpulm_model_info in;
    cpulm_model_get_info(m, &in);
    CHECK(t, !strcmp(in.arch, "gemma3"));
    CHECK_EQ_INT(t, in.n_swa, 32);
    CHECK_EQ_INT(t, in.n_layer_swa, 5);
    CHECK_NEAR(t, in.rope_freq_base_swa, 10000.0, 0);
    cpulm_model_free(m);
    REQUIRE(t, cpulm_synth_shape("gemma3-4b", &p) == CPULM_OK);
    p.hp.n_layer = 12;
    cpulm_hparams hp;
    cpulm_synth_hparams(&p, &hp);
    CHECK_EQ_INT(t, hp.n_swa, 1024);
    CHECK_EQ_INT(t, hp.n_layer_swa, 10);
}
