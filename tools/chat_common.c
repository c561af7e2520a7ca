/* chat_common.c: template selection for the chat-related subcommands. */
#include "chat_common.h"

#include <stdio.h>
#include <stdlib.h>

#include "common.h"

int cli_chat_template(const cpulm_model *m, const char *override, const char **tmpl, char **owned) {
    *tmpl = NULL;
    *owned = NULL;
    if (override) {
        const char *b = cpulm_chat_builtin(override);
        if (b) {
            *tmpl = b;
            return 1;
        }
        size_t n;
        if (!(*owned = cli_read_file(override, &n))) {
            fprintf(stderr,
                    "cpulm: --chat-template '%s' is neither a built-in name (llama3, "
                    "llama2, mistral, chatml, deepseek-r1, gemma, gemma4, plain) nor a readable "
                    "file\n",
                    override);
            return 0;
        }
        *tmpl = *owned;
        return 1;
    }
    if (!m) return 1;
    size_t need = 0;
    if (cpulm_model_meta(m, "tokenizer.chat_template", NULL, 0, &need) == CPULM_ERR_NOT_FOUND)
        return 1;
    *owned = malloc(need);
    if (!*owned ||
        cpulm_model_meta(m, "tokenizer.chat_template", *owned, need, &need) != CPULM_OK) {
        free(*owned);
        *owned = NULL;
        return 1;
    }
    *tmpl = *owned;
    return 1;
}

static const char *token_text_or_empty(const cpulm_model *m, cpulm_token t) {
    const char *s = t >= 0 ? cpulm_token_text(m, t) : NULL;
    return s ? s : "";
}

const char *cli_bos_text(const cpulm_model *m) {
    return m ? token_text_or_empty(m, cpulm_token_bos(m)) : "";
}

const char *cli_eos_text(const cpulm_model *m) {
    return m ? token_text_or_empty(m, cpulm_token_eos(m)) : "";
}
