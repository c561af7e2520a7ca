/* gbnf.c: GBNF text -> compiled grammar (grammar_int.h).
 *
 * A recursive-descent parser builds rules as lists of alternatives; groups become
 * generated rules, and repetitions are rewritten into plain rules (X* -> R ::= X R | "",
 * X{m,n} -> m copies then a chain of n - m optional copies), as llama.cpp does, so the
 * matcher only knows sets, references and alternative ends. Then references are checked
 * (every used rule is defined) and left recursion is rejected.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"

#define MAX_REPEAT 4096 /* {m,n} bounds: larger would blow the grammar up */
#define MAX_RULES  65536
#define MAX_DEPTH  256 /* group nesting */

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
    brule *rules;
    int32_t n_rules, cap_rules;
    gr_set *sets;
    int32_t n_sets, cap_sets;
    uint32_t *ranges;
    int32_t n_ranges, cap_ranges;
    int depth;
    int oom;
    cpulm_error *err;
    int failed;
} parser;

static void *grow(void *p, int32_t *cap, int32_t need, size_t sz, int *oom) {
    if (need <= *cap) return p;
    int32_t c = *cap ? *cap : 8;
    while (c < need)
        c *= 2;
    void *q = realloc(p, (size_t)c * sz);
    if (!q) {
        *oom = 1;
        return NULL;
    }
    *cap = c;
    return q;
}

static int fail(parser *P, const char *msg) {
    if (P->failed) return -1;
    P->failed = 1;
    int line = 1, col = 1;
    for (const char *q = P->s; q < P->p && q < P->end; q++) {
        if (*q == '\n')
            line++, col = 1;
        else
            col++;
    }
    cpulm_errf(P->err, CPULM_ERR_FORMAT, "grammar: line %d col %d: %s", line, col, msg);
    return -1;
}

static int push_elem(parser *P, ivec *a, int32_t kind, int32_t arg) {
    gr_elem *v = grow(a->v, &a->cap, a->n + 1, sizeof *v, &P->oom);
    if (!v) return fail(P, "out of memory");
    a->v = v;
    a->v[a->n++] = (gr_elem){kind, arg};
    return 0;
}

static ivec *new_alt(parser *P, int32_t rule) {
    brule *r = &P->rules[rule];
    ivec *a = grow(r->alts, &r->cap_alts, r->n_alts + 1, sizeof *a, &P->oom);
    if (!a) {
        fail(P, "out of memory");
        return NULL;
    }
    r->alts = a;
    memset(&a[r->n_alts], 0, sizeof *a);
    return &a[r->n_alts++];
}

/* Finds or creates a rule by name (n bytes). Returns its index or -1. */
static int32_t rule_id(parser *P, const char *name, size_t n) {
    for (int32_t i = 0; i < P->n_rules; i++)
        if (strlen(P->rules[i].name) == n && memcmp(P->rules[i].name, name, n) == 0) return i;
    if (P->n_rules >= MAX_RULES) return fail(P, "too many rules");
    brule *r = grow(P->rules, &P->cap_rules, P->n_rules + 1, sizeof *r, &P->oom);
    char *nm = malloc(n + 1);
    if (!r || !nm) {
        free(nm);
        if (r) P->rules = r;
        return fail(P, "out of memory");
    }
    P->rules = r;
    memcpy(nm, name, n);
    nm[n] = 0;
    memset(&r[P->n_rules], 0, sizeof *r);
    r[P->n_rules].name = nm;
    return P->n_rules++;
}

/* A generated rule named parent_N (names cannot collide: '_' never starts a user suffix
 * that we also generate, and a collision with a user name only shares a definition check). */
static int32_t gen_rule(parser *P, int32_t parent) {
    char name[160];
    snprintf(name, sizeof name, "%.100s__%d", P->rules[parent].name, P->n_rules);
    int32_t r = rule_id(P, name, strlen(name));
    if (r >= 0) P->rules[r].defined = 1;
    return r;
}

/* ---- character sets ---- */

