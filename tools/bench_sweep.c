/* bench_sweep.c: sweep lists ("1,2,4", "1-16*2") and the expansion of the bench axes into
 * the list of tests to run. Pure: no I/O, no timing. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "tools_api.h"

static int push(bench_list *out, int32_t v, char *err, size_t cap) {
    if (out->n >= BENCH_MAX_LIST) {
        snprintf(err, cap, "more than %d values", BENCH_MAX_LIST);
        return -1;
    }
    out->v[out->n++] = v;
    return 0;
}

/* Reads an integer at *s, advancing it; -1 when there is none or it is out of range. */
static int read_int(const char **s, int32_t lo, int32_t hi, int32_t *v, char *err, size_t cap) {
    char *end;
    errno = 0;
    long x = strtol(*s, &end, 10);
    if (end == *s || errno) {
        snprintf(err, cap, "expected a number at '%s'", *s);
        return -1;
    }
    if (x < lo || x > hi) {
        snprintf(err, cap, "want an integer in [%d, %d]", lo, hi);
        return -1;
    }
    *s = end;
    *v = (int32_t)x;
    return 0;
}

/* One item: N, A-B, A-B+S or A-B*M, ending at ',' or the end of the string. */
static int parse_item(const char **s, int32_t lo, int32_t hi, bench_list *out, char *err,
                      size_t cap) {
    int32_t a, b, step = 1;
    if (read_int(s, lo, hi, &a, err, cap)) return -1;
    if (**s != '-') return push(out, a, err, cap);
    ++*s;
    if (read_int(s, lo, hi, &b, err, cap)) return -1;
    char op = '+';
    if (**s == '+' || **s == '*') {
        op = *(*s)++;
        if (read_int(s, 1, 1 << 20, &step, err, cap)) return -1;
    }
    if (b < a || (op == '*' && (step < 2 || a < 1))) {
        snprintf(err, cap, "bad range %d-%d%c%d (want A <= B, and A >= 1, M >= 2 with *)", a, b, op,
                 step);
        return -1;
    }
    for (int64_t v = a; v <= b; v = op == '*' ? v * step : v + step)
        if (push(out, (int32_t)v, err, cap)) return -1;
    return 0;
}

int bench_list_parse(const char *s, int32_t lo, int32_t hi, bench_list *out, char *err,
                     size_t cap) {
    if (!*s) {
        snprintf(err, cap, "empty list");
        return -1;
    }
    while (*s) {
        if (parse_item(&s, lo, hi, out, err, cap)) return -1;
        if (*s == ',' && s[1])
            s++;
        else if (*s) {
            snprintf(err, cap, "unexpected '%s'", s);
            return -1;
        }
    }
    return 0;
}

static const struct {
    const char *name;
    cpulm_kv_type t;
} kv_names[] = {
    {"f16", CPULM_KV_F16}, {"q8_0", CPULM_KV_Q8_0}, {"q4_0", CPULM_KV_Q4_0}, {"f32", CPULM_KV_F32}};

const char *bench_kv_name(cpulm_kv_type t) {
    for (size_t i = 0; i < sizeof kv_names / sizeof kv_names[0]; i++)
        if (kv_names[i].t == t) return kv_names[i].name;
    return "?";
}

int bench_kv_list_parse(const char *s, bench_list *out, char *err, size_t cap) {
    while (*s) {
        size_t n = strcspn(s, ",");
        size_t i = 0, k = sizeof kv_names / sizeof kv_names[0];
        while (i < k && !(strlen(kv_names[i].name) == n && !strncmp(s, kv_names[i].name, n)))
            i++;
        if (i == k) {
            snprintf(err, cap, "unknown KV type '%.*s' (want f16, q8_0, q4_0 or f32)", (int)n, s);
            return -1;
        }
        if (push(out, (int32_t)kv_names[i].t, err, cap)) return -1;
        s += n;
        if (*s == ',') s++;
    }
    if (!out->n) snprintf(err, cap, "empty list");
    return out->n ? 0 : -1;
}

static void set_default(bench_list *l, int32_t v) {
    if (l->n == 0) {
        l->v[0] = v;
        l->n = 1;
    }
}

void bench_params_defaults(bench_params *p) {
    int any = p->n_prompt.n || p->n_gen.n || p->pg_prompt.n || p->npl.n || p->ttft.n;
    if (!any && p->spec_kind) /* --spec alone: the sg tests of 128 tokens */
        set_default(&p->n_gen, 128);
    if (!any && !p->spec_kind) { /* llama-bench's default tests */
        set_default(&p->n_prompt, 512);
        set_default(&p->n_gen, 128);
    }
    set_default(&p->threads, 0);
    set_default(&p->n_batch, 2048);
    set_default(&p->n_ubatch, 512);
    set_default(&p->type_k, CPULM_KV_F16);
    set_default(&p->n_depth, 0);
    set_default(&p->npp, 128);
    set_default(&p->ntg, 32);
}

