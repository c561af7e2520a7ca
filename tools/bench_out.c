/* bench_out.c: what every bench row carries (cpulm version, kernels, CPU, model) and the
 * writers: markdown tables, CSV, and JSON / JSONL objects that use llama-bench's field names
 * (so scripts written for llama-bench read ours), with cpulm's extra fields alongside. */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools_api.h"
#include "bench.h"

/* ---- environment ---- */

/* ARM /proc/cpuinfo has no model name; name the cores the clouds sell by part number. */
static const char *arm_part_name(unsigned impl, unsigned part) {
    static const struct {
        unsigned impl, part;
        const char *name;
    } parts[] = {
        {0x41, 0xd0c, "Neoverse-N1 (Graviton2)"},
        {0x41, 0xd40, "Neoverse-V1 (Graviton3)"},
        {0x41, 0xd4f, "Neoverse-V2 (Graviton4)"},
        {0x41, 0xd49, "Neoverse-N2"},
        {0x41, 0xd8e, "Neoverse-N3"},
        {0x41, 0xd84, "Neoverse-V3"},
        {0xc0, 0xac3, "Ampere-1"},
        {0xc0, 0xac4, "Ampere-1A"},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (parts[i].impl == impl && parts[i].part == part) return parts[i].name;
    return NULL;
}

void bench_cpu_name(char *buf, size_t cap) {
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    unsigned impl = 0, part = 0;
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        char *v = colon + 1 + strspn(colon + 1, " \t");
        v[strcspn(v, "\n")] = 0;
        if (!strncmp(line, "model name", 10)) {
            snprintf(buf, cap, "%s", v);
            break;
        }
        if (!strncmp(line, "CPU implementer", 15)) impl = (unsigned)strtoul(v, NULL, 0);
        if (!strncmp(line, "CPU part", 8)) part = (unsigned)strtoul(v, NULL, 0);
    }
    fclose(f);
    const char *arm = impl ? arm_part_name(impl, part) : NULL;
    if (arm)
        snprintf(buf, cap, "%s", arm);
    else if (impl && !strcmp(buf, "unknown"))
        snprintf(buf, cap, "ARM implementer 0x%02x part 0x%03x", impl, part);
}

