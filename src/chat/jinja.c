/* jinja.c: evaluation of a parsed Jinja template: values, scopes, operators, statements.
 *
 * Values live in a per-render arena (freed when the render ends), so evaluation never
 * frees anything and errors can unwind by plain returns. Python semantics are followed
 * where templates can observe them: truthiness, str() of values, int/float arithmetic with
 * floor division, negative indices, slices over code points, and/or returning an operand.
 * Every expression and statement costs a step, so loops and recursion are bounded.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_int.h"

enum { CTL_NONE = 0, CTL_BREAK, CTL_CONTINUE };

typedef struct frame {
    jdict *vars;
    struct frame *parent;
} frame;

struct jinterp {
    jarena arena;
    cpulm_jinja_opts o;
    cpulm_buf *out; /* the top-level output, or a capture buffer */
    frame *root;    /* the render variables and top-level sets */
    frame *scope;
    int64_t steps;
    int32_t call_depth;
    int ctl;      /* pending break/continue */
    int32_t line; /* of the node being evaluated, for errors raised without one */
    cpulm_status st;
    cpulm_error *err;
};

static int eval(jinterp *in, const jnode *n, jv *out);
static int exec(jinterp *in, const jnode *n);

/* ---- errors and accounting ---- */

int cpulm_jinja_fail(jinterp *in, int32_t line, cpulm_status code, const char *fmt, ...) {
    if (in->st) return -1;
    if (line <= 0) line = in->line;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    in->st = cpulm_errf(in->err, code, "jinja: line %d: %s", line, msg);
    return -1;
}

int cpulm_jinja_ok(const jinterp *in) {
    return in->st == CPULM_OK;
}

jarena *cpulm_jinja_arena(jinterp *in) {
    return &in->arena;
}

const cpulm_jinja_opts *cpulm_jinja_opts_of(jinterp *in) {
    return &in->o;
}

int cpulm_jinja_step(jinterp *in, int32_t line, int64_t n) {
    if (n < 0) n = 0;
    in->steps =
        n > in->o.max_steps - in->steps ? in->o.max_steps + 1 : in->steps + n; /* no overflow */
    if (in->steps > in->o.max_steps)
        return cpulm_jinja_fail(in, line, CPULM_ERR_TOO_SMALL,
                                "evaluation step limit (%lld) reached", (long long)in->o.max_steps);
    return 0;
}

static void *alloc(jinterp *in, size_t n) {
    void *p = cpulm_jinja_alloc(&in->arena, n);
    if (!p) {
        if (in->o.max_memory && in->arena.used + n > in->o.max_memory)
            cpulm_jinja_fail(in, 0, CPULM_ERR_TOO_SMALL, "memory limit (%zu bytes) reached",
                             in->o.max_memory);
        else
            cpulm_jinja_fail(in, 0, CPULM_ERR_NOMEM, "out of memory");
    }
    return p;
}

/* ---- values ---- */

static jv mk(jtype t) {
    jv v;
    memset(&v, 0, sizeof v);
    v.t = t;
    return v;
}

jv cpulm_jinja_str(jinterp *in, const char *s, size_t n) {
    jstr *js = alloc(in, sizeof *js + n + 1);
    jv v = mk(js ? JV_STR : JV_UNDEF);
    if (!js) return v;
    js->len = n;
    if (n) memcpy(js->s, s, n);
    v.u.s = js;
    return v;
}

jlist *cpulm_jinja_list_new(jinterp *in, size_t cap) {
    jlist *l = alloc(in, sizeof *l);
    if (!l) return NULL;
    l->cap = cap < 4 ? 4 : cap;
    l->v = alloc(in, l->cap * sizeof *l->v);
    return l->v ? l : NULL;
}

int cpulm_jinja_list_push(jinterp *in, jlist *l, jv v) {
    if (l->n == l->cap) {
        jv *nv = alloc(in, l->cap * 2 * sizeof *nv);
        if (!nv) return -1;
        memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap *= 2;
    }
    l->v[l->n++] = v;
    return 0;
}

jdict *cpulm_jinja_dict_new(jinterp *in, int kind) {
    jdict *d = alloc(in, sizeof *d);
    if (!d) return NULL;
    d->kind = kind;
    return d;
}

jv *cpulm_jinja_dict_get(const jdict *d, const char *key, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].u.s->len == n && !memcmp(d->k[i].u.s->s, key, n))
            return &d->v[i];
    return NULL;
}

jv *cpulm_jinja_dict_find(const jdict *d, jv key) {
    for (size_t i = 0; i < d->n; i++)
        if (cpulm_jinja_equal(d->k[i], key)) return &d->v[i];
    return NULL;
}

int cpulm_jinja_dict_set(jinterp *in, jdict *d, jv k, jv v) {
    jv *slot = cpulm_jinja_dict_find(d, k);
    if (slot) {
        *slot = v;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        jv *nk = alloc(in, cap * sizeof *nk), *nv = alloc(in, cap * sizeof *nv);
        if (!nk || !nv) return -1;
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof *nk);
            memcpy(nv, d->v, d->n * sizeof *nv);
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
    return 0;
}

/* Sets d[name], allocating the key only when it is new (loops set the same names often). */
static int set_field(jinterp *in, jdict *d, const char *name, size_t n, jv v) {
    jv *slot = cpulm_jinja_dict_get(d, name, n);
    if (slot) {
        *slot = v;
        return 0;
    }
    jv k = cpulm_jinja_str(in, name, n);
    if (k.t == JV_UNDEF) return -1;
    return cpulm_jinja_dict_set(in, d, k, v);
}

static int set_var(jinterp *in, frame *f, const char *name, jv v) {
    return set_field(in, f->vars, name, strlen(name), v);
}

int cpulm_jinja_truthy(jv v) {
    switch (v.t) {
    case JV_UNDEF:
    case JV_NONE: return 0;
    case JV_BOOL:
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s->len > 0;
    case JV_LIST: return v.u.l->n > 0;
    case JV_DICT: return v.u.d->kind != JD_DICT || v.u.d->n > 0;
    case JV_FUNC: return 1;
    }
    return 0;
}

static int is_num(jv v) {
    return v.t == JV_INT || v.t == JV_BOOL || v.t == JV_FLOAT;
}

static double num(jv v) {
    return v.t == JV_FLOAT ? v.u.f : (double)v.u.i;
}

