/* jinja_lib.c: the Jinja library: global functions, str/dict/list methods, filters, tests.
 *
 * Behaviour follows Python/Jinja2 where chat templates can see it (str.strip's whitespace
 * set, split without a separator, json.dumps spacing, filters' argument names). Case
 * mapping (upper, lower, title, capitalize) is ASCII-only: a documented gap.
 * strftime_now formats with English names in the C way, independent of the process locale.
 */
#define _POSIX_C_SOURCE 200809L /* localtime_r, gmtime_r */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/jinja_int.h"

enum {
    /* globals */
    G_RANGE,
    G_NAMESPACE,
    G_DICT,
    G_RAISE,
    G_STRFTIME,
    /* str methods */
    M_STRIP,
    M_LSTRIP,
    M_RSTRIP,
    M_SPLIT,
    M_STARTSWITH,
    M_ENDSWITH,
    M_REPLACE,
    M_UPPER,
    M_LOWER,
    M_TITLE,
    M_CAPITALIZE,
    M_FIND,
    M_COUNT,
    M_JOIN,
    M_SPLITLINES,
    /* dict methods */
    M_ITEMS,
    M_KEYS,
    M_VALUES,
    M_GET,
    M_COPY,
    /* list methods */
    M_APPEND,
    M_POP,
    M_EXTEND,
    M_INDEX,
    M_INSERT,
    /* loop */
    M_CYCLE,
};

static const jfunc globals[] = {
    [G_RANGE] = {JF_BUILTIN, G_RANGE, NULL, {0}},
    [G_NAMESPACE] = {JF_BUILTIN, G_NAMESPACE, NULL, {0}},
    [G_DICT] = {JF_BUILTIN, G_DICT, NULL, {0}},
    [G_RAISE] = {JF_BUILTIN, G_RAISE, NULL, {0}},
    [G_STRFTIME] = {JF_BUILTIN, G_STRFTIME, NULL, {0}},
};

static const struct {
    const char *name;
    int id;
} global_names[] = {{"range", G_RANGE},
                    {"namespace", G_NAMESPACE},
                    {"dict", G_DICT},
                    {"raise_exception", G_RAISE},
                    {"strftime_now", G_STRFTIME}};

static int name_is(const char *name, size_t n, const char *lit) {
    return strlen(lit) == n && !memcmp(name, lit, n);
}

int cpulm_jinja_global(const char *name, size_t n, jv *out) {
    for (size_t i = 0; i < sizeof global_names / sizeof global_names[0]; i++)
        if (name_is(name, n, global_names[i].name)) {
            memset(out, 0, sizeof *out);
            out->t = JV_FUNC;
            out->u.fn = &globals[global_names[i].id];
            return 0;
        }
    return -1;
}

/* ---- small helpers ---- */

static jv mk(jtype t) {
    jv v;
    memset(&v, 0, sizeof v);
    v.t = t;
    return v;
}

static jv mk_int(int64_t i) {
    jv v = mk(JV_INT);
    v.u.i = i;
    return v;
}

static jv mk_bool(int b) {
    jv v = mk(JV_BOOL);
    v.u.i = b != 0;
    return v;
}

static jv mk_list(jlist *l) {
    jv v = mk(l ? JV_LIST : JV_UNDEF);
    v.u.l = l;
    return v;
}

static jv cstr(jinterp *in, const char *s) {
    return cpulm_jinja_str(in, s, strlen(s));
}

/* Argument idx by position, else by keyword name, else def. */
static jv arg(const jv *pos, int n, const char *const *kn, const jv *kv, int nk, int idx,
              const char *name, jv def) {
    if (idx < n) return pos[idx];
    for (int k = 0; k < nk; k++)
        if (!strcmp(kn[k], name)) return kv[k];
    return def;
}

#define ARG(idx, name, def) arg(pos, n, kn, kv, nk, idx, name, def)

static int type_err(jinterp *in, int32_t line, const char *what) {
    return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG, "%s", what);
}

static int want_str(jinterp *in, int32_t line, jv v, const char *who) {
    if (v.t == JV_STR) return 0;
    return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG, "%s: expected a string", who);
}

static int push(jinterp *in, jlist *l, jv v) {
    return l && v.t != JV_UNDEF ? cpulm_jinja_list_push(in, l, v) : -1;
}

/* ---- strings ---- */

/* Python's str.isspace() set. */
static int py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

static int next_cp(const jstr *s, size_t i, uint32_t *cp) {
    int k = cpulm_json_utf8_next((const unsigned char *)s->s + i, s->len - i, cp);
    return k < 0 ? -k : k;
}

/* Previous code point start before byte end. */
static size_t prev_start(const jstr *s, size_t end) {
    size_t i = end - 1;
    while (i > 0 && end - i < 4 && ((unsigned char)s->s[i] & 0xC0) == 0x80)
        i--;
    uint32_t cp;
    if ((size_t)next_cp(s, i, &cp) != end - i) return end - 1; /* not a whole char: one byte */
    return i;
}

static int in_set(uint32_t cp, const jstr *chars) {
    if (!chars) return py_space(cp);
    for (size_t i = 0; i < chars->len;) {
        uint32_t c;
        i += (size_t)next_cp(chars, i, &c);
        if (c == cp) return 1;
    }
    return 0;
}

static int do_strip(jinterp *in, jv s, jv chars, int left, int right, jv *out) {
    const jstr *set = chars.t == JV_STR ? chars.u.s : NULL;
    size_t a = 0, b = s.u.s->len;
    uint32_t cp;
    while (left && a < b) {
        int k = next_cp(s.u.s, a, &cp);
        if (!in_set(cp, set)) break;
        a += (size_t)k;
    }
    while (right && b > a) {
        size_t p = prev_start(s.u.s, b);
        next_cp(s.u.s, p, &cp);
        if (!in_set(cp, set)) break;
        b = p;
    }
    *out = cpulm_jinja_str(in, s.u.s->s + a, b - a);
    return cpulm_jinja_ok(in) ? 0 : -1;
}

static const char *find_bytes(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn == 0) return h;
    for (size_t i = 0; nn <= hn && i <= hn - nn; i++)
        if (!memcmp(h + i, nd, nn)) return h + i;
    return NULL;
}

static int do_split(jinterp *in, int32_t line, jv s, jv sep, jv maxsplit, jv *out) {
    jlist *l = cpulm_jinja_list_new(in, 4);
    const char *p = s.u.s->s, *end = p + s.u.s->len;
    int64_t left = maxsplit.t == JV_INT ? maxsplit.u.i : -1;
    if (!l) return -1;
    if (sep.t == JV_STR) {
        if (sep.u.s->len == 0) return type_err(in, line, "split: empty separator");
        for (;;) {
            const char *q =
                left != 0 ? find_bytes(p, (size_t)(end - p), sep.u.s->s, sep.u.s->len) : NULL;
            if (!q) break;
            if (push(in, l, cpulm_jinja_str(in, p, (size_t)(q - p)))) return -1;
            p = q + sep.u.s->len;
            left--;
        }
        if (push(in, l, cpulm_jinja_str(in, p, (size_t)(end - p)))) return -1;
    } else { /* runs of whitespace, no empty strings (ASCII whitespace only) */
        for (;;) {
            while (p < end && py_space((unsigned char)*p))
                p++;
            if (p == end) break;
            const char *q = p;
            if (left == 0) q = end;
            while (q < end && !py_space((unsigned char)*q))
                q++;
            if (left == 0) {
                while (q > p && py_space((unsigned char)q[-1]))
                    q--;
            }
            if (push(in, l, cpulm_jinja_str(in, p, (size_t)(q - p)))) return -1;
            p = q;
            left--;
        }
    }
    *out = mk_list(l);
    return 0;
}

