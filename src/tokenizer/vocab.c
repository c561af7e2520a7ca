/* vocab.c: cpulm_vocab construction, lookups, properties and token -> piece.
 * Loaders (vocab_load.c for GGUF, bpe_files.c for HF files) fill the token table through
 * the tok_vocab_* builder; tok_vocab_finish derives everything else. Never prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "tokenizer/utf8.h"

/* ---- small helpers ---- */

cpulm_status tok_ivec_reserve(tok_ivec *a, size_t n) {
    if (n <= a->cap) return CPULM_OK;
    size_t cap = a->cap ? a->cap : 16;
    while (cap < n)
        cap *= 2;
    int32_t *p = realloc(a->v, cap * sizeof *p);
    if (!p) return CPULM_ERR_NOMEM;
    a->v = p;
    a->cap = cap;
    return CPULM_OK;
}

cpulm_status tok_ivec_push(tok_ivec *a, int32_t x) {
    if (a->n == a->cap && tok_ivec_reserve(a, a->n + 1) != CPULM_OK) return CPULM_ERR_NOMEM;
    a->v[a->n++] = x;
    return CPULM_OK;
}

void tok_ivec_free(tok_ivec *a) {
    free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static uint32_t table_size(size_t n) { /* power of two >= 2n */
    uint32_t s = 16;
    while (s < 2 * n)
        s *= 2;
    return s;
}

/* ---- construction ---- */

cpulm_status tok_vocab_alloc(cpulm_vocab **out, cpulm_vocab_type type, int32_t n_tokens,
                             cpulm_error *err) {
    *out = NULL;
    if (n_tokens <= 0 || n_tokens > (1 << 26))
        return cpulm_errf(err, CPULM_ERR_FORMAT, "vocab: bad token count %d", (int)n_tokens);
    cpulm_vocab *v = calloc(1, sizeof *v);
    if (!v) return cpulm_errf(err, CPULM_ERR_NOMEM, "vocab: out of memory");
    size_t n = (size_t)n_tokens;
    v->type = type;
    v->n_tokens = n_tokens;
    v->off = calloc(n, sizeof *v->off);
    v->len = calloc(n, sizeof *v->len);
    v->score = calloc(n, sizeof *v->score);
    v->ttype = calloc(n, 1);
    v->attr = calloc(n, 1);
    v->bos = v->eos = v->eot = v->eom = v->unk = v->pad = v->sep = -1;
    if (!v->off || !v->len || !v->score || !v->ttype || !v->attr) {
        cpulm_vocab_free(v);
        return cpulm_errf(err, CPULM_ERR_NOMEM, "vocab: out of memory");
    }
    memset(v->ttype, CPULM_TOKEN_NORMAL, n);
    *out = v;
    return CPULM_OK;
}

static cpulm_status pool_append(cpulm_vocab *v, const char *s, size_t n, uint32_t *off) {
    if (n > UINT32_MAX - 1 || v->pool_n + n + 1 > UINT32_MAX) return CPULM_ERR_NOMEM;
    if (v->pool_n + n + 1 > v->pool_cap) {
        size_t cap = v->pool_cap ? v->pool_cap : 4096;
        while (cap < v->pool_n + n + 1)
            cap *= 2;
        char *p = realloc(v->pool, cap);
        if (!p) return CPULM_ERR_NOMEM;
        v->pool = p;
        v->pool_cap = cap;
    }
    memcpy(v->pool + v->pool_n, s, n);
    v->pool[v->pool_n + n] = '\0';
    *off = (uint32_t)v->pool_n;
    v->pool_n += n + 1;
    return CPULM_OK;
}

cpulm_status tok_vocab_set_text(cpulm_vocab *v, int32_t id, const char *s, size_t n) {
    CPULM_ASSERT(id >= 0 && id < v->n_tokens);
    char empty[32];
    if (n == 0) { /* llama.cpp renames empty tokens so the text -> id map stays 1:1 */
        n = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%d]", (int)id);
        s = empty;
    }
    v->len[id] = (uint32_t)n;
    return pool_append(v, s, n, &v->off[id]);
}