int cpulm_jinja_equal(jv a, jv b) {
    if (is_num(a) && is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return a.u.i == b.u.i;
        return num(a) == num(b);
    }
    if (a.t != b.t) return 0;
    switch (a.t) {
    case JV_UNDEF:
    case JV_NONE: return 1;
    case JV_STR: return a.u.s->len == b.u.s->len && !memcmp(a.u.s->s, b.u.s->s, a.u.s->len);
    case JV_LIST:
        if (a.u.l->n != b.u.l->n || a.u.l->is_tuple != b.u.l->is_tuple) return 0;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!cpulm_jinja_equal(a.u.l->v[i], b.u.l->v[i])) return 0;
        return 1;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv *o = cpulm_jinja_dict_find(b.u.d, a.u.d->k[i]);
            if (!o || !cpulm_jinja_equal(a.u.d->v[i], *o)) return 0;
        }
        return 1;
    case JV_FUNC: return a.u.fn == b.u.fn;
    default: return 0;
    }
}

int cpulm_jinja_compare(jv a, jv b) {
    if (is_num(a) && is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return (a.u.i > b.u.i) - (a.u.i < b.u.i);
        double x = num(a), y = num(b);
        return (x > y) - (x < y);
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int c = memcmp(a.u.s->s, b.u.s->s, n); /* UTF-8 byte order is code point order */
        if (c) return c < 0 ? -1 : 1;
        return (a.u.s->len > b.u.s->len) - (a.u.s->len < b.u.s->len);
    }
    if (a.t == JV_LIST && b.t == JV_LIST) {
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            if (cpulm_jinja_equal(a.u.l->v[i], b.u.l->v[i])) continue;
            return cpulm_jinja_compare(a.u.l->v[i], b.u.l->v[i]);
        }
        return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
    }
    return 2;
}

static const char *type_name(jv v) {
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.u.l->is_tuple ? "tuple" : "list";
    case JV_DICT:
        return v.u.d->kind == JD_NAMESPACE ? "Namespace"
               : v.u.d->kind == JD_LOOP    ? "LoopContext"
                                           : "dict";
    case JV_FUNC: return "function";
    }
    return "?";
}

/* ---- str() and repr() ---- */

static void repr_str(cpulm_buf *b, const jstr *s) {
    int has_sq = memchr(s->s, '\'', s->len) != NULL, has_dq = memchr(s->s, '"', s->len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    cpulm_buf_putc(b, q);
    for (size_t i = 0; i < s->len; i++) {
        unsigned char c = (unsigned char)s->s[i];
        if (c == '\\' || c == (unsigned char)q) {
            cpulm_buf_putc(b, '\\');
            cpulm_buf_putc(b, (char)c);
        } else if (c == '\n')
            cpulm_buf_puts(b, "\\n");
        else if (c == '\r')
            cpulm_buf_puts(b, "\\r");
        else if (c == '\t')
            cpulm_buf_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7f)
            cpulm_buf_printf(b, "\\x%02x", c);
        else
            cpulm_buf_putc(b, (char)c);
    }
    cpulm_buf_putc(b, q);
}

static void repr(cpulm_buf *b, jv v) {
    if (v.t == JV_STR)
        repr_str(b, v.u.s);
    else
        cpulm_jinja_to_buf(b, v);
}

static void list_to_buf(cpulm_buf *b, const jlist *l) {
    cpulm_buf_putc(b, l->is_tuple ? '(' : '[');
    for (size_t i = 0; i < l->n; i++) {
        if (i) cpulm_buf_puts(b, ", ");
        repr(b, l->v[i]);
    }
    if (l->is_tuple && l->n == 1) cpulm_buf_putc(b, ',');
    cpulm_buf_putc(b, l->is_tuple ? ')' : ']');
}

void cpulm_jinja_to_buf(cpulm_buf *b, jv v) {
    char tmp[32];
    switch (v.t) {
    case JV_UNDEF: return;
    case JV_NONE: cpulm_buf_puts(b, "None"); return;
    case JV_BOOL: cpulm_buf_puts(b, v.u.i ? "True" : "False"); return;
    case JV_INT: cpulm_buf_printf(b, "%lld", (long long)v.u.i); return;
    case JV_FLOAT:
        cpulm_buf_append(b, tmp, cpulm_json_fmt_double(v.u.f, CPULM_JSON_FMT_PY, tmp));
        return;
    case JV_STR: cpulm_buf_append(b, v.u.s->s, v.u.s->len); return;
    case JV_LIST: list_to_buf(b, v.u.l); return;
    case JV_DICT:
        if (v.u.d->kind == JD_NAMESPACE)
            cpulm_buf_puts(b, "<Namespace>");
        else if (v.u.d->kind == JD_LOOP)
            cpulm_buf_puts(b, "<LoopContext>");
        if (v.u.d->kind != JD_DICT) return;
        cpulm_buf_putc(b, '{');
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) cpulm_buf_puts(b, ", ");
            repr(b, v.u.d->k[i]);
            cpulm_buf_puts(b, ": ");
            repr(b, v.u.d->v[i]);
        }
        cpulm_buf_putc(b, '}');
        return;
    case JV_FUNC: cpulm_buf_puts(b, "<function>"); return;
    }
}

jv cpulm_jinja_to_str(jinterp *in, jv v) {
    if (v.t == JV_STR) return v;
    cpulm_buf b;
    cpulm_buf_init(&b, in->o.max_memory);
    cpulm_jinja_to_buf(&b, v);
    jv r = cpulm_buf_status(&b) ? mk(JV_UNDEF) : cpulm_jinja_str(in, b.data, b.len);
    if (cpulm_buf_status(&b)) cpulm_jinja_fail(in, 0, CPULM_ERR_TOO_SMALL, "string too large");
    cpulm_buf_release(&b);
    return r;
}

/* ---- JSON in and out ---- */

