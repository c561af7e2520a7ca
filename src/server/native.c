/* native.c: llama-server's native API beside the OpenAI one, and the route table of every
 * path that is neither OpenAI's nor a probe (Ollama's /api/... handlers are in ollama.c).
 *
 * Routes: POST /completion (llama-server's shapes: SSE `data: {"content", "stop": false}`
 * events, then one with `"stop": true` and the statistics), /tokenize, /detokenize,
 * /apply-template, GET /props, /v1/health, /models and /v1/models/{id}, and the OpenAI
 * routes without /v1 (/chat/completions, /completions), as llama-server serves them.
 *
 * A /completion request is the legacy-completions request with llama-server's defaults
 * (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat_last_n 64) added for the
 * fields it lacks, then parsed by cpulm_oai_parse: one validator, the same 400s naming
 * fields. Work proportional to a body (tokenizing, rendering a chat) runs on the request
 * worker as a native job, never on the I/O thread.
 */
#define _GNU_SOURCE
#include "server/native.h"

#include "base/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpulm.h"

/* ---- small shared pieces ---- */

void cpulm_api_rfc3339(char out[40]) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char day[24];
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, 40, "%s.%09ldZ", day, (long)ts.tv_nsec);
}

static void finish(cpulm_server *s, cpulm_conn *c) {
    c->done = 1;
    cpulm_server_output(s, c);
}

static void respond_json(cpulm_server *s, cpulm_conn *c, int status, const cpulm_buf *b) {
    cpulm_conn_respond(c, status, "application/json", b->data, b->len, NULL);
    finish(s, c);
}

static void respond_error(cpulm_server *s, cpulm_conn *c, const cpulm_oai_error *e,
                          const char *extra) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_api_write_error(c->api, &b, e);
    cpulm_conn_respond(c, e->status, "application/json", b.data, b.len, extra);
    cpulm_buf_release(&b);
    finish(s, c);
}

void cpulm_api_write_error(int api, cpulm_buf *out, const cpulm_oai_error *e) {
    cpulm_json_writer w;
    if (api == CPULM_API_OPENAI) {
        cpulm_oai_write_error(out, e);
        return;
    }
    if (api == CPULM_API_OLLAMA && e->status == 200) { /* not an error: a load request */
        cpulm_ollama_write_load(out, e);
        return;
    }
    cpulm_json_writer_init(&w, out, 0, 0);
    cpulm_json_obj_begin(&w);
    cpulm_json_key(&w, "error");
    if (api == CPULM_API_OLLAMA) { /* {"error": "message"} */
        cpulm_json_write_str(&w, e->message);
    } else { /* llama-server: {"error": {"code", "message", "type"}} */
        cpulm_json_obj_begin(&w);
        cpulm_json_kv_int(&w, "code", e->status);
        cpulm_json_kv_str(&w, "message", e->message);
        cpulm_json_key(&w, "type");
        cpulm_json_write_str(&w, e->status == 503   ? "unavailable_error"
                                 : e->status == 404 ? "not_found_error"
                                 : e->status >= 500 ? "server_error"
                                                    : "invalid_request_error");
        cpulm_json_obj_end(&w);
    }
    cpulm_json_obj_end(&w);
}

void cpulm_api_write_stream_error(int api, cpulm_buf *out, const cpulm_oai_error *e) {
    if (api == CPULM_API_OLLAMA) { /* one more NDJSON line */
        cpulm_api_write_error(api, out, e);
        cpulm_buf_putc(out, '\n');
        return;
    }
    cpulm_buf_puts(out, "data: ");
    cpulm_api_write_error(api, out, e);
    cpulm_buf_puts(out, "\n\n");
}

void cpulm_api_event_send(cpulm_conn *c, int api, const cpulm_sched_event *e, cpulm_buf *b) {
    if (e->kind == CPULM_SCHED_EV_ERROR) {
        cpulm_oai_error err;
        cpulm_oai_error_set(&err, e->error_status, NULL, "%s", e->error);
        if (c->sse) {
            cpulm_api_write_stream_error(api, b, &err);
        } else { /* nothing was sent yet: an error response */
            cpulm_api_write_error(api, b, &err);
            cpulm_conn_respond(c, err.status, "application/json", b->data, b->len, NULL);
            b->len = 0;
        }
    }
    if (c->sse && b->len) cpulm_conn_sse_frame(c, b->data, b->len);
    if (c->sse && (e->kind == CPULM_SCHED_EV_DONE || e->kind == CPULM_SCHED_EV_ERROR))
        cpulm_conn_sse_end(c);
}

/* ---- /completion: the request ---- */

