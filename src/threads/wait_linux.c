/* wait_linux.c: wait.h on a private futex. The kernel compares *word with expected under its
 * own lock, so a wake between the caller's last check and the sleep is never lost. */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "wait.h"

void cpulm_wait_block(atomic_int *word, int expected) {
    /* EAGAIN (the word changed), EINTR (a signal): both are a return for the caller to check */
    syscall(SYS_futex, (int *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

void cpulm_wait_wake(atomic_int *word) {
    syscall(SYS_futex, (int *)word, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
}
