/* cmd_plan.c: `cpulm plan`: memory a deployment needs (weights, KV cache, compute buffers,
 * overhead), the cheapest instances of the price table that hold it, and the cost per
 * token from a measured (--bench) or given throughput. Every figure prints its assumption.
 * The arithmetic lives in bench_plan.c. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench.h"
#include "bench_plan.h"
#include "plan_estimate.h"
#include "commands.h"
#include "common.h"
#include "options.h"

typedef struct plan_opts {
    const char *model, *shape, *type, *instance, *prices, *arch, *family;
    char type_lc[32];
    int n_ctx, n_par, n_batch, n_threads, bench;
    float price, tps, tps_batched;
    bench_list kv;
    plan_est_opts est;    /* --workload and the estimate's options */
    const char *check;    /* --check FILE */
    const char *measured; /* --measured FILE: with --check, a loadtest SLO search */
} plan_opts;

static void plan_usage(FILE *f) {
    fprintf(f, "usage: cpulm plan (-m MODEL | --shape NAME --type TYPE) [options]\n");
    cli_help(f, "plan");
    fprintf(
        f, "--instance alone shows whether the deployment fits that instance; with --tps, --bench\n"
           "or --price it also costs tokens on it.\n"
           "Estimates for a workload (performance model; every figure labelled estimated):\n"
           "see --workload; --calibration A --check B checks the model on two "
           "machines.\n" CLI_COMPAT_HELP);
}

/* The estimate's rows: 1 when id was one of them. */
static int est_opt(int id, const cli_val *v, plan_est_opts *e) {
    switch (id) {
    case OPT_WORKLOAD: e->workload = v->s; break;
    case OPT_SLO: e->slo = v->s; break;
    case OPT_CALIBRATION: e->calibration = v->s; break;
    case OPT_INSTANCES: e->instances = v->s; break;
    case OPT_VCPU: e->vcpu = (int)v->i; break;
    case OPT_MAX_BATCH: e->max_batch = (int)v->i; break;
    case OPT_USERS: e->users = (float)v->f; break; /* float, as the flags always were read */
    case OPT_TARGET_RATE: e->target_rate = (float)v->f; break;
    case OPT_BW_FRACTION: e->bw_fraction = (float)v->f; break;
    case OPT_PEAK_FRACTION: e->peak_fraction = (float)v->f; break;
    case OPT_UTILIZATION: e->utilization = (float)v->f; break;
    case OPT_PROMPT_SCALE: e->prompt_scale = (float)v->f; break;
    case OPT_OUTPUT_SCALE: e->output_scale = (float)v->f; break;
    default: return 0;
    }
    return 1;
}

/* One row of the table other than the estimate's; 1 = ok. */
static int plan_opt(cli *c, int id, const cli_val *v, plan_opts *o) {
    char err[128];
    switch (id) {
    case OPT_MODEL: o->model = v->s; break;
    case OPT_SHAPE: o->shape = v->s; break;
    case OPT_WTYPE: o->type = v->s; break;
    case OPT_CTX: return cli_at_least(c, v, 1) && (o->n_ctx = (int)v->i) > 0;
    case OPT_PARALLEL: o->n_par = (int)v->i; break;
    case OPT_BATCH: o->n_batch = (int)v->i; break;
    case OPT_THREADS: o->n_threads = (int)v->i; break;
    case OPT_PRICE: o->price = (float)v->f; break;
    case OPT_INSTANCE: o->instance = v->s; break;
    case OPT_TPS: o->tps = (float)v->f; break;
    case OPT_TPS_BATCHED: o->tps_batched = (float)v->f; break;
    case OPT_CHECK: o->check = v->s; break;
    case OPT_MEASURED: o->measured = v->s; break;
    case OPT_PLAN_BENCH: o->bench = 1; break;
    case OPT_PRICES: o->prices = v->s; break;
    case OPT_CPU_ARCH: o->arch = v->s; break;
    case OPT_FAMILY: o->family = v->s; break;
    case OPT_KV: /* one type (the table checked it) */
        o->kv.n = 0;
        return !bench_kv_list_parse(v->s, &o->kv, err, sizeof err);
    default:
        if (est_opt(id, v, &o->est)) break;
        cli_unhandled(c, v);
        return 0;
    }
    return 1;
}

static int plan_arg(cli *c, int id, const cli_val *v, void *ctx) {
    return plan_opt(c, id, v, ctx) ? 0 : EXIT_USAGE;
}

