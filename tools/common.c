/* common.c: flag parsing, default model discovery and small I/O helpers for the CLI. */
#define _GNU_SOURCE
#include "common.h"
#include "progress.h"

#include <errno.h>
#include <pthread.h>
#include <sys/stat.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int cli_flag(cli *c, const char *a, const char *b) {
    const char *s = c->argv[c->i];
    return (a && !strcmp(s, a)) || (b && !strcmp(s, b));
}

const char *cli_value(cli *c) {
    if (c->i + 1 >= c->argc) {
        fprintf(stderr, "cpulm %s: option '%s' needs a value\n", c->cmd, c->argv[c->i]);
        return NULL;
    }
    return c->argv[++c->i];
}

int cli_i64(cli *c, long long lo, long long hi, long long *out) {
    const char *flag = c->argv[c->i];
    const char *v = cli_value(c);
    if (!v) return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "cpulm %s: bad value '%s' for %s (want an integer in [%lld, %lld])\n",
                c->cmd, v, flag, lo, hi);
        return 0;
    }
    *out = x;
    return 1;
}

int cli_int(cli *c, long lo, long hi, int *out) {
    long long x;
    if (!cli_i64(c, lo, hi, &x)) return 0;
    *out = (int)x;
    return 1;
}

int cli_float(cli *c, double lo, double hi, float *out) {
    const char *flag = c->argv[c->i];
    const char *v = cli_value(c);
    if (!v) return 0;
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !(x >= lo && x <= hi)) {
        fprintf(stderr, "cpulm %s: bad value '%s' for %s (want a number in [%g, %g])\n", c->cmd, v,
                flag, lo, hi);
        return 0;
    }
    *out = (float)x;
    return 1;
}

int cli_is_kv_flag(cli *c) {
    return cli_flag(c, "--kv", "-ctk") || cli_flag(c, "-ctv", "--cache-type-k") ||
           cli_flag(c, "--cache-type-v", "--ctk") || cli_flag(c, "--ctv", NULL);
}

int cli_parallel_flag(cli *c) {
    return cli_flag(c, "-np", "-npl") || cli_flag(c, "--parallel", NULL);
}

int cli_unknown(cli *c) {
    fprintf(stderr, "cpulm %s: unknown option '%s' (see cpulm %s --help)\n", c->cmd, c->argv[c->i],
            c->cmd);
    return EXIT_USAGE;
}

static const char *try_path(char *buf, size_t cap, const char *dir, const char *rel) {
    snprintf(buf, cap, "%s/%s", dir, rel);
    return access(buf, R_OK) == 0 ? buf : NULL;
}

const char *cli_model_path(const char *flag_value) {
    static char buf[4096];
    if (flag_value) return flag_value;
    const char *env = getenv("CPULM_MODEL");
    if (env && *env) return env;
    const char *rel = "models/stories260K.gguf";
    const char *shared = getenv("CPULM_SHARED");
    if (shared && *shared && try_path(buf, sizeof buf, shared, rel)) return buf;
    if (try_path(buf, sizeof buf, "../shared", rel)) return buf;
    char exe[2048];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *dir = dirname(exe); /* <repo>/build */
        char up[2200];
        snprintf(up, sizeof up, "%s/../../shared", dir);
        if (try_path(buf, sizeof buf, up, rel)) return buf;
    }
    fprintf(stderr,
            "cpulm: no model given. Pass -m FILE.gguf or set CPULM_MODEL; any llama-family "
            "GGUF works (e.g. from llama.cpp's convert/quantize tools, `cpulm synth`, or "
            "`cpulm pull`). The default ../shared/models/stories260K.gguf was not found.\n");
    return NULL;
}

double cli_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int cli_check_file(const char *cmd, const char *path) {
    struct stat st;
    const char *why = NULL;
    if (stat(path, &st) != 0 || access(path, R_OK) != 0)
        why = strerror(errno);
    else if (S_ISDIR(st.st_mode))
        why = "is a directory, not a file";
    if (!why) return 0;
    fprintf(stderr, "cpulm%s%s: %s: %s\n", cmd ? " " : "", cmd ? cmd : "", path, why);
    return EXIT_USAGE;
}

