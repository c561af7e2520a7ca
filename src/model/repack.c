/* repack.c: 16-row interleaved weight layout for the gemm_x16 kernels (see repack.h).
 * One rule serves every type (kernels.h): per block, the block struct's fields in order,
 * each as the 16 rows' copies, 2-byte fields side by side, longer ones in 64-byte chunks of
 * 4-byte lanes. A type is described by its fields' byte sizes. */
#include "repack.h"

#include <stdlib.h>
#include <string.h>

#include "../base/status.h"

#define R          CPULM_PACK_ROWS
#define MAX_FIELDS 5

typedef struct block_fields {
    int n;                   /* fields; 0: the type has no packed layout */
    uint16_t sz[MAX_FIELDS]; /* byte sizes in struct order: 2, or a multiple of 4 */
} block_fields;

static block_fields fields_of(cpulm_dtype t) {
    switch (t) {
    case CPULM_DTYPE_Q4_0: return (block_fields){2, {2, 16}};
    case CPULM_DTYPE_Q8_0: return (block_fields){2, {2, 32}};
    case CPULM_DTYPE_Q4_K: return (block_fields){4, {2, 2, 12, 128}};
    case CPULM_DTYPE_Q5_K: return (block_fields){5, {2, 2, 12, 32, 128}};
    case CPULM_DTYPE_Q6_K: return (block_fields){4, {128, 64, 16, 2}};
    default: return (block_fields){0, {0}};
    }
}

int cpulm_repack_supported(const cpulm_kernels *k, const cpulm_tensor *t) {
    if (!t->data || t->packed || fields_of(t->type).n == 0) return 0;
    return cpulm_kernels_packs(k, t->type, t->ne[1]);
}

/* Row r's block (row-major, blk) into its lanes of packed block g. Constant-size copies:
 * the loads run at about a word a nanosecond. */
static void pack_block(const block_fields *f, uint8_t *g, const uint8_t *blk, size_t r) {
    size_t off = 0;
    for (int i = 0; i < f->n; off += f->sz[i++]) {
        uint8_t *dst = g + (size_t)R * off;
        if (f->sz[i] == 2)
            memcpy(dst + 2 * r, blk + off, 2);
        else
            for (size_t c = 0; c < f->sz[i] / 4u; c++)
                memcpy(dst + c * 64 + r * 4, blk + off + 4 * c, 4);
    }
}

/* The inverse: row r's block rebuilt from packed block g. */
static void unpack_block(const block_fields *f, const uint8_t *g, uint8_t *blk, size_t r) {
    size_t off = 0;
    for (int i = 0; i < f->n; off += f->sz[i++]) {
        const uint8_t *src = g + (size_t)R * off;
        if (f->sz[i] == 2)
            memcpy(blk + off, src + 2 * r, 2);
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

void cpulm_repack_x16(cpulm_dtype type, const void *src, void *dst, int64_t n_in, int64_t n_out) {
    const block_fields f = fields_of(type);
    const size_t bb = block_bytes(&f);
    const uint64_t rb = cpulm_dtype_row_bytes(type, n_in);
    const int64_t nb = n_in / cpulm_dtype_traits_get(type)->block;
    for (int64_t g = 0; g < n_out / R; g++) {
        const uint8_t *rows = (const uint8_t *)src + (size_t)g * R * rb;
        uint8_t *out = (uint8_t *)dst + (size_t)g * R * rb;
        for (int64_t b = 0; b < nb; b++)
            for (size_t r = 0; r < R; r++)
                pack_block(&f, out + (size_t)b * R * bb, rows + r * rb + (size_t)b * bb, r);
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
    for (int64_t b0 = 0; b0 < nb; b0 += chunk) {
        const int64_t n = nb - b0 < chunk ? nb - b0 : chunk;
        for (int64_t b = 0; b < n; b++)
            unpack_block(&f, g + (size_t)(b0 + b) * R * bb, buf + (size_t)b * bb, (size_t)(r % R));
        k->to_float[t->type](buf, out + b0 * qk, n * qk);
    }
}

/* Repacks one tensor into a model-owned copy and releases the file pages it came from.
 * A per-expert stack packs as one matrix of ne[1] * ne[2] rows: ne[1] % 16 == 0, so no
 * 16-row group straddles two experts and each expert's slice is its own packed matrix. */
static cpulm_status repack_one(cpulm_model *m, cpulm_tensor *t, cpulm_error *err) {
    const size_t bytes = (size_t)t->row_bytes * (size_t)t->ne[1] * (size_t)t->ne[2];
    void **list = realloc(m->owned_packed, sizeof *list * (size_t)(m->n_owned_packed + 1));
    if (!list) return cpulm_errf(err, CPULM_ERR_NOMEM, "out of memory repacking weights");
    m->owned_packed = list;
    void *dst = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!dst) return cpulm_errf(err, CPULM_ERR_NOMEM, "out of memory repacking weights");
    list[m->n_owned_packed++] = dst;
    cpulm_repack_x16(t->type, t->data, dst, t->ne[0], t->ne[1] * t->ne[2]);
    const uint8_t *src = t->data;
    if (src >= m->map.data && src + bytes <= m->map.data + m->map.size)
        cpulm_mmap_discard(&m->map, (uint64_t)(src - m->map.data), bytes);
    t->data = dst;
    t->packed = 1;
    return CPULM_OK;
}

cpulm_status cpulm_repack_model(cpulm_model *m, const cpulm_kernels *k, cpulm_error *err) {
    cpulm_status s;
    const int tied = m->output.data == m->tok_embd.data;
    if (cpulm_repack_supported(k, &m->output)) {
        if ((s = repack_one(m, &m->output, err)) != CPULM_OK) return s;
        if (tied) m->tok_embd = m->output;
    }
    for (int il = 0; il < m->hp.n_layer; il++) {
        cpulm_layer *ly = &m->layers[il];
        cpulm_tensor *w[] = {&ly->wq,        &ly->wk,      &ly->wv,       &ly->wo,
                             &ly->w_gate,    &ly->w_up,    &ly->w_down,   &ly->gate_inp,
                             &ly->gate_exps, &ly->up_exps, &ly->down_exps};
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
            if (cpulm_repack_supported(k, w[i]) && (s = repack_one(m, w[i], err)) != CPULM_OK)
                return s;
    }
    return CPULM_OK;
}
