/* test_pool.c: the worker pool's flag wait (cpulm_pool_await), as the MoE FFN uses it: one
 * thread finishes some work and publishes a flag; the others wait for that flag alone, not
 * for a barrier, and must then see the work. */
#include <stdatomic.h>

#include "test.h"
#include "threads/pool.h"

#define ROUNDS 200
#define WORDS  256

typedef struct {
    cpulm_pool *pool;
    atomic_int ready[ROUNDS];
    int data[ROUNDS][WORDS];
    atomic_int bad; /* rounds a waiter saw incomplete */
} await_job;

/* Round r: thread r % nth writes the round's words after some busy work, then sets the flag;
 * every other thread waits for the flag and checks the words. Without the wait (or without
 * its acquire) the waiters would read zeros. */
static void await_worker(void *arg, int ith, int nth) {
    await_job *j = arg;
    for (int r = 0; r < ROUNDS; r++) {
        if (r % nth == ith) {
            volatile unsigned spin = 0;
            for (int i = 0; i < 2000 * (r % 7); i++)
                spin += (unsigned)i;
            if (spin == 1u) atomic_fetch_add(&j->bad, 1); /* never (a sum of 0, 1, ...): a use */
            for (int w = 0; w < WORDS; w++)
                j->data[r][w] = r * WORDS + w + 1;
            atomic_store_explicit(&j->ready[r], 1, memory_order_release);
            continue;
        }
        cpulm_pool_await(j->pool, &j->ready[r]);
        for (int w = 0; w < WORDS; w++)
            if (j->data[r][w] != r * WORDS + w + 1) {
                atomic_fetch_add(&j->bad, 1);
                break;
            }
    }
    cpulm_pool_barrier(j->pool);
}

TEST(pool_await_sees_published_work) {
    static await_job j; /* 200 KB: not on the stack */
    REQUIRE(t, cpulm_pool_new(&j.pool, 3, NULL) == CPULM_OK);
    for (int rep = 0; rep < 5; rep++) {
        for (int r = 0; r < ROUNDS; r++) {
            atomic_init(&j.ready[r], 0);
            for (int w = 0; w < WORDS; w++)
                j.data[r][w] = 0;
        }
        atomic_init(&j.bad, 0);
        cpulm_pool_run(j.pool, await_worker, &j, 3);
        CHECK_EQ_INT(t, atomic_load(&j.bad), 0);
        for (int r = 0; r < ROUNDS; r++)
            CHECK_EQ_INT(t, atomic_load(&j.ready[r]), 1);
    }
    cpulm_pool_free(j.pool);
}
