/* perf_model.h: estimates for machines not at hand (docs/BENCHMARKING.md, "Estimates").
 * Generation streams every weight once per token, so its speed is a share of the memory
 * bandwidth; prompt processing is int8 GEMM work, so its speed is a share of the int8
 * peak. The shares (efficiencies) are measured on a machine where cpulm ran, against that
 * machine's own roofline (`cpulm roofline`), and carried to the target, whose ceilings come
 * from data/instances.tsv (memory channels x transfer rate, cores x int8 ops per cycle x
 * clock: theoretical figures, derated by documented fractions). Serving capacity for a
 * workload follows from the prompt/generation mix. Pure arithmetic, plus the table parser. */
#ifndef CPULM_TOOLS_PERF_MODEL_H
#define CPULM_TOOLS_PERF_MODEL_H

#include <stddef.h>

/* A machine's ceilings for the threads used: read bandwidth GB/s, int8 peak Gop/s. */
typedef struct pm_ceiling {
    double bw_gbs, int8_gops;
} pm_ceiling;

/* A measurement: single-stream generation and prompt t/s of a model, with the model's
 * bytes streamed per generated token and int8 ops per prompt token, and the ceilings
 * measured next to it. */
typedef struct pm_measure {
    pm_ceiling at;
    double tg, pp;
    double bytes_per_token, ops_per_token;
    /* optional (0: unknown; `cpulm roofline -m` writes them): int8 ops of a generated token
     * (2 per matmul weight, the output matrix included) and F16 KV bytes per context token */
    double gen_ops_per_token, kv_bytes_per_token;
    /* optional (0: unknown; `cpulm roofline -m` writes them): the prompt's work besides the
     * int8 ops, attention flops and activation elements into and out of the layers' matrix
     * products per token (bench_matmul_io), and the shares of pp's time the matrix products
     * and attention took (the rest: norms, quantizing activations, rope, the FFN's
     * activation, residual adds, waits at barriers) */
    double attn_flops_per_token, io_per_token;
    double mm_frac, attn_frac;
} pm_measure;

typedef struct pm_eff {
    double tg, pp; /* share of bandwidth / of the int8 peak the measurement reached */
    /* pp split in three (split = 1, when the measurement had the shares and counts above):
     * the matrix products' share of the int8 peak in their own time, and the time of an
     * attention flop and of an activation element in int8-peak seconds (time x peak): what
     * the per-token work around the products costs carries to other ceilings the way the
     * products do (they run on the same vector units and threads) */
    int split;
    double pp_gemm, attn_cost, other_cost;
} pm_eff;

void pm_efficiency(const pm_measure *m, pm_eff *out);
/* Generation and prompt speed of a model (bytes/ops per token) on ceilings c. */
double pm_tg(const pm_eff *e, const pm_ceiling *c, double bytes_per_token);
double pm_pp(const pm_eff *e, const pm_ceiling *c, double ops_per_token);
/* A prompt token's work: int8 ops, attention flops, activation elements (pm_measure's). */
typedef struct pm_pp_work {
    double ops, attn_flops, io;
} pm_pp_work;
/* Prompt speed from the split (e->split and w->io > 0): its three times, each scaled by
 * the work, summed; else pm_pp. The split matters when the model differs: a prompt token's
 * int8 ops grow with d_model^2 (x layers), attention with d_model x depth and the work
 * around the products with d_model, so a small model spends a larger share of its time
 * outside the products than a large one, and one efficiency misstates the other. */
double pm_pp_work_speed(const pm_eff *e, const pm_ceiling *c, const pm_pp_work *w);

/* One instance family of data/instances.tsv. */
typedef struct pm_family {
    char family[16]; /* "c8g" */
    char cpu[48];    /* "Graviton4 (Neoverse V2)" */
    double cores_per_vcpu;
    int socket_cores;
    double socket_bw_gbs;      /* channels x MT/s x 8 bytes */
    double int8_ops_per_cycle; /* per core, of the instructions cpulm's kernels use there */
    double ghz;
    char date[16], source[64];
} pm_family;

typedef struct pm_table {
    pm_family *v;
    int n;
} pm_table;

int pm_table_parse(const char *text, pm_table *out, char *err, size_t cap);
int pm_table_load(const char *path, pm_table *out, char *err, size_t cap);
void pm_table_release(pm_table *t);
/* The family of an instance name ("c8g.4xlarge" -> c8g); NULL if not in the table. */
const pm_family *pm_table_find(const pm_table *t, const char *instance);

/* Theoretical fractions a machine sustains: bandwidth (a STREAM-like read reaches about
 * this share of channels x transfer rate) and the int8 kernels' share of the instruction
 * peak. Documented defaults; `cpulm plan --bw-fraction/--peak-fraction` change them. */
#define PM_DEFAULT_BW_FRACTION   0.8
#define PM_DEFAULT_PEAK_FRACTION 0.8

/* Ceilings of vcpu vCPUs of the family: the cores' fair share of the socket's bandwidth
 * (a small instance on a quiet host may get more), and cores x ops/cycle x clock, each
 * times its fraction. */
void pm_family_ceiling(const pm_family *f, int vcpu, double bw_fraction, double peak_fraction,
                       pm_ceiling *out);

/* Serving estimate for a workload of prompt_tokens in / output_tokens out per request, with
 * `batch` sequences decoding at once in steady state: a decode step takes max(weights
 * streamed once, batch x per-token compute) + the batch's KV reads; each request costs the
 * prefill of its prompt tokens not in the server's prompt cache (cached_tokens: a prefix
 * shared with earlier requests) plus its share of its decode steps, so the machine carries
 * 1 / (ttft + output x step / batch) requests/s. Prefills of arriving requests interrupt the
 * decoding ones: per step, batch / output requests arrive, so a user sees a token every
 * step + batch x ttft / output seconds. */
