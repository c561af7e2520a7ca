/* cmd_synth.c: `cpulm synth`: writes a llama-architecture GGUF with random weights of a real
 * model's shape (src/synth.h), for benchmarks on machines that have no real model. */
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common.h"
#include "progress.h"
#include "tools_api.h"

static void synth_usage(FILE *f) {
    fprintf(f,
            "usage: cpulm synth --shape NAME --type TYPE -o FILE [options]\n"
            "  --shape NAME     1b, 3b, 8b, 70b (Llama-3.x), qwen3-0.6b, qwen3-1.7b, qwen3-4b,\n"
            "                   qwen3-8b, qwen3-30b-a3b (MoE: 128 experts, 8 used), mixtral-8x7b,\n"
            "                   qwen35-9b, qwen35-35b-a3b, qwen3next-80b-a3b (hybrid: Gated\n"
            "                   DeltaNet + gated attention; MoE), gemma3-4b,\n"
            "                   gpt-oss-20b, gpt-oss-120b (sliding windows, sinks, MXFP4\n"
            "                   experts), tiny, tiny-moe, tiny-qwen35, tiny-qwen35moe,\n"
            "                   tiny-qwen3next, tiny-gemma3, tiny-gpt-oss,\n"
            "                   or custom (tiny's numbers; override with the flags)\n"
            "  --type TYPE      q4_0 (default; mxfp4 for gpt-oss), q8_0, f16, bf16, f32, q4_k,\n"
            "                   q6_k, mxfp4 (FFN and expert matrices; Q8_0 for the others)\n"
            "  -o FILE          output GGUF\n"
            "  --layers N --embd N --ff N --heads N --kv-heads N --vocab N --ctx N\n"
            "                   override the shape's numbers (--layers N cuts a big shape for\n"
            "                   benchmarks)\n"
            "  --arch NAME --head-dim N --experts N --experts-used N --expert-ff N\n"
            "                   architecture (llama, qwen2, qwen3, qwen3moe, qwen35, gemma3,\n"
            "                   gpt-oss), head size, experts\n"
            "  --yarn FACTOR --yarn-orig-ctx N\n"
            "                   YaRN rope scaling keys (rope.scaling.type yarn, factor, original\n"
            "                   context length N, default --ctx; gpt-oss shapes have their own)\n"
            "  --window N       gpt-oss: sliding window of the sliding layers\n"
            "  --swa N --swa-period N --rope-linear F --softcap F\n"
            "                   gemma3: sliding window (0: none), the pattern period written as\n"
            "                   attention.sliding_window_pattern (0: not written, the default 6),\n"
            "                   linear rope scaling of the global layers (0: none), the final\n"
            "                   logit soft-cap key (0: not written)\n"
            "  --untied         write a separate output.weight (default: the shape's)\n"
            "  --fim            the last three tokens are <|fim_prefix|>, <|fim_suffix|> and\n"
            "                   <|fim_middle|> (control tokens: a model for /infill tests)\n"
            "  --seed N         PRNG seed (default 1); the file depends only on the options\n"
            "  -t, --threads N  generation threads (default 2)\n"
            "  --progress, --no-progress  live line on stderr: tensors and MiB written (default:\n"
            "                   when stderr is a terminal)\n");
}

typedef struct synth_opts {
    const char *shape, *type, *out;
    int layers, embd, ff, heads, kv_heads, vocab, ctx, untied, fim, threads, progress;
    const char *arch;
    int head_dim, experts, experts_used, expert_ff, yarn_orig_ctx, window;
    int swa, swa_period; /* -1: the shape's */
    float yarn, rope_linear, softcap;
    long long seed;
} synth_opts;

static int parse_size(cli *c, int *out) {
    return cli_int(c, 1, 1 << 24, out);
}

