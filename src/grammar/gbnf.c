/* gbnf.c: GBNF text -> compiled grammar (grammar_int.h).
 *
 * A recursive-descent parser builds rules as lists of alternatives; groups become
 * generated rules, and repetitions are rewritten into plain rules (X* -> R ::= X R | "",
 * X{m,n} -> m copies then a chain of n - m optional copies), as llama.cpp does, so the
 * matcher only knows sets, references and alternative ends. Then references are checked
 * (every used rule is defined), and check.c rejects left recursion and too deep chains.
 *
 * Client text, so everything is linear: user rule names are found through a hash table
 * with a per-parse seed (a scan of every rule made 15 `"a"{0,4096}` cost 14 s), equal
 * character sets are stored once, and every limit (cpulm_grammar_limits) is checked before
 * the work it guards: a repetition counts the rules and elements it will make first.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/grammar_int.h"

typedef struct ivec {
    gr_elem *v;
    int32_t n, cap;
} ivec;

typedef struct brule {
    char *name;
    int defined;
    ivec *alts;
    int32_t n_alts, cap_alts;
} brule;

typedef struct parser {
    const char *s, *end, *p;
    const cpulm_grammar_limits *lim;
    brule *rules;
    int32_t n_rules, cap_rules;
    int32_t *name_ht; /* user-named rules by name hash (open addressing, -1 empty) */
    uint32_t name_cap;
    uint64_t seed; /* per-parse hash seed: names cannot be chosen to collide */
    gr_set *sets;
    int32_t n_sets, cap_sets;
    int32_t *set_ht; /* equal sets are stored once (a long literal reuses its letters) */
    uint32_t set_cap;
    uint32_t *ranges;
    int32_t n_ranges, cap_ranges;
    int64_t n_elems; /* elements so far, alternative ends included (limit max_elems) */
    uint64_t work;
    int depth;
    int oom;
    cpulm_error *err;
    int failed;
    cpulm_status code; /* the first failure's */
} parser;

static void *grow(void *p, int32_t *cap, int64_t need, size_t sz, int *oom) {
    if (need <= *cap) return p;
    int64_t c = *cap ? *cap : 8;
    while (c < need)
        c *= 2;
    void *q = c <= INT32_MAX ? realloc(p, (size_t)c * sz) : NULL;
    if (!q) {
        *oom = 1;
        return NULL;
    }
    *cap = (int32_t)c;
    return q;
}

/* Records the first failure as "grammar: line L col C: msg" with code. */
static int failc(parser *P, cpulm_status code, const char *fmt, ...) CPULM_PRINTF(3, 4);
static int failc(parser *P, cpulm_status code, const char *fmt, ...) {
    if (P->failed) return -1;
    P->failed = 1;
    P->code = code;
    int line = 1, col = 1;
    for (const char *q = P->s; q < P->p && q < P->end; q++) {
        if (*q == '\n')
            line++, col = 1;
        else
            col++;
    }
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cpulm_errf(P->err, code, "grammar: line %d col %d: %s", line, col, msg);
    return -1;
}

static int fail(parser *P, const char *msg) {
    return failc(P, CPULM_ERR_FORMAT, "%s", msg);
}

static int oom(parser *P) {
    P->oom = 1;
    return failc(P, CPULM_ERR_NOMEM, "out of memory");
}

/* Counts n more elements against max_elems before they are made. */
static int reserve_elems(parser *P, int64_t n) {
    if (P->n_elems + n > P->lim->max_elems)
        return failc(P, CPULM_ERR_LIMIT,
                     "more than %d elements after expanding repetitions (limit %d)",
                     P->lim->max_elems, P->lim->max_elems);
    P->n_elems += n;
    P->work += (uint64_t)n;
    return 0;
}

static int push_elem(parser *P, ivec *a, int32_t kind, int32_t arg) {
    if (reserve_elems(P, 1) < 0) return -1;
    gr_elem *v = grow(a->v, &a->cap, (int64_t)a->n + 1, sizeof *v, &P->oom);
    if (!v) return oom(P);
    a->v = v;
    a->v[a->n++] = (gr_elem){kind, arg};
    return 0;
}

