/* test_schema.c: the JSON-schema compiler. Grammars for a varied schema set accept valid
 * documents and reject invalid ones; unsupported keywords are refused by name; and text
 * generated under each grammar by a random-weight model at temperature 0.9 always parses,
 * validates (a small validator for the supported subset, below) and ends by itself within
 * max_tokens (budget-aware closing), free-form objects and deep nesting included. */
#define _GNU_SOURCE
#include <string.h>
#include <time.h>

#include "grammar/grammar.h"
#include "test.h"

/* ---- a validator for the subset (independent of the compiler) ---- */

static const cpulm_json *g_root; /* the schema document, for $ref */

static int json_eq(const cpulm_json *a, const cpulm_json *b) {
    if (a->type != b->type) return 0;
    switch (a->type) {
    case CPULM_JSON_NULL: return 1;
    case CPULM_JSON_BOOL: return a->u.boolean == b->u.boolean;
    case CPULM_JSON_NUMBER: return a->u.num.f == b->u.num.f;
    case CPULM_JSON_STRING:
        return a->u.str.len == b->u.str.len && !memcmp(a->u.str.s, b->u.str.s, a->u.str.len);
    case CPULM_JSON_ARRAY:
        if (a->u.list.n != b->u.list.n) return 0;
        for (size_t i = 0; i < a->u.list.n; i++)
            if (!json_eq(&a->u.list.items[i], &b->u.list.items[i])) return 0;
        return 1;
    case CPULM_JSON_OBJECT:
        if (a->u.list.n != b->u.list.n) return 0;
        for (size_t i = 0; i < a->u.list.n; i++) {
            const cpulm_json *o = cpulm_json_get(b, a->u.list.items[i].key);
            if (!o || !json_eq(&a->u.list.items[i], o)) return 0;
        }
        return 1;
    }
    return 0;
}

