/* memory.h: the bytes a model and a context need (weights, KV cache, scratch), computed in
 * one place. cpulm_ctx_new sizes every scratch buffer from cpulm_mem_scratch_of and the KV
 * cache from kv_cache.c's cpulm_kv_bytes_for, and `info`, `plan` and `report` print
 * cpulm_mem_need over the same inputs, so an estimate is what a context allocates (tested
 * to the page against the allocator).
 *
 * Everything is derived from the model's hyperparameters (cpulm_hparams), never from
 * llama-specific identities such as head_dim = n_embd / n_head: cpulm_mem_dims_of is the
 * one place that turns hyperparameters into buffer widths. A part of the forward pass with
 * scratch of its own sizes it next to its code and is one field here: attention (model/
 * attention.c), mixture of experts (`moe`, model/moe.c: expert activations and router
 * logits) and the hybrid models' recurrent layers (`dnet`, model/deltanet.c). To extend it
 * for a new architecture, add the hyperparameter to cpulm_hparams and its width here. Not
 * done yet: K and V head sizes that differ ({arch}.attention.key_length / value_length,
 * refused by the loader): k_dim = n_head_kv * key_length, v_dim = n_head_kv *
 * value_length, q_dim / att_dim = n_head * key_length / value_length, and the KV cache
 * would need the K and V row sizes separately (kv_cache.c).
 * Pure arithmetic: no allocation, no I/O. */
#ifndef CPULM_MEMORY_H
#define CPULM_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "cpulm.h"
#include "model/model.h"

/* The widths buffers are sized by (elements), from the hyperparameters. */
typedef struct cpulm_mem_dims {
    int64_t n_embd;   /* residual stream */
    int64_t q_dim;    /* queries: n_head * head_dim */
    int64_t att_dim;  /* attention output (before wo): n_head * head_dim */
    int64_t k_dim;    /* new keys of one token: n_head_kv * head_dim */
    int64_t v_dim;    /* new values of one token */
    int64_t n_ff;     /* FFN hidden width */
    int64_t head_dim; /* per-thread attention scratch */
    int64_t widest;   /* the widest input of any matmul: max(n_embd, q_dim, att_dim, n_ff) */
    int64_t n_vocab;
    int32_t n_layer;
    int32_t n_layer_kv; /* layers with a KV cache: the full-attention ones of a hybrid model
                           (at least 1: the cache also keeps the sequence lengths), gemma4's
                           layers but the tail that shares KV */
    int64_t n_pl_all;   /* gemma4: per-layer embedding inputs of a token, n_layer * n_pl */
} cpulm_mem_dims;

void cpulm_mem_dims_of(const cpulm_hparams *hp, cpulm_mem_dims *d);

/* The context sizes memory depends on, resolved (every field >= 1; see cpulm_ctx_new). */
typedef struct cpulm_mem_ctx {
    int32_t n_ctx, n_seq_max, n_batch;
    int32_t n_outputs_max; /* <= n_batch */
    int32_t n_threads;     /* pool size: max(n_threads, n_threads_batch) */
    cpulm_kv_type kv_type;
    int attn_bf16;         /* attention with bf16 products (CPULM_ATTN_BF16) on this cache */
    cpulm_embd_mode embd;  /* which outputs: logits, embeddings or both */
    cpulm_pooling pooling; /* resolved (never UNSPECIFIED) */
} cpulm_mem_ctx;

/* Bytes of each scratch buffer cpulm_ctx_new allocates (the fields of context.h), for the
 * largest batch (n_batch tokens). */
typedef struct cpulm_mem_scratch {
    size_t x, xn, q, kc, vc, att, g, u; /* f32 activations [n_batch][width] */
    size_t actq_stride;                 /* bytes of one quantized activation row */
    size_t actq;                        /* [n_batch] rows of actq_stride, 64-byte aligned */
    size_t scores_stride;               /* floats per thread: head_dim (rope angles) */
    size_t scores;                      /* [n_threads][scores_stride] */
    size_t attn; /* model/attention.c: tiles, split partials, plan; bf16: a layer's tiles */
    size_t tok, pos, seq; /* int32 [n_batch] */
    size_t out_idx;       /* int32 [n_outputs_max] */
    size_t logits;        /* f32 [n_outputs_max][n_vocab]; 0 for embeddings only */
    size_t embd;          /* f32 [rows][n_embd]: rows = n_outputs_max (pooling NONE) or n_seq_max */
    size_t embd_seq;      /* pooled: int32 [3][n_seq_max]: each sequence's first, last, count */
    size_t work_base;     /* one 64-byte line per thread */
    size_t moe;           /* mixture-of-experts FFN (model/moe.c), 0 if dense */
    size_t dnet;          /* hybrid models' layers (model/deltanet.c), 0 otherwise */
    size_t ple;           /* gemma4: f32 [n_batch][n_layer * n_pl] per-layer inputs, 0 otherwise */
} cpulm_mem_scratch;

/* Bytes per thread of the work-sharing slots (context.h's struct cpulm_work_base). */
#define CPULM_MEM_WORK_SLOT 64

void cpulm_mem_scratch_of(const cpulm_hparams *hp, const cpulm_mem_ctx *c, cpulm_mem_scratch *s);
uint64_t cpulm_mem_scratch_total(const cpulm_mem_scratch *s);

/* Recurrent state bytes of n_seq sequences (ssm_state.c's rule; 0 unless hybrid). */
uint64_t cpulm_mem_state_bytes(const cpulm_hparams *hp, int32_t n_seq);

/* KV cache bytes of one sequence of n_ctx tokens (kv_cache.c's rule). */
uint64_t cpulm_mem_kv_bytes(const cpulm_hparams *hp, int32_t n_ctx, cpulm_kv_type t);

/* Weights (given: the model's tensor data, or a plan's estimate) + KV + scratch. */
void cpulm_mem_need(const cpulm_hparams *hp, uint64_t weight_bytes, const cpulm_mem_ctx *c,
                    cpulm_memory *out);

#endif
