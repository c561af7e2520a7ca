/* schema_merge.c: one schema for the values valid under several (see schema_int.h).
 *
 * Keyword by keyword: types intersect ("integer" within "number"), enum/const values are
 * those every list has, lower bounds take the largest and upper bounds the smallest, items
 * and each property's value become an allOf of what every part says about them (a part's
 * properties entry, else its additionalProperties), required lists join, and
 * additionalProperties is false if any part's is. What cannot be written as one keyword
 * (two different patterns) is refused: the caller then refuses the schema.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "grammar/schema_int.h"

#define MAX_KEYS 512 /* distinct property names over the parts */

static const char *const SKIPPABLE[6] = {"enum", "const", "anyOf", "oneOf", "allOf", "$ref"};

const cpulm_json *cpulm_grammar_schema_kw(const cpulm_json *s, unsigned skip, const char *key) {
    for (int i = 0; i < 6; i++)
        if (!strcmp(key, SKIPPABLE[i]) && (skip & (1u << i))) return NULL;
    return cpulm_json_get(s, key);
}

int cpulm_grammar_schema_annotation(const char *key) {
    static const char *const A[] = {"title",    "description", "default",  "examples",
                                    "$schema",  "$id",         "$comment", "deprecated",
                                    "readOnly", "writeOnly",   "$defs",    "definitions"};
    for (size_t i = 0; i < sizeof A / sizeof *A; i++)
        if (!strcmp(key, A[i])) return 1;
    return 0;
}

int cpulm_grammar_json_eq(const cpulm_json *a, const cpulm_json *b) {
    if (a->type != b->type) return 0;
    switch (a->type) {
    case CPULM_JSON_NULL: return 1;
    case CPULM_JSON_BOOL: return a->u.boolean == b->u.boolean;
    case CPULM_JSON_NUMBER: return a->u.num.f == b->u.num.f;
    case CPULM_JSON_STRING:
        return a->u.str.len == b->u.str.len && !memcmp(a->u.str.s, b->u.str.s, a->u.str.len);
    case CPULM_JSON_ARRAY:
    case CPULM_JSON_OBJECT:
        if (a->u.list.n != b->u.list.n) return 0;
        for (size_t i = 0; i < a->u.list.n; i++) {
            const cpulm_json *o = a->type == CPULM_JSON_ARRAY
                                      ? &b->u.list.items[i]
                                      : cpulm_json_get(b, a->u.list.items[i].key);
            if (!o || !cpulm_grammar_json_eq(&a->u.list.items[i], o)) return 0;
        }
        return 1;
    }
    return 0;
}

typedef struct mg {
    const cpulm_grammar_part *p;
    int n;
    cpulm_json_writer w;
    char *msg;
    size_t cap;
} mg;

static int fail(mg *m, const char *fmt, ...) CPULM_PRINTF(2, 3);
static int fail(mg *m, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->msg, m->cap, fmt, ap);
    va_end(ap);
    return -1;
}

static const cpulm_json *get(const mg *m, int i, const char *key) {
    return cpulm_grammar_schema_kw(m->p[i].s, m->p[i].skip, key);
}

/* ---- type ---- */

static const char *const TYPES[7] = {"null",   "boolean", "integer", "number",
                                     "string", "array",   "object"};

static unsigned type_bits(const cpulm_json *t) { /* bit i: TYPES[i]; number implies integer */
    unsigned u = 0;
    for (size_t k = 0; k < (t->type == CPULM_JSON_ARRAY ? t->u.list.n : 1); k++) {
        const char *s = cpulm_json_str(t->type == CPULM_JSON_ARRAY ? &t->u.list.items[k] : t);
        for (int i = 0; s && i < 7; i++)
            if (!strcmp(s, TYPES[i])) u |= (1u << i) | (i == 3 ? 1u << 2 : 0);
    }
    return u;
}

static int merge_type(mg *m) {
    unsigned u = 0x7F;
    int typed = 0;
    for (int i = 0; i < m->n; i++) {
        const cpulm_json *t = get(m, i, "type");
        if (!t) continue;
        if (t->type != CPULM_JSON_STRING && t->type != CPULM_JSON_ARRAY)
            return fail(m, "'type' must be a string or an array");
        u &= type_bits(t);
        typed = 1;
    }
    if (!typed) return 0;
    if (!u) return -1 + fail(m, "'type': no type is allowed by every schema that must hold");
    cpulm_json_kv_arr_begin(&m->w, "type");
    for (int i = 0; i < 7; i++)
        if ((u & (1u << i)) && !(i == 2 && (u & (1u << 3)))) cpulm_json_write_str(&m->w, TYPES[i]);
    cpulm_json_arr_end(&m->w);
    return 0;
}

