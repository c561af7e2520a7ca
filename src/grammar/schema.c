/* schema.c: JSON schema -> GBNF (see grammar.h for the supported subset).
 *
 * Every generated grammar is sound: whatever it produces validates against the schema
 * (oneOf included: its branches must be provably disjoint, see check_one_of).
 * Where an exact grammar would be large, it is narrower instead (never wider): object
 * properties come in the schema's order and extra properties are not generated; "\s" in
 * a pattern is a space. Keywords outside the subset are refused by name rather than
 * ignored, so a request never gets unconstrained output while believing it is constrained.
 *
 * All keywords of a schema hold together. A schema with allOf, or with keywords beside
 * $ref/anyOf/oneOf, is a list of parts (gen_parts): allOf items and $ref targets are
 * inlined, anyOf/oneOf are distributed (each branch with every other part), and what is
 * left is merged keyword by keyword into one schema (schema_merge.c). Values of enum/const
 * are kept only if the grammar of the schema's other keywords accepts them. A part that
 * allows nothing (an empty range, no common type) is refused by name, or dropped when it
 * is one branch of several (sc_empty / sc_undo_empty).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/numrange.h"
#include "grammar/schema_int.h"

#define MAX_REFS   256
#define MAX_DEPTH  64
#define NUM_DIGITS 15 /* integer digits generated for unbounded numbers */
/* Steps the oneOf disjointness checks and the required-property lookups may take: they
 * compare pairs (branches, enum values, properties), so a hostile schema could make them
 * quadratic or, through $refs, exponential. Past this the schema is refused (LIMIT). */
#define MAX_WORK (1 << 22)

typedef struct sc {
    cpulm_buf *out;
    const cpulm_json *root;
    cpulm_error *err;
    int failed;
    cpulm_status code; /* the first failure's */
    int n_rules, depth;
    const char *ref_name[MAX_REFS];
    int ref_rule[MAX_REFS];
    int ref_nest[MAX_REFS];  /* nesting when the ref's generation began */
    char ref_open[MAX_REFS]; /* still being generated */
    int nesting;             /* arrays and objects entered (gen_array, gen_object) */
    int n_refs;
    uint64_t work;         /* see MAX_WORK */
    int empty;             /* the failure means "no value is valid here" (see sc_undo_empty) */
    cpulm_json_doc **docs; /* intersections written out and read back (gen_merged) */
    int n_docs, cap_docs;
    struct memo *memos; /* intersections generated, by merged text (gen_merged) */
    int n_memos, cap_memos;
    int nest;   /* compile_rest depth */
    int *n_sub; /* compile_rest calls, over all nesting */
} sc;

/* ---- shared base rules ---- */

static const char *BASE_RULES =
    "ws ::= ( \" \" | \"\\n\" \" \"{0,8} )?\n"
    "json-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-CefEF] "
    "[0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )\n"
    "json-string ::= \"\\\"\" json-char* \"\\\"\"\n"
    "json-int ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "json-number ::= json-int ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?\n"
    "json-bool ::= \"true\" | \"false\"\n"
    "json-null ::= \"null\"\n";

#define ANY_DEPTH 6 /* nesting of generic values (bounded, so output cannot nest forever) */

/* value0 .. value{ANY_DEPTH}: any JSON value nested at most ANY_DEPTH more levels. */
static void write_any_values(cpulm_buf *b) {
    for (int d = 0; d <= ANY_DEPTH; d++) {
        cpulm_buf_printf(b, "json-value%d ::= json-string | json-number | json-bool | json-null",
                         d);
        if (d < ANY_DEPTH) cpulm_buf_printf(b, " | json-object%d | json-array%d", d + 1, d + 1);
        cpulm_buf_puts(b, "\n");
        if (d == 0) continue;
        cpulm_buf_printf(b,
                         "json-object%d ::= \"{\" ws ( json-string \":\" ws json-value%d ( \",\" "
                         "ws json-string \":\" ws json-value%d )* ws )? \"}\"\n",
                         d, d, d);
        cpulm_buf_printf(b,
                         "json-array%d ::= \"[\" ws ( json-value%d ( \",\" ws json-value%d )* "
                         "ws )? \"]\"\n",
                         d, d, d);
    }
}

void cpulm_grammar_json_any(cpulm_buf *out, int object_only) {
    cpulm_buf_puts(out, object_only ? "root ::= json-object1\n" : "root ::= json-value0\n");
    cpulm_buf_puts(out, BASE_RULES);
    write_any_values(out);
}

/* ---- helpers ---- */

static int sc_fail(sc *c, cpulm_status code, const char *path, const char *fmt, ...)
    CPULM_PRINTF(4, 5);
static int sc_fail(sc *c, cpulm_status code, const char *path, const char *fmt, ...) {
    if (!c->failed) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        cpulm_errf(c->err, code, "%.200s at %.200s", msg, path[0] ? path : "#");
        c->code = code;
    }
    c->failed = 1;
    return -1;
}

/* A failure meaning that nothing is valid (an empty range, a required property that may
 * not appear): a branch of anyOf/oneOf/type that fails so is left out instead. */
static int sc_empty(sc *c, const char *path, const char *fmt, ...) CPULM_PRINTF(3, 4);
static int sc_empty(sc *c, const char *path, const char *fmt, ...) {
    if (c->failed) return -1;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", msg);
    c->empty = 1;
    return -1;
}

/* A GBNF string literal for bytes s[0..n). */
static void put_literal(cpulm_buf *b, const char *s, size_t n) {
    cpulm_buf_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            cpulm_buf_printf(b, "\\%c", ch);
        else if (ch < 0x20)
            cpulm_buf_printf(b, "\\x%02X", ch);
        else
            cpulm_buf_putc(b, (char)ch);
    }
    cpulm_buf_putc(b, '"');
}

/* A literal for the compact JSON text of v. */
static int put_json_literal(cpulm_buf *b, const cpulm_json *v) {
    cpulm_buf t;
    cpulm_buf_init(&t, 0);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, &t, 0, 0);
    cpulm_json_write_value(&w, v);
    int ok = cpulm_json_writer_status(&w) == CPULM_OK;
    if (ok) put_literal(b, t.data, t.len);
    cpulm_buf_release(&t);
    return ok ? 0 : -1;
}

static int new_rule(sc *c) {
    return c->n_rules++;
}

/* Emits "rN ::= body\n". */
static void define(sc *c, int r, const cpulm_buf *body) {
    cpulm_buf_printf(c->out, "r%d ::= %s\n", r, body->data);
}

static const char *const KNOWN[] = {"type",
                                    "properties",
                                    "required",
                                    "additionalProperties",
                                    "enum",
                                    "const",
                                    "anyOf",
                                    "oneOf",
                                    "allOf",
                                    "$ref",
                                    "$defs",
                                    "definitions",
                                    "items",
                                    "prefixItems",
                                    "minItems",
                                    "maxItems",
                                    "minLength",
                                    "maxLength",
                                    "pattern",
                                    "format",
                                    "minimum",
                                    "maximum",
                                    "exclusiveMinimum",
                                    "exclusiveMaximum",
                                    "title",
                                    "description",
                                    "default",
                                    "examples",
                                    "$schema",
                                    "$id",
                                    "$comment",
                                    "deprecated",
                                    "readOnly",
                                    "writeOnly",
                                    NULL};

static int check_keywords(sc *c, const cpulm_json *s, const char *path) {
    for (size_t i = 0; i < s->u.list.n; i++) {
        const char *k = s->u.list.items[i].key;
        int ok = 0;
        for (int j = 0; KNOWN[j] && !ok; j++)
            ok = !strcmp(k, KNOWN[j]);
        if (!ok)
            return sc_fail(c, CPULM_ERR_UNSUPPORTED, path, "unsupported JSON schema keyword '%s'",
                           k);
    }
    return 0;
}

static int gen(sc *c, const cpulm_json *s, const char *path);
static const cpulm_json *resolve(const sc *c, const char *ref);
static int check_one_of(sc *c, const cpulm_json *list, const char *path);

static void subpath(char *out, size_t cap, const char *path, const char *a, const char *b) {
    snprintf(out, cap, "%s/%s%s%s", path, a, b ? "/" : "", b ? b : "");
}

/* ---- integers ---- */

