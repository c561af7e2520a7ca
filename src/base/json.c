/* json.c: strict RFC 8259 reader (recursive descent, depth-limited) into an arena-backed
 * DOM, and a streaming writer. See json.h for the accepted language and the limits.
 *
 * The reader never trusts its input: every read is bounds-checked against len, recursion
 * is capped by max_depth (itself capped), and all failures return CPULM_ERR_FORMAT with
 * the byte offset. Number conversion is locale-independent (an application may have called
 * setlocale with a ',' decimal point).
 */
#include "base/json.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HARD_MAX_DEPTH                                                        \
    1000 /* keeps recursion far from the stack limit whatever the caller asks \
          */

/* ---- UTF-8 ---- */

int cpulm_json_utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    int need;
    unsigned lo = 0x80, hi = 0xBF;
    *cp = 0xFFFD;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c < 0xC2) return -1; /* stray continuation byte, or overlong lead C0/C1 */
    if (c < 0xE0) {
        need = 1;
        c &= 0x1F;
    } else if (c < 0xF0) {
        need = 2;
        if (c == 0xE0) lo = 0xA0; /* overlong */
        if (c == 0xED) hi = 0x9F; /* UTF-16 surrogates */
        c &= 0x0F;
    } else if (c < 0xF5) {
        need = 3;
        if (c == 0xF0) lo = 0x90; /* overlong */
        if (c == 0xF4) hi = 0x8F; /* beyond U+10FFFF */
        c &= 0x07;
    } else {
        return -1;
    }
    uint32_t v = c;
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n) return -k;
        unsigned b = s[k];
        if (k == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) return -k;
        v = (v << 6) | (b & 0x3F);
    }
    *cp = v;
    return need + 1;
}

int cpulm_json_utf8_put(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- arena: the doc's nodes and strings, freed all at once ---- */

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    max_align_t mem[]; /* aligned for any node */
} chunk;

struct cpulm_json_doc {
    chunk *chunks;
    cpulm_json root;
};

static void *arena_alloc(cpulm_json_doc *d, size_t n) {
    if (n > SIZE_MAX - 64) return NULL;
    n = (n + 15) & ~(size_t)15;
    chunk *c = d->chunks;
    if (!c || c->cap - c->used < n) {
        size_t cap = c ? c->cap * 2 : 4096;
        if (cap > (1u << 20)) cap = 1u << 20;
        if (cap < n) cap = n;
        chunk *nc = malloc(sizeof *nc + cap);
        if (!nc) return NULL;
        nc->next = c;
        nc->used = 0;
        nc->cap = cap;
        d->chunks = c = nc;
    }
    void *p = (char *)c->mem + c->used;
    c->used += n;
    return p;
}

