/* attention.c: attention of a batch over the KV cache, flash-attention style.
 *
 * A work item takes a block of query rows that share keys: up to CPULM_ATT_ROWS rows made of
 * consecutive tokens of one sequence x the query heads of one KV head (GQA group), so each
 * key/value tile converted to f32 serves every row of the block. Keys are walked in chunks of
 * CPULM_ATTN_CHUNK positions, each in tiles of CPULM_ATTN_TILE: scores (a small GEMM),
 * online softmax, P.V; a chunk's partial (max, sum, unnormalised output) is folded into the
 * running one in chunk order. The causal mask is by tile: a row skips tiles past its
 * position and masks the rest of its diagonal tile.
 *
 * Generation (every block a single token, few of them) splits the chunks over the threads
 * instead (flash-decoding): each item writes its chunk's partial, and the thread that
 * finishes a (token, group)'s last chunk folds them in order (a counter per pair, so no
 * barrier: under load a barrier costs more than the fold). An item takes one chunk of
 * several KV heads (as many as leave SPLIT_ITEMS items per thread), tile by tile across the
 * heads, and items run chunk-major: a cache row holds every KV head of its position, so the
 * heads' slices of it are read together and each page of the cache is walked once per
 * chunk, not once per head (at depth 32k the page walks of reading 1/n_kv of every row
 * doubled the time). The fold order and every step's arithmetic are those of the block
 * path (kernels.h, attn_*), so a token's result is the same bits whichever path, batch,
 * thread count or head grouping computed it.
 *
 * An F16 cache by default takes the exact path instead (kernels.h, attn_x*): the same blocks
 * and tiles, but each row follows attn_f16's key-by-key recurrence (f16 accumulation, libm
 * expf), so its result is the reference arithmetic's, bit for bit. That recurrence cannot
 * be split over keys, so a generation item is a token x several KV heads (as many as leave
 * one item per thread), read tile by tile across the heads as above.
 *
 * A Q8_0 / Q4_0 cache is not converted at all (kernels.h, attn_q*): each item quantizes its
 * query rows to int16 once (attn_qquant), and every tile's scores (integer block dots) and
 * P.V (block scale folded into the weight) read the cache rows in place (qchunk_tiles);
 * the chunk/tile/fold structure and the path independence above are unchanged.
 *
 * Every tile load prefetches the next tile's rows (load_tile; on quantized caches the
 * attn_q* ops themselves, told which rows: a split item's last tile hints the first rows of
 * the item its thread claimed next, not the next chunk, which another thread may be doing).
 */
#include "attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/fp16.h"
#include "../base/status.h"
#include "work.h"

#define TILE  CPULM_ATTN_TILE
#define CHUNK CPULM_ATTN_CHUNK
/* Split path: items per thread at least, when grouping KV heads into items (attn_plan). */
#define SPLIT_ITEMS 8

typedef struct att_ws {         /* one thread's tiles */
    float *q, *o, *oc;          /* [rows][d] */
    float *m, *l, *mc, *lc, *a; /* [rows] */
    int32_t *qpos;              /* [rows] */
    float *s, *ms;              /* [rows][TILE] */
    float *kf, *vf;             /* [TILE][tile_heads * d] */
    double *qt;                 /* exact path: [d][rows], the block's queries transposed */
    int16_t *q16;               /* quantized cache: [rows][d] int16 queries (in qt's space) */
    float *qsc;                 /* [rows]: their scales (attn_qquant) */
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
    int split;
    int split_ng; /* split path: KV heads per item */
    int exact;    /* F16 cache, reference numerics: the exact path (attn_x*) */
    int walk;     /* F16 cache, attn_fast < 0: attn_f16 per (token, head) */
    int quant;    /* Q8_0 / Q4_0 cache: tiles read in place by the attn_q* ops */
    uint64_t n_split_items;
    uint64_t *item_end; /* [split_max]: cumulative split items after token t */
    /* [split_max][n_head_kv]: chunks finished; each layer adds the pair's chunk count */
    atomic_uint *chunks_done;
};

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
    a->ws_floats = cpulm_attn_ws_floats(a->rows, hp->head_dim, a->tile_heads);
    int nth = cpulm_pool_size(c->pool);
    a->ws = malloc(sizeof(float) * a->ws_floats * (size_t)nth);
    a->part = malloc(sizeof(float) * (size_t)a->split_max * (size_t)hp->n_head *
                     (size_t)a->n_chunk_max * ((size_t)hp->head_dim + 2));
    a->blk = malloc(sizeof(int32_t) * ((size_t)c->p.n_batch + 1));
    a->item_end = malloc(sizeof(uint64_t) * CPULM_ATT_SPLIT_MAX);
    a->chunks_done = malloc(sizeof(atomic_uint) * CPULM_ATT_SPLIT_MAX * (size_t)hp->n_head_kv);
    if (!a->ws || !a->part || !a->blk || !a->item_end || !a->chunks_done)
        return cpulm_errf(err, CPULM_ERR_NOMEM, "context: out of memory for attention scratch");
    return CPULM_OK;
}