/* /infill's own fields, replaced by the prompt it builds. */
static int infill_field(const cpulm_json *m) {
    static const char *const keys[] = {"input_prefix", "input_suffix", "input_extra", "prompt"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        if (m->key_len == strlen(keys[k]) && !memcmp(m->key, keys[k], m->key_len)) return 1;
    return 0;
}

/* root with llama-server's defaults for the sampling fields it lacks; with prompt (JSON
 * token ids: /infill's), that prompt instead of /infill's fields. */
static void rewrite_completion(const cpulm_json *root, const cpulm_buf *prompt, cpulm_buf *out) {
    static const struct {
        const char *key;
        double v;
    } defaults[] = {{"temperature", 0.8},
                    {"top_k", 40},
                    {"top_p", 0.95},
                    {"min_p", 0.05},
                    {"repeat_last_n", 64}};
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, out, 0, 0);
    cpulm_json_obj_begin(&w);
    for (size_t i = 0; i < root->u.list.n; i++) {
        const cpulm_json *m = &root->u.list.items[i];
        if (prompt && infill_field(m)) continue;
        cpulm_json_keyn(&w, m->key, m->key_len);
        cpulm_json_write_value(&w, m);
    }
    if (prompt) {
        cpulm_json_key(&w, "prompt");
        cpulm_json_write_raw(&w, prompt->data, prompt->len);
    }
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
        if (cpulm_json_get(root, defaults[i].key)) continue;
        cpulm_json_kv_double(&w, defaults[i].key, defaults[i].v);
    }
    cpulm_json_obj_end(&w);
}

cpulm_status cpulm_api_parse(int flavor, const cpulm_model *model, const char *body, size_t n,
                             size_t max_body, cpulm_oai_request *q, cpulm_oai_error *e) {
    cpulm_json_limits lim = cpulm_json_default_limits();
    lim.max_bytes = max_body;
    lim.max_depth = 64;
    cpulm_json_doc *doc = NULL;
    cpulm_error jerr;
    memset(q, 0, sizeof *q);
    if (cpulm_json_parse(body, n, &lim, &doc, NULL, &jerr) != CPULM_OK) {
        cpulm_oai_error_set(e, 400, NULL, "invalid JSON body: %s", jerr.msg);
        return CPULM_ERR_FORMAT;
    }
    const cpulm_json *root = cpulm_json_root(doc);
    cpulm_buf b;
    cpulm_buf_init(&b, n + 256);
    cpulm_oai_kind kind = CPULM_OAI_COMPLETION;
    int bad = root->type != CPULM_JSON_OBJECT;
    if (bad) cpulm_oai_error_set(e, 400, NULL, "the request body must be a JSON object");
    cpulm_buf ids;
    cpulm_buf_init(&ids, 0);
    if (!bad && flavor == CPULM_GEN_INFILL) bad = cpulm_infill_prompt(model, root, &ids, e) < 0;
    if (!bad && (flavor == CPULM_GEN_LLAMA || flavor == CPULM_GEN_INFILL))
        rewrite_completion(root, flavor == CPULM_GEN_INFILL ? &ids : NULL, &b);
    else if (!bad)
        bad = cpulm_ollama_rewrite(flavor, root, &b, &kind, e) < 0;
    cpulm_buf_release(&ids);
    cpulm_json_free(doc);
    cpulm_status st = CPULM_ERR_INVALID_ARG;
    if (!bad) st = cpulm_oai_parse(kind, b.data, b.len, max_body * 2 + 4096, q, e);
    cpulm_buf_release(&b);
    if (st == CPULM_OK && q->n != 1) {
        cpulm_oai_error_set(e, 400, "n", "this endpoint gives one completion per request");
        cpulm_oai_request_release(q);
        st = CPULM_ERR_INVALID_ARG;
    }
    return st;
}

/* ---- answer state ---- */

void *cpulm_api_state_new(int flavor, const cpulm_server *s, const cpulm_oai_request *q,
                          const cpulm_sched_req *r, int think) {
    cpulm_api_state *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->flavor = flavor == CPULM_GEN_INFILL ? CPULM_GEN_LLAMA : flavor; /* /completion's answer */
    st->s = s;
    st->stream = q->stream;
    st->n_prompt = r->n_prompt;
    st->t_start = cpulm_clock_s();
    st->finish = -1;
    cpulm_buf_init(&st->text, 0);
    cpulm_buf_init(&st->reasoning, 0);
    cpulm_buf_init(&st->stops, 0);
    st->split_harmony = think >= CPULM_THINK_HARMONY;
    st->split_think = think != 0 && !st->split_harmony;
    if (st->split_harmony) cpulm_harmony_init_at(&st->harmony, think - CPULM_THINK_HARMONY);
    if (st->split_think) cpulm_chat_think_init(&st->think, think == 2);
    st->tools = q->kind == CPULM_OAI_CHAT && q->tool_choice != CPULM_OAI_TOOLS_OFF;
    st->forced = q->tool_choice >= CPULM_OAI_TOOLS_REQUIRED;
    if (cpulm_oai_tools_copy(st->tools ? q->tools : NULL, &st->tool_defs) != CPULM_OK) {
        cpulm_api_state_free(st);
        return NULL;
    }
    snprintf(st->model, sizeof st->model, "%s", q->model ? q->model : "");
    for (int32_t i = 0; i < q->n_stop; i++) {
        size_t len = q->stop_len[i];
        cpulm_buf_append(&st->stops, (const char *)&len, sizeof len);
        cpulm_buf_append(&st->stops, q->stop[i], len);
    }
    return st;
}

void cpulm_api_state_free(void *p) {
    cpulm_api_state *st = p;
    if (!st) return;
    cpulm_buf_release(&st->text);
    cpulm_buf_release(&st->reasoning);
    cpulm_buf_release(&st->stops);
    if (st->split_harmony) cpulm_harmony_free(&st->harmony);
    cpulm_json_free(st->tool_defs);
    free(st);
}

