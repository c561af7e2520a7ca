/* cmd_info.c: `cpulm info`: architecture, hyperparameters, tensor types with counts,
 * parameter count, file size and the memory a run needs (weights + KV cache); with --cpu,
 * the CPU features, which kernel level serves each weight type, and the default threads
 * and NUMA placement (the library's own descriptions, so they match what runs). */
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common.h"
#include "options.h"

static void info_usage(FILE *f) {
    fprintf(f,
            "usage: cpulm info [-m MODEL] [-c N] [--parallel N] [--meta] [--cpu [--numa MODE]]\n");
    cli_help(f, "info");
}

static void human(char *buf, size_t cap, double bytes) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (bytes >= 1024 && i < 4) {
        bytes /= 1024;
        i++;
    }
    snprintf(buf, cap, "%.2f %s", bytes, u[i]);
}

static void print_types(const cpulm_model *m, int32_t n_tensors) {
    const char *names[64];
    int counts[64], n_types = 0;
    uint64_t bytes[64];
    for (int32_t i = 0; i < n_tensors; i++) {
        const char *tn;
        uint64_t nb;
        if (cpulm_model_tensor(m, i, NULL, &tn, NULL, &nb) != CPULM_OK) continue; /* i < count */
        int j = 0;
        while (j < n_types && strcmp(names[j], tn))
            j++;
        if (j == n_types && n_types < 64) {
            names[n_types] = tn;
            counts[n_types] = 0;
            bytes[n_types++] = 0;
        }
        if (j < n_types) {
            counts[j]++;
            bytes[j] += nb;
        }
    }
    printf("tensor types:\n");
    for (int j = 0; j < n_types; j++) {
        char h[32];
        human(h, sizeof h, (double)bytes[j]);
        printf("  %-8s %5d tensors  %s\n", names[j], counts[j], h);
    }
}

/* The library's own estimate (cpulm_model_memory): what a context of n_ctx tokens for n_par
 * sequences allocates, with the f16 cache and, for comparison, the q8_0 one. */
static void print_memory(const cpulm_model *m, int32_t n_ctx, int32_t n_par) {
    cpulm_ctx_params p = cpulm_ctx_default_params();
    p.n_ctx = n_ctx;
    p.n_seq_max = n_par;
    if (cpulm_model_is_encoder(m)) p.embeddings = CPULM_EMBD_ONLY; /* it computes no logits */
    cpulm_memory m16, m8;
    p.kv_type = CPULM_KV_F16;
    cpulm_status s = cpulm_model_memory(m, &p, &m16);
    p.kv_type = CPULM_KV_Q8_0;
    if (s == CPULM_OK) s = cpulm_model_memory(m, &p, &m8);
    if (s != CPULM_OK) {
        printf("  ctx %7d x %d seq: %s\n", n_ctx, n_par, cpulm_status_str(s));
        return;
    }
    char w[32], kv[32], kv8[32], sc[32], tot[32], st[64] = "";
    human(w, sizeof w, (double)m16.weights);
    human(kv, sizeof kv, (double)m16.kv);
    if (m8.kv_per_token)
        human(kv8, sizeof kv8, (double)m8.kv);
    else
        snprintf(kv8, sizeof kv8, "n/a for"); /* KV rows not a multiple of q8_0's 32 */
    human(sc, sizeof sc, (double)m16.scratch);
    human(tot, sizeof tot, (double)m16.total);
    if (m16.state) { /* hybrid models: the recurrent layers' fixed-size state */
        char b[32];
        human(b, sizeof b, (double)m16.state);
        snprintf(st, sizeof st, " + recurrent state %s", b);
    }
    printf("  ctx %7d x %d seq: weights %s + KV cache %s (f16; %s q8_0)%s + scratch %s = %s\n",
           n_ctx, n_par, w, kv, kv8, st, sc, tot);
}

/* Prints one of the library's describe texts (kernel table, threads and NUMA). */
static int print_describe(cpulm_status (*fn)(void *, char *, size_t, size_t *), void *arg) {
    size_t need = 0;
    fn(arg, NULL, 0, &need);
    char *buf = malloc(need ? need : 1);
    if (!buf || fn(arg, buf, need, NULL) != CPULM_OK) {
        fprintf(stderr, "cpulm info: out of memory\n");
        free(buf);
        return 1;
    }
    fputs(buf, stdout);
    free(buf);
    return 0;
}

static cpulm_status kernels_text(void *arg, char *buf, size_t cap, size_t *n) {
    (void)arg;
    return cpulm_kernel_describe(buf, cap, n);
}

static cpulm_status numa_text(void *arg, char *buf, size_t cap, size_t *n) {
    return cpulm_numa_describe(*(const cpulm_numa *)arg, buf, cap, n);
}

