/* grammar_int.h: the compiled grammar shared by gbnf.c (parser) and match.c (matcher).
 *
 * Rules are flattened into one element array. Each alternative of a rule is a run of
 * elements ending with GR_END; alt_start[rule.first_alt + k] is where alternative k
 * begins. An element is a character set (index into sets) or a rule reference.
 */
#ifndef CPULM_GRAMMAR_INT_H
#define CPULM_GRAMMAR_INT_H

#include <stdatomic.h>
#include <stdint.h>

#include "grammar/grammar.h"

enum { GR_END = 0, GR_SET = 1, GR_REF = 2 };

typedef struct gr_elem {
    int32_t kind; /* GR_END, GR_SET, GR_REF */
    int32_t arg;  /* set index or rule index */
} gr_elem;

typedef struct gr_set {
    int32_t first, n; /* ranges[first .. first + n) as inclusive [lo, hi] code point pairs */
    int32_t negate;
    uint32_t ascii[4]; /* membership of code points 0..127, negation applied */
} gr_set;

typedef struct gr_rule {
    char *name;
    int32_t first_alt, n_alts;
} gr_rule;

struct cpulm_grammar {
    gr_elem *elems;
    int32_t n_elems;
    gr_set *sets;
    int32_t n_sets;
    uint32_t *ranges; /* [2 * n_ranges] */
    int32_t n_ranges;
    gr_rule *rules;
    int32_t n_rules;
    int32_t *alt_start;
    int32_t n_alt;
    int32_t root;
    int32_t *rest; /* [n_elems]: fewest bytes from element i to its alternative's end */
    size_t bytes;  /* heap bytes of all the above */
    atomic_int refs;
};

#define GR_INF (1 << 29) /* "no finite completion" in byte counts (sums stay below INT32_MAX) */

/* Fills g->rest (budget.c); -1 on OOM. Adds its work units to *work. */
int cpulm_gr_compute_rest(cpulm_grammar *g, uint64_t *work);

/* Rejects left recursion (CPULM_ERR_FORMAT) and derivation chains deeper than max_chain
 * rules (CPULM_ERR_LIMIT) in linear time (check.c). Adds its work units to *work. */
cpulm_status cpulm_gr_check(const cpulm_grammar *g, int32_t max_chain, uint64_t *work,
                            cpulm_error *err);

/* Builds the start state of a matcher (match.c): CPULM_ERR_LIMIT if it alone needs more
 * parse stacks or work than a matcher may use. Adds its work units to *work. */
cpulm_status cpulm_gr_preflight(const cpulm_grammar *g, uint64_t *work, cpulm_error *err);

/* The alternative index of each element's rule: for a in [0, n_alt), rule_of_alt[a]. Owned
 * array of g->n_alt entries, NULL on OOM (check.c). */
int32_t *cpulm_gr_rule_of_alt(const cpulm_grammar *g);

/* The vocabulary trie, in preorder: node i's subtree is [i, end); node 0 is the root
 * (depth 0, no byte). Tokens are sorted by their bytes, so the tokens whose piece ends at
 * node i are sorted[tok_first .. tok_first + tok_n). One 16-byte record per node: the
 * mask walks them in order. */
typedef struct gr_tnode {
    uint8_t byte;
    uint8_t pad;
    uint16_t depth;
    int32_t end;
    int32_t tok_first;
    int32_t tok_n;
} gr_tnode;

struct cpulm_grammar_vocab {
    int32_t n_vocab;
    int32_t n_nodes, max_depth;
    gr_tnode *nodes;     /* [n_nodes] */
    int32_t *sorted;     /* [n_vocab] token ids ordered by their bytes */
    uint32_t *piece_off; /* [n_vocab + 1] into pieces */
    char *pieces;
    uint8_t *eog; /* [n_vocab] */
};

/* Does set s contain code point c? A set's ranges are sorted, disjoint and not adjacent
 * (gbnf.c normalizes them), so a binary search finds the only range that may hold c. */
static inline int gr_set_has(const cpulm_grammar *g, const gr_set *s, uint32_t c) {
    if (c < 128) return (s->ascii[c >> 5] >> (c & 31)) & 1;
    const uint32_t *r = g->ranges + 2 * s->first;
    int32_t lo = 0, hi = s->n; /* first range with r.hi >= c */
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        if (r[2 * mid + 1] < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    int in = lo < s->n && r[2 * lo] <= c;
    return in ^ s->negate;
}

/* Does set s contain some code point in [lo, hi]? */
int cpulm_gr_set_meets(const cpulm_grammar *g, const gr_set *s, uint32_t lo, uint32_t hi);

#endif
