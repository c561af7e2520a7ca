/* repack.c: 16-row interleaved weight layout for the gemm_x16 kernels (see repack.h). */
#include "repack.h"

#include <stdlib.h>
#include <string.h>

#include "../base/status.h"

#define R CPULM_PACK_ROWS

/* Quant bytes of one block per row, and how many bytes of each row go to a lane at once. */
static size_t quant_bytes(cpulm_dtype t) {
    return t == CPULM_DTYPE_Q4_0 ? 16 : 32;
}

int cpulm_repack_supported(const cpulm_kernels *k, const cpulm_tensor *t) {
    if (!t->data || t->packed) return 0;
    if (t->type != CPULM_DTYPE_Q4_0 && t->type != CPULM_DTYPE_Q8_0) return 0;
    if (t->ne[1] % R != 0) return 0;
    return k->gemm_x16[t->type] && k->gemm_x16[t->type] != cpulm_kernels_generic.gemm_x16[t->type];
}

/* One group of 16 rows: for each block, the 16 scales, then the quants in chunks of 64
 * bytes whose lane r (4 bytes) holds 4 consecutive quant bytes of row r. */
static void repack_group(cpulm_dtype type, const uint8_t *src, uint64_t row_bytes, uint8_t *dst,
                         int64_t nb) {
    const size_t qb = quant_bytes(type), bb = 2 + qb; /* bytes of one block of one row */
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *o = dst + (size_t)b * R * bb;
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = src + (size_t)r * row_bytes + (size_t)b * bb;
            memcpy(o + 2 * r, blk, 2);
            for (size_t c = 0; c < qb / 4; c++) memcpy(o + 2 * R + c * 64 + (size_t)r * 4, blk + 2 + 4 * c, 4);
        }
    }
}

void cpulm_repack_x16(cpulm_dtype type, const void *src, void *dst, int64_t n_in, int64_t n_out) {
    const uint64_t rb = cpulm_dtype_row_bytes(type, n_in);
    for (int64_t g = 0; g < n_out / R; g++)
        repack_group(type, (const uint8_t *)src + (size_t)g * R * rb, rb,
                     (uint8_t *)dst + (size_t)g * R * rb, n_in / 32);
}

/* Rebuilds blocks [b0, b0 + n) of row r in the original layout. */
static void unpack_blocks(const cpulm_tensor *t, int64_t r, int64_t b0, int64_t n, uint8_t *out) {
    const size_t qb = quant_bytes(t->type), bb = 2 + qb;
    const uint8_t *g = (const uint8_t *)t->data + (size_t)(r / R) * R * t->row_bytes;
    const size_t lane = (size_t)(r % R);
    for (int64_t b = 0; b < n; b++) {
        const uint8_t *blk = g + (size_t)(b0 + b) * R * bb;
        uint8_t *o = out + (size_t)b * bb;
        memcpy(o, blk + 2 * lane, 2);
        for (size_t c = 0; c < qb / 4; c++) memcpy(o + 2 + 4 * c, blk + 2 * R + c * 64 + lane * 4, 4);
    }
}

void cpulm_repack_get_row(const cpulm_kernels *k, const cpulm_tensor *t, int64_t r, float *out) {
    if (!t->packed) {
        k->to_float[t->type]((const uint8_t *)t->data + (size_t)r * t->row_bytes, out, t->ne[0]);
        return;
    }
    enum { CHUNK = 32 }; /* blocks per step: a small stack buffer, no allocation */
    uint8_t buf[CHUNK * (2 + 32)];
    const int64_t nb = t->ne[0] / 32;
    for (int64_t b0 = 0; b0 < nb; b0 += CHUNK) {
        const int64_t n = nb - b0 < CHUNK ? nb - b0 : CHUNK;
        unpack_blocks(t, r, b0, n, buf);
        k->to_float[t->type](buf, out + b0 * 32, n * 32);
    }
}

/* Repacks one tensor into a model-owned copy and releases the file pages it came from. */
static cpulm_status repack_one(cpulm_model *m, cpulm_tensor *t, cpulm_error *err) {
    const size_t bytes = (size_t)t->row_bytes * (size_t)t->ne[1];
    void **list = realloc(m->owned_packed, sizeof *list * (size_t)(m->n_owned_packed + 1));
    if (!list) return cpulm_errf(err, CPULM_ERR_NOMEM, "out of memory repacking weights");
    m->owned_packed = list;
    void *dst = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!dst) return cpulm_errf(err, CPULM_ERR_NOMEM, "out of memory repacking weights");
    list[m->n_owned_packed++] = dst;
    cpulm_repack_x16(t->type, t->data, dst, t->ne[0], t->ne[1]);
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
        cpulm_tensor *w[7] = {&ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->w_gate, &ly->w_up, &ly->w_down};
        for (int i = 0; i < 7; i++)
            if (cpulm_repack_supported(k, w[i]) && (s = repack_one(m, w[i], err)) != CPULM_OK)
                return s;
    }
    return CPULM_OK;
}
