/* context.c: context creation, batch validation and the public decode entry point.
 * Decode is all-or-nothing: it validates the whole batch (tokens, sequence ids, positions,
 * room in the cache) before touching any state. */
#include "context.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "memory.h"
#include "model/attention.h"
#include "model/deltanet.h"
#include "model/forward.h"
#include "model/moe.h"
#include "threads/numa.h"

/* The fields left out are 0: n_ctx, threads and n_outputs_max derived at creation (cpulm.h),
 * an F16 cache, logits only; attention by llama.cpp build 9928's rule (CPULM_ATTN_AUTO). */
cpulm_ctx_params cpulm_ctx_default_params(void) {
    return (cpulm_ctx_params){.n_seq_max = 1,
                              .n_batch = 512,
                              .pooling = CPULM_POOLING_UNSPECIFIED,
                              .attn_fast = CPULM_ATTN_AUTO};
}

_Static_assert(sizeof(struct cpulm_work_base) == CPULM_MEM_WORK_SLOT, "memory.h's work slot");

static int32_t pool_size(const cpulm_ctx_params *p);

/* Every buffer at the size memory.c gives, so estimates are what a context allocates. */
static cpulm_status alloc_scratch(cpulm_ctx *c, const cpulm_mem_scratch *s, cpulm_error *err) {
    c->x = malloc(s->x);
    c->xn = malloc(s->xn);
    c->q = malloc(s->q);
    c->kc = malloc(s->kc);
    c->vc = malloc(s->vc);
    c->att = malloc(s->att);
    c->g = malloc(s->g);
    c->u = malloc(s->u);
    c->actq_stride = s->actq_stride;
    c->actq = aligned_alloc(64, s->actq);
    c->scores_stride = s->scores_stride;
    c->scores = malloc(s->scores);
    c->tok = malloc(s->tok);
    c->pos = malloc(s->pos);
    c->seq = malloc(s->seq);
    c->out_idx = malloc(s->out_idx);
    /* optional buffers (size 0) stay NULL */
    c->logits = s->logits ? malloc(s->logits) : NULL;
    c->embd = s->embd ? malloc(s->embd) : NULL;
    c->embd_first = s->embd_seq ? malloc(s->embd_seq) : NULL;
    c->ple = s->ple ? malloc(s->ple) : NULL;
    c->work_base = aligned_alloc(64, s->work_base);
    if (!c->x || !c->xn || !c->q || !c->kc || !c->vc || !c->att || !c->g || !c->u || !c->actq ||
        !c->scores || !c->tok || !c->pos || !c->seq || !c->out_idx || (s->logits && !c->logits) ||
        (s->embd && !c->embd) || (s->embd_seq && !c->embd_first) || (s->ple && !c->ple) ||
        !c->work_base)
        return cpulm_errf(err, CPULM_ERR_NOMEM, "context: out of memory for scratch buffers");
    if (c->embd_first) {
        memset(c->embd_first, 0, s->embd_seq);
        c->embd_last = c->embd_first + c->p.n_seq_max;
        c->embd_count = c->embd_last + c->p.n_seq_max;
    }
    /* sized as cpulm_mem_scratch_of's moe and dnet fields */
    cpulm_status st = cpulm_moe_scratch_new(&c->moe, &c->m->hp, (int64_t)c->p.n_batch, err);
    if (st != CPULM_OK) return st;
    return cpulm_dnet_scratch_new(&c->dnet, &c->m->hp, (int64_t)c->p.n_batch, pool_size(&c->p),
                                  err);
}

static int32_t pool_size(const cpulm_ctx_params *p) {
    return p->n_threads > p->n_threads_batch ? p->n_threads : p->n_threads_batch;
}

static cpulm_status make_pool(cpulm_ctx *c) {
    int n = pool_size(&c->p);
    int cpus[512];
    /* the NUMA mode picks the CPUs; without a mode, pin only when each thread gets its own
     * physical core */
    int pin = cpulm_numa_thread_cpus(c->p.numa, n, cpus, 512) && !c->p.no_pin;
    return cpulm_pool_new(&c->pool, n, pin ? cpus : NULL);
}

