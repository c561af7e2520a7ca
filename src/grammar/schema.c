/* schema.c: JSON schema -> GBNF (see grammar.h for the supported subset).
 *
 * Every generated grammar is sound: whatever it produces validates against the schema
 * (oneOf included: its branches must be provably disjoint, see check_one_of).
 * Where an exact grammar would be large, it is narrower instead (never wider): object
 * properties come in the schema's order and extra properties are not generated; number
 * bounds are tightened to integers; "\s" in a pattern is a space. Keywords outside the
 * subset are refused by name rather than ignored, so a request never gets unconstrained
 * output while believing it is constrained.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

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
    int n_refs;
    uint64_t work; /* see MAX_WORK */
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

static void subpath(char *out, size_t cap, const char *path, const char *a, const char *b) {
    snprintf(out, cap, "%s/%s%s%s", path, a, b ? "/" : "", b ? b : "");
}

/* ---- integers ---- */

/* Appends alternatives for the decimal numbers of exactly len(a) digits in [a, b] (same
 * length strings). */
static void digits_range(cpulm_buf *b, const char *lo, const char *hi, size_t n) {
    if (n == 0) return;
    if (n == 1) {
        cpulm_buf_printf(b, "[%c-%c]", lo[0], hi[0]);
        return;
    }
    if (lo[0] == hi[0]) {
        cpulm_buf_printf(b, "\"%c\" ", lo[0]);
        digits_range(b, lo + 1, hi + 1, n - 1);
        return;
    }
    int lo_zero = strspn(lo + 1, "0") == n - 1, hi_nine = strspn(hi + 1, "9") == n - 1;
    char nines[32], zeros[32];
    memset(nines, '9', n - 1);
    memset(zeros, '0', n - 1);
    cpulm_buf_puts(b, "( ");
    int any = 0;
    char a0 = lo[0], b0 = hi[0];
    if (!lo_zero) {
        cpulm_buf_printf(b, "\"%c\" ( ", a0);
        digits_range(b, lo + 1, nines, n - 1);
        cpulm_buf_puts(b, " )");
        a0++;
        any = 1;
    }
    char top = hi_nine ? b0 : (char)(b0 - 1);
    if (a0 <= top) {
        cpulm_buf_printf(b, "%s[%c-%c] [0-9]{%zu}", any ? " | " : "", a0, top, n - 1);
        any = 1;
    }
    if (!hi_nine) {
        cpulm_buf_printf(b, "%s\"%c\" ( ", any ? " | " : "", b0);
        digits_range(b, zeros, hi + 1, n - 1);
        cpulm_buf_puts(b, " )");
    }
    cpulm_buf_puts(b, " )");
}

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
        digits_range(b, sa, sz, strlen(sa));
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

/* Reads minimum/maximum (and exclusive forms) as integer bounds: lo = smallest allowed
 * integer, hi = largest. Returns -1 on a bad value, 1 if the range is empty. */
static int int_bounds(sc *c, const cpulm_json *s, const char *path, int64_t *lo, int64_t *hi) {
    *lo = INT64_MIN;
    *hi = INT64_MAX;
    static const char *keys[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    for (int k = 0; k < 4; k++) {
        const cpulm_json *v = cpulm_json_get(s, keys[k]);
        if (!v) continue;
        if (v->type != CPULM_JSON_NUMBER || !isfinite(v->u.num.f) || fabs(v->u.num.f) > 1e15)
            return sc_fail(c, CPULM_ERR_UNSUPPORTED, path, "'%s' must be a number within 1e15",
                           keys[k]);
        double x = v->u.num.f;
        int64_t b = k == 0   ? (int64_t)ceil(x)
                    : k == 1 ? (int64_t)floor(x) + 1
                    : k == 2 ? (int64_t)floor(x)
                             : (int64_t)ceil(x) - 1;
        if (k < 2 && b > *lo) *lo = b;
        if (k >= 2 && b < *hi) *hi = b;
    }
    return *lo > *hi ? sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "empty numeric range") : 0;
}

static int has_bounds(const cpulm_json *s) {
    return cpulm_json_get(s, "minimum") || cpulm_json_get(s, "maximum") ||
           cpulm_json_get(s, "exclusiveMinimum") || cpulm_json_get(s, "exclusiveMaximum");
}

