/* wpm.c: the WordPiece tokenizer of BERT-family vocabularies (tokenizer.ggml.model "bert"),
 * as llama.cpp's WPM tokenizer: text is split into words at whitespace, and every
 * punctuation character, ASCII symbol and CJK ideograph is a word of its own; words are
 * lower-cased; each word, prefixed with the word-start marker U+2581 (how llama.cpp's
 * converter stores BERT's word-initial pieces; "##" continuation pieces lose their "##"),
 * is covered greedily by the longest vocabulary entry at each position, and a word that
 * cannot be covered becomes one [UNK].
 * Before splitting, each codepoint becomes the first codepoint of its canonical
 * decomposition (so accents drop, as llama.cpp's NFD step does) and is lower-cased
 * (wpm_tables.c, generated from Unicode 14 data). */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "tokenizer/utf8.h"
#include "tokenizer/wpm_tables.h"

/* The first codepoint of c's canonical decomposition (an accented letter's base letter),
 * as llama.cpp's NFD step keeps one codepoint per codepoint. */
static uint32_t wpm_nfd(uint32_t c) {
    int32_t lo = 0, hi = cpulm_wpm_n_nfd - 1;
    while (lo <= hi) {
        const int32_t mid = (lo + hi) / 2;
        if (c < cpulm_wpm_nfd[mid][0])
            hi = mid - 1;
        else if (c > cpulm_wpm_nfd[mid][1])
            lo = mid + 1;
        else
            return cpulm_wpm_nfd[mid][2];
    }
    return c;
}

static uint32_t wpm_lower(uint32_t c) {
    if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
    int32_t lo = 0, hi = cpulm_wpm_n_lower - 1;
    while (lo <= hi) {
        const int32_t mid = (lo + hi) / 2;
        if (c == cpulm_wpm_lower[mid][0]) return cpulm_wpm_lower[mid][1];
        if (c < cpulm_wpm_lower[mid][0])
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return c;
}

static int is_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Covers one word w[0..n) (marker included) longest-first; [UNK] if it cannot. */
static cpulm_status encode_word(const cpulm_vocab *v, const char *w, size_t n, tok_ivec *out) {
    const size_t start = out->n;
    for (size_t i = 0; i < n;) {
        size_t j = n - i > v->max_len ? i + v->max_len : n;
        int32_t id = -1;
        for (; j > i; j--)
            if ((id = tok_find(v, w + i, j - i)) >= 0) break;
        if (id < 0) {
            out->n = start;
            return v->unk >= 0 ? tok_ivec_push(out, v->unk) : CPULM_OK;
        }
        if (tok_ivec_push(out, id) != CPULM_OK) return CPULM_ERR_NOMEM;
        i = j;
    }
    return CPULM_OK;
}

cpulm_status tok_wpm_encode(const cpulm_vocab *v, const char *text, size_t n, tok_ivec *out,
                            cpulm_vocab_stop *stop) {
    /* the longest word is the whole text lower-cased: at most 4 bytes per input byte */
    char *w = malloc(3 + 4 * n + 1);
    if (!w) return CPULM_ERR_NOMEM;
    memcpy(w, "\xE2\x96\x81", 3);
    size_t k = 3;
    cpulm_status st = CPULM_OK;
    for (size_t i = 0; i < n && st == CPULM_OK;) {
        if (cpulm_vocab_should_stop(stop)) {
            st = CPULM_ERR_CANCELLED;
            break;
        }
        const uint32_t cp = wpm_nfd(cpulm_utf8_decode(text, n, &i));
        const unsigned f = cpulm_unicode_flags(cp);
        const int alone =
            (f & CPULM_UC_PUNCT) || (cp < 0x7F && (f & CPULM_UC_SYMBOL)) || is_cjk(cp);
        if ((f & CPULM_UC_SPACE) || alone) { /* ends the word */
            if (k > 3) st = encode_word(v, w, k, out);
            k = 3;
        }
        if (f & CPULM_UC_SPACE) continue;
        k += (size_t)cpulm_utf8_encode(wpm_lower(cp), w + k);
        if (alone && st == CPULM_OK) {
            st = encode_word(v, w, k, out);
            k = 3;
        }
    }
    if (st == CPULM_OK && k > 3) st = encode_word(v, w, k, out);
    free(w);
    return st;
}
