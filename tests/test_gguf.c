/* test_gguf.c: the GGUF reader against the real files in /work/shared (facts from their
 * READMEs and from the llama2.c original of stories260K), truncation at guard pages,
 * hand-built corrupt files, nested arrays, getters, and writer round trips. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/mmap.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "test.h"

/* ---- a byte builder for hand-made files ---- */

typedef struct bb {
    uint8_t *p;
    size_t n, cap;
} bb;

static void bb_raw(bb *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void bb_le(bb *b, uint64_t v, int n) {
    for (int i = 0; i < n; i++) {
        uint8_t c = (uint8_t)(v >> (8 * i));
        bb_raw(b, &c, 1);
    }
}

static void bb_u32(bb *b, uint32_t v) {
    bb_le(b, v, 4);
}

static void bb_u64(bb *b, uint64_t v) {
    bb_le(b, v, 8);
}

static void bb_str(bb *b, const char *s) {
    bb_u64(b, strlen(s));
    bb_raw(b, s, strlen(s));
}

static void bb_pad(bb *b, size_t a) {
    while (b->n % a)
        bb_le(b, 0, 1);
}

static void hdr(bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    bb_raw(b, "GGUF", 4);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}

static void kv_u32(bb *b, const char *key, uint32_t v) {
    bb_str(b, key);
    bb_u32(b, CPULM_GGUF_U32);
    bb_u32(b, v);
}

static void tinfo(bb *b, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type,
                  uint64_t off) {
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        bb_u64(b, (uint64_t)ne[d]);
    bb_u32(b, type);
    bb_u64(b, off);
}

/* ---- guard-page placement: the buffer ends exactly where a PROT_NONE page starts ---- */

typedef struct guard {
    uint8_t *map;
    size_t usable, total;
} guard;

static int guard_init(guard *g, size_t max_len) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    g->usable = (max_len + pg - 1) / pg * pg;
    if (g->usable == 0) g->usable = pg;
    g->total = g->usable + pg;
    void *m = mmap(NULL, g->total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 0;
    g->map = m;
    return mprotect(g->map + g->usable, pg, PROT_NONE) == 0;
}

static const uint8_t *guard_place(guard *g, const void *src, size_t len) {
    uint8_t *dst = g->map + g->usable - len;
    memcpy(dst, src, len);
    return dst;
}

static void guard_release(guard *g) {
    munmap(g->map, g->total);
}

/* Parses buf[0..len) placed against a guard page; checks the status and that the message
 * contains want (if given). */
static void expect_parse(test_ctx *t, int line, const void *buf, size_t len, cpulm_status want,
                         const char *want_msg) {
    guard gd;
    if (!guard_init(&gd, len)) {
        CHECK(t, !"guard mmap failed");
        return;
    }
    cpulm_gguf g;
    cpulm_error e = {0};
    cpulm_status st = cpulm_gguf_parse(&g, guard_place(&gd, buf, len), len, &e);
    if (st != want || (want_msg && !strstr(e.msg, want_msg))) {
        fprintf(stderr, "  test_gguf.c:%d: status %d (want %d), msg \"%s\" (want \"%s\")\n", line,
                st, want, e.msg, want_msg ? want_msg : "");
        t->n_fail++;
    }
    if (st == CPULM_OK) cpulm_gguf_release(&g);
    guard_release(&gd);
}

#define EXPECT_OK(b)             expect_parse(t, __LINE__, (b)->p, (b)->n, CPULM_OK, NULL)
#define EXPECT_ERR(b, code, msg) expect_parse(t, __LINE__, (b)->p, (b)->n, code, msg)

/* ---- the real files ---- */

static const cpulm_gguf_tensor *tensor(const cpulm_gguf *g, const char *name) {
    int64_t i = cpulm_gguf_find_tensor(g, name);
    return i < 0 ? NULL : &g->tensors[i];
}

static int64_t get_i(const cpulm_gguf *g, const char *key) {
    int64_t v = -12345;
    if (cpulm_gguf_get_i64(g, key, &v, NULL) != CPULM_OK) return -12345;
    return v;
}

static cpulm_str get_s(const cpulm_gguf *g, const char *key) {
    cpulm_str s = {"", 0};
    cpulm_gguf_get_str(g, key, &s, NULL);
    return s;
}

TEST(gguf_stories260k_facts) {
    const char *path = test_shared_path("models/stories260K.gguf");
    if (!path) SKIP(t, "models/stories260K.gguf not found");
    cpulm_mmap m;
    cpulm_error e = {0};
    REQUIRE(t, cpulm_mmap_open(&m, path, &e) == CPULM_OK);
    cpulm_gguf g;
    cpulm_status st = cpulm_gguf_parse(&g, m.data, m.size, &e);
    if (st) fprintf(stderr, "  %s\n", e.msg);
    REQUIRE(t, st == CPULM_OK);
    CHECK_EQ_INT(t, g.version, 3);
    CHECK_EQ_INT(t, g.n_tensors, 48);
    CHECK_EQ_INT(t, g.n_kv, 19);
    CHECK_EQ_INT(t, g.alignment, 32);
    CHECK_EQ_INT(t, g.data_offset, 14176);
    CHECK_EQ_INT(t, get_i(&g, "llama.embedding_length"), 64);
    CHECK_EQ_INT(t, get_i(&g, "llama.feed_forward_length"), 172);
    CHECK_EQ_INT(t, get_i(&g, "llama.block_count"), 5);
    CHECK_EQ_INT(t, get_i(&g, "tokenizer.ggml.padding_token_id"), 4294967295);
    CHECK(t, cpulm_str_eq(get_s(&g, "general.architecture"), "llama"));
    double eps = 0;
    CHECK(t, cpulm_gguf_get_f64(&g, "llama.attention.layer_norm_rms_epsilon", &eps, NULL) == 0);
    CHECK(t, eps == (double)1e-5f);
    CHECK(t, cpulm_gguf_find(&g, "llama.rope.freq_base") == NULL);

    const cpulm_gguf_tensor *k = tensor(&g, "blk.0.attn_k.weight");
    REQUIRE(t, k != NULL);
    CHECK_EQ_INT(t, k->n_dims, 2);
    CHECK_EQ_INT(t, k->ne[0], 64);
    CHECK_EQ_INT(t, k->ne[1], 32);
    CHECK_EQ_INT(t, k->ne[2], 1);
    CHECK_EQ_INT(t, k->type, CPULM_DTYPE_F32);
    CHECK_EQ_INT(t, k->offset, 278784);
    CHECK_EQ_INT(t, k->n_bytes, 64 * 32 * 4);
    const cpulm_gguf_tensor *on = tensor(&g, "output_norm.weight");
    REQUIRE(t, on != NULL);
    CHECK_EQ_INT(t, on->n_dims, 1);
    CHECK_EQ_INT(t, on->offset, 131072);
    CHECK(t, tensor(&g, "blk.5.attn_k.weight") == NULL);

    cpulm_gguf_arr tok, typ;
    REQUIRE(t, cpulm_gguf_get_arr(&g, "tokenizer.ggml.tokens", CPULM_GGUF_STRING, &tok, &e) == 0);
    CHECK_EQ_INT(t, tok.n, 512);
    cpulm_gguf_str_iter it;
    cpulm_gguf_str_iter_init(&it, &tok);
    CHECK(t, cpulm_str_eq(cpulm_gguf_str_iter_next(&it), "<unk>"));
    CHECK(t, cpulm_str_eq(cpulm_gguf_str_iter_next(&it), "<s>"));
    CHECK(t, cpulm_str_eq(cpulm_gguf_str_iter_next(&it), "</s>"));
    CHECK(t, cpulm_str_eq(cpulm_gguf_str_iter_next(&it), "<0x00>"));
    REQUIRE(t, cpulm_gguf_get_arr(&g, "tokenizer.ggml.token_type", CPULM_GGUF_I32, &typ, &e) == 0);
    CHECK_EQ_INT(t, typ.n, 512);
    CHECK_EQ_INT(t, cpulm_gguf_arr_i64(&typ, 0), 2);
    CHECK_EQ_INT(t, cpulm_gguf_arr_i64(&typ, 1), 3);
    CHECK_EQ_INT(t, cpulm_gguf_arr_i64(&typ, 3), 6);

    /* The weights are bit-identical to llama2.c's .bin (7 x i32 header, then token_embd). */
    const char *bin_path = test_shared_path("models/llama2c/stories260K.bin");
    size_t bin_n = 0;
    char *bin = bin_path ? test_read_file(bin_path, &bin_n) : NULL;
    const cpulm_gguf_tensor *emb = tensor(&g, "token_embd.weight");
    if (bin && emb && bin_n >= 28 + emb->n_bytes) {
        CHECK_EQ_INT(t, emb->n_bytes, 64 * 512 * 4);
        CHECK(t, memcmp(emb->data, bin + 28, emb->n_bytes) == 0);
    } else {
        CHECK(t, !"llama2c/stories260K.bin unreadable or token_embd missing");
    }
    free(bin);
    cpulm_gguf_release(&g);
    cpulm_mmap_close(&m);
}

TEST(gguf_tiny_random_f16_facts) {
    const char *path = test_shared_path("models/llama-2-tiny-random.gguf");
    if (!path) SKIP(t, "models/llama-2-tiny-random.gguf not found");
    cpulm_mmap m;
    cpulm_gguf g;
    REQUIRE(t, cpulm_mmap_open(&m, path, NULL) == CPULM_OK);
    REQUIRE(t, cpulm_gguf_parse(&g, m.data, m.size, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, g.n_tensors, 12);
    CHECK_EQ_INT(t, g.n_kv, 18);
    CHECK_EQ_INT(t, g.data_offset, 724416);
    CHECK_EQ_INT(t, get_i(&g, "general.file_type"), 1);
    const cpulm_gguf_tensor *out = tensor(&g, "output.weight");
    REQUIRE(t, out != NULL);
    CHECK_EQ_INT(t, out->type, CPULM_DTYPE_F16);
    CHECK_EQ_INT(t, out->ne[0], 8);
    CHECK_EQ_INT(t, out->ne[1], 32000);
    CHECK_EQ_INT(t, out->offset, 514144);
    CHECK_EQ_INT(t, out->n_bytes, 8 * 32000 * 2);
    CHECK(t, (const uint8_t *)out->data + out->n_bytes == m.data + m.size);
    const cpulm_gguf_tensor *nrm = tensor(&g, "blk.0.ffn_norm.weight");
    REQUIRE(t, nrm != NULL);
    CHECK_EQ_INT(t, nrm->type, CPULM_DTYPE_F32);
    cpulm_gguf_arr tok;
    CHECK(t, cpulm_gguf_get_arr(&g, "tokenizer.ggml.tokens", CPULM_GGUF_STRING, &tok, NULL) == 0);
    CHECK_EQ_INT(t, tok.n, 32000);
    cpulm_gguf_release(&g);
    cpulm_mmap_close(&m);
}

/* Parses every *.gguf in dir; checks what holds for every file llama.cpp writes: data is
 * packed in tensor order, each tensor at the next aligned offset, and the file ends there. */
static int check_dir(test_ctx *t, const char *rel, int *n_files) {
    const char *dir = test_shared_path(rel);
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) return 0;
    char dirbuf[4096];
    snprintf(dirbuf, sizeof dirbuf, "%s", dir);
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n < 5 || strcmp(de->d_name + n - 5, ".gguf") != 0) continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dirbuf, de->d_name);
        cpulm_mmap m;
        cpulm_gguf g;
        cpulm_error e = {0};
        if (cpulm_mmap_open(&m, path, &e) != CPULM_OK || cpulm_gguf_parse(&g, m.data, m.size, &e)) {
            fprintf(stderr, "  %s: %s\n", path, e.msg);
            t->n_fail++;
            continue;
        }
        (*n_files)++;
        uint64_t expect = 0;
        for (uint64_t i = 0; i < g.n_tensors; i++) {
            CHECK_EQ_INT(t, g.tensors[i].offset, expect);
            expect += (g.tensors[i].n_bytes + g.alignment - 1) / g.alignment * g.alignment;
        }
        if (g.n_tensors) CHECK_EQ_INT(t, g.data_offset + expect, m.size);
        if (!g.n_tensors) CHECK(t, g.data_offset <= m.size);
        cpulm_gguf_release(&g);
        cpulm_mmap_close(&m);
    }
    closedir(d);
    return 1;
}

