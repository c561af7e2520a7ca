/* workload.c: workload files, request sampling and prompt text (see workload.h). */
#define _GNU_SOURCE
#include "workload.h"
#include "textfile.h"

#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One token each, with their leading space, in GPT-2 / Llama 3 BPE and in Llama's
 * SentencePiece vocabulary: the most frequent English words. */
static const char *const WORDS[] = {
    "the",   "of",    "and",   "to",     "in",    "is",    "that",   "for",   "it",    "with",
    "as",    "was",   "on",    "be",     "at",    "by",    "this",   "had",   "not",   "are",
    "but",   "from",  "or",    "have",   "an",    "they",  "which",  "one",   "you",   "were",
    "all",   "there", "would", "their",  "we",    "been",  "has",    "when",  "who",   "will",
    "more",  "no",    "if",    "out",    "so",    "what",  "up",     "its",   "about", "into",
    "than",  "them",  "can",   "only",   "other", "new",   "some",   "could", "time",  "these",
    "two",   "may",   "then",  "do",     "first", "any",   "my",     "now",   "such",  "like",
    "our",   "over",  "even",  "most",   "made",  "after", "also",   "did",   "many",  "before",
    "must",  "back",  "years", "where",  "much",  "your",  "way",    "well",  "down",  "should",
    "each",  "just",  "those", "people", "how",   "too",   "little", "good",  "very",  "make",
    "world", "still", "own",   "see",    "work",  "long",  "get",    "here",  "both",  "life",
    "being", "under", "never", "day",    "same",  "know",  "while",  "last",  "might", "great",
    "old",   "year",  "off",   "come",   "since", "go",    "came",   "right", "used",  "take"};
#define N_WORDS (sizeof WORDS / sizeof WORDS[0])
_Static_assert(N_WORDS == WL_N_WORDS, "WL_N_WORDS (workload.h) counts WORDS");

const char *workload_word(int i) {
    return i >= 0 && i < (int)N_WORDS ? WORDS[i] : NULL;
}

double workload_vocab_finish(wl_vocab *v) {
    double sum = 0;
    v->cheapest = 0;
    if (!(v->first > 0) || !(v->added >= 0)) return 0;
    for (int i = 0; i < WL_N_WORDS; i++) {
        if (!(v->word[i] > 0)) return 0;
        sum += v->word[i];
        if (v->word[i] < v->word[v->cheapest]) v->cheapest = i;
    }
    return sum / WL_N_WORDS;
}

