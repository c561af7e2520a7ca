/* bpe_files.c: builds a byte-level BPE vocab from Hugging Face / GPT-2 style files.
 *
 * vocab.json / encoder.json is read with a minimal JSON reader that accepts exactly one
 * object of string keys and integer values (all this needs; no general JSON here).
 * merges.txt / vocab.bpe holds one "left right" merge per line in rank order, optionally
 * after a "#version" line. Added tokens (HF added_tokens: special -> control, else
 * user-defined) are passed in by the caller. Untrusted input gives CPULM_ERR_FORMAT.
 */
#include <stdlib.h>
#include <string.h>

#include "base/mmap.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/utf8.h"

/* ---- {"key": int, ...} reader ---- */

typedef struct jmap {
    char *keys; /* concatenated key bytes */
    size_t n_keys_bytes, cap_keys;
    uint32_t *key_off, *key_len;
    int32_t *val;
    size_t n, cap;
} jmap;

typedef struct jcur {
    const char *p, *end;
} jcur;

static void skip_ws(jcur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int hex4(jcur *c, uint32_t *out) {
    if (c->end - c->p < 4) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char h = *c->p++;
        int d = h >= '0' && h <= '9'   ? h - '0'
                : h >= 'a' && h <= 'f' ? h - 'a' + 10
                : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                       : -1;
        if (d < 0) return 0;
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return 1;
}

/* \uXXXX, combining a surrogate pair; returns 0 on malformed input. */
static int unicode_escape(jcur *c, uint32_t *cp) {
    if (!hex4(c, cp)) return 0;
    if (*cp >= 0xD800 && *cp <= 0xDBFF) {
        uint32_t lo;
        if (c->end - c->p < 6 || c->p[0] != '\\' || c->p[1] != 'u') return 0;
        c->p += 2;
        if (!hex4(c, &lo) || lo < 0xDC00 || lo > 0xDFFF) return 0;
        *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (*cp >= 0xDC00 && *cp <= 0xDFFF) {
        return 0;
    }
    return 1;
}

static int key_put(jmap *m, const char *s, size_t n) {
    if (m->n_keys_bytes + n > m->cap_keys) {
        size_t cap = m->cap_keys ? m->cap_keys : 1 << 16;
        while (cap < m->n_keys_bytes + n)
            cap *= 2;
        char *p = realloc(m->keys, cap);
        if (!p) return 0;
        m->keys = p;
        m->cap_keys = cap;
    }
    memcpy(m->keys + m->n_keys_bytes, s, n);
    m->n_keys_bytes += n;
    return 1;
}

/* Parses a JSON string at c->p (the opening quote) appending its bytes to m->keys. */
static int read_string(jcur *c, jmap *m) {
    if (c->p >= c->end || *c->p != '"') return 0;
    c->p++;
    while (c->p < c->end && *c->p != '"') {
        const char *run = c->p;
        while (c->p < c->end && *c->p != '"' && *c->p != '\\')
            c->p++;
        if (!key_put(m, run, (size_t)(c->p - run))) return 0;
        if (c->p >= c->end || *c->p == '"') break;
        if (++c->p >= c->end) return 0;
        char e = *c->p++, ch[4];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e == 'u') {
            uint32_t cp;
            if (!unicode_escape(c, &cp) || !key_put(m, ch, (size_t)cpulm_utf8_encode(cp, ch)))
                return 0;
        } else if (simple && e) {
            ch[0] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            if (!key_put(m, ch, 1)) return 0;
        } else {
            return 0;
        }
    }
    if (c->p >= c->end) return 0;
    c->p++;
    return 1;
}

static int read_int(jcur *c, int32_t *out) {
    int neg = c->p < c->end && *c->p == '-';
    if (neg) c->p++;
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return 0;
    int64_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        v = v * 10 + (*c->p++ - '0');
        if (v > INT32_MAX) return 0;
    }
    *out = (int32_t)(neg ? -v : v);
    return 1;
}

