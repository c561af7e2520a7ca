/* metrics.c: counters and fixed-bucket histograms behind one mutex, and the Prometheus
 * text rendering (names and meanings in metrics.h and docs/SERVER.md). */
#include "server/metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BUCKETS 24
#define N_STATUS    600

typedef struct hist {
    const double *le; /* upper bounds, ascending; +Inf is implicit */
    int n_le;
    uint64_t bucket[MAX_BUCKETS]; /* non-cumulative counts; [n_le] is the +Inf overflow */
    uint64_t count;
    double sum;
} hist;

struct cpulm_metrics {
    pthread_mutex_t mu;
    char *label; /* model_name="..." with the value escaped */
    uint64_t counter[CPULM_METRIC_COUNTER_COUNT];
    hist h[CPULM_METRIC_HIST_COUNT];
    uint64_t status[N_STATUS];
};

/* Bucket bounds: vLLM's lower ranges extended down to a millisecond, because small models
 * on a CPU answer in microseconds to milliseconds. */
static const double le_ttft[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
                                 0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
static const double le_itl[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                                0.15,   0.2,   0.3,    0.4,   0.5,  0.75,  1.0,  2.5};
static const double le_e2e[] = {0.01, 0.05, 0.1,  0.3,  0.5,  1.0,   2.5,   5.0,   10.0,  15.0,
                                20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0};

static void hist_setup(hist *h, const double *le, size_t n) {
    h->le = le;
    h->n_le = (int)n;
}

static char *make_label(const char *model_name) {
    cpulm_buf b;
    cpulm_buf_init(&b, 4096);
    cpulm_buf_puts(&b, "model_name=\"");
    for (const char *p = model_name ? model_name : ""; *p; p++) {
        if (*p == '\\' || *p == '"') cpulm_buf_putc(&b, '\\');
        if (*p == '\n')
            cpulm_buf_puts(&b, "\\n");
        else
            cpulm_buf_putc(&b, *p);
    }
    cpulm_buf_putc(&b, '"');
    if (cpulm_buf_status(&b) != CPULM_OK) {
        cpulm_buf_release(&b);
        return NULL;
    }
    return cpulm_buf_detach(&b, NULL);
}

cpulm_metrics *cpulm_metrics_new(const char *model_name) {
    cpulm_metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    if (!(m->label = make_label(model_name))) {
        free(m);
        return NULL;
    }
    pthread_mutex_init(&m->mu, NULL);
    hist_setup(&m->h[CPULM_METRIC_TTFT], le_ttft, sizeof le_ttft / sizeof le_ttft[0]);
    hist_setup(&m->h[CPULM_METRIC_ITL], le_itl, sizeof le_itl / sizeof le_itl[0]);
    hist_setup(&m->h[CPULM_METRIC_E2E], le_e2e, sizeof le_e2e / sizeof le_e2e[0]);
    return m;
}

void cpulm_metrics_free(cpulm_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m->label);
    free(m);
}

void cpulm_metrics_add(cpulm_metrics *m, cpulm_metric_counter c, uint64_t n) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->counter[c] += n;
    pthread_mutex_unlock(&m->mu);
}

void cpulm_metrics_observe(cpulm_metrics *m, cpulm_metric_hist which, double seconds) {
    if (!m) return;
    if (!(seconds >= 0)) seconds = 0;
    hist *h = &m->h[which];
    int b = 0;
    while (b < h->n_le && seconds > h->le[b])
        b++;
    pthread_mutex_lock(&m->mu);
    h->bucket[b]++;
    h->count++;
    h->sum += seconds;
    pthread_mutex_unlock(&m->mu);
}

void cpulm_metrics_http_status(cpulm_metrics *m, int status) {
    if (!m || status < 100 || status >= N_STATUS) return;
    pthread_mutex_lock(&m->mu);
    m->status[status]++;
    pthread_mutex_unlock(&m->mu);
}

uint64_t cpulm_metrics_counter(cpulm_metrics *m, cpulm_metric_counter c) {
    pthread_mutex_lock(&m->mu);
    uint64_t v = m->counter[c];
    pthread_mutex_unlock(&m->mu);
    return v;
}

uint64_t cpulm_metrics_hist_count(cpulm_metrics *m, cpulm_metric_hist h) {
    pthread_mutex_lock(&m->mu);
    uint64_t v = m->h[h].count;
    pthread_mutex_unlock(&m->mu);
    return v;
}

/* ---- rendering ---- */

