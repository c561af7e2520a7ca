/* bench_plan.c: memory and cost arithmetic behind `cpulm plan` (see bench_plan.h). Every
 * number here follows from a stated rule; the tests check them against hand-computed
 * values and against the byte sizes of real quantized files. */
#define _GNU_SOURCE
#include "bench_plan.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- shapes ---- */

static const plan_shape shapes[] = {
    /* name, desc, n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, tied */
    {"1b", "Llama 3.2 1B", 16, 2048, 32, 8, 64, 8192, 128256, 1},
    {"3b", "Llama 3.2 3B", 28, 3072, 24, 8, 128, 8192, 128256, 1},
    {"8b", "Llama 3.1 8B", 32, 4096, 32, 8, 128, 14336, 128256, 0},
    {"70b", "Llama 3.1 70B", 80, 8192, 64, 8, 128, 28672, 128256, 0},
};

const plan_shape *plan_shape_find(const char *name) {
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!strcmp(shapes[i].name, name)) return &shapes[i];
    return NULL;
}

const char *plan_shape_names(void) {
    return "1b, 3b, 8b, 70b";
}

void plan_shape_of_model(const cpulm_model *m, plan_shape *out) {
    cpulm_model_info in;
    cpulm_model_get_info(m, &in);
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", in.arch);
    snprintf(out->desc, sizeof out->desc, "%s", in.name[0] ? in.name : in.arch);
    out->n_layer = in.n_layer;
    out->n_embd = in.n_embd;
    out->n_head = in.n_head;
    out->n_head_kv = in.n_head_kv;
    out->head_dim = in.head_dim;
    out->n_ff = in.n_ff;
    out->n_vocab = in.n_vocab;
    out->tied = 1;
    const char *name;
    for (int32_t i = 0; i < in.n_tensors; i++)
        if (cpulm_model_tensor(m, i, &name, NULL, NULL, NULL) == CPULM_OK &&
            !strcmp(name, "output.weight"))
            out->tied = 0;
}

/* ---- weights ---- */

typedef enum wt { WT_F32, WT_F16, WT_Q4_0, WT_Q8_0, WT_Q4_K, WT_Q5_K, WT_Q6_K } wt;

/* elements per block and bytes per block of the GGUF formats */
static const struct {
    int block, size;
} wt_fmt[] = {
    [WT_F32] = {1, 4},      [WT_F16] = {1, 2},      [WT_Q4_0] = {32, 18}, [WT_Q8_0] = {32, 34},
    [WT_Q4_K] = {256, 144}, [WT_Q5_K] = {256, 176}, [WT_Q6_K] = {256, 210},
};

typedef enum ftype { FT_Q4_0, FT_Q8_0, FT_Q4_K_M, FT_F16, FT_BF16, FT_COUNT } ftype;
static const char *ftype_names[FT_COUNT] = {"q4_0", "q8_0", "q4_k_m", "f16", "bf16"};
static const wt ftype_base[FT_COUNT] = {WT_Q4_0, WT_Q8_0, WT_Q4_K, WT_F16, WT_F16};

const char *plan_type_names(void) {
    return "q4_0, q8_0, q4_k_m, f16, bf16";
}