static size_t n_codepoints(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

static int is_digits(const char *s, int n) {
    for (int i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

static int valid_date(const char *s) {
    static const int mdays[13] = {0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (strlen(s) < 10 || !is_digits(s, 4) || s[4] != '-' || !is_digits(s + 5, 2) || s[7] != '-' ||
        !is_digits(s + 8, 2))
        return 0;
    int m = atoi(s + 5), d = atoi(s + 8), y = atoi(s);
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m >= 1 && m <= 12 && d >= 1 && d <= mdays[m] && !(m == 2 && d == 29 && !leap);
}

static int valid_time(const char *s) {
    if (strlen(s) < 9 || !is_digits(s, 2) || s[2] != ':' || !is_digits(s + 3, 2) || s[5] != ':' ||
        !is_digits(s + 6, 2))
        return 0;
    if (atoi(s) > 23 || atoi(s + 3) > 59 || atoi(s + 6) > 59) return 0;
    s += 8;
    if (*s == '.') {
        s++;
        if (!is_digits(s, 1)) return 0;
        while (*s >= '0' && *s <= '9')
            s++;
    }
    if (!strcmp(s, "Z")) return 1;
    return (s[0] == '+' || s[0] == '-') && strlen(s) == 6 && is_digits(s + 1, 2) && s[3] == ':' &&
           is_digits(s + 4, 2) && atoi(s + 1) <= 23 && atoi(s + 4) <= 59;
}

static int valid_format(const char *f, const char *s) {
    if (!strcmp(f, "date")) return strlen(s) == 10 && valid_date(s);
    if (!strcmp(f, "time")) return valid_time(s);
    if (!strcmp(f, "date-time"))
        return strlen(s) > 11 && valid_date(s) && s[10] == 'T' && valid_time(s + 11);
    if (!strcmp(f, "uuid")) {
        if (strlen(s) != 36) return 0;
        for (int i = 0; i < 36; i++) {
            int dash = i == 8 || i == 13 || i == 18 || i == 23;
            if (dash ? s[i] != '-' : !strchr("0123456789abcdefABCDEF", s[i])) return 0;
        }
        return 1;
    }
    return 0;
}

static int validate(const cpulm_json *s, const cpulm_json *v);

static int type_ok(const char *t, const cpulm_json *v) {
    if (!strcmp(t, "object")) return v->type == CPULM_JSON_OBJECT;
    if (!strcmp(t, "array")) return v->type == CPULM_JSON_ARRAY;
    if (!strcmp(t, "string")) return v->type == CPULM_JSON_STRING;
    if (!strcmp(t, "number")) return v->type == CPULM_JSON_NUMBER;
    if (!strcmp(t, "integer"))
        return v->type == CPULM_JSON_NUMBER && v->u.num.f == (double)(int64_t)v->u.num.f;
    if (!strcmp(t, "boolean")) return v->type == CPULM_JSON_BOOL;
    if (!strcmp(t, "null")) return v->type == CPULM_JSON_NULL;
    return 0;
}

static int validate_object(const cpulm_json *s, const cpulm_json *v) {
    const cpulm_json *props = cpulm_json_get(s, "properties"), *req = cpulm_json_get(s, "required");
    const cpulm_json *add = cpulm_json_get(s, "additionalProperties");
    for (size_t i = 0; i < cpulm_json_len(req); i++)
        if (!cpulm_json_get(v, cpulm_json_str(cpulm_json_at(req, i)))) return 0;
    for (size_t i = 0; i < v->u.list.n; i++) {
        const cpulm_json *p = cpulm_json_get(props, v->u.list.items[i].key);
        if (p && !validate(p, &v->u.list.items[i])) return 0;
        if (!p && add && add->type == CPULM_JSON_BOOL && !add->u.boolean) return 0;
        if (!p && add && add->type == CPULM_JSON_OBJECT && !validate(add, &v->u.list.items[i]))
            return 0;
    }
    return 1;
}

static int validate_array(const cpulm_json *s, const cpulm_json *v) {
    const cpulm_json *items = cpulm_json_get(s, "items"),
                     *prefix = cpulm_json_get(s, "prefixItems");
    size_t n = v->u.list.n;
    if (n < (size_t)cpulm_json_num(cpulm_json_get(s, "minItems"), 0)) return 0;
    if (n > (size_t)cpulm_json_num(cpulm_json_get(s, "maxItems"), 1e9)) return 0;
    size_t np = cpulm_json_len(prefix);
    for (size_t i = 0; i < n; i++) {
        const cpulm_json *sub = i < np ? cpulm_json_at(prefix, i) : items;
        if (sub && sub->type == CPULM_JSON_BOOL && !sub->u.boolean) return 0;
        if (sub && sub->type == CPULM_JSON_OBJECT && !validate(sub, &v->u.list.items[i])) return 0;
    }
    return 1;
}

static int validate_scalar(const cpulm_json *s, const cpulm_json *v) {
    if (v->type == CPULM_JSON_STRING) {
        size_t n = n_codepoints(v->u.str.s, v->u.str.len);
        if (n < (size_t)cpulm_json_num(cpulm_json_get(s, "minLength"), 0)) return 0;
        if (n > (size_t)cpulm_json_num(cpulm_json_get(s, "maxLength"), 1e9)) return 0;
        const char *f = cpulm_json_str(cpulm_json_get(s, "format"));
        if (f && !valid_format(f, v->u.str.s)) return 0;
    }
    if (v->type == CPULM_JSON_NUMBER) {
        double x = v->u.num.f;
        const cpulm_json *b;
        if ((b = cpulm_json_get(s, "minimum")) && !(x >= b->u.num.f)) return 0;
        if ((b = cpulm_json_get(s, "maximum")) && !(x <= b->u.num.f)) return 0;
        if ((b = cpulm_json_get(s, "exclusiveMinimum")) && !(x > b->u.num.f)) return 0;
        if ((b = cpulm_json_get(s, "exclusiveMaximum")) && !(x < b->u.num.f)) return 0;
    }
    return 1;
}

static int validate(const cpulm_json *s, const cpulm_json *v) {
    if (s->type == CPULM_JSON_BOOL) return s->u.boolean;
    const cpulm_json *x;
    if ((x = cpulm_json_get(s, "$ref"))) {
        const char *r = x->u.str.s;
        if (!strcmp(r, "#")) return validate(g_root, v);
        return validate(cpulm_json_get(cpulm_json_get(g_root, "$defs"), r + 8), v);
    }
    if ((x = cpulm_json_get(s, "const")) && !json_eq(x, v)) return 0;
    if ((x = cpulm_json_get(s, "enum"))) {
        int any = 0;
        for (size_t i = 0; i < x->u.list.n && !any; i++)
            any = json_eq(&x->u.list.items[i], v);
        if (!any) return 0;
    }
    if ((x = cpulm_json_get(s, "anyOf")) || (x = cpulm_json_get(s, "oneOf"))) {
        int hits = 0;
        for (size_t i = 0; i < x->u.list.n; i++)
            hits += validate(&x->u.list.items[i], v);
        if (hits == 0 || (cpulm_json_get(s, "oneOf") && hits != 1)) return 0;
    }
    if ((x = cpulm_json_get(s, "type"))) {
        int ok = 0;
        if (x->type == CPULM_JSON_STRING) ok = type_ok(x->u.str.s, v);
        for (size_t i = 0; x->type == CPULM_JSON_ARRAY && i < x->u.list.n && !ok; i++)
            ok = type_ok(x->u.list.items[i].u.str.s, v);
        if (!ok) return 0;
    }
    if (v->type == CPULM_JSON_OBJECT && !validate_object(s, v)) return 0;
    if (v->type == CPULM_JSON_ARRAY && !validate_array(s, v)) return 0;
    return validate_scalar(s, v);
}

/* ---- the schema set ---- */

static const char *const SCHEMAS[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},\"email\":{\"type\":[\"string\","
    "\"null\"],\"maxLength\":8}},\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
    "{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"exclusiveMinimum\":-50,"
    "\"exclusiveMaximum\":50},\"minItems\":2,\"maxItems\":5}",
    "{\"enum\":[\"red\",\"green\",42,null,{\"k\":[1,2]}]}",
    "{\"type\":\"object\",\"properties\":{\"when\":{\"type\":\"string\",\"format\":\"date-time\"},"
    "\"day\":{\"type\":\"string\",\"format\":\"date\"},\"at\":{\"type\":\"string\",\"format\":"
    "\"time\"},"
    "\"id\":{\"type\":\"string\",\"format\":\"uuid\"}},\"required\":[\"when\",\"day\",\"at\","
    "\"id\"]}",
    "{\"anyOf\":[{\"type\":\"boolean\"},{\"type\":\"number\",\"minimum\":-2.5,\"maximum\":1000},"
    "{\"const\":\"none\"}]}",
    "{\"$defs\":{\"pt\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"},\"y\":"
    "{\"type\":\"number\"}},\"required\":[\"x\",\"y\"],\"additionalProperties\":false}},"
    "\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/pt\"},\"b\":{\"$ref\":"
    "\"#/$defs/pt\"}},\"required\":[\"a\"],\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"code\":{\"type\":\"string\",\"pattern\":"
    "\"^[A-Z]{2}-\\\\d{3}(x|y)?$\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\","
    "\"minLength\":1,\"maxLength\":4},\"maxItems\":3}},\"required\":[\"code\",\"tags\"]}",
    "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"circle\"},\"r\":{\"type\":"
    "\"integer\","
    "\"minimum\":1,\"maximum\":9999999}},\"required\":[\"kind\",\"r\"],\"additionalProperties\":"
    "false}",
    "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\",\"maxLength\":3},{\"type\":"
    "\"boolean\"},"
    "{\"type\":\"null\"}],\"items\":false}",
    "{\"type\":\"object\"}", /* json_object mode: any object */
    "{\"type\":\"object\",\"properties\":{\"team\":{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":10},\"members\":{\"type\":\"array\","
    "\"minItems\":1,\"maxItems\":3,\"items\":{\"type\":\"object\",\"properties\":{\"id\":{"
    "\"type\":\"integer\",\"minimum\":1,\"maximum\":999},\"roles\":{\"type\":\"array\","
    "\"items\":{\"enum\":[\"dev\",\"ops\",\"qa\"]},\"maxItems\":2},\"lead\":{\"type\":"
    "\"boolean\"}},\"required\":[\"id\",\"roles\"],\"additionalProperties\":false}}},"
    "\"required\":[\"name\",\"members\"],\"additionalProperties\":false},\"note\":{}},"
    "\"required\":[\"team\"]}", /* deep nesting, optional properties, a free-form value */
    "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"},\"n\":{"
    "\"type\":\"integer\"}},\"required\":[\"kind\",\"n\"],\"additionalProperties\":false},"
    "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"b\"},\"tags\":{\"type\":"
    "\"array\",\"items\":{\"type\":\"string\"}}},\"required\":[\"kind\"],"
    "\"additionalProperties\":false},{\"type\":\"string\",\"maxLength\":5}]}",
    "{\"type\":\"array\"}", /* any items, nested at will */
    "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\",\"minimum\":-9,"
    "\"maximum\":9},"
    "\"maxProperties_is_not_used\":null}",
};
#define N_SCHEMAS 13 /* the last entry is for the refusal test */

