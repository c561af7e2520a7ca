/* cmd_synth.c: `cpulm synth`: writes a llama-architecture GGUF with random weights of a real
 * model's shape (src/synth.h), for benchmarks on machines that have no real model. */
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common.h"
#include "options.h"
#include "progress.h"
#include "tools_api.h"

static void synth_usage(FILE *f) {
    fprintf(f, "usage: cpulm synth --shape NAME --type TYPE -o FILE [options]\n");
    cli_help(f, "synth");
}

typedef struct synth_opts {
    const char *shape, *type, *out;
    int layers, embd, ff, heads, kv_heads, vocab, ctx, untied, fim, rerank, threads, progress;
    const char *arch;
    int head_dim, experts, experts_used, expert_ff, yarn_orig_ctx, window;
    int swa, swa_period; /* -1: the shape's */
    int k_eq_v, double_wide_mlp, kv_heads_global;
    float yarn, rope_linear, softcap;
    long long seed;
} synth_opts;

/* One row of the table: 0 = ok, else the exit code. */
static int synth_opt(cli *c, int id, const cli_val *v, void *ctx) {
    synth_opts *o = ctx;
    switch (id) {
    case OPT_SHAPE: o->shape = v->s; break;
    case OPT_WTYPE: o->type = v->s; break;
    case OPT_OUT_FILE: o->out = v->s; break;
    case OPT_LAYERS: o->layers = (int)v->i; break;
    case OPT_EMBD: o->embd = (int)v->i; break;
    case OPT_FF: o->ff = (int)v->i; break;
    case OPT_HEADS: o->heads = (int)v->i; break;
    case OPT_KV_HEADS: o->kv_heads = (int)v->i; break;
    case OPT_VOCAB: o->vocab = (int)v->i; break;
    case OPT_TRAIN_CTX: o->ctx = (int)v->i; break;
    case OPT_UNTIED: o->untied = 1; break;
    case OPT_FIM: o->fim = 1; break;
    case OPT_RERANK: o->rerank = 1; break;
    case OPT_MODEL_ARCH: o->arch = v->s; break;
    case OPT_HEAD_DIM: o->head_dim = (int)v->i; break;
    case OPT_EXPERTS: o->experts = (int)v->i; break;
    case OPT_EXPERTS_USED: o->experts_used = (int)v->i; break;
    case OPT_EXPERT_FF: o->expert_ff = (int)v->i; break;
    case OPT_YARN: o->yarn = (float)v->f; break;
    case OPT_YARN_ORIG_CTX: o->yarn_orig_ctx = (int)v->i; break;
    case OPT_SWA: o->swa = (int)v->i; break;
    case OPT_SWA_PERIOD: o->swa_period = (int)v->i; break;
    case OPT_ROPE_LINEAR: o->rope_linear = (float)v->f; break;
    case OPT_SOFTCAP: o->softcap = (float)v->f; break;
    case OPT_K_EQ_V: o->k_eq_v = (int)v->i; break;
    case OPT_DOUBLE_WIDE_MLP: o->double_wide_mlp = (int)v->i; break;
    case OPT_KV_HEADS_GLOBAL: o->kv_heads_global = (int)v->i; break;
    case OPT_WINDOW: o->window = (int)v->i; break;
    case OPT_SEED:
        if (v->i >= 0) o->seed = v->i;
        break;
    case OPT_THREADS: o->threads = (int)v->i; break;
    case OPT_PROGRESS: o->progress = 1; break;
    case OPT_NO_PROGRESS: o->progress = 0; break;
    default: cli_unhandled(c, v); return EXIT_USAGE;
    }
    return 0;
}

static int parse_synth(int argc, char **argv, synth_opts *o) {
    cli c = {.cmd = "synth", .argc = argc, .argv = argv};
    if (cli_parse(&c, synth_usage, synth_opt, o)) return EXIT_USAGE;
    if (!o->shape || !o->out) {
        fprintf(stderr, "cpulm synth: --shape and -o are required\n");
        return EXIT_USAGE;
    }
    return 0;
}

