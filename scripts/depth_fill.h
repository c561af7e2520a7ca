/* depth_fill.h: what scripts/attn_bench.c and scripts/gen_bench.c share (both are built by
 * hand, not by CMake): a clock, a sort order, and the cache of sequence 0 filled at depth
 * through the state API. Static functions: each script is one translation unit. */
#ifndef CPULM_SCRIPTS_DEPTH_FILL_H
#define CPULM_SCRIPTS_DEPTH_FILL_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/context.h"
#include "cpulm.h"
#include "format/quant.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Positions [0, depth) of seq 0: elements of magnitude [0.125, 1), random signs (halves
 * for an F16 cache, rows quantized by the reference quantizer for Q8_0 / Q4_0). */
static int fill_cache(cpulm_ctx *c, int32_t depth) {
    uint64_t bytes = cpulm_ctx_seq_state_bytes(c, depth), s = 88172645463325252ull;
    uint16_t *blob = malloc(bytes);
    if (!blob) return 0;
    for (uint64_t i = 0; i < bytes / 2; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        blob[i] = (uint16_t)((0x3000 + s % 0x0c00) | ((s >> 20 & 1) << 15));
    }
    const cpulm_dtype t = c->kv.dtype;
    if (t == CPULM_DTYPE_Q8_0 || t == CPULM_DTYPE_Q4_0) {
        const int64_t d = c->kv.kv_dim;
        float *row = malloc(sizeof(float) * (size_t)d);
        if (!row) return 0;
        for (uint64_t r = 0; r < bytes / c->kv.row_bytes; r++) {
            for (int64_t e = 0; e < d; e++) {
                s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                row[e] = (float)(0.125 + 0.875 * (double)(s % 1000000) / 1e6) *
                         ((s >> 40 & 1) ? -1.0f : 1.0f);
            }
            uint8_t *dst = (uint8_t *)blob + r * c->kv.row_bytes;
            if (t == CPULM_DTYPE_Q8_0)
                cpulm_quantize_row_q8_0_ref(row, dst, d);
            else
                cpulm_quantize_row_q4_0_ref(row, dst, d);
        }
        free(row);
    }
    int ok = cpulm_ctx_seq_state_set(c, 0, 0, depth, blob) == CPULM_OK;
    free(blob);
    return ok;
}

#endif