static cpulm_json_doc *jparse(const char *s) {
    cpulm_json_doc *d = NULL;
    cpulm_json_parse(s, strlen(s), NULL, &d, NULL, NULL);
    return d;
}

static cpulm_grammar *schema_grammar(test_ctx *t, const cpulm_json *schema) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_error e = {0};
    cpulm_grammar *g = NULL;
    if (cpulm_grammar_from_schema(schema, &b, &e) != CPULM_OK ||
        cpulm_grammar_parse(b.data, b.len, NULL, &g, &e) != CPULM_OK) {
        fprintf(stderr, "  schema grammar failed: %s\n", e.msg);
        t->n_fail++;
    }
    cpulm_buf_release(&b);
    return g;
}

static int gmatch(const cpulm_grammar *g, const char *s) {
    cpulm_grammar_matcher *m = cpulm_grammar_matcher_new(g, NULL);
    int r = cpulm_grammar_accept_bytes(m, s, strlen(s)) == CPULM_OK && cpulm_grammar_complete(m);
    cpulm_grammar_matcher_free(m);
    return r;
}

TEST(schema_grammars_accept_valid_reject_invalid) {
    static const struct {
        int schema;
        const char *doc;
        int ok;
    } cases[] = {
        {0, "{\"name\": \"Ann\", \"age\": 31}", 1},
        {0, "{\"name\": \"Ann\", \"age\": 31, \"email\": null}", 1},
        {0, "{\"name\": \"Ann\", \"age\": 121}", 0},
        {0, "{\"age\": 3}", 0},
        {0, "{\"name\": \"Ann\", \"age\": 3, \"x\": 1}", 0},
        {1, "[-49, 0, 49]", 1},
        {1, "[50, 1]", 0},
        {1, "[1]", 0},
        {2, "{\"k\":[1,2]}", 1},
        {2, "\"blue\"", 0},
        {3,
         "{\"when\": \"2024-02-28T23:59:59.5+01:00\", \"day\": \"2024-12-31\", \"at\": "
         "\"00:00:00Z\", "
         "\"id\": \"123e4567-e89b-12d3-a456-426614174000\"}",
         1},
        {3,
         "{\"when\": \"2024-02-30T00:00:00Z\", \"day\": \"2024-12-31\", \"at\": \"00:00:00Z\", "
         "\"id\": \"123e4567-e89b-12d3-a456-426614174000\"}",
         0},
        {4, "-2", 1},
        {4, "999.25", 1},
        {4, "-3", 0},
        {4, "\"none\"", 1},
        {5, "{\"a\": {\"x\": 1, \"y\": 2.5}}", 1},
        {5, "{\"b\": {\"x\": 1, \"y\": 2}}", 0},
        {6, "{\"code\": \"AB-123x\", \"tags\": [\"a\", \"bcd\"]}", 1},
        {6, "{\"code\": \"AB-12\", \"tags\": []}", 0},
        {6, "{\"code\": \"AB-123\", \"tags\": [\"\"]}", 0},
        {7, "{\"kind\": \"circle\", \"r\": 9999999}", 1},
        {7, "{\"kind\": \"circle\", \"r\": 10000000}", 0},
        {8, "[\"abc\", true, null]", 1},
        {8, "[\"abc\", true]", 0},
        {11, "{\"kind\": \"a\", \"n\": -3}", 1},
        {11, "{\"kind\": \"b\"}", 1},
        {11, "\"abcde\"", 1},
        {11, "{\"kind\": \"a\"}", 0},
        {11, "{\"kind\": \"b\", \"n\": 1}", 0},
        {10, "{\"team\": {\"name\": \"x\", \"members\": [{\"id\": 7, \"roles\": [\"qa\"]}]}}", 1},
        {10, "{\"team\": {\"name\": \"x\", \"members\": []}}", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cpulm_json_doc *d = jparse(SCHEMAS[cases[i].schema]);
        REQUIRE(t, d);
        cpulm_grammar *g = schema_grammar(t, cpulm_json_root(d));
        if (g && gmatch(g, cases[i].doc) != cases[i].ok) {
            fprintf(stderr, "  schema %d, '%s': want %d\n", cases[i].schema, cases[i].doc,
                    cases[i].ok);
            t->n_fail++;
        }
        /* the independent validator agrees on the valid ones */
        cpulm_json_doc *v = jparse(cases[i].doc);
        g_root = cpulm_json_root(d);
        if (cases[i].ok) CHECK(t, v && validate(cpulm_json_root(d), cpulm_json_root(v)));
        cpulm_json_free(v);
        cpulm_grammar_free(g);
        cpulm_json_free(d);
    }
}

TEST(schema_refuses_unsupported_by_name) {
    static const struct {
        const char *schema, *what;
    } cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{\"type\":\"null\"}}}}",
         "'not' at #/properties/a"},
        {"{\"type\":\"integer\",\"multipleOf\":3}", "'multipleOf'"},
        {"{\"type\":\"object\",\"patternProperties\":{\"^x\":{}}}", "'patternProperties'"},
        {"{\"type\":\"string\",\"format\":\"email\"}", "format 'email'"},
        {"{\"type\":\"string\",\"pattern\":\"(?=x)\"}", "lookaround"},
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "backreference"},
        {"{\"$ref\":\"https://example.com/s.json\"}", "$ref"},
        {"{\"allOf\":[{\"type\":\"string\",\"pattern\":\"^a\"},{\"pattern\":\"b$\"}]}",
         "two different 'pattern'"},
        {"{\"if\":{},\"then\":{}}", "'if'"},
        {NULL, "'maxProperties_is_not_used'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cpulm_json_doc *d = jparse(cases[i].schema ? cases[i].schema : SCHEMAS[N_SCHEMAS]);
        REQUIRE(t, d);
        cpulm_buf b;
        cpulm_buf_init(&b, 0);
        cpulm_error e = {0};
        cpulm_status st = cpulm_grammar_from_schema(cpulm_json_root(d), &b, &e);
        if (st == CPULM_OK || !strstr(e.msg, cases[i].what)) {
            fprintf(stderr, "  case %zu: status %d, '%s' (want '%s')\n", i, st, e.msg,
                    cases[i].what);
            t->n_fail++;
        }
        cpulm_buf_release(&b);
        cpulm_json_free(d);
    }
}

