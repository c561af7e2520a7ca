/* compare.h: the rows of `cpulm compare`: one per result file, read from `cpulm loadtest
 * -o json` (the SLO search's best load, or its highest clean level), `cpulm bench -o json` /
 * llama-bench's JSON (prompt and generation speed), vLLM benchmark_serving result JSON and
 * GuideLLM's benchmarks JSON (request throughput, TTFT and ITL p99). Pure: parses text. */
#ifndef CPULM_TOOLS_COMPARE_H
#define CPULM_TOOLS_COMPARE_H

#include <stddef.h>

typedef struct cmp_entry {
    char source[160];  /* the file */
    char machine[128]; /* instance or CPU, "" if the file does not say */
    char workload[64];
    char kind[32];  /* "loadtest", "bench", "vllm" */
    char basis[16]; /* "measured" */
    int open;       /* load is a rate (req/s), else concurrency */
    double load;    /* NaN when unknown, like every number below */
    double req_s, ttft_p99_ms, itl_p99_ms;
    double usd_m_in, usd_m_out, usd_k_req;
    double pp, tg;
    int slo_met; /* 1 met, 0 missed or no objective */
    char note[96];
} cmp_entry;

/* Empty entry: numbers NaN (unknown), basis "measured". */
void cmp_entry_init(cmp_entry *e, const char *source);

/* Reads one document. Returns 0, or -1 with the reason in err (not a known format). */
int cmp_entry_parse(const char *text, size_t n, const char *source, cmp_entry *e, char *err,
                    size_t cap);

#endif