void bench_now_iso(char *buf, size_t cap) {
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* "1B", "260K": general.size_label when the file has one, else from the parameter count. */
static void size_label(const cpulm_model *m, int64_t n_params, char *buf, size_t cap) {
    size_t need;
    if (cpulm_model_meta(m, "general.size_label", buf, cap, &need) == CPULM_OK && buf[0]) return;
    double p = (double)n_params;
    if (p >= 1e9)
        snprintf(buf, cap, "%.0fB", p / 1e9);
    else if (p >= 1e6)
        snprintf(buf, cap, "%.0fM", p / 1e6);
    else
        snprintf(buf, cap, "%.0fK", p / 1e3);
}

void bench_env_fill(bench_env *e, const cpulm_model *m, const char *path) {
    memset(e, 0, sizeof *e);
    snprintf(e->version, sizeof e->version, "%s", cpulm_version());
    const char *open = strchr(e->version, '(');
    snprintf(e->commit, sizeof e->commit, "%s", open ? open + 1 : "unknown");
    e->commit[strcspn(e->commit, ")")] = 0;
    snprintf(e->kernels, sizeof e->kernels, "%s", cpulm_kernel_level());
    e->attn = "auto";
    bench_cpu_name(e->cpu, sizeof e->cpu);
    if (!m) return;
    snprintf(e->model_file, sizeof e->model_file, "%s", path);
    cpulm_model_info in;
    cpulm_model_get_info(m, &in);
    char label[32];
    size_label(m, in.n_params, label, sizeof label);
    snprintf(e->model_type, sizeof e->model_type, "%s %s %s", in.arch, label, in.ftype);
    e->model_size = in.weight_bytes - in.widened_bytes; /* the file's, as llama-bench's */
    e->n_params = in.n_params;
}

int bench_fmt_parse(const char *s, bench_fmt *fmt) {
    static const char *names[] = {"md", "csv", "json", "jsonl", "sql"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(s, names[i])) {
            *fmt = (bench_fmt)i;
            return 0;
        }
    return -1;
}

static const char *kind_name(bench_kind k) {
    static const char *names[] = {"pp", "tg", "pg", "parallel", "ttft", "sg"};
    return names[k];
}

/* sg rows: the speculation's figures (of the last repetition; greedy makes them all the
 * same). acceptance: accepted / drafted; per pass: tokens emitted per target decode. */
static double spec_acceptance(const bench_result *r) {
    return r->spec_drafted ? (double)r->spec_accepted / (double)r->spec_drafted : 0.0;
}

static double spec_per_pass(const bench_result *r) {
    return r->spec_passes ? (double)r->spec_emitted / (double)r->spec_passes : 0.0;
}

/* The plain (none) row of the same configuration and length as sg row r, or NULL. */
static const bench_result *spec_baseline(const bench_result *all, int n, const bench_result *r) {
    for (int i = 0; i < n; i++) {
        const bench_test *a = &all[i].t, *b = &r->t;
        if (a->kind == BENCH_SPEC && a->spec_kind == 0 && a->n_gen == b->n_gen &&
            a->n_threads == b->n_threads && a->type_k == b->type_k && a->n_batch == b->n_batch &&
            a->n_ubatch == b->n_ubatch && a->n_threads_batch == b->n_threads_batch)
            return &all[i];
    }
    return NULL;
}

/* ---- JSON ---- */

/* The fields llama-bench writes, in its order, with cpulm's values. */
static void json_llama_bench_fields(cpulm_json_writer *w, const bench_env *e, const bench_result *r,
                                    const bench_summary *s) {
    const bench_test *t = &r->t;
    cpulm_json_kv_str(w, "build_commit", e->commit);
    cpulm_json_kv_int(w, "build_number", 0); /* cpulm has no build counter */
    cpulm_json_kv_str(w, "cpu_info", e->cpu);
    cpulm_json_kv_str(w, "gpu_info", "");
    cpulm_json_kv_str(w, "backends", "CPU");
    cpulm_json_kv_str(w, "model_filename", e->model_file);
    cpulm_json_kv_str(w, "model_type", e->model_type);
    cpulm_json_kv_int(w, "model_size", (int64_t)e->model_size);
    cpulm_json_kv_int(w, "model_n_params", e->n_params);
    cpulm_json_kv_int(w, "n_batch", t->n_batch);
    cpulm_json_kv_int(w, "n_ubatch", t->n_ubatch);
    cpulm_json_kv_int(w, "n_threads", r->n_threads_used);
    cpulm_json_kv_str(w, "type_k", bench_kv_name(t->type_k));
    cpulm_json_kv_str(w, "type_v", bench_kv_name(t->type_k));
    cpulm_json_kv_int(w, "n_gpu_layers", 0);
    cpulm_json_kv_bool(w, "flash_attn", 0);
    cpulm_json_kv_bool(w, "use_mmap", 1);
    cpulm_json_kv_bool(w, "embeddings", 0);
    cpulm_json_kv_int(w, "n_prompt", t->n_prompt);
    cpulm_json_kv_int(w, "n_gen", t->n_gen);
    cpulm_json_kv_int(w, "n_depth", t->n_depth);
    cpulm_json_kv_str(w, "test_time", r->test_time);
    cpulm_json_kv_int(w, "avg_ns", (int64_t)llround(s->ns.mean));
    cpulm_json_kv_int(w, "stddev_ns", (int64_t)llround(s->ns.stddev));
    cpulm_json_kv_double(w, "avg_ts", s->ts.mean);
    cpulm_json_kv_double(w, "stddev_ts", s->ts.stddev);
    cpulm_json_kv_arr_begin(w, "samples_ns");
    for (int i = 0; i < r->n_reps; i++)
        cpulm_json_write_int(w, (int64_t)llround(r->ns[i]));
    cpulm_json_arr_end(w);
    cpulm_json_kv_arr_begin(w, "samples_ts");
    for (int i = 0; i < r->n_reps; i++)
        cpulm_json_write_double(w, r->ts[i]);
    cpulm_json_arr_end(w);
}

static void json_row(cpulm_json_writer *w, const bench_env *e, const bench_result *r) {
    bench_summary s;
    bench_summarize(r, &s);
    const bench_test *t = &r->t;
    char name[64];
    bench_test_name(t, name, sizeof name);
    cpulm_json_obj_begin(w);
    json_llama_bench_fields(w, e, r, &s);
    cpulm_json_kv_str(w, "test", name);
    cpulm_json_kv_str(w, "kind", kind_name(t->kind));
    cpulm_json_kv_int(w, "n_threads_batch", r->n_threads_batch_used);
    cpulm_json_kv_int(w, "n_parallel", t->n_parallel);
    cpulm_json_kv_int(w, "repetitions", r->n_reps);
    cpulm_json_kv_str(w, "cpulm_version", e->version);
    cpulm_json_kv_str(w, "cpulm_commit", e->commit);
    cpulm_json_kv_str(w, "kernel_level", e->kernels);
    cpulm_json_kv_str(w, "cpulm_attn", e->attn ? e->attn : "auto");
    cpulm_json_kv_str(w, "cpu_name", e->cpu);
    cpulm_json_kv_str(w, "date", r->test_time);
    if (t->kind == BENCH_PAR) {
        cpulm_json_kv_double(w, "pp_avg_ms", s.pp_ms.mean);
        cpulm_json_kv_double(w, "pp_avg_ts", s.pp_ts.mean);
        cpulm_json_kv_double(w, "pp_stddev_ts", s.pp_ts.stddev);
        cpulm_json_kv_double(w, "tg_avg_ts", s.tg_ts.mean);
        cpulm_json_kv_double(w, "tg_stddev_ts", s.tg_ts.stddev);
        cpulm_json_kv_double(w, "tg_avg_ts_per_seq", s.tg_seq.mean);
        cpulm_json_kv_double(w, "tg_stddev_ts_per_seq", s.tg_seq.stddev);
    }
    if (t->kind == BENCH_SPEC) {
        cpulm_json_kv_str(w, "spec_type", cpulm_spec_kind_name((cpulm_spec_kind)t->spec_kind));
        cpulm_json_kv_int(w, "spec_target_passes", r->spec_passes);
        cpulm_json_kv_int(w, "spec_drafted", r->spec_drafted);
        cpulm_json_kv_int(w, "spec_accepted", r->spec_accepted);
        cpulm_json_kv_double(w, "spec_acceptance", spec_acceptance(r));
        cpulm_json_kv_double(w, "spec_tokens_per_pass", spec_per_pass(r));
    }
    if (t->kind == BENCH_TTFT) {
        cpulm_json_kv_double(w, "ttft_ms_mean", s.ns.mean * 1e-6);
        cpulm_json_kv_double(w, "ttft_ms_stddev", s.ns.stddev * 1e-6);
        cpulm_json_kv_double(w, "ttft_ms_p50", s.ns.p50 * 1e-6);
        cpulm_json_kv_double(w, "ttft_ms_p99", s.ns.p99 * 1e-6);
    }
    cpulm_json_obj_end(w);
}

static int write_json(FILE *f, const bench_env *e, const bench_result *r, int n, int lines) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    int rc = 0;
    cpulm_json_writer w;
    if (!lines) {
        cpulm_json_writer_init(&w, &b, 0, 2);
        cpulm_json_arr_begin(&w);
        for (int i = 0; i < n; i++)
            json_row(&w, e, &r[i]);
        cpulm_json_arr_end(&w);
        cpulm_buf_putc(&b, '\n');
        rc = cpulm_json_writer_status(&w) != CPULM_OK;
    }
    for (int i = 0; lines && i < n && !rc; i++) {
        cpulm_json_writer_init(&w, &b, 0, 0);
        json_row(&w, e, &r[i]);
        cpulm_buf_putc(&b, '\n');
        rc = cpulm_json_writer_status(&w) != CPULM_OK;
    }
    rc = rc || cpulm_buf_status(&b) != CPULM_OK || fwrite(b.data, 1, b.len, f) != b.len;
    cpulm_buf_release(&b);
    return rc ? -1 : 0;
}

