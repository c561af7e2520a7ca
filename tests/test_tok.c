/* test_tok.c: tokenizer tests against the shared reference vectors.
 *
 * Vectors: llama.cpp's ggml-vocab-*.gguf.inp/.out (46 cases each), the llama-tokenizer-js
 * and llama3-tokenizer-js recorded cases, the stories260K prompts / greedy texts; the
 * Llama 3 and Qwen2 vocabularies are built from their raw HF files. Per-vocab pass counts
 * are printed; every vocab present must pass 100%. A small JSON reader (test-only) reads
 * the case files. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/mmap.h"
#include "format/gguf.h"
#include "test.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

/* ---- minimal JSON DOM (test-only) ---- */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jval {
    jtype t;
    double num;
    char *s; /* J_STR: NUL-terminated, may contain NULs (len) */
    size_t len;
    struct jval *items; /* J_ARR / J_OBJ values */
    char **keys;        /* J_OBJ */
    size_t n;
} jval;

typedef struct jp {
    const char *p, *end;
    int bad;
} jp;

static void jws(jp *c) {
    while (c->p < c->end && strchr(" \t\r\n", *c->p))
        c->p++;
}

static void jput(char **buf, size_t *n, size_t *cap, const char *s, size_t k) {
    if (*n + k + 1 > *cap) {
        *cap = (*n + k + 1) * 2;
        *buf = realloc(*buf, *cap);
    }
    memcpy(*buf + *n, s, k);
    *n += k;
    (*buf)[*n] = 0;
}

static uint32_t jhex(jp *c) {
    uint32_t v = 0;
    for (int i = 0; i < 4 && c->p < c->end; i++) {
        char h = *c->p++;
        v = v << 4 | (uint32_t)(h <= '9' ? h - '0' : (h | 32) - 'a' + 10);
    }
    return v;
}

static char *jstr(jp *c, size_t *len) {
    char *buf = NULL;
    size_t n = 0, cap = 0;
    jput(&buf, &n, &cap, "", 0);
    c->p++; /* opening quote */
    while (c->p < c->end && *c->p != '"') {
        if (*c->p != '\\') {
            jput(&buf, &n, &cap, c->p++, 1);
            continue;
        }
        char e = *++c->p, u[4];
        c->p++;
        if (e == 'u') {
            uint32_t cp = jhex(c);
            if (cp >= 0xD800 && cp <= 0xDBFF && c->p + 1 < c->end && c->p[0] == '\\') {
                c->p += 2;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (jhex(c) - 0xDC00);
            }
            jput(&buf, &n, &cap, u, (size_t)cpulm_utf8_encode(cp, u));
        } else {
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
            const char *k = strchr(from, e);
            if (!k || !e)
                c->bad = 1;
            else
                jput(&buf, &n, &cap, to + (k - from), 1);
        }
    }
    if (c->p >= c->end) c->bad = 1;
    c->p++;
    *len = n;
    return buf;
}

static void jparse(jp *c, jval *v);

static void jcontainer(jp *c, jval *v, int obj) {
    size_t cap = 0;
    c->p++;
    for (;;) {
        jws(c);
        if (c->p >= c->end || c->bad) {
            c->bad = 1;
            return;
        }
        if (*c->p == (obj ? '}' : ']')) {
            c->p++;
            return;
        }
        if (v->n == cap) {
            cap = cap ? 2 * cap : 8;
            v->items = realloc(v->items, cap * sizeof *v->items);
            if (obj) v->keys = realloc(v->keys, cap * sizeof *v->keys);
        }
        if (obj) {
            size_t kl;
            if (*c->p != '"') {
                c->bad = 1;
                return;
            }
            v->keys[v->n] = jstr(c, &kl);
            jws(c);
            if (c->p >= c->end || *c->p++ != ':') c->bad = 1;
        }
        jparse(c, &v->items[v->n++]);
        jws(c);
        if (c->p < c->end && *c->p == ',') c->p++;
    }
}

static void jparse(jp *c, jval *v) {
    memset(v, 0, sizeof *v);
    jws(c);
    if (c->p >= c->end) {
        c->bad = 1;
        return;
    }
    char ch = *c->p;
    if (ch == '{' || ch == '[') {
        v->t = ch == '{' ? J_OBJ : J_ARR;
        jcontainer(c, v, ch == '{');
    } else if (ch == '"') {
        v->t = J_STR;
        v->s = jstr(c, &v->len);
    } else if (!strncmp(c->p, "true", 4) || !strncmp(c->p, "false", 5)) {
        v->t = J_BOOL;
        v->num = ch == 't';
        c->p += ch == 't' ? 4 : 5;
    } else if (!strncmp(c->p, "null", 4)) {
        v->t = J_NULL;
        c->p += 4;
    } else {
        char *e;
        v->t = J_NUM;
        v->num = strtod(c->p, &e);
        if (e == c->p) c->bad = 1;
        c->p = e;
    }
}

