/* schema_prop.c: random JSON schemas for the property test of the schema compiler
 * (tests/schema_prop_test.sh, which checks every line with ajv in tests/schema_prop_check.mjs).
 *
 * Draws schemas from the supported keyword set (seeded: the same --seed gives the same
 * schemas), compiles each, and samples --samples outputs under its grammar at temperature
 * 1 from random logits over a model's vocabulary (no forward pass: the grammar, not the
 * model, is under test, and random logits reach odd corners of it). Writes one JSON line
 * per schema: {"id", "schema", "outputs": [...]} when it compiled (with "unfinished" if an
 * output did not end by itself), or {"id", "schema", "error"} when it was refused.
 *   cpulm-schema-prop MODEL.gguf [--count N] [--seed S] [--samples K] [--max-tokens T]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/json.h"
#include "cpulm.h"
#include "grammar/grammar.h"

/* ---- a small seeded generator (splitmix64) ---- */

static uint64_t g_rng;

static uint64_t rnd(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int pick(int n) {
    return (int)(rnd() % (uint64_t)n);
}

static int chance(int percent) {
    return pick(100) < percent;
}

static double unit(void) {
    return (double)(rnd() >> 11) / 9007199254740992.0;
}

/* ---- random schemas, written as JSON text ---- */

static void schema(cpulm_buf *b, int depth, const char *want);
static int g_defs; /* $defs a $ref may name: d0 .. d(g_defs - 1) (no reference cycles) */

static const char *const WORDS[] = {"a", "b", "id", "name", "x y", "k\\u00e9y", "n", "tag"};
#define N_WORDS 8

static void key(cpulm_buf *b, const char *k) {
    cpulm_buf_printf(b, "\"%s\":", k);
}

/* A number bound: an integer, a fraction with few digits, a small decimal, a tiny or a
 * large one (ranges near the 15-digit limit of generated numbers). */
static double bound(void) {
    switch (pick(7)) {
    case 0: return (double)(pick(201) - 100);
    case 1: return (double)(pick(2001) - 1000) / 10.0;
    case 2: return (double)(pick(20001) - 10000) / 1000.0;
    case 3: return (double)(pick(2001) - 1000) * 1e-5;
    case 4: return (double)(pick(2001) - 1000) * 123456789.0123;
    case 5: return (double)(pick(3) - 1) * 0.1;
    default: return (double)(pick(11) - 5) * 0.25;
    }
}

static void put_num(cpulm_buf *b, double x) {
    char t[40];
    snprintf(t, sizeof t, "%.17g", x);
    for (int p = 1; p <= 17; p++) { /* the shortest text that reads back */
        snprintf(t, sizeof t, "%.*g", p, x);
        if (strtod(t, NULL) == x) break;
    }
    cpulm_buf_puts(b, t);
}

static void numeric_keywords(cpulm_buf *b, int integer) {
    static const double spans[4] = {1e-4, 2.0, 300.0, 1e9};
    double lo = bound(), hi = lo + (chance(20) ? 0.0 : unit() * spans[pick(4)]);
    if (integer && chance(50)) lo = (double)(int)lo, hi = (double)(int)hi;
    if (chance(70)) {
        cpulm_buf_puts(b, chance(30) ? ",\"exclusiveMinimum\":" : ",\"minimum\":");
        put_num(b, lo);
    }
    if (chance(70)) {
        cpulm_buf_puts(b, chance(30) ? ",\"exclusiveMaximum\":" : ",\"maximum\":");
        put_num(b, hi);
    }
}

static const char *const PATTERNS[] = {"^[a-z]{1,5}$",
                                       "^[A-Z][a-z]*$",
                                       "^\\\\d{3}-\\\\d{2}$",
                                       "ab",
                                       "^(foo|bar)+$",
                                       "^\\\\w+$",
                                       "^[^\\\\s]{1,8}$",
                                       "^.{2,4}$",
                                       "x\\\\.y",
                                       "^\\\\S+\\\\s\\\\S+$",
                                       "^[0-9a-f]{4}$",
                                       "^(ab)?c$",
                                       "q"};
#define N_PATTERNS 13
static const char *const FORMATS[] = {"date", "time", "date-time", "uuid"};

static void string_keywords(cpulm_buf *b) {
    int r = pick(10);
    if (r < 4) {
        int lo = pick(4), hi = lo + pick(6);
        if (chance(70)) cpulm_buf_printf(b, ",\"minLength\":%d", lo);
        if (chance(70)) cpulm_buf_printf(b, ",\"maxLength\":%d", hi);
    } else if (r < 6) {
        cpulm_buf_printf(b, ",\"pattern\":\"%s\"", PATTERNS[pick(N_PATTERNS)]);
    } else if (r < 8) {
        cpulm_buf_printf(b, ",\"format\":\"%s\"", FORMATS[pick(4)]);
    }
}

/* A literal value of a random kind (for enum and const). */
static void literal(cpulm_buf *b) {
    static const char *const STR[] = {
        "\"\"",   "\"a\"", "\"bb\"", "\"ccc\"", "\"foo\"", "\"2024-01-31\"", "\"\\u00e9t\\u00e9\"",
        "\"x y\""};
    switch (pick(8)) {
    case 0:
    case 1:
    case 2: cpulm_buf_puts(b, STR[pick(8)]); break;
    case 3: cpulm_buf_printf(b, "%d", pick(21) - 10); break;
    case 4: put_num(b, bound()); break;
    case 5: cpulm_buf_puts(b, chance(50) ? "true" : (chance(50) ? "false" : "null")); break;
    case 6: cpulm_buf_printf(b, "[%d,\"a\"]", pick(3)); break;
    default: cpulm_buf_printf(b, "{\"a\":%d}", pick(3)); break;
    }
}

static void literals(cpulm_buf *b) {
    if (chance(30)) {
        cpulm_buf_puts(b, "\"const\":");
        literal(b);
        return;
    }
    int n = 1 + pick(5);
    cpulm_buf_puts(b, "\"enum\":[");
    for (int i = 0; i < n; i++) {
        if (i) cpulm_buf_putc(b, ',');
        literal(b);
    }
    cpulm_buf_putc(b, ']');
}

static const char *const TYPES[] = {"string", "integer", "number", "boolean",
                                    "null",   "object",  "array"};

/* Keywords of one type (after a "type" already written), with a leading comma each. */
static void type_keywords(cpulm_buf *b, const char *t, int depth) {
    if (!strcmp(t, "string")) string_keywords(b);
    if (!strcmp(t, "integer") || !strcmp(t, "number")) numeric_keywords(b, t[0] == 'i');
    if (!strcmp(t, "array")) {
        if (chance(20) && depth > 0) {
            int n = 1 + pick(3);
            cpulm_buf_puts(b, ",\"prefixItems\":[");
            for (int i = 0; i < n; i++) {
                if (i) cpulm_buf_putc(b, ',');
                schema(b, depth - 1, NULL);
            }
            cpulm_buf_putc(b, ']');
            return;
        }
        if (chance(80) && depth > 0) {
            cpulm_buf_puts(b, ",\"items\":");
            schema(b, depth - 1, NULL);
        }
        int lo = pick(3);
        if (chance(50)) cpulm_buf_printf(b, ",\"minItems\":%d", lo);
        if (chance(50)) cpulm_buf_printf(b, ",\"maxItems\":%d", lo + pick(4));
    }
    if (!strcmp(t, "object")) {
        int n = depth > 0 ? pick(4) : 0;
        int first = pick(N_WORDS);
        if (n) {
            cpulm_buf_puts(b, ",\"properties\":{");
            for (int i = 0; i < n; i++) {
                if (i) cpulm_buf_putc(b, ',');
                key(b, WORDS[(first + i) % N_WORDS]);
                schema(b, depth - 1, NULL);
            }
            cpulm_buf_putc(b, '}');
        }
        if (chance(60)) {
            int nr = pick(n + 2);
            cpulm_buf_puts(b, ",\"required\":[");
            for (int i = 0; i < nr; i++)
                cpulm_buf_printf(b, "%s\"%s\"", i ? "," : "",
                                 WORDS[(first + (i < n ? i : n + pick(3))) % N_WORDS]);
            cpulm_buf_putc(b, ']');
        }
        int a = pick(4);
        if (a == 1) cpulm_buf_puts(b, ",\"additionalProperties\":false");
        if (a == 2) cpulm_buf_puts(b, ",\"additionalProperties\":true");
        if (a == 3 && depth > 0) {
            cpulm_buf_puts(b, ",\"additionalProperties\":");
            schema(b, depth - 1, NULL);
        }
    }
}

/* A list of n subschemas for anyOf/oneOf/allOf, mostly of type t if given. */
static void list(cpulm_buf *b, const char *kw, int n, int depth, const char *t) {
    cpulm_buf_printf(b, "\"%s\":[", kw);
    for (int i = 0; i < n; i++) {
        if (i) cpulm_buf_putc(b, ',');
        schema(b, depth, t && chance(80) ? t : NULL);
    }
    cpulm_buf_putc(b, ']');
}

/* Keywords of type t beside a combinator or a literal list. */
static void siblings(cpulm_buf *b, int depth, const char *t) {
    if (!t) return;
    cpulm_buf_printf(b, ",\"type\":\"%s\"", t);
    type_keywords(b, t, depth);
}

/* A schema (of type want, if not NULL, most of the time). */
static void schema(cpulm_buf *b, int depth, const char *want) {
    int r = pick(100);
    const char *t = want ? want : chance(50) ? TYPES[pick(7)] : NULL;
    cpulm_buf_putc(b, '{');
    if (r < 12) { /* enum / const, maybe with other keywords */
        literals(b);
        siblings(b, depth, t);
    } else if (r < 20 && depth > 0) {
        list(b, "anyOf", 1 + pick(3), depth - 1, t);
        siblings(b, depth - 1, t);
    } else if (r < 26 && depth > 0) {
        list(b, "oneOf", 1 + pick(3), depth - 1, t);
        siblings(b, depth - 1, t);
    } else if (r < 34 && depth > 0) {
        list(b, "allOf", 1 + pick(3), depth - 1, t);
        siblings(b, depth - 1, t);
    } else if (r < 40 && g_defs > 0) {
        cpulm_buf_printf(b, "\"$ref\":\"#/$defs/d%d\"", pick(g_defs));
        siblings(b, depth > 0 ? depth - 1 : 0, chance(50) ? t : NULL);
    } else if (r < 46) { /* a list of types: keywords of both (number and integer: once) */
        int a = pick(7), c = (a + 1 + pick(6)) % 7;
        cpulm_buf_printf(b, "\"type\":[\"%s\",\"%s\"]", TYPES[a], TYPES[c]);
        type_keywords(b, TYPES[a], depth);
        if (!((a == 1 || a == 2) && (c == 1 || c == 2))) type_keywords(b, TYPES[c], depth);
    } else if (r < 50 && !want) {
        cpulm_buf_puts(b, "\"description\":\"any\"");
    } else {
        t = t ? t : TYPES[pick(7)];
        cpulm_buf_printf(b, "\"type\":\"%s\"", t);
        type_keywords(b, t, depth);
    }
    cpulm_buf_putc(b, '}');
}

static void root_schema(cpulm_buf *b) {
    g_defs = 0;
    cpulm_buf_puts(b, "{\"$defs\":{\"d0\":");
    schema(b, 1, NULL);
    g_defs = 1;
    cpulm_buf_puts(b, ",\"d1\":");
    if (chance(20)) /* recursive: a tree */
        cpulm_buf_puts(b, "{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                          "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/d1\"},"
                          "\"maxItems\":2}},\"required\":[\"v\"]}");
    else
        schema(b, 1, NULL);
    g_defs = 2;
    if (chance(50)) { /* the root's own keywords beside $defs */
        cpulm_buf_puts(b, "},");
        size_t at = b->len;
        schema(b, 2 + pick(2), NULL);
        memmove(b->data + at, b->data + at + 1, b->len - at); /* its '{' dropped */
        b->len--;
        return;
    }
    cpulm_buf_puts(b, "},\"allOf\":[");
    schema(b, 2 + pick(2), NULL);
    cpulm_buf_puts(b, "]}");
}

/* ---- sampling under the grammar ---- */

typedef struct sampler_env {
    const cpulm_model *m;
    const cpulm_grammar_vocab *v;
    int n_vocab, max_tokens;
    float *logits;
} sampler_env;

/* One output under g; *done = 1 when it ended by itself (end token or nothing can follow). */
static char *sample(sampler_env *e, const cpulm_grammar *g, uint64_t seed, int *done) {
    cpulm_sampler_params sp = cpulm_sampler_default_params();
    sp.temp = 1.0f, sp.top_k = 0, sp.top_p = 1.0f, sp.min_p = 0.0f, sp.seed = seed;
    cpulm_sampler *smp = cpulm_sampler_new(&sp, e->n_vocab);
    cpulm_grammar_matcher *gm = cpulm_grammar_matcher_new(g, e->v);
    if (gm) cpulm_grammar_matcher_set_budget(gm, e->max_tokens);
    cpulm_detok dt;
    cpulm_detok_init(&dt, e->m, 0);
    cpulm_buf out;
    cpulm_buf_init(&out, 0);
    char piece[256];
    *done = 0;
    for (int i = 0; i < e->max_tokens && smp && gm; i++) {
        const uint32_t *mask = cpulm_grammar_mask(gm);
        if (!mask) break;
        for (int k = 0; k < e->n_vocab; k++)
            e->logits[k] = (float)(unit() * 6.0 - 3.0);
        cpulm_token t = cpulm_sampler_sample_masked(smp, e->logits, mask);
        if (cpulm_token_is_eog(e->m, t)) {
            *done = cpulm_grammar_complete(gm);
            break;
        }
        if (cpulm_grammar_accept_token(gm, t) != CPULM_OK) break;
        int32_t n = cpulm_detok_push(&dt, t, piece, sizeof piece);
        if (n > 0) cpulm_buf_append(&out, piece, (size_t)n);
        if (cpulm_grammar_must_end(gm)) {
            *done = 1;
            break;
        }
    }
    int32_t n = cpulm_detok_flush(&dt, piece, sizeof piece);
    if (n > 0) cpulm_buf_append(&out, piece, (size_t)n);
    cpulm_grammar_matcher_free(gm);
    cpulm_sampler_free(smp);
    return cpulm_buf_detach(&out, NULL);
}

/* Compiles schema text and writes its line. */
static void one(sampler_env *e, int id, const cpulm_buf *text, int samples, cpulm_buf *line) {
    cpulm_json_doc *d = NULL;
    cpulm_error err = {0};
    cpulm_buf_reset(line);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, line, 0, 0);
    cpulm_json_obj_begin(&w);
    cpulm_json_key(&w, "id");
    cpulm_json_write_int(&w, id);
    cpulm_json_key(&w, "schema");
    cpulm_json_write_raw(&w, text->data, text->len);
    cpulm_buf gbnf;
    cpulm_buf_init(&gbnf, 0);
    cpulm_grammar *g = NULL;
    cpulm_status st = cpulm_json_parse(text->data, text->len, NULL, &d, NULL, &err);
    if (st == CPULM_OK) st = cpulm_grammar_from_schema(cpulm_json_root(d), &gbnf, &err);
    if (st == CPULM_OK) st = cpulm_grammar_parse(gbnf.data, gbnf.len, NULL, &g, &err);
    if (st != CPULM_OK) {
        cpulm_json_key(&w, "error");
        cpulm_json_write_str(&w, err.msg);
    } else {
        int unfinished = 0;
        cpulm_json_key(&w, "outputs");
        cpulm_json_arr_begin(&w);
        for (int s = 0; s < samples; s++) {
            int done;
            char *o = sample(e, g, (uint64_t)id * 1000003u + (uint64_t)s, &done);
            cpulm_json_write_str(&w, o ? o : "");
            unfinished += !done;
            free(o);
        }
        cpulm_json_arr_end(&w);
        cpulm_json_key(&w, "unfinished");
        cpulm_json_write_int(&w, unfinished);
    }
    cpulm_json_obj_end(&w);
    cpulm_buf_putc(line, '\n');
    fwrite(line->data, 1, line->len, stdout);
    cpulm_grammar_free(g);
    cpulm_buf_release(&gbnf);
    cpulm_json_free(d);
}

