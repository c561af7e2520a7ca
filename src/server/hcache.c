/* hcache.c: state checkpoints of hybrid models in the RAM prompt cache (see hcache.h). */
#include "server/hcache.h"

#include <stdlib.h>

struct cpulm_hcache {
    cpulm_ctx *ctx;
    int32_t B, every, max_blocks;
    uint64_t ckpt_bytes;
    const uint8_t **blobs, **ckpts; /* [max_blocks]: lookup results */
};

int32_t cpulm_hcache_every_for(uint64_t ckpt_bytes, uint64_t block_bytes, int32_t B) {
    uint64_t k = block_bytes ? (ckpt_bytes + block_bytes - 1) / block_bytes : 1;
    if (k < 1) k = 1;
    if (k > (uint64_t)(INT32_MAX / B)) k = (uint64_t)(INT32_MAX / B);
    return (int32_t)k * B;
}

cpulm_hcache *cpulm_hcache_new(cpulm_ctx *ctx, int32_t block_tokens) {
    uint64_t ck = cpulm_ctx_seq_rstate_bytes(ctx);
    uint64_t bb = cpulm_ctx_seq_state_bytes(ctx, block_tokens);
    if (ck == 0 || block_tokens < 1) return NULL;
    cpulm_hcache *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->ctx = ctx;
    h->B = block_tokens;
    h->ckpt_bytes = ck;
    h->every = cpulm_hcache_every_for(ck, bb, block_tokens);
    h->max_blocks = cpulm_ctx_n_ctx(ctx) / block_tokens + 1;
    h->blobs = malloc(sizeof *h->blobs * (size_t)h->max_blocks);
    h->ckpts = malloc(sizeof *h->ckpts * (size_t)h->max_blocks);
    if (!h->blobs || !h->ckpts) {
        cpulm_hcache_free(h);
        return NULL;
    }
    return h;
}

void cpulm_hcache_free(cpulm_hcache *h) {
    if (!h) return;
    free(h->blobs);
    free(h->ckpts);
    free(h);
}

int32_t cpulm_hcache_every(const cpulm_hcache *h) {
    return h->every;
}

int cpulm_hcache_is_point(int32_t p, int32_t n_prompt, int32_t fork, int32_t B, int32_t every) {
    if (p <= 0 || p >= n_prompt || p % B != 0) return 0;
    return p == (n_prompt - 1) / B * B || p == fork || p % every == 0;
}

int32_t cpulm_hcache_clip(const cpulm_hcache *h, int32_t start, int32_t k, int32_t n_prompt,
                          int32_t fork) {
    /* candidates after start: the next multiple of every, the fork, the last boundary */
    int32_t end = start + k;
    int32_t c[3] = {(start / h->every + 1) * h->every, fork, (n_prompt - 1) / h->B * h->B};
    for (int i = 0; i < 3; i++)
        if (c[i] > start && c[i] < end &&
            cpulm_hcache_is_point(c[i], n_prompt, fork, h->B, h->every))
            end = c[i];
    return end - start;
}

static int fill_state(void *user, uint8_t *dst) {
    const cpulm_pcache_src *f = user;
    return cpulm_ctx_seq_rstate_get(f->ctx, f->seq, dst) != CPULM_OK;
}

int cpulm_hcache_after(cpulm_hcache *h, cpulm_pcache *pc, int32_t seq, const cpulm_token *toks,
                       int32_t n, int32_t n_prompt, int32_t fork) {
    if (!cpulm_hcache_is_point(n, n_prompt, fork, h->B, h->every)) return 0;
    cpulm_pcache_src f = {h->ctx, seq, h->B};
    if (cpulm_pcache_store(pc, toks, n, cpulm_pcache_fill_from_ctx, &f) != n / h->B) return -1;
    return cpulm_pcache_set_ckpt(pc, toks, n, (size_t)h->ckpt_bytes, fill_state, &f) == 0 ? 1 : -1;
}

int32_t cpulm_hcache_restore(cpulm_hcache *h, cpulm_pcache *pc, int32_t seq,
                             const cpulm_token *prompt, int32_t limit, int32_t have,
                             int32_t *fork) {
    const int32_t B = h->B;
    int32_t nb = cpulm_pcache_lookup_ckpt(pc, prompt, limit, h->blobs, h->ckpts, h->max_blocks);
    int32_t k = nb - 1; /* the deepest checkpointed block */
    while (k >= 0 && !h->ckpts[k])
        k--;
    *fork = nb > k + 1 ? nb * B : 0;
    if (k < 0 || (k + 1) * B <= have) return have;
    for (int32_t b = have / B; b <= k; b++) /* blocks below have are there already */
        if (cpulm_ctx_seq_state_set(h->ctx, seq, b * B, B, h->blobs[b]) != CPULM_OK) goto fail;
    if (cpulm_ctx_seq_rstate_set(h->ctx, seq, h->ckpts[k]) != CPULM_OK) goto fail;
    return (k + 1) * B;
fail:
    (void)cpulm_ctx_seq_rm(h->ctx, seq, 0); /* never left stale; clearing cannot fail */
    return 0;
}
