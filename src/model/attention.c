/* attention.c: the attention driver: every query row of a batch over the KV cache, whatever
 * the cache type or numerics, flash-attention style. What it owns (mask, window, sinks,
 * scale, GQA grouping, the split over threads), the numerics and their tile ops (exact,
 * tiled, quant) and the tile readers: docs/ARCHITECTURE.md "Attention"; their arithmetic:
 * docs/CORRECTNESS.md.
 *
 * A work item is a block of up to CPULM_ATT_ROWS query rows sharing keys (consecutive tokens
 * of one sequence x the query heads of one KV head); a one-token block may take several KV
 * heads (their adjacent slices of each cache row, so each page of the cache is walked once per
 * item: at depth 32k the page walks of reading 1/n_kv of every row doubled the time). Keys go
 * in tiles of CPULM_ATTN_TILE aligned at 0; tiled and quant fold chunks of CPULM_ATTN_CHUNK
 * in chunk order (attn_merge). Generation on those splits the chunks over the threads: the
 * thread that finishes a (token, group)'s last chunk folds them (a counter per pair, no
 * barrier: under load a barrier costs more than the fold).
 *
 * Tiles and chunks sit at fixed positions and each op is per row and key in a fixed order,
 * so a token's result is the same bits whichever item, batch, thread count or head grouping
 * computed it; under CPULM_ATTN_AUTO a sequence's numerics follow its rows in the call.
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include "attention.h"

#include "base/clock.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/fp16.h"
#include "../base/status.h"
#include "../runtime/context.h"
#include "kvrot.h"
#include "work.h"

#define TILE  CPULM_ATTN_TILE
#define CHUNK CPULM_ATTN_CHUNK
/* Split generation: items per thread at least, when grouping KV heads into items. 16, not
 * 8: at depth 2048-4096 a 2-thread decode layer got 8 items of 8 KV heads a thread and
 * 0.90-0.91x the time with 16 of 4 (q8_0 cache; deeper, the chunks are items enough). */
#define SPLIT_ITEMS 16

enum { NUM_EXACT, NUM_TILED, NUM_QUANT, NUM_WALK, NUM_BF16, NUM_MIXED /* per block: blk_num */ };

typedef struct att_ws {         /* one thread's tiles */
    float *q, *o, *oc;          /* [rows][d] */
    float *m, *l, *mc, *lc, *a; /* [rows] */
    int32_t *qpos;              /* [rows] */
    float *s, *ms;              /* [rows][TILE] */
    float *kf, *vf;             /* [TILE][tile_heads * d] */
    uint32_t *kb, *vb;          /* bf16: [tile_heads][TILE * d / 2] (attn_bpack's layouts) */
    double *qt;                 /* exact: [d][rows], the item's queries transposed */
    int8_t *q8;                 /* quant: [rows][d] Q8_0 queries (in qt's space) */
    uint32_t *qb;               /* bf16: [rows][d / 2] query pairs (in qt's space) */
    float *qd;                  /* [rows][d / 32]: their block scales (attn_qquant) */
    int nrows;                  /* rows of the current item */
    int32_t rows_t, rows_h;     /* split items: the token and first head gathered, or -1 */
} att_ws;

struct cpulm_attn {
    int gq, tok_per_blk, rows; /* group size, tokens per block, rows per block */
    int tile_heads;            /* KV heads a K/V tile buffer holds */
    int32_t n_chunk_max;
    int split_max;
    size_t ws_floats;
    float *ws;    /* [threads][ws_floats] */
    float *part;  /* split partials [split_max][n_head_kv][n_chunk_max][gq][d+2] */
    int32_t *blk; /* [n_batch + 1]: first token of each block */
    int32_t n_blk;
    int num;           /* NUM_*: the numerics of this batch, or NUM_MIXED: blk_num's */
    uint8_t *blk_num;  /* [n_batch]: each block's numerics (CPULM_ATTN_AUTO) */
    int32_t *seq_rows; /* [n_seq_max]: each sequence's rows in this call (CPULM_ATTN_AUTO) */
    int split;         /* chunked numerics, one-token blocks, few: items are chunks */
    int split_ng;      /* split: KV heads per item */
    /* [split_max][n_head_kv]: chunks of the pair finished in this layer (reset by its fold) */
    atomic_uint *chunks_done;
    int32_t rot_k, rot_v; /* the quantized cache's rotation blocks (kvrot.h), 0: none */
    /* bf16 (CPULM_ATTN_BF16 on an F16 cache): a layer's tiles packed once for every block of
     * the call, [n_seq][bp_tiles][n_head_kv] tiles of K then V (TILE * d / 2 pairs each);
     * bp_at: per tile, the layer pass it holds (pass << 1 | packed); the call's passes start
     * at bp_pass (one per layer); seq_end: the keys each sequence holds in the call */
    uint32_t *bp;
    atomic_ullong *bp_at;
    uint64_t bp_pass;
    int32_t bp_tiles;
    int32_t *seq_end;
};

/* One layer's call: what every item reads. */
typedef struct att_run {
    cpulm_ctx *c;
    const struct cpulm_attn *a;
    const cpulm_kernels *k;
    int il, num;
    int64_t d;
    float scale;
    int32_t window;
    const float *sinks;
} att_run;

/* Levels without bf16 products inherit the generic attn_b* ops: scalar code ~16x slower than
 * the f32 tiles (pp2048 at the avx2 level, 2026-12-05), a trap for a speed option. The generic
 * level itself keeps them: there they are the numerics' oracle. */
int cpulm_attn_resolve(int attn_fast) {
    if (attn_fast != CPULM_ATTN_BF16) return attn_fast;
    const cpulm_kernels *k = cpulm_kernels_get(), *g = &cpulm_kernels_generic;
    const int fast = k->attn_bscores != g->attn_bscores, oracle = !strcmp(k->name, g->name);
    return fast || oracle ? attn_fast : CPULM_ATTN_AUTO;
}

/* The bf16 numerics' shared tiles (pack_tile), when the context may take them: one layer's
 * worth of the cache (its pages touched only as tiles are packed). */
