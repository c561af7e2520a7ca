/* test_prep.c: the request-preparation workers (src/server/prep.c): a light job is never
 * queued behind heavy ones, cancelling a queued job skips it and a running one stops at its
 * next check, the per-job deadline, and a bounded stop that leaves a stuck worker alone. */
#define _GNU_SOURCE
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/prep.h"
#include "test.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct spin_job {
    cpulm_prep_job base;
    double spin_s;     /* how long the job works */
    int ignore_cancel; /* an uninterruptible piece of work */
    atomic_int ran, stopped_early;
    double t_done; /* when it came back (the test's thread) */
} spin_job;

static void spin_run(cpulm_prep_job *b) {
    spin_job *j = (spin_job *)b;
    atomic_store(&j->ran, 1);
    double end = now_s() + j->spin_s;
    while (now_s() < end) {
        if (!j->ignore_cancel && cpulm_prep_stopped(b)) {
            atomic_store(&j->stopped_early, 1);
            return;
        }
        usleep(1000);
    }
}

static void spin_destroy(cpulm_prep_job *b) {
    (void)b; /* the jobs live on the test's stack */
}

static void spin_init(spin_job *j, uint64_t id, int heavy, double spin_s) {
    memset(j, 0, sizeof *j);
    j->base.id = id;
    j->base.heavy = heavy;
    j->base.run = spin_run;
    j->base.destroy = spin_destroy;
    j->spin_s = spin_s;
}

/* Takes finished jobs (stamping t_done) until `want` of them came back or timeout_s. */
static int collect(cpulm_prep *p, int want, double timeout_s) {
    int got = 0;
    double end = now_s() + timeout_s;
    while (got < want && now_s() < end) {
        struct pollfd pf = {.fd = cpulm_prep_event_fd(p), .events = POLLIN};
        poll(&pf, 1, 10);
        for (cpulm_prep_job *j = cpulm_prep_drain(p), *n; j; j = n) {
            n = j->next;
            ((spin_job *)j)->t_done = now_s();
            got++;
        }
    }
    return got;
}

TEST(prep_light_jobs_pass_heavy_ones) {
    cpulm_prep *p = cpulm_prep_new(2, NULL);
    REQUIRE(t, p);
    spin_job h[3], l;
    for (int i = 0; i < 3; i++) {
        spin_init(&h[i], (uint64_t)(10 + i), 1, 30.0);
        cpulm_prep_push(p, &h[i].base);
    }
    spin_init(&l, 20, 0, 0.0);
    double t0 = now_s();
    cpulm_prep_push(p, &l.base);
    CHECK_EQ_INT(t, collect(p, 1, 10.0), 1);
    CHECK(t, l.t_done > 0 && l.t_done - t0 < 1.0); /* not after 30 s of heavy work */
    /* the heavy worker takes its first job in its own time (the light one may be done
     * before it woke, under the sanitizers): wait for it, bounded */
    cpulm_prep_stats st;
    double until = now_s() + 10.0;
    do {
        cpulm_prep_get_stats(p, &st);
    } while (st.n_run_heavy < 1 && now_s() < until && usleep(1000) == 0);
    CHECK_EQ_INT(t, st.n_workers, 2);
    CHECK_EQ_INT(t, st.n_run_heavy, 1); /* one worker stays free for light jobs */
    CHECK_EQ_INT(t, st.n_heavy, 2);
    /* cancelling: the queued heavy jobs come back without running, the running one stops
     * at its next check */
    cpulm_prep_cancel(p, 11);
    cpulm_prep_cancel(p, 12);
    cpulm_prep_cancel(p, 10);
    t0 = now_s();
    CHECK_EQ_INT(t, collect(p, 3, 10.0), 3);
    for (int i = 0; i < 3; i++)
        CHECK(t, h[i].t_done > 0 && h[i].t_done - t0 < 1.0);
    CHECK(t, atomic_load(&h[0].ran) + atomic_load(&h[1].ran) + atomic_load(&h[2].ran) == 1);
    CHECK(t, atomic_load(&h[0].stopped_early) || atomic_load(&h[1].stopped_early) ||
                 atomic_load(&h[2].stopped_early));
    CHECK_EQ_INT(t, cpulm_prep_free(p, 5.0), 1);
}