void cpulm_json_free(cpulm_json_doc *d) {
    if (!d) return;
    for (chunk *c = d->chunks, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(d);
}

const cpulm_json *cpulm_json_root(const cpulm_json_doc *d) {
    return &d->root;
}

/* ---- parser ---- */

typedef struct parser {
    const unsigned char *s;
    size_t n, pos;
    int32_t depth, max_depth;
    cpulm_json_doc *doc;
    cpulm_json *stack; /* children of the open containers, innermost last */
    size_t n_stack, cap_stack;
    cpulm_status st;
    size_t err_off;
    char msg[200];
} parser;

static int fail(parser *p, size_t off, const char *what) {
    if (!p->st) {
        p->st = CPULM_ERR_FORMAT;
        p->err_off = off;
        snprintf(p->msg, sizeof p->msg, "%s", what);
    }
    return -1;
}

static int oom(parser *p) {
    if (!p->st) {
        p->st = CPULM_ERR_NOMEM;
        p->err_off = p->pos;
        snprintf(p->msg, sizeof p->msg, "out of memory");
    }
    return -1;
}

static void skip_ws(parser *p) {
    while (p->pos < p->n) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int peek(const parser *p) {
    return p->pos < p->n ? p->s[p->pos] : -1;
}

static int parse_value(parser *p, cpulm_json *out);

static int hex4(const unsigned char *s, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = s[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        *v = (*v << 4) | d;
    }
    return 0;
}

/* \uXXXX at s[i] (s[i] == 'u'; the backslash is before it). Pairs surrogates; a lone one
 * is an error: it has no UTF-8 encoding, and silently replacing it would let two different
 * requests (or keys) compare equal after decoding. Advances *i past what it consumed. */
static int unicode_escape(parser *p, size_t *i, size_t end, uint32_t *cp) {
    if (end - *i < 5 || hex4(p->s + *i + 1, cp)) return fail(p, *i - 1, "invalid \\u escape");
    *i += 5;
    if (*cp < 0xD800 || *cp > 0xDFFF) return 0;
    uint32_t lo;
    if (*cp <= 0xDBFF && end - *i >= 6 && p->s[*i] == '\\' && p->s[*i + 1] == 'u' &&
        hex4(p->s + *i + 2, &lo) == 0 && lo >= 0xDC00 && lo <= 0xDFFF) {
        *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
        *i += 6;
        return 0;
    }
    return fail(p, *i - 6, "lone UTF-16 surrogate in \\u escape");
}

static int simple_escape(unsigned char e) {
    switch (e) {
    case '"': return '"';
    case '\\': return '\\';
    case '/': return '/';
    case 'b': return '\b';
    case 'f': return '\f';
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    default: return -1;
    }
}

/* Decodes the string starting at the opening quote into the arena. The decoded form is
 * never longer than the source (every escape shrinks or keeps its size), so one
 * allocation of the source length suffices. */
static int parse_string(parser *p, const char **out, size_t *out_len) {
    size_t start = p->pos++, end = p->pos;
    while (end < p->n && p->s[end] != '"')
        end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->n) return fail(p, start, "unterminated string");
    char *dst = arena_alloc(p->doc, end - p->pos + 1);
    if (!dst) return oom(p);
    size_t len = 0, i = p->pos;
    while (i < end) {
        unsigned char c = p->s[i];
        if (c < 0x20) return fail(p, i, "control character in string (must be escaped)");
        if (c == '\\') {
            unsigned char e = p->s[i + 1];
            if (e == 'u') {
                uint32_t cp;
                i++;
                if (unicode_escape(p, &i, end, &cp)) return -1;
                len += (size_t)cpulm_json_utf8_put(cp, dst + len);
                continue;
            }
            int v = simple_escape(e);
            if (v < 0) return fail(p, i, "invalid escape in string");
            dst[len++] = (char)v;
            i += 2;
        } else if (c < 0x80) {
            dst[len++] = (char)c;
            i++;
        } else {
            uint32_t cp;
            int k = cpulm_json_utf8_next(p->s + i, end - i, &cp);
            if (k < 0) return fail(p, i, "invalid UTF-8 in string");
            memcpy(dst + len, p->s + i, (size_t)k);
            len += (size_t)k;
            i += (size_t)k;
        }
    }
    dst[len] = '\0';
    *out = dst;
    *out_len = len;
    p->pos = end + 1;
    return 0;
}

/* ---- numbers ---- */

static const double pow10_exact[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                       1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                       1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* Clinger's fast path: a significand below 2^53 times an exactly representable power of
 * ten is correctly rounded by one IEEE multiply or divide. Returns 0 if not applicable. */
static int fast_double(const unsigned char *s, size_t n, double *out) {
    uint64_t m = 0;
    int digits = 0, exp10 = 0, neg = 0;
    size_t i = 0;
    if (s[i] == '-') neg = 1, i++;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        if (m || s[i] != '0') digits++;
        m = m * 10 + (uint64_t)(s[i] - '0');
        if (digits > 15) return 0;
    }
    if (i < n && s[i] == '.')
        for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
            if (m || s[i] != '0') digits++;
            m = m * 10 + (uint64_t)(s[i] - '0');
            exp10--;
            if (digits > 15) return 0;
        }
    if (i < n) { /* exponent */
        int esign = 1, e = 0;
        i++;
        if (s[i] == '+' || s[i] == '-') esign = s[i++] == '-' ? -1 : 1;
        for (; i < n; i++) {
            e = e * 10 + (s[i] - '0');
            if (e > 400) return 0;
        }
        exp10 += esign * e;
    }
    if (exp10 < -22 || exp10 > 22) return 0;
    double v = (double)m;
    v = exp10 < 0 ? v / pow10_exact[-exp10] : v * pow10_exact[exp10];
    *out = neg ? -v : v;
    return 1;
}