static int32_t add_set(parser *P, const uint32_t *rng, int32_t n, int negate) {
    gr_set *s = grow(P->sets, &P->cap_sets, P->n_sets + 1, sizeof *s, &P->oom);
    if (!s) return fail(P, "out of memory");
    P->sets = s;
    uint32_t *r = grow(P->ranges, &P->cap_ranges, 2 * (P->n_ranges + n) + 2, sizeof *r, &P->oom);
    if (!r) return fail(P, "out of memory");
    P->ranges = r;
    gr_set *x = &P->sets[P->n_sets];
    memset(x, 0, sizeof *x);
    x->first = P->n_ranges;
    x->n = n;
    x->negate = negate;
    if (n) memcpy(P->ranges + 2 * P->n_ranges, rng, sizeof(uint32_t) * 2 * (size_t)n);
    P->n_ranges += n;
    for (uint32_t c = 0; c < 128; c++) {
        int in = 0;
        for (int32_t i = 0; i < n; i++)
            in |= c >= rng[2 * i] && c <= rng[2 * i + 1];
        if (in ^ negate) x->ascii[c >> 5] |= 1u << (c & 31);
    }
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

/* [...] after the '[' : returns the set index. */
static int32_t parse_class(parser *P) {
    int negate = 0;
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
        if (n >= 256) return fail(P, "character class too long");
        rng[2 * n] = lo;
        rng[2 * n + 1] = hi;
        n++;
    }
    if (P->p >= P->end) return fail(P, "unterminated character class");
    P->p++;
    return add_set(P, rng, n, negate);
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

/* Appends X{min,max} (max < 0: unbounded) for the term a[start..n). */
static int repeat(parser *P, int32_t rule, ivec **a, int32_t start, int32_t min, int32_t max) {
    ptrdiff_t ai = *a - P->rules[rule].alts;
    gr_elem x;
    if (single_elem(P, rule, a, start, &x) < 0) return -1;
    for (int32_t i = 0; i < min; i++)
        if (push_elem(P, *a, x.kind, x.arg) < 0) return -1;
    if (max == min) return 0;
    /* optional tail: R ::= X R | ""  (unbounded), or a chain of max - min optionals */
    int32_t n_opt = max < 0 ? 1 : max - min, first = -1, prev = -1;
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
    while (P->p < P->end && isdigit((unsigned char)*P->p) && v <= MAX_REPEAT)
        v = v * 10 + (*P->p++ - '0');
    if (v > MAX_REPEAT) return fail(P, "repetition count too large"), -1;
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

/* ---- sequences and alternatives ---- */

static int parse_alternates(parser *P, int32_t rule, int nested);

/* One term appended to alternative a (of rule). */
static int parse_term(parser *P, int32_t rule, ivec **a) {
    ptrdiff_t ai = *a - P->rules[rule].alts;
    char c = *P->p;
    if (c == '"') {
        P->p++;
        while (P->p < P->end && *P->p != '"') {
            uint32_t cp, rng[2];
            if (read_char(P, &cp) < 0) return -1;
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
        int32_t s = add_set(P, NULL, 0, 1);
        return s < 0 ? -1 : push_elem(P, *a, GR_SET, s);
    }
    if (c == '(') {
        if (++P->depth > MAX_DEPTH) return fail(P, "groups nested too deeply");
        P->p++;
        int32_t r = gen_rule(P, rule);
        if (r < 0 || parse_alternates(P, r, 1) < 0) return -1;
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

static int parse_postfix(parser *P, int32_t rule, ivec **a, int32_t start) {
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
        if (repeat(P, rule, a, start, min, max) < 0) return -1; /* a[start..) is the result */
    }
    return 0;
}

static int parse_sequence(parser *P, int32_t rule, int nested) {
    ivec *a = new_alt(P, rule);
    if (!a) return -1;
    for (;;) {
        skip_space(P, nested);
        if (P->p >= P->end) return 0;
        char c = *P->p;
        if (c == '|' || c == ')' || c == '\n' || c == '\r') return 0;
        int32_t start = a->n;
        if (parse_term(P, rule, &a) < 0) return -1;
        if (a->n == start) continue; /* "" adds nothing; a postfix on it is meaningless */
        if (parse_postfix(P, rule, &a, start) < 0) return -1;
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

static int parse_alternates(parser *P, int32_t rule, int nested) {
    for (;;) {
        if (parse_sequence(P, rule, nested) < 0) return -1;
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
    if (parse_alternates(P, r, 0) < 0) return -1;
    skip_space(P, 0);
    if (P->p < P->end && *P->p != '\n' && *P->p != '\r') return fail(P, "expected end of line");
    return 0;
}

/* ---- checks ---- */

/* nullable[r]: rule r can match the empty string (fixpoint over all rules). */
static void compute_nullable(const parser *P, uint8_t *nullable) {
    memset(nullable, 0, (size_t)P->n_rules);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int32_t r = 0; r < P->n_rules; r++) {
            if (nullable[r]) continue;
            for (int32_t k = 0; k < P->rules[r].n_alts && !nullable[r]; k++) {
                const ivec *a = &P->rules[r].alts[k];
                int all = 1;
                for (int32_t i = 0; i < a->n && all; i++)
                    all = a->v[i].kind == GR_REF && nullable[a->v[i].arg];
                if (all) nullable[r] = 1, changed = 1;
            }
        }
    }
}

/* DFS over "r can start with rule x" edges; state 1 = on the path, 2 = done. */
static int left_rec(const parser *P, const uint8_t *nullable, uint8_t *state, int32_t r) {
    if (state[r] == 1) return 1;
    if (state[r] == 2) return 0;
    state[r] = 1;
    for (int32_t k = 0; k < P->rules[r].n_alts; k++) {
        const ivec *a = &P->rules[r].alts[k];
        for (int32_t i = 0; i < a->n; i++) {
            if (a->v[i].kind != GR_REF) break;
            if (left_rec(P, nullable, state, a->v[i].arg)) return 1;
            if (!nullable[a->v[i].arg]) break;
        }
    }
    state[r] = 2;
    return 0;
}

static int check_rules(parser *P) {
    for (int32_t r = 0; r < P->n_rules; r++)
        if (!P->rules[r].defined) {
            char msg[200];
            snprintf(msg, sizeof msg, "rule '%.100s' is used but not defined", P->rules[r].name);
            P->p = P->end;
            return fail(P, msg);
        }
    uint8_t *nullable = malloc((size_t)P->n_rules), *state = calloc((size_t)P->n_rules, 1);
    int bad = 0, rc = 0;
    if (!nullable || !state) rc = fail(P, "out of memory");
    if (!rc) compute_nullable(P, nullable);
    for (int32_t r = 0; !rc && r < P->n_rules && !bad; r++) {
        bad = left_rec(P, nullable, state, r);
        if (bad) {
            char msg[200];
            snprintf(msg, sizeof msg, "rule '%.100s' is left-recursive", P->rules[r].name);
            P->p = P->end;
            rc = fail(P, msg);
        }
    }
    free(nullable);
    free(state);
    return rc;
}

/* ---- output ---- */

static cpulm_grammar *flatten(parser *P, int32_t root) {
    cpulm_grammar *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    int32_t n_alt = 0, n_el = 0;
    for (int32_t r = 0; r < P->n_rules; r++)
        for (int32_t k = 0; k < P->rules[r].n_alts; k++)
            n_alt++, n_el += P->rules[r].alts[k].n + 1;
    g->rules = calloc((size_t)P->n_rules, sizeof *g->rules);
    g->alt_start = malloc(sizeof(int32_t) * (size_t)(n_alt + 1));
    g->elems = malloc(sizeof(gr_elem) * (size_t)(n_el + 1));
    g->n_rules = P->n_rules;
    if (!g->rules || !g->alt_start || !g->elems) {
        cpulm_grammar_free(g);
        return NULL;
    }
    for (int32_t r = 0; r < P->n_rules; r++) {
        gr_rule *gr = &g->rules[r];
        gr->name = P->rules[r].name;
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
    if (cpulm_gr_compute_rest(g) < 0) {
        cpulm_grammar_free(g);
        return NULL;
    }
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
    free(P->sets);
    free(P->ranges);
}

cpulm_status cpulm_grammar_parse(const char *text, size_t len, const char *root,
                                 cpulm_grammar **out, cpulm_error *err) {
    *out = NULL;
    parser P = {.s = text, .end = text + len, .p = text, .err = err};
    if (!root) root = "root";
    for (;;) {
        skip_space(&P, 1);
        if (P.p >= P.end || P.failed) break;
        if (parse_rule(&P) < 0) break;
    }
    int32_t r = -1;
    if (!P.failed) {
        for (int32_t i = 0; i < P.n_rules && r < 0; i++)
            if (!strcmp(P.rules[i].name, root)) r = i;
        if (r < 0) {
            char msg[160];
            snprintf(msg, sizeof msg, "no rule named '%.100s'", root);
            fail(&P, msg);
        }
    }
    if (!P.failed) check_rules(&P);
    if (!P.failed) {
        *out = flatten(&P, r);
        if (!*out) {
            P.failed = 1;
            cpulm_errf(err, CPULM_ERR_NOMEM, "grammar: out of memory");
        }
    }
    int oom = P.oom;
    int failed = P.failed;
    parser_release(&P);
    if (failed) return oom ? CPULM_ERR_NOMEM : CPULM_ERR_FORMAT;
    return CPULM_OK;
}

void cpulm_grammar_free(cpulm_grammar *g) {
    if (!g) return;
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

int cpulm_gr_set_meets(const cpulm_grammar *g, const gr_set *s, uint32_t lo, uint32_t hi) {
    if (!s->negate) {
        for (int32_t i = 0; i < s->n; i++)
            if (g->ranges[2 * (s->first + i)] <= hi && g->ranges[2 * (s->first + i) + 1] >= lo)
                return 1;
        return 0;
    }
    /* negated: some c in [lo, hi] outside every range. Walk c upward past covering ranges. */
    uint32_t c = lo;
    for (int moved = 1; moved && c <= hi;) {
        moved = 0;
        for (int32_t i = 0; i < s->n; i++) {
            uint32_t a = g->ranges[2 * (s->first + i)], b = g->ranges[2 * (s->first + i) + 1];
            if (c >= a && c <= b) {
                if (b == 0xFFFFFFFFu) return 0;
                c = b + 1;
                moved = 1;
            }
        }
    }
    return c <= hi;
}