TEST(gguf_all_shared_files_parse) {
    int n_files = 0, n_dirs = 0;
    n_dirs += check_dir(t, "models", &n_files);
    n_dirs += check_dir(t, "testdata/models", &n_files);
    n_dirs += check_dir(t, "testdata/tokenizer", &n_files);
    if (!n_dirs) SKIP(t, "shared data not found");
    CHECK(t, n_files >= 27); /* 2 + 21 + 4 at the time of writing */
}

static int count_type(const cpulm_gguf *g, uint32_t type) {
    int n = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        n += g->tensors[i].type == type;
    return n;
}

TEST(gguf_quantized_files_types) {
    static const struct {
        const char *file;
        uint32_t type;
    } cases[] = {
        {"testdata/models/tiny-llama-q4_0.gguf", CPULM_DTYPE_Q4_0},
        {"testdata/models/tiny-llama-q8_0.gguf", CPULM_DTYPE_Q8_0},
        {"testdata/models/tiny-llama-q6_k.gguf", CPULM_DTYPE_Q6_K},
        {"testdata/models/tiny-llama-q4_k_m.gguf", CPULM_DTYPE_Q4_K},
        {"testdata/models/tiny-llama-bf16.gguf", CPULM_DTYPE_BF16},
        {"testdata/models/tiny-qwen2-f16.gguf", CPULM_DTYPE_F16},
    };
    int found = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = test_shared_path(cases[i].file);
        if (!path) continue;
        found++;
        cpulm_mmap m;
        cpulm_gguf g;
        REQUIRE(t, cpulm_mmap_open(&m, path, NULL) == CPULM_OK);
        REQUIRE(t, cpulm_gguf_parse(&g, m.data, m.size, NULL) == CPULM_OK);
        if (count_type(&g, cases[i].type) == 0) {
            fprintf(stderr, "  %s: no %s tensor\n", cases[i].file, cpulm_dtype_name(cases[i].type));
            t->n_fail++;
        }
        /* 2-D weights have n_bytes = rows * row bytes of their type */
        const cpulm_gguf_tensor *q = tensor(&g, "blk.0.attn_q.weight");
        CHECK(t, q && q->n_bytes == (uint64_t)q->ne[1] * cpulm_dtype_row_bytes(q->type, q->ne[0]));
        cpulm_gguf_release(&g);
        cpulm_mmap_close(&m);
    }
    if (!found) SKIP(t, "testdata/models not found");
}

