/* progress.h: one live progress line on stderr for long silent operations (synth, model
 * loading, loadtest), as llama.cpp's and Ollama's users know it: shown by default only when
 * stderr is a terminal, rewritten in place (\r, ESC [K), erased when the work ends, so
 * nothing is left between the command's real output lines and stdout (json/csv/md) is never
 * touched. `--progress` forces it on (a log then gets the \r-separated updates) and
 * `--no-progress` off, as in `cpulm bench`. Thread-safe: workers may report concurrently. */
#ifndef CPULM_TOOLS_PROGRESS_H
#define CPULM_TOOLS_PROGRESS_H

#include <pthread.h>

#include "common.h"
#include "tools_api.h"

typedef struct cli_progress {
    int on;         /* lines are printed */
    int shown;      /* something is on the line (to erase at the end) */
    double t0_ms;   /* start, for the elapsed time */
    double last_ms; /* last line printed (updates are limited to 10 per second) */
    pthread_mutex_t mu;
} cli_progress;

/* mode: 1 on, 0 off, -1 when stderr is a terminal. */
void cli_progress_init(cli_progress *p, int mode);
/* Rewrites the line with the formatted text and the elapsed seconds; skipped when the last
 * line is under 100 ms old, unless force (the first update is always shown). */
void cli_progress_update(cli_progress *p, int force, const char *fmt, ...) CPULM_PRINTF(3, 4);
/* Erases the line (if one was shown), e.g. before a result goes to stdout on the same
 * terminal; the next update draws it again. */
void cli_progress_clear(cli_progress *p);
/* cli_progress_clear, then frees the lock. */
void cli_progress_end(cli_progress *p);

#endif
