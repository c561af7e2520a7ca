/* bpe.c: byte-level BPE (tokenizer.ggml.model = "gpt2") and Gemma 4's SentencePiece-style
 * BPE ("gemma4", pre-tokenizer TOK_PRE_GEMMA4).
 *
 * Byte-level: text -> codepoints (malformed bytes become U+FFFD) -> pre-tokens (pretok.c)
 * -> each pre-token's UTF-8 bytes mapped through GPT-2's bytes_to_unicode -> merges by rank;
 * a symbol that is no token at the end falls back to the tokens of its single bytes.
 * Gemma 4 (llama.cpp's BPE without byte encoding): the same codepoints with every space
 * U+2581, pre-tokens that are runs of newlines or runs of anything else, symbols that are
 * the pre-token's characters as UTF-8, merges by rank; a run of newlines that is a token is
 * taken whole (the vocabulary has such tokens but no merges that make them), and a symbol
 * that is no token falls back to the <0xXX> tokens of its bytes (dropped when absent).
 * Merging uses a doubly linked list of symbols and a binary heap of candidate pairs keyed
 * by (rank, left position), as llama.cpp's llm_tokenizer_bpe_session does, so a word of
 * n bytes costs O(n log n) and results match it exactly. Stale heap entries (a side
 * already merged) are recognised by their byte size and skipped.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "tokenizer/utf8.h"

typedef struct sym {
    int32_t prev, next;
    uint32_t start, n; /* byte range in the encoded word; n == 0: merged away */
    int32_t id;        /* token of this text, -1 if none */
} sym;

typedef struct cand {
    int32_t rank, left, right, result;
    uint32_t size;
} cand;

typedef struct bpe_scratch {
    uint32_t *cps;
    char *word; /* byte-encoded pre-token */
    sym *syms;
    cand *heap;
    size_t cap_word, cap_syms, n_heap, cap_heap;
} bpe_scratch;

static int before(const cand *a, const cand *b) { /* lower rank first, then leftmost */
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static cpulm_status heap_push(bpe_scratch *s, cand c) {
    if (s->n_heap == s->cap_heap) {
        size_t cap = s->cap_heap ? s->cap_heap * 2 : 64;
        cand *p = realloc(s->heap, cap * sizeof *p);
        if (!p) return CPULM_ERR_NOMEM;
        s->heap = p;
        s->cap_heap = cap;
    }
    size_t i = s->n_heap++;
    while (i > 0 && before(&c, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = c;
    return CPULM_OK;
}

static cand heap_pop(bpe_scratch *s) {
    cand top = s->heap[0], last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= n) break;
        if (k + 1 < n && before(&s->heap[k + 1], &s->heap[k])) k++;
        if (!before(&s->heap[k], &last)) break;
        s->heap[i] = s->heap[k];
        i = k;
    }
    if (n) s->heap[i] = last;
    return top;
}

static cpulm_status try_pair(const cpulm_vocab *v, bpe_scratch *s, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return CPULM_OK;
    const tok_merge *m = tok_find_merge(v, s->syms[l].id, s->syms[r].id);
    if (!m) return CPULM_OK;
    return heap_push(s, (cand){m->rank, l, r, m->result, s->syms[l].n + s->syms[r].n});
}

static cpulm_status emit(const cpulm_vocab *v, const bpe_scratch *s, const sym *y, tok_ivec *out) {
    static const char hex[] = "0123456789ABCDEF";
    if (y->id >= 0) return tok_ivec_push(out, y->id);
    for (uint32_t k = 0; k < y->n; k++) { /* llama.cpp: look the bytes up one by one */
        const char *b = s->word + y->start + k;
        const unsigned char u = (unsigned char)*b;
        const char name[6] = {'<', '0', 'x', hex[u >> 4], hex[u & 15], '>'};
        int32_t id = v->pre == TOK_PRE_GEMMA4 ? tok_find(v, name, 6) : tok_find(v, b, 1);
        if (id >= 0 && tok_ivec_push(out, id) != CPULM_OK) return CPULM_ERR_NOMEM;
    }
    return CPULM_OK;
}

/* Merges one byte-encoded word of n_sym symbols (already in s->syms) and emits it. */
static cpulm_status merge_word(const cpulm_vocab *v, bpe_scratch *s, int32_t n_sym, tok_ivec *out) {
    cpulm_status st = CPULM_OK;
    s->n_heap = 0;
    if (n_sym == 0) return CPULM_OK;
    for (int32_t i = 1; i < n_sym && st == CPULM_OK; i++)
        st = try_pair(v, s, i - 1, i);
    while (s->n_heap && st == CPULM_OK) {
        cand c = heap_pop(s);
        sym *l = &s->syms[c.left], *r = &s->syms[c.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != c.size) continue; /* stale */
        l->n += r->n;
        l->id = c.result;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s->syms[r->next].prev = c.left;
        st = try_pair(v, s, l->prev, c.left);
        if (st == CPULM_OK) st = try_pair(v, s, c.left, l->next);
    }
    for (int32_t i = 0; i >= 0 && st == CPULM_OK; i = s->syms[i].next)
        st = emit(v, s, &s->syms[i], out);
    return st;
}

static cpulm_status grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return CPULM_OK;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return CPULM_ERR_NOMEM;
    *p = q;
    *cap = c;
    return CPULM_OK;
}