TEST(gguf_vocab_only_files) {
    const char *path = test_shared_path("testdata/tokenizer/ggml-vocab-llama-spm.gguf");
    if (!path) SKIP(t, "tokenizer files not found");
    cpulm_mmap m;
    cpulm_gguf g;
    REQUIRE(t, cpulm_mmap_open(&m, path, NULL) == CPULM_OK);
    REQUIRE(t, cpulm_gguf_parse(&g, m.data, m.size, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, g.n_tensors, 0);
    CHECK_EQ_INT(t, g.n_kv, 22);
    CHECK_EQ_INT(t, m.size, 723869); /* not a multiple of 32: no padding after the kvs */
    CHECK_EQ_INT(t, g.data_offset, m.size);
    cpulm_gguf_arr tok, sc;
    REQUIRE(t, cpulm_gguf_get_arr(&g, "tokenizer.ggml.tokens", CPULM_GGUF_STRING, &tok, NULL) == 0);
    CHECK_EQ_INT(t, tok.n, 32000);
    REQUIRE(t, cpulm_gguf_get_arr(&g, "tokenizer.ggml.scores", CPULM_GGUF_F32, &sc, NULL) == 0);
    CHECK_EQ_INT(t, sc.n, 32000);
    bool add_bos = false;
    CHECK(t, cpulm_gguf_get_bool(&g, "tokenizer.ggml.add_bos_token", &add_bos, NULL) == 0);
    CHECK(t, add_bos);
    /* walking all strings ends exactly at the end of the array's bytes */
    cpulm_gguf_str_iter it;
    cpulm_gguf_str_iter_init(&it, &tok);
    for (uint64_t i = 0; i < tok.n; i++)
        cpulm_gguf_str_iter_next(&it);
    CHECK_EQ_INT(t, it.left, 0);
    cpulm_gguf_release(&g);
    cpulm_mmap_close(&m);

    path = test_shared_path("testdata/tokenizer/ggml-vocab-deepseek-llm.gguf");
    if (!path) return;
    REQUIRE(t, cpulm_mmap_open(&m, path, NULL) == CPULM_OK);
    REQUIRE(t, cpulm_gguf_parse(&g, m.data, m.size, NULL) == CPULM_OK);
    cpulm_gguf_arr merges;
    REQUIRE(t,
            cpulm_gguf_get_arr(&g, "tokenizer.ggml.merges", CPULM_GGUF_STRING, &merges, NULL) == 0);
    CHECK_EQ_INT(t, merges.n, 99757);
    cpulm_gguf_str_iter_init(&it, &merges);
    CHECK(t, cpulm_str_eq(cpulm_gguf_str_iter_next(&it), "\xc4\xa0 \xc4\xa0")); /* "Ġ Ġ" */
    CHECK(t, cpulm_str_eq(cpulm_gguf_str_iter_next(&it), "\xc4\xa0 t"));
    CHECK_EQ_INT(t, get_i(&g, "tokenizer.ggml.bos_token_id"), 100000);
    CHECK(t, cpulm_str_eq(get_s(&g, "tokenizer.ggml.pre"), "deepseek-llm"));
    cpulm_gguf_release(&g);
    cpulm_mmap_close(&m);
}

/* ---- truncation at guard pages ---- */

/* Every prefix of buf in [lo, hi) stepping by step must fail with CPULM_ERR_FORMAT. */
static void truncations(test_ctx *t, guard *gd, const uint8_t *buf, size_t lo, size_t hi,
                        size_t step) {
    for (size_t len = lo; len < hi; len += step) {
        cpulm_gguf g;
        cpulm_error e = {0};
        cpulm_status st = cpulm_gguf_parse(&g, guard_place(gd, buf, len), len, &e);
        if (st != CPULM_ERR_FORMAT || !e.msg[0]) {
            fprintf(stderr, "  prefix of %zu bytes: status %d, \"%s\"\n", len, st, e.msg);
            t->n_fail++;
            if (st == CPULM_OK) cpulm_gguf_release(&g);
            return;
        }
    }
}

TEST(gguf_truncated_stories260k_at_guard_page) {
    const char *path = test_shared_path("models/stories260K.gguf");
    if (!path) SKIP(t, "models/stories260K.gguf not found");
    size_t n = 0;
    uint8_t *buf = (uint8_t *)test_read_file(path, &n);
    REQUIRE(t, buf != NULL && n == 1185376);
    guard gd;
    REQUIRE(t, guard_init(&gd, n));
    const size_t data_offset = 14176;
    truncations(t, &gd, buf, 0, data_offset + 64, 1); /* header, kvs, infos, padding: every byte */
    truncations(t, &gd, buf, data_offset + 64, n, 4093); /* then sampled through the data */
    truncations(t, &gd, buf, n - 1, n, 1);
    cpulm_gguf g;
    cpulm_error e = {0};
    CHECK(t, cpulm_gguf_parse(&g, guard_place(&gd, buf, n), n, &e) == CPULM_OK);
    cpulm_gguf_release(&g);
    /* a message names what was being read and where */
    CHECK(t, cpulm_gguf_parse(&g, guard_place(&gd, buf, 5000), 5000, &e) == CPULM_ERR_FORMAT);
    CHECK(t, strstr(e.msg, "tokenizer.ggml.tokens") != NULL);
    CHECK(t, cpulm_gguf_parse(&g, guard_place(&gd, buf, n - 5), n - 5, &e) == CPULM_ERR_FORMAT);
    CHECK(t, strstr(e.msg, "blk.4.ffn_norm.weight") || strstr(e.msg, "output"));
    guard_release(&gd);
    free(buf);
}

TEST(gguf_truncated_vocab_at_guard_page) {
    const char *path = test_shared_path("testdata/tokenizer/ggml-vocab-phi-3.gguf");
    if (!path) SKIP(t, "tokenizer files not found");
    size_t n = 0;
    uint8_t *buf = (uint8_t *)test_read_file(path, &n);
    REQUIRE(t, buf != NULL);
    guard gd;
    REQUIRE(t, guard_init(&gd, n));
    truncations(t, &gd, buf, 0, n, 997);
    truncations(t, &gd, buf, n - 40, n, 1); /* the last string of the last key */
    expect_parse(t, __LINE__, buf, n, CPULM_OK, NULL);
    guard_release(&gd);
    free(buf);
}

/* ---- hand-made corrupt files ---- */

TEST(gguf_rejects_bad_magic_and_version) {
    bb b = {0};
    hdr(&b, 3, 0, 0);
    EXPECT_OK(&b);
    b.p[2] = 'X';
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "bad magic");
    b.p[2] = 'U';
    b.p[4] = 2;
    EXPECT_OK(&b);
    b.p[4] = 1;
    EXPECT_ERR(&b, CPULM_ERR_UNSUPPORTED, "version 1 is not supported");
    b.p[4] = 4;
    EXPECT_ERR(&b, CPULM_ERR_UNSUPPORTED, "version 4");
    b.p[4] = 0;
    b.p[7] = 3;
    EXPECT_ERR(&b, CPULM_ERR_UNSUPPORTED, "big-endian");
    free(b.p);
    expect_parse(t, __LINE__, "GGU", 3, CPULM_ERR_FORMAT,
                 "truncated at byte 0 while reading header");
    cpulm_gguf g;
    CHECK(t, cpulm_gguf_parse(&g, NULL, 0, NULL) == CPULM_ERR_FORMAT);
}

TEST(gguf_rejects_hostile_counts) {
    bb b = {0};
    hdr(&b, 3, 0, UINT64_MAX); /* would be a giant allocation if trusted */
    kv_u32(&b, "a", 1);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "cannot fit");
    free(b.p);
    b = (bb){0};
    hdr(&b, 3, UINT64_MAX / 2, 1);
    kv_u32(&b, "a", 1);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "cannot fit");
    free(b.p);
    /* each count fits alone, but not both together */
    b = (bb){0};
    hdr(&b, 3, 1, 3);
    for (int i = 0; i < 40; i++)
        bb_le(&b, 0, 1); /* 40 bytes: 3 kvs (39) or 1 info (32) */
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "3 keys and 1 tensors cannot fit in the 40 bytes");
    free(b.p);
    /* array counts: fixed-size, string and nested elements */
    static const uint32_t elem[] = {CPULM_GGUF_U32, CPULM_GGUF_STRING, CPULM_GGUF_ARRAY};
    for (int i = 0; i < 3; i++) {
        b = (bb){0};
        hdr(&b, 3, 0, 1);
        bb_str(&b, "arr");
        bb_u32(&b, CPULM_GGUF_ARRAY);
        bb_u32(&b, elem[i]);
        bb_u64(&b, UINT64_MAX / 2);
        bb_u64(&b, 0);
        EXPECT_ERR(&b, CPULM_ERR_FORMAT, "value of key 'arr': array of 9223372036854775807");
        free(b.p);
    }
}