static void jfree(jval *v) {
    for (size_t i = 0; i < v->n; i++) {
        jfree(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->s);
}

static const jval *jget(const jval *o, const char *key) {
    if (!o || o->t != J_OBJ) return NULL;
    for (size_t i = 0; i < o->n; i++)
        if (!strcmp(o->keys[i], key)) return &o->items[i];
    return NULL;
}

/* Loads a shared JSON file into *v; 0 if missing or malformed. */
static int jload(const char *rel, jval *v) {
    const char *path = test_shared_path(rel);
    size_t n;
    char *s = path ? test_read_file(path, &n) : NULL;
    if (!s) return 0;
    jp c = {s, s + n, 0};
    jparse(&c, v);
    free(s);
    if (c.bad) jfree(v);
    return !c.bad;
}

/* ---- helpers ---- */

static int tokenize(const cpulm_vocab *v, const char *s, size_t n, int add, int parse,
                    cpulm_token *out, int32_t cap) {
    int32_t n_out = 0;
    cpulm_status st = cpulm_vocab_tokenize(v, s, n, add, parse, out, cap, &n_out);
    return st == CPULM_OK ? n_out : -1;
}

static void print_ids(const char *label, const cpulm_token *ids, int n) {
    fprintf(stderr, "    %s:", label);
    for (int i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

/* Detokenizes ids with the streaming detokenizer (plus flush) into a malloc'd string. */
static char *detok_all(const cpulm_vocab *v, const cpulm_token *ids, int n, int special,
                       size_t *len) {
    cpulm_detok d = {0};
    size_t cap = 64 + 16 * (size_t)n, k = 0;
    char *s = malloc(cap + 1);
    cpulm_vocab_detok_reset(&d, special);
    for (int i = 0; i < n; i++) {
        int32_t w = cpulm_vocab_detok_push(v, &d, ids[i], s + k, (int32_t)(cap - k));
        if (w < 0) {
            free(s);
            return NULL;
        }
        k += (size_t)w;
    }
    k += (size_t)cpulm_vocab_detok_flush(&d, s + k, (int32_t)(cap - k));
    s[k] = 0;
    *len = k;
    return s;
}

/* Runs testdata/tokenizer/ggml-vocab-<name>.gguf.inp/.out; returns the number of cases
 * (all must pass), 0 if the files are missing. */
static int run_vectors(test_ctx *t, const cpulm_vocab *v, const char *name) {
    char rel[256];
    size_t n_inp, n_out;
    snprintf(rel, sizeof rel, "testdata/tokenizer/ggml-vocab-%s.gguf.inp", name);
    const char *p = test_shared_path(rel);
    char *inp = p ? test_read_file(p, &n_inp) : NULL;
    snprintf(rel, sizeof rel, "testdata/tokenizer/ggml-vocab-%s.gguf.out", name);
    p = test_shared_path(rel);
    char *out = p ? test_read_file(p, &n_out) : NULL;
    if (!inp || !out) {
        free(inp);
        free(out);
        return 0;
    }
    static const char sep[] = "\n__ggml_vocab_test__\n";
    int total = 0, pass = 0;
    char *case_at = inp, *line = out;
    cpulm_token got[1024], want[1024];
    for (char *e; (e = memmem(case_at, n_inp - (size_t)(case_at - inp), sep, strlen(sep)));) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        int n_want = 0;
        for (char *tok = strtok(line, " \r"); tok && n_want < 1024; tok = strtok(NULL, " \r"))
            want[n_want++] = atoi(tok);
        int n_got = tokenize(v, case_at, (size_t)(e - case_at), 0, 0, got, 1024);
        if (n_got == n_want && !memcmp(got, want, (size_t)n_want * sizeof *got)) {
            pass++;
        } else {
            fprintf(stderr, "  %s case %d: \"%.*s\"\n", name, total, (int)(e - case_at), case_at);
            print_ids("want", want, n_want);
            print_ids("got ", got, n_got);
        }
        total++;
        case_at = e + strlen(sep);
        line = nl ? nl + 1 : line + strlen(line);
    }
    printf("  tok vectors %-16s %d/%d\n", name, pass, total);
    CHECK_EQ_INT(t, pass, total);
    CHECK_EQ_INT(t, total, 46);
    free(inp);
    free(out);
    return total;
}

/* ---- vocab builders for the raw HF files ---- */

/* Llama 3.1 special tokens 128000..128255 (the naming llama3-tokenizer-js uses). */
static cpulm_vocab *llama3_vocab(void) {
    const char *enc = test_shared_path("testdata/tokenizer/llama3-bpe/encoder.json");
    char enc_path[4096];
    if (!enc) return NULL;
    snprintf(enc_path, sizeof enc_path, "%s", enc);
    const char *bpe = test_shared_path("testdata/tokenizer/llama3-bpe/vocab.bpe");
    if (!bpe) return NULL;
    static const char *const named[] = {"<|begin_of_text|>",
                                        "<|end_of_text|>",
                                        NULL,
                                        NULL,
                                        "<|finetune_right_pad_id|>",
                                        NULL,
                                        "<|start_header_id|>",
                                        "<|end_header_id|>",
                                        "<|eom_id|>",
                                        "<|eot_id|>",
                                        "<|python_tag|>"};
    static char names[256][40];
    cpulm_vocab_added_token added[256];
    int reserved = 0;
    for (int i = 0; i < 256; i++) {
        if (i < 11 && named[i])
            snprintf(names[i], sizeof names[i], "%s", named[i]);
        else
            snprintf(names[i], sizeof names[i], "<|reserved_special_token_%d|>", reserved++);
        added[i] = (cpulm_vocab_added_token){128000 + i, names[i], 1};
    }
    cpulm_vocab_bpe_files f = {enc_path, bpe, "llama-bpe", added, 256, 128000, 128001, -1};
    cpulm_vocab *v = NULL;
    cpulm_error err = {0};
    if (cpulm_vocab_from_bpe_files(&v, &f, &err) != CPULM_OK)
        fprintf(stderr, "  llama3 vocab: %s\n", err.msg);
    return v;
}

/* Qwen2 vocab + merges, with the added tokens of tokenizer_config.json. */
static cpulm_vocab *qwen2_vocab(const char *pre) {
    char vocab_path[4096], merges_path[4096];
    const char *p = test_shared_path("testdata/tokenizer/qwen2-bpe/vocab.json");
    if (!p) return NULL;
    snprintf(vocab_path, sizeof vocab_path, "%s", p);
    if (!(p = test_shared_path("testdata/tokenizer/qwen2-bpe/merges.txt"))) return NULL;
    snprintf(merges_path, sizeof merges_path, "%s", p);
    jval cfg;
    if (!jload("testdata/tokenizer/qwen2-bpe/tokenizer_config.json", &cfg)) return NULL;
    const jval *dec = jget(&cfg, "added_tokens_decoder");
    cpulm_vocab_added_token added[16];
    int n = 0, eos = -1;
    for (size_t i = 0; dec && i < dec->n && n < 16; i++) {
        const jval *content = jget(&dec->items[i], "content"),
                   *sp = jget(&dec->items[i], "special");
        if (!content) continue;
        added[n++] = (cpulm_vocab_added_token){atoi(dec->keys[i]), content->s, sp && sp->num != 0};
        const jval *eos_text = jget(&cfg, "eos_token");
        if (eos_text && eos_text->t == J_STR && !strcmp(eos_text->s, content->s))
            eos = added[n - 1].id;
    }
    cpulm_vocab_bpe_files f = {vocab_path, merges_path, pre, added, n, -1, eos, -1};
    cpulm_vocab *v = NULL;
    cpulm_error err = {0};
    if (cpulm_vocab_from_bpe_files(&v, &f, &err) != CPULM_OK)
        fprintf(stderr, "  qwen2 vocab: %s\n", err.msg);
    jfree(&cfg);
    return v;
}

/* ---- unit tests that need no data ---- */

TEST(tok_unicode_classes) {
    CHECK_EQ_INT(t, cpulm_unicode_flags('A'), CPULM_UC_LETTER);
    CHECK_EQ_INT(t, cpulm_unicode_flags('7'), CPULM_UC_NUMBER);
    CHECK_EQ_INT(t, cpulm_unicode_flags(' '), CPULM_UC_SEPARATOR | CPULM_UC_SPACE);
    CHECK_EQ_INT(t, cpulm_unicode_flags('\n'), CPULM_UC_CONTROL | CPULM_UC_SPACE);
    CHECK_EQ_INT(t, cpulm_unicode_flags(0x1C), CPULM_UC_CONTROL); /* not White_Space */
    CHECK_EQ_INT(t, cpulm_unicode_flags('$'), CPULM_UC_SYMBOL);
    CHECK_EQ_INT(t, cpulm_unicode_flags('_'), CPULM_UC_PUNCT);
    CHECK_EQ_INT(t, cpulm_unicode_flags(0x85), CPULM_UC_CONTROL | CPULM_UC_SPACE);
    CHECK_EQ_INT(t, cpulm_unicode_flags(0xA0), CPULM_UC_SEPARATOR | CPULM_UC_SPACE);
    CHECK_EQ_INT(t, cpulm_unicode_flags(0xBD), CPULM_UC_NUMBER); /* ½ is No */
    CHECK_EQ_INT(t, cpulm_unicode_flags(0x0301), CPULM_UC_MARK); /* combining acute */
    CHECK_EQ_INT(t, cpulm_unicode_flags(0x3000), CPULM_UC_SEPARATOR | CPULM_UC_SPACE);
    CHECK_EQ_INT(t, cpulm_unicode_flags(0x9547), CPULM_UC_LETTER);  /* 镇 */
    CHECK_EQ_INT(t, cpulm_unicode_flags(0x1F999), CPULM_UC_SYMBOL); /* 🦙 */
    CHECK_EQ_INT(t, cpulm_unicode_flags(0x10400), CPULM_UC_LETTER); /* Deseret, beyond BMP */
    CHECK_EQ_INT(t, cpulm_unicode_flags(0xE000), CPULM_UC_CONTROL); /* private use */
    CHECK_EQ_INT(t, cpulm_unicode_flags(0x10FFFF), CPULM_UC_CONTROL);
    CHECK(t, cpulm_unicode_is_dsllm_letter(0x212A)); /* Kelvin sign is in the class */
    CHECK(t, cpulm_unicode_is_dsllm_letter(0x1E943));
    CHECK(t, !cpulm_unicode_is_dsllm_letter(0x4E00)); /* CJK is not */
    CHECK(t, !cpulm_unicode_is_dsllm_letter(0xAA));   /* ª (Lo) is not cased */
}

TEST(tok_utf8_decode) {
    const char s[] = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\xa6\x99\x80\xc3x\xf8";
    uint32_t want[] = {'a', 0xE9, 0x20AC, 0x1F999, 0xFFFD, 0xFFFD, 'x', 0xFFFD};
    size_t i = 0, k = 0, n = sizeof s - 1;
    while (i < n && k < 8)
        CHECK_EQ_INT(t, cpulm_utf8_decode(s, n, &i), want[k++]);
    CHECK_EQ_INT(t, i, n);
    CHECK_EQ_INT(t, k, 8);
    char out[4];
    CHECK_EQ_INT(t, cpulm_utf8_encode(0x1F999, out), 4);
    CHECK(t, !memcmp(out, "\xf0\x9f\xa6\x99", 4));
}

/* ---- Llama 3 (byte-level BPE from encoder.json + vocab.bpe) ---- */

static void llama3_js_cases(test_ctx *t, const cpulm_vocab *v) {
    jval js;
    if (!jload("testdata/tokenizer/llama3-tokenizer-js-cases.json", &js)) {
        CHECK(t, 0);
        return;
    }
    const jval *enc = jget(&js, "encode"), *dec = jget(&js, "decode");
    int pass = 0, total = 0;
    cpulm_token got[512];
    for (size_t i = 0; enc && i < enc->n; i++, total++) {
        const jval *c = &enc->items[i], *in = jget(c, "input"), *want = jget(c, "expected");
        const jval *opt = jget(c, "options"), *bos = jget(opt, "bos"), *eos = jget(opt, "eos");
        int add_bos = bos ? bos->num != 0 : 1, add_eos = eos ? eos->num != 0 : 1, n = 0;
        if (add_bos) got[n++] = cpulm_vocab_bos(v);
        int k = tokenize(v, in->s, in->len, 0, 1, got + n, 500);
        n = k < 0 ? -1 : n + k;
        if (n >= 0 && add_eos) got[n++] = cpulm_vocab_eos(v);
        int ok = n == (int)want->n;
        for (int j = 0; ok && j < n; j++)
            ok = got[j] == (cpulm_token)want->items[j].num;
        pass += ok;
        if (!ok) fprintf(stderr, "  llama3-js encode %zu failed: %.60s\n", i, in->s);
    }
    for (size_t i = 0; dec && i < dec->n; i++, total++) {
        const jval *c = &dec->items[i], *in = jget(c, "input"), *want = jget(c, "expected");
        cpulm_token ids[512];
        int n = 0;
        for (size_t j = 0; j < in->n && n < 512; j++)
            ids[n++] = (cpulm_token)in->items[j].num;
        size_t len;
        char *s = detok_all(v, ids, n, 1, &len);
        int ok = s && len == want->len && !memcmp(s, want->s, len);
        pass += ok;
        if (!ok) fprintf(stderr, "  llama3-js decode %zu failed: %s\n", i, s ? s : "(error)");
        free(s);
    }
    printf("  tok llama3-tokenizer-js       %d/%d\n", pass, total);
    CHECK_EQ_INT(t, pass, total);
    CHECK_EQ_INT(t, total, 42);
    jfree(&js);
}

TEST(tok_llama3_bpe) {
    cpulm_vocab *v = llama3_vocab();
    if (!v) SKIP(t, "llama3-bpe files missing");
    CHECK_EQ_INT(t, cpulm_vocab_n_tokens(v), 128256);
    CHECK_EQ_INT(t, cpulm_vocab_eot(v), 128009);
    CHECK(t, cpulm_vocab_is_eog(v, 128001) && cpulm_vocab_is_eog(v, 128009));
    CHECK(t, cpulm_vocab_is_eog(v, 128008) && !cpulm_vocab_is_eog(v, 128006));
    CHECK(t, cpulm_vocab_wants_bos(v));
    run_vectors(t, v, "llama-bpe");
    llama3_js_cases(t, v);
    cpulm_vocab_free(v);
}

TEST(tok_llama3_special_parsing) {
    cpulm_vocab *v = llama3_vocab();
    if (!v) SKIP(t, "llama3-bpe files missing");
    const char *s = "<|start_header_id|>user<|end_header_id|>";
    cpulm_token on[32], off[32];
    int n_on = tokenize(v, s, strlen(s), 1, 1, on, 32);
    int n_off = tokenize(v, s, strlen(s), 0, 0, off, 32);
    REQUIRE(t, n_on == 4 && n_off > 4);
    CHECK_EQ_INT(t, on[0], 128000); /* BOS from add_special */
    CHECK_EQ_INT(t, on[1], 128006);
    CHECK_EQ_INT(t, on[3], 128007);
    for (int i = 0; i < n_off; i++)
        CHECK(t, off[i] < 128000); /* never parsed when off */
    /* A too-small buffer reports the size needed. */
    int32_t need = 0;
    CHECK_EQ_INT(t, cpulm_vocab_tokenize(v, s, strlen(s), 1, 1, on, 2, &need), CPULM_ERR_TOO_SMALL);
    CHECK_EQ_INT(t, need, 4);
    cpulm_vocab_free(v);
}

/* ---- Qwen2 (vocab.json + merges.txt) ---- */

TEST(tok_qwen2_bpe) {
    cpulm_vocab *v = qwen2_vocab("qwen2");
    if (!v) SKIP(t, "qwen2-bpe files missing");
    CHECK_EQ_INT(t, cpulm_vocab_n_tokens(v), 151646);
    CHECK_EQ_INT(t, cpulm_vocab_eos(v), 151643);
    CHECK_EQ_INT(t, cpulm_vocab_eot(v), 151645); /* <|im_end|> */
    CHECK(t, cpulm_vocab_is_eog(v, 151643) && cpulm_vocab_is_eog(v, 151645));
    CHECK(t, !cpulm_vocab_wants_bos(v));
    run_vectors(t, v, "qwen2");
    cpulm_vocab_free(v);
    v = qwen2_vocab("deepseek-r1-qwen");
    REQUIRE(t, v != NULL);
    run_vectors(t, v, "deepseek-r1-qwen");
    const char *s = "<|im_start|>user\nhi<|im_end|>";
    cpulm_token ids[16];
    int n = tokenize(v, s, strlen(s), 0, 1, ids, 16);
    REQUIRE(t, n >= 4);
    CHECK_EQ_INT(t, ids[0], 151644);
    CHECK_EQ_INT(t, ids[n - 1], 151645);
    cpulm_vocab_free(v);
}

/* ---- GGUF vocabularies ---- */

/* Loads the vocab of a shared GGUF file; NULL (and a SKIP-able state) if missing. */
static cpulm_vocab *gguf_vocab(test_ctx *t, const char *rel) {
    const char *path = test_shared_path(rel);
    if (!path) return NULL;
    cpulm_mmap m;
    cpulm_gguf g;
    cpulm_vocab *v = NULL;
    cpulm_error err = {0};
    if (cpulm_mmap_open(&m, path, &err) != CPULM_OK) {
        fprintf(stderr, "  %s\n", err.msg);
        t->n_fail++;
        return NULL;
    }
    if (cpulm_gguf_parse(&g, m.data, m.size, &err) == CPULM_OK) {
        if (cpulm_vocab_load(&v, &g, &err) != CPULM_OK) fprintf(stderr, "  %s: %s\n", rel, err.msg);
        cpulm_gguf_release(&g);
    } else {
        fprintf(stderr, "  %s: %s\n", rel, err.msg);
    }
    cpulm_mmap_close(&m); /* the vocab owns copies of everything */
    if (!v) t->n_fail++;
    return v;
}

static void llama2_js_cases(test_ctx *t, const cpulm_vocab *v) {
    jval js;
    if (!jload("testdata/tokenizer/llama2-tokenizer-js-cases.json", &js)) {
        CHECK(t, 0);
        return;
    }
    const jval *enc = jget(&js, "encode"), *dec = jget(&js, "decode");
    int pass = 0, total = 0, n_dec = 0;
    cpulm_token got[1024];
    for (size_t i = 0; enc && i < enc->n; i++, total++) {
        const jval *c = &enc->items[i], *in = jget(c, "input"), *want = jget(c, "expected");
        int n = tokenize(v, in->s, in->len, 1, 0, got, 1024); /* expected ids include BOS */
        int ok = n == (int)want->n;
        for (int j = 0; ok && j < n; j++)
            ok = got[j] == (cpulm_token)want->items[j].num;
        pass += ok;
        if (!ok) fprintf(stderr, "  llama2-js encode %zu failed: %.60s\n", i, in->s);
    }
    /* Decode cases are meaningful for our semantics when the package's flags describe the
     * ids: the dummy-prefix space is stripped exactly when the ids start with BOS. */
    for (size_t i = 0; dec && i < dec->n; i++) {
        const jval *c = &dec->items[i], *in = jget(c, "input"), *want = jget(c, "expected");
        int bos = in->n && in->items[0].num == 1;
        if (jget(c, "add_preceding_space")->num != bos || (bos && !jget(c, "add_bos_token")->num))
            continue;
        cpulm_token ids[1024];
        int n = 0;
        for (size_t j = 0; j < in->n && n < 1024; j++)
            ids[n++] = (cpulm_token)in->items[j].num;
        size_t len;
        char *s = detok_all(v, ids, n, 0, &len);
        int ok = s && len == want->len && !memcmp(s, want->s, len);
        pass += ok;
        total++;
        n_dec++;
        if (!ok) fprintf(stderr, "  llama2-js decode %zu failed: '%s'\n", i, s ? s : "(error)");
        free(s);
    }
    printf("  tok llama2-tokenizer-js       %d/%d (12 encode, %d decode)\n", pass, total, n_dec);
    CHECK_EQ_INT(t, pass, total);
    CHECK_EQ_INT(t, n_dec, 15);
    jfree(&js);
}

TEST(tok_llama_spm) {
    cpulm_vocab *v = gguf_vocab(t, "testdata/tokenizer/ggml-vocab-llama-spm.gguf");
    if (!v) {
        if (!t->n_fail) SKIP(t, "ggml-vocab-llama-spm.gguf missing");
        return;
    }
    CHECK_EQ_INT(t, cpulm_vocab_kind(v), CPULM_VOCAB_SPM);
    CHECK_EQ_INT(t, cpulm_vocab_bos(v), 1);
    CHECK_EQ_INT(t, cpulm_vocab_eos(v), 2);
    CHECK(t, cpulm_vocab_wants_bos(v) && !cpulm_vocab_wants_eos(v));
    run_vectors(t, v, "llama-spm");
    llama2_js_cases(t, v);
    /* Control tokens are parsed only on request; "<s>" is control here. */
    cpulm_token ids[16];
    CHECK_EQ_INT(t, tokenize(v, "<s>", 3, 0, 1, ids, 16), 1);
    CHECK_EQ_INT(t, ids[0], 1);
    int n = tokenize(v, "<s>", 3, 0, 0, ids, 16);
    CHECK(t, n > 1);
    for (int i = 0; i < n; i++)
        CHECK(t, ids[i] != 1);
    cpulm_vocab_free(v);
}

TEST(tok_phi3_spm) {
    cpulm_vocab *v = gguf_vocab(t, "testdata/tokenizer/ggml-vocab-phi-3.gguf");
    if (!v) {
        if (!t->n_fail) SKIP(t, "ggml-vocab-phi-3.gguf missing");
        return;
    }
    CHECK_EQ_INT(t, cpulm_vocab_eos(v), 32000);
    CHECK_EQ_INT(t, cpulm_vocab_eot(v), 32007); /* <|end|> */
    {
        /* "</s>" is typed user-defined in this file, but it is SentencePiece's end-of-text
         * control token: text spelling it stays text unless special parsing is on */
        cpulm_token a[16], b[16];
        int na = tokenize(v, "a</s>b", 6, 0, 0, a, 16), nb = tokenize(v, "a</s>b", 6, 0, 1, b, 16);
        CHECK(t, na > 3);
        for (int i = 0; i < na; i++)
            CHECK(t, a[i] != 2);
        CHECK_EQ_INT(t, nb, 3);
        if (nb == 3) CHECK_EQ_INT(t, b[1], 2);
    }
    CHECK(t, cpulm_vocab_is_eog(v, 32000) && cpulm_vocab_is_eog(v, 32007));
    run_vectors(t, v, "phi-3");
    /* <|user|> is right-stripped for Phi-3 (llama.cpp): the newline after it goes. */
    const char *s = "<|user|>\nHi<|end|>";
    cpulm_token ids[16], ref[16];
    int n = tokenize(v, s, strlen(s), 0, 1, ids, 16);
    int n_ref = tokenize(v, "Hi", 2, 0, 0, ref, 16);
    REQUIRE(t, n == n_ref + 2);
    CHECK_EQ_INT(t, ids[0], 32010);
    CHECK(t, !memcmp(ids + 1, ref, (size_t)n_ref * sizeof *ids));
    CHECK_EQ_INT(t, ids[n - 1], 32007);
    cpulm_vocab_free(v);
}

TEST(tok_deepseek_bpe) {
    static const char *const names[] = {"deepseek-llm", "deepseek-coder"};
    int n_run = 0;
    for (int i = 0; i < 2; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "testdata/tokenizer/ggml-vocab-%s.gguf", names[i]);
        cpulm_vocab *v = gguf_vocab(t, rel);
        if (!v) continue;
        CHECK_EQ_INT(t, cpulm_vocab_kind(v), CPULM_VOCAB_BPE);
        CHECK(t, !strcmp(cpulm_vocab_pre_name(v), names[i]));
        n_run += run_vectors(t, v, names[i]) > 0;
        cpulm_vocab_free(v);
    }
    if (!n_run && !t->n_fail) SKIP(t, "deepseek vocab files missing");
}

/* ---- stories260K: prompts and greedy texts of the references ---- */

static int detok_matches(const cpulm_vocab *v, const jval *ids_json, size_t from, int lead_bos,
                         const jval *want) {
    cpulm_token ids[1024];
    int n = 0;
    if (lead_bos) ids[n++] = cpulm_vocab_bos(v);
    for (size_t j = from; j < ids_json->n && n < 1024; j++)
        ids[n++] = (cpulm_token)ids_json->items[j].num;
    size_t len;
    char *s = detok_all(v, ids, n, 0, &len);
    int ok = s && want && want->t == J_STR && len == want->len && !memcmp(s, want->s, len);
    if (!ok) fprintf(stderr, "  detok mismatch: '%s'\n", s ? s : "(error)");
    free(s);
    return ok;
}

static int prompt_matches(const cpulm_vocab *v, const jval *prompt, const jval *ids, size_t n) {
    cpulm_token got[256];
    int k = tokenize(v, prompt->s, prompt->len, 1, 0, got, 256);
    int ok = k == (int)n;
    for (int j = 0; ok && j < k; j++)
        ok = got[j] == (cpulm_token)ids->items[j].num;
    if (!ok) fprintf(stderr, "  prompt mismatch: '%s'\n", prompt->s);
    return ok;
}

TEST(tok_stories260k) {
    cpulm_vocab *v = gguf_vocab(t, "models/stories260K.gguf");
    if (!v) {
        if (!t->n_fail) SKIP(t, "stories260K.gguf missing");
        return;
    }
    CHECK_EQ_INT(t, cpulm_vocab_n_tokens(v), 512);
    CHECK(t, cpulm_vocab_wants_bos(v)); /* key absent: SPM default */
    int pass = 0, total = 0;
    jval cases, greedy;
    if (jload("testdata/reference/llamacpp/cases.json", &cases)) {
        const jval *list = jget(&cases, "cases");
        for (size_t i = 0; list && i < list->n; i++) {
            const jval *c = &list->items[i], *prompt = jget(c, "prompt");
            if (strcmp(jget(c, "model")->s, "stories260K.gguf") || prompt->t != J_STR) continue;
            const jval *toks = jget(c, "tokens");
            size_t n_prompt = (size_t)jget(c, "n_prompt")->num;
            pass += prompt_matches(v, prompt, toks, n_prompt);
            pass += detok_matches(v, toks, n_prompt, 0, jget(c, "greedy_text"));
            total += 2;
        }
        jfree(&cases);
    }
    if (jload("testdata/reference/stories260K_greedy_reference.json", &greedy)) {
        const jval *list = jget(&greedy, "cases");
        for (size_t i = 0; list && i < list->n; i++) {
            const jval *c = &list->items[i], *pt = jget(c, "prompt_tokens");
            pass += prompt_matches(v, jget(c, "prompt"), pt, pt->n);
            pass += detok_matches(v, jget(c, "generated_tokens"), 0, 1, jget(c, "generated_text"));
            total += 2;
        }
        jfree(&greedy);
    }
    printf("  tok stories260K references    %d/%d\n", pass, total);
    CHECK_EQ_INT(t, pass, total);
    CHECK_EQ_INT(t, total, 12);
    cpulm_vocab_free(v);
}

/* ---- detokenizer ---- */

TEST(tok_detok_utf8_streaming) {
    cpulm_vocab *v = gguf_vocab(t, "testdata/tokenizer/ggml-vocab-llama-spm.gguf");
    if (!v) {
        if (!t->n_fail) SKIP(t, "ggml-vocab-llama-spm.gguf missing");
        return;
    }
    /* 🦙 is four byte-fallback tokens (from the llama2-tokenizer-js case). */
    const cpulm_token llama[4] = {243, 162, 169, 156};
    cpulm_detok d = {0};
    char out[64];
    cpulm_vocab_detok_reset(&d, 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(t, cpulm_vocab_detok_push(v, &d, llama[i], out, 64), 0);
    CHECK_EQ_INT(t, d.n_pending, 3);
    CHECK_EQ_INT(t, cpulm_vocab_detok_push(v, &d, llama[3], out, 64), 4);
    CHECK(t, !memcmp(out, "\xf0\x9f\xa6\x99", 4));
    /* A too-small buffer leaves the state untouched. */
    cpulm_token hello = cpulm_vocab_find(v, "\xe2\x96\x81Hello", 8);
    REQUIRE(t, hello >= 0);
    CHECK_EQ_INT(t, cpulm_vocab_detok_push(v, &d, hello, out, 3), CPULM_ERR_TOO_SMALL);
    CHECK_EQ_INT(t, cpulm_vocab_detok_push(v, &d, hello, out, 64), 6);
    CHECK(t, !memcmp(out, " Hello", 6)); /* not after BOS: the space stays */
    /* A broken sequence becomes U+FFFD, and the next byte is kept. */
    CHECK_EQ_INT(t, cpulm_vocab_detok_push(v, &d, llama[0], out, 64), 0);
    CHECK_EQ_INT(t, cpulm_vocab_detok_push(v, &d, hello, out, 64), 9);
    CHECK(t, !memcmp(out, "\xef\xbf\xbd Hello", 9));
    /* A held prefix at the end is flushed as U+FFFD. */
    CHECK_EQ_INT(t, cpulm_vocab_detok_push(v, &d, llama[0], out, 64), 0);
    CHECK_EQ_INT(t, cpulm_vocab_detok_push(v, &d, llama[1], out, 64), 0);
    CHECK_EQ_INT(t, cpulm_vocab_detok_flush(&d, out, 64), 3);
    CHECK(t, !memcmp(out, "\xef\xbf\xbd", 3));
    CHECK_EQ_INT(t, cpulm_vocab_detok_flush(&d, out, 64), 0);
    /* After BOS the dummy-prefix space goes; control tokens render only when asked. */
    CHECK_EQ_INT(t, cpulm_vocab_detok_push(v, &d, 1, out, 64), 0);
    CHECK_EQ_INT(t, cpulm_vocab_detok_push(v, &d, hello, out, 64), 5);
    CHECK(t, !memcmp(out, "Hello", 5));
    cpulm_vocab_detok_reset(&d, 1);
    CHECK_EQ_INT(t, cpulm_vocab_detok_push(v, &d, 1, out, 64), 3);
    CHECK(t, !memcmp(out, "<s>", 3));
    int32_t n = -1;
    CHECK_EQ_INT(t, cpulm_vocab_piece(v, 2, 0, out, 64, &n), CPULM_OK);
    CHECK_EQ_INT(t, n, 0);
    CHECK_EQ_INT(t, cpulm_vocab_piece(v, 2, 1, out, 64, &n), CPULM_OK);
    CHECK_EQ_INT(t, n, 4);
    CHECK_EQ_INT(t, cpulm_vocab_piece(v, 2, 1, out, 2, &n), CPULM_ERR_TOO_SMALL);
    CHECK_EQ_INT(t, cpulm_vocab_piece(v, 32000, 1, out, 64, &n), CPULM_ERR_INVALID_ARG);
    cpulm_vocab_free(v);
}

/* ---- speed: 100 KB must not take quadratic time. Natively it takes well under 0.1 s; the
 * bound is generous because sanitizer builds and a loaded CI machine are 10x slower, while a
 * quadratic merge would take minutes. (Speed itself is measured by benchmarks, not tests.) */

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void time_tokenize(test_ctx *t, const cpulm_vocab *v, const char *what, const char *s,
                          size_t n) {
    static cpulm_token ids[200000];
    double t0 = seconds();
    int k = tokenize(v, s, n, 1, 1, ids, 200000);
    double dt = seconds() - t0;
    printf("  tok speed %-28s %6zu bytes -> %6d tokens in %.3f s\n", what, n, k, dt);
    CHECK(t, k > 0);
    CHECK(t, dt < 10.0);
}

TEST(tok_speed_100kb) {
    const char *p = test_shared_path("testdata/text/tinystories_valid_head.txt");
    size_t n = 0;
    char *text = p ? test_read_file(p, &n) : NULL;
    if (!text) SKIP(t, "tinystories text missing");
    n = n < 100000 ? n : 100000;
    char *same = malloc(n);
    memset(same, 'a', n); /* one 100 KB word: merges must not be quadratic */
    cpulm_vocab *spm = gguf_vocab(t, "testdata/tokenizer/ggml-vocab-llama-spm.gguf");
    cpulm_vocab *ds = gguf_vocab(t, "testdata/tokenizer/ggml-vocab-deepseek-llm.gguf");
    cpulm_vocab *l3 = llama3_vocab();
    if (spm) time_tokenize(t, spm, "llama-spm text", text, n);
    if (spm) time_tokenize(t, spm, "llama-spm one word", same, n);
    if (ds) time_tokenize(t, ds, "deepseek-llm text", text, n);
    if (l3) time_tokenize(t, l3, "llama3 text", text, n);
    if (l3) time_tokenize(t, l3, "llama3 one word", same, n);
    memset(same, ' ', n);
    if (l3) time_tokenize(t, l3, "llama3 spaces", same, n);
    cpulm_vocab_free(spm);
    cpulm_vocab_free(ds);
    cpulm_vocab_free(l3);
    free(same);
    free(text);
}

/* ---- synthetic vocabularies (in-memory GGUF) ---- */

typedef struct synth {
    const char *model, *pre;
    int with_merges, space_prefix; /* space_prefix: -1 = key absent */
    int32_t n_scores;              /* scores array length; 0 = default (one per token) */
} synth;

/* A 267-token SPM-style vocab: <unk> <s> </s>, 256 byte tokens, then
 * 259 "▁" 260 "a" 261 "b" 262 "▁a" 263 "ab" 264 "▁ab" 265 "<tool>" (user) 266 "<ctl>". */
static cpulm_status synth_load(const synth *s, cpulm_vocab **v, cpulm_error *err) {
    static char bytes[256][8];
    const char *toks[267];
    float scores[267] = {0};
    int32_t types[267];
    toks[0] = "<unk>", toks[1] = "<s>", toks[2] = "</s>";
    types[0] = 2, types[1] = types[2] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        toks[3 + b] = bytes[b];
        types[3 + b] = 6;
    }
    const char *rest[] = {"\xe2\x96\x81",
                          "a",
                          "b",
                          "\xe2\x96\x81"
                          "a",
                          "ab",
                          "\xe2\x96\x81"
                          "ab",
                          "<tool>",
                          "<ctl>"};
    const float rest_scores[] = {-1.0f, -2.0f, -2.0f, -0.5f, -0.6f, -0.1f, 0.0f, 0.0f};
    for (int i = 0; i < 8; i++) {
        toks[259 + i] = rest[i];
        scores[259 + i] = rest_scores[i];
        types[259 + i] = i == 6 ? 4 : i == 7 ? 3 : 1;
    }
    const char *merges[] = {"a b"};
    cpulm_gguf_writer *w = cpulm_gguf_writer_new();
    cpulm_gguf_writer_set_str(w, "tokenizer.ggml.model", s->model);
    if (s->pre) cpulm_gguf_writer_set_str(w, "tokenizer.ggml.pre", s->pre);
    cpulm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 267);
    cpulm_gguf_writer_set_arr(w, "tokenizer.ggml.scores", CPULM_GGUF_F32, scores,
                              (uint64_t)(s->n_scores ? s->n_scores : 267));
    cpulm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CPULM_GGUF_I32, types, 267);
    if (s->with_merges) cpulm_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    if (s->space_prefix >= 0)
        cpulm_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", s->space_prefix != 0);
    uint8_t *buf = NULL;
    uint64_t size = 0;
    cpulm_gguf g;
    cpulm_status st = cpulm_gguf_writer_to_buf(w, &buf, &size);
    cpulm_gguf_writer_free(w);
    if (st == CPULM_OK && (st = cpulm_gguf_parse(&g, buf, size, err)) == CPULM_OK) {
        st = cpulm_vocab_load(v, &g, err);
        cpulm_gguf_release(&g);
    }
    free(buf);
    return st;
}