static int parse_plan(int argc, char **argv, plan_opts *o) {
    cli c = {.cmd = "plan", .argc = argc, .argv = argv};
    *o = (plan_opts){.type = "q4_0", .n_ctx = 4096, .n_par = 1, .n_batch = 512, .n_threads = 16};
    o->est = (plan_est_opts){.bw_fraction = PM_DEFAULT_BW_FRACTION,
                             .peak_fraction = PM_DEFAULT_PEAK_FRACTION,
                             .utilization = 0.8,
                             .vcpu = 16,
                             .max_batch = 256};
    if (cli_parse(&c, plan_usage, plan_arg, o)) return EXIT_USAGE;
    if (o->type) { /* quantize's spelling (Q4_K_M) is accepted: the types are case-blind */
        size_t i = 0;
        for (; o->type[i] && i + 1 < sizeof o->type_lc; i++)
            o->type_lc[i] =
                (char)(o->type[i] >= 'A' && o->type[i] <= 'Z' ? o->type[i] + 32 : o->type[i]);
        o->type_lc[i] = 0;
        o->type = o->type_lc;
    }
    if (o->check) return 0; /* no model needed */
    if (!o->model == !o->shape) {
        fprintf(stderr, "cpulm plan: give -m MODEL or --shape NAME (one of them)\n");
        return EXIT_USAGE;
    }
    if (o->shape && !plan_shape_find(o->shape)) {
        fprintf(stderr, "cpulm plan: unknown shape '%s' (known: %s)\n", o->shape,
                plan_shape_names());
        return EXIT_USAGE;
    }
    if (o->bench && !o->model) {
        fprintf(stderr,
                "cpulm plan: --bench needs -m MODEL to run (for a shape, make a file with "
                "`cpulm synth --shape %s`)\n",
                o->shape);
        return EXIT_USAGE;
    }
    return -1;
}

static void human(double v, char *buf, size_t cap) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (v >= 1024 && i < 4)
        v /= 1024, i++;
    snprintf(buf, cap, "%.2f %s", v, u[i]);
}

static const char *type_rule(const char *type) {
    if (!strcmp(type, "q4_0")) return "llama.cpp's q4_0 mix: 2-D weights Q4_0, output matrix Q6_K";
    if (!strcmp(type, "q4_k_m"))
        return "llama.cpp's Q4_K_M mix: Q4_K, with output, and attn_v/ffn_down of 1/8 + 1/8 + "
               "every 3rd layer, in Q6_K";
    const cpulm_qplan_preset *p = cpulm_qplan_preset_find(type);
    return p ? p->desc : "every 2-D weight in this type, norms F32";
}

/* Prints the memory table; returns the total with the chosen KV type. */
static uint64_t print_memory(const plan_opts *o, const plan_shape *s, uint64_t wbytes,
                             const char *wnote, cpulm_kv_type kv) {
    plan_memory m, m8;
    plan_memory_of(s, wbytes, o->n_ctx, o->n_par, kv, o->n_batch, o->n_threads, &m);
    plan_memory_of(s, wbytes, o->n_ctx, o->n_par, CPULM_KV_Q8_0, o->n_batch, o->n_threads, &m8);
    uint64_t f16_tok = plan_kv_bytes_per_token(s, CPULM_KV_F16);
    char a[32], b[32], c[32];
    printf("| memory | size | assumption |\n| --- | ---: | --- |\n");
    human((double)m.weights, a, sizeof a);
    printf("| weights | %s | %s; mapped read-only, shared by all sequences |\n", a, wnote);
    human((double)f16_tok, a, sizeof a);
    human((double)m8.kv_per_token, b, sizeof b);
    const int32_t n_kv = plan_kv_layers(s), n_recr = s->hp.n_layer - n_kv;
    printf("| KV cache per token | %s (f16), %s (q8_0) | 2 (K, V) x %d %slayers x %d KV heads x "
           "%d dims x 2 bytes (q8_0: 34 bytes per 32 values) |\n",
           a, b, n_kv, n_recr > 0 ? "full-attention " : "", s->hp.n_head_kv, s->hp.head_dim);
    human((double)(f16_tok * (uint64_t)o->n_ctx * (uint64_t)o->n_par), a, sizeof a);
    human((double)m8.kv_total, b, sizeof b);
    printf("| KV cache total | %s (f16), %s (q8_0) | %d tokens x %d sequences, every cell "
           "allocated |\n",
           a, b, o->n_ctx, o->n_par);
    if (m.state > 0) {
        human((double)m.state, a, sizeof a);
        printf("| recurrent state | %s | %d Gated DeltaNet layers x %d sequences: convolution and "
               "delta-rule state, a fixed size per sequence whatever its length |\n",
               a, n_recr, o->n_par);
    }
    human((double)m.compute, a, sizeof a);
    printf("| compute buffers | %s | activations for a batch of %d tokens, attention scores for "
           "%d threads, logits for %d rows (as cpulm_ctx_new allocates) |\n",
           a, o->n_batch > o->n_par ? o->n_batch : o->n_par, o->n_threads, o->n_par);
    human((double)m.overhead, a, sizeof a);
    printf("| runtime overhead | %s | 100 MiB (code, stacks, allocator) + page tables of the "
           "mapping (8 bytes per 4 KiB) |\n",
           a);
    human((double)m.total, a, sizeof a);
    human((double)m8.total, c, sizeof c);
    printf("| **total** | **%s** | KV cache %s; with q8_0 KV: %s |\n\n", a, bench_kv_name(kv), c);
    /* The q8_0 column is what the KV type would save; `cpulm serve` has no KV-type flag yet
     * (issue #11), so say what a deployment can use today. */
    printf("deployable today with `cpulm serve`: f16 KV cache (q8_0 KV is available in run-time "
           "tools such as bench/logits/perplexity, not yet in serve)\n\n");
    return m.total;
}

