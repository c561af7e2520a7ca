/* pool.h: persistent worker threads for the forward pass.
 *
 * cpulm_pool_run(p, fn, arg, nth) runs fn(arg, ith, nth) on nth threads at once (the caller
 * is ith = 0) and returns when all have finished. Inside fn, threads meet at
 * cpulm_pool_barrier(p), so one run covers a whole forward pass with no wake-up per op (as
 * ggml does). Every wait (workers for a run, the barrier, the join, cpulm_pool_await) spins
 * for a bounded time, then blocks in the OS (a futex on Linux), so an oversubscribed machine
 * slows down instead of collapsing: a blocked waiter leaves the CPU to the late thread.
 * Threads can be pinned to CPUs (one per physical core, see topo.h).
 * A pool is driven by one thread at a time.
 */
#ifndef CPULM_THREADS_POOL_H
#define CPULM_THREADS_POOL_H

#include <stdatomic.h>

#include "cpulm.h"

typedef struct cpulm_pool cpulm_pool;
typedef void (*cpulm_pool_fn)(void *arg, int ith, int nth);

/* n_threads >= 1 total threads (n_threads - 1 workers are created). cpus (may be NULL):
 * cpus[i] is the CPU thread i is pinned to, -1 for no pinning. */
cpulm_status cpulm_pool_new(cpulm_pool **out, int n_threads, const int *cpus);
void cpulm_pool_free(cpulm_pool *p); /* NULL is a no-op */
int cpulm_pool_size(const cpulm_pool *p);
/* nth <= cpulm_pool_size(p). */
void cpulm_pool_run(cpulm_pool *p, cpulm_pool_fn fn, void *arg, int nth);
/* All nth threads of the current run must call it the same number of times. */
void cpulm_pool_barrier(cpulm_pool *p);
/* Inside a run: waits until *flag != 0 (acquire), spinning then blocking as the barrier does;
 * another thread of the run must be going to set it with cpulm_pool_publish (a plain store
 * would not wake a blocked waiter) without waiting on the caller. */
void cpulm_pool_await(cpulm_pool *p, atomic_int *flag);
/* Sets *flag = 1 (release) and wakes the threads blocked on it in cpulm_pool_await. */
void cpulm_pool_publish(cpulm_pool *p, atomic_int *flag);

#endif