/* strtod follows LC_NUMERIC: rewrite '.' as this locale's decimal point, found through
 * snprintf (thread-safe, unlike localeconv). */
static int slow_double(const unsigned char *s, size_t n, double *out) {
    char point[8];
    int pn = snprintf(point, sizeof point, "%.1f", 0.5); /* "0" point "5" */
    if (pn < 3 || pn >= (int)sizeof point) return -1;
    size_t plen = (size_t)pn - 2;
    char small[128], *buf = n * plen + 1 <= sizeof small ? small : malloc(n * plen + 1);
    if (!buf) return -2;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '.') {
            memcpy(buf + k, point + 1, plen);
            k += plen;
        } else {
            buf[k++] = (char)s[i];
        }
    }
    buf[k] = '\0';
    *out = strtod(buf, NULL);
    if (buf != small) free(buf);
    return 0;
}

static int to_int64(const unsigned char *s, size_t n, int64_t *out) {
    int neg = s[0] == '-';
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (size_t i = (size_t)neg; i < n; i++) {
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (limit - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v; /* 0 - v wraps to INT64_MIN's pattern */
    return 0;
}

static size_t scan_digits(const parser *p, size_t i) {
    while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9')
        i++;
    return i;
}

static int parse_number(parser *p, cpulm_json *out) {
    size_t start = p->pos, i = start;
    int is_int = 1;
    if (i < p->n && p->s[i] == '-') i++;
    if (i >= p->n || p->s[i] < '0' || p->s[i] > '9') return fail(p, start, "invalid number");
    i = p->s[i] == '0' ? i + 1 : scan_digits(p, i);
    if (i < p->n && p->s[i] == '.') {
        size_t j = scan_digits(p, i + 1);
        if (j == i + 1) return fail(p, i, "invalid number: digits must follow '.'");
        i = j, is_int = 0;
    }
    if (i < p->n && (p->s[i] == 'e' || p->s[i] == 'E')) {
        size_t j = i + 1;
        if (j < p->n && (p->s[j] == '+' || p->s[j] == '-')) j++;
        size_t k = scan_digits(p, j);
        if (k == j) return fail(p, i, "invalid number: digits must follow the exponent");
        i = k, is_int = 0;
    }
    out->type = CPULM_JSON_NUMBER;
    const unsigned char *s = p->s + start;
    size_t n = i - start;
    if (is_int && to_int64(s, n, &out->u.num.i) == 0) {
        out->is_int = 1;
        out->u.num.f = (double)out->u.num.i;
    } else if (!fast_double(s, n, &out->u.num.f)) {
        int rc = slow_double(s, n, &out->u.num.f);
        if (rc == -2) return oom(p);
        if (rc < 0) return fail(p, start, "cannot convert number");
    }
    if (isinf(out->u.num.f)) return fail(p, start, "number out of range");
    p->pos = i;
    return 0;
}

/* ---- containers ---- */

static int push_child(parser *p, const cpulm_json *v) {
    if (p->n_stack == p->cap_stack) {
        size_t cap = p->cap_stack ? p->cap_stack * 2 : 64;
        cpulm_json *ns = realloc(p->stack, cap * sizeof *ns);
        if (!ns) return oom(p);
        p->stack = ns;
        p->cap_stack = cap;
    }
    p->stack[p->n_stack++] = *v;
    return 0;
}

/* Moves the children pushed since `base` into one arena array owned by the container. */
static int close_container(parser *p, size_t base, cpulm_json *out) {
    size_t n = p->n_stack - base;
    out->u.list.n = n;
    out->u.list.items = NULL;
    if (n) {
        out->u.list.items = arena_alloc(p->doc, n * sizeof(cpulm_json));
        if (!out->u.list.items) return oom(p);
        memcpy(out->u.list.items, p->stack + base, n * sizeof(cpulm_json));
    }
    p->n_stack = base;
    p->depth--;
    return 0;
}

static int key_cmp(const void *a, const void *b) {
    const cpulm_json *x = *(const cpulm_json *const *)a, *y = *(const cpulm_json *const *)b;
    if (x->key_len != y->key_len) return x->key_len < y->key_len ? -1 : 1;
    return memcmp(x->key, y->key, x->key_len);
}

/* Duplicate keys make "which one wins" differ between parsers; we refuse them. Small
 * objects are checked pairwise, large ones by sorting, so a hostile object with many
 * keys costs O(n log n), not O(n^2). */
static int check_duplicates(parser *p, const cpulm_json *obj, size_t off) {
    size_t n = obj->u.list.n;
    const cpulm_json *it = obj->u.list.items, *dup = NULL;
    if (n <= 16) {
        for (size_t i = 1; i < n && !dup; i++)
            for (size_t j = 0; j < i && !dup; j++)
                if (it[i].key_len == it[j].key_len && !memcmp(it[i].key, it[j].key, it[i].key_len))
                    dup = &it[i];
    } else {
        const cpulm_json **v = malloc(n * sizeof *v);
        if (!v) return oom(p);
        for (size_t i = 0; i < n; i++)
            v[i] = &it[i];
        qsort(v, n, sizeof *v, key_cmp);
        for (size_t i = 1; i < n && !dup; i++)
            if (key_cmp(&v[i - 1], &v[i]) == 0) dup = v[i];
        free(v);
    }
    if (!dup) return 0;
    char what[120];
    snprintf(what, sizeof what, "duplicate key \"%.60s\" in object", dup->key);
    return fail(p, off, what);
}

static int enter(parser *p) {
    if (++p->depth > p->max_depth) return fail(p, p->pos, "nesting too deep");
    p->pos++; /* the opening bracket */
    skip_ws(p);
    return 0;
}

static int parse_array(parser *p, cpulm_json *out) {
    size_t base = p->n_stack;
    out->type = CPULM_JSON_ARRAY;
    if (enter(p)) return -1;
    if (peek(p) != ']') {
        for (;;) {
            cpulm_json v;
            if (parse_value(p, &v) || push_child(p, &v)) return -1;
            skip_ws(p);
            int c = peek(p);
            if (c == ']') break;
            if (c != ',') return fail(p, p->pos, "expected ',' or ']' in array");
            p->pos++;
        }
    }
    p->pos++;
    return close_container(p, base, out);
}

static int parse_member(parser *p) {
    cpulm_json v;
    const char *key;
    size_t key_len;
    skip_ws(p);
    if (peek(p) != '"') return fail(p, p->pos, "expected string key in object");
    if (parse_string(p, &key, &key_len)) return -1;
    skip_ws(p);
    if (peek(p) != ':') return fail(p, p->pos, "expected ':' after object key");
    p->pos++;
    if (parse_value(p, &v)) return -1;
    v.key = key;
    v.key_len = key_len;
    return push_child(p, &v);
}

static int parse_object(parser *p, cpulm_json *out) {
    size_t base = p->n_stack, start = p->pos;
    out->type = CPULM_JSON_OBJECT;
    if (enter(p)) return -1;
    if (peek(p) != '}') {
        for (;;) {
            if (parse_member(p)) return -1;
            skip_ws(p);
            int c = peek(p);
            if (c == '}') break;
            if (c != ',') return fail(p, p->pos, "expected ',' or '}' in object");
            p->pos++;
        }
    }
    p->pos++;
    if (close_container(p, base, out)) return -1;
    return check_duplicates(p, out, start);
}

static int parse_literal(parser *p, const char *word, cpulm_json_type type, int b,
                         cpulm_json *out) {
    size_t n = strlen(word);
    if (p->n - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return fail(p, p->pos, "invalid literal");
    p->pos += n;
    out->type = type;
    out->u.boolean = b;
    return 0;
}

static int parse_value(parser *p, cpulm_json *out) {
    memset(out, 0, sizeof *out);
    skip_ws(p);
    int c = peek(p);
    switch (c) {
    case '{': return parse_object(p, out);
    case '[': return parse_array(p, out);
    case '"': out->type = CPULM_JSON_STRING; return parse_string(p, &out->u.str.s, &out->u.str.len);
    case 't': return parse_literal(p, "true", CPULM_JSON_BOOL, 1, out);
    case 'f': return parse_literal(p, "false", CPULM_JSON_BOOL, 0, out);
    case 'n': return parse_literal(p, "null", CPULM_JSON_NULL, 0, out);
    case -1: return fail(p, p->pos, "unexpected end of input");
    default:
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, out);
        return fail(p, p->pos, "unexpected character");
    }
}

cpulm_json_limits cpulm_json_default_limits(void) {
    cpulm_json_limits l = {.max_bytes = (size_t)64 << 20, .max_depth = 128};
    return l;
}

static cpulm_status parse_error(parser *p, size_t *err_off, cpulm_error *err) {
    if (err_off) *err_off = p->err_off;
    if (p->st == CPULM_ERR_FORMAT && p->err_off < p->n && p->s[p->err_off] >= 0x20 &&
        p->s[p->err_off] < 0x7F)
        return cpulm_errf(err, p->st, "json: byte %zu ('%c'): %s", p->err_off, p->s[p->err_off],
                          p->msg);
    return cpulm_errf(err, p->st, "json: byte %zu: %s", p->err_off, p->msg);
}

cpulm_status cpulm_json_parse(const char *text, size_t len, const cpulm_json_limits *lim,
                              cpulm_json_doc **out, size_t *err_off, cpulm_error *err) {
    cpulm_json_limits l = lim ? *lim : cpulm_json_default_limits();
    *out = NULL;
    if (err_off) *err_off = 0;
    if (len > l.max_bytes)
        return cpulm_errf(err, CPULM_ERR_FORMAT, "json: input of %zu bytes exceeds the limit (%zu)",
                          len, l.max_bytes);
    parser p;
    memset(&p, 0, sizeof p);
    p.s = (const unsigned char *)(text ? text : "");
    p.n = text ? len : 0;
    p.max_depth = l.max_depth < 0 ? 0 : l.max_depth > HARD_MAX_DEPTH ? HARD_MAX_DEPTH : l.max_depth;
    p.doc = calloc(1, sizeof *p.doc);
    if (!p.doc) return cpulm_errf(err, CPULM_ERR_NOMEM, "json: out of memory");
    if (p.n >= 3 && !memcmp(p.s, "\xEF\xBB\xBF", 3)) p.pos = 3;
    if (parse_value(&p, &p.doc->root) == 0) {
        skip_ws(&p);
        if (p.pos != p.n) fail(&p, p.pos, "unexpected data after the value");
    }
    free(p.stack);
    if (p.st) {
        cpulm_json_free(p.doc);
        return parse_error(&p, err_off, err);
    }
    *out = p.doc;
    return CPULM_OK;
}

/* ---- DOM access ---- */

const cpulm_json *cpulm_json_get(const cpulm_json *v, const char *key) {
    if (!v || v->type != CPULM_JSON_OBJECT) return NULL;
    size_t n = strlen(key);
    for (size_t i = 0; i < v->u.list.n; i++) {
        const cpulm_json *m = &v->u.list.items[i];
        if (m->key_len == n && !memcmp(m->key, key, n)) return m;
    }
    return NULL;
}

const cpulm_json *cpulm_json_at(const cpulm_json *v, size_t i) {
    if (!v || (v->type != CPULM_JSON_ARRAY && v->type != CPULM_JSON_OBJECT) || i >= v->u.list.n)
        return NULL;
    return &v->u.list.items[i];
}

size_t cpulm_json_len(const cpulm_json *v) {
    if (!v) return 0;
    if (v->type == CPULM_JSON_ARRAY || v->type == CPULM_JSON_OBJECT) return v->u.list.n;
    if (v->type == CPULM_JSON_STRING) return v->u.str.len;
    return 0;
}

const char *cpulm_json_str(const cpulm_json *v) {
    return v && v->type == CPULM_JSON_STRING ? v->u.str.s : NULL;
}

double cpulm_json_num(const cpulm_json *v, double fallback) {
    return v && v->type == CPULM_JSON_NUMBER ? v->u.num.f : fallback;
}

int cpulm_json_bool(const cpulm_json *v, int fallback) {
    return v && v->type == CPULM_JSON_BOOL ? v->u.boolean : fallback;
}

/* ---- number formatting ---- */

/* Shortest decimal digits that read back as v (finite, non-zero): digits without
 * trailing zeros, and the exponent of the first digit (v = d.ddd * 10^exp). */
static int shortest_digits(double v, char digits[20], int *exp10) {
    char tmp[48];
    /* A normal double whose shortest form has <= 15 digits prints as that form at 15
     * digits (its ulp is far below the 15-digit grid); subnormals have fewer bits, so
     * they search from 1 digit up. */
    for (int prec = fabs(v) < DBL_MIN ? 1 : 15; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, v);
        if (strtod(tmp, NULL) == v || prec == 17) break;
    }
    int nd = 0;
    const char *q = tmp;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9' && nd < 19) digits[nd++] = *q;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    *exp10 = *q == 'e' ? atoi(q + 1) : 0;
    return nd;
}

static size_t fmt_special(double v, int style, char *out) {
    const char *s;
    if (isnan(v))
        s = style == CPULM_JSON_FMT_PY ? "nan" : "NaN";
    else if (isinf(v))
        s = v > 0 ? (style == CPULM_JSON_FMT_PY ? "inf" : "Infinity")
                  : (style == CPULM_JSON_FMT_PY ? "-inf" : "-Infinity");
    else
        s = style == CPULM_JSON_FMT_PY ? (signbit(v) ? "-0.0" : "0.0") : "0";
    return (size_t)snprintf(out, 32, "%s", s);
}

size_t cpulm_json_fmt_double(double v, int style, char out[32]) {
    if (!isfinite(v) || v == 0) return fmt_special(v, style, out);
    char d[20];
    int x, nd = shortest_digits(v, d, &x), k = 0;
    int py = style == CPULM_JSON_FMT_PY;
    if (v < 0) out[k++] = '-';
    /* Python repr switches to exponent form outside [1e-4, 1e16); JS outside [1e-6, 1e21) */
    int use_exp = py ? (x < -4 || x >= 16) : (x < -6 || x >= 21);
    if (use_exp) {
        out[k++] = d[0];
        if (nd > 1) {
            out[k++] = '.';
            for (int i = 1; i < nd; i++)
                out[k++] = d[i];
        }
        k += snprintf(out + k, (size_t)(32 - k), py ? "e%+03d" : "e%+d", x);
        return (size_t)k;
    }
    if (x < 0) {
        out[k++] = '0';
        out[k++] = '.';
        for (int i = 0; i < -x - 1; i++)
            out[k++] = '0';
        for (int i = 0; i < nd; i++)
            out[k++] = d[i];
    } else {
        for (int i = 0; i <= x; i++)
            out[k++] = i < nd ? d[i] : '0';
        if (nd > x + 1) {
            out[k++] = '.';
            for (int i = x + 1; i < nd; i++)
                out[k++] = d[i];
        } else if (py) {
            out[k++] = '.';
            out[k++] = '0';
        }
    }
    out[k] = '\0';
    return (size_t)k;
}

/* ---- writer ---- */

static void put_escape(cpulm_buf *b, uint32_t cp) {
    if (cp >= 0x10000) { /* UTF-16 surrogate pair, as JSON requires for \u */
        cp -= 0x10000;
        cpulm_buf_printf(b, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
    } else {
        cpulm_buf_printf(b, "\\u%04x", cp);
    }
}

static void put_ascii_escaped(cpulm_buf *b, unsigned char c) {
    switch (c) {
    case '"': cpulm_buf_append(b, "\\\"", 2); break;
    case '\\': cpulm_buf_append(b, "\\\\", 2); break;
    case '\b': cpulm_buf_append(b, "\\b", 2); break;
    case '\f': cpulm_buf_append(b, "\\f", 2); break;
    case '\n': cpulm_buf_append(b, "\\n", 2); break;
    case '\r': cpulm_buf_append(b, "\\r", 2); break;
    case '\t': cpulm_buf_append(b, "\\t", 2); break;
    default: put_escape(b, c); break;
    }
}

cpulm_status cpulm_json_quote(cpulm_buf *b, const char *str, size_t n, int flags) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, run = 0; /* s[run..i) needs no escaping */
    cpulm_buf_putc(b, '"');
    while (i < n) {
        unsigned char c = s[i];
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
            i++;
            continue;
        }
        cpulm_buf_append(b, s + run, i - run);
        if (c < 0x80) {
            put_ascii_escaped(b, c);
            i++;
        } else {
            uint32_t cp;
            int k = cpulm_json_utf8_next(s + i, n - i, &cp);
            if (flags & CPULM_JSON_ASCII)
                put_escape(b, cp);
            else if (k > 0)
                cpulm_buf_append(b, s + i, (size_t)k);
            else
                cpulm_buf_append(b, "\xEF\xBF\xBD", 3);
            i += (size_t)(k > 0 ? k : -k);
        }
        run = i;
    }
    cpulm_buf_append(b, s + run, i - run);
    return cpulm_buf_putc(b, '"');
}

