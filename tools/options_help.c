/* options_help.c: what is printed from the option table (options.def): each command's --help
 * option lines, docs/FLAGS.md (`cpulm help --markdown`) and the spellings with a valid value
 * that tests/cli_test.sh parses (`cpulm help --flags CMD`). */
#include <string.h>

#include "options.h"

enum { HELP_COL = 24, HELP_WIDTH = 92 };

static const char *const cmd_order[] = {"run",   "chat",     "template", "info",         "logits",
                                        "embed", "tokenize", "quantize", "perplexity",   "pull",
                                        "bench", "roofline", "plan",     "report",       "synth",
                                        "serve", "loadtest", "compare",  "grammar-bench"};
#define N_ORDER (sizeof cmd_order / sizeof cmd_order[0])

static int is_compat(const cli_opt *o) {
    return o->type >= CLI_T_NOOP;
}

/* "-c, --ctx-size N" into buf. */
static void names_arg(const cli_opt *o, char *buf, size_t cap, const char *sep) {
    size_t n = 0;
    buf[0] = 0;
    for (const char *p = o->names; *p && n + 1 < cap;) {
        size_t k = strcspn(p, " ");
        n += (size_t)snprintf(buf + n, cap - n, "%s%.*s", n ? sep : "", (int)k, p);
        p += k;
        p += *p == ' ';
    }
    if (o->arg && n + 1 < cap && o->type != CLI_T_NOOP_ARG && o->type != CLI_T_UNSUPPORTED)
        snprintf(buf + n, cap - n, " %s", o->arg);
}

/* Prints text word-wrapped from column col (the first line continues at *at). */
static void wrap(FILE *f, const char *text, int at) {
    for (const char *p = text; *p;) {
        while (*p == ' ')
            p++;
        int k = (int)strcspn(p, " ");
        if (!k) break;
        if (at + 1 + k > HELP_WIDTH && at > HELP_COL) at = fprintf(f, "\n%*s", HELP_COL, "") - 1;
        at += fprintf(f, "%s%.*s", at > HELP_COL ? " " : "", k, p);
        p += k;
    }
    fputc('\n', f);
}

void cli_help(FILE *f, const char *cmd) {
    unsigned bit = cli_cmd_bit(cmd);
    char names[160], text[768];
    for (int id = 0; id < CLI_OPT_COUNT; id++) {
        const cli_opt *o = cli_opt_get(id);
        if (!(o->cmds & bit) || is_compat(o)) continue;
        names_arg(o, names, sizeof names, ", ");
        int at = fprintf(f, "  %s", names);
        if (at >= HELP_COL) at = fprintf(f, "\n%*s", HELP_COL - 1, "") - 1;
        at += fprintf(f, "%*s", HELP_COL - at, "");
        snprintf(text, sizeof text, "%s%s%s%s", o->help, o->def[0] ? " (default: " : "", o->def,
                 o->def[0] ? ")" : "");
        wrap(f, text, HELP_COL);
    }
}

/* Markdown cell text: '|' escaped, '<' and '>' as entities (not HTML tags). */
static void cell(FILE *f, const char *s) {
    for (; *s; s++)
        fputs(*s == '|' ? "\\|" : *s == '<' ? "&lt;" : *s == '>' ? "&gt;" : (char[2]){*s, 0}, f);
}

static int n_cmds(unsigned cmds) {
    int n = 0;
    for (size_t k = 0; k < N_ORDER; k++)
        n += (cmds >> k) & 1;
    return n;
}

/* "all", "all but x y" or "x, y": the commands of a row. */
static void cmd_list(FILE *f, unsigned cmds) {
    int n = n_cmds(cmds), but = n > (int)N_ORDER / 2, first = 1;
    fputs(n == (int)N_ORDER ? "all" : but ? "all but" : "", f);
    for (size_t k = 0; n < (int)N_ORDER && k < N_ORDER; k++)
        if ((int)((cmds >> k) & 1) != but) { /* in the list, or left out of "all but" */
            fprintf(f, "%s%s", but ? " " : first ? "" : ", ", cmd_order[k]);
            first = 0;
        }
}

/* One table row; with_cmds: a commands column first (shared and llama.cpp rows). */
static void md_row(FILE *f, const cli_opt *o, int with_cmds, int with_def) {
    char names[160];
    names_arg(o, names, sizeof names, "`, `");
    fputs("| `", f);
    cell(f, names);
    fputs("` | ", f);
    if (with_cmds) {
        cmd_list(f, o->cmds);
        fputs(" | ", f);
    }
    if (with_def) {
        cell(f, o->def);
        fputs(" | ", f);
    }
    cell(f, o->help);
    fputs(" | ", f);
    cell(f, o->llama);
    fputs(" |\n", f);
}