void cli_chomp(char *s) {
    size_t n = strlen(s);
    if (n && s[n - 1] == '\n') s[--n] = 0;
    if (n && s[n - 1] == '\r') s[--n] = 0;
}

int cli_env_flag(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

cpulm_ctx_params cli_ctx_default_params(void) {
    cpulm_ctx_params p = cpulm_ctx_default_params();
    p.no_pin = cli_env_flag("CPULM_NO_PIN");
    return p;
}

/* Loading a big file (reading it, repacking its weights) can take tens of seconds with no
 * intermediate steps the library reports: on a terminal, a line with the elapsed time,
 * redrawn 4 times a second by this thread until the load returns. */
typedef struct load_ticker {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    const char *path;
    cli_progress prog;
} load_ticker;

static void *load_tick(void *arg) {
    load_ticker *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->done) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000 * 1000;
        ts.tv_sec += ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pthread_cond_timedwait(&t->cv, &t->mu, &ts);
        if (!t->done) cli_progress_update(&t->prog, 1, "cpulm: loading %s", t->path);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

cpulm_model *cli_load_model(const char *path, int vocab_only, double *load_ms) {
    if (cli_check_file(NULL, path)) return NULL; /* a usage error (exit 2), not a broken file */
    cpulm_model_params mp = cpulm_model_default_params();
    mp.vocab_only = vocab_only;
    mp.no_repack = cli_env_flag("CPULM_NO_REPACK");
    cpulm_error err = {0};
    double t0 = cli_now_ms();
    load_ticker t = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .path = path};
    cli_progress_init(&t.prog, -1);
    cli_progress_update(&t.prog, 1, "cpulm: loading %s", path); /* at once, however fast */
    pthread_t th;
    int ticking = t.prog.on && pthread_create(&th, NULL, load_tick, &t) == 0;
    cpulm_model *m = cpulm_model_load(path, &mp, &err);
    if (ticking) {
        pthread_mutex_lock(&t.mu);
        t.done = 1;
        pthread_cond_signal(&t.cv);
        pthread_mutex_unlock(&t.mu);
        pthread_join(th, NULL);
    }
    cli_progress_end(&t.prog); /* the line goes before any error or output */
    if (!m) fprintf(stderr, "cpulm: %s\n", err.msg);
    if (load_ms) *load_ms = cli_now_ms() - t0;
    return m;
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cpulm: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (cap - n < 2) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "cpulm: %s: out of memory\n", path);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

int32_t cli_tokenize(const cpulm_model *m, const char *text, size_t len, int add_special,
                     int parse_special, cpulm_token **out) {
    int32_t cap = (int32_t)(len + 16), n = 0;
    *out = malloc(sizeof(cpulm_token) * (size_t)cap);
    if (!*out) return -1;
    cpulm_status s = cpulm_tokenize(m, text, len, add_special, parse_special, *out, cap, &n);
    if (s == CPULM_ERR_TOO_SMALL) {
        free(*out);
        *out = malloc(sizeof(cpulm_token) * (size_t)n);
        if (!*out) return -1;
        s = cpulm_tokenize(m, text, len, add_special, parse_special, *out, n, &n);
    }
    if (s != CPULM_OK) {
        fprintf(stderr, "cpulm: tokenize failed: %s\n", cpulm_status_str(s));
        free(*out);
        *out = NULL;
        return -1;
    }
    return n;
}

void cli_json_str(FILE *f, const char *s, size_t len) {
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        switch (ch) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (ch < 0x20)
                fprintf(f, "\\u%04x", ch);
            else
                fputc(ch, f);
        }
    }
    fputc('"', f);
}

int cli_int_list(const char *s, int32_t **out) {
    int cap = 16, n = 0;
    int32_t *v = malloc(sizeof(int32_t) * (size_t)cap);
    while (v && *s) {
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (end == s || errno || x < INT32_MIN || x > INT32_MAX) break;
        if (n == cap) {
            int32_t *nv = realloc(v, sizeof(int32_t) * (size_t)(cap *= 2));
            if (!nv) break;
            v = nv;
        }
        v[n++] = (int32_t)x;
        s = end;
        while (*s == ' ')
            s++;
        if (*s == ',')
            s++;
        else if (*s)
            break;
    }
    if (!v || *s) {
        free(v);
        return -1;
    }
    *out = v;
    return n;
}

