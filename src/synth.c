/* synth.c: synthetic llama models (see synth.h).
 *
 * Every row of every tensor is generated from its own PRNG stream, seeded from (seed,
 * tensor index, row), so rows can be produced by any thread in any order with the same
 * bytes. Quantization uses the scalar reference routines (quant.h), which are the same on
 * every machine, so a seed names one file everywhere.
 */
#include "synth.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "gguf.h"
#include "quantize_plan.h"

#define SYNTH_N_SPECIAL 3   /* <unk>, <s>, </s> */
#define SYNTH_N_BYTE 256    /* <0x00> .. <0xFF> */
#define WEIGHT_STD 0.02f

/* ---- shapes: the one table of model shapes (synth and `cpulm plan` share it) ---- */

static const cpulm_shape_preset shapes[] = {
    /* name, desc, label, layers, embd, ff, heads, kv heads, vocab, ctx, rope base, tied */
    {"1b", "Llama 3.2 1B", "synth Llama-3.2-1B", 16, 2048, 8192, 32, 8, 128256, 131072,
     500000.0f, 1},
    {"3b", "Llama 3.2 3B", "synth Llama-3.2-3B", 28, 3072, 8192, 24, 8, 128256, 131072,
     500000.0f, 1},
    {"8b", "Llama 3.1 8B", "synth Llama-3-8B", 32, 4096, 14336, 32, 8, 128256, 8192, 500000.0f,
     0},
    {"70b", "Llama 3.1 70B", "synth Llama-3-70B", 80, 8192, 28672, 64, 8, 128256, 8192,
     500000.0f, 0},
    {"tiny", "tiny test model", "synth tiny", 2, 256, 512, 4, 2, 512, 512, 10000.0f, 1},
    {"custom", "tiny's numbers, to override", "synth custom", 2, 256, 512, 4, 2, 512, 512,
     10000.0f, 1},
};

const cpulm_shape_preset *cpulm_shape_preset_at(int i) {
    return i >= 0 && i < (int)(sizeof shapes / sizeof shapes[0]) ? &shapes[i] : NULL;
}

const cpulm_shape_preset *cpulm_shape_preset_find(const char *name) {
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!strcmp(name, shapes[i].name)) return &shapes[i];
    return NULL;
}

cpulm_status cpulm_synth_shape(const char *name, cpulm_synth_params *p) {
    const cpulm_shape_preset *s = cpulm_shape_preset_find(name);
    if (!s) return CPULM_ERR_INVALID_ARG;
    *p = (cpulm_synth_params){.n_layer = s->n_layer, .n_embd = s->n_embd, .n_ff = s->n_ff,
                              .n_head = s->n_head, .n_head_kv = s->n_head_kv,
                              .n_vocab = s->n_vocab, .n_ctx = s->n_ctx,
                              .rope_base = s->rope_base, .norm_eps = 1e-5f, .tied = s->tied,
                              .type = CPULM_DTYPE_Q4_0, .seed = 1, .n_threads = 1,
                              .name = s->label};
    return CPULM_OK;
}

void cpulm_synth_hparams(const cpulm_synth_params *p, cpulm_hparams *hp) {
    memset(hp, 0, sizeof *hp);
    hp->n_vocab = p->n_vocab;
    hp->n_ctx_train = p->n_ctx;
    hp->n_embd = p->n_embd;
    hp->n_layer = p->n_layer;
    hp->n_head = p->n_head;
    hp->n_head_kv = p->n_head_kv;
    hp->head_dim = p->n_embd / p->n_head; /* synth writes llama's head_dim */
    hp->n_ff = p->n_ff;
    hp->n_rot = hp->head_dim;
    hp->rope_base = p->rope_base;
    hp->rope_freq_scale = 1.0f;
    hp->norm_eps = p->norm_eps;
}