jv cpulm_jinja_from_json(jinterp *in, const cpulm_json *j) {
    jv v = mk(JV_NONE);
    switch (j->type) {
    case CPULM_JSON_NULL: return v;
    case CPULM_JSON_BOOL:
        v.t = JV_BOOL;
        v.u.i = j->u.boolean;
        return v;
    case CPULM_JSON_NUMBER:
        if (j->is_int)
            v.t = JV_INT, v.u.i = j->u.num.i;
        else
            v.t = JV_FLOAT, v.u.f = j->u.num.f;
        return v;
    case CPULM_JSON_STRING: return cpulm_jinja_str(in, j->u.str.s, j->u.str.len);
    case CPULM_JSON_ARRAY: {
        jlist *l = cpulm_jinja_list_new(in, j->u.list.n);
        if (!l) return mk(JV_UNDEF);
        for (size_t i = 0; i < j->u.list.n; i++)
            if (cpulm_jinja_list_push(in, l, cpulm_jinja_from_json(in, &j->u.list.items[i])))
                return mk(JV_UNDEF);
        v.t = JV_LIST;
        v.u.l = l;
        return v;
    }
    case CPULM_JSON_OBJECT: {
        jdict *d = cpulm_jinja_dict_new(in, JD_DICT);
        if (!d) return mk(JV_UNDEF);
        for (size_t i = 0; i < j->u.list.n; i++) {
            const cpulm_json *m = &j->u.list.items[i];
            if (cpulm_jinja_dict_set(in, d, cpulm_jinja_str(in, m->key, m->key_len),
                                     cpulm_jinja_from_json(in, m)))
                return mk(JV_UNDEF);
        }
        v.t = JV_DICT;
        v.u.d = d;
        return v;
    }
    }
    return v;
}

static int json_value(jinterp *in, int32_t line, cpulm_json_writer *w, jv v, int depth);

static int json_key(jinterp *in, int32_t line, cpulm_json_writer *w, jv k) {
    char tmp[32];
    switch (k.t) { /* json.dumps converts these key types to strings */
    case JV_STR: cpulm_json_keyn(w, k.u.s->s, k.u.s->len); return 0;
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)k.u.i); break;
    case JV_BOOL: snprintf(tmp, sizeof tmp, "%s", k.u.i ? "true" : "false"); break;
    case JV_NONE: snprintf(tmp, sizeof tmp, "null"); break;
    case JV_FLOAT: cpulm_json_fmt_double(k.u.f, CPULM_JSON_FMT_PY, tmp); break;
    default:
        return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG,
                                "keys must be str, int, float, bool or None, not %s", type_name(k));
    }
    cpulm_json_key(w, tmp);
    return 0;
}

static int json_value(jinterp *in, int32_t line, cpulm_json_writer *w, jv v, int depth) {
    char tmp[32];
    if (depth > 200)
        return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG, "tojson: nesting too deep");
    switch (v.t) {
    case JV_NONE: cpulm_json_write_null(w); return 0;
    case JV_BOOL: cpulm_json_write_bool(w, (int)v.u.i); return 0;
    case JV_INT: cpulm_json_write_int(w, v.u.i); return 0;
    case JV_FLOAT:
        if (isnan(v.u.f))
            snprintf(tmp, sizeof tmp, "NaN"); /* json.dumps' spelling */
        else if (isinf(v.u.f))
            snprintf(tmp, sizeof tmp, "%sInfinity", v.u.f < 0 ? "-" : "");
        else
            cpulm_json_fmt_double(v.u.f, CPULM_JSON_FMT_PY, tmp);
        cpulm_json_write_raw(w, tmp, strlen(tmp));
        return 0;
    case JV_STR: cpulm_json_write_strn(w, v.u.s->s, v.u.s->len); return 0;
    case JV_LIST:
        cpulm_json_arr_begin(w);
        for (size_t i = 0; i < v.u.l->n; i++)
            if (json_value(in, line, w, v.u.l->v[i], depth + 1)) return -1;
        cpulm_json_arr_end(w);
        return 0;
    case JV_DICT:
        if (v.u.d->kind != JD_DICT) break;
        cpulm_json_obj_begin(w);
        for (size_t i = 0; i < v.u.d->n; i++)
            if (json_key(in, line, w, v.u.d->k[i]) ||
                json_value(in, line, w, v.u.d->v[i], depth + 1))
                return -1;
        cpulm_json_obj_end(w);
        return 0;
    default: break;
    }
    return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG,
                            "Object of type %s is not JSON serializable", type_name(v));
}

int cpulm_jinja_tojson(jinterp *in, int32_t line, jv v, int indent, const char *item_sep,
                       const char *key_sep, cpulm_buf *b) {
    /* json.dumps' separators default to (', ', ': '), or (',', ': ') with an indent */
    if (!item_sep) item_sep = indent >= 0 ? "," : ", ";
    if (!key_sep) key_sep = ": ";
    int flags;
    if (indent >= 0 && !strcmp(item_sep, ",") && !strcmp(key_sep, ": "))
        flags = 0;
    else if (indent < 0 && !strcmp(item_sep, ", ") && !strcmp(key_sep, ": "))
        flags = CPULM_JSON_SPACED;
    else if (indent < 0 && !strcmp(item_sep, ",") && !strcmp(key_sep, ":"))
        flags = 0;
    else
        return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG, "tojson: unsupported separators");
    cpulm_json_writer w;
    /* indent=0 in Python still breaks lines; our writer needs indent > 0 for that */
    if (indent == 0)
        return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG,
                                "tojson: indent=0 is not supported");
    cpulm_json_writer_init(&w, b, flags, indent > 0 ? indent : 0);
    if (json_value(in, line, &w, v, 0)) return -1;
    if (cpulm_json_writer_status(&w))
        return cpulm_jinja_fail(in, line, CPULM_ERR_TOO_SMALL, "tojson: output too large");
    return 0;
}

/* ---- iteration, indexing ---- */

/* Splits a string into its characters (code points; invalid bytes one by one). */
static jlist *chars_of(jinterp *in, const jstr *s) {
    jlist *l = cpulm_jinja_list_new(in, s->len);
    for (size_t i = 0; l && i < s->len;) {
        uint32_t cp;
        int k = cpulm_json_utf8_next((const unsigned char *)s->s + i, s->len - i, &cp);
        size_t n = (size_t)(k < 0 ? -k : k);
        jv c = cpulm_jinja_str(in, s->s + i, n);
        if (c.t == JV_UNDEF || cpulm_jinja_list_push(in, l, c)) return NULL;
        i += n;
    }
    return l;
}

int cpulm_jinja_iter(jinterp *in, int32_t line, jv v, jlist **out) {
    switch (v.t) {
    case JV_LIST: *out = v.u.l; return 0;
    case JV_UNDEF: return (*out = cpulm_jinja_list_new(in, 0)) ? 0 : -1;
    case JV_DICT: {
        if (v.u.d->kind != JD_DICT) break;
        jlist *l = cpulm_jinja_list_new(in, v.u.d->n);
        for (size_t i = 0; l && i < v.u.d->n; i++)
            if (cpulm_jinja_list_push(in, l, v.u.d->k[i])) return -1;
        return (*out = l) ? 0 : -1;
    }
    case JV_STR: return (*out = chars_of(in, v.u.s)) ? 0 : -1;
    default: break;
    }
    return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG, "'%s' object is not iterable",
                            type_name(v));
}

