/* cpulm.c: main() of the cpulm command: a table of subcommands. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "common.h"
#include "cpulm.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"run", cmd_run, "generate text from a prompt"},
    {"info", cmd_info, "show a model's architecture, tensors and memory needs"},
    {"logits", cmd_logits, "print the top-K logits at every position (for comparisons)"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server with continuous batching"},
    {"loadtest", cmd_loadtest, "closed-loop load generator for an OpenAI-compatible server"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: cpulm <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n`cpulm <command> --help` shows a command's options. `cpulm --version`.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *c = argv[1];
    if (!strcmp(c, "-h") || !strcmp(c, "--help") || !strcmp(c, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(c, "--version") || !strcmp(c, "version")) {
        printf("cpulm %s, kernels: %s\n", cpulm_version(), cpulm_kernel_level());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(c, commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "cpulm: unknown command '%s'\n", c);
    usage(stderr);
    return EXIT_USAGE;
}