/* Stop string k (1-based, as events count them) of the request; "" when none. */
static const char *stop_string(const cpulm_api_state *st, int32_t k, size_t *n) {
    size_t off = 0;
    *n = 0;
    for (int32_t i = 1; k > 0 && off + sizeof(size_t) <= st->stops.len; i++) {
        size_t len;
        memcpy(&len, st->stops.data + off, sizeof len);
        off += sizeof len;
        if (i == k) {
            *n = len;
            return st->stops.data + off;
        }
        off += len;
    }
    return "";
}

void cpulm_api_phase_times(const cpulm_api_state *st, const cpulm_sched_event *e, double now,
                           double *prompt_s, double *predicted_s) {
    if (e->prompt_s > 0) { /* the events of a fast reply may all arrive in one wakeup */
        *prompt_s = e->prompt_s;
        *predicted_s = e->predicted_s;
        return;
    }
    double t_first = st->t_first > 0 ? st->t_first : now;
    *prompt_s = t_first - st->t_start;
    *predicted_s = now - t_first;
}

/* ---- /completion: the answer ---- */

static void write_timings(cpulm_json_writer *w, const cpulm_api_state *st,
                          const cpulm_sched_event *e, double now) {
    double prompt_s, pred_s;
    cpulm_api_phase_times(st, e, now, &prompt_s, &pred_s);
    double prompt_ms = prompt_s * 1e3, pred_ms = pred_s * 1e3;
    int32_t n_eval = e->n_prompt - e->n_cached;
    cpulm_json_kv_obj_begin(w, "timings");
    cpulm_json_kv_int(w, "cache_n", e->n_cached);
    cpulm_json_kv_int(w, "prompt_n", n_eval);
    cpulm_json_kv_double(w, "prompt_ms", prompt_ms);
    cpulm_json_kv_double(w, "prompt_per_token_ms", n_eval > 0 ? prompt_ms / n_eval : 0.0);
    cpulm_json_kv_double(w, "prompt_per_second", prompt_ms > 0 ? n_eval * 1e3 / prompt_ms : 0.0);
    cpulm_json_kv_int(w, "predicted_n", e->n_completion);
    cpulm_json_kv_double(w, "predicted_ms", pred_ms);
    cpulm_json_kv_double(w, "predicted_per_token_ms",
                         e->n_completion > 0 ? pred_ms / e->n_completion : 0.0);
    cpulm_json_kv_double(w, "predicted_per_second",
                         pred_ms > 0 ? e->n_completion * 1e3 / pred_ms : 0.0);
    if (e->n_drafted > 0) { /* speculative decoding, as llama-server reports it */
        cpulm_json_kv_int(w, "draft_n", e->n_drafted);
        cpulm_json_kv_int(w, "draft_n_accepted", e->n_draft_accepted);
    }
    cpulm_json_obj_end(w);
}

/* The last object of a /completion answer (whole, or the stream's final event). */
static void write_final(cpulm_buf *out, const cpulm_api_state *st, const cpulm_sched_event *e,
                        const char *content, size_t n) {
    size_t n_word;
    const char *word = stop_string(st, st->stop_word, &n_word);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, out, 0, 0);
    cpulm_json_obj_begin(&w);
    cpulm_json_kv_int(&w, "index", 0);
    cpulm_json_kv_strn(&w, "content", content, n);
    cpulm_json_kv_arr_begin(&w, "tokens");
    cpulm_json_arr_end(&w);
    cpulm_json_kv_int(&w, "id_slot", -1);
    cpulm_json_kv_bool(&w, "stop", 1);
    cpulm_json_kv_str(&w, "model", st->s->alias);
    cpulm_json_kv_int(&w, "tokens_predicted", e->n_completion);
    cpulm_json_kv_int(&w, "tokens_evaluated", e->n_prompt);
    cpulm_json_kv_int(&w, "tokens_cached", e->n_cached);
    cpulm_json_kv_bool(&w, "truncated", 0);
    cpulm_json_key(&w, "stop_type");
    cpulm_json_write_str(&w, st->finish == CPULM_FINISH_LENGTH ? "limit"
                             : st->stop_word                   ? "word"
                                                               : "eos");
    cpulm_json_kv_strn(&w, "stopping_word", word, n_word);
    write_timings(&w, st, e, cpulm_clock_s());
    cpulm_json_obj_end(&w);
}

