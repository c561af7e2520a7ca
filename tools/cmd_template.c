/* cmd_template.c: `cpulm template`: prints the prompt a chat template renders for a list of
 * messages, so users can see exactly what the model sees. */
#include <stdlib.h>
#include <string.h>

#include "chat_common.h"
#include "commands.h"
#include "common.h"
#include "options.h"

static void template_usage(FILE *f) {
    fprintf(f, "usage: cpulm template (-m MODEL | --file T.jinja | --chat-template NAME|FILE) "
               "--messages M.json [--no-generation-prompt] [--bos S] [--eos S]\n");
    cli_help(f, "template");
}

typedef struct tmpl_opts {
    const char *model, *file, *messages, *bos, *eos;
    int no_gen, no_think, tokens;
} tmpl_opts;

static int tmpl_opt(cli *c, int id, const cli_val *v, void *ctx) {
    tmpl_opts *o = ctx;
    switch (id) {
    case OPT_MODEL: o->model = v->s; break;
    case OPT_TEMPLATE_FILE:
    case OPT_CHAT_TEMPLATE: o->file = v->s; break;
    case OPT_MESSAGES: o->messages = v->s; break;
    case OPT_BOS: o->bos = v->s; break;
    case OPT_EOS: o->eos = v->s; break;
    case OPT_NO_GEN_PROMPT: o->no_gen = 1; break;
    case OPT_NO_THINK: o->no_think = 1; break;
    case OPT_PRINT_TOKENS: o->tokens = 1; break;
    default: return cli_unhandled(c, v);
    }
    return 0;
}

static int parse_tmpl(int argc, char **argv, tmpl_opts *o) {
    cli c = {.cmd = "template", .argc = argc, .argv = argv};
    int rc = cli_parse(&c, template_usage, tmpl_opt, o);
    if (rc) return rc;
    if (!o->messages || (!o->model && !o->file)) {
        fprintf(stderr, "cpulm template: needs --messages and one of -m or --file\n");
        return EXIT_USAGE;
    }
    return 0;
}

int cmd_template(int argc, char **argv) {
    tmpl_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_tmpl(argc, argv, &o);
    if (rc) return rc;
    char *msgs = cli_read_file(strcmp(o.messages, "-") ? o.messages : "/dev/stdin", NULL);
    if (!msgs) return EXIT_USAGE;
    cpulm_model *m = o.model ? cli_load_model(o.model, 1, NULL) : NULL;
    const char *tmpl;
    char *owned = NULL;
    rc = 1;
    if (o.model && !m)
        rc = cli_load_failed_rc(o.model);
    else if (!cli_chat_template(m, o.file, &tmpl, &owned))
        rc = EXIT_USAGE;
    else {
        cpulm_chat_params p = cpulm_chat_default_params();
        p.add_generation_prompt = !o.no_gen;
        p.bos_token = o.bos ? o.bos : cli_bos_text(m);
        p.eos_token = o.eos ? o.eos : cli_eos_text(m);
        p.enable_thinking = !o.no_think;
        char *out = NULL;
        cpulm_error err = {0};
        if (cpulm_chat_render_json(tmpl, msgs, &p, &out, &err) != CPULM_OK) {
            fprintf(stderr, "cpulm template: %s\n", err.msg);
        } else {
            fputs(out, stdout);
            if (o.tokens && m) {
                cpulm_token *toks = NULL;
                int32_t n = cli_tokenize(m, out, strlen(out), 0, 1, &toks);
                printf("\n[");
                for (int32_t i = 0; i < n; i++)
                    printf("%s%d", i ? ", " : "", toks[i]);
                printf("]\n");
                free(toks);
            }
            rc = 0;
        }
        free(out);
    }
    free(owned);
    free(msgs);
    cpulm_model_free(m);
    return rc;
}