static int jmap_add(jmap *m, size_t key_start, int32_t val) {
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 1024;
        uint32_t *o = realloc(m->key_off, cap * sizeof *o);
        if (o) m->key_off = o;
        uint32_t *l = realloc(m->key_len, cap * sizeof *l);
        if (l) m->key_len = l;
        int32_t *v = realloc(m->val, cap * sizeof *v);
        if (v) m->val = v;
        if (!o || !l || !v) return 0;
        m->cap = cap;
    }
    if (key_start > UINT32_MAX || m->n_keys_bytes > UINT32_MAX) return 0;
    m->key_off[m->n] = (uint32_t)key_start;
    m->key_len[m->n] = (uint32_t)(m->n_keys_bytes - key_start);
    m->val[m->n++] = val;
    return 1;
}

static int read_map(const char *s, size_t n, jmap *m) {
    if (!s) return 0;
    jcur c = {s, s + n};
    skip_ws(&c);
    if (c.p >= c.end || *c.p++ != '{') return 0;
    skip_ws(&c);
    if (c.p < c.end && *c.p == '}') return 1;
    for (;;) {
        size_t start = m->n_keys_bytes;
        int32_t val;
        skip_ws(&c);
        if (!read_string(&c, m)) return 0;
        skip_ws(&c);
        if (c.p >= c.end || *c.p++ != ':') return 0;
        skip_ws(&c);
        if (!read_int(&c, &val) || !jmap_add(m, start, val)) return 0;
        skip_ws(&c);
        if (c.p < c.end && *c.p == ',') {
            c.p++;
            continue;
        }
        if (c.p < c.end && *c.p == '}') return 1;
        return 0;
    }
}

static void jmap_free(jmap *m) {
    free(m->keys);
    free(m->key_off);
    free(m->key_len);
    free(m->val);
}

/* ---- vocab assembly ---- */

static cpulm_status fill_tokens(cpulm_vocab *v, const jmap *m, const cpulm_vocab_bpe_files *f) {
    uint8_t *set = calloc((size_t)v->n_tokens, 1);
    if (!set) return CPULM_ERR_NOMEM;
    cpulm_status st = CPULM_OK;
    /* Added tokens first so a JSON entry with the same id cannot shadow them. */
    for (int32_t i = 0; i < f->n_added && st == CPULM_OK; i++) {
        int32_t id = f->added[i].id;
        st = tok_vocab_set_text(v, id, f->added[i].text, strlen(f->added[i].text));
        v->ttype[id] = f->added[i].special ? CPULM_TOKEN_CONTROL : CPULM_TOKEN_USER_DEFINED;
        set[id] = 1;
    }
    for (size_t i = 0; i < m->n && st == CPULM_OK; i++) {
        int32_t id = m->val[i];
        if (set[id]) continue;
        st = tok_vocab_set_text(v, id, m->keys + m->key_off[i], m->key_len[i]);
        set[id] = 1;
    }
    for (int32_t id = 0; id < v->n_tokens && st == CPULM_OK; id++) {
        if (set[id]) continue;
        st = tok_vocab_set_text(v, id, "", 0); /* a hole: never produced by tokenizing */
        v->ttype[id] = CPULM_TOKEN_UNDEFINED;
    }
    free(set);
    return st;
}

static cpulm_status add_merges(cpulm_vocab *v, const char *s, size_t n) {
    int32_t n_lines = 1;
    for (size_t i = 0; i < n; i++)
        n_lines += s[i] == '\n';
    cpulm_status st = tok_vocab_alloc_merges(v, n_lines);
    int32_t rank = 0;
    for (size_t at = 0; at < n && st == CPULM_OK;) {
        const char *nl = memchr(s + at, '\n', n - at);
        size_t end = nl ? (size_t)(nl - s) : n, len = end - at;
        if (len && s[at + len - 1] == '\r') len--;
        int header = at == 0 && len >= 8 && !memcmp(s, "#version", 8);
        if (len && !header) st = tok_vocab_add_merge(v, s + at, len, rank++);
        at = end + 1;
    }
    return st;
}