/* Byte-encodes cps[0..n) into s->word and sets up one symbol per original byte. */
static cpulm_status encode_word(const cpulm_vocab *v, bpe_scratch *s, const uint32_t *cps, size_t n,
                                int32_t *n_sym, uint32_t *n_word) {
    if (grow((void **)&s->word, &s->cap_word, 8 * n, 1) != CPULM_OK ||
        grow((void **)&s->syms, &s->cap_syms, 4 * n, sizeof(sym)) != CPULM_OK)
        return CPULM_ERR_NOMEM;
    uint32_t w = 0;
    int32_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char u[4];
        int nb = cpulm_utf8_encode(cps[i], u);
        for (int j = 0; j < nb; j++, k++) {
            unsigned char b = (unsigned char)u[j];
            s->syms[k] = (sym){k - 1, k + 1, w, 0, v->byte_sym[b]};
            s->syms[k].n = (uint32_t)cpulm_utf8_encode(v->byte_cp[b], s->word + w);
            w += s->syms[k].n;
        }
    }
    if (k > 0) s->syms[k - 1].next = -1;
    *n_sym = k;
    *n_word = w;
    return CPULM_OK;
}

/* Gemma 4: writes cps[0..n) as UTF-8 into s->word with one symbol per character. */
static cpulm_status encode_word_raw(const cpulm_vocab *v, bpe_scratch *s, const uint32_t *cps,
                                    size_t n, int32_t *n_sym, uint32_t *n_word) {
    if (grow((void **)&s->word, &s->cap_word, 4 * n, 1) != CPULM_OK ||
        grow((void **)&s->syms, &s->cap_syms, n, sizeof(sym)) != CPULM_OK)
        return CPULM_ERR_NOMEM;
    uint32_t w = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t len = (uint32_t)cpulm_utf8_encode(cps[i], s->word + w);
        const int32_t k = (int32_t)i;
        s->syms[i] = (sym){k - 1, k + 1, w, len, tok_find(v, s->word + w, len)};
        w += len;
    }
    if (n > 0) s->syms[n - 1].next = -1;
    *n_sym = (int32_t)n;
    *n_word = w;
    return CPULM_OK;
}

static cpulm_status encode_words(const cpulm_vocab *v, bpe_scratch *s, size_t n_cps,
                                 const tok_ivec *lens, tok_ivec *out, cpulm_vocab_stop *stop) {
    const bool gemma4 = v->pre == TOK_PRE_GEMMA4;
    size_t at = 0;
    for (size_t k = 0; k < lens->n; k++) {
        if (cpulm_vocab_should_stop(stop)) return CPULM_ERR_CANCELLED;
        const uint32_t *cps = s->cps + at;
        size_t n = (size_t)lens->v[k];
        int32_t n_sym;
        uint32_t n_word;
        cpulm_status st = gemma4 ? encode_word_raw(v, s, cps, n, &n_sym, &n_word)
                                 : encode_word(v, s, cps, n, &n_sym, &n_word);
        if (st != CPULM_OK) return st;
        at += n;
        /* a whole word that is a token: Llama 3's ignore_merges, and llama.cpp's rule for
         * Gemma 4's newline runs (a pre-token starting with '\n' is all newlines) */
        const bool try_whole = v->ignore_merges || (gemma4 && cps[0] == '\n');
        int32_t whole = try_whole ? tok_find(v, s->word, n_word) : -1;
        st = whole >= 0 ? tok_ivec_push(out, whole) : merge_word(v, s, n_sym, out);
        if (st != CPULM_OK) return st;
    }
    CPULM_ASSERT(at == n_cps);
    return CPULM_OK;
}

cpulm_status tok_bpe_encode(const cpulm_vocab *v, const char *text, size_t n, tok_ivec *out,
                            cpulm_vocab_stop *stop) {
    bpe_scratch s = {0};
    tok_ivec lens = {0};
    size_t n_cps = 0;
    cpulm_status st = CPULM_OK;
    s.cps = malloc((n ? n : 1) * sizeof *s.cps);
    if (!s.cps) return CPULM_ERR_NOMEM;
    const bool gemma4 = v->pre == TOK_PRE_GEMMA4;
    for (size_t i = 0; i < n;) {
        uint32_t cp = cpulm_utf8_decode(text, n, &i);
        s.cps[n_cps++] = gemma4 && cp == ' ' ? 0x2581u : cp; /* SentencePiece's space */
    }
    st = tok_pretok_split(v->pre, s.cps, n_cps, &lens);
    if (st == CPULM_OK) st = encode_words(v, &s, n_cps, &lens, out, stop);
    tok_ivec_free(&lens);
    free(s.cps);
    free(s.word);
    free(s.syms);
    free(s.heap);
    return st;
}