static int gen_integer(sc *c, const cpulm_json *s, const char *path, cpulm_buf *body) {
    if (!has_bounds(s)) return cpulm_buf_puts(body, "json-int"), 0;
    int64_t lo, hi;
    if (int_bounds(c, s, path, &lo, &hi) < 0) return -1;
    int_range(body, lo, hi);
    return 0;
}

/* Numbers within integer-tightened bounds [lo, hi]: an integer part in [lo, hi - 1] with
 * any fraction (for negatives, the magnitude's part in [-hi, -lo - 1]), or exactly an end. */
static int gen_number(sc *c, const cpulm_json *s, const char *path, cpulm_buf *body) {
    if (!has_bounds(s)) return cpulm_buf_puts(body, "json-number"), 0;
    int64_t lo, hi;
    if (int_bounds(c, s, path, &lo, &hi) < 0) return -1;
    const int64_t CAP = 999999999999999LL;
    if (lo < -CAP) lo = -CAP;
    if (hi > CAP) hi = CAP;
    cpulm_buf_puts(body, "( ");
    int_range(body, lo, hi);                 /* the integers themselves */
    int64_t a = lo > 0 ? lo : 0, z = hi - 1; /* nonnegative with a fraction: part in [a, z] */
    if (a <= z) {
        cpulm_buf_puts(body, " | ");
        nonneg_range(body, (uint64_t)a, (uint64_t)z);
        cpulm_buf_puts(body, " \".\" [0-9]{1,15}");
    }
    int64_t ma = hi < 0 ? -hi : 1, mz = lo < 0 ? -lo - 1 : -1; /* negative: magnitude part */
    if (lo < 0 && ma <= mz) {
        cpulm_buf_puts(body, " | \"-\" ");
        nonneg_range(body, (uint64_t)ma, (uint64_t)mz);
        cpulm_buf_puts(body, " \".\" [0-9]{1,15}");
    }
    cpulm_buf_puts(body, " )");
    return 0;
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
                       "minLength/maxLength together with "
                       "pattern or format are not supported");
    if (fmt && pat)
        return sc_fail(c, CPULM_ERR_UNSUPPORTED, path, "%s",
                       "pattern together with format is not supported");
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
            return sc_fail(c, e.code ? e.code : CPULM_ERR_UNSUPPORTED, path, "%s", e.msg);
        cpulm_buf_puts(body, " ) \"\\\"\"");
        return 0;
    }
    double lo = cpulm_json_num(mn, 0), hi = cpulm_json_num(mx, -1);
    if ((mn && (!mn->is_int || lo < 0 || lo > 4096)) ||
        (mx && (!mx->is_int || hi < 0 || hi > 4096)))
        return sc_fail(c, CPULM_ERR_UNSUPPORTED, path, "%s",
                       "minLength/maxLength must be integers in 0..4096");
    if (mx && hi < lo)
        return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "maxLength < minLength");
    if (!mn && !mx) return cpulm_buf_puts(body, "json-string"), 0;
    if (mx)
        cpulm_buf_printf(body, "\"\\\"\" json-char{%d,%d} \"\\\"\"", (int)lo, (int)hi);
    else
        cpulm_buf_printf(body, "\"\\\"\" json-char{%d,} \"\\\"\"", (int)lo);
    return 0;
}

/* ---- arrays ---- */

static int gen_array(sc *c, const cpulm_json *s, const char *path, cpulm_buf *body) {
    const cpulm_json *items = cpulm_json_get(s, "items"),
                     *prefix = cpulm_json_get(s, "prefixItems");
    const cpulm_json *mn = cpulm_json_get(s, "minItems"), *mx = cpulm_json_get(s, "maxItems");
    double lo = cpulm_json_num(mn, 0), hi = cpulm_json_num(mx, -1);
    if ((mn && (!mn->is_int || lo < 0 || lo > 1024)) ||
        (mx && (!mx->is_int || hi < 0 || hi > 1024)))
        return sc_fail(c, CPULM_ERR_UNSUPPORTED, path, "%s",
                       "minItems/maxItems must be integers in 0..1024");
    if (mx && hi < lo) return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "maxItems < minItems");
    char sub[512];
    if (prefix) { /* a tuple: exactly the prefix items (valid whatever items says) */
        if (prefix->type != CPULM_JSON_ARRAY || (double)prefix->u.list.n < lo ||
            (mx && (double)prefix->u.list.n > hi))
            return sc_fail(c, CPULM_ERR_UNSUPPORTED, path, "%s",
                           "prefixItems must be an array within "
                           "minItems..maxItems");
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
            return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "items false with minItems > 0");
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