/* Alternatives for the integers in [lo, hi] (0 <= lo <= hi), no sign, no leading zeros. */
static void nonneg_range(cpulm_buf *b, uint64_t lo, uint64_t hi) {
    int first = 1;
    cpulm_buf_puts(b, "( ");
    for (uint64_t p = 1, len = 1; lo <= hi && len <= 19; len++, p *= 10) {
        uint64_t top = len == 19 ? UINT64_MAX : p * 10 - 1; /* largest len-digit number */
        if (lo > top) continue;
        uint64_t a = lo, z = hi < top ? hi : top;
        char sa[32], sz[32];
        snprintf(sa, sizeof sa, "%llu", (unsigned long long)a);
        snprintf(sz, sizeof sz, "%llu", (unsigned long long)z);
        if (!first) cpulm_buf_puts(b, " | ");
        cpulm_grammar_digits_range(b, sa, sz, strlen(sa));
        first = 0;
        if (z == hi) break;
        lo = z + 1;
    }
    cpulm_buf_puts(b, " )");
}

/* Integers in [lo, hi] (int64; INT64_MIN/MAX = unbounded, cut to 16 digits). */
static void int_range(cpulm_buf *b, int64_t lo, int64_t hi) {
    const int64_t CAP = 999999999999999LL; /* 15 digits: exact in a double */
    if (lo < -CAP) lo = -CAP;
    if (hi > CAP) hi = CAP;
    cpulm_buf_puts(b, "( ");
    int any = 0;
    if (hi >= 0) {
        nonneg_range(b, (uint64_t)(lo > 0 ? lo : 0), (uint64_t)hi);
        any = 1;
    }
    if (lo < 0) {
        int64_t m_lo = hi < 0 ? -hi : 1, m_hi = -lo;
        cpulm_buf_printf(b, "%s\"-\" ", any ? " | " : "");
        nonneg_range(b, (uint64_t)m_lo, (uint64_t)m_hi);
    }
    cpulm_buf_puts(b, " )");
}

/* The bound keywords s has, quoted, for messages ("'minimum', 'exclusiveMaximum'"). */
static const char *bound_names(const cpulm_json *s, char *buf, size_t cap) {
    static const char *keys[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    size_t n = 0;
    buf[0] = 0;
    for (int k = 0; k < 4; k++)
        if (cpulm_json_get(s, keys[k]) && n < cap)
            n += (size_t)snprintf(buf + n, cap - n, "%s'%s'", n ? ", " : "", keys[k]);
    return buf;
}

/* Reads minimum/maximum and their exclusive forms: the tightest lower bound lo (strict if
 * *slo) and upper bound hi. Unbounded ends are +-inf. -1 (failed) on a bad value. */
static int num_bounds(sc *c, const cpulm_json *s, const char *path, double *lo, int *slo,
                      double *hi, int *shi) {
    static const char *keys[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    *lo = -INFINITY, *hi = INFINITY, *slo = *shi = 0;
    for (int k = 0; k < 4; k++) {
        const cpulm_json *v = cpulm_json_get(s, keys[k]);
        if (!v) continue;
        if (v->type != CPULM_JSON_NUMBER || !isfinite(v->u.num.f) || fabs(v->u.num.f) > 1e15)
            return sc_fail(c, CPULM_ERR_UNSUPPORTED, path, "'%s' must be a number within 1e15",
                           keys[k]);
        double x = v->u.num.f;
        int strict = k & 1;
        if (k < 2 && (x > *lo || (x == *lo && strict))) *lo = x, *slo = strict;
        if (k >= 2 && (x < *hi || (x == *hi && strict))) *hi = x, *shi = strict;
    }
    return 0;
}

static int empty_range(sc *c, const cpulm_json *s, const char *path, const char *what) {
    char names[128];
    return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s: no %s in the range",
                   bound_names(s, names, sizeof names), what);
}

/* Integer bounds [lo, hi] from the (maybe fractional, maybe exclusive) ones. */
static int int_bounds(sc *c, const cpulm_json *s, const char *path, int64_t *lo, int64_t *hi) {
    double flo, fhi;
    int slo, shi;
    if (num_bounds(c, s, path, &flo, &slo, &fhi, &shi) < 0) return -1;
    *lo = flo == -INFINITY ? INT64_MIN : (int64_t)(slo ? floor(flo) + 1 : ceil(flo));
    *hi = fhi == INFINITY ? INT64_MAX : (int64_t)(shi ? ceil(fhi) - 1 : floor(fhi));
    return *lo > *hi ? empty_range(c, s, path, "integer") : 0;
}

static int has_bounds(const cpulm_json *s) {
    return cpulm_json_get(s, "minimum") || cpulm_json_get(s, "maximum") ||
           cpulm_json_get(s, "exclusiveMinimum") || cpulm_json_get(s, "exclusiveMaximum");
}

static int gen_integer(sc *c, const cpulm_json *s, const char *path, cpulm_buf *body) {
    if (!has_bounds(s)) return cpulm_buf_puts(body, "json-int"), 0;
    int64_t lo, hi;
    if (int_bounds(c, s, path, &lo, &hi) < 0) return -1;
    if (lo > 999999999999999LL || hi < -999999999999999LL) /* past what is generated */
        return empty_range(c, s, path, "integer within 15 digits");
    int_range(body, lo, hi);
    return 0;
}

/* Numbers within the bounds, fractional and exclusive ones exactly (numrange.c). */
static int gen_number(sc *c, const cpulm_json *s, const char *path, cpulm_buf *body) {
    if (!has_bounds(s)) return cpulm_buf_puts(body, "json-number"), 0;
    double lo, hi;
    int slo, shi;
    if (num_bounds(c, s, path, &lo, &slo, &hi, &shi) < 0) return -1;
    int r = cpulm_grammar_number_range(body, lo, slo, hi, shi);
    if (r < 0) {
        char names[128];
        return sc_fail(c, CPULM_ERR_UNSUPPORTED, path,
                       "%s: bounds with more than 24 fraction digits are not supported",
                       bound_names(s, names, sizeof names));
    }
    return r == 0 ? empty_range(c, s, path, "number") : 0;
}

/* ---- strings ---- */

static const char *format_rule(const char *f) {
    static const char *DATE =
        "[0-9]{4} \"-\" ( ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" "
        "[0-8] ) | ( \"0\" [13-9] | \"1\" [0-2] ) \"-\" ( \"29\" | \"30\" ) | ( \"0\" [13578] | "
        "\"1\" [02] ) \"-31\" )";
    static const char *TIME =
        "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? "
        "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )";
    static const char *UUID =
        "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}";
    if (!strcmp(f, "date")) return DATE;
    if (!strcmp(f, "time")) return TIME;
    if (!strcmp(f, "uuid")) return UUID;
    return NULL;
}

static int gen_string(sc *c, const cpulm_json *s, const char *path, cpulm_buf *body) {
    const cpulm_json *fmt = cpulm_json_get(s, "format"), *pat = cpulm_json_get(s, "pattern");
    const cpulm_json *mn = cpulm_json_get(s, "minLength"), *mx = cpulm_json_get(s, "maxLength");
    if ((fmt || pat) && (mn || mx))
        return sc_fail(c, CPULM_ERR_UNSUPPORTED, path, "%s",
                       "'minLength'/'maxLength' together with "
                       "'pattern' or 'format' are not supported");
    if (fmt && pat)
        return sc_fail(c, CPULM_ERR_UNSUPPORTED, path, "%s",
                       "'pattern' together with 'format' is not supported");
    if (fmt) {
        const char *f = cpulm_json_str(fmt);
        if (!f) return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "'format' must be a string");
        if (!strcmp(f, "date-time")) {
            cpulm_buf_printf(body, "\"\\\"\" %s \"T\" %s \"\\\"\"", format_rule("date"),
                             format_rule("time"));
            return 0;
        }
        if (!format_rule(f))
            return sc_fail(c, CPULM_ERR_UNSUPPORTED, path, "unsupported string format '%s'", f);
        cpulm_buf_printf(body, "\"\\\"\" %s \"\\\"\"", format_rule(f));
        return 0;
    }
    if (pat) {
        const char *p = cpulm_json_str(pat);
        if (!p) return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "'pattern' must be a string");
        cpulm_buf_puts(body, "\"\\\"\" ( ");
        cpulm_error e = {0};
        if (cpulm_grammar_from_regex(p, cpulm_json_len(pat), body, &e) != CPULM_OK)
            return sc_fail(c, e.code ? e.code : CPULM_ERR_UNSUPPORTED, path, "'pattern': %s",
                           e.msg);
        cpulm_buf_puts(body, " ) \"\\\"\"");
        return 0;
    }
    double lo = cpulm_json_num(mn, 0), hi = cpulm_json_num(mx, -1);
    if ((mn && (!mn->is_int || lo < 0 || lo > 4096)) ||
        (mx && (!mx->is_int || hi < 0 || hi > 4096)))
        return sc_fail(c, CPULM_ERR_UNSUPPORTED, path, "%s",
                       "'minLength'/'maxLength' must be integers in 0..4096");
    if (mx && hi < lo)
        return sc_empty(c, path, "%s", "'maxLength' < 'minLength': no string is valid");
    if (!mn && !mx) return cpulm_buf_puts(body, "json-string"), 0;
    if (mx)
        cpulm_buf_printf(body, "\"\\\"\" json-char{%d,%d} \"\\\"\"", (int)lo, (int)hi);
    else
        cpulm_buf_printf(body, "\"\\\"\" json-char{%d,} \"\\\"\"", (int)lo);
    return 0;
}

