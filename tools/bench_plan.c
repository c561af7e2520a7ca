/* bench_plan.c: memory and cost arithmetic behind `cpulm plan` (see bench_plan.h). Sizes
 * come from the library's own rules, never a copy: shapes from synth.c's table, weight
 * types from the quantizer's rules (quantize_plan.c), KV and scratch from memory.c, the
 * function cpulm_ctx_new sizes its buffers with. The tests check them against hand-computed
 * values and against the byte sizes of real quantized files. */
#define _GNU_SOURCE
#include "bench_plan.h"
#include "textfile.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- shapes: synth.c's table, the one list of model shapes ---- */

/* The plan's shapes are the real models' ones (tiny, tiny-moe and custom are synth's test
 * shapes). */
static int planned(const cpulm_shape_preset *p) {
    return strncmp(p->name, "tiny", 4) && strcmp(p->name, "custom");
}

static int shape_of_preset(const cpulm_shape_preset *p, plan_shape *out) {
    cpulm_synth_params sp;
    if (!planned(p) || cpulm_synth_shape(p->name, &sp) != CPULM_OK) return -1;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", p->name);
    snprintf(out->desc, sizeof out->desc, "%s", p->desc);
    cpulm_hparams hp;
    cpulm_synth_hparams(&sp, &hp);
    out->hp = hp;
    out->tied = p->p.tied;
    snprintf(out->arch, sizeof out->arch, "%s", p->p.arch);
    return 0;
}

const plan_shape *plan_shape_find(const char *name) {
    static plan_shape found[32]; /* one slot per preset: a returned pointer stays valid */
    const cpulm_shape_preset *p;
    for (int i = 0; i < 32 && (p = cpulm_shape_preset_at(i)) != NULL; i++)
        if (!strcmp(p->name, name)) return shape_of_preset(p, &found[i]) ? NULL : &found[i];
    return NULL;
}

const char *plan_shape_names(void) {
    static char names[512];
    if (!names[0]) {
        size_t n = 0;
        const cpulm_shape_preset *p;
        for (int i = 0; (p = cpulm_shape_preset_at(i)) != NULL; i++)
            if (planned(p))
                n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", n ? ", " : "", p->name);
    }
    return names;
}

void plan_shape_of_model(const cpulm_model *m, plan_shape *out) {
    cpulm_model_info in;
    cpulm_model_get_info(m, &in);
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", in.arch);
    snprintf(out->desc, sizeof out->desc, "%s", in.name[0] ? in.name : in.arch);
    out->hp = m->hp;
    snprintf(out->arch, sizeof out->arch, "%s", in.arch);
    out->tied = 1;
    const char *name;
    for (int32_t i = 0; i < in.n_tensors; i++)
        if (cpulm_model_tensor(m, i, &name, NULL, NULL, NULL) == CPULM_OK &&
            !strcmp(name, "output.weight"))
            out->tied = 0;
}

/* ---- weights: the quantizer's own rules (quantize_plan.c) over the shape's tensors ---- */

int plan_weights_of(const plan_shape *s, const char *type, plan_weights *out) {
    const cpulm_qplan_preset *preset = cpulm_qplan_preset_find(type);
    if (!preset) return -1;
    cpulm_synth_params sp;
    cpulm_synth_shape("custom", &sp);
    sp.hp = s->hp; /* synth reads the shape's fields and ignores the derived ones */
    sp.tied = s->tied;
    if (s->arch[0]) sp.arch = s->arch; /* the architecture's tensors (arch.c) */
    memset(out, 0, sizeof *out);
    return cpulm_synth_quantized_size(&sp, preset, &out->bytes, &out->n_params, NULL) ? -1 : 0;
}

const char *plan_type_names(void) {
    static char names[256];
    if (!names[0]) {
        size_t n = 0;
        const cpulm_qplan_preset *p;
        for (int i = 0; (p = cpulm_qplan_preset_at(i)) != NULL; i++)
            n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", n ? ", " : "", p->name);
    }
    return names;
}

/* ---- KV, scratch, overhead: memory.c, the computation cpulm_ctx_new sizes itself by ---- */

uint64_t plan_kv_bytes_per_token(const plan_shape *s, cpulm_kv_type t) {
    return cpulm_mem_kv_bytes(&s->hp, 1, t);
}

int32_t plan_kv_layers(const plan_shape *s) {
    return s->hp.ssm_heads ? s->hp.n_layer_attn : s->hp.n_layer - s->hp.n_kv_shared;
}

static cpulm_mem_ctx mem_ctx(int32_t n_batch, int32_t n_ctx, int32_t n_seq, int32_t n_outputs,
                             int32_t n_threads, cpulm_kv_type kv) {
    if (n_outputs > n_batch) n_outputs = n_batch;
    return (cpulm_mem_ctx){.n_ctx = n_ctx,
                           .n_seq_max = n_seq,
                           .n_batch = n_batch,
                           .n_outputs_max = n_outputs,
                           .n_threads = n_threads,
                           .kv_type = kv};
}

uint64_t plan_compute_bytes(const plan_shape *s, int32_t n_batch, int32_t n_ctx, int32_t n_outputs,
                            int32_t n_threads) {
    const cpulm_mem_ctx c = mem_ctx(n_batch, n_ctx, 1, n_outputs, n_threads, CPULM_KV_F16);
    cpulm_mem_scratch sc;
    cpulm_mem_scratch_of(&s->hp, &c, &sc);
    return cpulm_mem_scratch_total(&sc);
}