static int do_replace(jinterp *in, int32_t line, jv s, jv old, jv new_, jv count, jv *out) {
    if (want_str(in, line, old, "replace") || want_str(in, line, new_, "replace")) return -1;
    int64_t left = count.t == JV_INT && count.u.i >= 0 ? count.u.i : -1;
    cpulm_buf b;
    cpulm_buf_init(&b, cpulm_jinja_opts_of(in)->max_memory);
    const char *p = s.u.s->s, *end = p + s.u.s->len;
    if (old.u.s->len == 0) { /* Python inserts `new` before every character and at the end */
        for (size_t i = 0; i <= s.u.s->len;) {
            if (left != 0) cpulm_buf_append(&b, new_.u.s->s, new_.u.s->len), left--;
            if (i == s.u.s->len) break;
            uint32_t cp;
            size_t k = (size_t)next_cp(s.u.s, i, &cp);
            cpulm_buf_append(&b, s.u.s->s + i, k);
            i += k;
        }
    } else {
        for (;;) {
            const char *q =
                left != 0 ? find_bytes(p, (size_t)(end - p), old.u.s->s, old.u.s->len) : NULL;
            if (!q) break;
            cpulm_buf_append(&b, p, (size_t)(q - p));
            cpulm_buf_append(&b, new_.u.s->s, new_.u.s->len);
            p = q + old.u.s->len;
            left--;
        }
        cpulm_buf_append(&b, p, (size_t)(end - p));
    }
    int rc = cpulm_buf_status(&b)
                 ? cpulm_jinja_fail(in, line, CPULM_ERR_TOO_SMALL, "replace: result too large")
                 : 0;
    if (!rc) *out = cpulm_jinja_str(in, b.data, b.len);
    cpulm_buf_release(&b);
    return rc || !cpulm_jinja_ok(in) ? -1 : 0;
}

enum { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE };

static int do_case(jinterp *in, jv s, int mode, jv *out) {
    *out = cpulm_jinja_str(in, s.u.s->s, s.u.s->len);
    if (out->t != JV_STR) return -1;
    char *p = ((jstr *)out->u.s)->s; /* freshly allocated: ours to modify */
    int prev_alpha = 0;
    for (size_t i = 0; i < s.u.s->len; i++) {
        char c = p[i];
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        int up = mode == CASE_UPPER || (mode == CASE_TITLE && alpha && !prev_alpha) ||
                 (mode == CASE_CAPITALIZE && i == 0);
        if (up && c >= 'a' && c <= 'z') p[i] = (char)(c - 32);
        if (!up && c >= 'A' && c <= 'Z') p[i] = (char)(c + 32);
        prev_alpha = alpha || ((unsigned char)c >= 0x80 && mode == CASE_TITLE && prev_alpha);
    }
    return 0;
}

static size_t cp_count(const jstr *s, size_t end) {
    size_t n = 0;
    for (size_t i = 0; i < end; n++) {
        uint32_t cp;
        i += (size_t)next_cp(s, i, &cp);
    }
    return n;
}

static int affix(jinterp *in, int32_t line, jv s, jv fix, int suffix, int *res) {
    *res = 0;
    if (fix.t == JV_LIST) {
        for (size_t i = 0; i < fix.u.l->n && !*res; i++)
            if (affix(in, line, s, fix.u.l->v[i], suffix, res)) return -1;
        return 0;
    }
    if (want_str(in, line, fix, suffix ? "endswith" : "startswith")) return -1;
    size_t n = fix.u.s->len;
    *res = n <= s.u.s->len && !memcmp(s.u.s->s + (suffix ? s.u.s->len - n : 0), fix.u.s->s, n);
    return 0;
}

static int join_values(jinterp *in, int32_t line, jv seq, jv sep, jv attr, jv *out);

static int str_method(jinterp *in, int32_t line, int id, jv s, const jv *pos, int n,
                      const char *const *kn, const jv *kv, int nk, jv *out) {
    jv none = mk(JV_NONE);
    int res;
    switch (id) {
    case M_STRIP: return do_strip(in, s, ARG(0, "chars", none), 1, 1, out);
    case M_LSTRIP: return do_strip(in, s, ARG(0, "chars", none), 1, 0, out);
    case M_RSTRIP: return do_strip(in, s, ARG(0, "chars", none), 0, 1, out);
    case M_SPLIT:
        return do_split(in, line, s, ARG(0, "sep", none), ARG(1, "maxsplit", mk_int(-1)), out);
    case M_STARTSWITH:
    case M_ENDSWITH:
        if (affix(in, line, s, ARG(0, "prefix", none), id == M_ENDSWITH, &res)) return -1;
        *out = mk_bool(res);
        return 0;
    case M_REPLACE:
        return do_replace(in, line, s, ARG(0, "old", none), ARG(1, "new", none),
                          ARG(2, "count", none), out);
    case M_UPPER: return do_case(in, s, CASE_UPPER, out);
    case M_LOWER: return do_case(in, s, CASE_LOWER, out);
    case M_TITLE: return do_case(in, s, CASE_TITLE, out);
    case M_CAPITALIZE: return do_case(in, s, CASE_CAPITALIZE, out);
    case M_FIND:
    case M_COUNT: {
        jv sub = ARG(0, "sub", none);
        if (want_str(in, line, sub, "find")) return -1;
        const char *q = find_bytes(s.u.s->s, s.u.s->len, sub.u.s->s, sub.u.s->len);
        if (id == M_FIND) {
            *out = mk_int(q ? (int64_t)cp_count(s.u.s, (size_t)(q - s.u.s->s)) : -1);
            return 0;
        }
        int64_t c = 0;
        if (sub.u.s->len == 0) c = (int64_t)cp_count(s.u.s, s.u.s->len) + 1;
        for (const char *p = s.u.s->s;
             sub.u.s->len &&
             (q = find_bytes(p, (size_t)(s.u.s->s + s.u.s->len - p), sub.u.s->s, sub.u.s->len));
             c++)
            p = q + sub.u.s->len;
        *out = mk_int(c);
        return 0;
    }
    case M_JOIN: return join_values(in, line, ARG(0, "iterable", none), s, none, out);
    case M_SPLITLINES: {
        jlist *l = cpulm_jinja_list_new(in, 4);
        const char *p = s.u.s->s, *end = p + s.u.s->len;
        while (l && p < end) {
            const char *q = p;
            while (q < end && *q != '\n' && *q != '\r')
                q++;
            if (push(in, l, cpulm_jinja_str(in, p, (size_t)(q - p)))) return -1;
            p = q < end ? q + (q[0] == '\r' && q + 1 < end && q[1] == '\n' ? 2 : 1) : q;
        }
        *out = mk_list(l);
        return l ? 0 : -1;
    }
    }
    return type_err(in, line, "unknown str method");
}

/* ---- dicts and lists ---- */

static jv pair(jinterp *in, jv a, jv b) {
    jlist *t = cpulm_jinja_list_new(in, 2);
    if (!t) return mk(JV_UNDEF);
    t->is_tuple = 1;
    t->v[0] = a;
    t->v[1] = b;
    t->n = 2;
    return mk_list(t);
}