static cpulm_status bf16_init(cpulm_ctx *c, cpulm_error *err) {
    struct cpulm_attn *a = c->attn;
    if (c->p.attn_fast != CPULM_ATTN_BF16 || c->kv.dtype != CPULM_DTYPE_F16) return CPULM_OK;
    const size_t tiles = cpulm_attn_bf16_tiles(&c->m->hp, c->kv.n_ctx, c->kv.n_seq);
    a->bp_tiles = (c->kv.n_ctx + TILE - 1) / TILE;
    a->bp = malloc(tiles * cpulm_attn_bf16_tile_bytes(&c->m->hp));
    a->bp_at = malloc(tiles * sizeof(atomic_ullong));
    a->seq_end = malloc(sizeof(int32_t) * (size_t)c->kv.n_seq);
    if (!a->bp || !a->bp_at || !a->seq_end)
        return cpulm_errf(err, CPULM_ERR_NOMEM, "context: out of memory for bf16 attention tiles");
    for (size_t i = 0; i < tiles; i++)
        atomic_init(&a->bp_at[i], 0);
    a->bp_pass = 1;
    return CPULM_OK;
}

cpulm_status cpulm_attn_init(cpulm_ctx *c, cpulm_error *err) {
    const cpulm_hparams *hp = &c->m->hp;
    struct cpulm_attn *a = calloc(1, sizeof *a);
    if (!a) return cpulm_errf(err, CPULM_ERR_NOMEM, "context: out of memory for attention");
    c->attn = a;
    a->gq = cpulm_attn_group_size(hp);
    a->tok_per_blk = cpulm_attn_tokens_per_block(a->gq);
    a->rows = a->gq * a->tok_per_blk;
    a->n_chunk_max = (c->p.n_ctx + CHUNK - 1) / CHUNK;
    a->split_max = cpulm_attn_split_max(c->p.n_seq_max, c->p.n_batch);
    a->tile_heads = cpulm_attn_tile_heads(hp);
    cpulm_kvrot_plan(c->m, (int)c->kv.dtype, &a->rot_k, &a->rot_v);
    a->ws_floats = cpulm_attn_ws_floats(a->rows, hp->head_dim, a->tile_heads);
    int nth = cpulm_pool_size(c->pool);
    a->ws = malloc(sizeof(float) * a->ws_floats * (size_t)nth);
    a->part = malloc(sizeof(float) * (size_t)cpulm_attn_part_floats(hp, c->p.n_ctx, a->split_max));
    a->blk = malloc(sizeof(int32_t) * ((size_t)c->p.n_batch + 1));
    a->blk_num = malloc((size_t)c->p.n_batch + 1);
    a->seq_rows = malloc(sizeof(int32_t) * (size_t)c->p.n_seq_max);
    a->chunks_done = malloc(sizeof(atomic_uint) * CPULM_ATT_SPLIT_MAX * (size_t)hp->n_head_kv);
    if (!a->ws || !a->part || !a->blk || !a->blk_num || !a->seq_rows || !a->chunks_done)
        return cpulm_errf(err, CPULM_ERR_NOMEM, "context: out of memory for attention scratch");
    return bf16_init(c, err);
}

void cpulm_attn_free(cpulm_ctx *c) {
    struct cpulm_attn *a = c->attn;
    if (!a) return;
    free(a->ws);
    free(a->part);
    free(a->blk);
    free(a->blk_num);
    free(a->seq_rows);
    free(a->chunks_done);
    free(a->bp);
    free(a->bp_at);
    free(a->seq_end);
    free(a);
    c->attn = NULL;
}

/* CPULM_ATTN_AUTO: llama.cpp build 9928's rule, by the rows of each sequence, not of the call
 * (docs/CORRECTNESS.md "Default attention numerics"). */
static int auto_tiled(const cpulm_ctx *c, int32_t seq_rows) {
    return seq_rows >= CPULM_ATTN_AUTO_ROWS && c->m->hp.head_dim % 16 == 0;
}

static int auto_call(const cpulm_ctx *c) {
    return c->kv.dtype == CPULM_DTYPE_F16 &&
           (c->p.attn_fast == CPULM_ATTN_AUTO || c->p.attn_fast == CPULM_ATTN_BF16);
}

/* The numerics of a call that is not auto_call. */
static int numerics_of(const cpulm_ctx *c) {
    switch (c->kv.dtype) {
    case CPULM_DTYPE_F16:
        return c->p.attn_fast < 0 ? NUM_WALK : c->p.attn_fast ? NUM_TILED : NUM_EXACT;
    case CPULM_DTYPE_Q8_0:
    case CPULM_DTYPE_Q4_0: return NUM_QUANT;
    default: return NUM_TILED;
    }
}

/* auto_call: each block's numerics by its sequence's rows; returns the call's numerics
 * (NUM_MIXED when the blocks differ). */
static int auto_plan(cpulm_ctx *c) {
    struct cpulm_attn *a = c->attn;
    for (int32_t b = 0; b < a->n_blk; b++)
        a->seq_rows[c->seq[a->blk[b]]] = 0;
    for (int32_t t = 0; t < c->n_tok; t++)
        a->seq_rows[c->seq[t]]++;
    const int fast = c->p.attn_fast == CPULM_ATTN_BF16 ? NUM_BF16 : NUM_TILED;
    int tiled = 0;
    for (int32_t b = 0; b < a->n_blk; b++) {
        a->blk_num[b] = auto_tiled(c, a->seq_rows[c->seq[a->blk[b]]]) ? fast : NUM_EXACT;
        tiled += a->blk_num[b] == fast;
    }
    return tiled == 0 ? NUM_EXACT : tiled == a->n_blk ? fast : NUM_MIXED;
}

/* The most KV heads per item (a divisor of n_kv whose rows fit an item) that leave units
 * times the item count at least need. */
static int most_heads(const cpulm_ctx *c, uint64_t units, uint64_t need) {
    const struct cpulm_attn *a = c->attn;
    const int n_kv = c->m->hp.n_head_kv;
    int best = 1;
    for (int h = 2; h <= n_kv; h++)
        if (n_kv % h == 0 && h * a->gq <= a->rows && units * (uint64_t)(n_kv / h) >= need) best = h;
    return best;
}

