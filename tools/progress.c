/* progress.c: the live progress line (see progress.h). */
#define _GNU_SOURCE
#include "progress.h"

#include <stdarg.h>
#include <string.h>
#include <unistd.h>

void cli_progress_init(cli_progress *p, int mode) {
    memset(p, 0, sizeof *p);
    p->on = mode >= 0 ? mode : isatty(2);
    p->t0_ms = cli_now_ms();
    p->last_ms = -1e9;
    pthread_mutex_init(&p->mu, NULL);
}

void cli_progress_update(cli_progress *p, int force, const char *fmt, ...) {
    if (!p->on) return;
    pthread_mutex_lock(&p->mu);
    double now = cli_now_ms();
    if (force || !p->shown || now - p->last_ms >= 100) {
        char line[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(line, sizeof line, fmt, ap);
        va_end(ap);
        /* the whole line in one write, so a terminal never shows half of it */
        fprintf(stderr, "\r%s (%.1f s)\033[K", line, (now - p->t0_ms) / 1e3);
        fflush(stderr);
        p->shown = 1;
        p->last_ms = now;
    }
    pthread_mutex_unlock(&p->mu);
}

void cli_progress_clear(cli_progress *p) {
    pthread_mutex_lock(&p->mu);
    if (p->on && p->shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    p->shown = 0;
    pthread_mutex_unlock(&p->mu);
}

void cli_progress_end(cli_progress *p) {
    cli_progress_clear(p);
    pthread_mutex_destroy(&p->mu);
}