static void head(cpulm_buf *o, const char *name, const char *type, const char *help) {
    cpulm_buf_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One series: name{labels} value. extra: more labels ("" for none). */
static void sample(cpulm_buf *o, const char *name, const char *label, const char *extra, double v) {
    if (!*label && !*extra)
        cpulm_buf_printf(o, "%s %.17g\n", name, v);
    else
        cpulm_buf_printf(o, "%s{%s%s%s} %.17g\n", name, label, *label && *extra ? "," : "", extra,
                         v);
}

static void render_hist(cpulm_buf *o, const char *name, const char *help, const char *label,
                        const hist *h) {
    char n[128], le[64];
    head(o, name, "histogram", help);
    uint64_t cum = 0;
    snprintf(n, sizeof n, "%s_bucket", name);
    for (int b = 0; b <= h->n_le; b++) {
        cum += h->bucket[b];
        if (b < h->n_le)
            snprintf(le, sizeof le, "le=\"%g\"", h->le[b]);
        else
            snprintf(le, sizeof le, "le=\"+Inf\"");
        sample(o, n, label, le, (double)cum);
    }
    snprintf(n, sizeof n, "%s_sum", name);
    sample(o, n, label, "", h->sum);
    snprintf(n, sizeof n, "%s_count", name);
    sample(o, n, label, "", (double)h->count);
}

static void render_one(cpulm_buf *o, const char *name, const char *type, const char *help,
                       const char *label, double v) {
    head(o, name, type, help);
    sample(o, name, label, "", v);
}

static const struct {
    const char *vllm, *cpulm, *help;
} hist_names[CPULM_METRIC_HIST_COUNT] = {
    {"vllm:time_to_first_token_seconds", "cpulm_time_to_first_token_seconds",
     "Time from request arrival to its first generated token."},
    {"vllm:time_per_output_token_seconds", "cpulm_inter_token_latency_seconds",
     "Time between consecutive generated tokens of one sequence."},
    {"vllm:e2e_request_latency_seconds", "cpulm_request_latency_seconds",
     "Time from request arrival to its last generated token."},
};

/* What the KV cache holds and costs: memory follows the tokens cached, not the capacity. */
static void render_kv_memory(cpulm_buf *o, const cpulm_metrics_gauges *g) {
    const struct {
        const char *name, *help;
        double v;
    } kv[] = {
        {"cpulm_kv_tokens_cached",
         "Tokens in the slots' KV cache: running sequences and free slots' kept prefixes.",
         (double)g->kv_cached},
        {"cpulm_kv_bytes_used", "KV bytes of the tokens cached.", (double)g->kv_bytes_used},
        {"cpulm_kv_bytes_resident",
         "KV cache pages in RAM as the kernel reports them; shared pages count once.",
         (double)g->kv_bytes_resident},
        {"cpulm_kv_bytes_shared",
         "KV bytes slots map from another slot's pages instead of copying (n > 1).",
         (double)g->kv_bytes_shared},
        {"cpulm_kv_bytes_reserved",
         "Address space reserved for the KV cache (capacity; RAM only when used).",
         (double)g->kv_bytes_reserved},
        {"cpulm_kv_budget_tokens",
         "KV tokens running requests may reserve in all (--kv-budget; 0: no limit).",
         (double)g->kv_budget},
        {"cpulm_kv_budget_used_tokens",
         "KV tokens the running requests reserve (prompt + max_tokens per choice).",
         (double)g->kv_budget_used},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        render_one(o, kv[i].name, "gauge", kv[i].help, "", kv[i].v);
}

static void render_gauges(cpulm_buf *o, const char *ml, const cpulm_metrics_gauges *g) {
    double usage = g->kv_total > 0 ? (double)g->kv_used / (double)g->kv_total : 0.0;
    const char *hw = "Requests waiting for a slot.", *hr = "Requests being processed.";
    const char *hk = "Fraction of the KV cache held by running sequences (0..1).";
    render_one(o, "vllm:num_requests_waiting", "gauge", hw, ml, g->n_waiting);
    render_one(o, "vllm:num_requests_running", "gauge", hr, ml, g->n_running);
    render_one(o, "vllm:gpu_cache_usage_perc", "gauge", hk, ml, usage);
    render_one(o, "vllm:kv_cache_usage_perc", "gauge", hk, ml, usage);
    render_one(o, "cpulm_requests_waiting", "gauge", hw, "", g->n_waiting);
    render_one(o, "cpulm_requests_running", "gauge", hr, "", g->n_running);
    render_one(o, "cpulm_kv_cache_usage_ratio", "gauge", hk, "", usage);
    render_one(o, "cpulm_kv_cache_tokens", "gauge", "KV cache capacity in tokens.", "",
               (double)g->kv_total);
    render_kv_memory(o, g);
    render_one(o, "cpulm_ready", "gauge", "1 once the model is loaded and warm.", "", g->ready);
    render_one(o, "cpulm_prompt_cache_bytes", "gauge", "Memory held by the RAM prompt cache.", "",
               (double)g->cache_bytes);
    render_one(o, "cpulm_prompt_cache_limit_bytes", "gauge", "The RAM prompt cache's limit.", "",
               (double)g->cache_max_bytes);
    render_one(o, "cpulm_prompt_cache_blocks", "gauge", "Blocks held by the RAM prompt cache.", "",
               (double)g->cache_blocks);
    render_one(o, "cpulm_step_target_seconds", "gauge",
               "Target step time (inter-token gap) the prefill budget aims at; 0 when off.", "",
               g->step_target_s);
    render_one(o, "cpulm_step_token_seconds", "gauge",
               "Measured cost of one more prompt token in a step (the scheduler's model).", "",
               g->step_token_s);
    render_one(o, "cpulm_step_gen_seconds", "gauge",
               "Measured cost of one more generating sequence in a step (the scheduler's model).",
               "", g->step_gen_s);
    render_one(o, "cpulm_step_fixed_seconds", "gauge",
               "Measured fixed cost of a step (the scheduler's model).", "", g->step_fixed_s);
    render_one(o, "cpulm_steps_total", "counter", "Scheduler steps (decode calls) so far.", "",
               (double)g->n_steps);
    render_one(o, "cpulm_long_steps_total", "counter",
               "Scheduler steps so far that were long (twice the target, prompt work).", "",
               (double)g->n_long_steps);
}

/* The request workers (prep.h) and the embedding requests the scheduler runs. */
static void render_work(cpulm_buf *o, const cpulm_metrics_gauges *g) {
    const struct {
        const char *name, *type, *help;
        double v;
    } w[] = {
        {"cpulm_prep_workers", "gauge", "Request-preparation worker threads.",
         (double)g->prep_workers},
        {"cpulm_prep_queue_light", "gauge", "Light requests waiting for a preparation worker.",
         (double)g->prep_light},
        {"cpulm_prep_queue_heavy", "gauge",
         "Heavy requests (large bodies, grammars) waiting for a preparation worker.",
         (double)g->prep_heavy},
        {"cpulm_prep_running", "gauge", "Requests being prepared (parsed, tokenized, written).",
         (double)g->prep_running},
        {"cpulm_prep_cancelled_total", "counter",
         "Preparation jobs cancelled (client gone, shutdown).", (double)g->prep_cancelled},
        {"cpulm_embed_requests_running", "gauge",
         "Embedding requests queued or being embedded by the scheduler.",
         (double)g->embed_requests},
        {"cpulm_embed_batches_total", "counter", "Embedding batches decoded.",
         (double)g->embed_batches},
        {"cpulm_embed_inputs_total", "counter", "Embedding inputs embedded.",
         (double)g->embed_inputs},
        {"cpulm_embed_tokens_total", "counter", "Tokens of the embedding inputs embedded.",
         (double)g->embed_tokens},
    };
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        render_one(o, w[i].name, w[i].type, w[i].help, "", w[i].v);
}

/* vLLM's cache_config_info: a constant 1 whose labels describe the KV cache, which the
 * endpoint picker reads for the block size. GPU blocks are the slots' KV cells in blocks,
 * CPU blocks the RAM prompt cache's capacity (vLLM's CPU offload is the closest kin). */
static void render_cache_info(cpulm_buf *o, const char *ml, const cpulm_metrics_gauges *g) {
    int32_t bs = g->block_size > 0 ? g->block_size : 1;
    char labels[256];
    snprintf(labels, sizeof labels,
             "block_size=\"%d\",num_gpu_blocks=\"%lld\",num_cpu_blocks=\"%lld\","
             "enable_prefix_caching=\"%s\",cache_dtype=\"auto\"",
             bs, (long long)(g->kv_total / bs), (long long)g->cache_blocks_max,
             g->block_size > 0 ? "True" : "False");
    head(o, "vllm:cache_config_info", "gauge", "Information of the KV cache configuration.");
    sample(o, "vllm:cache_config_info", ml, labels, 1);
}

static void render_counters(cpulm_buf *o, const char *ml, const uint64_t *c) {
    const char *hp = "Prompt tokens processed.", *hg = "Tokens generated.";
    /* vLLM counts prefix-cache queries and hits in tokens: prompt tokens looked up, and
     * those found (in a slot or the RAM prompt cache) */
    render_one(o, "vllm:prefix_cache_queries_total", "counter",
               "Prefix cache queries, in prompt tokens looked up.", ml,
               (double)c[CPULM_METRIC_PROMPT_TOKENS]);
    render_one(o, "vllm:prefix_cache_hits_total", "counter",
               "Prefix cache hits, in prompt tokens found cached.", ml,
               (double)c[CPULM_METRIC_CACHED_TOKENS]);
    render_one(o, "vllm:prompt_tokens_total", "counter", hp, ml,
               (double)c[CPULM_METRIC_PROMPT_TOKENS]);
    render_one(o, "vllm:generation_tokens_total", "counter", hg, ml,
               (double)c[CPULM_METRIC_GEN_TOKENS]);
    render_one(o, "cpulm_prompt_tokens_total", "counter", hp, "",
               (double)c[CPULM_METRIC_PROMPT_TOKENS]);
    render_one(o, "cpulm_prompt_tokens_cached_total", "counter",
               "Prompt tokens reused from a slot's KV cache or the RAM prompt cache.", "",
               (double)c[CPULM_METRIC_CACHED_TOKENS]);
    render_one(o, "cpulm_generation_tokens_total", "counter", hg, "",
               (double)c[CPULM_METRIC_GEN_TOKENS]);
    head(o, "vllm:request_success_total", "counter", "Finished choices by finish reason.");
    sample(o, "vllm:request_success_total", ml, "finished_reason=\"stop\"",
           (double)c[CPULM_METRIC_FINISH_STOP]);
    sample(o, "vllm:request_success_total", ml, "finished_reason=\"length\"",
           (double)c[CPULM_METRIC_FINISH_LENGTH]);
    head(o, "cpulm_requests_finished_total", "counter",
         "Finished choices by finish reason; abort = cancelled, timed out or failed requests.");
    sample(o, "cpulm_requests_finished_total", "", "reason=\"stop\"",
           (double)c[CPULM_METRIC_FINISH_STOP]);
    sample(o, "cpulm_requests_finished_total", "", "reason=\"length\"",
           (double)c[CPULM_METRIC_FINISH_LENGTH]);
    sample(o, "cpulm_requests_finished_total", "", "reason=\"abort\"",
           (double)c[CPULM_METRIC_FINISH_ABORT]);
}

/* vLLM's speculative decoding counters (its names; acceptance rate = accepted / draft
 * tokens, mean accepted length = 1 + accepted / drafts), rendered when speculation is on. */
static void render_spec(cpulm_buf *o, const char *ml, const uint64_t *c, int32_t draft_max) {
    if (draft_max <= 0) return;
    render_one(o, "vllm:spec_decode_num_drafts_total", "counter",
               "Drafts verified (one per sequence and step that drafted).", ml,
               (double)c[CPULM_METRIC_SPEC_DRAFTS]);
    render_one(o, "vllm:spec_decode_num_draft_tokens_total", "counter", "Draft tokens verified.",
               ml, (double)c[CPULM_METRIC_SPEC_DRAFT_TOKENS]);
    render_one(o, "vllm:spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.",
               ml, (double)c[CPULM_METRIC_SPEC_ACCEPTED]);
    const char *n = "vllm:spec_decode_num_accepted_tokens_per_pos_total";
    head(o, n, "counter", "Draft tokens accepted, by position in the draft.");
    for (int32_t i = 0; i < draft_max && i < CPULM_METRICS_SPEC_POS; i++) {
        char pos[32];
        snprintf(pos, sizeof pos, "position=\"%d\"", i);
        sample(o, n, ml, pos, (double)c[CPULM_METRIC_SPEC_POS_0 + i]);
    }
}

void cpulm_metrics_render(cpulm_metrics *m, const cpulm_metrics_gauges *g, cpulm_buf *out) {
    cpulm_metrics snap;
    pthread_mutex_lock(&m->mu);
    memcpy(snap.counter, m->counter, sizeof snap.counter);
    memcpy(snap.h, m->h, sizeof snap.h);
    memcpy(snap.status, m->status, sizeof snap.status);
    pthread_mutex_unlock(&m->mu);
    render_gauges(out, m->label, g);
    render_work(out, g);
    render_cache_info(out, m->label, g);
    render_counters(out, m->label, snap.counter);
    render_spec(out, m->label, snap.counter, g->spec_draft_max);
    for (int i = 0; i < CPULM_METRIC_HIST_COUNT; i++) {
        render_hist(out, hist_names[i].vllm, hist_names[i].help, m->label, &snap.h[i]);
        render_hist(out, hist_names[i].cpulm, hist_names[i].help, "", &snap.h[i]);
    }
    head(out, "cpulm_http_responses_total", "counter", "HTTP responses by status code.");
    for (int s = 100; s < N_STATUS; s++) {
        char code[32];
        snprintf(code, sizeof code, "code=\"%d\"", s);
        if (snap.status[s])
            sample(out, "cpulm_http_responses_total", "", code, (double)snap.status[s]);
    }
}