static ivec *new_alt(parser *P, int32_t rule) {
    brule *r = &P->rules[rule];
    if (r->n_alts >= P->lim->max_alts) {
        failc(P, CPULM_ERR_LIMIT, "more than %d alternatives in rule '%.100s' (limit %d)",
              P->lim->max_alts, r->name, P->lim->max_alts);
        return NULL;
    }
    if (reserve_elems(P, 1) < 0) return NULL; /* its GR_END */
    ivec *a = grow(r->alts, &r->cap_alts, (int64_t)r->n_alts + 1, sizeof *a, &P->oom);
    if (!a) {
        oom(P);
        return NULL;
    }
    r->alts = a;
    memset(&a[r->n_alts], 0, sizeof *a);
    return &a[r->n_alts++];
}

/* ---- rules by name ---- */

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001B3ull;
    return h ^ (h >> 29);
}

static uint64_t name_hash(const parser *P, const char *name, size_t n) {
    return hash_bytes(P->seed, name, n);
}

static int name_rehash(parser *P, uint32_t cap) {
    int32_t *ht = malloc(sizeof *ht * cap);
    if (!ht) return oom(P);
    memset(ht, 0xFF, sizeof *ht * cap);
    for (uint32_t i = 0; i < P->name_cap; i++) {
        int32_t r = P->name_ht[i];
        if (r < 0) continue;
        uint32_t h = (uint32_t)name_hash(P, P->rules[r].name, strlen(P->rules[r].name));
        while (ht[h & (cap - 1)] >= 0)
            h++, P->work++;
        ht[h & (cap - 1)] = r;
    }
    free(P->name_ht);
    P->name_ht = ht;
    P->name_cap = cap;
    return 0;
}

/* A new rule (not findable by name unless the caller hashes it). Returns its index or -1. */
static int32_t add_rule(parser *P, const char *name, size_t n) {
    if (P->n_rules >= P->lim->max_rules)
        return failc(P, CPULM_ERR_LIMIT, "more than %d rules (limit %d)", P->lim->max_rules,
                     P->lim->max_rules);
    brule *r = grow(P->rules, &P->cap_rules, (int64_t)P->n_rules + 1, sizeof *r, &P->oom);
    char *nm = malloc(n + 1);
    if (r) P->rules = r;
    if (!r || !nm) {
        free(nm);
        return oom(P);
    }
    memcpy(nm, name, n);
    nm[n] = 0;
    memset(&r[P->n_rules], 0, sizeof *r);
    r[P->n_rules].name = nm;
    P->work += n + 1;
    return P->n_rules++;
}

/* Finds or creates a user-named rule by name (n bytes). Returns its index or -1. */
static int32_t rule_id(parser *P, const char *name, size_t n) {
    if ((uint64_t)P->n_rules * 2 >= P->name_cap &&
        name_rehash(P, P->name_cap ? P->name_cap * 2 : 64) < 0)
        return -1;
    uint32_t mask = P->name_cap - 1, h = (uint32_t)name_hash(P, name, n);
    P->work += n;
    for (int32_t id; (id = P->name_ht[h & mask]) >= 0; h++) {
        P->work++;
        if (strlen(P->rules[id].name) == n && memcmp(P->rules[id].name, name, n) == 0) return id;
    }
    int32_t r = add_rule(P, name, n);
    if (r >= 0) P->name_ht[h & mask] = r;
    return r;
}

/* A generated rule named parent__N. It is not entered by name: a user rule that happens to
 * be spelled the same stays a different rule. */
static int32_t gen_rule(parser *P, int32_t parent) {
    char name[160];
    snprintf(name, sizeof name, "%.100s__%d", P->rules[parent].name, P->n_rules);
    int32_t r = add_rule(P, name, strlen(name));
    if (r >= 0) P->rules[r].defined = 1;
    return r;
}

/* ---- character sets ---- */

static int cmp_range(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Sorts rng's n [lo, hi] pairs and merges overlapping or adjacent ones; returns the count. */
static int32_t normalize(uint32_t *rng, int32_t n) {
    if (n <= 1) return n;
    qsort(rng, (size_t)n, 2 * sizeof *rng, cmp_range);
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        if (k > 0 && rng[2 * i] <= rng[2 * k - 1] + 1) {
            if (rng[2 * i + 1] > rng[2 * k - 1]) rng[2 * k - 1] = rng[2 * i + 1];
            continue;
        }
        rng[2 * k] = rng[2 * i];
        rng[2 * k + 1] = rng[2 * i + 1];
        k++;
    }
    return k;
}

