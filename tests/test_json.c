/* test_json.c: the JSON reader (grammar, escapes, limits, error offsets, truncation against
 * a guard page), the writer (separators, indentation, escaping, numbers) and cpulm_buf. */
#define _GNU_SOURCE
#include <locale.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/json.h"
#include "test.h"

static cpulm_json_doc *parse_ok(test_ctx *t, const char *s) {
    cpulm_json_doc *d = NULL;
    cpulm_error e = {0};
    cpulm_status st = cpulm_json_parse(s, strlen(s), NULL, &d, NULL, &e);
    if (st != CPULM_OK) {
        fprintf(stderr, "  parse of '%s' failed: %s\n", s, e.msg);
        t->n_fail++;
    }
    return d;
}

/* Parses s (len bytes), expecting CPULM_ERR_FORMAT at byte off (off < 0: any offset). */
static void parse_bad(test_ctx *t, const char *s, size_t len, long off) {
    cpulm_json_doc *d = (cpulm_json_doc *)1;
    size_t at = 9999;
    cpulm_error e = {0};
    cpulm_status st = cpulm_json_parse(s, len, NULL, &d, &at, &e);
    if (st != CPULM_ERR_FORMAT || d != NULL || (off >= 0 && at != (size_t)off) ||
        strncmp(e.msg, "json: ", 6) != 0) {
        fprintf(stderr, "  bad input '%.*s': status %d, offset %zu (want %ld), msg '%s'\n",
                (int)len, s, st, at, off, e.msg);
        t->n_fail++;
    }
    cpulm_json_free(d);
}

#define BAD(s, off) parse_bad(t, s, sizeof(s) - 1, off)

TEST(json_parse_scalars) {
    cpulm_json_doc *d = parse_ok(t, " null ");
    REQUIRE(t, d);
    CHECK(t, cpulm_json_root(d)->type == CPULM_JSON_NULL);
    cpulm_json_free(d);
    d = parse_ok(t, "true");
    REQUIRE(t, d);
    CHECK(t, cpulm_json_bool(cpulm_json_root(d), 0) == 1);
    cpulm_json_free(d);
    d = parse_ok(t, "\xEF\xBB\xBF"
                    "false"); /* BOM skipped */
    REQUIRE(t, d);
    CHECK(t, cpulm_json_bool(cpulm_json_root(d), 1) == 0);
    cpulm_json_free(d);
    d = parse_ok(t, "\"h\\u00e9\"");
    REQUIRE(t, d);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_root(d)), "h\xC3\xA9") == 0);
    CHECK_EQ_INT(t, cpulm_json_len(cpulm_json_root(d)), 3);
    cpulm_json_free(d);
}

static void check_number(test_ctx *t, const char *s, double f, int is_int, int64_t i) {
    cpulm_json_doc *d = parse_ok(t, s);
    if (!d) return;
    const cpulm_json *v = cpulm_json_root(d);
    CHECK(t, v->type == CPULM_JSON_NUMBER);
    if (v->u.num.f != f || v->is_int != is_int || (is_int && v->u.num.i != i)) {
        fprintf(stderr, "  number '%s': got %.17g is_int %d i %lld\n", s, v->u.num.f, v->is_int,
                (long long)v->u.num.i);
        t->n_fail++;
    }
    cpulm_json_free(d);
}

TEST(json_parse_numbers) {
    check_number(t, "0", 0.0, 1, 0);
    check_number(t, "-0", 0.0, 1, 0);
    check_number(t, "42", 42.0, 1, 42);
    check_number(t, "-9223372036854775808", -9223372036854775808.0, 1, INT64_MIN);
    check_number(t, "9223372036854775807", 9223372036854775807.0, 1, INT64_MAX);
    check_number(t, "9223372036854775808", 9223372036854775808.0, 0, 0); /* too big: double */
    check_number(t, "1.5", 1.5, 0, 0);
    check_number(t, "1e3", 1000.0, 0, 0);
    check_number(t, "1E-2", 0.01, 0, 0);
    check_number(t, "-2.5e+2", -250.0, 0, 0);
    check_number(t, "0.1", 0.1, 0, 0);
    check_number(t, "0.30000000000000004", 0.30000000000000004, 0, 0);
    check_number(t, "123456789012345678901234567890", 1.2345678901234568e29, 0, 0);
    check_number(t, "2.2250738585072014e-308", 2.2250738585072014e-308, 0, 0);
    check_number(t, "1.7976931348623157e308", 1.7976931348623157e308, 0, 0);
    check_number(t, "1e-400", 0.0, 0, 0); /* underflow is fine, overflow is not */
    check_number(t, "3.141592653589793238462643383279", 3.141592653589793, 0, 0);
}

