/* options.c: parsing, --help and docs generated from the option table (options.def). Must not
 * know any command's meaning of a flag beyond the table: commands act on the ids. */
#define _POSIX_C_SOURCE 200809L
#include "options.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define CLI_OPT_ID(id, names, arg, type, lo, hi, cmds, lists, def, help, llama) \
    {id, names, arg, type, lo, hi, cmds, lists, def, help, llama},
static const cli_opt table[] = {
#include "options.def"
};
#undef CLI_OPT_ID

static const char *const cmd_names[] = {"run",   "chat",     "template", "info",         "logits",
                                        "embed", "tokenize", "quantize", "perplexity",   "pull",
                                        "bench", "roofline", "plan",     "report",       "synth",
                                        "serve", "loadtest", "compare",  "grammar-bench"};
#define N_CMDS (sizeof cmd_names / sizeof cmd_names[0])

const cli_opt *cli_opt_get(int id) {
    return id >= 0 && id < CLI_OPT_COUNT ? &table[id] : NULL;
}

unsigned cli_cmd_bit(const char *cmd) {
    for (size_t k = 0; k < N_CMDS; k++)
        if (!strcmp(cmd, cmd_names[k])) return 1u << k;
    return 0;
}

/* 1 when s is one of the row's space-separated names. */
static int has_name(const char *names, const char *s) {
    size_t n = strlen(s);
    for (const char *p = names; *p;) {
        size_t k = strcspn(p, " ");
        if (k == n && !strncmp(p, s, n)) return 1;
        p += k;
        p += *p == ' ';
    }
    return 0;
}

static const cli_opt *find(const char *s, unsigned bit) {
    for (size_t k = 0; k < CLI_OPT_COUNT; k++)
        if ((table[k].cmds & bit) && has_name(table[k].names, s)) return &table[k];
    return NULL;
}

/* Index of v in "a|b|c", or -1. */
static int choice_index(const char *choices, const char *v) {
    size_t n = strlen(v);
    int i = 0;
    for (const char *p = choices; *p; i++) {
        size_t k = strcspn(p, "|");
        if (k == n && !strncmp(p, v, n)) return i;
        p += k;
        p += *p == '|';
    }
    return -1;
}

static int is_switch_value(const char *v) {
    static const char *vals[] = {"on", "off", "auto", "0", "1", "true", "false"};
    for (size_t i = 0; v && i < sizeof vals / sizeof vals[0]; i++)
        if (!strcmp(v, vals[i])) return 1;
    return 0;
}

/* A KV type, or (in a list command) a comma list of them, each valid. */
static int kv_value(const char *s, int list, cpulm_kv_type *t) {
    char buf[128];
    if (strlen(s) >= sizeof buf) return 0;
    strcpy(buf, s);
    int n = 0;
    for (char *save = NULL, *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save), n++)
        if (!cli_kv_type(p, t)) return 0;
    return n == 1 || (list && n > 1);
}

/* Parses the value of row o (already read into v->s) by its type. 1 = ok. */
static int typed_value(cli *c, const cli_opt *o, cli_val *v, int list) {
    const char *s = v->s;
    char *end;
    if (list) { /* the command parses the list; KV items are checked here */
        cpulm_kv_type t;
        if (o->type != CLI_T_KV || kv_value(s, 1, &t)) return 1;
    } else if (o->type == CLI_T_INT) {
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (!errno && end != s && !*end && x >= o->lo && x <= o->hi) return v->i = x, 1;
        fprintf(stderr, "cpulm %s: bad value '%s' for %s (want an integer in [%lld, %lld])\n",
                c->cmd, s, v->flag, (long long)o->lo, (long long)o->hi);
        return 0;
    } else if (o->type == CLI_T_FLOAT) {
        double x = strtod(s, &end);
        if (end != s && !*end && x >= o->lo && x <= o->hi) return v->f = x, 1;
        fprintf(stderr, "cpulm %s: bad value '%s' for %s (want a number in [%g, %g])\n", c->cmd, s,
                v->flag, o->lo, o->hi);
        return 0;
    } else if (o->type == CLI_T_CHOICE) {
        if ((v->i = choice_index(o->arg, s)) >= 0) return 1;
    } else if (o->type == CLI_T_KV) {
        cpulm_kv_type t;
        if (kv_value(s, 0, &t)) return v->i = t, 1;
    } else if (o->type == CLI_T_NUMA) {
        cpulm_numa mode;
        if (cpulm_numa_parse(s, &mode) == CPULM_OK) return cpulm_numa_init(mode), 1;
    } else {
        return 1;
    }
    fprintf(stderr, "cpulm %s: bad value '%s' for %s (want %s)\n", c->cmd, s, v->flag,
            o->type == CLI_T_KV     ? "f16, q8_0, q4_0 or f32"
            : o->type == CLI_T_NUMA ? "none, distribute, isolate or numactl"
                                    : o->arg);
    return 0;
}

/* K and V share one type in cpulm: every KV spelling must give the same value. */
static int kv_same(cli *c, const cli_val *v) {
    if (c->kv_seen && strcmp(c->kv_seen, v->s) != 0) {
        fprintf(stderr, "cpulm %s: K and V share one cache type in cpulm; got %s and %s\n", c->cmd,
                c->kv_seen, v->s);
        return 0;
    }
    c->kv_seen = v->s;
    return 1;
}