static int undefined_error(jinterp *in, int32_t line, jv v) {
    if (v.u.undef_name)
        return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG, "'%s' is undefined",
                                v.u.undef_name);
    return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG, "value is undefined");
}

static jv undefined(const char *name) {
    jv v = mk(JV_UNDEF);
    v.u.undef_name = name;
    return v;
}

/* Item lookup as Jinja's getitem (obj[key], falling back to attributes for strings). */
static int get_item(jinterp *in, int32_t line, jv obj, jv key, jv *out) {
    *out = undefined(NULL);
    if (obj.t == JV_UNDEF) return undefined_error(in, line, obj);
    if (obj.t == JV_DICT) {
        jv *v = cpulm_jinja_dict_find(obj.u.d, key);
        if (v)
            *out = *v;
        else if (key.t == JV_STR)
            cpulm_jinja_method(in, obj, key.u.s->s, key.u.s->len, out);
        return cpulm_jinja_ok(in) ? 0 : -1;
    }
    if ((obj.t == JV_LIST || obj.t == JV_STR) && (key.t == JV_INT || key.t == JV_BOOL)) {
        jlist *l = obj.t == JV_LIST ? obj.u.l : chars_of(in, obj.u.s);
        if (!l) return -1;
        int64_t i = key.u.i < 0 ? key.u.i + (int64_t)l->n : key.u.i;
        if (i >= 0 && i < (int64_t)l->n) *out = l->v[i];
        return 0;
    }
    if (key.t == JV_STR) cpulm_jinja_method(in, obj, key.u.s->s, key.u.s->len, out);
    return cpulm_jinja_ok(in) ? 0 : -1;
}

/* Attribute lookup as Jinja's getattr: methods first, then items. */
static int get_attr(jinterp *in, int32_t line, jv obj, const char *name, size_t n, jv *out) {
    *out = undefined(NULL);
    if (obj.t == JV_UNDEF) return undefined_error(in, line, obj);
    if (obj.t == JV_DICT && obj.u.d->kind != JD_DICT) {
        jv *v = cpulm_jinja_dict_get(obj.u.d, name, n);
        if (v)
            *out = *v;
        else
            cpulm_jinja_method(in, obj, name, n, out);
        return cpulm_jinja_ok(in) ? 0 : -1;
    }
    if (cpulm_jinja_method(in, obj, name, n, out) == 0) return 0;
    if (!cpulm_jinja_ok(in)) return -1;
    if (obj.t == JV_DICT) {
        jv *v = cpulm_jinja_dict_get(obj.u.d, name, n);
        if (v) *out = *v;
    }
    return 0;
}

/* Python slice semantics over n elements: fills the picked indices. */
static int slice_indices(jinterp *in, int32_t line, const jv *parts, int64_t n, int64_t *start,
                         int64_t *stop, int64_t *step) {
    *step = parts[2].t == JV_INT ? parts[2].u.i : 1;
    if (*step == 0)
        return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG, "slice step cannot be zero");
    for (int k = 0; k < 3; k++)
        if (parts[k].t != JV_INT && parts[k].t != JV_NONE && parts[k].t != JV_UNDEF)
            return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG,
                                    "slice indices must be integers");
    int64_t lo = *step < 0 ? -1 : 0, hi = *step < 0 ? n - 1 : n;
    int64_t b[2] = {*step < 0 ? hi : lo, *step < 0 ? lo : hi};
    for (int k = 0; k < 2; k++) {
        if (parts[k].t != JV_INT) continue;
        int64_t v = parts[k].u.i;
        if (v < 0)
            v = v + n < lo ? lo : v + n;
        else if (v > hi)
            v = hi;
        b[k] = v;
    }
    *start = b[0];
    *stop = b[1];
    return 0;
}

static int do_slice(jinterp *in, int32_t line, jv obj, const jv *parts, jv *out) {
    if (obj.t != JV_LIST && obj.t != JV_STR)
        return obj.t == JV_UNDEF
                   ? undefined_error(in, line, obj)
                   : cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG,
                                      "'%s' object is not subscriptable", type_name(obj));
    jlist *src = obj.t == JV_LIST ? obj.u.l : chars_of(in, obj.u.s);
    int64_t start = 0, stop = 0, step = 1;
    if (!src || slice_indices(in, line, parts, (int64_t)src->n, &start, &stop, &step)) return -1;
    jlist *l = cpulm_jinja_list_new(in, 0);
    if (!l) return -1;
    l->is_tuple = obj.t == JV_LIST && obj.u.l->is_tuple;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
        if (cpulm_jinja_list_push(in, l, src->v[i])) return -1;
    if (cpulm_jinja_step(in, line, (int64_t)l->n)) return -1;
    if (obj.t == JV_LIST) {
        *out = mk(JV_LIST);
        out->u.l = l;
        return 0;
    }
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    for (size_t i = 0; i < l->n; i++)
        cpulm_buf_append(&b, l->v[i].u.s->s, l->v[i].u.s->len);
    *out = cpulm_buf_status(&b) ? mk(JV_UNDEF) : cpulm_jinja_str(in, b.data, b.len);
    cpulm_buf_release(&b);
    return out->t == JV_STR ? 0 : cpulm_jinja_fail(in, line, CPULM_ERR_NOMEM, "out of memory");
}

/* ---- operators ---- */

static int concat_str(jinterp *in, const jstr *a, const jstr *b, int64_t times, jv *out) {
    size_t n = a->len + (b ? b->len : 0);
    if (times < 0) times = 0;
    if (n && (uint64_t)times > (in->o.max_memory ? in->o.max_memory : SIZE_MAX) / n)
        return cpulm_jinja_fail(in, 0, CPULM_ERR_TOO_SMALL, "string too large");
    jstr *s = alloc(in, sizeof *s + n * (size_t)times + 1);
    if (!s) return -1;
    for (int64_t t = 0; t < times; t++) {
        memcpy(s->s + s->len, a->s, a->len);
        s->len += a->len;
        if (b) memcpy(s->s + s->len, b->s, b->len), s->len += b->len;
    }
    *out = mk(JV_STR);
    out->u.s = s;
    return 0;
}