static cpulm_status check_files(const cpulm_vocab_bpe_files *f, const jmap *m, int32_t *n_tokens,
                                cpulm_error *err) {
    int64_t max_id = -1;
    for (size_t i = 0; i < m->n; i++) {
        if (m->val[i] < 0)
            return cpulm_errf(err, CPULM_ERR_FORMAT, "%s: negative token id", f->vocab_path);
        if (m->val[i] > max_id) max_id = m->val[i];
    }
    for (int32_t i = 0; i < f->n_added; i++) {
        if (f->added[i].id < 0 || !f->added[i].text)
            return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "bad added token %d", (int)i);
        if (f->added[i].id > max_id) max_id = f->added[i].id;
    }
    if (max_id < 0 || max_id >= (1 << 26))
        return cpulm_errf(err, CPULM_ERR_FORMAT, "%s: no usable tokens", f->vocab_path);
    *n_tokens = (int32_t)max_id + 1;
    if (f->bos_id >= *n_tokens || f->eos_id >= *n_tokens)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "bos/eos id out of range");
    return CPULM_OK;
}

static cpulm_status build(cpulm_vocab **out, const cpulm_vocab_bpe_files *f, const jmap *m,
                          const cpulm_mmap *merges, cpulm_error *err) {
    int32_t n_tokens = 0;
    cpulm_vocab *v;
    cpulm_status st = check_files(f, m, &n_tokens, err);
    if (st != CPULM_OK) return st;
    if ((st = tok_vocab_alloc(&v, CPULM_VOCAB_BPE, n_tokens, err)) != CPULM_OK) return st;
    if (!tok_vocab_set_pre(v, f->pre, strlen(f->pre))) {
        cpulm_vocab_free(v);
        return cpulm_errf(err, CPULM_ERR_UNSUPPORTED, "unsupported pre-tokenizer '%s'", f->pre);
    }
    if (f->add_bos >= 0) v->add_bos = f->add_bos != 0;
    v->bos = f->bos_id;
    v->eos = f->eos_id;
    if ((st = fill_tokens(v, m, f)) == CPULM_OK && (st = tok_vocab_index(v)) == CPULM_OK)
        st = add_merges(v, (const char *)merges->data, merges->size);
    if (st != CPULM_OK) {
        cpulm_vocab_free(v);
        return cpulm_errf(err, st, "vocab: out of memory");
    }
    if ((st = tok_vocab_finish(v, false, err)) != CPULM_OK) {
        cpulm_vocab_free(v);
        return st;
    }
    *out = v;
    return CPULM_OK;
}

cpulm_status cpulm_vocab_from_bpe_files(cpulm_vocab **out, const cpulm_vocab_bpe_files *f,
                                        cpulm_error *err) {
    cpulm_mmap vm, mm;
    jmap m = {0};
    *out = NULL;
    if (!f || !f->vocab_path || !f->merges_path || !f->pre || (f->n_added > 0 && !f->added))
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "vocab: missing file description");
    cpulm_status st = cpulm_mmap_open(&vm, f->vocab_path, err);
    if (st != CPULM_OK) return st;
    if ((st = cpulm_mmap_open(&mm, f->merges_path, err)) != CPULM_OK) {
        cpulm_mmap_close(&vm);
        return st;
    }
    if (!read_map((const char *)vm.data, vm.size, &m))
        st = cpulm_errf(err, CPULM_ERR_FORMAT, "%s: not a JSON object of string -> integer",
                        f->vocab_path);
    else
        st = build(out, f, &m, &mm, err);
    jmap_free(&m);
    cpulm_mmap_close(&vm);
    cpulm_mmap_close(&mm);
    return st;
}
