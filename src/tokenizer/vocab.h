/* vocab.h: the tokenizer vocabulary and its text <-> token operations (internal API).
 *
 * A cpulm_vocab holds the token texts, scores and types of a model plus everything the
 * two tokenizers need: SentencePiece-style merge-by-score ("llama" model, spm.c) and
 * BPE with merge ranks (bpe.c): byte-level ("gpt2" model, with the hand-written
 * pre-tokenizers in pretok.c) or Gemma 4's SentencePiece-style one over UTF-8 characters
 * ("gemma4" model, pre-tokenizer "gemma4"). Behaviour follows llama.cpp's llama-vocab so token ids
 * match its test vectors: special-token partitioning, SPM dummy-prefix space, byte
 * fallback, Llama 3 ignore_merges, token_to_piece rules.
 *
 * A vocab is immutable after construction and may be used from many threads at once;
 * every function here allocates only its own scratch. It owns copies of all strings, so
 * the GGUF buffer it was built from may be released afterwards.
 */
#ifndef CPULM_TOKENIZER_VOCAB_H
#define CPULM_TOKENIZER_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "cpulm.h"
#include "format/gguf.h"

typedef struct cpulm_vocab cpulm_vocab;

typedef enum cpulm_vocab_type {
    CPULM_VOCAB_SPM = 1, /* tokenizer.ggml.model = "llama" */
    CPULM_VOCAB_BPE = 2, /* tokenizer.ggml.model = "gpt2", or "gemma4" (pre "gemma4") */
    CPULM_VOCAB_WPM = 3, /* tokenizer.ggml.model = "bert": WordPiece (wpm.c) */
} cpulm_vocab_type;

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
typedef enum cpulm_token_type {
    CPULM_TOKEN_UNDEFINED = 0,
    CPULM_TOKEN_NORMAL = 1,
    CPULM_TOKEN_UNKNOWN = 2,
    CPULM_TOKEN_CONTROL = 3,
    CPULM_TOKEN_USER_DEFINED = 4,
    CPULM_TOKEN_UNUSED = 5,
    CPULM_TOKEN_BYTE = 6,
} cpulm_token_type;

/* Builds the vocab from a parsed GGUF (tokenizer.ggml.* keys; general.name for the Phi-3
 * special-token attributes). Returns CPULM_ERR_FORMAT for malformed metadata and
 * CPULM_ERR_UNSUPPORTED for an unknown tokenizer model or BPE pre-tokenizer.
 * *out: owned, free with cpulm_vocab_free. */
cpulm_status cpulm_vocab_load(cpulm_vocab **out, const cpulm_gguf *g, cpulm_error *err);
void cpulm_vocab_free(cpulm_vocab *v); /* NULL is a no-op */

/* A token added on top of a BPE file vocabulary (HF "added_tokens"). */
typedef struct cpulm_vocab_added_token {
    int32_t id;
    const char *text; /* NUL-terminated UTF-8, matched verbatim in text */
    int special;      /* 1: control token (parsed only with parse_special); 0: user-defined */
} cpulm_vocab_added_token;

typedef struct cpulm_vocab_bpe_files {
    const char *vocab_path;  /* encoder.json / vocab.json: one JSON object {"token": id} */
    const char *merges_path; /* vocab.bpe / merges.txt: "left right" per line, rank order;
                                a leading "#version" line is skipped */
    const char *pre;         /* pre-tokenizer name as in tokenizer.ggml.pre, e.g. "llama-bpe" */
    const cpulm_vocab_added_token *added;
    int32_t n_added;
    int32_t bos_id, eos_id; /* -1: none */
    int add_bos;            /* -1: the pre-tokenizer's default (llama.cpp), else 0/1 */
} cpulm_vocab_bpe_files;

/* Builds a byte-level BPE vocab from Hugging Face / GPT-2 style files.
 * *out: owned, free with cpulm_vocab_free. */
cpulm_status cpulm_vocab_from_bpe_files(cpulm_vocab **out, const cpulm_vocab_bpe_files *f,
                                        cpulm_error *err);

/* ---- properties ---- */

