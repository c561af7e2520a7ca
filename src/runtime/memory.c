/* memory.c: weights + KV + scratch bytes of a model and context (see memory.h). */
#include "memory.h"

#include "model/deltanet.h"
#include "model/moe.h"
#include "ssm_state.h"

#include "kv_cache.h"
#include "model/attention.h"

void cpulm_mem_dims_of(const cpulm_hparams *hp, cpulm_mem_dims *d) {
    d->n_embd = hp->n_embd;
    d->q_dim = (int64_t)hp->n_head * hp->head_dim;
    d->att_dim = d->q_dim;
    d->k_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    d->v_dim = d->k_dim;
    d->n_ff = hp->n_ff > hp->n_ff_shexp ? hp->n_ff : hp->n_ff_shexp; /* g, u: dense or shared */
    if (hp->n_pl > d->n_ff) d->n_ff = hp->n_pl; /* gemma4: g holds the per-layer gate */
    d->head_dim = hp->head_dim;
    d->n_vocab = hp->n_vocab;
    d->n_layer = hp->n_layer;
    /* hybrids: the full-attention layers; gemma4: all but the tail that shares KV */
    d->n_layer_kv = hp->ssm_heads         ? (hp->n_layer_attn > 0 ? hp->n_layer_attn : 1)
                    : hp->n_kv_shared > 0 ? hp->n_layer - hp->n_kv_shared
                                          : hp->n_layer;
    d->n_pl_all = (int64_t)hp->n_pl * hp->n_layer;
    int64_t w = d->n_embd;
    if (hp->ssm_inner > w) w = hp->ssm_inner; /* the recurrent layers' output projection */
    if (d->q_dim > w) w = d->q_dim;
    if (d->att_dim > w) w = d->att_dim;
    if (d->n_ff > w) w = d->n_ff;
    if (hp->n_pl > w) w = hp->n_pl; /* gemma4: the per-layer embedding projection's input */
    if (hp->encoder && d->q_dim + 2 * d->k_dim > w) w = d->q_dim + 2 * d->k_dim; /* fused qkv */
    d->widest = w;
}

void cpulm_mem_scratch_of(const cpulm_hparams *hp, const cpulm_mem_ctx *c, cpulm_mem_scratch *s) {
    cpulm_mem_dims d;
    cpulm_mem_dims_of(hp, &d);
    const size_t B = (size_t)c->n_batch, f = sizeof(float), i = sizeof(int32_t);
    s->x = f * B * (size_t)d.n_embd;
    s->xn = f * B * (size_t)d.widest; /* the normed input of any matmul */
    s->q = f * B * (size_t)d.q_dim;
    s->kc = f * B * (size_t)d.k_dim;
    s->vc = f * B * (size_t)d.v_dim;
    s->att = f * B * (size_t)d.att_dim;
    s->g = f * B * (size_t)d.n_ff;
    s->u = f * B * (size_t)d.n_ff;
    /* 4 bytes per element bounds every vec_dot_type (F32, F16, BF16, Q8_0, Q8_1, Q8_K) and
     * their repacked-GEMM extras */
    s->actq_stride = ((size_t)d.widest * 4 + 63) / 64 * 64;
    s->actq = s->actq_stride * B;
    s->scores_stride = ((size_t)d.head_dim + 15) / 16 * 16;
    if (hp->encoder) { /* encoder.c: a row of scores over the batch, or a rank head's state */
        const size_t w = B > (size_t)d.n_embd ? B : (size_t)d.n_embd;
        if (w > s->scores_stride) s->scores_stride = (w + 15) / 16 * 16;
    }
    /* gemma4: a token's per-layer embedding row (gemma4.c), and every token's inputs */
    if ((size_t)d.n_pl_all > s->scores_stride)
        s->scores_stride = ((size_t)d.n_pl_all + 15) / 16 * 16;
    s->ple = f * B * (size_t)d.n_pl_all;
    s->scores = f * s->scores_stride * (size_t)c->n_threads;
    s->attn =
        (size_t)cpulm_attn_scratch_bytes(hp, c->n_ctx, c->n_seq_max, c->n_batch, c->n_threads) +
        (c->attn_bf16 && c->kv_type == CPULM_KV_F16
             ? (size_t)cpulm_attn_bf16_bytes(hp, c->n_ctx, c->n_seq_max)
             : 0);
    s->tok = s->pos = s->seq = i * B;
    s->out_idx = i * (size_t)c->n_outputs_max;
    s->logits = c->embd == CPULM_EMBD_ONLY ? 0 : f * (size_t)c->n_outputs_max * (size_t)d.n_vocab;
    const int pooled = c->embd != CPULM_EMBD_OFF && c->pooling != CPULM_POOLING_NONE;
    const size_t embd_rows = c->embd == CPULM_EMBD_OFF ? 0
                             : pooled                  ? (size_t)c->n_seq_max
                                                       : (size_t)c->n_outputs_max;
    s->embd = f * embd_rows * (size_t)d.n_embd;
    s->embd_seq = pooled ? 3 * i * (size_t)c->n_seq_max : 0;
    s->work_base = CPULM_MEM_WORK_SLOT * (size_t)c->n_threads;
    s->moe = (size_t)cpulm_moe_scratch_bytes(hp, (int64_t)B);
    s->dnet = (size_t)cpulm_dnet_scratch_bytes(hp, (int64_t)B, c->n_threads);
}