/* ---- arrays ---- */

static int gen_array_in(sc *c, const cpulm_json *s, const char *path, cpulm_buf *body) {
    const cpulm_json *items = cpulm_json_get(s, "items"),
                     *prefix = cpulm_json_get(s, "prefixItems");
    const cpulm_json *mn = cpulm_json_get(s, "minItems"), *mx = cpulm_json_get(s, "maxItems");
    double lo = cpulm_json_num(mn, 0), hi = cpulm_json_num(mx, -1);
    if ((mn && (!mn->is_int || lo < 0 || lo > 1024)) ||
        (mx && (!mx->is_int || hi < 0 || hi > 1024)))
        return sc_fail(c, CPULM_ERR_UNSUPPORTED, path, "%s",
                       "'minItems'/'maxItems' must be integers in 0..1024");
    if (mx && hi < lo) return sc_empty(c, path, "%s", "'maxItems' < 'minItems': no array is valid");
    char sub[512];
    if (prefix) { /* a tuple: exactly the prefix items (valid whatever items says) */
        if (prefix->type != CPULM_JSON_ARRAY || (double)prefix->u.list.n < lo ||
            (mx && (double)prefix->u.list.n > hi))
            return sc_fail(c, CPULM_ERR_UNSUPPORTED, path, "%s",
                           "'prefixItems' must be an array of a length within "
                           "'minItems'..'maxItems'");
        cpulm_buf_puts(body, "\"[\" ws");
        for (size_t i = 0; i < prefix->u.list.n; i++) {
            char idx[24];
            snprintf(idx, sizeof idx, "%zu", i);
            subpath(sub, sizeof sub, path, "prefixItems", idx);
            int r = gen(c, &prefix->u.list.items[i], sub);
            if (r < 0) return -1;
            cpulm_buf_printf(body, "%s r%d", i ? " \",\" ws" : "", r);
        }
        cpulm_buf_puts(body, " ws \"]\"");
        return 0;
    }
    int r;
    char item[32];
    if (items && items->type == CPULM_JSON_BOOL && !items->u.boolean) {
        if (lo > 0)
            return sc_empty(c, path, "%s", "'items' false with 'minItems' > 0: no array is valid");
        return cpulm_buf_puts(body, "\"[\" ws \"]\""), 0;
    }
    if (items && items->type != CPULM_JSON_BOOL) {
        subpath(sub, sizeof sub, path, "items", NULL);
        if ((r = gen(c, items, sub)) < 0) return -1;
        snprintf(item, sizeof item, "r%d", r);
    } else {
        snprintf(item, sizeof item, "json-value1");
    }
    int n_lo = (int)lo, n_hi = mx ? (int)hi : -1;
    if (n_hi == 0) return cpulm_buf_puts(body, "\"[\" ws \"]\""), 0;
    cpulm_buf_printf(body, "\"[\" ws ( %s ( \",\" ws %s )", item, item);
    if (n_hi < 0)
        cpulm_buf_printf(body, "{%d,}", n_lo > 0 ? n_lo - 1 : 0);
    else
        cpulm_buf_printf(body, "{%d,%d}", n_lo > 0 ? n_lo - 1 : 0, n_hi - 1);
    cpulm_buf_printf(body, " ws )%s \"]\"", n_lo == 0 ? "?" : "");
    return 0;
}

static int gen_array(sc *c, const cpulm_json *s, const char *path, cpulm_buf *body) {
    c->nesting++;
    int r = gen_array_in(c, s, path, body);
    c->nesting--;
    return r;
}

/* ---- objects ---- */

typedef struct prop {
    const char *key;
    size_t key_len;
    const cpulm_json *schema; /* NULL: any value */
    int required;
} prop;

static int is_required(const cpulm_json *req, const char *key) {
    for (size_t i = 0; i < cpulm_json_len(req); i++) {
        const char *k = cpulm_json_str(cpulm_json_at(req, i));
        if (k && !strcmp(k, key)) return 1;
    }
    return 0;
}

/* "key": value for property p, as a new rule. */
static int gen_kv(sc *c, const prop *p, const char *path) {
    char sub[512];
    snprintf(sub, sizeof sub, "%s/properties/%.200s", path, p->key);
    int v = -1;
    if (p->schema && (v = gen(c, p->schema, sub)) < 0) return -1;
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_buf q;
    cpulm_buf_init(&q, 0);
    cpulm_json_quote(&q, p->key, p->key_len, 0);
    put_literal(&b, q.data, q.len);
    cpulm_buf_release(&q);
    if (v >= 0)
        cpulm_buf_printf(&b, " \":\" ws r%d", v);
    else
        cpulm_buf_puts(&b, " \":\" ws json-value1");
    int r = new_rule(c);
    define(c, r, &b);
    cpulm_buf_release(&b);
    return r;
}

/* Properties in order: A_i = what may follow when nothing was written yet, B_i after
 * something was (so each later property takes a leading comma). */
static int gen_props(sc *c, const prop *ps, int n, const char *path, cpulm_buf *body) {
    int *kv = malloc(sizeof(int) * (size_t)(n + 1)), a_next = -1, b_next = -1;
    if (!kv) return sc_fail(c, CPULM_ERR_NOMEM, path, "%s", "out of memory");
    for (int i = 0; i < n; i++)
        if ((kv[i] = gen_kv(c, &ps[i], path)) < 0) return free(kv), -1;
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    for (int i = n - 1; i >= 0; i--) { /* a_next/b_next: A_{i+1}/B_{i+1} rule ids, -1 = "" */
        char an[24] = "\"\"", bn[24] = "\"\"";
        if (a_next >= 0) snprintf(an, sizeof an, "r%d", a_next);
        if (b_next >= 0) snprintf(bn, sizeof bn, "r%d", b_next);
        int ra = new_rule(c), rb = new_rule(c);
        cpulm_buf_reset(&b);
        if (ps[i].required)
            cpulm_buf_printf(&b, "r%d %s", kv[i], bn);
        else
            cpulm_buf_printf(&b, "r%d %s | %s", kv[i], bn, an);
        define(c, ra, &b);
        cpulm_buf_reset(&b);
        if (ps[i].required)
            cpulm_buf_printf(&b, "\",\" ws r%d %s", kv[i], bn);
        else
            cpulm_buf_printf(&b, "\",\" ws r%d %s | %s", kv[i], bn, bn);
        define(c, rb, &b);
        a_next = ra;
        b_next = rb;
    }
    cpulm_buf_release(&b);
    free(kv);
    if (a_next >= 0)
        cpulm_buf_printf(body, "\"{\" ws r%d ws \"}\"", a_next);
    else
        cpulm_buf_puts(body, "\"{\" ws \"}\"");
    return 0;
}