/* Every keyword of a schema holds together: keywords beside enum/const/$ref/anyOf/oneOf/
 * allOf, the schemas of allOf, and fractional or exclusive number bounds (issue #29). */
TEST(schema_keywords_intersect) {
    static const struct {
        const char *schema;
        const char *yes[5], *no[6];
    } cases[] = {
        {"{\"enum\":[1,\"a\",\"bb\"],\"type\":\"string\",\"maxLength\":1}",
         {"\"a\""},
         {"1", "\"bb\""}},
        {"{\"allOf\":[{\"type\":\"integer\"}],\"minimum\":3}", {"3", "40"}, {"2", "-5", "3.5"}},
        {"{\"type\":\"number\",\"minimum\":0.5,\"maximum\":0.7}",
         {"0.5", "0.6", "0.7", "0.65432", "0.70"},
         {"0.4", "0.71", "0.7000001", "1", "0", "0.49999"}},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0.5,\"exclusiveMaximum\":0.7}",
         {"0.51", "0.69999", "0.5000001"},
         {"0.5", "0.50", "0.5000", "0.7", "0.70", "0.8"}},
        {"{\"type\":\"number\",\"minimum\":-2.25,\"maximum\":-1.5}",
         {"-2.25", "-1.5", "-2", "-1.75", "-2.2"},
         {"-2.26", "-1.49", "-1", "0", "-3"}},
        {"{\"type\":\"number\",\"exclusiveMinimum\":-0.5,\"maximum\":0}",
         {"-0.49", "0", "-0.1"},
         {"-0.5", "0.1", "-0.50", "1"}},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":2.5,\"maximum\":7.9}", {"3", "7"}, {"2", "8"}},
        {"{\"type\":\"number\",\"minimum\":1234567.125,\"exclusiveMaximum\":1234568}",
         {"1234567.125", "1234567.5", "1234567.99"},
         {"1234567.12", "1234568", "1234568.0"}},
        {"{\"$defs\":{\"s\":{\"type\":\"string\"}},\"$ref\":\"#/$defs/s\",\"maxLength\":2}",
         {"\"ab\""},
         {"\"abc\"", "1"}},
        {"{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"type\":\"string\","
         "\"minLength\":2}",
         {"\"ab\""},
         {"\"a\"", "12"}},
        {"{\"oneOf\":[{\"type\":\"integer\",\"maximum\":0},{\"type\":\"integer\",\"minimum\":10}],"
         "\"minimum\":-3,\"maximum\":12}",
         {"-3", "0", "11", "12"},
         {"-4", "13", "5"}},
        {"{\"type\":\"object\",\"required\":[\"x\"],\"additionalProperties\":{\"type\":\"integer\"}"
         "}",
         {"{\"x\":1}"},
         {"{\"x\":\"s\"}", "{}"}},
        {"{\"const\":\"abc\",\"type\":\"string\",\"minLength\":2}", {"\"abc\""}, {"\"ab\""}},
        /* maxLength speaks of strings only: 5 stays */
        {"{\"enum\":[5,\"abc\",\"d\"],\"maxLength\":2}", {"5", "\"d\""}, {"\"abc\""}},
        {"{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
         "\"required\":[\"a\"]},{\"properties\":{\"a\":{\"minimum\":5},\"b\":{\"type\":\"string\"}}"
         ","
         "\"required\":[\"b\"]}]}",
         {"{\"a\":5,\"b\":\"x\"}"},
         {"{\"a\":4,\"b\":\"x\"}", "{\"a\":5}", "{\"a\":5.5,\"b\":\"x\"}"}},
        {"{\"allOf\":[{\"type\":\"array\",\"prefixItems\":[{\"type\":\"number\"}]},"
         "{\"items\":{\"type\":\"integer\"}}]}",
         {"[3]"},
         {"[3.5]"}},
        /* JavaScript's \s includes U+00A0 and '.' excludes U+2028 */
        {"{\"type\":\"string\",\"pattern\":\"^\\\\S+$\"}",
         {"\"ab\""},
         {"\"a\xC2\xA0"
          "b\""}},
        {"{\"type\":\"string\",\"pattern\":\"^.$\"}", {"\"a\""}, {"\"\xE2\x80\xA8\""}},
        /* recursion through a $ref beside other keywords: the intersection is one rule */
        {"{\"$defs\":{\"N\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
         "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/N\"},{\"type\":\"null\"}],\"type\":[\"object\","
         "\"null\"]}},\"required\":[\"v\",\"next\"]}},\"$ref\":\"#/$defs/N\",\"type\":\"object\"}",
         {"{\"v\":1,\"next\":{\"v\":2,\"next\":null}}"},
         {"{\"v\":1,\"next\":{\"v\":2}}", "{\"v\":1,\"next\":3}"}},
        /* recursion through allOf-wrapped $refs (pydantic writes them) stays a named rule */
        {"{\"$defs\":{\"N\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
         "\"kids\":{\"type\":\"array\",\"items\":{\"allOf\":[{\"$ref\":\"#/$defs/N\"}],"
         "\"description\":\"c\"}}},\"required\":[\"v\"]}},\"allOf\":[{\"$ref\":\"#/$defs/N\"}]}",
         {"{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3}]}]}"},
         {"{\"v\":1,\"kids\":[{\"x\":2}]}"}},
        {"{\"$defs\":{\"d\":{\"anyOf\":[{\"type\":\"boolean\"},{\"$ref\":\"#/$defs/d\"}]}},"
         "\"$ref\":\"#/$defs/d\"}",
         {"true"},
         {"1"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cpulm_json_doc *d = jparse(cases[i].schema);
        REQUIRE(t, d);
        cpulm_grammar *g = schema_grammar(t, cpulm_json_root(d));
        for (int k = 0; g && k < 6; k++) {
            const char *yes = k < 5 ? cases[i].yes[k] : NULL, *no = cases[i].no[k];
            if ((yes && !gmatch(g, yes)) || (no && gmatch(g, no))) {
                fprintf(stderr, "  case %zu: '%s' should %s\n", i,
                        yes && !gmatch(g, yes) ? yes : no,
                        yes && !gmatch(g, yes) ? "match" : "not match");
                t->n_fail++;
            }
        }
        if (!g) fprintf(stderr, "  case %zu refused\n", i);
        cpulm_grammar_free(g);
        cpulm_json_free(d);
    }
}