static int gen_object(sc *c, const cpulm_json *s, const char *path, cpulm_buf *body) {
    const cpulm_json *props = cpulm_json_get(s, "properties"), *req = cpulm_json_get(s, "required");
    const cpulm_json *add = cpulm_json_get(s, "additionalProperties");
    if (props && props->type != CPULM_JSON_OBJECT)
        return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "'properties' must be an object");
    if (req && req->type != CPULM_JSON_ARRAY)
        return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "'required' must be an array");
    size_t np = cpulm_json_len(props), nr = cpulm_json_len(req);
    if (np == 0 && nr == 0) {
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
    prop *ps = calloc(np + nr + 1, sizeof *ps);
    if (!ps) return sc_fail(c, CPULM_ERR_NOMEM, path, "%s", "out of memory");
    int n = 0;
    c->work += (uint64_t)(np + 1) * (nr + 1); /* is_required / json_get scans */
    if (c->work > MAX_WORK)
        return sc_fail(c, CPULM_ERR_LIMIT, path,
                       "%zu properties and %zu required names: more than %d steps to match "
                       "(limit %d)",
                       np, nr, MAX_WORK, MAX_WORK);
    for (size_t i = 0; i < np; i++) {
        const cpulm_json *p = &props->u.list.items[i];
        ps[n++] = (prop){p->key, p->key_len, p, is_required(req, p->key)};
    }
    for (size_t i = 0; i < nr; i++) { /* required but not described: any value */
        const cpulm_json *k = cpulm_json_at(req, i);
        if (!cpulm_json_str(k))
            return free(ps), sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s",
                                     "'required' items must be strings");
        if (!cpulm_json_get(props, k->u.str.s)) ps[n++] = (prop){k->u.str.s, k->u.str.len, NULL, 1};
    }
    int rc = gen_props(c, ps, n, path, body);
    free(ps);
    return rc;
}

/* ---- combinators, references, dispatch ---- */

static int gen_alts(sc *c, const cpulm_json *list, const char *key, const char *path,
                    cpulm_buf *body) {
    if (list->type != CPULM_JSON_ARRAY || list->u.list.n == 0)
        return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "'%s' must be a non-empty array", key);
    cpulm_buf_puts(body, "( ");
    for (size_t i = 0; i < list->u.list.n; i++) {
        char idx[24], sub[512];
        snprintf(idx, sizeof idx, "%zu", i);
        subpath(sub, sizeof sub, path, key, idx);
        int r = gen(c, &list->u.list.items[i], sub);
        if (r < 0) return -1;
        cpulm_buf_printf(body, "%sr%d", i ? " | " : "", r);
    }
    cpulm_buf_puts(body, " )");
    return 0;
}

static int gen_enum(sc *c, const cpulm_json *list, const char *path, cpulm_buf *body) {
    if (list->type != CPULM_JSON_ARRAY || list->u.list.n == 0)
        return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "'enum' must be a non-empty array");
    cpulm_buf_puts(body, "( ");
    for (size_t i = 0; i < list->u.list.n; i++) {
        if (i) cpulm_buf_puts(body, " | ");
        if (put_json_literal(body, &list->u.list.items[i]) < 0)
            return sc_fail(c, CPULM_ERR_NOMEM, path, "%s", "out of memory");
    }
    cpulm_buf_puts(body, " )");
    return 0;
}

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
    if (list->type != CPULM_JSON_ARRAY) return 0; /* gen_alts reports it */
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
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->ref_name[i], ref)) return c->ref_rule[i];
    const cpulm_json *target = resolve(c, ref);
    if (!target)
        return sc_fail(c, CPULM_ERR_UNSUPPORTED, path, "unresolvable or unsupported $ref '%s'",
                       ref);
    if (c->n_refs >= MAX_REFS)
        return sc_fail(c, CPULM_ERR_UNSUPPORTED, path, "%s", "too many $refs");
    int r = new_rule(c); /* named before generating, so recursive references find it */
    c->ref_name[c->n_refs] = ref;
    c->ref_rule[c->n_refs++] = r;
    int inner = gen(c, target, ref);
    if (inner < 0) return -1;
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
    return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "unknown type '%s'", t);
}