void cpulm_attn_plan(cpulm_ctx *c) {
    struct cpulm_attn *a = c->attn;
    const int32_t tpb = cpulm_attn_block_tokens(a->tok_per_blk, a->gq, c->m->hp.n_head_kv, c->n_tok,
                                                cpulm_pool_size(c->pool));
    int32_t n = 0;
    for (int32_t t = 0; t < c->n_tok; t++) {
        int cont = t > 0 && c->seq[t] == c->seq[t - 1] && c->pos[t] == c->pos[t - 1] + 1 &&
                   t - a->blk[n - 1] < tpb;
        if (!cont) a->blk[n++] = t;
    }
    a->blk[n] = c->n_tok;
    a->n_blk = n;
    a->num = auto_call(c) ? auto_plan(c) : numerics_of(c);
    if (a->bp) { /* new passes for the call's layers; the keys each sequence holds */
        a->bp_pass += (uint64_t)c->m->hp.n_layer;
        for (int32_t t = 0; t < c->n_tok; t++)
            a->seq_end[c->seq[t]] = 0;
        for (int32_t t = 0; t < c->n_tok; t++)
            if (c->pos[t] + 1 > a->seq_end[c->seq[t]]) a->seq_end[c->seq[t]] = c->pos[t] + 1;
    }
    a->split = (a->num == NUM_TILED || a->num == NUM_QUANT) && n == c->n_tok && n <= a->split_max;
    if (!a->split) return;
    const int n_kv = c->m->hp.n_head_kv;
    uint64_t chunks = 0; /* without a window: a grouping heuristic only */
    for (int32_t t = 0; t < c->n_tok; t++)
        chunks += (uint64_t)(c->pos[t] / CHUNK + 1);
    a->split_ng = most_heads(c, chunks, (uint64_t)SPLIT_ITEMS * (uint64_t)cpulm_pool_size(c->pool));
    for (int32_t i = 0; i < c->n_tok * n_kv; i++)
        atomic_init(&a->chunks_done[i], 0);
}

static att_ws ws_of(const cpulm_ctx *c, int ith) {
    const struct cpulm_attn *a = c->attn;
    int64_t d = c->m->hp.head_dim, r = a->rows;
    float *p = a->ws + a->ws_floats * (size_t)ith;
    att_ws w;
    w.qt = (double *)p, p += 2 * r * d; /* first: ws_floats is even, so doubles align */
    w.q8 = (int8_t *)w.qt; /* r * d bytes and r * d / 32 floats fit the r * d doubles */
    w.qb = (uint32_t *)w.qt;
    w.qd = (float *)(void *)(w.q8 + r * d); /* aligned: a quantized cache has d % 32 == 0 */
    w.q = p, p += r * d;
    w.o = p, p += r * d;
    w.oc = p, p += r * d;
    w.m = p, p += r;
    w.l = p, p += r;
    w.mc = p, p += r;
    w.lc = p, p += r;
    w.a = p, p += r;
    w.qpos = (int32_t *)p, p += r;
    w.s = p, p += r * TILE;
    w.ms = p, p += r * TILE;
    w.kf = p, p += TILE * d * a->tile_heads;
    w.vf = p, p += TILE * d * a->tile_heads;
    w.kb = (uint32_t *)p, p += TILE * d * a->tile_heads / 2;
    w.vb = (uint32_t *)p;
    w.nrows = 0;
    w.rows_t = w.rows_h = -1;
    return w;
}

/* The first key a query at pos sees. */
static int32_t key_lo(const att_run *r, int32_t pos) {
    return r->window > 0 && pos >= r->window ? pos - r->window + 1 : 0;
}

static int32_t tile_floor(int32_t j) {
    return j / TILE * TILE;
}

/* ---- tile readers ---- */

/* A tile of keys j..j+n-1 for KV heads g0..g0+ng-1: head g0 + h's K rows start at k + h * hs
 * bytes, ld apart (floats for f32 tiles, bytes for quantized rows); V alike. nk, nv: head
 * g0's rows read after this tile (hints for the quantized ops; NULL: none). */
typedef struct att_tile {
    int32_t j;
    int n;
    const uint8_t *k, *v, *nk, *nv;
    int64_t ld;
    size_t hs;
    const uint32_t *kb, *vb; /* bf16: head h's packed K and V at + h * TILE * d / 2 */
    int bnk;                 /* bf16: keys a pair row of kb (attn_bscores' nk) */
} att_tile;

/* nx = KV head g0's K and V rows of seq from position j. */
static void rows_at(const att_run *r, int32_t seq, int32_t j, int g0, const uint8_t *nx[2]) {
    const size_t off = cpulm_dtype_row_bytes(r->c->kv.dtype, r->d) * (size_t)g0;
    nx[0] = cpulm_kv_k(&r->c->kv, r->il, seq, j) + off;
    nx[1] = cpulm_kv_v(&r->c->kv, r->il, seq, j) + off;
}

/* A hint to bring the cache lines of [p, p + n) in (a hint: no fault, no effect on
 * results). */
static void prefetch_span(const uint8_t *p, size_t n) {
    for (uintptr_t a = (uintptr_t)p & ~(uintptr_t)63; a < (uintptr_t)p + n; a += 64)
        __builtin_prefetch((const void *)a, 0, 3);
}

/* n cache rows from row (heads' slices of span bytes each row) as f32 [n][span elements] in
 * buf, or the rows themselves when the cache is f32 (*ld: their stride in floats). The heads
 * of a row are converted by one call and the tile is one stream of the cache, which the
 * hardware prefetchers follow (per-head slices left each call waiting for its first load).
 * Also prefetches the same slices of the n_next rows from next, the rows read after the tile:
 * across 4 KiB pages the hardware prefetchers stop (~40% of generation time at depth 4096
 * without the hint, docs/perf-log/2026-12-01-zen5-depth4096-profile.md). */
static const float *f32_rows(const cpulm_ctx *c, const uint8_t *row, size_t span, int64_t wd, int n,
                             const uint8_t *next, int n_next, float *buf, int64_t *ld) {
    const cpulm_kv *kv = &c->kv;
    if (kv->dtype == CPULM_DTYPE_F32) {
        for (int r = 0; r < n_next; r++)
            prefetch_span(next + (size_t)r * kv->row_bytes, span);
        *ld = kv->kv_dim;
        return (const float *)row;
    }
    cpulm_to_float_fn cvt = c->k->to_float[kv->dtype];
    for (int r = 0; r < n; r++) {
        if (r < n_next) prefetch_span(next + (size_t)r * kv->row_bytes, span);
        cvt(row + (size_t)r * kv->row_bytes, buf + r * wd, wd);
    }
    *ld = wd;
    return buf;
}

/* Whether a tile is converted as whole cache rows, every KV head's slice: when the heads
 * read are under 16 values a row (a head of 8: one masked instruction per call, so the
 * per-row calls were the cost, ~5% of a stories260K verification) and whole rows are at
 * most 4 times that and fit the tile buffer. The values are the same (exact conversions). */
static int whole_rows(const att_run *r, int64_t wd) {
    const cpulm_kv *kv = &r->c->kv;
    return kv->dtype == CPULM_DTYPE_F16 && wd < 16 && kv->kv_dim <= 4 * wd &&
           kv->kv_dim <= r->d * r->a->tile_heads;
}

/* n whole cache rows from row (adjacent in their run) as f32 [n][kv_dim] in buf, by one
 * call; prefetches the n_next whole rows from next (as f32_rows). */