/* ---- enum / const ---- */

static int in_literals(const cpulm_json *lits, int is_const, const cpulm_json *v) {
    if (is_const) return cpulm_grammar_json_eq(lits, v);
    for (size_t i = 0; i < cpulm_json_len(lits); i++)
        if (cpulm_grammar_json_eq(&lits->u.list.items[i], v)) return 1;
    return 0;
}

/* The values of the first enum/const that every other enum/const also has. */
static int merge_literals(mg *m) {
    int first = -1, first_const = 0;
    for (int i = 0; i < m->n && first < 0; i++)
        if (get(m, i, "const") || get(m, i, "enum")) first = i, first_const = !!get(m, i, "const");
    if (first < 0) return 0;
    const cpulm_json *base = first_const ? get(m, first, "const") : get(m, first, "enum");
    if (!first_const && (base->type != CPULM_JSON_ARRAY || base->u.list.n == 0))
        return fail(m, "'enum' must be a non-empty array");
    size_t nv = first_const ? 1 : base->u.list.n, kept = 0;
    for (int pass = 0; pass < 2; pass++) { /* count, then write (if any) */
        if (pass == 1 && !kept)
            return -1 + fail(m, "'%s': no value is allowed by every schema that must hold",
                             first_const ? "const" : "enum");
        if (pass == 1) {
            cpulm_json_key(&m->w, first_const ? "const" : "enum"); /* the name the schema used */
            if (!first_const) cpulm_json_arr_begin(&m->w);
        }
        for (size_t k = 0; k < nv; k++) {
            const cpulm_json *v = first_const ? base : &base->u.list.items[k];
            int ok = 1;
            for (int i = 0; i < m->n && ok; i++) {
                const cpulm_json *c = get(m, i, "const"), *e = get(m, i, "enum");
                if (c && !in_literals(c, 1, v)) ok = 0;
                if (e && !in_literals(e, 0, v)) ok = 0;
            }
            if (ok && pass == 0) kept++;
            if (ok && pass == 1) cpulm_json_write_value(&m->w, v);
        }
    }
    if (!first_const) cpulm_json_arr_end(&m->w);
    return 0;
}

/* ---- bounds, lengths, single-valued keywords ---- */

/* The tightest value of key (the largest if lower, else the smallest), as written. */
static int merge_extreme(mg *m, const char *key, int lower) {
    const cpulm_json *best = NULL;
    for (int i = 0; i < m->n; i++) {
        const cpulm_json *v = get(m, i, key);
        if (!v) continue;
        if (v->type != CPULM_JSON_NUMBER) return fail(m, "'%s' must be a number", key);
        if (!best || (lower ? v->u.num.f > best->u.num.f : v->u.num.f < best->u.num.f)) best = v;
    }
    if (best) {
        cpulm_json_key(&m->w, key);
        cpulm_json_write_value(&m->w, best);
    }
    return 0;
}

/* A keyword that cannot be intersected: every part that has it must agree. */
static int merge_same(mg *m, const char *key) {
    const cpulm_json *one = NULL;
    for (int i = 0; i < m->n; i++) {
        const cpulm_json *v = get(m, i, key);
        if (!v) continue;
        if (one && !cpulm_grammar_json_eq(one, v))
            return fail(m, "two different '%s' that must both hold are not supported", key);
        one = v;
    }
    if (one) {
        cpulm_json_key(&m->w, key);
        cpulm_json_write_value(&m->w, one);
    }
    return 0;
}

/* Writes the conjunction of the schemas in list[0..n): {} , the one, or an allOf. */
static void write_all(mg *m, const cpulm_json *const *list, int n) {
    if (n == 1) {
        cpulm_json_write_value(&m->w, list[0]);
        return;
    }
    cpulm_json_obj_begin(&m->w);
    if (n > 1) {
        cpulm_json_kv_arr_begin(&m->w, "allOf");
        for (int i = 0; i < n; i++)
            cpulm_json_write_value(&m->w, list[i]);
        cpulm_json_arr_end(&m->w);
    }
    cpulm_json_obj_end(&m->w);
}