static int weight_type_ok(cpulm_dtype t) {
    return t == CPULM_DTYPE_F32 || t == CPULM_DTYPE_F16 || t == CPULM_DTYPE_BF16 ||
           t == CPULM_DTYPE_Q4_0 || t == CPULM_DTYPE_Q8_0 || t == CPULM_DTYPE_Q4_K ||
           t == CPULM_DTYPE_Q6_K;
}

cpulm_status cpulm_synth_check(const cpulm_synth_params *p, cpulm_error *err) {
    if (!weight_type_ok(p->type))
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "weight type %s not supported by synth",
                          cpulm_dtype_name(p->type));
    if (p->n_layer < 1 || p->n_embd < 1 || p->n_ff < 1 || p->n_head < 1 || p->n_head_kv < 1 ||
        p->n_ctx < 1 || p->n_threads < 1)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "every size must be positive");
    if (p->n_vocab < SYNTH_N_SPECIAL + SYNTH_N_BYTE + 1)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "vocab %d too small (at least %d)",
                          p->n_vocab, SYNTH_N_SPECIAL + SYNTH_N_BYTE + 1);
    if (p->n_embd % p->n_head || p->n_head % p->n_head_kv || (p->n_embd / p->n_head) % 2)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG,
                          "embd %d, heads %d, kv heads %d: need embd = heads x even head_dim "
                          "and heads a multiple of kv heads", p->n_embd, p->n_head, p->n_head_kv);
    int32_t blk = cpulm_dtype_traits_get(p->type)->block;
    if (p->n_embd % blk || p->n_ff % blk)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG,
                          "embd %d and ff %d must be multiples of %s's block of %d", p->n_embd,
                          p->n_ff, cpulm_dtype_name(p->type), blk);
    if (p->rope_base <= 0 || p->norm_eps <= 0)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "rope base and norm eps must be positive");
    return CPULM_OK;
}

/* ---- the tensor list ---- */

enum { K_MATRIX, K_NORM };

typedef struct stensor {
    char name[64];
    int kind;
    int64_t ne[2]; /* ne[0] = row length */
} stensor;

static int add(stensor *t, int n, const char *name, int kind, int64_t n_in, int64_t n_out) {
    snprintf(t[n].name, sizeof t[n].name, "%s", name);
    t[n].kind = kind;
    t[n].ne[0] = n_in;
    t[n].ne[1] = n_out;
    return n + 1;
}

/* Fills t (capacity 3 + 9 * n_layer) in file order; returns the count. */
static int tensor_list(const cpulm_synth_params *p, stensor *t) {
    int64_t E = p->n_embd, hd = p->n_embd / p->n_head, Q = hd * p->n_head;
    int64_t KV = hd * p->n_head_kv, F = p->n_ff, V = p->n_vocab;
    int n = 0;
    char nm[64];
    n = add(t, n, "token_embd.weight", K_MATRIX, E, V);
    n = add(t, n, "output_norm.weight", K_NORM, E, 1);
    if (!p->tied) n = add(t, n, "output.weight", K_MATRIX, E, V);
    static const struct { const char *suffix; int kind; int in, out; } ly[9] = {
        {"attn_norm.weight", K_NORM, 0, -1},  {"attn_q.weight", K_MATRIX, 0, 1},
        {"attn_k.weight", K_MATRIX, 0, 2},    {"attn_v.weight", K_MATRIX, 0, 2},
        {"attn_output.weight", K_MATRIX, 1, 0}, {"ffn_norm.weight", K_NORM, 0, -1},
        {"ffn_gate.weight", K_MATRIX, 0, 3},  {"ffn_up.weight", K_MATRIX, 0, 3},
        {"ffn_down.weight", K_MATRIX, 3, 0}};
    const int64_t dims[4] = {E, Q, KV, F};
    for (int il = 0; il < p->n_layer; il++)
        for (int j = 0; j < 9; j++) {
            snprintf(nm, sizeof nm, "blk.%d.%s", il, ly[j].suffix);
            n = add(t, n, nm, ly[j].kind, dims[ly[j].in], ly[j].out < 0 ? 1 : dims[ly[j].out]);
        }
    return n;
}

