/* budget.c: how many bytes a grammar still needs to reach its end, for budget-aware
 * closing (see cpulm_grammar_matcher_set_budget).
 *
 * rest[p] is the fewest bytes that complete the alternative containing element p from p on
 * (GR_END: 0). A set element costs the UTF-8 length of its smallest member; a reference
 * costs its rule's shortest expansion. Recursive rules make this a shortest-path fixpoint:
 * every rule starts at INF and the alternatives are re-summed until nothing shrinks (each
 * round lowers some rule, and values only go down, so it ends). Rules with no finite
 * expansion keep INF, which the matcher treats as "cannot finish".
 */
#include <stdlib.h>

#include "grammar/grammar_int.h"

static int32_t add_sat(int32_t a, int32_t b) {
    return a >= GR_INF - b ? GR_INF : a + b;
}

/* Bytes of the shortest UTF-8 character in set s (GR_INF if it is empty). */
static int32_t set_min_bytes(const cpulm_grammar *g, const gr_set *s) {
    static const uint32_t lo[4] = {0, 0x80, 0x800, 0x10000},
                          hi[4] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    for (int k = 0; k < 4; k++)
        if (cpulm_gr_set_meets(g, s, lo[k], hi[k])) return k + 1;
    return GR_INF;
}

/* Sums alternative a (starting at element e) from its end backwards into rest[]; returns
 * rest at its first element. */
static int32_t sum_alt(cpulm_grammar *g, const int32_t *set_len, const int32_t *rule_min,
                       int32_t e) {
    int32_t end = e;
    while (g->elems[end].kind != GR_END)
        end++;
    int32_t acc = 0;
    g->rest[end] = 0;
    for (int32_t i = end - 1; i >= e; i--) {
        const gr_elem *x = &g->elems[i];
        acc = add_sat(acc, x->kind == GR_SET ? set_len[x->arg] : rule_min[x->arg]);
        g->rest[i] = acc;
    }
    return acc;
}

int cpulm_gr_compute_rest(cpulm_grammar *g) {
    g->rest = malloc(sizeof(int32_t) * (size_t)(g->n_elems + 1));
    int32_t *set_len = malloc(sizeof(int32_t) * (size_t)(g->n_sets + 1));
    int32_t *rule_min = malloc(sizeof(int32_t) * (size_t)(g->n_rules + 1));
    if (!g->rest || !set_len || !rule_min) {
        free(set_len);
        free(rule_min);
        return -1;
    }
    for (int32_t i = 0; i < g->n_sets; i++)
        set_len[i] = set_min_bytes(g, &g->sets[i]);
    for (int32_t r = 0; r < g->n_rules; r++)
        rule_min[r] = GR_INF;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int32_t r = 0; r < g->n_rules; r++) {
            const gr_rule *rr = &g->rules[r];
            for (int32_t k = 0; k < rr->n_alts; k++) {
                int32_t v = sum_alt(g, set_len, rule_min, g->alt_start[rr->first_alt + k]);
                if (v < rule_min[r]) rule_min[r] = v, changed = 1;
            }
        }
    }
    free(set_len);
    free(rule_min);
    return 0;
}