TEST(json_rejects_malformed_with_offset) {
    BAD("", 0);
    BAD("   ", 3);
    BAD("01", 1);
    BAD("1.", 1);
    BAD(".5", 0);
    BAD("+1", 0);
    BAD("-", 0);
    BAD("-a", 0);
    BAD("1e", 1);
    BAD("1e+", 1);
    BAD("[1,]", 3);
    BAD("[1 2]", 3);
    BAD("[1]]", 3);
    BAD("[", 1);
    BAD("{\"a\":1,}", 7);
    BAD("{a:1}", 1);
    BAD("{\"a\" 1}", 5);
    BAD("{\"a\"}", 4);
    BAD("{\"a\":1 \"b\":2}", 7);
    BAD("\"abc", 0);
    BAD("\"\\x\"", 1);
    BAD("\"\\u12G4\"", 1);
    BAD("\"\\u12\"", 1);
    BAD("\"a\x01"
        "b\"",
        2);
    BAD("\"a\tb\"", 2);
    BAD("tru", 0);
    BAD("nul", 0);
    BAD("True", 0);
    BAD("NaN", 0);
    BAD("Infinity", 0);
    BAD("1 2", 2);
    BAD("1e400", 0);
    BAD("-1e400", 0);
    BAD("{\"a\":1,\"a\":2}", 0); /* duplicate keys */
    BAD("[1,{\"k\":[],\"k\":null}]", 3);
    BAD("\xff", 0);
    BAD("\"\xff\"", 1);
    BAD("\"\xc0\xaf\"", 1);         /* overlong '/' */
    BAD("\"\xe0\x80\xaf\"", 1);     /* overlong */
    BAD("\"\xed\xa0\x80\"", 1);     /* encoded surrogate */
    BAD("\"\xf4\x90\x80\x80\"", 1); /* beyond U+10FFFF */
    BAD("\"\xe2\x82\"", 1);         /* truncated sequence */
    BAD("[1]\0", 3);                /* a NUL is data too */
}

TEST(json_error_message_names_offset) {
    cpulm_json_doc *d;
    cpulm_error e = {0};
    size_t off;
    const char *s = "{\"a\" 1}";
    CHECK_EQ_INT(t, cpulm_json_parse(s, strlen(s), NULL, &d, &off, &e), CPULM_ERR_FORMAT);
    CHECK(t, strcmp(e.msg, "json: byte 5 ('1'): expected ':' after object key") == 0);
    CHECK_EQ_INT(t, e.code, CPULM_ERR_FORMAT);
}

TEST(json_string_escapes_to_utf8) {
    cpulm_json_doc *d =
        parse_ok(t, "[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\", \"\\ud83d\\ude00\", \"\\u00e9\","
                    " \"\\ud83d\\ude00x\", \"a\\u0000b\", \"\xe2\x82\xac\"]");
    REQUIRE(t, d);
    const cpulm_json *r = cpulm_json_root(d);
    CHECK_EQ_INT(t, cpulm_json_len(r), 6);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_at(r, 0)), "\"\\/\b\f\n\r\t") == 0);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_at(r, 1)), "\xF0\x9F\x98\x80") == 0);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_at(r, 2)), "\xC3\xA9") == 0);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_at(r, 3)), "\xF0\x9F\x98\x80x") == 0);
    CHECK_EQ_INT(t, cpulm_json_len(cpulm_json_at(r, 4)), 3);
    CHECK(t, memcmp(cpulm_json_str(cpulm_json_at(r, 4)), "a\0b", 4) == 0);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_at(r, 5)), "\xe2\x82\xac") == 0);
    cpulm_json_free(d);
}

