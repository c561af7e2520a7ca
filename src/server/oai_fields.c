/* oai_fields.c: request fields beyond OpenAI's core set (see oai.h).
 *
 * Clients written for llama-server or vLLM send their own sampling fields to the same
 * routes. A field the server silently drops while it would change the output makes the
 * client believe it took effect (issue 25: logit_bias did nothing), so every such field
 * cpulm knows of is either implemented here (aliases onto the request) or refused with a
 * 400 naming it, unless it holds the value that turns it off (llama-server's web UI sends
 * "mirostat": 0, "dry_multiplier": 0, ...). Fields that do not change the output (user,
 * metadata, store, cache_prompt, id_slot, ...) and fields of no known API are ignored.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpulm.h"
#include "server/oai.h"

static const cpulm_json *field(const cpulm_json *root, const char *key) {
    const cpulm_json *v = cpulm_json_get(root, key);
    return v && v->type != CPULM_JSON_NULL ? v : NULL;
}

/* ---- unimplemented fields: accepted only at their neutral value ---- */

typedef enum neutral {
    N_ABSENT,    /* only absent or null */
    N_FALSE,     /* false */
    N_TRUE,      /* true (a switch that is on by default) */
    N_EMPTY,     /* "", [] or {} */
    N_EQ,        /* the number num */
    N_LE,        /* a number <= num */
    N_TEXT_ONLY, /* modalities: ["text"] */
    N_NONE_AUTO, /* function_call: "none" or "auto" (no functions are given) */
} neutral;

static const struct unsupported {
    const char *name;
    neutral ok;
    double num;
} unsupported[] = {
    /* OpenAI */
    {"suffix", N_EMPTY, 0},
    {"functions", N_EMPTY, 0},
    {"function_call", N_NONE_AUTO, 0},
    {"audio", N_ABSENT, 0},
    {"modalities", N_TEXT_ONLY, 0},
    {"verbosity", N_ABSENT, 0},
    {"web_search_options", N_ABSENT, 0},
    /* llama-server */
    {"mirostat", N_EQ, 0},
    {"tfs_z", N_EQ, 1},
    {"dry_multiplier", N_EQ, 0},
    {"xtc_probability", N_EQ, 0},
    {"top_n_sigma", N_LE, 0},
    {"dynatemp_range", N_EQ, 0},
    {"n_probs", N_EQ, 0},
    {"min_keep", N_LE, 1},
    {"n_indent", N_EQ, 0},
    {"t_max_predict_ms", N_EQ, 0},
    {"grammar_lazy", N_FALSE, 0},
    {"grammar_triggers", N_EMPTY, 0},
    {"preserved_tokens", N_EMPTY, 0},
    {"image_data", N_EMPTY, 0},
    {"lora", N_EMPTY, 0},
    {"samplers", N_ABSENT, 0},
    {"penalty_prompt", N_ABSENT, 0},
    {"post_sampling_probs", N_FALSE, 0},
    {"response_fields", N_EMPTY, 0},
    {"return_tokens", N_FALSE, 0},
    /* vLLM */
    {"use_beam_search", N_FALSE, 0},
    {"stop_token_ids", N_EMPTY, 0},
    {"include_stop_str_in_output", N_FALSE, 0},
    {"skip_special_tokens", N_TRUE, 0},
    {"min_tokens", N_EQ, 0},
    {"repetition_penalty", N_EQ, 1},
    {"guided_json", N_ABSENT, 0},
    {"guided_regex", N_ABSENT, 0},
    {"guided_choice", N_ABSENT, 0},
    {"guided_grammar", N_ABSENT, 0},
    {"truncate_prompt_tokens", N_ABSENT, 0},
    {"prompt_logprobs", N_ABSENT, 0},
    {"allowed_token_ids", N_EMPTY, 0},
    {"bad_words", N_EMPTY, 0},
    {"continue_final_message", N_FALSE, 0},
    {"add_generation_prompt", N_TRUE, 0},
    {"documents", N_EMPTY, 0},
    {"chat_template", N_ABSENT, 0},
};

static int text_only(const cpulm_json *v) {
    if (v->type != CPULM_JSON_ARRAY) return 0;
    for (size_t i = 0; i < v->u.list.n; i++) {
        const char *m = cpulm_json_str(&v->u.list.items[i]);
        if (!m || strcmp(m, "text") != 0) return 0;
    }
    return 1;
}