static int merge_items(mg *m) {
    const cpulm_json *list[64];
    int n = 0, any = 0, none = 0;
    for (int i = 0; i < m->n; i++) {
        const cpulm_json *v = get(m, i, "items");
        if (!v) continue;
        any = 1;
        if (v->type == CPULM_JSON_BOOL) {
            none |= !v->u.boolean;
            continue;
        }
        if (n == 64) return fail(m, "'items': more than 64 schemas that must all hold");
        list[n++] = v;
    }
    if (!any) return 0;
    cpulm_json_key(&m->w, "items");
    if (none)
        cpulm_json_write_bool(&m->w, 0);
    else
        write_all(m, list, n);
    return 0;
}

/* prefixItems: position i is an allOf of what every part says of it (its prefixItems[i], or
 * its items past its own prefix); a part with items false ends the tuple at its prefix. */
static int merge_prefix(mg *m) {
    size_t len = 0, cap = (size_t)-1;
    int any = 0;
    for (int i = 0; i < m->n; i++) {
        const cpulm_json *pre = get(m, i, "prefixItems"), *it = get(m, i, "items");
        if (pre && pre->type != CPULM_JSON_ARRAY) return fail(m, "'prefixItems' must be an array");
        any |= pre != NULL;
        if (cpulm_json_len(pre) > len) len = cpulm_json_len(pre);
        if (it && it->type == CPULM_JSON_BOOL && !it->u.boolean && cpulm_json_len(pre) < cap)
            cap = cpulm_json_len(pre);
    }
    if (!any) return 0;
    if (len > cap) len = cap;
    cpulm_json_kv_arr_begin(&m->w, "prefixItems");
    for (size_t k = 0; k < len; k++) {
        const cpulm_json *list[64];
        int n = 0;
        for (int i = 0; i < m->n && n < 64; i++) {
            const cpulm_json *pre = get(m, i, "prefixItems"), *it = get(m, i, "items");
            const cpulm_json *s = k < cpulm_json_len(pre) ? &pre->u.list.items[k] : it;
            if (s && !(s->type == CPULM_JSON_BOOL && s->u.boolean)) list[n++] = s;
        }
        write_all(m, list, n);
    }
    cpulm_json_arr_end(&m->w);
    return 0;
}

/* ---- objects ---- */

static int required_by(const mg *m, const char *key) {
    for (int i = 0; i < m->n; i++) {
        const cpulm_json *r = get(m, i, "required");
        for (size_t k = 0; k < cpulm_json_len(r); k++) {
            const char *s = cpulm_json_str(cpulm_json_at(r, k));
            if (s && !strcmp(s, key)) return 1;
        }
    }
    return 0;
}

/* What part i says about the value of property key: *out the schema (NULL: nothing);
 * returns 0 if the part forbids the property (additionalProperties false). */
static int part_on_key(const mg *m, int i, const char *key, const cpulm_json **out) {
    const cpulm_json *props = get(m, i, "properties"), *add = get(m, i, "additionalProperties");
    *out = cpulm_json_get(props, key);
    if (*out) return !((*out)->type == CPULM_JSON_BOOL && !(*out)->u.boolean);
    if (add && add->type == CPULM_JSON_BOOL) return add->u.boolean;
    *out = add;
    return 1;
}

static const char *key_name(const cpulm_json *k) {
    return k->key ? k->key : k->u.str.s;
}

/* The property names over all parts (properties, then required), first seen first. */
static int collect_keys(mg *m, const cpulm_json **keys, int *nk) {
    for (int i = 0; i < m->n; i++)
        for (int pass = 0; pass < 2; pass++) {
            const cpulm_json *l = get(m, i, pass ? "required" : "properties");
            if (l && l->type != (pass ? CPULM_JSON_ARRAY : CPULM_JSON_OBJECT))
                return fail(m, "'%s' must be an %s", pass ? "required" : "properties",
                            pass ? "array" : "object");
            for (size_t k = 0; k < cpulm_json_len(l); k++) {
                const cpulm_json *v = &l->u.list.items[k];
                const char *name = pass ? cpulm_json_str(v) : v->key;
                if (!name) return fail(m, "'required' items must be strings");
                int seen = 0;
                for (int j = 0; j < *nk && !seen; j++)
                    seen = !strcmp(key_name(keys[j]), name);
                if (seen) continue;
                if (*nk == MAX_KEYS) return fail(m, "'properties': more than %d names", MAX_KEYS);
                keys[(*nk)++] = v;
            }
        }
    return 0;
}

