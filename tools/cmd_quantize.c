/* cmd_quantize.c: `cpulm quantize IN OUT TYPE`: rewrites a GGUF model with its weights in a
 * quantized preset (Q4_K_M, Q8_0, ...), choosing each tensor's type the way llama.cpp's
 * llama-quantize does (src/quantize_plan.h) and copying all metadata.
 *
 * Streaming: the input is mapped read-only and the output is written tensor by tensor into
 * mapped windows of the output file (cpulm_gguf_writer_write_file), so neither model is
 * ever held in anonymous memory; input pages are dropped once a tensor is done. Rows of a
 * tensor are quantized by --threads workers taking chunks from an atomic counter. */
#define _GNU_SOURCE
#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools_api.h"
#include "commands.h"
#include "common.h"
#include "options.h"

#define QUANT_VERSION 2 /* GGML_QNT_VERSION: the block layouts of quant.h */

static void quantize_usage(FILE *f) {
    fprintf(f, "usage: cpulm quantize [options] IN.gguf OUT.gguf TYPE [NTHREADS]\n"
               "  NTHREADS              as in llama-quantize: the same as -t\n");
    cli_help(f, "quantize");
    fprintf(f, "TYPE (llama.cpp's presets; general.file_type is set to the number shown):\n");
    for (int i = 0; cpulm_qplan_preset_at(i); i++) {
        const cpulm_qplan_preset *p = cpulm_qplan_preset_at(i);
        fprintf(f, "  %-7s %2u  %s\n", p->name, p->ftype, p->desc);
    }
    fprintf(f,
            "Unless --pure: output.weight gets Q6_K (kept Q8_0 in Q8_0), and a tensor whose rows\n"
            "do not split into K-quant blocks of 256 falls back to Q5_0 / Q5_1 / Q8_0 / F16.\n"
            "Norms, biases and other 1-D tensors are copied unchanged.\n");
}

typedef struct qopts {
    const char *in, *out;
    const char *pos[3]; /* IN OUT TYPE as given */
    int n_pos;          /* positional arguments so far (the fourth is NTHREADS) */
    cpulm_qplan_params plan;
    int threads, allow_requantize, quiet;
} qopts;

/* ggml spells type names in lower case but keeps K upper: "q4_K", "f32", "bf16". */
static const char *ggml_name(uint32_t type, char buf[16]) {
    const char *s = cpulm_dtype_name(type);
    size_t i = 0;
    for (; s[i] && i < 15; i++)
        buf[i] = s[i] == 'K' ? 'K' : (char)tolower((unsigned char)s[i]);
    buf[i] = 0;
    return buf;
}

static int parse_dtype_flag(const cli_val *v, int32_t *out) {
    int t = cpulm_dtype_from_name(v->s);
    if (t < 0 || !cpulm_quantize_supported((cpulm_dtype)t)) {
        fprintf(stderr, "cpulm quantize: bad value '%s' for %s (want a type such as q8_0, q6_k)\n",
                v->s, v->flag);
        return 0;
    }
    *out = t;
    return 1;
}

/* llama-quantize's IN OUT TYPE [NTHREADS]: 0 = ok, else the exit code. */
static int quantize_positional(const char *a, qopts *o) {
    if (o->n_pos < 3) {
        o->pos[o->n_pos++] = a;
    } else if (o->n_pos == 3) {
        char *end;
        long t = strtol(a, &end, 10);
        if (end == a || *end || t < 1 || t > 512) {
            fprintf(stderr,
                    "cpulm quantize: bad value '%s' for NTHREADS (want an integer in [1, 512])\n",
                    a);
            return EXIT_USAGE;
        }
        o->threads = (int)t;
        o->n_pos++;
    } else {
        fprintf(stderr, "cpulm quantize: unexpected argument '%s'\n", a);
        return EXIT_USAGE;
    }
    return 0;
}