static const float *f32_run(const cpulm_ctx *c, const uint8_t *row, int n, const uint8_t *next,
                            int n_next, float *buf) {
    const cpulm_kv *kv = &c->kv;
    prefetch_span(next, (size_t)n_next * kv->row_bytes);
    c->k->to_float[kv->dtype](row, buf, (int64_t)n * kv->kv_dim);
    return buf;
}

/* bf16: this layer pass's tag of a packed shared tile (bp_at) */
static uint64_t packed_tag(const att_run *r) {
    return ((r->a->bp_pass + (uint64_t)r->il) << 1) | 1;
}

/* bf16: the layer's shared K tile of (seq, keys j.., KV head g), its V tile hb pairs on; *at:
 * its index. *mine = 1: it is not packed for this pass and this thread now packs it (others
 * see it claimed); *mine = 0 and NULL: another thread is packing it. */
static uint32_t *shared_tile(const att_run *r, int32_t seq, int32_t j, int g, size_t *at,
                             int *mine) {
    const struct cpulm_attn *a = r->a;
    const uint64_t packed = packed_tag(r), claimed = packed - 1;
    *at = ((size_t)seq * (size_t)a->bp_tiles + (size_t)(j / TILE)) * (size_t)r->c->m->hp.n_head_kv +
          (size_t)g;
    unsigned long long st = atomic_load_explicit(&a->bp_at[*at], memory_order_acquire);
    *mine = st != packed && st != claimed &&
            atomic_compare_exchange_strong(&a->bp_at[*at], &st, claimed);
    const int ready = !*mine && st == packed;
    return ready || *mine
               ? a->bp + *at * (cpulm_attn_bf16_tile_bytes(&r->c->m->hp) / sizeof(uint32_t))
               : NULL;
}

/* bf16 (an F16 cache): heads g0.. of the tile of keys j.. as attn_bpack's pairs, with every
 * key of the tile the sequence holds in this call (nf), so that one packing serves all the
 * call's blocks: a single head's from the layer's shared tiles, packed here first if no thread
 * has (per 64-token block, packing was ~7% of a pp16384); else, or while another thread packs
 * it, in w's own buffers. Packing first hints the nn rows at pk and pv (span bytes of each). */
static void pack_tile(const att_run *r, att_ws *w, att_tile *t, int32_t seq, int g0, int ng,
                      size_t slice, const uint8_t *k, const uint8_t *v, const uint8_t *pk,
                      const uint8_t *pv, int nn) {
    const cpulm_kv *kv = &r->c->kv;
    const size_t hb = (size_t)TILE * (size_t)r->d / 2, span = slice * (size_t)ng;
    const int32_t left = r->a->seq_end[seq] - t->j;
    const int nf = left < TILE ? (int)left : TILE;
    size_t at = 0;
    int mine = 0;
    uint32_t *sh = ng == 1 && r->a->bp ? shared_tile(r, seq, t->j, g0, &at, &mine) : NULL;
    t->bnk = (nf + 15) / 16 * 16;
    t->kb = sh ? sh : w->kb, t->vb = sh ? sh + hb : w->vb;
    if (sh && !mine) return;
    for (int j = 0; j < nn && j < nf; j++) {
        prefetch_span(pk + (size_t)j * kv->row_bytes, span);
        prefetch_span(pv + (size_t)j * kv->row_bytes, span);
    }
    const int64_t ld = (int64_t)kv->row_bytes / 2;
    for (int h = 0; h < ng; h++)
        r->k->attn_bpack(r->d, nf, (const uint16_t *)(k + h * slice), ld,
                         (const uint16_t *)(v + h * slice), ld, (uint32_t *)t->kb + h * hb,
                         (uint32_t *)t->vb + h * hb);
    if (mine) atomic_store_explicit(&r->a->bp_at[at], packed_tag(r), memory_order_release);
}

/* The tile of keys j..j+n-1 of seq (n <= TILE; the walk ends at jend) for KV heads
 * g0..g0+ng-1. nx: head g0's K and V rows this thread reads after jend, or NULLs. */
static att_tile read_tile(const att_run *r, att_ws *w, int32_t seq, int32_t j, int n, int g0,
                          int ng, int32_t jend, const uint8_t *const nx[2]) {
    const cpulm_kv *kv = &r->c->kv;
    const size_t slice = cpulm_dtype_row_bytes(kv->dtype, r->d), off = slice * (size_t)g0;
    const uint8_t *k = cpulm_kv_k(kv, r->il, seq, j) + off,
                  *v = cpulm_kv_v(kv, r->il, seq, j) + off;
    att_tile t = {.j = j, .n = n};
    if (r->num == NUM_QUANT) { /* in place; the ops hint the rows read next */
        const int last = j + TILE >= jend;
        const size_t rows = (size_t)n * kv->row_bytes;
        t.k = k, t.v = v, t.ld = (int64_t)kv->row_bytes, t.hs = slice;
        t.nk = last ? nx[0] : k + rows;
        t.nv = last ? nx[1] : v + rows;
        return t;
    }
    /* the rows read next: this walk's, else the next walk's first tile (a chunk is one tile;
     * with the next item's rows, a prompt's f32 tiles at 8192 tokens took 1.5-2% less time,
     * docs/perf-log/2026-12-04-zen5-session-q.md; the tiles still wait on many of their
     * loads: prefetches into 4 KiB pages are mostly dropped, a microbenchmark there) */
    const int32_t left = jend - (j + n);
    const size_t rows = (size_t)n * kv->row_bytes;
    const uint8_t *pk = k + rows, *pv = v + rows;
    int nn = left < 0 ? 0 : left < TILE ? (int)left : TILE;
    if (nn == 0 && nx[0]) pk = nx[0], pv = nx[1], nn = TILE;
    const int64_t wd = r->d * ng;
    if (whole_rows(r, wd)) { /* the heads' slices at g0 of whole converted rows */
        t.k =
            (const uint8_t *)(f32_run(r->c, k - off, n, pk - off, nn, w->kf) + (int64_t)g0 * r->d);
        t.v =
            (const uint8_t *)(f32_run(r->c, v - off, n, pv - off, nn, w->vf) + (int64_t)g0 * r->d);
        t.ld = kv->kv_dim;
        t.hs = sizeof(float) * (size_t)r->d;
        return t;
    }
    if (r->num == NUM_BF16) {
        pack_tile(r, w, &t, seq, g0, ng, slice, k, v, pk, pv, nn);
        return t;
    }
    int64_t ldv;
    t.k = (const uint8_t *)f32_rows(r->c, k, slice * (size_t)ng, wd, n, pk, nn, w->kf, &t.ld);
    t.v = (const uint8_t *)f32_rows(r->c, v, slice * (size_t)ng, wd, n, pv, nn, w->vf, &ldv);
    t.hs = sizeof(float) * (size_t)r->d;
    return t;
}

