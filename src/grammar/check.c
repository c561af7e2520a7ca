/* check.c: whole-grammar checks after parsing, each linear in the grammar's size.
 *
 * A rule is nullable when some alternative consists of nullable references only: found
 * with a worklist (each alternative counts its references not yet known nullable; a rule
 * that becomes nullable decrements the alternatives that use it), so a long chain costs
 * one pass, not one pass per link.
 * The left-corner graph has an edge r -> x when an alternative of r can start with x (x
 * is its first element, or follows only nullable references). A cycle is left recursion,
 * which the matcher cannot follow; the longest path is how many rules deep the matcher's
 * expansion of a first character may go, which is capped (max_chain). Both come from one
 * iterative depth-first search (an explicit stack: a 100,000-rule chain must not recurse
 * on the C stack).
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"

int32_t *cpulm_gr_rule_of_alt(const cpulm_grammar *g) {
    int32_t *ra = malloc(sizeof *ra * (size_t)(g->n_alt + 1));
    if (!ra) return NULL;
    for (int32_t r = 0; r < g->n_rules; r++)
        for (int32_t k = 0; k < g->rules[r].n_alts; k++)
            ra[g->rules[r].first_alt + k] = r;
    return ra;
}

/* Occurrences of each rule in alternatives: occ[off[r] .. off[r + 1]) are alternative ids
 * (one per reference, so an alternative naming r twice is listed twice). */
typedef struct occ_index {
    int32_t *off, *occ;
} occ_index;

static int occ_build(const cpulm_grammar *g, occ_index *o) {
    o->off = calloc((size_t)g->n_rules + 1, sizeof *o->off);
    int32_t n_ref = 0;
    for (int32_t i = 0; i < g->n_elems; i++)
        n_ref += g->elems[i].kind == GR_REF;
    o->occ = malloc(sizeof *o->occ * (size_t)(n_ref + 1));
    if (!o->off || !o->occ) return -1;
    for (int32_t i = 0; i < g->n_elems; i++)
        if (g->elems[i].kind == GR_REF) o->off[g->elems[i].arg + 1]++;
    for (int32_t r = 0; r < g->n_rules; r++)
        o->off[r + 1] += o->off[r];
    int32_t *fill = malloc(sizeof *fill * (size_t)(g->n_rules + 1));
    if (!fill) return -1;
    memcpy(fill, o->off, sizeof *fill * (size_t)g->n_rules);
    for (int32_t a = 0; a < g->n_alt; a++)
        for (int32_t i = g->alt_start[a]; g->elems[i].kind != GR_END; i++)
            if (g->elems[i].kind == GR_REF) o->occ[fill[g->elems[i].arg]++] = a;
    free(fill);
    return 0;
}

/* nullable[r] for every rule (worklist). -1 on OOM. */
static int compute_nullable(const cpulm_grammar *g, uint8_t *nullable, uint64_t *work) {
    occ_index o = {0};
    int32_t *cnt = malloc(sizeof *cnt * (size_t)(g->n_alt + 1));
    int32_t *queue = malloc(sizeof *queue * (size_t)(g->n_rules + 1));
    int32_t *ra = cpulm_gr_rule_of_alt(g);
    int rc = -1;
    if (!cnt || !queue || !ra || occ_build(g, &o) < 0) goto out;
    int32_t head = 0, tail = 0;
    memset(nullable, 0, (size_t)g->n_rules);
    for (int32_t a = 0; a < g->n_alt; a++) {
        int32_t c = 0, has_set = 0;
        for (int32_t i = g->alt_start[a]; g->elems[i].kind != GR_END; i++)
            c++, has_set |= g->elems[i].kind == GR_SET;
        *work += (uint64_t)c + 1;
        cnt[a] = has_set ? -1 : c; /* with a set it never counts down to 0 */
        c = cnt[a];
        if (c == 0 && !nullable[ra[a]]) nullable[ra[a]] = 1, queue[tail++] = ra[a];
    }
    while (head < tail) {
        int32_t r = queue[head++];
        for (int32_t k = o.off[r]; k < o.off[r + 1]; k++) {
            int32_t a = o.occ[k];
            (*work)++;
            if (--cnt[a] == 0 && !nullable[ra[a]]) nullable[ra[a]] = 1, queue[tail++] = ra[a];
        }
    }
    rc = 0;
out:
    free(o.off);
    free(o.occ);
    free(cnt);
    free(queue);
    free(ra);
    return rc;
}