static cpulm_dtype tensor_type(const cpulm_synth_params *p, const stensor *t) {
    return t->kind == K_NORM ? CPULM_DTYPE_F32 : p->type;
}

uint64_t cpulm_synth_weight_bytes(const cpulm_synth_params *p) {
    stensor *t = malloc(sizeof *t * (size_t)(3 + 9 * p->n_layer));
    if (!t) return 0;
    int n = tensor_list(p, t);
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += cpulm_dtype_row_bytes(tensor_type(p, &t[i]), t[i].ne[0]) * (uint64_t)t[i].ne[1];
    free(t);
    return total;
}

cpulm_status cpulm_synth_quantized_size(const cpulm_synth_params *p,
                                        const cpulm_qplan_preset *preset, uint64_t *bytes,
                                        int64_t *n_params, cpulm_error *err) {
    const int cap = 3 + 9 * p->n_layer;
    stensor *t = malloc(sizeof *t * (size_t)cap);
    cpulm_qplan_tensor *qt = malloc(sizeof *qt * (size_t)cap);
    cpulm_qplan_entry *e = malloc(sizeof *e * (size_t)cap);
    cpulm_status s = CPULM_ERR_NOMEM;
    if (!t || !qt || !e) goto done;
    const int n = tensor_list(p, t);
    for (int i = 0; i < n; i++) /* the F32 model the quantizer would start from */
        qt[i] = (cpulm_qplan_tensor){.name = t[i].name, .type = CPULM_DTYPE_F32,
                                     .n_dims = t[i].kind == K_NORM ? 1 : 2,
                                     .ne = {t[i].ne[0], t[i].ne[1], 1, 1}};
    cpulm_qplan_model qm = {.n_layer = p->n_layer, .n_head = p->n_head,
                            .n_head_kv = p->n_head_kv};
    snprintf(qm.arch, sizeof qm.arch, "llama");
    const cpulm_qplan_params qp = cpulm_qplan_default_params(preset);
    if ((s = cpulm_qplan_build(&qp, &qm, qt, n, e, err)) != CPULM_OK) goto done;
    *bytes = 0;
    *n_params = 0;
    for (int i = 0; i < n; i++) {
        const stensor *x = &t[e[i].src];
        const uint32_t type = e[i].convert ? e[i].type : CPULM_DTYPE_F32;
        *bytes += cpulm_dtype_row_bytes((cpulm_dtype)type, x->ne[0]) * (uint64_t)x->ne[1];
        *n_params += x->ne[0] * x->ne[1];
    }
done:
    free(t);
    free(qt);
    free(e);
    return s == CPULM_ERR_NOMEM ? cpulm_errf(err, s, "out of memory") : s;
}

/* ---- random rows ---- */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Near-normal numbers: the sum of four 16-bit uniforms (Irwin-Hall, std 1 after scaling)
 * costs one 64-bit draw per number; the tails are cut at +-3.5 sigma, which is harmless
 * here. */
static void gaussian_row(float *x, int64_t n, uint64_t seed, float mean, float std) {
    uint64_t s = seed;
    const float k = std / 37837.23f; /* 65536 * sqrt(4 / 12) */
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = splitmix(&s);
        int32_t sum = (int32_t)(r & 0xFFFF) + (int32_t)((r >> 16) & 0xFFFF) +
                      (int32_t)((r >> 32) & 0xFFFF) + (int32_t)(r >> 48) - 2 * 65535;
        x[i] = mean + (float)sum * k;
    }
}

typedef struct fill_job {
    const cpulm_synth_params *p;
    const stensor *t;
    int64_t i_tensor;
    uint8_t *dst;
    int ith, nth;
    cpulm_status st;
} fill_job;