static int dict_items(jinterp *in, const jdict *d, int what, jv *out) {
    jlist *l = cpulm_jinja_list_new(in, d->n);
    for (size_t i = 0; l && i < d->n; i++) {
        jv v = what == M_KEYS ? d->k[i] : what == M_VALUES ? d->v[i] : pair(in, d->k[i], d->v[i]);
        if (push(in, l, v)) return -1;
    }
    *out = mk_list(l);
    return l ? 0 : -1;
}

static int dict_method(jinterp *in, int32_t line, int id, jv self, const jv *pos, int n,
                       const char *const *kn, const jv *kv, int nk, jv *out) {
    jdict *d = self.u.d;
    switch (id) {
    case M_ITEMS:
    case M_KEYS:
    case M_VALUES: return dict_items(in, d, id, out);
    case M_GET: {
        jv *v = cpulm_jinja_dict_find(d, ARG(0, "key", mk(JV_NONE)));
        *out = v ? *v : ARG(1, "default", mk(JV_NONE));
        return 0;
    }
    case M_COPY: {
        jdict *c = cpulm_jinja_dict_new(in, JD_DICT);
        for (size_t i = 0; c && i < d->n; i++)
            if (cpulm_jinja_dict_set(in, c, d->k[i], d->v[i])) return -1;
        if (!c) return -1;
        *out = mk(JV_DICT);
        out->u.d = c;
        return 0;
    }
    }
    return type_err(in, line, "unknown dict method");
}

static int list_method(jinterp *in, int32_t line, int id, jv self, const jv *pos, int n,
                       const char *const *kn, const jv *kv, int nk, jv *out) {
    jlist *l = self.u.l;
    jv none = mk(JV_NONE);
    *out = none;
    if (l->is_tuple && id != M_INDEX && id != M_COUNT)
        return type_err(in, line, "'tuple' object is immutable");
    switch (id) {
    case M_APPEND: return cpulm_jinja_list_push(in, l, ARG(0, "object", none));
    case M_EXTEND: {
        jlist *src;
        if (cpulm_jinja_iter(in, line, ARG(0, "iterable", none), &src)) return -1;
        size_t m = src->n; /* extending a list with itself */
        for (size_t i = 0; i < m; i++)
            if (cpulm_jinja_list_push(in, l, src->v[i])) return -1;
        return 0;
    }
    case M_POP: {
        jv iv = ARG(0, "index", mk_int(-1));
        int64_t i = iv.t == JV_INT ? iv.u.i : -1;
        if (i < 0) i += (int64_t)l->n;
        if (i < 0 || i >= (int64_t)l->n) return type_err(in, line, "pop index out of range");
        *out = l->v[i];
        memmove(l->v + i, l->v + i + 1, (l->n - (size_t)i - 1) * sizeof *l->v);
        l->n--;
        return 0;
    }
    case M_INSERT: {
        jv iv = ARG(0, "index", mk_int(0));
        int64_t i = iv.t == JV_INT ? iv.u.i : 0, len = (int64_t)l->n;
        if (i < 0) i = i + len < 0 ? 0 : i + len;
        if (i > len) i = len;
        if (cpulm_jinja_list_push(in, l, none)) return -1;
        memmove(l->v + i + 1, l->v + i, (size_t)(len - i) * sizeof *l->v);
        l->v[i] = ARG(1, "object", none);
        return 0;
    }
    case M_INDEX:
    case M_COUNT: {
        jv x = ARG(0, "value", none);
        int64_t c = 0;
        for (size_t i = 0; i < l->n; i++)
            if (cpulm_jinja_equal(l->v[i], x)) {
                if (id == M_INDEX) {
                    *out = mk_int((int64_t)i);
                    return 0;
                }
                c++;
            }
        if (id == M_INDEX) return type_err(in, line, "list.index(x): x not in list");
        *out = mk_int(c);
        return 0;
    }
    }
    return type_err(in, line, "unknown list method");
}

static const struct {
    const char *name;
    int id;
    int on; /* JV_STR, JV_DICT, JV_LIST; JV_FUNC marks the loop object */
} method_names[] = {
    {"strip", M_STRIP, JV_STR},
    {"lstrip", M_LSTRIP, JV_STR},
    {"rstrip", M_RSTRIP, JV_STR},
    {"split", M_SPLIT, JV_STR},
    {"startswith", M_STARTSWITH, JV_STR},
    {"endswith", M_ENDSWITH, JV_STR},
    {"replace", M_REPLACE, JV_STR},
    {"upper", M_UPPER, JV_STR},
    {"lower", M_LOWER, JV_STR},
    {"title", M_TITLE, JV_STR},
    {"capitalize", M_CAPITALIZE, JV_STR},
    {"find", M_FIND, JV_STR},
    {"count", M_COUNT, JV_STR},
    {"join", M_JOIN, JV_STR},
    {"splitlines", M_SPLITLINES, JV_STR},
    {"items", M_ITEMS, JV_DICT},
    {"keys", M_KEYS, JV_DICT},
    {"values", M_VALUES, JV_DICT},
    {"get", M_GET, JV_DICT},
    {"copy", M_COPY, JV_DICT},
    {"append", M_APPEND, JV_LIST},
    {"pop", M_POP, JV_LIST},
    {"extend", M_EXTEND, JV_LIST},
    {"index", M_INDEX, JV_LIST},
    {"count", M_COUNT, JV_LIST},
    {"insert", M_INSERT, JV_LIST},
    {"cycle", M_CYCLE, JV_FUNC},
};

int cpulm_jinja_method(jinterp *in, jv v, const char *name, size_t n, jv *out) {
    int on = v.t == JV_DICT && v.u.d->kind == JD_LOOP   ? JV_FUNC
             : v.t == JV_DICT && v.u.d->kind == JD_DICT ? JV_DICT
                                                        : v.t;
    for (size_t i = 0; i < sizeof method_names / sizeof method_names[0]; i++) {
        if (method_names[i].on != on || !name_is(name, n, method_names[i].name)) continue;
        jfunc *f = cpulm_jinja_alloc(cpulm_jinja_arena(in), sizeof *f);
        if (!f) return cpulm_jinja_fail(in, 0, CPULM_ERR_NOMEM, "out of memory");
        f->kind = JF_METHOD;
        f->id = method_names[i].id;
        f->self = v;
        *out = mk(JV_FUNC);
        out->u.fn = f;
        return 0;
    }
    return -1;
}

/* ---- globals ---- */

static const char *const month_names[] = {"January",   "February", "March",    "April",
                                          "May",       "June",     "July",     "August",
                                          "September", "October",  "November", "December"};
static const char *const day_names[] = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                                        "Thursday", "Friday", "Saturday"};

static void put2(cpulm_buf *b, int v, int nopad) {
    if (nopad)
        cpulm_buf_printf(b, "%d", v);
    else
        cpulm_buf_printf(b, "%02d", v);
}