/* One worker asked for (a server with -t 1) still starts both lanes: a heavy job runs. */
TEST(prep_one_worker_asked_starts_both_lanes) {
    cpulm_prep *p = cpulm_prep_new(1, NULL);
    REQUIRE(t, p);
    cpulm_prep_stats st;
    cpulm_prep_get_stats(p, &st);
    CHECK_EQ_INT(t, st.n_workers, 2);
    spin_job h;
    spin_init(&h, 30, 1, 0.0);
    cpulm_prep_push(p, &h.base);
    CHECK_EQ_INT(t, collect(p, 1, 10.0), 1);
    CHECK(t, atomic_load(&h.ran) == 1);
    CHECK_EQ_INT(t, cpulm_prep_free(p, 5.0), 1);
}

TEST(prep_deadline_and_cancel_all) {
    cpulm_prep *p = cpulm_prep_new(2, NULL);
    REQUIRE(t, p);
    spin_job a, b;
    spin_init(&a, 1, 0, 30.0);
    a.base.deadline = now_s() + 0.1;
    spin_init(&b, 2, 1, 30.0);
    double t0 = now_s();
    cpulm_prep_push(p, &a.base);
    cpulm_prep_push(p, &b.base);
    CHECK_EQ_INT(t, collect(p, 1, 10.0), 1);
    CHECK(t, a.t_done > 0 && a.t_done - t0 < 1.0 && atomic_load(&a.stopped_early));
    /* the heavy worker may not have taken b yet (qemu, sanitizers): a queued job comes back
     * without running, so wait (bounded) until it runs to test the running-job stop */
    for (int i = 0; i < 5000 && !atomic_load(&b.ran); i++)
        usleep(1000);
    CHECK(t, atomic_load(&b.ran) == 1);
    cpulm_prep_cancel_all(p);
    t0 = now_s();
    CHECK_EQ_INT(t, collect(p, 1, 10.0), 1);
    CHECK(t, b.t_done > 0 && b.t_done - t0 < 1.0 && atomic_load(&b.stopped_early));
    CHECK_EQ_INT(t, cpulm_prep_free(p, 5.0), 1);
}

/* A worker stuck in uninterruptible work: the bounded stop gives up after its timeout and
 * frees nothing (the caller leaves process exit to end it); once the work ends, a second
 * call frees everything. */
TEST(prep_bounded_stop) {
    cpulm_prep *p = cpulm_prep_new(2, NULL);
    REQUIRE(t, p);
    spin_job a;
    spin_init(&a, 1, 0, 1.0);
    a.ignore_cancel = 1;
    cpulm_prep_push(p, &a.base);
    for (int i = 0; i < 5000 && !atomic_load(&a.ran); i++)
        usleep(1000);
    double t0 = now_s();
    CHECK_EQ_INT(t, cpulm_prep_free(p, 0.2), 0);
    double dt = now_s() - t0;
    CHECK(t, dt >= 0.15 && dt < 0.9);
    CHECK_EQ_INT(t, cpulm_prep_free(p, 30.0), 1);
}

/* Light jobs keep both workers busy: a heavy job still runs on the second one as soon as it
 * is free, not after every light job queued before it. */
TEST(prep_heavy_jobs_not_starved) {
    cpulm_prep *p = cpulm_prep_new(2, NULL);
    REQUIRE(t, p);
    spin_job l[6], h;
    for (int i = 0; i < 6; i++) {
        spin_init(&l[i], (uint64_t)(1 + i), 0, 0.2);
        cpulm_prep_push(p, &l[i].base);
    }
    spin_init(&h, 100, 1, 0.0);
    cpulm_prep_push(p, &h.base);
    CHECK_EQ_INT(t, collect(p, 7, 30.0), 7);
    int after = 0; /* light jobs that came back before the heavy one */
    for (int i = 0; i < 6; i++)
        after += l[i].t_done < h.t_done;
    CHECK(t, after <= 2);
    CHECK_EQ_INT(t, cpulm_prep_free(p, 5.0), 1);
}
