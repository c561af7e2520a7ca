/* test_pool.c: the worker pool's flag wait (cpulm_pool_await), as the MoE FFN uses it: one
 * thread finishes some work and publishes a flag; the others wait for that flag alone, not
 * for a barrier, and must then see the work. And every wait with a thread late by longer than
 * the spin: the waiters must block (not burn the CPU) and be woken. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

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
            cpulm_pool_publish(j->pool, &j->ready[r]);
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

#define LATE_MS 50

typedef struct {
    cpulm_pool *pool;
    atomic_int flag;
    atomic_int after[3]; /* threads past the barrier, the await, and the run's end */
    atomic_int done;     /* the driver thread finished */
} late_job;

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* One run: the last thread is late at the barrier, thread 0 late with the flag, and thread 1
 * late at the run's end (the caller waits in the join). */
static void late_worker(void *arg, int ith, int nth) {
    late_job *j = arg;
    if (ith == nth - 1) sleep_ms(LATE_MS);
    cpulm_pool_barrier(j->pool);
    atomic_fetch_add(&j->after[0], 1);
    if (ith == 0) {
        sleep_ms(LATE_MS);
        cpulm_pool_publish(j->pool, &j->flag);
    } else {
        cpulm_pool_await(j->pool, &j->flag);
    }
    atomic_fetch_add(&j->after[1], 1);
    if (ith == 1) sleep_ms(LATE_MS);
}

static void *late_driver(void *arg) {
    late_job *j = arg;
    cpulm_pool_run(j->pool, late_worker, j, 3);
    atomic_fetch_add(&j->after[2], 1);
    sleep_ms(LATE_MS); /* the workers block between runs; the next run must wake them */
    atomic_store(&j->flag, 0);
    cpulm_pool_run(j->pool, late_worker, j, 3);
    atomic_fetch_add(&j->after[2], 1);
    atomic_store(&j->done, 1);
    return NULL;
}

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A waiter that is never woken hangs this run: the watchdog fails the test after 2 s instead
 * (and leaks the stuck pool). Waiters that spin or yield through the 7 x 50 ms of lateness
 * instead of blocking take ~330 ms of CPU on an idle machine (measured with the old pool's
 * spin-then-yield); blocked ones take a few ms. */
TEST(pool_late_thread_wakes_blocked_waiters) {
    static late_job j;
    atomic_init(&j.flag, 0);
    atomic_init(&j.done, 0);
    for (int i = 0; i < 3; i++)
        atomic_init(&j.after[i], 0);
    REQUIRE(t, cpulm_pool_new(&j.pool, 3, NULL) == CPULM_OK);
    pthread_t driver;
    double cpu0 = cpu_ms();
    REQUIRE(t, pthread_create(&driver, NULL, late_driver, &j) == 0);
    for (int ms = 0; ms < 2000 && !atomic_load(&j.done); ms++)
        sleep_ms(1);
    double cpu = cpu_ms() - cpu0;
    REQUIRE(t, atomic_load(&j.done)); /* else stuck: do not join or free */
    pthread_join(driver, NULL);
    CHECK_EQ_INT(t, atomic_load(&j.after[0]), 6);
    CHECK_EQ_INT(t, atomic_load(&j.after[1]), 6);
    CHECK_EQ_INT(t, atomic_load(&j.after[2]), 2);
    /* 150 ms: room for qemu's translation and the sanitizers' thread start-up */
    if (!(cpu < 150)) fprintf(stderr, "  waiters used %.0f ms of CPU\n", cpu);
    CHECK(t, cpu < 150);
    cpulm_pool_free(j.pool);
}