cpulm_status tok_vocab_index(cpulm_vocab *v) {
    uint32_t size = table_size((size_t)v->n_tokens);
    v->map = malloc(size * sizeof *v->map);
    if (!v->map) return CPULM_ERR_NOMEM;
    memset(v->map, 0xFF, size * sizeof *v->map);
    v->map_mask = size - 1;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const char *s = v->pool + v->off[id];
        uint32_t h = (uint32_t)hash_bytes(s, v->len[id]) & v->map_mask;
        for (;; h = (h + 1) & v->map_mask) {
            int32_t o = v->map[h];
            if (o < 0 || (v->len[o] == v->len[id] && !memcmp(v->pool + v->off[o], s, v->len[id]))) {
                v->map[h] = id; /* a later duplicate replaces the earlier id */
                break;
            }
        }
    }
    return CPULM_OK;
}

int32_t tok_find(const cpulm_vocab *v, const char *s, size_t n) {
    uint32_t h = (uint32_t)hash_bytes(s, n) & v->map_mask;
    for (;; h = (h + 1) & v->map_mask) {
        int32_t o = v->map[h];
        if (o < 0) return -1;
        if (v->len[o] == n && !memcmp(v->pool + v->off[o], s, n)) return o;
    }
}

cpulm_status tok_vocab_alloc_merges(cpulm_vocab *v, int32_t n_merges) {
    uint32_t size = table_size(n_merges > 0 ? (size_t)n_merges : 1);
    v->merges = calloc(size, sizeof *v->merges);
    if (!v->merges) return CPULM_ERR_NOMEM;
    v->merge_mask = size - 1;
    return CPULM_OK;
}

const tok_merge *tok_find_merge(const cpulm_vocab *v, int32_t left, int32_t right) {
    if (!v->merges || left < 0 || right < 0) return NULL;
    uint64_t key = (uint64_t)(left + 1) << 32 | (uint64_t)(right + 1);
    for (uint32_t h = (uint32_t)hash_u64(key) & v->merge_mask;; h = (h + 1) & v->merge_mask) {
        if (v->merges[h].key == key) return &v->merges[h];
        if (v->merges[h].key == 0) return NULL;
    }
}

cpulm_status tok_vocab_add_merge(cpulm_vocab *v, const char *s, size_t n, int32_t rank) {
    /* The split is the first space after the first byte, as in llama.cpp. */
    const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
    if (!sp) return CPULM_OK;
    size_t nl = (size_t)(sp - s), nr = n - nl - 1;
    int32_t l = tok_find(v, s, nl), r = tok_find(v, sp + 1, nr);
    if (l < 0 || r < 0) return CPULM_OK;
    if ((uint32_t)v->n_merges + 1 > (v->merge_mask + 1) / 2) return CPULM_ERR_INVALID_ARG;
    char small[256];
    char *cat = nl + nr <= sizeof small ? small : malloc(nl + nr);
    if (!cat) return CPULM_ERR_NOMEM;
    memcpy(cat, s, nl);
    memcpy(cat + nl, sp + 1, nr);
    int32_t result = tok_find(v, cat, nl + nr);
    if (cat != small) free(cat);
    uint64_t key = (uint64_t)(l + 1) << 32 | (uint64_t)(r + 1);
    uint32_t h = (uint32_t)hash_u64(key) & v->merge_mask;
    while (v->merges[h].key != 0) {
        if (v->merges[h].key == key) return CPULM_OK; /* first rank wins */
        h = (h + 1) & v->merge_mask;
    }
    v->merges[h] = (tok_merge){key, rank, result};
    v->n_merges++;
    return CPULM_OK;
}

/* ---- pre-tokenizer names (llama.cpp llama_vocab::impl::load) ---- */

static bool name_in(const char *name, size_t len, const char *const *list) {
    for (; *list; list++)
        if (strlen(*list) == len && !memcmp(*list, name, len)) return true;
    return false;
}