TEST(json_dom_lookup) {
    cpulm_json_doc *d = parse_ok(t, "{\"model\": \"x\", \"messages\": [{\"role\": \"user\", "
                                    "\"content\": \"hi\"}], \"temperature\": 0.5, "
                                    "\"stream\": true, \"n\": null, \"\": 1}");
    REQUIRE(t, d);
    const cpulm_json *r = cpulm_json_root(d);
    CHECK_EQ_INT(t, cpulm_json_len(r), 6);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(r, "model")), "x") == 0);
    const cpulm_json *m = cpulm_json_at(cpulm_json_get(r, "messages"), 0);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(m, "content")), "hi") == 0);
    CHECK_NEAR(t, cpulm_json_num(cpulm_json_get(r, "temperature"), -1), 0.5, 0);
    CHECK(t, cpulm_json_bool(cpulm_json_get(r, "stream"), 0) == 1);
    CHECK(t, cpulm_json_get(r, "n")->type == CPULM_JSON_NULL);
    CHECK_NEAR(t, cpulm_json_num(cpulm_json_get(r, ""), -1), 1, 0);
    /* absent and mistyped values give NULL or the fallback, never a crash */
    CHECK(t, cpulm_json_get(r, "missing") == NULL);
    CHECK(t, cpulm_json_get(cpulm_json_get(r, "model"), "x") == NULL);
    CHECK(t, cpulm_json_get(NULL, "x") == NULL);
    CHECK(t, cpulm_json_at(cpulm_json_get(r, "messages"), 1) == NULL);
    CHECK(t, cpulm_json_str(cpulm_json_get(r, "stream")) == NULL);
    CHECK_NEAR(t, cpulm_json_num(cpulm_json_get(r, "model"), -1), -1, 0);
    CHECK_EQ_INT(t, cpulm_json_len(NULL), 0);
    CHECK(t, strcmp(cpulm_json_at(r, 1)->key, "messages") == 0); /* input order kept */
    cpulm_json_free(d);
}

static char *nested(int depth) {
    char *s = malloc((size_t)depth * 2 + 1);
    for (int i = 0; i < depth; i++) {
        s[i] = '[';
        s[depth * 2 - 1 - i] = ']';
    }
    s[depth * 2] = 0;
    return s;
}

TEST(json_limits_depth_and_size) {
    cpulm_json_doc *d = NULL;
    char *s = nested(128);
    CHECK_EQ_INT(t, cpulm_json_parse(s, strlen(s), NULL, &d, NULL, NULL), CPULM_OK);
    cpulm_json_free(d);
    free(s);
    s = nested(129);
    size_t off = 0;
    CHECK_EQ_INT(t, cpulm_json_parse(s, strlen(s), NULL, &d, &off, NULL), CPULM_ERR_FORMAT);
    CHECK_EQ_INT(t, off, 128);
    free(s);
    s = nested(100000); /* capped at 1000 whatever the limit says: no stack overflow */
    cpulm_json_limits lim = cpulm_json_default_limits();
    lim.max_depth = 1 << 30;
    CHECK_EQ_INT(t, cpulm_json_parse(s, strlen(s), &lim, &d, &off, NULL), CPULM_ERR_FORMAT);
    CHECK_EQ_INT(t, off, 1000);
    free(s);
    lim.max_depth = 128;
    lim.max_bytes = 4;
    CHECK_EQ_INT(t, cpulm_json_parse("1234", 4, &lim, &d, NULL, NULL), CPULM_OK);
    cpulm_json_free(d);
    CHECK_EQ_INT(t, cpulm_json_parse("12345", 5, &lim, &d, NULL, NULL), CPULM_ERR_FORMAT);
    CHECK(t, d == NULL);
}