/* One row of the table or a positional argument: 0 = ok, else the exit code. */
static int quantize_opt(cli *c, int id, const cli_val *v, void *ctx) {
    qopts *o = ctx;
    switch (id) {
    case CLI_POS: return quantize_positional(c->argv[c->i], o);
    case OPT_THREADS: o->threads = (int)v->i; break;
    case OPT_PURE: o->plan.pure = true; break;
    case OPT_LEAVE_OUTPUT: o->plan.keep_output = true; break;
    case OPT_OUTPUT_TENSOR_TYPE: return parse_dtype_flag(v, &o->plan.output_type) ? 0 : EXIT_USAGE;
    case OPT_TOKEN_EMBD_TYPE: return parse_dtype_flag(v, &o->plan.token_embd_type) ? 0 : EXIT_USAGE;
    case OPT_ALLOW_REQUANTIZE: o->allow_requantize = 1; break;
    case OPT_QUIET: o->quiet = 1; break;
    default: return cli_unhandled(c, v);
    }
    return 0;
}

static int parse_args(int argc, char **argv, qopts *o) {
    cli c = {.cmd = "quantize", .argc = argc, .argv = argv};
    o->plan = cpulm_qplan_default_params(NULL);
    int rc = cli_parse(&c, quantize_usage, quantize_opt, o);
    if (rc) return rc;
    if (o->n_pos < 3) {
        fprintf(stderr, "cpulm quantize: need IN OUT TYPE (see cpulm quantize --help)\n");
        return EXIT_USAGE;
    }
    o->in = o->pos[0];
    o->out = o->pos[1];
    o->plan.preset = cpulm_qplan_preset_find(o->pos[2]);
    if (!o->plan.preset) {
        fprintf(stderr, "cpulm quantize: unknown or unsupported type '%s' (see --help)\n",
                o->pos[2]);
        return EXIT_USAGE;
    }
    if (!o->threads) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o->threads = n > 0 ? (int)(n > 64 ? 64 : n) : 1;
    }
    return 0;
}

/* ---- converting one tensor ---- */

typedef struct job {
    const uint8_t *src;
    uint8_t *dst;
    uint32_t src_type, dst_type;
    int64_t n_per_row, n_rows, rows_per_chunk;
    uint64_t src_row_bytes, dst_row_bytes;
    atomic_llong next;
    atomic_int failed;
} job;

static void *convert_rows(void *arg) {
    job *j = arg;
    float *buf = NULL;
    /* F32 rows are read in place when aligned (GGUF's alignment may in theory be 1 or 2) */
    int in_place = j->src_type == CPULM_DTYPE_F32 && (uintptr_t)j->src % sizeof(float) == 0;
    if (!in_place && !(buf = malloc(sizeof(float) * (size_t)j->n_per_row))) {
        atomic_store(&j->failed, 1);
        return NULL;
    }
    for (;;) {
        int64_t r0 = atomic_fetch_add(&j->next, j->rows_per_chunk);
        if (r0 >= j->n_rows) break;
        int64_t r1 = r0 + j->rows_per_chunk < j->n_rows ? r0 + j->rows_per_chunk : j->n_rows;
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *s = j->src + (uint64_t)r * j->src_row_bytes;
            const float *x = (const float *)s;
            if (buf) {
                cpulm_dequantize_row_ref((cpulm_dtype)j->src_type, s, buf, j->n_per_row);
                x = buf;
            }
            cpulm_quantize_row_ref((cpulm_dtype)j->dst_type, x,
                                   j->dst + (uint64_t)r * j->dst_row_bytes, j->n_per_row);
        }
    }
    free(buf);
    return NULL;
}

static cpulm_status convert_tensor(const cpulm_gguf_tensor *t, uint32_t dst_type, void *dst,
                                   int threads) {
    job j = {.src = t->data,
             .dst = dst,
             .src_type = t->type,
             .dst_type = dst_type,
             .n_per_row = t->ne[0]};
    j.n_rows = t->ne[1] * t->ne[2] * t->ne[3];
    j.src_row_bytes = cpulm_dtype_row_bytes((cpulm_dtype)t->type, t->ne[0]);
    j.dst_row_bytes = cpulm_dtype_row_bytes((cpulm_dtype)dst_type, t->ne[0]);
    /* chunks of ~64K values: big enough to amortise the atomic, small enough to balance */
    j.rows_per_chunk = t->ne[0] >= 65536 ? 1 : 65536 / t->ne[0];
    atomic_init(&j.next, 0);
    atomic_init(&j.failed, 0);
    int64_t n_chunks = (j.n_rows + j.rows_per_chunk - 1) / j.rows_per_chunk;
    int nth = threads < n_chunks ? threads : (int)(n_chunks ? n_chunks : 1);
    pthread_t tid[64];
    int started = 0;
    for (int i = 1; i < nth && i < 64; i++)
        if (pthread_create(&tid[started], NULL, convert_rows, &j) == 0) started++;
    convert_rows(&j); /* the caller works too; if no thread started it does everything */
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    return atomic_load(&j.failed) ? CPULM_ERR_NOMEM : CPULM_OK;
}