/* An object without properties or required names: any, none, or a map. */
static int gen_open_object(sc *c, const cpulm_json *add, const char *path, cpulm_buf *body) {
    if (add && add->type == CPULM_JSON_BOOL && !add->u.boolean)
        return cpulm_buf_puts(body, "\"{\" ws \"}\""), 0;
    if (add && add->type == CPULM_JSON_OBJECT) { /* a map: string keys, values of one schema */
        char sub[512];
        subpath(sub, sizeof sub, path, "additionalProperties", NULL);
        int v = gen(c, add, sub);
        if (v < 0) return -1;
        cpulm_buf_printf(body,
                         "\"{\" ws ( json-string \":\" ws r%d ( \",\" ws json-string \":\" ws "
                         "r%d )* ws )? \"}\"",
                         v, v);
        return 0;
    }
    return cpulm_buf_puts(body, "json-object1"), 0;
}

/* The properties to generate into ps[*n]: those of properties (in order; false ones left
 * out), then required names properties lacks, valued by additionalProperties. */
static int collect_props(sc *c, const cpulm_json *props, const cpulm_json *req,
                         const cpulm_json *add, prop *ps, int *n, const char *path) {
    for (size_t i = 0; i < cpulm_json_len(props); i++) {
        const cpulm_json *p = &props->u.list.items[i];
        if (p->type == CPULM_JSON_BOOL && !p->u.boolean) continue; /* may not appear */
        ps[(*n)++] = (prop){p->key, p->key_len, p, is_required(req, p->key)};
    }
    for (size_t i = 0; i < cpulm_json_len(req); i++) {
        const cpulm_json *k = cpulm_json_at(req, i);
        if (!cpulm_json_str(k))
            return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s",
                           "'required' items must be strings");
        const cpulm_json *p = cpulm_json_get(props, k->u.str.s);
        int dup = 0;
        for (int j = 0; j < *n && !dup; j++)
            dup = !strcmp(ps[j].key, k->u.str.s);
        if (dup) continue;
        if ((p && p->type == CPULM_JSON_BOOL && !p->u.boolean) ||
            (!p && add && add->type == CPULM_JSON_BOOL && !add->u.boolean))
            return sc_empty(c, path,
                            "'required' property '%.60s' is not allowed (%s false): no object "
                            "is valid",
                            k->u.str.s, p ? "its schema is" : "'additionalProperties'");
        ps[(*n)++] =
            (prop){k->u.str.s, k->u.str.len, add && add->type == CPULM_JSON_OBJECT ? add : NULL, 1};
    }
    return 0;
}

static int gen_object_in(sc *c, const cpulm_json *s, const char *path, cpulm_buf *body) {
    const cpulm_json *props = cpulm_json_get(s, "properties"), *req = cpulm_json_get(s, "required");
    const cpulm_json *add = cpulm_json_get(s, "additionalProperties");
    if (props && props->type != CPULM_JSON_OBJECT)
        return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "'properties' must be an object");
    if (req && req->type != CPULM_JSON_ARRAY)
        return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "'required' must be an array");
    size_t np = cpulm_json_len(props), nr = cpulm_json_len(req);
    if (np == 0 && nr == 0) return gen_open_object(c, add, path, body);
    c->work += (uint64_t)(np + 1) * (nr + 1) * 2; /* is_required / json_get / dedup scans */
    if (c->work > MAX_WORK)
        return sc_fail(c, CPULM_ERR_LIMIT, path,
                       "'properties': %zu properties and %zu required names: more than %d "
                       "steps to match (limit %d)",
                       np, nr, MAX_WORK, MAX_WORK);
    prop *ps = calloc(np + nr + 1, sizeof *ps);
    if (!ps) return sc_fail(c, CPULM_ERR_NOMEM, path, "%s", "out of memory");
    int n = 0;
    int rc = collect_props(c, props, req, add, ps, &n, path);
    if (rc == 0) rc = gen_props(c, ps, n, path, body);
    free(ps);
    return rc;
}

static int gen_object(sc *c, const cpulm_json *s, const char *path, cpulm_buf *body) {
    c->nesting++;
    int r = gen_object_in(c, s, path, body);
    c->nesting--;
    return r;
}

/* ---- combinators, references, dispatch ---- */

/* Resolves "#", "#/$defs/X", "#/definitions/X" (JSON pointer escapes ~0 ~1 in X). */
static const cpulm_json *resolve(const sc *c, const char *ref) {
    if (!strcmp(ref, "#")) return c->root;
    const char *defs = NULL;
    if (!strncmp(ref, "#/$defs/", 8))
        defs = "$defs", ref += 8;
    else if (!strncmp(ref, "#/definitions/", 14))
        defs = "definitions", ref += 14;
    else
        return NULL;
    char name[256];
    size_t n = 0;
    for (; *ref && n + 1 < sizeof name; ref++) {
        if (*ref == '/') return NULL; /* deeper pointers are not supported */
        if (*ref == '~' && (ref[1] == '0' || ref[1] == '1'))
            name[n++] = ref[1] == '0' ? '~' : '/', ref++;
        else
            name[n++] = *ref;
    }
    name[n] = 0;
    return cpulm_json_get(cpulm_json_get(c->root, defs), name);
}

/* ---- oneOf: exclusivity ----
 * A oneOf value must match exactly one branch. The grammar generates one branch's value,
 * so the branches must be disjoint: no value may validate under two of them. That is
 * decided conservatively on what each branch validates (never on what it generates, which
 * is narrower): different JSON kinds, const/enum literals with no common value, objects
 * with a property required by both whose value schemas are disjoint (a discriminator), or
 * objects where one requires a property the other forbids (additionalProperties false),
 * and disjoint number ranges. A oneOf not shown disjoint is refused (use anyOf), as
 * generating it as anyOf could produce a value matching two branches. */

enum {
    K_NULL = 1,
    K_BOOL = 2,
    K_INT = 4,
    K_FRAC = 8,
    K_STR = 16,
    K_ARR = 32,
    K_OBJ = 64,
    K_ALL = 127
};

static int value_kind(const cpulm_json *v) {
    switch (v->type) {
    case CPULM_JSON_NULL: return K_NULL;
    case CPULM_JSON_BOOL: return K_BOOL;
    case CPULM_JSON_NUMBER: return v->u.num.f == floor(v->u.num.f) ? K_INT : K_FRAC;
    case CPULM_JSON_STRING: return K_STR;
    case CPULM_JSON_ARRAY: return K_ARR;
    case CPULM_JSON_OBJECT: return K_OBJ;
    }
    return K_ALL;
}

static int type_kind(const char *t) {
    static const char *names[7] = {"null",   "boolean", "integer", "number",
                                   "string", "array",   "object"};
    static const int kinds[7] = {K_NULL, K_BOOL, K_INT, K_INT | K_FRAC, K_STR, K_ARR, K_OBJ};
    for (int i = 0; t && i < 7; i++)
        if (!strcmp(t, names[i])) return kinds[i];
    return K_ALL;
}

/* s with $refs followed (NULL for an unresolvable one). */
static const cpulm_json *deref(const sc *c, const cpulm_json *s) {
    for (int hops = 0; s && s->type == CPULM_JSON_OBJECT && hops < 16; hops++) {
        const char *r = cpulm_json_str(cpulm_json_get(s, "$ref"));
        if (!r) return s;
        s = resolve(c, r);
    }
    return NULL;
}

/* The kinds of values s can validate (a superset: each keyword narrows it). */
static int val_kinds(sc *c, const cpulm_json *s, int depth) {
    c->work += 1 + cpulm_json_len(cpulm_json_get(s, "enum"));
    if (c->work > MAX_WORK) return K_ALL;              /* check_one_of then refuses the schema */
    if (depth > 8 || !(s = deref(c, s))) return K_ALL; /* bounded: recursive schemas */
    if (s->type == CPULM_JSON_BOOL) return s->u.boolean ? K_ALL : 0;
    if (s->type != CPULM_JSON_OBJECT) return K_ALL;
    int k = K_ALL;
    const cpulm_json *x;
    if ((x = cpulm_json_get(s, "const"))) k &= value_kind(x);
    static const char *lists[3] = {"enum", "anyOf", "oneOf"};
    for (int l = 0; l < 3; l++) {
        if (!(x = cpulm_json_get(s, lists[l])) || x->type != CPULM_JSON_ARRAY) continue;
        int u = 0;
        for (size_t i = 0; i < x->u.list.n; i++)
            u |= l == 0 ? value_kind(&x->u.list.items[i])
                        : val_kinds(c, &x->u.list.items[i], depth + 1);
        k &= u;
    }
    if ((x = cpulm_json_get(s, "allOf")) && x->type == CPULM_JSON_ARRAY)
        for (size_t i = 0; i < x->u.list.n; i++)
            k &= val_kinds(c, &x->u.list.items[i], depth + 1);
    if ((x = cpulm_json_get(s, "type"))) {
        int u = x->type == CPULM_JSON_STRING ? type_kind(x->u.str.s) : 0;
        for (size_t i = 0; x->type == CPULM_JSON_ARRAY && i < x->u.list.n; i++)
            u |= type_kind(cpulm_json_str(&x->u.list.items[i]));
        k &= x->type == CPULM_JSON_STRING || x->type == CPULM_JSON_ARRAY ? u : K_ALL;
    }
    return k;
}

