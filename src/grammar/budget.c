/* budget.c: how many bytes a grammar still needs to reach its end, for budget-aware
 * closing (see cpulm_grammar_matcher_set_budget).
 *
 * rest[p] is the fewest bytes that complete the alternative containing element p from p on
 * (GR_END: 0). A set element costs the UTF-8 length of its smallest member; a reference
 * costs its rule's shortest expansion. Recursive rules make the rule minimums a shortest-
 * path problem over the grammar (Knuth's generalization of Dijkstra's algorithm, 1977):
 * costs are sums of nonnegative parts, so the rule with the smallest tentative value among
 * the unsettled ones is final. A heap holds the tentative values; an alternative offers its
 * sum to its rule once all the rules it references are settled. O(E log E) for E
 * elements, where re-summing until nothing changes was quadratic on long chains. Rules with
 * no finite expansion keep INF, which the matcher treats as "cannot finish".
 */
#include <stdlib.h>

#include "grammar/grammar_int.h"

static int32_t add_sat(int32_t a, int32_t b) {
    return a >= GR_INF - b ? GR_INF : a + b;
}

/* Bytes of the shortest UTF-8 character in set s (GR_INF if it has none UTF-8 can encode:
 * surrogates are not characters). */
static int32_t set_min_bytes(const cpulm_grammar *g, const gr_set *s) {
    static const uint32_t lo[5] = {0, 0x80, 0x800, 0xE000, 0x10000},
                          hi[5] = {0x7F, 0x7FF, 0xD7FF, 0xFFFF, 0x10FFFF};
    static const int32_t len[5] = {1, 2, 3, 3, 4};
    for (int k = 0; k < 5; k++)
        if (cpulm_gr_set_meets(g, s, lo[k], hi[k])) return len[k];
    return GR_INF;
}

typedef struct heap {
    uint64_t *v; /* value << 32 | rule */
    int32_t n;
} heap;

static void heap_push(heap *h, int32_t val, int32_t rule) {
    uint64_t x = (uint64_t)val << 32 | (uint32_t)rule;
    int32_t i = h->n++;
    while (i > 0 && h->v[(i - 1) / 2] > x) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = x;
}

static uint64_t heap_pop(heap *h) {
    uint64_t top = h->v[0], x = h->v[--h->n];
    int32_t i = 0;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->v[c + 1] < h->v[c]) c++;
        if (h->v[c] >= x) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0) h->v[i] = x;
    return top;
}

typedef struct knuth {
    int32_t *set_len, *rule_min, *cnt, *sum, *ra, *off, *occ;
    uint8_t *done;
    heap h;
} knuth;

static void knuth_release(knuth *k) {
    free(k->set_len), free(k->rule_min), free(k->cnt), free(k->sum), free(k->ra);
    free(k->off), free(k->occ), free(k->done), free(k->h.v);
}

/* Sums each alternative's sets; counts its references; lists where each rule is used. */
static int knuth_init(const cpulm_grammar *g, knuth *k) {
    size_t nr = (size_t)g->n_rules + 1, na = (size_t)g->n_alt + 1, ne = (size_t)g->n_elems + 1;
    k->set_len = malloc(sizeof(int32_t) * ((size_t)g->n_sets + 1));
    k->rule_min = malloc(sizeof(int32_t) * nr);
    k->cnt = calloc(na, sizeof(int32_t));
    k->sum = calloc(na, sizeof(int32_t));
    k->off = calloc(nr + 1, sizeof(int32_t));
    k->occ = malloc(sizeof(int32_t) * ne);
    k->done = calloc(nr, 1);
    k->h.v = malloc(sizeof(uint64_t) * (na + nr)); /* one push per alternative at most */
    k->ra = cpulm_gr_rule_of_alt(g);
    if (!k->set_len || !k->rule_min || !k->cnt || !k->sum || !k->off || !k->occ || !k->done ||
        !k->h.v || !k->ra)
        return -1;
    for (int32_t i = 0; i < g->n_sets; i++)
        k->set_len[i] = set_min_bytes(g, &g->sets[i]);
    for (int32_t r = 0; r < g->n_rules; r++)
        k->rule_min[r] = GR_INF;
    for (int32_t a = 0; a < g->n_alt; a++)
        for (int32_t i = g->alt_start[a]; g->elems[i].kind != GR_END; i++) {
            const gr_elem *x = &g->elems[i];
            if (x->kind == GR_SET)
                k->sum[a] = add_sat(k->sum[a], k->set_len[x->arg]);
            else
                k->cnt[a]++, k->off[x->arg + 2]++;
        }
    for (int32_t r = 0; r < g->n_rules; r++) /* off[r + 1] = start of r's list, then filled */
        k->off[r + 2] += k->off[r + 1];
    for (int32_t a = 0; a < g->n_alt; a++)
        for (int32_t i = g->alt_start[a]; g->elems[i].kind != GR_END; i++)
            if (g->elems[i].kind == GR_REF) k->occ[k->off[g->elems[i].arg + 1]++] = a;
    return 0; /* now occ[off[r] .. off[r + 1]) are the alternatives using r */
}

/* Offers alternative a's finished sum to its rule. */
static void offer(knuth *k, int32_t a) {
    int32_t r = k->ra[a];
    if (!k->done[r] && k->sum[a] < k->rule_min[r]) {
        k->rule_min[r] = k->sum[a];
        heap_push(&k->h, k->sum[a], r);
    }
}

/* rest[] of alternative a, summed backwards from its end with the settled minimums. */
static void fill_rest(cpulm_grammar *g, const knuth *k, int32_t a) {
    int32_t end = g->alt_start[a];
    while (g->elems[end].kind != GR_END)
        end++;
    int32_t acc = 0;
    g->rest[end] = 0;
    for (int32_t i = end - 1; i >= g->alt_start[a]; i--) {
        const gr_elem *x = &g->elems[i];
        acc = add_sat(acc, x->kind == GR_SET ? k->set_len[x->arg] : k->rule_min[x->arg]);
        g->rest[i] = acc;
    }
}

int cpulm_gr_compute_rest(cpulm_grammar *g, uint64_t *work) {
    knuth k = {0};
    g->rest = malloc(sizeof(int32_t) * (size_t)(g->n_elems + 1));
    if (!g->rest || knuth_init(g, &k) < 0) {
        knuth_release(&k);
        return -1;
    }
    for (int32_t a = 0; a < g->n_alt; a++)
        if (k.cnt[a] == 0) offer(&k, a);
    while (k.h.n > 0) {
        uint64_t x = heap_pop(&k.h);
        int32_t r = (int32_t)(uint32_t)x;
        (*work)++;
        if (k.done[r]) continue; /* a stale, larger entry */
        k.done[r] = 1;
        for (int32_t j = k.off[r]; j < k.off[r + 1]; j++) {
            int32_t a = k.occ[j];
            (*work)++;
            k.sum[a] = add_sat(k.sum[a], k.rule_min[r]);
            if (--k.cnt[a] == 0) offer(&k, a);
        }
    }
    for (int32_t a = 0; a < g->n_alt; a++)
        fill_rest(g, &k, a);
    *work += (uint64_t)g->n_elems;
    knuth_release(&k);
    return 0;
}
