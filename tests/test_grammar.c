/* test_grammar.c: the GBNF parser (syntax, errors), the matcher (acceptance, UTF-8 split
 * across feeds, completion), token masks (every mask bit equals "accepting this token
 * succeeds", EOS only at a complete grammar), on small and byte-level vocabularies, and
 * budget-aware closing (distances to acceptance; a never-stopping sampler still ends
 * complete within its token budget). Also: compilation in linear time with every size and
 * complexity limit refused up front (CPULM_ERR_LIMIT, naming the limit), bounded matcher
 * work, and the compiled-grammar cache. */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"

#include "grammar/grammar.h"
#include "test.h"

static cpulm_grammar *compile(test_ctx *t, const char *src) {
    cpulm_grammar *g = NULL;
    cpulm_error e = {0};
    if (cpulm_grammar_parse(src, strlen(src), NULL, &g, &e) != CPULM_OK) {
        fprintf(stderr, "  grammar failed: %s\n  in: %s\n", e.msg, src);
        t->n_fail++;
    }
    return g;
}

/* 1: s is a complete sentence; 0: a valid prefix only; -1: rejected. */
static int match(const cpulm_grammar *g, const char *s) {
    cpulm_grammar_matcher *m = cpulm_grammar_matcher_new(g, NULL);
    if (!m) return -2;
    int r =
        cpulm_grammar_accept_bytes(m, s, strlen(s)) != CPULM_OK ? -1 : cpulm_grammar_complete(m);
    cpulm_grammar_matcher_free(m);
    return r;
}

#define MATCH(g, s, want)                                                                    \
    do {                                                                                     \
        int got_ = match(g, s);                                                              \
        if (got_ != (want)) {                                                                \
            fprintf(stderr, "  %s:%d: '%s': got %d, want %d\n", __FILE__, __LINE__, s, got_, \
                    want);                                                                   \
            t->n_fail++;                                                                     \
        }                                                                                    \
    } while (0)

TEST(grammar_literals_classes_repeats) {
    cpulm_grammar *g = compile(t, "root ::= \"a\" [b-d]+ \"e\"?");
    REQUIRE(t, g);
    MATCH(g, "abce", 1);
    MATCH(g, "ab", 1);
    MATCH(g, "a", 0);
    MATCH(g, "ax", -1);
    MATCH(g, "abee", -1);
    cpulm_grammar_free(g);

    g = compile(t, "root ::= x{2,3} y{,2} z{2,}\nx ::= \"x\"\ny ::= \"y\"\nz ::= \"z\"");
    REQUIRE(t, g);
    MATCH(g, "xxzz", 1);
    MATCH(g, "xxxyyzzzzz", 1);
    MATCH(g, "xxxx", -1);
    MATCH(g, "xxyyy", -1);
    MATCH(g, "xxz", 0);
    cpulm_grammar_free(g);

    g = compile(t, "root ::= (\"ab\" | \"c\")* \"!\"  # comment\n");
    REQUIRE(t, g);
    MATCH(g, "!", 1);
    MATCH(g, "abcab!", 1);
    MATCH(g, "abb", -1);
    cpulm_grammar_free(g);

    g = compile(t, "root ::= [^\"\\\\]* \".\" . \"\\x41\\u00e9\\n\"");
    REQUIRE(t, g);
    MATCH(g, "hi.zA\xc3\xa9\n", 1);
    MATCH(g, "h\"", -1);
    cpulm_grammar_free(g);
}

TEST(grammar_multiline_rules_and_nesting) {
    const char *src = "# a tiny arithmetic grammar\n"
                      "root ::= expr\n"
                      "expr ::= term (\n"
                      "    [+-] term\n"
                      "  )*\n"
                      "term ::= num\n"
                      "  | \"(\" expr \")\"\n"
                      "num ::= [0-9]+\n";
    cpulm_grammar *g = compile(t, src);
    REQUIRE(t, g);
    MATCH(g, "1+(2-33)+4", 1);
    MATCH(g, "((1))", 1);
    MATCH(g, "(1", 0);
    MATCH(g, "1+", 0);
    MATCH(g, "1)", -1);
    cpulm_grammar_free(g);
}