void cpulm_json_writer_init(cpulm_json_writer *w, cpulm_buf *out, int flags, int indent) {
    memset(w, 0, sizeof *w);
    w->out = out;
    w->flags = flags;
    w->indent = indent > 0 ? indent : 0;
}

static void newline_indent(cpulm_json_writer *w, int32_t depth) {
    cpulm_buf_putc(w->out, '\n');
    for (int32_t i = 0; i < depth * w->indent; i++)
        cpulm_buf_putc(w->out, ' ');
}

/* Separator and indentation before an array element or an object key. */
static void before_item(cpulm_json_writer *w) {
    int32_t d = w->depth - 1;
    if (w->n_items[d]) {
        cpulm_buf_putc(w->out, ',');
        if ((w->flags & CPULM_JSON_SPACED) && !w->indent) cpulm_buf_putc(w->out, ' ');
    }
    if (w->indent) newline_indent(w, w->depth);
    w->n_items[d] = 1;
}

/* Returns 0 if the value may be written (errors are sticky: then 1, write nothing). */
static int before_value(cpulm_json_writer *w) {
    if (w->status) return 1;
    if (w->after_key) {
        w->after_key = 0;
        return 0;
    }
    if (w->depth > 0) {
        CPULM_ASSERT(!w->is_obj[w->depth - 1]); /* an object member needs a key first */
        before_item(w);
    }
    return 0;
}

