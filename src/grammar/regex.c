/* regex.c: the regex subset of JSON-schema "pattern" -> a GBNF expression over the JSON
 * text of the string's content (see grammar.h). Characters that JSON must escape are
 * written escaped (\" \\ \n \t \r); classes and "." never produce other control characters
 * or a raw quote/backslash, so the result is always valid JSON string content.
 */
#include <stdio.h>
#include <string.h>

#include "grammar/grammar.h"

#define MAX_RANGES      256
#define GBNF_MAX_RANGES 256                 /* what the GBNF parser takes in one class */
#define SAFE_NOT        "\"\\\\\\x00-\\x1F" /* inside [^...]: what raw JSON string text cannot hold */

typedef struct rx {
    const char *s, *end, *p;
    cpulm_buf *out;
    cpulm_error *err;
    int failed, depth;
} rx;

static int rx_fail(rx *R, const char *msg) {
    if (!R->failed)
        cpulm_errf(R->err, CPULM_ERR_UNSUPPORTED, "pattern: %s at offset %d", msg,
                   (int)(R->p - R->s));
    R->failed = 1;
    return -1;
}

/* A GBNF term for one code point as it appears in JSON text. */
static void emit_cp(rx *R, uint32_t cp) {
    if (cp == '"')
        cpulm_buf_puts(R->out, "\"\\\\\\\"\"");
    else if (cp == '\\')
        cpulm_buf_puts(R->out, "\"\\\\\\\\\"");
    else if (cp == '\n')
        cpulm_buf_puts(R->out, "\"\\\\n\"");
    else if (cp == '\t')
        cpulm_buf_puts(R->out, "\"\\\\t\"");
    else if (cp == '\r')
        cpulm_buf_puts(R->out, "\"\\\\r\"");
    else if (cp < 0x20)
        cpulm_buf_printf(R->out, "\"\\\\u%04X\"", cp);
    else if (cp < 0x80)
        cpulm_buf_printf(R->out, "\"\\x%02X\"", cp);
    else
        cpulm_buf_printf(R->out, cp > 0xFFFF ? "\"\\U%08X\"" : "\"\\u%04X\"", cp);
}

static void put_cp_class(cpulm_buf *b, uint32_t cp) {
    cpulm_buf_printf(b, cp > 0xFFFF ? "\\U%08X" : "\\u%04X", cp);
}

typedef struct cls {
    uint32_t r[2 * MAX_RANGES];
    int n;
} cls;

static int cls_add(rx *R, cls *c, uint32_t lo, uint32_t hi) {
    if (c->n >= MAX_RANGES) return rx_fail(R, "character class too large");
    c->r[2 * c->n] = lo;
    c->r[2 * c->n + 1] = hi;
    c->n++;
    return 0;
}

/* \d \w \s as ranges. \s is narrowed to a space (JSON would escape the others) where it
 * allows characters; where it excludes them (\S, [^\s]) it is the whole of what a
 * JavaScript regex (ajv and most validators) calls white space, so the excluded set is
 * never smaller than the validator's. */