/* Embeddings: the pooling defaults to the model's; no pooling without embeddings. */
static cpulm_status resolve_pooling(const cpulm_model *m, cpulm_ctx_params *p, cpulm_error *err) {
    if (p->embeddings < CPULM_EMBD_OFF || p->embeddings > CPULM_EMBD_WITH_LOGITS)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "context: bad embeddings mode %d",
                          (int)p->embeddings);
    if (p->embeddings == CPULM_EMBD_OFF) {
        p->pooling = CPULM_POOLING_NONE;
        if (m->arch->encoder)
            return cpulm_errf(err, CPULM_ERR_UNSUPPORTED,
                              "context: %s is an encoder model: it computes embeddings only "
                              "(start it with embeddings on)",
                              m->arch->name);
        return CPULM_OK;
    }
    if (p->pooling == CPULM_POOLING_UNSPECIFIED) p->pooling = (cpulm_pooling)m->hp.pooling;
    if (p->pooling == CPULM_POOLING_RANK && !(m->arch->encoder && (m->cls || m->cls_out)))
        return cpulm_errf(err, CPULM_ERR_UNSUPPORTED,
                          "context: rank pooling needs an encoder with a classification head "
                          "(cls.weight / cls.output.weight)");
    if (m->arch->encoder && p->embeddings != CPULM_EMBD_ONLY)
        return cpulm_errf(err, CPULM_ERR_UNSUPPORTED,
                          "context: %s is an encoder: it computes embeddings only, no logits",
                          m->arch->name);
    if (p->pooling < CPULM_POOLING_NONE || p->pooling > CPULM_POOLING_RANK)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "context: bad pooling %d", (int)p->pooling);
    return CPULM_OK;
}

/* Fills the defaults of *p the way cpulm_ctx_new does (n_outputs_max included). */
static cpulm_status resolve_params(const cpulm_model *m, cpulm_ctx_params *p, cpulm_error *err) {
    if (p->n_ctx <= 0) p->n_ctx = m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096;
    if (p->n_seq_max <= 0) p->n_seq_max = 1;
    if (p->n_batch <= 0) p->n_batch = 512;
    p->numa = cpulm_numa_resolve(p->numa);
    p->attn_fast = cpulm_attn_resolve(p->attn_fast);
    if (p->n_threads <= 0) p->n_threads = cpulm_numa_default_threads(p->numa);
    if (p->n_threads_batch <= 0) p->n_threads_batch = p->n_threads;
    if (p->n_threads > 512 || p->n_threads_batch > 512 || p->n_seq_max > 4096 ||
        p->n_ctx > (1 << 24))
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "context: parameters out of range");
    if (m->pos_embd && p->n_ctx > m->hp.n_ctx_train)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG,
                          "context: %d tokens, but this model has absolute positions for %d",
                          p->n_ctx, m->hp.n_ctx_train);
    if (p->n_outputs_max <= 0) p->n_outputs_max = p->n_seq_max;
    if (p->n_outputs_max > p->n_batch) p->n_outputs_max = p->n_batch;
    return resolve_pooling(m, p, err);
}

static cpulm_mem_ctx mem_ctx_of(const cpulm_ctx_params *p) {
    return (cpulm_mem_ctx){.n_ctx = p->n_ctx,
                           .n_seq_max = p->n_seq_max,
                           .n_batch = p->n_batch,
                           .n_outputs_max = p->n_outputs_max,
                           .n_threads = pool_size(p),
                           .kv_type = p->kv_type,
                           .attn_bf16 = p->attn_fast == CPULM_ATTN_BF16,
                           .embd = p->embeddings,
                           .pooling = p->pooling};
}