/* Keeps the instances of --arch / --family (family: the name before the dot, a comma list). */
static int in_list(const char *list, const char *s, size_t n) {
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == n && !strncasecmp(p, s, n)) return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

static void filter_prices(const plan_opts *o, plan_prices *p) {
    int w = 0;
    for (int i = 0; i < p->n; i++) {
        const plan_instance *in = &p->v[i];
        const char *dot = strchr(in->name, '.');
        size_t fam = dot ? (size_t)(dot - in->name) : strlen(in->name);
        if (o->arch && !in_list(o->arch, in->arch, strlen(in->arch))) continue;
        if (o->family && !in_list(o->family, in->name, fam)) continue;
        p->v[w++] = *in;
    }
    p->n = w;
}

/* --instance: does the total fit it? Said loudly when it does not. */
static void print_instance_fit(const plan_opts *o, const plan_prices *p, uint64_t need) {
    const plan_instance *in = plan_prices_find(p, o->instance);
    if (!in) return;
    double usable = (double)plan_usable_bytes(in) / 1073741824.0, gib = (double)need / 1073741824.0;
    printf("instance %s: %d vCPU, %g GiB (%s), %.4f USD/hour; usable %.1f GiB %s the %.2f GiB "
           "needed%s\n\n",
           in->name, in->vcpu, in->mem_gib, in->arch, in->usd_hour, usable,
           usable >= gib ? "holds" : "is LESS than", gib,
           usable >= gib ? ""
                         : ": WARNING: this deployment does not fit; pick a larger "
                           "instance or lower -c/--parallel");
    if (usable < gib)
        fprintf(stderr,
                "cpulm plan: warning: %s (usable %.1f GiB) is too small for the %.2f GiB "
                "this deployment needs\n",
                in->name, usable, gib);
}

static void print_instances(const plan_prices *p, const char *path, uint64_t need) {
    int idx[12];
    int n = plan_fitting(p, need, 1, idx, 12);
    printf("cheapest instance of each family whose memory holds the total (usable = 90%% of RAM "
           "- 1 GiB for the OS; speed is not considered); prices: %s (dated %s, editable)\n\n",
           path, p->date[0] ? p->date : "-");
    if (!n) {
        printf("no instance in the table has enough memory\n\n");
        return;
    }
    printf("| instance | vCPU | memory GiB | arch | USD/hour | usable GiB |\n"
           "| --- | ---: | ---: | --- | ---: | ---: |\n");
    for (int i = 0; i < n; i++) {
        const plan_instance *in = &p->v[idx[i]];
        printf("| %s | %d | %g | %s | %.4f | %.1f |\n", in->name, in->vcpu, in->mem_gib, in->arch,
               in->usd_hour, (double)plan_usable_bytes(in) / 1073741824.0);
    }
    printf("\n");
}

