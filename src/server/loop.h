/* loop.h: a minimal epoll event loop for the server's one I/O thread.
 *
 * Callers embed a cpulm_loop_handler in their own object (connection, listener, eventfd)
 * and register it with a file descriptor; the loop calls handler->fn with the ready events
 * (CPULM_LOOP_* bits). Level-triggered. Not thread-safe: everything but
 * cpulm_loop_run_once's sleeping happens on the thread that owns the loop. A handler that
 * is freed while events for it may still be pending in the current batch must be freed
 * only after cpulm_loop_run_once returns (the server keeps a dead list for that).
 */
#ifndef CPULM_SERVER_LOOP_H
#define CPULM_SERVER_LOOP_H

#include <stdint.h>

#include "base/status.h"

enum {
    CPULM_LOOP_READ = 1,  /* readable (or peer closed) */
    CPULM_LOOP_WRITE = 2, /* writable */
    CPULM_LOOP_HUP = 4,   /* error, hang-up or peer shut down its side */
};

typedef struct cpulm_loop_handler cpulm_loop_handler;
struct cpulm_loop_handler {
    void (*fn)(cpulm_loop_handler *h, int events);
};

typedef struct cpulm_loop cpulm_loop;

/* Returns owned; NULL with err on failure. */
cpulm_loop *cpulm_loop_new(cpulm_error *err);
void cpulm_loop_free(cpulm_loop *l); /* NULL is a no-op; does not close registered fds */

/* Registers fd for events (CPULM_LOOP_READ | CPULM_LOOP_WRITE; HUP is always reported).
 * h is borrowed until cpulm_loop_del. */
cpulm_status cpulm_loop_add(cpulm_loop *l, int fd, int events, cpulm_loop_handler *h);
cpulm_status cpulm_loop_mod(cpulm_loop *l, int fd, int events, cpulm_loop_handler *h);
void cpulm_loop_del(cpulm_loop *l, int fd);

/* Waits up to timeout_ms (-1: forever) and dispatches what is ready. Returns the number of
 * events dispatched, or a negative status on a failure other than EINTR. */
int cpulm_loop_run_once(cpulm_loop *l, int timeout_ms);

#endif