static void llama_event(cpulm_server *s, cpulm_conn *c, cpulm_api_state *st,
                        const cpulm_sched_event *e) {
    (void)s;
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    if (st->stream && !c->sse && e->kind != CPULM_SCHED_EV_ERROR) cpulm_conn_sse_begin(c);
    if (e->kind == CPULM_SCHED_EV_TEXT && e->n_text) {
        if (st->t_first == 0) st->t_first = cpulm_clock_s();
        if (!st->stream) {
            cpulm_buf_append(&st->text, e->text, e->n_text);
        } else {
            cpulm_json_writer w;
            cpulm_buf_puts(&b, "data: ");
            cpulm_json_writer_init(&w, &b, 0, 0);
            cpulm_json_obj_begin(&w);
            cpulm_json_kv_int(&w, "index", 0);
            cpulm_json_kv_strn(&w, "content", e->text, e->n_text);
            cpulm_json_kv_arr_begin(&w, "tokens");
            cpulm_json_arr_end(&w);
            cpulm_json_kv_bool(&w, "stop", 0);
            cpulm_json_kv_int(&w, "id_slot", -1);
            cpulm_json_kv_int(&w, "tokens_evaluated", st->n_prompt);
            cpulm_json_obj_end(&w);
            cpulm_buf_puts(&b, "\n\n");
        }
    } else if (e->kind == CPULM_SCHED_EV_FINISH) {
        st->finish = (int)e->finish;
        st->stop_word = e->stop_word;
    } else if (e->kind == CPULM_SCHED_EV_DONE && st->stream) {
        cpulm_buf_puts(&b, "data: ");
        write_final(&b, st, e, "", 0);
        cpulm_buf_puts(&b, "\n\n");
    } else if (e->kind == CPULM_SCHED_EV_DONE) {
        write_final(&b, st, e, st->text.data ? st->text.data : "", st->text.len);
        cpulm_conn_respond(c, 200, "application/json", b.data, b.len, NULL);
        b.len = 0;
    }
    cpulm_api_event_send(c, CPULM_API_LLAMA, e, &b);
    cpulm_buf_release(&b);
}

void cpulm_api_event(cpulm_server *s, cpulm_conn *c, void *p, const cpulm_sched_event *e) {
    cpulm_api_state *st = p;
    if (st->flavor == CPULM_GEN_LLAMA)
        llama_event(s, c, st, e);
    else
        cpulm_ollama_event(s, c, st, e);
}

/* ---- jobs on the request worker: tokenize, detokenize, apply-template, Ollama's show ---- */

enum { J_TOKENIZE, J_DETOKENIZE, J_APPLY_TEMPLATE, J_OLLAMA_SHOW };

typedef struct native_job {
    cpulm_prep_job base;
    const cpulm_server *s; /* read-only fields (fixed once the model is loaded) */
    int what, api;
    char *body;
    size_t n_body;
    int status;
    cpulm_buf out;
} native_job;

static int job_error(native_job *j, int status, const char *param, const char *msg) {
    cpulm_oai_error e;
    cpulm_oai_error_set(&e, status, param, "%s", msg);
    cpulm_buf_reset(&j->out);
    cpulm_api_write_error(j->api, &j->out, &e);
    return status;
}

/* The answer {key: text}, with text released. Returns 200. */
static int job_text(native_job *j, const char *key, cpulm_buf *text) {
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, &j->out, 0, 0);
    cpulm_json_obj_begin(&w);
    cpulm_json_kv_strn(&w, key, text->data ? text->data : "", text->len);
    cpulm_json_obj_end(&w);
    cpulm_buf_release(text);
    return 200;
}

/* {"id", "piece"}: the piece as a string when it is valid UTF-8, else its bytes. */
static void write_piece(cpulm_json_writer *w, const cpulm_model *m, cpulm_token t) {
    char buf[256];
    int32_t n = 0;
    if (cpulm_token_to_piece(m, t, 1, buf, sizeof buf, &n) != CPULM_OK) n = 0;
    int valid = 1;
    for (int32_t i = 0; i < n && valid;) {
        uint32_t cp;
        int k = cpulm_json_utf8_next((const unsigned char *)buf + i, (size_t)(n - i), &cp);
        if (k <= 0) valid = 0;
        i += k > 0 ? k : 1;
    }
    cpulm_json_obj_begin(w);
    cpulm_json_kv_int(w, "id", t);
    cpulm_json_key(w, "piece");
    if (valid) {
        cpulm_json_write_strn(w, buf, (size_t)n);
    } else {
        cpulm_json_arr_begin(w);
        for (int32_t i = 0; i < n; i++)
            cpulm_json_write_int(w, (unsigned char)buf[i]);
        cpulm_json_arr_end(w);
    }
    cpulm_json_obj_end(w);
}

/* POST /tokenize {content, add_special (false), parse_special (true), with_pieces (false)}. */
static int run_tokenize(native_job *j, const cpulm_json *req) {
    const cpulm_json *content = cpulm_json_get(req, "content");
    if (!content || content->type != CPULM_JSON_STRING)
        return job_error(j, 400, "content", "'content' must be a string");
    int add = cpulm_json_bool(cpulm_json_get(req, "add_special"), 0);
    int special = cpulm_json_bool(cpulm_json_get(req, "parse_special"), 1);
    int pieces = cpulm_json_bool(cpulm_json_get(req, "with_pieces"), 0);
    int32_t cap = (int32_t)content->u.str.len + 8, n = 0;
    cpulm_token *tok = malloc(sizeof *tok * (size_t)cap);
    if (!tok || cpulm_tokenize(j->s->model, content->u.str.s, content->u.str.len, add, special, tok,
                               cap, &n) != CPULM_OK) {
        free(tok);
        return job_error(j, 400, "content", "cannot tokenize 'content'");
    }
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, &j->out, 0, 0);
    cpulm_json_obj_begin(&w);
    cpulm_json_kv_arr_begin(&w, "tokens");
    for (int32_t i = 0; i < n; i++) {
        if (pieces)
            write_piece(&w, j->s->model, tok[i]);
        else
            cpulm_json_write_int(&w, tok[i]);
    }
    cpulm_json_arr_end(&w);
    cpulm_json_obj_end(&w);
    free(tok);
    return 200;
}

