/* common.h: helpers shared by the cpulm subcommands: the parser state and flag values with
 * clear errors (exit code 2; the flags themselves are in options.def), default model discovery,
 * model loading with one-line errors, timing. */
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

/* The value after the current flag; prints an error and returns NULL when missing. (Flags
 * are read from the option table: options.h.) */
const char *cli_value(cli *c);
int cli_unknown(cli *c); /* prints "unknown option" and returns EXIT_USAGE */
/* Help text for llama.cpp's flags (appended to each --help; the rows are in options.def). */
#define CLI_COMPAT_HELP                                                                          \
    "llama.cpp flags without meaning on a CPU (-ngl, -fa, -mmp, --no-mmap, --mlock,\n"           \
    "--no-warmup, -sm, -mg, -ts, -dev, -nkvo, --color, --jinja, ...) are accepted and ignored\n" \
    "with a note; see docs/FLAGS.md, \"llama.cpp flags\".\n"
/* KV cache types by llama.cpp's names (f16, f32, q8_0, q4_0): 1 on success. */
int cli_kv_type(const char *s, cpulm_kv_type *out);

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
double cli_cpu_ms(void); /* process CPU time, all threads */
/* How a generation loop ends on status st of its decode or speculative step: 0 for CPULM_OK
 * and CPULM_ERR_KV_FULL (the context filled: a normal stop), else 1 after printing
 * "cpulm CMD: generation failed: <status>" (the output so far stays printed). */
int cli_gen_status(const char *cmd, cpulm_status st);
/* Parses "1,2,3" into ints (malloc'd *out); returns count or -1. */
int cli_int_list(const char *s, int32_t **out);

#endif