static uint64_t mix64(uint64_t x) { /* splitmix64's finalizer */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static double unit(uint64_t *s) { /* (0, 1) */
    *s = mix64(*s);
    return ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
}

static double gauss(uint64_t *s) { /* Box-Muller */
    double u = unit(s), v = unit(s);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static int32_t sample(const wl_dist *d, uint64_t *s) {
    double x = d->a;
    if (d->kind == WL_UNIFORM)
        x = d->a + floor(unit(s) * (d->b - d->a + 1));
    else if (d->kind == WL_NORMAL)
        x = d->a + d->b * gauss(s);
    else if (d->kind == WL_LOGNORMAL && d->a > 0) {
        double s2 = log(1.0 + (d->b * d->b) / (d->a * d->a));
        x = exp(log(d->a) - s2 / 2 + sqrt(s2) * gauss(s));
    }
    x = floor(x + 0.5);
    if (x < d->min) x = d->min;
    if (x > d->max) x = d->max;
    return (int32_t)x;
}

/* ---- parsing ---- */

static int bad(char *err, size_t cap, const char *field, const char *why) {
    snprintf(err, cap, "%s: %s", field, why);
    return -1;
}

static int num_field(const cpulm_json *o, const char *k, double lo, double hi, double *out) {
    const cpulm_json *v = cpulm_json_get(o, k);
    if (!v) return 0;
    if (v->type != CPULM_JSON_NUMBER) return -1;
    double x = cpulm_json_num(v, 0);
    if (!(x >= lo && x <= hi)) return -1;
    *out = x;
    return 1;
}

/* A number (fixed) or {"dist": ..., ...}. */
static int parse_dist(const cpulm_json *v, const char *field, wl_dist *d, char *err, size_t cap) {
    const double big = 1 << 24;
    *d = (wl_dist){.kind = WL_FIXED, .min = 1, .max = 1 << 24};
    if (!v) return bad(err, cap, field, "missing");
    if (v->type == CPULM_JSON_NUMBER) {
        d->a = cpulm_json_num(v, 0);
        return d->a >= 1 && d->a <= big ? 0 : bad(err, cap, field, "want a length in [1, 2^24]");
    }
    if (v->type != CPULM_JSON_OBJECT) return bad(err, cap, field, "want a number or an object");
    const char *k = cpulm_json_str(cpulm_json_get(v, "dist"));
    static const char *kinds[] = {"fixed", "uniform", "normal", "lognormal"};
    int kind = -1;
    for (int i = 0; k && i < 4; i++)
        if (!strcmp(k, kinds[i])) kind = i;
    if (kind < 0)
        return bad(err, cap, field, "\"dist\" must be fixed, uniform, normal or lognormal");
    d->kind = (wl_dist_kind)kind;
    double mn = 1, mx = big;
    int r1 = kind == WL_FIXED     ? num_field(v, "value", 1, big, &d->a)
             : kind == WL_UNIFORM ? num_field(v, "min", 1, big, &d->a)
                                  : num_field(v, "mean", 1, big, &d->a);
    int r2 = kind == WL_FIXED     ? 1
             : kind == WL_UNIFORM ? num_field(v, "max", 1, big, &d->b)
                                  : num_field(v, "stddev", 0, big, &d->b);
    if (r1 != 1 || r2 != 1)
        return bad(err, cap, field,
                   kind == WL_FIXED     ? "fixed needs \"value\" in [1, 2^24]"
                   : kind == WL_UNIFORM ? "uniform needs \"min\" and \"max\" in [1, 2^24]"
                                        : "needs \"mean\" in [1, 2^24] and \"stddev\" >= 0");
    if (kind == WL_UNIFORM) mn = d->a, mx = d->b;
    if (num_field(v, "min", 1, big, &mn) < 0 || num_field(v, "max", 1, big, &mx) < 0 || mn > mx)
        return bad(err, cap, field, "\"min\" and \"max\" must be in [1, 2^24], min <= max");
    d->min = (int32_t)mn;
    d->max = (int32_t)mx;
    return 0;
}

static int parse_arrival(const cpulm_json *v, workload *w, char *err, size_t cap) {
    if (!v) return 0;
    const char *p = cpulm_json_str(cpulm_json_get(v, "process"));
    if (!p || (strcmp(p, "poisson") && strcmp(p, "constant")))
        return bad(err, cap, "arrival.process", "want \"poisson\" or \"constant\"");
    w->arrival = strcmp(p, "poisson") ? WL_ARRIVE_CONSTANT : WL_ARRIVE_POISSON;
    if (num_field(v, "rate", 1e-6, 1e6, &w->rate) < 0)
        return bad(err, cap, "arrival.rate", "want requests per second in (0, 1e6]");
    return 0;
}

static int parse_root(const cpulm_json *r, workload *w, char *err, size_t cap) {
    if (!r || r->type != CPULM_JSON_OBJECT) return bad(err, cap, "workload", "want a JSON object");
    const char *s = cpulm_json_str(cpulm_json_get(r, "name"));
    if (s) snprintf(w->name, sizeof w->name, "%s", s);
    if ((s = cpulm_json_str(cpulm_json_get(r, "description"))))
        snprintf(w->description, sizeof w->description, "%s", s);
    if (parse_dist(cpulm_json_get(r, "prompt_tokens"), "prompt_tokens", &w->prompt, err, cap) ||
        parse_dist(cpulm_json_get(r, "output_tokens"), "output_tokens", &w->output, err, cap))
        return -1;
    double x = 0;
    if (num_field(r, "shared_prefix_tokens", 0, 1 << 24, &x) < 0)
        return bad(err, cap, "shared_prefix_tokens", "want a length in [0, 2^24]");
    w->prefix_tokens = (int32_t)x;
    w->prefix_fraction = w->prefix_tokens > 0 ? 1.0 : 0.0;
    if (num_field(r, "shared_prefix_fraction", 0, 1, &w->prefix_fraction) < 0)
        return bad(err, cap, "shared_prefix_fraction", "want a number in [0, 1]");
    x = 1;
    if (num_field(r, "turns", 1, 1 << 20, &x) < 0)
        return bad(err, cap, "turns", "want an integer >= 1");
    w->turns = (int32_t)x;
    x = 0;
    if (num_field(r, "turn_growth_tokens", 0, 1 << 24, &x) < 0)
        return bad(err, cap, "turn_growth_tokens", "want a length in [0, 2^24]");
    w->turn_growth = (int32_t)x;
    x = 1;
    if (num_field(r, "seed", 0, 9007199254740992.0, &x) < 0)
        return bad(err, cap, "seed", "want a non-negative integer");
    w->seed = (uint64_t)x;
    const char *api = cpulm_json_str(cpulm_json_get(r, "api"));
    if (api && strcmp(api, "chat") && strcmp(api, "completions"))
        return bad(err, cap, "api", "want \"chat\" or \"completions\"");
    w->chat = api && !strcmp(api, "chat");
    return parse_arrival(cpulm_json_get(r, "arrival"), w, err, cap);
}

int workload_parse(const char *json, size_t n, workload *w, char *err, size_t cap) {
    memset(w, 0, sizeof *w);
    w->arrival = WL_ARRIVE_POISSON;
    cpulm_json_doc *d = NULL;
    if (cpulm_json_parse(json, n, NULL, &d, NULL, NULL) != CPULM_OK)
        return bad(err, cap, "workload", "not valid JSON");
    int rc = parse_root(cpulm_json_root(d), w, err, cap);
    cpulm_json_free(d);
    return rc;
}

void workload_fixed(workload *w, int32_t prompt_tokens, int32_t output_tokens) {
    memset(w, 0, sizeof *w);
    snprintf(w->name, sizeof w->name, "fixed");
    w->prompt = (wl_dist){.kind = WL_FIXED, .a = prompt_tokens, .min = 1, .max = 1 << 24};
    w->output = (wl_dist){.kind = WL_FIXED, .a = output_tokens, .min = 1, .max = 1 << 24};
    w->turns = 1;
    w->seed = 1;
    w->arrival = WL_ARRIVE_POISSON;
}

/* ---- files ---- */

static int locate(const char *name, char *out, size_t cap) {
    const char *env = getenv("CPULM_WORKLOADS");
    if (env && *env) {
        snprintf(out, cap, "%s/%s.json", env, name);
        if (access(out, R_OK) == 0) return 0;
    }
    char exe[2048];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char *rel[] = {"../data/workloads", "../share/cpulm/workloads"};
    if (n > 0) {
        exe[n] = 0;
        char *dir = dirname(exe);
        for (int i = 0; i < 2; i++) {
            snprintf(out, cap, "%s/%s/%s.json", dir, rel[i], name);
            if (access(out, R_OK) == 0) return 0;
        }
    }
    snprintf(out, cap, "data/workloads/%s.json", name);
    return access(out, R_OK) == 0 ? 0 : -1;
}

int workload_load(const char *name_or_path, workload *w, char *err, size_t cap) {
    char path[4096];
    size_t n = strlen(name_or_path);
    int is_file = strchr(name_or_path, '/') || (n > 5 && !strcmp(name_or_path + n - 5, ".json"));
    if (is_file)
        snprintf(path, sizeof path, "%s", name_or_path);
    else if (strspn(name_or_path, "abcdefghijklmnopqrstuvwxyz0123456789_-") != n ||
             locate(name_or_path, path, sizeof path) != 0) {
        snprintf(err, cap, "no workload '%s' (profiles: chat, rag, agent, summarize; or a file)",
                 name_or_path);
        return -1;
    }
    char *text;
    size_t len;
    if (textfile_read(path, 1 << 20, &text, &len, err, cap)) return -1;
    char msg[256];
    int rc = workload_parse(text, len, w, msg, sizeof msg);
    free(text);
    if (rc) snprintf(err, cap, "%s: %s", path, msg);
    if (!rc && !w->name[0]) snprintf(w->name, sizeof w->name, "%.63s", basename(path));
    return rc;
}

/* ---- requests ---- */

void workload_request(const workload *w, int64_t i, wl_request *r) {
    int32_t turns = w->turns > 0 ? w->turns : 1;
    int64_t session = i / turns;
    uint64_t s = mix64(w->seed * 0x100000001b3ull + (uint64_t)session);
    r->turn = (int32_t)(i % turns);
    r->text_seed = s;
    int32_t base = sample(&w->prompt, &s);
    int shared = w->prefix_tokens > 0 && unit(&s) < w->prefix_fraction;
    uint64_t so = mix64(s ^ (uint64_t)(i + 1)); /* output length per request, not per session */
    r->output_tokens = sample(&w->output, &so);
    int64_t p = (int64_t)base + (int64_t)r->turn * w->turn_growth;
    r->prompt_tokens = (int32_t)(p > (1 << 24) ? (1 << 24) : p);
    r->prefix_tokens =
        shared ? (w->prefix_tokens < r->prompt_tokens ? w->prefix_tokens : r->prompt_tokens) : 0;
}

/* Appends words drawn from *s while their tokens fit within budget (*used counts the tokens
 * so far), stopping at the first that does not (so a smaller budget's words are the first
 * of a larger one's), then the cheapest word while it fits. */
static void fill(const wl_vocab *v, uint64_t *s, double budget, double *used, cpulm_buf *out) {
    const double eps = 1e-6, c = v->word[v->cheapest];
    for (;;) {
        uint64_t next = mix64(*s);
        int k = (int)(next % N_WORDS);
        if (*used + v->word[k] > budget + eps) break;
        *s = next;
        *used += v->word[k];
        cpulm_buf_printf(out, " %s", WORDS[k]);
    }
    for (; *used + c <= budget + eps; *used += c)
        cpulm_buf_printf(out, " %s", WORDS[v->cheapest]);
}

/* The text of r sized in the server's tokens (w->vocab): the prefix's words (the same for
 * every request that shares it) up to prefix_tokens, then the request's own up to
 * prompt_tokens, both counting the tokens the server adds. */
static void text_in_tokens(const workload *w, const wl_request *r, cpulm_buf *out) {
    const wl_vocab *v = w->vocab;
    uint64_t shared = mix64(w->seed ^ 0x5ca1ab1eull), own = r->text_seed;
    double total = r->prompt_tokens - v->added, used = v->first;
    cpulm_buf_puts(out, "The");
    if (r->prefix_tokens > 0) {
        double pre = r->prefix_tokens - v->added;
        fill(v, &shared, pre < total ? pre : total, &used, out);
    }
    fill(v, &own, total, &used, out);
}

void workload_prompt_text(const workload *w, const wl_request *r, cpulm_buf *out) {
    if (w->vocab) {
        text_in_tokens(w, r, out);
        return;
    }
    uint64_t shared = mix64(w->seed ^ 0x5ca1ab1eull), own = r->text_seed;
    for (int32_t k = 0; k < r->prompt_tokens; k++) {
        uint64_t *s = k < r->prefix_tokens ? &shared : &own;
        *s = mix64(*s);
        const char *word = WORDS[*s % N_WORDS];
        if (k == 0)
            cpulm_buf_puts(out, "The"); /* not a shared word: a capital opens every prompt */
        else
            cpulm_buf_printf(out, " %s", word);
    }
}

void workload_means(const workload *w, int n, double *prompt, double *output, double *prefix) {
    double p = 0, o = 0, x = 0;
    for (int i = 0; i < n; i++) {
        wl_request r;
        workload_request(w, i, &r);
        p += r.prompt_tokens;
        o += r.output_tokens;
        x += r.prefix_tokens;
    }
    *prompt = n ? p / n : 0;
    *output = n ? o / n : 0;
    *prefix = n ? x / n : 0;
}

static void dist_text(const wl_dist *d, char *out, size_t cap) {
    static const char *names[] = {"fixed", "uniform", "normal", "lognormal"};
    if (d->kind == WL_FIXED)
        snprintf(out, cap, "%g", d->a);
    else
        snprintf(out, cap, "%s(%g, %g) in [%d, %d]", names[d->kind], d->a, d->b, d->min, d->max);
}

static int32_t scale_len(int32_t v, double f) {
    double x = floor(v * f + 0.5);
    return x < 1 ? 1 : x > (1 << 24) ? 1 << 24 : (int32_t)x;
}

static void scale_dist(wl_dist *d, double f) {
    d->a *= f;
    if (d->kind != WL_FIXED) d->b *= f; /* uniform's upper end, or the standard deviation */
    if (d->kind == WL_UNIFORM) d->a = floor(d->a + 0.5), d->b = floor(d->b + 0.5);
    d->min = scale_len(d->min, f);
    d->max = scale_len(d->max, f);
}

void workload_scale(workload *w, double prompt_scale, double output_scale) {
    if (prompt_scale == 1 && output_scale == 1) return;
    scale_dist(&w->prompt, prompt_scale);
    scale_dist(&w->output, output_scale);
    if (w->prefix_tokens > 0) w->prefix_tokens = scale_len(w->prefix_tokens, prompt_scale);
    if (w->turn_growth > 0) w->turn_growth = scale_len(w->turn_growth, prompt_scale);
    char name[sizeof w->name];
    snprintf(name, sizeof name, "%.30s x%.4g/%.4g", w->name, prompt_scale, output_scale);
    memcpy(w->name, name, sizeof name);
}

void workload_describe(const workload *w, char *out, size_t cap) {
    char p[96], o[96];
    dist_text(&w->prompt, p, sizeof p);
    dist_text(&w->output, o, sizeof o);
    int k = snprintf(out, cap, "workload %s: prompt %s tokens, output %s", w->name, p, o);
    if (k > 0 && (size_t)k < cap && w->prefix_tokens > 0)
        k += snprintf(out + k, cap - (size_t)k, ", shared prefix %d tokens in %g%% of requests",
                      w->prefix_tokens, w->prefix_fraction * 100);
    if (k > 0 && (size_t)k < cap && w->turns > 1)
        snprintf(out + k, cap - (size_t)k, ", sessions of %d turns growing %d tokens a turn",
                 w->turns, w->turn_growth);
}
