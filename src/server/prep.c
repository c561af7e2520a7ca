/* prep.c: the request-preparation workers (see prep.h).
 *
 * One mutex guards the two lanes' queues, the finished queue and what each worker runs
 * (so cancel can reach a running job). Jobs never run under the mutex. Stopping waits for
 * the workers with a deadline: a worker counts itself out when it leaves its loop, so the
 * joins that follow cannot block.
 */
#define _GNU_SOURCE
#include "server/prep.h"

#include "base/clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "server/deadline.h"

typedef struct fifo {
    cpulm_prep_job *head, *tail;
    int32_t n;
} fifo;

typedef struct worker {
    struct cpulm_prep *p;
    pthread_t thread;
    cpulm_prep_job *job; /* running, or NULL */
} worker;

struct cpulm_prep {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* work or stop for the workers */
    pthread_cond_t exit_cv; /* a worker left its loop */
    fifo light, heavy, done;
    worker w[CPULM_PREP_MAX_WORKERS];
    int32_t n_workers, n_started, n_exited;
    int32_t n_running, n_run_heavy;
    uint64_t n_done, n_cancelled;
    int stop;
    int efd;
};

static void fifo_push(fifo *q, cpulm_prep_job *j) {
    j->next = NULL;
    if (q->tail)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
    q->n++;
}

static cpulm_prep_job *fifo_pop(fifo *q) {
    cpulm_prep_job *j = q->head;
    if (!j) return NULL;
    q->head = j->next;
    if (!q->head) q->tail = NULL;
    q->n--;
    j->next = NULL;
    return j;
}

/* Unlinks the job with this id; NULL when it is not queued here. */
static cpulm_prep_job *fifo_take(fifo *q, uint64_t id) {
    for (cpulm_prep_job **pp = &q->head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next) {
        cpulm_prep_job *j = *pp;
        if (j->id != id) continue;
        *pp = j->next;
        if (q->tail == j) q->tail = prev;
        q->n--;
        j->next = NULL;
        return j;
    }
    return NULL;
}

/* mu held: j is finished (run or cancelled); the I/O thread is told. */
static void finished(cpulm_prep *p, cpulm_prep_job *j) {
    fifo_push(&p->done, j);
    uint64_t one = 1;
    ssize_t w = write(p->efd, &one, sizeof one);
    (void)w; /* EAGAIN only when the counter is saturated, i.e. already readable */
}

/* mu held: the next job worker w may run. Worker 0 runs light jobs only, so one is always
 * there for them; the others take heavy jobs first (so a stream of light ones cannot starve
 * them), then light ones. */
static cpulm_prep_job *next_job(cpulm_prep *p, const worker *w, int *heavy) {
    *heavy = 0;
    if (w == &p->w[0]) return fifo_pop(&p->light);
    cpulm_prep_job *j = fifo_pop(&p->heavy);
    if (j) *heavy = 1;
    return j ? j : fifo_pop(&p->light);
}

static void *worker_main(void *arg) {
    worker *w = arg;
    cpulm_prep *p = w->p;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        int heavy = 0;
        cpulm_prep_job *j = NULL;
        while (!p->stop && !(j = next_job(p, w, &heavy)))
            pthread_cond_wait(&p->cv, &p->mu);
        if (!j) break;
        w->job = j;
        p->n_running++;
        p->n_run_heavy += heavy;
        pthread_mutex_unlock(&p->mu);
        if (!atomic_load(&j->cancel)) j->run(j);
        pthread_mutex_lock(&p->mu);
        w->job = NULL;
        p->n_running--;
        p->n_run_heavy -= heavy;
        p->n_done++;
        finished(p, j);
    }
    p->n_exited++;
    pthread_cond_broadcast(&p->exit_cv);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* n asked for (the server passes its decode threads: the physical cores by default), kept
 * within 2 (one light, one heavy lane) and CPULM_PREP_MAX_WORKERS. */
static int32_t clamp_workers(int32_t n) {
    return n < 2 ? 2 : n > CPULM_PREP_MAX_WORKERS ? CPULM_PREP_MAX_WORKERS : n;
}