cpulm_ctx *cpulm_ctx_new(const cpulm_model *m, const cpulm_ctx_params *params, cpulm_error *err) {
    if (!m || m->vocab_only) {
        cpulm_errf(err, CPULM_ERR_INVALID_ARG, "context: model has no weights (vocab only)");
        return NULL;
    }
    cpulm_ctx_params p = params ? *params : cpulm_ctx_default_params();
    if (resolve_params(m, &p, err) != CPULM_OK) return NULL;
    /* aligned: the work counter sits on its own cache line */
    cpulm_ctx *c = aligned_alloc(64, (sizeof *c + 63) / 64 * 64);
    if (!c) {
        cpulm_errf(err, CPULM_ERR_NOMEM, "context: out of memory");
        return NULL;
    }
    memset(c, 0, sizeof *c);
    atomic_init(&c->work_ctr, 0);
    c->m = m;
    c->p = p;
    c->k = cpulm_kernels_get();
    c->n_outputs_max = p.n_outputs_max;
    c->pooled = p.embeddings != CPULM_EMBD_OFF && p.pooling != CPULM_POOLING_NONE;
    if (make_pool(c) != CPULM_OK) {
        cpulm_errf(err, CPULM_ERR_NOMEM, "context: cannot start %d threads", p.n_threads);
        goto fail;
    }
    const cpulm_mem_ctx mc = mem_ctx_of(&p);
    cpulm_mem_dims d;
    cpulm_mem_dims_of(&m->hp, &d);
    cpulm_mem_scratch s;
    cpulm_mem_scratch_of(&m->hp, &mc, &s);
    if (!cpulm_kv_type_fits(p.kv_type, 32)) { /* no type at all */
        cpulm_errf(err, CPULM_ERR_INVALID_ARG, "context: unknown KV cache type %d", (int)p.kv_type);
        goto fail;
    }
    if (!cpulm_kv_type_fits(p.kv_type, m->hp.head_dim)) {
        /* attention reads one head's slice of a row: it must be whole 32-element blocks */
        cpulm_errf(err, CPULM_ERR_UNSUPPORTED,
                   "context: a %s KV cache needs a head size that is a multiple of 32 (this "
                   "model's is %d); use f16 or f32",
                   p.kv_type == CPULM_KV_Q8_0 ? "q8_0" : "q4_0", m->hp.head_dim);
        goto fail;
    }
    if (cpulm_kv_init(&c->kv, d.n_layer_kv, p.n_seq_max, p.n_ctx, (int32_t)d.k_dim, p.kv_type,
                      err) != CPULM_OK ||
        cpulm_ssm_init(&c->ssm, m->hp.n_layer_recr, p.n_seq_max, cpulm_dnet_conv_floats(&m->hp),
                       cpulm_dnet_state_floats(&m->hp), err) != CPULM_OK)
        goto fail;
    if (alloc_scratch(c, &s, err) != CPULM_OK || cpulm_attn_init(c, err) != CPULM_OK) goto fail;
    c->theta_scale = powf(m->hp.rope_base, -2.0f / (float)m->hp.n_rot);
    return c;
fail:
    cpulm_ctx_free(c);
    return NULL;
}

void cpulm_ctx_free(cpulm_ctx *c) {
    if (!c) return;
    cpulm_pool_free(c->pool);
    cpulm_attn_free(c);
    cpulm_kv_release(&c->kv);
    cpulm_ssm_release(&c->ssm);
    cpulm_moe_scratch_free(c->moe);
    cpulm_dnet_scratch_free(c->dnet);
    void *bufs[] = {c->x,      c->xn,   c->q,          c->kc,        c->vc,  c->att, c->g,
                    c->u,      c->actq, c->scores,     c->tok,       c->pos, c->seq, c->out_idx,
                    c->logits, c->embd, c->embd_first, c->work_base, c->ple};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(c);
}

/* Pooled embeddings: each sequence's first and last batch index and token count. MEAN and
 * CLS pool the whole sequence, so it must start in this batch (position 0). */
