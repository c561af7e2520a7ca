/* cmd_tokenize.c: `cpulm tokenize`: prints the token ids (and pieces) of a text, like the
 * reference's tokenize tool. */
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common.h"
#include "options.h"

static void tok_usage(FILE *f) {
    fprintf(f, "usage: cpulm tokenize [-m MODEL] (-p TEXT | -f FILE) [--no-bos] [--special] "
               "[--ids | --json]\n");
    cli_help(f, "tokenize");
}

static void print_tokens(const cpulm_model *m, const cpulm_token *t, int32_t n, int ids, int json) {
    char piece[512];
    if (ids || json) printf(json ? "{\"tokens\": [" : "[");
    for (int32_t i = 0; i < n && (ids || json); i++)
        printf("%s%d", i ? ", " : "", t[i]);
    if (ids) printf("]\n");
    if (ids) return;
    if (json) printf("], \"pieces\": [");
    for (int32_t i = 0; i < n; i++) {
        int32_t len = 0;
        if (cpulm_token_to_piece(m, t[i], 1, piece, sizeof piece, &len) != CPULM_OK) len = 0;
        if (json) {
            if (i) printf(", ");
            cli_json_str(stdout, piece, (size_t)len);
        } else {
            printf("%6d -> '%.*s'\n", t[i], (int)len, piece);
        }
    }
    if (json) printf("]}\n");
}

typedef struct tok_opts {
    const char *model, *text, *file;
    int no_bos, special, ids, json;
} tok_opts;

static int tok_opt(cli *c, int id, const cli_val *v, void *ctx) {
    tok_opts *o = ctx;
    switch (id) {
    case OPT_MODEL: o->model = v->s; break;
    case OPT_PROMPT: o->text = v->s; break;
    case OPT_FILE: o->file = v->s; break;
    case OPT_NO_BOS: o->no_bos = 1; break;
    case OPT_SPECIAL: o->special = 1; break;
    case OPT_IDS: o->ids = 1; break;
    case OPT_JSON: o->json = 1; break;
    default: return cli_unhandled(c, v);
    }
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    cli c = {.cmd = "tokenize", .argc = argc, .argv = argv};
    tok_opts o = {0};
    int rc = cli_parse(&c, tok_usage, tok_opt, &o);
    if (rc) return rc;
    if (!o.text == !o.file) {
        fprintf(stderr, "cpulm tokenize: give exactly one of -p TEXT or -f FILE\n");
        return EXIT_USAGE;
    }
    char *buf = NULL;
    size_t len = o.text ? strlen(o.text) : 0;
    if (o.file && !(buf = cli_read_file(o.file, &len))) return EXIT_USAGE;
    const char *path = cli_model_path(o.model);
    cpulm_model *m = path ? cli_load_model(path, 1, NULL) : NULL;
    rc = !path ? EXIT_USAGE : !m ? cli_load_failed_rc(path) : 1;
    cpulm_token *toks = NULL;
    int32_t n = m ? cli_tokenize(m, buf ? buf : o.text, len, !o.no_bos, o.special, &toks) : -1;
    if (n >= 0) {
        print_tokens(m, toks, n, o.ids, o.json);
        rc = 0;
    }
    free(toks);
    free(buf);
    cpulm_model_free(m);
    return rc;
}