TEST(json_duplicate_keys_in_large_objects) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_buf_putc(&b, '{');
    for (int i = 0; i < 200; i++)
        cpulm_buf_printf(&b, "%s\"k%d\":%d", i ? "," : "", i, i);
    cpulm_buf_puts(&b, "}");
    cpulm_json_doc *d = parse_ok(t, b.data);
    CHECK_NEAR(t, cpulm_json_num(cpulm_json_get(cpulm_json_root(d), "k199"), -1), 199, 0);
    cpulm_json_free(d);
    cpulm_buf_truncate(&b, b.len - 1);
    cpulm_buf_puts(&b, ",\"k77\":0}");
    parse_bad(t, b.data, b.len, 0);
    cpulm_buf_release(&b);
}

/* Every prefix of a valid document, placed so its last byte touches a PROT_NONE page:
 * the reader must return OK or FORMAT without reading past the end (ASan-free check). */
TEST(json_truncation_at_guard_page) {
    const char *doc =
        "{\"a\": [1, -2.5e3, true, false, null], \"s\": \"x\\u00e9\\ud83d\\ude00\\n\","
        " \"o\": {\"k\": \"\xe2\x82\xac\"}, \"e\": [], \"f\": {}}";
    long page = sysconf(_SC_PAGESIZE);
    unsigned char *mem =
        mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(t, mem != MAP_FAILED);
    REQUIRE(t, mprotect(mem + page, (size_t)page, PROT_NONE) == 0);
    size_t n = strlen(doc);
    for (size_t k = 0; k <= n; k++) {
        char *at = (char *)mem + page - k;
        memcpy(at, doc, k);
        cpulm_json_doc *d = NULL;
        cpulm_status st = cpulm_json_parse(at, k, NULL, &d, NULL, NULL);
        CHECK(t, k == n ? st == CPULM_OK : st == CPULM_ERR_FORMAT);
        cpulm_json_free(d);
    }
    munmap(mem, (size_t)page * 2);
}

static void write_sample(cpulm_json_writer *w) {
    cpulm_json_obj_begin(w);
    cpulm_json_key(w, "a");
    cpulm_json_arr_begin(w);
    cpulm_json_write_int(w, 1);
    cpulm_json_write_double(w, 2.5);
    cpulm_json_write_str(w, "x");
    cpulm_json_arr_end(w);
    cpulm_json_key(w, "b");
    cpulm_json_obj_begin(w);
    cpulm_json_obj_end(w);
    cpulm_json_key(w, "c");
    cpulm_json_obj_begin(w);
    cpulm_json_key(w, "d");
    cpulm_json_write_null(w);
    cpulm_json_key(w, "e");
    cpulm_json_write_bool(w, 0);
    cpulm_json_obj_end(w);
    cpulm_json_obj_end(w);
}

TEST(json_writer_layouts) {
    /* expectations are Python's json.dumps(obj), with separators=(',', ':') / default /
     * indent=2, for obj = {"a": [1, 2.5, "x"], "b": {}, "c": {"d": None, "e": False}} */
    static const struct {
        int flags, indent;
        const char *want;
    } cases[] = {
        {0, 0, "{\"a\":[1,2.5,\"x\"],\"b\":{},\"c\":{\"d\":null,\"e\":false}}"},
        {CPULM_JSON_SPACED, 0,
         "{\"a\": [1, 2.5, \"x\"], \"b\": {}, \"c\": {\"d\": null, \"e\": false}}"},
        {0, 2,
         "{\n  \"a\": [\n    1,\n    2.5,\n    \"x\"\n  ],\n  \"b\": {},\n  \"c\": {\n"
         "    \"d\": null,\n    \"e\": false\n  }\n}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cpulm_buf b;
        cpulm_json_writer w;
        cpulm_buf_init(&b, 0);
        cpulm_json_writer_init(&w, &b, cases[i].flags, cases[i].indent);
        write_sample(&w);
        CHECK_EQ_INT(t, cpulm_json_writer_status(&w), CPULM_OK);
        if (strcmp(b.data, cases[i].want) != 0) {
            fprintf(stderr, "  layout %zu: got\n%s\n", i, b.data);
            t->n_fail++;
        }
        cpulm_buf_release(&b);
    }
}

static void check_quote(test_ctx *t, const char *s, size_t n, int flags, const char *want) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    CHECK_EQ_INT(t, cpulm_json_quote(&b, s, n, flags), CPULM_OK);
    if (strcmp(b.data, want) != 0) {
        fprintf(stderr, "  quote: got %s want %s\n", b.data, want);
        t->n_fail++;
    }
    cpulm_buf_release(&b);
}