int main(int argc, char **argv) {
    int count = 200, samples = 3;
    uint64_t seed = 1;
    sampler_env e = {.max_tokens = 160};
    if (argc < 2) {
        fprintf(stderr,
                "usage: %s MODEL.gguf [--count N] [--seed S] [--samples K] "
                "[--max-tokens T]\n",
                argv[0]);
        return 2;
    }
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--count"))
            count = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed"))
            seed = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--samples"))
            samples = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--max-tokens"))
            e.max_tokens = atoi(argv[i + 1]);
        else
            return fprintf(stderr, "unknown option %s\n", argv[i]), 2;
    }
    cpulm_model *m = cpulm_model_load(argv[1], NULL, NULL);
    if (!m) return fprintf(stderr, "cannot load %s\n", argv[1]), 1;
    e.m = m;
    e.n_vocab = cpulm_vocab_n(m);
    cpulm_grammar_vocab *v = cpulm_grammar_vocab_new(m);
    e.v = v;
    e.logits = malloc(sizeof(float) * (size_t)e.n_vocab);
    if (!v || !e.logits) return fprintf(stderr, "out of memory\n"), 1;
    cpulm_buf text, line;
    cpulm_buf_init(&text, 0);
    cpulm_buf_init(&line, 0);
    for (int i = 0; i < count; i++) {
        g_rng = seed * 0x100000001B3ULL + (uint64_t)i; /* schema i alone reproduces */
        cpulm_buf_reset(&text);
        root_schema(&text);
        one(&e, i, &text, samples, &line);
    }
    cpulm_buf_release(&text);
    cpulm_buf_release(&line);
    free(e.logits);
    cpulm_grammar_vocab_free(v);
    cpulm_model_free(m);
    return 0;
}
