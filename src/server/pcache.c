/* pcache.c: hash-chained KV blocks with LRU eviction (see pcache.h).
 *
 * Index: an open hash table with chaining, keyed by a 64-bit hash of (parent block,
 * tokens); a hit is confirmed by comparing the parent pointer and the tokens, so a hash
 * collision can cost a miss but never a wrong block. LRU: a doubly linked list, most
 * recent at the head. Children counts keep eviction to leaves: evicting an inner block
 * would leave its descendants unreachable while they still hold memory.
 */
#include "server/pcache.h"

#include <stdlib.h>
#include <string.h>

typedef struct pblock {
    uint64_t hash;
    struct pblock *parent;      /* NULL: first block of a sequence */
    struct pblock *hnext;       /* hash chain */
    struct pblock *prev, *next; /* LRU list */
    int32_t n_children;
    uint8_t *blob; /* block_bytes */
    uint8_t *ckpt; /* ckpt_bytes, or NULL: a recurrent-state checkpoint (hybrid models) */
    size_t ckpt_bytes;
    cpulm_token toks[]; /* block_tokens */
} pblock;

struct cpulm_pcache {
    int32_t B;
    size_t block_bytes, entry_bytes; /* entry_bytes: one block's whole footprint */
    uint64_t max_bytes, bytes, n_evicted;
    int64_t n_blocks, n_ckpts;
    pblock **table;
    size_t n_buckets; /* power of two */
    pblock *head, *tail;
};

static uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

static uint64_t block_hash(const pblock *parent, const cpulm_token *t, int32_t B) {
    uint64_t h = parent ? parent->hash : 0x9e3779b97f4a7c15ull;
    for (int32_t i = 0; i < B; i++)
        h = mix(h ^ (uint64_t)(uint32_t)t[i]) + (uint64_t)i;
    return h;
}

cpulm_pcache *cpulm_pcache_new(int32_t block_tokens, size_t block_bytes, uint64_t max_bytes) {
    if (block_tokens < 1 || block_bytes < 1) return NULL;
    cpulm_pcache *pc = calloc(1, sizeof *pc);
    if (!pc) return NULL;
    pc->B = block_tokens;
    pc->block_bytes = block_bytes;
    pc->entry_bytes = sizeof(pblock) + sizeof(cpulm_token) * (size_t)block_tokens + block_bytes;
    pc->max_bytes = max_bytes;
    uint64_t cap = max_bytes / pc->entry_bytes; /* most blocks that can ever be held */
    pc->n_buckets = 64;
    while (pc->n_buckets < cap && pc->n_buckets < ((size_t)1 << 24))
        pc->n_buckets <<= 1;
    pc->table = calloc(pc->n_buckets, sizeof *pc->table);
    if (!pc->table) {
        free(pc);
        return NULL;
    }
    return pc;
}

void cpulm_pcache_free(cpulm_pcache *pc) {
    if (!pc) return;
    for (pblock *b = pc->head, *n; b; b = n) {
        n = b->next;
        free(b->blob);
        free(b->ckpt);
        free(b);
    }
    free(pc->table);
    free(pc);
}

int32_t cpulm_pcache_block_tokens(const cpulm_pcache *pc) {
    return pc->B;
}

int64_t cpulm_pcache_capacity(const cpulm_pcache *pc) {
    return (int64_t)(pc->max_bytes / pc->entry_bytes);
}

/* ---- LRU list ---- */

static void lru_unlink(cpulm_pcache *pc, pblock *b) {
    if (b->prev)
        b->prev->next = b->next;
    else
        pc->head = b->next;
    if (b->next)
        b->next->prev = b->prev;
    else
        pc->tail = b->prev;
    b->prev = b->next = NULL;
}

static void lru_push_front(cpulm_pcache *pc, pblock *b) {
    b->prev = NULL;
    b->next = pc->head;
    if (pc->head) pc->head->prev = b;
    pc->head = b;
    if (!pc->tail) pc->tail = b;
}

/* Touches last, its parent, ..., the first block: the root of the chain ends up the most
 * recent, so ancestors outlive their leaves. */
static void touch_chain(cpulm_pcache *pc, pblock *last) {
    for (pblock *b = last; b; b = b->parent) {
        lru_unlink(pc, b);
        lru_push_front(pc, b);
    }
}

/* ---- index ---- */

static pblock *find(const cpulm_pcache *pc, const pblock *parent, const cpulm_token *t) {
    uint64_t h = block_hash(parent, t, pc->B);
    for (pblock *b = pc->table[h & (pc->n_buckets - 1)]; b; b = b->hnext)
        if (b->hash == h && b->parent == parent &&
            memcmp(b->toks, t, sizeof(cpulm_token) * (size_t)pc->B) == 0)
            return b;
    return NULL;
}

static void unindex(cpulm_pcache *pc, pblock *b) {
    pblock **pp = &pc->table[b->hash & (pc->n_buckets - 1)];
    while (*pp != b)
        pp = &(*pp)->hnext;
    *pp = b->hnext;
}

/* Evicts the least recently used leaf. Returns 0 when there is none. */
static int evict_one(cpulm_pcache *pc) {
    pblock *b = pc->tail;
    while (b && b->n_children > 0)
        b = b->prev;
    if (!b) return 0;
    unindex(pc, b);
    lru_unlink(pc, b);
    if (b->parent) b->parent->n_children--;
    pc->bytes -= b->ckpt_bytes;
    pc->n_ckpts -= b->ckpt != NULL;
    free(b->blob);
    free(b->ckpt);
    free(b);
    pc->bytes -= pc->entry_bytes;
    pc->n_blocks--;
    pc->n_evicted++;
    return 1;
}

