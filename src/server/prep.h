/* prep.h: the request-preparation worker. A generation request's JSON is parsed, its chat
 * rendered and its prompt tokenized on this thread, not on the I/O thread, so a huge body
 * (a 10 MB prompt takes seconds to tokenize) never delays other connections, /health
 * included.
 *
 * The I/O thread pushes a job; the worker runs it and queues it as finished, announced on
 * an eventfd (as the scheduler does); the I/O thread drains finished jobs and goes on with
 * them (routes.c submits them to the scheduler). Jobs run one at a time, in order. A job
 * must own everything it reads (the body is copied): its connection may close meanwhile,
 * and the I/O thread then drops the job when it comes back.
 */
#ifndef CPULM_SERVER_PREP_H
#define CPULM_SERVER_PREP_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct cpulm_prep cpulm_prep;

typedef struct cpulm_prep_job {
    struct cpulm_prep_job *next;
    uint64_t id;                               /* the request's id */
    void (*run)(struct cpulm_prep_job *j);     /* on the worker */
    void (*destroy)(struct cpulm_prep_job *j); /* frees the job and all it owns */
} cpulm_prep_job;

/* Starts the worker. NULL with err on failure. */
cpulm_prep *cpulm_prep_new(cpulm_error *err);
/* Finishes the job in progress, stops the worker, destroys every queued or finished job. */
void cpulm_prep_free(cpulm_prep *p); /* NULL is a no-op */
/* Queues j (the worker owns it until it comes back from cpulm_prep_drain). */
void cpulm_prep_push(cpulm_prep *p, cpulm_prep_job *j);
/* Readable when finished jobs are waiting (cpulm_prep_drain re-arms it). */
int cpulm_prep_event_fd(const cpulm_prep *p);
/* Takes the finished jobs, oldest first; the caller destroys each. */
cpulm_prep_job *cpulm_prep_drain(cpulm_prep *p);

#endif
