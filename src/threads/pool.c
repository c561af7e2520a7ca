/* pool.c: persistent worker pool with spin-then-sleep start and a spinning barrier.
 * Memory ordering: the run descriptor (fn, arg, nth) is written before the release-store
 * of the generation counter; workers read it after an acquire-load of that counter. */
#define _GNU_SOURCE
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "../base/status.h"

#define CACHE_LINE   64
#define SPIN_START   20000 /* polls before a worker sleeps: about 10-50 us */
#define SPIN_BARRIER 4000  /* polls before a barrier waiter yields its CPU */

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
    _Alignas(CACHE_LINE) atomic_uint generation; /* bumped per run */
    _Alignas(CACHE_LINE) atomic_int n_done;      /* workers finished with this run */
    _Alignas(CACHE_LINE) atomic_int barrier_count;
    _Alignas(CACHE_LINE) atomic_uint barrier_phase;
    _Alignas(CACHE_LINE) atomic_int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_sleeping;
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

/* Waits until generation differs from seen; returns the new generation. */
static unsigned wait_for_work(cpulm_pool *p, unsigned seen) {
    for (int i = 0; i < SPIN_START; i++) {
        unsigned g = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (g != seen) return g;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    unsigned g;
    while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen) {
        p->n_sleeping++;
        pthread_cond_wait(&p->cv, &p->mu);
        p->n_sleeping--;
    }
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *worker_main(void *v) {
    worker *w = v;
    cpulm_pool *p = w->pool;
    pin_to(w->cpu);
    unsigned seen = 0;
    for (;;) {
        seen = wait_for_work(p, seen);
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
        if (w->ith < p->nth) p->fn(p->arg, w->ith, p->nth);
        atomic_fetch_add_explicit(&p->n_done, 1, memory_order_acq_rel);
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
    atomic_init(&p->generation, 0);
    atomic_init(&p->n_done, 0);
    atomic_init(&p->barrier_count, 0);
    atomic_init(&p->barrier_phase, 0);
    atomic_init(&p->stop, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
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
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_acq_rel);
    if (p->n_sleeping) pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void cpulm_pool_free(cpulm_pool *p) {
    if (!p) return;
    if (p->workers) {
        atomic_store_explicit(&p->stop, 1, memory_order_release);
        wake_all(p);
        for (int i = 1; i < p->n_threads; i++)
            pthread_join(p->workers[i].thread, NULL);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
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
    atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
    /* The caller works as thread 0 on its own core for the run only: pinning it for good
     * would shrink its affinity mask, and so the thread count of contexts made later. */
    cpu_set_t saved;
    int pinned =
        p->workers[0].cpu >= 0 && pthread_getaffinity_np(pthread_self(), sizeof saved, &saved) == 0;
    if (pinned) pin_to(p->workers[0].cpu);
    /* the mutex in wake_all orders the descriptor writes before the generation bump */
    wake_all(p);
    fn(arg, 0, nth);
    int spins = 0;
    while (atomic_load_explicit(&p->n_done, memory_order_acquire) < p->n_threads - 1) {
        if (++spins < SPIN_BARRIER)
            cpu_relax();
        else
            sched_yield();
    }
    if (pinned) pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
}

void cpulm_pool_barrier(cpulm_pool *p) {
    int nth = p->nth;
    if (nth <= 1) return;
    unsigned phase = atomic_load_explicit(&p->barrier_phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&p->barrier_count, 1, memory_order_acq_rel) == nth - 1) {
        atomic_store_explicit(&p->barrier_count, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->barrier_phase, 1, memory_order_release);
        return;
    }
    int spins = 0;
    while (atomic_load_explicit(&p->barrier_phase, memory_order_acquire) == phase) {
        if (++spins < SPIN_BARRIER)
            cpu_relax();
        else
            sched_yield();
    }
}

void cpulm_pool_await(cpulm_pool *p, atomic_int *flag) {
    (void)p; /* the pool's policy, not its state: same spin-then-yield as the barrier */
    int spins = 0;
    while (!atomic_load_explicit(flag, memory_order_acquire)) {
        if (++spins < SPIN_BARRIER)
            cpu_relax();
        else
            sched_yield();
    }
}
