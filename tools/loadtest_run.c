/* loadtest_run.c: one level of `cpulm loadtest` (see loadtest_run.h). Bounded: at most
 * 1024 client threads, a per-request timeout, no new request after the level's time limit;
 * only the given URL is contacted. */
#define _GNU_SOURCE
#include "loadtest_run.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct level {
    const lt_level_spec *sp;
    lt_level_out *out;
    atomic_int next;
    double t0, deadline;
    double *arrive; /* open loop: offsets from t0 */
    pthread_mutex_t mu;
    int done;
    double t_first, t_last;     /* the first counted send (-1: none yet), the last counted answer */
    double asked_in, asked_out; /* what the counted successes asked for (tokens) */
} level;

void lt_request_body(const workload *w, const wl_request *r, int chat, int stream, cpulm_buf *b) {
    cpulm_buf text;
    cpulm_buf_init(&text, 0);
    workload_prompt_text(w, r, &text);
    cpulm_json_writer jw;
    cpulm_json_writer_init(&jw, b, 0, 0);
    cpulm_json_obj_begin(&jw);
    if (chat) {
        cpulm_json_kv_arr_begin(&jw, "messages");
        cpulm_json_obj_begin(&jw);
        cpulm_json_kv_str(&jw, "role", "user");
        cpulm_json_kv_strn(&jw, "content", text.data, text.len);
        cpulm_json_obj_end(&jw);
        cpulm_json_arr_end(&jw);
    } else {
        cpulm_json_kv_strn(&jw, "prompt", text.data, text.len);
    }
    cpulm_json_kv_int(&jw, "max_tokens", r->output_tokens);
    cpulm_json_kv_bool(&jw, "ignore_eos", 1); /* every request generates its max_tokens */
    cpulm_json_kv_bool(&jw, "stream", stream);
    if (stream) {
        cpulm_json_kv_obj_begin(&jw, "stream_options");
        cpulm_json_kv_bool(&jw, "include_usage", 1);
        cpulm_json_obj_end(&jw);
    }
    cpulm_json_obj_end(&jw);
    cpulm_buf_release(&text);
}

static lt_fail classify(const lt_result *r, double timeout_s) {
    if (r->status == 429 || r->status == 503) return LT_FAIL_REJECTED;
    if (r->status != 0 && r->status != 200) return LT_FAIL_HTTP;
    if (r->t_total >= timeout_s * 0.999) return LT_FAIL_TIMEOUT;
    return LT_FAIL_BROKEN;
}

/* Adds the outcome of request rq; late: seconds the request waited in the client past its
 * time; sent: when it was due (open loop) or sent (closed loop). */
static void record(level *lv, lt_result *r, const wl_request *rq, double late, double sent) {
    const lt_level_spec *sp = lv->sp;
    lt_req q = {.ok = r->status == 200 && !r->error[0],
                .ttft = r->t_first >= 0 ? r->t_first + late : -1,
                .e2e = r->t_total + late,
                .events = r->t_events,
                .n_events = r->n_events,
                .prompt_tokens = r->prompt_tokens,
                .output_tokens = r->completion_tokens};
    if (!q.ok) q.fail = classify(r, sp->timeout_s);
    const int counted = !q.ok || sent - lv->t0 >= sp->skip_s; /* failures always count */
    pthread_mutex_lock(&lv->mu);
    if (counted) {
        lt_stats_add(&lv->out->st, &q, sp->slo);
        if (q.ok) lv->asked_in += rq->prompt_tokens, lv->asked_out += rq->output_tokens;
        if (lv->t_first < 0 || sent < lv->t_first) lv->t_first = sent;
        lv->t_last = lt_now();
    } else {
        lv->out->skipped++;
    }
    if (!q.ok && !lv->out->first_error[0])
        snprintf(lv->out->first_error, sizeof lv->out->first_error, "HTTP %d %s", r->status,
                 r->error[0] ? r->error : lt_fail_name(q.fail));
    if (late > 0.05) lv->out->late++;
    lv->done++;
    const lt_stats *s = &lv->out->st;
    cli_progress_update(sp->prog, lv->done == sp->n_requests,
                        "cpulm loadtest: %s: %d/%d requests, %d errors", sp->label, lv->done,
                        sp->n_requests, s->n_fail);
    pthread_mutex_unlock(&lv->mu);
}

static void sleep_until(double t) {
    double left = t - lt_now();
    if (left <= 0) return;
    struct timespec ts = {.tv_sec = (time_t)left,
                          .tv_nsec = (long)((left - (double)(time_t)left) * 1e9)};
    nanosleep(&ts, NULL);
}