/* POST /detokenize {tokens: [ids]} -> {"content"}: the pieces' bytes as the streaming
 * detokenizer joins them (control tokens as their text, as llama-server shows them). */
static int run_detokenize(native_job *j, const cpulm_json *req) {
    const cpulm_json *tokens = cpulm_json_get(req, "tokens");
    if (!tokens || tokens->type != CPULM_JSON_ARRAY)
        return job_error(j, 400, "tokens", "'tokens' must be an array of token ids");
    int32_t n_vocab = cpulm_vocab_n(j->s->model);
    cpulm_buf text;
    cpulm_buf_init(&text, 0);
    cpulm_detok dt;
    cpulm_detok_init(&dt, j->s->model, 1);
    char piece[512];
    for (size_t i = 0; i < tokens->u.list.n; i++) {
        const cpulm_json *t = &tokens->u.list.items[i];
        if (t->type != CPULM_JSON_NUMBER || !t->is_int || t->u.num.i < 0 || t->u.num.i >= n_vocab) {
            cpulm_buf_release(&text);
            return job_error(j, 400, "tokens", "'tokens' holds an id outside the vocabulary");
        }
        int32_t k = cpulm_detok_push(&dt, (cpulm_token)t->u.num.i, piece, sizeof piece);
        if (k > 0) cpulm_buf_append(&text, piece, (size_t)k);
    }
    int32_t k = cpulm_detok_flush(&dt, piece, sizeof piece);
    if (k > 0) cpulm_buf_append(&text, piece, (size_t)k);
    return job_text(j, "content", &text);
}

/* POST /apply-template {messages} -> {"prompt"}: the chat as the server would render it. */
static int run_apply_template(native_job *j, const char *body, size_t n) {
    cpulm_oai_request q;
    cpulm_oai_error e;
    if (cpulm_oai_parse(CPULM_OAI_CHAT, body, n, j->s->p.max_body, &q, &e) != CPULM_OK)
        return job_error(j, e.status, e.param[0] ? e.param : NULL, e.message);
    cpulm_buf text;
    cpulm_buf_init(&text, 0);
    cpulm_oai_chat_prompt info;
    cpulm_status st = cpulm_oai_render_chat_req(j->s->chat_tmpl, j->s->bos_text, j->s->eos_text, &q,
                                                &text, &info, &e);
    cpulm_oai_request_release(&q);
    if (st != CPULM_OK) {
        cpulm_buf_release(&text);
        return job_error(j, e.status, "messages", e.message);
    }
    return job_text(j, "prompt", &text);
}

static void native_run(cpulm_prep_job *base) {
    native_job *j = (native_job *)base;
    cpulm_json_limits lim = cpulm_json_default_limits();
    lim.max_bytes = j->s->p.max_body;
    lim.max_depth = 64;
    cpulm_json_doc *doc = NULL;
    cpulm_error jerr;
    if (j->what == J_APPLY_TEMPLATE) {
        j->status = run_apply_template(j, j->body, j->n_body);
    } else if (cpulm_json_parse(j->body, j->n_body, &lim, &doc, NULL, &jerr) != CPULM_OK ||
               cpulm_json_root(doc)->type != CPULM_JSON_OBJECT) {
        j->status = job_error(j, 400, NULL, "the body must be a JSON object");
    } else {
        const cpulm_json *req = cpulm_json_root(doc);
        j->status = j->what == J_TOKENIZE     ? run_tokenize(j, req)
                    : j->what == J_DETOKENIZE ? run_detokenize(j, req)
                                              : cpulm_ollama_show(j->s, req, &j->out);
    }
    cpulm_json_free(doc);
    free(j->body);
    j->body = NULL;
}

static void native_destroy(cpulm_prep_job *base) {
    native_job *j = (native_job *)base;
    free(j->body);
    cpulm_buf_release(&j->out);
    free(j);
}

int cpulm_native_job_is(const cpulm_prep_job *j) {
    return j->run == native_run;
}

int cpulm_native_job_result(const cpulm_prep_job *base, const char **body, size_t *n) {
    const native_job *j = (const native_job *)base;
    *body = j->out.data ? j->out.data : "";
    *n = j->out.len;
    return j->status;
}

static void push_job(cpulm_server *s, cpulm_conn *c, int what) {
    char *body;
    native_job *j = cpulm_routes_new_job(s, c, sizeof *j, &body);
    if (!j) return; /* answered */
    j->base.run = native_run;
    j->base.destroy = native_destroy;
    j->s = s;
    j->what = what;
    j->api = c->api;
    j->body = body;
    j->n_body = c->body_len;
    j->base.heavy = c->body_len > CPULM_SERVER_LIGHT_BODY;
    cpulm_buf_init(&j->out, 0);
    cpulm_routes_push_job(s, c, &j->base);
}

/* ---- the handlers ---- */

