/* repack.c: 16-row interleaved weight layout for the gemm_x16 kernels (see repack.h).
 * One rule serves every type (kernels.h): per block, the block struct's fields in order,
 * each as the 16 rows' copies, 1- and 2-byte fields side by side, longer ones in 64-byte chunks of
 * 4-byte lanes. A type is described by its fields' byte sizes. */
#include "repack.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../base/mmap.h"
#include "../base/status.h"
#include "../format/quant.h"
#include "../threads/topo.h"

#if defined(__aarch64__) /* the per-arch hook: Q5_K and Q6_K quants in the ARM layouts */
#include "../kernels/arm/k5_layout.h"
#include "../kernels/arm/k6_layout.h"
#define KQ_ARM 1
#else
#define KQ_ARM 0
#endif

#define R                  CPULM_PACK_ROWS
#define MAX_FIELDS         5
#define REPACK_MAX_THREADS 64

typedef struct block_fields {
    int n;                   /* fields; 0: the type has no packed layout */
    uint16_t sz[MAX_FIELDS]; /* byte sizes in struct order: 1, 2, or a multiple of 4 */
} block_fields;

static block_fields fields_of(cpulm_dtype t) {
    switch (t) {
    case CPULM_DTYPE_Q4_0: return (block_fields){2, {2, 16}};
    case CPULM_DTYPE_MXFP4: return (block_fields){2, {1, 16}};
    case CPULM_DTYPE_Q8_0: return (block_fields){2, {2, 32}};
    case CPULM_DTYPE_Q4_K: return (block_fields){4, {2, 2, 12, 128}};
    case CPULM_DTYPE_Q5_K: return (block_fields){5, {2, 2, 12, 32, 128}};
    case CPULM_DTYPE_Q6_K: return (block_fields){4, {128, 64, 16, 2}};
    default: return (block_fields){0, {0}};
    }
}

/* A matrix packs as cpulm_kernels_packs_as(type): Q5_0, Q4_1 and Q5_1 are widened to Q8_0
 * first (34 bytes a block instead of 22-24, and a float min a block for the last two). Their
 * row-major vec_dot, the generic one at every level, ran a Gemma-3-1B-shaped Q4_K_M (1152-wide
 * rows fall back to Q5_0) 33x slower than llama.cpp's pp512 and 3.8x its tg64, a Q5_K_M (Q5_1)
 * 13x and 3.4x (Zen 5, 2026-12-05). */
int cpulm_repack_supported(const cpulm_kernels *k, const cpulm_tensor *t) {
    const cpulm_dtype pt = cpulm_kernels_packs_as(t->type);
    if (!t->data || t->packed || fields_of(pt).n == 0) return 0;
    return cpulm_kernels_packs(k, pt, t->ne[1]);
}

/* The inverse: row r's block rebuilt from packed block g. */
static void unpack_block(const block_fields *f, const uint8_t *g, uint8_t *blk, size_t r) {
    size_t off = 0;
    for (int i = 0; i < f->n; off += f->sz[i++]) {
        const uint8_t *src = g + (size_t)R * off;
        if (f->sz[i] <= 2)
            memcpy(blk + off, src + f->sz[i] * r, f->sz[i]);
        else
            for (size_t c = 0; c < f->sz[i] / 4u; c++)
                memcpy(blk + off + 4 * c, src + c * 64 + r * 4, 4);
    }
}

static size_t block_bytes(const block_fields *f) {
    size_t b = 0;
    for (int i = 0; i < f->n; i++)
        b += f->sz[i];
    return b;
}

#define INLINE static inline __attribute__((always_inline))

/* Row r's copy of one field (sz bytes at in) into its lanes at o. sz is a constant at every
 * call, so this unrolls into plain 2- or 4-byte loads and stores at constant offsets. */
INLINE void put_field(uint8_t *o, const uint8_t *in, size_t r, const size_t sz) {
    if (sz <= 2) {
        memcpy(o + sz * r, in, sz);
        return;
    }
    _Pragma("GCC unroll 32") for (size_t c = 0; c < sz / 4; c++)
        memcpy(o + 64 * c + 4 * r, in + 4 * c, 4);
}

/* Groups [g0, g1) of a row-major matrix (rows rb bytes apart) into the packed layout of a
 * type whose blocks have fields of s0..s4 bytes (0: none). Row by row, so each row is read
 * in order and every store lands at a constant offset from its block; a group's output
 * (nb * 16 blocks) stays in L1/L2 over its 16 rows. */