TEST(gguf_rejects_bad_strings) {
    bb b = {0};
    hdr(&b, 3, 0, 1);
    bb_u64(&b, UINT64_MAX); /* key length */
    bb_raw(&b, "abcdefgh", 8);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "key #0: string length 18446744073709551615 at byte 24");
    free(b.p);
    b = (bb){0};
    hdr(&b, 3, 0, 1);
    bb_str(&b, "general.name");
    bb_u32(&b, CPULM_GGUF_STRING);
    bb_u64(&b, 1000);
    bb_raw(&b, "short", 5);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "value of key 'general.name': string length 1000");
    free(b.p);
    b = (bb){0};
    hdr(&b, 3, 0, 1);
    bb_u64(&b, 3);
    bb_raw(&b, "a\0b", 3);
    bb_u32(&b, CPULM_GGUF_U8);
    bb_le(&b, 0, 1);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "NUL byte");
    free(b.p);
    /* a string array whose third element runs past the end */
    b = (bb){0};
    hdr(&b, 3, 0, 1);
    bb_str(&b, "tokenizer.ggml.tokens");
    bb_u32(&b, CPULM_GGUF_ARRAY);
    bb_u32(&b, CPULM_GGUF_STRING);
    bb_u64(&b, 3);
    bb_str(&b, "a");
    bb_str(&b, "b");
    bb_u64(&b, 2);
    bb_raw(&b, "c", 1);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "value of key 'tokenizer.ggml.tokens': string length 2");
    free(b.p);
    /* hostile names are printed safely */
    b = (bb){0};
    hdr(&b, 3, 0, 1);
    bb_str(&b, "bad\nkey");
    bb_u32(&b, 77);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "type of key 'bad?key': invalid value type 77");
    free(b.p);
}

TEST(gguf_rejects_bad_value_types) {
    bb b = {0};
    hdr(&b, 3, 0, 1);
    bb_str(&b, "x");
    bb_u32(&b, CPULM_GGUF_TYPE_COUNT);
    bb_u32(&b, 0);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "key 'x': invalid value type 13 at byte 33");
    free(b.p);
    b = (bb){0};
    hdr(&b, 3, 0, 1);
    bb_str(&b, "x");
    bb_u32(&b, CPULM_GGUF_ARRAY);
    bb_u32(&b, 0xdeadbeef);
    bb_u64(&b, 0);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "value of key 'x': invalid array element type 3735928559");
    free(b.p);
    b = (bb){0};
    hdr(&b, 3, 0, 1);
    bb_str(&b, "x");
    bb_u32(&b, CPULM_GGUF_U64);
    bb_u32(&b, 0); /* only 4 of 8 bytes */
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "truncated at byte 37 while reading value of key 'x'");
    free(b.p);
}

TEST(gguf_rejects_duplicate_keys) {
    bb b = {0};
    hdr(&b, 3, 0, 3);
    kv_u32(&b, "llama.block_count", 1);
    kv_u32(&b, "llama.embedding_length", 2);
    kv_u32(&b, "llama.block_count", 3);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "key 'llama.block_count': duplicate key (entry #2)");
    free(b.p);
    /* the first entry that repeats an earlier one is reported */
    b = (bb){0};
    hdr(&b, 3, 0, 5);
    kv_u32(&b, "a", 0);
    kv_u32(&b, "b", 1);
    kv_u32(&b, "c", 2);
    kv_u32(&b, "b", 3);
    kv_u32(&b, "a", 4);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "key 'b': duplicate key (entry #3)");
    free(b.p);
    /* many distinct keys with colliding prefixes are fine */
    b = (bb){0};
    hdr(&b, 3, 0, 2000);
    for (int i = 0; i < 2000; i++) {
        char k[32];
        snprintf(k, sizeof k, "k.%d", i);
        kv_u32(&b, k, (uint32_t)i);
    }
    EXPECT_OK(&b);
    free(b.p);
}

/* A file with one kv general.alignment of the given type/value and one F32 [8] tensor. */
static void aligned_file(bb *b, uint32_t type, uint64_t align, uint64_t off) {
    *b = (bb){0};
    hdr(b, 3, 1, 1);
    bb_str(b, "general.alignment");
    bb_u32(b, type);
    bb_le(b, align, (int)cpulm_gguf_type_size((cpulm_gguf_type)type));
    int64_t ne[1] = {8};
    tinfo(b, "w", 1, ne, CPULM_DTYPE_F32, off);
    bb_pad(b, align && align < 4096 ? (size_t)align : 32);
    for (uint64_t i = 0; i < off + 32; i++)
        bb_le(b, i, 1);
}

TEST(gguf_alignment_rules) {
    bb b;
    aligned_file(&b, CPULM_GGUF_U32, 64, 0);
    guard gd;
    REQUIRE(t, guard_init(&gd, b.n));
    cpulm_gguf g;
    REQUIRE(t, cpulm_gguf_parse(&g, guard_place(&gd, b.p, b.n), b.n, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, g.alignment, 64);
    CHECK_EQ_INT(t, g.data_offset % 64, 0);
    CHECK_EQ_INT(t, g.tensors[0].n_bytes, 32);
    cpulm_gguf_release(&g);
    guard_release(&gd);
    free(b.p);
    aligned_file(&b, CPULM_GGUF_U32, 64, 64);
    EXPECT_OK(&b);
    free(b.p);
    aligned_file(&b, CPULM_GGUF_U32, 64, 32);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT,
               "tensor 'w': data offset 32 is not a multiple of the alignment 64");
    free(b.p);
    aligned_file(&b, CPULM_GGUF_U32, 48, 0);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "key 'general.alignment': 48 is not a power of two");
    free(b.p);
    aligned_file(&b, CPULM_GGUF_U32, 0, 0);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "0 is not a power of two");
    free(b.p);
    aligned_file(&b, CPULM_GGUF_U64, 32, 0);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "key 'general.alignment': must be a u32, found u64");
    free(b.p);
    aligned_file(&b, CPULM_GGUF_U32, 1u << 31, 0); /* valid, but the data would start past EOF */
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "data section would start at byte 2147483648");
    free(b.p);
    /* no tensors: the file may end before the aligned data offset */
    b = (bb){0};
    hdr(&b, 3, 0, 1);
    kv_u32(&b, "a", 1);
    EXPECT_OK(&b);
    free(b.p);
}

/* A file with a single tensor info (name "t", type, shape) and enough zeroed data. */
static void tensor_file(bb *b, uint32_t n_dims, const int64_t *ne, uint32_t type, uint64_t off,
                        size_t data_bytes) {
    *b = (bb){0};
    hdr(b, 3, 1, 0);
    tinfo(b, "t", n_dims, ne, type, off);
    bb_pad(b, 32);
    for (size_t i = 0; i < data_bytes; i++)
        bb_le(b, 0, 1);
}

