/* context.h: a cpulm_ctx is a model plus its KV cache, thread pool and every scratch buffer
 * a decode needs, all allocated at creation (decoding allocates nothing).
 * Scratch shapes are for the largest batch, n_batch tokens; their sizes come from
 * memory.c (cpulm_mem_scratch_of), the computation memory estimates use. */
#ifndef CPULM_CONTEXT_H
#define CPULM_CONTEXT_H

#include <stdatomic.h>

#include "kernels/kernels.h"
#include "kv_cache.h"
#include "ssm_state.h"
#include "model/model.h"
#include "threads/pool.h"

struct cpulm_ctx {
    const cpulm_model *m;
    cpulm_ctx_params p;
    const cpulm_kernels *k;
    cpulm_pool *pool;
    cpulm_kv kv;   /* the full-attention layers' keys and values */
    cpulm_ssm ssm; /* hybrid models: the recurrent layers' state per sequence */
    int32_t n_outputs_max;
    uint64_t attn_ns; /* attention time (cpulm_ctx_attn_ns): written by pool thread 0 only */
    uint64_t mm_ns;   /* matmul time (cpulm_ctx_matmul_ns): the same */

    /* activations, [n_batch][dim] row-major */
    float *x;   /* residual stream [n_embd] */
    float *xn;  /* normed input of any matmul [widest input, memory.h] */
    float *q;   /* [n_head * head_dim] */
    float *kc;  /* new keys [n_head_kv * head_dim] */
    float *vc;  /* new values */
    float *att; /* attention output [n_head * head_dim] */
    float *g;   /* ffn gate [n_ff] */
    float *ple; /* gemma4: per-layer embedding inputs [n_layer][n_pl] per token, or NULL */
    float *u;   /* ffn up [n_ff] */
    void *actq; /* activations converted to a weight's vec_dot_type, [n_batch][row bytes] */
    size_t actq_stride;
    float *scores; /* per thread [scores_stride]: head_dim floats rounded up to 16, the rope
                    * angles of one row (memory.c); attention's scores live in attn */
    size_t scores_stride;
    float theta_scale;               /* rope: base^(-2 / n_rot) */
    struct cpulm_attn *attn;         /* attention scratch and batch plan (model/attention.c) */
    struct cpulm_moe_scratch *moe;   /* mixture-of-experts FFN scratch (model/moe.c), or NULL */
    struct cpulm_dnet_scratch *dnet; /* hybrid models' layers (model/deltanet.c), or NULL */

    /* the batch being decoded, filled by decode before the forward pass */
    int32_t n_tok;
    int32_t *tok, *pos, *seq; /* [n_batch] */
    int32_t *out_idx;         /* [n_outputs_max]: batch index of each output row */
    int32_t n_outputs;
    float *logits; /* [n_outputs_max][n_vocab]; NULL for embeddings only */
    int pooled;    /* embeddings on and pooling != NONE */
    float *embd;   /* [n_outputs_max or n_seq_max][n_embd] (memory.h), or NULL */
    int32_t *embd_first, *embd_last, *embd_count; /* pooled: [n_seq_max] per-sequence batch
                                                   * index of its first and last token, count */

    /* work sharing (forward.c): items claimed from one counter; each thread's own idea of
     * where the current job's items start */
    _Alignas(64) atomic_uint_fast64_t work_ctr;
    uint64_t work_start; /* the counter when the pass began */
    struct cpulm_work_base {
        _Alignas(64) uint64_t v;
    } * work_base; /* [pool size] */
};

#endif
