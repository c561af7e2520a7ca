/* match.c: the grammar matcher, a lazily built DFA over bytes on top of pushdown stacks.
 *
 * A stack is a chain of hash-consed nodes (pos = element index, parent = the stack below),
 * so equal stacks have equal ids and pushing or replacing the top is one lookup. After
 * "expansion" every stack's top is a character set (or the stack is empty = NIL: the
 * grammar may end here). A DFA state is a hash-consed sorted set of such stacks plus a
 * partially decoded UTF-8 character; its 256-entry transition row is filled on demand.
 * Expansion follows references; a reference that ends its alternative is a tail call (the
 * continuation is not pushed), so right recursion such as `R ::= X R | ""` runs in constant
 * stack. Left recursion is rejected by the parser, so expansion terminates. Expansion is a
 * worklist over stack nodes, and a node already expanded for the state being built is not
 * expanded again (its result is in already): `x ::= "" | ""` used 40 times in a row would
 * otherwise be followed along 2^40 paths. Every call into the matcher counts its work
 * (nodes made and visited, stacks stepped, trie nodes walked) and fails past
 * CPULM_GRAMMAR_MAX_WORK, so no grammar makes one token's mask take seconds.
 *
 * The mask walks the vocabulary trie in preorder with one DFA transition per trie node and
 * skips a dead node's whole subtree; masks are cached per DFA state (bounded memory).
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"

#define MAX_STACKS 2048 /* stacks in one state: more means a pathological grammar */
#define MAX_NODES  (1 << 22)
#define MAX_STATES (1 << 18)
#define MASK_CACHE_BYTES \
    (16u << 20) /* per matcher (per generating sequence): ~1000 masks at 128k */
#define UNKNOWN (-2)
#define DEAD    (-1)

/* Why a matcher failed (m->overflow; sticky: the matcher is then unusable). */
enum { OVF_NONE, OVF_STACKS, OVF_WORK, OVF_SIZE, OVF_MEM };

typedef struct gnode {
    int32_t pos, parent;
    int32_t dist; /* fewest bytes to empty this stack (rest of each frame), GR_INF at most */
} gnode;

typedef struct dstate {
    int32_t first, n; /* stacks: items[first .. first + n), sorted node ids */
    uint32_t partial; /* bits of a UTF-8 character read so far */
    int32_t rem;      /* continuation bytes still to come (0: at a character boundary) */
    int32_t accept;   /* rem == 0 and NIL is among the stacks */
    int32_t dist;     /* fewest bytes to an accepting state (0: accepting) */
    int32_t maxd;     /* largest dist after one allowed token (-1: not known yet) */
    int32_t *trans;   /* [256] or NULL */
    uint32_t *mask;   /* cached mask or NULL */
} dstate;

struct cpulm_grammar_matcher {
    const cpulm_grammar *g;
    const cpulm_grammar_vocab *v;
    gnode *nodes;
    int32_t n_nodes, cap_nodes;
    int32_t *node_ht; /* open addressing: node ids, -1 empty */
    uint32_t node_ht_cap;
    dstate *states;
    int32_t n_states, cap_states;
    int32_t *state_ht;
    uint32_t state_ht_cap;
    int32_t *items;
    int64_t n_items, cap_items;
    int32_t start, cur;
    /* scratch for building a state */
    int32_t *tmp;
    int32_t n_tmp, cap_tmp;
    uint32_t *seen; /* [cap_nodes] stamps for dedup during expansion */
    uint32_t epoch;
    int32_t *todo; /* expansion worklist */
    int32_t cap_todo;
    uint64_t work; /* units spent by the current call (reset at each entry point) */
    int overflow;
    int32_t *walk;      /* [max_depth + 1] DFA state per trie depth */
    int32_t **rows;     /* [max_depth + 1] its transition row */
    uint32_t *mask_out; /* returned when caching is impossible */
    uint32_t *mask_lim; /* the budget-restricted mask (never cached: it depends on the budget) */
    size_t mask_bytes_cached;
    int32_t budget, used; /* token budget (0: none) and tokens accepted since the start */
    cpulm_grammar_stats st;
};

static uint32_t hash2(uint32_t a, uint32_t b) {
    uint64_t x = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(x >> 32) ^ (uint32_t)x;
}

/* An empty open-addressing table of cap slots (a power of two), every slot -1; NULL when
 * out of memory. */
