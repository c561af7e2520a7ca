/* metrics.h: the server's counters and latency histograms, rendered in the Prometheus text
 * exposition format (version 0.0.4).
 *
 * Every series is exported twice: under the vLLM names that llm-d and the Gateway API
 * Inference Extension route on (vllm:num_requests_waiting, vllm:gpu_cache_usage_perc, ...,
 * labelled model_name) and under cpulm_* names. See docs/SERVER.md for the list.
 * Thread-safety: all functions may be called from any thread (one mutex, held for a few
 * additions; never across model work), so /metrics never waits on the scheduler.
 */
#ifndef CPULM_SERVER_METRICS_H
#define CPULM_SERVER_METRICS_H

#include <stdint.h>

#include "base/buf.h"

typedef struct cpulm_metrics cpulm_metrics;

typedef enum cpulm_metric_counter {
    CPULM_METRIC_PROMPT_TOKENS, /* prompt tokens of admitted requests */
    CPULM_METRIC_CACHED_TOKENS, /* of those, reused from a slot's KV cache */
    CPULM_METRIC_GEN_TOKENS,    /* generated tokens */
    CPULM_METRIC_FINISH_STOP,   /* choices finished by EOS or a stop string */
    CPULM_METRIC_FINISH_LENGTH, /* choices finished by max_tokens or the context */
    CPULM_METRIC_FINISH_ABORT,  /* requests cancelled, timed out or failed */
    /* speculative decoding (vLLM's spec_decode names) */
    CPULM_METRIC_SPEC_DRAFTS,       /* drafts verified (one per slot and step that drafted) */
    CPULM_METRIC_SPEC_DRAFT_TOKENS, /* tokens in them */
    CPULM_METRIC_SPEC_ACCEPTED,     /* of those, accepted */
    CPULM_METRIC_SPEC_POS_0,        /* accepted at draft position 0, 1, ... (the next ones) */
    CPULM_METRIC_COUNTER_COUNT = CPULM_METRIC_SPEC_POS_0 + 16
} cpulm_metric_counter;
#define CPULM_METRICS_SPEC_POS 16 /* draft positions counted one by one */

typedef enum cpulm_metric_hist {
    CPULM_METRIC_TTFT, /* arrival to first token, seconds */
    CPULM_METRIC_ITL,  /* time between two tokens of one sequence, seconds */
    CPULM_METRIC_E2E,  /* arrival to last token, seconds */
    CPULM_METRIC_HIST_COUNT
} cpulm_metric_hist;

/* Point-in-time values the caller reads from the scheduler when rendering. */
typedef struct cpulm_metrics_gauges {
    int32_t n_waiting, n_running;
    int64_t kv_used, kv_total; /* tokens held by running sequences / all slots' capacity */
    int64_t kv_cached;         /* tokens held by all slots (running and kept by free ones) */
    uint64_t kv_bytes_used;    /* kv_cached x bytes per token */
    uint64_t kv_bytes_resident, kv_bytes_reserved; /* KV pages in RAM / address space */
    uint64_t kv_bytes_shared; /* KV bytes mapped from another slot's pages (copy-on-write) */
    int64_t kv_budget, kv_budget_used; /* --kv-budget (0: none) / tokens reserved against it */
    int ready;
    int32_t block_size;                     /* prompt-cache block in tokens; 0: the cache is off */
    int64_t cache_blocks, cache_blocks_max; /* prompt cache: blocks held / that fit its limit */
    int64_t cache_bytes, cache_max_bytes;   /* prompt cache: memory held / its limit */
    double step_target_s, step_token_s;     /* scheduler: target step time, per prompt token */
    double step_fixed_s, step_gen_s;        /* scheduler: fixed cost, per generating sequence */
    uint64_t n_steps, n_long_steps;         /* scheduler: decode steps so far, long ones */
    int32_t prep_workers;                   /* request workers (threads) */
    int32_t prep_light, prep_heavy;         /* jobs waiting for a worker, per lane */
    int32_t prep_running;                   /* jobs being run */
    uint64_t prep_cancelled;                /* jobs cancelled so far */
    int32_t embed_requests;                 /* embedding requests in the scheduler */
    uint64_t embed_batches, embed_inputs, embed_tokens; /* embedding work done so far */
    int32_t spec_draft_max; /* speculative decoding's --draft-max; 0: off (no spec series) */
} cpulm_metrics_gauges;

/* model_name labels the vLLM-named series (copied). Returns owned; NULL on OOM. */
cpulm_metrics *cpulm_metrics_new(const char *model_name);
void cpulm_metrics_free(cpulm_metrics *m); /* NULL is a no-op */

/* All of these accept m == NULL (metrics off) and do nothing then. */
void cpulm_metrics_add(cpulm_metrics *m, cpulm_metric_counter c, uint64_t n);
void cpulm_metrics_observe(cpulm_metrics *m, cpulm_metric_hist h, double seconds);
void cpulm_metrics_http_status(cpulm_metrics *m, int status); /* one HTTP response sent */

/* Appends the exposition text to out. */
void cpulm_metrics_render(cpulm_metrics *m, const cpulm_metrics_gauges *g, cpulm_buf *out);

/* Reads back a counter (tests, logs). */
uint64_t cpulm_metrics_counter(cpulm_metrics *m, cpulm_metric_counter c);
uint64_t cpulm_metrics_hist_count(cpulm_metrics *m, cpulm_metric_hist h);

#endif