/* The literal values s allows, if it is a const or an enum (else NULL). */
static const cpulm_json *literals(const cpulm_json *s, size_t *n) {
    const cpulm_json *x = cpulm_json_get(s, "const");
    if (x) return *n = 1, x;
    x = cpulm_json_get(s, "enum");
    if (x && x->type == CPULM_JSON_ARRAY) return *n = x->u.list.n, x->u.list.items;
    return NULL;
}

static int json_equal(const cpulm_json *a, const cpulm_json *b) {
    if (a->type != b->type) return 0;
    if (a->type == CPULM_JSON_NUMBER) return a->u.num.f == b->u.num.f;
    if (a->type == CPULM_JSON_BOOL) return a->u.boolean == b->u.boolean;
    if (a->type == CPULM_JSON_STRING)
        return a->u.str.len == b->u.str.len && !memcmp(a->u.str.s, b->u.str.s, a->u.str.len);
    return a->type == CPULM_JSON_NULL ? 1 : -1; /* containers: not compared (maybe equal) */
}

static int literals_disjoint(const cpulm_json *a, size_t na, const cpulm_json *b, size_t nb) {
    for (size_t i = 0; i < na; i++)
        for (size_t j = 0; j < nb; j++)
            if (json_equal(&a[i], &b[j]) != 0) return 0;
    return 1;
}

/* [lo, hi] of a numeric schema, with exclusive ends flagged. */
static void num_range(const cpulm_json *s, double r[2], int ex[2]) {
    const cpulm_json *x;
    r[0] = -INFINITY, r[1] = INFINITY, ex[0] = ex[1] = 0;
    if ((x = cpulm_json_get(s, "minimum")) && x->type == CPULM_JSON_NUMBER) r[0] = x->u.num.f;
    if ((x = cpulm_json_get(s, "exclusiveMinimum")) && x->type == CPULM_JSON_NUMBER &&
        x->u.num.f >= r[0])
        r[0] = x->u.num.f, ex[0] = 1;
    if ((x = cpulm_json_get(s, "maximum")) && x->type == CPULM_JSON_NUMBER) r[1] = x->u.num.f;
    if ((x = cpulm_json_get(s, "exclusiveMaximum")) && x->type == CPULM_JSON_NUMBER &&
        x->u.num.f <= r[1])
        r[1] = x->u.num.f, ex[1] = 1;
}

static int ranges_disjoint(const cpulm_json *a, const cpulm_json *b) {
    double ra[2], rb[2];
    int ea[2], eb[2];
    num_range(a, ra, ea);
    num_range(b, rb, eb);
    return ra[1] < rb[0] || (ra[1] == rb[0] && (ea[1] || eb[0])) || rb[1] < ra[0] ||
           (rb[1] == ra[0] && (eb[1] || ea[0]));
}

static int disjoint(sc *c, const cpulm_json *a, const cpulm_json *b, int depth);

/* Objects valid under a all lack a property every object valid under b has. */
static int forbids_required(const cpulm_json *a, const cpulm_json *b) {
    const cpulm_json *add = cpulm_json_get(a, "additionalProperties"),
                     *req = cpulm_json_get(b, "required");
    if (!add || add->type != CPULM_JSON_BOOL || add->u.boolean) return 0;
    for (size_t i = 0; i < cpulm_json_len(req); i++) {
        const char *k = cpulm_json_str(cpulm_json_at(req, i));
        if (k && !cpulm_json_get(cpulm_json_get(a, "properties"), k)) return 1;
    }
    return 0;
}

/* Objects: a property required by both with disjoint value schemas, or a required one
 * that the other forbids. */
static int objects_disjoint(sc *c, const cpulm_json *a, const cpulm_json *b, int depth) {
    if (forbids_required(a, b) || forbids_required(b, a)) return 1;
    const cpulm_json *req = cpulm_json_get(a, "required");
    for (size_t i = 0; i < cpulm_json_len(req); i++) {
        const char *k = cpulm_json_str(cpulm_json_at(req, i));
        const cpulm_json *pa = cpulm_json_get(cpulm_json_get(a, "properties"), k);
        const cpulm_json *pb = cpulm_json_get(cpulm_json_get(b, "properties"), k);
        if (k && pa && pb && is_required(cpulm_json_get(b, "required"), k) &&
            disjoint(c, pa, pb, depth + 1))
            return 1;
    }
    return 0;
}

/* No value validates under both a and b (conservative: 0 when unsure). */
static int disjoint(sc *c, const cpulm_json *a, const cpulm_json *b, int depth) {
    if (depth > 8 || ++c->work > MAX_WORK) return 0;
    int common = val_kinds(c, a, depth) & val_kinds(c, b, depth);
    if (common == 0) return 1;
    if (!(a = deref(c, a)) || !(b = deref(c, b)) || a->type != CPULM_JSON_OBJECT ||
        b->type != CPULM_JSON_OBJECT)
        return 0;
    size_t na = 0, nb = 0;
    const cpulm_json *la = literals(a, &na), *lb = literals(b, &nb);
    c->work += (uint64_t)na * nb;
    if (la && lb && c->work <= MAX_WORK && literals_disjoint(la, na, lb, nb)) return 1;
    if (common == K_OBJ) return objects_disjoint(c, a, b, depth);
    if ((common & ~(K_INT | K_FRAC)) == 0) return ranges_disjoint(a, b);
    return 0;
}

static int check_one_of(sc *c, const cpulm_json *list, const char *path) {
    if (list->type != CPULM_JSON_ARRAY) return 0; /* gen_distributed reports it */
    for (size_t i = 0; i < list->u.list.n; i++)
        for (size_t j = i + 1; j < list->u.list.n; j++) {
            int d = disjoint(c, &list->u.list.items[i], &list->u.list.items[j], 0);
            if (c->work > MAX_WORK)
                return sc_fail(c, CPULM_ERR_LIMIT, path,
                               "'oneOf' takes more than %d steps to check (limit %d: fewer "
                               "branches, or anyOf)",
                               MAX_WORK, MAX_WORK);
            if (!d)
                return sc_fail(c, CPULM_ERR_UNSUPPORTED, path,
                               "'oneOf' branches %zu and %zu may match the same value (use "
                               "anyOf, or tell them apart by type, a required const/enum "
                               "property or disjoint number ranges)",
                               i, j);
        }
    return 0;
}

static int gen_ref(sc *c, const char *ref, const char *path) {
    for (int i = 0; i < c->n_refs; i++) {
        if (strcmp(c->ref_name[i], ref)) continue;
        if (c->ref_open[i] && c->ref_nest[i] == c->nesting) /* d ::= ... | d: adds nothing */
            return sc_empty(c, path,
                            "'$ref' '%.100s' refers to itself outside any array or object: no "
                            "value comes from it",
                            ref);
        return c->ref_rule[i];
    }
    const cpulm_json *target = resolve(c, ref);
    if (!target)
        return sc_fail(c, CPULM_ERR_UNSUPPORTED, path,
                       "'$ref': unresolvable or unsupported reference '%.100s'", ref);
    if (c->n_refs >= MAX_REFS)
        return sc_fail(c, CPULM_ERR_UNSUPPORTED, path, "'$ref': more than %d references", MAX_REFS);
    int r = new_rule(c); /* named before generating, so recursive references find it */
    int k = c->n_refs++;
    c->ref_name[k] = ref, c->ref_rule[k] = r, c->ref_nest[k] = c->nesting, c->ref_open[k] = 1;
    int inner = gen(c, target, ref);
    if (inner < 0) return -1;
    c->ref_open[k] = 0;
    cpulm_buf_printf(c->out, "r%d ::= r%d\n", r, inner);
    return r;
}

