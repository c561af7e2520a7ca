/* model_vocab.c: the public tokenizer API (include/cpulm.h), forwarding to the model's
 * vocabulary (src/tokenizer/vocab.h). */
#include "../tokenizer/vocab.h"
#include "model.h"

int32_t cpulm_vocab_n(const cpulm_model *m) {
    return cpulm_vocab_n_tokens(m->vocab);
}

cpulm_token cpulm_token_bos(const cpulm_model *m) {
    return cpulm_vocab_bos(m->vocab);
}

cpulm_token cpulm_token_eos(const cpulm_model *m) {
    return cpulm_vocab_eos(m->vocab);
}

int cpulm_token_is_eog(const cpulm_model *m, cpulm_token t) {
    return cpulm_vocab_is_eog(m->vocab, t);
}

int cpulm_vocab_add_bos(const cpulm_model *m) {
    return cpulm_vocab_wants_bos(m->vocab);
}

int cpulm_model_is_encoder(const cpulm_model *m) {
    return m->arch && m->arch->encoder;
}

const char *cpulm_token_text(const cpulm_model *m, cpulm_token t) {
    return cpulm_vocab_text(m->vocab, t);
}

cpulm_status cpulm_tokenize(const cpulm_model *m, const char *text, size_t len, int add_special,
                            int parse_special, cpulm_token *out, int32_t cap, int32_t *n_out) {
    return cpulm_vocab_tokenize(m->vocab, text, len, add_special, parse_special, out, cap, n_out);
}

cpulm_status cpulm_tokenize_cancellable(const cpulm_model *m, const char *text, size_t len,
                                        int add_special, int parse_special, cpulm_token *out,
                                        int32_t cap, int32_t *n_out, int (*stop)(void *user),
                                        void *user) {
    cpulm_vocab_stop vs = {stop, user, 0};
    return cpulm_vocab_tokenize_stop(m->vocab, text, len, add_special, parse_special, out, cap,
                                     n_out, stop ? &vs : NULL);
}

cpulm_status cpulm_token_to_piece(const cpulm_model *m, cpulm_token t, int special, char *buf,
                                  int32_t cap, int32_t *n_out) {
    return cpulm_vocab_piece(m->vocab, t, special, buf, cap, n_out);
}

void cpulm_detok_init(cpulm_detok *d, const cpulm_model *m, int special) {
    d->m = m;
    cpulm_vocab_detok_reset(d, special);
}

int32_t cpulm_detok_push(cpulm_detok *d, cpulm_token t, char *out, int32_t cap) {
    return cpulm_vocab_detok_push(d->m->vocab, d, t, out, cap);
}

int32_t cpulm_detok_flush(cpulm_detok *d, char *out, int32_t cap) {
    return cpulm_vocab_detok_flush(d, out, cap);
}