/* strftime with C-locale names whatever setlocale says; "%-d" drops padding as glibc does. */
static void format_time(cpulm_buf *b, const char *fmt, const struct tm *tm) {
    for (const char *p = fmt; *p; p++) {
        if (*p != '%' || !p[1]) {
            cpulm_buf_putc(b, *p);
            continue;
        }
        int nopad = p[1] == '-' && p[2];
        char c = *(p += nopad ? 2 : 1);
        switch (c) {
        case 'd': put2(b, tm->tm_mday, nopad); break;
        case 'e': cpulm_buf_printf(b, nopad ? "%d" : "%2d", tm->tm_mday); break;
        case 'm': put2(b, tm->tm_mon + 1, nopad); break;
        case 'Y': cpulm_buf_printf(b, "%d", tm->tm_year + 1900); break;
        case 'y': put2(b, tm->tm_year % 100, nopad); break;
        case 'H': put2(b, tm->tm_hour, nopad); break;
        case 'I': put2(b, tm->tm_hour % 12 ? tm->tm_hour % 12 : 12, nopad); break;
        case 'M': put2(b, tm->tm_min, nopad); break;
        case 'S': put2(b, tm->tm_sec, nopad); break;
        case 'j': cpulm_buf_printf(b, nopad ? "%d" : "%03d", tm->tm_yday + 1); break;
        case 'p': cpulm_buf_puts(b, tm->tm_hour < 12 ? "AM" : "PM"); break;
        case 'B': cpulm_buf_puts(b, month_names[tm->tm_mon % 12]); break;
        case 'b': cpulm_buf_printf(b, "%.3s", month_names[tm->tm_mon % 12]); break;
        case 'A': cpulm_buf_puts(b, day_names[tm->tm_wday % 7]); break;
        case 'a': cpulm_buf_printf(b, "%.3s", day_names[tm->tm_wday % 7]); break;
        case '%': cpulm_buf_putc(b, '%'); break;
        default:
            cpulm_buf_putc(b, '%');
            cpulm_buf_putc(b, c);
            break;
        }
    }
}

static int strftime_now(jinterp *in, int32_t line, jv fmt, jv *out) {
    if (want_str(in, line, fmt, "strftime_now")) return -1;
    const cpulm_jinja_opts *o = cpulm_jinja_opts_of(in);
    time_t now = o->now >= 0 ? (time_t)o->now : time(NULL);
    struct tm tm;
    if (!(o->now_utc ? gmtime_r(&now, &tm) : localtime_r(&now, &tm)))
        return type_err(in, line, "strftime_now: bad time");
    cpulm_buf b;
    cpulm_buf_init(&b, 4096);
    format_time(&b, fmt.u.s->s, &tm);
    *out = cpulm_buf_status(&b) ? mk(JV_UNDEF) : cpulm_jinja_str(in, b.data, b.len);
    cpulm_buf_release(&b);
    return out->t == JV_STR ? 0 : type_err(in, line, "strftime_now: result too long");
}

static int do_range(jinterp *in, int32_t line, const jv *pos, int n, jv *out) {
    int64_t a[3] = {0, 0, 1};
    if (n < 1 || n > 3) return type_err(in, line, "range expects 1 to 3 integer arguments");
    for (int i = 0; i < n; i++) {
        if (pos[i].t != JV_INT && pos[i].t != JV_BOOL)
            return type_err(in, line, "range: arguments must be integers");
        a[n == 1 ? 1 : i] = pos[i].u.i;
    }
    if (a[2] == 0) return type_err(in, line, "range: step must not be zero");
    /* count first: the step budget rejects huge ranges before anything is allocated */
    uint64_t diff = a[2] > 0 ? (uint64_t)a[1] - (uint64_t)a[0] : (uint64_t)a[0] - (uint64_t)a[1];
    uint64_t step = a[2] > 0 ? (uint64_t)a[2] : 0 - (uint64_t)a[2];
    int nonempty = a[2] > 0 ? a[1] > a[0] : a[1] < a[0];
    uint64_t ucount = nonempty ? (diff - 1) / step + 1 : 0; /* exact, no overflow */
    int64_t count = ucount > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)ucount;
    if (cpulm_jinja_step(in, line, count)) return -1;
    jlist *l = cpulm_jinja_list_new(in, (size_t)count);
    for (int64_t i = 0; l && i < count; i++)
        l->v[l->n++] = mk_int((int64_t)((uint64_t)a[0] + (uint64_t)i * (uint64_t)a[2]));
    *out = mk_list(l);
    return l ? 0 : -1;
}

static int make_dict(jinterp *in, int kind, const jv *pos, int n, const char *const *kn,
                     const jv *kv, int nk, jv *out) {
    jdict *d = cpulm_jinja_dict_new(in, kind);
    if (!d) return -1;
    if (n > 0 && pos[0].t == JV_DICT) /* namespace({...}) / dict({...}) */
        for (size_t i = 0; i < pos[0].u.d->n; i++)
            if (cpulm_jinja_dict_set(in, d, pos[0].u.d->k[i], pos[0].u.d->v[i])) return -1;
    for (int k = 0; k < nk; k++)
        if (cpulm_jinja_dict_set(in, d, cstr(in, kn[k]), kv[k])) return -1;
    *out = mk(JV_DICT);
    out->u.d = d;
    return 0;
}

int cpulm_jinja_call_builtin(jinterp *in, int32_t line, const jfunc *f, const jv *pos, int n,
                             const char *const *kn, const jv *kv, int nk, jv *out) {
    if (f->kind == JF_METHOD) {
        jv self = f->self;
        if (f->id == M_CYCLE) {
            jv *idx = cpulm_jinja_dict_get(self.u.d, "index0", 6);
            if (n == 0) return type_err(in, line, "loop.cycle needs at least one argument");
            *out = pos[idx ? idx->u.i % n : 0];
            return 0;
        }
        if (self.t == JV_STR) return str_method(in, line, f->id, self, pos, n, kn, kv, nk, out);
        if (self.t == JV_DICT) return dict_method(in, line, f->id, self, pos, n, kn, kv, nk, out);
        return list_method(in, line, f->id, self, pos, n, kn, kv, nk, out);
    }
    switch (f->id) {
    case G_RANGE: return do_range(in, line, pos, n, out);
    case G_NAMESPACE: return make_dict(in, JD_NAMESPACE, pos, n, kn, kv, nk, out);
    case G_DICT: return make_dict(in, JD_DICT, pos, n, kn, kv, nk, out);
    case G_STRFTIME: return strftime_now(in, line, ARG(0, "format", mk(JV_NONE)), out);
    case G_RAISE: {
        cpulm_buf b;
        cpulm_buf_init(&b, 150);
        if (n > 0) cpulm_jinja_to_buf(&b, pos[0]);
        cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG, "template raised an exception: %s",
                         b.data);
        cpulm_buf_release(&b);
        return -1;
    }
    }
    return type_err(in, line, "unknown function");
}

/* ---- filters ---- */

static int join_values(jinterp *in, int32_t line, jv seq, jv sep, jv attr, jv *out) {
    jlist *l;
    if (cpulm_jinja_iter(in, line, seq, &l)) return -1;
    cpulm_buf b;
    cpulm_buf_init(&b, cpulm_jinja_opts_of(in)->max_memory);
    for (size_t i = 0; i < l->n; i++) {
        if (i && sep.t == JV_STR) cpulm_buf_append(&b, sep.u.s->s, sep.u.s->len);
        jv v = l->v[i];
        if (attr.t == JV_STR && v.t == JV_DICT) {
            jv *a = cpulm_jinja_dict_get(v.u.d, attr.u.s->s, attr.u.s->len);
            v = a ? *a : mk(JV_UNDEF);
        }
        cpulm_jinja_to_buf(&b, v);
    }
    int rc = cpulm_buf_status(&b) ? type_err(in, line, "join: result too large") : 0;
    if (!rc) *out = cpulm_jinja_str(in, b.data, b.len);
    cpulm_buf_release(&b);
    return rc || !cpulm_jinja_ok(in) ? -1 : 0;
}