static int concat_list(jinterp *in, const jlist *a, const jlist *b, int64_t times, jv *out) {
    jlist *l = cpulm_jinja_list_new(in, 0);
    if (!l) return -1;
    l->is_tuple = a->is_tuple;
    for (int64_t t = 0; t < times; t++) {
        for (size_t i = 0; i < a->n; i++)
            if (cpulm_jinja_list_push(in, l, a->v[i])) return -1;
        for (size_t i = 0; b && i < b->n; i++)
            if (cpulm_jinja_list_push(in, l, b->v[i])) return -1;
    }
    *out = mk(JV_LIST);
    out->u.l = l;
    return 0;
}

static int int_op(jinterp *in, int32_t line, int op, int64_t x, int64_t y, jv *out) {
    int64_t r = 0;
    int ovf = 0;
    switch (op) {
    case '+': ovf = __builtin_add_overflow(x, y, &r); break;
    case '-': ovf = __builtin_sub_overflow(x, y, &r); break;
    case '*': ovf = __builtin_mul_overflow(x, y, &r); break;
    case 'f':
    case '%':
        if (y == 0)
            return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG,
                                    "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) {
            ovf = 1;
            break;
        }
        r = op == 'f' ? x / y : x % y;
        if (op == 'f' && (x % y != 0) && ((x < 0) != (y < 0))) r--; /* floor, as Python */
        if (op == '%' && r != 0 && ((r < 0) != (y < 0))) r += y;
        break;
    case 'p': /* y >= 0 here; square-and-multiply with overflow checks */
        r = 1;
        for (int64_t base = x, e = y; e > 0 && !ovf; e >>= 1) {
            if (e & 1) ovf = __builtin_mul_overflow(r, base, &r);
            if (e > 1 && !ovf) ovf = __builtin_mul_overflow(base, base, &base);
        }
        break;
    }
    if (ovf) return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG, "integer overflow");
    *out = mk(JV_INT);
    out->u.i = r;
    return 0;
}

static int float_op(jinterp *in, int32_t line, int op, double x, double y, jv *out) {
    double r = 0;
    if ((op == '/' || op == 'f' || op == '%') && y == 0)
        return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG, "float division by zero");
    switch (op) {
    case '+': r = x + y; break;
    case '-': r = x - y; break;
    case '*': r = x * y; break;
    case '/': r = x / y; break;
    case 'f': r = floor(x / y); break;
    case '%':
        r = fmod(x, y);
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        break;
    case 'p': r = pow(x, y); break;
    }
    *out = mk(JV_FLOAT);
    out->u.f = r;
    return 0;
}

static int binop(jinterp *in, int32_t line, int op, jv a, jv b, jv *out) {
    if (op == '~') {
        jv x = cpulm_jinja_to_str(in, a), y = cpulm_jinja_to_str(in, b);
        return x.t == JV_STR && y.t == JV_STR ? concat_str(in, x.u.s, y.u.s, 1, out) : -1;
    }
    if (a.t == JV_UNDEF) return undefined_error(in, line, a);
    if (b.t == JV_UNDEF) return undefined_error(in, line, b);
    if (is_num(a) && is_num(b)) {
        if (op == '/' || op == 'p' ? (a.t == JV_FLOAT || b.t == JV_FLOAT || op == '/' || b.u.i < 0)
                                   : (a.t == JV_FLOAT || b.t == JV_FLOAT))
            return float_op(in, line, op, num(a), num(b), out);
        return int_op(in, line, op, a.u.i, b.u.i, out);
    }
    if (op == '+' && a.t == JV_STR && b.t == JV_STR) return concat_str(in, a.u.s, b.u.s, 1, out);
    if (op == '+' && a.t == JV_LIST && b.t == JV_LIST) return concat_list(in, a.u.l, b.u.l, 1, out);
    if (op == '*' && (a.t == JV_INT || b.t == JV_INT)) {
        jv seq = a.t == JV_INT ? b : a;
        int64_t times = a.t == JV_INT ? a.u.i : b.u.i;
        if (cpulm_jinja_step(in, line, times > 0 ? times : 0)) return -1;
        if (seq.t == JV_STR) return concat_str(in, seq.u.s, NULL, times, out);
        if (seq.t == JV_LIST) return concat_list(in, seq.u.l, NULL, times, out);
    }
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
    const char *ops = "+-*/f%p";
    return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG,
                            "unsupported operand type(s) for %s: '%s' and '%s'",
                            names[strchr(ops, op) - ops], type_name(a), type_name(b));
}

static int contains(jinterp *in, int32_t line, jv needle, jv hay, int *res) {
    *res = 0;
    if (hay.t == JV_STR) {
        if (needle.t != JV_STR)
            return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG,
                                    "'in <string>' requires string as left operand, not %s",
                                    type_name(needle));
        const jstr *h = hay.u.s, *n = needle.u.s;
        if (n->len == 0) *res = 1;
        for (size_t i = 0; !*res && n->len <= h->len && i <= h->len - n->len; i++)
            *res = !memcmp(h->s + i, n->s, n->len);
        return 0;
    }
    if (hay.t == JV_LIST) {
        for (size_t i = 0; i < hay.u.l->n && !*res; i++)
            *res = cpulm_jinja_equal(hay.u.l->v[i], needle);
        return 0;
    }
    if (hay.t == JV_DICT) {
        *res = cpulm_jinja_dict_find(hay.u.d, needle) != NULL;
        return 0;
    }
    if (hay.t == JV_UNDEF) return undefined_error(in, line, hay);
    return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG,
                            "argument of type '%s' is not iterable", type_name(hay));
}

static int compare_op(jinterp *in, int32_t line, const char *op, jv a, jv b, int *res) {
    if (!strcmp(op, "=="))
        *res = cpulm_jinja_equal(a, b);
    else if (!strcmp(op, "!="))
        *res = !cpulm_jinja_equal(a, b);
    else if (!strcmp(op, "in") || !strcmp(op, "notin")) {
        if (contains(in, line, a, b, res)) return -1;
        if (op[0] == 'n') *res = !*res;
    } else {
        int c = cpulm_jinja_compare(a, b);
        if (c == 2)
            return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG,
                                    "'%s' not supported between instances of '%s' and '%s'", op,
                                    type_name(a), type_name(b));
        *res = op[0] == '<' ? (op[1] ? c <= 0 : c < 0) : (op[1] ? c >= 0 : c > 0);
    }
    return 0;
}

/* ---- calls ---- */

typedef struct args {
    jv pos[16];
    int n;
    const char *kw_names[16];
    jv kw[16];
    int n_kw;
} args;