TEST(grammar_utf8_split_across_feeds) {
    cpulm_grammar *g = compile(t, "root ::= [α-ω]+ \"€\"");
    REQUIRE(t, g);
    cpulm_grammar_matcher *m = cpulm_grammar_matcher_new(g, NULL);
    REQUIRE(t, m);
    const char *s = "\xce\xb1\xce\xb2\xe2\x82\xac"; /* αβ€ */
    for (size_t i = 0; i < strlen(s); i++) {
        CHECK(t, cpulm_grammar_accept_bytes(m, s + i, 1) == CPULM_OK);
        CHECK_EQ_INT(t, cpulm_grammar_complete(m), i == strlen(s) - 1);
    }
    cpulm_grammar_matcher_reset(m);
    CHECK(t, cpulm_grammar_accept_bytes(m, "\xce", 1) == CPULM_OK);
    CHECK(t,
          cpulm_grammar_accept_bytes(m, "a", 1) == CPULM_ERR_INVALID_ARG); /* not a continuation */
    CHECK(t, cpulm_grammar_accept_bytes(m, "\xd0", 1) ==
                 CPULM_ERR_INVALID_ARG); /* Cyrillic: outside */
    cpulm_grammar_matcher_free(m);
    cpulm_grammar_free(g);
}

static void parse_bad(test_ctx *t, const char *src, const char *what) {
    cpulm_grammar *g = NULL;
    cpulm_error e = {0};
    cpulm_status st = cpulm_grammar_parse(src, strlen(src), NULL, &g, &e);
    if (st != CPULM_ERR_FORMAT || g || !strstr(e.msg, what)) {
        fprintf(stderr, "  '%s': status %d, msg '%s' (want '%s')\n", src, st, e.msg, what);
        t->n_fail++;
    }
    cpulm_grammar_free(g);
}

TEST(grammar_parse_errors) {
    parse_bad(t, "root ::= foo", "'foo' is used but not defined");
    parse_bad(t, "root ::= root \"a\" | \"b\"", "left-recursive");
    parse_bad(t, "root ::= a\na ::= b? root\nb ::= \"x\"", "left-recursive");
    parse_bad(t, "root ::= \"abc", "unterminated string");
    parse_bad(t, "root ::= [abc", "unterminated character class");
    parse_bad(t, "root = \"a\"", "expected '::='");
    parse_bad(t, "root ::= \"a\"{3,2}", "n < m");
    parse_bad(t, "root ::= \"a\"\nroot ::= \"b\"", "defined twice");
    parse_bad(t, "other ::= \"a\"", "no rule named 'root'");
    parse_bad(t, "root ::= [z-a]", "reversed");
    parse_bad(t, "root ::= (\"a\"", "expected ')'");
    parse_bad(t, "root ::= \"\\q\"", "unknown escape");
    parse_bad(t, "root ::= [^\\x00-\\U0010FFFF]", "matches no character");
    parse_bad(t, "root ::= []", "matches no character");
    parse_bad(t, "root ::= [^\\x00-\\uD7FF\\uE000-\\U0010FFFF]", "matches no character");
    parse_bad(t, "root ::= \"\\uD800\"", "surrogate");
    parse_bad(t, "root ::= \"a\" line 2:\n  ::=", "line 1");
}

/* ---- masks ---- */

/* A byte-level vocabulary: the 256 single bytes, some multi-byte pieces, an EOS (id n-1). */
static cpulm_grammar_vocab *test_vocab(int32_t *n_out) {
    static const char *words[] = {"{\"",      "\":",   "\", \"",   "true", "null", "12",
                                  "3.5",      " {",    "\"}",      "}",    "ab",   "abc",
                                  "\xce\xb1", "\xce",  "\xb1\xce", "-",    "e+",   "\n",
                                  "  ",       "\"a\"", "[",        "]",    "],",   "name"};
    int32_t nw = (int32_t)(sizeof words / sizeof *words), n = 256 + nw + 1;
    static char bytes1[256];
    const char *b[512];
    int32_t len[512];
    uint8_t eog[512] = {0};
    for (int i = 0; i < 256; i++) {
        bytes1[i] = (char)i;
        b[i] = &bytes1[i];
        len[i] = 1;
    }
    for (int i = 0; i < nw; i++) {
        b[256 + i] = words[i];
        len[256 + i] = (int32_t)strlen(words[i]);
    }
    b[n - 1] = "";
    len[n - 1] = 0;
    eog[n - 1] = 1;
    *n_out = n;
    return cpulm_grammar_vocab_from_pieces(n, b, len, eog);
}