/* One JSON type (with the schema's other keywords). */
static int gen_type(sc *c, const cpulm_json *s, const char *t, const char *path, cpulm_buf *body) {
    if (!strcmp(t, "string")) return gen_string(c, s, path, body);
    if (!strcmp(t, "integer")) return gen_integer(c, s, path, body);
    if (!strcmp(t, "number")) return gen_number(c, s, path, body);
    if (!strcmp(t, "boolean")) return cpulm_buf_puts(body, "json-bool"), 0;
    if (!strcmp(t, "null")) return cpulm_buf_puts(body, "json-null"), 0;
    if (!strcmp(t, "object")) return gen_object(c, s, path, body);
    if (!strcmp(t, "array")) return gen_array(c, s, path, body);
    return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "'type': unknown type '%s'", t);
}

/* ---- undoing a branch that allows nothing ----
 * Under anyOf/oneOf or a list of types, a branch may allow no value once the schema's
 * other keywords apply (anyOf [string, integer] beside "type": "string"). It is left out:
 * its rules and $refs are undone, and generation goes on. Only if every branch is empty
 * is the schema refused. */

typedef struct mark {
    size_t out, body;
    int n_refs, n_memos;
} mark;

/* One intersection's rule, so recursion through it (a $ref inlined beside other keywords
 * inside its own target) refers back to the rule instead of inlining forever. */
typedef struct memo {
    char *text; /* the merged schema */
    int rule, nesting, open;
} memo;

static void drop_memos(sc *c, int from) {
    for (int i = from; i < c->n_memos; i++)
        free(c->memos[i].text);
    c->n_memos = from < c->n_memos ? from : c->n_memos;
}

static mark sc_mark(const sc *c, const cpulm_buf *body) {
    return (mark){c->out->len, body->len, c->n_refs, c->n_memos};
}

/* After a failure: if it only meant "nothing is valid here", undoes it and returns 1. */
static int sc_undo_empty(sc *c, mark m, cpulm_buf *body, char *why, size_t cap) {
    if (!c->failed || !c->empty) return 0;
    if (why && c->err) snprintf(why, cap, "%s", c->err->msg);
    c->out->len = m.out, body->len = m.body, c->n_refs = m.n_refs;
    drop_memos(c, m.n_memos);
    if (c->out->data) c->out->data[m.out] = 0;
    if (body->data) body->data[m.body] = 0;
    c->failed = c->empty = 0;
    c->code = CPULM_OK;
    return 1;
}

static int gen_types(sc *c, const cpulm_json *s, const cpulm_json *type, const char *path,
                     cpulm_buf *body) {
    if (type->type == CPULM_JSON_STRING) return gen_type(c, s, type->u.str.s, path, body);
    if (type->type != CPULM_JSON_ARRAY || type->u.list.n == 0)
        return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s",
                       "'type' must be a string or a non-empty array");
    char why[256] = "";
    int n = 0;
    cpulm_buf_puts(body, "( ");
    for (size_t i = 0; i < type->u.list.n; i++) {
        const char *t = cpulm_json_str(&type->u.list.items[i]);
        if (!t)
            return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "'type' items must be strings");
        mark m = sc_mark(c, body);
        if (n) cpulm_buf_puts(body, " | ");
        if (gen_type(c, s, t, path, body) < 0 && !sc_undo_empty(c, m, body, why, sizeof why))
            return -1;
        n += body->len > m.body;
    }
    cpulm_buf_puts(body, " )");
    return n ? 0 : sc_empty(c, path, "'type': no listed type allows a value (%s)", why);
}

/* ---- intersections: allOf, and keywords beside $ref, anyOf, oneOf, enum, const ---- */

#define MAX_PARTS  64   /* schemas in one intersection */
#define MAX_INLINE 16   /* $refs followed to inline their targets into one */
#define MAX_SUB    64   /* enum/const value checks (each compiles the other keywords) */
#define MAX_DOCS   4096 /* intersections written out and read back */

typedef cpulm_grammar_part part;

#define KW(s, skip, k) cpulm_grammar_schema_kw((s), (skip), (k))

/* Keywords of s that constrain values, other than those in skip. */
static int n_constraints(const cpulm_json *s, unsigned skip) {
    int n = 0;
    for (size_t i = 0; s->type == CPULM_JSON_OBJECT && i < s->u.list.n; i++) {
        const char *k = s->u.list.items[i].key;
        n += !cpulm_grammar_schema_annotation(k) && KW(s, skip, k) != NULL;
    }
    return n;
}

/* s is not one plain schema: gen_parts must combine its keywords. */
static int needs_parts(const cpulm_json *s, unsigned skip) {
    if (s->type != CPULM_JSON_OBJECT) return 0;
    if (KW(s, skip, "allOf") || KW(s, skip, "anyOf") || KW(s, skip, "oneOf")) return 1;
    return KW(s, skip, "$ref") && n_constraints(s, skip) > 1;
}

static int gen_body(sc *c, const cpulm_json *s, unsigned skip, const char *path, cpulm_buf *body);
static int gen_parts(sc *c, const part *in, int n_in, const char *path, cpulm_buf *body);

/* Generates a rule for the intersection of p[0..n); returns its number or -1. */
static int gen_p(sc *c, const part *p, int n, const char *path) {
    if (c->failed) return -1;
    if (++c->depth > MAX_DEPTH)
        return c->depth--, sc_fail(c, CPULM_ERR_UNSUPPORTED, path, "%s",
                                   "'properties'/'items'/'$ref': schema nested too deeply");
    cpulm_buf body;
    cpulm_buf_init(&body, 0);
    int rc = n == 1 ? gen_body(c, p->s, p->skip, path, &body) : gen_parts(c, p, n, path, &body);
    int r = -1;
    if (rc == 0 && !c->failed) {
        r = new_rule(c);
        define(c, r, &body);
    }
    cpulm_buf_release(&body);
    c->depth--;
    return c->failed ? -1 : r;
}

/* Generates a rule for schema s; returns its number or -1. */
static int gen(sc *c, const cpulm_json *s, const char *path) {
    part p = {s, 0};
    return gen_p(c, &p, 1, path);
}

/* Appends in (its allOf items expanded, and with refs its $ref target, recursively) to
 * out[*n]. */
static int flatten(sc *c, part in, part *out, int *n, const char *path, int hops, int refs) {
    if (in.s->type == CPULM_JSON_BOOL)
        return in.s->u.boolean ? 0
                               : sc_empty(c, path, "%s", "'allOf': schema false allows nothing");
    if (in.s->type != CPULM_JSON_OBJECT)
        return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "a schema must be an object");
    if (check_keywords(c, in.s, path) < 0) return -1;
    const cpulm_json *all = KW(in.s, in.skip, "allOf"), *ref = KW(in.s, in.skip, "$ref");
    if (*n >= MAX_PARTS)
        return sc_fail(c, CPULM_ERR_LIMIT, path, "'allOf': more than %d schemas must hold together",
                       MAX_PARTS);
    out[(*n)++] = (part){in.s, in.skip | CPULM_SK_ALLOF | (refs ? CPULM_SK_REF : 0)};
    if (all && (all->type != CPULM_JSON_ARRAY || all->u.list.n == 0))
        return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "'allOf' must be a non-empty array");
    for (size_t i = 0; all && i < all->u.list.n; i++)
        if (flatten(c, (part){&all->u.list.items[i], 0}, out, n, path, hops, refs) < 0) return -1;
    if (!ref || !refs) return 0;
    const char *r = cpulm_json_str(ref);
    const cpulm_json *target = r ? resolve(c, r) : NULL;
    if (!target)
        return sc_fail(c, CPULM_ERR_UNSUPPORTED, path,
                       "'$ref': unresolvable or unsupported '%.100s'", r ? r : "(not a string)");
    if (hops >= MAX_INLINE)
        return sc_fail(c, CPULM_ERR_UNSUPPORTED, path,
                       "'$ref' beside other keywords: more than %d references to follow",
                       MAX_INLINE);
    return flatten(c, (part){target, 0}, out, n, path, hops + 1, refs);
}

