/* loadtest_run.h: one load level of `cpulm loadtest` against a server: closed loop (C
 * clients, each sending its next request when the previous answer ends) or open loop
 * (requests sent on an arrival schedule, constant or Poisson, whatever the server's state;
 * a request the client could not send on time because all its connections were busy counts
 * its wait in its latencies). Requests come from a workload (workload.h); each outcome goes
 * to an lt_stats (loadtest_stats.h). */
#ifndef CPULM_TOOLS_LOADTEST_RUN_H
#define CPULM_TOOLS_LOADTEST_RUN_H

#include "loadtest.h"
#include "loadtest_stats.h"
#include "progress.h"
#include "workload.h"

typedef struct lt_level_spec {
    const workload *w;
    const lt_url *u;
    const char *api_key;
    const lt_slo *slo; /* for goodput; NULL: every success is good */
    int stream, chat;
    double timeout_s, max_time_s;
    int n_requests;
    int64_t first_index; /* workload request index of this level's first request */
    int open;            /* open loop at rate; else closed loop with conc clients */
    double rate;
    int poisson;
    int conc; /* closed: clients; open: most requests in flight */
    cli_progress *prog;
    const char *label; /* "concurrency 4", "rate 2 req/s": for the progress line */
    /* Steady state: requests sent in the first skip_s seconds load the server but are not
     * in the latencies, token counts or rates (the server's queue and batch fill from
     * empty then); a failure among them still counts. 0: every request counts. */
    double skip_s;
} lt_level_spec;

typedef struct lt_level_out {
    lt_stats st;
    char first_error[160];
    int late;             /* open loop: requests sent more than 50 ms after their time */
    double target_prompt; /* mean prompt tokens the counted successes asked for (with none: */
    double target_output; /* the level's requests); output tokens likewise */
    int skipped;          /* successes sent within skip_s, not counted */
    double offered_rate;  /* open loop: the counted requests' realised arrival rate (0: n/a) */
} lt_level_out;

/* Runs the level. Returns 0, or -1 when the client could not start its threads. */
int lt_run_level(const lt_level_spec *sp, lt_level_out *out);

/* The request body of workload request r (OpenAI completions or chat). */
void lt_request_body(const workload *w, const wl_request *r, int chat, int stream, cpulm_buf *b);

#endif
