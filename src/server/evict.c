/* evict.c: the eviction choice (see evict.h). One pass tallies each client's weight in an
 * open-addressing table (entries of an earlier pass are told apart by a generation stamp,
 * so nothing is cleared between passes); a second pass ranks the candidates. */
#include "server/evict.h"

#include <stdlib.h>
#include <string.h>

typedef struct client {
    uint8_t key[16];
    uint64_t weight;
    uint32_t gen; /* the entry belongs to the pass with this generation */
} client;

struct cpulm_evict {
    client *tab;
    uint32_t mask, gen;
    int32_t n_weighty; /* clients of this pass with weight > 0 */
};

cpulm_evict *cpulm_evict_new(int32_t max_conns) {
    cpulm_evict *e = calloc(1, sizeof *e);
    uint32_t size = 16;
    while (size < 2u * (uint32_t)max_conns + 2) /* never more than half full */
        size *= 2;
    if (e) e->tab = calloc(size, sizeof *e->tab);
    if (!e || !e->tab) {
        cpulm_evict_free(e);
        return NULL;
    }
    e->mask = size - 1;
    return e;
}

void cpulm_evict_free(cpulm_evict *e) {
    if (!e) return;
    free(e->tab);
    free(e);
}

static uint32_t key_hash(const uint8_t *k) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < 16; i++)
        h = (h ^ k[i]) * 16777619u;
    return h;
}

/* The entry of key in this pass, created with weight 0 if new. */
static client *client_of(cpulm_evict *e, const uint8_t *key) {
    for (uint32_t i = key_hash(key) & e->mask;; i = (i + 1) & e->mask) {
        client *c = &e->tab[i];
        if (c->gen != e->gen) {
            memcpy(c->key, key, 16);
            c->weight = 0;
            c->gen = e->gen;
            return c;
        }
        if (memcmp(c->key, key, 16) == 0) return c;
    }
}

static uint64_t weight_of(const cpulm_evict_query *q, const cpulm_conn *c) {
    return q->kind == CPULM_EVICT_SLOT ? 1 : c->charged;
}

static int is_candidate(const cpulm_evict_query *q, const cpulm_conn *c) {
    if (c == q->asking) return 0;
    if (c->state == CPULM_CONN_CLOSING) return q->kind == CPULM_EVICT_SLOT || c->charged > 0;
    if (c->state != CPULM_CONN_READING || c->woff < c->wbuf.len) return 0;
    if (q->kind == CPULM_EVICT_SLOT) return 1;
    return c->charged > 0 && q->now - c->t_active >= q->stall_s;
}

static void tally(cpulm_evict *e, cpulm_conn *const *conns, int32_t n, const cpulm_evict_query *q) {
    if (++e->gen == 0) { /* wrapped: stamps of 2^32 passes ago would look current */
        memset(e->tab, 0, (size_t)(e->mask + 1) * sizeof *e->tab);
        e->gen = 1;
    }
    e->n_weighty = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!conns[i]) continue;
        uint64_t w = weight_of(q, conns[i]);
        client *cl = client_of(e, conns[i]->peer);
        e->n_weighty += cl->weight == 0 && w > 0;
        cl->weight += w;
    }
}

typedef struct rank {
    int closing, own_first;
    uint64_t weight;
    double t_active;
} rank;

static int outranks(const rank *a, const rank *b) {
    if (a->closing != b->closing) return a->closing > b->closing;
    if (a->own_first != b->own_first) return a->own_first > b->own_first;
    if (a->weight != b->weight) return a->weight > b->weight;
    return a->t_active < b->t_active;
}

int32_t cpulm_evict_pick(cpulm_evict *e, cpulm_conn *const *conns, int32_t n,
                         const cpulm_evict_query *q) {
    tally(e, conns, n, q);
    client *own = NULL;
    int own_over = 0;
    if (q->key) {
        own = client_of(e, q->key);
        uint64_t n_clients = (uint64_t)e->n_weighty + (own->weight == 0);
        own_over = own->weight >= q->limit / n_clients;
    }
    int32_t best = -1;
    rank rb = {0, 0, 0, 0.0};
    for (int32_t i = 0; i < n; i++) {
        const cpulm_conn *c = conns[i];
        if (!c || !is_candidate(q, c)) continue;
        client *cl = client_of(e, c->peer);
        if (q->own_only && cl != own) continue;
        rank r = {c->state == CPULM_CONN_CLOSING, own_over && cl == own, cl->weight, c->t_active};
        if (best < 0 || outranks(&r, &rb)) {
            best = i;
            rb = r;
        }
    }
    return best;
}