/* p[i]'s alternatives (anyOf or oneOf), each with every other part: one rule each. */
static int gen_distributed(sc *c, const part *p, int n, int i, const char *key, unsigned bit,
                           const char *path, cpulm_buf *body) {
    const cpulm_json *alts = KW(p[i].s, p[i].skip, key);
    if (alts->type != CPULM_JSON_ARRAY || alts->u.list.n == 0)
        return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "'%s' must be a non-empty array", key);
    if (bit == CPULM_SK_ONEOF && check_one_of(c, alts, path) < 0) return -1;
    c->work += (uint64_t)alts->u.list.n * (uint64_t)n;
    if (c->work > MAX_WORK)
        return sc_fail(c, CPULM_ERR_LIMIT, path, "'%s': more than %d steps to combine", key,
                       MAX_WORK);
    part q[MAX_PARTS + 1];
    memcpy(q, p, sizeof *p * (size_t)n);
    q[i].skip |= bit;
    char why[256] = "", idx[24], sub[512];
    int kept = 0;
    cpulm_buf_puts(body, "( ");
    for (size_t j = 0; j < alts->u.list.n; j++) {
        q[n] = (part){&alts->u.list.items[j], 0};
        snprintf(idx, sizeof idx, "%zu", j);
        subpath(sub, sizeof sub, path, key, idx);
        mark m = sc_mark(c, body);
        int r = gen_p(c, q, n + 1, sub);
        if (r < 0 && !sc_undo_empty(c, m, body, why, sizeof why)) return -1;
        if (r >= 0) cpulm_buf_printf(body, "%sr%d", kept++ ? " | " : "", r);
    }
    cpulm_buf_puts(body, " )");
    return kept ? 0 : sc_empty(c, path, "'%s': no branch allows a value (%s)", key, why);
}

/* The parts merged into one schema (schema_merge.c), read back and generated. */
/* The rule already made for the merged schema text t, or -1 (-2: failed). */
static int find_memo(sc *c, const cpulm_buf *t, const char *path) {
    for (int i = 0; i < c->n_memos; i++) {
        if (++c->work > MAX_WORK || strcmp(c->memos[i].text, t->data)) continue;
        if (c->memos[i].open && c->memos[i].nesting == c->nesting) /* x ::= .. x, unnested */
            return sc_empty(c, path, "%s",
                            "'$ref' beside other keywords refers to itself outside any array "
                            "or object: no value comes from it"),
                   -2;
        return c->memos[i].rule;
    }
    return -1;
}

/* Remembers t as rule r (being generated); its index, or -1 (failed). */
static int add_memo(sc *c, const cpulm_buf *t, int r, const char *path) {
    if (c->n_memos == c->cap_memos) {
        int cap = c->cap_memos ? c->cap_memos * 2 : 16;
        memo *nm = realloc(c->memos, sizeof *nm * (size_t)cap);
        if (!nm) return sc_fail(c, CPULM_ERR_NOMEM, path, "%s", "out of memory");
        c->memos = nm, c->cap_memos = cap;
    }
    char *text = malloc(t->len + 1);
    if (!text) return sc_fail(c, CPULM_ERR_NOMEM, path, "%s", "out of memory");
    memcpy(text, t->data, t->len + 1);
    c->memos[c->n_memos] = (memo){text, r, c->nesting, 1};
    return c->n_memos++;
}

/* Keeps d until the end ($ref names in it are remembered). */
static int keep_doc(sc *c, cpulm_json_doc *d, const char *path) {
    if (c->n_docs == c->cap_docs) {
        int cap = c->cap_docs ? c->cap_docs * 2 : 16;
        cpulm_json_doc **nd = realloc(c->docs, sizeof *nd * (size_t)cap);
        if (!nd)
            return cpulm_json_free(d), sc_fail(c, CPULM_ERR_NOMEM, path, "%s", "out of memory");
        c->docs = nd, c->cap_docs = cap;
    }
    c->docs[c->n_docs++] = d;
    return 0;
}

/* The parts merged into one schema (schema_merge.c), read back and generated as a rule
 * (one per distinct merged schema). */
static int gen_merged(sc *c, const part *p, int n, const char *path, cpulm_buf *body) {
    cpulm_buf t;
    cpulm_buf_init(&t, 0);
    char msg[256];
    int rc = cpulm_grammar_schema_merge(p, n, &t, msg, sizeof msg), r = -1, k = -1;
    cpulm_json_doc *d = NULL;
    cpulm_error e = {0};
    if (rc == 0 && (r = find_memo(c, &t, path)) >= 0) cpulm_buf_printf(body, "r%d", r);
    if (rc == 0 && r == -1 && c->n_docs < MAX_DOCS)
        rc = cpulm_json_parse(t.data, t.len, NULL, &d, NULL, &e) == CPULM_OK ? 0 : -3;
    if (rc == 0 && r == -1 && d && keep_doc(c, d, path) == 0)
        k = add_memo(c, &t, r = new_rule(c), path);
    cpulm_buf_release(&t);
    if (rc == -2) return sc_empty(c, path, "%s", msg);
    if (rc == -1) return sc_fail(c, CPULM_ERR_UNSUPPORTED, path, "%s", msg);
    if (rc < 0 || (r == -1 && !c->failed))
        return sc_fail(c, CPULM_ERR_LIMIT, path, "'allOf': combined schemas too large (%s)",
                       e.msg[0] ? e.msg : "too many");
    if (c->failed || k < 0) return c->failed ? -1 : 0; /* found (k < 0), or failed */
    cpulm_buf inner;
    cpulm_buf_init(&inner, 0);
    rc = gen_body(c, cpulm_json_root(d), 0, path, &inner);
    if (rc == 0 && !c->failed) {
        define(c, r, &inner);
        c->memos[k].open = 0;
        cpulm_buf_printf(body, "r%d", r);
    }
    cpulm_buf_release(&inner);
    return c->failed ? -1 : 0;
}

/* Moves the parts of p[0..n) that still say something to the front; returns their count. */
static int live_parts(part *p, int n) {
    int k = 0;
    for (int i = 0; i < n; i++)
        if (n_constraints(p[i].s, p[i].skip)) p[k++] = p[i];
    return k;
}

static int gen_parts(sc *c, const part *in, int n_in, const char *path, cpulm_buf *body) {
    part p[MAX_PARTS + 1];
    int n = 0;
    for (int i = 0; i < n_in; i++) /* allOf expanded first, $refs kept */
        if (flatten(c, in[i], p, &n, path, 0, 0) < 0) return -1;
    n = live_parts(p, n);
    if (n == 0) return cpulm_buf_puts(body, "json-value0"), 0;
    if (n == 1 && !needs_parts(p[0].s, p[0].skip)) /* one plain part: a $ref keeps its rule */
        return gen_body(c, p[0].s, p[0].skip, path, body);
    n = 0;
    for (int i = 0; i < n_in; i++) /* then with $ref targets inlined, to merge them */
        if (flatten(c, in[i], p, &n, path, 0, 1) < 0) return -1;
    for (int i = 0; i < n; i++) {
        if (KW(p[i].s, p[i].skip, "anyOf"))
            return gen_distributed(c, p, n, i, "anyOf", CPULM_SK_ANYOF, path, body);
        if (KW(p[i].s, p[i].skip, "oneOf"))
            return gen_distributed(c, p, n, i, "oneOf", CPULM_SK_ONEOF, path, body);
    }
    int k = live_parts(p, n);
    if (k == 0) return cpulm_buf_puts(body, "json-value0"), 0;
    if (k == 1) return gen_body(c, p[0].s, p[0].skip, path, body);
    return gen_merged(c, p, k, path, body);
}

/* ---- enum and const beside other keywords ---- */