static int ids_are(const cpulm_vocab *v, const char *text, int add, int parse, int n,
                   const cpulm_token *want) {
    cpulm_token got[64];
    int k = tokenize(v, text, strlen(text), add, parse, got, 64);
    if (k == n && (n == 0 || !memcmp(got, want, (size_t)n * sizeof *got))) return 1;
    fprintf(stderr, "  '%s':\n", text);
    print_ids("want", want, n);
    print_ids("got ", got, k);
    return 0;
}

TEST(tok_synthetic_spm) {
    cpulm_vocab *v = NULL;
    cpulm_error err = {0};
    synth s = {"llama", NULL, 0, -1, 0};
    REQUIRE(t, synth_load(&s, &v, &err) == CPULM_OK);
    /* "▁a" (-0.5) merges before "ab" (-0.6), then "▁ab" (-0.1). */
    CHECK(t, ids_are(v, "ab", 0, 0, 1, (cpulm_token[]){264}));
    CHECK(t, ids_are(v, "ab", 1, 0, 2, (cpulm_token[]){1, 264}));
    CHECK(t, ids_are(v, "ba", 0, 0, 3, (cpulm_token[]){259, 261, 260}));
    /* é is not a token: byte fallback <0xC3><0xA9>. */
    CHECK(t, ids_are(v, "\xc3\xa9", 0, 0, 3, (cpulm_token[]){259, 3 + 0xC3, 3 + 0xA9}));
    /* User-defined tokens are always split out; a dummy prefix follows any token. */
    CHECK(t, ids_are(v, "a<tool>b", 0, 0, 4, (cpulm_token[]){262, 265, 259, 261}));
    /* Control tokens only with parse_special. */
    CHECK(t, ids_are(v, "a<ctl>", 0, 1, 2, (cpulm_token[]){262, 266}));
    CHECK(t, ids_are(v, "a<ctl>", 0, 0, 6,
                     (cpulm_token[]){262, 3 + '<', 3 + 'c', 3 + 't', 3 + 'l', 3 + '>'}));
    CHECK(t, ids_are(v, "", 1, 0, 1, (cpulm_token[]){1}));
    CHECK(t, ids_are(v, "", 0, 0, 0, NULL));
    cpulm_vocab_free(v);
    s.space_prefix = 0; /* tokenizer.ggml.add_space_prefix = false */
    REQUIRE(t, synth_load(&s, &v, &err) == CPULM_OK);
    CHECK(t, ids_are(v, "ab", 0, 0, 1, (cpulm_token[]){263}));
    cpulm_vocab_free(v);
}