/* ---- CSV ---- */

/* A result's statistics and its test's name ("pp512", at most 63 bytes). */
static void summarize_row(const bench_result *x, bench_summary *s, char name[64]) {
    bench_summarize(x, s);
    bench_test_name(&x->t, name, 64);
}

/* s between two q, each q inside doubled (CSV quotes with ", SQL with '). */
static void quoted(FILE *f, const char *s, char q) {
    fputc(q, f);
    for (; *s; s++) {
        if (*s == q) fputc(q, f);
        fputc(*s, f);
    }
    fputc(q, f);
}

static void write_csv(FILE *f, const bench_env *e, const bench_result *r, int n) {
    fprintf(f, "build_commit,build_number,cpu_info,model_filename,model_type,model_size,"
               "model_n_params,n_batch,n_ubatch,n_threads,n_threads_batch,type_k,type_v,"
               "n_prompt,n_gen,n_depth,n_parallel,test,test_time,avg_ns,stddev_ns,avg_ts,stddev_ts,"
               "pp_avg_ts,tg_avg_ts,tg_avg_ts_per_seq,ttft_ms_p50,ttft_ms_p99,kernel_level,"
               "cpulm_version,samples_ns,samples_ts,spec_type,spec_acceptance,"
               "spec_tokens_per_pass\n");
    for (int i = 0; i < n; i++) {
        const bench_result *x = &r[i];
        bench_summary s;
        char name[64];
        summarize_row(x, &s, name);
        quoted(f, e->commit, '"');
        fprintf(f, ",0,");
        quoted(f, e->cpu, '"');
        fputc(',', f);
        quoted(f, e->model_file, '"');
        fputc(',', f);
        quoted(f, e->model_type, '"');
        fprintf(f, ",%llu,%lld,%d,%d,%d,%d,%s,%s,%d,%d,%d,%d,\"%s\",%s,%.0f,%.0f,%.6f,%.6f,",
                (unsigned long long)e->model_size, (long long)e->n_params, x->t.n_batch,
                x->t.n_ubatch, x->n_threads_used, x->n_threads_batch_used,
                bench_kv_name(x->t.type_k), bench_kv_name(x->t.type_k), x->t.n_prompt, x->t.n_gen,
                x->t.n_depth, x->t.n_parallel, name, x->test_time, s.ns.mean, s.ns.stddev,
                s.ts.mean, s.ts.stddev);
        int par = x->t.kind == BENCH_PAR, ttft = x->t.kind == BENCH_TTFT;
        if (par)
            fprintf(f, "%.6f,%.6f,%.6f,,,", s.pp_ts.mean, s.tg_ts.mean, s.tg_seq.mean);
        else if (ttft)
            fprintf(f, ",,,%.6f,%.6f,", s.ns.p50 * 1e-6, s.ns.p99 * 1e-6);
        else
            fprintf(f, ",,,,,");
        fprintf(f, "%s,", e->kernels);
        quoted(f, e->version, '"');
        fputs(",\"", f);
        for (int k = 0; k < x->n_reps; k++)
            fprintf(f, "%s%.0f", k ? " " : "", x->ns[k]);
        fputs("\",\"", f);
        for (int k = 0; k < x->n_reps; k++)
            fprintf(f, "%s%.6f", k ? " " : "", x->ts[k]);
        if (x->t.kind == BENCH_SPEC)
            fprintf(f, "\",%s,%.6f,%.6f\n", cpulm_spec_kind_name((cpulm_spec_kind)x->t.spec_kind),
                    spec_acceptance(x), spec_per_pass(x));
        else
            fputs("\",,,\n", f);
    }
}