static int bit(const uint32_t *m, int32_t t) {
    return (m[t >> 5] >> (t & 31)) & 1;
}

/* From m's state: every token's mask bit equals whether a copy of the state accepts it. */
static int check_mask_consistent(test_ctx *t, const cpulm_grammar *g, const cpulm_grammar_vocab *v,
                                 const char *prefix) {
    cpulm_grammar_matcher *m = cpulm_grammar_matcher_new(g, v);
    if (!m || cpulm_grammar_accept_bytes(m, prefix, strlen(prefix)) != CPULM_OK) {
        cpulm_grammar_matcher_free(m);
        return -1;
    }
    const uint32_t *mask = cpulm_grammar_mask(m);
    if (!mask) return -1;
    int32_t n = cpulm_grammar_vocab_n(v), bad = 0, allowed = 0;
    uint32_t *copy = malloc(sizeof(uint32_t) * (size_t)((n + 31) / 32));
    memcpy(copy, mask, sizeof(uint32_t) * (size_t)((n + 31) / 32));
    for (int32_t k = 0; k < n; k++) {
        cpulm_grammar_matcher *c = cpulm_grammar_matcher_new(g, v);
        cpulm_grammar_accept_bytes(c, prefix, strlen(prefix));
        int ok = cpulm_grammar_accept_token(c, k) == CPULM_OK;
        allowed += ok;
        if (ok != bit(copy, k)) {
            if (bad++ < 3)
                fprintf(stderr, "  prefix '%s' token %d: mask %d, accept %d\n", prefix, k,
                        bit(copy, k), ok);
        }
        cpulm_grammar_matcher_free(c);
    }
    free(copy);
    cpulm_grammar_matcher_free(m);
    if (bad) t->n_fail++;
    return allowed;
}

TEST(grammar_mask_equals_acceptance) {
    int32_t n;
    cpulm_grammar_vocab *v = test_vocab(&n);
    REQUIRE(t, v);
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_grammar_json_any(&b, 0);
    cpulm_grammar *g = compile(t, b.data);
    cpulm_buf_release(&b);
    REQUIRE(t, g);
    const char *prefixes[] = {"",
                              "{",
                              "{\"na",
                              "{\"a\":",
                              "{\"a\": [1, 2",
                              "[\"\xce",
                              "[\"\xce\xb1",
                              "{\"a\": 3.",
                              "[tr",
                              "[1e",
                              "{\"a\": null}",
                              "[]"};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        int allowed = check_mask_consistent(t, g, v, prefixes[i]);
        CHECK(t, allowed > 0);
    }
    /* EOS (the last id) only at a complete value */
    cpulm_grammar_matcher *m = cpulm_grammar_matcher_new(g, v);
    CHECK(t, !bit(cpulm_grammar_mask(m), n - 1));
    CHECK(t, cpulm_grammar_accept_bytes(m, "{\"a\": [true]}", 13) == CPULM_OK);
    CHECK(t, bit(cpulm_grammar_mask(m), n - 1));
    CHECK(t, cpulm_grammar_accept_token(m, n - 1) == CPULM_OK);
    cpulm_grammar_matcher_free(m);
    cpulm_grammar_free(g);
    cpulm_grammar_vocab_free(v);
}