static void *fill_rows(void *arg) {
    fill_job *j = arg;
    const stensor *t = j->t;
    cpulm_dtype type = tensor_type(j->p, t);
    uint64_t rb = cpulm_dtype_row_bytes(type, t->ne[0]);
    int64_t r0 = t->ne[1] * j->ith / j->nth, r1 = t->ne[1] * (j->ith + 1) / j->nth;
    float *row = malloc(sizeof(float) * (size_t)t->ne[0]);
    if (!row) {
        j->st = CPULM_ERR_NOMEM;
        return NULL;
    }
    uint64_t base = j->p->seed * 0xD1B54A32D192ED03ull ^ ((uint64_t)j->i_tensor << 40);
    for (int64_t r = r0; r < r1; r++) {
        uint64_t s = base ^ (uint64_t)r;
        splitmix(&s); /* decorrelate neighbouring rows */
        if (t->kind == K_NORM) gaussian_row(row, t->ne[0], s, 1.0f, 0.05f);
        else gaussian_row(row, t->ne[0], s, 0.0f, WEIGHT_STD);
        cpulm_quantize_row_ref(type, row, j->dst + (size_t)r * rb, t->ne[0]);
    }
    free(row);
    j->st = CPULM_OK;
    return NULL;
}

typedef struct fill_ctx {
    const cpulm_synth_params *p;
    const stensor *t;
} fill_ctx;

enum { MAX_THREADS = 64 };

static cpulm_status fill_tensor(int64_t i, void *dst, uint64_t n_bytes, void *user) {
    const fill_ctx *fc = user;
    (void)n_bytes;
    int nth = fc->p->n_threads < MAX_THREADS ? fc->p->n_threads : MAX_THREADS;
    if (fc->t[i].ne[1] < nth) nth = 1;
    fill_job jobs[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    int started = 1;
    for (int k = 0; k < nth; k++)
        jobs[k] = (fill_job){.p = fc->p, .t = &fc->t[i], .i_tensor = i, .dst = dst, .ith = k,
                             .nth = nth, .st = CPULM_ERR_NOMEM};
    for (int k = 1; k < nth; k++, started++)
        if (pthread_create(&th[k], NULL, fill_rows, &jobs[k]) != 0) break;
    fill_rows(&jobs[0]);
    for (int k = started; k < nth; k++) fill_rows(&jobs[k]); /* threads that failed to start */
    for (int k = 1; k < started; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < nth; k++)
        if (jobs[k].st != CPULM_OK) return jobs[k].st;
    return CPULM_OK;
}

/* ---- vocabulary ---- */

/* Filler piece k: the SPM word marker U+2581 alone for k = 0 (so spaces are one token and
 * decode to ' '), then bijective base-26 letters ("a".."z", "aa", ...), with the marker in
 * front for odd k, so real text finds multi-letter pieces to merge into. */
static void filler_piece(int32_t k, char *out) {
    if (k == 0) {
        memcpy(out, "\xE2\x96\x81", 4);
        return;
    }
    k--;
    char letters[16];
    int n = 0;
    for (int32_t v = k / 2 + 1; v > 0 && n < 15; v = (v - 1) / 26) letters[n++] = (char)('a' + (v - 1) % 26);
    int o = 0;
    if (k % 2 == 0) {
        memcpy(out, "\xE2\x96\x81", 3);
        o = 3;
    }
    while (n > 0) out[o++] = letters[--n];
    out[o] = 0;
}

static cpulm_status set_vocab(cpulm_gguf_writer *w, const cpulm_synth_params *p) {
    int32_t V = p->n_vocab;
    char *text = malloc((size_t)V * 24);
    const char **strs = malloc(sizeof *strs * (size_t)V);
    float *scores = malloc(sizeof *scores * (size_t)V);
    int32_t *types = malloc(sizeof *types * (size_t)V);
    cpulm_status st = CPULM_ERR_NOMEM;
    if (!text || !strs || !scores || !types) goto out;
    static const char *special[SYNTH_N_SPECIAL] = {"<unk>", "<s>", "</s>"};
    for (int32_t i = 0; i < V; i++) {
        char *s = text + (size_t)i * 24;
        if (i < SYNTH_N_SPECIAL) snprintf(s, 24, "%s", special[i]);
        else if (i < SYNTH_N_SPECIAL + SYNTH_N_BYTE) snprintf(s, 24, "<0x%02X>", i - SYNTH_N_SPECIAL);
        else filler_piece(i - SYNTH_N_SPECIAL - SYNTH_N_BYTE, s);
        strs[i] = s;
        scores[i] = i < SYNTH_N_SPECIAL + SYNTH_N_BYTE ? 0.0f : -(float)i;
        types[i] = i == 0 ? 2 : i < SYNTH_N_SPECIAL ? 3 : i < SYNTH_N_SPECIAL + SYNTH_N_BYTE ? 6 : 1;
    }
    if ((st = cpulm_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama")) ||
        (st = cpulm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, (uint64_t)V)) ||
        (st = cpulm_gguf_writer_set_arr(w, "tokenizer.ggml.scores", CPULM_GGUF_F32, scores, (uint64_t)V)) ||
        (st = cpulm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CPULM_GGUF_I32, types, (uint64_t)V)) ||
        (st = cpulm_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0)) ||
        (st = cpulm_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1)) ||
        (st = cpulm_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2)) ||
        (st = cpulm_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true)))
        goto out;
    st = CPULM_OK;