/* ---- SQL (llama-bench -o sql: a CREATE TABLE and one INSERT per test, for sqlite3) ---- */

static void write_sql(FILE *f, const bench_env *e, const bench_result *r, int n) {
    fprintf(f, "CREATE TABLE IF NOT EXISTS test (\n  build_commit TEXT, build_number INTEGER, "
               "cpu_info TEXT, gpu_info TEXT, backends TEXT, model_filename TEXT, model_type "
               "TEXT,\n  model_size INTEGER, model_n_params INTEGER, n_batch INTEGER, n_ubatch "
               "INTEGER, n_threads INTEGER,\n  type_k TEXT, type_v TEXT, n_gpu_layers INTEGER, "
               "n_prompt INTEGER, n_gen INTEGER, n_parallel INTEGER,\n  test TEXT, test_time "
               "TEXT, avg_ns INTEGER, stddev_ns INTEGER, avg_ts REAL, stddev_ts REAL,\n  "
               "kernel_level TEXT\n);\n\n");
    for (int i = 0; i < n; i++) {
        const bench_result *x = &r[i];
        bench_summary s;
        char name[64];
        summarize_row(x, &s, name);
        fprintf(f, "INSERT INTO test (build_commit, build_number, cpu_info, gpu_info, backends, "
                   "model_filename, model_type, model_size, model_n_params, n_batch, n_ubatch, "
                   "n_threads, type_k, type_v, n_gpu_layers, n_prompt, n_gen, n_parallel, test, "
                   "test_time, avg_ns, stddev_ns, avg_ts, stddev_ts, kernel_level) VALUES (");
        quoted(f, e->commit, '\'');
        fputs(", 0, ", f);
        quoted(f, e->cpu, '\'');
        fputs(", '', 'CPU', ", f);
        quoted(f, e->model_file, '\'');
        fputs(", ", f);
        quoted(f, e->model_type, '\'');
        fprintf(f,
                ", %llu, %lld, %d, %d, %d, '%s', '%s', 0, %d, %d, %d, '%s', '%s', %.0f, %.0f, "
                "%.6f, %.6f, '%s');\n",
                (unsigned long long)e->model_size, (long long)e->n_params, x->t.n_batch,
                x->t.n_ubatch, x->n_threads_used, bench_kv_name(x->t.type_k),
                bench_kv_name(x->t.type_k), x->t.n_prompt, x->t.n_gen, x->t.n_parallel, name,
                x->test_time, s.ns.mean, s.ns.stddev, s.ts.mean, s.ts.stddev, e->kernels);
    }
}