TEST(json_writer_escapes_strings) {
    check_quote(t, "a\"b\\c/d", 7, 0, "\"a\\\"b\\\\c/d\"");
    check_quote(t, "\b\f\n\r\t\x01\x1f\x7f", 8, 0, "\"\\b\\f\\n\\r\\t\\u0001\\u001f\x7f\"");
    check_quote(t, "nul\0x", 5, 0, "\"nul\\u0000x\"");
    check_quote(t, "caf\xc3\xa9 \xf0\x9f\x98\x80", 10, 0, "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"");
    check_quote(t, "caf\xc3\xa9 \xf0\x9f\x98\x80", 10, CPULM_JSON_ASCII,
                "\"caf\\u00e9 \\ud83d\\ude00\"");
    /* invalid UTF-8: one U+FFFD per maximal ill-formed subpart */
    check_quote(t,
                "a\xff"
                "b",
                3, 0,
                "\"a\xef\xbf\xbd"
                "b\"");
    check_quote(t,
                "\xe2\x82"
                "x",
                3, 0, "\"\xef\xbf\xbdx\"");
    check_quote(t, "\xe2\x82", 2, CPULM_JSON_ASCII, "\"\\ufffd\"");
    check_quote(t, "\xed\xa0\x80", 3, 0, "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
    check_quote(t, "\xc0\xaf", 2, 0, "\"\xef\xbf\xbd\xef\xbf\xbd\"");
    check_quote(t, "", 0, 0, "\"\"");
}

static void check_fmt(test_ctx *t, double v, const char *js, const char *py) {
    char out[32];
    cpulm_json_fmt_double(v, CPULM_JSON_FMT_JS, out);
    if (strcmp(out, js)) {
        fprintf(stderr, "  js %.17g: got %s want %s\n", v, out, js);
        t->n_fail++;
    }
    cpulm_json_fmt_double(v, CPULM_JSON_FMT_PY, out);
    if (strcmp(out, py)) {
        fprintf(stderr, "  py %.17g: got %s want %s\n", v, out, py);
        t->n_fail++;
    }
}

TEST(json_number_formatting_js_and_python) {
    /* JS: String(v) in a browser; Python: repr(v) */
    check_fmt(t, 1.0, "1", "1.0");
    check_fmt(t, -2.5, "-2.5", "-2.5");
    check_fmt(t, 0.1, "0.1", "0.1");
    check_fmt(t, 0.30000000000000004, "0.30000000000000004", "0.30000000000000004");
    check_fmt(t, 123.456, "123.456", "123.456");
    check_fmt(t, 1e15, "1000000000000000", "1000000000000000.0");
    check_fmt(t, 1e16, "10000000000000000", "1e+16");
    check_fmt(t, 1e21, "1e+21", "1e+21");
    check_fmt(t, 1.5e300, "1.5e+300", "1.5e+300");
    check_fmt(t, 0.0001, "0.0001", "0.0001");
    check_fmt(t, 0.00001, "0.00001", "1e-05");
    check_fmt(t, 1.5e-7, "1.5e-7", "1.5e-07");
    check_fmt(t, 5e-324, "5e-324", "5e-324");
    check_fmt(t, 1.7976931348623157e308, "1.7976931348623157e+308", "1.7976931348623157e+308");
    check_fmt(t, 0.0, "0", "0.0");
    check_fmt(t, -0.0, "0", "-0.0");
    check_fmt(t, NAN, "NaN", "nan");
    check_fmt(t, -INFINITY, "-Infinity", "-inf");
    /* every formatted double reads back exactly */
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 2000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double v;
        memcpy(&v, &x, sizeof v);
        if (!isfinite(v)) continue;
        char out[32];
        cpulm_json_fmt_double(v, i & 1, out);
        if (strtod(out, NULL) != v) {
            fprintf(stderr, "  %.17g formatted as %s\n", v, out);
            t->n_fail++;
            return;
        }
    }
}

TEST(json_roundtrip_is_stable) {
    const char *src = "{\"s\": \"\\u00e9\\n\\u0001\\ud83d\\ude00\", \"n\": [0, -1, 1.5, 1e300, "
                      "-9223372036854775808, 12345678901234567890], \"t\": true, \"z\": null, "
                      "\"o\": {\"\": {}}}";
    cpulm_json_doc *d = parse_ok(t, src);
    REQUIRE(t, d);
    cpulm_buf a, b;
    cpulm_buf_init(&a, 0);
    cpulm_buf_init(&b, 0);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, &a, 0, 0);
    cpulm_json_write_value(&w, cpulm_json_root(d));
    CHECK_EQ_INT(t, cpulm_json_writer_status(&w), CPULM_OK);
    CHECK(t, strcmp(a.data, "{\"s\":\"\xc3\xa9\\n\\u0001\xf0\x9f\x98\x80\",\"n\":[0,-1,1.5,1e+300,"
                            "-9223372036854775808,12345678901234567000],\"t\":true,\"z\":null,"
                            "\"o\":{\"\":{}}}") == 0);
    cpulm_json_doc *d2 = parse_ok(t, a.data);
    REQUIRE(t, d2);
    cpulm_json_writer_init(&w, &b, 0, 0);
    cpulm_json_write_value(&w, cpulm_json_root(d2));
    CHECK(t, strcmp(a.data, b.data) == 0);
    cpulm_json_free(d);
    cpulm_json_free(d2);
    cpulm_buf_release(&a);
    cpulm_buf_release(&b);
}