/* ---- the write loop ---- */

typedef struct qrun {
    const qopts *o;
    cpulm_mmap map;
    cpulm_gguf g;
    cpulm_qplan_entry *plan;
    int64_t n;
    uint64_t bytes_in, bytes_out;
} qrun;

static void progress(const qrun *r, int64_t i, const cpulm_gguf_tensor *t,
                     const cpulm_qplan_entry *e, uint64_t n_bytes) {
    if (r->o->quiet) return;
    char a[16], b[16], c[16], shape[64], note[96] = "";
    int w = snprintf(shape, sizeof shape, "%lld", (long long)t->ne[0]);
    for (int d = 1; d < t->n_dims && w > 0 && w < (int)sizeof shape; d++)
        w += snprintf(shape + w, sizeof shape - (size_t)w, " x %lld", (long long)t->ne[d]);
    if (e->type != e->wanted)
        snprintf(note, sizeof note, "  (rows of %lld don't fit %s: fallback)", (long long)t->ne[0],
                 ggml_name(e->wanted, c));
    int digits = snprintf(NULL, 0, "%lld", (long long)r->n);
    fprintf(stderr, "[%*lld/%lld] %-32.*s %-5s -> %-5s %-16s %8.3f -> %8.3f MiB%s\n", digits,
            (long long)i + 1, (long long)r->n, (int)t->name.len, t->name.ptr, ggml_name(t->type, a),
            e->convert ? ggml_name(e->type, b) : "copy", shape, t->n_bytes / 1048576.0,
            n_bytes / 1048576.0, note);
}

static cpulm_status fill(int64_t i, void *dst, uint64_t n_bytes, void *user) {
    qrun *r = user;
    const cpulm_qplan_entry *e = &r->plan[i];
    const cpulm_gguf_tensor *t = &r->g.tensors[e->src];
    cpulm_status st = CPULM_OK;
    if (e->convert && n_bytes)
        st = convert_tensor(t, e->type, dst, r->o->threads);
    else if (n_bytes)
        memcpy(dst, t->data, (size_t)n_bytes);
    cpulm_mmap_discard(&r->map, (uint64_t)((const uint8_t *)t->data - r->map.data), t->n_bytes);
    r->bytes_in += t->n_bytes;
    r->bytes_out += n_bytes;
    progress(r, i, t, e, n_bytes);
    return st;
}

static int is_skipped_key(cpulm_str k) {
    return cpulm_str_eq(k, "general.quantization_version") ||
           cpulm_str_eq(k, "general.file_type") || cpulm_str_eq(k, "split.no") ||
           cpulm_str_eq(k, "split.count") || cpulm_str_eq(k, "split.tensors.count");
}

/* Metadata as llama-quantize writes it: every input key in order, then the two it sets. */
static cpulm_status build_writer(const qrun *r, cpulm_gguf_writer *w) {
    cpulm_status st = CPULM_OK;
    for (uint64_t i = 0; i < r->g.n_kv && st == CPULM_OK; i++)
        if (!is_skipped_key(r->g.kv[i].key)) st = cpulm_gguf_writer_copy_kv(w, &r->g.kv[i]);
    if (st == CPULM_OK)
        st = cpulm_gguf_writer_set_u32(w, "general.quantization_version", QUANT_VERSION);
    if (st == CPULM_OK)
        st = cpulm_gguf_writer_set_u32(w, "general.file_type", r->o->plan.preset->ftype);
    char name[64];
    for (int64_t i = 0; i < r->n && st == CPULM_OK; i++) {
        const cpulm_gguf_tensor *t = &r->g.tensors[r->plan[i].src];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        st = cpulm_gguf_writer_add_tensor(w, name, r->plan[i].type, t->n_dims, t->ne, NULL);
    }
    return st;
}