/* Schemas no value satisfies are refused, naming the keyword (the server's 400). */
TEST(schema_unsatisfiable_refused_by_name) {
    static const struct {
        const char *schema, *what;
    } cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"],"
         "\"additionalProperties\":false}",
         "'required' property 'b'"},
        {"{\"enum\":[\"a\",\"bb\"],\"type\":\"integer\"}", "'enum'"},
        {"{\"const\":\"abc\",\"maxLength\":2}", "'const'"},
        {"{\"type\":\"number\",\"minimum\":0.7,\"maximum\":0.5}", "'minimum', 'maximum'"},
        {"{\"type\":\"number\",\"exclusiveMinimum\":1,\"maximum\":1}", "'exclusiveMinimum'"},
        {"{\"type\":\"integer\",\"minimum\":0.5,\"maximum\":0.7}", "'minimum', 'maximum'"},
        {"{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "'type'"},
        {"{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"type\":\"boolean\"}",
         "'anyOf'"},
        {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "'maxLength' < 'minLength'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cpulm_json_doc *d = jparse(cases[i].schema);
        REQUIRE(t, d);
        cpulm_buf b;
        cpulm_buf_init(&b, 0);
        cpulm_error e = {0};
        cpulm_status st = cpulm_grammar_from_schema(cpulm_json_root(d), &b, &e);
        if (st == CPULM_OK || !strstr(e.msg, cases[i].what)) {
            fprintf(stderr, "  case %zu: status %d, '%s' (want '%s')\n", i, st, e.msg,
                    cases[i].what);
            t->n_fail++;
        }
        cpulm_buf_release(&b);
        cpulm_json_free(d);
    }
}

