/* evict.h: which connection the server closes when it must make room (issue #25): a slot
 * in a full connection table, or memory of the request-body budget (conn.h). A pure choice
 * over the connection table; server.c does the closing.
 *
 * Fairness: connections are grouped by client (conn.h's peer key). A client that holds at
 * least its share (the limit divided among the clients present, the asking one included)
 * loses its own connections first; otherwise the client holding the most loses one. Within
 * a client the least recently active goes first (t_active: the last byte received or sent,
 * so a body that stopped arriving is older than one still flowing). Connections already
 * shutting down (CLOSING) go before any other.
 */
#ifndef CPULM_SERVER_EVICT_H
#define CPULM_SERVER_EVICT_H

#include <stdint.h>

#include "server/conn.h"

typedef struct cpulm_evict cpulm_evict;

typedef enum cpulm_evict_kind {
    /* a connection slot. Weight: connections. Candidates: no request being answered and
     * nothing left to send (idle, a head still arriving, or a body still arriving) */
    CPULM_EVICT_SLOT,
    /* body budget. Weight: budget bytes held. Candidates: hold budget and, unless CLOSING,
     * wait for bytes that have not come for stall_s (a request being answered is never one) */
    CPULM_EVICT_BUDGET,
} cpulm_evict_kind;

typedef struct cpulm_evict_query {
    cpulm_evict_kind kind;
    const uint8_t *key;       /* the asking client (16 bytes); NULL: nobody in particular */
    const cpulm_conn *asking; /* never chosen; NULL for a connection not in the table yet */
    uint64_t limit;           /* SLOT: the table's size; BUDGET: the budget's limit */
    int own_only;             /* only the asking client's own connections */
    double now, stall_s;      /* BUDGET */
} cpulm_evict_query;

/* Scratch space for tables of up to max_conns connections. NULL when out of memory. */
cpulm_evict *cpulm_evict_new(int32_t max_conns);
void cpulm_evict_free(cpulm_evict *e); /* NULL is a no-op */

/* Index in conns[0..n) (NULL entries are free slots) of the connection to close, or -1 when
 * no connection may be. O(n). */
int32_t cpulm_evict_pick(cpulm_evict *e, cpulm_conn *const *conns, int32_t n,
                         const cpulm_evict_query *q);

#endif