typedef struct frame {
    int32_t r, k, i; /* rule, its alternative, the element whose edge is next */
} frame;

/* Moves f to the first element of r's next alternative. */
static void next_alt(const cpulm_grammar *g, frame *f) {
    f->k++;
    if (f->k < g->rules[f->r].n_alts) f->i = g->alt_start[g->rules[f->r].first_alt + f->k];
}

/* The next left-corner edge of frame f (a rule), or -1 when f has none left. */
static int32_t next_edge(const cpulm_grammar *g, const uint8_t *nullable, frame *f) {
    while (f->k < g->rules[f->r].n_alts) {
        const gr_elem *e = &g->elems[f->i];
        if (e->kind != GR_REF) {
            next_alt(g, f);
            continue;
        }
        if (nullable[e->arg])
            f->i++;
        else
            next_alt(g, f);
        return e->arg;
    }
    return -1;
}

/* Iterative DFS from r0 over left-corner edges: depth[r] = rules on the longest chain
 * from r. Returns 0, or -1 with *bad = the rule found on a cycle or too deep. */
static int dfs(const cpulm_grammar *g, const uint8_t *nullable, uint8_t *state, int32_t *depth,
               frame *st, int32_t r0, int32_t max_chain, uint64_t *work, int32_t *bad) {
    int32_t sp = 0;
    st[sp++] = (frame){r0, -1, 0};
    next_alt(g, &st[0]);
    state[r0] = 1, depth[r0] = 1;
    while (sp > 0) {
        frame *f = &st[sp - 1];
        int32_t c = next_edge(g, nullable, f);
        (*work)++;
        if (c >= 0 && state[c] == 1) return *bad = c, -1; /* left recursion */
        if (c >= 0 && state[c] == 2) {
            if (depth[c] + 1 > depth[f->r]) depth[f->r] = depth[c] + 1;
        } else if (c >= 0) {
            st[sp] = (frame){c, -1, 0};
            next_alt(g, &st[sp++]);
            state[c] = 1, depth[c] = 1;
        } else {
            int32_t r = f->r;
            state[r] = 2;
            if (depth[r] > max_chain) return *bad = r, -2;
            if (--sp > 0 && depth[r] + 1 > depth[st[sp - 1].r]) depth[st[sp - 1].r] = depth[r] + 1;
        }
    }
    return 0;
}

cpulm_status cpulm_gr_check(const cpulm_grammar *g, int32_t max_chain, uint64_t *work,
                            cpulm_error *err) {
    size_t n = (size_t)g->n_rules + 1;
    uint8_t *nullable = malloc(n), *state = calloc(n, 1);
    int32_t *depth = malloc(sizeof *depth * n);
    frame *st = malloc(sizeof *st * n); /* each rule is on the stack at most once */
    cpulm_status rc = CPULM_OK;
    if (!nullable || !state || !depth || !st || compute_nullable(g, nullable, work) < 0)
        rc = cpulm_errf(err, CPULM_ERR_NOMEM, "grammar: out of memory");
    for (int32_t r = 0; rc == CPULM_OK && r < g->n_rules; r++) {
        int32_t bad = -1, k;
        if (state[r] || (k = dfs(g, nullable, state, depth, st, r, max_chain, work, &bad)) == 0)
            continue;
        if (k == -1)
            rc = cpulm_errf(err, CPULM_ERR_FORMAT, "grammar: rule '%.100s' is left-recursive",
                            g->rules[bad].name);
        else
            rc = cpulm_errf(err, CPULM_ERR_LIMIT,
                            "grammar: rule chain deeper than %d rules at rule '%.100s' "
                            "(limit %d)",
                            max_chain, g->rules[bad].name, max_chain);
    }
    free(nullable);
    free(state);
    free(depth);
    free(st);
    return rc;
}