void cpulm_attn_free(cpulm_ctx *c) {
    struct cpulm_attn *a = c->attn;
    if (!a) return;
    free(a->ws);
    free(a->part);
    free(a->blk);
    free(a->item_end);
    free(a->chunks_done);
    free(a);
    c->attn = NULL;
}

void cpulm_attn_plan(cpulm_ctx *c) {
    struct cpulm_attn *a = c->attn;
    int32_t n = 0;
    for (int32_t t = 0; t < c->n_tok; t++) {
        int cont = t > 0 && c->seq[t] == c->seq[t - 1] && c->pos[t] == c->pos[t - 1] + 1 &&
                   t - a->blk[n - 1] < a->tok_per_blk;
        if (!cont) a->blk[n++] = t;
    }
    a->blk[n] = c->n_tok;
    a->n_blk = n;
    a->exact = c->kv.dtype == CPULM_DTYPE_F16 && c->p.attn_fast == 0;
    a->walk = c->kv.dtype == CPULM_DTYPE_F16 && c->p.attn_fast < 0;
    a->quant = c->kv.dtype == CPULM_DTYPE_Q8_0 || c->kv.dtype == CPULM_DTYPE_Q4_0;
    a->split = !a->exact && !a->walk && n == c->n_tok && n <= a->split_max;
    if (!a->split) return;
    const int n_kv = c->m->hp.n_head_kv;
    uint64_t chunks = 0, items = 0;
    for (int32_t t = 0; t < c->n_tok; t++)
        chunks += (uint64_t)(c->pos[t] / CHUNK + 1);
    a->split_ng = 1;
    for (int h = 2; h <= n_kv; h++)
        if (n_kv % h == 0 && h * a->gq <= a->rows &&
            chunks * (uint64_t)(n_kv / h) >=
                (uint64_t)SPLIT_ITEMS * (uint64_t)cpulm_pool_size(c->pool))
            a->split_ng = h;
    for (int32_t t = 0; t < c->n_tok; t++) {
        items += (uint64_t)(c->pos[t] / CHUNK + 1) * (uint64_t)(n_kv / a->split_ng);
        a->item_end[t] = items;
    }
    a->n_split_items = items;
    for (int32_t i = 0; i < c->n_tok * c->m->hp.n_head_kv; i++)
        atomic_init(&a->chunks_done[i], 0);
}

static att_ws ws_of(const cpulm_ctx *c, int ith) {
    const struct cpulm_attn *a = c->attn;
    int64_t d = c->m->hp.head_dim, r = a->rows;
    float *p = a->ws + a->ws_floats * (size_t)ith;
    att_ws w;
    w.qt = (double *)p, p += 2 * r * d; /* first: ws_floats is even, so doubles align */
    w.q16 = (int16_t *)w.qt;            /* r * d halves and r floats fit the r * d doubles */
    w.qsc = (float *)(w.q16 + r * d);
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
    w.vf = p;
    return w;
}

/* A hint to bring the cache lines of [p, p + n) in (a hint: no fault, no effect on
 * results). */
static void prefetch_span(const uint8_t *p, size_t n) {
    for (uintptr_t a = (uintptr_t)p & ~(uintptr_t)63; a < (uintptr_t)p + n; a += 64)
        __builtin_prefetch((const void *)a, 0, 3);
}

