/* pool.c: persistent worker pool; every wait (a worker for work, the barrier, the caller's
 * join, a flag) spins for a bounded time, then blocks in the OS (wait.h: a futex on Linux).
 * Why block rather than yield: on an oversubscribed machine (a load generator beside `serve`,
 * other processes) waiters that yield in a loop stay runnable and take the CPU the late thread
 * needs (perf: ~45% of cycles in sched_yield; serve ran ~10x slower). A blocked waiter leaves
 * the run queue. The spin is time-based, so it means the same on any CPU's pause latency.
 * Memory ordering: the run descriptor (fn, arg, nth) is written before the seq_cst increment
 * of the generation counter; workers read it after an acquire-load of that counter.
 * Sleepers: each word a thread may block on has a count of blocked threads next to it. A
 * waiter increments the count, then rechecks the word; a waker changes the word, then reads
 * the count (all seq_cst), so one of them sees the other (the Dekker pattern) and a waker that
 * reads 0 may skip the system call: the fast path never enters the kernel. */
#define _GNU_SOURCE
#include "pool.h"

#include "base/clock.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "../base/status.h"
#include "wait.h"

#define CACHE_LINE 64
/* Spin budgets before blocking. A worker between runs waits out the caller's sampling and the
 * next step's setup; a barrier, join or flag wait waits for the slowest thread's share. */
#define SPIN_START_NS 1000000
#define SPIN_WAIT_NS  100000
#define SPIN_CHECK    64 /* polls between clock reads */

/* A word threads block on, and how many are blocked on it, on one cache line: the waker
 * already owns the line when it reads the count. */
typedef struct waitword {
    _Alignas(CACHE_LINE) atomic_int v;
    atomic_int sleepers;
} waitword;

typedef struct worker {
    cpulm_pool *pool;
    pthread_t thread;
    int ith;
    int cpu;
} worker;

struct cpulm_pool {
    int n_threads;
    worker *workers; /* [n_threads]; [0] is the caller */
    cpulm_pool_fn fn;
    void *arg;
    int nth;
    waitword generation; /* bumped per run (wraps: atomic arithmetic is defined to) */
    waitword n_done;     /* workers finished with this run */
    waitword barrier_phase;
    waitword await; /* .sleepers: threads blocked in cpulm_pool_await, on any flag */
    _Alignas(CACHE_LINE) atomic_int barrier_count;
    _Alignas(CACHE_LINE) atomic_int stop;
};

static void pin_to(int cpu) {
    if (cpu < 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Polls *w while it equals v, for about budget_ns; returns 1 once it differs (acquire), 0 when
 * the budget is spent. The clock is first read after SPIN_CHECK polls, so short waits never
 * read it. */
static int spin_while(atomic_int *w, int v, long long budget_ns) {
    long long end = 0;
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(w, memory_order_acquire) != v) return 1;
        cpu_relax();
        if (i % SPIN_CHECK) continue;
        long long t = (long long)cpulm_clock_ns();
        if (!end)
            end = t + budget_ns;
        else if (t >= end)
            return 0;
    }
}

/* Returns once *word != v (acquire): spins, then blocks, counted in *sleepers (see top). */
static void wait_while(atomic_int *word, atomic_int *sleepers, int v, long long spin_ns) {
    if (spin_while(word, v, spin_ns)) return;
    while (atomic_load_explicit(word, memory_order_acquire) == v) {
        atomic_fetch_add(sleepers, 1);
        if (atomic_load(word) == v) cpulm_wait_block(word, v);
        atomic_fetch_sub(sleepers, 1);
    }
}

/* After a seq_cst change of *word: wakes its sleepers, if any (no system call otherwise). */
static void wake(atomic_int *word, atomic_int *sleepers) {
    if (atomic_load(sleepers)) cpulm_wait_wake(word);
}

static void *worker_main(void *v) {
    worker *w = v;
    cpulm_pool *p = w->pool;
    pin_to(w->cpu);
    int seen = 0;
    for (;;) {
        wait_while(&p->generation.v, &p->generation.sleepers, seen, SPIN_START_NS);
        seen = atomic_load_explicit(&p->generation.v, memory_order_acquire);
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
        if (w->ith < p->nth) p->fn(p->arg, w->ith, p->nth);
        /* the last worker wakes the caller (blocked in cpulm_pool_run only after its spin) */
        if (atomic_fetch_add(&p->n_done.v, 1) == p->n_threads - 2)
            wake(&p->n_done.v, &p->n_done.sleepers);
    }
    return NULL;
}

