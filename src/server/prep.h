/* prep.h: the request-preparation workers. A generation request's JSON is parsed, its chat
 * rendered, its prompt tokenized and its grammar compiled here, and an embedding request's
 * inputs tokenized and its response written, not on the I/O thread, so a huge body (a 10 MB
 * prompt takes seconds to tokenize) never delays other connections, /health included.
 *
 * A small pool of threads (sized from the cores) runs the jobs. Jobs come in two lanes: a
 * heavy one (large bodies, grammars: what may take long) and a light one. The first worker
 * runs light jobs only; the others take heavy jobs first, then light ones. So a cheap
 * request never waits behind an expensive one, only behind other cheap ones, and a stream
 * of cheap requests cannot starve the expensive ones.
 *
 * The I/O thread pushes a job; a worker runs it and queues it as finished, announced on an
 * eventfd (as the scheduler does); the I/O thread drains finished jobs and goes on with
 * them (routes.c). A job must own everything it reads (the body is copied): its connection
 * may close meanwhile. Cancelling a job (its client left, the grace period ended) sets its
 * flag; a queued job then never runs, a running one checks cpulm_prep_stopped between
 * bounded pieces of work and returns early. Either way it comes back through
 * cpulm_prep_drain, where the I/O thread drops it.
 */
#ifndef CPULM_SERVER_PREP_H
#define CPULM_SERVER_PREP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define CPULM_PREP_MAX_WORKERS 8

typedef struct cpulm_prep cpulm_prep;

typedef struct cpulm_prep_job {
    struct cpulm_prep_job *next;
    uint64_t id;                               /* the request's id */
    int heavy;                                 /* run in the heavy lane (set before push) */
    double deadline;                           /* monotonic seconds; 0: none */
    atomic_int cancel;                         /* set by cpulm_prep_cancel(_all) */
    void (*run)(struct cpulm_prep_job *j);     /* on a worker */
    void (*destroy)(struct cpulm_prep_job *j); /* frees the job and all it owns */
} cpulm_prep_job;

typedef struct cpulm_prep_stats {
    int32_t n_workers;              /* threads */
    int32_t n_light, n_heavy;       /* jobs waiting for a worker, per lane */
    int32_t n_running, n_run_heavy; /* jobs being run (of which heavy) */
    uint64_t n_done;                /* jobs run so far (cancelled queued ones excluded) */
    uint64_t n_cancelled;           /* jobs cancelled so far (queued or running) */
} cpulm_prep_stats;

/* Starts n_workers threads, kept within 2..CPULM_PREP_MAX_WORKERS (the server passes its
 * decode threads). NULL with err on failure. */
cpulm_prep *cpulm_prep_new(int32_t n_workers, cpulm_error *err);
/* Cancels every job, waits up to timeout_s for the workers to return, then frees all when
 * they did and returns 1. When one is still inside an uninterruptible piece of work, frees
 * nothing and returns 0: the caller must then leave alone what the jobs use (the model) and
 * exit. NULL is a no-op (1). */
int cpulm_prep_free(cpulm_prep *p, double timeout_s);
/* Queues j (the pool owns it until it comes back from cpulm_prep_drain). */
void cpulm_prep_push(cpulm_prep *p, cpulm_prep_job *j);
/* Cancels the job with this id, queued or running (no-op when there is none). */
void cpulm_prep_cancel(cpulm_prep *p, uint64_t id);
/* Cancels every queued and running job (the grace period ended). */
void cpulm_prep_cancel_all(cpulm_prep *p);
/* On the worker: whether j should stop now (cancelled, or past its deadline). Cheap: call it
 * between pieces of work of a few milliseconds. */
int cpulm_prep_stopped(cpulm_prep_job *j);
/* cpulm_prep_stopped as a callback (job: the cpulm_prep_job), for cpulm_tokenize_cancellable. */
int cpulm_prep_stopped_cb(void *job);
/* Readable when finished jobs are waiting (cpulm_prep_drain re-arms it). */
int cpulm_prep_event_fd(const cpulm_prep *p);
/* Takes the finished jobs (run, or cancelled before they ran), oldest first; the caller
 * destroys each or pushes it again. */
cpulm_prep_job *cpulm_prep_drain(cpulm_prep *p);
void cpulm_prep_get_stats(cpulm_prep *p, cpulm_prep_stats *out);

#endif
