/* chat_common.h: choosing a chat template for a model (shared by `chat`, `template`). */
#ifndef CPULM_TOOLS_CHAT_COMMON_H
#define CPULM_TOOLS_CHAT_COMMON_H

#include "cpulm.h"

/* The template text to use: `override` is a built-in name (llama3, chatml, ...) or a file
 * path; else the model's tokenizer.chat_template; else NULL (the "plain" built-in).
 * *owned receives a malloc'd copy to free (or NULL). Returns 0 on error (message printed). */
int cli_chat_template(const cpulm_model *m, const char *override, const char **tmpl, char **owned);
/* Text of the model's BOS / EOS tokens for templates ("" when none). Borrowed. */
const char *cli_bos_text(const cpulm_model *m);
const char *cli_eos_text(const cpulm_model *m);

#endif
