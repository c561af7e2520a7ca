/* embed.c: POST /v1/embeddings (`cpulm serve --embeddings`).
 *
 * The server keeps a second, embeddings-only context of the same model (made by the loader
 * thread, used only by the scheduler thread). A request goes through three stages, each
 * where it cannot hold up anyone else: a request worker (prep.h) parses the body and
 * tokenizes the inputs (checking for cancellation between inputs); the scheduler embeds
 * them in batches of whole inputs interleaved with its decode steps (cpulm_sched_embed, a
 * cancel stops it at the next batch); a request worker again L2-normalizes the vectors and
 * writes the response, which the I/O thread then sends.
 */
#define _GNU_SOURCE /* strdup */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/json.h"
#include "server/oai.h"
#include "server/server_int.h"

#define EMBD_MAX_INPUTS 2048 /* OpenAI's limit on the inputs of one request */

#define EMBD_HEAVY_FLOATS (1 << 16) /* a response this large is written in the heavy lane */

typedef struct embd_inputs {
    cpulm_token **tok;
    int32_t *n_tok;
    int32_t n;
} embd_inputs;

typedef struct embed_job {
    cpulm_prep_job base;
    const cpulm_server *s; /* read-only fields only (fixed once the model is loaded) */
    char *body;            /* the request (copied); freed once parsed */
    size_t n_body;
    int base64;
    int api;     /* CPULM_API_OPENAI, _OLLAMA or _LLAMA (/embedding): the answer's shape */
    int norm;    /* llama-server's embd_normalize: -1 none, 0 max-abs, 1 taxicab, 2 L2 (the
                  * default), p > 2 p-norm */
    char *model; /* Ollama: the model name the request gave (echoed); owned, or NULL */
    double t0;   /* arrival, for Ollama's total_duration */
    embd_inputs in;
    /* rerank (api CPULM_API_RERANK): the documents (owned copies, for return_text), how
     * many results to give, and the request's shape (TEI's "texts" or Jina's "documents") */
    char **docs;
    int32_t top_n;
    int return_text, tei;
    float *vec; /* [in.n * E]: the scheduler's output */
    int32_t E;
    cpulm_sched_embed se; /* the request as the scheduler sees it */
    int status;           /* 0: ready to embed; else the HTTP status of out */
    cpulm_buf out;        /* the response body, or an OpenAI error */
} embed_job;

cpulm_status cpulm_embed_open(cpulm_server *s, cpulm_error *err) {
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    int32_t n = s->p.sched.n_ctx > 0 ? s->p.sched.n_ctx : 2048; /* longest input */
    cpulm_model_info mi;
    cpulm_model_get_info(s->model, &mi);
    if (cpulm_model_is_encoder(s->model) && n > mi.n_ctx_train) n = mi.n_ctx_train;
    cp.n_ctx = n;
    cp.n_batch = n;
    cp.n_seq_max = 16;
    cp.n_outputs_max = n;
    cp.n_threads = s->p.sched.n_threads;
    cp.no_pin = s->p.sched.no_pin;
    cp.embeddings = CPULM_EMBD_ONLY;
    cp.pooling = s->p.rerank ? CPULM_POOLING_RANK : s->p.pooling;
    s->embd_ctx = cpulm_ctx_new(s->model, &cp, err);
    return s->embd_ctx ? CPULM_OK : err->code;
}

/* ---- request ---- */

static void inputs_free(embd_inputs *in) {
    for (int32_t i = 0; in->tok && i < in->n; i++)
        free(in->tok[i]);
    free(in->tok);
    free(in->n_tok);
}

