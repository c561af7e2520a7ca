/* gen_gguf_corpus.c: writes the small seed corpus for fuzz_gguf (tests/fuzz/corpus/gguf).
 * Usage: gen_gguf_corpus DIR. Every file is a few KB at most and covers one feature: all
 * value types, several tensor types and shapes, a custom alignment, nested arrays, a
 * vocab-only file without padding, a v2 header, and a few near-miss invalid files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "format/quant.h"

static const char *dir;

static void save(const char *name, const void *p, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "%s: write failed\n", path);
        exit(1);
    }
}

static void save_writer(const char *name, cpulm_gguf_writer *w) {
    uint8_t *buf;
    uint64_t n;
    if (cpulm_gguf_writer_to_buf(w, &buf, &n) != CPULM_OK) {
        fprintf(stderr, "%s: to_buf failed\n", name);
        exit(1);
    }
    save(name, buf, (size_t)n);
    free(buf);
    cpulm_gguf_writer_free(w);
}

static void check(cpulm_status st) {
    if (st != CPULM_OK) {
        fprintf(stderr, "writer call failed: %d\n", st);
        exit(1);
    }
}

static void kv_types(void) {
    cpulm_gguf_writer *w = cpulm_gguf_writer_new();
    const char *toks[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81the", ""};
    const float scores[] = {0, 0, 0, -1.5f, -2};
    const int32_t types[] = {2, 3, 3, 1, 1};
    const uint8_t u8s[] = {1, 2, 255};
    const double f64s[] = {0.25, -1e300};
    check(cpulm_gguf_writer_set_str(w, "general.architecture", "llama"));
    check(cpulm_gguf_writer_set_u32(w, "llama.block_count", 2));
    check(cpulm_gguf_writer_set_i32(w, "i", -7));
    check(cpulm_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f));
    check(cpulm_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true));
    check(cpulm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 5));
    check(cpulm_gguf_writer_set_arr(w, "tokenizer.ggml.scores", CPULM_GGUF_F32, scores, 5));
    check(cpulm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CPULM_GGUF_I32, types, 5));
    check(cpulm_gguf_writer_set_arr(w, "u8s", CPULM_GGUF_U8, u8s, 3));
    check(cpulm_gguf_writer_set_arr(w, "f64s", CPULM_GGUF_F64, f64s, 2));
    save_writer("kv_types.gguf", w);
}

static void tensors(const char *name, uint32_t alignment) {
    cpulm_gguf_writer *w = cpulm_gguf_writer_new();
    static uint8_t data[1024];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 37);
    const int64_t f32[2] = {4, 3}, q40[2] = {32, 2}, q80[1] = {64}, q6k[1] = {256},
                  four[4] = {2, 1, 3, 2}, empty[2] = {0, 5}, bf16[3] = {3, 2, 2};
    if (alignment) check(cpulm_gguf_writer_set_u32(w, "general.alignment", alignment));
    check(cpulm_gguf_writer_set_str(w, "general.name", "seed"));
    check(cpulm_gguf_writer_add_tensor(w, "token_embd.weight", CPULM_DTYPE_F32, 2, f32, data));
    check(cpulm_gguf_writer_add_tensor(w, "blk.0.attn_q.weight", CPULM_DTYPE_Q4_0, 2, q40, data));
    check(cpulm_gguf_writer_add_tensor(w, "blk.0.attn_k.weight", CPULM_DTYPE_Q8_0, 1, q80, data));
    check(cpulm_gguf_writer_add_tensor(w, "blk.0.ffn_down.weight", CPULM_DTYPE_Q6_K, 1, q6k, data));
    check(cpulm_gguf_writer_add_tensor(w, "four_d", CPULM_DTYPE_I8, 4, four, data));
    check(cpulm_gguf_writer_add_tensor(w, "empty", CPULM_DTYPE_F16, 2, empty, data));
    check(cpulm_gguf_writer_add_tensor(w, "bf16", CPULM_DTYPE_BF16, 3, bf16, data));
    save_writer(name, w);
}

/* ---- hand-built files for what the writer does not produce ---- */

static uint8_t raw[4096];
static size_t n_raw;

static void put(const void *p, size_t n) {
    memcpy(raw + n_raw, p, n);
    n_raw += n;
}

static void le(uint64_t v, int n) {
    for (int i = 0; i < n; i++)
        raw[n_raw++] = (uint8_t)(v >> (8 * i));
}

static void str(const char *s) {
    le(strlen(s), 8);
    put(s, strlen(s));
}

static void header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    n_raw = 0;
    put("GGUF", 4);
    le(version, 4);
    le(n_tensors, 8);
    le(n_kv, 8);
}

static void nested(void) {
    header(3, 0, 1);
    str("nested"); /* [["a","bc"], [] of u8, [[1,2] of i32]] */
    le(CPULM_GGUF_ARRAY, 4);
    le(CPULM_GGUF_ARRAY, 4);
    le(3, 8);
    le(CPULM_GGUF_STRING, 4);
    le(2, 8);
    str("a");
    str("bc");
    le(CPULM_GGUF_U8, 4);
    le(0, 8);
    le(CPULM_GGUF_ARRAY, 4);
    le(1, 8);
    le(CPULM_GGUF_I32, 4);
    le(2, 8);
    le(1, 4);
    le(2, 4);
    save("nested.gguf", raw, n_raw);
}

static void vocab_only_v2(void) {
    /* v2, 0 tensors, ends right after the kvs (not a multiple of 32) */
    header(2, 0, 3);
    str("general.architecture");
    le(CPULM_GGUF_STRING, 4);
    str("llama");
    str("tokenizer.ggml.model");
    le(CPULM_GGUF_STRING, 4);
    str("gpt2");
    str("tokenizer.ggml.merges");
    le(CPULM_GGUF_ARRAY, 4);
    le(CPULM_GGUF_STRING, 4);
    le(2, 8);
    str("a b");
    str("ab c");
    save("vocab_only_v2.gguf", raw, n_raw);
}

static void invalid(void) {
    header(3, 1, 1); /* duplicate-free header, then a tensor with a bad offset */
    str("general.alignment");
    le(CPULM_GGUF_U32, 4);
    le(64, 4);
    str("t");
    le(1, 4);
    le(32, 8);
    le(CPULM_DTYPE_Q8_0, 4);
    le(32, 8);
    while (n_raw % 64)
        le(0, 1);
    for (int i = 0; i < 128; i++)
        le((uint64_t)i, 1);
    save("bad_offset.gguf", raw, n_raw);
    header(1, 0, 0);
    save("version1.gguf", raw, n_raw);
    header(3, 0, 2);
    str("k");
    le(CPULM_GGUF_U8, 4);
    le(1, 1);
    str("k");
    le(CPULM_GGUF_U8, 4);
    le(2, 1);
    save("duplicate_key.gguf", raw, n_raw);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    kv_types();
    tensors("tensors.gguf", 0);
    tensors("tensors_align128.gguf", 128);
    nested();
    vocab_only_v2();
    invalid();
    return 0;
}