static int32_t *ht_new(uint32_t cap) {
    int32_t *ht = malloc(sizeof(int32_t) * cap);
    if (ht) memset(ht, 0xFF, sizeof(int32_t) * cap);
    return ht;
}

/* Puts i at the first free slot from hash h (linear probing). */
static void ht_put(int32_t *ht, uint32_t cap, uint32_t h, int32_t i) {
    h &= cap - 1;
    while (ht[h] >= 0)
        h = (h + 1) & (cap - 1);
    ht[h] = i;
}

/* ---- hash-consed stack nodes ---- */

static int rehash_nodes(cpulm_grammar_matcher *m, uint32_t cap) {
    int32_t *ht = ht_new(cap);
    if (!ht) return -1;
    for (int32_t i = 1; i < m->n_nodes; i++)
        ht_put(ht, cap, hash2((uint32_t)m->nodes[i].pos, (uint32_t)m->nodes[i].parent), i);
    free(m->node_ht);
    m->node_ht = ht;
    m->node_ht_cap = cap;
    return 0;
}

/* The id of stack (pos on top of parent); -1 on OOM or overflow. */
static int32_t intern_node(cpulm_grammar_matcher *m, int32_t pos, int32_t parent) {
    if (++m->work > CPULM_GRAMMAR_MAX_WORK) return m->overflow = OVF_WORK, -1;
    uint32_t mask = m->node_ht_cap - 1, h = hash2((uint32_t)pos, (uint32_t)parent) & mask;
    for (int32_t id; (id = m->node_ht[h]) >= 0; h = (h + 1) & mask)
        if (m->nodes[id].pos == pos && m->nodes[id].parent == parent) return id;
    if (m->n_nodes >= MAX_NODES) return m->overflow = OVF_SIZE, -1;
    if (m->n_nodes == m->cap_nodes) {
        int32_t cap = m->cap_nodes * 2;
        gnode *nn = realloc(m->nodes, sizeof *nn * (size_t)cap);
        uint32_t *ns = nn ? realloc(m->seen, sizeof *ns * (size_t)cap) : NULL;
        if (nn) m->nodes = nn;
        if (!ns) return m->overflow = OVF_MEM, -1;
        memset(ns + m->cap_nodes, 0, sizeof *ns * (size_t)(cap - m->cap_nodes));
        m->seen = ns;
        m->cap_nodes = cap;
    }
    int32_t id = m->n_nodes++;
    int32_t d = m->g->rest[pos], up = m->nodes[parent].dist;
    m->nodes[id] = (gnode){pos, parent, d >= GR_INF - up ? GR_INF : d + up};
    m->node_ht[h] = id;
    if ((uint32_t)m->n_nodes * 2 > m->node_ht_cap && rehash_nodes(m, m->node_ht_cap * 2) < 0)
        return m->overflow = OVF_MEM, -1;
    return id;
}

/* ---- expansion ---- */

/* Appends id to tmp (the caller has checked it is new for this state). */
static void tmp_add(cpulm_grammar_matcher *m, int32_t id) {
    if (m->n_tmp >= MAX_STACKS) {
        m->overflow = OVF_STACKS;
        return;
    }
    if (m->n_tmp == m->cap_tmp) {
        int32_t cap = m->cap_tmp * 2;
        int32_t *t = realloc(m->tmp, sizeof *t * (size_t)cap);
        if (!t) {
            m->overflow = OVF_MEM;
            return;
        }
        m->tmp = t;
        m->cap_tmp = cap;
    }
    m->tmp[m->n_tmp++] = id;
}

static void tmp_push(cpulm_grammar_matcher *m, int32_t id) {
    if (m->seen[id] == m->epoch) return;
    m->seen[id] = m->epoch;
    tmp_add(m, id);
}

static int todo_push(cpulm_grammar_matcher *m, int32_t *n, int32_t id) {
    if (*n == m->cap_todo) {
        int32_t cap = m->cap_todo ? m->cap_todo * 2 : 256;
        int32_t *t = realloc(m->todo, sizeof *t * (size_t)cap);
        if (!t) return m->overflow = OVF_MEM, -1;
        m->todo = t;
        m->cap_todo = cap;
    }
    m->todo[(*n)++] = id;
    return 0;
}

/* Adds to tmp every stack reachable from node id whose top is a set (or NIL). seen[] marks
 * the nodes handled since tmp_begin: tops and references alike, each at most once. */
