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

int cmd_tokenize(int argc, char **argv) {
    cli c = {.cmd = "tokenize", .argc = argc, .argv = argv};
    const char *model = NULL, *text = NULL, *file = NULL;
    int no_bos = 0, special = 0, ids = 0, json = 0;
    for (c.i = 1; c.i < argc; c.i++) {
        cli_val v;
        int id = cli_next(&c, &v);
        switch (id) {
        case CLI_SKIP: break;
        case CLI_ERR: return EXIT_USAGE;
        case CLI_POS: return cli_unknown(&c);
        case OPT_HELP: tok_usage(stdout); return 0;
        case OPT_MODEL: model = v.s; break;
        case OPT_PROMPT: text = v.s; break;
        case OPT_FILE: file = v.s; break;
        case OPT_NO_BOS: no_bos = 1; break;
        case OPT_SPECIAL: special = 1; break;
        case OPT_IDS: ids = 1; break;
        case OPT_JSON: json = 1; break;
        default: return cli_unhandled(&c, &v);
        }
    }
    if (!text == !file) {
        fprintf(stderr, "cpulm tokenize: give exactly one of -p TEXT or -f FILE\n");
        return EXIT_USAGE;
    }
    char *buf = NULL;
    size_t len = text ? strlen(text) : 0;
    if (file && !(buf = cli_read_file(file, &len))) return EXIT_USAGE;
    const char *path = cli_model_path(model);
    cpulm_model *m = path ? cli_load_model(path, 1, NULL) : NULL;
    int rc = !path ? EXIT_USAGE : !m ? cli_load_failed_rc(path) : 1;
    cpulm_token *toks = NULL;
    int32_t n = m ? cli_tokenize(m, buf ? buf : text, len, !no_bos, special, &toks) : -1;
    if (n >= 0) {
        print_tokens(m, toks, n, ids, json);
        rc = 0;
    }
    free(toks);
    free(buf);
    cpulm_model_free(m);
    return rc;
}