static int eval_args(jinterp *in, const jnode *n, args *a) {
    if (n->n > 16 || n->n2 > 16)
        return cpulm_jinja_fail(in, n->line, CPULM_ERR_INVALID_ARG, "too many arguments");
    a->n = n->n;
    a->n_kw = n->n2;
    for (int i = 0; i < n->n; i++)
        if (eval(in, n->list[i], &a->pos[i])) return -1;
    for (int i = 0; i < n->n2; i++) {
        a->kw_names[i] = n->names[i];
        if (eval(in, n->list2[i], &a->kw[i])) return -1;
    }
    return 0;
}

static int capture(jinterp *in, const jnode *body, jv *out) {
    cpulm_buf b;
    cpulm_buf_init(&b, in->o.max_output);
    cpulm_buf *saved = in->out;
    in->out = &b;
    int rc = exec(in, body);
    in->out = saved;
    if (!rc && cpulm_buf_status(&b))
        rc = cpulm_jinja_fail(in, body->line, CPULM_ERR_TOO_SMALL, "output limit reached");
    if (!rc) {
        *out = cpulm_jinja_str(in, b.data, b.len);
        if (out->t != JV_STR) rc = -1;
    }
    cpulm_buf_release(&b);
    return rc;
}

static int call_macro(jinterp *in, int32_t line, const jnode *m, const jv *pos, int n_pos,
                      const char *const *kw_names, const jv *kw, int n_kw, jv *out) {
    if (n_pos > m->n_names)
        return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG, "macro '%s' takes %d arguments",
                                m->name, m->n_names);
    if (in->call_depth >= in->o.max_call_depth)
        return cpulm_jinja_fail(in, line, CPULM_ERR_TOO_SMALL, "macro recursion deeper than %d",
                                in->o.max_call_depth);
    frame *f = alloc(in, sizeof *f);
    if (!f || !(f->vars = cpulm_jinja_dict_new(in, JD_DICT))) return -1;
    f->parent = in->root;
    for (int i = 0; i < m->n_names; i++) {
        jv v = undefined(m->names[i]);
        if (i < n_pos)
            v = pos[i];
        else if (m->list[i] && eval(in, m->list[i], &v))
            return -1;
        for (int k = 0; k < n_kw; k++)
            if (!strcmp(kw_names[k], m->names[i])) v = kw[k];
        if (set_var(in, f, m->names[i], v)) return -1;
    }
    frame *saved = in->scope;
    int saved_ctl = in->ctl;
    in->scope = f;
    in->call_depth++;
    int rc = capture(in, m->c, out);
    in->call_depth--;
    in->scope = saved;
    in->ctl = saved_ctl;
    return rc;
}

int cpulm_jinja_call(jinterp *in, int32_t line, jv fn, const jv *pos, int n_pos,
                     const char *const *kw_names, const jv *kw, int n_kw, jv *out) {
    *out = undefined(NULL);
    if (fn.t == JV_UNDEF) return undefined_error(in, line, fn);
    if (fn.t != JV_FUNC)
        return cpulm_jinja_fail(in, line, CPULM_ERR_INVALID_ARG, "'%s' object is not callable",
                                type_name(fn));
    if (cpulm_jinja_step(in, line, 1)) return -1;
    if (fn.u.fn->kind == JF_MACRO)
        return call_macro(in, line, fn.u.fn->node, pos, n_pos, kw_names, kw, n_kw, out);
    return cpulm_jinja_call_builtin(in, line, fn.u.fn, pos, n_pos, kw_names, kw, n_kw, out);
}

/* ---- expressions ---- */

static int lookup(jinterp *in, const jnode *n, jv *out) {
    for (frame *f = in->scope; f; f = f->parent) {
        jv *v = cpulm_jinja_dict_get(f->vars, n->name, n->name_len);
        if (v) {
            *out = *v;
            return 0;
        }
    }
    if (cpulm_jinja_global(n->name, n->name_len, out) == 0) return 0;
    *out = undefined(n->name);
    return 0;
}

static int apply_filter(jinterp *in, const jnode *n, jv subject, jv *out) {
    args a;
    if (eval_args(in, n, &a)) return -1;
    return cpulm_jinja_filter(in, n->line, n->name, subject, a.pos, a.n, a.kw_names, a.kw, a.n_kw,
                              out);
}

/* A filter chain whose innermost subject is NULL (filter blocks): applies it to v. */
static int apply_chain(jinterp *in, const jnode *f, jv v, jv *out) {
    if (!f) {
        *out = v;
        return 0;
    }
    jv inner;
    if (apply_chain(in, f->a, v, &inner)) return -1;
    return apply_filter(in, f, inner, out);
}

static int eval_test(jinterp *in, const jnode *n, jv *out) {
    jv v;
    args a;
    int res;
    if (eval(in, n->a, &v) || eval_args(in, n, &a)) return -1;
    if (cpulm_jinja_test(in, n->line, n->name, v, a.pos, a.n, &res)) return -1;
    *out = mk(JV_BOOL);
    out->u.i = n->op ? !res : res;
    return 0;
}

static int eval_call(jinterp *in, const jnode *n, jv *out) {
    jv fn;
    args a;
    if (eval(in, n->a, &fn) || eval_args(in, n, &a)) return -1;
    return cpulm_jinja_call(in, n->line, fn, a.pos, a.n, a.kw_names, a.kw, a.n_kw, out);
}

static int eval_compare(jinterp *in, const jnode *n, jv *out) {
    jv left, right;
    int res = 1;
    if (eval(in, n->a, &left)) return -1;
    for (int i = 0; i < n->n && res; i++) {
        if (eval(in, n->list[i], &right) || compare_op(in, n->line, n->names[i], left, right, &res))
            return -1;
        left = right;
    }
    *out = mk(JV_BOOL);
    out->u.i = res;
    return 0;
}

static int eval_collection(jinterp *in, const jnode *n, jv *out) {
    if (n->kind == N_DICT) {
        jdict *d = cpulm_jinja_dict_new(in, JD_DICT);
        if (!d) return -1;
        for (int i = 0; i < n->n; i++) {
            jv k, v;
            if (eval(in, n->list[i], &k) || eval(in, n->list2[i], &v) ||
                cpulm_jinja_dict_set(in, d, k, v))
                return -1;
        }
        *out = mk(JV_DICT);
        out->u.d = d;
        return 0;
    }
    jlist *l = cpulm_jinja_list_new(in, (size_t)n->n);
    if (!l) return -1;
    l->is_tuple = n->kind == N_TUPLE;
    for (int i = 0; i < n->n; i++) {
        jv v;
        if (eval(in, n->list[i], &v) || cpulm_jinja_list_push(in, l, v)) return -1;
    }
    *out = mk(JV_LIST);
    out->u.l = l;
    return 0;
}