/* Input i as tokens: a string (tokenized with BOS, as `cpulm embed`) or an array of ids. */
static int input_tokens(embed_job *j, const cpulm_json *v, int32_t i, embd_inputs *in,
                        cpulm_oai_error *e) {
    const cpulm_server *s = j->s;
    const cpulm_model *m = s->model;
    if (v->type == CPULM_JSON_STRING) {
        if (!v->u.str.len) return cpulm_oai_fail(e, 400, "input", "input %d is empty", i);
        int32_t cap = (int32_t)v->u.str.len + 16, n = 0;
        if (!(in->tok[i] = malloc(sizeof(cpulm_token) * (size_t)cap)))
            return cpulm_oai_fail(e, 500, NULL, "out of memory");
        cpulm_status st = cpulm_tokenize_cancellable(m, v->u.str.s, v->u.str.len, 1, 0, in->tok[i],
                                                     cap, &n, cpulm_prep_stopped_cb, &j->base);
        if (st == CPULM_ERR_CANCELLED) /* sent only when out of time */
            return cpulm_oai_fail(e, 504, NULL, "the request took longer than %.0f s to prepare",
                                  CPULM_SERVER_PREP_LIMIT_S);
        if (st != CPULM_OK)
            return cpulm_oai_fail(e, 400, "input", "input %d: cannot tokenize: %s", i,
                                  cpulm_status_str(st));
        in->n_tok[i] = n;
    } else {
        size_t n = cpulm_json_len(v);
        if (!(in->tok[i] = malloc(sizeof(cpulm_token) * (n ? n : 1))))
            return cpulm_oai_fail(e, 500, NULL, "out of memory");
        for (size_t k = 0; k < n; k++) {
            const cpulm_json *x = cpulm_json_at(v, k);
            if (x->type != CPULM_JSON_NUMBER || !x->is_int || x->u.num.i < 0 ||
                x->u.num.i >= cpulm_vocab_n(m))
                return cpulm_oai_fail(e, 400, "input",
                                      "input %d: token %zu is not a valid "
                                      "token id",
                                      i, k);
            in->tok[i][k] = (cpulm_token)x->u.num.i;
        }
        in->n_tok[i] = (int32_t)n;
    }
    if (in->n_tok[i] < 1) return cpulm_oai_fail(e, 400, "input", "input %d is empty", i);
    if (in->n_tok[i] > cpulm_ctx_n_ctx(s->embd_ctx))
        return cpulm_oai_fail(e, 400, "input", "input %d has %d tokens; at most %d fit", i,
                              in->n_tok[i], cpulm_ctx_n_ctx(s->embd_ctx));
    return 0;
}

static int is_token_array(const cpulm_json *v) {
    return v->type == CPULM_JSON_ARRAY &&
           (cpulm_json_len(v) == 0 || cpulm_json_at(v, 0)->type == CPULM_JSON_NUMBER);
}

/* `input`: a string, an array of strings, an array of token ids, or an array of such arrays. */
static int read_inputs(embed_job *j, const cpulm_json *input, embd_inputs *in, cpulm_oai_error *e) {
    if (!input || (input->type != CPULM_JSON_STRING && input->type != CPULM_JSON_ARRAY))
        return cpulm_oai_fail(e, 400, "input",
                              "'input' must be a string, an array of "
                              "strings, or token ids");
    int single = input->type == CPULM_JSON_STRING || is_token_array(input);
    size_t n = single ? 1 : cpulm_json_len(input);
    if (n < 1 || n > EMBD_MAX_INPUTS)
        return cpulm_oai_fail(e, 400, "input", "'input' must hold 1 to %d inputs", EMBD_MAX_INPUTS);
    in->tok = calloc(n, sizeof *in->tok);
    in->n_tok = calloc(n, sizeof *in->n_tok);
    in->n = (int32_t)n;
    if (!in->tok || !in->n_tok) return cpulm_oai_fail(e, 500, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const cpulm_json *v = single ? input : cpulm_json_at(input, i);
        if (v->type != CPULM_JSON_STRING && !is_token_array(v))
            return cpulm_oai_fail(e, 400, "input",
                                  "input %zu must be a string or an "
                                  "array of token ids",
                                  i);
        if (cpulm_prep_stopped(&j->base)) /* cancelled, or out of time (then e is sent) */
            return cpulm_oai_fail(e, 504, NULL, "the request took longer than %.0f s to prepare",
                                  CPULM_SERVER_PREP_LIMIT_S);
        if (input_tokens(j, v, (int32_t)i, in, e) < 0) return -1;
    }
    return 0;
}

/* ---- rerank ---- */

