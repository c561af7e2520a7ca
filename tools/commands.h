/* commands.h: the subcommands of the cpulm tool; each takes argv starting at its name. */
#ifndef CPULM_TOOLS_COMMANDS_H
#define CPULM_TOOLS_COMMANDS_H

int cmd_run(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_pull(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_roofline(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_loadtest(int argc, char **argv);
int cmd_grammar_bench(int argc, char **argv);
int cmd_compare(int argc, char **argv);

#endif