uint64_t plan_overhead_bytes(uint64_t weight_bytes) {
    return (100ull << 20) + weight_bytes / 4096 * 8;
}

void plan_memory_of(const plan_shape *s, uint64_t weight_bytes, int32_t n_ctx, int32_t n_parallel,
                    cpulm_kv_type kv, int32_t n_batch, int32_t n_threads, plan_memory *out) {
    /* a server runs batches of at least one token per sequence */
    const int32_t nb = n_batch > n_parallel ? n_batch : n_parallel;
    const cpulm_mem_ctx c = mem_ctx(nb, n_ctx, n_parallel, n_parallel, n_threads, kv);
    cpulm_memory m;
    cpulm_mem_need(&s->hp, weight_bytes, &c, &m);
    out->weights = m.weights;
    out->kv_per_token = m.kv_per_token;
    out->kv_total = m.kv;
    out->compute = m.scratch;
    out->state = m.state;
    out->overhead = plan_overhead_bytes(weight_bytes);
    out->total = m.total + out->overhead;
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
    char *save = NULL, *f[9];
    int n = 0;
    for (char *t = strtok_r(line, " \t\r", &save); t && n < 9; t = strtok_r(NULL, " \t\r", &save))
        f[n++] = t;
    if ((n != 5 && n != 8) || strlen(f[0]) >= sizeof in->name || strlen(f[3]) >= sizeof in->arch)
        return -1;
    memset(in, 0, sizeof *in);
    if (n == 8) {
        if (strlen(f[5]) >= sizeof in->gpu || strlen(f[6]) >= sizeof in->date ||
            strlen(f[7]) >= sizeof in->source)
            return -1;
        snprintf(in->gpu, sizeof in->gpu, "%s", strcmp(f[5], "-") ? f[5] : "");
        snprintf(in->date, sizeof in->date, "%s", f[6]);
        snprintf(in->source, sizeof in->source, "%s", f[7]);
    }
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
            snprintf(err, cap,
                     "line %d: want 'instance vcpu memory_gib arch usd_per_hour [gpu date "
                     "source]', got '%s'",
                     line_no, line);
            plan_prices_release(out);
            return -1;
        }
        out->n++;
    }
    return 0;
}

/* --prices, $CPULM_PRICES, then data/prices.tsv next to the build or install tree, then ./ */
int plan_data_locate(const char *file, const char *flag, const char *env_name, char *out,
                     size_t cap) {
    const char *env = env_name ? getenv(env_name) : NULL;
    if (flag || (env && *env)) {
        snprintf(out, cap, "%s", flag ? flag : env);
        return 0;
    }
    char exe[2048];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char *rel[] = {"../data/", "../share/cpulm/"};
    if (n > 0) {
        exe[n] = 0;
        char *dir = dirname(exe);
        for (int i = 0; i < 2; i++) {
            char path[4096], real[PATH_MAX];
            snprintf(path, sizeof path, "%s/%s%s", dir, rel[i], file);
            snprintf(out, cap, "%s", realpath(path, real) ? real : path);
            if (access(out, R_OK) == 0) return 0;
        }
    }
    snprintf(out, cap, "data/%s", file);
    return access(out, R_OK) == 0 ? 0 : -1;
}

int plan_prices_locate(const char *flag, char *out, size_t cap) {
    return plan_data_locate("prices.tsv", flag, "CPULM_PRICES", out, cap);
}

int plan_prices_load(const char *path, plan_prices *out, char *err, size_t cap) {
    memset(out, 0, sizeof *out);
    char *text;
    if (textfile_read(path, 1 << 20, &text, NULL, err, cap)) return -1;
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
    const plan_instance *x = &sort_prices->v[*(const int *)a],
                        *y = &sort_prices->v[*(const int *)b];
    if (x->usd_hour != y->usd_hour) return x->usd_hour < y->usd_hour ? -1 : 1;
    if (x->mem_gib != y->mem_gib) return x->mem_gib < y->mem_gib ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int same_family(const char *a, const char *b) {
    size_t na = strcspn(a, "."), nb = strcspn(b, ".");
    return na == nb && !strncmp(a, b, na);
}

int plan_fitting(const plan_prices *p, uint64_t need_bytes, int one_per_family, int *idx, int cap) {
    int *all = malloc(sizeof(int) * (size_t)(p->n ? p->n : 1)), n = 0, k = 0;
    if (!all) return 0;
    for (int i = 0; i < p->n; i++)
        if (!p->v[i].gpu[0] && plan_usable_bytes(&p->v[i]) >= need_bytes) all[n++] = i;
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

void plan_shape_prompt_counts(const plan_shape *s, double *io_per_token, double *attn_per_key) {
    const cpulm_hparams *h = &s->hp;
    const double d = h->n_embd, q = (double)h->n_head * h->head_dim,
                 kv = (double)h->n_head_kv * h->head_dim;
    const int dense = h->n_expert == 0 && h->n_layer_recr == 0 && h->n_ff > 0;
    /* q, k, v, o, then gate, up, down: each product's inputs and outputs */
    *io_per_token = dense ? h->n_layer * ((d + q) + 2 * (d + kv) + (q + d) + 3 * (d + h->n_ff)) : 0;
    *attn_per_key = dense ? 4.0 * q * h->n_layer : 0;
}