static uint64_t tensor_bytes(wt t, int64_t ne0, int64_t ne1) {
    return (uint64_t)ne1 * (uint64_t)(ne0 / wt_fmt[t].block) * (uint64_t)wt_fmt[t].size;
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers, and every third
 * layer in between, get more bits in the _M mixes. */
static int more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* The type of the output matrix (or of a tied embedding, which serves as it). */
static wt output_type(ftype f) {
    return f == FT_Q4_0 || f == FT_Q4_K_M ? WT_Q6_K : ftype_base[f];
}

static wt attn_v_type(ftype f, int il, int n_layer) {
    if (f != FT_Q4_K_M) return ftype_base[f];
    if (more_bits(il, n_layer)) return WT_Q6_K;
    return n_layer == 80 ? WT_Q5_K : WT_Q4_K; /* llama.cpp's 70B rule: attn_v is 8x smaller */
}

static wt ffn_down_type(ftype f, int il, int n_layer) {
    return f == FT_Q4_K_M && more_bits(il, n_layer) ? WT_Q6_K : ftype_base[f];
}

static void add(plan_weights *w, wt t, int64_t ne0, int64_t ne1) {
    w->bytes += tensor_bytes(t, ne0, ne1);
    w->n_params += ne0 * ne1;
}

int plan_weights_of(const plan_shape *s, const char *type, plan_weights *out) {
    int f = 0;
    while (f < FT_COUNT && strcmp(ftype_names[f], type)) f++;
    if (f == FT_COUNT) return -1;
    wt base = ftype_base[f];
    int64_t E = s->n_embd, qd = (int64_t)s->n_head * s->head_dim,
            kvd = (int64_t)s->n_head_kv * s->head_dim;
    memset(out, 0, sizeof *out);
    add(out, s->tied ? output_type((ftype)f) : base, E, s->n_vocab); /* token_embd */
    if (!s->tied) add(out, output_type((ftype)f), E, s->n_vocab);
    add(out, WT_F32, E, 1); /* output_norm */
    for (int il = 0; il < s->n_layer; il++) {
        add(out, WT_F32, E, 2); /* attn_norm, ffn_norm */
        add(out, base, E, qd);  /* attn_q */
        add(out, base, E, kvd); /* attn_k */
        add(out, attn_v_type((ftype)f, il, s->n_layer), E, kvd);
        add(out, base, qd, E);              /* attn_output */
        add(out, base, E, 2 * (int64_t)s->n_ff); /* ffn_gate, ffn_up */
        add(out, ffn_down_type((ftype)f, il, s->n_layer), s->n_ff, E);
    }
    return 0;
}

/* ---- KV, scratch, overhead ---- */

uint64_t plan_kv_bytes_per_token(const plan_shape *s, cpulm_kv_type t) {
    wt w = t == CPULM_KV_F32 ? WT_F32 : t == CPULM_KV_Q8_0 ? WT_Q8_0 : WT_F16;
    return 2 * (uint64_t)s->n_layer * tensor_bytes(w, (int64_t)s->n_head_kv * s->head_dim, 1);
}

/* Mirrors alloc_scratch in src/context.c. */
uint64_t plan_compute_bytes(const plan_shape *s, int32_t n_batch, int32_t n_ctx,
                            int32_t n_outputs, int32_t n_threads) {
    uint64_t B = (uint64_t)n_batch, qd = (uint64_t)s->n_head * s->head_dim,
             kvd = (uint64_t)s->n_head_kv * s->head_dim, E = (uint64_t)s->n_embd,
             F = (uint64_t)s->n_ff;
    uint64_t widest = E > F ? E : F;
    if (qd > widest) widest = qd;
    if (n_outputs > n_batch) n_outputs = n_batch;
    uint64_t acts = 4 * B * (E + widest + 2 * qd + 2 * kvd + 2 * F); /* x xn q att kc vc g u */
    uint64_t actq = (widest * 4 + 63) / 64 * 64 * B;
    uint64_t scores = 4 * (((uint64_t)n_ctx + (uint64_t)s->head_dim + 15) / 16 * 16) *
                      (uint64_t)n_threads;
    uint64_t small = 4 * ((uint64_t)s->head_dim / 2 + 1) + 12 * B + 4 * (uint64_t)n_outputs;
    uint64_t logits = 4 * (uint64_t)n_outputs * (uint64_t)s->n_vocab;
    return acts + actq + scores + small + logits;
}

uint64_t plan_overhead_bytes(uint64_t weight_bytes) {
    return (100ull << 20) + weight_bytes / 4096 * 8;
}

void plan_memory_of(const plan_shape *s, uint64_t weight_bytes, int32_t n_ctx,
                    int32_t n_parallel, cpulm_kv_type kv, int32_t n_batch, int32_t n_threads,
                    plan_memory *out) {
    out->weights = weight_bytes;
    out->kv_per_token = plan_kv_bytes_per_token(s, kv);
    out->kv_total = out->kv_per_token * (uint64_t)n_ctx * (uint64_t)n_parallel;
    int32_t nb = n_batch > n_parallel ? n_batch : n_parallel;
    out->compute = plan_compute_bytes(s, nb, n_ctx, n_parallel, n_threads);
    out->overhead = plan_overhead_bytes(weight_bytes);
    out->total = out->weights + out->kv_total + out->compute + out->overhead;
}

/* ---- prices ---- */

static void header_field(const char *line, const char *key, char *dst, size_t cap) {
    size_t k = strlen(key);
    const char *p = line + 1 + strspn(line + 1, " \t");
    if (strncmp(p, key, k)) return;
    p += k + strspn(p + k, " \t");
    snprintf(dst, cap, "%.*s", (int)strcspn(p, "\r\n"), p);
}

static int parse_row(char *line, plan_instance *in) {
    char *save = NULL, *f[6];
    int n = 0;
    for (char *t = strtok_r(line, " \t\r", &save); t && n < 6; t = strtok_r(NULL, " \t\r", &save))
        f[n++] = t;
    if (n != 5 || strlen(f[0]) >= sizeof in->name || strlen(f[3]) >= sizeof in->arch) return -1;
    char *e1, *e2, *e3;
    errno = 0;
    long vcpu = strtol(f[1], &e1, 10);
    double mem = strtod(f[2], &e2), usd = strtod(f[4], &e3);
    if (errno || *e1 || *e2 || *e3 || vcpu < 1 || vcpu > 100000 || !(mem > 0) || !(usd > 0))
        return -1;
    snprintf(in->name, sizeof in->name, "%s", f[0]);
    snprintf(in->arch, sizeof in->arch, "%s", f[3]);
    in->vcpu = (int32_t)vcpu;
    in->mem_gib = mem;
    in->usd_hour = usd;
    return 0;
}

int plan_prices_parse(const char *text, plan_prices *out, char *err, size_t cap) {
    memset(out, 0, sizeof *out);
    int line_no = 0;
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), p);
        p += n + (p[n] == '\n');
        line_no++;
        if (line[0] == '#') {
            header_field(line, "date:", out->date, sizeof out->date);
            header_field(line, "source:", out->source, sizeof out->source);
            continue;
        }
        if (strspn(line, " \t\r") == strlen(line) || !strncmp(line, "instance", 8)) continue;
        plan_instance *nv = realloc(out->v, sizeof *nv * (size_t)(out->n + 1));
        if (!nv) {
            snprintf(err, cap, "out of memory");
            return -1;
        }
        out->v = nv;
        if (parse_row(line, &out->v[out->n])) {
            snprintf(err, cap, "line %d: want 'instance vcpu memory_gib arch usd_per_hour', got '%s'",
                     line_no, line);
            plan_prices_release(out);
            return -1;
        }
        out->n++;
    }
    return 0;
}

