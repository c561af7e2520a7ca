/* bench_plan.h: sizing and pricing arithmetic for `cpulm plan` and `cpulm report`: model
 * shapes known without a file (Llama 3 dims), weight bytes per type following llama.cpp's
 * default quantization mixes, KV cache and compute-buffer bytes as cpulm allocates them,
 * the instance price table, and cost per token. Pure: no I/O except locating and loading
 * the price table. */
#ifndef CPULM_TOOLS_BENCH_PLAN_H
#define CPULM_TOOLS_BENCH_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "cpulm.h"
#include "tools_api.h"

typedef struct plan_shape {
    char name[32];    /* "8b" */
    char desc[64];    /* "Llama 3.1 8B" */
    char arch[32];    /* general.architecture: which tensors (model/arch.c) */
    cpulm_hparams hp; /* the model's hyperparameters: what memory is computed from */
    int tied;         /* the output matrix is the token embedding (no output.weight) */
} plan_shape;

/* "1b", "3b", "8b", "70b" (Llama 3.2 1B/3B, Llama 3.1 8B/70B: synth.c's shape table);
 * NULL if unknown. Borrowed, static. */
const plan_shape *plan_shape_find(const char *name);
/* The names, for messages: "1b, 3b, 8b, 70b". */
const char *plan_shape_names(void);
/* The shape of a loaded model (tied when it has no output.weight). */
void plan_shape_of_model(const cpulm_model *m, plan_shape *out);

/* The split prompt model's counts of shape s (pm_model_cost): activation elements into and
 * out of the layers' products per token (bench_matmul_io of its file) and attention flops per
 * key a query sees; for dense attention shapes (plan_shape_find's), else 0 and 0 (unknown). */
void plan_shape_prompt_counts(const plan_shape *s, double *io_per_token, double *attn_per_key);

typedef struct plan_weights {
    uint64_t bytes;   /* all tensors */
    int64_t n_params; /* all elements */
} plan_weights;

/* Weights of shape s quantized with a llama-quantize preset ("q4_0", "q4_k_m", "f16", ...,
 * any cpulm_qplan_preset_find name), with the per-tensor types `cpulm quantize` would
 * choose (quantize_plan.c). Returns 0, or -1 for an unknown type. */
int plan_weights_of(const plan_shape *s, const char *type, plan_weights *out);
const char *plan_type_names(void); /* "Q4_0, Q4_1, ..." */

/* KV cache bytes per token of one sequence: 2 (K and V) x layers x kv heads x head dim. */
uint64_t plan_kv_bytes_per_token(const plan_shape *s, cpulm_kv_type t);
/* The layers with a KV cache: all, or a hybrid model's full-attention layers (its Gated
 * DeltaNet layers keep a recurrent state of fixed size instead). */
int32_t plan_kv_layers(const plan_shape *s);

/* Scratch cpulm_ctx_new allocates (memory.c): activations for n_batch tokens, the quantized
 * copy of one batch of activations, attention scores per thread, logits for n_outputs rows. */
uint64_t plan_compute_bytes(const plan_shape *s, int32_t n_batch, int32_t n_ctx, int32_t n_outputs,
                            int32_t n_threads);

/* Process overhead beyond weights, KV and scratch: code, thread stacks, allocator slack
 * (a flat 100 MiB) plus page tables of the mapped weights (8 bytes per 4 KiB page). */
uint64_t plan_overhead_bytes(uint64_t weight_bytes);

typedef struct plan_memory {
    uint64_t weights, kv_per_token, kv_total, compute, overhead, total;
    uint64_t state; /* hybrid models: the recurrent state of all sequences (in total) */
} plan_memory;

/* Everything needed to serve n_parallel sequences of n_ctx tokens each. */
void plan_memory_of(const plan_shape *s, uint64_t weight_bytes, int32_t n_ctx, int32_t n_parallel,
                    cpulm_kv_type kv, int32_t n_batch, int32_t n_threads, plan_memory *out);

/* ---- instances and prices ---- */

typedef struct plan_instance {
    char name[40];
    int32_t vcpu;
    double mem_gib;
    char arch[16];
    double usd_hour;
    char gpu[32];    /* accelerator ("L4-24GB"), "" for a CPU-only instance */
    char date[16];   /* of the price, "" when the row has none */
    char source[64]; /* key of the "# source KEY: URL" comment it came from */
} plan_instance;

typedef struct plan_prices {
    plan_instance *v; /* owned */
    int n;
    char date[64];    /* from a "# date: ..." header line */
    char source[256]; /* from "# source: ..." */
} plan_prices;

/* Parses the TSV table: '#' comment lines (the "# date:" and "# source:" ones are kept), an
 * optional header row starting with "instance", then rows "name vcpu mem_gib arch usd_hour
 * [gpu date source]" separated by tabs or spaces (gpu "-": none). Returns 0, or -1 with "line N:
 * ..." in err. */
int plan_prices_parse(const char *text, plan_prices *out, char *err, size_t cap);
/* Finds the table: flag (--prices) if given, else $CPULM_PRICES, else data/prices.tsv of
 * the build tree (../data next to the executable), ../share/cpulm/prices.tsv, ./data.
 * Writes the path to out; returns 0, or -1 when no candidate exists (out: the last tried). */
int plan_prices_locate(const char *flag, char *out, size_t cap);
/* The same search for any file of data/ (instances.tsv, calibration.json): flag, else
 * $env_name (may be NULL), else next to the executable's tree, else ./data/FILE. */
int plan_data_locate(const char *file, const char *flag, const char *env_name, char *out,
                     size_t cap);
/* Reads and parses a file. */
int plan_prices_load(const char *path, plan_prices *out, char *err, size_t cap);
void plan_prices_release(plan_prices *p);
const plan_instance *plan_prices_find(const plan_prices *p, const char *name);

/* Memory of an instance a model may use: 90% of it, minus 1 GiB left to the OS. */
uint64_t plan_usable_bytes(const plan_instance *in);

/* Indices of the CPU-only instances (GPU rows are skipped: cpulm runs on the CPU) whose
 * usable memory holds need_bytes, cheapest first (ties:
 * less memory, then name), at most one per family (the name before '.') when
 * one_per_family. Returns how many were written to idx (at most cap). */
int plan_fitting(const plan_prices *p, uint64_t need_bytes, int one_per_family, int *idx, int cap);

/* Cost of generating tokens at tokens_per_s on an instance billed usd_per_hour. */
double plan_usd_per_mtok(double usd_per_hour, double tokens_per_s);
double plan_tokens_per_usd(double usd_per_hour, double tokens_per_s);

#endif