int32_t cpulm_vocab_n_tokens(const cpulm_vocab *v);
cpulm_vocab_type cpulm_vocab_kind(const cpulm_vocab *v);
const char *cpulm_vocab_pre_name(const cpulm_vocab *v);      /* "spm", "llama3", "gemma4", ... */
cpulm_token cpulm_vocab_bos(const cpulm_vocab *v);           /* -1 if none */
cpulm_token cpulm_vocab_eos(const cpulm_vocab *v);           /* -1 if none */
cpulm_token cpulm_vocab_eot(const cpulm_vocab *v);           /* -1 if none */
cpulm_token cpulm_vocab_unk(const cpulm_vocab *v);           /* -1 if none */
int cpulm_vocab_wants_bos(const cpulm_vocab *v);             /* tokenizer.ggml.add_bos_token */
int cpulm_vocab_wants_eos(const cpulm_vocab *v);             /* tokenizer.ggml.add_eos_token */
cpulm_token cpulm_vocab_sep(const cpulm_vocab *v);           /* -1 if none */
int cpulm_vocab_wants_sep(const cpulm_vocab *v);             /* tokenizer.ggml.add_sep_token */
int cpulm_vocab_is_eog(const cpulm_vocab *v, cpulm_token t); /* eos, eot, eom, <|im_end|>... */
/* Raw token text (as stored, e.g. "\xe2\x96\x81the" or "Ġthe"), NUL-terminated.
 * Borrowed: valid while v lives. NULL if t is out of range. */
const char *cpulm_vocab_text(const cpulm_vocab *v, cpulm_token t);
cpulm_token_type cpulm_vocab_token_type(const cpulm_vocab *v, cpulm_token t);
float cpulm_vocab_score(const cpulm_vocab *v, cpulm_token t);
/* Exact text -> id lookup of a whole token; -1 if absent. */
cpulm_token cpulm_vocab_find(const cpulm_vocab *v, const char *text, size_t len);

/* ---- text <-> tokens ---- */

/* Text -> ids, as llama.cpp's llama_tokenize. add_special: BOS/EOS as the vocab asks.
 * parse_special: control-token strings in the text become their ids; user-defined tokens
 * are always split out (llama.cpp / HF behaviour: they are not "special"). Writes at most
 * cap ids; CPULM_ERR_TOO_SMALL sets *n_out to the count needed. */
cpulm_status cpulm_vocab_tokenize(const cpulm_vocab *v, const char *text, size_t len,
                                  int add_special, int parse_special, cpulm_token *out, int32_t cap,
                                  int32_t *n_out);

/* A way to stop a long tokenization: the loops call cpulm_vocab_should_stop at each step,
 * which asks fn(user) every 1024 of them. */
typedef struct cpulm_vocab_stop {
    int (*fn)(void *user);
    void *user;
    uint32_t tick;
} cpulm_vocab_stop;

static inline int cpulm_vocab_should_stop(cpulm_vocab_stop *s) {
    return s && (++s->tick & 1023u) == 0 && s->fn(s->user);
}

/* cpulm_vocab_tokenize that returns CPULM_ERR_CANCELLED once stop says so (stop may be
 * NULL). */
cpulm_status cpulm_vocab_tokenize_stop(const cpulm_vocab *v, const char *text, size_t len,
                                       int add_special, int parse_special, cpulm_token *out,
                                       int32_t cap, int32_t *n_out, cpulm_vocab_stop *stop);

/* The bytes token t stands for (see cpulm_token_to_piece in cpulm.h). Control and unknown
 * tokens give "" unless special != 0. CPULM_ERR_TOO_SMALL sets *n_out to the size needed;
 * CPULM_ERR_INVALID_ARG for an out-of-range id. */
cpulm_status cpulm_vocab_piece(const cpulm_vocab *v, cpulm_token t, int special, char *buf,
                               int32_t cap, int32_t *n_out);

/* ---- streaming detokenizer (engine of cpulm_detok_*; d->m is left to the caller) ---- */

/* Clears the stream state (keeps d->m). */
void cpulm_vocab_detok_reset(cpulm_detok *d, int special);
/* Appends t's piece and writes every complete UTF-8 character now available to out.
 * An incomplete trailing sequence is held back; bytes that can never form a valid
 * sequence become U+FFFD. After BOS, an SPM vocab's leading space of the next piece is
 * dropped (the dummy prefix). Returns bytes written, CPULM_ERR_TOO_SMALL (state
 * unchanged; cap >= 4 * piece length + 8 always suffices) or CPULM_ERR_INVALID_ARG. */
int32_t cpulm_vocab_detok_push(const cpulm_vocab *v, cpulm_detok *d, cpulm_token t, char *out,
                               int32_t cap);
/* Emits held-back bytes as U+FFFD (they are an incomplete sequence) and resets the hold. */
int32_t cpulm_vocab_detok_flush(cpulm_detok *d, char *out, int32_t cap);

#endif
