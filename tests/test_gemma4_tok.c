/* test_gemma4_tok.c: the gemma4 tokenizer model (Gemma 4's SentencePiece-style BPE) on the
 * vocabulary synth writes into gemma4 files: token ids equal llama-tokenize's over a varied
 * text set (tests/data/gemma4-tok.json, recorded by scripts/ref-tokens.py with the shared
 * llama.cpp), detokenized texts equal the inputs, and the vocabulary's special tokens,
 * pieces and end-of-generation tokens are llama.cpp's. Through the public API, on a file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "cpulm.h"
#include "refcase.h"
#include "toolkit/synth.h"
#include "test.h"

/* tiny-gemma4 with an n_vocab-token vocabulary (F32, written once per test run). */
static cpulm_model *vocab_model(int32_t n_vocab) {
    cpulm_synth_params p;
    if (cpulm_synth_shape("tiny-gemma4", &p) != CPULM_OK) return NULL;
    p.type = CPULM_DTYPE_F32;
    p.hp.n_vocab = n_vocab;
    char name[64];
    snprintf(name, sizeof name, "gemma4_tok_v%d.gguf", (int)n_vocab);
    return refcase_synth_load(&p, name);
}

static int hex_val(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The case's text ("text", or "hex" for bytes that are not UTF-8), owned; NULL if malformed. */
static char *case_text(const cpulm_json *c, size_t *n) {
    const char *s = cpulm_json_str(cpulm_json_get(c, "text"));
    const char *h = cpulm_json_str(cpulm_json_get(c, "hex"));
    if (s) {
        *n = strlen(s);
        char *r = malloc(*n + 1);
        if (r) memcpy(r, s, *n + 1);
        return r;
    }
    size_t len = h ? strlen(h) : 1;
    if (len % 2) return NULL;
    char *r = malloc(len / 2 + 1);
    for (size_t i = 0; r && i < len / 2; i++) {
        int hi = hex_val(h[2 * i]), lo = hex_val(h[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(r);
            return NULL;
        }
        r[i] = (char)(hi << 4 | lo);
    }
    *n = len / 2;
    return r;
}

/* The text ids render as with the streaming detokenizer (special tokens as ""), owned. */
static char *detok_all(const cpulm_model *m, const cpulm_token *ids, int32_t n, size_t *len) {
    cpulm_detok d;
    size_t cap = 256 + 64 * (size_t)n, k = 0;
    char *s = malloc(cap);
    cpulm_detok_init(&d, m, 0);
    for (int32_t i = 0; s && i < n; i++) {
        int32_t w = cpulm_detok_push(&d, ids[i], s + k, (int32_t)(cap - k));
        if (w < 0) {
            free(s);
            return NULL;
        }
        k += (size_t)w;
    }
    if (s) k += (size_t)cpulm_detok_flush(&d, s + k, (int32_t)(cap - k));
    *len = k;
    return s;
}

static void print_ids(const char *label, const cpulm_token *ids, int32_t n) {
    fprintf(stderr, "    %s:", label);
    for (int32_t i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

/* One case: the ids, then (when the case says so) the round trip; 0 when both hold. */
static int check_case(const cpulm_model *m, const cpulm_json *c) {
    const char *name = cpulm_json_str(cpulm_json_get(c, "name"));
    const cpulm_json *jw = cpulm_json_get(c, "ids");
    size_t n = 0;
    char *text = case_text(c, &n);
    const int32_t n_want = (int32_t)cpulm_json_len(jw), cap = (int32_t)n + 8;
    cpulm_token *got = malloc(sizeof(cpulm_token) * (size_t)cap);
    cpulm_token *want = malloc(sizeof(cpulm_token) * (size_t)(n_want + 1));
    int32_t n_got = -1;
    int bad = !text || !got || !want;
    for (int32_t i = 0; !bad && i < n_want; i++)
        want[i] = (cpulm_token)cpulm_json_num(cpulm_json_at(jw, (size_t)i), -1);
    if (!bad && cpulm_tokenize(m, text, n, (int)cpulm_json_num(cpulm_json_get(c, "add_special"), 1),
                               (int)cpulm_json_num(cpulm_json_get(c, "parse_special"), 1), got, cap,
                               &n_got) != CPULM_OK)
        bad = 1;
    if (!bad && (n_got != n_want || memcmp(got, want, sizeof(cpulm_token) * (size_t)n_got))) {
        fprintf(stderr, "  case '%s': ids differ from llama-tokenize's\n", name ? name : "?");
        print_ids("llama.cpp", want, n_want);
        print_ids("cpulm    ", got, n_got);
        bad = 1;
    }
    if (!bad && cpulm_json_num(cpulm_json_get(c, "roundtrip"), 0)) {
        size_t len = 0;
        char *back = detok_all(m, got, n_got, &len);
        if (!back || len != n || memcmp(back, text, n)) {
            fprintf(stderr, "  case '%s': detokenized text differs: '%.*s'\n", name ? name : "?",
                    back ? (int)len : 0, back ? back : "");
            bad = 1;
        }
        free(back);
    }
    free(text);
    free(got);
    free(want);
    return bad;
}

TEST(gemma4_tok_llama_cpp) {
    cpulm_json_doc *d = refcase_load("gemma4-tok.json");
    REQUIRE(t, d);
    const cpulm_json *root = cpulm_json_root(d), *cases = cpulm_json_get(root, "cases");
    cpulm_model *m = vocab_model((int32_t)cpulm_json_num(cpulm_json_get(root, "n_vocab"), 0));
    REQUIRE(t, m && cpulm_json_len(cases) >= 20);
    int fails = 0, trips = 0;
    for (size_t i = 0; i < cpulm_json_len(cases); i++) {
        fails += check_case(m, cpulm_json_at(cases, i));
        trips += cpulm_json_num(cpulm_json_get(cpulm_json_at(cases, i), "roundtrip"), 0) != 0;
    }
    fprintf(stderr, "  %zu cases (%d round trips), %d failed\n", cpulm_json_len(cases), trips,
            fails);
    CHECK_EQ_INT(t, fails, 0);
    CHECK(t, trips >= 10);
    cpulm_model_free(m);
    cpulm_json_free(d);
}

/* The id of a token's text, -1 when absent. */
static cpulm_token find(const cpulm_model *m, const char *text) {
    for (cpulm_token i = 0; i < cpulm_vocab_n(m); i++)
        if (!strcmp(cpulm_token_text(m, i), text)) return i;
    return -1;
}

static int piece_is(const cpulm_model *m, cpulm_token tok, int special, const char *want) {
    char buf[64];
    int32_t n = 0;
    return tok >= 0 && cpulm_token_to_piece(m, tok, special, buf, sizeof buf, &n) == CPULM_OK &&
           n == (int32_t)strlen(want) && !memcmp(buf, want, (size_t)n);
}

/* BOS and EOS from the file, <eos>, <turn|> and <|tool_response> end generation (llama.cpp's
 * list), the turn openers and visible markers do not; pieces: U+2581 is a space, <0xXX> its
 * byte, control tokens render only when asked, user-defined ones always. */
TEST(gemma4_tok_vocab) {
    cpulm_model *m = vocab_model(512);
    REQUIRE(t, m);
    CHECK_EQ_INT(t, cpulm_token_bos(m), find(m, "<bos>"));
    CHECK_EQ_INT(t, cpulm_token_eos(m), find(m, "<eos>"));
    CHECK(t, cpulm_vocab_add_bos(m));
    const char *eog[] = {"<eos>", "<turn|>", "<|tool_response>"};
    const char *not_eog[] = {"<bos>", "<|turn>", "<|channel>", "<channel|>", "</s>", "<pad>"};
    for (int i = 0; i < 3; i++)
        CHECK(t, cpulm_token_is_eog(m, find(m, eog[i])));
    for (int i = 0; i < 6; i++)
        CHECK(t, find(m, not_eog[i]) >= 0 && !cpulm_token_is_eog(m, find(m, not_eog[i])));
    CHECK(t, piece_is(m, find(m, "\xE2\x96\x81"), 0, " "));
    CHECK(t, piece_is(m, find(m, "<0x41>"), 0, "A"));
    CHECK(t, piece_is(m, find(m, "\n\n"), 0, "\n\n"));
    CHECK(t, piece_is(m, find(m, "<turn|>"), 0, ""));
    CHECK(t, piece_is(m, find(m, "<turn|>"), 1, "<turn|>"));
    CHECK(t, piece_is(m, find(m, "<|channel>"), 0, "<|channel>"));
    /* made a control token by the end-of-generation rule: hidden, and text without parsing */
    CHECK(t, piece_is(m, find(m, "<|tool_response>"), 0, ""));
    cpulm_token ids[32];
    int32_t n = 0;
    CHECK(t, cpulm_tokenize(m, "", 0, 1, 1, ids, 32, &n) == CPULM_OK && n == 1 &&
                 ids[0] == find(m, "<bos>"));
    CHECK(t, cpulm_tokenize(m, "<|tool_response>", 16, 0, 0, ids, 32, &n) == CPULM_OK && n > 1);
    CHECK(t, cpulm_tokenize(m, "<|channel>", 10, 0, 0, ids, 32, &n) == CPULM_OK && n == 1 &&
                 ids[0] == find(m, "<|channel>"));
    cpulm_model_free(m);
}

/* The file's chat template renders a chat as the gemma4 built-in does, and that prompt
 * tokenizes with its turn markers as single tokens after <bos>. */
TEST(gemma4_tok_chat_template) {
    cpulm_model *m = vocab_model(512);
    REQUIRE(t, m);
    char tmpl[2048];
    size_t len = 0;
    REQUIRE(t, cpulm_model_meta(m, "tokenizer.chat_template", tmpl, sizeof tmpl, &len) == CPULM_OK);
    const cpulm_chat_msg msgs[] = {{"system", "Be brief."}, {"user", "Hi"}};
    char *a = NULL, *b = NULL;
    cpulm_error err = {0};
    CHECK(t, cpulm_chat_render(tmpl, msgs, 2, 1, "<bos>", "<eos>", &a, &err) == CPULM_OK);
    CHECK(t, cpulm_chat_render(cpulm_chat_builtin("gemma4"), msgs, 2, 1, "<bos>", "<eos>", &b,
                               &err) == CPULM_OK);
    CHECK(t, a && b && !strcmp(a, b));
    cpulm_token ids[64];
    int32_t n = 0;
    CHECK(t, a && cpulm_tokenize(m, a, strlen(a), 0, 1, ids, 64, &n) == CPULM_OK && n > 4);
    CHECK(t, n > 4 && ids[0] == find(m, "<bos>") && ids[1] == find(m, "<|turn>"));
    free(a);
    free(b);
    cpulm_model_free(m);
}