TEST(gguf_rejects_bad_tensor_infos) {
    bb b;
    int64_t ne[5] = {64, 2, 1, 1, 1};
    tensor_file(&b, 2, ne, CPULM_DTYPE_Q4_0, 0, 72);
    EXPECT_OK(&b);
    free(b.p);
    tensor_file(&b, 2, ne, CPULM_DTYPE_Q4_0, 0, 71);
    EXPECT_ERR(
        &b, CPULM_ERR_FORMAT,
        "tensor 't': 72 bytes of data at file byte 96 run past the end of the file (167 bytes");
    free(b.p);
    tensor_file(&b, 0, ne, CPULM_DTYPE_F32, 0, 0);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "tensor 't': n_dims 0 is not in 1..4");
    free(b.p);
    tensor_file(&b, 5, ne, CPULM_DTYPE_F32, 0, 4096);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "n_dims 5");
    free(b.p);
    tensor_file(&b, 2, ne, 99, 0, 4096);
    EXPECT_ERR(&b, CPULM_ERR_UNSUPPORTED, "tensor 't': unknown type 99");
    free(b.p);
    tensor_file(&b, 2, ne, 4, 0, 4096); /* Q4_2, removed from ggml */
    EXPECT_ERR(&b, CPULM_ERR_UNSUPPORTED, "unknown type 4");
    free(b.p);
    int64_t odd[2] = {48, 2};
    tensor_file(&b, 2, odd, CPULM_DTYPE_Q4_K, 0, 4096);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "ne[0] = 48 is not a multiple of the Q4_K block size 256");
    free(b.p);
    int64_t neg[2] = {4, -1};
    tensor_file(&b, 2, neg, CPULM_DTYPE_F32, 0, 4096);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "ne[1] = -1 is negative");
    free(b.p);
    int64_t huge[3] = {1 << 20, 1 << 20, 1 << 24};
    tensor_file(&b, 3, huge, CPULM_DTYPE_F32, 0, 64);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "shape overflows");
    free(b.p);
    int64_t wide[1] = {(int64_t)1 << 62}; /* 2^64 bytes: must not wrap to 0 */
    tensor_file(&b, 1, wide, CPULM_DTYPE_F32, 0, 64);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "tensor 't': shape overflows: ne[0] = 4611686018427387904");
    free(b.p);
    int64_t wide2[2] = {(int64_t)1 << 40, (int64_t)1 << 22}; /* 2^62 elements, 2^64 bytes */
    tensor_file(&b, 2, wide2, CPULM_DTYPE_F32, 0, 64);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "shape overflows: ne[1]");
    free(b.p);
    int64_t zero[2] = {0, 7}; /* an empty tensor is valid */
    tensor_file(&b, 2, zero, CPULM_DTYPE_F32, 0, 0);
    EXPECT_OK(&b);
    free(b.p);
    char long_name[70];
    memset(long_name, 'n', 64);
    long_name[64] = 0;
    b = (bb){0};
    hdr(&b, 3, 1, 0);
    tinfo(&b, long_name, 1, ne, CPULM_DTYPE_F32, 0);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "name is 64 bytes long (the limit is 63)");
    free(b.p);
}

TEST(gguf_rejects_bad_tensor_offsets) {
    bb b;
    int64_t ne[1] = {8};
    tensor_file(&b, 1, ne, CPULM_DTYPE_F32, UINT64_MAX - 31, 64); /* offset + size overflows */
    EXPECT_ERR(&b, CPULM_ERR_FORMAT,
               "tensor 't': data offset 18446744073709551584 lies past the end");
    free(b.p);
    tensor_file(&b, 1, ne, CPULM_DTYPE_F32, 32, 63); /* ends one byte past EOF */
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "run past the end of the file");
    free(b.p);
    tensor_file(&b, 1, ne, CPULM_DTYPE_F32, 32, 64);
    EXPECT_OK(&b);
    free(b.p);
    tensor_file(&b, 1, ne, CPULM_DTYPE_F32, 7, 64);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "data offset 7 is not a multiple of the alignment 32");
    free(b.p);
    /* duplicate tensor names */
    b = (bb){0};
    hdr(&b, 3, 2, 0);
    tinfo(&b, "blk.0.w", 1, ne, CPULM_DTYPE_F32, 0);
    tinfo(&b, "blk.0.w", 1, ne, CPULM_DTYPE_F32, 32);
    bb_pad(&b, 32);
    for (int i = 0; i < 64; i++)
        bb_le(&b, 0, 1);
    EXPECT_ERR(&b, CPULM_ERR_FORMAT, "tensor 'blk.0.w': duplicate tensor name (entry #1)");
    free(b.p);
}

/* ---- nested arrays ---- */

/* A kv value that is an array nested depth levels deep around a single u8. */
static void nested_value(bb *b, int depth) {
    bb_u32(b, depth == 1 ? CPULM_GGUF_U8 : CPULM_GGUF_ARRAY);
    bb_u64(b, 1);
    if (depth == 1)
        bb_le(b, 42, 1);
    else
        nested_value(b, depth - 1);
}

static void nested_file(bb *b) {
    *b = (bb){0};
    hdr(b, 3, 0, 2);
    /* [["a", "bc"], [] of u8, [[1, 2] of i32]] */
    bb_str(b, "nested");
    bb_u32(b, CPULM_GGUF_ARRAY);
    bb_u32(b, CPULM_GGUF_ARRAY);
    bb_u64(b, 3);
    bb_u32(b, CPULM_GGUF_STRING);
    bb_u64(b, 2);
    bb_str(b, "a");
    bb_str(b, "bc");
    bb_u32(b, CPULM_GGUF_U8);
    bb_u64(b, 0);
    bb_u32(b, CPULM_GGUF_ARRAY);
    bb_u64(b, 1);
    bb_u32(b, CPULM_GGUF_I32);
    bb_u64(b, 2);
    bb_u32(b, 1);
    bb_u32(b, 2);
    bb_str(b, "after");
    bb_u32(b, CPULM_GGUF_U32);
    bb_u32(b, 7);
}