/* ---- the tile step of each numerics ---- */

/* Running state of rows i0.. of a head: max, denominator, unnormalised output ([rows][d]). */
typedef struct att_state {
    float *M, *L, *O;
} att_state;

/* The rows of [*i0, i1) (positions non-decreasing) that read the tile: from the first at or
 * past its first key to the last whose window starts before its end; returns that end. */
static int tile_rows(const att_run *r, const int32_t *qpos, int *i0, int i1, const att_tile *t) {
    while (*i0 < i1 && qpos[*i0] < t->j)
        (*i0)++;
    if (r->window <= 0) return i1;
    int e = *i0;
    while (e < i1 && key_lo(r, qpos[e]) < t->j + t->n)
        e++;
    return e;
}

/* Keys of the tile a row at pos sees: [*lo, return value), tile-relative. */
static int row_keys(const att_run *r, const att_tile *t, int32_t pos, int *lo) {
    const int32_t l = key_lo(r, pos) - t->j;
    *lo = l > 0 ? (int)l : 0;
    return pos - t->j + 1 < t->n ? (int)(pos - t->j + 1) : t->n;
}

/* A chunked numerics' softmax update sm of one row (s: its tile scores); the keys before its
 * window get weight 0. Returns the rescale of the row's previous output. */
typedef float (*att_softmax_fn)(int n, int lim, float *s, float *M, float *L);
static inline float row_softmax(const att_run *r, const att_tile *t, att_softmax_fn sm, int32_t pos,
                                float *s, float *M, float *L) {
    int lo;
    const int lim = row_keys(r, t, pos, &lo);
    if (lo == 0) return sm(t->n, lim, s, M, L);
    const float a = sm(t->n - lo, lim - lo, s + lo, M, L);
    memset(s, 0, sizeof(float) * (size_t)lo);
    return a;
}

/* Per-head states: head h's rows start at M + h * hs, L + h * hs, O + h * ho. */
typedef struct att_heads {
    att_state s;
    size_t hs, ho;
} att_heads;

static att_state head_state(const att_heads *st, int h) {
    att_state s = {st->s.M + (size_t)h * st->hs, st->s.L + (size_t)h * st->hs,
                   st->s.O + (size_t)h * st->ho};
    return s;
}

/* Rows' max and denominator to nothing seen; reset_rows clears their outputs too. */
static void reset_ml(att_state s, int rows) {
    for (int i = 0; i < rows; i++) {
        s.M[i] = -INFINITY;
        s.L[i] = 0.0f;
    }
}

static void reset_rows(att_state s, int rows, int64_t d) {
    reset_ml(s, rows);
    memset(s.O, 0, sizeof(float) * (size_t)rows * (size_t)d);
}

/* Chunked numerics, one tile for the item's nh KV heads (head h: rows h * mh.., at head 0's
 * positions; several heads only in one-token items): the scores of every head,
 * every row's softmax, the values of every head. tiled: f32 tiles; quant: the cache rows in
 * place against the item's Q8_0 queries (an f32 copy of the tile was ~27% of the split path
 * on AVX2, its stores and reloads as much again). All heads at once: the K tile's rows (all
 * heads' slices, ~34 KiB on the 1B shape's Q8_0 cache) are read by nh passes back to back
 * while in cache, then the V tile's, not K and V in turn per head (quant generation at depth
 * 4096: ~1.4x on one thread, docs/perf-log/2026-12-03-kvq2.md). The same calls per (head,
 * row, key) either way. */
static void chunked_tile(const att_run *r, att_ws *w, const att_tile *t, int nh, int mh,
                         const att_heads *st) {
    const int64_t d = r->d;
    const int quant = r->num == NUM_QUANT;
    const cpulm_dtype dt = r->c->kv.dtype;
    const size_t hb = (size_t)TILE * (size_t)d / 2; /* bf16: a head's packed tile */
    int r0 = 0;
    const int m = tile_rows(r, w->qpos, &r0, mh, t) - r0;
    if (m == 0) return;
    for (int h = 0, i = r0; h < nh; h++, i += mh) {
        const size_t off = (size_t)h * t->hs;
        if (r->num == NUM_BF16)
            r->k->attn_bscores(d, m, t->n, w->qb + i * d / 2, d / 2, t->kb + h * hb, t->bnk,
                               r->scale, w->s + i * TILE, TILE);
        else if (quant)
            r->k->attn_qscores(d, dt, m, t->n, w->q8 + i * d, w->qd + i * (d / 32), r->scale,
                               t->k + off, (uint64_t)t->ld, w->s + i * TILE, TILE,
                               t->nk ? t->nk + off : NULL);
        else
            r->k->attn_scores(d, m, t->n, w->q + i * d, d, (const float *)(t->k + off), t->ld,
                              r->scale, w->s + i * TILE, TILE);
    }
    const att_softmax_fn sm = quant ? r->k->attn_softmaxz : r->k->attn_softmax_row;
    for (int h = 0; h < nh; h++) {
        const att_state s = head_state(st, h);
        for (int i = r0; i < r0 + m; i++)
            w->a[h * mh + i] = row_softmax(r, t, sm, w->qpos[h * mh + i],
                                           w->s + (h * mh + i) * TILE, &s.M[i], &s.L[i]);
    }
    for (int h = 0, i = r0; h < nh; h++, i += mh) {
        const size_t off = (size_t)h * t->hs;
        float *o = head_state(st, h).O + r0 * d;
        if (r->num == NUM_BF16)
            r->k->attn_bpv(d, m, t->n, w->s + i * TILE, TILE, t->vb + h * hb, w->a + i, o, d);
        else if (quant)
            r->k->attn_qpv(d, dt, m, t->n, w->s + i * TILE, TILE, t->v + off, (uint64_t)t->ld,
                           w->a + i, o, d, t->nv ? t->nv + off : NULL);
        else
            r->k->attn_pv(d, m, t->n, w->s + i * TILE, TILE, (const float *)(t->v + off), t->ld,
                          w->a + i, o, d);
    }
}

/* Exact numerics: attn_f16's per-row recurrence over the row's keys of the tile. A row's
 * recurrence may stop after any key and go on in another call (its state rests in st), and
 * rows are independent, so the keys every row sees (all of them but on the tile of the
 * batch's own positions) go to one attn_xpv for all the rows, then each run of rows that
 * see the same keys (a token's heads) takes the rest of its keys. More rows side by side
 * hide the latency of each row's chain of f16 roundings: one token's 2 rows of stories260K
 * were latency-bound, and a speculative verification's tokens share nearly all keys. */
