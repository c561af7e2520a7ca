/* forward_int.h: the work-sharing and matmul helpers of forward.c, shared with the FFN
 * variants in their own files (moe.c). Every pool thread calls them in the same sequence
 * (see forward.c, "work sharing"). */
#ifndef CPULM_MODEL_FORWARD_INT_H
#define CPULM_MODEL_FORWARD_INT_H

#include "../runtime/context.h"

typedef struct mm_job {
    const cpulm_tensor *w;
    float *out; /* [n_rows][ld_out] */
    int64_t ld_out;
    const float *bias; /* [w->ne[1]] or NULL */
    int accumulate;    /* out += W x instead of out = W x */
} mm_job;

/* Claims the next item below end from the shared counter; 0 when the job is exhausted. */
int cpulm_fwd_claim(cpulm_ctx *c, uint64_t end, uint64_t *item);
/* Starts a job of n items on thread ith; returns the job's first item number. */
uint64_t cpulm_fwd_job_begin(cpulm_ctx *c, int ith, uint64_t n);
/* Runs the jobs over x [n_rows][ldx]; barriers before and after are the caller's. */
void cpulm_fwd_mm_group(cpulm_ctx *c, const float *x, int64_t ldx, int64_t n_rows,
                        const mm_job *jobs, int n_jobs, int ith, int nth);

/* Token t of a full-attention layer: per-head q/k norms (when the layer has them), rope,
 * and its k and v stored in the cache's layer kv_il. tmp: n_rot floats. */
void cpulm_fwd_qk_rope_store(cpulm_ctx *c, const cpulm_layer *ly, int kv_il, int64_t t, float *tmp);

/* The same with a layer's own rope scaling and theta_scale = base^(-2/n_rot) (Gemma 3's
 * sliding-window layers rotate with their own base). */
void cpulm_fwd_qk_rope_store_at(cpulm_ctx *c, const cpulm_layer *ly, int kv_il, int64_t t,
                                const cpulm_rope_scaling *rs, float theta_scale, float *tmp);

/* gemma.c: a Gemma 3 layer (il): x += post_norm(attention(norm(x))), then
 * x += post_norm(GELU-gated FFN(norm(x))). Called by every thread with x complete; ends on a
 * barrier. */
void cpulm_gemma_layer(cpulm_ctx *c, const cpulm_layer *ly, int il, int ith, int nth);
/* Gemma's input embedding scale: row *= sqrt(n_embd). */
void cpulm_gemma_scale_embd(const cpulm_ctx *c, float *row);
/* x += norm(xn) * w for every batch token (xn holds a sub-layer's output); ends on a barrier. */
void cpulm_gemma_post_norm_add(cpulm_ctx *c, const float *w, int ith, int nth);
/* The FFN half of a Gemma layer: x += post_norm(GELU-gated FFN(norm(x))); ends on a barrier. */
void cpulm_gemma_ffn_half(cpulm_ctx *c, const cpulm_layer *ly, int ith, int nth);
/* logits = cap * tanh(logits / cap), as the reference computes it. */
void cpulm_gemma_softcap(float cap, float *logits, int64_t n);

/* gemma4.c: a Gemma 4 layer il (gemma4.h); called by every thread with x complete, ends on
 * a barrier. cpulm_gemma4_inputs: the per-layer embedding inputs of the batch (c->ple) from
 * the scaled embeddings in x (a no-op without them); ends on a barrier. */
void cpulm_gemma4_layer(cpulm_ctx *c, const cpulm_layer *ly, int il, int ith, int nth);
void cpulm_gemma4_inputs(cpulm_ctx *c, int ith, int nth);

/* Rope on n_heads heads of v (head h at v + h * head_stride): the first n_rot dims of each
 * (pairs by the style), by the pair angles cs, sn. */
void cpulm_fwd_rope_heads(const cpulm_kernels *k, float *v, int n_heads, int head_stride, int n_rot,
                          cpulm_rope_style style, const float *cs, const float *sn);

/* deltanet.c: the layers of hybrid models. Called by every thread with xn = the normed
 * input complete; return with x += the layer's output (end on a barrier). */
void cpulm_dnet_layer(cpulm_ctx *c, const cpulm_layer *ly, int ith, int nth);
void cpulm_dnet_attn_layer(cpulm_ctx *c, const cpulm_layer *ly, int ith, int nth);
/* Groups the batch by sequence for the recurrent layers; single-threaded, before the pass
 * (a no-op for other models). */
void cpulm_dnet_plan(cpulm_ctx *c);

/* moe.c: the mixture-of-experts FFN of layer ly: c->x += MoE(c->xn). Called by every thread
 * with xn complete; returns with x complete (ends on a barrier). */
void cpulm_moe_ffn(cpulm_ctx *c, const cpulm_layer *ly, int ith, int nth);

#endif
