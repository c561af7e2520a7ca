/* commands.h: the subcommands of the cpulm tool; each takes argv starting at its name. */
#ifndef CPULM_TOOLS_COMMANDS_H
#define CPULM_TOOLS_COMMANDS_H

int cmd_run(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_loadtest(int argc, char **argv);

#endif
