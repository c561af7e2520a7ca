/* loop.c: epoll wrapper (see loop.h). */
#define _GNU_SOURCE
#include "server/loop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define MAX_EVENTS 128

struct cpulm_loop {
    int epfd;
    struct epoll_event ev[MAX_EVENTS];
};

cpulm_loop *cpulm_loop_new(cpulm_error *err) {
    cpulm_loop *l = calloc(1, sizeof *l);
    if (!l) {
        cpulm_errf(err, CPULM_ERR_NOMEM, "loop: out of memory");
        return NULL;
    }
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (l->epfd < 0) {
        cpulm_errf(err, CPULM_ERR_IO, "loop: epoll_create1: %s", strerror(errno));
        free(l);
        return NULL;
    }
    return l;
}

void cpulm_loop_free(cpulm_loop *l) {
    if (!l) return;
    close(l->epfd);
    free(l);
}

static uint32_t to_epoll(int events) {
    uint32_t e = EPOLLRDHUP;
    if (events & CPULM_LOOP_READ) e |= EPOLLIN;
    if (events & CPULM_LOOP_WRITE) e |= EPOLLOUT;
    return e;
}

static cpulm_status ctl(cpulm_loop *l, int op, int fd, int events, cpulm_loop_handler *h) {
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = to_epoll(events);
    ev.data.ptr = h;
    return epoll_ctl(l->epfd, op, fd, &ev) == 0 ? CPULM_OK : CPULM_ERR_IO;
}

cpulm_status cpulm_loop_add(cpulm_loop *l, int fd, int events, cpulm_loop_handler *h) {
    return ctl(l, EPOLL_CTL_ADD, fd, events, h);
}

cpulm_status cpulm_loop_mod(cpulm_loop *l, int fd, int events, cpulm_loop_handler *h) {
    return ctl(l, EPOLL_CTL_MOD, fd, events, h);
}

void cpulm_loop_del(cpulm_loop *l, int fd) {
    epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL);
}

int cpulm_loop_run_once(cpulm_loop *l, int timeout_ms) {
    int n = epoll_wait(l->epfd, l->ev, MAX_EVENTS, timeout_ms);
    if (n < 0) return errno == EINTR ? 0 : CPULM_ERR_IO;
    for (int i = 0; i < n; i++) {
        uint32_t e = l->ev[i].events;
        int ev = 0;
        if (e & EPOLLIN) ev |= CPULM_LOOP_READ;
        if (e & EPOLLOUT) ev |= CPULM_LOOP_WRITE;
        if (e & (EPOLLERR | EPOLLHUP | EPOLLRDHUP)) ev |= CPULM_LOOP_HUP;
        cpulm_loop_handler *h = l->ev[i].data.ptr;
        h->fn(h, ev);
    }
    return n;
}