static void expand(cpulm_grammar_matcher *m, int32_t id0) {
    int32_t n = 0;
    if (todo_push(m, &n, id0) < 0) return;
    while (n > 0 && !m->overflow) {
        int32_t id = m->todo[--n];
        while (id != 0 && m->g->elems[m->nodes[id].pos].kind == GR_END)
            id = m->nodes[id].parent;
        if (m->seen[id] == m->epoch) continue;
        m->seen[id] = m->epoch;
        if (id == 0 || m->g->elems[m->nodes[id].pos].kind == GR_SET) {
            tmp_add(m, id);
            continue;
        }
        const gnode nd = m->nodes[id];
        const gr_rule *r = &m->g->rules[m->g->elems[nd.pos].arg];
        int32_t cont = m->g->elems[nd.pos + 1].kind == GR_END
                           ? nd.parent
                           : intern_node(m, nd.pos + 1, nd.parent);
        if (cont < 0) return;
        for (int32_t k = r->n_alts - 1; k >= 0; k--) {
            int32_t top = intern_node(m, m->g->alt_start[r->first_alt + k], cont);
            if (top < 0 || todo_push(m, &n, top) < 0) return;
        }
    }
}

/* ---- DFA states ---- */

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static uint32_t state_hash(const int32_t *s, int32_t n, uint32_t partial, int32_t rem) {
    uint32_t h = hash2(partial, (uint32_t)rem);
    for (int32_t i = 0; i < n; i++)
        h = hash2(h, (uint32_t)s[i]);
    return h;
}

static int rehash_states(cpulm_grammar_matcher *m, uint32_t cap) {
    int32_t *ht = ht_new(cap);
    if (!ht) return -1;
    for (int32_t i = 0; i < m->n_states; i++) {
        const dstate *d = &m->states[i];
        ht_put(ht, cap, state_hash(m->items + d->first, d->n, d->partial, d->rem), i);
    }
    free(m->state_ht);
    m->state_ht = ht;
    m->state_ht_cap = cap;
    return 0;
}

static int grow_items(cpulm_grammar_matcher *m, int64_t need) {
    if (need <= m->cap_items) return 0;
    int64_t cap = m->cap_items * 2;
    while (cap < need)
        cap *= 2;
    int32_t *it = realloc(m->items, sizeof *it * (size_t)cap);
    if (!it) return -1;
    m->items = it;
    m->cap_items = cap;
    return 0;
}

/* Fewest bytes from the stacks in tmp to acceptance. With a partial character the tops
 * are the sets it is being matched against: its rem bytes finish it, then the rest. */
static int32_t tmp_dist(const cpulm_grammar_matcher *m, int32_t rem) {
    int32_t best = GR_INF;
    for (int32_t i = 0; i < m->n_tmp; i++) {
        const gnode *nd = &m->nodes[m->tmp[i]];
        int32_t d = nd->dist;
        if (rem > 0 && m->tmp[i] != 0) {
            int32_t after = m->g->rest[nd->pos + 1], up = m->nodes[nd->parent].dist;
            d = after >= GR_INF - up - rem ? GR_INF : rem + after + up;
        }
        if (d < best) best = d;
    }
    return best;
}