TEST(grammar_mask_cache_hits) {
    int32_t n;
    cpulm_grammar_vocab *v = test_vocab(&n);
    cpulm_grammar *g = compile(t, "root ::= \"\\\"\" [a-z]* \"\\\"\"");
    REQUIRE(t, v && g);
    cpulm_grammar_matcher *m = cpulm_grammar_matcher_new(g, v);
    REQUIRE(t, m);
    CHECK(t, cpulm_grammar_accept_bytes(m, "\"", 1) == CPULM_OK);
    const uint32_t *m1 = cpulm_grammar_mask(m);
    CHECK(t, m1 && bit(m1, 'a') && bit(m1, 256 + 10) && !bit(m1, 'A') && bit(m1, '"'));
    for (int i = 0; i < 5; i++)
        CHECK(t, cpulm_grammar_accept_bytes(m, "x", 1) == CPULM_OK && cpulm_grammar_mask(m) == m1);
    cpulm_grammar_stats st;
    cpulm_grammar_matcher_stats(m, &st);
    CHECK_EQ_INT(t, st.masks, 6);
    CHECK_EQ_INT(t, st.mask_cache_hits, 5); /* inside the string the state repeats */
    CHECK(t, cpulm_grammar_accept_bytes(m, "\"", 1) == CPULM_OK && cpulm_grammar_must_end(m));
    cpulm_grammar_matcher_free(m);
    cpulm_grammar_free(g);
    cpulm_grammar_vocab_free(v);
}

/* ---- budget-aware closing ---- */

TEST(grammar_distance_to_accept) {
    static const struct {
        const char *src, *prefix;
        int32_t want;
    } cases[] = {
        {"root ::= \"ab\" [c-d]+ ( \"xyz\" | \"q\" )", "", 4},
        {"root ::= \"ab\" [c-d]+ ( \"xyz\" | \"q\" )", "abcc", 1},
        {"root ::= \"ab\" [c-d]+ ( \"xyz\" | \"q\" )", "abcx", 2},
        {"root ::= \"ab\" [c-d]+ ( \"xyz\" | \"q\" )", "abcq", 0},
        {"root ::= [α-ω] \"x\"", "", 3},     /* a 2-byte character, then x */
        {"root ::= [α-ω] \"x\"", "\xce", 2}, /* its second byte, then x */
        {"root ::= \"(\" r \")\"\nr ::= \"(\" r \")\" | \"\"", "(((", 3},
        {"root ::= \"a\" r\nr ::= \"b\" r", "a", 1 << 29}, /* no finite sentence */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cpulm_grammar *g = compile(t, cases[i].src);
        REQUIRE(t, g);
        cpulm_grammar_matcher *m = cpulm_grammar_matcher_new(g, NULL);
        REQUIRE(t, m);
        CHECK(t,
              cpulm_grammar_accept_bytes(m, cases[i].prefix, strlen(cases[i].prefix)) == CPULM_OK);
        int32_t d = cpulm_grammar_distance(m);
        if (cases[i].want >= 1 << 29 ? d < 1 << 29 : d != cases[i].want) {
            fprintf(stderr, "  case %zu ('%s'): distance %d, want %d\n", i, cases[i].prefix, d,
                    cases[i].want);
            t->n_fail++;
        }
        cpulm_grammar_matcher_free(m);
        cpulm_grammar_free(g);
    }
    /* nested JSON: closing `]}]}` is the shortest way out (whitespace is optional) */
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_grammar_json_any(&b, 0);
    cpulm_grammar *g = compile(t, b.data);
    cpulm_buf_release(&b);
    REQUIRE(t, g);
    cpulm_grammar_matcher *m = cpulm_grammar_matcher_new(g, NULL);
    const char *p = "{\"a\": [1, {\"b\": [";
    CHECK(t, cpulm_grammar_accept_bytes(m, p, strlen(p)) == CPULM_OK);
    CHECK_EQ_INT(t, cpulm_grammar_distance(m), 4);
    CHECK(t, cpulm_grammar_accept_bytes(m, "\"x", 2) == CPULM_OK);
    CHECK_EQ_INT(t, cpulm_grammar_distance(m), 5);
    cpulm_grammar_matcher_free(m);
    cpulm_grammar_free(g);
}

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Samples up to max tokens uniformly among the allowed ones, the end token only when it is
 * the only choice (a model that never wants to stop). Returns 1 if the output ended
 * complete (by the end token or a grammar that cannot go on) within max samples. */