/* Whether v (not null) is the value that leaves the output as if the field were absent. */
static int is_neutral(const struct unsupported *u, const cpulm_json *v) {
    const char *s = cpulm_json_str(v);
    switch (u->ok) {
    case N_ABSENT: return 0;
    case N_FALSE: return v->type == CPULM_JSON_BOOL && !v->u.boolean;
    case N_TRUE: return v->type == CPULM_JSON_BOOL && v->u.boolean;
    case N_EMPTY:
        return (s && !*s) ||
               ((v->type == CPULM_JSON_ARRAY || v->type == CPULM_JSON_OBJECT) && !v->u.list.n);
    case N_EQ: return v->type == CPULM_JSON_NUMBER && v->u.num.f == u->num;
    case N_LE: return v->type == CPULM_JSON_NUMBER && v->u.num.f <= u->num;
    case N_TEXT_ONLY: return text_only(v);
    case N_NONE_AUTO: return s && (strcmp(s, "none") == 0 || strcmp(s, "auto") == 0);
    }
    return 0;
}

static int refuse_unsupported(const cpulm_json *root, cpulm_oai_error *e) {
    static const char *const what[] = {[N_ABSENT] = "",
                                       [N_FALSE] = " (only false)",
                                       [N_TRUE] = " (only true)",
                                       [N_EMPTY] = " (only empty)",
                                       [N_EQ] = "",
                                       [N_LE] = "",
                                       [N_TEXT_ONLY] = " (only [\"text\"])",
                                       [N_NONE_AUTO] = " (only \"none\" or \"auto\")"};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++) {
        const struct unsupported *u = &unsupported[i];
        const cpulm_json *v = field(root, u->name);
        if (!v || is_neutral(u, v)) continue;
        if (u->ok == N_EQ || u->ok == N_LE)
            return cpulm_oai_fail(e, 400, u->name,
                                  "'%s' is not supported by this server (only %s%g)", u->name,
                                  u->ok == N_LE ? "values <= " : "", u->num);
        return cpulm_oai_fail(e, 400, u->name, "'%s' is not supported by this server%s", u->name,
                              what[u->ok]);
    }
    /* best_of n of n is plain n; more would rank candidates cpulm does not generate */
    const cpulm_json *b = field(root, "best_of");
    if (b && !(b->type == CPULM_JSON_NUMBER && b->is_int && b->u.num.i >= 1 &&
               b->u.num.i <= CPULM_OAI_MAX_N))
        return cpulm_oai_fail(e, 400, "best_of", "'best_of' must be an integer >= 1");
    return 0;
}

/* ---- aliases and small extensions ---- */

static int read_int(const cpulm_json *root, const char *key, int64_t lo, int64_t hi, int *has,
                    int64_t *out, cpulm_oai_error *e) {
    const cpulm_json *v = field(root, key);
    *has = v != NULL;
    if (!v) return 0;
    if (v->type != CPULM_JSON_NUMBER || !v->is_int || v->u.num.i < lo || v->u.num.i > hi)
        return cpulm_oai_fail(e, 400, key, "'%s' must be an integer between %lld and %lld", key,
                              (long long)lo, (long long)hi);
    *out = v->u.num.i;
    return 0;
}

/* n_predict (llama-server's max_tokens: it wins over max_tokens there, while OpenAI's
 * max_completion_tokens wins over both), n_keep (accepted: cpulm never drops context
 * tokens, it stops when the context is full, so there is nothing to keep), repeat_last_n
 * (the penalties' window: 0 off, -1 everything generated). */
static int parse_aliases(const cpulm_json *root, cpulm_oai_request *r, cpulm_oai_error *e) {
    int has;
    int64_t v;
    if (read_int(root, "n_predict", -1, 1 << 24, &has, &v, e) < 0) return -1;
    if (has && v == 0)
        return cpulm_oai_fail(e, 400, "n_predict", "'n_predict' must be -1 or at least 1");
    if (has && !field(root, "max_completion_tokens")) r->max_tokens = (int32_t)v;
    if (read_int(root, "n_keep", -1, INT32_MAX, &has, &v, e) < 0) return -1;
    if (read_int(root, "repeat_last_n", -1, 1 << 20, &has, &v, e) < 0) return -1;
    if (has) r->sp.repeat_last_n = (int32_t)v;
    const cpulm_json *tp = field(root, "typical_p");
    if (tp) {
        if (tp->type != CPULM_JSON_NUMBER || !(tp->u.num.f >= 0 && tp->u.num.f <= 1))
            return cpulm_oai_fail(e, 400, "typical_p",
                                  "'typical_p' must be a number between 0 and 1");
        r->sp.typical_p = (float)tp->u.num.f;
    }
    const cpulm_json *re = field(root, "reasoning_effort");
    if (re) {
        const char *s = cpulm_json_str(re);
        if (!s || !(strcmp(s, "low") == 0 || strcmp(s, "medium") == 0 || strcmp(s, "high") == 0))
            return cpulm_oai_fail(e, 400, "reasoning_effort",
                                  "'reasoning_effort' must be \"low\", \"medium\" or "
                                  "\"high\"");
        snprintf(r->reasoning_effort, sizeof r->reasoning_effort, "%s", s);
    }
    const cpulm_json *rf = field(root, "reasoning_format");
    if (rf) {
        const char *s = cpulm_json_str(rf);
        if (!s || !(strcmp(s, "none") == 0 || strcmp(s, "auto") == 0 || strcmp(s, "deepseek") == 0))
            return cpulm_oai_fail(e, 400, "reasoning_format",
                                  "'reasoning_format' must be \"none\", \"auto\" or "
                                  "\"deepseek\"");
        r->reasoning_none = strcmp(s, "none") == 0;
    }
    return 0;
}