static void h_completion(cpulm_server *s, cpulm_conn *c) {
    cpulm_routes_generate(s, c, CPULM_OAI_COMPLETION, CPULM_GEN_LLAMA);
}
static void h_completions(cpulm_server *s, cpulm_conn *c) {
    cpulm_routes_generate(s, c, CPULM_OAI_COMPLETION, CPULM_GEN_OPENAI);
}
static void h_chat(cpulm_server *s, cpulm_conn *c) {
    cpulm_routes_generate(s, c, CPULM_OAI_CHAT, CPULM_GEN_OPENAI);
}
static void h_ollama_generate(cpulm_server *s, cpulm_conn *c) {
    cpulm_routes_generate(s, c, CPULM_OAI_CHAT, CPULM_GEN_OLLAMA_GENERATE);
}
static void h_ollama_chat(cpulm_server *s, cpulm_conn *c) {
    cpulm_routes_generate(s, c, CPULM_OAI_CHAT, CPULM_GEN_OLLAMA_CHAT);
}
static void h_tokenize(cpulm_server *s, cpulm_conn *c) {
    push_job(s, c, J_TOKENIZE);
}
static void h_detokenize(cpulm_server *s, cpulm_conn *c) {
    push_job(s, c, J_DETOKENIZE);
}
static void h_apply_template(cpulm_server *s, cpulm_conn *c) {
    push_job(s, c, J_APPLY_TEMPLATE);
}
static void h_ollama_show(cpulm_server *s, cpulm_conn *c) {
    push_job(s, c, J_OLLAMA_SHOW);
}
/* POST /api/embed: the /v1/embeddings path (embed.c through the scheduler), Ollama's shape. */
static void h_ollama_embed(cpulm_server *s, cpulm_conn *c) {
    cpulm_routes_embeddings(s, c, CPULM_API_OLLAMA);
}

/* POST /embedding, /embeddings: llama-server's non-OpenAI embedding shape (embed.c). */
static void h_embedding(cpulm_server *s, cpulm_conn *c) {
    cpulm_routes_embeddings(s, c, CPULM_API_LLAMA);
}

/* A query parameter given as on (k=1 or k=true). */
static int query_on(const cpulm_http_str *q, const char *k) {
    size_t n = strlen(k);
    for (size_t i = 0; i + n < q->n; i++) {
        if ((i > 0 && q->p[i - 1] != '&') || memcmp(q->p + i, k, n) != 0 || q->p[i + n] != '=')
            continue;
        const char *v = q->p + i + n + 1;
        size_t left = q->n - i - n - 1;
        return (left >= 1 && v[0] == '1') || (left >= 4 && !memcmp(v, "true", 4));
    }
    return 0;
}

/* GET /slots: llama-server's slot monitor, read only: [{id, n_ctx, speculative,
 * is_processing}]. The scheduler counts running requests, it does not name their slots:
 * the first n_running report processing. ?fail_on_no_slot=1 answers 503 when a new request
 * would wait (every slot taken, or requests already waiting: a request with n choices holds
 * n slots but counts once). */
static void h_slots(cpulm_server *s, cpulm_conn *c) {
    cpulm_oai_error e;
    if (s->p.no_slots) {
        cpulm_oai_error_set(&e, 501, NULL, "this server does not serve /slots (--no-slots)");
        respond_error(s, c, &e, NULL);
        return;
    }
    cpulm_sched_stats st = {0};
    if (s->sched) cpulm_sched_get_stats(s->sched, &st);
    if (query_on(&c->msg.query, "fail_on_no_slot") &&
        (st.n_running >= s->p.sched.n_parallel || st.n_waiting > 0)) {
        cpulm_oai_error_set(&e, 503, NULL, "no slot available");
        respond_error(s, c, &e, "Retry-After: 1\r\n");
        return;
    }
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, &b, 0, 0);
    cpulm_json_arr_begin(&w);
    for (int32_t i = 0; i < s->p.sched.n_parallel; i++) {
        cpulm_json_obj_begin(&w);
        cpulm_json_kv_int(&w, "id", i);
        cpulm_json_kv_int(&w, "n_ctx", st.n_ctx);
        cpulm_json_kv_bool(&w, "speculative", s->spec.kind != CPULM_SPEC_NONE);
        cpulm_json_kv_bool(&w, "is_processing", i < st.n_running);
        cpulm_json_obj_end(&w);
    }
    cpulm_json_arr_end(&w);
    respond_json(s, c, 200, &b);
    cpulm_buf_release(&b);
}

/* POST /rerank, /v1/rerank, /reranking, /v1/reranking: scores of documents for a query
 * (embed.c through the scheduler, as embeddings); 501 on a server without --rerank, as from
 * llama-server. */
static void h_rerank(cpulm_server *s, cpulm_conn *c) {
    cpulm_routes_embeddings(s, c, CPULM_API_RERANK);
}

/* POST /infill: a model with fill-in-the-middle tokens completes the code between
 * input_prefix and input_suffix (infill.c builds the prompt on the request worker); one
 * without them gets 501, as from llama-server. */
