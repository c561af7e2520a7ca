/* cmd_tokenize.c: `cpulm tokenize`: prints the token ids (and pieces) of a text, like the
 * reference's tokenize tool. */
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common.h"

static void tok_usage(FILE *f) {
    fprintf(f, "usage: cpulm tokenize [-m MODEL] (-p TEXT | -f FILE) [--no-bos] [--special] "
               "[--ids | --json]\n"
               "  --no-bos     do not add BOS\n"
               "  --special    parse control-token text such as <|eot_id|> into its id\n"
               "  --ids        print only the ids as [1, 2, 3]\n"
               "  --json       print {\"tokens\": [...], \"pieces\": [...]}\n");
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
        if (cli_flag(&c, "-h", "--help")) {
            tok_usage(stdout);
            return 0;
        } else if (cli_flag(&c, "-m", "--model")) {
            if (!(model = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "-p", "--prompt")) {
            if (!(text = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "-f", "--file")) {
            if (!(file = cli_value(&c))) return EXIT_USAGE;
        } else if (cli_flag(&c, "--no-bos", NULL)) {
            no_bos = 1;
        } else if (cli_flag(&c, "--special", "--parse-special")) {
            special = 1;
        } else if (cli_flag(&c, "--ids", NULL)) {
            ids = 1;
        } else if (cli_flag(&c, "--json", NULL)) {
            json = 1;
        } else {
            if (cli_rest(&c)) return EXIT_USAGE;
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