static void begin(cpulm_json_writer *w, int is_obj) {
    if (before_value(w)) {
        w->depth++;
        return;
    }
    if (w->depth >= CPULM_JSON_WRITER_MAX_DEPTH) {
        w->status = CPULM_ERR_INVALID_ARG;
        w->depth++;
        return;
    }
    w->n_items[w->depth] = 0;
    w->is_obj[w->depth] = (unsigned char)is_obj;
    w->depth++;
    cpulm_buf_putc(w->out, is_obj ? '{' : '[');
}

static void end(cpulm_json_writer *w, int is_obj) {
    CPULM_ASSERT(w->depth > 0);
    w->depth--;
    if (w->status) return;
    CPULM_ASSERT(w->is_obj[w->depth] == is_obj && !w->after_key);
    if (w->n_items[w->depth] && w->indent) newline_indent(w, w->depth);
    cpulm_buf_putc(w->out, is_obj ? '}' : ']');
}

void cpulm_json_obj_begin(cpulm_json_writer *w) {
    begin(w, 1);
}
void cpulm_json_obj_end(cpulm_json_writer *w) {
    end(w, 1);
}
void cpulm_json_arr_begin(cpulm_json_writer *w) {
    begin(w, 0);
}
void cpulm_json_arr_end(cpulm_json_writer *w) {
    end(w, 0);
}