int cli_load_failed_rc(const char *path) {
    struct stat st;
    if (access(path, R_OK) != 0 || stat(path, &st) != 0 || S_ISDIR(st.st_mode)) return EXIT_USAGE;
    return 1;
}

int cli_sampler_flag(cli *c, cpulm_sampler_params *sp) {
    long long seed;
    if (cli_flag(c, "--temp", NULL)) return cli_float(c, 0, 100, &sp->temp) ? 1 : -1;
    if (cli_flag(c, "--top-k", NULL)) return cli_int(c, 0, 1 << 30, &sp->top_k) ? 1 : -1;
    if (cli_flag(c, "--top-p", NULL)) return cli_float(c, 0, 1, &sp->top_p) ? 1 : -1;
    if (cli_flag(c, "--min-p", NULL)) return cli_float(c, 0, 1, &sp->min_p) ? 1 : -1;
    if (cli_flag(c, "--repeat-penalty", NULL))
        return cli_float(c, 0, 100, &sp->repeat_penalty) ? 1 : -1;
    if (cli_flag(c, "--repeat-last-n", NULL))
        return cli_int(c, -1, 1 << 24, &sp->repeat_last_n) ? 1 : -1;
    if (cli_flag(c, "--presence-penalty", NULL))
        return cli_float(c, -2, 2, &sp->presence_penalty) ? 1 : -1;
    if (cli_flag(c, "--frequency-penalty", NULL))
        return cli_float(c, -2, 2, &sp->frequency_penalty) ? 1 : -1;
    if (cli_flag(c, "-s", "--seed")) {
        if (!cli_i64(c, -1, 0xFFFFFFFFLL, &seed)) return -1;
        if (seed >= 0) sp->seed = (uint64_t)seed;
        return 1;
    }
    return 0;
}

int cli_kv_type(const char *s, cpulm_kv_type *out) {
    static const struct {
        const char *name;
        cpulm_kv_type t;
    } names[] = {{"f16", CPULM_KV_F16},
                 {"f32", CPULM_KV_F32},
                 {"q8_0", CPULM_KV_Q8_0},
                 {"q4_0", CPULM_KV_Q4_0}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].name)) {
            *out = names[i].t;
            return 1;
        }
    return 0;
}

int cli_kv_flag(cli *c, cpulm_kv_type *out, int *given) {
    const char *flag = c->argv[c->i], *v = cli_value(c);
    cpulm_kv_type t;
    if (!v) return 0;
    if (!cli_kv_type(v, &t)) {
        fprintf(stderr, "cpulm %s: bad value '%s' for %s (want f16, q8_0, q4_0 or f32)\n", c->cmd,
                v, flag);
        return 0;
    }
    if (*given && t != *out) {
        fprintf(stderr, "cpulm %s: K and V share one cache type in cpulm; got %s and %s\n", c->cmd,
                cli_kv_name(*out), v);
        return 0;
    }
    *out = t;
    *given = 1;
    return 1;
}

int cli_attn_flag(cli *c, int *fast) {
    const char *flag = c->argv[c->i], *v = cli_value(c);
    if (!v) return 0;
    if (strcmp(v, "ref") != 0 && strcmp(v, "fast") != 0 && strcmp(v, "walk") != 0 &&
        strcmp(v, "auto") != 0) {
        fprintf(stderr, "cpulm %s: bad value '%s' for %s (want ref, fast or auto)\n", c->cmd, v,
                flag);
        return 0;
    }
    *fast = !strcmp(v, "fast") ? 1 : !strcmp(v, "walk") ? -1 : 0;
    if (!strcmp(v, "auto")) *fast = CPULM_ATTN_AUTO;
    return 1;
}

const char *cli_kv_name(cpulm_kv_type t) {
    switch (t) {
    case CPULM_KV_F32: return "f32";
    case CPULM_KV_Q8_0: return "q8_0";
    case CPULM_KV_Q4_0: return "q4_0";
    case CPULM_KV_F16: break;
    }
    return "f16";
}