static int merge_properties(mg *m, const cpulm_json **keys, int nk) {
    cpulm_json_kv_obj_begin(&m->w, "properties");
    for (int k = 0; k < nk; k++) {
        const char *name = key_name(keys[k]);
        const cpulm_json *list[64];
        int n = 0, allowed = 1;
        for (int i = 0; i < m->n && allowed; i++) {
            const cpulm_json *s;
            allowed = part_on_key(m, i, name, &s);
            if (allowed && s && !(s->type == CPULM_JSON_BOOL && s->u.boolean)) {
                if (n == 64) return fail(m, "'properties': more than 64 schemas for '%.60s'", name);
                list[n++] = s;
            }
        }
        if (!allowed && required_by(m, name))
            return -1 + fail(m,
                             "'required' property '%.60s' is forbidden by another schema that must "
                             "hold ('additionalProperties': false or a false property schema)",
                             name);
        if (!allowed) continue; /* forbidden, optional: left out */
        cpulm_json_keyn(&m->w, name, strlen(name));
        write_all(m, list, n);
    }
    cpulm_json_obj_end(&m->w);
    return 0;
}

static int merge_object(mg *m) {
    const cpulm_json *keys[MAX_KEYS];
    int nk = 0, closed = 0, n_add = 0;
    if (collect_keys(m, keys, &nk) < 0) return -1;
    const cpulm_json *adds[64];
    for (int i = 0; i < m->n; i++) {
        const cpulm_json *a = get(m, i, "additionalProperties");
        if (!a || (a->type == CPULM_JSON_BOOL && a->u.boolean)) continue;
        if (a->type == CPULM_JSON_BOOL)
            closed = 1;
        else if (n_add < 64)
            adds[n_add++] = a;
        else
            return fail(m, "'additionalProperties': more than 64 schemas that must all hold");
    }
    int r = nk ? merge_properties(m, keys, nk) : 0;
    if (r < 0) return r;
    int n_req = 0;
    for (int k = 0; k < nk; k++)
        if (required_by(m, key_name(keys[k]))) {
            if (!n_req++) {
                cpulm_json_kv_arr_begin(&m->w, "required");
            }
            cpulm_json_write_str(&m->w, key_name(keys[k]));
        }
    if (n_req) cpulm_json_arr_end(&m->w);
    if (closed || n_add) {
        cpulm_json_key(&m->w, "additionalProperties");
        if (closed)
            cpulm_json_write_bool(&m->w, 0);
        else
            write_all(m, adds, n_add);
    }
    return 0;
}

int cpulm_grammar_schema_merge(const cpulm_grammar_part *p, int n, cpulm_buf *out, char *msg,
                               size_t cap) {
    static const char *const lower[3] = {"minimum", "exclusiveMinimum", "minLength"};
    static const char *const upper[3] = {"maximum", "exclusiveMaximum", "maxLength"};
    static const char *const same[2] = {"pattern", "format"};
    mg m = {.p = p, .n = n, .msg = msg, .cap = cap};
    msg[0] = 0;
    for (int i = 0; i < n; i++)
        if (p[i].s->type == CPULM_JSON_BOOL && !p[i].s->u.boolean)
            return -1 + fail(&m, "'allOf': a false schema allows nothing");
    cpulm_json_writer_init(&m.w, out, 0, 0);
    cpulm_json_obj_begin(&m.w);
    int rc = merge_type(&m);
    if (rc == 0) rc = merge_literals(&m);
    for (int k = 0; k < 3 && rc == 0; k++)
        rc = merge_extreme(&m, lower[k], 1) < 0 || merge_extreme(&m, upper[k], 0) < 0 ||
                     (k < 2 && merge_same(&m, same[k]) < 0)
                 ? -1
                 : 0;
    if (rc == 0 && (merge_extreme(&m, "minItems", 1) < 0 || merge_extreme(&m, "maxItems", 0) < 0))
        rc = -1;
    if (rc == 0) rc = merge_prefix(&m);
    if (rc == 0) rc = merge_items(&m);
    if (rc == 0) rc = merge_object(&m);
    if (rc < 0) return rc; /* the text is dropped: it may be cut anywhere */
    cpulm_json_obj_end(&m.w);
    if (cpulm_json_writer_status(&m.w) != CPULM_OK)
        return fail(&m, "'allOf': the combined schema is too large or too deep");
    return rc;
}