/* n rows at positions j.. of seq, KV heads g0..g0+ng-1 (adjacent slices of each row), as
 * f32 [n][ng * d] into buf; returns the rows (the cache itself when it is f32) and their
 * stride in *ld: head g0 + h starts at column h * d. The heads of a row are converted by
 * one call and the tile is one stream of the cache (all of it when ng is every KV head),
 * which the hardware prefetchers follow; per-head slices were a 1/n_kv-row stride, and
 * converting them one by one left each call waiting for its first load (q8_0 at depth 4096:
 * 30% of the conversion on that load). Also prefetches the same slices of the n_next rows
 * after the tile (the next tile's), so that they arrive while this tile is computed: across
 * 4 KiB pages the hardware prefetchers stop (~40% of generation time at depth 4096 without
 * the hint, docs/perf-log/2026-12-01-zen5-depth4096-profile.md). */
static const float *load_tile(const cpulm_ctx *c, const uint8_t *row0, int g0, int ng, int n,
                              int n_next, float *buf, int64_t *ld) {
    const cpulm_kv *kv = &c->kv;
    const int64_t d = c->m->hp.head_dim, wd = d * ng;
    size_t slice = cpulm_dtype_row_bytes(kv->dtype, d), off = slice * (size_t)g0;
    size_t span = slice * (size_t)ng;
    const uint8_t *next = row0 + (size_t)n * kv->row_bytes + off;
    if (kv->dtype == CPULM_DTYPE_F32) {
        for (int r = 0; r < n_next; r++)
            prefetch_span(next + (size_t)r * kv->row_bytes, span);
        *ld = kv->kv_dim;
        return (const float *)(row0 + off);
    }
    cpulm_to_float_fn cvt = c->k->to_float[kv->dtype];
    for (int r = 0; r < n; r++) {
        if (r < n_next) prefetch_span(next + (size_t)r * kv->row_bytes, span);
        cvt(row0 + (size_t)r * kv->row_bytes + off, buf + r * wd, wd);
    }
    *ld = wd;
    return buf;
}

/* The K and V tiles (rows j.. of seq in layer il) of KV heads g0..g0+ng-1 through
 * load_tile, into w's buffers; head g0 + h's rows start at k + h * d (v + h * d). */
typedef struct kv_tile {
    const float *k, *v;
    int64_t ldk, ldv;
} kv_tile;

static kv_tile load_kv_tile(const cpulm_ctx *c, att_ws *w, int il, int32_t seq, int32_t j, int g0,
                            int ng, int n, int n_next) {
    kv_tile t;
    t.k = load_tile(c, cpulm_kv_k(&c->kv, il, seq, j), g0, ng, n, n_next, w->kf, &t.ldk);
    t.v = load_tile(c, cpulm_kv_v(&c->kv, il, seq, j), g0, ng, n, n_next, w->vf, &t.ldv);
    return t;
}

/* Rows the walk up to jend reads after a tile of n keys at j (the next tile's). */
static int next_rows(int32_t j, int n, int32_t jend) {
    int32_t left = jend - (j + n);
    return left < 0 ? 0 : left < TILE ? (int)left : TILE;
}

/* One tile of keys j..j+n-1 (kt, vt) for rows i0..i1-1 (positions qpos, non-decreasing;
 * q in w->q): the online-softmax step into their partial (mc, lc, oc: row i0's entries
 * first). Rows before the tile's keys skip it. */
static void tile_step(const cpulm_ctx *c, att_ws *w, int i0, int i1, int32_t j, int n,
                      const float *kt, int64_t ldk, const float *vt, int64_t ldv, float *mc,
                      float *lc, float *oc) {
    const cpulm_kernels *k = c->k;
    const int64_t d = c->m->hp.head_dim;
    const float scale = 1.0f / sqrtf((float)d);
    int r0 = i0;
    while (w->qpos[r0] < j)
        r0++;
    k->attn_scores(d, i1 - r0, n, w->q + r0 * d, d, kt, ldk, scale, w->s + r0 * TILE, TILE);
    for (int i = r0; i < i1; i++) {
        int lim = w->qpos[i] - j + 1;
        w->a[i] =
            k->attn_softmax_row(n, lim < n ? lim : n, w->s + i * TILE, &mc[i - i0], &lc[i - i0]);
    }
    k->attn_pv(d, i1 - r0, n, w->s + r0 * TILE, TILE, vt, ldv, w->a + r0, oc + (r0 - i0) * d, d);
}

