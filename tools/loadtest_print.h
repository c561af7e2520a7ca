/* loadtest_print.h: what `cpulm loadtest` prints: the Markdown table (one row per level,
 * failures counted in every row and explained under the table, no percentiles for a level
 * whose requests mostly failed), the JSON document's level objects, and the cost table. */
#ifndef CPULM_TOOLS_LOADTEST_PRINT_H
#define CPULM_TOOLS_LOADTEST_PRINT_H

#include <stdio.h>

#include "loadtest_host.h"
#include "loadtest_run.h"

typedef struct lt_row {
    int open;    /* rate (open loop) or concurrency (closed) */
    double load; /* requests/s or clients */
    int poisson;
    int search; /* which --repeat search ran it (0-based) */
    lt_level_out out;
    int slo_checked, slo_met;
    char slo_why[128];
    lt_host_use host; /* the machine during the trial (host.ok 0: not sampled) */
    int disturbed;    /* the disturbance rule flagged it (loadtest_host.h) */
    int discarded;    /* disturbed and run again: its verdict did not count */
    char disturb_why[192];
    int waited;   /* --disturb-wait: waited for the steal to pass before the rerun */
    lt_calm calm; /* how that went */
} lt_row;

void lt_label(const lt_row *r, char *out, size_t cap); /* "c=4", "r=2/s" */

/* has_host: a column with each trial's steal share and CPU use (where /proc is read). */
void lt_md_header(int has_slo, int has_host);
void lt_md_row(const lt_row *r, int has_slo, int has_host);
/* Notes under the table: per level with failures, how many, of which kind, the first error,
 * and that its percentiles cover the successes only (or were not computed). */
void lt_md_failures(const lt_row *rows, int n);
/* Notes under the table: each disturbed trial, why, and whether it was run again. */
void lt_md_disturbed(const lt_row *rows, int n);

/* A level's object; with usd_hour > 0 it carries its cost. */
void lt_json_row(cpulm_json_writer *w, const lt_row *r, double usd_hour);

/* Share of the requests' time before their first token (the cost split). */
double lt_prefill_share(const lt_stats *s);

/* Cost rows for the given levels (mostly failed ones are skipped) at usd_hour. */
void lt_md_cost(const lt_row *const *rows, int n, double usd_hour, const char *machine);
void lt_json_cost(cpulm_json_writer *w, const lt_row *r, double usd_hour);

#endif