int cli_numa_flag(cli *c) {
    const char *v = cli_value(c);
    cpulm_numa mode;
    if (!v) return 0;
    if (cpulm_numa_parse(v, &mode) != CPULM_OK) {
        fprintf(stderr, "cpulm %s: bad value '%s' for --numa (distribute, isolate, numactl)\n",
                c->cmd, v);
        return 0;
    }
    cpulm_numa_init(mode);
    return 1;
}

/* ---- flags shared by every subcommand (one table) ---- */

enum { COMPAT_NOOP, COMPAT_UNSUPPORTED };
enum {
    ARG_NONE,
    ARG_ONE,
    ARG_OPT
}; /* ARG_OPT: takes the next arg only when it is a switch
      value (on/off/auto/0/1), as -fa does in llama.cpp */

typedef struct cli_compat {
    const char *a, *b;
    int arg, kind;
    const char *why;
} cli_compat;

static const cli_compat compat[] = {
    {"-ngl", "--n-gpu-layers", ARG_ONE, COMPAT_NOOP,
     "cpulm runs on the CPU; there are no GPU layers"},
    {"--gpu-layers", "--ngl", ARG_ONE, COMPAT_NOOP,
     "cpulm runs on the CPU; there are no GPU layers"},
    {"-fa", "--flash-attn", ARG_OPT, COMPAT_NOOP,
     "cpulm's CPU attention is always fused (online softmax, no score matrix)"},
    {"-mmp", "--mmap", ARG_OPT, COMPAT_NOOP, "cpulm always maps the weights read-only"},
    {"--no-mmap", NULL, ARG_NONE, COMPAT_NOOP, "cpulm always maps the weights read-only"},
    {"--mlock", NULL, ARG_NONE, COMPAT_NOOP, "weights stay mapped; cpulm does not lock them"},
    {"--no-warmup", NULL, ARG_NONE, COMPAT_NOOP,
     "run and chat do no warm-up pass; bench's one warm-up repetition is never timed"},
    {"-sm", "--split-mode", ARG_ONE, COMPAT_NOOP, "one CPU device, nothing to split"},
    {"-mg", "--main-gpu", ARG_ONE, COMPAT_NOOP, "cpulm runs on the CPU"},
    {"-ts", "--tensor-split", ARG_ONE, COMPAT_NOOP, "one CPU device, nothing to split"},
    {"-dev", "--device", ARG_ONE, COMPAT_NOOP, "cpulm runs on the CPU"},
    {"-nkvo", "--no-kv-offload", ARG_OPT, COMPAT_NOOP, "the KV cache is always in host memory"},
    {"-nopo", "--no-op-offload", ARG_OPT, COMPAT_NOOP, "cpulm runs on the CPU"},
    {"--color", "-co", ARG_OPT, COMPAT_NOOP, "cpulm prints no colors"},
    {"--jinja", NULL, ARG_NONE, COMPAT_NOOP, "cpulm always renders the model's Jinja template"},
    {"--log-disable", NULL, ARG_NONE, COMPAT_NOOP, "cpulm logs only errors and timings to stderr"},
    {"--simple-io", NULL, ARG_NONE, COMPAT_NOOP, "cpulm's I/O is always plain"},
    {"--prio", NULL, ARG_ONE, COMPAT_NOOP, "cpulm does not change thread priorities"},
    {"--poll", NULL, ARG_ONE, COMPAT_NOOP, "cpulm's workers spin briefly, then sleep"},
    {"-cb", "--cont-batching", ARG_NONE, COMPAT_NOOP, "cpulm serve always batches continuously"},
    {"-no-cnv", "--no-conversation", ARG_NONE, COMPAT_NOOP,
     "only `cpulm chat` (or run -cnv) converses"},
    {"-ub", "--ubatch-size", ARG_ONE, COMPAT_NOOP, "cpulm sizes its decode batches itself"},
    {"--no-context-shift", NULL, ARG_NONE, COMPAT_NOOP,
     "cpulm never shifts the context: run stops when it is full, chat drops whole old turns"},
    {"--in-prefix", "--in-suffix", ARG_ONE, COMPAT_UNSUPPORTED,
     "cpulm chat frames turns with the model's chat template (--chat-template NAME|FILE)"},
    {"--in-prefix-bos", NULL, ARG_NONE, COMPAT_UNSUPPORTED,
     "cpulm chat frames turns with the model's chat template (--chat-template NAME|FILE)"},
    {"-r", "--reverse-prompt", ARG_ONE, COMPAT_UNSUPPORTED,
     "reverse prompts are not implemented (chat ends a turn at the template's end token; "
     "serve takes \"stop\" strings)"},
    {"--keep", NULL, ARG_ONE, COMPAT_UNSUPPORTED,
     "chat keeps the system message and drops whole old turns when the context fills"},
    {"--prompt-cache", NULL, ARG_ONE, COMPAT_UNSUPPORTED,
     "prompt caches are not saved to files (cpulm serve caches prompts in RAM)"},
    {"--mirostat", NULL, ARG_ONE, COMPAT_UNSUPPORTED,
     "mirostat sampling is not implemented (--temp, --top-k, --top-p, --min-p are)"},
    {"--lora", NULL, ARG_ONE, COMPAT_UNSUPPORTED, "LoRA adapters are not implemented in cpulm"},
    {"--mmproj", NULL, ARG_ONE, COMPAT_UNSUPPORTED,
     "multimodal projectors (images, audio) are not supported"},
    {"-md", "--model-draft", ARG_ONE, COMPAT_UNSUPPORTED,
     "speculative decoding (-md, --spec ngram) is in `cpulm run`, `chat`, `bench` and `serve`, not "
     "in this command"},
    {"--spec", "--spec-type", ARG_ONE, COMPAT_UNSUPPORTED,
     "speculative decoding (-md, --spec ngram) is in `cpulm run`, `chat`, `bench` and `serve`, not "
     "in this command"},
    {"--draft-max", "--draft", ARG_ONE, COMPAT_UNSUPPORTED,
     "speculative decoding (-md, --spec ngram) is in `cpulm run`, `chat`, `bench` and `serve`, not "
     "in this command"},
    {"-hf", "--hf-repo", ARG_ONE, COMPAT_UNSUPPORTED,
     "download the model first with `cpulm pull`, then pass -m FILE"},
    {"-mu", "--model-url", ARG_ONE, COMPAT_UNSUPPORTED,
     "download the model first with `cpulm pull`, then pass -m FILE"},
    {"--rope-scaling", NULL, ARG_ONE, COMPAT_UNSUPPORTED,
     "RoPE scaling overrides are not supported (the model's own settings apply)"},
    {"--grp-attn-n", "-gan", ARG_ONE, COMPAT_UNSUPPORTED, "self-extend is not implemented"},
    {"--embedding", "--embeddings", ARG_NONE, COMPAT_UNSUPPORTED,
     "embeddings come from `cpulm embed` or `cpulm serve --embeddings` (POST /v1/embeddings)"},
};