/* tile_step on a Q8_0 / Q4_0 cache: the same step by the attn_q* ops, reading the tile's
 * quants in place (k, v: the rows of this head, c->kv.row_bytes apart) against the item's
 * int16 queries (w->q16, w->qsc). No f32 copy of the tile: on AVX2 the conversion was ~27%
 * of the split path and its stores and reloads as much again. nx: the K and V rows of this
 * head read next, which the ops hint as they compute ({NULL, NULL}: none). */
static void qtile_step(const cpulm_ctx *c, att_ws *w, int i0, int i1, int32_t j, int n,
                       const uint8_t *kt, const uint8_t *vt, const uint8_t *const nx[2], float *mc,
                       float *lc, float *oc) {
    const cpulm_kernels *k = c->k;
    const int64_t d = c->m->hp.head_dim;
    const uint64_t ld = c->kv.row_bytes;
    const cpulm_dtype t = c->kv.dtype;
    int r0 = i0;
    while (w->qpos[r0] < j)
        r0++;
    k->attn_qscores(d, t, i1 - r0, n, w->q16 + r0 * d, d, w->qsc + r0, kt, ld, w->s + r0 * TILE,
                    TILE, nx[0]);
    for (int i = r0; i < i1; i++) {
        int lim = w->qpos[i] - j + 1;
        w->a[i] = k->attn_softmaxz(n, lim < n ? lim : n, w->s + i * TILE, &mc[i - i0], &lc[i - i0]);
    }
    k->attn_qpv(d, t, i1 - r0, n, w->s + r0 * TILE, TILE, vt, ld, w->a + r0, oc + (r0 - i0) * d, d,
                nx[1]);
}

/* chunk_partial's tile walk on a Q8_0 / Q4_0 cache (see there). nx: the K and V rows of head
 * g0 that the walk's thread reads after this chunk (heads g0 + h at + h slices), or NULLs. */
static void qchunk_tiles(const cpulm_ctx *c, att_ws *w, int il, int32_t seq, int g0, int ng, int mh,
                         int32_t j0, int32_t jend, const uint8_t *const nx[2], float *const *mc,
                         float *const *lc, float *const *oc) {
    const size_t slice = cpulm_dtype_row_bytes(c->kv.dtype, c->m->hp.head_dim);
    const size_t off = slice * (size_t)g0;
    /* no hints here: the attn_q* ops hint the rows read next (the next tile of the same
     * head, or nx's) a few lines per key while they compute; hints of whole tiles from here
     * came in bursts that stalled on the miss buffers (one layer at depth 4096 1.2 ms with
     * them, 1.04 ms with the ops' own,
     * docs/perf-log/2026-12-01-zen3-quantized-in-place.md) */
    for (int32_t j = j0; j < jend; j += TILE) {
        const int n = jend - j < TILE ? jend - j : TILE;
        const uint8_t *k = cpulm_kv_k(&c->kv, il, seq, j) + off;
        const uint8_t *v = cpulm_kv_v(&c->kv, il, seq, j) + off;
        const int last = j + TILE >= jend;
        for (int h = 0; h < ng; h++) {
            const size_t hs = (size_t)h * slice, rows = (size_t)n * c->kv.row_bytes;
            const uint8_t *nxh[2] = {last ? (nx[0] ? nx[0] + hs : NULL) : k + hs + rows,
                                     last ? (nx[1] ? nx[1] + hs : NULL) : v + hs + rows};
            qtile_step(c, w, h * mh, (h + 1) * mh, j, n, k + hs, v + hs, nxh, mc[h], lc[h], oc[h]);
        }
    }
}

/* The partials (mc[h], lc[h], oc[h]) of KV heads g0..g0+ng-1 over the chunk starting at key
 * j0; head h's rows are h * mh.. (h + 1) * mh - 1 of w->q (ng > 1 only for one token).
 * Each tile's rows are read for all ng heads before the next tile: adjacent slices of
 * the same cache rows. Rows before j0 keep mc = -inf. nx: head g0's K and V rows that this
 * thread reads after the chunk, or NULLs (hinted on quantized caches, qchunk_tiles). */