/* --prices, $CPULM_PRICES, then data/prices.tsv next to the build or install tree, then ./ */
int plan_prices_locate(const char *flag, char *out, size_t cap) {
    const char *env = getenv("CPULM_PRICES");
    if (flag || (env && *env)) {
        snprintf(out, cap, "%s", flag ? flag : env);
        return 0;
    }
    char exe[2048];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char *rel[] = {"../data/prices.tsv", "../share/cpulm/prices.tsv"};
    if (n > 0) {
        exe[n] = 0;
        char *dir = dirname(exe);
        for (int i = 0; i < 2; i++) {
            char path[4096], real[PATH_MAX];
            snprintf(path, sizeof path, "%s/%s", dir, rel[i]);
            snprintf(out, cap, "%s", realpath(path, real) ? real : path);
            if (access(out, R_OK) == 0) return 0;
        }
    }
    snprintf(out, cap, "data/prices.tsv");
    return access(out, R_OK) == 0 ? 0 : -1;
}

int plan_prices_load(const char *path, plan_prices *out, char *err, size_t cap) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, cap, "%s: %s", path, strerror(errno));
        return -1;
    }
    char *text = malloc(1 << 20);
    size_t n = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (!text) {
        snprintf(err, cap, "out of memory");
        return -1;
    }
    text[n] = 0;
    char msg[384];
    int rc = plan_prices_parse(text, out, msg, sizeof msg);
    if (rc) snprintf(err, cap, "%s: %s", path, msg);
    free(text);
    return rc;
}

void plan_prices_release(plan_prices *p) {
    free(p->v);
    memset(p, 0, sizeof *p);
}

const plan_instance *plan_prices_find(const plan_prices *p, const char *name) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->v[i].name, name)) return &p->v[i];
    return NULL;
}

uint64_t plan_usable_bytes(const plan_instance *in) {
    double b = in->mem_gib * 0.9 * 1073741824.0 - 1073741824.0;
    return b > 0 ? (uint64_t)b : 0;
}

static const plan_prices *sort_prices; /* qsort has no context argument */

static int cmp_instance(const void *a, const void *b) {
    const plan_instance *x = &sort_prices->v[*(const int *)a], *y = &sort_prices->v[*(const int *)b];
    if (x->usd_hour != y->usd_hour) return x->usd_hour < y->usd_hour ? -1 : 1;
    if (x->mem_gib != y->mem_gib) return x->mem_gib < y->mem_gib ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int same_family(const char *a, const char *b) {
    size_t na = strcspn(a, "."), nb = strcspn(b, ".");
    return na == nb && !strncmp(a, b, na);
}

int plan_fitting(const plan_prices *p, uint64_t need_bytes, int one_per_family, int *idx,
                 int cap) {
    int *all = malloc(sizeof(int) * (size_t)(p->n ? p->n : 1)), n = 0, k = 0;
    if (!all) return 0;
    for (int i = 0; i < p->n; i++)
        if (plan_usable_bytes(&p->v[i]) >= need_bytes) all[n++] = i;
    sort_prices = p;
    qsort(all, (size_t)n, sizeof(int), cmp_instance);
    for (int i = 0; i < n && k < cap; i++) {
        int dup = 0;
        for (int j = 0; one_per_family && j < k; j++)
            dup |= same_family(p->v[idx[j]].name, p->v[all[i]].name);
        if (!dup) idx[k++] = all[i];
    }
    free(all);
    return k;
}

/* ---- cost ---- */

double plan_usd_per_mtok(double usd_per_hour, double tokens_per_s) {
    return tokens_per_s > 0 ? usd_per_hour / (tokens_per_s * 3600.0) * 1e6 : 0;
}

double plan_tokens_per_usd(double usd_per_hour, double tokens_per_s) {
    return usd_per_hour > 0 ? tokens_per_s * 3600.0 / usd_per_hour : 0;
}