static uint32_t set_hash(const uint32_t *rng, int32_t n, int negate) {
    return (uint32_t)hash_bytes(0xCBF29CE484222325ull ^ (uint64_t)negate, rng,
                                sizeof *rng * 2 * (size_t)n);
}

static int set_equal(const parser *P, int32_t id, const uint32_t *rng, int32_t n, int negate) {
    const gr_set *x = &P->sets[id];
    return x->n == n && x->negate == negate &&
           !memcmp(P->ranges + 2 * x->first, rng, sizeof *rng * 2 * (size_t)n);
}

static int set_rehash(parser *P, uint32_t cap) {
    int32_t *ht = malloc(sizeof *ht * cap);
    if (!ht) return oom(P);
    memset(ht, 0xFF, sizeof *ht * cap);
    for (int32_t i = 0; i < P->n_sets; i++) {
        const gr_set *x = &P->sets[i];
        uint32_t h = set_hash(P->ranges + 2 * x->first, x->n, x->negate);
        while (ht[h & (cap - 1)] >= 0)
            h++, P->work++;
        ht[h & (cap - 1)] = i;
    }
    free(P->set_ht);
    P->set_ht = ht;
    P->set_cap = cap;
    return 0;
}

/* The index of the set of rng's n ranges (normalized in place), negated or not: an equal
 * set made before, or a new one. */
