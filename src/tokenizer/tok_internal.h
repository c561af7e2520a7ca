/* tok_internal.h: the cpulm_vocab layout and helpers shared by the tokenizer files.
 * Only the tokenizer .c files include this; everyone else goes through vocab.h. */
#ifndef CPULM_TOKENIZER_TOK_INTERNAL_H
#define CPULM_TOKENIZER_TOK_INTERNAL_H

#include <stdbool.h>

#include "base/status.h"
#include "tokenizer/vocab.h"

enum { TOK_ATTR_LSTRIP = 1, TOK_ATTR_RSTRIP = 2 };

/* Pre-tokenizer families (split rules of llama.cpp's llm_tokenizer_bpe). */
typedef enum tok_pre {
    TOK_PRE_NONE = 0, /* SPM: no pre-tokenizer */
    TOK_PRE_LLAMA3,
    TOK_PRE_QWEN2,
    TOK_PRE_DEEPSEEK_LLM,
    TOK_PRE_DEEPSEEK_CODER,
    /* Gemma 4 (tokenizer.ggml.model "gemma4"): SentencePiece-style BPE without GPT-2's byte
     * encoding: spaces as U+2581, runs of newlines and runs of anything else, merges over
     * UTF-8 characters, <0xXX> byte fallback (bpe.c) */
    TOK_PRE_GEMMA4,
} tok_pre;

/* Merge table slot: key = (left_id + 1) << 32 | (right_id + 1); 0 marks an empty slot. */
typedef struct tok_merge {
    uint64_t key;
    int32_t rank;
    int32_t result; /* id of left+right, -1 if that text is not a token */
} tok_merge;

struct cpulm_vocab {
    cpulm_vocab_type type;
    tok_pre pre;
    int32_t n_tokens;

    char *pool; /* token texts, each NUL-terminated */
    size_t pool_n, pool_cap;
    uint32_t *off, *len; /* [n_tokens] text of token i = pool + off[i], len[i] bytes */
    float *score;        /* [n_tokens] */
    uint8_t *ttype;      /* [n_tokens] cpulm_token_type */
    uint8_t *attr;       /* [n_tokens] TOK_ATTR_* */

    char *piece_pool;                /* token_to_piece(special = 1) of every token */
    uint32_t *piece_off, *piece_len; /* [n_tokens] */

    int32_t *map; /* text -> id, open addressing over [map_mask + 1] slots, -1 = empty */
    uint32_t map_mask;

    tok_merge *merges; /* BPE only; [merge_mask + 1] slots */
    uint32_t merge_mask;
    int32_t n_merges;

    int32_t byte_tok[256]; /* SPM byte fallback: id of "<0xXX>" (or the byte itself), -1 */
    uint16_t byte_cp[256]; /* BPE: GPT-2 bytes_to_unicode codepoint of each byte */
    int16_t cp_byte[512];  /* BPE: inverse of byte_cp for codepoints < 512, else -1 */
    int32_t byte_sym[256]; /* BPE: id of the one-symbol token for each byte, -1 */

    int32_t bos, eos, eot, eom, unk, pad, sep;
    uint32_t max_len; /* WPM: the longest token text in bytes */
    int32_t *eog;     /* sorted ids that end generation */
    int32_t n_eog;
    int32_t *specials; /* control / user-defined / unknown ids, longest text first */
    int32_t n_specials;

    bool add_bos, add_eos, add_sep, add_space_prefix, ignore_merges;
};

/* Growable int32 array used for token and offset lists. */
typedef struct tok_ivec {
    int32_t *v;
    size_t n, cap;
} tok_ivec;

cpulm_status tok_ivec_push(tok_ivec *a, int32_t x);
cpulm_status tok_ivec_reserve(tok_ivec *a, size_t n);
void tok_ivec_free(tok_ivec *a);

/* ---- construction (vocab.c); order: alloc, set_text..., index, merges, finish ---- */
cpulm_status tok_vocab_alloc(cpulm_vocab **out, cpulm_vocab_type type, int32_t n_tokens,
                             cpulm_error *err);
/* Copies text into the pool for token id; an empty text becomes "[EMPTY_<id>]". */
cpulm_status tok_vocab_set_text(cpulm_vocab *v, int32_t id, const char *s, size_t n);
/* Builds the text -> id map (a later duplicate text wins, as in llama.cpp). */
cpulm_status tok_vocab_index(cpulm_vocab *v);
cpulm_status tok_vocab_alloc_merges(cpulm_vocab *v, int32_t n_merges);
/* Adds merge "left right" with the given rank; malformed lines and merges of unknown
 * texts are ignored (they can never fire); a repeated pair keeps its first rank. */
cpulm_status tok_vocab_add_merge(cpulm_vocab *v, const char *s, size_t n, int32_t rank);
/* Derives byte tables, EOT/EOG tokens, the special-token list and the piece cache.
 * phi3_rstrip: give control tokens the right-strip attribute, as llama.cpp does for
 * models named phi-3 / phi3. */
cpulm_status tok_vocab_finish(cpulm_vocab *v, bool phi3_rstrip, cpulm_error *err);
/* Maps a tokenizer.ggml.pre name to a pre-tokenizer; false if unknown. Sets ignore_merges
 * and the add_bos default as llama.cpp does for that name. */
bool tok_vocab_set_pre(cpulm_vocab *v, const char *name, size_t len);

/* ---- lookups ---- */
int32_t tok_find(const cpulm_vocab *v, const char *s, size_t n); /* -1 if absent */
const tok_merge *tok_find_merge(const cpulm_vocab *v, int32_t left, int32_t right);

/* ---- tokenizers: append ids for one raw-text fragment ---- */
/* stop may be NULL; CPULM_ERR_CANCELLED when it says so (see cpulm_vocab_stop). */
cpulm_status tok_spm_encode(const cpulm_vocab *v, const char *text, size_t n, tok_ivec *out,
                            cpulm_vocab_stop *stop);
/* Byte-level BPE, or Gemma 4's BPE when v->pre is TOK_PRE_GEMMA4 (bpe.c). */
cpulm_status tok_bpe_encode(const cpulm_vocab *v, const char *text, size_t n, tok_ivec *out,
                            cpulm_vocab_stop *stop);
/* WordPiece (wpm.c): lower-cased words split at whitespace and punctuation, each matched
 * greedily longest-first with a U+2581 word-start marker, [UNK] for a word that cannot be
 * covered. */
cpulm_status tok_wpm_encode(const cpulm_vocab *v, const char *text, size_t n, tok_ivec *out,
                            cpulm_vocab_stop *stop);
/* Splits cps[0..n) into pre-tokens; appends their lengths (in codepoints) to lens. */
cpulm_status tok_pretok_split(tok_pre pre, const uint32_t *cps, size_t n, tok_ivec *lens);

#endif