/* oneOf is generated only when no value can match two branches (else the output could
 * fail validation); overlapping or undecidable branches are refused by name. */
TEST(schema_one_of_exclusive_or_refused) {
    static const char *const accepted[] = {
        "{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"integer\"},{\"type\":\"null\"}]}",
        "{\"oneOf\":[{\"type\":\"integer\",\"maximum\":0},{\"type\":\"number\","
        "\"exclusiveMinimum\":0}]}",
        "{\"oneOf\":[{\"const\":\"a\"},{\"enum\":[\"b\",\"c\",1]}]}",
        "{\"$defs\":{\"a\":{\"type\":\"object\",\"properties\":{\"k\":{\"const\":\"a\"}},"
        "\"required\":[\"k\"]}},\"oneOf\":[{\"$ref\":\"#/$defs/a\"},{\"type\":\"object\","
        "\"properties\":{\"k\":{\"enum\":[\"b\",\"c\"]},\"v\":{}},\"required\":[\"v\",\"k\"]}]}",
        "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":"
        "false},{\"type\":\"object\",\"required\":[\"b\"]}]}",
    };
    static const char *const refused[] = {
        "{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", /* 3 is both */
        "{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"maxLength\":3}]}",
        "{\"oneOf\":[{\"enum\":[\"a\",\"b\"]},{\"enum\":[\"b\",\"c\"]}]}",
        "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}},"
        "{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"string\"}}}]}", /* {} */
        /* no "type": "object", so a non-object value (which ignores properties) matches both */
        "{\"oneOf\":[{\"properties\":{\"k\":{\"const\":1}},\"required\":[\"k\"]},"
        "{\"properties\":{\"k\":{\"const\":2}},\"required\":[\"k\"]}]}",
        "{\"type\":\"object\",\"properties\":{\"x\":{\"oneOf\":[{\"type\":\"boolean\"},"
        "{\"type\":\"number\"},{\"minimum\":3}]}}}",
    };
    for (size_t i = 0; i < sizeof accepted / sizeof *accepted; i++) {
        cpulm_json_doc *d = jparse(accepted[i]);
        REQUIRE(t, d);
        cpulm_grammar *g = schema_grammar(t, cpulm_json_root(d));
        CHECK(t, g != NULL);
        cpulm_grammar_free(g);
        cpulm_json_free(d);
    }
    static const char *const which[] = {"0 and 1", "0 and 1", "0 and 1",
                                        "0 and 1", "0 and 1", "0 and 2"}; /* true >= 3 */
    static const char *const at[] = {"#", "#", "#", "#", "#", "#/properties/x"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        cpulm_json_doc *d = jparse(refused[i]);
        REQUIRE(t, d);
        cpulm_buf b;
        cpulm_buf_init(&b, 0);
        cpulm_error e = {0};
        cpulm_status st = cpulm_grammar_from_schema(cpulm_json_root(d), &b, &e);
        char want[64], tail[64];
        snprintf(want, sizeof want, "'oneOf' branches %s may match", which[i]);
        snprintf(tail, sizeof tail, " at %s", at[i]);
        size_t n = strlen(e.msg), nt = strlen(tail);
        if (st != CPULM_ERR_UNSUPPORTED || !strstr(e.msg, want) || n < nt ||
            strcmp(e.msg + n - nt, tail) != 0) {
            fprintf(stderr, "  refused[%zu]: status %d, '%s'\n", i, st, e.msg);
            t->n_fail++;
        }
        cpulm_buf_release(&b);
        cpulm_json_free(d);
    }
}