/* The grammar of s without its enum/const (skip), to test the listed values against. */
static cpulm_grammar *compile_rest(sc *c, const cpulm_json *s, unsigned skip, const char *key,
                                   const char *path) {
    if (c->nest >= 2 || ++*c->n_sub > MAX_SUB) {
        sc_fail(c, CPULM_ERR_LIMIT, path,
                "'%s' beside other keywords: more than %d such lists, or nested in each other", key,
                MAX_SUB);
        return NULL;
    }
    cpulm_buf t;
    cpulm_buf_init(&t, 0);
    sc sub = {.out = &t, .root = c->root, .err = c->err, .nest = c->nest + 1, .n_sub = c->n_sub};
    part p = {s, skip};
    int r = gen_p(&sub, &p, 1, path);
    cpulm_grammar *g = NULL;
    if (r >= 0) {
        cpulm_buf_printf(&t, "root ::= r%d\n", r);
        cpulm_grammar_json_base(&t);
        cpulm_error e = {0};
        if (cpulm_grammar_parse(t.data, t.len, NULL, &g, &e) != CPULM_OK)
            sc_fail(c, e.code, path, "'%s' beside other keywords: %s", key, e.msg);
    } else {
        c->failed = 1, c->code = sub.code, c->empty = sub.empty;
    }
    for (int i = 0; i < sub.n_docs; i++)
        cpulm_json_free(sub.docs[i]);
    free(sub.docs);
    drop_memos(&sub, 0);
    free(sub.memos);
    cpulm_buf_release(&t);
    return g;
}

/* v (compact JSON) is a sentence of g. */
static int literal_matches(const cpulm_grammar *g, const cpulm_json *v) {
    cpulm_buf t;
    cpulm_buf_init(&t, 0);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, &t, 0, 0);
    cpulm_json_write_value(&w, v);
    cpulm_grammar_matcher *m = cpulm_grammar_matcher_new(g, NULL);
    int ok = m && cpulm_json_writer_status(&w) == CPULM_OK &&
             cpulm_grammar_accept_bytes(m, t.data, t.len) == CPULM_OK && cpulm_grammar_complete(m);
    cpulm_grammar_matcher_free(m);
    cpulm_buf_release(&t);
    return ok;
}

/* The const/enum values that every other keyword of s allows too (tested on the grammar of
 * those keywords, which is never wider than they are). */
static int gen_literals(sc *c, const cpulm_json *s, unsigned skip, const char *path,
                        cpulm_buf *body) {
    const cpulm_json *cst = KW(s, skip, "const"), *en = KW(s, skip, "enum");
    const char *key = cst ? "const" : "enum";
    if (en && (en->type != CPULM_JSON_ARRAY || en->u.list.n == 0))
        return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "'enum' must be a non-empty array");
    unsigned rest = skip | CPULM_SK_ENUM | CPULM_SK_CONST;
    cpulm_grammar *g = NULL;
    if (n_constraints(s, rest) > 0 && !(g = compile_rest(c, s, rest, key, path))) return -1;
    size_t nv = cst ? 1 : en->u.list.n, kept = 0;
    c->work += nv * (en ? en->u.list.n : 1);
    cpulm_buf_puts(body, "( ");
    for (size_t k = 0; k < nv && c->work <= MAX_WORK; k++) {
        const cpulm_json *v = cst ? cst : &en->u.list.items[k], *e = NULL;
        for (size_t j = 0; cst && en && j < en->u.list.n && !e; j++)
            if (cpulm_grammar_json_eq(&en->u.list.items[j], v)) e = v;
        if ((cst && en && !e) || (g && !literal_matches(g, v))) continue;
        if (kept++) cpulm_buf_puts(body, " | ");
        if (put_json_literal(body, v) < 0)
            return cpulm_grammar_free(g), sc_fail(c, CPULM_ERR_NOMEM, path, "%s", "out of memory");
    }
    cpulm_buf_puts(body, " )");
    cpulm_grammar_free(g);
    if (c->work > MAX_WORK)
        return sc_fail(c, CPULM_ERR_LIMIT, path, "'%s': more than %d steps to check", key,
                       MAX_WORK);
    return kept ? 0
                : sc_empty(c, path,
                           "'%s': no listed value is valid under the schema's other keywords", key);
}

/* ---- dispatch ---- */

/* No type given: the type the other keywords speak of (any one is valid), else any. When
 * testing enum values (compile_rest) it must be exact instead: every type, each with the
 * keywords that apply to it. */
static int gen_untyped(sc *c, const cpulm_json *s, const char *path, cpulm_buf *body) {
    if (c->nest > 0 && n_constraints(s, CPULM_SK_ENUM | CPULM_SK_CONST | CPULM_SK_ANYOF |
                                            CPULM_SK_ONEOF | CPULM_SK_ALLOF | CPULM_SK_REF)) {
        static const char *const ALL =
            "[\"null\",\"boolean\",\"number\",\"string\",\"array\",\"object\"]";
        cpulm_json_doc *d = NULL;
        if (cpulm_json_parse(ALL, strlen(ALL), NULL, &d, NULL, NULL) != CPULM_OK)
            return sc_fail(c, CPULM_ERR_NOMEM, path, "%s", "out of memory");
        int rc = gen_types(c, s, cpulm_json_root(d), path, body);
        cpulm_json_free(d);
        return rc;
    }
    static const char *const OBJ[] = {"properties", "required", "additionalProperties"};
    static const char *const ARR[] = {"items", "prefixItems", "minItems", "maxItems"};
    static const char *const STR[] = {"minLength", "maxLength", "pattern", "format"};
    for (int i = 0; i < 3; i++)
        if (cpulm_json_get(s, OBJ[i])) return gen_object(c, s, path, body);
    for (int i = 0; i < 4; i++)
        if (cpulm_json_get(s, ARR[i])) return gen_array(c, s, path, body);
    for (int i = 0; i < 4; i++)
        if (cpulm_json_get(s, STR[i])) return gen_string(c, s, path, body);
    if (has_bounds(s)) return gen_number(c, s, path, body);
    return cpulm_buf_puts(body, "json-value0"), 0;
}

static int gen_body(sc *c, const cpulm_json *s, unsigned skip, const char *path, cpulm_buf *body) {
    if (s->type == CPULM_JSON_BOOL) {
        if (!s->u.boolean) return sc_empty(c, path, "%s", "schema false allows nothing");
        return cpulm_buf_puts(body, "json-value0"), 0;
    }
    if (s->type != CPULM_JSON_OBJECT)
        return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "a schema must be an object");
    if (check_keywords(c, s, path) < 0) return -1;
    if (KW(s, skip, "const") || KW(s, skip, "enum")) return gen_literals(c, s, skip, path, body);
    if (needs_parts(s, skip)) {
        part p = {s, skip};
        return gen_parts(c, &p, 1, path, body);
    }
    const cpulm_json *v = KW(s, skip, "$ref");
    if (v) {
        if (!cpulm_json_str(v))
            return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "'$ref' must be a string");
        int r = gen_ref(c, v->u.str.s, path);
        return r < 0 ? -1 : (cpulm_buf_printf(body, "r%d", r), 0);
    }
    const cpulm_json *type = cpulm_json_get(s, "type");
    return type ? gen_types(c, s, type, path, body) : gen_untyped(c, s, path, body);
}

int cpulm_grammar_schema_rules(const cpulm_json *schema, cpulm_buf *out, int *next_rule,
                               cpulm_error *err) {
    cpulm_error local = {0};
    int n_sub = 0;
    sc c = {.out = out,
            .root = schema,
            .err = err ? err : &local,
            .n_rules = *next_rule,
            .n_sub = &n_sub};
    int r = gen(&c, schema, "#");
    *next_rule = c.n_rules;
    for (int i = 0; i < c.n_docs; i++)
        cpulm_json_free(c.docs[i]);
    free(c.docs);
    drop_memos(&c, 0);
    free(c.memos);
    if (r < 0 && err && !err->msg[0]) cpulm_errf(err, CPULM_ERR_UNSUPPORTED, "unsupported schema");
    if (r < 0 && err) err->code = c.code ? c.code : CPULM_ERR_UNSUPPORTED;
    return r;
}

void cpulm_grammar_json_base(cpulm_buf *out) {
    cpulm_buf_puts(out, BASE_RULES);
    write_any_values(out);
}

cpulm_status cpulm_grammar_from_schema(const cpulm_json *schema, cpulm_buf *out, cpulm_error *err) {
    int next = 0;
    cpulm_error e = {0};
    int r = cpulm_grammar_schema_rules(schema, out, &next, &e);
    if (r < 0) {
        if (err) *err = e;
        return e.code;
    }
    cpulm_buf_printf(out, "root ::= r%d\n", r);
    cpulm_grammar_json_base(out);
    return cpulm_buf_status(out);
}