TEST(json_writer_errors_are_sticky) {
    cpulm_buf b;
    cpulm_json_writer w;
    cpulm_buf_init(&b, 10); /* max_len 10 */
    cpulm_json_writer_init(&w, &b, 0, 0);
    cpulm_json_arr_begin(&w);
    cpulm_json_write_str(&w, "0123456789");
    cpulm_json_write_int(&w, 1);
    cpulm_json_arr_end(&w);
    CHECK_EQ_INT(t, cpulm_json_writer_status(&w), CPULM_ERR_TOO_SMALL);
    CHECK(t, b.len <= 10 && b.data[b.len] == '\0');
    cpulm_buf_release(&b);

    cpulm_buf_init(&b, 0);
    cpulm_json_writer_init(&w, &b, 0, 0);
    for (int i = 0; i < CPULM_JSON_WRITER_MAX_DEPTH + 5; i++)
        cpulm_json_arr_begin(&w);
    for (int i = 0; i < CPULM_JSON_WRITER_MAX_DEPTH + 5; i++)
        cpulm_json_arr_end(&w);
    CHECK_EQ_INT(t, cpulm_json_writer_status(&w), CPULM_ERR_INVALID_ARG);
    cpulm_buf_release(&b);

    cpulm_buf_init(&b, 0);
    cpulm_json_writer_init(&w, &b, 0, 0);
    cpulm_json_arr_begin(&w);
    CHECK_EQ_INT(t, cpulm_json_writer_status(&w), CPULM_ERR_INVALID_ARG); /* unfinished */
    cpulm_json_write_double(&w, NAN);
    cpulm_json_arr_end(&w);
    CHECK_EQ_INT(t, cpulm_json_writer_status(&w), CPULM_OK);
    CHECK(t, strcmp(b.data, "[null]") == 0);
    cpulm_buf_release(&b);
}