static void check_nested(test_ctx *t, const cpulm_gguf *g) {
    cpulm_gguf_arr a;
    REQUIRE(t, cpulm_gguf_get_arr(g, "nested", CPULM_GGUF_ARRAY, &a, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, a.n, 3);
    cpulm_gguf_arr_iter it;
    cpulm_gguf_arr_iter_init(&it, &a);
    cpulm_gguf_arr s = cpulm_gguf_arr_iter_next(&it);
    CHECK_EQ_INT(t, s.type, CPULM_GGUF_STRING);
    CHECK_EQ_INT(t, s.n, 2);
    cpulm_gguf_str_iter si;
    cpulm_gguf_str_iter_init(&si, &s);
    CHECK(t, cpulm_str_eq(cpulm_gguf_str_iter_next(&si), "a"));
    CHECK(t, cpulm_str_eq(cpulm_gguf_str_iter_next(&si), "bc"));
    cpulm_gguf_arr e = cpulm_gguf_arr_iter_next(&it);
    CHECK_EQ_INT(t, e.type, CPULM_GGUF_U8);
    CHECK_EQ_INT(t, e.n, 0);
    cpulm_gguf_arr nn = cpulm_gguf_arr_iter_next(&it);
    CHECK_EQ_INT(t, nn.type, CPULM_GGUF_ARRAY);
    CHECK_EQ_INT(t, it.left, 0);
    cpulm_gguf_arr_iter it2;
    cpulm_gguf_arr_iter_init(&it2, &nn);
    cpulm_gguf_arr ints = cpulm_gguf_arr_iter_next(&it2);
    CHECK_EQ_INT(t, ints.type, CPULM_GGUF_I32);
    REQUIRE(t, ints.n == 2);
    CHECK_EQ_INT(t, cpulm_gguf_arr_i64(&ints, 0), 1);
    CHECK_EQ_INT(t, cpulm_gguf_arr_i64(&ints, 1), 2);
    CHECK_EQ_INT(t, get_i(g, "after"), 7);
}

TEST(gguf_nested_arrays) {
    bb b;
    nested_file(&b);
    cpulm_gguf g;
    cpulm_error e = {0};
    REQUIRE(t, cpulm_gguf_parse(&g, b.p, b.n, &e) == CPULM_OK);
    check_nested(t, &g);
    /* copy_kv writes nested arrays back byte for byte */
    cpulm_gguf_writer *w = cpulm_gguf_writer_new();
    REQUIRE(t, w != NULL);
    for (uint64_t i = 0; i < g.n_kv; i++)
        CHECK(t, cpulm_gguf_writer_copy_kv(w, &g.kv[i]) == 0);
    uint8_t *out = NULL;
    uint64_t n_out = 0;
    REQUIRE(t, cpulm_gguf_writer_to_buf(w, &out, &n_out) == CPULM_OK);
    cpulm_gguf g2;
    REQUIRE(t, cpulm_gguf_parse(&g2, out, n_out, &e) == CPULM_OK);
    check_nested(t, &g2);
    CHECK(t, memcmp(out + 24, b.p + 24, b.n - 24) == 0);
    cpulm_gguf_release(&g2);
    free(out);
    cpulm_gguf_writer_free(w);
    cpulm_gguf_release(&g);
    free(b.p);

    for (int depth = 1; depth <= 9; depth++) {
        b = (bb){0};
        hdr(&b, 3, 0, 1);
        bb_str(&b, "deep");
        bb_u32(&b, CPULM_GGUF_ARRAY);
        nested_value(&b, depth);
        if (depth <= 8)
            EXPECT_OK(&b);
        else
            EXPECT_ERR(&b, CPULM_ERR_FORMAT, "value of key 'deep': arrays nested deeper than 8");
        free(b.p);
    }
}

/* ---- getters ---- */

static void kv_raw(bb *b, const char *key, uint32_t type, uint64_t v) {
    bb_str(b, key);
    bb_u32(b, type);
    bb_le(b, v, (int)cpulm_gguf_type_size((cpulm_gguf_type)type));
}

TEST(gguf_getters_coerce_and_check) {
    bb b = {0};
    hdr(&b, 3, 0, 13);
    kv_raw(&b, "u8", CPULM_GGUF_U8, 200);
    kv_raw(&b, "i8", CPULM_GGUF_I8, (uint8_t)-5);
    kv_raw(&b, "u16", CPULM_GGUF_U16, 60000);
    kv_raw(&b, "i16", CPULM_GGUF_I16, (uint16_t)-300);
    kv_raw(&b, "u32", CPULM_GGUF_U32, 4000000000u);
    kv_raw(&b, "i32", CPULM_GGUF_I32, (uint32_t)-7);
    kv_raw(&b, "f32", CPULM_GGUF_F32, 0x3f000000); /* 0.5f */
    kv_raw(&b, "bool", CPULM_GGUF_BOOL, 2);        /* any nonzero byte is true */
    kv_raw(&b, "u64", CPULM_GGUF_U64, (1ull << 63) + 5);
    kv_raw(&b, "i64", CPULM_GGUF_I64, (uint64_t) - (1ll << 40));
    kv_raw(&b, "f64", CPULM_GGUF_F64, 0x4002000000000000ull); /* 2.25 */
    bb_str(&b, "str");
    bb_u32(&b, CPULM_GGUF_STRING);
    bb_str(&b, "hi");
    bb_str(&b, "arr");
    bb_u32(&b, CPULM_GGUF_ARRAY);
    bb_u32(&b, CPULM_GGUF_I16);
    bb_u64(&b, 3);
    bb_le(&b, 1, 2);
    bb_le(&b, (uint16_t)-2, 2);
    bb_le(&b, 30000, 2);
    cpulm_gguf g;
    cpulm_error e = {0};
    REQUIRE(t, cpulm_gguf_parse(&g, b.p, b.n, &e) == CPULM_OK);
    CHECK_EQ_INT(t, get_i(&g, "u8"), 200);
    CHECK_EQ_INT(t, get_i(&g, "i8"), -5);
    CHECK_EQ_INT(t, get_i(&g, "u16"), 60000);
    CHECK_EQ_INT(t, get_i(&g, "i16"), -300);
    CHECK_EQ_INT(t, get_i(&g, "u32"), 4000000000ll);
    CHECK_EQ_INT(t, get_i(&g, "i32"), -7);
    CHECK_EQ_INT(t, get_i(&g, "i64"), -(1ll << 40));
    int64_t v = 99;
    CHECK(t, cpulm_gguf_get_i64(&g, "u64", &v, &e) == CPULM_ERR_FORMAT);
    CHECK(t, strstr(e.msg, "key 'u64': value 9223372036854775813 does not fit in i64") != NULL);
    CHECK(t, cpulm_gguf_get_i64(&g, "f32", &v, &e) == CPULM_ERR_FORMAT);
    CHECK(t, strcmp(e.msg, "key 'f32': expected an integer, found f32") == 0);
    CHECK(t, cpulm_gguf_get_i64(&g, "missing", &v, &e) == CPULM_ERR_NOT_FOUND);
    CHECK_EQ_INT(t, v, 99);
    double f = 0;
    CHECK(t, cpulm_gguf_get_f64(&g, "f32", &f, NULL) == 0 && f == 0.5);
    CHECK(t, cpulm_gguf_get_f64(&g, "f64", &f, NULL) == 0 && f == 2.25);
    CHECK(t, cpulm_gguf_get_f64(&g, "i16", &f, NULL) == 0 && f == -300);
    CHECK(t, cpulm_gguf_get_f64(&g, "str", &f, &e) == CPULM_ERR_FORMAT);
    CHECK(t, strcmp(e.msg, "key 'str': expected a number, found str") == 0);
    bool bo = false;
    CHECK(t, cpulm_gguf_get_bool(&g, "bool", &bo, NULL) == 0 && bo);
    CHECK(t, cpulm_gguf_get_bool(&g, "u8", &bo, &e) == CPULM_ERR_FORMAT);
    cpulm_str s;
    CHECK(t, cpulm_gguf_get_str(&g, "str", &s, NULL) == 0 && cpulm_str_eq(s, "hi"));
    CHECK(t, cpulm_gguf_get_str(&g, "arr", &s, &e) == CPULM_ERR_FORMAT);
    CHECK(t, strcmp(e.msg, "key 'arr': expected str, found array of i16") == 0);
    cpulm_gguf_arr a;
    CHECK(t, cpulm_gguf_get_arr(&g, "arr", CPULM_GGUF_I32, &a, &e) == CPULM_ERR_FORMAT);
    CHECK(t, strcmp(e.msg, "key 'arr': expected array of i32, found array of i16") == 0);
    REQUIRE(t, cpulm_gguf_get_arr(&g, "arr", CPULM_GGUF_I16, &a, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, a.n, 3);
    CHECK_EQ_INT(t, a.n_bytes, 6);
    CHECK_EQ_INT(t, cpulm_gguf_arr_i64(&a, 1), -2);
    CHECK(t, cpulm_gguf_arr_f64(&a, 2) == 30000.0);
    CHECK_EQ_INT(t, cpulm_gguf_type_size(CPULM_GGUF_F64), 8);
    CHECK_EQ_INT(t, cpulm_gguf_type_size(CPULM_GGUF_STRING), 0);
    CHECK(t, strcmp(cpulm_gguf_type_name(CPULM_GGUF_BOOL), "bool") == 0);
    CHECK(t, strcmp(cpulm_gguf_type_name((cpulm_gguf_type)200), "?") == 0);
    cpulm_gguf_release(&g);
    free(b.p);
}

/* ---- writer ---- */

static uint8_t pattern(int64_t i, uint64_t j) {
    return (uint8_t)(i * 31 + (int64_t)(j * 7) + (int64_t)(j >> 9));
}

TEST(gguf_writer_roundtrip) {
    cpulm_gguf_writer *w = cpulm_gguf_writer_new();
    REQUIRE(t, w != NULL);
    const float fa[3] = {1.5f, -2.0f, 1e-9f};
    const int32_t ia[4] = {2, 3, 3, -6};
    const char *sa[3] = {"<unk>", "", "\xe2\x96\x81the"};
    CHECK(t, cpulm_gguf_writer_set_str(w, "general.architecture", "llama") == 0);
    CHECK(t, cpulm_gguf_writer_set_u32(w, "llama.block_count", 1) == 0);
    CHECK(t, cpulm_gguf_writer_set_i32(w, "neg", -123) == 0);
    CHECK(t, cpulm_gguf_writer_set_f32(w, "eps", 1e-5f) == 0);
    CHECK(t, cpulm_gguf_writer_set_bool(w, "flag", true) == 0);
    CHECK(t, cpulm_gguf_writer_set_arr(w, "scores", CPULM_GGUF_F32, fa, 3) == 0);
    CHECK(t, cpulm_gguf_writer_set_arr(w, "types", CPULM_GGUF_I32, ia, 4) == 0);
    CHECK(t, cpulm_gguf_writer_set_arr_str(w, "tokens", sa, 3) == 0);
    CHECK(t, cpulm_gguf_writer_set_u32(w, "llama.block_count", 5) == 0); /* replaces */
    CHECK(t,
          cpulm_gguf_writer_set_arr(w, "bad", CPULM_GGUF_STRING, sa, 3) == CPULM_ERR_INVALID_ARG);

    uint8_t data[4][200];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 200; j++)
            data[i][j] = pattern(i, (uint64_t)j);
    const int64_t ne_a[2] = {3, 2}, ne_b[2] = {64, 2}, ne_c[1] = {5}, ne_e[2] = {0, 4};
    CHECK(t, cpulm_gguf_writer_add_tensor(w, "a", CPULM_DTYPE_F32, 2, ne_a, data[0]) == 0);
    CHECK(t, cpulm_gguf_writer_add_tensor(w, "b", CPULM_DTYPE_Q4_0, 2, ne_b, data[1]) == 0);
    CHECK(t, cpulm_gguf_writer_add_tensor(w, "c", CPULM_DTYPE_F16, 1, ne_c, data[2]) == 0);
    CHECK(t, cpulm_gguf_writer_add_tensor(w, "e", CPULM_DTYPE_F32, 2, ne_e, data[3]) == 0);

    uint8_t *buf = NULL;
    uint64_t n = 0;
    REQUIRE(t, cpulm_gguf_writer_to_buf(w, &buf, &n) == CPULM_OK);
    cpulm_gguf g;
    cpulm_error e = {0};
    REQUIRE(t, cpulm_gguf_parse(&g, buf, n, &e) == CPULM_OK);
    CHECK_EQ_INT(t, g.version, 3);
    CHECK_EQ_INT(t, g.n_kv, 8);
    CHECK(t, cpulm_str_eq(g.kv[1].key, "llama.block_count")); /* kept its place */
    CHECK_EQ_INT(t, get_i(&g, "llama.block_count"), 5);
    CHECK_EQ_INT(t, get_i(&g, "neg"), -123);
    double eps = 0;
    CHECK(t, cpulm_gguf_get_f64(&g, "eps", &eps, NULL) == 0 && eps == (double)1e-5f);
    bool flag = false;
    CHECK(t, cpulm_gguf_get_bool(&g, "flag", &flag, NULL) == 0 && flag);
    cpulm_gguf_arr a;
    REQUIRE(t, cpulm_gguf_get_arr(&g, "scores", CPULM_GGUF_F32, &a, NULL) == 0);
    CHECK(t, a.n == 3 && cpulm_gguf_arr_f64(&a, 2) == (double)1e-9f);
    REQUIRE(t, cpulm_gguf_get_arr(&g, "types", CPULM_GGUF_I32, &a, NULL) == 0);
    CHECK(t, a.n == 4 && cpulm_gguf_arr_i64(&a, 3) == -6);
    REQUIRE(t, cpulm_gguf_get_arr(&g, "tokens", CPULM_GGUF_STRING, &a, NULL) == 0);
    cpulm_gguf_str_iter it;
    cpulm_gguf_str_iter_init(&it, &a);
    for (int i = 0; i < 3; i++)
        CHECK(t, cpulm_str_eq(cpulm_gguf_str_iter_next(&it), sa[i]));

    CHECK_EQ_INT(t, g.n_tensors, 4);
    static const uint64_t want_bytes[4] = {24, 72, 10, 0};
    uint64_t off = 0;
    for (int i = 0; i < 4 && i < (int)g.n_tensors; i++) {
        const cpulm_gguf_tensor *tt = &g.tensors[i];
        CHECK_EQ_INT(t, tt->n_bytes, want_bytes[i]);
        CHECK_EQ_INT(t, tt->offset, off);
        CHECK(t, memcmp(tt->data, data[i], tt->n_bytes) == 0);
        off += (tt->n_bytes + 31) / 32 * 32;
    }
    CHECK_EQ_INT(t, g.tensors[1].ne[0], 64);
    CHECK_EQ_INT(t, g.tensors[1].ne[1], 2);
    CHECK_EQ_INT(t, g.tensors[1].type, CPULM_DTYPE_Q4_0);
    CHECK_EQ_INT(t, g.data_offset % 32, 0);
    CHECK_EQ_INT(t, g.data_offset + off, n);
    cpulm_gguf_release(&g);
    free(buf);

    /* general.alignment moves every offset */
    CHECK(t, cpulm_gguf_writer_set_u32(w, "general.alignment", 48) == CPULM_ERR_INVALID_ARG);
    CHECK(t, cpulm_gguf_writer_set_f32(w, "general.alignment", 64) == CPULM_ERR_INVALID_ARG);
    CHECK(t, cpulm_gguf_writer_set_u32(w, "general.alignment", 256) == CPULM_OK);
    REQUIRE(t, cpulm_gguf_writer_to_buf(w, &buf, &n) == CPULM_OK);
    REQUIRE(t, cpulm_gguf_parse(&g, buf, n, &e) == CPULM_OK);
    CHECK_EQ_INT(t, g.alignment, 256);
    CHECK_EQ_INT(t, g.data_offset % 256, 0);
    CHECK_EQ_INT(t, g.tensors[2].offset, 512);
    CHECK(t, memcmp(g.tensors[2].data, data[2], 10) == 0);
    cpulm_gguf_release(&g);
    free(buf);
    cpulm_gguf_writer_free(w);
    cpulm_gguf_writer_free(NULL);
}

TEST(gguf_writer_rejects_invalid) {
    cpulm_gguf_writer *w = cpulm_gguf_writer_new();
    REQUIRE(t, w != NULL);
    const int64_t ne[2] = {32, 2}, odd[2] = {33, 2}, neg[2] = {-1, 2};
    char name[80];
    memset(name, 'x', 64);
    name[64] = 0;
    CHECK(t, cpulm_gguf_writer_add_tensor(w, "w", CPULM_DTYPE_Q8_0, 2, ne, NULL) == CPULM_OK);
    CHECK(t, cpulm_gguf_writer_add_tensor(w, "w", CPULM_DTYPE_Q8_0, 2, ne, NULL) ==
                 CPULM_ERR_INVALID_ARG);
    CHECK(t, cpulm_gguf_writer_add_tensor(w, "o", CPULM_DTYPE_Q8_0, 2, odd, NULL) ==
                 CPULM_ERR_INVALID_ARG);
    CHECK(t, cpulm_gguf_writer_add_tensor(w, "n", CPULM_DTYPE_F32, 2, neg, NULL) ==
                 CPULM_ERR_INVALID_ARG);
    CHECK(t, cpulm_gguf_writer_add_tensor(w, "d", CPULM_DTYPE_F32, 0, ne, NULL) ==
                 CPULM_ERR_INVALID_ARG);
    CHECK(t, cpulm_gguf_writer_add_tensor(w, "d", CPULM_DTYPE_F32, 5, ne, NULL) ==
                 CPULM_ERR_INVALID_ARG);
    CHECK(t, cpulm_gguf_writer_add_tensor(w, "u", 5, 2, ne, NULL) == CPULM_ERR_UNSUPPORTED);
    CHECK(t, cpulm_gguf_writer_add_tensor(w, name, CPULM_DTYPE_F32, 2, ne, NULL) ==
                 CPULM_ERR_INVALID_ARG);
    name[63] = 0;
    CHECK(t, cpulm_gguf_writer_add_tensor(w, name, CPULM_DTYPE_F32, 2, ne, NULL) == CPULM_OK);
    uint8_t *buf = NULL;
    uint64_t n = 0;
    CHECK(t, cpulm_gguf_writer_to_buf(w, &buf, &n) == CPULM_ERR_INVALID_ARG); /* needs fill */
    cpulm_error e = {0};
    char path[512];
    snprintf(path, sizeof path, "%s/nofill.gguf", test_tmp_dir());
    CHECK(t, cpulm_gguf_writer_write_file(w, path, NULL, NULL, &e) == CPULM_ERR_INVALID_ARG);
    CHECK(t, strstr(e.msg, "tensor 'w' has no data") != NULL);
    CHECK(t, access(path, F_OK) != 0);
    cpulm_gguf_writer_free(w);
}

typedef struct fill_state {
    int64_t calls[8];
    int n_calls;
    int64_t fail_at;
} fill_state;

static cpulm_status fill_pattern(int64_t i, void *dst, uint64_t n_bytes, void *user) {
    fill_state *fs = user;
    if (fs->n_calls < 8) fs->calls[fs->n_calls] = i;
    fs->n_calls++;
    if (i == fs->fail_at) return CPULM_ERR_CANCELLED;
    for (uint64_t j = 0; j < n_bytes; j++)
        ((uint8_t *)dst)[j] = pattern(i, j);
    return CPULM_OK;
}

TEST(gguf_writer_streams_to_file) {
    cpulm_gguf_writer *w = cpulm_gguf_writer_new();
    REQUIRE(t, w != NULL);
    CHECK(t, cpulm_gguf_writer_set_str(w, "general.name", "stream") == 0);
    const int64_t big[2] = {4096, 3}, small[1] = {32}, empty[1] = {0};
    static uint8_t copied[32 * 34 / 32];
    for (size_t j = 0; j < sizeof copied; j++)
        copied[j] = pattern(1, j);
    /* offsets that are not page-aligned exercise the mapping window */
    CHECK(t, cpulm_gguf_writer_add_tensor(w, "big", CPULM_DTYPE_F32, 2, big, NULL) == 0);
    CHECK(t, cpulm_gguf_writer_add_tensor(w, "copied", CPULM_DTYPE_Q8_0, 1, small, copied) == 0);
    CHECK(t, cpulm_gguf_writer_add_tensor(w, "q", CPULM_DTYPE_Q6_K, 2, big, NULL) == 0);
    CHECK(t, cpulm_gguf_writer_add_tensor(w, "empty", CPULM_DTYPE_F32, 1, empty, NULL) == 0);
    char path[512], tmp[600];
    snprintf(path, sizeof path, "%s/stream.gguf", test_tmp_dir());
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(path);

    fill_state fs = {.fail_at = 2};
    cpulm_error e = {0};
    CHECK(t, cpulm_gguf_writer_write_file(w, path, fill_pattern, &fs, &e) == CPULM_ERR_CANCELLED);
    CHECK(t, strstr(e.msg, "fill callback failed for tensor 'q'") != NULL);
    CHECK(t, access(path, F_OK) != 0 && access(tmp, F_OK) != 0);

    fs = (fill_state){.fail_at = -1};
    REQUIRE(t, cpulm_gguf_writer_write_file(w, path, fill_pattern, &fs, &e) == CPULM_OK);
    CHECK_EQ_INT(t, fs.n_calls, 3);
    CHECK(t, fs.calls[0] == 0 && fs.calls[1] == 2 && fs.calls[2] == 3);
    CHECK(t, access(tmp, F_OK) != 0);
    cpulm_mmap m;
    cpulm_gguf g;
    REQUIRE(t, cpulm_mmap_open(&m, path, &e) == CPULM_OK);
    REQUIRE(t, cpulm_gguf_parse(&g, m.data, m.size, &e) == CPULM_OK);
    CHECK_EQ_INT(t, g.n_tensors, 4);
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        const uint8_t *d = g.tensors[i].data;
        uint64_t bad = 0;
        for (uint64_t j = 0; j < g.tensors[i].n_bytes; j++)
            bad += d[j] != pattern((int64_t)i, j);
        CHECK_EQ_INT(t, bad, 0);
    }
    CHECK_EQ_INT(t, g.tensors[2].n_bytes, 3 * 16 * 210);
    cpulm_gguf_release(&g);
    cpulm_mmap_close(&m);
    unlink(path);
    cpulm_gguf_writer_free(w);
}

