/* fuzz_gguf.c: fuzz target for the GGUF reader and writer.
 *
 * Any input must parse to CPULM_OK or a clean error (never a crash, leak or over-read). For
 * accepted inputs it also checks invariants: every getter and iterator stays in bounds,
 * every tensor's data range lies inside the input, and the writer can rewrite the file
 * (copy every kv and tensor) into one that parses to the same kvs, tensors and bytes.
 * Built with libFuzzer (-fsanitize=fuzzer) or with fuzz_main.c as a corpus replayer.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "format/gguf.h"
#include "format/quant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink; /* keeps reads from being optimised away */

static void walk_array(const cpulm_gguf_arr *a, int depth) {
    CPULM_ASSERT(depth <= 8);
    if (a->type == CPULM_GGUF_STRING) {
        cpulm_gguf_str_iter it;
        cpulm_gguf_str_iter_init(&it, a);
        for (uint64_t i = 0; i < a->n; i++) {
            cpulm_str s = cpulm_gguf_str_iter_next(&it);
            if (s.len) sink += (uint8_t)s.ptr[s.len - 1];
        }
        CPULM_ASSERT(it.left == 0);
    } else if (a->type == CPULM_GGUF_ARRAY) {
        cpulm_gguf_arr_iter it;
        cpulm_gguf_arr_iter_init(&it, a);
        for (uint64_t i = 0; i < a->n; i++) {
            cpulm_gguf_arr sub = cpulm_gguf_arr_iter_next(&it);
            walk_array(&sub, depth + 1);
        }
        CPULM_ASSERT(it.left == 0);
    } else {
        CPULM_ASSERT(a->n_bytes == a->n * cpulm_gguf_type_size(a->type));
        for (uint64_t i = 0; i < a->n; i++)
            sink += (uint64_t)cpulm_gguf_arr_i64(a, i) + (cpulm_gguf_arr_f64(a, i) > 0);
    }
}

static void exercise_getters(const cpulm_gguf *g) {
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const cpulm_gguf_kv *kv = &g->kv[i];
        char key[256];
        if (kv->key.len >= sizeof key) continue;
        memcpy(key, kv->key.ptr, kv->key.len);
        key[kv->key.len] = 0;
        CPULM_ASSERT(cpulm_gguf_find(g, key) == kv); /* keys are unique and findable */
        int64_t iv;
        double fv;
        bool bv;
        cpulm_str sv;
        cpulm_gguf_arr av;
        cpulm_error e;
        cpulm_gguf_get_i64(g, key, &iv, &e);
        cpulm_gguf_get_f64(g, key, &fv, &e);
        cpulm_gguf_get_bool(g, key, &bv, &e);
        cpulm_gguf_get_str(g, key, &sv, &e);
        if (cpulm_gguf_get_arr(g, key, kv->type == CPULM_GGUF_ARRAY ? kv->v.arr.type : 0, &av,
                               &e) == CPULM_OK)
            walk_array(&av, 1);
    }
}

/* n_bytes recomputed in 128-bit arithmetic: a wrapped size would let readers run off the
 * end of the data. */
static void check_size(const cpulm_gguf_tensor *t) {
    const cpulm_dtype_traits *tr = cpulm_dtype_traits_get(t->type);
    CPULM_ASSERT(tr && t->ne[0] % tr->block == 0);
    unsigned __int128 bytes =
        (unsigned __int128)(uint64_t)(t->ne[0] / tr->block) * (uint64_t)tr->type_size;
    for (int d = 1; d < 4; d++) {
        CPULM_ASSERT(t->ne[d] >= 0 && (d < t->n_dims || t->ne[d] == 1));
        if (t->ne[d] == 0 || bytes == 0) {
            bytes = 0;
            continue;
        }
        CPULM_ASSERT(bytes <= (unsigned __int128)UINT64_MAX); /* no 128-bit overflow below */
        bytes *= (uint64_t)t->ne[d];
    }
    CPULM_ASSERT(bytes == t->n_bytes);
}

static void check_tensors(const cpulm_gguf *g) {
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const cpulm_gguf_tensor *t = &g->tensors[i];
        check_size(t);
        const uint8_t *d = t->data;
        CPULM_ASSERT(d >= g->base + g->data_offset && t->offset % g->alignment == 0);
        CPULM_ASSERT(t->n_bytes <= g->size && d - g->base <= (int64_t)(g->size - t->n_bytes));
        if (t->n_bytes) sink += d[0] + d[t->n_bytes - 1];
    }
}

/* The rewritten size: overlapping tensors, or a huge general.alignment times many small
 * tensors, can legitimately ask the writer for far more bytes than the input has. */
static bool rewrite_is_small(const cpulm_gguf *g) {
    uint64_t total = g->data_offset, limit = 4 * g->size + (1u << 20);
    for (uint64_t i = 0; i < g->n_tensors && total <= limit; i++) {
        uint64_t n = g->tensors[i].n_bytes, a = g->alignment;
        total += n > limit ? limit : (n + a - 1) / a * a;
    }
    return total <= limit;
}

/* Rewrites g with the writer and checks the result parses back to the same content. */
static void check_rewrite(const cpulm_gguf *g) {
    if (!rewrite_is_small(g)) return;
    cpulm_gguf_writer *w = cpulm_gguf_writer_new();
    CPULM_ASSERT(w != NULL);
    for (uint64_t i = 0; i < g->n_kv; i++)
        CPULM_ASSERT(cpulm_gguf_writer_copy_kv(w, &g->kv[i]) == 0);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const cpulm_gguf_tensor *t = &g->tensors[i];
        char name[64];
        memcpy(name, t->name.ptr, t->name.len); /* <= 63 bytes, checked by the reader */
        name[t->name.len] = 0;
        CPULM_ASSERT(cpulm_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data) ==
                     0);
    }
    uint8_t *buf = NULL;
    uint64_t n = 0;
    CPULM_ASSERT(cpulm_gguf_writer_to_buf(w, &buf, &n) == CPULM_OK);
    cpulm_gguf g2;
    cpulm_error e = {0};
    if (cpulm_gguf_parse(&g2, buf, n, &e) != CPULM_OK) cpulm_abort(__FILE__, __LINE__, "%s", e.msg);
    CPULM_ASSERT(g2.n_kv == g->n_kv && g2.n_tensors == g->n_tensors);
    for (uint64_t i = 0; i < g->n_kv; i++)
        CPULM_ASSERT(g2.kv[i].type == g->kv[i].type);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const cpulm_gguf_tensor *a = &g->tensors[i], *b = &g2.tensors[i];
        CPULM_ASSERT(a->type == b->type && a->n_bytes == b->n_bytes);
        CPULM_ASSERT(memcmp(a->ne, b->ne, sizeof a->ne) == 0);
        CPULM_ASSERT(a->n_bytes == 0 || memcmp(a->data, b->data, a->n_bytes) == 0);
    }
    cpulm_gguf_release(&g2);
    free(buf);
    cpulm_gguf_writer_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cpulm_gguf g;
    cpulm_error e = {0};
    cpulm_status st = cpulm_gguf_parse(&g, data, size, &e);
    if (st != CPULM_OK) {
        CPULM_ASSERT(st == CPULM_ERR_FORMAT || st == CPULM_ERR_UNSUPPORTED);
        CPULM_ASSERT(e.msg[0] != 0 && strchr(e.msg, '\n') == NULL);
        CPULM_ASSERT(g.kv == NULL && g.tensors == NULL);
        return 0;
    }
    exercise_getters(&g);
    check_tensors(&g);
    check_rewrite(&g);
    cpulm_gguf_release(&g);
    return 0;
}