static int random_walk(test_ctx *t, const cpulm_grammar *g, const cpulm_grammar_vocab *v,
                       uint64_t seed, int32_t max, int32_t budget) {
    cpulm_grammar_matcher *m = cpulm_grammar_matcher_new(g, v);
    if (!m) return t->n_fail++, 0;
    cpulm_grammar_matcher_set_budget(m, budget);
    int32_t n = cpulm_grammar_vocab_n(v), eos = n - 1, ok = 0, cand[1024];
    for (int32_t i = 0; i < max && !ok; i++) {
        const uint32_t *mask = cpulm_grammar_mask(m);
        if (!mask) break;
        int32_t nc = 0;
        for (int32_t k = 0; k < n; k++)
            if (k != eos && bit(mask, k)) cand[nc++] = k;
        if (nc == 0) {
            ok = bit(mask, eos) && cpulm_grammar_accept_token(m, eos) == CPULM_OK;
            break;
        }
        if (cpulm_grammar_accept_token(m, cand[xorshift(&seed) % (uint64_t)nc]) != CPULM_OK) {
            t->n_fail++;
            break;
        }
        ok = cpulm_grammar_must_end(m);
    }
    cpulm_grammar_matcher_free(m);
    return ok;
}

TEST(grammar_budget_closes_in_time) {
    int32_t n;
    cpulm_grammar_vocab *v = test_vocab(&n);
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_grammar_json_any(&b, 1);
    cpulm_grammar *g = compile(t, b.data);
    cpulm_buf_release(&b);
    REQUIRE(t, v && g);
    int unbudgeted_done = 0, runs = 0;
    for (int32_t max = 3; max <= 67; max += 16) {
        for (uint64_t seed = 1; seed <= 8; seed++) {
            int ok = random_walk(t, g, v, seed * 0x9E3779B97F4A7C15ull, max, max);
            if (!ok)
                fprintf(stderr, "  budget %d seed %llu: not closed\n", max,
                        (unsigned long long)seed);
            CHECK(t, ok);
            unbudgeted_done += random_walk(t, g, v, seed * 0x9E3779B97F4A7C15ull, max, 0);
            runs++;
        }
    }
    /* the same walks without a budget mostly run out (12 of 40 end in time): the budget is
     * what closes them */
    CHECK(t, unbudgeted_done < runs / 2);
    /* a budget below the shortest sentence ("{}": 2 bytes, then the end): closest tokens */
    cpulm_grammar_matcher *m = cpulm_grammar_matcher_new(g, v);
    cpulm_grammar_matcher_set_budget(m, 1);
    const uint32_t *mask = cpulm_grammar_mask(m);
    CHECK(t, mask && bit(mask, '{') && !bit(mask, 256) /* {" needs 4 more */ && !bit(mask, n - 1));
    cpulm_grammar_stats st;
    cpulm_grammar_matcher_stats(m, &st);
    CHECK_EQ_INT(t, st.budget_masks, 1);
    cpulm_grammar_matcher_free(m);
    cpulm_grammar_free(g);
    cpulm_grammar_vocab_free(v);
}

/* ---- compile time and limits ---- */

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Compiles src; checks the status, that the message holds want (if given) and that it took
 * less than 1 s (these took 14-90 s when rule lookup scanned every rule). */
static cpulm_grammar *compile_timed(test_ctx *t, const char *src, size_t n, cpulm_status want_st,
                                    const char *want) {
    cpulm_grammar *g = NULL;
    cpulm_error e = {0};
    double t0 = seconds();
    cpulm_status st = cpulm_grammar_parse(src, n, NULL, &g, &e);
    double dt = seconds() - t0;
    if (st != want_st || (want && !strstr(e.msg, want)) || dt > 1.0) {
        fprintf(stderr, "  %zu-byte grammar '%.40s...': status %d (want %d), %.3f s, '%s'\n", n,
                src, st, want_st, dt, e.msg);
        t->n_fail++;
    }
    return g;
}

static void repeat_grammar(cpulm_buf *b, int n) {
    cpulm_buf_reset(b);
    cpulm_buf_puts(b, "root ::=");
    for (int i = 0; i < n; i++)
        cpulm_buf_puts(b, " \"a\"{0,4096}");
    cpulm_buf_puts(b, "\n");
}