INLINE void pack_groups(const uint8_t *src, uint8_t *dst, size_t rb, int64_t nb, int64_t g0,
                        int64_t g1, const size_t s0, const size_t s1, const size_t s2,
                        const size_t s3, const size_t s4) {
    const size_t bb = s0 + s1 + s2 + s3 + s4, o1 = s0, o2 = o1 + s1, o3 = o2 + s2, o4 = o3 + s3;
    for (int64_t g = g0; g < g1; g++)
        for (size_t r = 0; r < R; r++) {
            const uint8_t *in = src + ((size_t)g * R + r) * rb;
            uint8_t *o = dst + (size_t)g * R * rb;
            for (int64_t b = 0; b < nb; b++, in += bb, o += R * bb) {
                put_field(o, in, r, s0);
                if (s1) put_field(o + R * o1, in + o1, r, s1);
                if (s2) put_field(o + R * o2, in + o2, r, s2);
                if (s3) put_field(o + R * o3, in + o3, r, s3);
                if (s4) put_field(o + R * o4, in + o4, r, s4);
            }
        }
}

/* CPULM_X16_PAIRS (kernels.h), Q4_0 / Q8_0: a 2-byte d, then qb quant bytes per row (flip: the
 * XOR applied to them). d as in the shared layout; the quants in 8-byte pieces, piece j of
 * row r at 2R + 2 qb (r / 2) + 16 j + 8 (r % 2) of its group block. */
static size_t pairs_off(size_t qb, size_t r, size_t j) {
    return 2 * R + 2 * qb * (r / 2) + 16 * j + 8 * (r % 2);
}

INLINE void pack_pairs(const uint8_t *src, uint8_t *dst, size_t rb, int64_t nb, int64_t g0,
                       int64_t g1, const size_t qb, const uint8_t flip) {
    for (int64_t g = g0; g < g1; g++)
        for (size_t r = 0; r < R; r++) {
            const uint8_t *in = src + ((size_t)g * R + r) * rb;
            uint8_t *o = dst + (size_t)g * R * rb;
            for (int64_t b = 0; b < nb; b++, in += 2 + qb, o += R * (2 + qb)) {
                memcpy(o + 2 * r, in, 2);
                for (size_t j = 0; j < qb / 8; j++)
                    for (size_t i = 0; i < 8; i++)
                        o[pairs_off(qb, r, j) + i] = in[2 + 8 * j + i] ^ flip;
            }
        }
}

/* The inverse for one row: row r's block rebuilt from packed block g. */
static void unpack_pairs(const uint8_t *g, uint8_t *blk, size_t r, size_t qb, uint8_t flip) {
    memcpy(blk, g + 2 * r, 2);
    for (size_t j = 0; j < qb / 8; j++)
        for (size_t i = 0; i < 8; i++)
            blk[2 + 8 * j + i] = g[pairs_off(qb, r, j) + i] ^ flip;
}

/* Does layout l differ from the shared one for type t (else t packs as STD)? */
static int is_pairs(cpulm_dtype t, int l) {
    return l == CPULM_X16_PAIRS && (t == CPULM_DTYPE_Q4_0 || t == CPULM_DTYPE_Q8_0);
}

#if KQ_ARM
/* A type whose quants the ARM kernels read in their own layout (k5_layout.h, k6_layout.h):
 * its block bytes, where the quants start in a group super-block, and one row's quants put
 * there from (get: rebuilt into) the row's block. The rest of the block stays as
 * pack_groups lays it out. */
typedef struct arm_layout {
    size_t bb, off;
    void (*put)(uint8_t *q, int r, const uint8_t *blk);
    void (*get)(const uint8_t *q, int r, uint8_t *blk);
} arm_layout;

/* Q6_K: ql and qh, the block's first 192 bytes. */
static void k6_put(uint8_t *q, int r, const uint8_t *blk) {
    cpulm_k6a_put_row(q, r, blk, blk + 128);
}
static void k6_get(const uint8_t *q, int r, uint8_t *blk) {
    cpulm_k6a_get_row(q, r, blk, blk + 128);
}

/* Q5_K: qh and qs, bytes 16..175 of the block (after d, dmin and scales). */
static void k5_put(uint8_t *q, int r, const uint8_t *blk) {
    cpulm_k5a_put_row(q, r, blk + 16, blk + 48);
}
static void k5_get(const uint8_t *q, int r, uint8_t *blk) {
    cpulm_k5a_get_row(q, r, blk + 16, blk + 48);
}