static void chunk_partial(const cpulm_ctx *c, att_ws *w, int il, int32_t seq, int g0, int ng,
                          int mh, int32_t j0, const uint8_t *const nx[2], float *const *mc,
                          float *const *lc, float *const *oc) {
    const int64_t d = c->m->hp.head_dim;
    int32_t jend = w->qpos[ng * mh - 1] + 1;
    if (jend > j0 + CHUNK) jend = j0 + CHUNK;
    for (int h = 0; h < ng; h++) {
        for (int i = 0; i < mh; i++) {
            mc[h][i] = -INFINITY;
            lc[h][i] = 0.0f;
        }
        memset(oc[h], 0, sizeof(float) * (size_t)mh * (size_t)d);
    }
    if (c->attn->quant) {
        qchunk_tiles(c, w, il, seq, g0, ng, mh, j0, jend, nx, mc, lc, oc);
        return;
    }
    for (int32_t j = j0; j < jend; j += TILE) {
        const int n = jend - j < TILE ? jend - j : TILE, nn = next_rows(j, n, jend);
        const kv_tile kv = load_kv_tile(c, w, il, seq, j, g0, ng, n, nn);
        for (int h = 0; h < ng; h++)
            tile_step(c, w, h * mh, (h + 1) * mh, j, n, kv.k + h * d, kv.ldk, kv.v + h * d, kv.ldv,
                      mc[h], lc[h], oc[h]);
    }
}

/* Query rows of tokens t0..t0+nt-1 x query heads h0..h0+nh-1 (row b * nh + r: token t0 + b,
 * head h0 + r) into w->q and w->qpos; returns the row count. */
static int gather_rows(const cpulm_ctx *c, att_ws *w, int32_t t0, int32_t nt, int h0, int nh) {
    const cpulm_hparams *hp = &c->m->hp;
    int d = hp->head_dim;
    int64_t qd = (int64_t)hp->n_head * d;
    for (int32_t b = 0; b < nt; b++)
        for (int r = 0; r < nh; r++) {
            int i = b * nh + r;
            memcpy(w->q + (int64_t)i * d, c->q + (t0 + b) * qd + (int64_t)(h0 + r) * d,
                   sizeof(float) * (size_t)d);
            w->qpos[i] = c->pos[t0 + b];
        }
    if (c->attn->quant) /* once per item: every tile of the item reads these */
        c->k->attn_qquant(d, nt * nh, w->q, d, 1.0f / sqrtf((float)d), w->q16, w->qsc);
    return nt * nh;
}

/* Rows of tokens t0.. x the heads of group g. */
static int gather_q(const cpulm_ctx *c, att_ws *w, int32_t t0, int32_t nt, int g) {
    return gather_rows(c, w, t0, nt, g * c->attn->gq, c->attn->gq);
}

/* att rows of tokens t0.. (heads of group g) = o / l. */
static void write_out(const cpulm_ctx *c, const float *o, const float *l, int32_t t0, int m,
                      int g) {
    const cpulm_hparams *hp = &c->m->hp;
    int gq = c->attn->gq, d = hp->head_dim;
    int64_t qd = (int64_t)hp->n_head * d;
    for (int i = 0; i < m; i++) {
        float *out = c->att + (t0 + i / gq) * qd + (int64_t)(g * gq + i % gq) * d;
        const float inv = 1.0f / l[i];
        for (int e = 0; e < d; e++)
            out[e] = o[(int64_t)i * d + e] * inv;
    }
}