/* The pair (query, document i) as the reranker's tokens (cpulm_rerank_tokens). */
static int pair_tokens(embed_job *j, const char *q, size_t ql, const cpulm_json *d, int32_t i,
                       cpulm_oai_error *e) {
    const cpulm_model *m = j->s->model;
    embd_inputs *in = &j->in;
    int32_t n = 0;
    cpulm_status st = cpulm_rerank_tokens(m, q, ql, d->u.str.s, d->u.str.len, NULL, 0, &n);
    if (st == CPULM_ERR_TOO_SMALL && (in->tok[i] = malloc(sizeof(cpulm_token) * (size_t)n)))
        st = cpulm_rerank_tokens(m, q, ql, d->u.str.s, d->u.str.len, in->tok[i], n, &n);
    if (!(j->docs[i] = malloc(d->u.str.len + 1)) || st == CPULM_ERR_NOMEM ||
        (st == CPULM_ERR_TOO_SMALL && !in->tok[i]))
        return cpulm_oai_fail(e, 500, NULL, "out of memory");
    memcpy(j->docs[i], d->u.str.s, d->u.str.len);
    j->docs[i][d->u.str.len] = 0;
    if (st != CPULM_OK || n < 1)
        return cpulm_oai_fail(e, 400, "documents", "document %d: cannot tokenize: %s", i,
                              cpulm_status_str(st));
    in->n_tok[i] = n;
    if (n > cpulm_ctx_n_ctx(j->s->embd_ctx))
        return cpulm_oai_fail(e, 400, "documents",
                              "document %d with the query has %d tokens; at most %d fit", i, n,
                              cpulm_ctx_n_ctx(j->s->embd_ctx));
    return 0;
}

/* llama-server's /rerank body: "query", "documents" (or TEI's "texts"), "top_n" (default
 * all), "return_text". Returns 0, or -1 with e set. */
static int rerank_read(embed_job *j, const cpulm_json *root, cpulm_oai_error *e) {
    const cpulm_json *q = cpulm_json_get(root, "query"), *docs = cpulm_json_get(root, "documents");
    const cpulm_json *top = cpulm_json_get(root, "top_n"),
                     *rt = cpulm_json_get(root, "return_text");
    if (!docs && (docs = cpulm_json_get(root, "texts"))) j->tei = 1;
    if (!q || q->type != CPULM_JSON_STRING)
        return cpulm_oai_fail(e, 400, "query", "\"query\" must be a string");
    const size_t n = docs && docs->type == CPULM_JSON_ARRAY ? cpulm_json_len(docs) : 0;
    if (n < 1 || n > EMBD_MAX_INPUTS)
        return cpulm_oai_fail(e, 400, "documents",
                              "\"documents\" must be a non-empty string array (at most %d)",
                              EMBD_MAX_INPUTS);
    j->top_n = (int32_t)n;
    if (top && top->type != CPULM_JSON_NULL) {
        if (top->type != CPULM_JSON_NUMBER || !top->is_int || top->u.num.i < 0)
            return cpulm_oai_fail(e, 400, "top_n", "\"top_n\" must be an integer >= 0");
        if (top->u.num.i < (int64_t)n) j->top_n = (int32_t)top->u.num.i;
    }
    j->return_text = rt && rt->type == CPULM_JSON_BOOL && cpulm_json_bool(rt, 0);
    j->in.tok = calloc(n, sizeof *j->in.tok);
    j->in.n_tok = calloc(n, sizeof *j->in.n_tok);
    j->docs = calloc(n, sizeof *j->docs);
    j->in.n = (int32_t)n;
    if (!j->in.tok || !j->in.n_tok || !j->docs)
        return cpulm_oai_fail(e, 500, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const cpulm_json *d = cpulm_json_at(docs, i);
        if (d->type != CPULM_JSON_STRING)
            return cpulm_oai_fail(e, 400, "documents", "document %zu must be a string", i);
        if (cpulm_prep_stopped(&j->base))
            return cpulm_oai_fail(e, 504, NULL, "the request took longer than %.0f s to prepare",
                                  CPULM_SERVER_PREP_LIMIT_S);
        if (pair_tokens(j, q->u.str.s, q->u.str.len, d, (int32_t)i, e) < 0) return -1;
    }
    return 0;
}

/* The results, best first (a stable order for equal scores: the lower index). */
static int32_t *rank_order(const float *vec, int32_t n, int32_t E) {
    int32_t *ix = malloc(sizeof *ix * (size_t)(n ? n : 1));
    for (int32_t i = 0; ix && i < n; i++) { /* insertion sort: n is small, ties stay put */
        int32_t k = i;
        for (; k > 0 && vec[(size_t)ix[k - 1] * E] < vec[(size_t)i * E]; k--)
            ix[k] = ix[k - 1];
        ix[k] = i;
    }
    return ix;
}

/* Jina's / Cohere's {"model", "object", "usage", "results": [{"index", "relevance_score"
 * (, "document": {"text"})}]}, or TEI's [{"index", "score" (, "text")}] for a request that
 * sent "texts", as llama-server answers. */