static void h_infill(cpulm_server *s, cpulm_conn *c) {
    cpulm_token fim[3];
    if (cpulm_routes_ready(s) && !cpulm_infill_tokens(s->model, fim)) {
        cpulm_oai_error e;
        cpulm_oai_error_set(&e, 501, NULL,
                            "infill is not supported by this model: it has no "
                            "fill-in-the-middle tokens");
        respond_error(s, c, &e, NULL);
        return;
    }
    cpulm_routes_generate(s, c, CPULM_OAI_COMPLETION, CPULM_GEN_INFILL);
}

/* GET /v1/health: llama-server's alias of /health (liveness here too). */
static void h_health(cpulm_server *s, cpulm_conn *c) {
    cpulm_conn_respond(c, 200, "application/json", "{\"status\":\"ok\"}", 15, NULL);
    finish(s, c);
}

/* GET /models and GET /v1/models/{id} (the served model, or 404). */
static void h_models(cpulm_server *s, cpulm_conn *c) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_oai_write_models(&b, s->alias, s->created);
    respond_json(s, c, 200, &b);
    cpulm_buf_release(&b);
}

static void h_model(cpulm_server *s, cpulm_conn *c) {
    const cpulm_http_str *p = &c->msg.path;
    size_t pre = strlen("/v1/models/");
    if (p->n - pre != strlen(s->alias) || memcmp(p->p + pre, s->alias, p->n - pre) != 0) {
        cpulm_oai_error e;
        cpulm_oai_error_set(&e, 404, "model", "the model '%.*s' does not exist",
                            (int)(p->n - pre > 200 ? 200 : p->n - pre), p->p + pre);
        respond_error(s, c, &e, NULL);
        return;
    }
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, &b, 0, 0);
    cpulm_json_obj_begin(&w);
    cpulm_json_kv_str(&w, "id", s->alias);
    cpulm_json_kv_str(&w, "object", "model");
    cpulm_json_kv_int(&w, "created", s->created);
    cpulm_json_kv_str(&w, "owned_by", "cpulm");
    cpulm_json_obj_end(&w);
    respond_json(s, c, 200, &b);
    cpulm_buf_release(&b);
}

/* /completion's defaults, in llama-server's /props shape (the samplers cpulm runs, in
 * its order) */
static const char PROPS_PARAMS[] =
    "{\"n_predict\":-1,\"seed\":4294967295,\"temperature\":0.8,\"top_k\":40,\"top_p\":0.95,"
    "\"min_p\":0.05,\"typical_p\":1.0,\"repeat_last_n\":64,\"repeat_penalty\":1.0,"
    "\"presence_penalty\":0.0,\"frequency_penalty\":0.0,\"mirostat\":0,\"stop\":[],"
    "\"n_keep\":0,\"ignore_eos\":false,\"stream\":false,\"n_probs\":0,\"min_keep\":0,"
    "\"samplers\":[\"penalties\",\"top_k\",\"typ_p\",\"top_p\",\"min_p\",\"temperature\"]}";

/* PROPS_PARAMS with llama-server's speculative.n_max / n_min / p_min (0 when off). */
static void write_props_params(cpulm_json_writer *w, const cpulm_spec_params *sp) {
    int on = sp->kind != CPULM_SPEC_NONE;
    char params[sizeof PROPS_PARAMS + 128];
    snprintf(params, sizeof params,
             "%.*s,\"speculative.n_max\":%d,\"speculative.n_min\":%d,\"speculative.p_min\":%g}",
             (int)sizeof PROPS_PARAMS - 2, PROPS_PARAMS, on ? sp->draft_max : 0,
             on ? sp->draft_min : 0, on ? (double)sp->p_min : 0.0);
    cpulm_json_write_raw(w, params, strlen(params));
}

/* cpulm's own: the whole speculation setup (docs/SERVER.md "Speculative decoding"). */
static void write_props_spec(cpulm_json_writer *w, const cpulm_server *s) {
    const cpulm_spec_params *sp = &s->spec;
    cpulm_json_kv_obj_begin(w, "speculative");
    cpulm_json_kv_str(w, "type", cpulm_spec_kind_name(sp->kind));
    if (sp->kind != CPULM_SPEC_NONE) {
        cpulm_json_key(w, "draft_model");
        if (s->p.draft_path)
            cpulm_json_write_str(w, s->p.draft_path);
        else
            cpulm_json_write_null(w);
        cpulm_json_kv_int(w, "draft_max", sp->draft_max);
        cpulm_json_kv_int(w, "draft_min", sp->draft_min);
        cpulm_json_kv_double(w, "p_min", sp->p_min);
        cpulm_json_kv_int(w, "ngram_min", sp->ngram_min);
        cpulm_json_kv_int(w, "ngram_max", sp->ngram_max);
        cpulm_json_kv_bool(w, "adaptive", sp->adaptive);
    }
    cpulm_json_obj_end(w);
}