/* The llama.cpp rows that are accepted with a note or refused. */
static int compat(cli *c, const cli_opt *o, const cli_val *v) {
    if (o->type == CLI_T_UNSUPPORTED) {
        fprintf(stderr, "cpulm %s: %s is not supported: %s\n", c->cmd, v->flag, o->help);
        return CLI_ERR;
    }
    fprintf(stderr, "cpulm %s: note: ignoring %s%s%s: %s\n", c->cmd, v->flag, v->s ? " " : "",
            v->s ? v->s : "", o->help);
    return CLI_SKIP;
}

int cli_next(cli *c, cli_val *v) {
    const char *a = c->argv[c->i];
    unsigned bit = cli_cmd_bit(c->cmd);
    memset(v, 0, sizeof *v);
    v->flag = a;
    if (a[0] != '-' || !a[1]) return CLI_POS;
    const cli_opt *o = v->opt = find(a, bit);
    if (!o) {
        cli_unknown(c);
        return CLI_ERR;
    }
    int takes = o->type != CLI_T_SWITCH && o->type != CLI_T_NOOP && o->type != CLI_T_NOOP_OPT &&
                !(o->type == CLI_T_UNSUPPORTED && !o->arg);
    if (o->type == CLI_T_NOOP_OPT && c->i + 1 < c->argc && is_switch_value(c->argv[c->i + 1]))
        v->s = c->argv[++c->i];
    if (takes && !(v->s = cli_value(c))) return CLI_ERR;
    if (o->type == CLI_T_STR2 && !(v->s2 = cli_value(c))) return CLI_ERR;
    if (o->type >= CLI_T_NOOP) return compat(c, o, v);
    if (takes && !typed_value(c, o, v, (o->lists & bit) != 0)) return CLI_ERR;
    if (o->type == CLI_T_KV && !kv_same(c, v)) return CLI_ERR;
    return o->id;
}

int cli_within(cli *c, const cli_val *v, long long lo, long long hi) {
    if (v->i >= lo && v->i <= hi) return 1;
    fprintf(stderr, "cpulm %s: bad value '%s' for %s (want an integer in [%lld, %lld])\n", c->cmd,
            v->s, v->flag, lo, hi);
    return 0;
}

int cli_at_least(cli *c, const cli_val *v, long long lo) {
    return cli_within(c, v, lo, (long long)v->opt->hi);
}

int cli_parse(cli *c, void (*usage)(FILE *f), cli_handler fn, void *ctx) {
    for (c->i = 1; c->i < c->argc; c->i++) {
        cli_val v;
        int id = cli_next(c, &v), rc;
        if (id == CLI_SKIP) continue;
        if (id == CLI_ERR) return EXIT_USAGE;
        if (id == OPT_HELP) {
            usage(stdout);
            exit(0);
        }
        if ((rc = fn(c, id, &v, ctx)) != 0) return rc;
    }
    return 0;
}

int cli_unhandled(cli *c, const cli_val *v) {
    if (!v->opt) return cli_unknown(c); /* CLI_POS */
    fprintf(stderr, "cpulm %s: internal error: option %s is in the table but not handled\n", c->cmd,
            v->flag);
    return 1;
}

int cli_sampler_opt(int id, const cli_val *v, cpulm_sampler_params *sp) {
    switch (id) {
    case OPT_TEMP: sp->temp = (float)v->f; break;
    case OPT_TOP_K: sp->top_k = (int)v->i; break;
    case OPT_TOP_P: sp->top_p = (float)v->f; break;
    case OPT_MIN_P: sp->min_p = (float)v->f; break;
    case OPT_REPEAT_PENALTY: sp->repeat_penalty = (float)v->f; break;
    case OPT_REPEAT_LAST_N: sp->repeat_last_n = (int)v->i; break;
    case OPT_PRESENCE_PENALTY: sp->presence_penalty = (float)v->f; break;
    case OPT_FREQUENCY_PENALTY: sp->frequency_penalty = (float)v->f; break;
    case OPT_SEED:
        if (v->i >= 0) sp->seed = (uint64_t)v->i;
        break;
    default: return 0;
    }
    return 1;
}

/* --attn's choices in options.def's order ("ref|fast|walk|auto|bf16") and their values */
static const char *const attn_names[] = {"ref", "fast", "walk", "auto", "bf16"};
static const int attn_values[] = {0, 1, -1, CPULM_ATTN_AUTO, CPULM_ATTN_BF16};

const char *cli_attn_name(int attn_fast) {
    for (size_t i = 0; i < sizeof attn_values / sizeof attn_values[0]; i++)
        if (attn_values[i] == attn_fast) return attn_names[i];
    return "ref";
}

/* --attn bf16 on a level without bf16 products runs as auto (cpulm_attn_resolve): said once,
 * as a run that asked for bf16's speed should not read like one that got it. */
int cli_attn_value(const cli_val *v) {
    const int a = v->i >= 0 && v->i < (long long)(sizeof attn_values / sizeof attn_values[0])
                      ? attn_values[v->i]
                      : 0;
    static int said;
    if (cpulm_attn_resolve(a) != a && !said++)
        fprintf(stderr,
                "cpulm: note: --attn bf16 needs AVX512-BF16; kernel level %s has no bf16 "
                "products, so prompts run --attn auto (f32 tiles)\n",
                cpulm_kernel_level());
    return a;
}