void cpulm_json_keyn(cpulm_json_writer *w, const char *key, size_t n) {
    if (w->status) return;
    CPULM_ASSERT(w->depth > 0 && w->is_obj[w->depth - 1] && !w->after_key);
    before_item(w);
    cpulm_json_quote(w->out, key, n, w->flags);
    cpulm_buf_putc(w->out, ':');
    if (w->indent || (w->flags & CPULM_JSON_SPACED)) cpulm_buf_putc(w->out, ' ');
    w->after_key = 1;
}

void cpulm_json_key(cpulm_json_writer *w, const char *key) {
    cpulm_json_keyn(w, key, strlen(key));
}

void cpulm_json_write_strn(cpulm_json_writer *w, const char *s, size_t n) {
    if (!before_value(w)) cpulm_json_quote(w->out, s, n, w->flags);
}

void cpulm_json_write_str(cpulm_json_writer *w, const char *s) {
    cpulm_json_write_strn(w, s, strlen(s));
}

void cpulm_json_write_int(cpulm_json_writer *w, int64_t v) {
    if (!before_value(w)) cpulm_buf_printf(w->out, "%lld", (long long)v);
}

void cpulm_json_write_double(cpulm_json_writer *w, double v) {
    char tmp[32];
    if (before_value(w)) return;
    if (!isfinite(v)) {
        cpulm_buf_puts(w->out, "null"); /* JSON has no NaN/Infinity (JSON.stringify's choice) */
        return;
    }
    cpulm_buf_append(w->out, tmp, cpulm_json_fmt_double(v, CPULM_JSON_FMT_JS, tmp));
}

