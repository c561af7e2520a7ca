/* deadline.h: the absolute CLOCK_REALTIME time `seconds` from now, the form
 * pthread_cond_timedwait wants (the scheduler and the request workers wait on their
 * condition variables with it). Negative seconds count as 0. */
#ifndef CPULM_SERVER_DEADLINE_H
#define CPULM_SERVER_DEADLINE_H

#include <time.h>

static inline struct timespec cpulm_deadline_in(double seconds) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    double whole = seconds > 0 ? seconds : 0;
    dl.tv_sec += (time_t)whole;
    dl.tv_nsec += (long)((whole - (double)(time_t)whole) * 1e9);
    if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
    return dl;
}

#endif
