/* prep.c: the request-preparation worker (see prep.h). */
#define _GNU_SOURCE
#include "server/prep.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct cpulm_prep {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    cpulm_prep_job *todo, *todo_tail; /* FIFO */
    cpulm_prep_job *done, *done_tail; /* FIFO */
    int stop;
    int efd;
};

static void push_tail(cpulm_prep_job **head, cpulm_prep_job **tail, cpulm_prep_job *j) {
    j->next = NULL;
    if (*tail)
        (*tail)->next = j;
    else
        *head = j;
    *tail = j;
}

static void *worker(void *arg) {
    cpulm_prep *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->todo && !p->stop)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop) break;
        cpulm_prep_job *j = p->todo;
        p->todo = j->next;
        if (!p->todo) p->todo_tail = NULL;
        pthread_mutex_unlock(&p->mu);
        j->run(j);
        pthread_mutex_lock(&p->mu);
        push_tail(&p->done, &p->done_tail, j);
        uint64_t one = 1;
        ssize_t w = write(p->efd, &one, sizeof one);
        (void)w;
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

cpulm_prep *cpulm_prep_new(cpulm_error *err) {
    cpulm_prep *p = calloc(1, sizeof *p);
    if (!p) {
        cpulm_errf(err, CPULM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (p->efd < 0 || pthread_create(&p->thread, NULL, worker, p) != 0) {
        cpulm_errf(err, CPULM_ERR_IO, "cannot start the request worker");
        if (p->efd >= 0) close(p->efd);
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        free(p);
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

void cpulm_prep_free(cpulm_prep *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    free_list(p->todo);
    free_list(p->done);
    close(p->efd);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void cpulm_prep_push(cpulm_prep *p, cpulm_prep_job *j) {
    pthread_mutex_lock(&p->mu);
    push_tail(&p->todo, &p->todo_tail, j);
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

int cpulm_prep_event_fd(const cpulm_prep *p) {
    return p->efd;
}

cpulm_prep_job *cpulm_prep_drain(cpulm_prep *p) {
    uint64_t v;
    ssize_t r = read(p->efd, &v, sizeof v);
    (void)r;
    pthread_mutex_lock(&p->mu);
    cpulm_prep_job *j = p->done;
    p->done = p->done_tail = NULL;
    pthread_mutex_unlock(&p->mu);
    return j;
}