/* llama-server's per-request speculation limits: "speculative.n_max": 0 turns it off for
 * the request (it takes at most the server's --draft-max), n_min, p_min. Read from the
 * dotted keys llama-server reads, or from a "speculative" object. */
static const cpulm_json *spec_field(const cpulm_json *root, const char *name) {
    char dotted[32];
    snprintf(dotted, sizeof dotted, "speculative.%s", name);
    const cpulm_json *v = field(root, dotted), *o = field(root, "speculative");
    if (!v && o && o->type == CPULM_JSON_OBJECT) v = field(o, name);
    return v;
}

static int parse_speculative(const cpulm_json *root, cpulm_oai_request *r, cpulm_oai_error *e) {
    static const char *const names[2] = {"n_max", "n_min"};
    for (int i = 0; i < 2; i++) {
        const cpulm_json *v = spec_field(root, names[i]);
        if (!v) continue;
        if (v->type != CPULM_JSON_NUMBER || !v->is_int || v->u.num.i < 0 || v->u.num.i > 256)
            return cpulm_oai_fail(e, 400, "speculative",
                                  "'speculative.%s' must be an integer between 0 and 256",
                                  names[i]);
        *(i == 0 ? &r->spec_n_max : &r->spec_n_min) = (int32_t)v->u.num.i;
    }
    const cpulm_json *p = spec_field(root, "p_min");
    if (p && (p->type != CPULM_JSON_NUMBER || !(p->u.num.f >= 0 && p->u.num.f <= 1)))
        return cpulm_oai_fail(e, 400, "speculative",
                              "'speculative.p_min' must be a number between 0 and 1");
    if (p) r->spec_p_min = (float)p->u.num.f;
    return 0;
}

/* ---- logit_bias ---- */

/* A bias value: a number in OpenAI's range, or false (llama-server: never this token). */
static int bias_value(const cpulm_json *v, float *out, cpulm_oai_error *e) {
    if (v && v->type == CPULM_JSON_BOOL && !v->u.boolean) {
        *out = -INFINITY;
        return 0;
    }
    if (!v || v->type != CPULM_JSON_NUMBER || !(v->u.num.f >= -100 && v->u.num.f <= 100))
        return cpulm_oai_fail(e, 400, "logit_bias",
                              "'logit_bias' values must be numbers between -100 and 100 "
                              "(or false)");
    *out = (float)v->u.num.f;
    return 0;
}

/* An object key that is a token id: optional '-' then digits (else it is text). */
static int key_is_id(const char *k, size_t n) {
    size_t i = n > 0 && k[0] == '-';
    if (i == n) return 0;
    for (; i < n; i++)
        if (k[i] < '0' || k[i] > '9') return 0;
    return 1;
}

/* Entry i of a checked logit_bias: a token id (*id, text NULL) or a text. */
typedef struct bias_entry {
    int64_t id;
    const char *text;
    size_t n_text;
    const cpulm_json *value;
} bias_entry;

static int bias_at(const cpulm_json *lb, size_t i, bias_entry *b, cpulm_oai_error *e) {
    memset(b, 0, sizeof *b);
    const cpulm_json *it = &lb->u.list.items[i];
    if (lb->type == CPULM_JSON_OBJECT) {
        b->value = it;
        if (key_is_id(it->key, it->key_len)) {
            b->id = strtoll(it->key, NULL, 10); /* saturates: then out of range */
        } else {
            b->text = it->key;
            b->n_text = it->key_len;
        }
        return 0;
    }
    const cpulm_json *k = cpulm_json_at(it, 0);
    if (it->type != CPULM_JSON_ARRAY || it->u.list.n != 2 || !k ||
        !((k->type == CPULM_JSON_NUMBER && k->is_int) || k->type == CPULM_JSON_STRING))
        return cpulm_oai_fail(e, 400, "logit_bias",
                              "'logit_bias' must be an object {\"token id\": bias} or an "
                              "array of [token id or text, bias] pairs");
    b->value = cpulm_json_at(it, 1);
    if (k->type == CPULM_JSON_STRING) {
        b->text = k->u.str.s;
        b->n_text = k->u.str.len;
    } else {
        b->id = k->u.num.i;
    }
    return 0;
}