static int32_t add_set(parser *P, uint32_t *rng, int32_t n, int negate) {
    n = normalize(rng, n);
    P->work += (uint64_t)n + 1;
    if ((uint64_t)P->n_sets * 2 >= P->set_cap &&
        set_rehash(P, P->set_cap ? P->set_cap * 2 : 64) < 0)
        return -1;
    uint32_t mask = P->set_cap - 1, h = set_hash(rng, n, negate);
    for (int32_t id; (id = P->set_ht[h & mask]) >= 0; h++, P->work++)
        if (set_equal(P, id, rng, n, negate)) return id;
    gr_set *s = grow(P->sets, &P->cap_sets, (int64_t)P->n_sets + 1, sizeof *s, &P->oom);
    if (!s) return oom(P);
    P->sets = s;
    uint32_t *r =
        grow(P->ranges, &P->cap_ranges, 2 * ((int64_t)P->n_ranges + n) + 2, sizeof *r, &P->oom);
    if (!r) return oom(P);
    P->ranges = r;
    gr_set *x = &P->sets[P->n_sets];
    memset(x, 0, sizeof *x);
    x->first = P->n_ranges;
    x->n = n;
    x->negate = negate;
    if (n) memcpy(P->ranges + 2 * P->n_ranges, rng, sizeof(uint32_t) * 2 * (size_t)n);
    P->n_ranges += n;
    for (int32_t i = 0; i < n && rng[2 * i] < 128; i++)
        for (uint32_t c = rng[2 * i]; c <= rng[2 * i + 1] && c < 128; c++)
            x->ascii[c >> 5] |= 1u << (c & 31);
    if (negate)
        for (int w = 0; w < 4; w++)
            x->ascii[w] = ~x->ascii[w];
    P->set_ht[h & mask] = P->n_sets;
    return P->n_sets++;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads one (possibly escaped) character of a literal or class. Returns 0 or -1. */
static int read_char(parser *P, uint32_t *cp) {
    if (P->p >= P->end) return fail(P, "unexpected end of grammar");
    if (*P->p != '\\') {
        int k = cpulm_json_utf8_next((const unsigned char *)P->p, (size_t)(P->end - P->p), cp);
        if (k < 0) return fail(P, "invalid UTF-8");
        P->p += k;
        return 0;
    }
    P->p++;
    if (P->p >= P->end) return fail(P, "unexpected end after '\\'");
    char c = *P->p++;
    int nhex = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (nhex) {
        uint32_t v = 0;
        for (int i = 0; i < nhex; i++) {
            int h = P->p < P->end ? hexval((unsigned char)*P->p) : -1;
            if (h < 0) return fail(P, "bad hex escape");
            v = v * 16 + (uint32_t)h;
            P->p++;
        }
        if (v > 0x10FFFF) return fail(P, "code point out of range");
        *cp = v;
        return 0;
    }
    switch (c) {
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'b': *cp = '\b'; return 0;
    case '0': *cp = 0; return 0;
    default:
        if (ispunct((unsigned char)c)) {
            *cp = (unsigned char)c;
            return 0;
        }
        P->p--;
        return fail(P, "unknown escape");
    }
}

/* Does the set hold a character UTF-8 can encode (a scalar value, not a surrogate)? */
static int set_matchable(const parser *P, int32_t id) {
    cpulm_grammar g = {.ranges = P->ranges};
    const gr_set *s = &P->sets[id];
    return cpulm_gr_set_meets(&g, s, 0, 0xD7FF) || cpulm_gr_set_meets(&g, s, 0xE000, 0x10FFFF);
}

/* [...] after the '[' : returns the set index. */
static int32_t parse_class(parser *P) {
    int negate = 0;
    const char *open = P->p - 1;
    if (P->p < P->end && *P->p == '^') negate = 1, P->p++;
    uint32_t rng[512];
    int32_t n = 0;
    while (P->p < P->end && *P->p != ']') {
        uint32_t lo, hi;
        if (read_char(P, &lo) < 0) return -1;
        hi = lo;
        if (P->p + 1 < P->end && *P->p == '-' && P->p[1] != ']') {
            P->p++;
            if (read_char(P, &hi) < 0) return -1;
            if (hi < lo) return fail(P, "character range is reversed");
        }
        if (n >= 256)
            return failc(P, CPULM_ERR_LIMIT, "character class too long (limit 256 ranges)");
        rng[2 * n] = lo;
        rng[2 * n + 1] = hi;
        n++;
    }
    if (P->p >= P->end) return fail(P, "unterminated character class");
    P->p++;
    int32_t id = add_set(P, rng, n, negate);
    if (id >= 0 && !set_matchable(P, id)) {
        P->p = open;
        return fail(P, "character class matches no character");
    }
    return id;
}

/* ---- whitespace, names ---- */

/* Skips spaces and comments; newlines too when nl. */
static void skip_space(parser *P, int nl) {
    while (P->p < P->end) {
        char c = *P->p;
        if (c == ' ' || c == '\t' || (nl && (c == '\n' || c == '\r')))
            P->p++;
        else if (c == '#') {
            while (P->p < P->end && *P->p != '\n')
                P->p++;
        } else
            break;
    }
}

static int is_name_char(char c) {
    return isalnum((unsigned char)c) || c == '-' || c == '_';
}

/* ---- repetition ---- */

/* Makes the elements a[start..n) one element (wrapping several into a new rule). */
static int single_elem(parser *P, int32_t rule, ivec **a, int32_t start, gr_elem *out) {
    if ((*a)->n - start == 1) {
        *out = (*a)->v[start];
        (*a)->n = start;
        return 0;
    }
    ptrdiff_t ai = *a - P->rules[rule].alts;
    int32_t r = gen_rule(P, rule);
    if (r < 0) return -1;
    *a = P->rules[rule].alts + ai; /* rules may have moved: the alt pointer is re-derived */
    ivec *na = new_alt(P, r);
    if (!na) return -1;
    *a = P->rules[rule].alts + ai;
    for (int32_t i = start; i < (*a)->n; i++)
        if (push_elem(P, na, (*a)->v[i].kind, (*a)->v[i].arg) < 0) return -1;
    (*a)->n = start;
    *out = (gr_elem){GR_REF, r};
    return 0;
}

/* Appends X{min,max} (max < 0: unbounded) for the term a[start..n). X is made one element
 * (a reference when it is longer), so the copies share it: the result grows with min + max,
 * never with the size of X, and the rules and elements it needs are counted first. */
static int repeat(parser *P, int32_t rule, ivec **a, int32_t start, int32_t min, int32_t max) {
    int32_t n_opt = max == min ? 0 : max < 0 ? 1 : max - min;
    if ((int64_t)P->n_rules + n_opt + 1 > P->lim->max_rules)
        return failc(P, CPULM_ERR_LIMIT,
                     "more than %d rules after expanding repetitions (limit %d)", P->lim->max_rules,
                     P->lim->max_rules);
    /* each optional copy is R ::= X R | "" : 4 elements with the two alternative ends */
    if (P->n_elems + min + 4 * (int64_t)n_opt + 2 > P->lim->max_elems)
        return reserve_elems(P, min + 4 * (int64_t)n_opt + 2);
    ptrdiff_t ai = *a - P->rules[rule].alts;
    gr_elem x;
    if (single_elem(P, rule, a, start, &x) < 0) return -1;
    for (int32_t i = 0; i < min; i++)
        if (push_elem(P, *a, x.kind, x.arg) < 0) return -1;
    if (max == min) return 0;
    /* optional tail: R ::= X R | ""  (unbounded), or a chain of max - min optionals */
    int32_t first = -1, prev = -1;
    for (int32_t k = 0; k < n_opt; k++) {
        int32_t r = gen_rule(P, rule);
        if (r < 0) return -1;
        ivec *alt = new_alt(P, r);
        if (!alt || push_elem(P, alt, x.kind, x.arg) < 0) return -1;
        if (max < 0 && push_elem(P, alt, GR_REF, r) < 0) return -1;
        if (!new_alt(P, r)) return -1; /* the empty alternative */
        if (prev >= 0 && push_elem(P, &P->rules[prev].alts[0], GR_REF, r) < 0) return -1;
        if (first < 0) first = r;
        prev = r;
    }
    *a = P->rules[rule].alts + ai;
    return push_elem(P, *a, GR_REF, first);
}

static int read_int(parser *P, int32_t *out) {
    if (P->p >= P->end || !isdigit((unsigned char)*P->p)) return 0;
    long v = 0;
    while (P->p < P->end && isdigit((unsigned char)*P->p) && v <= P->lim->max_repeat)
        v = v * 10 + (*P->p++ - '0');
    if (v > P->lim->max_repeat)
        return failc(P, CPULM_ERR_LIMIT, "repetition count too large (limit %d)",
                     P->lim->max_repeat),
               -1;
    *out = (int32_t)v;
    return 1;
}

/* {m} {m,} {m,n} {,n} after the '{'. */
static int parse_braces(parser *P, int32_t *min, int32_t *max) {
    skip_space(P, 0);
    int has_min = read_int(P, min);
    if (has_min < 0) return -1;
    if (!has_min) *min = 0;
    skip_space(P, 0);
    if (P->p < P->end && *P->p == ',') {
        P->p++;
        skip_space(P, 0);
        int has_max = read_int(P, max);
        if (has_max < 0) return -1;
        if (!has_max) *max = -1;
    } else {
        if (!has_min) return fail(P, "expected a number in {}");
        *max = *min;
    }
    skip_space(P, 0);
    if (P->p >= P->end || *P->p != '}') return fail(P, "expected '}'");
    P->p++;
    if (*max >= 0 && *max < *min) return fail(P, "repetition {m,n} with n < m");
    return 0;
}

/* ---- sequences and alternatives ----
 * Each term reports its weight: the product of the bounds of the repetitions it nests
 * ((X{0,100}){0,100} is 10,000). Copies share their body, so the grammar stays small, but a
 * matcher following such a term keeps a parse stack per way of splitting the text among the
 * nested copies; the product is capped (max_rep_product) so that is refused here. */

static int parse_alternates(parser *P, int32_t rule, int nested, int64_t *w);

/* One term appended to alternative a (of rule). */
static int parse_term(parser *P, int32_t rule, ivec **a, int64_t *w) {
    ptrdiff_t ai = *a - P->rules[rule].alts;
    char c = *P->p;
    *w = 1;
    if (c == '"') {
        P->p++;
        while (P->p < P->end && *P->p != '"') {
            uint32_t cp, rng[2];
            if (read_char(P, &cp) < 0) return -1;
            if (cp >= 0xD800 && cp <= 0xDFFF) return fail(P, "a surrogate code point");
            rng[0] = rng[1] = cp;
            int32_t s = add_set(P, rng, 1, 0);
            if (s < 0 || push_elem(P, *a, GR_SET, s) < 0) return -1;
        }
        if (P->p >= P->end) return fail(P, "unterminated string literal");
        P->p++;
        return 0;
    }
    if (c == '[') {
        P->p++;
        int32_t s = parse_class(P);
        return s < 0 ? -1 : push_elem(P, *a, GR_SET, s);
    }
    if (c == '.') {
        P->p++;
        uint32_t none[2] = {0, 0};
        int32_t s = add_set(P, none, 0, 1);
        return s < 0 ? -1 : push_elem(P, *a, GR_SET, s);
    }
    if (c == '(') {
        if (++P->depth > P->lim->max_nesting)
            return failc(P, CPULM_ERR_LIMIT, "groups nested too deeply (limit %d)",
                         P->lim->max_nesting);
        P->p++;
        int32_t r = gen_rule(P, rule);
        if (r < 0 || parse_alternates(P, r, 1, w) < 0) return -1;
        skip_space(P, 1);
        if (P->p >= P->end || *P->p != ')') return fail(P, "expected ')'");
        P->p++;
        P->depth--;
        *a = P->rules[rule].alts + ai;
        return push_elem(P, *a, GR_REF, r);
    }
    if (is_name_char(c)) {
        const char *q = P->p;
        while (P->p < P->end && is_name_char(*P->p))
            P->p++;
        int32_t r = rule_id(P, q, (size_t)(P->p - q));
        *a = P->rules[rule].alts + ai;
        return r < 0 ? -1 : push_elem(P, *a, GR_REF, r);
    }
    return fail(P, "expected a literal, [class], rule name or '('");
}

static int parse_postfix(parser *P, int32_t rule, ivec **a, int32_t start, int64_t *w) {
    while (P->p < P->end) {
        char c = *P->p;
        int32_t min, max;
        if (c == '*')
            min = 0, max = -1;
        else if (c == '+')
            min = 1, max = -1;
        else if (c == '?')
            min = 0, max = 1;
        else if (c == '{') {
            P->p++;
            if (parse_braces(P, &min, &max) < 0) return -1;
            P->p--; /* the shared ++ below */
        } else
            return 0;
        P->p++;
        int32_t f = max < 0 ? min : max; /* an unbounded tail is one self-recursive rule */
        *w *= f > 1 ? f : 1;
        if (*w > P->lim->max_rep_product)
            return failc(P, CPULM_ERR_LIMIT,
                         "nested repetitions multiply to more than %d copies (limit %d)",
                         P->lim->max_rep_product, P->lim->max_rep_product);
        if (repeat(P, rule, a, start, min, max) < 0) return -1; /* a[start..) is the result */
    }
    return 0;
}

static int parse_sequence(parser *P, int32_t rule, int nested, int64_t *w) {
    ivec *a = new_alt(P, rule);
    if (!a) return -1;
    for (;;) {
        skip_space(P, nested);
        if (P->p >= P->end) return 0;
        char c = *P->p;
        if (c == '|' || c == ')' || c == '\n' || c == '\r') return 0;
        int32_t start = a->n;
        int64_t tw = 1;
        if (parse_term(P, rule, &a, &tw) < 0) return -1;
        if (a->n == start) continue; /* "" adds nothing; a postfix on it is meaningless */
        if (parse_postfix(P, rule, &a, start, &tw) < 0) return -1;
        if (tw > *w) *w = tw;
    }
}

/* At a newline at top level: does the rule go on with '|' on a following line? */
static int continues_with_bar(parser *P) {
    const char *save = P->p;
    skip_space(P, 1);
    if (P->p < P->end && *P->p == '|') return 1;
    P->p = save;
    return 0;
}

/* *w: the largest weight of a term in any alternative. */
static int parse_alternates(parser *P, int32_t rule, int nested, int64_t *w) {
    *w = 1;
    for (;;) {
        if (parse_sequence(P, rule, nested, w) < 0) return -1;
        skip_space(P, nested);
        if (P->p < P->end && *P->p == '|') {
            P->p++;
            skip_space(P, 1);
            continue;
        }
        if (!nested && continues_with_bar(P)) {
            P->p++;
            skip_space(P, 1);
            continue;
        }
        return 0;
    }
}

static int parse_rule(parser *P) {
    const char *q = P->p;
    while (P->p < P->end && is_name_char(*P->p))
        P->p++;
    if (P->p == q) return fail(P, "expected a rule name");
    int32_t r = rule_id(P, q, (size_t)(P->p - q));
    if (r < 0) return -1;
    skip_space(P, 0);
    if (P->end - P->p < 3 || memcmp(P->p, "::=", 3) != 0) return fail(P, "expected '::='");
    P->p += 3;
    if (P->rules[r].defined) return fail(P, "rule defined twice");
    P->rules[r].defined = 1;
    skip_space(P, 1);
    int64_t w;
    if (parse_alternates(P, r, 0, &w) < 0) return -1;
    skip_space(P, 0);
    if (P->p < P->end && *P->p != '\n' && *P->p != '\r') return fail(P, "expected end of line");
    return 0;
}

/* ---- checks ---- */

static int check_defined(parser *P) {
    for (int32_t r = 0; r < P->n_rules; r++)
        if (!P->rules[r].defined) {
            P->p = P->end;
            return failc(P, CPULM_ERR_FORMAT, "rule '%.100s' is used but not defined",
                         P->rules[r].name);
        }
    return 0;
}

/* The user rule named name, or -1. */
static int32_t find_rule(parser *P, const char *name) {
    size_t n = strlen(name);
    if (!P->name_cap) return -1;
    uint32_t mask = P->name_cap - 1, h = (uint32_t)name_hash(P, name, n);
    for (int32_t id; (id = P->name_ht[h & mask]) >= 0; h++)
        if (!strcmp(P->rules[id].name, name)) return id;
    return -1;
}

/* ---- output ---- */

static cpulm_grammar *flatten(parser *P, int32_t root) {
    cpulm_grammar *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    atomic_init(&g->refs, 1);
    int32_t n_alt = 0, n_el = 0;
    for (int32_t r = 0; r < P->n_rules; r++)
        for (int32_t k = 0; k < P->rules[r].n_alts; k++)
            n_alt++, n_el += P->rules[r].alts[k].n + 1;
    g->rules = calloc((size_t)P->n_rules + 1, sizeof *g->rules);
    g->alt_start = malloc(sizeof(int32_t) * ((size_t)n_alt + 1));
    g->elems = malloc(sizeof(gr_elem) * ((size_t)n_el + 1));
    g->n_rules = P->n_rules;
    if (!g->rules || !g->alt_start || !g->elems) {
        cpulm_grammar_free(g);
        return NULL;
    }
    size_t names = 0;
    for (int32_t r = 0; r < P->n_rules; r++) {
        gr_rule *gr = &g->rules[r];
        gr->name = P->rules[r].name;
        names += strlen(gr->name) + 1;
        P->rules[r].name = NULL;
        gr->first_alt = g->n_alt;
        gr->n_alts = P->rules[r].n_alts;
        for (int32_t k = 0; k < P->rules[r].n_alts; k++) {
            const ivec *a = &P->rules[r].alts[k];
            g->alt_start[g->n_alt++] = g->n_elems;
            for (int32_t i = 0; i < a->n; i++)
                g->elems[g->n_elems++] = a->v[i];
            g->elems[g->n_elems++] = (gr_elem){GR_END, 0};
        }
    }
    g->sets = P->sets;
    g->n_sets = P->n_sets;
    g->ranges = P->ranges;
    g->n_ranges = P->n_ranges;
    P->sets = NULL;
    P->ranges = NULL;
    g->root = root;
    g->bytes = sizeof *g + names + sizeof *g->rules * (size_t)g->n_rules +
               sizeof(int32_t) * (size_t)(n_alt + 1) + (sizeof(gr_elem) + 4) * (size_t)(n_el + 1) +
               sizeof *g->sets * (size_t)g->n_sets + 8 * (size_t)g->n_ranges;
    return g;
}

static void parser_release(parser *P) {
    for (int32_t r = 0; r < P->n_rules; r++) {
        for (int32_t k = 0; k < P->rules[r].n_alts; k++)
            free(P->rules[r].alts[k].v);
        free(P->rules[r].alts);
        free(P->rules[r].name);
    }
    free(P->rules);
    free(P->name_ht);
    free(P->sets);
    free(P->set_ht);
    free(P->ranges);
}

cpulm_grammar_limits cpulm_grammar_default_limits(void) {
    return (cpulm_grammar_limits){.max_bytes = 4u << 20,
                                  .max_rules = 65536,
                                  .max_elems = 1 << 21,
                                  .max_alts = 2048,
                                  .max_repeat = 4096,
                                  .max_rep_product = 65536,
                                  .max_nesting = 256,
                                  .max_chain = 4096};
}

/* Parses every rule and checks that the used ones are defined; the root's index or -1. */
static int32_t parse_all(parser *P, const char *root) {
    for (;;) {
        skip_space(P, 1);
        if (P->p >= P->end || P->failed) break;
        if (parse_rule(P) < 0) break;
    }
    if (P->failed) return -1;
    int32_t r = find_rule(P, root);
    if (r < 0) return failc(P, CPULM_ERR_FORMAT, "no rule named '%.100s'", root);
    return check_defined(P) < 0 ? -1 : r;
}

cpulm_status cpulm_grammar_parse_ex(const char *text, size_t len, const char *root,
                                    const cpulm_grammar_limits *lim, cpulm_grammar **out,
                                    uint64_t *work, cpulm_error *err) {
    *out = NULL;
    if (work) *work = 0;
    cpulm_grammar_limits dl = cpulm_grammar_default_limits();
    if (!lim) lim = &dl;
    if (len > lim->max_bytes)
        return cpulm_errf(err, CPULM_ERR_LIMIT, "grammar: %zu bytes, more than the limit of %zu",
                          len, lim->max_bytes);
    parser P = {.s = text, .end = text + len, .p = text, .err = err, .lim = lim};
    P.seed = hash_bytes((uint64_t)time(NULL), &P.s, sizeof P.s) ^ (uint64_t)(uintptr_t)&P;
    int32_t r = parse_all(&P, root ? root : "root");
    cpulm_grammar *g = r >= 0 ? flatten(&P, r) : NULL;
    if (r >= 0 && !g) oom(&P);
    uint64_t wk = P.work;
    int oomed = P.oom;
    parser_release(&P);
    cpulm_status st = P.failed ? (oomed ? CPULM_ERR_NOMEM : P.code) : CPULM_OK;
    if (st == CPULM_OK) st = cpulm_gr_check(g, lim->max_chain, &wk, err);
    if (st == CPULM_OK && cpulm_gr_compute_rest(g, &wk) < 0)
        st = cpulm_errf(err, CPULM_ERR_NOMEM, "grammar: out of memory");
    if (st == CPULM_OK) st = cpulm_gr_preflight(g, &wk, err);
    if (work) *work = wk;
    if (st != CPULM_OK) {
        cpulm_grammar_free(g);
        return st;
    }
    *out = g;
    return CPULM_OK;
}

cpulm_status cpulm_grammar_parse(const char *text, size_t len, const char *root,
                                 cpulm_grammar **out, cpulm_error *err) {
    return cpulm_grammar_parse_ex(text, len, root, NULL, out, NULL, err);
}

cpulm_grammar *cpulm_grammar_ref(cpulm_grammar *g) {
    if (g) atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
    return g;
}

void cpulm_grammar_free(cpulm_grammar *g) {
    if (!g || atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) != 1) return;
    for (int32_t r = 0; g->rules && r < g->n_rules; r++)
        free(g->rules[r].name);
    free(g->rules);
    free(g->alt_start);
    free(g->elems);
    free(g->sets);
    free(g->ranges);
    free(g->rest);
    free(g);
}

int32_t cpulm_grammar_n_rules(const cpulm_grammar *g) {
    return g->n_rules;
}

size_t cpulm_grammar_bytes(const cpulm_grammar *g) {
    return g->bytes;
}

/* Ranges are sorted, disjoint and not adjacent: a negated set misses some c in [lo, hi]
 * unless one range covers all of [lo, hi]. */
int cpulm_gr_set_meets(const cpulm_grammar *g, const gr_set *s, uint32_t lo, uint32_t hi) {
    const uint32_t *r = g->ranges + 2 * s->first;
    for (int32_t i = 0; i < s->n; i++) {
        if (!s->negate && r[2 * i] <= hi && r[2 * i + 1] >= lo) return 1;
        if (s->negate && r[2 * i] <= lo && r[2 * i + 1] >= hi) return 0;
    }
    return s->negate;
}