static int64_t length_of(jv v) {
    switch (v.t) {
    case JV_STR: return (int64_t)cp_count(v.u.s, v.u.s->len);
    case JV_LIST: return (int64_t)v.u.l->n;
    case JV_DICT: return (int64_t)v.u.d->n;
    default: return 0;
    }
}

static int f_tojson(jinterp *in, int32_t line, jv v, const jv *pos, int n, const char *const *kn,
                    const jv *kv, int nk, jv *out) {
    jv ind = ARG(0, "indent", mk(JV_NONE)), seps = ARG(99, "separators", mk(JV_NONE));
    const char *item_sep = NULL, *key_sep = NULL;
    if (seps.t == JV_LIST && seps.u.l->n == 2 && seps.u.l->v[0].t == JV_STR &&
        seps.u.l->v[1].t == JV_STR) {
        item_sep = seps.u.l->v[0].u.s->s;
        key_sep = seps.u.l->v[1].u.s->s;
    }
    cpulm_buf b;
    cpulm_buf_init(&b, cpulm_jinja_opts_of(in)->max_memory);
    int rc =
        cpulm_jinja_tojson(in, line, v, ind.t == JV_INT ? (int)ind.u.i : -1, item_sep, key_sep, &b);
    if (!rc) *out = cpulm_jinja_str(in, b.data, b.len);
    cpulm_buf_release(&b);
    return rc || !cpulm_jinja_ok(in) ? -1 : 0;
}

static int f_first_last(jinterp *in, int32_t line, jv v, int last, jv *out) {
    jlist *l;
    if (cpulm_jinja_iter(in, line, v, &l)) return -1;
    *out = mk(JV_UNDEF);
    if (l->n) *out = l->v[last ? l->n - 1 : 0];
    return 0;
}

static int f_items(jinterp *in, int32_t line, jv v, jv *out) {
    if (v.t == JV_UNDEF) return (*out = mk_list(cpulm_jinja_list_new(in, 0))).t == JV_LIST ? 0 : -1;
    if (v.t != JV_DICT) return type_err(in, line, "items: expected a mapping");
    return dict_items(in, v.u.d, M_ITEMS, out);
}

/* Stable merge sort by cpulm_jinja_compare on keys (attribute values or the items). */
static int sort_list(jinterp *in, int32_t line, jlist *l, jv attr, int reverse) {
    size_t n = l->n;
    jv *key = cpulm_jinja_alloc(cpulm_jinja_arena(in), (n * 2 + 2) * sizeof *key);
    jv *tmp = cpulm_jinja_alloc(cpulm_jinja_arena(in), (n * 2 + 2) * sizeof *tmp);
    if (!key || !tmp) return cpulm_jinja_fail(in, line, CPULM_ERR_TOO_SMALL, "sort: out of memory");
    for (size_t i = 0; i < n; i++) { /* pairs (key, item) */
        jv k = l->v[i];
        if (attr.t == JV_STR && k.t == JV_DICT) {
            jv *a = cpulm_jinja_dict_get(k.u.d, attr.u.s->s, attr.u.s->len);
            k = a ? *a : mk(JV_UNDEF);
        }
        key[2 * i] = k;
        key[2 * i + 1] = l->v[i];
    }
    if (cpulm_jinja_step(in, line, (int64_t)n * 20)) return -1;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, i = lo,
                   j = mid, k = lo;
            while (i < mid || j < hi) {
                int take_right = 0;
                if (i < mid && j < hi) {
                    int c = cpulm_jinja_compare(key[2 * i], key[2 * j]);
                    if (c == 2) return type_err(in, line, "sort: values cannot be compared");
                    take_right = reverse ? c < 0 : c > 0;
                } else {
                    take_right = i >= mid;
                }
                size_t s = take_right ? j++ : i++;
                tmp[2 * k] = key[2 * s];
                tmp[2 * k + 1] = key[2 * s + 1];
                k++;
            }
        }
        jv *t = key;
        key = tmp;
        tmp = t;
    }
    for (size_t i = 0; i < n; i++)
        l->v[i] = key[2 * i + 1];
    return 0;
}

static jlist *copy_list(jinterp *in, const jlist *src) {
    jlist *l = cpulm_jinja_list_new(in, src->n);
    for (size_t i = 0; l && i < src->n; i++)
        if (cpulm_jinja_list_push(in, l, src->v[i])) return NULL;
    return l;
}

/* select/reject/selectattr/rejectattr/map share the per-item machinery. */
static int f_select(jinterp *in, int32_t line, jv v, int by_attr, int keep, const jv *pos, int n,
                    jv *out) {
    jlist *src, *l;
    if (cpulm_jinja_iter(in, line, v, &src) || !(l = cpulm_jinja_list_new(in, src->n))) return -1;
    int first = by_attr ? 1 : 0;
    if (by_attr && (n < 1 || pos[0].t != JV_STR))
        return type_err(in, line, "selectattr: expected an attribute name");
    for (size_t i = 0; i < src->n; i++) {
        jv x = src->v[i];
        if (by_attr) {
            jv *a =
                x.t == JV_DICT ? cpulm_jinja_dict_get(x.u.d, pos[0].u.s->s, pos[0].u.s->len) : NULL;
            x = a ? *a : mk(JV_UNDEF);
        }
        int res;
        if (n > first) {
            if (pos[first].t != JV_STR)
                return type_err(in, line, "select: test name must be a string");
            if (cpulm_jinja_test(in, line, pos[first].u.s->s, x, pos + first + 1, n - first - 1,
                                 &res))
                return -1;
        } else {
            res = cpulm_jinja_truthy(x);
        }
        if (res == keep && cpulm_jinja_list_push(in, l, src->v[i])) return -1;
    }
    *out = mk_list(l);
    return 0;
}

static int f_map(jinterp *in, int32_t line, jv v, const jv *pos, int n, const char *const *kn,
                 const jv *kv, int nk, jv *out) {
    jlist *src, *l;
    if (cpulm_jinja_iter(in, line, v, &src) || !(l = cpulm_jinja_list_new(in, src->n))) return -1;
    jv attr = ARG(99, "attribute", mk(JV_NONE)), def = ARG(99, "default", mk(JV_UNDEF));
    for (size_t i = 0; i < src->n; i++) {
        jv x = src->v[i], r;
        if (attr.t == JV_STR) {
            jv *a = x.t == JV_DICT ? cpulm_jinja_dict_get(x.u.d, attr.u.s->s, attr.u.s->len) : NULL;
            r = a ? *a : def;
        } else if (n > 0 && pos[0].t == JV_STR) {
            if (cpulm_jinja_filter(in, line, pos[0].u.s->s, x, pos + 1, n - 1, NULL, NULL, 0, &r))
                return -1;
        } else {
            return type_err(in, line, "map: expected a filter name or attribute=");
        }
        if (cpulm_jinja_list_push(in, l, r)) return -1;
    }
    *out = mk_list(l);
    return 0;
}

