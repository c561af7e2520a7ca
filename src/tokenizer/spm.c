/* spm.c: SentencePiece-style tokenizer (tokenizer.ggml.model = "llama").
 *
 * The input fragment arrives with spaces already escaped to U+2581 (and the dummy prefix
 * added by the caller). It is split into UTF-8 characters, then the adjacent pair whose
 * concatenation is the highest-scoring token is merged repeatedly (ties: leftmost), as
 * llama.cpp's llm_tokenizer_spm does. A linked list plus a binary heap keeps this
 * O(n log n). Symbols that are not tokens at the end fall back to byte tokens <0xXX>.
 */
#include <stdlib.h>

#include "tokenizer/tok_internal.h"
#include "tokenizer/utf8.h"

typedef struct sym {
    int32_t prev, next;
    uint32_t start, n; /* bytes of the text; n == 0: merged into its left neighbour */
} sym;

typedef struct cand {
    float score;
    int32_t left, right;
    uint32_t size;
} cand;

typedef struct spm_heap {
    cand *v;
    size_t n, cap;
} spm_heap;

static int before(const cand *a, const cand *b) { /* higher score first, then leftmost */
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static cpulm_status heap_push(spm_heap *h, cand c) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        cand *p = realloc(h->v, cap * sizeof *p);
        if (!p) return CPULM_ERR_NOMEM;
        h->v = p;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && before(&c, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = c;
    return CPULM_OK;
}

static cand heap_pop(spm_heap *h) {
    cand top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= h->n) break;
        if (k + 1 < h->n && before(&h->v[k + 1], &h->v[k])) k++;
        if (!before(&h->v[k], &last)) break;
        h->v[i] = h->v[k];
        i = k;
    }
    if (h->n) h->v[i] = last;
    return top;
}

static cpulm_status try_pair(const cpulm_vocab *v, const char *text, const sym *syms, spm_heap *h,
                             int32_t l, int32_t r) {
    if (l < 0 || r < 0) return CPULM_OK;
    uint32_t size = syms[l].n + syms[r].n;
    int32_t id = tok_find(v, text + syms[l].start, size);
    if (id < 0) return CPULM_OK;
    return heap_push(h, (cand){v->score[id], l, r, size});
}

static cpulm_status emit(const cpulm_vocab *v, const char *text, const sym *y, tok_ivec *out) {
    int32_t id = tok_find(v, text + y->start, y->n);
    if (id >= 0) return tok_ivec_push(out, id);
    for (uint32_t k = 0; k < y->n; k++) { /* byte fallback */
        int32_t b = v->byte_tok[(unsigned char)text[y->start + k]];
        if (b < 0) b = v->unk;
        if (b >= 0 && tok_ivec_push(out, b) != CPULM_OK) return CPULM_ERR_NOMEM;
    }
    return CPULM_OK;
}

cpulm_status tok_spm_encode(const cpulm_vocab *v, const char *text, size_t n, tok_ivec *out,
                            cpulm_vocab_stop *stop) {
    if (n == 0) return CPULM_OK;
    if (n > INT32_MAX) return CPULM_ERR_INVALID_ARG;
    sym *syms = malloc(n * sizeof *syms);
    spm_heap h = {0};
    cpulm_status st = CPULM_OK;
    if (!syms) return CPULM_ERR_NOMEM;
    int32_t n_sym = 0;
    for (size_t at = 0; at < n; n_sym++) {
        if (cpulm_vocab_should_stop(stop)) {
            free(syms);
            return CPULM_ERR_CANCELLED;
        }
        size_t len = (size_t)cpulm_utf8_lead_len((unsigned char)text[at]);
        if (len > n - at) len = n - at;
        syms[n_sym] = (sym){n_sym - 1, at + len == n ? -1 : n_sym + 1, (uint32_t)at, (uint32_t)len};
        at += len;
    }
    for (int32_t i = 1; i < n_sym && st == CPULM_OK; i++)
        st = cpulm_vocab_should_stop(stop) ? CPULM_ERR_CANCELLED
                                           : try_pair(v, text, syms, &h, i - 1, i);
    while (h.n && st == CPULM_OK) {
        if (cpulm_vocab_should_stop(stop)) {
            st = CPULM_ERR_CANCELLED;
            break;
        }
        cand c = heap_pop(&h);
        sym *l = &syms[c.left], *r = &syms[c.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != c.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) syms[r->next].prev = c.left;
        st = try_pair(v, text, syms, &h, l->prev, c.left);
        if (st == CPULM_OK) st = try_pair(v, text, syms, &h, c.left, l->next);
    }
    for (int32_t i = 0; i >= 0 && st == CPULM_OK; i = syms[i].next)
        st = emit(v, text, &syms[i], out);
    free(syms);
    free(h.v);
    return st;
}
