/* tokenize.c: text -> token ids: special-token partitioning, then SPM or BPE per fragment.
 *
 * Partitioning follows llama.cpp's tokenizer_st_partition: special tokens are taken
 * longest text first, each splitting every still-raw fragment at all its (non-overlapping,
 * left to right) occurrences. Here that is done on a per-byte "used" map instead of a
 * fragment list; accepting occurrences in the same order gives the same fragments.
 * A byte-pair presence filter skips the (often thousands of) special tokens that cannot
 * occur in the text, so long texts are not scanned once per special token.
 */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

enum { FREE = 0, TAKEN = 1, STRIPPED = 2 };

typedef struct hit {
    size_t pos;
    int32_t id;
} hit;

typedef struct partition {
    uint8_t *used; /* [n] FREE / TAKEN / STRIPPED */
    hit *hits;
    size_t n_hits, cap_hits;
    uint8_t pairs[8192]; /* bit (a << 8 | b) set if bytes a, b are adjacent in the text */
    uint8_t bytes[32];   /* bit b set if byte b occurs */
} partition;

static int c_isspace(char c) { /* the C locale isspace llama.cpp strips with */
    return c == ' ' || (c >= '\t' && c <= '\r');
}

static int may_occur(const partition *p, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    if (!(p->bytes[u[0] >> 3] & (1u << (u[0] & 7)))) return 0;
    for (size_t i = 1; i < n; i++) {
        unsigned k = (unsigned)u[i - 1] << 8 | u[i];
        if (!(p->pairs[k >> 3] & (1u << (k & 7)))) return 0;
    }
    return 1;
}

static int range_free(const partition *p, size_t at, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p->used[at + i] != FREE) return 0;
    return 1;
}

static cpulm_status accept(const cpulm_vocab *v, partition *p, const char *text, size_t n,
                           size_t at, int32_t id) {
    size_t len = v->len[id];
    if (p->n_hits == p->cap_hits) {
        size_t cap = p->cap_hits ? 2 * p->cap_hits : 16;
        hit *h = realloc(p->hits, cap * sizeof *h);
        if (!h) return CPULM_ERR_NOMEM;
        p->hits = h;
        p->cap_hits = cap;
    }
    p->hits[p->n_hits++] = (hit){at, id};
    memset(p->used + at, TAKEN, len);
    if (v->attr[id] & TOK_ATTR_RSTRIP)
        for (size_t k = at + len; k < n && p->used[k] == FREE && c_isspace(text[k]); k++)
            p->used[k] = STRIPPED;
    if (v->attr[id] & TOK_ATTR_LSTRIP)
        for (size_t k = at; k > 0 && p->used[k - 1] == FREE && c_isspace(text[k - 1]); k--)
            p->used[k - 1] = STRIPPED;
    return CPULM_OK;
}

static cpulm_status find_specials(const cpulm_vocab *v, partition *p, const char *text, size_t n,
                                  int parse_special, cpulm_vocab_stop *stop) {
    for (int32_t k = 0; k < v->n_specials; k++) {
        if (cpulm_vocab_should_stop(stop)) return CPULM_ERR_CANCELLED;
        int32_t id = v->specials[k];
        uint8_t t = v->ttype[id];
        if (!parse_special && (t == CPULM_TOKEN_CONTROL || t == CPULM_TOKEN_UNKNOWN)) continue;
        const char *s = v->pool + v->off[id];
        size_t len = v->len[id];
        if (len > n || !may_occur(p, s, len)) continue;
        for (size_t at = 0; at + len <= n;) {
            const char *m = memmem(text + at, n - at, s, len);
            if (!m) break;
            at = (size_t)(m - text);
            if (!range_free(p, at, len)) {
                at++;
                continue;
            }
            if (accept(v, p, text, n, at, id) != CPULM_OK) return CPULM_ERR_NOMEM;
            at += len;
        }
    }
    return CPULM_OK;
}

static int cmp_hit(const void *a, const void *b) {
    size_t x = ((const hit *)a)->pos, y = ((const hit *)b)->pos;
    return (x > y) - (x < y);
}

/* Tokenizes one raw fragment. prev_special: the previous fragment was a token (or this is
 * the first fragment), which is when SPM adds its dummy-prefix space. */