static int is_switch_value(const char *v) {
    static const char *vals[] = {"on", "off", "auto", "0", "1", "true", "false"};
    for (size_t i = 0; v && i < sizeof vals / sizeof vals[0]; i++)
        if (!strcmp(v, vals[i])) return 1;
    return 0;
}

int cli_rest(cli *c) {
    for (size_t k = 0; k < sizeof compat / sizeof compat[0]; k++) {
        const cli_compat *e = &compat[k];
        if (!cli_flag(c, e->a, e->b)) continue;
        const char *flag = c->argv[c->i], *v = NULL;
        if (e->arg == ARG_ONE && !(v = cli_value(c))) return EXIT_USAGE;
        if (e->arg == ARG_OPT && c->i + 1 < c->argc && is_switch_value(c->argv[c->i + 1]))
            v = c->argv[++c->i];
        if (e->kind == COMPAT_UNSUPPORTED) {
            fprintf(stderr, "cpulm %s: %s is not supported: %s\n", c->cmd, flag, e->why);
            return EXIT_USAGE;
        }
        fprintf(stderr, "cpulm %s: note: ignoring %s%s%s: %s\n", c->cmd, flag, v ? " " : "",
                v ? v : "", e->why);
        return 0;
    }
    return cli_unknown(c);
}