/* "usage": {"prompt_tokens": n, "total_tokens": n} (an embedding generates nothing). */
static void write_usage(cpulm_json_writer *w, int64_t n_tokens) {
    cpulm_json_kv_obj_begin(w, "usage");
    cpulm_json_kv_int(w, "prompt_tokens", n_tokens);
    cpulm_json_kv_int(w, "total_tokens", n_tokens);
    cpulm_json_obj_end(w);
}

static int write_rerank(embed_job *j, int64_t n_tokens, cpulm_buf *o) {
    int32_t *ix = rank_order(j->vec, j->in.n, j->E);
    if (!ix) return -1;
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, o, 0, 0);
    if (!j->tei) {
        cpulm_json_obj_begin(&w);
        cpulm_json_kv_str(&w, "model", j->s->alias);
        cpulm_json_kv_str(&w, "object", "list");
        write_usage(&w, n_tokens);
        cpulm_json_key(&w, "results");
    }
    cpulm_json_arr_begin(&w);
    for (int32_t r = 0; r < j->top_n; r++) {
        const int32_t i = ix[r];
        cpulm_json_obj_begin(&w);
        cpulm_json_kv_int(&w, "index", i);
        cpulm_json_key(&w, j->tei ? "score" : "relevance_score");
        char num[32];
        int k = snprintf(num, sizeof num, "%.9g", (double)j->vec[(size_t)i * j->E]);
        cpulm_json_write_raw(&w, num, (size_t)k);
        if (j->return_text) {
            cpulm_json_key(&w, j->tei ? "text" : "document");
            if (!j->tei) { /* Jina's and Cohere's shape: {"text": ...} */
                cpulm_json_obj_begin(&w);
                cpulm_json_key(&w, "text");
            }
            cpulm_json_write_str(&w, j->docs[i]);
            if (!j->tei) cpulm_json_obj_end(&w);
        }
        cpulm_json_obj_end(&w);
    }
    cpulm_json_arr_end(&w);
    if (!j->tei) cpulm_json_obj_end(&w);
    free(ix);
    return 0;
}

/* ---- response ---- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Byte i of v as little-endian float32 (what the openai clients decode). */
static unsigned le_byte(const float *v, size_t i) {
    uint32_t u;
    memcpy(&u, &v[i / 4], 4);
    return (u >> (8 * (i % 4))) & 0xFF;
}

/* v's little-endian float32 bytes in base64, as a JSON string. */
static void write_base64(cpulm_buf *o, const float *v, int32_t n) {
    size_t nb = (size_t)n * 4;
    cpulm_buf_putc(o, '"');
    for (size_t i = 0; i < nb; i += 3) {
        uint32_t x = le_byte(v, i) << 16 | (i + 1 < nb ? le_byte(v, i + 1) << 8 : 0) |
                     (i + 2 < nb ? le_byte(v, i + 2) : 0);
        char q[4] = {b64[x >> 18], b64[(x >> 12) & 63], i + 1 < nb ? b64[(x >> 6) & 63] : '=',
                     i + 2 < nb ? b64[x & 63] : '='};
        cpulm_buf_append(o, q, 4);
    }
    cpulm_buf_putc(o, '"');
}

/* One vector as a JSON array (%.9g: every float32 round-trips). */
static void write_vector(cpulm_json_writer *w, const float *v, int32_t E) {
    char num[32];
    cpulm_json_arr_begin(w);
    for (int32_t d = 0; d < E; d++) {
        int k = snprintf(num, sizeof num, "%.9g", (double)v[d]);
        cpulm_json_write_raw(w, num, (size_t)k);
    }
    cpulm_json_arr_end(w);
}

/* Ollama's /api/embed answer: {"model", "embeddings": [[...]], durations, counts}.
 * Returns 0, or -1 when the job was cancelled midway. */
static int write_ollama(embed_job *j, const float *vec, int32_t n, int32_t E, int64_t n_tokens,
                        cpulm_buf *o) {
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, o, 0, 0);
    cpulm_json_obj_begin(&w);
    /* the name asked for, as Ollama answers */
    cpulm_json_kv_str(&w, "model", j->model ? j->model : j->s->alias);
    cpulm_json_kv_arr_begin(&w, "embeddings");
    for (int32_t i = 0; i < n; i++) {
        if (i % 64 == 63 && cpulm_prep_stopped(&j->base)) return -1;
        write_vector(&w, vec + (size_t)i * (size_t)E, E);
    }
    cpulm_json_arr_end(&w);
    cpulm_json_kv_int(&w, "total_duration", (int64_t)((cpulm_clock_s() - j->t0) * 1e9));
    cpulm_json_kv_int(&w, "load_duration", 0);
    cpulm_json_kv_int(&w, "prompt_eval_count", n_tokens);
    cpulm_json_obj_end(&w);
    return 0;
}