static cpulm_status stage_pooling(cpulm_ctx *c) {
    memset(c->embd_count, 0, sizeof(int32_t) * (size_t)c->p.n_seq_max);
    for (int32_t i = 0; i < c->n_tok; i++) {
        int32_t s = c->seq[i];
        if (c->embd_count[s]++ == 0) {
            if (c->p.pooling != CPULM_POOLING_LAST && c->pos[i] != 0) return CPULM_ERR_INVALID_ARG;
            c->embd_first[s] = i;
        }
        c->embd_last[s] = i;
    }
    return CPULM_OK;
}

/* Validates b and fills c->tok/pos/seq/out_idx. Touches no KV state. */
static cpulm_status stage_batch(cpulm_ctx *c, const cpulm_batch *b) {
    if (!b || b->n < 1 || b->n > c->p.n_batch || !b->token) return CPULM_ERR_INVALID_ARG;
    int32_t n_seq = c->kv.n_seq, n_vocab = c->m->hp.n_vocab;
    int32_t next[4096]; /* n_seq_max <= 4096 */
    memcpy(next, c->kv.len, sizeof(int32_t) * (size_t)n_seq);
    int32_t n_out = 0;
    for (int32_t i = 0; i < b->n; i++) {
        int32_t s = b->seq ? b->seq[i] : 0, t = b->token[i];
        if (s < 0 || s >= n_seq || t < 0 || t >= n_vocab) return CPULM_ERR_INVALID_ARG;
        if (c->ssm.n_layer > 0 && c->ssm.stale[s]) return CPULM_ERR_INVALID_ARG;
        if (b->pos && b->pos[i] != next[s]) return CPULM_ERR_INVALID_ARG;
        if (next[s] >= c->p.n_ctx) return CPULM_ERR_KV_FULL;
        /* an encoder attends within the batch: a sequence must be whole in it */
        if (c->m->arch->encoder && c->kv.len[s] != 0) return CPULM_ERR_INVALID_ARG;
        c->tok[i] = t;
        c->seq[i] = s;
        c->pos[i] = next[s]++;
        int want = b->want_logits ? b->want_logits[i] != 0 : i == b->n - 1;
        /* pooled embeddings only: no per-token outputs */
        if (want && !(c->pooled && c->p.embeddings == CPULM_EMBD_ONLY)) {
            if (n_out >= c->n_outputs_max) return CPULM_ERR_INVALID_ARG;
            c->out_idx[n_out++] = i;
        }
    }
    c->n_tok = b->n;
    c->n_outputs = n_out;
    return c->pooled ? stage_pooling(c) : CPULM_OK;
}

cpulm_status cpulm_ctx_decode(cpulm_ctx *c, const cpulm_batch *b) {
    cpulm_status s = stage_batch(c, b);
    if (s != CPULM_OK) {
        c->n_outputs = 0;
        if (c->pooled) memset(c->embd_count, 0, sizeof(int32_t) * (size_t)c->p.n_seq_max);
        return s;
    }
    cpulm_forward(c);
    for (int32_t i = 0; i < c->n_tok; i++)
        if (c->pos[i] + 1 > c->kv.len[c->seq[i]]) c->kv.len[c->seq[i]] = c->pos[i] + 1;
    return CPULM_OK;
}

const float *cpulm_ctx_logits(const cpulm_ctx *c, int32_t i) {
    if (i < 0 || i >= c->n_outputs || !c->logits) return NULL;
    return c->logits + (size_t)i * (size_t)c->m->hp.n_vocab;
}

int32_t cpulm_ctx_n_outputs(const cpulm_ctx *c) {
    return c->n_outputs;
}

cpulm_pooling cpulm_ctx_pooling(const cpulm_ctx *c) {
    return c->p.pooling;
}

int32_t cpulm_ctx_n_embd(const cpulm_ctx *c) {
    return c->m->hp.n_embd;
}

const float *cpulm_ctx_embeddings_ith(const cpulm_ctx *c, int32_t i) {
    if (!c->embd || c->pooled || i < 0 || i >= c->n_outputs) return NULL;
    return c->embd + (size_t)i * (size_t)c->m->hp.n_embd;
}