TEST(grammar_compiles_in_linear_time) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    repeat_grammar(&b, 15); /* 61,440 generated rules */
    cpulm_grammar *g = compile_timed(t, b.data, b.len, CPULM_OK, NULL);
    REQUIRE(t, g);
    MATCH(g, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 1);
    MATCH(g, "ab", -1);
    cpulm_grammar_free(g);
    /* ~1 MB right-chained: r_i ::= "a" r_{i-1}, 60k user rules looked up by name */
    cpulm_buf_reset(&b);
    cpulm_buf_puts(&b, "r0 ::= \"a\"\n");
    int i = 1;
    for (; b.len < 1000000; i++)
        cpulm_buf_printf(&b, "r%d ::= \"a\" r%d\n", i, i - 1);
    cpulm_buf_printf(&b, "root ::= r%d\n", i - 1);
    g = compile_timed(t, b.data, b.len, CPULM_OK, NULL);
    REQUIRE(t, g);
    MATCH(g, "aaaa", 0);
    cpulm_grammar_free(g);
    /* nullable chain listed so that each fixpoint pass would settle one link */
    cpulm_buf_reset(&b);
    cpulm_buf_puts(&b, "root ::= n0 \"a\"\n");
    for (int k = 0; k < 4000; k++)
        cpulm_buf_printf(&b, "n%d ::= n%d\n", k, k + 1);
    cpulm_buf_puts(&b, "n4000 ::= \"\" | \"b\"\n");
    g = compile_timed(t, b.data, b.len, CPULM_OK, NULL);
    REQUIRE(t, g);
    MATCH(g, "a", 1);
    MATCH(g, "ba", 1);
    cpulm_grammar_free(g);
    cpulm_buf_release(&b);
}

TEST(grammar_limits_refused_up_front) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_buf_puts(&b, "root ::= \"x0\"");
    for (int i = 1; i < 3000; i++)
        cpulm_buf_printf(&b, " | \"x%d\"", i);
    compile_timed(t, b.data, b.len, CPULM_ERR_LIMIT,
                  "more than 2048 alternatives in rule 'root' (limit 2048)");
    /* 1 MB left-chained: r_i ::= r_{i-1} "a" */
    cpulm_buf_reset(&b);
    cpulm_buf_puts(&b, "r0 ::= \"a\"\n");
    int i = 1;
    for (; b.len < 1000000; i++)
        cpulm_buf_printf(&b, "r%d ::= r%d \"a\"\n", i, i - 1);
    cpulm_buf_printf(&b, "root ::= r%d\n", i - 1);
    compile_timed(t, b.data, b.len, CPULM_ERR_LIMIT, "rule chain deeper than 4096 rules");
    const char *nest = "root ::= (\"a\"{0,1000}){0,1000}";
    compile_timed(t, nest, strlen(nest), CPULM_ERR_LIMIT,
                  "nested repetitions multiply to more than 65536 copies (limit 65536)");
    const char *cnt = "root ::= \"a\"{99999}";
    compile_timed(t, cnt, strlen(cnt), CPULM_ERR_LIMIT, "repetition count too large (limit 4096)");
    repeat_grammar(&b, 20); /* 81,920 rules */
    compile_timed(t, b.data, b.len, CPULM_ERR_LIMIT, "rules after expanding repetitions");
    /* two rules of 1,500 alternatives each both start the output: 3,000 parse stacks */
    cpulm_buf_reset(&b);
    cpulm_buf_puts(&b, "root ::= a | b\na ::= \"a0\"");
    for (i = 1; i < 1500; i++)
        cpulm_buf_printf(&b, " | \"a%d\"", i);
    cpulm_buf_puts(&b, "\nb ::= \"b0\"");
    for (i = 1; i < 1500; i++)
        cpulm_buf_printf(&b, " | \"b%d\"", i);
    compile_timed(t, b.data, b.len, CPULM_ERR_LIMIT, "parse stacks at its start (limit 2048");
    const char *deep = "root ::= ((((((((((\"a\"))))))))))";
    cpulm_grammar_limits lim = cpulm_grammar_default_limits();
    lim.max_nesting = 5;
    cpulm_grammar *g = NULL;
    cpulm_error e = {0};
    CHECK_EQ_INT(t, cpulm_grammar_parse_ex(deep, strlen(deep), NULL, &lim, &g, NULL, &e),
                 CPULM_ERR_LIMIT);
    CHECK(t, strstr(e.msg, "groups nested too deeply (limit 5)"));
    lim = cpulm_grammar_default_limits();
    lim.max_bytes = 10;
    CHECK_EQ_INT(t, cpulm_grammar_parse_ex(deep, strlen(deep), NULL, &lim, &g, NULL, &e),
                 CPULM_ERR_LIMIT);
    CHECK(t, strstr(e.msg, "more than the limit of 10"));
    lim = cpulm_grammar_default_limits();
    lim.max_elems = 100;
    const char *rep = "root ::= \"a\"{999}";
    CHECK_EQ_INT(t, cpulm_grammar_parse_ex(rep, strlen(rep), NULL, &lim, &g, NULL, &e),
                 CPULM_ERR_LIMIT);
    CHECK(t, strstr(e.msg, "more than 100 elements after expanding repetitions (limit 100)"));
    CHECK(t, g == NULL);
    cpulm_buf_release(&b);
}

