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

const char *cli_value(cli *c) {
    if (c->i + 1 >= c->argc) {
        fprintf(stderr, "cpulm %s: option '%s' needs a value\n", c->cmd, c->argv[c->i]);
        return NULL;
    }
    return c->argv[++c->i];
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

int cli_gen_status(const char *cmd, cpulm_status st) {
    if (st == CPULM_OK || st == CPULM_ERR_KV_FULL) return 0;
    fprintf(stderr, "cpulm %s: generation failed: %s\n", cmd, cpulm_status_str(st));
    return 1;
}

double cli_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* CPU time of the whole process (all threads): unlike the wall clock it does not grow when
 * other processes take the cores, so A/B ratios on a shared machine use it. */
double cli_cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
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