static int print_cpu(cpulm_numa numa) {
    int rc = print_describe(kernels_text, NULL);
    return rc ? rc : print_describe(numa_text, &numa);
}

typedef struct info_opts {
    const char *model;
    int n_ctx, n_par, meta, cpu;
    cpulm_numa numa;
} info_opts;

static int info_opt(cli *c, int id, const cli_val *v, void *ctx) {
    info_opts *o = ctx;
    switch (id) {
    case OPT_MODEL: o->model = v->s; break;
    case OPT_CTX: o->n_ctx = (int)v->i; break;
    case OPT_PARALLEL: o->n_par = (int)v->i; break;
    case OPT_META: o->meta = 1; break;
    case OPT_CPU: o->cpu = 1; break;
    case OPT_NUMA: /* the parser checked the name */
        (void)cpulm_numa_parse(v->s, &o->numa);
        o->cpu = 1;
        break;
    default: return cli_unhandled(c, v);
    }
    return 0;
}

int cmd_info(int argc, char **argv) {
    cli c = {.cmd = "info", .argc = argc, .argv = argv};
    info_opts o = {.n_par = 1, .numa = CPULM_NUMA_DEFAULT};
    int rc = cli_parse(&c, info_usage, info_opt, &o);
    if (rc) return rc;
    if (o.cpu) {
        rc = print_cpu(o.numa);
        if (rc || !o.model) return rc;
    }
    const char *path = cli_model_path(o.model);
    if (!path) return EXIT_USAGE;
    cpulm_model *m = cli_load_model(path, 0, NULL);
    if (!m) return cli_load_failed_rc(path);
    cpulm_model_info in;
    cpulm_model_get_info(m, &in);
    char fs[32];
    human(fs, sizeof fs, (double)in.file_size);
    printf("file:          %s (%s, GGUF v%u)\n", path, fs, in.gguf_version);
    printf("architecture:  %s%s%s%s\n", in.arch, in.name[0] ? " (" : "", in.name,
           in.name[0] ? ")" : "");
    printf("type:          %s\n", in.ftype);
    if (in.widened_bytes > 0) {
        char wb[32];
        human(wb, sizeof wb, (double)in.widened_bytes);
        printf("widened:       Q5_0 matrices held as Q8_0 (the same values) for this CPU's "
               "GEMMs: %s more memory\n",
               wb);
    }
    printf("parameters:    %lld (%.3f B)\n", (long long)in.n_params, (double)in.n_params / 1e9);
    if (in.n_expert > 0) {
        char ab[32], wb[32];
        human(ab, sizeof ab, (double)in.active_bytes);
        human(wb, sizeof wb, (double)in.weight_bytes);
        printf("experts:       %d, %d used per token, expert ffn %d\n", in.n_expert,
               in.n_expert_used, in.n_ff_exp);
        printf("active:        %lld parameters (%.3f B) and %s of %s weights read per token\n",
               (long long)in.n_params_active, (double)in.n_params_active / 1e9, ab, wb);
    }
    printf("vocab:         %d\ncontext:       %d (trained)\nembedding:     %d\nlayers:        %d",
           in.n_vocab, in.n_ctx_train, in.n_embd, in.n_layer);
    if (in.n_layer_recurrent > 0) /* hybrid: the recurrent layers keep a fixed-size state */
        printf(" (%d Gated DeltaNet, %d full attention)", in.n_layer_recurrent,
               in.n_layer - in.n_layer_recurrent);
    if (in.n_layer_swa > 0) /* gemma3: most layers see only the last n_swa positions */
        printf(" (%d sliding-window of %d positions, rope base %g; %d global)", in.n_layer_swa,
               in.n_swa, in.rope_freq_base_swa, in.n_layer - in.n_layer_swa);
    printf("\n");
    printf("heads:         %d (kv %d, head dim %d)\nffn:           %d\nrope:          %d dims, "
           "base %g\nrms eps:       %g\n",
           in.n_head, in.n_head_kv, in.head_dim, in.n_ff, in.n_rot, in.rope_freq_base, in.norm_eps);
    print_types(m, in.n_tensors);
    printf("memory to run (weights are mapped, not copied):\n");
    print_memory(m, in.n_ctx_train, o.n_par);
    if (o.n_ctx) print_memory(m, o.n_ctx, o.n_par);
    if (o.meta) {
        printf("metadata:\n");
        char buf[160];
        for (int32_t i = 0; i < cpulm_model_meta_count(m); i++) {
            const char *k = cpulm_model_meta_key(m, i);
            size_t need;
            cpulm_status s = cpulm_model_meta(m, k, buf, sizeof buf, &need);
            printf("  %s = %s%s\n", k, buf, s == CPULM_ERR_TOO_SMALL ? "..." : "");
        }
    }
    cpulm_model_free(m);
    return 0;
}
