/* vocab_load.c: cpulm_vocab from GGUF metadata (tokenizer.ggml.*), with llama.cpp's
 * defaults: SPM bos 1 / eos 2 / unk 0 / add_bos true / dummy-prefix space; BPE needs a
 * known tokenizer.ggml.pre; "gemma4" (Gemma 4's SentencePiece-style BPE) is BPE with the
 * pre-tokenizer "gemma4" whatever the file's key says, no default special ids, and its BOS
 * always added. Special-token ids outside the vocab (e.g. 0xFFFFFFFF meaning "none") leave
 * the default in place, as llama.cpp does. */
#include <ctype.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

static cpulm_status get_tokens(cpulm_vocab *v, const cpulm_gguf_arr *toks) {
    cpulm_gguf_str_iter it;
    cpulm_gguf_str_iter_init(&it, toks);
    for (int32_t i = 0; i < v->n_tokens; i++) {
        cpulm_str s = cpulm_gguf_str_iter_next(&it);
        cpulm_status st = tok_vocab_set_text(v, i, s.ptr, (size_t)s.len);
        if (st != CPULM_OK) return st;
    }
    return CPULM_OK;
}

/* Scores and token types: optional, but when present one per token. */
static cpulm_status get_scores_types(cpulm_vocab *v, const cpulm_gguf *g, cpulm_error *err) {
    cpulm_gguf_arr a;
    cpulm_status st = cpulm_gguf_get_arr(g, "tokenizer.ggml.scores", CPULM_GGUF_F32, &a, err);
    if (st == CPULM_OK) {
        if (a.n != (uint64_t)v->n_tokens)
            return cpulm_errf(err, CPULM_ERR_FORMAT,
                              "tokenizer.ggml.scores: %llu entries for %d "
                              "tokens",
                              (unsigned long long)a.n, (int)v->n_tokens);
        for (int32_t i = 0; i < v->n_tokens; i++)
            v->score[i] = (float)cpulm_gguf_arr_f64(&a, (uint64_t)i);
    } else if (st != CPULM_ERR_NOT_FOUND) {
        return st;
    }
    st = cpulm_gguf_get_arr(g, "tokenizer.ggml.token_type", CPULM_GGUF_I32, &a, err);
    if (st == CPULM_ERR_NOT_FOUND) return CPULM_OK;
    if (st != CPULM_OK) return st;
    if (a.n != (uint64_t)v->n_tokens)
        return cpulm_errf(err, CPULM_ERR_FORMAT,
                          "tokenizer.ggml.token_type: %llu entries for %d "
                          "tokens",
                          (unsigned long long)a.n, (int)v->n_tokens);
    for (int32_t i = 0; i < v->n_tokens; i++) {
        int64_t t = cpulm_gguf_arr_i64(&a, (uint64_t)i);
        v->ttype[i] =
            (uint8_t)(t >= CPULM_TOKEN_NORMAL && t <= CPULM_TOKEN_BYTE ? t : CPULM_TOKEN_UNDEFINED);
    }
    return CPULM_OK;
}

static cpulm_status get_id(const cpulm_gguf *g, const char *key, int32_t n, int32_t *id,
                           cpulm_error *err) {
    int64_t x;
    cpulm_status st = cpulm_gguf_get_i64(g, key, &x, err);
    if (st == CPULM_ERR_NOT_FOUND) return CPULM_OK;
    if (st != CPULM_OK) return st;
    if (x >= 0 && x < n) *id = (int32_t)x;
    return CPULM_OK;
}

static cpulm_status get_flag(const cpulm_gguf *g, const char *key, bool *flag, cpulm_error *err) {
    bool b;
    cpulm_status st = cpulm_gguf_get_bool(g, key, &b, err);
    if (st == CPULM_ERR_NOT_FOUND) return CPULM_OK;
    if (st == CPULM_OK) *flag = b;
    return st;
}