static int f_minmax_sum(jinterp *in, int32_t line, const char *name, jv v, const jv *pos, int n,
                        const char *const *kn, const jv *kv, int nk, jv *out) {
    jlist *src;
    if (cpulm_jinja_iter(in, line, v, &src)) return -1;
    jv attr = ARG(name[1] == 'u' ? 0 : 99, "attribute", mk(JV_NONE));
    jv acc = name[1] == 'u' ? ARG(1, "start", mk_int(0)) : mk(JV_UNDEF);
    for (size_t i = 0; i < src->n; i++) {
        jv x = src->v[i];
        if (attr.t == JV_STR && x.t == JV_DICT) {
            jv *a = cpulm_jinja_dict_get(x.u.d, attr.u.s->s, attr.u.s->len);
            x = a ? *a : mk(JV_UNDEF);
        }
        if (name[1] == 'u') {
            if ((x.t != JV_INT && x.t != JV_FLOAT && x.t != JV_BOOL) ||
                (acc.t != JV_INT && acc.t != JV_FLOAT))
                return type_err(in, line, "sum: values must be numbers");
            if (acc.t == JV_INT && x.t != JV_FLOAT)
                acc.u.i += x.u.i;
            else {
                double a = acc.t == JV_FLOAT ? acc.u.f : (double)acc.u.i;
                acc = mk(JV_FLOAT);
                acc.u.f = a + (x.t == JV_FLOAT ? x.u.f : (double)x.u.i);
            }
            continue;
        }
        if (acc.t == JV_UNDEF) {
            acc = x;
            continue;
        }
        int c = cpulm_jinja_compare(x, acc);
        if (c == 2) return type_err(in, line, "min/max: values cannot be compared");
        if (name[1] == 'i' ? c < 0 : c > 0) acc = x;
    }
    *out = acc;
    return 0;
}

static int f_indent(jinterp *in, int32_t line, jv v, const jv *pos, int n, const char *const *kn,
                    const jv *kv, int nk, jv *out) {
    jv s = cpulm_jinja_to_str(in, v), w = ARG(0, "width", mk_int(4));
    int first = cpulm_jinja_truthy(ARG(1, "first", mk_bool(0))),
        blank = cpulm_jinja_truthy(ARG(2, "blank", mk_bool(0)));
    if (s.t != JV_STR) return -1;
    cpulm_buf pad, b;
    cpulm_buf_init(&pad, 4096);
    cpulm_buf_init(&b, cpulm_jinja_opts_of(in)->max_memory);
    if (w.t == JV_STR)
        cpulm_buf_append(&pad, w.u.s->s, w.u.s->len);
    else
        for (int64_t i = 0; i < (w.t == JV_INT ? w.u.i : 4) && i < 4096; i++)
            cpulm_buf_putc(&pad, ' ');
    const char *p = s.u.s->s, *end = p + s.u.s->len;
    for (int line_no = 0; p <= end; line_no++) {
        const char *q = memchr(p, '\n', (size_t)(end - p));
        if (!q) q = end;
        if ((line_no > 0 || first) && (blank || q > p)) cpulm_buf_append(&b, pad.data, pad.len);
        cpulm_buf_append(&b, p, (size_t)(q - p));
        if (q == end) break;
        cpulm_buf_putc(&b, '\n');
        p = q + 1;
    }
    *out = cpulm_buf_status(&b) ? mk(JV_UNDEF) : cpulm_jinja_str(in, b.data, b.len);
    cpulm_buf_release(&pad);
    cpulm_buf_release(&b);
    return out->t == JV_STR ? 0 : type_err(in, line, "indent: result too large");
}

static int f_escape(jinterp *in, jv v, jv *out) {
    jv s = cpulm_jinja_to_str(in, v);
    if (s.t != JV_STR) return -1;
    cpulm_buf b;
    cpulm_buf_init(&b, cpulm_jinja_opts_of(in)->max_memory);
    for (size_t i = 0; i < s.u.s->len; i++) {
        char c = s.u.s->s[i];
        if (c == '&')
            cpulm_buf_puts(&b, "&amp;");
        else if (c == '<')
            cpulm_buf_puts(&b, "&lt;");
        else if (c == '>')
            cpulm_buf_puts(&b, "&gt;");
        else if (c == '"')
            cpulm_buf_puts(&b, "&#34;");
        else if (c == '\'')
            cpulm_buf_puts(&b, "&#39;");
        else
            cpulm_buf_putc(&b, c);
    }
    *out = cpulm_buf_status(&b) ? mk(JV_UNDEF) : cpulm_jinja_str(in, b.data, b.len);
    cpulm_buf_release(&b);
    return out->t == JV_STR ? 0 : -1;
}

static int f_number(jinterp *in, jv v, int to_float, jv def, jv *out) {
    *out = def;
    if (v.t == JV_INT || v.t == JV_BOOL) {
        if (to_float)
            out->t = JV_FLOAT, out->u.f = (double)v.u.i;
        else
            *out = mk_int(v.u.i);
    } else if (v.t == JV_FLOAT) {
        if (to_float)
            *out = v;
        else if (isfinite(v.u.f) && fabs(v.u.f) < 9.2e18)
            *out = mk_int((int64_t)v.u.f);
    } else if (v.t == JV_STR) {
        cpulm_json_doc *d = NULL;
        size_t a = 0, b = v.u.s->len;
        while (a < b && py_space((unsigned char)v.u.s->s[a]))
            a++;
        while (b > a && py_space((unsigned char)v.u.s->s[b - 1]))
            b--;
        if (cpulm_json_parse(v.u.s->s + a, b - a, NULL, &d, NULL, NULL) == CPULM_OK &&
            cpulm_json_root(d)->type == CPULM_JSON_NUMBER) {
            const cpulm_json *j = cpulm_json_root(d);
            if (to_float)
                out->t = JV_FLOAT, out->u.f = j->u.num.f;
            else if (j->is_int)
                *out = mk_int(j->u.num.i);
        }
        cpulm_json_free(d);
    }
    (void)in;
    return 0;
}

static int f_round(jinterp *in, int32_t line, jv v, const jv *pos, int n, const char *const *kn,
                   const jv *kv, int nk, jv *out) {
    if (v.t != JV_INT && v.t != JV_FLOAT && v.t != JV_BOOL)
        return type_err(in, line, "round: expected a number");
    jv prec = ARG(0, "precision", mk_int(0)), method = ARG(1, "method", mk(JV_NONE));
    double x = v.t == JV_FLOAT ? v.u.f : (double)v.u.i,
           m = pow(10.0, (double)(prec.t == JV_INT ? prec.u.i : 0));
    const char *how = method.t == JV_STR ? method.u.s->s : "common";
    double r = !strcmp(how, "floor")  ? floor(x * m) / m
               : !strcmp(how, "ceil") ? ceil(x * m) / m
                                      : round(x * m) / m;
    *out = mk(JV_FLOAT);
    out->u.f = r;
    return 0;
}

static int f_reverse(jinterp *in, int32_t line, jv v, jv *out) {
    if (v.t == JV_STR) {
        jstr *s = cpulm_jinja_alloc(cpulm_jinja_arena(in), sizeof *s + v.u.s->len + 1);
        if (!s) return type_err(in, line, "out of memory");
        for (size_t i = v.u.s->len; i > 0;) { /* by characters */
            size_t p = prev_start(v.u.s, i);
            memcpy(s->s + s->len, v.u.s->s + p, i - p);
            s->len += i - p;
            i = p;
        }
        *out = mk(JV_STR);
        out->u.s = s;
        return 0;
    }
    jlist *src, *l;
    if (cpulm_jinja_iter(in, line, v, &src) || !(l = cpulm_jinja_list_new(in, src->n))) return -1;
    for (size_t i = src->n; i > 0; i--)
        if (cpulm_jinja_list_push(in, l, src->v[i - 1])) return -1;
    *out = mk_list(l);
    return 0;
}