static int cls_add_shorthand(rx *R, cls *c, char k, int full) {
    static const uint32_t JS_SPACE[][2] = {
        {0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
        {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
    if (k == 's' && full) {
        int rc = 0;
        for (size_t i = 0; i < sizeof JS_SPACE / sizeof *JS_SPACE; i++)
            rc |= cls_add(R, c, JS_SPACE[i][0], JS_SPACE[i][1]);
        return rc;
    }
    if (k == 'd') return cls_add(R, c, '0', '9');
    if (k == 'w')
        return cls_add(R, c, '0', '9') | cls_add(R, c, 'a', 'z') | cls_add(R, c, 'A', 'Z') |
               cls_add(R, c, '_', '_');
    if (k == 's') return cls_add(R, c, ' ', ' ');
    return rx_fail(R, "unsupported escape in class");
}

/* Writes a positive class minus what raw JSON text cannot hold, plus escaped forms. */
static int emit_class(rx *R, const cls *c, int negate) {
    if (negate) { /* the three SAFE_NOT ranges join the class: GBNF takes 256 in all */
        if (c->n + 3 > GBNF_MAX_RANGES) return rx_fail(R, "character class too large");
        cpulm_buf_puts(R->out, "[^");
        for (int i = 0; i < c->n; i++) {
            put_cp_class(R->out, c->r[2 * i]);
            cpulm_buf_putc(R->out, '-');
            put_cp_class(R->out, c->r[2 * i + 1]);
        }
        cpulm_buf_puts(R->out, SAFE_NOT "]");
        return 0;
    }
    int has_q = 0, has_bs = 0, n_out = 0;
    cpulm_buf cl;
    cpulm_buf_init(&cl, 0);
    for (int i = 0; i < c->n; i++) {
        uint32_t lo = c->r[2 * i], hi = c->r[2 * i + 1];
        has_q |= lo <= '"' && hi >= '"';
        has_bs |= lo <= '\\' && hi >= '\\';
        /* split around 0x00-0x1F, '"' and '\\' */
        uint32_t cuts[4][2] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0xFFFFFFFFu}, {1, 0}};
        for (int k = 0; k < 3; k++) {
            uint32_t a = lo > cuts[k][0] ? lo : cuts[k][0], z = hi < cuts[k][1] ? hi : cuts[k][1];
            if (a > z) continue;
            put_cp_class(&cl, a);
            cpulm_buf_putc(&cl, '-');
            put_cp_class(&cl, z);
            n_out++;
        }
    }
    if (n_out > GBNF_MAX_RANGES) { /* splitting around '"' and '\\' made too many */
        cpulm_buf_release(&cl);
        return rx_fail(R, "character class too large");
    }
    /* an empty GBNF class is an error: write only the parts that match something */
    if (!n_out && !has_q && !has_bs) {
        cpulm_buf_release(&cl);
        return rx_fail(R, "character class matches no character a JSON string holds unescaped");
    }
    cpulm_buf_puts(R->out, "( ");
    if (n_out) cpulm_buf_printf(R->out, "[%s]", cl.data);
    cpulm_buf_release(&cl);
    if (has_q) cpulm_buf_printf(R->out, "%s\"\\\\\\\"\"", n_out ? " | " : "");
    if (has_bs) cpulm_buf_printf(R->out, "%s\"\\\\\\\\\"", n_out || has_q ? " | " : "");
    cpulm_buf_puts(R->out, " )");
    return 0;
}

/* One (possibly escaped) character. Returns 1 with *cp, 2 with *sh = shorthand letter. */
static int read_cp(rx *R, uint32_t *cp, char *sh) {
    if (*R->p != '\\') {
        int k = cpulm_json_utf8_next((const unsigned char *)R->p, (size_t)(R->end - R->p), cp);
        if (k < 0) return rx_fail(R, "invalid UTF-8");
        R->p += k;
        return 1;
    }
    if (++R->p >= R->end) return rx_fail(R, "pattern ends with '\\'");
    char c = *R->p++;
    switch (c) {
    case 'd':
    case 'w':
    case 's':
    case 'D':
    case 'W':
    case 'S': *sh = c; return 2;
    case 'n': *cp = '\n'; return 1;
    case 't': *cp = '\t'; return 1;
    case 'r': *cp = '\r'; return 1;
    case 'f': *cp = '\f'; return 1;
    case 'v': *cp = '\v'; return 1;
    default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
            return R->p--, rx_fail(R, "unsupported escape (backreference, boundary or class)");
        *cp = (unsigned char)c;
        return 1;
    }
}

static int parse_class(rx *R) {
    int negate = 0;
    if (R->p < R->end && *R->p == '^') negate = 1, R->p++;
    cls c = {.n = 0};
    int first = 1;
    while (R->p < R->end && (*R->p != ']' || first)) {
        first = 0;
        uint32_t lo = 0, hi;
        char sh = 0;
        int k = read_cp(R, &lo, &sh);
        if (k < 0) return -1;
        if (k == 2) {
            if (sh >= 'A' && sh <= 'Z') return rx_fail(R, "negated shorthand inside a class");
            if (cls_add_shorthand(R, &c, sh, negate) < 0) return -1;
            continue;
        }
        hi = lo;
        if (R->p + 1 < R->end && *R->p == '-' && R->p[1] != ']') {
            R->p++;
            if (read_cp(R, &hi, &sh) != 1) return rx_fail(R, "bad class range");
            if (hi < lo) return rx_fail(R, "reversed class range");
        }
        if (cls_add(R, &c, lo, hi) < 0) return -1;
    }
    if (R->p >= R->end) return rx_fail(R, "unterminated class");
    R->p++;
    return emit_class(R, &c, negate);
}

static int parse_alt(rx *R);

static int parse_atom(rx *R) {
    char c = *R->p;
    if (c == '(') {
        R->p++;
        if (R->p < R->end && *R->p == '?') {
            if (R->p + 1 < R->end && R->p[1] == ':')
                R->p += 2;
            else
                return rx_fail(R, "lookaround and named groups are not supported");
        }
        if (++R->depth > 64) return rx_fail(R, "groups nested too deeply");
        cpulm_buf_puts(R->out, "( ");
        if (parse_alt(R) < 0) return -1;
        if (R->p >= R->end || *R->p != ')') return rx_fail(R, "expected ')'");
        R->p++;
        R->depth--;
        cpulm_buf_puts(R->out, " )");
        return 0;
    }
    if (c == '[') {
        R->p++;
        return parse_class(R);
    }
    if (c == '.') { /* a JavaScript '.' excludes the line terminators */
        R->p++;
        cpulm_buf_puts(R->out, "[^\\u2028\\u2029" SAFE_NOT "]");
        return 0;
    }
    if (c == '^' || c == '$') return rx_fail(R, "anchors inside the pattern are not supported");
    if (c == '*' || c == '+' || c == '?' || c == '{')
        return rx_fail(R, "quantifier without a target");
    uint32_t cp = 0;
    char sh = 0;
    int k = read_cp(R, &cp, &sh);
    if (k < 0) return -1;
    if (k == 1) return emit_cp(R, cp), 0;
    cls cl = {.n = 0};
    char low = (char)(sh | 0x20);
    if (cls_add_shorthand(R, &cl, low, sh != low) < 0) return -1;
    return emit_class(R, &cl, sh != low);
}

static int parse_quant(rx *R) {
    if (R->p >= R->end) return 0;
    char c = *R->p;
    if (c == '*' || c == '+' || c == '?') {
        cpulm_buf_putc(R->out, c);
        R->p++;
    } else if (c == '{') {
        const char *q = R->p + 1;
        int m = 0, n = -1, has_m = 0;
        while (q < R->end && *q >= '0' && *q <= '9' && m < 100000)
            m = m * 10 + (*q++ - '0'), has_m = 1;
        if (q < R->end && *q == ',') {
            q++;
            if (q < R->end && *q >= '0' && *q <= '9') {
                n = 0;
                while (q < R->end && *q >= '0' && *q <= '9' && n < 100000)
                    n = n * 10 + (*q++ - '0');
            }
        } else
            n = m;
        if (!has_m || q >= R->end || *q != '}') return rx_fail(R, "bad {m,n} quantifier");
        if (m > 1000 || n > 1000) return rx_fail(R, "repetition count above 1000");
        if (n >= 0 && n < m) return rx_fail(R, "{m,n} with n < m");
        if (n < 0)
            cpulm_buf_printf(R->out, "{%d,}", m);
        else
            cpulm_buf_printf(R->out, "{%d,%d}", m, n);
        R->p = q + 1;
    } else
        return 0;
    if (R->p < R->end && *R->p == '?')
        R->p++; /* lazy: same language */
    else if (R->p < R->end && *R->p == '+')
        return rx_fail(R, "possessive quantifiers are not supported");
    return 0;
}

static int at_seq_end(const rx *R) {
    return R->p >= R->end || *R->p == '|' || *R->p == ')' || (*R->p == '$' && R->p + 1 == R->end);
}

static int parse_seq(rx *R) {
    int n = 0;
    cpulm_buf_puts(R->out, "( ");
    while (!at_seq_end(R)) {
        if (n++) cpulm_buf_putc(R->out, ' ');
        cpulm_buf_puts(R->out, "( ");
        if (parse_atom(R) < 0) return -1;
        cpulm_buf_puts(R->out, " )");
        if (parse_quant(R) < 0) return -1;
    }
    if (!n) cpulm_buf_puts(R->out, "\"\"");
    cpulm_buf_puts(R->out, " )");
    return 0;
}

static int parse_alt(rx *R) {
    if (parse_seq(R) < 0) return -1;
    while (R->p < R->end && *R->p == '|') {
        R->p++;
        cpulm_buf_puts(R->out, " | ");
        if (parse_seq(R) < 0) return -1;
    }
    return 0;
}

cpulm_status cpulm_grammar_from_regex(const char *re, size_t n, cpulm_buf *out, cpulm_error *err) {
    rx R = {.s = re, .end = re + n, .p = re, .out = out, .err = err};
    int anchored_start = n > 0 && re[0] == '^';
    int anchored_end = n > 0 && re[n - 1] == '$' && (n < 2 || re[n - 2] != '\\');
    if (anchored_start) R.p++;
    if (!anchored_start) cpulm_buf_puts(out, "[^" SAFE_NOT "]{0,32} ");
    cpulm_buf_puts(out, "( ");
    if (parse_alt(&R) < 0) return CPULM_ERR_UNSUPPORTED;
    if (R.p < R.end && *R.p == '$' && R.p + 1 == R.end) R.p++;
    if (R.p != R.end) return rx_fail(&R, "unexpected ')'"), CPULM_ERR_UNSUPPORTED;
    cpulm_buf_puts(out, " )");
    if (!anchored_end) cpulm_buf_puts(out, " [^" SAFE_NOT "]{0,32}");
    return cpulm_buf_status(out);
}