/* The state of the stacks in tmp (sorted here) with the given partial character. */
static int32_t intern_state(cpulm_grammar_matcher *m, uint32_t partial, int32_t rem) {
    if (m->overflow) return DEAD;
    if (m->n_tmp == 0) return DEAD;
    m->work += 4 * (uint64_t)m->n_tmp; /* sort, hash, compare */
    qsort(m->tmp, (size_t)m->n_tmp, sizeof(int32_t), cmp_i32);
    uint32_t mask = m->state_ht_cap - 1, h = state_hash(m->tmp, m->n_tmp, partial, rem) & mask;
    for (int32_t id; (id = m->state_ht[h]) >= 0; h = (h + 1) & mask) {
        const dstate *d = &m->states[id];
        if (d->n == m->n_tmp && d->partial == partial && d->rem == rem &&
            memcmp(m->items + d->first, m->tmp, sizeof(int32_t) * (size_t)d->n) == 0)
            return id;
    }
    if (m->n_states >= MAX_STATES || grow_items(m, m->n_items + m->n_tmp) < 0)
        return m->overflow = OVF_SIZE, DEAD;
    if (m->n_states == m->cap_states) {
        dstate *ns = realloc(m->states, sizeof *ns * (size_t)m->cap_states * 2);
        if (!ns) return m->overflow = OVF_MEM, DEAD;
        m->states = ns;
        m->cap_states *= 2;
    }
    int32_t id = m->n_states++;
    dstate *d = &m->states[id];
    memset(d, 0, sizeof *d);
    d->first = (int32_t)m->n_items;
    d->n = m->n_tmp;
    d->partial = partial;
    d->rem = rem;
    d->accept = rem == 0 && m->tmp[0] == 0; /* sorted: NIL (id 0) comes first */
    d->dist = d->accept ? 0 : tmp_dist(m, rem);
    d->maxd = -1;
    memcpy(m->items + m->n_items, m->tmp, sizeof(int32_t) * (size_t)m->n_tmp);
    m->n_items += m->n_tmp;
    m->state_ht[h] = id;
    m->st.dfa_states = (uint64_t)m->n_states;
    if ((uint32_t)m->n_states * 2 > m->state_ht_cap && rehash_states(m, m->state_ht_cap * 2) < 0)
        return m->overflow = OVF_MEM, DEAD;
    return id;
}

static void tmp_begin(cpulm_grammar_matcher *m) {
    m->n_tmp = 0;
    if (++m->epoch == 0) {
        memset(m->seen, 0, sizeof *m->seen * (size_t)m->cap_nodes);
        m->epoch = 1;
    }
}

/* Stacks of s advanced past one character and expanded: those whose top takes code point
 * cp, or every stack when all is set (each takes any character of the range being read). */
static int32_t step(cpulm_grammar_matcher *m, int32_t s, uint32_t cp, int all) {
    tmp_begin(m);
    const dstate *d = &m->states[s];
    int32_t first = d->first, n = d->n;
    m->work += (uint64_t)n;
    for (int32_t i = 0; i < n; i++) {
        int32_t id = m->items[first + i];
        if (id == 0) continue;
        gnode nd = m->nodes[id];
        if (!all && !gr_set_has(m->g, &m->g->sets[m->g->elems[nd.pos].arg], cp)) continue;
        int32_t next = intern_node(m, nd.pos + 1, nd.parent);
        if (next < 0) return DEAD;
        expand(m, next);
    }
    return intern_state(m, 0, 0);
}

static int32_t step_char(cpulm_grammar_matcher *m, int32_t s, uint32_t cp) {
    return step(m, s, cp, 0);
}

/* A partial character is kept as its bits so far plus its total length in bits 24..26.
 * WILD (bit 28) replaces the bits when every stack takes every character the remaining
 * bytes can still make: the bits no longer matter, and one state stands for all of them
 * (without it, each string position would get a state per lead-byte combination). */
#define PLEN(p)  (((p) >> 24) & 7u)
#define PBITS(p) ((p)&0xFFFFFFu)
#define WILD     (1u << 28)

/* Does set s contain every code point of [lo, hi]? (Sound: one covering range suffices.) */
static int set_covers(const cpulm_grammar *g, const gr_set *s, uint32_t lo, uint32_t hi) {
    if (s->negate) return !cpulm_gr_set_meets(g, &(gr_set){s->first, s->n, 0, {0}}, lo, hi);
    for (int32_t i = 0; i < s->n; i++)
        if (g->ranges[2 * (s->first + i)] <= lo && g->ranges[2 * (s->first + i) + 1] >= hi)
            return 1;
    return 0;
}

/* Every stack of s (all of which take any character of the range) advanced. */
static int32_t step_all(cpulm_grammar_matcher *m, int32_t s) {
    return step(m, s, 0, 1);
}

/* Stacks of s whose top can take some character starting with the bits read so far
 * (exact: overlong forms and surrogates are excluded, as the detokenizer would turn them
 * into U+FFFD). */