const float *cpulm_ctx_embeddings_seq(const cpulm_ctx *c, int32_t seq) {
    if (!c->pooled || seq < 0 || seq >= c->p.n_seq_max || c->embd_count[seq] == 0) return NULL;
    return c->embd + (size_t)seq * (size_t)c->m->hp.n_embd;
}

static void clear_seqs(cpulm_ctx *c) {
    for (int32_t s = 0; s < c->kv.n_seq; s++) {
        cpulm_kv_seq_trim(&c->kv, s, 0);
        if (c->ssm.stale) c->ssm.stale[s] = 0; /* cleared: decodes from zeros again */
    }
}

/* One input longer than a batch, LAST pooling: its chunks in order, the last one pooled. */
static cpulm_status embed_chunked(cpulm_ctx *c, const cpulm_token *tok, int32_t n, float *out) {
    for (int32_t i = 0; i < n; i += c->p.n_batch) {
        int32_t k = n - i < c->p.n_batch ? n - i : c->p.n_batch;
        cpulm_batch b = {.n = k, .token = tok + i};
        cpulm_status s = cpulm_ctx_decode(c, &b);
        if (s != CPULM_OK) return s;
    }
    memcpy(out, cpulm_ctx_embeddings_seq(c, 0), sizeof(float) * (size_t)c->m->hp.n_embd);
    return CPULM_OK;
}

/* Decodes inputs [i0, i1) (they fit one batch), one sequence each, and copies their vectors. */
static cpulm_status embed_packed(cpulm_ctx *c, const cpulm_token *const *in, const int32_t *n_tok,
                                 int32_t i0, int32_t i1, float *out) {
    int32_t n = 0;
    for (int32_t i = i0; i < i1; i++)
        n += n_tok[i];
    int32_t *tok = malloc(sizeof(int32_t) * 2 * (size_t)n), *seq = tok + n;
    if (!tok) return CPULM_ERR_NOMEM;
    for (int32_t i = i0, k = 0; i < i1; i++)
        for (int32_t j = 0; j < n_tok[i]; j++, k++) {
            tok[k] = in[i][j];
            seq[k] = i - i0;
        }
    cpulm_batch b = {.n = n, .token = tok, .seq = seq};
    cpulm_status s = cpulm_ctx_decode(c, &b);
    free(tok);
    if (s != CPULM_OK) return s;
    const size_t E = (size_t)c->m->hp.n_embd;
    for (int32_t i = i0; i < i1; i++)
        memcpy(out + (size_t)i * E, cpulm_ctx_embeddings_seq(c, i - i0), sizeof(float) * E);
    return CPULM_OK;
}

cpulm_status cpulm_ctx_embed(cpulm_ctx *c, const cpulm_token *const *in, const int32_t *n_tok,
                             int32_t n, float *out) {
    if (!c->pooled || n < 0 || (n && (!in || !n_tok || !out))) return CPULM_ERR_INVALID_ARG;
    for (int32_t i = 0; i < n; i++) {
        if (n_tok[i] < 1 || !in[i]) return CPULM_ERR_INVALID_ARG;
        if (n_tok[i] > c->p.n_ctx) return CPULM_ERR_KV_FULL;
        if (n_tok[i] > c->p.n_batch && c->p.pooling != CPULM_POOLING_LAST)
            return CPULM_ERR_TOO_SMALL;
    }
    cpulm_status s = CPULM_OK;
    clear_seqs(c);
    for (int32_t i = 0; i < n && s == CPULM_OK;) {
        if (n_tok[i] > c->p.n_batch) {
            s = embed_chunked(c, in[i], n_tok[i], out + (size_t)i * (size_t)c->m->hp.n_embd);
            clear_seqs(c);
            i++;
            continue;
        }
        int32_t j = i, tokens = 0;
        while (j < n && j - i < c->p.n_seq_max && n_tok[j] <= c->p.n_batch - tokens)
            tokens += n_tok[j++];
        s = embed_packed(c, in, n_tok, i, j, out);
        clear_seqs(c);
        i = j;
    }
    return s;
}

