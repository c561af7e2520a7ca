/* work.h: work sharing of the forward pass (used by forward.c and attention.c).
 *
 * Work items (slices of a matmul, attention heads) are claimed from one shared counter rather
 * than split evenly in advance, so a thread the OS has descheduled (another process on its
 * core) does not hold the others up: the running threads take its share. Items are numbered
 * continuously over a pass; every thread walks the same sequence of jobs, so each knows where
 * a job's items start (its own base), and a claim is a compare-and-swap bounded by the job's
 * end, so it never takes an item of the next job. Which thread computes an item does not
 * change its arithmetic: results stay independent of the thread count. */
#ifndef CPULM_MODEL_WORK_H
#define CPULM_MODEL_WORK_H

#include "../runtime/context.h"

static inline int cpulm_work_claim(cpulm_ctx *c, uint64_t end, uint64_t *item) {
    uint_fast64_t cur = atomic_load_explicit(&c->work_ctr, memory_order_relaxed);
    while (cur < end)
        if (atomic_compare_exchange_weak_explicit(&c->work_ctr, &cur, cur + 1, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *item = cur;
            return 1;
        }
    return 0;
}

/* Starts a job of n items on thread ith; returns the job's first item number. */
static inline uint64_t cpulm_work_begin(cpulm_ctx *c, int ith, uint64_t n) {
    uint64_t first = c->work_base[ith].v;
    c->work_base[ith].v = first + n;
    return first;
}

#endif