static int gen_body(sc *c, const cpulm_json *s, const char *path, cpulm_buf *body) {
    if (s->type == CPULM_JSON_BOOL) {
        if (!s->u.boolean)
            return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "schema false allows nothing");
        return cpulm_buf_puts(body, "json-value0"), 0;
    }
    if (s->type != CPULM_JSON_OBJECT)
        return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "a schema must be an object");
    if (check_keywords(c, s, path) < 0) return -1;
    const cpulm_json *v;
    char sub[512];
    if ((v = cpulm_json_get(s, "$ref"))) {
        if (!cpulm_json_str(v))
            return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "'$ref' must be a string");
        int r = gen_ref(c, v->u.str.s, path);
        return r < 0 ? -1 : (cpulm_buf_printf(body, "r%d", r), 0);
    }
    if ((v = cpulm_json_get(s, "const"))) return put_json_literal(body, v) < 0 ? -1 : 0;
    if ((v = cpulm_json_get(s, "enum"))) return gen_enum(c, v, path, body);
    if ((v = cpulm_json_get(s, "anyOf"))) return gen_alts(c, v, "anyOf", path, body);
    if ((v = cpulm_json_get(s, "oneOf")))
        return check_one_of(c, v, path) < 0 ? -1 : gen_alts(c, v, "oneOf", path, body);
    if ((v = cpulm_json_get(s, "allOf"))) {
        if (v->type != CPULM_JSON_ARRAY || v->u.list.n != 1)
            return sc_fail(c, CPULM_ERR_UNSUPPORTED, path, "%s",
                           "'allOf' with more than one schema is not supported");
        subpath(sub, sizeof sub, path, "allOf", "0");
        int r = gen(c, &v->u.list.items[0], sub);
        return r < 0 ? -1 : (cpulm_buf_printf(body, "r%d", r), 0);
    }
    const cpulm_json *type = cpulm_json_get(s, "type");
    if (type && type->type == CPULM_JSON_STRING) return gen_type(c, s, type->u.str.s, path, body);
    if (type && type->type == CPULM_JSON_ARRAY && type->u.list.n > 0) {
        cpulm_buf_puts(body, "( ");
        for (size_t i = 0; i < type->u.list.n; i++) {
            const char *t = cpulm_json_str(&type->u.list.items[i]);
            if (!t)
                return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s",
                               "'type' items must be strings");
            if (i) cpulm_buf_puts(body, " | ");
            if (gen_type(c, s, t, path, body) < 0) return -1;
        }
        cpulm_buf_puts(body, " )");
        return 0;
    }
    if (type)
        return sc_fail(c, CPULM_ERR_INVALID_ARG, path, "%s", "'type' must be a string or an array");
    if (cpulm_json_get(s, "properties") || cpulm_json_get(s, "required") ||
        cpulm_json_get(s, "additionalProperties"))
        return gen_object(c, s, path, body);
    if (cpulm_json_get(s, "items") || cpulm_json_get(s, "prefixItems"))
        return gen_array(c, s, path, body);
    return cpulm_buf_puts(body, "json-value0"), 0;
}

/* Generates a rule for schema s; returns its number or -1. */
static int gen(sc *c, const cpulm_json *s, const char *path) {
    if (c->failed) return -1;
    if (++c->depth > MAX_DEPTH)
        return sc_fail(c, CPULM_ERR_UNSUPPORTED, path, "%s", "schema nested too deeply");
    cpulm_buf body;
    cpulm_buf_init(&body, 0);
    int rc = gen_body(c, s, path, &body), r = -1;
    if (rc == 0 && !c->failed) {
        r = new_rule(c);
        define(c, r, &body);
    }
    cpulm_buf_release(&body);
    c->depth--;
    return c->failed ? -1 : r;
}

int cpulm_grammar_schema_rules(const cpulm_json *schema, cpulm_buf *out, int *next_rule,
                               cpulm_error *err) {
    sc c = {.out = out, .root = schema, .err = err, .n_rules = *next_rule};
    int r = gen(&c, schema, "#");
    *next_rule = c.n_rules;
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