static int32_t step_partial(cpulm_grammar_matcher *m, int32_t s, uint32_t partial, int32_t rem) {
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    uint32_t lo = PBITS(partial) << (6 * rem), hi = lo | ((1u << (6 * rem)) - 1);
    if (lo < min_cp[PLEN(partial)]) lo = min_cp[PLEN(partial)];
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo >= 0xD800 && hi <= 0xDFFF) return DEAD;
    if (lo < 0xD800 && hi >= 0xD800 && hi <= 0xDFFF) hi = 0xD7FF;
    if (lo >= 0xD800 && lo <= 0xDFFF) lo = 0xE000;
    if (lo > hi) return DEAD;
    /* every completion valid UTF-8 (no clamp applied) and taken by every kept stack: WILD */
    int exact = lo == PBITS(partial) << (6 * rem) && hi == (lo | ((1u << (6 * rem)) - 1));
    int all_cover = exact;
    tmp_begin(m);
    const dstate *d = &m->states[s];
    m->work += (uint64_t)d->n;
    for (int32_t i = 0; i < d->n; i++) {
        int32_t id = m->items[d->first + i];
        if (id == 0) continue;
        const gr_set *set = &m->g->sets[m->g->elems[m->nodes[id].pos].arg];
        if (!cpulm_gr_set_meets(m->g, set, lo, hi)) continue;
        tmp_push(m, id);
        if (all_cover) all_cover = set_covers(m->g, set, lo, hi);
    }
    if (all_cover) partial = (partial & 0x07000000u) | WILD;
    return intern_state(m, partial, rem);
}

static int32_t compute_trans(cpulm_grammar_matcher *m, int32_t s, uint8_t b) {
    const dstate *d = &m->states[s];
    if (d->rem == 0) {
        if (b < 0x80) return step_char(m, s, b);
        if (b >= 0xC2 && b <= 0xDF) return step_partial(m, s, 2u << 24 | (b & 0x1Fu), 1);
        if (b >= 0xE0 && b <= 0xEF) return step_partial(m, s, 3u << 24 | (b & 0x0Fu), 2);
        if (b >= 0xF0 && b <= 0xF4) return step_partial(m, s, 4u << 24 | (b & 0x07u), 3);
        return DEAD;
    }
    if ((b & 0xC0) != 0x80) return DEAD;
    if (d->partial & WILD) { /* the stacks stay; only the count of bytes to come changes */
        if (d->rem == 1) return step_all(m, s);
        tmp_begin(m);
        for (int32_t i = 0; i < d->n; i++)
            tmp_push(m, m->items[d->first + i]);
        return intern_state(m, d->partial, d->rem - 1);
    }
    uint32_t partial =
        (d->partial & 0xFF000000u) | ((PBITS(d->partial) << 6 | (b & 0x3Fu)) & 0xFFFFFFu);
    if (d->rem == 1) {
        uint32_t cp = PBITS(partial);
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp > 0x10FFFF || cp < min_cp[PLEN(partial)] || (cp >= 0xD800 && cp <= 0xDFFF))
            return DEAD;
        return step_char(m, s, cp);
    }
    return step_partial(m, s, partial, d->rem - 1);
}

/* The transition row of state s, allocated (all UNKNOWN) on first use; NULL on OOM. */
static int32_t *row_of(cpulm_grammar_matcher *m, int32_t s) {
    int32_t *row = m->states[s].trans;
    if (!row) m->work += 64; /* a new row: 1 KiB to allocate and fill */
    if (!row && (row = malloc(256 * sizeof *row))) {
        for (int i = 0; i < 256; i++)
            row[i] = UNKNOWN;
        m->states[s].trans = row;
    }
    return row;
}

static inline int32_t trans(cpulm_grammar_matcher *m, int32_t s, uint8_t b) {
    int32_t *row = row_of(m, s);
    if (!row) return m->overflow = OVF_MEM, DEAD;
    if (row[b] == UNKNOWN) row[b] = compute_trans(m, s, b); /* the row never moves */
    return row[b];
}

/* ---- lifecycle ---- */

static cpulm_grammar_matcher *matcher_alloc(const cpulm_grammar *g, const cpulm_grammar_vocab *v) {
    cpulm_grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->g = g;
    m->v = v;
    m->cap_nodes = 1024;
    m->cap_states = 256;
    m->cap_items = 4096;
    m->cap_tmp = 64;
    m->nodes = malloc(sizeof *m->nodes * (size_t)m->cap_nodes);
    m->seen = calloc((size_t)m->cap_nodes, sizeof *m->seen);
    m->states = malloc(sizeof *m->states * (size_t)m->cap_states);
    m->items = malloc(sizeof *m->items * (size_t)m->cap_items);
    m->tmp = malloc(sizeof *m->tmp * (size_t)m->cap_tmp);
    m->walk = v ? malloc(sizeof *m->walk * (size_t)(v->max_depth + 1)) : NULL;
    m->rows = v ? malloc(sizeof *m->rows * (size_t)(v->max_depth + 1)) : NULL;
    if (!m->nodes || !m->seen || !m->states || !m->items || !m->tmp ||
        (v && (!m->walk || !m->rows)) || rehash_nodes(m, 2048) < 0 || rehash_states(m, 512) < 0) {
        cpulm_grammar_matcher_free(m);
        return NULL;
    }
    m->nodes[0] = (gnode){-1, -1, 0}; /* NIL */
    m->n_nodes = 1;
    return m;
}

