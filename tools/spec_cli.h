/* spec_cli.h: the speculative decoding options run, chat, bench and serve share (their rows,
 * with llama.cpp's names and aliases, are in options.def), and opening a speculator from them. */
#ifndef CPULM_TOOLS_SPEC_CLI_H
#define CPULM_TOOLS_SPEC_CLI_H

#include <stddef.h>

#include "common.h"
#include "tools_api.h"

typedef struct cli_spec {
    cpulm_spec_params p;    /* kind NONE unless --spec or -md */
    const char *draft_path; /* -md */
    int n_threads_draft;    /* -td; 0: the target's */
    int kind_given;
} cli_spec;

void cli_spec_init(cli_spec *o);
/* The speculation rows of the option table (options.def) into o: 1 when id is one of them. */
struct cli_val;
int cli_spec_opt(int id, const struct cli_val *v, cli_spec *o);
/* After parsing: the kind implied by -md, contradictions refused. 0 or EXIT_USAGE. */
int cli_spec_check(cli *c, cli_spec *o);
/* Loads the draft model (if any) and makes the speculator for target m, whose context has
 * the parameters cp (the draft's context copies n_ctx and threads). *s NULL when the kind is
 * none. Returns 0, or an exit code after printing why. */
int cli_spec_open(const char *cmd, cli_spec *o, const cpulm_model *m, const cpulm_ctx_params *cp,
                  const cpulm_sampler_params *sp, cpulm_model **dm, cpulm_spec **s);
/* " | spec ngram: drafted D, accepted A (x%), T tokens per target pass" into buf. */
void cli_spec_summary(const cpulm_spec *s, const cli_spec *o, char *buf, size_t cap);

#endif