static void exact_tile(const att_run *r, att_ws *w, const att_tile *t, int h, int i0, int i1,
                       att_state st) {
    const int64_t d = r->d;
    int r0 = i0;
    const int r1 = tile_rows(r, w->qpos, &r0, i1, t);
    if (r0 == r1) return;
    const float *kt = (const float *)(t->k + h * t->hs), *vt = (const float *)(t->v + h * t->hs);
    r->k->attn_xscores(d, r1 - r0, t->n, w->qt + r0, w->nrows, kt, t->ld, r->scale,
                       w->s + r0 * TILE, TILE);
    int lo0, same_lo = 1; /* positions are non-decreasing: row r0 sees the fewest keys */
    const int lim0 = row_keys(r, t, w->qpos[r0], &lo0);
    for (int i = r0; i < r1; i++) {
        int lo;
        const int lim = row_keys(r, t, w->qpos[i], &lo);
        same_lo &= lo == lo0;
        r->k->attn_xweights(lim - lo, w->s + i * TILE + lo, w->ms + i * TILE + lo, &st.M[i - i0]);
    }
    if (same_lo && lim0 > lo0)
        r->k->attn_xpv(d, r1 - r0, lim0 - lo0, w->ms + r0 * TILE + lo0, w->s + r0 * TILE + lo0,
                       TILE, vt + lo0 * t->ld, t->ld, st.O + (r0 - i0) * d, d, st.L + (r0 - i0));
    for (int i = r0; i < r1;) {
        int ie = i + 1, lo, lo2;
        const int lim = row_keys(r, t, w->qpos[i], &lo);
        while (ie < r1 && row_keys(r, t, w->qpos[ie], &lo2) == lim && lo2 == lo)
            ie++;
        const int j0 = same_lo ? lim0 : lo; /* the keys not yet taken */
        if (lim > j0)
            r->k->attn_xpv(d, ie - i, lim - j0, w->ms + i * TILE + j0, w->s + i * TILE + j0, TILE,
                           vt + j0 * t->ld, t->ld, st.O + (i - i0) * d, d, st.L + (i - i0));
        i = ie;
    }
}

/* ---- items ---- */

/* Keys [j0, jend) of seq (j0 a tile boundary) for the item's rows, KV heads g0..g0+ng-1
 * (head h: rows h * mh..(h + 1) * mh - 1), tile by tile, each tile read once for all heads
 * (adjacent slices of the same cache rows). nx: see read_tile. */
static void walk_keys(const att_run *r, att_ws *w, int32_t seq, int g0, int ng, int mh, int32_t j0,
                      int32_t jend, const uint8_t *const nx[2], const att_heads *st) {
    for (int32_t j = j0; j < jend; j += TILE) {
        const int n = jend - j < TILE ? (int)(jend - j) : TILE;
        const att_tile t = read_tile(r, w, seq, j, n, g0, ng, jend, nx);
        if (r->num != NUM_EXACT)
            chunked_tile(r, w, &t, ng, mh, st);
        else
            for (int h = 0; h < ng; h++)
                exact_tile(r, w, &t, h, h * mh, (h + 1) * mh, head_state(st, h));
    }
}

/* Chunk ch's keys for rows whose positions end at last and whose first window starts at lo. */
static void chunk_span(int32_t ch, int32_t lo, int32_t last, int32_t *j0, int32_t *jend) {
    *j0 = ch * CHUNK > tile_floor(lo) ? ch * CHUNK : tile_floor(lo);
    *jend = (ch + 1) * CHUNK < last + 1 ? (ch + 1) * CHUNK : last + 1;
}

/* Query rows of tokens t0..t0+nt-1 x query heads h0..h0+nh-1 (row b * nh + x: token t0 + b,
 * head h0 + x) into w->q and w->qpos, then as the numerics reads them; returns the rows. */
static int gather_rows(const att_run *r, att_ws *w, int32_t t0, int32_t nt, int h0, int nh) {
    const cpulm_ctx *c = r->c;
    const int64_t d = r->d, qd = (int64_t)c->m->hp.n_head * d;
    const int m = nt * nh;
    for (int32_t b = 0; b < nt; b++)
        for (int x = 0; x < nh; x++) {
            const int i = b * nh + x;
            memcpy(w->q + i * d, c->q + (t0 + b) * qd + (h0 + x) * d, sizeof(float) * (size_t)d);
            w->qpos[i] = c->pos[t0 + b];
        }
    w->nrows = m;
    if (r->num == NUM_QUANT) /* once per item: every tile of the item reads these */
        r->k->attn_qquant(d, m, w->q, d, w->q8, w->qd);
    if (r->num == NUM_BF16) /* kernels.h's b() of each element, in pairs */
        for (int64_t e = 0; e < (int64_t)m * d; e += 2)
            w->qb[e / 2] = cpulm_bf16_pair(w->q[e], w->q[e + 1]);
    if (r->num == NUM_EXACT) /* attn_f16 takes the query as f16 */
        for (int i = 0; i < m; i++)
            for (int64_t e = 0; e < d; e++)
                w->qt[e * m + i] = cpulm_fp16_to_f32(cpulm_f32_to_fp16(w->q[i * d + e]));
    return m;
}

/* att rows of tokens t0.. x query heads h0..h0+nh-1 (row b * nh + x as gather_rows) = O / L,
 * with head h's sink, if any, as one more key of value 0: its weight joins the denominator
 * (the output rescaled when it is above the row's max); on a rotated cache (values stored
 * rotated, kvrot.h) rotated back. */
static void write_rows(const att_run *r, att_state s, int32_t t0, int m, int h0, int nh) {
    const int64_t d = r->d, qd = (int64_t)r->c->m->hp.n_head * d;
    for (int i = 0; i < m; i++) {
        const int h = h0 + i % nh;
        float *out = r->c->att + (t0 + i / nh) * qd + h * d;
        float ms = 1.0f, S = s.L[i];
        if (r->sinks) {
            const float x = r->sinks[h];
            if (x > s.M[i]) {
                ms = expf(s.M[i] - x);
                S = fmaf(S, ms, 1.0f);
            } else {
                S += expf(x - s.M[i]);
            }
        }
        const float inv = S == 0.0f ? 0.0f : ms / S;
        for (int64_t e = 0; e < d; e++)
            out[e] = s.O[i * d + e] * inv;
        if (r->a->rot_v) cpulm_kvrot_rows(out, d, r->a->rot_v);
    }
}

/* Block b x KV heads g0..g0+ng-1 (ng > 1 only for one-token blocks), every key: the exact
 * numerics in one walk, the chunked ones chunk by chunk, each folded as it is made. after:
 * the K and V rows this thread reads after the item (its next item's first), or NULLs. */