/* ---- generation under the grammar by a random-weight model ---- */

/* Generates one output (at most max tokens, the matcher's budget) under g; returns the
 * text (owned) and *stopped = 1 when it ended by itself (an end token or a grammar that
 * cannot go on) within max. */
static char *generate(cpulm_ctx *ctx, const cpulm_model *m, const cpulm_grammar *g,
                      const cpulm_grammar_vocab *v, uint64_t seed, int max, int *stopped) {
    cpulm_sampler_params sp = cpulm_sampler_default_params();
    sp.temp = 0.9f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.seed = seed;
    cpulm_sampler *smp = cpulm_sampler_new(&sp, cpulm_vocab_n(m));
    cpulm_grammar_matcher *gm = cpulm_grammar_matcher_new(g, v);
    if (gm) cpulm_grammar_matcher_set_budget(gm, max);
    cpulm_detok dt;
    cpulm_detok_init(&dt, m, 0);
    cpulm_buf out;
    cpulm_buf_init(&out, 0);
    CPULM_ASSERT(cpulm_ctx_seq_rm(ctx, 0, 0) == CPULM_OK);
    cpulm_token t = cpulm_token_bos(m);
    *stopped = 0;
    char piece[256];
    for (int i = 0; i < max && smp && gm; i++) {
        cpulm_batch b = {.n = 1, .token = &t};
        if (cpulm_ctx_decode(ctx, &b) != CPULM_OK) break;
        t = cpulm_sampler_sample_masked(smp, cpulm_ctx_logits(ctx, 0), cpulm_grammar_mask(gm));
        if (cpulm_token_is_eog(m, t)) {
            *stopped = cpulm_grammar_complete(gm);
            break;
        }
        if (cpulm_grammar_accept_token(gm, t) != CPULM_OK) break;
        int32_t n = cpulm_detok_push(&dt, t, piece, sizeof piece);
        if (n > 0) cpulm_buf_append(&out, piece, (size_t)n);
        if (cpulm_grammar_must_end(gm)) {
            *stopped = 1;
            break;
        }
    }
    int32_t n = cpulm_detok_flush(&dt, piece, sizeof piece);
    if (n > 0) cpulm_buf_append(&out, piece, (size_t)n);
    cpulm_grammar_matcher_free(gm);
    cpulm_sampler_free(smp);
    return cpulm_buf_detach(&out, NULL);
}

#define SEEDS      5
#define MAX_TOKENS 128 /* the date/time/uuid schema needs ~110 bytes at least */

TEST(schema_generated_outputs_validate) {
    const char *path = test_shared_path("testdata/models/tiny-llama-q8_0.gguf");
    if (!path) SKIP(t, "CPULM_SHARED tiny models not found");
    cpulm_model *m = cpulm_model_load(path, NULL, NULL);
    REQUIRE(t, m);
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.n_ctx = 512;
    cp.n_threads = 1;
    cpulm_ctx *ctx = cpulm_ctx_new(m, &cp, NULL);
    cpulm_grammar_vocab *v = cpulm_grammar_vocab_new(m);
    REQUIRE(t, ctx && v);
    int total = 0, valid = 0;
    for (int k = 0; k < N_SCHEMAS; k++) {
        cpulm_json_doc *d = jparse(SCHEMAS[k]);
        cpulm_grammar *g = d ? schema_grammar(t, cpulm_json_root(d)) : NULL;
        g_root = d ? cpulm_json_root(d) : NULL;
        for (uint64_t seed = 1; g && seed <= SEEDS; seed++) {
            int stopped;
            /* a random-weight model never wants to close a free-form value: without the
             * budget-aware mask 4 of these outputs (free-form, deep, oneOf) get cut */
            char *text = generate(ctx, m, g, v, seed * 7919 + (uint64_t)k, MAX_TOKENS, &stopped);
            cpulm_json_doc *out = text ? jparse(text) : NULL;
            int ok = stopped && out && validate(cpulm_json_root(d), cpulm_json_root(out));
            total++;
            valid += ok;
            if (!ok)
                fprintf(stderr, "  schema %d seed %llu: stopped %d, output '%s'\n", k,
                        (unsigned long long)seed, stopped, text ? text : "(null)");
            cpulm_json_free(out);
            free(text);
        }
        cpulm_grammar_free(g);
        cpulm_json_free(d);
    }
    CHECK_EQ_INT(t, valid, total);
    CHECK_EQ_INT(t, total, N_SCHEMAS * SEEDS);
    cpulm_grammar_vocab_free(v);
    cpulm_ctx_free(ctx);
    cpulm_model_free(m);
}