/* tokenizer.ggml.model "gemma4" (and a "gpt2" vocab with the pre-tokenizer "gemma4"): the
 * file's pre-tokenizer key is not read, spaces become U+2581 and the characters merge by rank
 * (only "a b" here: "ab ab" -> ab ▁ ab), characters that are no token and newline runs that
 * are none (no "\n" token here) fall back to <0xXX> tokens, user-defined tokens are split
 * out without a dummy prefix, there is no BOS without an id, merges are required. */
TEST(tok_synthetic_gemma4) {
    cpulm_vocab *v = NULL;
    cpulm_error err = {0};
    const synth files[2] = {{"gemma4", "gpt-2", 1, -1, 0}, {"gpt2", "gemma4", 1, -1, 0}};
    for (int i = 0; i < 2; i++) {
        REQUIRE(t, synth_load(&files[i], &v, &err) == CPULM_OK);
        CHECK(t, !strcmp(cpulm_vocab_pre_name(v), "gemma4"));
        CHECK(t, cpulm_vocab_wants_bos(v) && cpulm_vocab_bos(v) < 0);
        CHECK(t, ids_are(v, "ab ab", 1, 0, 3, (cpulm_token[]){263, 259, 263}));
        CHECK(t, ids_are(v, "\xc3\xa9\n\n", 0, 0, 4,
                         (cpulm_token[]){3 + 0xC3, 3 + 0xA9, 3 + '\n', 3 + '\n'}));
        CHECK(t, ids_are(v, "a<tool>b", 0, 0, 3, (cpulm_token[]){260, 265, 261}));
        cpulm_vocab_free(v);
    }
    synth s = {"gemma4", NULL, 0, -1, 0};
    CHECK_EQ_INT(t, synth_load(&s, &v, &err), CPULM_ERR_FORMAT);
}