cpulm_status cpulm_pool_new(cpulm_pool **out, int n_threads, const int *cpus) {
    *out = NULL;
    if (n_threads < 1) return CPULM_ERR_INVALID_ARG;
    cpulm_pool *p =
        aligned_alloc(CACHE_LINE, (sizeof *p + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE);
    if (!p) return CPULM_ERR_NOMEM;
    *p = (cpulm_pool){.n_threads = n_threads};
    waitword *words[] = {&p->generation, &p->n_done, &p->barrier_phase, &p->await};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
        atomic_init(&words[i]->v, 0);
        atomic_init(&words[i]->sleepers, 0);
    }
    atomic_init(&p->barrier_count, 0);
    atomic_init(&p->stop, 0);
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    if (!p->workers) {
        cpulm_pool_free(p);
        return CPULM_ERR_NOMEM;
    }
    for (int i = 0; i < n_threads; i++) {
        p->workers[i] = (worker){.pool = p, .ith = i, .cpu = cpus ? cpus[i] : -1};
        if (i == 0) continue;
        if (pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]) != 0) {
            p->n_threads = i; /* only join the ones that exist */
            cpulm_pool_free(p);
            return CPULM_ERR_NOMEM;
        }
    }
    *out = p;
    return CPULM_OK;
}

static void wake_all(cpulm_pool *p) {
    atomic_fetch_add(&p->generation.v, 1); /* seq_cst: releases the descriptor (see top) */
    wake(&p->generation.v, &p->generation.sleepers);
}

void cpulm_pool_free(cpulm_pool *p) {
    if (!p) return;
    if (p->workers) {
        atomic_store_explicit(&p->stop, 1, memory_order_release);
        wake_all(p);
        for (int i = 1; i < p->n_threads; i++)
            pthread_join(p->workers[i].thread, NULL);
    }
    free(p->workers);
    free(p);
}

int cpulm_pool_size(const cpulm_pool *p) {
    return p->n_threads;
}

void cpulm_pool_run(cpulm_pool *p, cpulm_pool_fn fn, void *arg, int nth) {
    CPULM_ASSERT(nth >= 1 && nth <= p->n_threads);
    if (p->n_threads == 1) {
        p->nth = 1;
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    p->nth = nth;
    atomic_store_explicit(&p->n_done.v, 0, memory_order_relaxed);
    /* The caller works as thread 0 on its own core for the run only: pinning it for good
     * would shrink its affinity mask, and so the thread count of contexts made later. */
    cpu_set_t saved;
    int pinned =
        p->workers[0].cpu >= 0 && pthread_getaffinity_np(pthread_self(), sizeof saved, &saved) == 0;
    if (pinned) pin_to(p->workers[0].cpu);
    wake_all(p);
    fn(arg, 0, nth);
    int done;
    while ((done = atomic_load_explicit(&p->n_done.v, memory_order_acquire)) < p->n_threads - 1)
        wait_while(&p->n_done.v, &p->n_done.sleepers, done, SPIN_WAIT_NS);
    if (pinned) pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
}

void cpulm_pool_barrier(cpulm_pool *p) {
    int nth = p->nth;
    if (nth <= 1) return;
    int phase = atomic_load_explicit(&p->barrier_phase.v, memory_order_acquire);
    if (atomic_fetch_add_explicit(&p->barrier_count, 1, memory_order_acq_rel) == nth - 1) {
        atomic_store_explicit(&p->barrier_count, 0, memory_order_relaxed);
        atomic_fetch_add(&p->barrier_phase.v, 1);
        wake(&p->barrier_phase.v, &p->barrier_phase.sleepers);
        return;
    }
    wait_while(&p->barrier_phase.v, &p->barrier_phase.sleepers, phase, SPIN_WAIT_NS);
}

void cpulm_pool_await(cpulm_pool *p, atomic_int *flag) {
    wait_while(flag, &p->await.sleepers, 0, SPIN_WAIT_NS);
}

void cpulm_pool_publish(cpulm_pool *p, atomic_int *flag) {
    atomic_store(flag, 1);
    wake(flag, &p->await.sleepers);
}