/* Quick measurement: tg32 single stream, and npl 1, 2, 4 .. N parallel sequences. */
static int measure(const cpulm_model *m, int n_par, float *tps, float *tps_batched, int *best_npl) {
    bench_runner br = {.m = m, .attn_fast = CPULM_ATTN_AUTO};
    bench_test t = {
        .kind = BENCH_TG, .n_gen = 32, .n_parallel = 1, .n_batch = 512, .n_ubatch = 512};
    bench_result r;
    bench_summary s;
    char err[256];
    fprintf(stderr, "cpulm plan: measuring tg32 and up to %d parallel sequences...\n", n_par);
    if (bench_run_test(&br, &t, 2, &r, err, sizeof err)) goto fail;
    bench_summarize(&r, &s);
    *tps = (float)s.ts.mean;
    *tps_batched = *tps;
    *best_npl = 1;
    t = (bench_test){
        .kind = BENCH_PAR, .n_prompt = 32, .n_gen = 16, .n_batch = 512, .n_ubatch = 512};
    for (int npl = 2; npl <= n_par; npl = npl * 2 > n_par && npl < n_par ? n_par : npl * 2) {
        t.n_parallel = npl;
        if (bench_run_test(&br, &t, 2, &r, err, sizeof err)) goto fail;
        bench_summarize(&r, &s);
        if (s.tg_ts.mean > *tps_batched) {
            *tps_batched = (float)s.tg_ts.mean;
            *best_npl = npl;
        }
    }
    return 0;
fail:
    fprintf(stderr, "cpulm plan: measurement failed: %s\n", err);
    return -1;
}

static void cost_row(const char *name, double usd, double tps, double tpsb) {
    printf("| %s | %.4f | %.2f | %.4f | %.0f |", name, usd, tps, plan_usd_per_mtok(usd, tps),
           plan_tokens_per_usd(usd, tps));
    if (tpsb > 0)
        printf(" %.2f | %.4f | %.0f |\n", tpsb, plan_usd_per_mtok(usd, tpsb),
               plan_tokens_per_usd(usd, tpsb));
    else
        printf(" - | - | - |\n");
}

static void print_cost(const plan_opts *o, const plan_prices *p, uint64_t need, const char *src,
                       float tps, float tpsb, int npl) {
    char batched[64] = "not given";
    if (tpsb > 0) snprintf(batched, sizeof batched, "%.2f t/s with %d sequences", tpsb, npl);
    printf("cost of generated tokens: single stream %.2f t/s, batched %s (%s); assumes the "
           "machine generates flat out at that speed, billed per hour; prompt tokens are not "
           "counted\n\n",
           tps, batched, src);
    printf("| machine | USD/hour | single t/s | $ per 1M tokens | tokens per $ | batched t/s | $ "
           "per 1M tokens | tokens per $ |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
           "|\n");
    if (o->price > 0 || o->instance) {
        cost_row(o->instance ? o->instance : "given price",
                 o->price > 0 ? o->price : plan_prices_find(p, o->instance)->usd_hour, tps, tpsb);
    } else {
        int idx[12], n = plan_fitting(p, need, 1, idx, 12);
        for (int i = 0; i < n; i++)
            cost_row(p->v[idx[i]].name, p->v[idx[i]].usd_hour, tps, tpsb);
    }
    printf("\n");
}

/* The model's shape and weights, from the file or from --shape/--type. */
static int resolve_model(const plan_opts *o, cpulm_model **m, plan_shape *s, uint64_t *wbytes,
                         char *wnote, size_t cap) {
    if (o->model) {
        if (!(*m = cli_load_model(o->model, 0, NULL))) return cli_load_failed_rc(o->model);
        cpulm_model_info in;
        cpulm_model_get_info(*m, &in);
        plan_shape_of_model(*m, s);
        *wbytes = in.weight_bytes;
        snprintf(wnote, cap, "tensor data of %s (%s, %.3f B parameters)", o->model, in.ftype,
                 (double)in.n_params / 1e9);
        return 0;
    }
    *s = *plan_shape_find(o->shape);
    plan_weights w;
    if (plan_weights_of(s, o->type, &w)) {
        fprintf(stderr, "cpulm plan: unknown type '%s' (known: %s)\n", o->type, plan_type_names());
        return EXIT_USAGE;
    }
    *wbytes = w.bytes;
    snprintf(wnote, cap, "%.3f B parameters; %s", (double)w.n_params / 1e9, type_rule(o->type));
    return 0;
}