TEST(tok_load_errors) {
    cpulm_vocab *v = NULL;
    cpulm_error err = {0};
    synth s = {"gpt2", "gpt-2", 1, -1, 0};
    CHECK_EQ_INT(t, synth_load(&s, &v, &err), CPULM_ERR_UNSUPPORTED); /* no such pre here */
    CHECK(t, v == NULL && strstr(err.msg, "gpt-2"));
    s = (synth){"gpt2", "llama-bpe", 0, -1, 0};
    CHECK_EQ_INT(t, synth_load(&s, &v, &err), CPULM_ERR_FORMAT); /* BPE without merges */
    s = (synth){"t5", NULL, 0, -1, 0};                           /* Unigram: not yet */
    CHECK_EQ_INT(t, synth_load(&s, &v, &err), CPULM_ERR_UNSUPPORTED);
    s = (synth){"llama", NULL, 0, -1, 100};
    CHECK_EQ_INT(t, synth_load(&s, &v, &err), CPULM_ERR_FORMAT); /* 100 scores, 267 tokens */
    s = (synth){"gpt2", "llama-bpe", 1, -1, 0};
    CHECK_EQ_INT(t, synth_load(&s, &v, &err), CPULM_OK);
    cpulm_vocab_free(v);
    cpulm_vocab_bpe_files f = {
        "/nonexistent/vocab.json", "/nonexistent/merges.txt", "qwen2", NULL, 0, -1, -1, -1};
    CHECK_EQ_INT(t, cpulm_vocab_from_bpe_files(&v, &f, &err), CPULM_ERR_IO);
    const char *merges = test_shared_path("testdata/tokenizer/qwen2-bpe/merges.txt");
    if (merges) { /* a merges file is not a JSON map */
        char m[4096];
        snprintf(m, sizeof m, "%s", merges);
        f = (cpulm_vocab_bpe_files){m, m, "qwen2", NULL, 0, -1, -1, -1};
        CHECK_EQ_INT(t, cpulm_vocab_from_bpe_files(&v, &f, &err), CPULM_ERR_FORMAT);
    }
}