static int eval_unary(jinterp *in, const jnode *n, jv *out) {
    jv v;
    if (eval(in, n->a, &v)) return -1;
    if (n->kind == N_NOT) {
        *out = mk(JV_BOOL);
        out->u.i = !cpulm_jinja_truthy(v);
        return 0;
    }
    if (!is_num(v))
        return v.t == JV_UNDEF
                   ? undefined_error(in, n->line, v)
                   : cpulm_jinja_fail(in, n->line, CPULM_ERR_INVALID_ARG,
                                      "bad operand type for unary -: '%s'", type_name(v));
    if (n->kind == N_POS)
        *out = v.t == JV_BOOL ? (jv){.t = JV_INT, .u.i = v.u.i} : v;
    else if (v.t == JV_FLOAT)
        *out = (jv){.t = JV_FLOAT, .u.f = -v.u.f};
    else
        return int_op(in, n->line, '-', 0, v.u.i, out);
    return 0;
}

static int eval(jinterp *in, const jnode *n, jv *out) {
    in->line = n->line;
    if (cpulm_jinja_step(in, n->line, 1)) return -1;
    jv a, b;
    switch (n->kind) {
    case N_LIT: *out = n->lit; return 0;
    case N_NAME: return lookup(in, n, out);
    case N_ATTR:
        return eval(in, n->a, &a) ? -1 : get_attr(in, n->line, a, n->name, n->name_len, out);
    case N_ITEM:
        return eval(in, n->a, &a) || eval(in, n->b, &b) ? -1 : get_item(in, n->line, a, b, out);
    case N_SLICE: {
        jv parts[3] = {mk(JV_NONE), mk(JV_NONE), mk(JV_NONE)};
        if (eval(in, n->a, &a)) return -1;
        for (int k = 0; k < 3; k++)
            if (n->list[k] && eval(in, n->list[k], &parts[k])) return -1;
        return do_slice(in, n->line, a, parts, out);
    }
    case N_CALL: return eval_call(in, n, out);
    case N_FILTER: return eval(in, n->a, &a) ? -1 : apply_filter(in, n, a, out);
    case N_TEST: return eval_test(in, n, out);
    case N_NEG:
    case N_POS:
    case N_NOT: return eval_unary(in, n, out);
    case N_BIN:
        return eval(in, n->a, &a) || eval(in, n->b, &b) ? -1 : binop(in, n->line, n->op, a, b, out);
    case N_AND:
    case N_OR:
        if (eval(in, n->a, &a)) return -1;
        if (cpulm_jinja_truthy(a) == (n->kind == N_OR)) {
            *out = a;
            return 0;
        }
        return eval(in, n->b, out);
    case N_COMPARE: return eval_compare(in, n, out);
    case N_COND:
        if (eval(in, n->b, &a)) return -1;
        if (cpulm_jinja_truthy(a)) return eval(in, n->a, out);
        if (n->c) return eval(in, n->c, out);
        *out = undefined(NULL);
        return 0;
    case N_LIST:
    case N_TUPLE:
    case N_DICT: return eval_collection(in, n, out);
    default: break;
    }
    return cpulm_jinja_fail(in, n->line, CPULM_ERR_INVALID_ARG, "statement used as an expression");
}

/* ---- statements ---- */

static int emit(jinterp *in, int32_t line, jv v) {
    cpulm_jinja_to_buf(in->out, v);
    if (cpulm_buf_status(in->out) == CPULM_ERR_NOMEM)
        return cpulm_jinja_fail(in, line, CPULM_ERR_NOMEM, "out of memory");
    if (cpulm_buf_status(in->out))
        return cpulm_jinja_fail(in, line, CPULM_ERR_TOO_SMALL, "output limit (%zu bytes) reached",
                                in->o.max_output);
    return 0;
}

static int assign(jinterp *in, const jnode *n, jv v) {
    if (n->n_names == 1) return set_var(in, in->scope, n->names[0], v);
    jlist *l;
    if (cpulm_jinja_iter(in, n->line, v, &l)) return -1;
    if ((int32_t)l->n != n->n_names)
        return cpulm_jinja_fail(in, n->line, CPULM_ERR_INVALID_ARG,
                                "cannot unpack %zu values into %d names", l->n, n->n_names);
    for (int i = 0; i < n->n_names; i++)
        if (set_var(in, in->scope, n->names[i], l->v[i])) return -1;
    return 0;
}

static int exec_set(jinterp *in, const jnode *n) {
    jv v, obj;
    if (n->kind == N_SET_BLOCK) {
        jv body;
        return capture(in, n->c, &body) || apply_chain(in, n->b, body, &v) ? -1 : assign(in, n, v);
    }
    if (eval(in, n->b, &v)) return -1;
    if (!n->a) return assign(in, n, v);
    if (lookup(in, n->a, &obj)) return -1;
    if (obj.t != JV_DICT || obj.u.d->kind != JD_NAMESPACE)
        return cpulm_jinja_fail(in, n->line, CPULM_ERR_INVALID_ARG,
                                "cannot assign attribute on non-namespace object");
    return set_field(in, obj.u.d, n->name, n->name_len, v);
}

static int set_loop_fields(jinterp *in, jdict *loop, const jlist *items, size_t i) {
    static const char *const keys[] = {"index", "index0", "revindex", "revindex0",
                                       "first", "last",   "length"};
    int64_t n = (int64_t)items->n, idx = (int64_t)i;
    int64_t vals[] = {idx + 1, idx, n - idx, n - idx - 1, idx == 0, idx == n - 1, n};
    for (int k = 0; k < 7; k++) {
        jv v = mk(k == 4 || k == 5 ? JV_BOOL : JV_INT);
        v.u.i = vals[k];
        if (set_field(in, loop, keys[k], strlen(keys[k]), v)) return -1;
    }
    jv prev = i > 0 ? items->v[i - 1] : undefined(NULL),
       next = i + 1 < items->n ? items->v[i + 1] : undefined(NULL);
    return set_field(in, loop, "previtem", 8, prev) || set_field(in, loop, "nextitem", 8, next) ? -1
                                                                                                : 0;
}

/* The items a for loop visits: its iterable, minus those its inline "if" rejects (Jinja
 * filters before counting, so loop.length and loop.last see the filtered sequence). */