/* llama-server's /embedding answer: [{"index", "embedding": [[...]]}] (one pooled vector
 * per input, in the list its pooling-none answer would fill with one per token). */
static int write_llama(embed_job *j, const float *vec, int32_t n, int32_t E, cpulm_buf *o) {
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, o, 0, 0);
    cpulm_json_arr_begin(&w);
    for (int32_t i = 0; i < n; i++) {
        if (i % 64 == 63 && cpulm_prep_stopped(&j->base)) return -1;
        cpulm_json_obj_begin(&w);
        cpulm_json_kv_int(&w, "index", i);
        cpulm_json_kv_arr_begin(&w, "embedding");
        write_vector(&w, vec + (size_t)i * (size_t)E, E);
        cpulm_json_arr_end(&w);
        cpulm_json_obj_end(&w);
    }
    cpulm_json_arr_end(&w);
    return 0;
}

/* v scaled as embd_normalize asks (see embed_job.norm); a zero vector stays zero. */
static void normalize(float *v, int32_t n, int norm) {
    if (norm == 2) {
        cpulm_embd_normalize(v, n);
        return;
    }
    if (norm < 0) return;
    double sum = 0;
    for (int32_t i = 0; i < n; i++) {
        double a = v[i] < 0 ? -v[i] : v[i];
        if (norm == 0)
            sum = a > sum ? a : sum;
        else
            sum += norm == 1 ? a : pow(a, norm);
    }
    double scale = norm == 0 ? sum / 32760.0 : norm == 1 ? sum : pow(sum, 1.0 / norm);
    for (int32_t i = 0; scale > 0 && i < n; i++)
        v[i] = (float)(v[i] / scale);
}

/* Returns 0, or -1 when the job was cancelled midway (o is then incomplete). */
static int write_response(embed_job *j, const float *vec, int32_t n, int32_t E, int base64,
                          int64_t n_tokens, cpulm_buf *o) {
    const cpulm_server *s = j->s;
    if (j->api == CPULM_API_RERANK) return write_rerank(j, n_tokens, o);
    if (j->api == CPULM_API_OLLAMA) return write_ollama(j, vec, n, E, n_tokens, o);
    if (j->api == CPULM_API_LLAMA) return write_llama(j, vec, n, E, o);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, o, 0, 0);
    cpulm_json_obj_begin(&w);
    cpulm_json_kv_str(&w, "object", "list");
    cpulm_json_kv_arr_begin(&w, "data");
    for (int32_t i = 0; i < n; i++) {
        if (i % 64 == 63 && cpulm_prep_stopped(&j->base)) return -1;
        const float *v = vec + (size_t)i * (size_t)E;
        cpulm_json_obj_begin(&w);
        cpulm_json_kv_str(&w, "object", "embedding");
        cpulm_json_kv_int(&w, "index", i);
        cpulm_json_key(&w, "embedding");
        if (base64) {
            cpulm_buf t;
            cpulm_buf_init(&t, 0);
            write_base64(&t, v, E);
            cpulm_json_write_raw(&w, t.data, t.len);
            cpulm_buf_release(&t);
        } else {
            write_vector(&w, v, E);
        }
        cpulm_json_obj_end(&w);
    }
    cpulm_json_arr_end(&w);
    cpulm_json_kv_str(&w, "model", s->alias);
    write_usage(&w, n_tokens);
    cpulm_json_obj_end(&w);
    return 0;
}

/* encoding_format: "float" (default) or "base64". Returns 0/1, or -1 with e set. */
static int read_format(const cpulm_json *root, cpulm_oai_error *e) {
    const cpulm_json *f = cpulm_json_get(root, "encoding_format");
    if (!f || f->type == CPULM_JSON_NULL) return 0;
    const char *v = cpulm_json_str(f);
    if (v && strcmp(v, "float") == 0) return 0;
    if (v && strcmp(v, "base64") == 0) return 1;
    return cpulm_oai_fail(e, 400, "encoding_format",
                          "'encoding_format' must be \"float\" "
                          "or \"base64\"");
}

