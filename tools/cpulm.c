/* cpulm.c: main() of the cpulm command: a table of subcommands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common.h"
#include "cpulm.h"
#include "options.h"
#include "tools_api.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"run", cmd_run, "generate text from a prompt"},
    {"chat", cmd_chat, "interactive multi-turn chat with the model's chat template"},
    {"template", cmd_template, "print the prompt a chat template renders for messages"},
    {"info", cmd_info, "show a model's architecture, tensors and memory needs"},
    {"logits", cmd_logits, "print the top-K logits at every position (for comparisons)"},
    {"embed", cmd_embed, "print embeddings (pooled hidden states) of texts"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"quantize", cmd_quantize, "convert a GGUF model to Q4_K_M, Q8_0, ... (llama.cpp's mixes)"},
    {"perplexity", cmd_perplexity, "measure a model's perplexity on a text file"},
    {"pull", cmd_pull, "download a GGUF model from Hugging Face (or a mirror)"},
    {"bench", cmd_bench, "measure prompt/generation speed, parallel sequences and TTFT"},
    {"roofline", cmd_roofline, "memory bandwidth and kernel peaks; a model's share of them"},
    {"plan", cmd_plan, "memory a deployment needs, instances that fit, cost per token"},
    {"report", cmd_report, "run the standard study; write report.md/.html with charts"},
    {"synth", cmd_synth, "write a synthetic model of a real model's shape (benchmarks)"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server with continuous batching"},
    {"loadtest", cmd_loadtest, "load an OpenAI-compatible server: latency, failures, SLO, cost"},
    {"compare", cmd_compare, "results of several machines/engines side by side (+ cost chart)"},
    {"grammar-bench", cmd_grammar_bench, "per-token cost of grammar masks (constrained output)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: cpulm <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n`cpulm help <command>` (or `cpulm <command> --help`) shows a command's options.\n"
               "`cpulm --version`. Environment: CPULM_MODEL (default -m), CPULM_ISA (force a\n"
               "lower kernel level), CPULM_API_KEY (serve).\n");
}

/* CPULM_ISA names a kernel level; a wrong one must not pass silently. */
static void check_isa_env(void) {
    const char *warn = getenv("CPULM_ISA");
    if (!warn || !*warn || !(warn = cpulm_kernels_isa_warning())) return;
    const cpulm_kernels *lv[16];
    int n = cpulm_kernels_levels(lv, 16);
    fprintf(stderr, "cpulm: warning: %s. Levels on this CPU:", warn);
    for (int i = 0; i < n; i++)
        fprintf(stderr, " %s", lv[i]->name);
    fputc('\n', stderr);
}

static int find_command(const char *name) {
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(name, commands[i].name)) return (int)i;
    return -1;
}

int main(int argc, char **argv) {
    check_isa_env();
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *c = argv[1];
    if (!strcmp(c, "help") && argc > 2 && !strcmp(argv[2], "--markdown")) {
        cli_help_markdown(stdout); /* docs/FLAGS.md */
        return 0;
    }
    if (!strcmp(c, "help") && argc > 3 && !strcmp(argv[2], "--flags"))
        return cli_help_flags(stdout, argv[3]); /* for tests/cli_test.sh */
    if (!strcmp(c, "help") && argc > 2) {       /* `cpulm help run` is `cpulm run --help` */
        int k = find_command(argv[2]);
        static char help_flag[] = "--help";
        char *args[] = {argv[2], help_flag, NULL};
        if (k >= 0) return commands[k].fn(2, args);
        fprintf(stderr, "cpulm: unknown command '%s'\n", argv[2]);
        usage(stderr);
        return EXIT_USAGE;
    }
    if (!strcmp(c, "-h") || !strcmp(c, "--help") || !strcmp(c, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(c, "--version") || !strcmp(c, "version")) {
        printf("cpulm %s, kernels: %s\n", cpulm_version(), cpulm_kernel_level());
        return 0;
    }
    int k = find_command(c);
    if (k >= 0) return commands[k].fn(argc - 1, argv + 1);
    fprintf(stderr, "cpulm: unknown command '%s'\n", c);
    usage(stderr);
    return EXIT_USAGE;
}