/* GET /props: what llama-server's clients read (slots, context, defaults, template). */
static void h_props(cpulm_server *s, cpulm_conn *c) {
    cpulm_sched_stats st = {0};
    if (s->sched) cpulm_sched_get_stats(s->sched, &st);
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, &b, 0, 0);
    cpulm_json_obj_begin(&w);
    cpulm_json_kv_obj_begin(&w, "default_generation_settings");
    cpulm_json_kv_int(&w, "n_ctx", st.n_ctx);
    cpulm_json_kv_bool(&w, "speculative", s->spec.kind != CPULM_SPEC_NONE);
    cpulm_json_key(&w, "params");
    write_props_params(&w, &s->spec);
    cpulm_json_obj_end(&w);
    write_props_spec(&w, s);
    cpulm_json_kv_int(&w, "total_slots", s->p.sched.n_parallel);
    cpulm_json_kv_str(&w, "model_alias", s->alias);
    cpulm_json_kv_str(&w, "model_path", s->p.model_path ? s->p.model_path : "");
    cpulm_json_kv_str(&w, "chat_template", s->chat_tmpl ? s->chat_tmpl : "");
    cpulm_json_key(&w, "modalities");
    cpulm_json_write_raw(&w, "{\"vision\":false,\"audio\":false}", 30);
    cpulm_json_kv_str(&w, "bos_token", s->bos_text ? s->bos_text : "");
    cpulm_json_kv_str(&w, "eos_token", s->eos_text ? s->eos_text : "");
    cpulm_json_kv_str(&w, "build_info", cpulm_version());
    cpulm_json_kv_bool(&w, "is_sleeping", 0);
    cpulm_json_obj_end(&w);
    respond_json(s, c, 200, &b);
    cpulm_buf_release(&b);
}

/* ---- the table ---- */

static const struct native_route {
    const char *path, *method;
    int auth, api, prefix;
    void (*fn)(cpulm_server *s, cpulm_conn *c);
} routes[] = {
    {"/completion", "POST", 1, CPULM_API_LLAMA, 0, h_completion},
    {"/completions", "POST", 1, CPULM_API_OPENAI, 0, h_completions},
    {"/chat/completions", "POST", 1, CPULM_API_OPENAI, 0, h_chat},
    {"/tokenize", "POST", 1, CPULM_API_LLAMA, 0, h_tokenize},
    {"/detokenize", "POST", 1, CPULM_API_LLAMA, 0, h_detokenize},
    {"/apply-template", "POST", 1, CPULM_API_LLAMA, 0, h_apply_template},
    {"/props", "GET", 1, CPULM_API_LLAMA, 0, h_props},
    {"/slots", "GET", 1, CPULM_API_LLAMA, 0, h_slots},
    {"/embedding", "POST", 1, CPULM_API_LLAMA, 0, h_embedding},
    {"/embeddings", "POST", 1, CPULM_API_LLAMA, 0, h_embedding},
    {"/infill", "POST", 1, CPULM_API_LLAMA, 0, h_infill},
    {"/rerank", "POST", 1, CPULM_API_LLAMA, 0, h_rerank},
    {"/v1/rerank", "POST", 1, CPULM_API_LLAMA, 0, h_rerank},
    {"/reranking", "POST", 1, CPULM_API_LLAMA, 0, h_rerank},
    {"/v1/reranking", "POST", 1, CPULM_API_LLAMA, 0, h_rerank},
    {"/v1/health", "GET", 0, CPULM_API_LLAMA, 0, h_health},
    {"/models", "GET", 1, CPULM_API_OPENAI, 0, h_models},
    {"/v1/models/", "GET", 1, CPULM_API_OPENAI, 1, h_model},
    {"/api/generate", "POST", 1, CPULM_API_OLLAMA, 0, h_ollama_generate},
    {"/api/chat", "POST", 1, CPULM_API_OLLAMA, 0, h_ollama_chat},
    {"/api/tags", "GET", 1, CPULM_API_OLLAMA, 0, cpulm_ollama_tags},
    {"/api/ps", "GET", 1, CPULM_API_OLLAMA, 0, cpulm_ollama_ps},
    {"/api/show", "POST", 1, CPULM_API_OLLAMA, 0, h_ollama_show},
    {"/api/version", "GET", 0, CPULM_API_OLLAMA, 0, cpulm_ollama_version},
    {"/api/embed", "POST", 1, CPULM_API_OLLAMA, 0, h_ollama_embed},
};

static int matches(const struct native_route *r, const cpulm_http_str *p) {
    size_t n = strlen(r->path);
    if (r->prefix) return p->n > n && memcmp(p->p, r->path, n) == 0;
    return p->n == n && memcmp(p->p, r->path, n) == 0;
}

int cpulm_native_handle(cpulm_server *s, cpulm_conn *c) {
    const cpulm_http_msg *m = &c->msg;
    const struct native_route *r = NULL;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0] && !r; i++)
        if (matches(&routes[i], &m->path)) r = &routes[i];
    if (!r) return 0;
    c->api = r->api;
    cpulm_oai_error e;
    if (m->method.n != strlen(r->method) || memcmp(m->method.p, r->method, m->method.n) != 0) {
        char allow[64];
        snprintf(allow, sizeof allow, "Allow: %s\r\n", r->method);
        cpulm_oai_error_set(&e, 405, NULL, "%s requires %s", r->path, r->method);
        respond_error(s, c, &e, allow);
        return 1;
    }
    if (r->auth && !cpulm_routes_authorized(s, m)) {
        cpulm_oai_error_set(&e, 401, NULL,
                            "missing or invalid API key (Authorization: Bearer ...)");
        respond_error(s, c, &e, "WWW-Authenticate: Bearer\r\n");
        return 1;
    }
    r->fn(s, c);
    return 1;
}