static const arm_layout K6_ARM = {sizeof(cpulm_block_q6_K), 0, k6_put, k6_get};
static const arm_layout K5_ARM = {sizeof(cpulm_block_q5_K), CPULM_K5A_OFF, k5_put, k5_get};

static const arm_layout *arm_layout_of(cpulm_dtype t) {
    return t == CPULM_DTYPE_Q6_K ? &K6_ARM : t == CPULM_DTYPE_Q5_K ? &K5_ARM : NULL;
}

/* Groups [g0, g1): every group super-block's quants rewritten in the ARM layout from the
 * source rows. Inlined with a constant layout, so put is a direct call as before. */
INLINE void arm_pack(const uint8_t *src, uint8_t *dst, size_t rb, int64_t nb, int64_t g0,
                     int64_t g1, const arm_layout *l) {
    for (int64_t g = g0; g < g1; g++)
        for (size_t r = 0; r < R; r++) {
            const uint8_t *in = src + ((size_t)g * R + r) * rb;
            uint8_t *o = dst + (size_t)g * R * rb;
            for (int64_t b = 0; b < nb; b++, in += l->bb, o += R * l->bb)
                l->put(o + l->off, (int)r, in);
        }
}
#endif

/* One constant-folded copy per type, the fields as fields_of lists them. */
static void pack_range(cpulm_dtype type, int layout, const void *src, void *dst, int64_t n_in,
                       int64_t g0, int64_t g1) {
    const size_t rb = (size_t)cpulm_dtype_row_bytes(type, n_in);
    const int64_t nb = n_in / cpulm_dtype_traits_get(type)->block;
    if (is_pairs(type, layout)) {
        if (type == CPULM_DTYPE_Q4_0)
            pack_pairs(src, dst, rb, nb, g0, g1, 16, 0x88);
        else
            pack_pairs(src, dst, rb, nb, g0, g1, 32, 0);
        return;
    }
    switch (type) {
    case CPULM_DTYPE_Q4_0: pack_groups(src, dst, rb, nb, g0, g1, 2, 16, 0, 0, 0); break;
    case CPULM_DTYPE_MXFP4: pack_groups(src, dst, rb, nb, g0, g1, 1, 16, 0, 0, 0); break;
    case CPULM_DTYPE_Q8_0: pack_groups(src, dst, rb, nb, g0, g1, 2, 32, 0, 0, 0); break;
    case CPULM_DTYPE_Q4_K: pack_groups(src, dst, rb, nb, g0, g1, 2, 2, 12, 128, 0); break;
    case CPULM_DTYPE_Q5_K: pack_groups(src, dst, rb, nb, g0, g1, 2, 2, 12, 32, 128);
#if KQ_ARM
        arm_pack(src, dst, rb, nb, g0, g1, &K5_ARM);
#endif
        break;
    case CPULM_DTYPE_Q6_K: pack_groups(src, dst, rb, nb, g0, g1, 128, 64, 16, 2, 0);
#if KQ_ARM
        arm_pack(src, dst, rb, nb, g0, g1, &K6_ARM);
#endif
        break;
    default: break;
    }
}

void cpulm_repack_x16(cpulm_dtype type, int layout, const void *src, void *dst, int64_t n_in,
                      int64_t n_out) {
    pack_range(type, layout, src, dst, n_in, 0, n_out / R);
}

typedef struct pack_job {
    cpulm_dtype type;
    int layout;
    const void *src;
    void *dst;
    int64_t n_in, g0, g1;
} pack_job;

static void *pack_job_run(void *arg) {
    const pack_job *j = arg;
    pack_range(j->type, j->layout, j->src, j->dst, j->n_in, j->g0, j->g1);
    return NULL;
}

#define MT_MIN_GROUPS                                                          \
    64 /* fewer groups per thread than this: a thread costs more than it saves \
        */