/* ---- round trips and hostile input on the real vocabularies ---- */

static int valid_utf8(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        int len = cpulm_utf8_strict_len(u[i]);
        if (!len || i + (size_t)len > n) return 0;
        for (int k = 1; k < len; k++)
            if (!cpulm_utf8_strict_next_ok(u + i, k, u[i + k])) return 0;
        i += (size_t)len;
    }
    return 1;
}

static void roundtrip(test_ctx *t, const cpulm_vocab *v, const char *name, const char *text,
                      size_t n) {
    static cpulm_token ids[100000];
    static unsigned char junk[4096];
    int k = tokenize(v, text, n, 1, 0, ids, 100000);
    REQUIRE(t, k > 0);
    size_t len;
    char *back = detok_all(v, ids, k, 0, &len); /* BOS renders as "" and drops the prefix */
    int ok = back && len == n && !memcmp(back, text, n);
    if (!ok) fprintf(stderr, "  %s: round trip differs\n", name);
    CHECK(t, ok);
    free(back);
    /* Random bytes (mostly invalid UTF-8): ids in range, detokenized text well-formed. */
    uint32_t r = 12345;
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (unsigned char)((r = r * 1103515245u + 12345u) >> 16);
    k = tokenize(v, (const char *)junk, sizeof junk, 0, 1, ids, 100000);
    REQUIRE(t, k > 0);
    for (int i = 0; i < k; i++)
        CHECK(t, ids[i] >= 0 && ids[i] < cpulm_vocab_n_tokens(v));
    back = detok_all(v, ids, k, 1, &len);
    CHECK(t, back && valid_utf8(back, len));
    free(back);
}