static int parse_synth(int argc, char **argv, synth_opts *o) {
    cli c = {.cmd = "synth", .argc = argc, .argv = argv};
    int ok = 1;
    for (c.i = 1; c.i < argc && ok; c.i++) {
        if (cli_flag(&c, "-h", "--help")) {
            synth_usage(stdout);
            exit(0);
        } else if (cli_flag(&c, "--shape", NULL))
            ok = (o->shape = cli_value(&c)) != NULL;
        else if (cli_flag(&c, "--type", NULL))
            ok = (o->type = cli_value(&c)) != NULL;
        else if (cli_flag(&c, "-o", "--output"))
            ok = (o->out = cli_value(&c)) != NULL;
        else if (cli_flag(&c, "--layers", NULL))
            ok = parse_size(&c, &o->layers);
        else if (cli_flag(&c, "--embd", NULL))
            ok = parse_size(&c, &o->embd);
        else if (cli_flag(&c, "--ff", NULL))
            ok = parse_size(&c, &o->ff);
        else if (cli_flag(&c, "--heads", NULL))
            ok = parse_size(&c, &o->heads);
        else if (cli_flag(&c, "--kv-heads", NULL))
            ok = parse_size(&c, &o->kv_heads);
        else if (cli_flag(&c, "--vocab", NULL))
            ok = parse_size(&c, &o->vocab);
        else if (cli_flag(&c, "--ctx", NULL))
            ok = parse_size(&c, &o->ctx);
        else if (cli_flag(&c, "--untied", NULL))
            o->untied = 1;
        else if (cli_flag(&c, "--fim", NULL))
            o->fim = 1;
        else if (cli_flag(&c, "--arch", NULL))
            ok = (o->arch = cli_value(&c)) != NULL;
        else if (cli_flag(&c, "--head-dim", NULL))
            ok = parse_size(&c, &o->head_dim);
        else if (cli_flag(&c, "--experts", NULL))
            ok = parse_size(&c, &o->experts);
        else if (cli_flag(&c, "--experts-used", NULL))
            ok = parse_size(&c, &o->experts_used);
        else if (cli_flag(&c, "--expert-ff", NULL))
            ok = parse_size(&c, &o->expert_ff);
        else if (cli_flag(&c, "--yarn", NULL))
            ok = cli_float(&c, 1.0, 1000.0, &o->yarn);
        else if (cli_flag(&c, "--yarn-orig-ctx", NULL))
            ok = parse_size(&c, &o->yarn_orig_ctx);
        else if (cli_flag(&c, "--swa", NULL))
            ok = cli_int(&c, 0, 1 << 24, &o->swa);
        else if (cli_flag(&c, "--swa-period", NULL))
            ok = cli_int(&c, 0, 4096, &o->swa_period);
        else if (cli_flag(&c, "--rope-linear", NULL))
            ok = cli_float(&c, 0.0, 1000.0, &o->rope_linear);
        else if (cli_flag(&c, "--softcap", NULL))
            ok = cli_float(&c, 0.0, 1000.0, &o->softcap);
        else if (cli_flag(&c, "--window", NULL))
            ok = parse_size(&c, &o->window);
        else if (cli_flag(&c, "--seed", NULL))
            ok = cli_i64(&c, 0, 0x7FFFFFFFFFFFFFFFLL, &o->seed);
        else if (cli_flag(&c, "-t", "--threads"))
            ok = cli_int(&c, 1, 64, &o->threads);
        else if (cli_progress_flag(&c, &o->progress))
            continue;
        else if (cli_rest(&c))
            return EXIT_USAGE;
    }
    if (!ok) return EXIT_USAGE;
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
    if (o->layers) p->n_layer = o->layers;
    if (o->embd) p->n_embd = o->embd;
    if (o->ff) p->n_ff = o->ff;
    if (o->heads) p->n_head = o->heads;
    if (o->kv_heads) p->n_head_kv = o->kv_heads;
    if (o->vocab) p->n_vocab = o->vocab;
    if (o->ctx) p->n_ctx = o->ctx;
    if (o->untied) p->tied = 0;
    p->fim = o->fim;
    if (o->arch) p->arch = o->arch;
    if (o->head_dim) p->head_dim = o->head_dim;
    if (o->experts) p->n_expert = o->experts;
    if (o->experts_used) p->n_expert_used = o->experts_used;
    if (o->expert_ff) p->n_ff_exp = o->expert_ff;
    if (o->yarn) p->yarn_factor = o->yarn; /* else the shape's (gpt-oss has YaRN) */
    if (o->yarn_orig_ctx) p->yarn_orig_ctx = o->yarn_orig_ctx;
    if (o->window) p->n_swa = o->window;
    if (o->swa >= 0) p->swa.window = o->swa;
    if (o->swa_period >= 0) p->swa.period = o->swa_period;
    if (o->rope_linear >= 0) p->swa.rope_linear = o->rope_linear;
    if (o->softcap > 0) p->swa.softcap = o->softcap;
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
            o.out, p.name, p.arch, cpulm_dtype_name(p.type), p.n_layer, p.n_embd, p.n_ff, p.n_head,
            p.n_head_kv, p.n_expert_used, p.n_expert, p.n_ff_exp, p.n_vocab,
            (double)cpulm_synth_weight_bytes(&p) / (1 << 20), (cli_now_ms() - t0) / 1e3);
    return 0;
}