void cpulm_embd_normalize(float *v, int32_t n) {
    double sum = 0.0; /* double: a long vector of large values must not overflow */
    for (int32_t i = 0; i < n; i++)
        sum += (double)v[i] * v[i];
    if (!(sum > 0.0)) return;
    const float scale = (float)(1.0 / sqrt(sum));
    for (int32_t i = 0; i < n; i++)
        v[i] *= scale;
}

int32_t cpulm_ctx_n_ctx(const cpulm_ctx *c) {
    return c->p.n_ctx;
}

int32_t cpulm_ctx_n_seq_max(const cpulm_ctx *c) {
    return c->p.n_seq_max;
}

int32_t cpulm_ctx_seq_len(const cpulm_ctx *c, int32_t seq) {
    if (seq < 0 || seq >= c->kv.n_seq) return -1;
    return c->kv.len[seq];
}

/* A hybrid model's recurrent state belongs to a sequence's whole length: it can be
 * dropped (length 0: the next decode starts from zeros) or kept, not cut shorter. */
static int hybrid_cut(const cpulm_ctx *c, int32_t seq, int32_t n) {
    return c->ssm.n_layer > 0 && n > 0 && n < c->kv.len[seq] && !c->ssm.stale[seq];
}

/* A stale sequence (attention KV set without its recurrent state) is only ever cut, cleared
 * or given its state; clearing makes the next decode start from zeros. */
static void hybrid_trimmed(cpulm_ctx *c, int32_t seq, int32_t p0) {
    if (c->ssm.n_layer > 0 && p0 == 0) c->ssm.stale[seq] = 0;
}

cpulm_status cpulm_ctx_seq_rm(cpulm_ctx *c, int32_t seq, int32_t p0) {
    if (seq < 0 || seq >= c->kv.n_seq || p0 < 0) return CPULM_ERR_INVALID_ARG;
    if (hybrid_cut(c, seq, p0)) return CPULM_ERR_UNSUPPORTED;
    cpulm_kv_seq_trim(&c->kv, seq, p0); /* and its pages go back to the OS */
    hybrid_trimmed(c, seq, p0);
    return CPULM_OK;
}

cpulm_status cpulm_ctx_seq_cp(cpulm_ctx *c, int32_t src, int32_t dst, int32_t n) {
    if (src < 0 || src >= c->kv.n_seq || dst < 0 || dst >= c->kv.n_seq || n < 0 ||
        n > c->kv.len[src])
        return CPULM_ERR_INVALID_ARG;
    if (hybrid_cut(c, src, n)) return CPULM_ERR_UNSUPPORTED;
    cpulm_kv_seq_cp(&c->kv, src, dst, n);
    if (n > 0) cpulm_ssm_seq_cp(&c->ssm, src, dst);
    hybrid_trimmed(c, dst, n);
    return CPULM_OK;
}

uint64_t cpulm_ctx_kv_resident_bytes(const cpulm_ctx *c) {
    return cpulm_kv_resident_bytes(&c->kv);
}

uint64_t cpulm_ctx_kv_shared_bytes(const cpulm_ctx *c) {
    return cpulm_kv_shared_bytes(&c->kv);
}

uint64_t cpulm_ctx_attn_ns(const cpulm_ctx *c) {
    return c->attn_ns;
}

uint64_t cpulm_ctx_matmul_ns(const cpulm_ctx *c) {
    return c->mm_ns;
}

/* Hybrid models: a blob holds the full-attention layers' KV only (a blob of positions
 * cannot carry the recurrent state of a prefix); seq_state_set leaves the sequence stale
 * until seq_rstate_set gives it the state of its new length. */
uint64_t cpulm_ctx_seq_state_bytes(const cpulm_ctx *c, int32_t n) {
    return n < 0 ? 0 : (uint64_t)cpulm_kv_state_bytes(&c->kv, n);
}

cpulm_status cpulm_ctx_seq_state_get(const cpulm_ctx *c, int32_t seq, int32_t p0, int32_t n,
                                     void *dst) {
    if (seq < 0 || seq >= c->kv.n_seq || p0 < 0 || n < 0 || p0 + n > c->kv.len[seq] || !dst)
        return CPULM_ERR_INVALID_ARG;
    cpulm_kv_seq_get(&c->kv, seq, p0, n, dst);
    return CPULM_OK;
}