TEST(json_buf_invariants) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    CHECK(t, b.data != NULL && b.data[0] == '\0' && b.len == 0);
    cpulm_buf_reset(&b); /* on the shared empty string: must not write it */
    cpulm_buf_puts(&b, "abc");
    cpulm_buf_putc(&b, '\0');
    cpulm_buf_printf(&b, "%d-%s", 42, "x");
    CHECK_EQ_INT(t, b.len, 8);
    CHECK(t, memcmp(b.data,
                    "abc\0"
                    "42-x",
                    9) == 0);
    CHECK(t, b.cap > b.len);
    char big[1000];
    memset(big, 'y', sizeof big);
    cpulm_buf_printf(&b, "%.*s", 1000, big); /* longer than printf's stack buffer */
    CHECK_EQ_INT(t, b.len, 1008);
    CHECK(t, b.data[1007] == 'y' && b.data[1008] == '\0');
    cpulm_buf_truncate(&b, 3);
    CHECK(t, strcmp(b.data, "abc") == 0);
    size_t n;
    char *p = cpulm_buf_detach(&b, &n);
    CHECK(t, p && n == 3 && strcmp(p, "abc") == 0);
    free(p);
    CHECK(t, b.data != NULL && b.len == 0 && b.data[0] == '\0');
    p = cpulm_buf_detach(&b, &n); /* empty: still an owned "" */
    CHECK(t, p && n == 0 && p[0] == '\0');
    free(p);
    cpulm_buf_release(&b);
    cpulm_buf_init(&b, 4);
    CHECK_EQ_INT(t, cpulm_buf_puts(&b, "abcd"), CPULM_OK);
    CHECK_EQ_INT(t, cpulm_buf_putc(&b, 'e'), CPULM_ERR_TOO_SMALL);
    CHECK_EQ_INT(t, cpulm_buf_puts(&b, ""), CPULM_ERR_TOO_SMALL); /* sticky */
    CHECK(t, strcmp(b.data, "abcd") == 0);
    cpulm_buf_reset(&b);
    CHECK_EQ_INT(t, cpulm_buf_puts(&b, "xy"), CPULM_OK);
    cpulm_buf_release(&b);
}

TEST(json_numbers_ignore_locale) {
    const char *names[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "ru_RU.UTF-8"};
    const char *set = NULL;
    for (size_t i = 0; i < 4 && !set; i++)
        set = setlocale(LC_NUMERIC, names[i]);
    if (!set) SKIP(t, "no locale with a ',' decimal point installed");
    cpulm_json_doc *d = parse_ok(t, "[1.5, 1.10000000000000000001, 2.5e-30]");
    char out[32];
    cpulm_json_fmt_double(0.25, CPULM_JSON_FMT_JS, out);
    setlocale(LC_NUMERIC, "C");
    REQUIRE(t, d);
    CHECK_NEAR(t, cpulm_json_num(cpulm_json_at(cpulm_json_root(d), 0), 0), 1.5, 0);
    CHECK_NEAR(t, cpulm_json_num(cpulm_json_at(cpulm_json_root(d), 1), 0), 1.1, 0);
    CHECK(t, cpulm_json_num(cpulm_json_at(cpulm_json_root(d), 2), 0) == 2.5e-30);
    CHECK(t, strcmp(out, "0.25") == 0);
    cpulm_json_free(d);
}

/* A lone surrogate has no UTF-8 form; replacing it silently would make different inputs
 * decode equal, so the parser rejects it at the escape's backslash. */
TEST(json_rejects_lone_surrogates) {
    BAD("\"\\ud83d\"", 1);        /* lone high at the end */
    BAD("[\"ab\\ud83dx\"]", 4);   /* lone high before a plain char */
    BAD("\"\\ude00\\ud83d\"", 1); /* low first */
    BAD("\"\\ud83d\\u0041\"", 1); /* high + a non-low escape */
    BAD("\"\\ud83d\\ud83d\"", 1); /* high + high */
    BAD("{\"\\udfff\": 1}", 2);   /* in a key too */
    cpulm_json_doc *d = parse_ok(t, "\"\\udbff\\udfff\"");
    REQUIRE(t, d);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_root(d)), "\xF4\x8F\xBF\xBF") == 0);
    cpulm_json_free(d);
}