static void reset_rows(float *m, float *l, float *o, int rows, int64_t d) {
    for (int i = 0; i < rows; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    memset(o, 0, sizeof(float) * (size_t)rows * (size_t)d);
}

/* One block x group: every chunk in order, folded as it is made. */
static void block_item(cpulm_ctx *c, att_ws *w, int il, int32_t b, int g) {
    const struct cpulm_attn *a = c->attn;
    const int64_t d = c->m->hp.head_dim;
    int32_t t0 = a->blk[b];
    int m = gather_q(c, w, t0, a->blk[b + 1] - t0, g);
    reset_rows(w->m, w->l, w->o, m, d);
    const size_t off = cpulm_dtype_row_bytes(c->kv.dtype, d) * (size_t)g;
    for (int32_t j0 = 0; j0 <= w->qpos[m - 1]; j0 += CHUNK) {
        const int more = j0 + CHUNK <= w->qpos[m - 1]; /* then the next chunk is read next */
        const uint8_t *nx[2] = {more ? cpulm_kv_k(&c->kv, il, c->seq[t0], j0 + CHUNK) + off : NULL,
                                more ? cpulm_kv_v(&c->kv, il, c->seq[t0], j0 + CHUNK) + off : NULL};
        chunk_partial(c, w, il, c->seq[t0], g, 1, m, j0, nx, &w->mc, &w->lc, &w->oc);
        c->k->attn_merge(d, m, w->mc, w->lc, w->oc, d, w->m, w->l, w->o, d);
    }
    write_out(c, w->o, w->l, t0, m, g);
}

/* Split path: partial slot of (token t, group g, chunk ch): [gq] m, [gq] l, [gq][d] o. */
static float *part_of(const cpulm_ctx *c, int32_t t, int g, int32_t ch) {
    const struct cpulm_attn *a = c->attn;
    size_t per = (size_t)a->gq * ((size_t)c->m->hp.head_dim + 2);
    return a->part + (((size_t)t * c->m->hp.n_head_kv + g) * a->n_chunk_max + ch) * per;
}

static void split_fold(cpulm_ctx *c, att_ws *w, int32_t t, int g) {
    const int64_t d = c->m->hp.head_dim;
    int m = c->attn->gq;
    reset_rows(w->m, w->l, w->o, m, d);
    for (int32_t ch = 0; ch <= c->pos[t] / CHUNK; ch++) {
        const float *p = part_of(c, t, g, ch);
        c->k->attn_merge(d, m, p, p + m, p + 2 * m, d, w->m, w->l, w->o, d);
    }
    write_out(c, w->o, w->l, t, m, g);
}

/* Split item `item`: token t, chunk ch, KV heads g0.. (split_ng of them). */
typedef struct split_at {
    int32_t t, ch;
    int g0;
} split_at;

static split_at split_locate(const cpulm_ctx *c, uint64_t item) {
    const struct cpulm_attn *a = c->attn;
    split_at at = {0, 0, 0};
    while (item >= a->item_end[at.t])
        at.t++;
    const uint64_t local = item - (at.t ? a->item_end[at.t - 1] : 0);
    const uint64_t per = (uint64_t)(c->m->hp.n_head_kv / a->split_ng); /* items per chunk */
    at.ch = (int32_t)(local / per);
    at.g0 = (int)(local % per) * a->split_ng;
    return at;
}

/* The split item `item`; `next` (or UINT64_MAX) is the one this thread claimed to do after
 * it, whose first K and V rows the item's last tile hints: with several threads taking
 * items in turn, a thread's next item is rarely the next chunk, the rows after this one. */
static void split_item(cpulm_ctx *c, att_ws *w, int il, uint64_t item, uint64_t next) {
    const struct cpulm_attn *a = c->attn;
    const int n_kv = c->m->hp.n_head_kv, gq = a->gq, ng = a->split_ng;
    const split_at at = split_locate(c, item);
    const int32_t t = at.t, ch = at.ch;
    const int g0 = at.g0;
    const uint64_t n_ch = (uint64_t)(c->pos[t] / CHUNK + 1);
    float *mc[CPULM_ATT_ROWS] = {0}, *lc[CPULM_ATT_ROWS] = {0}, *oc[CPULM_ATT_ROWS] = {0};
    for (int h = 0; h < ng; h++) {
        float *p = part_of(c, t, g0 + h, ch);
        mc[h] = p, lc[h] = p + gq, oc[h] = p + 2 * gq;
    }
    const uint8_t *nx[2] = {NULL, NULL};
    if (next != UINT64_MAX) {
        const split_at n = split_locate(c, next);
        const size_t off = cpulm_dtype_row_bytes(c->kv.dtype, c->m->hp.head_dim) * (size_t)n.g0;
        nx[0] = cpulm_kv_k(&c->kv, il, c->seq[n.t], n.ch * CHUNK) + off;
        nx[1] = cpulm_kv_v(&c->kv, il, c->seq[n.t], n.ch * CHUNK) + off;
    }
    gather_rows(c, w, t, 1, g0 * gq, ng * gq);
    chunk_partial(c, w, il, c->seq[t], g0, ng, gq, ch * CHUNK, nx, mc, lc, oc);
    /* release our partials; a pair's last chunk (of this layer) acquires all and folds */
    for (int h = 0; h < ng; h++) {
        unsigned done =
            atomic_fetch_add_explicit(&a->chunks_done[t * n_kv + g0 + h], 1, memory_order_acq_rel) +
            1;
        if (done % n_ch == 0) split_fold(c, w, t, g0 + h);
    }
}

/* Exact path, one tile of keys j..j+n-1 (K and V as f32 in kt, vt) for rows i0..i1-1 of the
 * item (queries transposed in w->qt, m columns), which all read these keys: attn_f16's
 * per-row arithmetic. Rows of one token share their keys, so each attn_xpv takes a token's
 * rows. */
static void exact_tile(const cpulm_ctx *c, att_ws *w, int m, int i0, int i1, int32_t j, int n,
                       const float *kt, int64_t ldk, const float *vt, int64_t ldv) {
    const cpulm_kernels *k = c->k;
    const int64_t d = c->m->hp.head_dim;
    const float scale = 1.0f / sqrtf((float)d);
    while (w->qpos[i0] < j) /* rows before this tile's keys skip it */
        i0++;
    k->attn_xscores(d, i1 - i0, n, w->qt + i0, m, kt, ldk, scale, w->s + i0 * TILE, TILE);
    for (int i = i0; i < i1;) {
        int ie = i + 1;
        while (ie < i1 && w->qpos[ie] == w->qpos[i])
            ie++;
        const int lim = w->qpos[i] - j + 1 < n ? w->qpos[i] - j + 1 : n;
        for (int r = i; r < ie; r++)
            k->attn_xweights(lim, w->s + r * TILE, w->ms + r * TILE, &w->m[r]);
        k->attn_xpv(d, ie - i, lim, w->ms + i * TILE, w->s + i * TILE, TILE, vt, ldv, w->o + i * d,
                    d, w->l + i);
        i = ie;
    }
}

/* Exact path: block b x KV heads g0..g0+ng-1 (ng > 1 only for one-token blocks: then the
 * item reads ng heads' adjacent slices of every cache row, not one head's 1/n_kv of it,
 * and each cache page once per item instead of once per head). */
static void exact_item(cpulm_ctx *c, att_ws *w, int il, int32_t b, int g0, int ng) {
    const struct cpulm_attn *a = c->attn;
    const int64_t d = c->m->hp.head_dim;
    const int gq = a->gq, nh = ng * gq;
    const int32_t t0 = a->blk[b], seq = c->seq[t0];
    const int m = gather_rows(c, w, t0, a->blk[b + 1] - t0, g0 * gq, nh);
    for (int i = 0; i < m; i++) /* attn_f16 takes the query as f16 */
        for (int64_t e = 0; e < d; e++)
            w->qt[e * m + i] = cpulm_fp16_to_f32(cpulm_f32_to_fp16(w->q[i * d + e]));
    reset_rows(w->m, w->l, w->o, m, d);
    const int32_t jend = w->qpos[m - 1] + 1;
    for (int32_t j = 0; j < jend; j += TILE) {
        const int n = jend - j < TILE ? jend - j : TILE, nn = next_rows(j, n, jend);
        const kv_tile kv = load_kv_tile(c, w, il, seq, j, g0, ng, n, nn);
        for (int h = 0; h < ng; h++)
            exact_tile(c, w, m, ng == 1 ? 0 : h * gq, ng == 1 ? m : (h + 1) * gq, j, n,
                       kv.k + h * d, kv.ldk, kv.v + h * d, kv.ldv);
    }
    const int64_t qd = (int64_t)c->m->hp.n_head * d;
    for (int i = 0; i < m; i++) {
        float *out = c->att + (t0 + i / nh) * qd + (int64_t)(g0 * gq + i % nh) * d;
        const float inv = w->l[i] == 0.0f ? 0.0f : 1.0f / w->l[i];
        for (int64_t e = 0; e < d; e++)
            out[e] = w->o[i * d + e] * inv;
    }
}

/* KV heads per exact-path item: 1 for prompt blocks; for one-token blocks (generation) the
 * most that keep CPULM_ATT_GEN_ITEMS items per thread and fit the item's rows. */
static int exact_heads_per_item(const cpulm_ctx *c, int nth) {
    const struct cpulm_attn *a = c->attn;
    const int n_kv = c->m->hp.n_head_kv;
    int best = 1;
    if (a->n_blk != c->n_tok) return best;
    for (int h = 2; h <= n_kv; h++)
        if (n_kv % h == 0 && h * a->gq <= a->rows && (int64_t)c->n_tok * (n_kv / h) >= (int64_t)nth)
            best = h;
    return best;
}

/* The walk (attn_fast < 0): one (token t, head h) by attn_f16 itself, each key read once
 * per query head. The exact path gives the same bits faster; this stays as its oracle in
 * tests and the baseline of A/B benchmarks (`--attn walk`). */
static void ref_item(cpulm_ctx *c, att_ws *w, int il, int32_t t, int h) {
    const cpulm_hparams *hp = &c->m->hp;
    const int64_t d = hp->head_dim, qd = (int64_t)hp->n_head * d;
    const int g = h / c->attn->gq;
    uint16_t *q16 = (uint16_t *)w->q; /* w->q holds rows * d floats, >= d halves */
    c->k->from_float[CPULM_DTYPE_F16](c->q + t * qd + h * d, q16, d);
    const size_t off = sizeof(uint16_t) * (size_t)g * (size_t)d;
    c->k->attn_f16(d, c->pos[t] + 1, q16, cpulm_kv_k(&c->kv, il, c->seq[t], 0) + off,
                   cpulm_kv_v(&c->kv, il, c->seq[t], 0) + off, c->kv.row_bytes,
                   1.0f / sqrtf((float)d), c->att + t * qd + h * d);
}

void cpulm_attn_layer(cpulm_ctx *c, int il, int ith, int nth) {
    const struct cpulm_attn *a = c->attn;
    const int n_kv = c->m->hp.n_head_kv;
    att_ws w = ws_of(c, ith);
    uint64_t item;
    if (a->walk) {
        const int nh = c->m->hp.n_head;
        uint64_t n = (uint64_t)c->n_tok * (uint64_t)nh, first = cpulm_work_begin(c, ith, n);
        while (cpulm_work_claim(c, first + n, &item)) {
            uint64_t i = item - first;
            ref_item(c, &w, il, (int32_t)(i / (uint64_t)nh), (int)(i % (uint64_t)nh));
        }
        return;
    }
    if (a->exact) {
        const int ng = exact_heads_per_item(c, nth);
        const uint64_t per = (uint64_t)(n_kv / ng), n = (uint64_t)a->n_blk * per;
        const uint64_t first = cpulm_work_begin(c, ith, n);
        while (cpulm_work_claim(c, first + n, &item)) {
            uint64_t i = item - first;
            exact_item(c, &w, il, (int32_t)(i / per), (int)(i % per) * ng, ng);
        }
        return;
    }
    if (!a->split) {
        /* last blocks first: they have the most keys, so the threads finish together */
        uint64_t n = (uint64_t)a->n_blk * (uint64_t)n_kv, first = cpulm_work_begin(c, ith, n);
        while (cpulm_work_claim(c, first + n, &item)) {
            uint64_t i = first + n - 1 - item;
            block_item(c, &w, il, (int32_t)(i / (uint64_t)n_kv), (int)(i % (uint64_t)n_kv));
        }
        return;
    }
    (void)nth; /* the split path folds without a barrier (split_item) */
    /* each thread claims its next item before it starts one, to hint that item's first rows
     * (a descheduled thread so holds up at most one item besides its own) */
    uint64_t n = a->n_split_items, first = cpulm_work_begin(c, ith, n), next;
    for (int have = cpulm_work_claim(c, first + n, &item); have; item = next) {
        have = cpulm_work_claim(c, first + n, &next);
        split_item(c, &w, il, item - first, have ? next - first : UINT64_MAX);
    }
}