static cpulm_status get_settings(cpulm_vocab *v, const cpulm_gguf *g, cpulm_error *err) {
    const struct {
        const char *key;
        int32_t *id;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", &v->bos},
        {"tokenizer.ggml.eos_token_id", &v->eos},
        {"tokenizer.ggml.eot_token_id", &v->eot},
        {"tokenizer.ggml.eom_token_id", &v->eom},
        {"tokenizer.ggml.unknown_token_id", &v->unk},
        {"tokenizer.ggml.padding_token_id", &v->pad},
        {"tokenizer.ggml.seperator_token_id", &v->sep}, /* sic: llama.cpp's key */
    };
    cpulm_status st = CPULM_OK;
    for (size_t i = 0; i < sizeof ids / sizeof ids[0] && st == CPULM_OK; i++)
        st = get_id(g, ids[i].key, v->n_tokens, ids[i].id, err);
    if (st == CPULM_OK) st = get_flag(g, "tokenizer.ggml.add_bos_token", &v->add_bos, err);
    if (st == CPULM_OK) st = get_flag(g, "tokenizer.ggml.add_eos_token", &v->add_eos, err);
    if (st == CPULM_OK) st = get_flag(g, "tokenizer.ggml.add_sep_token", &v->add_sep, err);
    if (st == CPULM_OK)
        st = get_flag(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err);
    return st;
}

/* pre_of_model: the pre-tokenizer a tokenizer model implies (Gemma 4's), NULL: the file's key. */
static cpulm_status set_defaults(cpulm_vocab *v, const cpulm_gguf *g, const char *pre_of_model,
                                 cpulm_error *err) {
    if (v->type == CPULM_VOCAB_SPM) {
        v->bos = v->n_tokens > 1 ? 1 : -1;
        v->eos = v->n_tokens > 2 ? 2 : -1;
        v->unk = 0;
        v->add_bos = true;
        v->add_space_prefix = true;
        return CPULM_OK;
    }
    if (v->type == CPULM_VOCAB_WPM) { /* llama.cpp's defaults for "bert" */
        const int32_t n = v->n_tokens;
        v->bos = 101 < n ? 101 : -1;
        v->unk = 100 < n ? 100 : -1;
        v->sep = 102 < n ? 102 : -1;
        v->pad = 0;
        v->add_bos = true;
        v->add_sep = true;
        return CPULM_OK;
    }
    cpulm_str pre = {"", 0};
    cpulm_status st =
        pre_of_model ? CPULM_OK : cpulm_gguf_get_str(g, "tokenizer.ggml.pre", &pre, err);
    if (st != CPULM_OK && st != CPULM_ERR_NOT_FOUND) return st;
    if (pre_of_model) pre = (cpulm_str){pre_of_model, strlen(pre_of_model)};
    if (!tok_vocab_set_pre(v, pre.ptr, (size_t)pre.len))
        return cpulm_errf(err, CPULM_ERR_UNSUPPORTED, "unsupported BPE pre-tokenizer '%.*s'",
                          (int)(pre.len > 64 ? 64 : pre.len), pre.ptr);
    return CPULM_OK;
}

static cpulm_status get_merges(cpulm_vocab *v, const cpulm_gguf *g, cpulm_error *err) {
    cpulm_gguf_arr a;
    cpulm_status st = cpulm_gguf_get_arr(g, "tokenizer.ggml.merges", CPULM_GGUF_STRING, &a, err);
    if (st == CPULM_ERR_NOT_FOUND)
        return cpulm_errf(err, CPULM_ERR_FORMAT, "BPE vocab without tokenizer.ggml.merges");
    if (st != CPULM_OK) return st;
    if (a.n > INT32_MAX / 2) return cpulm_errf(err, CPULM_ERR_FORMAT, "too many merges");
    if ((st = tok_vocab_alloc_merges(v, (int32_t)a.n)) != CPULM_OK)
        return cpulm_errf(err, st, "vocab: out of memory");
    cpulm_gguf_str_iter it;
    cpulm_gguf_str_iter_init(&it, &a);
    for (uint64_t i = 0; i < a.n; i++) {
        cpulm_str s = cpulm_gguf_str_iter_next(&it);
        if ((st = tok_vocab_add_merge(v, s.ptr, (size_t)s.len, (int32_t)i)) != CPULM_OK)
            return cpulm_errf(err, st, "vocab: out of memory");
    }
    return CPULM_OK;
}