/* llama-server: embd_normalize, an integer >= -1 (default 2). Returns 0, or -1 with e set. */
static int read_norm(embed_job *j, const cpulm_json *root, cpulm_oai_error *e) {
    const cpulm_json *v = cpulm_json_get(root, "embd_normalize");
    j->norm = 2;
    if (!v || v->type == CPULM_JSON_NULL) return 0;
    if (v->type != CPULM_JSON_NUMBER || !v->is_int || v->u.num.i < -1 || v->u.num.i > 64)
        return cpulm_oai_fail(e, 400, "embd_normalize",
                              "'embd_normalize' must be an integer from -1 to 64");
    j->norm = (int)v->u.num.i;
    return 0;
}

/* The inputs: OpenAI's and Ollama's "input"; llama-server's "content" (or "input"). */
static const cpulm_json *input_field(const embed_job *j, const cpulm_json *root) {
    const cpulm_json *c = j->api == CPULM_API_LLAMA ? cpulm_json_get(root, "content") : NULL;
    return c ? c : cpulm_json_get(root, "input");
}

/* Ollama: the "model" the request names, echoed in the answer. Returns 0, or -1 with e set
 * when out of memory. */
static int keep_model(embed_job *j, const cpulm_json *root, cpulm_oai_error *e) {
    const char *m = cpulm_json_str(cpulm_json_get(root, "model"));
    if (!m) return 0;
    if (!(j->model = strdup(m))) return cpulm_oai_fail(e, 500, NULL, "out of memory");
    return 0;
}

/* Stage 1 (a request worker): parses the body and tokenizes the inputs into j. Returns 0
 * when they are ready to embed, else -1 with e set. */
static int embed_parse(embed_job *j, cpulm_oai_error *e) {
    const cpulm_server *s = j->s;
    if (cpulm_ctx_pooling(s->embd_ctx) == CPULM_POOLING_NONE)
        return cpulm_oai_fail(e, 400, NULL,
                              "the server's pooling is none: per-token embeddings are not "
                              "served (start it with --pooling mean|last|cls)");
    cpulm_json_limits lim = cpulm_json_default_limits();
    lim.max_bytes = s->p.max_body;
    lim.max_depth = 64;
    cpulm_json_doc *doc = NULL;
    cpulm_error jerr;
    if (cpulm_json_parse(j->body, j->n_body, &lim, &doc, NULL, &jerr) != CPULM_OK)
        return cpulm_oai_fail(e, 400, NULL, "invalid JSON body: %s", jerr.msg);
    const cpulm_json *root = cpulm_json_root(doc);
    const cpulm_json *dim =
        root->type == CPULM_JSON_OBJECT ? cpulm_json_get(root, "dimensions") : NULL;
    int rc = 0;
    j->E = cpulm_ctx_n_embd(s->embd_ctx);
    if (root->type != CPULM_JSON_OBJECT)
        rc = cpulm_oai_fail(e, 400, NULL, "the request body must be a JSON object");
    else if ((j->api == CPULM_API_OLLAMA && keep_model(j, root, e) < 0) ||
             (j->api == CPULM_API_OPENAI && (j->base64 = read_format(root, e)) < 0) ||
             (j->api == CPULM_API_LLAMA && read_norm(j, root, e) < 0) ||
             (j->api == CPULM_API_RERANK && rerank_read(j, root, e) < 0) ||
             (j->api != CPULM_API_RERANK && read_inputs(j, input_field(j, root), &j->in, e) < 0))
        rc = -1;
    else if (dim && dim->type != CPULM_JSON_NULL)
        rc = cpulm_oai_fail(e, 400, "dimensions", "'dimensions' is not supported");
    else if (!(j->vec = malloc(sizeof(float) * (size_t)j->E * (size_t)j->in.n)))
        rc = cpulm_oai_fail(e, 500, NULL, "out of memory");
    cpulm_json_free(doc);
    return rc;
}

/* Stage 3 (a request worker): the scheduler embedded the inputs, or could not. Returns 0
 * with the response in j->out, or -1 with e set. */
