/* options.h: the one option table of the cpulm command (tools/options.def) and what is
 * generated from it: parsing (cli_next), each command's --help option list (cli_help) and
 * the docs' flag tables (`cpulm help --markdown` -> docs/FLAGS.md). A flag shared by several
 * commands is one row, so it has one spelling, one range and one help text everywhere. */
#ifndef CPULM_TOOLS_OPTIONS_H
#define CPULM_TOOLS_OPTIONS_H

#include <stdio.h>

#include "common.h"

/* Commands as bits: a row's `cmds` is the set of commands that accept it. */
enum {
    CLI_RUN = 1u << 0,
    CLI_CHAT = 1u << 1,
    CLI_TEMPLATE = 1u << 2,
    CLI_INFO = 1u << 3,
    CLI_LOGITS = 1u << 4,
    CLI_EMBED = 1u << 5,
    CLI_TOKENIZE = 1u << 6,
    CLI_QUANTIZE = 1u << 7,
    CLI_PERPLEXITY = 1u << 8,
    CLI_PULL = 1u << 9,
    CLI_BENCH = 1u << 10,
    CLI_ROOFLINE = 1u << 11,
    CLI_PLAN = 1u << 12,
    CLI_REPORT = 1u << 13,
    CLI_SYNTH = 1u << 14,
    CLI_SERVE = 1u << 15,
    CLI_LOADTEST = 1u << 16,
    CLI_COMPARE = 1u << 17,
    CLI_GRAMMAR_BENCH = 1u << 18,
};
#define CLI_ALL 0x7ffffu

/* How a row's value is read. NOOP/NOOP_OPT/UNSUPPORTED are llama.cpp's flags that mean
 * nothing on a CPU (accepted with a note; NOOP_OPT takes the next argument only when it is a
 * switch value such as on/off/0/1, as -fa does) or name a feature cpulm lacks (exit 2 with
 * the row's llama.cpp note as the reason). */
typedef enum cli_type {
    CLI_T_SWITCH,      /* no value */
    CLI_T_INT,         /* integer in [lo, hi] -> v.i */
    CLI_T_FLOAT,       /* number in [lo, hi] -> v.f */
    CLI_T_STR,         /* any text -> v.s */
    CLI_T_STR2,        /* two values -> v.s, v.s2 */
    CLI_T_CHOICE,      /* one of arg's "a|b|c" -> v.i = its index, v.s */
    CLI_T_KV,          /* KV cache type (f16 q8_0 q4_0 f32) -> v.i = cpulm_kv_type, v.s */
    CLI_T_NUMA,        /* --numa mode: validated and applied process-wide */
    CLI_T_NOOP,        /* llama.cpp flag without meaning here, no value */
    CLI_T_NOOP_ARG,    /* ... with one value */
    CLI_T_NOOP_OPT,    /* ... with an optional switch value */
    CLI_T_UNSUPPORTED, /* feature cpulm lacks (arg: NULL = no value) */
} cli_type;

typedef struct cli_opt {
    int id;
    const char *names; /* space-separated spellings, the first is the main one */
    const char *arg;   /* value placeholder in help (NULL for switches); CHOICE: "a|b|c" */
    cli_type type;
    double lo, hi;     /* INT and FLOAT range */
    unsigned cmds;     /* commands that accept the row */
    unsigned lists;    /* commands where the value is a comma list (bench's sweep axes) */
    const char *def;   /* default, as shown in help and docs ("" = none) */
    const char *help;  /* one paragraph; wrapped when printed */
    const char *llama; /* llama.cpp compatibility note ("" = none) */
} cli_opt;

#define CLI_OPT_ID(id, ...) id,
enum cli_opt_id {
#include "options.def"
    CLI_OPT_COUNT
};
#undef CLI_OPT_ID

/* cli_next's results other than a row id. */
enum { CLI_POS = -1, CLI_SKIP = -2, CLI_ERR = -3 };

/* A parsed value. In a command where the row's value is a list (opt->lists), only v.s is
 * set, checked by the command against opt->lo/hi. */
typedef struct cli_val {
    const cli_opt *opt;
    const char *flag; /* the spelling given */
    const char *s, *s2;
    long long i;
    double f;
} cli_val;

/* Reads argv[c->i] (and its values, advancing c->i) for command c->cmd: a row id, CLI_POS
 * for a positional argument ("-" or not starting with '-'), CLI_SKIP for a llama.cpp flag
 * accepted with a note, CLI_ERR after printing why (unknown option, bad or missing value,
 * unsupported feature, a second KV type different from the first). */
int cli_next(cli *c, cli_val *v);
/* A command's handler of one argument: a row of the table (id >= 0, its value in v) or a
 * positional argument (id == CLI_POS, the text in c->argv[c->i]). Returns 0 to go on, else
 * the exit code the command stops with. */
typedef int (*cli_handler)(cli *c, int id, const cli_val *v, void *ctx);
/* The loop every command runs over its arguments argv[1..argc): each is read with
 * cli_next; a llama.cpp flag accepted with a note is skipped; --help prints usage to
 * stdout and exits 0 (nothing is started before the flags are read); every row and
 * positional argument goes to fn(c, id, &v, ctx). Returns 0 once every argument is read,
 * EXIT_USAGE after a parse error (printed), or fn's nonzero code. */
int cli_parse(cli *c, void (*usage)(FILE *f), cli_handler fn, void *ctx);
/* The default branch of a command's switch: a positional argument where the command takes
 * none is an unknown option (EXIT_USAGE); a row listed for the command but not handled by
 * it is a bug in the table or the command: prints it and returns 1. */
int cli_unhandled(cli *c, const cli_val *v);
const cli_opt *cli_opt_get(int id);
/* A command whose use of a shared row needs a narrower range than the row's (roofline's -p,
 * serve's -np): 1 when v->i is in [lo, hi] (cli_at_least: [lo, the row's hi]), else 0 after
 * the usual "bad value" message. */
int cli_within(cli *c, const cli_val *v, long long lo, long long hi);
int cli_at_least(cli *c, const cli_val *v, long long lo);
/* Command name -> bit (0 when unknown). */
unsigned cli_cmd_bit(const char *cmd);
/* The option lines of cmd's --help, from the table. */
void cli_help(FILE *f, const char *cmd);
/* `cpulm help --markdown`: every command's flag table (docs/FLAGS.md). */
void cli_help_markdown(FILE *f);
/* `cpulm help --flags CMD`: one line per spelling of each row of cmd: ok or refused (an
 * unsupported llama.cpp feature), the row's main name, the spelling, then a valid value
 * (none for switches; two tab-separated for two-value rows). tests/cli_test.sh and
 * tests/flag_fuzz.sh parse every spelling in every command that lists it. */
int cli_help_flags(FILE *f, const char *cmd);
/* Sampling rows (--temp ... -s): sets sp, returns 1 when id is one of them. */
int cli_sampler_opt(int id, const cli_val *v, cpulm_sampler_params *sp);
/* --attn's value (ref, fast, walk, auto, bf16) as cpulm_ctx_params.attn_fast (0, 1, -1,
 * CPULM_ATTN_AUTO, CPULM_ATTN_BF16). */
int cli_attn_value(const cli_val *v);
/* The --attn spelling of a cpulm_ctx_params.attn_fast value. */
const char *cli_attn_name(int attn_fast);

#endif