/* Sources we must convert have to be readable as floats. */
static int check_sources(const qrun *r) {
    for (int64_t i = 0; i < r->n; i++) {
        const cpulm_gguf_tensor *t = &r->g.tensors[r->plan[i].src];
        if (!r->plan[i].convert) continue;
        const cpulm_dtype_traits *tr = cpulm_dtype_traits_get(t->type);
        if (tr->quantized && !r->o->allow_requantize) {
            fprintf(stderr,
                    "cpulm quantize: %s: tensor '%.*s' is already %s; requantizing loses "
                    "quality (pass --allow-requantize to do it anyway)\n",
                    r->o->in, (int)t->name.len, t->name.ptr, tr->name);
            return 0;
        }
        if (!cpulm_dequantize_supported((cpulm_dtype)t->type)) {
            fprintf(stderr, "cpulm quantize: %s: cannot read tensor '%.*s' of type %s\n", r->o->in,
                    (int)t->name.len, t->name.ptr, tr->name);
            return 0;
        }
    }
    return 1;
}

static int make_plan(qrun *r) {
    cpulm_error err = {0};
    cpulm_qplan_model m;
    r->n = (int64_t)r->g.n_tensors;
    cpulm_qplan_tensor *in = calloc((size_t)r->n + 1, sizeof *in);
    char *names = calloc((size_t)r->n + 1, 64);
    r->plan = calloc((size_t)r->n + 1, sizeof *r->plan);
    cpulm_status st = in && names && r->plan ? cpulm_qplan_model_from_gguf(&r->g, &m, &err)
                                             : cpulm_errf(&err, CPULM_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < r->n && st == CPULM_OK; i++) {
        const cpulm_gguf_tensor *t = &r->g.tensors[i];
        char *nm = names + 64 * i; /* the reader caps names at 63 bytes */
        memcpy(nm, t->name.ptr, (size_t)t->name.len);
        in[i] = (cpulm_qplan_tensor){.name = nm, .type = t->type, .n_dims = t->n_dims};
        memcpy(in[i].ne, t->ne, sizeof t->ne);
    }
    if (st == CPULM_OK) st = cpulm_qplan_build(&r->o->plan, &m, in, r->n, r->plan, &err);
    if (st != CPULM_OK) fprintf(stderr, "cpulm quantize: %s: %s\n", r->o->in, err.msg);
    free(in);
    free(names);
    return st == CPULM_OK;
}

static int run(qrun *r) {
    const qopts *o = r->o;
    cpulm_error err = {0};
    if (!make_plan(r) || !check_sources(r)) return 1;
    cpulm_gguf_writer *w = cpulm_gguf_writer_new();
    cpulm_status st = w ? build_writer(r, w) : CPULM_ERR_NOMEM;
    if (st != CPULM_OK) {
        fprintf(stderr, "cpulm quantize: building the output header: %s\n", cpulm_status_str(st));
        cpulm_gguf_writer_free(w);
        return 1;
    }
    if (!o->quiet)
        fprintf(stderr, "cpulm quantize: %s -> %s as %s (file_type %u), %lld tensors, %d threads\n",
                o->in, o->out, o->plan.preset->name, o->plan.preset->ftype, (long long)r->n,
                o->threads);
    double t0 = cli_now_ms();
    st = cpulm_gguf_writer_write_file(w, o->out, fill, r, &err);
    cpulm_gguf_writer_free(w);
    if (st != CPULM_OK) {
        fprintf(stderr, "cpulm quantize: %s\n", err.msg);
        return 1;
    }
    if (!o->quiet)
        fprintf(stderr, "cpulm quantize: tensor data %.2f MiB -> %.2f MiB in %.2f s\n",
                r->bytes_in / 1048576.0, r->bytes_out / 1048576.0, (cli_now_ms() - t0) / 1e3);
    printf("%s\n", o->out);
    return 0;
}

int cmd_quantize(int argc, char **argv) {
    qopts o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    qrun r = {.o = &o};
    cpulm_error err = {0};
    if (cpulm_mmap_open(&r.map, o.in, &err) != CPULM_OK) {
        fprintf(stderr, "cpulm quantize: %s\n", err.msg);
        return EXIT_USAGE;
    }
    if (cpulm_gguf_parse(&r.g, r.map.data, r.map.size, &err) != CPULM_OK) {
        fprintf(stderr, "cpulm quantize: %s: %s\n", o.in, err.msg);
        cpulm_mmap_close(&r.map);
        return 1;
    }
    rc = run(&r);
    free(r.plan);
    cpulm_gguf_release(&r.g);
    cpulm_mmap_close(&r.map);
    return rc;
}