static int loop_items(jinterp *in, const jnode *n, frame *f, jlist **out) {
    jv seq;
    jlist *all;
    if (eval(in, n->a, &seq) || cpulm_jinja_iter(in, n->line, seq, &all)) return -1;
    if (!n->b) {
        *out = all;
        return 0;
    }
    jlist *kept = cpulm_jinja_list_new(in, all->n);
    if (!kept) return -1;
    frame *saved = in->scope;
    in->scope = f;
    for (size_t i = 0; i < all->n; i++) {
        jv ok;
        if (assign(in, n, all->v[i]) || eval(in, n->b, &ok)) return in->scope = saved, -1;
        if (cpulm_jinja_truthy(ok) && cpulm_jinja_list_push(in, kept, all->v[i]))
            return in->scope = saved, -1;
    }
    in->scope = saved;
    *out = kept;
    return 0;
}

static int exec_for(jinterp *in, const jnode *n) {
    frame *f = alloc(in, sizeof *f);
    jdict *loop = cpulm_jinja_dict_new(in, JD_LOOP);
    if (!f || !loop || !(f->vars = cpulm_jinja_dict_new(in, JD_DICT))) return -1;
    f->parent = in->scope;
    jlist *items;
    if (loop_items(in, n, f, &items)) return -1;
    if (items->n == 0) return n->d ? exec(in, n->d) : 0;
    jv loop_v = mk(JV_DICT);
    loop_v.u.d = loop;
    frame *saved = in->scope;
    in->scope = f;
    int rc = set_var(in, f, "loop", loop_v);
    for (size_t i = 0; !rc && i < items->n; i++) {
        rc = cpulm_jinja_step(in, n->line, 1) || set_loop_fields(in, loop, items, i) ||
             assign(in, n, items->v[i]) || exec(in, n->c);
        if (in->ctl == CTL_BREAK) {
            in->ctl = CTL_NONE;
            break;
        }
        in->ctl = CTL_NONE;
    }
    in->scope = saved;
    return rc ? -1 : 0;
}

static int exec_if(jinterp *in, const jnode *n) {
    for (int i = 0; i < n->n; i++) {
        jv c;
        if (eval(in, n->list[i], &c)) return -1;
        if (cpulm_jinja_truthy(c)) return exec(in, n->list2[i]);
    }
    return n->c ? exec(in, n->c) : 0;
}

static int exec_macro_def(jinterp *in, const jnode *n) {
    jfunc *fn = alloc(in, sizeof *fn);
    if (!fn) return -1;
    fn->kind = JF_MACRO;
    fn->node = n;
    jv v = mk(JV_FUNC);
    v.u.fn = fn;
    return set_var(in, in->scope, n->name, v);
}

static int exec(jinterp *in, const jnode *n) {
    in->line = n->line;
    if (cpulm_jinja_step(in, n->line, 1)) return -1;
    jv v;
    switch (n->kind) {
    case N_BODY:
        for (int i = 0; i < n->n && !in->ctl; i++)
            if (exec(in, n->list[i])) return -1;
        return 0;
    case N_TEXT:
        cpulm_buf_append(in->out, n->name, n->name_len);
        return cpulm_buf_status(in->out) ? emit(in, n->line, mk(JV_UNDEF)) : 0;
    case N_OUT: return eval(in, n->a, &v) ? -1 : emit(in, n->line, v);
    case N_IF: return exec_if(in, n);
    case N_FOR: return exec_for(in, n);
    case N_SET:
    case N_SET_BLOCK: return exec_set(in, n);
    case N_MACRO: return exec_macro_def(in, n);
    case N_BREAK: in->ctl = CTL_BREAK; return 0;
    case N_CONTINUE: in->ctl = CTL_CONTINUE; return 0;
    case N_FILTER_BLOCK: {
        jv body;
        return capture(in, n->c, &body) || apply_chain(in, n->a, body, &v) ? -1
                                                                           : emit(in, n->line, v);
    }
    default: return eval(in, n, &v) ? -1 : emit(in, n->line, v);
    }
}

/* ---- entry point ---- */

cpulm_jinja_opts cpulm_jinja_default_opts(void) {
    cpulm_jinja_opts o = {
        .max_output = (size_t)4 << 20,
        .max_memory = (size_t)64 << 20,
        .max_steps = 10 * 1000 * 1000,
        .max_call_depth = 64,
        .now = -1,
        .now_utc = 0,
    };
    return o;
}

static int bind_vars(jinterp *in, const cpulm_json *vars) {
    if (!vars) return 0;
    if (vars->type != CPULM_JSON_OBJECT)
        return cpulm_jinja_fail(in, 0, CPULM_ERR_INVALID_ARG, "variables must be a JSON object");
    for (size_t i = 0; i < vars->u.list.n; i++) {
        const cpulm_json *m = &vars->u.list.items[i];
        jv v = cpulm_jinja_from_json(in, m), k = cpulm_jinja_str(in, m->key, m->key_len);
        if (!cpulm_jinja_ok(in) || cpulm_jinja_dict_set(in, in->root->vars, k, v)) return -1;
    }
    return 0;
}

cpulm_status cpulm_jinja_render(const cpulm_jinja *t, const cpulm_json *vars,
                                const cpulm_jinja_opts *opts, cpulm_buf *out, cpulm_error *err) {
    jinterp in;
    memset(&in, 0, sizeof in);
    in.o = opts ? *opts : cpulm_jinja_default_opts();
    if (in.o.max_call_depth > 256) in.o.max_call_depth = 256; /* each level is real C stack */
    if (in.o.max_steps <= 0 || in.o.max_steps > INT64_MAX / 2) in.o.max_steps = INT64_MAX / 2;
    in.arena.limit = in.o.max_memory;
    in.err = err;
    size_t saved_max = out->max_len;
    if (in.o.max_output && (!out->max_len || out->len + in.o.max_output < out->max_len))
        out->max_len = out->len + in.o.max_output;
    in.out = out;
    frame *root = alloc(&in, sizeof *root);
    if (root && (root->vars = cpulm_jinja_dict_new(&in, JD_DICT))) {
        in.root = in.scope = root;
        if (bind_vars(&in, vars) == 0) exec(&in, t->root);
    }
    out->max_len = saved_max;
    if (out->status == CPULM_ERR_TOO_SMALL && !saved_max)
        out->status = CPULM_OK; /* our limit, not the caller's */
    cpulm_jinja_arena_free(&in.arena);
    return in.st;
}
