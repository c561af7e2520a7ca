/* vocab.c: the byte trie of a vocabulary for grammar masks (see grammar_int.h).
 * Built once per model (sorting the pieces, then one pass with a path stack), immutable
 * afterwards, so every sequence of a server shares it. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"

#define MAX_PIECE 1024 /* longer pieces are left out of the trie (never generated) */

static int cmp_piece(const cpulm_grammar_vocab *v, int32_t x, int32_t y) {
    const uint32_t *off = v->piece_off;
    uint32_t lx = off[x + 1] - off[x], ly = off[y + 1] - off[y];
    int c = memcmp(v->pieces + off[x], v->pieces + off[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Bottom-up merge sort of v->sorted by piece bytes (qsort has no context argument, and a
 * global one would make concurrent builds unsafe). */
static int sort_tokens(cpulm_grammar_vocab *v) {
    size_t n = (size_t)v->n_vocab;
    int32_t *a = v->sorted, *b = malloc(n * sizeof *b);
    if (!b) return 0;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                b[k++] = cmp_piece(v, a[i], a[j]) <= 0 ? a[i++] : a[j++];
            while (i < mid)
                b[k++] = a[i++];
            while (j < hi)
                b[k++] = a[j++];
        }
        int32_t *t = a;
        a = b;
        b = t;
    }
    if (a != v->sorted) {
        memcpy(v->sorted, a, n * sizeof *a);
        b = a;
    }
    free(b);
    return 1;
}

static int alloc_nodes(cpulm_grammar_vocab *v, size_t cap) {
    v->nodes = calloc(cap, sizeof *v->nodes);
    return v->nodes != NULL;
}

/* One pass over the sorted pieces: pop the path to the common prefix with the previous
 * piece (closing those subtrees), then add nodes for the rest. */
static void build_trie(cpulm_grammar_vocab *v) {
    int32_t path[MAX_PIECE + 1];
    int32_t depth = 0, n = 1;
    v->nodes[0] = (gr_tnode){0};
    path[0] = 0;
    const char *prev = NULL;
    uint32_t prev_len = 0;
    for (int32_t k = 0; k < v->n_vocab; k++) {
        int32_t t = v->sorted[k];
        const char *p = v->pieces + v->piece_off[t];
        uint32_t len = v->piece_off[t + 1] - v->piece_off[t];
        if (len == 0 || len > MAX_PIECE) continue;
        uint32_t lcp = 0;
        while (prev && lcp < len && lcp < prev_len && p[lcp] == prev[lcp])
            lcp++;
        while (depth > (int32_t)lcp)
            v->nodes[path[depth--]].end = n;
        while (depth < (int32_t)len) {
            v->nodes[n] = (gr_tnode){
                .byte = (uint8_t)p[depth], .depth = (uint16_t)(depth + 1), .tok_first = k};
            path[++depth] = n++;
        }
        gr_tnode *at = &v->nodes[path[depth]];
        if (at->tok_n == 0) at->tok_first = k;
        at->tok_n++;
        if ((int32_t)len > v->max_depth) v->max_depth = (int32_t)len;
        prev = p;
        prev_len = len;
    }
    while (depth >= 0)
        v->nodes[path[depth--]].end = n;
    v->n_nodes = n;
}

cpulm_grammar_vocab *cpulm_grammar_vocab_from_pieces(int32_t n, const char *const *bytes,
                                                     const int32_t *len, const uint8_t *eog) {
    cpulm_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v || n <= 0) return free(v), NULL;
    v->n_vocab = n;
    size_t total = 0, nodes = 1;
    for (int32_t i = 0; i < n; i++) {
        total += (size_t)len[i];
        nodes += len[i] <= MAX_PIECE ? (size_t)len[i] : 0;
    }
    v->piece_off = malloc(sizeof(uint32_t) * ((size_t)n + 1));
    v->pieces = malloc(total + 1);
    v->sorted = malloc(sizeof(int32_t) * (size_t)n);
    v->eog = calloc((size_t)n, 1);
    if (!v->piece_off || !v->pieces || !v->sorted || !v->eog || total > 0xFFFFFFFFu ||
        !alloc_nodes(v, nodes)) {
        cpulm_grammar_vocab_free(v);
        return NULL;
    }
    uint32_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        v->piece_off[i] = off;
        if (len[i]) memcpy(v->pieces + off, bytes[i], (size_t)len[i]);
        off += (uint32_t)len[i];
        v->sorted[i] = i;
        if (eog) v->eog[i] = eog[i];
    }
    v->piece_off[n] = off;
    if (!sort_tokens(v)) {
        cpulm_grammar_vocab_free(v);
        return NULL;
    }
    build_trie(v);
    return v;
}

cpulm_grammar_vocab *cpulm_grammar_vocab_new(const cpulm_model *m) {
    int32_t n = cpulm_vocab_n(m);
    char **bytes = calloc((size_t)n, sizeof *bytes);
    int32_t *len = calloc((size_t)n, sizeof *len);
    uint8_t *eog = calloc((size_t)n, 1);
    cpulm_grammar_vocab *v = NULL;
    char buf[MAX_PIECE];
    int ok = bytes && len && eog;
    for (int32_t t = 0; ok && t < n; t++) {
        int32_t k = 0;
        if (cpulm_token_to_piece(m, t, 0, buf, sizeof buf, &k) != CPULM_OK) k = 0;
        len[t] = k;
        eog[t] = (uint8_t)(cpulm_token_is_eog(m, t) != 0);
        bytes[t] = malloc((size_t)k + 1);
        if (!bytes[t])
            ok = 0;
        else
            memcpy(bytes[t], buf, (size_t)k);
    }
    if (ok) v = cpulm_grammar_vocab_from_pieces(n, (const char *const *)bytes, len, eog);
    for (int32_t t = 0; bytes && t < n; t++)
        free(bytes[t]);
    free(bytes);
    free(len);
    free(eog);
    return v;
}

void cpulm_grammar_vocab_free(cpulm_grammar_vocab *v) {
    if (!v) return;
    free(v->nodes);
    free(v->sorted);
    free(v->piece_off);
    free(v->pieces);
    free(v->eog);
    free(v);
}

int32_t cpulm_grammar_vocab_n(const cpulm_grammar_vocab *v) {
    return v->n_vocab;
}

int32_t cpulm_grammar_vocab_trie_nodes(const cpulm_grammar_vocab *v) {
    return v->n_nodes;
}