/* The start state: the root's alternatives on an empty stack. 0, or -1 with m->overflow. */
static int start_state(cpulm_grammar_matcher *m) {
    const cpulm_grammar *g = m->g;
    m->work = 0;
    tmp_begin(m);
    const gr_rule *r = &g->rules[g->root];
    for (int32_t k = 0; k < r->n_alts && !m->overflow; k++) {
        int32_t top = intern_node(m, g->alt_start[r->first_alt + k], 0);
        if (top >= 0) expand(m, top);
    }
    m->start = m->cur = intern_state(m, 0, 0);
    if (m->start < 0 && !m->overflow) m->overflow = OVF_SIZE; /* no stack at all */
    return m->start < 0 ? -1 : 0;
}

cpulm_grammar_matcher *cpulm_grammar_matcher_new(const cpulm_grammar *g,
                                                 const cpulm_grammar_vocab *v) {
    cpulm_grammar_matcher *m = matcher_alloc(g, v);
    if (m && start_state(m) < 0) {
        cpulm_grammar_matcher_free(m);
        return NULL;
    }
    return m;
}

cpulm_status cpulm_gr_preflight(const cpulm_grammar *g, uint64_t *work, cpulm_error *err) {
    cpulm_grammar_matcher *m = matcher_alloc(g, NULL);
    if (!m) return cpulm_errf(err, CPULM_ERR_NOMEM, "grammar: out of memory");
    start_state(m);
    int why = m->overflow;
    *work += m->work;
    cpulm_grammar_matcher_free(m);
    switch (why) {
    case OVF_NONE: return CPULM_OK;
    case OVF_STACKS:
        return cpulm_errf(err, CPULM_ERR_LIMIT,
                          "grammar: more than %d parse stacks at its start (limit %d: too many "
                          "alternatives can begin the output)",
                          MAX_STACKS, MAX_STACKS);
    case OVF_WORK:
        return cpulm_errf(err, CPULM_ERR_LIMIT,
                          "grammar: its start takes more than %d steps to expand (limit %d)",
                          CPULM_GRAMMAR_MAX_WORK, CPULM_GRAMMAR_MAX_WORK);
    case OVF_SIZE:
        return cpulm_errf(err, CPULM_ERR_LIMIT,
                          "grammar: its start needs more than %d parse "
                          "stack nodes (limit %d)",
                          MAX_NODES, MAX_NODES);
    default: return cpulm_errf(err, CPULM_ERR_NOMEM, "grammar: out of memory");
    }
}

void cpulm_grammar_matcher_free(cpulm_grammar_matcher *m) {
    if (!m) return;
    for (int32_t i = 0; m->states && i < m->n_states; i++) {
        free(m->states[i].trans);
        free(m->states[i].mask);
    }
    free(m->nodes);
    free(m->node_ht);
    free(m->seen);
    free(m->states);
    free(m->state_ht);
    free(m->items);
    free(m->tmp);
    free(m->todo);
    free(m->walk);
    free(m->rows);
    free(m->mask_out);
    free(m->mask_lim);
    free(m);
}

void cpulm_grammar_matcher_reset(cpulm_grammar_matcher *m) {
    m->cur = m->start;
    m->used = 0;
}

void cpulm_grammar_matcher_set_budget(cpulm_grammar_matcher *m, int32_t n_tokens) {
    m->budget = n_tokens > 0 ? n_tokens : 0;
    m->used = 0;
}

int32_t cpulm_grammar_distance(const cpulm_grammar_matcher *m) {
    return m->states[m->cur].dist;
}

/* ---- feeding ---- */