static int is_shared(int id) {
    const cli_opt *o = cli_opt_get(id);
    return !is_compat(o) && id != OPT_HELP && n_cmds(o->cmds) > 1;
}

/* A command's section: the shared flags it takes by name, then a table of its own. */
static void md_command(FILE *f, size_t k) {
    unsigned bit = 1u << k;
    char names[160];
    int n = 0;
    fprintf(f, "\n## cpulm %s\n\n", cmd_order[k]);
    for (int id = 0; id < CLI_OPT_COUNT; id++)
        if ((cli_opt_get(id)->cmds & bit) && is_shared(id)) {
            names_arg(cli_opt_get(id), names, sizeof names, " ");
            names[strcspn(names, " ")] = 0; /* the main name is enough here */
            fprintf(f, "%s`%s`", n++ ? ", " : "Shared flags: ", names);
        }
    fputs(n ? ".\n" : "", f);
    n = 0;
    for (int id = 0; id < CLI_OPT_COUNT; id++) {
        const cli_opt *o = cli_opt_get(id);
        if (!(o->cmds & bit) || is_compat(o) || id == OPT_HELP || is_shared(id)) continue;
        if (!n++) fputs("\n| flag | default | meaning | llama.cpp |\n|---|---|---|---|\n", f);
        md_row(f, o, 0, 1);
    }
}

void cli_help_markdown(FILE *f) {
    fputs("<!-- Generated by `cpulm help --markdown` from tools/options.def; do not edit "
          "(tests/cli_test.sh checks it). -->\n# cpulm flags\n\n"
          "Every flag of every command, from the one option table (tools/options.def). A flag\n"
          "shared by several commands is one row there, spelled and ranged the same in each;\n"
          "its text names what differs per command. `cpulm COMMAND --help` prints the same.\n"
          "\n## Shared flags\n\n| flag | commands | default | meaning | llama.cpp |\n"
          "|---|---|---|---|---|\n",
          f);
    for (int id = 0; id < CLI_OPT_COUNT; id++)
        if (is_shared(id)) md_row(f, cli_opt_get(id), 1, 1);
    for (size_t k = 0; k < N_ORDER; k++)
        md_command(f, k);
    fputs("\n## llama.cpp flags\n\nAccepted with a one-line note (no meaning on a CPU) or "
          "refused with exit 2 and the reason.\n\n| flag | commands | why | behaviour |\n"
          "|---|---|---|---|\n",
          f);
    for (int id = 0; id < CLI_OPT_COUNT; id++)
        if (is_compat(cli_opt_get(id))) md_row(f, cli_opt_get(id), 1, 0);
}

/* A value the row accepts (for the parse test). */
static const char *sample(const cli_opt *o, char *buf, size_t cap) {
    switch (o->type) {
    case CLI_T_INT: /* 8: a size every integer row takes (perplexity's -c wants >= 4) */
        snprintf(buf, cap, "%g", o->lo > 8 ? o->lo : o->hi < 8 ? o->hi : 8);
        break;
    case CLI_T_FLOAT: snprintf(buf, cap, "%g", o->lo > 1 ? o->lo : o->hi < 1 ? o->hi : 1); break;
    case CLI_T_STR: /* text, a file name (opened later) or a type name (quantize) alike */
        snprintf(buf, cap, "%s", o->arg && strchr(o->arg, ',') ? "1,1" : "q8_0");
        break;
    case CLI_T_STR2: snprintf(buf, cap, "x\tx"); break;
    case CLI_T_CHOICE: snprintf(buf, cap, "%.*s", (int)strcspn(o->arg, "|"), o->arg); break;
    case CLI_T_KV: snprintf(buf, cap, "f16"); break;
    case CLI_T_NUMA: snprintf(buf, cap, "none"); break;
    case CLI_T_NOOP_ARG: snprintf(buf, cap, "1"); break;
    case CLI_T_UNSUPPORTED: snprintf(buf, cap, "%s", o->arg ? "x" : ""); break;
    default: buf[0] = 0;
    }
    return buf;
}

int cli_help_flags(FILE *f, const char *cmd) {
    unsigned bit = cli_cmd_bit(cmd);
    char buf[64];
    if (!bit) return EXIT_USAGE;
    for (int id = 0; id < CLI_OPT_COUNT; id++) {
        const cli_opt *o = cli_opt_get(id);
        if (!(o->cmds & bit) || id == OPT_HELP) continue;
        for (const char *p = o->names; *p;) {
            size_t k = strcspn(p, " ");
            fprintf(f, "%s\t%.*s\t%.*s\t%s\n", o->type == CLI_T_UNSUPPORTED ? "refused" : "ok",
                    (int)strcspn(o->names, " "), o->names, (int)k, p, sample(o, buf, sizeof buf));
            p += k;
            p += *p == ' ';
        }
    }
    return 0;
}