uint64_t cpulm_mem_state_bytes(const cpulm_hparams *hp, int32_t n_seq) {
    return cpulm_ssm_bytes_for(hp->n_layer_recr, n_seq, cpulm_dnet_conv_floats(hp),
                               cpulm_dnet_state_floats(hp));
}

uint64_t cpulm_mem_scratch_total(const cpulm_mem_scratch *s) {
    return (uint64_t)s->x + s->xn + s->q + s->kc + s->vc + s->att + s->g + s->u + s->actq +
           s->scores + s->attn + s->tok + s->pos + s->seq + s->out_idx + s->logits + s->embd +
           s->embd_seq + s->work_base + s->moe + s->dnet + s->ple;
}

/* 0 when the KV rows cannot be stored in that type (cpulm_kv_type_fits; the
 * tiny test models have rows of 8 or 16): sizing must not reach the row-size assertion with
 * a type the user picked; creating such a cache fails with a message instead. */
uint64_t cpulm_mem_kv_bytes(const cpulm_hparams *hp, int32_t n_ctx, cpulm_kv_type t) {
    cpulm_mem_dims d;
    cpulm_mem_dims_of(hp, &d);
    if (n_ctx < 0 || d.k_dim <= 0 || !cpulm_kv_type_fits(t, d.head_dim)) return 0;
    return cpulm_kv_bytes_for(d.n_layer_kv, n_ctx, (int32_t)d.k_dim, t);
}

void cpulm_mem_need(const cpulm_hparams *hp, uint64_t weight_bytes, const cpulm_mem_ctx *c,
                    cpulm_memory *out) {
    cpulm_mem_scratch s;
    cpulm_mem_scratch_of(hp, c, &s);
    out->weights = weight_bytes;
    out->kv_per_token = cpulm_mem_kv_bytes(hp, 1, c->kv_type);
    /* the cache's reservation (runs padded to pages) and per-sequence bookkeeping */
    out->kv = 0;
    if (cpulm_mem_kv_bytes(hp, c->n_ctx, c->kv_type) > 0) {
        cpulm_mem_dims d;
        cpulm_mem_dims_of(hp, &d);
        out->kv = cpulm_kv_reserved_bytes(d.n_layer_kv, c->n_seq_max, c->n_ctx, (int32_t)d.k_dim,
                                          c->kv_type);
    }
    out->scratch = cpulm_mem_scratch_total(&s);
    out->state = cpulm_mem_state_bytes(hp, c->n_seq_max);
    out->total = out->weights + out->kv + out->scratch + out->state;
}

uint64_t cpulm_model_kv_bytes(const cpulm_model *m, int32_t n_ctx, cpulm_kv_type t) {
    return cpulm_mem_kv_bytes(&m->hp, n_ctx, t);
}