static cpulm_status feed(cpulm_grammar_matcher *m, const char *s, size_t n, int32_t *out) {
    int32_t st = m->cur;
    m->work = 0;
    for (size_t i = 0; i < n; i++) {
        st = trans(m, st, (uint8_t)s[i]);
        if (m->work > m->st.max_work) m->st.max_work = m->work;
        if (st < 0) return m->overflow ? CPULM_ERR_TOO_SMALL : CPULM_ERR_INVALID_ARG;
    }
    *out = st;
    return CPULM_OK;
}

cpulm_status cpulm_grammar_accept_bytes(cpulm_grammar_matcher *m, const char *s, size_t n) {
    int32_t st;
    cpulm_status rc = feed(m, s, n, &st);
    if (rc == CPULM_OK) m->cur = st;
    return rc;
}

cpulm_status cpulm_grammar_accept_token(cpulm_grammar_matcher *m, cpulm_token t) {
    const cpulm_grammar_vocab *v = m->v;
    if (!v || t < 0 || t >= v->n_vocab) return CPULM_ERR_INVALID_ARG;
    if (v->eog[t]) return m->states[m->cur].accept ? CPULM_OK : CPULM_ERR_INVALID_ARG;
    uint32_t len = v->piece_off[t + 1] - v->piece_off[t];
    if (len == 0) return CPULM_ERR_INVALID_ARG;
    cpulm_status rc = cpulm_grammar_accept_bytes(m, v->pieces + v->piece_off[t], len);
    if (rc == CPULM_OK) m->used++;
    return rc;
}

int cpulm_grammar_complete(const cpulm_grammar_matcher *m) {
    return m->states[m->cur].accept;
}

static int state_must_end(const dstate *d) {
    return d->accept && d->n == 1;
}

int cpulm_grammar_must_end(const cpulm_grammar_matcher *m) {
    return state_must_end(&m->states[m->cur]);
}

/* ---- masks ---- */

#define NO_LIMIT INT32_MAX

/* The distances seen at token ends during a walk. */
typedef struct walk_dist {
    int32_t max, min;
} walk_dist;

/* Preorder walk of the trie: one row lookup per node; a dead node skips its subtree.
 * rows[d] caches the transition row of the state at depth d. A token is set when its end
 * state is within limit bytes of acceptance (or must end there); wd gets the range of the
 * distances of every token the grammar allows. */
static void walk_trie(cpulm_grammar_matcher *m, int32_t s0, uint32_t *bits, int32_t limit,
                      walk_dist *wd) {
    const cpulm_grammar_vocab *v = m->v;
    const gr_tnode *nd = v->nodes;
    const int32_t *sorted = v->sorted;
    int32_t **rows = m->rows;
    m->walk[0] = s0;
    wd->max = -1;
    wd->min = GR_INF;
    if (!(rows[0] = row_of(m, s0))) {
        m->overflow = OVF_MEM;
        return;
    }
    uint64_t steps = 0;
    for (int32_t i = 1; i < v->n_nodes;) {
        const gr_tnode x = nd[i];
        int32_t s = rows[x.depth - 1][x.byte];
        if (s == UNKNOWN) {
            s = compute_trans(m, m->walk[x.depth - 1], x.byte);
            rows[x.depth - 1][x.byte] = s;
        }
        steps++;
        if (++m->work > CPULM_GRAMMAR_MAX_WORK && !m->overflow) m->overflow = OVF_WORK;
        if (m->overflow) return;
        if (s < 0) {
            i = x.end;
            continue;
        }
        m->walk[x.depth] = s;
        if (!(rows[x.depth] = row_of(m, s))) {
            m->overflow = OVF_MEM;
            return;
        }
        if (x.tok_n > 0) {
            const dstate *d = &m->states[s];
            if (d->dist > wd->max) wd->max = d->dist;
            if (d->dist < wd->min) wd->min = d->dist;
            if (d->dist <= limit || state_must_end(d))
                for (int32_t k = 0; k < x.tok_n; k++) {
                    int32_t t = sorted[x.tok_first + k];
                    bits[t >> 5] |= 1u << (t & 31);
                }
        }
        i++;
    }
    m->st.trie_steps += steps;
}

static void allow_eog(const cpulm_grammar_vocab *v, uint32_t *bits) {
    for (int32_t t = 0; t < v->n_vocab; t++)
        if (v->eog[t]) bits[t >> 5] |= 1u << (t & 31);
}