static int check_bias(const cpulm_json *root, cpulm_oai_request *r, cpulm_oai_error *e) {
    const cpulm_json *lb = field(root, "logit_bias");
    if (!lb) return 0;
    if (lb->type != CPULM_JSON_OBJECT && lb->type != CPULM_JSON_ARRAY)
        return cpulm_oai_fail(e, 400, "logit_bias",
                              "'logit_bias' must be an object {\"token id\": bias} or an "
                              "array of [token id or text, bias] pairs");
    for (size_t i = 0; i < lb->u.list.n; i++) {
        bias_entry b;
        float v;
        if (bias_at(lb, i, &b, e) < 0 || bias_value(b.value, &v, e) < 0) return -1;
    }
    r->logit_bias = lb->u.list.n ? lb : NULL;
    return 0;
}

int cpulm_oai_parse_fields(const cpulm_json *root, cpulm_oai_request *r, cpulm_oai_error *e) {
    if (refuse_unsupported(root, e) < 0) return -1;
    const cpulm_json *b = field(root, "best_of");
    if (b && b->u.num.i != r->n)
        return cpulm_oai_fail(e, 400, "best_of",
                              "'best_of' is not supported by this server (only equal to n)");
    if (parse_aliases(root, r, e) < 0 || parse_speculative(root, r, e) < 0) return -1;
    return check_bias(root, r, e);
}

/* Room for k more entries. */
static int reserve(cpulm_logit_bias **out, int32_t n, int32_t k, int32_t *cap, cpulm_oai_error *e) {
    if (n + k <= *cap) return 0;
    int32_t c = (n + k) * 2;
    cpulm_logit_bias *p = realloc(*out, sizeof *p * (size_t)c);
    if (!p) return cpulm_oai_fail(e, 500, NULL, "out of memory");
    *out = p;
    *cap = c;
    return 0;
}

/* Appends the tokens of text (no BOS, control tokens as text) with bias v. */
static int bias_text(const cpulm_model *m, const bias_entry *b, float v, cpulm_logit_bias **out,
                     int32_t *n, int32_t *cap, cpulm_oai_error *e) {
    int32_t room = (int32_t)b->n_text + 8, k = 0;
    cpulm_token *tok = malloc(sizeof *tok * (size_t)room);
    if (!tok || cpulm_tokenize(m, b->text, b->n_text, 0, 0, tok, room, &k) != CPULM_OK) {
        free(tok);
        return cpulm_oai_fail(e, 400, "logit_bias", "cannot tokenize a 'logit_bias' key");
    }
    int rc = reserve(out, *n, k, cap, e);
    for (int32_t i = 0; rc == 0 && i < k; i++)
        (*out)[(*n)++] = (cpulm_logit_bias){tok[i], v};
    free(tok);
    return rc;
}

int cpulm_oai_resolve_bias(const cpulm_oai_request *q, const cpulm_model *m, cpulm_logit_bias **out,
                           int32_t *n, cpulm_oai_error *e) {
    *out = NULL;
    *n = 0;
    const cpulm_json *lb = q->logit_bias;
    if (!lb) return 0;
    int32_t cap = (int32_t)lb->u.list.n, n_vocab = cpulm_vocab_n(m);
    *out = malloc(sizeof **out * (size_t)cap);
    if (!*out) return cpulm_oai_fail(e, 500, NULL, "out of memory");
    for (size_t i = 0; i < lb->u.list.n; i++) {
        bias_entry b;
        float v;
        int bad = bias_at(lb, i, &b, e) < 0 || bias_value(b.value, &v, e) < 0;
        if (!bad && b.text) bad = bias_text(m, &b, v, out, n, &cap, e) < 0;
        if (!bad && !b.text && (b.id < 0 || b.id >= n_vocab)) {
            cpulm_oai_error_set(e, 400, "logit_bias",
                                "'logit_bias': token id %lld is not in the vocabulary (0..%d)",
                                (long long)b.id, (int)n_vocab - 1);
            bad = 1;
        }
        if (!bad && !b.text) bad = reserve(out, *n, 1, &cap, e) < 0;
        if (bad) {
            free(*out);
            *out = NULL;
            *n = 0;
            return -1;
        }
        if (!b.text) (*out)[(*n)++] = (cpulm_logit_bias){(cpulm_token)b.id, v};
    }
    return 0;
}
