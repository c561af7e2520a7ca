/* wait_posix.c: wait.h for systems without a futex, on one process-wide mutex and condition
 * variable. A wake wakes every sleeper of every word, which rechecks its own and sleeps again:
 * fine for a fallback, as sleeping is the pool's slow path. The word is read under the mutex
 * and wakers lock it after changing the word, so a wake cannot fall between check and sleep. */
#include <pthread.h>

#include "wait.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

void cpulm_wait_block(atomic_int *word, int expected) {
    pthread_mutex_lock(&mu);
    if (atomic_load(word) == expected) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

void cpulm_wait_wake(atomic_int *word) {
    (void)word;
    pthread_mutex_lock(&mu);
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}