static int embed_write(embed_job *j, cpulm_oai_error *e) {
    cpulm_status st = j->se.status;
    if (j->se.timed_out) return cpulm_oai_fail(e, 504, NULL, "request timed out");
    if (st == CPULM_ERR_CANCELLED) return cpulm_oai_fail(e, 503, NULL, "the request was cancelled");
    if (st != CPULM_OK)
        return cpulm_oai_fail(e, cpulm_oai_http_status(st), "input", "cannot embed the input: %s",
                              cpulm_status_str(st));
    int64_t n_tokens = 0;
    for (int32_t i = 0; i < j->in.n; i++) {
        if (j->api != CPULM_API_RERANK) /* a rank score is a number, not a vector */
            normalize(j->vec + (size_t)i * (size_t)j->E, j->E,
                      j->api == CPULM_API_LLAMA ? j->norm : 2);
        n_tokens += j->in.n_tok[i];
    }
    if (write_response(j, j->vec, j->in.n, j->E, j->base64, n_tokens, &j->out) < 0)
        return cpulm_oai_fail(e, 503, NULL, "the request was cancelled");
    if (cpulm_buf_status(&j->out) != CPULM_OK) return cpulm_oai_fail(e, 500, NULL, "out of memory");
    return 0;
}

/* ---- the job ---- */

static void embed_finish(cpulm_prep_job *base) {
    embed_job *j = (embed_job *)base;
    cpulm_oai_error e;
    int rc = embed_write(j, &e);
    j->status = rc == 0 ? 200 : e.status;
    if (rc != 0) {
        cpulm_buf_reset(&j->out);
        cpulm_api_write_error(j->api, &j->out, &e);
    }
}

static void embed_run(cpulm_prep_job *base) {
    embed_job *j = (embed_job *)base;
    cpulm_oai_error e;
    int rc = embed_parse(j, &e);
    j->status = rc == 0 ? 0 : e.status;
    if (rc != 0) cpulm_api_write_error(j->api, &j->out, &e);
    free(j->body);
    j->body = NULL;
}

static void embed_destroy(cpulm_prep_job *base) {
    embed_job *j = (embed_job *)base;
    free(j->body);
    free(j->model);
    for (int32_t i = 0; j->docs && i < j->in.n; i++)
        free(j->docs[i]);
    free(j->docs);
    inputs_free(&j->in);
    free(j->vec);
    cpulm_buf_release(&j->out);
    free(j);
}

static void embed_sched_destroy(cpulm_sched_embed *se) {
    embed_destroy((cpulm_prep_job *)((char *)se - offsetof(embed_job, se)));
}

cpulm_prep_job *cpulm_embed_job_new(const cpulm_server *s, const char *body, size_t n, uint64_t id,
                                    int api) {
    embed_job *j = calloc(1, sizeof *j);
    char *copy = j ? malloc(n ? n : 1) : NULL;
    if (!copy) {
        free(j);
        return NULL;
    }
    memcpy(copy, body, n);
    j->base.id = id;
    j->base.run = embed_run;
    j->base.destroy = embed_destroy;
    j->base.heavy = n > CPULM_SERVER_LIGHT_BODY;
    j->s = s;
    j->api = api;
    j->t0 = cpulm_clock_s();
    j->body = copy;
    j->n_body = n;
    cpulm_buf_init(&j->out, 0);
    return &j->base;
}

int cpulm_embed_job_is(const cpulm_prep_job *j) {
    return j->run == embed_run || j->run == embed_finish;
}

cpulm_sched_embed *cpulm_embed_job_ready(cpulm_prep_job *base) {
    embed_job *j = (embed_job *)base;
    if (j->base.run != embed_run || j->status != 0) return NULL;
    j->se = (cpulm_sched_embed){.id = j->base.id,
                                .n = j->in.n,
                                .tok = (const cpulm_token *const *)j->in.tok,
                                .n_tok = j->in.n_tok,
                                .out = j->vec,
                                .destroy = embed_sched_destroy,
                                .timeout_s = j->s->p.timeout_s};
    return &j->se;
}

cpulm_prep_job *cpulm_embed_job_embedded(cpulm_sched_embed *se) {
    embed_job *j = (embed_job *)((char *)se - offsetof(embed_job, se));
    j->base.run = embed_finish;
    j->base.heavy = (int64_t)j->in.n * j->E > EMBD_HEAVY_FLOATS;
    return &j->base;
}

int cpulm_embed_job_result(const cpulm_prep_job *base, const char **body, size_t *n) {
    const embed_job *j = (const embed_job *)base;
    *body = j->out.data ? j->out.data : "";
    *n = j->out.len;
    return j->status;
}