/* ---- markdown ---- */

static void human_bytes(double v, char *buf, size_t cap) {
    if (v >= 1024.0 * 1024 * 1024)
        snprintf(buf, cap, "%.2f GiB", v / (1024.0 * 1024 * 1024));
    else
        snprintf(buf, cap, "%.2f MiB", v / (1024.0 * 1024));
}

static void threads_str(const bench_result *r, char *buf, size_t cap) {
    if (r->n_threads_batch_used != r->n_threads_used)
        snprintf(buf, cap, "%d/%d", r->n_threads_used, r->n_threads_batch_used);
    else
        snprintf(buf, cap, "%d", r->n_threads_used);
}

static int count_kind(const bench_result *r, int n, int par, int ttft) {
    int k = 0;
    for (int i = 0; i < n; i++)
        k += (r[i].t.kind == BENCH_PAR) == par && (r[i].t.kind == BENCH_TTFT) == ttft &&
             r[i].t.kind != BENCH_SPEC;
    return k;
}

static void md_spec(FILE *f, const bench_result *r, int n) {
    char th[32], name[64], speed[32];
    fprintf(f, "| threads | type_k | prompt | test | t/s | vs none | drafted | accepted | "
               "tokens/pass |\n| ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < n; i++) {
        if (r[i].t.kind != BENCH_SPEC) continue;
        bench_summary s, sb;
        bench_summarize(&r[i], &s);
        threads_str(&r[i], th, sizeof th);
        bench_test_name(&r[i].t, name, sizeof name);
        const bench_result *base = spec_baseline(r, n, &r[i]);
        snprintf(speed, sizeof speed, "-");
        if (base) {
            bench_summarize(base, &sb);
            if (sb.ts.mean > 0) snprintf(speed, sizeof speed, "%.2fx", s.ts.mean / sb.ts.mean);
        }
        fprintf(f, "| %s | %s | %d | %s | %.2f ± %.2f | %s | %lld | %lld (%.1f%%) | %.2f |\n", th,
                bench_kv_name(r[i].t.type_k), r[i].t.n_prompt, name, s.ts.mean, s.ts.stddev, speed,
                (long long)r[i].spec_drafted, (long long)r[i].spec_accepted,
                100.0 * spec_acceptance(&r[i]), spec_per_pass(&r[i]));
    }
}

static void md_basic(FILE *f, const bench_env *e, const bench_result *r, int n) {
    char size[32], th[32], name[64];
    human_bytes((double)e->model_size, size, sizeof size);
    fprintf(f, "| model | size | params | kernels | threads | n_batch | n_ubatch | type_k | test "
               "| t/s |\n| --- | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: |\n");
    for (int i = 0; i < n; i++) {
        if (r[i].t.kind == BENCH_PAR || r[i].t.kind == BENCH_TTFT || r[i].t.kind == BENCH_SPEC)
            continue;
        bench_summary s;
        bench_summarize(&r[i], &s);
        threads_str(&r[i], th, sizeof th);
        bench_test_name(&r[i].t, name, sizeof name);
        fprintf(f, "| %s | %s | %.2f M | %s | %s | %d | %d | %s | %s | %.2f ± %.2f |\n",
                e->model_type, size, (double)e->n_params / 1e6, e->kernels, th, r[i].t.n_batch,
                r[i].t.n_ubatch, bench_kv_name(r[i].t.type_k), name, s.ts.mean, s.ts.stddev);
    }
}