out:
    free(text);
    free(strs);
    free(scores);
    free(types);
    return st;
}

static cpulm_status set_hparams(cpulm_gguf_writer *w, const cpulm_synth_params *p) {
    cpulm_status st;
    if ((st = cpulm_gguf_writer_set_str(w, "general.architecture", "llama")) ||
        (st = cpulm_gguf_writer_set_str(w, "general.name", p->name ? p->name : "synth")) ||
        (st = cpulm_gguf_writer_set_u32(w, "llama.context_length", (uint32_t)p->n_ctx)) ||
        (st = cpulm_gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)p->n_embd)) ||
        (st = cpulm_gguf_writer_set_u32(w, "llama.block_count", (uint32_t)p->n_layer)) ||
        (st = cpulm_gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)p->n_ff)) ||
        (st = cpulm_gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)p->n_head)) ||
        (st = cpulm_gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)p->n_head_kv)) ||
        (st = cpulm_gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)(p->n_embd / p->n_head))) ||
        (st = cpulm_gguf_writer_set_f32(w, "llama.rope.freq_base", p->rope_base)) ||
        (st = cpulm_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", p->norm_eps)) ||
        (st = cpulm_gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)p->n_vocab)))
        return st;
    return CPULM_OK;
}

cpulm_status cpulm_synth_write(const char *path, const cpulm_synth_params *p, cpulm_error *err) {
    cpulm_status st = cpulm_synth_check(p, err);
    if (st != CPULM_OK) return st;
    stensor *t = malloc(sizeof *t * (size_t)(3 + 9 * p->n_layer));
    cpulm_gguf_writer *w = cpulm_gguf_writer_new();
    if (!t || !w) {
        st = cpulm_errf(err, CPULM_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((st = set_hparams(w, p)) != CPULM_OK || (st = set_vocab(w, p)) != CPULM_OK) {
        cpulm_errf(err, st, "building the metadata failed");
        goto out;
    }
    int n = tensor_list(p, t);
    for (int i = 0; i < n; i++) {
        int64_t ne[2] = {t[i].ne[0], t[i].ne[1]};
        st = cpulm_gguf_writer_add_tensor(w, t[i].name, tensor_type(p, &t[i]),
                                          t[i].kind == K_NORM ? 1 : 2, ne, NULL);
        if (st != CPULM_OK) {
            cpulm_errf(err, st, "tensor '%s' rejected", t[i].name);
            goto out;
        }
    }
    fill_ctx fc = {.p = p, .t = t};
    st = cpulm_gguf_writer_write_file(w, path, fill_tensor, &fc, err);
out:
    cpulm_gguf_writer_free(w);
    free(t);
    return st;
}