/* `x ::= "" | ""` used 40 times: 2^40 expansion paths unless each stack node is expanded
 * once per state. */
TEST(grammar_matcher_work_is_bounded) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_buf_puts(&b, "x ::= \"\" | \"\"\nroot ::=");
    for (int i = 0; i < 40; i++)
        cpulm_buf_puts(&b, " x");
    cpulm_buf_puts(&b, " \"a\"\n");
    double t0 = seconds();
    cpulm_grammar *g = compile_timed(t, b.data, b.len, CPULM_OK, NULL);
    REQUIRE(t, g);
    MATCH(g, "a", 1);
    cpulm_grammar_free(g);
    CHECK(t, seconds() - t0 < 1.0);
    /* ambiguous through a rule reference (no nesting the parser can see): the matcher's
     * stacks grow with the text; it must fail cleanly or go on, each byte fast */
    const char *amb = "x ::= \"a\"{0,200}\nroot ::= x{0,200}";
    g = compile_timed(t, amb, strlen(amb), CPULM_OK, NULL);
    REQUIRE(t, g);
    cpulm_grammar_matcher *m = cpulm_grammar_matcher_new(g, NULL);
    REQUIRE(t, m);
    cpulm_status st = CPULM_OK;
    double worst = 0;
    for (int i = 0; i < 400 && st == CPULM_OK; i++) {
        double t1 = seconds();
        st = cpulm_grammar_accept_bytes(m, "a", 1);
        if (seconds() - t1 > worst) worst = seconds() - t1;
    }
    CHECK(t, st == CPULM_OK || st == CPULM_ERR_TOO_SMALL);
    CHECK(t, worst < 1.0);
    int client = 0;
    const char *why = cpulm_grammar_matcher_failure(m, &client);
    CHECK(t, st == CPULM_OK ? why == NULL : why && client && strstr(why, "(limit"));
    cpulm_grammar_matcher_free(m);
    cpulm_grammar_free(g);
    cpulm_buf_release(&b);
}

