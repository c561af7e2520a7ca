/* clock.h: the monotonic clock every timer in the library reads (step times, the attention
 * and matmul shares of a forward pass, the pool's spin budget, request deadlines). One
 * definition, inline: the forward pass reads it twice per matmul on thread 0.
 * Callers define _POSIX_C_SOURCE (or _GNU_SOURCE) before their first include, as for any
 * use of clock_gettime under -std=c11. */
#ifndef CPULM_BASE_CLOCK_H
#define CPULM_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t cpulm_clock_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline double cpulm_clock_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