bool tok_vocab_set_pre(cpulm_vocab *v, const char *name, size_t len) {
    static const char *const llama3[] = {"llama3",  "llama-v3", "llama-bpe", "falcon3", "falcon-h1",
                                         "pixtral", "midm-2.0", "lfm2",      NULL};
    static const char *const llama3_regex[] = {"dbrx", "smaug-bpe", NULL};
    static const char *const qwen2[] = {"qwen2", "deepseek-r1-qwen", "megrez", "kormo", NULL};
    static const char *const gemma4[] = {"gemma4", "granite-embed-multi-311m", NULL};
    if (name_in(name, len, llama3)) {
        v->pre = TOK_PRE_LLAMA3;
        v->ignore_merges = true;
        v->add_bos = true;
    } else if (name_in(name, len, llama3_regex)) {
        v->pre = TOK_PRE_LLAMA3; /* same split, but plain merging */
    } else if (name_in(name, len, qwen2)) {
        v->pre = TOK_PRE_QWEN2;
    } else if (len == 12 && !memcmp(name, "deepseek-llm", 12)) {
        v->pre = TOK_PRE_DEEPSEEK_LLM;
    } else if (len == 14 && !memcmp(name, "deepseek-coder", 14)) {
        v->pre = TOK_PRE_DEEPSEEK_CODER;
    } else if (name_in(name, len, gemma4)) {
        v->pre = TOK_PRE_GEMMA4; /* its BOS is forced on after the file's keys (vocab_load.c) */
    } else {
        return false;
    }
    return true;
}

const char *cpulm_vocab_pre_name(const cpulm_vocab *v) {
    switch (v->pre) {
    case TOK_PRE_NONE: return "spm";
    case TOK_PRE_LLAMA3: return "llama3";
    case TOK_PRE_QWEN2: return "qwen2";
    case TOK_PRE_DEEPSEEK_LLM: return "deepseek-llm";
    case TOK_PRE_DEEPSEEK_CODER: return "deepseek-coder";
    case TOK_PRE_GEMMA4: return "gemma4";
    }
    return "?";
}

/* ---- finishing: byte tables, end-of-generation tokens, specials, pieces ---- */

static void build_byte_tables(cpulm_vocab *v) {
    static const char hex[] = "0123456789ABCDEF";
    /* GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68
     * bytes to U+0100.. in byte order. */
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        v->byte_cp[b] = (uint16_t)(keep ? b : 256 + n++);
    }
    for (int c = 0; c < 512; c++)
        v->cp_byte[c] = -1;
    for (int b = 0; b < 256; b++) {
        char u[4];
        v->cp_byte[v->byte_cp[b]] = (int16_t)b;
        v->byte_sym[b] = tok_find(v, u, (size_t)cpulm_utf8_encode(v->byte_cp[b], u));
    }
    for (int b = 0; b < 256; b++) {
        char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        char raw = (char)b;
        int32_t id = tok_find(v, name, 6);
        v->byte_tok[b] = id >= 0 ? id : tok_find(v, &raw, 1);
    }
}

static int32_t find_first(const cpulm_vocab *v, const char *const *texts) {
    for (; *texts; texts++) {
        int32_t id = tok_find(v, *texts, strlen(*texts));
        if (id >= 0) return id;
    }
    return -1;
}

