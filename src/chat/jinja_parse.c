/* jinja_parse.c: Jinja template text -> AST.
 *
 * Lexing follows Jinja2's lexer: newlines are normalised to \n and one trailing newline is
 * dropped (keep_trailing_newline off); "{%-"/"-%}" strip all whitespace on that side;
 * trim_blocks drops the newline right after a block or comment tag; lstrip_blocks drops
 * spaces/tabs between the start of a line and a block or comment tag ("+" disables both).
 * The parser is recursive descent with Jinja's operator precedence; its recursion depth is
 * capped so hostile templates cannot exhaust the stack. All memory is in the template's arena.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_int.h"

#define MAX_TEMPLATE_BYTES (1u << 20)
#define MAX_NESTING        200

/* ---- arena ---- */

struct jchunk {
    struct jchunk *next;
    size_t used, cap;
    max_align_t mem[];
};

void *cpulm_jinja_alloc(jarena *a, size_t n) {
    if (n > SIZE_MAX / 2) return NULL;
    n = (n + 15) & ~(size_t)15;
    if (a->limit && (a->used > a->limit || n > a->limit - a->used)) return NULL;
    struct jchunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = c ? c->cap * 2 : 8192;
        if (cap > ((size_t)1 << 22)) cap = (size_t)1 << 22;
        if (cap < n) cap = n;
        struct jchunk *nc = malloc(sizeof *nc + cap);
        if (!nc) return NULL;
        nc->next = c;
        nc->used = 0;
        nc->cap = cap;
        a->head = c = nc;
    }
    void *p = (char *)c->mem + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void cpulm_jinja_arena_free(jarena *a) {
    for (struct jchunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
    a->used = 0;
}

/* ---- tokens ---- */

typedef enum ttype {
    T_EOF,
    T_TEXT,
    T_VAR_BEGIN,
    T_VAR_END,
    T_BLOCK_BEGIN,
    T_BLOCK_END,
    T_NAME,
    T_STRING,
    T_INT,
    T_FLOAT,
    T_OP,
} ttype;

typedef struct jtok {
    ttype t;
    int32_t line;
    const char *s; /* TEXT, NAME, STRING (decoded), OP: bytes in the arena or the source */
    size_t len;
    int64_t i;
    double f;
} jtok;

typedef struct lexer {
    const char *src; /* normalised copy, in the arena */
    size_t n, pos;
    int32_t line;
    cpulm_jinja_syntax syn;
    jarena *arena;
    int balance; /* open ( [ { inside the current tag: "}}" there is not a closer */
    jtok *toks;  /* malloc'd, freed after parsing */
    size_t n_toks, cap_toks;
    cpulm_status st;
    cpulm_error *err;
} lexer;

static int lex_fail(lexer *lx, const char *fmt, ...) CPULM_PRINTF(2, 3);
static int lex_fail(lexer *lx, const char *fmt, ...) {
    if (lx->st) return -1;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    lx->st = cpulm_errf(lx->err, CPULM_ERR_FORMAT, "jinja: line %d: %s", lx->line, msg);
    return -1;
}

static jtok *push_tok(lexer *lx, ttype t, const char *s, size_t len) {
    if (lx->n_toks == lx->cap_toks) {
        size_t cap = lx->cap_toks ? lx->cap_toks * 2 : 256;
        jtok *nt = realloc(lx->toks, cap * sizeof *nt);
        if (!nt) {
            lx->st = cpulm_errf(lx->err, CPULM_ERR_NOMEM, "jinja: out of memory");
            return NULL;
        }
        lx->toks = nt;
        lx->cap_toks = cap;
    }
    jtok *tk = &lx->toks[lx->n_toks++];
    memset(tk, 0, sizeof *tk);
    tk->t = t;
    tk->line = lx->line;
    tk->s = s;
    tk->len = len;
    return tk;
}

static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
static int is_digit(char c) {
    return c >= '0' && c <= '9';
}
static int is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static void count_lines(lexer *lx, size_t from, size_t to) {
    for (size_t i = from; i < to; i++)
        lx->line += lx->src[i] == '\n';
}

/* Skips whitespace after a "-" closer; returns 1 if what it consumed ended with '\n'. */
static int skip_ws_after(lexer *lx) {
    size_t start = lx->pos;
    while (lx->pos < lx->n && is_space(lx->src[lx->pos]))
        lx->pos++;
    count_lines(lx, start, lx->pos);
    return lx->pos > start && lx->src[lx->pos - 1] == '\n';
}

/* Python string-literal escapes (Jinja decodes literals with "unicode-escape"). */
static size_t decode_escape(const char *s, size_t n, size_t i, char *out, size_t *k) {
    char c = s[i];
    static const char simple[] = "n\nt\tr\r\\\\'\'\"\"a\ab\bf\fv\v";
    for (const char *p = simple; *p; p += 2)
        if (c == p[0]) {
            out[(*k)++] = p[1];
            return 1;
        }
    int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (digits && i + (size_t)digits < n) {
        uint32_t cp = 0;
        for (int d = 1; d <= digits; d++) {
            char h = s[i + (size_t)d];
            int v = is_digit(h)                              ? h - '0'
                    : (h | 0x20) >= 'a' && (h | 0x20) <= 'f' ? (h | 0x20) - 'a' + 10
                                                             : -1;
            if (v < 0) return 0;
            cp = cp * 16 + (uint32_t)v;
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
        *k += (size_t)cpulm_json_utf8_put(cp, out + *k);
        return (size_t)digits + 1;
    }
    if (c >= '0' && c <= '7') { /* octal, up to 3 digits */
        uint32_t cp = 0;
        size_t j = 0;
        while (j < 3 && i + j < n && s[i + j] >= '0' && s[i + j] <= '7')
            cp = cp * 8 + (uint32_t)(s[i + j++] - '0');
        *k += (size_t)cpulm_json_utf8_put(cp, out + *k);
        return j;
    }
    return 0; /* unknown escape: Python keeps the backslash */
}

static int lex_string(lexer *lx) {
    char q = lx->src[lx->pos];
    size_t start = ++lx->pos, end = start;
    while (end < lx->n && lx->src[end] != q)
        end += lx->src[end] == '\\' ? 2 : 1;
    if (end >= lx->n) return lex_fail(lx, "unterminated string literal");
    /* decoded never exceeds 2x the source (\x escapes above U+007F grow to 2 bytes) */
    char *out = cpulm_jinja_alloc(lx->arena, (end - start) * 2 + 1);
    if (!out) return lex_fail(lx, "out of memory");
    size_t k = 0;
    for (size_t i = start; i < end;) {
        if (lx->src[i] == '\\' && i + 1 < end) {
            size_t used = decode_escape(lx->src, end, i + 1, out, &k);
            if (used) {
                i += 1 + used;
                continue;
            }
        }
        out[k++] = lx->src[i++];
    }
    out[k] = '\0';
    jtok *tk = push_tok(lx, T_STRING, out, k);
    count_lines(lx, start, end);
    lx->pos = end + 1;
    return tk ? 0 : -1;
}

static int lex_number(lexer *lx) {
    size_t start = lx->pos, i = start;
    int is_float = 0;
    while (i < lx->n && (is_digit(lx->src[i]) || lx->src[i] == '_'))
        i++;
    if (i + 1 < lx->n && lx->src[i] == '.' && is_digit(lx->src[i + 1])) {
        is_float = 1;
        for (i++; i < lx->n && (is_digit(lx->src[i]) || lx->src[i] == '_');)
            i++;
    }
    if (i < lx->n && (lx->src[i] == 'e' || lx->src[i] == 'E')) {
        size_t j = i + 1;
        if (j < lx->n && (lx->src[j] == '+' || lx->src[j] == '-')) j++;
        if (j < lx->n && is_digit(lx->src[j])) {
            is_float = 1;
            for (i = j; i < lx->n && is_digit(lx->src[i]);)
                i++;
        }
    }
    char buf[64];
    size_t k = 0;
    for (size_t j = start; j < i && k < sizeof buf - 1; j++)
        if (lx->src[j] != '_') buf[k++] = lx->src[j];
    buf[k] = '\0';
    if (i - start >= sizeof buf) return lex_fail(lx, "number literal too long");
    jtok *tk = push_tok(lx, is_float ? T_FLOAT : T_INT, lx->src + start, i - start);
    if (!tk) return -1;
    cpulm_json_doc *d = NULL; /* reuse the JSON number reader: exact and locale-free */
    if (cpulm_json_parse(buf, k, NULL, &d, NULL, NULL) != CPULM_OK)
        return lex_fail(lx, "invalid number literal");
    const cpulm_json *v = cpulm_json_root(d);
    if (!is_float && !v->is_int) {
        cpulm_json_free(d);
        return lex_fail(lx, "integer literal out of range");
    }
    tk->i = v->u.num.i;
    tk->f = v->u.num.f;
    cpulm_json_free(d);
    lx->pos = i;
    return 0;
}

static int lex_op(lexer *lx) {
    static const char *const two[] = {"//", "**", "==", "!=", "<=", ">="};
    const char *s = lx->src + lx->pos;
    for (size_t j = 0; j < sizeof two / sizeof two[0]; j++)
        if (lx->n - lx->pos >= 2 && s[0] == two[j][0] && s[1] == two[j][1]) {
            lx->pos += 2;
            return push_tok(lx, T_OP, s, 2) ? 0 : -1;
        }
    if (!strchr("+-*/%~<>=()[]{},.:|", s[0]) || s[0] == '\0')
        return lex_fail(lx, "unexpected character '%c' in tag", s[0]);
    if (strchr("([{", s[0])) lx->balance++;
    if (strchr(")]}", s[0]) && lx->balance > 0) lx->balance--;
    lx->pos++;
    return push_tok(lx, T_OP, s, 1) ? 0 : -1;
}

/* Lexes a tag's inside up to its closer; returns the closer's sign ('-', '+' or 0). */
static int lex_tag(lexer *lx, int is_block, int *sign) {
    char c1 = is_block ? '%' : '}';
    lx->balance = 0;
    for (;;) {
        size_t start = lx->pos;
        while (lx->pos < lx->n && is_space(lx->src[lx->pos]))
            lx->pos++;
        count_lines(lx, start, lx->pos);
        if (lx->pos >= lx->n) return lex_fail(lx, "unclosed tag");
        const char *s = lx->src + lx->pos;
        size_t left = lx->n - lx->pos;
        if (lx->balance > 0) {
            /* inside brackets: a '}' belongs to a dict literal */
        } else if ((s[0] == '-' || s[0] == '+') && left >= 3 && s[1] == c1 && s[2] == '}') {
            if (s[0] == '+' && !is_block) return lex_fail(lx, "'+}}' is not valid");
            *sign = s[0];
            lx->pos += 3;
            return 0;
        } else if (left >= 2 && s[0] == c1 && s[1] == '}') {
            *sign = 0;
            lx->pos += 2;
            return 0;
        }
        int rc;
        if (is_name_start(s[0])) {
            size_t i = lx->pos;
            while (i < lx->n && (is_name_start(lx->src[i]) || is_digit(lx->src[i])))
                i++;
            rc = push_tok(lx, T_NAME, s, i - lx->pos) ? 0 : -1;
            lx->pos = i;
        } else if (s[0] == '\'' || s[0] == '"') {
            rc = lex_string(lx);
        } else if (is_digit(s[0])) {
            rc = lex_number(lx);
        } else {
            rc = lex_op(lx);
        }
        if (rc) return -1;
    }
}

/* Text before a tag, after "{%-" or lstrip_blocks trimming. */
static int emit_text(lexer *lx, size_t start, size_t end, char kind, char sign, int line_starting) {
    if (sign == '-') {
        while (end > start && is_space(lx->src[end - 1]))
            end--;
    } else if (sign != '+' && lx->syn.lstrip_blocks && (kind == '%' || kind == '#')) {
        size_t l = end;
        while (l > start && lx->src[l - 1] != '\n')
            l--;
        int only_ws = l < end;
        for (size_t i = l; i < end && only_ws; i++)
            only_ws = lx->src[i] == ' ' || lx->src[i] == '\t' || lx->src[i] == '\r' ||
                      lx->src[i] == '\f' || lx->src[i] == '\v';
        if (only_ws && (l > start || line_starting)) end = l;
    }
    if (end > start && !push_tok(lx, T_TEXT, lx->src + start, end - start)) return -1;
    return 0;
}

/* After a closer: "-" eats all whitespace; trim_blocks eats one newline after %} and #}.
 * Returns Jinja's line_starting: whether what the closer consumed ended with a newline. */
static int after_close(lexer *lx, char kind, int sign) {
    if (sign == '-') return skip_ws_after(lx);
    if (sign != '+' && kind != '{' && lx->syn.trim_blocks && lx->pos < lx->n &&
        lx->src[lx->pos] == '\n') {
        lx->pos++;
        lx->line++;
        return 1;
    }
    return 0;
}

static int lex_comment(lexer *lx, int *sign) {
    size_t i = lx->pos;
    while (i + 1 < lx->n && !(lx->src[i] == '#' && lx->src[i + 1] == '}'))
        i++;
    if (i + 1 >= lx->n) return lex_fail(lx, "unclosed comment");
    *sign = i > lx->pos && lx->src[i - 1] == '-' ? '-' : 0;
    count_lines(lx, lx->pos, i);
    lx->pos = i + 2;
    return 0;
}

static int lex_all(lexer *lx) {
    int line_starting = 1;
    while (lx->pos < lx->n && !lx->st) {
        size_t start = lx->pos, i = start;
        while (i + 1 < lx->n &&
               !(lx->src[i] == '{' &&
                 (lx->src[i + 1] == '{' || lx->src[i + 1] == '%' || lx->src[i + 1] == '#')))
            i++;
        if (i + 1 >= lx->n) { /* no more tags */
            if (emit_text(lx, start, lx->n, 0, 0, line_starting)) return -1;
            count_lines(lx, start, lx->n);
            break;
        }
        char kind = lx->src[i + 1];
        char o = i + 2 < lx->n ? lx->src[i + 2] : 0;
        char osign = o == '-' || (o == '+' && kind != '{') ? o : 0;
        if (emit_text(lx, start, i, kind, osign, line_starting)) return -1;
        count_lines(lx, start, i);
        lx->pos = i + 2 + (osign ? 1 : 0);
        int csign = 0;
        if (kind == '#') {
            if (lex_comment(lx, &csign)) return -1;
        } else {
            if (!push_tok(lx, kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, NULL, 0)) return -1;
            if (lex_tag(lx, kind == '%', &csign)) return -1;
            if (!push_tok(lx, kind == '{' ? T_VAR_END : T_BLOCK_END, NULL, 0)) return -1;
        }
        line_starting = after_close(lx, kind, csign);
    }
    if (lx->st) return -1;
    return push_tok(lx, T_EOF, NULL, 0) ? 0 : -1;
}

/* Jinja2 splits the source on \r\n, \r and \n, rejoins with \n, and (unless
 * keep_trailing_newline) drops one final newline. */
static char *normalise(jarena *a, const char *src, size_t len, int keep_nl, size_t *out_len) {
    char *s = cpulm_jinja_alloc(a, len + 1);
    if (!s) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[k++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[k++] = src[i];
        }
    }
    if (!keep_nl && k > 0 && s[k - 1] == '\n') k--;
    s[k] = '\0';
    *out_len = k;
    return s;
}

/* ---- parser ---- */

typedef struct parser {
    const jtok *t;
    size_t i;
    jarena *arena;
    int depth;
    cpulm_status st;
    cpulm_error *err;
} parser;

static jnode *parse_expr(parser *p);
static jnode *parse_tuple_expr(parser *p, int with_cond);
static jnode *parse_or(parser *p);
static jnode *parse_unary(parser *p, int with_filter);
static jnode *parse_body(parser *p, const char *const *ends, int n_ends);

static jnode *perr(parser *p, const char *fmt, ...) CPULM_PRINTF(2, 3);
static jnode *perr(parser *p, const char *fmt, ...) {
    if (p->st) return NULL;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->st = cpulm_errf(p->err, CPULM_ERR_FORMAT, "jinja: line %d: %s", p->t[p->i].line, msg);
    return NULL;
}

static const jtok *cur(const parser *p) {
    return &p->t[p->i];
}

static int is_op(const parser *p, const char *op) {
    const jtok *t = cur(p);
    return t->t == T_OP && t->len == strlen(op) && !memcmp(t->s, op, t->len);
}

static int is_name(const parser *p, const char *name) {
    const jtok *t = cur(p);
    return t->t == T_NAME && t->len == strlen(name) && !memcmp(t->s, name, t->len);
}

static int skip_op(parser *p, const char *op) {
    if (!is_op(p, op)) return 0;
    p->i++;
    return 1;
}

static int skip_name(parser *p, const char *name) {
    if (!is_name(p, name)) return 0;
    p->i++;
    return 1;
}

static jnode *expect_op(parser *p, const char *op, jnode *ok) {
    if (!ok) return NULL;
    if (!skip_op(p, op)) return perr(p, "expected '%s'", op);
    return ok;
}

static jnode *node(parser *p, jkind k) {
    jnode *n = cpulm_jinja_alloc(p->arena, sizeof *n);
    if (!n) {
        if (!p->st) p->st = cpulm_errf(p->err, CPULM_ERR_NOMEM, "jinja: out of memory");
        return NULL;
    }
    n->kind = k;
    n->line = cur(p)->line;
    return n;
}

/* Growable child arrays built in the arena (old storage is abandoned: parse-time only). */
static int append(parser *p, jnode ***list, int32_t *n, jnode *child) {
    if ((*n & (*n - 1)) == 0) { /* n is 0 or a power of two: double */
        jnode **nl = cpulm_jinja_alloc(p->arena, sizeof *nl * (size_t)(*n ? *n * 2 : 1));
        if (!nl) return perr(p, "out of memory"), -1;
        if (*n) memcpy(nl, *list, sizeof *nl * (size_t)*n);
        *list = nl;
    }
    (*list)[(*n)++] = child;
    return 0;
}

static int append_name(parser *p, const char ***list, int32_t *n, const char *s) {
    if ((*n & (*n - 1)) == 0) {
        const char **nl = cpulm_jinja_alloc(p->arena, sizeof *nl * (size_t)(*n ? *n * 2 : 1));
        if (!nl) return perr(p, "out of memory"), -1;
        if (*n) memcpy(nl, *list, sizeof *nl * (size_t)*n);
        *list = nl;
    }
    (*list)[(*n)++] = s;
    return 0;
}

/* Token text as a NUL-terminated arena string. */
static const char *tok_str(parser *p, const jtok *t) {
    char *s = cpulm_jinja_alloc(p->arena, t->len + 1);
    if (!s) return perr(p, "out of memory"), NULL;
    memcpy(s, t->s, t->len);
    return s;
}

static jnode *name_node(parser *p, jkind k, const jtok *t) {
    jnode *n = node(p, k);
    if (!n || !(n->name = tok_str(p, t))) return NULL;
    n->name_len = t->len;
    return n;
}

static int enter(parser *p) {
    if (++p->depth > MAX_NESTING) return perr(p, "nesting too deep"), -1;
    return 0;
}

/* (args, key=value, ...) after the '(' */
static jnode *parse_args(parser *p, jnode *call) {
    while (!skip_op(p, ")")) {
        if (call->n || call->n2) {
            if (!skip_op(p, ",")) return perr(p, "expected ',' or ')' in call");
            if (skip_op(p, ")")) break;
        }
        if (cur(p)->t == T_NAME && p->t[p->i + 1].t == T_OP && p->t[p->i + 1].len == 1 &&
            p->t[p->i + 1].s[0] == '=') {
            const char *k = tok_str(p, cur(p));
            p->i += 2;
            jnode *v = parse_expr(p);
            if (!k || !v || append_name(p, &call->names, &call->n_names, k) ||
                append(p, &call->list2, &call->n2, v))
                return NULL;
        } else {
            if (call->n2) return perr(p, "positional argument after keyword argument");
            jnode *v = parse_expr(p);
            if (!v || append(p, &call->list, &call->n, v)) return NULL;
        }
    }
    return call;
}

static jnode *parse_subscript(parser *p, jnode *obj) {
    jnode *parts[3] = {NULL, NULL, NULL};
    int is_slice = 0;
    for (int k = 0; k < 3; k++) {
        if (!is_op(p, ":") && !is_op(p, "]") && !(parts[k] = parse_expr(p))) return NULL;
        if (k < 2 && skip_op(p, ":"))
            is_slice = 1;
        else
            break;
    }
    if (!skip_op(p, "]")) return perr(p, "expected ']'");
    jnode *n = node(p, is_slice ? N_SLICE : N_ITEM);
    if (!n) return NULL;
    n->a = obj;
    if (!is_slice) {
        if (!parts[0]) return perr(p, "empty subscript");
        n->b = parts[0];
        return n;
    }
    for (int k = 0; k < 3; k++)
        if (append(p, &n->list, &n->n, parts[k])) return NULL;
    return n;
}

static jnode *parse_postfix(parser *p, jnode *n) {
    while (n) {
        if (skip_op(p, ".")) {
            const jtok *t = cur(p);
            if (t->t == T_INT) { /* x.0 is x[0] */
                jnode *it = node(p, N_ITEM), *lit = node(p, N_LIT);
                if (!it || !lit) return NULL;
                lit->lit.t = JV_INT;
                lit->lit.u.i = t->i;
                it->a = n;
                it->b = lit;
                n = it;
            } else {
                if (t->t != T_NAME) return perr(p, "expected attribute name after '.'");
                jnode *at = name_node(p, N_ATTR, t);
                if (!at) return NULL;
                at->a = n;
                n = at;
            }
            p->i++;
        } else if (skip_op(p, "[")) {
            n = parse_subscript(p, n);
        } else if (skip_op(p, "(")) {
            jnode *c = node(p, N_CALL);
            if (!c) return NULL;
            c->a = n;
            n = parse_args(p, c);
        } else {
            break;
        }
    }
    return n;
}

/* Filter name (dotted names allowed) into n->name. */
static int parse_dotted_name(parser *p, jnode *n) {
    if (cur(p)->t != T_NAME) return perr(p, "expected a name"), -1;
    const jtok *t = cur(p);
    n->name = tok_str(p, t);
    n->name_len = t->len;
    p->i++;
    return n->name ? 0 : -1;
}

static jnode *parse_filter(parser *p, jnode *subject) {
    jnode *f = node(p, N_FILTER);
    if (!f || parse_dotted_name(p, f)) return NULL;
    f->a = subject;
    if (skip_op(p, "(")) return parse_args(p, f);
    return f;
}

static int starts_primary(const parser *p) {
    const jtok *t = cur(p);
    if (t->t == T_NAME)
        return !is_name(p, "else") && !is_name(p, "or") && !is_name(p, "and") &&
               !is_name(p, "is") && !is_name(p, "if") && !is_name(p, "in") && !is_name(p, "not");
    return t->t == T_STRING || t->t == T_INT || t->t == T_FLOAT || is_op(p, "(") || is_op(p, "[") ||
           is_op(p, "{");
}

static jnode *parse_test(parser *p, jnode *subject) {
    jnode *tn = node(p, N_TEST);
    if (!tn) return NULL;
    tn->a = subject;
    tn->op = skip_name(p, "not");
    if (parse_dotted_name(p, tn)) return NULL;
    if (skip_op(p, "(")) return parse_args(p, tn);
    if (starts_primary(p)) { /* "is divisibleby 3", "is sameas false" */
        jnode *arg = parse_unary(p, 0);
        if (!arg || append(p, &tn->list, &tn->n, arg)) return NULL;
    }
    return tn;
}

static jnode *parse_filter_expr(parser *p, jnode *n) {
    while (n) {
        if (skip_op(p, "|"))
            n = parse_filter(p, n);
        else if (skip_name(p, "is"))
            n = parse_test(p, n);
        else if (skip_op(p, "(")) {
            jnode *c = node(p, N_CALL);
            if (!c) return NULL;
            c->a = n;
            n = parse_args(p, c);
        } else
            break;
    }
    return n;
}

static jnode *lit_node(parser *p, jtype t) {
    jnode *n = node(p, N_LIT);
    if (n) n->lit.t = t;
    return n;
}

static jnode *parse_string_lit(parser *p) {
    /* adjacent literals concatenate, as in Python */
    size_t total = 0, j = p->i;
    for (; p->t[j].t == T_STRING; j++)
        total += p->t[j].len;
    jstr *s = cpulm_jinja_alloc(p->arena, sizeof *s + total + 1);
    jnode *n = lit_node(p, JV_STR);
    if (!s || !n) return perr(p, "out of memory");
    for (; p->i < j; p->i++) {
        memcpy(s->s + s->len, p->t[p->i].s, p->t[p->i].len);
        s->len += p->t[p->i].len;
    }
    n->lit.u.s = s;
    return n;
}

static jnode *parse_collection(parser *p, jkind k, const char *close) {
    jnode *n = node(p, k);
    if (!n) return NULL;
    while (!skip_op(p, close)) {
        if (n->n && !skip_op(p, ",")) return perr(p, "expected ',' or '%s'", close);
        if (n->n && skip_op(p, close)) break;
        jnode *v = parse_expr(p);
        if (!v || append(p, &n->list, &n->n, v)) return NULL;
        if (k == N_DICT) {
            jnode *val = expect_op(p, ":", v) ? parse_expr(p) : NULL;
            if (!val || append(p, &n->list2, &n->n2, val)) return NULL;
        }
    }
    return n;
}

static jnode *parse_paren(parser *p) {
    if (skip_op(p, ")")) return node(p, N_TUPLE); /* () */
    jnode *e = parse_tuple_expr(p, 1);
    return expect_op(p, ")", e);
}

static jnode *parse_primary(parser *p) {
    const jtok *t = cur(p);
    if (t->t == T_NAME) {
        static const struct {
            const char *w;
            jtype t;
            int v;
        } kw[] = {{"true", JV_BOOL, 1},  {"True", JV_BOOL, 1}, {"false", JV_BOOL, 0},
                  {"False", JV_BOOL, 0}, {"none", JV_NONE, 0}, {"None", JV_NONE, 0}};
        for (size_t k = 0; k < sizeof kw / sizeof kw[0]; k++)
            if (is_name(p, kw[k].w)) {
                jnode *n = lit_node(p, kw[k].t);
                if (n) n->lit.u.i = kw[k].v;
                p->i++;
                return n;
            }
        jnode *n = name_node(p, N_NAME, t);
        p->i++;
        return n;
    }
    if (t->t == T_STRING) return parse_string_lit(p);
    if (t->t == T_INT || t->t == T_FLOAT) {
        jnode *n = lit_node(p, t->t == T_INT ? JV_INT : JV_FLOAT);
        if (n && t->t == T_INT) n->lit.u.i = t->i;
        if (n && t->t == T_FLOAT) n->lit.u.f = t->f;
        p->i++;
        return n;
    }
    if (skip_op(p, "(")) return parse_paren(p);
    if (skip_op(p, "[")) return parse_collection(p, N_LIST, "]");
    if (skip_op(p, "{")) return parse_collection(p, N_DICT, "}");
    if (t->t == T_VAR_END || t->t == T_BLOCK_END || t->t == T_EOF)
        return perr(p, "unexpected end of tag");
    return perr(p, "unexpected '%.*s'", (int)(t->len ? t->len : 1), t->len ? t->s : "?");
}

static jnode *parse_unary(parser *p, int with_filter) {
    if (enter(p)) return NULL;
    jnode *n;
    if (is_op(p, "-") || is_op(p, "+")) {
        n = node(p, is_op(p, "-") ? N_NEG : N_POS);
        p->i++;
        if (n && !(n->a = parse_unary(p, 0))) n = NULL;
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter) n = parse_filter_expr(p, n);
    p->depth--;
    return n;
}

static jnode *binary(parser *p, int op, jnode *l, jnode *r) {
    if (!l || !r) return NULL;
    jnode *n = node(p, N_BIN);
    if (!n) return NULL;
    n->op = op;
    n->a = l;
    n->b = r;
    return n;
}

static jnode *parse_pow(parser *p) {
    jnode *l = parse_unary(p, 1);
    while (l && skip_op(p, "**"))
        l = binary(p, 'p', l, parse_unary(p, 1));
    return l;
}

static jnode *parse_math2(parser *p) {
    jnode *l = parse_pow(p);
    for (;;) {
        int op = is_op(p, "*")    ? '*'
                 : is_op(p, "/")  ? '/'
                 : is_op(p, "//") ? 'f'
                 : is_op(p, "%")  ? '%'
                                  : 0;
        if (!op || !l) return l;
        p->i++;
        l = binary(p, op, l, parse_pow(p));
    }
}

static jnode *parse_concat(parser *p) {
    jnode *l = parse_math2(p);
    while (l && skip_op(p, "~"))
        l = binary(p, '~', l, parse_math2(p));
    return l;
}

static jnode *parse_math1(parser *p) {
    jnode *l = parse_concat(p);
    for (;;) {
        int op = is_op(p, "+") ? '+' : is_op(p, "-") ? '-' : 0;
        if (!op || !l) return l;
        p->i++;
        l = binary(p, op, l, parse_concat(p));
    }
}

static const char *compare_op(parser *p) {
    static const char *const ops[] = {"==", "!=", "<", ">", "<=", ">="};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        if (skip_op(p, ops[k])) return ops[k];
    if (skip_name(p, "in")) return "in";
    if (is_name(p, "not") && p->t[p->i + 1].t == T_NAME && p->t[p->i + 1].len == 2 &&
        !memcmp(p->t[p->i + 1].s, "in", 2)) {
        p->i += 2;
        return "notin";
    }
    return NULL;
}

static jnode *parse_compare(parser *p) {
    jnode *first = parse_math1(p), *n = NULL;
    const char *op;
    while (first && (op = compare_op(p))) {
        if (!n && (!(n = node(p, N_COMPARE)) || !(n->a = first))) return NULL;
        jnode *r = parse_math1(p);
        if (!r || append(p, &n->list, &n->n, r) || append_name(p, &n->names, &n->n_names, op))
            return NULL;
    }
    return n ? n : first;
}

static jnode *parse_not(parser *p) {
    if (!is_name(p, "not")) return parse_compare(p);
    p->i++;
    if (enter(p)) return NULL;
    jnode *n = node(p, N_NOT);
    if (n && !(n->a = parse_not(p))) n = NULL;
    p->depth--;
    return n;
}

static jnode *parse_and(parser *p) {
    jnode *l = parse_not(p);
    while (l && skip_name(p, "and")) {
        jnode *n = node(p, N_AND);
        if (!n || !(n->b = parse_not(p))) return NULL;
        n->a = l;
        l = n;
    }
    return l;
}

static jnode *parse_or(parser *p) {
    jnode *l = parse_and(p);
    while (l && skip_name(p, "or")) {
        jnode *n = node(p, N_OR);
        if (!n || !(n->b = parse_and(p))) return NULL;
        n->a = l;
        l = n;
    }
    return l;
}

/* a if cond [else b] */
static jnode *parse_expr(parser *p) {
    if (enter(p)) return NULL;
    jnode *e = parse_or(p);
    while (e && skip_name(p, "if")) {
        jnode *n = node(p, N_COND);
        if (!n || !(n->b = parse_or(p))) return NULL;
        n->a = e;
        if (skip_name(p, "else") && !(n->c = parse_expr(p))) return NULL;
        e = n;
    }
    p->depth--;
    return e;
}

/* expr or "a, b, ..." (a tuple), as Jinja's parse_tuple */
static jnode *parse_tuple_expr(parser *p, int with_cond) {
    jnode *e = with_cond ? parse_expr(p) : parse_or(p);
    if (!e || !is_op(p, ",")) return e;
    jnode *t = node(p, N_TUPLE);
    if (!t || append(p, &t->list, &t->n, e)) return NULL;
    while (skip_op(p, ",")) {
        if (is_op(p, ")") || cur(p)->t == T_BLOCK_END || cur(p)->t == T_VAR_END) break;
        e = with_cond ? parse_expr(p) : parse_or(p);
        if (!e || append(p, &t->list, &t->n, e)) return NULL;
    }
    return t;
}

/* ---- statements ---- */

static jnode *end_tag(parser *p, jnode *ok) {
    if (!ok) return NULL;
    if (cur(p)->t != T_BLOCK_END) return perr(p, "expected end of tag");
    p->i++;
    return ok;
}

static int parse_targets(parser *p, jnode *n) {
    do {
        if (cur(p)->t != T_NAME) return perr(p, "expected a variable name"), -1;
        const char *s = tok_str(p, cur(p));
        if (!s || append_name(p, &n->names, &n->n_names, s)) return -1;
        p->i++;
    } while (skip_op(p, ","));
    return 0;
}

static jnode *parse_if(parser *p) {
    static const char *const ends[] = {"elif", "else", "endif"};
    jnode *n = node(p, N_IF);
    for (;;) {
        jnode *cond = parse_tuple_expr(p, 1);
        if (!n || !end_tag(p, cond) || append(p, &n->list, &n->n, cond)) return NULL;
        jnode *body = parse_body(p, ends, 3);
        if (!body || append(p, &n->list2, &n->n2, body)) return NULL;
        if (skip_name(p, "elif")) continue;
        if (skip_name(p, "else")) {
            if (!end_tag(p, n) || !(n->c = parse_body(p, ends + 2, 1))) return NULL;
        }
        p->i++; /* endif */
        return end_tag(p, n);
    }
}

static jnode *parse_for(parser *p) {
    static const char *const ends[] = {"else", "endfor"};
    jnode *n = node(p, N_FOR);
    if (!n || parse_targets(p, n)) return NULL;
    if (!skip_name(p, "in")) return perr(p, "expected 'in' in for loop");
    if (!(n->a = parse_tuple_expr(p, 0))) return NULL;
    if (skip_name(p, "if") && !(n->b = parse_expr(p))) return NULL;
    if (skip_name(p, "recursive")) return perr(p, "recursive loops are not supported");
    if (!end_tag(p, n) || !(n->c = parse_body(p, ends, 2))) return NULL;
    if (skip_name(p, "else") && (!end_tag(p, n) || !(n->d = parse_body(p, ends + 1, 1))))
        return NULL;
    p->i++; /* endfor */
    return end_tag(p, n);
}

static jnode *parse_set(parser *p) {
    static const char *const ends[] = {"endset"};
    jnode *n = node(p, N_SET);
    if (!n) return NULL;
    if (cur(p)->t == T_NAME && p->t[p->i + 1].t == T_OP && p->t[p->i + 1].len == 1 &&
        p->t[p->i + 1].s[0] == '.') { /* ns.attr = value */
        const jtok *obj = cur(p), *attr = &p->t[p->i + 2];
        if (attr->t != T_NAME) return perr(p, "expected attribute name");
        if (!(n->a = name_node(p, N_NAME, obj)) || !(n->name = tok_str(p, attr))) return NULL;
        n->name_len = attr->len;
        p->i += 3;
    } else if (parse_targets(p, n)) {
        return NULL;
    }
    if (skip_op(p, "=")) {
        n->b = parse_tuple_expr(p, 1);
        return end_tag(p, n->b ? n : NULL);
    }
    if (n->a || n->n_names != 1) return perr(p, "expected '='");
    n->kind = N_SET_BLOCK; /* {% set x %}...{% endset %} */
    while (n && skip_op(p, "|"))
        n->b = parse_filter(p, n->b); /* filters on the block */
    if (!end_tag(p, n) || !(n->c = parse_body(p, ends, 1))) return NULL;
    p->i++;
    return end_tag(p, n);
}

static jnode *parse_macro(parser *p) {
    static const char *const ends[] = {"endmacro"};
    jnode *n = node(p, N_MACRO);
    if (!n || cur(p)->t != T_NAME) return perr(p, "expected macro name");
    if (!(n->name = tok_str(p, cur(p)))) return NULL;
    n->name_len = cur(p)->len;
    p->i++;
    if (!skip_op(p, "(")) return perr(p, "expected '(' after macro name");
    while (!skip_op(p, ")")) {
        if (n->n_names && !skip_op(p, ",")) return perr(p, "expected ',' or ')'");
        if (cur(p)->t != T_NAME) return perr(p, "expected parameter name");
        const char *s = tok_str(p, cur(p));
        p->i++;
        jnode *def = NULL;
        if (skip_op(p, "=") && !(def = parse_expr(p))) return NULL;
        if (!s || append_name(p, &n->names, &n->n_names, s) || append(p, &n->list, &n->n, def))
            return NULL;
    }
    if (!end_tag(p, n) || !(n->c = parse_body(p, ends, 1))) return NULL;
    p->i++;
    if (cur(p)->t == T_NAME) p->i++; /* {% endmacro name %} */
    return end_tag(p, n);
}

static jnode *parse_filter_block(parser *p) {
    static const char *const ends[] = {"endfilter"};
    jnode *n = node(p, N_FILTER_BLOCK);
    if (!n || !(n->a = parse_filter(p, NULL))) return NULL;
    while (skip_op(p, "|"))
        if (!(n->a = parse_filter(p, n->a))) return NULL;
    if (!end_tag(p, n) || !(n->c = parse_body(p, ends, 1))) return NULL;
    p->i++;
    return end_tag(p, n);
}

static jnode *parse_statement(parser *p) {
    static const char *const gen_end[] = {"endgeneration"};
    if (cur(p)->t != T_NAME) return perr(p, "expected a statement name");
    if (skip_name(p, "if")) return parse_if(p);
    if (skip_name(p, "for")) return parse_for(p);
    if (skip_name(p, "set")) return parse_set(p);
    if (skip_name(p, "macro")) return parse_macro(p);
    if (skip_name(p, "filter")) return parse_filter_block(p);
    if (is_name(p, "break") || is_name(p, "continue")) {
        jnode *n = node(p, is_name(p, "break") ? N_BREAK : N_CONTINUE);
        p->i++;
        return end_tag(p, n);
    }
    if (skip_name(p, "generation")) { /* HF's AssistantTracker marker: renders its body */
        jnode *body = end_tag(p, node(p, N_BODY)) ? parse_body(p, gen_end, 1) : NULL;
        if (!body) return NULL;
        p->i++;
        return end_tag(p, body);
    }
    return perr(p, "unknown or unsupported statement '%.*s'", (int)cur(p)->len, cur(p)->s);
}

/* Statements up to (not including) one of the end tags; on return p->i is at the end tag's
 * name (its "{%" consumed). ends == NULL: up to the end of the template. */
static jnode *parse_body(parser *p, const char *const *ends, int n_ends) {
    if (enter(p)) return NULL;
    jnode *body = node(p, N_BODY);
    while (body) {
        const jtok *t = cur(p);
        jnode *s = NULL;
        if (t->t == T_EOF) {
            if (ends) return perr(p, "unexpected end of template (missing '%s')", ends[n_ends - 1]);
            break;
        } else if (t->t == T_TEXT) {
            if ((s = node(p, N_TEXT))) {
                s->name = t->s;
                s->name_len = t->len;
            }
            p->i++;
        } else if (t->t == T_VAR_BEGIN) {
            p->i++;
            if ((s = node(p, N_OUT)) && (s->a = parse_tuple_expr(p, 1))) {
                if (cur(p)->t != T_VAR_END) return perr(p, "expected '}}'");
                p->i++;
            } else {
                return NULL;
            }
        } else { /* T_BLOCK_BEGIN */
            p->i++;
            for (int k = 0; k < n_ends; k++)
                if (is_name(p, ends[k])) {
                    p->depth--;
                    return body;
                }
            s = parse_statement(p);
        }
        if (!s || append(p, &body->list, &body->n, s)) return NULL;
    }
    p->depth--;
    return body;
}

cpulm_jinja_syntax cpulm_jinja_hf_syntax(void) {
    cpulm_jinja_syntax s = {.trim_blocks = 1, .lstrip_blocks = 1, .keep_trailing_newline = 0};
    return s;
}

cpulm_status cpulm_jinja_parse(const char *src, size_t len, const cpulm_jinja_syntax *syn,
                               cpulm_jinja **out, cpulm_error *err) {
    *out = NULL;
    if (len > MAX_TEMPLATE_BYTES)
        return cpulm_errf(err, CPULM_ERR_FORMAT, "jinja: template of %zu bytes is too large", len);
    cpulm_jinja *t = calloc(1, sizeof *t);
    if (!t) return cpulm_errf(err, CPULM_ERR_NOMEM, "jinja: out of memory");
    lexer lx;
    memset(&lx, 0, sizeof lx);
    lx.syn = syn ? *syn : cpulm_jinja_hf_syntax();
    lx.arena = &t->arena;
    lx.err = err;
    lx.line = 1;
    lx.src =
        normalise(&t->arena, src ? src : "", src ? len : 0, lx.syn.keep_trailing_newline, &lx.n);
    cpulm_status st = lx.src ? CPULM_OK : cpulm_errf(err, CPULM_ERR_NOMEM, "jinja: out of memory");
    if (!st && lex_all(&lx)) st = lx.st;
    if (!st) {
        parser p = {
            .t = lx.toks, .i = 0, .arena = &t->arena, .depth = 0, .st = CPULM_OK, .err = err};
        t->root = parse_body(&p, NULL, 0);
        st = p.st;
    }
    free(lx.toks);
    if (st) {
        cpulm_jinja_free(t);
        return st;
    }
    *out = t;
    return CPULM_OK;
}

void cpulm_jinja_free(cpulm_jinja *t) {
    if (!t) return;
    cpulm_jinja_arena_free(&t->arena);
    free(t);
}