TEST(tok_roundtrip) {
    const char *p = test_shared_path("testdata/text/tinystories_valid_head.txt");
    size_t n = 0;
    char *text = p ? test_read_file(p, &n) : NULL;
    if (!text) SKIP(t, "tinystories text missing");
    n = n < 20000 ? n : 20000;
    const char *extra = " \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\xa6\x99 Caf\xc3\xa9\t\n\n  x";
    char *mixed = malloc(n + strlen(extra));
    memcpy(mixed, text, n);
    memcpy(mixed + n, extra, strlen(extra));
    n += strlen(extra);
    cpulm_vocab *v = gguf_vocab(t, "testdata/tokenizer/ggml-vocab-llama-spm.gguf");
    if (v) roundtrip(t, v, "llama-spm", mixed, n);
    cpulm_vocab_free(v);
    if ((v = gguf_vocab(t, "testdata/tokenizer/ggml-vocab-deepseek-coder.gguf")))
        roundtrip(t, v, "deepseek-coder", mixed, n);
    cpulm_vocab_free(v);
    if ((v = llama3_vocab())) roundtrip(t, v, "llama3", mixed, n);
    cpulm_vocab_free(v);
    free(mixed);
    free(text);
}

/* ---- stopping a long tokenization (cpulm_vocab_tokenize_stop) ---- */