TEST(grammar_cache_hits_and_evicts) {
    cpulm_grammar_cache *c = cpulm_grammar_cache_new(2, 1u << 20);
    REQUIRE(t, c);
    const char *src[3] = {"root ::= \"a\"+", "root ::= \"b\"+", "root ::= \"c\"+"};
    cpulm_grammar *g1 = NULL, *g2 = NULL, *g3 = NULL;
    cpulm_error e = {0};
    CHECK(t, cpulm_grammar_cache_get(c, src[0], strlen(src[0]), NULL, &g1, &e) == CPULM_OK);
    CHECK(t, cpulm_grammar_cache_get(c, src[0], strlen(src[0]), NULL, &g2, &e) == CPULM_OK);
    cpulm_grammar_cache_stats st;
    cpulm_grammar_cache_stats_get(c, &st);
    CHECK_EQ_INT(t, st.hits, 1);
    CHECK_EQ_INT(t, st.misses, 1);
    CHECK(t, g1 && g1 == g2); /* the same immutable grammar, one more reference */
    cpulm_grammar_free(g2);
    /* another root is another grammar */
    CHECK(t,
          cpulm_grammar_cache_get(c, src[0], strlen(src[0]), "other", &g3, &e) == CPULM_ERR_FORMAT);
    CHECK(t, g3 == NULL);
    /* errors are not cached */
    CHECK(t, cpulm_grammar_cache_get(c, "root ::= (", 10, NULL, &g3, &e) == CPULM_ERR_FORMAT);
    CHECK(t, cpulm_grammar_cache_get(c, src[1], strlen(src[1]), NULL, &g2, &e) == CPULM_OK);
    cpulm_grammar_free(g2);
    CHECK(t, cpulm_grammar_cache_get(c, src[0], strlen(src[0]), NULL, &g2, &e) == CPULM_OK);
    cpulm_grammar_free(g2); /* src[0] is now the most recently used: src[1] goes next */
    CHECK(t, cpulm_grammar_cache_get(c, src[2], strlen(src[2]), NULL, &g3, &e) == CPULM_OK);
    cpulm_grammar_cache_stats_get(c, &st);
    CHECK_EQ_INT(t, st.entries, 2);
    CHECK_EQ_INT(t, st.evictions, 1);
    CHECK(t, cpulm_grammar_cache_get(c, src[0], strlen(src[0]), NULL, &g2, &e) == CPULM_OK);
    CHECK(t, g2 == g1);
    cpulm_grammar_free(g2);
    cpulm_grammar_cache_stats_get(c, &st);
    CHECK_EQ_INT(t, st.hits, 3);
    cpulm_grammar_cache_free(c);
    MATCH(g1, "aaa", 1); /* what a caller holds outlives the cache */
    MATCH(g3, "ccc", 1);
    cpulm_grammar_free(g1);
    cpulm_grammar_free(g3);
    /* a byte budget smaller than one grammar keeps nothing, and still compiles */
    c = cpulm_grammar_cache_new(8, 16);
    REQUIRE(t, c);
    CHECK(t, cpulm_grammar_cache_get(c, src[0], strlen(src[0]), NULL, &g1, &e) == CPULM_OK);
    cpulm_grammar_cache_stats_get(c, &st);
    CHECK_EQ_INT(t, st.entries, 0);
    cpulm_grammar_free(g1);
    cpulm_grammar_cache_free(c);
}

/* Threads share a 2-entry cache over 3 texts: entries are evicted while other threads still
 * use them (refcounts), and every grammar a thread gets matches its own text. */
typedef struct cache_job {
    cpulm_grammar_cache *c;
    int seed, bad;
} cache_job;

static void *cache_worker(void *arg) {
    cache_job *j = arg;
    static const char *src[3] = {"root ::= \"a\"+", "root ::= \"b\"+", "root ::= \"c\"+"};
    static const char *ok[3] = {"aa", "bb", "cc"};
    for (int i = 0; i < 300; i++) {
        int k = (i * 7 + j->seed) % 3;
        cpulm_grammar *g = NULL;
        if (cpulm_grammar_cache_get(j->c, src[k], strlen(src[k]), NULL, &g, NULL) != CPULM_OK) {
            j->bad++;
            continue;
        }
        j->bad += match(g, ok[k]) != 1 || match(g, ok[(k + 1) % 3]) != -1;
        cpulm_grammar_free(g);
    }
    return NULL;
}

TEST(grammar_cache_shared_by_threads) {
    cpulm_grammar_cache *c = cpulm_grammar_cache_new(2, 1u << 20);
    REQUIRE(t, c);
    pthread_t th[4];
    cache_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (cache_job){c, i, 0};
        REQUIRE(t, pthread_create(&th[i], NULL, cache_worker, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(t, jobs[i].bad, 0);
    }
    cpulm_grammar_cache_stats st;
    cpulm_grammar_cache_stats_get(c, &st);
    CHECK_EQ_INT(t, st.hits + st.misses, 1200);
    CHECK(t, st.evictions > 0 && st.entries <= 2);
    cpulm_grammar_cache_free(c);
}