typedef struct pm_serving {
    double step_s;         /* one decode step of the batch */
    double itl_s;          /* what a decoding user sees between tokens */
    double ttft_s;         /* its prefill (+ the step it waits for) */
    double requests_per_s; /* that keep `batch` sequences decoding */
    double in_tok_s, out_tok_s;
    double prefill_share; /* of machine time */
} pm_serving;

typedef struct pm_model_cost {
    double weight_bytes;           /* streamed once per decode step */
    double kv_bytes_per_ctx_token; /* read per sequence per step, per token of its context */
    double ops_per_token;          /* int8 ops of one generated token through the weights */
    double ops_per_prompt_token;   /* of one prompt token (the output matrix runs once) */
    /* optional (0: unknown, the single prompt efficiency is used): for the split of a prompt
     * token's time (pm_pp_work_speed), attention flops per key a prompt token's query sees
     * (all layers) and activation elements into and out of the layers' products per token */
    double attn_flops_per_key, io_per_token;
} pm_model_cost;

/* Prompt tokens/s of a request of `prompt` tokens whose first `cached` ones are in the prompt
 * cache: with a split calibration and the model's counts, by pm_pp_work_speed, the attention
 * at the mean number of keys a fresh token sees (so a long prompt's attention is charged,
 * which the calibration's short prompt barely had); else the single efficiency. */
double pm_prompt_speed(const pm_eff *e, const pm_ceiling *c, const pm_model_cost *mc, double prompt,
                       double cached);

/* One serving step's cost, the one both pm_serve and the scheduler simulation price steps
 * with: the weights are streamed once per step, the rows' and prompt tokens' compute overlaps
 * them, each decoding row then reads its KV. */
typedef struct pm_step_cost {
    double fixed; /* s: the weights streamed once */
    double gen;   /* s: a decoding row's compute */
    double kv;    /* s: a decoding row's KV reads at the mean context */
    double pre;   /* s: a prompt token (0: none in the step) */
} pm_step_cost;

/* The step cost at a mean decoding context of ctx tokens, prompt tokens at pp_tok tokens/s
 * (0: none); returns -1 (out zeroed) when the efficiencies or ceilings are not positive. */
int pm_step_cost_make(const pm_eff *e, const pm_ceiling *c, const pm_model_cost *mc, double ctx,
                      double pp_tok, pm_step_cost *out);
/* Seconds of a step of `rows` decoding rows and `prompt` prompt tokens. */
double pm_step_time(const pm_step_cost *k, double rows, double prompt);

void pm_serve(const pm_eff *e, const pm_ceiling *c, const pm_model_cost *mc, double prompt_tokens,
              double cached_tokens, double output_tokens, int batch, pm_serving *out);

/* Open-loop serving (Poisson arrivals at `rate` requests/s), the model of an SLO search
 * with `cpulm loadtest --rate` (perf_model_sim.c): a simulation of cpulm serve's scheduler
 * (server/sched.h) with the calibrated costs. Each step carries one token of every decoding
 * request (at most max_batch admitted, the rest queue in arrival order) and the prompt tokens
 * the scheduler's own budget functions give it (a short step fills the target, a long one 1
 * in prefill_every, n_chunk when nothing decodes); a step of b rows and n prompt tokens takes
 * max(weights streamed once, b x a row's compute + n / prompt speed) + the rows' KV reads.
 * TTFT ends with the step that finishes a prompt; the token gaps are step ends. The steady
 * state: 4,000 requests, the first tenth not counted. Nothing is fitted: the calibrated
 * efficiencies alone set the costs. Deterministic (a fixed seed). */
typedef struct pm_workload {
    double prompt, cached, output; /* mean tokens per request; cached: the shared prefix */
    double prompt_cv;              /* standard deviation / mean of the fresh prompt tokens */
} pm_workload;

typedef struct pm_open {
    int stable;    /* 0: the rate exceeds what the machine (or max_batch) carries (steady
                    * state: the queue at the last arrival is over 2% of the requests) */
    double batch;  /* mean requests decoding */
    double util;   /* share of the machine busy */
    double gap_s;  /* mean time between a user's tokens */
    double ttft_s; /* percentile pct of time to first token */
    double itl_s;  /* percentile pct of the token gap */
} pm_open;

void pm_open_loop(const pm_eff *e, const pm_ceiling *c, const pm_model_cost *mc,
                  const pm_workload *w, int max_batch, double rate, double pct, pm_open *out);

/* Highest Poisson rate whose TTFT (percentile ttft_pct) is within ttft_s and whose token
 * gap (percentile itl_pct) is within itl_s (a limit <= 0: none); 0 if none. To 0.1%. */
double pm_slo_rate(const pm_eff *e, const pm_ceiling *c, const pm_model_cost *mc,
                   const pm_workload *w, int max_batch, double ttft_s, double ttft_pct,
                   double itl_s, double itl_pct);

/* Reads a measurement: {"read_gbs", "int8_gops", "tg_tps", "pp_tps", "bytes_per_token",
 * "ops_per_token"} (data/calibration.json), or `cpulm roofline -m MODEL -o json` output
 * itself (its last row: the most threads). Returns 0, or -1 with the reason in err. */
struct cpulm_json;
int pm_measure_from_json(const struct cpulm_json *o, pm_measure *m, char *err, size_t cap);

/* Largest batch (1..max_batch) whose users see tokens within itl_s; 0 if none. */
int pm_max_batch(const pm_eff *e, const pm_ceiling *c, const pm_model_cost *mc,
                 double prompt_tokens, double cached_tokens, double output_tokens, double itl_s,
                 int max_batch);

#endif