static int f_unique(jinterp *in, int32_t line, jv v, jv *out) {
    jlist *src, *l;
    if (cpulm_jinja_iter(in, line, v, &src) || !(l = cpulm_jinja_list_new(in, src->n))) return -1;
    if (cpulm_jinja_step(in, line, (int64_t)src->n * (int64_t)src->n / 16)) return -1;
    for (size_t i = 0; i < src->n; i++) {
        int seen = 0;
        for (size_t j = 0; j < l->n && !seen; j++)
            seen = cpulm_jinja_equal(l->v[j], src->v[i]);
        if (!seen && cpulm_jinja_list_push(in, l, src->v[i])) return -1;
    }
    *out = mk_list(l);
    return 0;
}

static int f_dictsort(jinterp *in, int32_t line, jv v, const jv *pos, int n, const char *const *kn,
                      const jv *kv, int nk, jv *out) {
    if (v.t != JV_DICT) return type_err(in, line, "dictsort: expected a mapping");
    jv by = ARG(1, "by", mk(JV_NONE));
    int by_value = by.t == JV_STR && !strcmp(by.u.s->s, "value");
    if (dict_items(in, v.u.d, M_ITEMS, out)) return -1;
    jlist *l = out->u.l, *keys = cpulm_jinja_list_new(in, l->n);
    if (!keys) return -1;
    /* sort pairs by building (key-or-value, pair) dicts is heavy; sort the pairs directly
       with a temporary single-key dict per item */
    for (size_t i = 0; i < l->n; i++) {
        jdict *d = cpulm_jinja_dict_new(in, JD_DICT);
        if (!d || cpulm_jinja_dict_set(in, d, cstr(in, "k"), l->v[i].u.l->v[by_value]) ||
            cpulm_jinja_dict_set(in, d, cstr(in, "p"), l->v[i]))
            return -1;
        jv dv = mk(JV_DICT);
        dv.u.d = d;
        if (cpulm_jinja_list_push(in, keys, dv)) return -1;
    }
    if (sort_list(in, line, keys, cstr(in, "k"), cpulm_jinja_truthy(ARG(2, "reverse", mk_bool(0)))))
        return -1;
    for (size_t i = 0; i < l->n; i++)
        l->v[i] = *cpulm_jinja_dict_get(keys->v[i].u.d, "p", 1);
    return 0;
}

static int f_format(jinterp *in, int32_t line, jv v, const jv *pos, int n, jv *out) {
    if (want_str(in, line, v, "format")) return -1;
    cpulm_buf b;
    cpulm_buf_init(&b, cpulm_jinja_opts_of(in)->max_memory);
    int k = 0, rc = 0;
    for (const char *p = v.u.s->s; *p && !rc; p++) {
        if (*p != '%') {
            cpulm_buf_putc(&b, *p);
            continue;
        }
        char c = *++p;
        if (c == '%')
            cpulm_buf_putc(&b, '%');
        else if ((c == 's' || c == 'd' || c == 'i') && k < n) {
            jv x = pos[k++];
            if (c != 's' && x.t == JV_FLOAT) x = mk_int((int64_t)x.u.f);
            cpulm_jinja_to_buf(&b, x);
        } else
            rc = type_err(in, line, "format: unsupported conversion or too few arguments");
        if (!c) break;
    }
    if (!rc) *out = cpulm_jinja_str(in, b.data, b.len);
    cpulm_buf_release(&b);
    return rc || !cpulm_jinja_ok(in) ? -1 : 0;
}

static int f_wordcount(jinterp *in, jv v, jv *out) {
    jv s = cpulm_jinja_to_str(in, v), parts;
    if (s.t != JV_STR || do_split(in, 0, s, mk(JV_NONE), mk_int(-1), &parts)) return -1;
    *out = mk_int((int64_t)parts.u.l->n);
    return 0;
}

/* Filters that take no arguments and only look at the value. */
static int simple_filter(jinterp *in, int32_t line, const char *name, jv v, jv *out, int *handled) {
    *handled = 1;
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        *out = mk_int(length_of(v));
        return 0;
    }
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") ||
        !strcmp(name, "capitalize")) {
        jv s = cpulm_jinja_to_str(in, v);
        int mode = name[0] == 'u'   ? CASE_UPPER
                   : name[0] == 'l' ? CASE_LOWER
                   : name[0] == 't' ? CASE_TITLE
                                    : CASE_CAPITALIZE;
        return s.t == JV_STR ? do_case(in, s, mode, out) : -1;
    }
    if (!strcmp(name, "first") || !strcmp(name, "last"))
        return f_first_last(in, line, v, name[0] == 'l', out);
    if (!strcmp(name, "items")) return f_items(in, line, v, out);
    if (!strcmp(name, "string")) return (*out = cpulm_jinja_to_str(in, v)).t == JV_STR ? 0 : -1;
    if (!strcmp(name, "safe")) {
        *out = v;
        return 0;
    }
    if (!strcmp(name, "list")) {
        jlist *l;
        if (cpulm_jinja_iter(in, line, v, &l)) return -1;
        if (v.t == JV_LIST && !(l = copy_list(in, l))) return -1;
        l->is_tuple = 0;
        *out = mk_list(l);
        return 0;
    }
    if (!strcmp(name, "abs")) {
        if (v.t == JV_FLOAT)
            *out = v, out->u.f = fabs(v.u.f);
        else if (v.t == JV_INT || v.t == JV_BOOL)
            *out = mk_int(v.u.i < 0 ? -v.u.i : v.u.i);
        else
            return type_err(in, line, "abs: expected a number");
        return 0;
    }
    if (!strcmp(name, "reverse")) return f_reverse(in, line, v, out);
    if (!strcmp(name, "unique")) return f_unique(in, line, v, out);
    if (!strcmp(name, "escape") || !strcmp(name, "e")) return f_escape(in, v, out);
    if (!strcmp(name, "wordcount")) return f_wordcount(in, v, out);
    *handled = 0;
    return 0;
}

