/* infill.c: the prompt of llama-server's POST /infill (fill-in-the-middle code completion).
 *
 * A model trained for FIM has three control tokens that frame the code around a hole:
 * prefix, suffix and middle. The prompt is written prefix-suffix-middle (PSM), as
 * llama-server writes it: [BOS] <PRE> input_prefix prompt <SUF> input_suffix <MID> (prompt:
 * the text just before the cursor, each part tokenized on its own), and the model generates
 * the code that belongs in the hole. The token names differ by family
 * (Qwen2.5-Coder and StarCoder2, CodeLlama, DeepSeek-Coder, ...), so each is looked up by
 * its text: a candidate counts only where the vocabulary holds it as one special token.
 */
#include <stdlib.h>
#include <string.h>

#include "server/server_int.h"

/* The families' spellings of the three tokens (one column per family). */
static const char *const FIM_TEXT[3][5] = {
    {"<|fim_prefix|>", "<fim_prefix>", "<fim-prefix>", "<PRE>",
     "<\xef\xbd\x9c"
     "fim\xe2\x96\x81"
     "begin\xef\xbd\x9c>"},
    {"<|fim_suffix|>", "<fim_suffix>", "<fim-suffix>", "<SUF>",
     "<\xef\xbd\x9c"
     "fim\xe2\x96\x81"
     "hole\xef\xbd\x9c>"},
    {"<|fim_middle|>", "<fim_middle>", "<fim-middle>", "<MID>",
     "<\xef\xbd\x9c"
     "fim\xe2\x96\x81"
     "end\xef\xbd\x9c>"},
};

/* text's id when the vocabulary holds it as a single special token, else -1. */
static cpulm_token special_id(const cpulm_model *m, const char *text) {
    cpulm_token t[4];
    int32_t n = 0;
    if (cpulm_tokenize(m, text, strlen(text), 0, 1, t, 4, &n) != CPULM_OK || n != 1) return -1;
    int32_t k = 0; /* and not an ordinary piece that happens to spell it */
    cpulm_token plain[64];
    if (cpulm_tokenize(m, text, strlen(text), 0, 0, plain, 64, &k) == CPULM_OK && k == 1) return -1;
    return t[0];
}

int cpulm_infill_tokens(const cpulm_model *m, cpulm_token fim[3]) {
    for (int f = 0; f < 5; f++) { /* the three of one family */
        int ok = 1;
        for (int k = 0; k < 3 && ok; k++)
            ok = (fim[k] = special_id(m, FIM_TEXT[k][f])) >= 0;
        if (ok) return 1;
    }
    return 0;
}

/* Appends text's tokens (no BOS, no special-token parsing) as JSON numbers. */
static int put_text(const cpulm_model *m, const cpulm_json *v, const char *name, cpulm_buf *ids,
                    cpulm_oai_error *e) {
    if (!v || v->type == CPULM_JSON_NULL) return 0;
    if (v->type != CPULM_JSON_STRING)
        return cpulm_oai_fail(e, 400, name, "'%s' must be a string", name);
    if (!v->u.str.len) return 0;
    int32_t cap = (int32_t)v->u.str.len + 8, n = 0;
    cpulm_token *t = malloc(sizeof *t * (size_t)cap);
    if (!t || cpulm_tokenize(m, v->u.str.s, v->u.str.len, 0, 0, t, cap, &n) != CPULM_OK) {
        free(t);
        return cpulm_oai_fail(e, 400, name, "cannot tokenize '%s'", name);
    }
    for (int32_t i = 0; i < n; i++)
        cpulm_buf_printf(ids, ",%d", t[i]);
    free(t);
    return 0;
}

int cpulm_infill_prompt(const cpulm_model *m, const cpulm_json *root, cpulm_buf *ids,
                        cpulm_oai_error *e) {
    cpulm_token fim[3];
    if (!m || !cpulm_infill_tokens(m, fim))
        return cpulm_oai_fail(e, 501, NULL,
                              "infill is not supported by this model: it has no "
                              "fill-in-the-middle tokens");
    const cpulm_json *extra = cpulm_json_get(root, "input_extra");
    if (extra && extra->type != CPULM_JSON_NULL && cpulm_json_len(extra) > 0)
        return cpulm_oai_fail(e, 400, "input_extra",
                              "'input_extra' (repository context) is not supported");
    cpulm_buf_putc(ids, '[');
    size_t open = ids->len;
    cpulm_token bos[4]; /* what the model puts before any prompt (a BOS, or nothing) */
    int32_t n_bos = 0;
    if (cpulm_tokenize(m, "", 0, 1, 0, bos, 4, &n_bos) != CPULM_OK) n_bos = 0;
    for (int32_t i = 0; i < n_bos; i++)
        cpulm_buf_printf(ids, ",%d", bos[i]);
    cpulm_buf_printf(ids, ",%d", fim[0]);
    if (put_text(m, cpulm_json_get(root, "input_prefix"), "input_prefix", ids, e) < 0 ||
        put_text(m, cpulm_json_get(root, "prompt"), "prompt", ids, e) < 0)
        return -1;
    cpulm_buf_printf(ids, ",%d", fim[1]);
    if (put_text(m, cpulm_json_get(root, "input_suffix"), "input_suffix", ids, e) < 0) return -1;
    cpulm_buf_printf(ids, ",%d", fim[2]);
    ids->data[open] = ' '; /* the first separator */
    cpulm_buf_putc(ids, ']');
    return cpulm_buf_status(ids) == CPULM_OK ? 0 : cpulm_oai_fail(e, 500, NULL, "out of memory");
}