static void md_parallel(FILE *f, const bench_result *r, int n) {
    char th[32];
    fprintf(f, "| threads | type_k | npl | pp | tg | prompt ms | prompt t/s | tg t/s "
               "(aggregate) | tg t/s (per seq) | total t/s |\n| ---: | --- | ---: | ---: | ---: | "
               "---: | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < n; i++) {
        if (r[i].t.kind != BENCH_PAR) continue;
        bench_summary s;
        bench_summarize(&r[i], &s);
        threads_str(&r[i], th, sizeof th);
        fprintf(f, "| %s | %s | %d | %d | %d | %.1f | %.2f | %.2f ± %.2f | %.2f | %.2f |\n", th,
                bench_kv_name(r[i].t.type_k), r[i].t.n_parallel, r[i].t.n_prompt, r[i].t.n_gen,
                s.pp_ms.mean, s.pp_ts.mean, s.tg_ts.mean, s.tg_ts.stddev, s.tg_seq.mean, s.ts.mean);
    }
}

static void md_ttft(FILE *f, const bench_result *r, int n) {
    char th[32];
    fprintf(f, "| threads | type_k | prompt tokens | TTFT mean ms | p50 ms | p99 ms | prompt t/s "
               "|\n| ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < n; i++) {
        if (r[i].t.kind != BENCH_TTFT) continue;
        bench_summary s;
        bench_summarize(&r[i], &s);
        threads_str(&r[i], th, sizeof th);
        fprintf(f, "| %s | %s | %d | %.2f ± %.2f | %.2f | %.2f | %.2f |\n", th,
                bench_kv_name(r[i].t.type_k), r[i].t.n_prompt, s.ns.mean * 1e-6, s.ns.stddev * 1e-6,
                s.ns.p50 * 1e-6, s.ns.p99 * 1e-6, s.ts.mean);
    }
}

static void write_md(FILE *f, const bench_env *e, const bench_result *r, int n) {
    int reps = n ? r[0].n_reps : 0;
    fprintf(f, "cpulm %s | kernels %s | CPU %s | %s | %d repetitions, mean ± stddev\n\n",
            e->version, e->kernels, e->cpu, n ? r[0].test_time : "", reps);
    int sections = 0;
    if (count_kind(r, n, 0, 0)) {
        md_basic(f, e, r, n);
        sections++;
    }
    if (count_kind(r, n, 1, 0)) {
        if (sections++) fputc('\n', f);
        fprintf(f,
                "parallel sequences (%s): prompts of npl sequences, then tg steps decoding all "
                "of them together\n\n",
                e->model_type);
        md_parallel(f, r, n);
    }
    if (count_kind(r, n, 0, 1)) {
        if (sections++) fputc('\n', f);
        fprintf(f, "time to first token (%s): prompt from an empty context, then a greedy pick\n\n",
                e->model_type);
        md_ttft(f, r, n);
    }
    int n_spec = 0;
    for (int i = 0; i < n; i++)
        n_spec += r[i].t.kind == BENCH_SPEC;
    if (n_spec) {
        if (sections++) fputc('\n', f);
        fprintf(f,
                "speculative generation (%s): greedy tokens after a text prompt, none = plain "
                "decoding; accepted of drafted, tokens per target pass\n\n",
                e->model_type);
        md_spec(f, r, n);
    }
}

int bench_write(FILE *f, bench_fmt fmt, const bench_env *e, const bench_result *r, int n) {
    switch (fmt) {
    case BENCH_FMT_MD: write_md(f, e, r, n); break;
    case BENCH_FMT_CSV: write_csv(f, e, r, n); break;
    case BENCH_FMT_JSON: return write_json(f, e, r, n, 0);
    case BENCH_FMT_JSONL: return write_json(f, e, r, n, 1);
    case BENCH_FMT_SQL: write_sql(f, e, r, n); break;
    }
    fflush(f);
    return ferror(f) ? -1 : 0;
}