static cpulm_status encode_raw(const cpulm_vocab *v, const char *s, size_t n, int prev_special,
                               tok_ivec *out, cpulm_vocab_stop *stop) {
    if (v->type == CPULM_VOCAB_BPE) return tok_bpe_encode(v, s, n, out, stop);
    if (v->type == CPULM_VOCAB_WPM) return tok_wpm_encode(v, s, n, out, stop);
    size_t extra = v->add_space_prefix && prev_special;
    size_t spaces = extra;
    for (size_t i = 0; i < n; i++)
        spaces += s[i] == ' ';
    char *buf = malloc(n + 2 * spaces + 1);
    if (!buf) return CPULM_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n + extra; i++) {
        char c = i < extra ? ' ' : s[i - extra];
        if (c == ' ') { /* SentencePiece escapes spaces as U+2581 */
            memcpy(buf + k, "\xe2\x96\x81", 3);
            k += 3;
        } else {
            buf[k++] = c;
        }
    }
    cpulm_status st = tok_spm_encode(v, buf, k, out, stop);
    free(buf);
    return st;
}

static cpulm_status encode_fragments(const cpulm_vocab *v, const partition *p, const char *text,
                                     size_t n, tok_ivec *out, cpulm_vocab_stop *stop) {
    size_t h = 0, i = 0;
    int prev_special = 1;
    while (i < n) {
        if (cpulm_vocab_should_stop(stop)) return CPULM_ERR_CANCELLED;
        if (p->used[i] == STRIPPED) {
            i++;
        } else if (p->used[i] == TAKEN) {
            CPULM_ASSERT(h < p->n_hits && p->hits[h].pos == i);
            if (tok_ivec_push(out, p->hits[h].id) != CPULM_OK) return CPULM_ERR_NOMEM;
            i += v->len[p->hits[h++].id];
            prev_special = 1;
        } else {
            size_t j = i;
            while (j < n && p->used[j] == FREE)
                j++;
            cpulm_status st = encode_raw(v, text + i, j - i, prev_special, out, stop);
            if (st != CPULM_OK) return st;
            prev_special = 0;
            i = j;
        }
    }
    return CPULM_OK;
}

static cpulm_status tokenize_all(const cpulm_vocab *v, const char *text, size_t n,
                                 int parse_special, tok_ivec *out, cpulm_vocab_stop *stop) {
    if (n == 0) return CPULM_OK;
    partition *p = calloc(1, sizeof *p);
    if (!p) return CPULM_ERR_NOMEM;
    p->used = calloc(n, 1);
    cpulm_status st = p->used ? CPULM_OK : CPULM_ERR_NOMEM;
    if (st == CPULM_OK) {
        const unsigned char *u = (const unsigned char *)text;
        for (size_t i = 0; i < n; i++) {
            p->bytes[u[i] >> 3] |= (uint8_t)(1u << (u[i] & 7));
            unsigned k = i ? (unsigned)u[i - 1] << 8 | u[i] : 0;
            if (i) p->pairs[k >> 3] |= (uint8_t)(1u << (k & 7));
        }
        st = find_specials(v, p, text, n, parse_special, stop);
    }
    if (st == CPULM_OK) {
        if (p->n_hits) qsort(p->hits, p->n_hits, sizeof *p->hits, cmp_hit);
        st = encode_fragments(v, p, text, n, out, stop);
    }
    free(p->used);
    free(p->hits);
    free(p);
    return st;
}

cpulm_status cpulm_vocab_tokenize(const cpulm_vocab *v, const char *text, size_t len,
                                  int add_special, int parse_special, cpulm_token *out, int32_t cap,
                                  int32_t *n_out) {
    return cpulm_vocab_tokenize_stop(v, text, len, add_special, parse_special, out, cap, n_out,
                                     NULL);
}

cpulm_status cpulm_vocab_tokenize_stop(const cpulm_vocab *v, const char *text, size_t len,
                                       int add_special, int parse_special, cpulm_token *out,
                                       int32_t cap, int32_t *n_out, cpulm_vocab_stop *stop) {
    tok_ivec ids = {0};
    cpulm_status st = CPULM_OK;
    *n_out = 0;
    if (!text && len) return CPULM_ERR_INVALID_ARG;
    if (add_special && v->add_bos && v->bos >= 0) st = tok_ivec_push(&ids, v->bos);
    if (st == CPULM_OK) st = tokenize_all(v, text, len, parse_special, &ids, stop);
    if (st == CPULM_OK && add_special && v->add_eos && v->eos >= 0)
        st = tok_ivec_push(&ids, v->eos);
    if (st == CPULM_OK && add_special && v->add_sep && v->sep >= 0)
        st = tok_ivec_push(&ids, v->sep); /* WordPiece: [CLS] text [SEP] */
    if (st == CPULM_OK && ids.n > INT32_MAX) st = CPULM_ERR_INVALID_ARG;
    if (st == CPULM_OK) {
        *n_out = (int32_t)ids.n;
        if (cap < 0 || ids.n > (size_t)cap)
            st = CPULM_ERR_TOO_SMALL;
        else if (ids.n)
            memcpy(out, ids.v, ids.n * sizeof *out);
    }
    tok_ivec_free(&ids);
    return st;
}
