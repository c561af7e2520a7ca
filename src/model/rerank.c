/* rerank.c: the token sequence a reranker scores for a (query, document) pair, as
 * llama-server builds it: the model's "rerank" prompt template (metadata
 * tokenizer.chat_template.rerank, with {query} and {document} replaced) when it has one,
 * else BOS, the query, EOS (SEP when the vocab has no EOS), SEP, the document, EOS, each
 * special token only where the vocab asks for it (add_bos / add_eos / add_sep). */
#include <stdlib.h>
#include <string.h>

#include "../base/buf.h"
#include "../format/gguf.h"
#include "../tokenizer/vocab.h"
#include "model.h"

/* Appends the tokens of text (no special tokens added, none parsed) to out[*n..cap). */
static cpulm_status append_text(const cpulm_vocab *v, const char *text, size_t len,
                                int parse_special, cpulm_token *out, int32_t cap, int32_t *n) {
    int32_t k = 0;
    const int32_t room = *n < cap ? cap - *n : 0;
    cpulm_status s =
        cpulm_vocab_tokenize(v, text, len, 0, parse_special, out ? out + *n : NULL, room, &k);
    if (s != CPULM_OK && s != CPULM_ERR_TOO_SMALL) return s;
    *n += k;
    return CPULM_OK;
}

static void append_one(cpulm_token t, cpulm_token *out, int32_t cap, int32_t *n) {
    if (t < 0) return;
    if (*n < cap) out[*n] = t;
    (*n)++;
}

/* The template with both fields replaced, NUL-terminated in b. */
static cpulm_status fill_template(const char *tpl, const char *q, size_t ql, const char *d,
                                  size_t dl, cpulm_buf *b) {
    for (const char *p = tpl; *p;) {
        if (!strncmp(p, "{query}", 7)) {
            if (cpulm_buf_append(b, q, ql) != CPULM_OK) return CPULM_ERR_NOMEM;
            p += 7;
        } else if (!strncmp(p, "{document}", 10)) {
            if (cpulm_buf_append(b, d, dl) != CPULM_OK) return CPULM_ERR_NOMEM;
            p += 10;
        } else if (cpulm_buf_append(b, p++, 1) != CPULM_OK) {
            return CPULM_ERR_NOMEM;
        }
    }
    return CPULM_OK;
}

cpulm_status cpulm_rerank_tokens(const cpulm_model *m, const char *query, size_t qlen,
                                 const char *doc, size_t dlen, cpulm_token *out, int32_t cap,
                                 int32_t *n_out) {
    const cpulm_vocab *v = m->vocab;
    int32_t n = 0;
    cpulm_status s;
    cpulm_str tpl;
    if (cpulm_gguf_get_str(&m->gguf, "tokenizer.chat_template.rerank", &tpl, NULL) == CPULM_OK) {
        char *t = malloc(tpl.len + 1);
        cpulm_buf b;
        cpulm_buf_init(&b, 0);
        if (!t) return CPULM_ERR_NOMEM;
        memcpy(t, tpl.ptr, tpl.len);
        t[tpl.len] = 0;
        s = fill_template(t, query, qlen, doc, dlen, &b);
        if (s == CPULM_OK) s = append_text(v, b.data, b.len, 1, out, cap, &n);
        free(t);
        cpulm_buf_release(&b);
        if (s != CPULM_OK) return s;
    } else {
        cpulm_token eos = cpulm_vocab_eos(v) >= 0 ? cpulm_vocab_eos(v) : cpulm_vocab_sep(v);
        if (cpulm_vocab_wants_bos(v)) append_one(cpulm_vocab_bos(v), out, cap, &n);
        if ((s = append_text(v, query, qlen, 0, out, cap, &n)) != CPULM_OK) return s;
        if (cpulm_vocab_wants_eos(v)) append_one(eos, out, cap, &n);
        if (cpulm_vocab_wants_sep(v)) append_one(cpulm_vocab_sep(v), out, cap, &n);
        if ((s = append_text(v, doc, dlen, 0, out, cap, &n)) != CPULM_OK) return s;
        if (cpulm_vocab_wants_eos(v)) append_one(eos, out, cap, &n);
    }
    *n_out = n;
    return n > cap ? CPULM_ERR_TOO_SMALL : CPULM_OK;
}