static void *worker(void *arg) {
    level *lv = arg;
    const lt_level_spec *sp = lv->sp;
    lt_conn c;
    lt_conn_init(&c);
    cpulm_buf body;
    cpulm_buf_init(&body, 0);
    const char *path = sp->chat ? "/v1/chat/completions" : "/v1/completions";
    for (;;) {
        int i = atomic_fetch_add(&lv->next, 1);
        if (i >= sp->n_requests) break;
        double due = lv->arrive ? lv->t0 + lv->arrive[i] : 0;
        if (due > lv->deadline || lt_now() > lv->deadline) break;
        sleep_until(due);
        const double sent = lt_now();
        double late = due > 0 ? sent - due : 0;
        wl_request rq;
        workload_request(sp->w, sp->first_index + i, &rq);
        cpulm_buf_reset(&body);
        lt_request_body(sp->w, &rq, sp->chat, sp->stream, &body);
        lt_result r;
        lt_post(&c, sp->u, path, body.data, body.len, sp->api_key, sp->stream, sp->timeout_s, &r);
        if (r.prompt_tokens < 0) r.prompt_tokens = rq.prompt_tokens; /* server gave no usage */
        for (int32_t k = 0; k < r.n_events; k++)
            r.t_events[k] += late;
        record(lv, &r, &rq, late > 0 ? late : 0, due > 0 ? due : sent);
        lt_result_release(&r);
    }
    cpulm_buf_release(&body);
    free(c.buf);
    lt_conn_close(&c);
    return NULL;
}

/* The arrival rate the counted requests of an open-loop level realise (a Poisson draw of a
 * few dozen arrivals can be 20% off its nominal rate): (k - 1) gaps over their span. */
static void offered(const double *arrive, int n, double skip_s, double max_s, lt_level_out *out) {
    int first = -1, last = -1;
    for (int i = 0; i < n && arrive[i] <= max_s; i++) {
        if (arrive[i] < skip_s) continue;
        if (first < 0) first = i;
        last = i;
    }
    if (first >= 0 && last > first)
        out->offered_rate = (last - first) / (arrive[last] - arrive[first]);
}

int lt_run_level(const lt_level_spec *sp, lt_level_out *out) {
    memset(out, 0, sizeof *out);
    level lv = {.sp = sp, .out = out};
    pthread_mutex_init(&lv.mu, NULL);
    int n_threads = sp->conc < 1 ? 1 : sp->conc > 1024 ? 1024 : sp->conc;
    if (n_threads > sp->n_requests) n_threads = sp->n_requests;
    double tp = 0, to = 0;
    const int n_mean = sp->n_requests < 4096 ? sp->n_requests : 4096; /* a timed level: many */
    for (int i = 0; i < n_mean; i++) {
        wl_request rq;
        workload_request(sp->w, sp->first_index + i, &rq);
        tp += rq.prompt_tokens;
        to += rq.output_tokens;
    }
    out->target_prompt = n_mean ? tp / n_mean : 0;
    out->target_output = n_mean ? to / n_mean : 0;
    if (sp->open && !(lv.arrive = malloc(sizeof(double) * (size_t)sp->n_requests))) return -1;
    if (sp->open) {
        lt_arrivals(lv.arrive, sp->n_requests, sp->rate, sp->poisson,
                    (uint64_t)sp->first_index + 7);
        offered(lv.arrive, sp->n_requests, sp->skip_s, sp->max_time_s, out);
    }
    pthread_t *th = calloc((size_t)n_threads, sizeof *th);
    if (!th) {
        free(lv.arrive);
        return -1;
    }
    lv.t0 = lt_now() + (sp->open ? 0.01 : 0); /* open loop: every thread is up at t0 */
    lv.deadline = lv.t0 + sp->max_time_s;
    lv.t_last = lv.t0;
    lv.t_first = -1;
    int n = 0;
    for (; n < n_threads; n++)
        if (pthread_create(&th[n], NULL, worker, &lv) != 0) break;
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    const double from = lv.t_first >= 0 ? lv.t_first : lv.t0;
    out->st.wall = lv.t_last > from ? lv.t_last - from : 1e-9;
    if (out->st.n_ok) { /* asked by the same requests the realised counts are of */
        out->target_prompt = lv.asked_in / out->st.n_ok;
        out->target_output = lv.asked_out / out->st.n_ok;
    }
    lt_stats_finish(&out->st);
    free(th);
    free(lv.arrive);
    pthread_mutex_destroy(&lv.mu);
    return n == n_threads ? 0 : -1;
}