/* The full mask of state s, cached when the cache has room (else in mask_out). */
static const uint32_t *full_mask(cpulm_grammar_matcher *m, int32_t s) {
    const cpulm_grammar_vocab *v = m->v;
    if (m->states[s].mask) {
        m->st.mask_cache_hits++;
        return m->states[s].mask;
    }
    size_t words = ((size_t)v->n_vocab + 31) / 32;
    uint32_t *bits = NULL;
    if (m->mask_bytes_cached + words * 4 <= MASK_CACHE_BYTES) bits = calloc(words, 4);
    if (bits)
        m->mask_bytes_cached += words * 4;
    else {
        if (!m->mask_out && !(m->mask_out = malloc(words * 4))) return NULL;
        bits = m->mask_out;
        memset(bits, 0, words * 4);
    }
    walk_dist wd;
    walk_trie(m, s, bits, NO_LIMIT, &wd);
    if (m->overflow) {
        if (bits != m->mask_out) free(bits), m->mask_bytes_cached -= words * 4;
        return NULL;
    }
    m->states[s].maxd = wd.max;
    if (m->states[s].accept) allow_eog(v, bits);
    if (bits != m->mask_out) m->states[s].mask = bits;
    return bits;
}

/* The tokens after which the grammar can still end within limit bytes; if there are none
 * (the budget was too small from the start), those that get closest; if no token leads
 * anywhere finite (a vocabulary without the needed pieces), the full mask. */
static const uint32_t *limited_mask(cpulm_grammar_matcher *m, int32_t s, int32_t limit,
                                    const uint32_t *full) {
    const cpulm_grammar_vocab *v = m->v;
    size_t words = ((size_t)v->n_vocab + 31) / 32;
    if (!m->mask_lim && !(m->mask_lim = malloc(words * 4))) return NULL;
    uint32_t *bits = m->mask_lim;
    memset(bits, 0, words * 4);
    walk_dist wd;
    walk_trie(m, s, bits, limit, &wd);
    if (m->overflow) return NULL;
    if (m->states[s].accept) {
        allow_eog(v, bits);
        return bits;
    }
    uint32_t any = 0;
    for (size_t w = 0; w < words; w++)
        any |= bits[w];
    if (any) return bits;
    if (wd.min >= GR_INF) return full;
    walk_trie(m, s, bits, wd.min, &wd);
    return m->overflow ? NULL : bits;
}

const uint32_t *cpulm_grammar_mask(cpulm_grammar_matcher *m) {
    if (!m->v) return NULL;
    m->st.masks++;
    m->work = 0;
    int32_t s = m->cur;
    const uint32_t *full = full_mask(m, s);
    if (m->work > m->st.max_work) m->st.max_work = m->work;
    if (!full || m->budget == 0) return full;
    /* After this token, left - 1 samples remain, and the last of them may have to be the
     * end token: the bytes still needed (each a token at worst) must fit in left - 2. */
    int32_t limit = m->budget - m->used - 2;
    if (m->states[s].maxd <= limit || m->states[s].dist >= GR_INF) return full;
    m->st.budget_masks++;
    const uint32_t *lim = limited_mask(m, s, limit, full);
    if (m->work > m->st.max_work) m->st.max_work = m->work;
    return lim;
}

_Static_assert(MAX_STACKS == 2048, "the messages below");
#define STR2(x) #x
#define STR(x)  STR2(x)

const char *cpulm_grammar_matcher_failure(const cpulm_grammar_matcher *m, int *client) {
    *client = m->overflow != OVF_MEM;
    switch (m->overflow) {
    case OVF_NONE: return NULL;
    case OVF_STACKS:
        return "grammar: too ambiguous to follow: more than 2048 parse stacks at one point of "
               "the output (limit 2048)";
    case OVF_WORK:
        return "grammar: too ambiguous to follow: more than " STR(
            CPULM_GRAMMAR_MAX_WORK) " steps for one token (limit " STR(CPULM_GRAMMAR_MAX_WORK) ")";
    case OVF_SIZE:
        return "grammar: too large to follow: more parse-stack nodes or states than a matcher "
               "may hold (limits 4194304 and 262144)";
    default: return "out of memory";
    }
}

void cpulm_grammar_matcher_stats(const cpulm_grammar_matcher *m, cpulm_grammar_stats *out) {
    *out = m->st;
    out->dfa_states = (uint64_t)m->n_states;
    out->stack_nodes = (uint64_t)m->n_nodes;
}