typedef struct emitter {
    bench_test *out;
    int cap, n;
} emitter;

static void emit(emitter *e, const bench_test *base, bench_kind kind, int32_t np, int32_t ng,
                 int32_t npl) {
    if ((int64_t)np + ng == 0) return;
    if ((kind == BENCH_PAR || kind == BENCH_TTFT) && np == 0) return;
    if (e->out && e->n < e->cap) {
        bench_test t = *base;
        t.kind = kind;
        t.n_prompt = np;
        t.n_gen = ng;
        t.n_parallel = npl;
        e->out[e->n] = t;
    }
    e->n++;
}

/* Every test of the lists, for one configuration. */
static void emit_tests(emitter *e, const bench_params *p, const bench_test *base) {
    for (int i = 0; i < p->n_prompt.n; i++)
        if (p->n_prompt.v[i]) emit(e, base, BENCH_PP, p->n_prompt.v[i], 0, 1);
    for (int i = 0; i < p->n_gen.n; i++) {
        if (!p->n_gen.v[i]) continue;
        if (!p->spec_kind) {
            emit(e, base, BENCH_TG, 0, p->n_gen.v[i], 1);
            continue;
        }
        for (int32_t k = 0; k < 2; k++) { /* the plain baseline, then the speculation */
            bench_test sb = *base;
            sb.spec_kind = k ? p->spec_kind : 0;
            emit(e, &sb, BENCH_SPEC, p->spec_prompt_len, p->n_gen.v[i], 1);
        }
    }
    for (int i = 0; i < p->pg_prompt.n && i < p->pg_gen.n; i++)
        emit(e, base, BENCH_PG, p->pg_prompt.v[i], p->pg_gen.v[i], 1);
    for (int i = 0; i < p->npl.n; i++)
        for (int j = 0; j < p->npp.n; j++)
            for (int k = 0; k < p->ntg.n; k++)
                emit(e, base, BENCH_PAR, p->npp.v[j], p->ntg.v[k], p->npl.v[i]);
    for (int i = 0; i < p->ttft.n; i++)
        emit(e, base, BENCH_TTFT, p->ttft.v[i], 0, 1);
}

int bench_expand(const bench_params *p, bench_test *out, int cap) {
    emitter e = {out, cap, 0};
    static const bench_list none = {{0}, 1}; /* threads_batch unset: follow n_threads */
    const bench_list *tb = p->threads_batch.n ? &p->threads_batch : &none;
    for (int dp = 0; dp < p->n_depth.n; dp++)
        for (int a = 0; a < p->type_k.n; a++)
            for (int b = 0; b < p->n_batch.n; b++)
                for (int u = 0; u < p->n_ubatch.n; u++)
                    for (int t = 0; t < p->threads.n; t++)
                        for (int k = 0; k < tb->n; k++) {
                            bench_test base = {.type_k = (cpulm_kv_type)p->type_k.v[a],
                                               .n_batch = p->n_batch.v[b],
                                               .n_ubatch = p->n_ubatch.v[u],
                                               .n_threads = p->threads.v[t],
                                               .n_threads_batch = tb->v[k],
                                               .n_depth = p->n_depth.v[dp]};
                            emit_tests(&e, p, &base);
                        }
    return e.n;
}

void bench_test_name(const bench_test *t, char *buf, size_t cap) {
    switch (t->kind) {
    case BENCH_PP: snprintf(buf, cap, "pp%d", t->n_prompt); break;
    case BENCH_TG: snprintf(buf, cap, "tg%d", t->n_gen); break;
    case BENCH_PG:
        if (t->n_gen == 0)
            snprintf(buf, cap, "pp%d", t->n_prompt);
        else if (t->n_prompt == 0)
            snprintf(buf, cap, "tg%d", t->n_gen);
        else
            snprintf(buf, cap, "pp%d+tg%d", t->n_prompt, t->n_gen);
        break;
    case BENCH_PAR:
        snprintf(buf, cap, "npl%d pp%d+tg%d", t->n_parallel, t->n_prompt, t->n_gen);
        break;
    case BENCH_TTFT: snprintf(buf, cap, "ttft%d", t->n_prompt); break;
    case BENCH_SPEC:
        snprintf(buf, cap, "sg%d %s", t->n_gen,
                 cpulm_spec_kind_name((cpulm_spec_kind)t->spec_kind));
        break;
    }
    size_t len = strlen(buf);
    if (t->n_depth > 0 && len < cap) snprintf(buf + len, cap - len, " @ d%d", t->n_depth);
}

int64_t bench_test_tokens(const bench_test *t) {
    switch (t->kind) {
    case BENCH_PP:
    case BENCH_TTFT: return t->n_prompt;
    case BENCH_TG:
    case BENCH_SPEC: return t->n_gen;
    case BENCH_PG: return (int64_t)t->n_prompt + t->n_gen;
    case BENCH_PAR: return (int64_t)t->n_parallel * (t->n_prompt + t->n_gen);
    }
    return 0;
}