cpulm_status cpulm_ctx_seq_state_set(cpulm_ctx *c, int32_t seq, int32_t p0, int32_t n,
                                     const void *src) {
    if (seq < 0 || seq >= c->kv.n_seq || p0 < 0 || n < 0 || p0 > c->kv.len[seq] ||
        n > c->p.n_ctx - p0 || !src)
        return CPULM_ERR_INVALID_ARG;
    cpulm_kv_seq_set(&c->kv, seq, p0, n, src);
    if (c->ssm.n_layer > 0) c->ssm.stale[seq] = p0 + n > 0;
    return CPULM_OK;
}

uint64_t cpulm_ctx_seq_rstate_bytes(const cpulm_ctx *c) {
    return c->ssm.n_layer > 0 ? cpulm_ssm_seq_bytes(&c->ssm) : 0;
}

cpulm_status cpulm_ctx_seq_rstate_get(const cpulm_ctx *c, int32_t seq, void *dst) {
    if (seq < 0 || seq >= c->kv.n_seq || !dst) return CPULM_ERR_INVALID_ARG;
    if (c->ssm.n_layer == 0) return CPULM_ERR_UNSUPPORTED;
    if (c->ssm.stale[seq]) return CPULM_ERR_INVALID_ARG; /* no state of its length to give */
    if (c->kv.len[seq] == 0) { /* decoding position 0 starts from zeros, whatever is there */
        memset(dst, 0, (size_t)cpulm_ssm_seq_bytes(&c->ssm));
        return CPULM_OK;
    }
    cpulm_ssm_seq_get(&c->ssm, seq, dst);
    return CPULM_OK;
}

cpulm_status cpulm_ctx_seq_rstate_set(cpulm_ctx *c, int32_t seq, const void *src) {
    if (seq < 0 || seq >= c->kv.n_seq || !src) return CPULM_ERR_INVALID_ARG;
    if (c->ssm.n_layer == 0) return CPULM_ERR_UNSUPPORTED;
    cpulm_ssm_seq_set(&c->ssm, seq, src);
    return CPULM_OK;
}

void cpulm_ctx_set_threads(cpulm_ctx *c, int32_t n_threads, int32_t n_threads_batch) {
    int cap = cpulm_pool_size(c->pool);
    if (n_threads >= 1) c->p.n_threads = n_threads < cap ? n_threads : cap;
    if (n_threads_batch >= 1) c->p.n_threads_batch = n_threads_batch < cap ? n_threads_batch : cap;
}

int32_t cpulm_ctx_threads(const cpulm_ctx *c) {
    return c->p.n_threads;
}

uint64_t cpulm_ctx_memory_bytes(const cpulm_ctx *c) {
    cpulm_mem_ctx mc = mem_ctx_of(&c->p);
    mc.n_threads = cpulm_pool_size(c->pool); /* set_threads may since have lowered p's */
    cpulm_memory need;
    cpulm_mem_need(&c->m->hp, 0, &mc, &need);
    return need.kv + need.scratch + need.state;
}

/* The weights a loaded model keeps: its tensor data (a repacked copy has the same size). */
static uint64_t weight_bytes(const cpulm_model *m) {
    cpulm_model_info in;
    cpulm_model_get_info(m, &in);
    return in.weight_bytes;
}

cpulm_status cpulm_model_memory(const cpulm_model *m, const cpulm_ctx_params *params,
                                cpulm_memory *out) {
    cpulm_ctx_params p = params ? *params : cpulm_ctx_default_params();
    cpulm_status s = resolve_params(m, &p, NULL);
    if (s != CPULM_OK) return s;
    const cpulm_mem_ctx mc = mem_ctx_of(&p);
    cpulm_mem_need(&m->hp, weight_bytes(m), &mc, out);
    return CPULM_OK;
}
