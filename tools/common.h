/* common.h: helpers shared by the cpulm subcommands: flag parsing with clear errors
 * (exit code 2), default model discovery, model loading with one-line errors, timing. */
#ifndef CPULM_TOOLS_COMMON_H
#define CPULM_TOOLS_COMMON_H

#include <stdint.h>
#include <stdio.h>

#include "cpulm.h"

/* Exit codes: 0 ok, 1 runtime failure, 2 usage error (bad flag/value, missing file). */
enum { EXIT_USAGE = 2 };

typedef struct cli {
    const char *cmd; /* subcommand name for messages */
    int argc, i;
    char **argv;
    const char *kv_seen; /* the first KV type given (options.c: K and V must agree) */
} cli;

/* Flag matching: returns 1 when argv[i] is one of the names; value flags take the next arg. */
int cli_flag(cli *c, const char *a, const char *b);
/* The value after the current flag; prints an error and returns NULL when missing. */
const char *cli_value(cli *c);
int cli_int(cli *c, long lo, long hi, int *out); /* 0 on error (message printed) */
int cli_i64(cli *c, long long lo, long long hi, long long *out);
int cli_float(cli *c, double lo, double hi, float *out);
/* One vocabulary: the KV cache type is --kv or llama.cpp's -ctk/-ctv/--cache-type-k/-v
 * (cpulm stores K and V alike); parallel sequences are -np, -npl or --parallel. */
int cli_is_kv_flag(cli *c);
int cli_parallel_flag(cli *c);
int cli_unknown(cli *c); /* prints "unknown option" and returns EXIT_USAGE */
/* The last branch of every subcommand's flag loop: flags shared by all subcommands, from one
 * table (llama.cpp's GPU/mmap/warm-up/... flags that mean nothing on a CPU are accepted with
 * a one-line note on stderr; features cpulm lacks fail with a one-line reason). Returns 0
 * when argv[i] was consumed, else EXIT_USAGE (message printed; "unknown option" when no
 * entry names it). */
int cli_rest(cli *c);
/* Help text for the shared flags (appended to each --help). */
#define CLI_COMPAT_HELP                                                                          \
    "llama.cpp flags without meaning on a CPU (-ngl, -fa, -mmp, --no-mmap, --mlock,\n"           \
    "--no-warmup, -sm, -mg, -ts, -dev, -nkvo, --color, --jinja, ...) are accepted and ignored\n" \
    "with a note; see docs/TOOLS.md, \"llama.cpp flags\".\n"
/* Sampling flags (--temp --top-k --top-p --min-p --repeat-penalty --repeat-last-n
 * --presence-penalty --frequency-penalty -s/--seed): 1 = consumed, 0 = not a sampling flag,
 * -1 = bad value (message printed). */
int cli_sampler_flag(cli *c, cpulm_sampler_params *sp);
/* The value of --numa (none, distribute, isolate, numactl): sets the process-wide mode.
 * 1 = ok, 0 = missing or bad value (message printed). */
/* KV cache types by llama.cpp's names (f16, f32, q8_0, q4_0): cli_kv_type parses one
 * (1 on success); cli_kv_flag parses the current flag's value (-ctk, -ctv, --kv), printing
 * the reason on failure (0); -ctk and -ctv may both be given only with the same type, since
 * cpulm stores K and V alike (*given tracks it). */
int cli_kv_type(const char *s, cpulm_kv_type *out);
int cli_kv_flag(cli *c, cpulm_kv_type *out, int *given);
const char *cli_kv_name(cpulm_kv_type t);
/* --attn ref|fast: attention of an F16 cache with the reference's numerics (ref, default) or
 * the tiled f32-accumulating path (fast; cpulm_ctx_params.attn_fast). Also accepts walk
 * (attn_fast = -1: the reference numerics by the per-(token, head) walk of the generic
 * attn_f16, same bits as ref, the oracle; not in the help). 1 = ok, 0 = missing or bad value
 * (message printed). */
int cli_attn_flag(cli *c, int *fast);
#define CLI_ATTN_HELP                                                                         \
    "  --attn ref|fast       F16 KV attention: ref (default) = llama.cpp's numerics (f16\n"   \
    "                        accumulation); fast = tiled, f32 accumulation, faster on long\n" \
    "                        contexts, logits differ from llama.cpp by up to ~0.01\n"
int cli_numa_flag(cli *c);
#define CLI_SAMPLER_HELP                                                       \
    "  --temp T              temperature (default 0.8; 0 = greedy)\n"          \
    "  --top-k K             (default 40; 0 = off)\n"                          \
    "  --top-p P             (default 0.95; 1 = off)\n"                        \
    "  --min-p P             (default 0.05; 0 = off)\n"                        \
    "  --repeat-penalty R    (default 1.0 = off)\n"                            \
    "  --repeat-last-n N     tokens the penalty looks back (default 64)\n"     \
    "  --presence-penalty X, --frequency-penalty X   OpenAI-style penalties\n" \
    "  -s, --seed N          RNG seed (default: random)\n"

/* -m value, else $CPULM_MODEL, else ../shared/models/stories260K.gguf (cwd, $CPULM_SHARED or
 * next to the executable). NULL (with a message saying how to get a model) when none. */
const char *cli_model_path(const char *flag_value);
/* Loads the model, printing a one-line error; NULL on failure. */
/* The library's switches the command reads from the environment, set in the params the
 * library takes (the library itself reads no environment but CPULM_ISA):
 * CPULM_NO_REPACK=1 -> cpulm_model_params.no_repack, CPULM_NO_PIN=1 -> cpulm_ctx_params.no_pin.
 * A variable counts as set unless empty or "0". */
int cli_env_flag(const char *name);
/* cpulm_ctx_default_params() with the environment's switches applied. */
cpulm_ctx_params cli_ctx_default_params(void);
cpulm_model *cli_load_model(const char *path, int vocab_only, double *load_ms);
/* Exit code after a failed load: 2 when the path is missing, unreadable or a directory
 * (the user named the wrong thing), else 1 (a broken or unsupported file). */
int cli_load_failed_rc(const char *path);
/* 0 when path names a readable regular file, else EXIT_USAGE with a one-line message. */
int cli_check_file(const char *cmd, const char *path);
/* Strips one final "\n" (or "\r\n") from a prompt read from a file, as llama.cpp does. */
void cli_chomp(char *s);
/* Reads a whole file (malloc'd, NUL-terminated); NULL with a message on failure. */
char *cli_read_file(const char *path, size_t *len);
/* Tokenizes with a growing buffer; caller frees *out. Returns count or -1. */
int32_t cli_tokenize(const cpulm_model *m, const char *text, size_t len, int add_special,
                     int parse_special, cpulm_token **out);
/* Writes s as a JSON string literal (with quotes). */
void cli_json_str(FILE *f, const char *s, size_t len);
double cli_now_ms(void);
/* Parses "1,2,3" into ints (malloc'd *out); returns count or -1. */
int cli_int_list(const char *s, int32_t **out);

#endif