typedef struct stop_count {
    int calls, stop_at; /* stop on call stop_at (0: never) */
} stop_count;

static int count_stop(void *user) {
    stop_count *c = user;
    return ++c->calls == c->stop_at;
}

/* A stop that never fires leaves the ids as they are; one that fires ends the call with
 * CPULM_ERR_CANCELLED at once; and it is asked often (every 1024 steps) on a long text. */
static void check_stop(test_ctx *t, const cpulm_vocab *v, const char *text, size_t n) {
    int32_t cap = (int32_t)n + 16, n_plain = 0, n_stop = 0;
    cpulm_token *a = malloc(sizeof(cpulm_token) * (size_t)cap);
    cpulm_token *b = malloc(sizeof(cpulm_token) * (size_t)cap);
    CHECK_EQ_INT(t, cpulm_vocab_tokenize(v, text, n, 1, 0, a, cap, &n_plain), CPULM_OK);
    stop_count never = {0, 0};
    cpulm_vocab_stop s1 = {count_stop, &never, 0};
    CHECK_EQ_INT(t, cpulm_vocab_tokenize_stop(v, text, n, 1, 0, b, cap, &n_stop, &s1), CPULM_OK);
    CHECK_EQ_INT(t, n_stop, n_plain);
    CHECK(t, n_plain > 0 && memcmp(a, b, sizeof(cpulm_token) * (size_t)n_plain) == 0);
    CHECK(t, never.calls >= 10); /* asked all along, not only at the end */
    stop_count third = {0, 3};
    cpulm_vocab_stop s2 = {count_stop, &third, 0};
    CHECK_EQ_INT(t, cpulm_vocab_tokenize_stop(v, text, n, 1, 0, b, cap, &n_stop, &s2),
                 CPULM_ERR_CANCELLED);
    CHECK_EQ_INT(t, third.calls, 3);
    free(a);
    free(b);
}

TEST(tok_stop_long_text) {
    const char *p = test_shared_path("testdata/text/tinystories_valid_head.txt");
    size_t n = 0;
    char *text = p ? test_read_file(p, &n) : NULL;
    if (!text) SKIP(t, "tinystories text missing");
    n = n < 200000 ? n : 200000;
    cpulm_vocab *spm = gguf_vocab(t, "models/stories260K.gguf");
    cpulm_vocab *l3 = llama3_vocab();
    if (spm) check_stop(t, spm, text, n);
    if (l3) check_stop(t, l3, text, n);
    CHECK(t, spm || l3);
    cpulm_vocab_free(spm);
    cpulm_vocab_free(l3);
    free(text);
}