cpulm_prep *cpulm_prep_new(int32_t n_workers, cpulm_error *err) {
    cpulm_prep *p = calloc(1, sizeof *p);
    if (!p) {
        cpulm_errf(err, CPULM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    p->n_workers = clamp_workers(n_workers); /* one light, at least one heavy */
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_cond_init(&p->exit_cv, NULL);
    p->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    for (int32_t i = 0; p->efd >= 0 && i < p->n_workers; i++) {
        p->w[i].p = p;
        if (pthread_create(&p->w[i].thread, NULL, worker_main, &p->w[i]) != 0) break;
        p->n_started++;
    }
    if (p->n_started < p->n_workers) {
        cpulm_errf(err, CPULM_ERR_IO, "cannot start the request workers");
        cpulm_prep_free(p, 60.0);
        return NULL;
    }
    return p;
}

static void free_list(cpulm_prep_job *j) {
    while (j) {
        cpulm_prep_job *next = j->next;
        j->destroy(j);
        j = next;
    }
}

/* mu held: cancels the running jobs and everything queued (into done). */
static void cancel_all_locked(cpulm_prep *p) {
    for (int32_t i = 0; i < p->n_started; i++)
        if (p->w[i].job) atomic_store(&p->w[i].job->cancel, 1), p->n_cancelled++;
    cpulm_prep_job *j;
    while ((j = fifo_pop(&p->light)) || (j = fifo_pop(&p->heavy))) {
        atomic_store(&j->cancel, 1);
        p->n_cancelled++;
        finished(p, j);
    }
}

/* mu held: waits until every started worker left its loop, at most until deadline (a
 * CLOCK_REALTIME time, as pthread_cond_timedwait wants). Returns 1 if they all did. */
static int wait_exited(cpulm_prep *p, const struct timespec *deadline) {
    while (p->n_exited < p->n_started)
        if (pthread_cond_timedwait(&p->exit_cv, &p->mu, deadline) == ETIMEDOUT)
            return p->n_exited == p->n_started;
    return 1;
}

int cpulm_prep_free(cpulm_prep *p, double timeout_s) {
    if (!p) return 1;
    struct timespec dl = cpulm_deadline_in(timeout_s);
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    cancel_all_locked(p);
    pthread_cond_broadcast(&p->cv);
    int all = wait_exited(p, &dl);
    pthread_mutex_unlock(&p->mu);
    if (!all) return 0; /* a worker is stuck in a job: leave everything to process exit */
    for (int32_t i = 0; i < p->n_started; i++)
        pthread_join(p->w[i].thread, NULL); /* each has already returned */
    free_list(p->done.head);
    if (p->efd >= 0) close(p->efd);
    pthread_cond_destroy(&p->exit_cv);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
    return 1;
}

void cpulm_prep_push(cpulm_prep *p, cpulm_prep_job *j) {
    pthread_mutex_lock(&p->mu);
    if (atomic_load(&j->cancel)) {
        finished(p, j);
    } else {
        fifo_push(j->heavy ? &p->heavy : &p->light, j);
        pthread_cond_broadcast(&p->cv); /* a worker that may take this lane must wake */
    }
    pthread_mutex_unlock(&p->mu);
}

void cpulm_prep_cancel(cpulm_prep *p, uint64_t id) {
    pthread_mutex_lock(&p->mu);
    cpulm_prep_job *j = fifo_take(&p->light, id);
    if (!j) j = fifo_take(&p->heavy, id);
    if (j) {
        atomic_store(&j->cancel, 1);
        p->n_cancelled++;
        finished(p, j);
    }
    for (int32_t i = 0; !j && i < p->n_started; i++)
        if (p->w[i].job && p->w[i].job->id == id) {
            atomic_store(&p->w[i].job->cancel, 1);
            p->n_cancelled++;
            break;
        }
    pthread_mutex_unlock(&p->mu);
}

void cpulm_prep_cancel_all(cpulm_prep *p) {
    pthread_mutex_lock(&p->mu);
    cancel_all_locked(p);
    pthread_mutex_unlock(&p->mu);
}

int cpulm_prep_stopped(cpulm_prep_job *j) {
    if (atomic_load_explicit(&j->cancel, memory_order_relaxed)) return 1;
    return j->deadline > 0 && cpulm_clock_s() > j->deadline;
}

int cpulm_prep_stopped_cb(void *job) {
    return cpulm_prep_stopped(job);
}

int cpulm_prep_event_fd(const cpulm_prep *p) {
    return p->efd;
}

cpulm_prep_job *cpulm_prep_drain(cpulm_prep *p) {
    uint64_t v;
    ssize_t r = read(p->efd, &v, sizeof v);
    (void)r;
    pthread_mutex_lock(&p->mu);
    cpulm_prep_job *j = p->done.head;
    p->done.head = p->done.tail = NULL;
    p->done.n = 0;
    pthread_mutex_unlock(&p->mu);
    return j;
}

void cpulm_prep_get_stats(cpulm_prep *p, cpulm_prep_stats *out) {
    pthread_mutex_lock(&p->mu);
    out->n_workers = p->n_started;
    out->n_light = p->light.n;
    out->n_heavy = p->heavy.n;
    out->n_running = p->n_running;
    out->n_run_heavy = p->n_run_heavy;
    out->n_done = p->n_done;
    out->n_cancelled = p->n_cancelled;
    pthread_mutex_unlock(&p->mu);
}