/* ---- cost limits ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Schema text -> GBNF -> compiled: the first failing status (and its message in e), and
 * that the whole took under 1 s. */
static cpulm_status schema_compile(test_ctx *t, const char *text, cpulm_error *e) {
    cpulm_json_doc *d = jparse(text);
    if (!d) return CPULM_ERR_FORMAT;
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_grammar *g = NULL;
    double t0 = now_s();
    cpulm_status st = cpulm_grammar_from_schema(cpulm_json_root(d), &b, e);
    if (st == CPULM_OK) st = cpulm_grammar_parse(b.data, b.len, NULL, &g, e);
    double dt = now_s() - t0;
    if (dt > 1.0) {
        fprintf(stderr, "  %.3f s for schema %.60s...\n", dt, text);
        t->n_fail++;
    }
    cpulm_grammar_free(g);
    cpulm_buf_release(&b);
    cpulm_json_free(d);
    return st;
}

TEST(schema_costly_patterns_bounded) {
    cpulm_error e = {0};
    /* nested bounded repetitions in a pattern multiply: refused before they are built */
    CHECK_EQ_INT(
        t, schema_compile(t, "{\"type\":\"string\",\"pattern\":\"^(a{0,1000}){0,1000}$\"}", &e),
        CPULM_ERR_LIMIT);
    CHECK(t, strstr(e.msg, "nested repetitions multiply to more than 65536"));
    /* a ~790-byte pattern of many nested 100x100 groups compiles fast */
    cpulm_buf s;
    cpulm_buf_init(&s, 0);
    cpulm_buf_puts(&s, "{\"type\":\"string\",\"pattern\":\"^");
    while (s.len < 770)
        cpulm_buf_puts(&s, "(a{0,100}){0,100}");
    cpulm_buf_puts(&s, "$\"}");
    CHECK_EQ_INT(t, schema_compile(t, s.data, &e), CPULM_OK);
    /* 77 times b{0,1000}: more rules than the limit, refused before they are made */
    cpulm_buf_reset(&s);
    cpulm_buf_puts(&s, "{\"type\":\"string\",\"pattern\":\"^");
    while (s.len < 770)
        cpulm_buf_puts(&s, "ab{0,1000}");
    cpulm_buf_puts(&s, "$\"}");
    CHECK_EQ_INT(t, schema_compile(t, s.data, &e), CPULM_ERR_LIMIT);
    CHECK(t, strstr(e.msg, "(limit 65536)"));
    /* a class of characters JSON must escape (other than " and \) matches nothing here */
    CHECK_EQ_INT(t, schema_compile(t, "{\"type\":\"string\",\"pattern\":\"^[\\\\x01]$\"}", &e),
                 CPULM_ERR_UNSUPPORTED);
    CHECK_EQ_INT(t, schema_compile(t, "{\"type\":\"string\",\"pattern\":\"^[\\u0022]+$\"}", &e),
                 CPULM_OK);
    /* a negated class of 255 ranges: with the three JSON-unsafe ranges it would pass the
     * GBNF limit of 256, so the pattern is refused, not turned into GBNF that fails */
    cpulm_buf_reset(&s);
    cpulm_buf_puts(&s, "{\"type\":\"string\",\"pattern\":\"^[^");
    for (int i = 0; i < 255; i++)
        cpulm_buf_printf(&s, "\\u%04X", 0x100 + 2 * i);
    cpulm_buf_puts(&s, "]$\"}");
    CHECK_EQ_INT(t, schema_compile(t, s.data, &e), CPULM_ERR_UNSUPPORTED);
    CHECK(t, strstr(e.msg, "character class too large"));
    /* oneOf over many enum branches: pairwise checks bounded */
    cpulm_buf_reset(&s);
    cpulm_buf_puts(&s, "{\"oneOf\":[");
    for (int i = 0; i < 400; i++) {
        cpulm_buf_printf(&s, "%s{\"enum\":[", i ? "," : "");
        for (int j = 0; j < 40; j++)
            cpulm_buf_printf(&s, "%s%d", j ? "," : "", i * 40 + j);
        cpulm_buf_puts(&s, "]}");
    }
    cpulm_buf_puts(&s, "]}");
    CHECK_EQ_INT(t, schema_compile(t, s.data, &e), CPULM_ERR_LIMIT);
    CHECK(t, strstr(e.msg, "'oneOf' takes more than"));
    cpulm_buf_release(&s);
}
