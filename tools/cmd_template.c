/* cmd_template.c: `cpulm template`: prints the prompt a chat template renders for a list of
 * messages, so users can see exactly what the model sees. */
#include <stdlib.h>
#include <string.h>

#include "chat_common.h"
#include "commands.h"
#include "common.h"

static void template_usage(FILE *f) {
    fprintf(f, "usage: cpulm template (-m MODEL | --file T.jinja | --chat-template NAME|FILE) "
               "--messages M.json [--no-generation-prompt] [--bos S] [--eos S]\n"
               "  M.json is an array of {\"role\": ..., \"content\": ...} objects ('-' = stdin).\n"
               "  --no-think   pass enable_thinking=false to templates that honour it\n"
               "  --tokens     also print the token ids (needs -m)\n");
}

typedef struct tmpl_opts {
    const char *model, *file, *messages, *bos, *eos;
    int no_gen, no_think, tokens;
} tmpl_opts;

static int parse_tmpl(int argc, char **argv, tmpl_opts *o) {
    cli c = {.cmd = "template", .argc = argc, .argv = argv};
    for (c.i = 1; c.i < argc; c.i++) {
        if (cli_flag(&c, "-h", "--help")) {
            template_usage(stdout);
            exit(0);
        } else if (cli_flag(&c, "-m", "--model")) {
            if (!(o->model = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "--file", "--chat-template")) {
            if (!(o->file = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "--messages", NULL)) {
            if (!(o->messages = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "--bos", NULL)) {
            if (!(o->bos = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "--eos", NULL)) {
            if (!(o->eos = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "--no-generation-prompt", NULL)) {
            o->no_gen = 1;
        } else if (cli_flag(&c, "--no-think", NULL)) {
            o->no_think = 1;
        } else if (cli_flag(&c, "--tokens", NULL)) {
            o->tokens = 1;
        } else {
            if (cli_rest(&c)) return EXIT_USAGE;
        }
    }
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