/* --workload: the estimated serving table instead of the fitting and cost tables. */
static int estimate(plan_opts *o, const cpulm_model *m, const plan_shape *s, uint64_t wbytes,
                    const plan_prices *p) {
    pm_model_cost mc = {0};
    if (m) {
        int64_t matmul = bench_matmul_params(m), out = bench_output_params(m);
        mc.io_per_token = (double)bench_matmul_io(m);
        mc.attn_flops_per_key = bench_attn_flops(m, 1); /* one query, one key per layer */
        mc.weight_bytes = (double)bench_bytes_per_token(m);
        mc.ops_per_token = 2.0 * (double)matmul;
        mc.ops_per_prompt_token = 2.0 * (double)(matmul - out);
        mc.kv_bytes_per_ctx_token = (double)plan_kv_bytes_per_token(s, CPULM_KV_F16);
    } else {
        plan_weights w;
        plan_weights_of(s, o->type, &w);
        plan_model_cost_of_shape(s, &w, &mc);
    }
    o->est.instance = o->instance;
    return plan_estimate(&o->est, s, wbytes, &mc, p);
}

int cmd_plan(int argc, char **argv) {
    plan_opts o;
    int rc = parse_plan(argc, argv, &o);
    if (rc == 0 && o.check) {
        if (!o.est.calibration) {
            fprintf(stderr, "cpulm plan: --check needs --calibration FILE\n");
            return EXIT_USAGE;
        }
        return plan_check(o.est.calibration, o.check, &o.est, o.measured);
    }
    if (rc >= 0) return rc;
    cpulm_model *m = NULL;
    plan_shape s;
    uint64_t wbytes = 0;
    char wnote[512], path[4096], err[512];
    if ((rc = resolve_model(&o, &m, &s, &wbytes, wnote, sizeof wnote))) return rc;
    plan_prices p = {0};
    int have_prices = plan_prices_locate(o.prices, path, sizeof path) == 0 &&
                      plan_prices_load(path, &p, err, sizeof err) == 0;
    if (!have_prices && (o.prices || o.instance))
        fprintf(stderr, "cpulm plan: %s\n",
                o.prices ? err : "no price table found (--prices FILE)");
    if (o.instance && have_prices && !plan_prices_find(&p, o.instance)) {
        fprintf(stderr, "cpulm plan: instance '%s' is not in %s\n", o.instance, path);
        have_prices = 0;
    }
    rc = (o.prices || o.instance) && !have_prices ? EXIT_USAGE : 0;
    cpulm_kv_type kv = o.kv.n ? (cpulm_kv_type)o.kv.v[0] : CPULM_KV_F16;
    if (!rc) {
        printf("cpulm plan: %s in %s, context %d x %d sequence(s)\n\n", s.desc,
               o.model ? "its file's types" : o.type, o.n_ctx, o.n_par);
        if (o.shape)
            printf("(shape %s: %d layers, %d embd, %d heads / %d KV heads of %d, ffn %d, "
                   "vocab %d%s)\n\n",
                   o.shape, s.hp.n_layer, s.hp.n_embd, s.hp.n_head, s.hp.n_head_kv, s.hp.head_dim,
                   s.hp.n_ff, s.hp.n_vocab, s.tied ? ", tied embeddings" : "");
        uint64_t need = print_memory(&o, &s, wbytes, wnote, kv);
        if (have_prices && o.instance) print_instance_fit(&o, &p, need);
        if (o.est.workload) {
            rc = estimate(&o, m, &s, wbytes, &p);
            plan_prices_release(&p);
            cpulm_model_free(m);
            return rc;
        }
        if (have_prices && (o.arch || o.family)) filter_prices(&o, &p);
        if (have_prices) print_instances(&p, path, need);
        float tps = o.tps, tpsb = o.tps_batched;
        int best = o.n_par;
        char src[256] = "given";
        if (o.bench && measure(m, o.n_par, &tps, &tpsb, &best))
            rc = 1;
        else if (o.bench) {
            char cpu[128];
            bench_cpu_name(cpu, sizeof cpu);
            snprintf(src, sizeof src,
                     "measured on this machine: %s, kernels %s; another CPU "
                     "will differ",
                     cpu, cpulm_kernel_level());
        }
        if (!rc && tps > 0 && (have_prices || o.price > 0))
            print_cost(&o, &p, need, src, tps, tpsb, best);
        else if (!rc && tps <= 0)
            printf("cost: give --tps (and --tps-batched) or --bench to price tokens%s%s\n",
                   o.instance ? " on " : "", o.instance ? o.instance : "");
    }
    plan_prices_release(&p);
    cpulm_model_free(m);
    return rc;
}