void cpulm_repack_x16_mt(cpulm_dtype type, int layout, const void *src, void *dst, int64_t n_in,
                         int64_t n_out, int nth) {
    const int64_t ng = n_out / R;
    if (nth > REPACK_MAX_THREADS) nth = REPACK_MAX_THREADS;
    if (nth > ng / MT_MIN_GROUPS) nth = (int)(ng / MT_MIN_GROUPS);
    if (nth <= 1) {
        pack_range(type, layout, src, dst, n_in, 0, ng);
        return;
    }
    pack_job jobs[REPACK_MAX_THREADS];
    pthread_t th[REPACK_MAX_THREADS];
    int started[REPACK_MAX_THREADS] = {0};
    for (int k = 0; k < nth; k++)
        jobs[k] = (pack_job){type, layout, src, dst, n_in, ng * k / nth, ng * (k + 1) / nth};
    for (int k = 1; k < nth; k++)
        started[k] = pthread_create(&th[k], NULL, pack_job_run, &jobs[k]) == 0;
    pack_job_run(&jobs[0]);
    for (int k = 1; k < nth; k++) {
        if (started[k])
            pthread_join(th[k], NULL);
        else
            pack_job_run(&jobs[k]); /* no thread: the caller does its share */
    }
}

void cpulm_repack_get_row(const cpulm_kernels *k, const cpulm_tensor *t, int64_t r, float *out) {
    if (!t->packed) {
        k->to_float[t->type]((const uint8_t *)t->data + (size_t)r * t->row_bytes, out, t->ne[0]);
        return;
    }
    enum { BUF = 4096 }; /* blocks rebuilt per step: a small stack buffer, no allocation */
    uint8_t buf[BUF];
    const block_fields f = fields_of(t->type);
    const size_t bb = block_bytes(&f);
    const int64_t qk = cpulm_dtype_traits_get(t->type)->block, nb = t->ne[0] / qk;
    const int64_t chunk = (int64_t)(BUF / bb);
    const uint8_t *g = (const uint8_t *)t->data + (size_t)(r / R) * R * t->row_bytes;
    const int pairs = is_pairs(t->type, t->packed - 1);
#if KQ_ARM
    const arm_layout *arm = arm_layout_of(t->type);
#endif
    for (int64_t b0 = 0; b0 < nb; b0 += chunk) {
        const int64_t n = nb - b0 < chunk ? nb - b0 : chunk;
        for (int64_t b = 0; b < n; b++) {
            const uint8_t *gb = g + (size_t)(b0 + b) * R * bb;
            if (pairs) {
                unpack_pairs(gb, buf + (size_t)b * bb, (size_t)(r % R), bb - 2,
                             t->type == CPULM_DTYPE_Q4_0 ? 0x88 : 0);
                continue;
            }
            unpack_block(&f, gb, buf + (size_t)b * bb, (size_t)(r % R));
#if KQ_ARM
            if (arm) arm->get(gb + arm->off, (int)(r % R), buf + (size_t)b * bb);
#endif
        }
        k->to_float[t->type](buf, out + b0 * qk, n * qk);
    }
    for (int64_t b = 0; t->mins && b < nb; b++) /* widened Q4_1 / Q5_1: + the block's min */
        for (int64_t e = 0; e < 32; e++)
            out[b * 32 + e] += t->mins[((r / R) * nb + b) * R + r % R];
}

/* t's rows widened to Q8_0 (cpulm_widen_q8_0) in a new buffer of `bytes`, and for Q4_1 /
 * Q5_1 their blocks' mins into *mins (new, NULL else), per 16-row group [block][16 rows] as
 * cpulm_matmul_args.mins reads them. NULL: out of memory (nothing left allocated). */
static void *widened(const cpulm_tensor *t, size_t bytes, float **mins) {
    const int64_t rows = t->ne[1] * t->ne[2], nb = t->ne[0] / 32;
    const int with_mins = cpulm_widens_to_q8_0(t->type) == 2;
    void *w = malloc(bytes);
    float *row_m = malloc(sizeof(float) * (size_t)nb);
    *mins = with_mins ? malloc(sizeof(float) * (size_t)(rows * nb)) : NULL;
    if (!w || !row_m || (with_mins && !*mins)) {
        free(w), free(row_m), free(*mins);
        *mins = NULL;
        return NULL;
    }
    const size_t wb = bytes / (size_t)rows;
    for (int64_t r = 0; r < rows; r++) {
        cpulm_widen_q8_0(t->type, (const uint8_t *)t->data + (size_t)r * t->row_bytes,
                         (uint8_t *)w + (size_t)r * wb, row_m, t->ne[0]);
        for (int64_t b = 0; with_mins && b < nb; b++)
            (*mins)[((r / R) * nb + b) * R + r % R] = row_m[b];
    }
    free(row_m);
    return w;
}