/* llama.cpp recognises these tokens by text and forces them to be control tokens. */
static int32_t detect(cpulm_vocab *v, const char *const *texts) {
    int32_t id = find_first(v, texts);
    if (id >= 0) v->ttype[id] = CPULM_TOKEN_CONTROL;
    return id;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static cpulm_status build_eog(cpulm_vocab *v) {
    static const char *const eot[] = {"<|eot_id|>",
                                      "<|im_end|>",
                                      "<|end|>",
                                      "<end_of_turn>",
                                      "<|endoftext|>",
                                      "<|end_of_text|>",
                                      "<EOT>",
                                      "_<EOT>",
                                      "<\xef\xbd\x9c"
                                      "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                      "<end_of_utterance>",
                                      NULL};
    static const char *const eom[] = {"<|eom_id|>", NULL};
    static const char *const fim_pad[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", NULL};
    static const char *const fim_rep[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                          "<REPO>",       "<reponame>",    NULL};
    static const char *const fim_sep[] = {"<|file_sep|>", NULL};
    static const char *const eog[] = {
        "<|eot_id|>", "<|im_end|>",    "<|end|>",          "<|return|>",
        "<|call|>",   "<end_of_turn>", "<|endoftext|>",    "<|eom_id|>",
        "<EOT>",      "_<EOT>",        "<|end_of_text|>",  "<end_of_utterance>",
        "<eos>",      "<turn|>",       "<|tool_response>", NULL}; /* the last three: Gemma 4's */
    if (v->eot < 0) v->eot = detect(v, eot);
    if (v->eom < 0) v->eom = detect(v, eom);
    int32_t ids[32];
    int n = 0;
    ids[n++] = detect(v, fim_pad);
    ids[n++] = detect(v, fim_rep);
    ids[n++] = detect(v, fim_sep);
    for (const char *const *t = eog; *t; t++) {
        const char *one[] = {*t, NULL};
        ids[n++] = detect(v, one);
    }
    ids[n++] = v->eos;
    ids[n++] = v->eot;
    ids[n++] = v->eom;
    /* harmony (gpt-oss): <|end|> closes one message of a turn that <|return|> or <|call|>
     * ends, so it is not an end of generation (llama.cpp's rule: all three present) */
    const char *end[] = {"<|end|>", NULL}, *ret[] = {"<|return|>", NULL},
               *call[] = {"<|call|>", NULL};
    const int32_t end_id = detect(v, end);
    if (end_id >= 0 && detect(v, ret) >= 0 && detect(v, call) >= 0)
        for (int i = 0; i < n; i++)
            if (ids[i] == end_id) ids[i] = -1;
    qsort(ids, (size_t)n, sizeof ids[0], cmp_i32);
    v->eog = malloc((size_t)n * sizeof *v->eog);
    if (!v->eog) return CPULM_ERR_NOMEM;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && (v->n_eog == 0 || v->eog[v->n_eog - 1] != ids[i]))
            v->eog[v->n_eog++] = ids[i];
    return CPULM_OK;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static bool is_special_type(uint8_t t) {
    return t == CPULM_TOKEN_CONTROL || t == CPULM_TOKEN_USER_DEFINED || t == CPULM_TOKEN_UNKNOWN;
}

static cpulm_status build_specials(cpulm_vocab *v) {
    int32_t n = 0;
    for (int32_t id = 0; id < v->n_tokens; id++)
        n += is_special_type(v->ttype[id]);
    v->specials = malloc((size_t)(n ? n : 1) * sizeof *v->specials);
    if (!v->specials) return CPULM_ERR_NOMEM;
    for (int32_t id = 0; id < v->n_tokens; id++)
        if (is_special_type(v->ttype[id])) v->specials[v->n_specials++] = id;
    /* Longest text first (llama.cpp partitions by the longest special tokens first), ties
     * by id; sort packed (UINT32_MAX - len, id) keys since qsort has no context. */
    uint64_t *keys = malloc((size_t)(n ? n : 1) * sizeof *keys);
    if (!keys) return CPULM_ERR_NOMEM;
    for (int32_t i = 0; i < n; i++)
        keys[i] = (uint64_t)(UINT32_MAX - v->len[v->specials[i]]) << 32 | (uint32_t)v->specials[i];
    qsort(keys, (size_t)n, sizeof *keys, cmp_u64);
    for (int32_t i = 0; i < n; i++)
        v->specials[i] = (int32_t)(keys[i] & 0xFFFFFFFFu);
    free(keys);
    return CPULM_OK;
}

static int hex_val(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Writes token id's piece (llama.cpp token_to_piece with special = true) to dst; dst has
 * room for len[id] bytes, which no piece exceeds. Returns the byte count. */
static uint32_t make_piece(const cpulm_vocab *v, int32_t id, char *dst) {
    const char *s = v->pool + v->off[id];
    uint32_t n = v->len[id], k = 0;
    uint8_t t = v->ttype[id];
    if (is_special_type(t)) {
        memcpy(dst, s, n);
        return n;
    }
    const bool gemma4 = v->pre == TOK_PRE_GEMMA4; /* SentencePiece's pieces in a BPE vocab */
    if ((v->type == CPULM_VOCAB_SPM || gemma4) && t == CPULM_TOKEN_BYTE) {
        int hi = n >= 6 ? hex_val(s[3]) : -1, lo = n >= 6 ? hex_val(s[4]) : -1;
        if (hi < 0 || lo < 0) return 0;
        dst[0] = (char)(hi << 4 | lo);
        return 1;
    }
    if (t != CPULM_TOKEN_NORMAL) return 0; /* unused / undefined tokens render as nothing */
    if (v->type == CPULM_VOCAB_SPM || v->type == CPULM_VOCAB_WPM || gemma4) {
        for (uint32_t i = 0; i < n; i++) {
            if (i + 2 < n && !memcmp(s + i, "\xe2\x96\x81", 3)) { /* U+2581 -> space */
                dst[k++] = ' ';
                i += 2;
            } else {
                dst[k++] = s[i];
            }
        }
        return k;
    }
    for (size_t i = 0; i < n;) { /* byte-level BPE: each codepoint stands for one byte */
        size_t at = i;
        uint32_t cp = cpulm_utf8_decode(s, n, &i);
        if (cp < 512 && v->cp_byte[cp] >= 0) {
            dst[k++] = (char)v->cp_byte[cp];
        } else { /* not a byte symbol: keep the text as is */
            memcpy(dst + k, s + at, i - at);
            k += (uint32_t)(i - at);
        }
    }
    return k;
}

static cpulm_status build_pieces(cpulm_vocab *v) {
    size_t n = (size_t)v->n_tokens;
    v->piece_pool = malloc(v->pool_n ? v->pool_n : 1);
    v->piece_off = malloc(n * sizeof *v->piece_off);
    v->piece_len = malloc(n * sizeof *v->piece_len);
    if (!v->piece_pool || !v->piece_off || !v->piece_len) return CPULM_ERR_NOMEM;
    uint32_t at = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        v->piece_off[id] = at;
        v->piece_len[id] = make_piece(v, id, v->piece_pool + at);
        at += v->piece_len[id];
    }
    return CPULM_OK;
}

/* SentencePiece's own control texts typed user-defined by a converter (Phi-3's "</s>") are
 * still control tokens to llama.cpp: with special-token parsing off, text that spells them
 * tokenizes as text, and they are not rendered unless special tokens are asked for. */
static void spm_control_texts(cpulm_vocab *v) {
    if (v->type != CPULM_VOCAB_SPM) return;
    static const char *const texts[] = {"<unk>", "<s>", "</s>", NULL};
    for (const char *const *t = texts; *t; t++) {
        int32_t id = tok_find(v, *t, strlen(*t));
        if (id >= 0 && v->ttype[id] == CPULM_TOKEN_USER_DEFINED) v->ttype[id] = CPULM_TOKEN_CONTROL;
    }
}

cpulm_status tok_vocab_finish(cpulm_vocab *v, bool phi3_rstrip, cpulm_error *err) {
    cpulm_status st;
    spm_control_texts(v);
    build_byte_tables(v);
    for (int32_t i = 0; i < v->n_tokens; i++) /* WordPiece's longest-match window */
        if (v->len[i] > v->max_len) v->max_len = v->len[i];
    if ((st = build_eog(v)) != CPULM_OK || (st = build_specials(v)) != CPULM_OK ||
        (st = build_pieces(v)) != CPULM_OK)
        return cpulm_errf(err, st, "vocab: out of memory");
    if (phi3_rstrip) { /* llama.cpp: Phi-3 templates put a newline after these tokens */
        for (int32_t i = 0; i < v->n_specials; i++)
            v->attr[v->specials[i]] |= TOK_ATTR_RSTRIP;
        static const char *const on[] = {"</s>", NULL}, *const off[] = {"<unk>", "<s>",
                                                                        "<|endoftext|>", NULL};
        for (const char *const *t = on; *t; t++) {
            int32_t id = tok_find(v, *t, strlen(*t));
            if (id >= 0) v->attr[id] |= TOK_ATTR_RSTRIP;
        }
        for (const char *const *t = off; *t; t++) {
            int32_t id = tok_find(v, *t, strlen(*t));
            if (id >= 0) v->attr[id] &= (uint8_t)~TOK_ATTR_RSTRIP;
        }
    }
    return CPULM_OK;
}

void cpulm_vocab_free(cpulm_vocab *v) {
    if (!v) return;
    free(v->pool);
    free(v->off);
    free(v->len);
    free(v->score);
    free(v->ttype);
    free(v->attr);
    free(v->piece_pool);
    free(v->piece_off);
    free(v->piece_len);
    free(v->map);
    free(v->merges);
    free(v->eog);
    free(v->specials);
    free(v);
}

/* ---- properties ---- */

int32_t cpulm_vocab_n_tokens(const cpulm_vocab *v) {
    return v->n_tokens;
}
cpulm_vocab_type cpulm_vocab_kind(const cpulm_vocab *v) {
    return v->type;
}
cpulm_token cpulm_vocab_bos(const cpulm_vocab *v) {
    return v->bos;
}
cpulm_token cpulm_vocab_eos(const cpulm_vocab *v) {
    return v->eos;
}
cpulm_token cpulm_vocab_eot(const cpulm_vocab *v) {
    return v->eot;
}
cpulm_token cpulm_vocab_unk(const cpulm_vocab *v) {
    return v->unk;
}
int cpulm_vocab_wants_bos(const cpulm_vocab *v) {
    return v->add_bos;
}
int cpulm_vocab_wants_eos(const cpulm_vocab *v) {
    return v->add_eos;
}

cpulm_token cpulm_vocab_sep(const cpulm_vocab *v) {
    return v->sep;
}

int cpulm_vocab_wants_sep(const cpulm_vocab *v) {
    return v->add_sep;
}

int cpulm_vocab_is_eog(const cpulm_vocab *v, cpulm_token t) {
    int32_t lo = 0, hi = v->n_eog - 1;
    while (lo <= hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (v->eog[mid] == t) return 1;
        if (v->eog[mid] < t)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return 0;
}

const char *cpulm_vocab_text(const cpulm_vocab *v, cpulm_token t) {
    return t >= 0 && t < v->n_tokens ? v->pool + v->off[t] : NULL;
}

cpulm_token_type cpulm_vocab_token_type(const cpulm_vocab *v, cpulm_token t) {
    return t >= 0 && t < v->n_tokens ? (cpulm_token_type)v->ttype[t] : CPULM_TOKEN_UNDEFINED;
}

float cpulm_vocab_score(const cpulm_vocab *v, cpulm_token t) {
    return t >= 0 && t < v->n_tokens ? v->score[t] : 0.0f;
}

cpulm_token cpulm_vocab_find(const cpulm_vocab *v, const char *text, size_t len) {
    return tok_find(v, text, len);
}

cpulm_status cpulm_vocab_piece(const cpulm_vocab *v, cpulm_token t, int special, char *buf,
                               int32_t cap, int32_t *n_out) {
    *n_out = 0;
    if (t < 0 || t >= v->n_tokens) return CPULM_ERR_INVALID_ARG;
    uint8_t ty = v->ttype[t];
    if (!special && (ty == CPULM_TOKEN_CONTROL || ty == CPULM_TOKEN_UNKNOWN)) return CPULM_OK;
    uint32_t n = v->piece_len[t];
    *n_out = (int32_t)n;
    if (cap < 0 || n > (uint32_t)cap) return CPULM_ERR_TOO_SMALL;
    memcpy(buf, v->piece_pool + v->piece_off[t], n);
    return CPULM_OK;
}