void cpulm_json_write_bool(cpulm_json_writer *w, int v) {
    if (!before_value(w)) cpulm_buf_puts(w->out, v ? "true" : "false");
}

void cpulm_json_write_null(cpulm_json_writer *w) {
    if (!before_value(w)) cpulm_buf_puts(w->out, "null");
}

void cpulm_json_write_raw(cpulm_json_writer *w, const char *json, size_t n) {
    if (!before_value(w)) cpulm_buf_append(w->out, json, n);
}

void cpulm_json_kv_str(cpulm_json_writer *w, const char *key, const char *s) {
    cpulm_json_key(w, key);
    cpulm_json_write_str(w, s);
}

void cpulm_json_kv_strn(cpulm_json_writer *w, const char *key, const char *s, size_t n) {
    cpulm_json_key(w, key);
    cpulm_json_write_strn(w, s, n);
}

void cpulm_json_kv_int(cpulm_json_writer *w, const char *key, int64_t v) {
    cpulm_json_key(w, key);
    cpulm_json_write_int(w, v);
}

void cpulm_json_kv_double(cpulm_json_writer *w, const char *key, double v) {
    cpulm_json_key(w, key);
    cpulm_json_write_double(w, v);
}

void cpulm_json_kv_bool(cpulm_json_writer *w, const char *key, int v) {
    cpulm_json_key(w, key);
    cpulm_json_write_bool(w, v);
}