/* dst and, if any, mins into the model's list of owned copies. */
static cpulm_status own(cpulm_model *m, void *dst, float *mins, cpulm_error *err) {
    const int n = 1 + (mins != NULL);
    void **list = realloc(m->owned_packed, sizeof *list * (size_t)(m->n_owned_packed + n));
    if (!list) return cpulm_errf(err, CPULM_ERR_NOMEM, "out of memory repacking weights");
    m->owned_packed = list;
    list[m->n_owned_packed++] = dst;
    if (mins) list[m->n_owned_packed++] = mins;
    return CPULM_OK;
}

/* Repacks one tensor into a model-owned copy (widened first, as cpulm_kernels_packs_as says)
 * and releases the file pages it came from. A per-expert stack packs as one matrix of ne[1] *
 * ne[2] rows: ne[1] % 16 == 0, so no 16-row group straddles two experts and each expert's
 * slice is its own packed matrix. */
static cpulm_status repack_one(cpulm_model *m, const cpulm_kernels *k, cpulm_tensor *t, int nth,
                               cpulm_error *err) {
    const cpulm_dtype pt = cpulm_kernels_packs_as(t->type);
    const int layout = k->x16_layout[pt];
    const size_t rows = (size_t)t->ne[1] * (size_t)t->ne[2];
    const size_t bytes = (size_t)t->row_bytes * rows;
    const size_t pbytes = (size_t)cpulm_dtype_row_bytes(pt, t->ne[0]) * rows;
    void *dst = aligned_alloc(64, (pbytes + 63) / 64 * 64);
    float *mins = NULL;
    void *wide = dst && pt != t->type ? widened(t, pbytes, &mins) : NULL;
    if (!dst || (pt != t->type && !wide) || own(m, dst, mins, err) != CPULM_OK) {
        free(dst), free(wide), free(mins);
        return cpulm_errf(err, CPULM_ERR_NOMEM, "out of memory repacking weights");
    }
    cpulm_advise_huge(dst, pbytes);
    cpulm_repack_x16_mt(pt, layout, wide ? wide : t->data, dst, t->ne[0], (int64_t)rows, nth);
    free(wide);
    const uint8_t *src = t->data;
    if (src >= m->map.data && src + bytes <= m->map.data + m->map.size)
        cpulm_mmap_discard(&m->map, (uint64_t)(src - m->map.data), bytes);
    if (pt != t->type) { /* the bytes a token reads grow too: model_info's figures */
        const uint64_t extra = (uint64_t)(pbytes - bytes) +
                               (mins ? sizeof(float) * rows * (size_t)(t->ne[0] / 32) : 0);
        m->widened_bytes += extra;
        m->widened_active_bytes += t->ne[2] > 1 && m->hp.n_expert > 0
                                       ? extra / (uint64_t)t->ne[2] * (uint64_t)m->hp.n_expert_used
                                       : extra;
    }
    t->data = dst;
    t->type = pt;
    t->mins = mins;
    t->row_bytes = (uint64_t)(pbytes / rows);
    t->expert_bytes = t->row_bytes * (uint64_t)t->ne[1];
    t->packed = 1 + layout;
    return CPULM_OK;
}

cpulm_status cpulm_repack_model(cpulm_model *m, const cpulm_kernels *k, cpulm_error *err) {
    cpulm_status s;
    const int nth = cpulm_topo_default_threads();
    const int tied = m->output.data == m->tok_embd.data;
    if (cpulm_repack_supported(k, &m->output)) {
        if ((s = repack_one(m, k, &m->output, nth, err)) != CPULM_OK) return s;
        if (tied) m->tok_embd = m->output;
    }
    for (int il = 0; il < m->hp.n_layer; il++) {
        cpulm_layer *ly = &m->layers[il];
        cpulm_tensor *w[] = {&ly->wq,         &ly->wk,      &ly->wv,         &ly->wo,
                             &ly->w_gate,     &ly->w_up,    &ly->w_down,     &ly->gate_inp,
                             &ly->gate_exps,  &ly->up_exps, &ly->down_exps,  &ly->ssm_qkv,
                             &ly->ssm_z,      &ly->ssm_out, &ly->gate_shexp, &ly->up_shexp,
                             &ly->down_shexp, &ly->ssm_in,  &ly->wqkv};
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
            if (cpulm_repack_supported(k, w[i]) &&
                (s = repack_one(m, k, w[i], nth, err)) != CPULM_OK)
                return s;
    }
    return CPULM_OK;
}
