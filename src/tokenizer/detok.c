/* detok.c: streaming detokenizer that only ever emits well-formed UTF-8.
 *
 * Token pieces can split a character (byte-fallback tokens, byte-level BPE), so bytes of
 * an unfinished sequence are held in the cpulm_detok until the sequence completes. A byte
 * that cannot continue (or start) a valid sequence turns the held prefix / the byte into
 * U+FFFD, per maximal invalid subpart as WHATWG decoders do. The SPM dummy-prefix space is
 * dropped from the first piece after BOS, as llama2.c and the references do.
 */
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "tokenizer/utf8.h"

typedef struct sink {
    char *out;
    int32_t cap, n;
    int overflow;
} sink;

static void put(sink *s, const void *p, int32_t n) {
    if (s->overflow || n > s->cap - s->n) {
        s->overflow = 1;
        return;
    }
    memcpy(s->out + s->n, p, (size_t)n);
    s->n += n;
}

static void put_replacement(sink *s) {
    put(s, "\xef\xbf\xbd", 3);
}

static void feed(cpulm_detok *d, sink *s, unsigned char b) {
    if (d->n_pending > 0) {
        if (cpulm_utf8_strict_next_ok(d->pending, d->n_pending, b)) {
            d->pending[d->n_pending++] = b;
            if (d->n_pending == cpulm_utf8_strict_len(d->pending[0])) {
                put(s, d->pending, d->n_pending);
                d->n_pending = 0;
            }
            return;
        }
        put_replacement(s); /* the held prefix is broken; b starts afresh */
        d->n_pending = 0;
    }
    int len = cpulm_utf8_strict_len(b);
    if (len == 0) {
        put_replacement(s);
    } else if (len == 1) {
        put(s, &b, 1);
    } else {
        d->pending[0] = b;
        d->n_pending = 1;
    }
}

void cpulm_vocab_detok_reset(cpulm_detok *d, int special) {
    d->n_pending = 0;
    d->at_start = 0;
    d->special = special != 0;
    memset(d->pending, 0, sizeof d->pending);
}

int32_t cpulm_vocab_detok_push(const cpulm_vocab *v, cpulm_detok *d, cpulm_token t, char *out,
                               int32_t cap) {
    if (t < 0 || t >= v->n_tokens || cap < 0 || d->n_pending < 0 || d->n_pending > 3)
        return CPULM_ERR_INVALID_ARG;
    uint8_t ty = v->ttype[t];
    const unsigned char *p = (const unsigned char *)v->piece_pool + v->piece_off[t];
    uint32_t n = v->piece_len[t];
    if (!d->special && (ty == CPULM_TOKEN_CONTROL || ty == CPULM_TOKEN_UNKNOWN)) n = 0;
    cpulm_detok next = *d; /* committed only if everything fits */
    if (t == v->bos) {
        next.at_start = 1;
    } else {
        if (next.at_start && v->add_space_prefix && n > 0 && p[0] == ' ') {
            p++;
            n--;
        }
        next.at_start = 0;
    }
    sink s = {out, cap, 0, 0};
    for (uint32_t i = 0; i < n && !s.overflow; i++)
        feed(&next, &s, p[i]);
    if (s.overflow) return CPULM_ERR_TOO_SMALL;
    *d = next;
    return s.n;
}

int32_t cpulm_vocab_detok_flush(cpulm_detok *d, char *out, int32_t cap) {
    if (d->n_pending == 0) return 0;
    if (cap < 3) return CPULM_ERR_TOO_SMALL;
    memcpy(out, "\xef\xbf\xbd", 3);
    d->n_pending = 0;
    return 3;
}
