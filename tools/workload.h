/* workload.h: a serving workload as data (data/workloads/NAME.json, schema in
 * docs/BENCHMARKING.md): prompt and output length distributions, a prefix shared across
 * requests (system prompt, instructions, tool definitions), multi-turn sessions whose
 * transcript grows, and the default arrival process. `cpulm loadtest --workload` draws
 * requests from it; `cpulm plan --workload` takes its prompt/generation mix.
 * Requests are deterministic functions of (seed, request index), so two runs send the same
 * prompts. Prompt text is made of common English words that are one token each (with their
 * leading space) in GPT-2/Llama 3 style BPE vocabularies and in Llama's 32k SentencePiece
 * vocabulary, so N words are about N tokens on most servers. A small vocabulary splits them
 * (stories260K's 512 tokens: ~1.8 a word), so loadtest measures what each word costs on the
 * server's tokenizer (a wl_vocab) and sizes prompts in those tokens; the server's own count
 * (usage.prompt_tokens) is what loadtest reports. Pure except workload_load. */
#ifndef CPULM_TOOLS_WORKLOAD_H
#define CPULM_TOOLS_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "tools_api.h"

typedef enum { WL_FIXED, WL_UNIFORM, WL_NORMAL, WL_LOGNORMAL } wl_dist_kind;

/* A length distribution clamped to [min, max]. fixed: a = value; uniform: integers in
 * [a, b]; normal / lognormal: a = mean, b = standard deviation of the lengths themselves
 * (lognormal's mu and sigma are derived from them). */
typedef struct wl_dist {
    wl_dist_kind kind;
    double a, b;
    int32_t min, max;
} wl_dist;

typedef enum { WL_ARRIVE_CONSTANT, WL_ARRIVE_POISSON } wl_arrival;

/* The words prompt text is drawn from (workload_word(i), i < WL_N_WORDS). */
#define WL_N_WORDS 130
const char *workload_word(int i);

/* What the prompt words cost in a server's tokens, measured against it (loadtest's
 * calibration): "The" opening a prompt, each word with its leading space after other text,
 * and the tokens the server adds to every prompt (BOS; a chat template's). Costs need not be
 * whole numbers (a ratio measured from usage counts gives every word the same cost). */
typedef struct wl_vocab {
    double first;            /* "The" at the start of a prompt */
    double word[WL_N_WORDS]; /* " word" after other text */
    double added;            /* tokens the server adds to each prompt */
    int cheapest;            /* index of the cheapest word (filler); set by workload_vocab_finish */
} wl_vocab;

/* Sets v->cheapest; returns the mean tokens per word (0 when a cost is not positive: unusable). */
double workload_vocab_finish(wl_vocab *v);

typedef struct workload {
    char name[64];
    char description[256];
    wl_dist prompt, output; /* prompt includes the shared prefix and the session's history */
    int32_t prefix_tokens;  /* shared by the requests that use it */
    double prefix_fraction; /* share of requests that start with the shared prefix */
    int32_t turns;          /* requests per session (1: independent requests) */
    int32_t turn_growth;    /* tokens each turn adds to the session's transcript */
    wl_arrival arrival;     /* for --rate runs */
    double rate;            /* default requests/s of the arrival process; 0: none given */
    int chat;               /* /v1/chat/completions instead of /v1/completions */
    uint64_t seed;
    const wl_vocab *vocab; /* borrowed; NULL: every word is one token */
} workload;

/* Parses a workload document. Returns 0, or -1 with a message naming the field in err. */
int workload_parse(const char *json, size_t n, workload *w, char *err, size_t cap);

/* name_or_path: a file (contains '/' or ends in .json) or a profile name looked up in
 * $CPULM_WORKLOADS, data/workloads of the build tree (../data next to the executable),
 * ../share/cpulm/workloads, ./data/workloads. Returns 0, or -1 with err. */
int workload_load(const char *name_or_path, workload *w, char *err, size_t cap);

/* A fixed workload: prompt_tokens in, output_tokens out, no sharing (loadtest's
 * --prompt-len / --max-tokens). */
void workload_fixed(workload *w, int32_t prompt_tokens, int32_t output_tokens);

typedef struct wl_request {
    int32_t prompt_tokens, output_tokens;
    int32_t prefix_tokens; /* of prompt_tokens, shared with other requests (0 if none) */
    int32_t turn;          /* 0-based turn in its session */
    uint64_t text_seed;    /* words after the prefix; one per session */
} wl_request;

/* Scales a workload's lengths (loadtest's --prompt-scale / --output-scale: the rag profile
 * at a tenth of its size for a small model or a short run): prompt_scale multiplies the
 * prompt distribution (its mean, spread and bounds), the shared prefix and the per-turn
 * growth; output_scale the output distribution. Lengths stay >= 1 token (a prefix given
 * stays >= 1); the name says so ("rag x0.1/0.1"). Scales must be > 0. */
void workload_scale(workload *w, double prompt_scale, double output_scale);

/* Request i of the workload. */
void workload_request(const workload *w, int64_t i, wl_request *r);

/* The prompt text of r. Without a vocab: prompt_tokens words, the first prefix_tokens of them
 * the same for every request of the workload; a later turn of a session extends the earlier
 * turn's text. With w->vocab: words until their tokens (plus the server's added ones) reach
 * prompt_tokens, the shared prefix likewise up to prefix_tokens, each part topped up with the
 * cheapest word so the count is exact when the costs are whole tokens; a later turn then
 * extends the earlier turn's text up to those few filler words. */
void workload_prompt_text(const workload *w, const wl_request *r, cpulm_buf *out);

/* Sample means over the first n requests (what plan and the cost section use). */
void workload_means(const workload *w, int n, double *prompt, double *output, double *prefix);

/* One line describing the workload, e.g. "prompt normal(3000, 600) in [1500, 4500] ...". */
void workload_describe(const workload *w, char *out, size_t cap);

#endif