static void block_item(const att_run *r0, att_ws *w, int32_t b, int g0, int ng,
                       const uint8_t *const after[2]) {
    const struct cpulm_attn *a = r0->a;
    att_run rb = *r0;
    if (rb.num == NUM_MIXED) rb.num = a->blk_num[b];
    const att_run *r = &rb;
    const cpulm_ctx *c = r->c;
    const int32_t t0 = a->blk[b], seq = c->seq[t0];
    const int m = gather_rows(r, w, t0, a->blk[b + 1] - t0, g0 * a->gq, ng * a->gq);
    const int mh = ng == 1 ? m : a->gq;
    const int32_t lo = key_lo(r, w->qpos[0]), last = w->qpos[m - 1];
    const att_state run = {w->m, w->l, w->o};
    reset_rows(run, m, r->d);
    if (r->num == NUM_EXACT) {
        const att_heads st = {run, (size_t)mh, (size_t)mh * (size_t)r->d};
        walk_keys(r, w, seq, g0, ng, mh, tile_floor(lo), last + 1, after, &st);
    } else {
        const att_state part = {w->mc, w->lc, w->oc};
        const att_heads st = {part, (size_t)mh, (size_t)mh * (size_t)r->d};
        for (int32_t ch = lo / CHUNK; ch <= last / CHUNK; ch++) {
            const uint8_t *nx[2] = {after[0], after[1]};
            if (ch < last / CHUNK) rows_at(r, seq, (ch + 1) * CHUNK, g0, nx); /* read next */
            int32_t j0, jend;
            chunk_span(ch, lo, last, &j0, &jend);
            reset_rows(part, m, r->d);
            walk_keys(r, w, seq, g0, ng, mh, j0, jend, nx, &st);
            r->k->attn_merge(r->d, m, w->mc, w->lc, w->oc, r->d, w->m, w->l, w->o, r->d);
        }
    }
    write_rows(r, run, t0, m, g0 * a->gq, ng * a->gq);
}

/* nx = the first K and V rows block item i (of per a block, ng KV heads each) reads. */
static void item_rows(const att_run *r, uint64_t i, uint64_t per, int ng, const uint8_t *nx[2]) {
    const int32_t t0 = r->a->blk[i / per];
    rows_at(r, r->c->seq[t0], tile_floor(key_lo(r, r->c->pos[t0])), (int)(i % per) * ng, nx);
}

/* ---- split generation: items are chunks ---- */

/* Split plan of one layer (its window decides the chunks each token reads). */
typedef struct att_split {
    uint64_t end[CPULM_ATT_SPLIT_MAX]; /* cumulative items after token t */
    uint64_t per;                      /* items per chunk: KV head groups */
} att_split;

static int32_t first_chunk(const att_run *r, int32_t t) {
    return key_lo(r, r->c->pos[t]) / CHUNK;
}

static att_split split_plan(const att_run *r) {
    att_split sp;
    uint64_t items = 0;
    sp.per = (uint64_t)(r->c->m->hp.n_head_kv / r->a->split_ng);
    for (int32_t t = 0; t < r->c->n_tok; t++) {
        items += (uint64_t)(r->c->pos[t] / CHUNK - first_chunk(r, t) + 1) * sp.per;
        sp.end[t] = items;
    }
    return sp;
}

/* Split item `item`: token t, chunk ch, KV heads g0.. (split_ng of them). */
typedef struct split_at {
    int32_t t, ch;
    int g0;
} split_at;

static split_at split_locate(const att_run *r, const att_split *sp, uint64_t item) {
    split_at at = {0, 0, 0};
    while (item >= sp->end[at.t])
        at.t++;
    const uint64_t local = item - (at.t ? sp->end[at.t - 1] : 0);
    at.ch = first_chunk(r, at.t) + (int32_t)(local / sp->per);
    at.g0 = (int)(local % sp->per) * r->a->split_ng;
    return at;
}

/* Partial slot of (token t, group g, chunk ch): [gq] M, [gq] L, [gq][d] O. */
static float *part_of(const att_run *r, int32_t t, int g, int32_t ch) {
    const struct cpulm_attn *a = r->a;
    const size_t per = (size_t)a->gq * ((size_t)r->d + 2);
    return a->part + (((size_t)t * r->c->m->hp.n_head_kv + g) * a->n_chunk_max + ch) * per;
}

static void split_fold(const att_run *r, att_ws *w, int32_t t, int g) {
    const int m = r->a->gq;
    const att_state run = {w->m, w->l, w->o};
    reset_rows(run, m, r->d);
    for (int32_t ch = first_chunk(r, t); ch <= r->c->pos[t] / CHUNK; ch++) {
        const float *p = part_of(r, t, g, ch);
        r->k->attn_merge(r->d, m, p, p + m, p + 2 * m, r->d, w->m, w->l, w->o, r->d);
    }
    write_rows(r, run, t, m, g * m, m);
}

/* The split item `item`; `next` (or UINT64_MAX) is the one this thread claimed to do after
 * it, whose first K and V rows the item's last tile hints: with several threads taking
 * items in turn, a thread's next item is rarely the next chunk, the rows after this one. */
static void split_item(const att_run *r, att_ws *w, const att_split *sp, uint64_t item,
                       uint64_t next) {
    const cpulm_ctx *c = r->c;
    const int n_kv = c->m->hp.n_head_kv, gq = r->a->gq, ng = r->a->split_ng;
    const split_at at = split_locate(r, sp, item);
    const int32_t t = at.t, pos = c->pos[t];
    const unsigned n_ch = (unsigned)(pos / CHUNK - first_chunk(r, t) + 1);
    const uint8_t *nx[2] = {NULL, NULL};
    if (next != UINT64_MAX) {
        const split_at n = split_locate(r, sp, next);
        rows_at(r, c->seq[n.t], n.ch * CHUNK, n.g0, nx);
    }
    if (w->rows_t != t || w->rows_h != at.g0 * gq) { /* a thread's items: mostly one token's */
        gather_rows(r, w, t, 1, at.g0 * gq, ng * gq);
        w->rows_t = t, w->rows_h = at.g0 * gq;
    }
    float *p = part_of(r, t, at.g0, at.ch);
    const size_t hs = (size_t)r->a->n_chunk_max * (size_t)gq * ((size_t)r->d + 2); /* a group */
    const att_heads st = {{p, p + gq, p + 2 * gq}, hs, hs};
    /* every row (one token's) sees every key of the chunk, so attn_qpv's first tile (a = 0)
     * writes O without reading it; attn_pv (f32 tiles) reads it */
    for (int h = 0; h < ng; h++)
        if (r->num == NUM_QUANT)
            reset_ml(head_state(&st, h), gq);
        else
            reset_rows(head_state(&st, h), gq, r->d);
    int32_t j0, jend;
    chunk_span(at.ch, key_lo(r, pos), pos, &j0, &jend);
    walk_keys(r, w, c->seq[t], at.g0, ng, gq, j0, jend, nx, &st);
    /* release our partials; a pair's last chunk (of this layer) acquires all, folds, and
     * zeroes the counter for the next layer (whose items start after the layer barrier) */
    for (int h = 0; h < ng; h++) {
        atomic_uint *done = &r->a->chunks_done[t * n_kv + at.g0 + h];
        if (atomic_fetch_add_explicit(done, 1, memory_order_acq_rel) + 1 == n_ch) {
            atomic_store_explicit(done, 0, memory_order_relaxed);
            split_fold(r, w, t, at.g0 + h);
        }
    }
}