int cpulm_jinja_filter(jinterp *in, int32_t line, const char *name, jv v, const jv *pos, int n,
                       const char *const *kn, const jv *kv, int nk, jv *out) {
    int handled;
    jv none = mk(JV_NONE);
    *out = mk(JV_UNDEF);
    if (cpulm_jinja_step(in, line, 1)) return -1;
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        int boolean = cpulm_jinja_truthy(ARG(1, "boolean", mk_bool(0)));
        *out = (boolean ? !cpulm_jinja_truthy(v) : v.t == JV_UNDEF)
                   ? ARG(0, "default_value", cstr(in, ""))
                   : v;
        return 0;
    }
    if (simple_filter(in, line, name, v, out, &handled) || handled)
        return cpulm_jinja_ok(in) ? 0 : -1;
    if (!strcmp(name, "trim")) {
        jv s = cpulm_jinja_to_str(in, v);
        return s.t == JV_STR ? do_strip(in, s, ARG(0, "chars", none), 1, 1, out) : -1;
    }
    if (!strcmp(name, "tojson")) return f_tojson(in, line, v, pos, n, kn, kv, nk, out);
    if (!strcmp(name, "join"))
        return join_values(in, line, v, ARG(0, "d", cstr(in, "")), ARG(1, "attribute", none), out);
    if (!strcmp(name, "replace")) {
        jv s = cpulm_jinja_to_str(in, v);
        return s.t == JV_STR ? do_replace(in, line, s, ARG(0, "old", none), ARG(1, "new", none),
                                          ARG(2, "count", none), out)
                             : -1;
    }
    if (!strcmp(name, "int")) return f_number(in, v, 0, ARG(0, "default", mk_int(0)), out);
    if (!strcmp(name, "float")) {
        jv def = mk(JV_FLOAT);
        def.u.f = 0.0;
        return f_number(in, v, 1, ARG(0, "default", def), out);
    }
    if (!strcmp(name, "round")) return f_round(in, line, v, pos, n, kn, kv, nk, out);
    if (!strcmp(name, "sort")) {
        jlist *l;
        if (cpulm_jinja_iter(in, line, v, &l) || !(l = copy_list(in, l))) return -1;
        *out = mk_list(l);
        return sort_list(in, line, l, ARG(2, "attribute", none),
                         cpulm_jinja_truthy(ARG(0, "reverse", mk_bool(0))));
    }
    if (!strcmp(name, "dictsort")) return f_dictsort(in, line, v, pos, n, kn, kv, nk, out);
    if (!strcmp(name, "map")) return f_map(in, line, v, pos, n, kn, kv, nk, out);
    if (!strcmp(name, "select") || !strcmp(name, "reject"))
        return f_select(in, line, v, 0, name[0] == 's', pos, n, out);
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
        return f_select(in, line, v, 1, name[0] == 's', pos, n, out);
    if (!strcmp(name, "sum") || !strcmp(name, "min") || !strcmp(name, "max"))
        return f_minmax_sum(in, line, name, v, pos, n, kn, kv, nk, out);
    if (!strcmp(name, "indent")) return f_indent(in, line, v, pos, n, kn, kv, nk, out);
    if (!strcmp(name, "format")) return f_format(in, line, v, pos, n, out);
    if (!strcmp(name, "attr")) {
        jv a = ARG(0, "name", none);
        jv *x = v.t == JV_DICT && a.t == JV_STR ? cpulm_jinja_dict_get(v.u.d, a.u.s->s, a.u.s->len)
                                                : NULL;
        *out = x ? *x : mk(JV_UNDEF);
        return 0;
    }
    return cpulm_jinja_fail(in, line, CPULM_ERR_UNSUPPORTED, "unknown filter '%s'", name);
}

/* ---- tests ---- */

static int cmp_test(jinterp *in, int32_t line, const char *name, jv v, const jv *pos, int n,
                    int *res) {
    static const struct {
        const char *names[3];
        int want; /* bit 0: less, bit 1: equal, bit 2: greater */
    } ops[] = {{{"equalto", "eq", "=="}, 2},    {{"ne", "!=", NULL}, 5},
               {{"lt", "lessthan", "<"}, 1},    {{"le", "<=", NULL}, 3},
               {{"gt", "greaterthan", ">"}, 4}, {{"ge", ">=", NULL}, 6}};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        for (int k = 0; k < 3; k++) {
            if (!ops[i].names[k] || strcmp(ops[i].names[k], name)) continue;
            if (n < 1) return type_err(in, line, "comparison test needs an argument");
            int c;
            if (ops[i].want == 2 || ops[i].want == 5)
                c = cpulm_jinja_equal(v, pos[0]) ? 0 : 1;
            else if ((c = cpulm_jinja_compare(v, pos[0])) == 2)
                return type_err(in, line, "values cannot be compared");
            int bit = c < 0 ? 1 : c == 0 ? 2 : 4;
            if (ops[i].want == 5) bit = c == 0 ? 2 : 1;
            *res = (ops[i].want & bit) != 0;
            return 1;
        }
    return 0;
}

static int case_test(jv v, int upper) {
    if (v.t != JV_STR) return 0;
    int cased = 0;
    for (size_t i = 0; i < v.u.s->len; i++) {
        char c = v.u.s->s[i];
        if ((upper && c >= 'a' && c <= 'z') || (!upper && c >= 'A' && c <= 'Z')) return 0;
        cased |= (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    }
    return cased;
}

int cpulm_jinja_test(jinterp *in, int32_t line, const char *name, jv v, const jv *pos, int n,
                     int *res) {
    int t = v.t;
    int r;
    if (cmp_test(in, line, name, v, pos, n, res)) return cpulm_jinja_ok(in) ? 0 : -1;
    if (!cpulm_jinja_ok(in)) return -1;
    if (!strcmp(name, "defined"))
        r = t != JV_UNDEF;
    else if (!strcmp(name, "undefined"))
        r = t == JV_UNDEF;
    else if (!strcmp(name, "none"))
        r = t == JV_NONE;
    else if (!strcmp(name, "boolean"))
        r = t == JV_BOOL;
    else if (!strcmp(name, "true"))
        r = t == JV_BOOL && v.u.i;
    else if (!strcmp(name, "false"))
        r = t == JV_BOOL && !v.u.i;
    else if (!strcmp(name, "string"))
        r = t == JV_STR;
    else if (!strcmp(name, "number"))
        r = t == JV_INT || t == JV_FLOAT || t == JV_BOOL;
    else if (!strcmp(name, "integer"))
        r = t == JV_INT;
    else if (!strcmp(name, "float"))
        r = t == JV_FLOAT;
    else if (!strcmp(name, "mapping"))
        r = t == JV_DICT && v.u.d->kind == JD_DICT;
    else if (!strcmp(name, "iterable"))
        r = t == JV_STR || t == JV_LIST || (t == JV_DICT && v.u.d->kind == JD_DICT);
    else if (!strcmp(name, "sequence"))
        r = t == JV_STR || t == JV_LIST || (t == JV_DICT && v.u.d->kind == JD_DICT);
    else if (!strcmp(name, "callable"))
        r = t == JV_FUNC;
    else if (!strcmp(name, "sameas"))
        r = n > 0 && v.t == pos[0].t && cpulm_jinja_equal(v, pos[0]) &&
            (t == JV_NONE || t == JV_BOOL || t == JV_INT || !memcmp(&v.u, &pos[0].u, sizeof v.u));
    else if (!strcmp(name, "in")) {
        if (n < 1) return type_err(in, line, "'in' test needs an argument");
        jv hay = pos[0];
        r = 0;
        if (hay.t == JV_STR && t == JV_STR)
            r = find_bytes(hay.u.s->s, hay.u.s->len, v.u.s->s, v.u.s->len) != NULL;
        else if (hay.t == JV_LIST)
            for (size_t i = 0; i < hay.u.l->n && !r; i++)
                r = cpulm_jinja_equal(hay.u.l->v[i], v);
        else if (hay.t == JV_DICT)
            r = cpulm_jinja_dict_find(hay.u.d, v) != NULL;
    } else if (!strcmp(name, "divisibleby")) {
        if (n < 1 || pos[0].t != JV_INT || pos[0].u.i == 0 || t != JV_INT)
            return type_err(in, line, "divisibleby: expected integers");
        r = v.u.i % pos[0].u.i == 0;
    } else if (!strcmp(name, "even") || !strcmp(name, "odd")) {
        if (t != JV_INT) return type_err(in, line, "even/odd: expected an integer");
        r = (v.u.i % 2 == 0) == (name[0] == 'e');
    } else if (!strcmp(name, "lower") || !strcmp(name, "upper"))
        r = case_test(v, name[0] == 'u');
    else
        return cpulm_jinja_fail(in, line, CPULM_ERR_UNSUPPORTED, "unknown test '%s'", name);
    *res = r;
    return 0;
}