/* The shape's numbers with the command-line overrides applied. */
static int make_params(const synth_opts *o, cpulm_synth_params *p) {
    if (cpulm_synth_shape(o->shape, p) != CPULM_OK) {
        fprintf(stderr, "cpulm synth: unknown shape '%s' (see --help)\n", o->shape);
        return EXIT_USAGE;
    }
    if (o->type) {
        int t = cpulm_dtype_from_name(o->type);
        if (t < 0) {
            fprintf(stderr, "cpulm synth: unknown type '%s'\n", o->type);
            return EXIT_USAGE;
        }
        p->type = (cpulm_dtype)t;
    }
    if (o->layers) cpulm_synth_set_layers(p, o->layers);
    if (o->embd) p->hp.n_embd = o->embd;
    if (o->ff) p->hp.n_ff = o->ff;
    if (o->heads) p->hp.n_head = o->heads;
    if (o->kv_heads) p->hp.n_head_kv = o->kv_heads;
    if (o->vocab) p->hp.n_vocab = o->vocab;
    if (o->ctx) p->hp.n_ctx_train = o->ctx;
    if (o->untied) p->tied = 0;
    p->fim = o->fim;
    p->rerank = o->rerank;
    if (o->arch && strstr(o->arch, "bert")) p->hp.norm_eps = 1e-12f; /* BERT's LayerNorm epsilon */
    if (o->arch) p->arch = o->arch;
    if (o->head_dim) p->hp.head_dim = o->head_dim;
    if (o->experts) p->hp.n_expert = o->experts;
    if (o->experts_used) p->hp.n_expert_used = o->experts_used;
    if (o->expert_ff) p->hp.n_ff_exp = o->expert_ff;
    if (o->yarn) p->yarn_factor = o->yarn; /* else the shape's (gpt-oss has YaRN) */
    if (o->yarn_orig_ctx) p->yarn_orig_ctx = o->yarn_orig_ctx;
    if (o->window) p->hp.n_swa = o->window;
    if (o->swa >= 0) p->hp.n_swa = o->swa;
    if (o->swa_period >= 0) p->swa_period = o->swa_period;
    if (o->rope_linear >= 0) p->rope_linear = o->rope_linear;
    if (o->softcap > 0) p->hp.final_softcap = o->softcap;
    p->k_eq_v = o->k_eq_v;
    p->double_wide_mlp = o->double_wide_mlp;
    p->kv_heads_global = o->kv_heads_global;
    p->seed = (uint64_t)o->seed;
    p->n_threads = o->threads;
    cpulm_error err = {0};
    if (cpulm_synth_check(p, &err) != CPULM_OK) {
        fprintf(stderr, "cpulm synth: %s\n", err.msg);
        return EXIT_USAGE;
    }
    return 0;
}

/* An 8B shape takes most of a minute: say how far it got. */
static void show_progress(void *user, int32_t done, int32_t total, uint64_t bytes_done,
                          uint64_t bytes_total) {
    cli_progress_update(user, done == total, "cpulm synth: tensor %d/%d, %.0f/%.0f MiB", done,
                        total, (double)bytes_done / (1 << 20), (double)bytes_total / (1 << 20));
}

int cmd_synth(int argc, char **argv) {
    synth_opts o = {
        .seed = 1, .threads = 2, .progress = -1, .swa = -1, .swa_period = -1, .rope_linear = -1};
    cpulm_synth_params p;
    int rc = parse_synth(argc, argv, &o);
    if (rc || (rc = make_params(&o, &p))) return rc;
    double t0 = cli_now_ms();
    cpulm_error err = {0};
    cli_progress prog;
    cli_progress_init(&prog, o.progress);
    p.progress = show_progress;
    p.progress_user = &prog;
    cpulm_status st = cpulm_synth_write(o.out, &p, &err);
    cli_progress_end(&prog);
    if (st != CPULM_OK) {
        fprintf(stderr, "cpulm synth: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr,
            "cpulm synth: wrote %s: %s (%s), %s, %d layers, embd %d, ff %d, heads %d/%d, "
            "experts %d/%d of ff %d, vocab %d, %.1f MiB of weights in %.1f s\n",
            o.out, p.name, p.arch, cpulm_dtype_name(p.type), p.hp.n_layer, p.hp.n_embd, p.hp.n_ff,
            p.hp.n_head, p.hp.n_head_kv, p.hp.n_expert_used, p.hp.n_expert, p.hp.n_ff_exp,
            p.hp.n_vocab, (double)cpulm_synth_weight_bytes(&p) / (1 << 20),
            (cli_now_ms() - t0) / 1e3);
    return 0;
}