/* llama.cpp gives Phi-3's special tokens the right-strip attribute by model name. */
static bool is_phi3(const cpulm_gguf *g) {
    cpulm_str name;
    if (cpulm_gguf_get_str(g, "general.name", &name, NULL) != CPULM_OK) return false;
    char low[256];
    size_t n = name.len < sizeof low - 1 ? (size_t)name.len : sizeof low - 1;
    for (size_t i = 0; i < n; i++)
        low[i] = (char)tolower((unsigned char)name.ptr[i]);
    low[n] = '\0';
    return strstr(low, "phi-3") || strstr(low, "phi3");
}

static cpulm_status load(cpulm_vocab **out, const cpulm_gguf *g, cpulm_vocab_type type,
                         const char *pre_of_model, const cpulm_gguf_arr *toks, cpulm_error *err) {
    cpulm_vocab *v;
    cpulm_status st = tok_vocab_alloc(&v, type, (int32_t)toks->n, err);
    if (st != CPULM_OK) return st;
    if ((st = get_tokens(v, toks)) != CPULM_OK || (st = tok_vocab_index(v)) != CPULM_OK)
        st = cpulm_errf(err, st, "vocab: out of memory");
    if (st == CPULM_OK) st = get_scores_types(v, g, err);
    if (st == CPULM_OK) st = set_defaults(v, g, pre_of_model, err);
    if (st == CPULM_OK) st = get_settings(v, g, err);
    if (st == CPULM_OK && v->pre == TOK_PRE_GEMMA4) v->add_bos = true; /* llama.cpp overrides */
    if (st == CPULM_OK && type == CPULM_VOCAB_BPE) st = get_merges(v, g, err);
    if (st == CPULM_OK) st = tok_vocab_finish(v, is_phi3(g), err);
    if (st != CPULM_OK) {
        cpulm_vocab_free(v);
        return st;
    }
    *out = v;
    return CPULM_OK;
}

cpulm_status cpulm_vocab_load(cpulm_vocab **out, const cpulm_gguf *g, cpulm_error *err) {
    cpulm_str model;
    cpulm_gguf_arr toks;
    cpulm_vocab_type type;
    const char *pre_of_model = NULL;
    *out = NULL;
    cpulm_status st = cpulm_gguf_get_str(g, "tokenizer.ggml.model", &model, err);
    if (st == CPULM_ERR_NOT_FOUND)
        return cpulm_errf(err, CPULM_ERR_FORMAT, "no tokenizer.ggml.model in file");
    if (st != CPULM_OK) return st;
    if (cpulm_str_eq(model, "llama"))
        type = CPULM_VOCAB_SPM;
    else if (cpulm_str_eq(model, "gpt2"))
        type = CPULM_VOCAB_BPE;
    else if (cpulm_str_eq(model, "gemma4"))
        type = CPULM_VOCAB_BPE, pre_of_model = "gemma4";
    else if (cpulm_str_eq(model, "bert"))
        type = CPULM_VOCAB_WPM;
    else
        return cpulm_errf(err, CPULM_ERR_UNSUPPORTED, "unsupported tokenizer model '%.*s'",
                          (int)(model.len > 64 ? 64 : model.len), model.ptr);
    st = cpulm_gguf_get_arr(g, "tokenizer.ggml.tokens", CPULM_GGUF_STRING, &toks, err);
    if (st == CPULM_ERR_NOT_FOUND)
        return cpulm_errf(err, CPULM_ERR_FORMAT, "no tokenizer.ggml.tokens in file");
    if (st != CPULM_OK) return st;
    if (toks.n == 0 || toks.n > (1 << 26))
        return cpulm_errf(err, CPULM_ERR_FORMAT, "bad token count %llu",
                          (unsigned long long)toks.n);
    return load(out, g, type, pre_of_model, &toks, err);
}