/* ---- the layer ---- */

/* The walk (attn_fast < 0): one (token t, head h) by attn_f16 itself (generic only), each key
 * read once per query head. The exact numerics give the same bits far faster; this stays as
 * their oracle in tests (`--attn walk`). No sinks (the driver takes the
 * exact numerics for a layer with them). */
static void walk_item(const att_run *r, att_ws *w, int32_t t, int h) {
    const cpulm_ctx *c = r->c;
    const int64_t d = r->d, qd = (int64_t)c->m->hp.n_head * d;
    const int32_t lo = key_lo(r, c->pos[t]);
    uint16_t *q16 = (uint16_t *)w->q; /* w->q holds rows * d floats, >= d halves */
    r->k->from_float[CPULM_DTYPE_F16](c->q + t * qd + h * d, q16, d);
    const size_t off = sizeof(uint16_t) * (size_t)(h / r->a->gq) * (size_t)d;
    r->k->attn_f16(d, c->pos[t] - lo + 1, q16, cpulm_kv_k(&c->kv, r->il, c->seq[t], lo) + off,
                   cpulm_kv_v(&c->kv, r->il, c->seq[t], lo) + off, c->kv.row_bytes, r->scale,
                   c->att + t * qd + h * d);
}

static void run_split(cpulm_ctx *c, const att_run *r, att_ws *w, int ith) {
    const att_split sp = split_plan(r);
    /* each thread claims its next item before it starts one, to hint that item's first rows
     * (a descheduled thread so holds up at most one item besides its own) */
    const uint64_t n = sp.end[c->n_tok - 1], first = cpulm_work_begin(c, ith, n);
    uint64_t item, next;
    for (int have = cpulm_work_claim(c, first + n, &item); have; item = next) {
        have = cpulm_work_claim(c, first + n, &next);
        split_item(r, w, &sp, item - first, have ? next - first : UINT64_MAX);
    }
}

static void attn_items(cpulm_ctx *c, int il, const cpulm_attn_opts *o, int ith, int nth) {
    const struct cpulm_attn *a = c->attn;
    att_run r = {.c = c, .a = a, .k = c->k, .il = il, .num = a->num, .d = c->m->hp.head_dim};
    r.scale = 1.0f / sqrtf((float)r.d);
    r.window = o ? o->window : 0;
    r.sinks = o ? o->sinks : NULL;
    if (r.num == NUM_WALK && r.sinks) r.num = NUM_EXACT;
    att_ws w = ws_of(c, ith);
    uint64_t item;
    if (r.num == NUM_WALK) {
        const int nh = c->m->hp.n_head;
        uint64_t n = (uint64_t)c->n_tok * (uint64_t)nh, first = cpulm_work_begin(c, ith, n);
        while (cpulm_work_claim(c, first + n, &item))
            walk_item(&r, &w, (int32_t)((item - first) / (uint64_t)nh),
                      (int)((item - first) % (uint64_t)nh));
        return;
    }
    if (a->split && r.num != NUM_EXACT) {
        run_split(c, &r, &w, ith);
        return;
    }
    /* last blocks first: they have the most keys, so the threads finish together */
    /* KV heads per item: 1 for prompt blocks; one-token blocks: an item per thread at least */
    const int ng = a->n_blk != c->n_tok ? 1 : most_heads(c, (uint64_t)c->n_tok, (uint64_t)nth);
    const uint64_t per = (uint64_t)(c->m->hp.n_head_kv / ng), n = (uint64_t)a->n_blk * per;
    /* with items to spare, each thread claims its next item before it starts one, to hint
     * that item's first rows (see read_tile); with few (generation: an item or two a thread)
     * a claim ahead left a thread idle (tg32 at depth 4096: 0.76x) */
    const uint64_t first = cpulm_work_begin(c, ith, n);
    const int ahead = n >= 4 * (uint64_t)nth;
    uint64_t next = 0;
    int have = cpulm_work_claim(c, first + n, &item);
    while (have) {
        const uint8_t *after[2] = {NULL, NULL};
        const int early = ahead && cpulm_work_claim(c, first + n, &next);
        if (early) item_rows(&r, first + n - 1 - next, per, ng, after);
        const uint64_t i = first + n - 1 - item;
        block_item(&r, &w, (int32_t)(i / per), (int)(i % per) * ng, ng, after);
        if (early)
            item = next;
        else
            have = !ahead && cpulm_work_claim(c, first + n, &item);
    }
}

void cpulm_attn_rotate_new(const cpulm_ctx *c, float *q, float *k, float *v) {
    const struct cpulm_attn *a = c->attn;
    if (!a->rot_k) return;
    const cpulm_hparams *hp = &c->m->hp;
    cpulm_kvrot_rows(q, (int64_t)hp->n_head * hp->head_dim, a->rot_k);
    cpulm_kvrot_rows(k, (int64_t)hp->n_head_kv * hp->head_dim, a->rot_k);
    cpulm_kvrot_rows(v, (int64_t)hp->n_head_kv * hp->head_dim, a->rot_v);
}

/* Thread 0 times its share (two clock reads per layer: ~0.01% of a generated token). */
void cpulm_attn_run(cpulm_ctx *c, int il, const cpulm_attn_opts *o, int ith, int nth) {
    const uint64_t t0 = ith == 0 ? cpulm_clock_ns() : 0;
    attn_items(c, il, o, ith, nth);
    if (ith == 0) c->attn_ns += cpulm_clock_ns() - t0;
}

void cpulm_attn_layer(cpulm_ctx *c, int il, int ith, int nth) {
    cpulm_attn_run(c, il, NULL, ith, nth); /* no model has windows or sinks yet */
}