/* Copying every kv and tensor of a llama.cpp-written file reproduces it byte for byte: the
 * writer's layout is llama.cpp's. */
static void reproduce(test_ctx *t, const char *rel) {
    const char *path = test_shared_path(rel);
    if (!path) return;
    cpulm_mmap m;
    cpulm_gguf g;
    REQUIRE(t, cpulm_mmap_open(&m, path, NULL) == CPULM_OK);
    REQUIRE(t, cpulm_gguf_parse(&g, m.data, m.size, NULL) == CPULM_OK);
    cpulm_gguf_writer *w = cpulm_gguf_writer_new();
    REQUIRE(t, w != NULL);
    for (uint64_t i = 0; i < g.n_kv; i++)
        CHECK(t, cpulm_gguf_writer_copy_kv(w, &g.kv[i]) == 0);
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        const cpulm_gguf_tensor *x = &g.tensors[i];
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)x->name.len, x->name.ptr);
        CHECK(t, cpulm_gguf_writer_add_tensor(w, name, x->type, x->n_dims, x->ne, x->data) == 0);
    }
    uint8_t *buf = NULL;
    uint64_t n = 0;
    REQUIRE(t, cpulm_gguf_writer_to_buf(w, &buf, &n) == CPULM_OK);
    if (n != m.size || memcmp(buf, m.data, n) != 0) {
        uint64_t k = 0;
        while (k < n && k < m.size && buf[k] == m.data[k])
            k++;
        fprintf(stderr, "  %s: rewritten file differs at byte %llu (sizes %llu vs %llu)\n", rel,
                (unsigned long long)k, (unsigned long long)n, (unsigned long long)m.size);
        t->n_fail++;
    }
    free(buf);
    cpulm_gguf_writer_free(w);
    cpulm_gguf_release(&g);
    cpulm_mmap_close(&m);
}

TEST(gguf_writer_reproduces_real_files) {
    if (!test_shared_path("models/stories260K.gguf")) SKIP(t, "shared models not found");
    reproduce(t, "models/stories260K.gguf");
    reproduce(t, "models/llama-2-tiny-random.gguf");
    reproduce(t, "testdata/models/tiny-llama-q4_k_m.gguf");
    reproduce(t, "testdata/models/tiny-qwen2-bf16.gguf");
    reproduce(t, "testdata/models/tiny-llama3-q8_0.gguf");
    reproduce(t, "testdata/tokenizer/ggml-vocab-llama-spm.gguf"); /* no tensors, no padding */
    reproduce(t, "testdata/tokenizer/ggml-vocab-phi-3.gguf");
}