/* A new, filled and indexed block under parent, or NULL (no memory, fill failed). The
 * parent is referenced before evicting so it cannot be chosen as the victim. */
static pblock *create(cpulm_pcache *pc, pblock *parent, const cpulm_token *t, int32_t index,
                      cpulm_pcache_fill_fn fill, void *user) {
    if (parent) parent->n_children++;
    while (pc->bytes + pc->entry_bytes > pc->max_bytes)
        if (!evict_one(pc)) goto fail;
    pblock *b = calloc(1, sizeof *b + sizeof(cpulm_token) * (size_t)pc->B);
    uint8_t *blob = b ? malloc(pc->block_bytes) : NULL;
    if (!blob || fill(user, index, blob) != 0) {
        free(blob);
        free(b);
        goto fail;
    }
    b->blob = blob;
    b->parent = parent;
    memcpy(b->toks, t, sizeof(cpulm_token) * (size_t)pc->B);
    b->hash = block_hash(parent, t, pc->B);
    size_t k = b->hash & (pc->n_buckets - 1);
    b->hnext = pc->table[k];
    pc->table[k] = b;
    lru_push_front(pc, b);
    pc->bytes += pc->entry_bytes;
    pc->n_blocks++;
    return b;
fail:
    if (parent) parent->n_children--;
    return NULL;
}

/* ---- lookup and store ---- */

int32_t cpulm_pcache_lookup_ckpt(cpulm_pcache *pc, const cpulm_token *toks, int32_t n,
                                 const uint8_t **blobs, const uint8_t **ckpts, int32_t max_blocks) {
    int32_t nb = n / pc->B, k = 0;
    if (nb > max_blocks) nb = max_blocks;
    pblock *parent = NULL;
    for (; k < nb; k++) {
        pblock *b = find(pc, parent, toks + (size_t)k * pc->B);
        if (!b) break;
        blobs[k] = b->blob;
        if (ckpts) ckpts[k] = b->ckpt;
        parent = b;
    }
    touch_chain(pc, parent);
    return k;
}

int32_t cpulm_pcache_lookup(cpulm_pcache *pc, const cpulm_token *toks, int32_t n,
                            const uint8_t **blobs, int32_t max_blocks) {
    return cpulm_pcache_lookup_ckpt(pc, toks, n, blobs, NULL, max_blocks);
}

/* The block that ends toks[0..n) when its whole chain is cached, else NULL. */
static pblock *find_chain(const cpulm_pcache *pc, const cpulm_token *toks, int32_t n) {
    if (n < pc->B || n % pc->B != 0) return NULL;
    pblock *b = NULL;
    for (int32_t k = 0; k < n / pc->B; k++)
        if (!(b = find(pc, b, toks + (size_t)k * pc->B))) return NULL;
    return b;
}

/* The block is referenced while evicting so it cannot be the victim (nor its chain: each
 * ancestor has a child). */
int cpulm_pcache_set_ckpt(cpulm_pcache *pc, const cpulm_token *toks, int32_t n, size_t bytes,
                          cpulm_pcache_ckpt_fn fill, void *user) {
    pblock *b = find_chain(pc, toks, n);
    if (!b || bytes < 1) return -1;
    touch_chain(pc, b);
    if (b->ckpt) return 0;
    b->n_children++;
    int ok = 1;
    while (ok && pc->bytes + bytes > pc->max_bytes)
        ok = evict_one(pc);
    uint8_t *ck = ok ? malloc(bytes) : NULL;
    b->n_children--;
    if (!ck || fill(user, ck) != 0) {
        free(ck);
        return -1;
    }
    b->ckpt = ck;
    b->ckpt_bytes = bytes;
    pc->bytes += bytes;
    pc->n_ckpts++;
    return 0;
}

/* Blocks found on the way need no protection from eviction while the chain grows: each
 * has a child (the next one), and create() references the current parent first. */
int32_t cpulm_pcache_store(cpulm_pcache *pc, const cpulm_token *toks, int32_t n,
                           cpulm_pcache_fill_fn fill, void *user) {
    int32_t nb = n / pc->B, k = 0;
    pblock *parent = NULL;
    for (; k < nb; k++) {
        const cpulm_token *t = toks + (size_t)k * pc->B;
        pblock *b = find(pc, parent, t);
        if (!b && !(b = create(pc, parent, t, k, fill, user))) break;
        parent = b;
    }
    touch_chain(pc, parent);
    return k;
}

void cpulm_pcache_get_stats(const cpulm_pcache *pc, cpulm_pcache_stats *out) {
    out->n_blocks = pc->n_blocks;
    out->bytes = pc->bytes;
    out->max_bytes = pc->max_bytes;
    out->n_evicted = pc->n_evicted;
    out->n_ckpts = pc->n_ckpts;
}

int cpulm_pcache_fill_from_ctx(void *user, int32_t block, uint8_t *dst) {
    const cpulm_pcache_src *f = user;
    const int32_t B = f->block_tokens;
    return cpulm_ctx_seq_state_get(f->ctx, f->seq, block * B, B, dst) != CPULM_OK;
}
