/* refcase.h: llama.cpp reference cases for synthetic models, shared by the architecture
 * groups (gemma, gptoss, hybrid). A case file tests/data/<arch>-ref.json is written by
 * `scripts/ref-logits.py ARCH` with the shared llama-perplexity: each case names a synth
 * shape, a weight type and a layer cut (optionally other synth options: "swa",
 * "swa_period", "rope_linear", "softcap", "k_eq_v", "double_wide_mlp", "kv_heads_global",
 * "yarn", "yarn_orig_ctx", "arch", "head_dim", as `cpulm synth`'s flags; "kv": the KV cache
 * type, "q8_0" or "q4_0", of both engines), a token chunk, the first scored
 * position, the top log-probabilities of every scored position ("logprobs_topk": [[id, logprob],
 * ...] per position) and the chunk's perplexity. */
#ifndef CPULM_TESTS_REFCASE_H
#define CPULM_TESTS_REFCASE_H

#include <stdint.h>

#include "base/json.h"
#include "cpulm.h"
#include "toolkit/synth.h"

/* Parses tests/data/<file> (NULL if it is missing or not JSON). */
cpulm_json_doc *refcase_load(const char *file);

/* Writes (once per file name, in the test's temporary folder) and loads the model p
 * describes; NULL with the reason on stderr. */
cpulm_model *refcase_synth_load(const cpulm_synth_params *p, const char *file);
/* The same for a named shape in a weight type ("f32", "q8_0", "mxfp4" ...), cut to `layers`
 * layers when > 0. */
cpulm_model *refcase_synth_shape(const char *shape, const char *type, int layers);
/* The model of case c (its shape, type, layer cut and sliding-window numbers). */
cpulm_model *refcase_model(const cpulm_json *c);

/* A context of n_ctx positions for n_seq sequences, batches (and outputs) of n_batch, nth
 * threads, the tiled attention numerics when fast. */
cpulm_ctx *refcase_ctx(const cpulm_model *m, int n_ctx, int n_batch, int n_seq, int nth, int fast);

/* Logits of every position of toks[0..n) decoded in batches of `step` (owned; NULL on a
 * failed decode). */
float *refcase_logits(cpulm_ctx *ctx, const int32_t *toks, int32_t n, int32_t step, int32_t V);

/* Four sequences decoded as one batch against each alone (prompts and 5 generated tokens):
 * the logit rows that differ in any bit, -1 when a context or decode fails. */
int refcase_batch4_diffs(const cpulm_model *m);

void refcase_log_softmax(const float *l, int32_t V, double *out);

/* Case c decoded in batches of `step` (first token BOS, as llama-perplexity does) in a
 * context of 2 threads, with the tiled (fast) or the default attention numerics: returns the
 * failures (a listed log-probability off by more than tol, a perplexity off by more than
 * 0.5%, or a model that does not load), printed with the case's name; worst |diff| out. */
int refcase_check(const cpulm_json *c, int32_t step, int fast, double tol, double *worst);

#endif
