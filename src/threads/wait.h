/* wait.h: block a thread on a 32-bit atomic word until another thread changes the word and
 * wakes it. The OS part of the pool's waits, and nothing else: a futex on Linux
 * (wait_linux.c), one mutex and condition variable elsewhere (wait_posix.c); the build picks
 * the file (CMakeLists.txt, option CPULM_PORTABLE_WAIT). Both calls are system calls: callers
 * spin first and count their sleepers, so that a wake with no sleeper costs none (pool.c).
 */
#ifndef CPULM_THREADS_WAIT_H
#define CPULM_THREADS_WAIT_H

#include <stdatomic.h>

/* Blocks while *word == expected; returns at once if it differs. May return spuriously: the
 * caller loops on its own condition. */
void cpulm_wait_block(atomic_int *word, int expected);
/* Wakes every thread blocked on word. Call it after changing *word. */
void cpulm_wait_wake(atomic_int *word);

#endif