void cpulm_json_kv_null(cpulm_json_writer *w, const char *key) {
    cpulm_json_key(w, key);
    cpulm_json_write_null(w);
}

void cpulm_json_kv_obj_begin(cpulm_json_writer *w, const char *key) {
    cpulm_json_key(w, key);
    cpulm_json_obj_begin(w);
}

void cpulm_json_kv_arr_begin(cpulm_json_writer *w, const char *key) {
    cpulm_json_key(w, key);
    cpulm_json_arr_begin(w);
}

void cpulm_json_write_value(cpulm_json_writer *w, const cpulm_json *v) {
    switch (v->type) {
    case CPULM_JSON_NULL: cpulm_json_write_null(w); return;
    case CPULM_JSON_BOOL: cpulm_json_write_bool(w, v->u.boolean); return;
    case CPULM_JSON_NUMBER:
        if (v->is_int)
            cpulm_json_write_int(w, v->u.num.i);
        else
            cpulm_json_write_double(w, v->u.num.f);
        return;
    case CPULM_JSON_STRING: cpulm_json_write_strn(w, v->u.str.s, v->u.str.len); return;
    case CPULM_JSON_ARRAY:
        cpulm_json_arr_begin(w);
        for (size_t i = 0; i < v->u.list.n; i++)
            cpulm_json_write_value(w, &v->u.list.items[i]);
        cpulm_json_arr_end(w);
        return;
    case CPULM_JSON_OBJECT:
        cpulm_json_obj_begin(w);
        for (size_t i = 0; i < v->u.list.n; i++) {
            const cpulm_json *m = &v->u.list.items[i];
            cpulm_json_keyn(w, m->key, m->key_len);
            cpulm_json_write_value(w, m);
        }
        cpulm_json_obj_end(w);
        return;
    }
}

cpulm_status cpulm_json_writer_status(const cpulm_json_writer *w) {
    if (w->status) return w->status;
    if (cpulm_buf_status(w->out)) return cpulm_buf_status(w->out);
    return w->depth || w->after_key ? CPULM_ERR_INVALID_ARG : CPULM_OK;
}
