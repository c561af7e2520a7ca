/* routes.c: the HTTP endpoints: /v1/chat/completions, /v1/completions, /v1/models,
 * /health, /ready, /metrics; authentication; and turning scheduler events into JSON
 * responses or SSE chunks. Runs on the I/O thread only and never waits for the model:
 * generation requests are handed to the scheduler and answered from its events.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "server/oai.h"
#include "server/server_int.h"

/* Per-request state of a generation in flight (conn->route). */
typedef struct route {
    cpulm_oai_kind kind;
    int stream;
    int32_t n;
    char id[48];
    cpulm_oai_meta meta;
    cpulm_oai_choice *choices; /* [n]: accumulated text (non-stream) */
    int8_t *started;           /* [n]: stream: the choice's first chunk was sent */
    int64_t *offset;           /* [n]: stream: bytes sent per choice (completion logprobs) */
    cpulm_chat_think *think;   /* [n]: chat: splits <think> reasoning from the content */
} route;

static void route_free(route *r) {
    if (!r) return;
    for (int32_t i = 0; r->choices && i < r->n; i++) cpulm_oai_choice_release(&r->choices[i]);
    free(r->choices);
    free(r->started);
    free(r->offset);
    free(r->think);
    free(r);
}

/* ---- plain responses ---- */

static void finish(cpulm_server *s, cpulm_conn *c) {
    c->done = 1;
    cpulm_server_output(s, c);
}

static void respond(cpulm_server *s, cpulm_conn *c, int status, const char *type, const char *body,
                    size_t n, const char *extra) {
    cpulm_conn_respond(c, status, type, body, n, extra);
    finish(s, c);
}

static void respond_error(cpulm_server *s, cpulm_conn *c, const cpulm_oai_error *e,
                          const char *extra) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_oai_write_error(&b, e);
    respond(s, c, e->status, "application/json", b.data, b.len, extra);
    cpulm_buf_release(&b);
}

static void respond_json(cpulm_server *s, cpulm_conn *c, int status, const char *json) {
    respond(s, c, status, "application/json", json, strlen(json), NULL);
}

void cpulm_routes_bad_request(cpulm_server *s, cpulm_conn *c) {
    cpulm_oai_error e;
    cpulm_oai_error_set(&e, c->bad_status, NULL, "%s", c->bad_reason ? c->bad_reason : "bad request");
    c->keep_alive = 0; /* the byte stream can no longer be trusted */
    respond_error(s, c, &e, NULL);
}

/* ---- probes, metrics, models ---- */

static int is_ready(const cpulm_server *s) {
    if (!s->sched || s->draining) return 0;
    cpulm_sched_stats st;
    cpulm_sched_get_stats(s->sched, &st);
    return st.ready;
}

static void get_gauges(const cpulm_server *s, cpulm_metrics_gauges *g) {
    memset(g, 0, sizeof *g);
    if (!s->sched) return;
    cpulm_sched_stats st;
    cpulm_sched_get_stats(s->sched, &st);
    g->n_waiting = st.n_waiting;
    g->n_running = st.n_running;
    g->kv_used = st.kv_used;
    g->kv_total = st.kv_total;
    g->ready = st.ready && !s->draining;
}

static void handle_metrics(cpulm_server *s, cpulm_conn *c) {
    cpulm_metrics_gauges g;
    get_gauges(s, &g);
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_metrics_render(s->metrics, &g, &b);
    respond(s, c, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len, NULL);
    cpulm_buf_release(&b);
}

static void handle_models(cpulm_server *s, cpulm_conn *c) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_oai_write_models(&b, s->alias, s->created);
    respond(s, c, 200, "application/json", b.data, b.len, NULL);
    cpulm_buf_release(&b);
}

/* ---- generation requests ---- */

/* Prompt tokens for the request. Returns 0, or -1 with e set. */
static int build_prompt(cpulm_server *s, const cpulm_oai_request *q, cpulm_sched_req *r,
                        const char **extra_stop, int *opens_think, cpulm_oai_error *e) {
    *extra_stop = "";
    if (q->prompt_tokens) {
        size_t n = cpulm_json_len(q->prompt_tokens);
        r->prompt = malloc(sizeof(cpulm_token) * n);
        if (!r->prompt) return -cpulm_oai_error_set(e, 500, NULL, "out of memory");
        for (size_t i = 0; i < n; i++) {
            int64_t v = cpulm_json_at(q->prompt_tokens, i)->u.num.i;
            if (v < 0 || v >= cpulm_vocab_n(s->model))
                return -cpulm_oai_error_set(e, 400, "prompt", "token id %lld is out of range",
                                            (long long)v);
            r->prompt[i] = (cpulm_token)v;
        }
        r->n_prompt = (int32_t)n;
        return 0;
    }
    cpulm_buf text;
    cpulm_buf_init(&text, s->p.max_body * 4 + 4096);
    cpulm_oai_chat_prompt info = {.parse_special = 0, .add_bos = 1, .extra_stop = ""};
    if (q->kind == CPULM_OAI_CHAT) {
        if (cpulm_oai_render_chat(s->chat_tmpl, s->bos_text, s->eos_text, q->messages, &text,
                                  &info, e) != CPULM_OK) {
            cpulm_buf_release(&text);
            return -1;
        }
        *extra_stop = info.extra_stop;
        *opens_think = cpulm_chat_opens_think(text.data, text.len);
    } else {
        cpulm_buf_append(&text, q->prompt, q->prompt_len);
    }
    int32_t cap = (int32_t)text.len + 8, n = 0;
    r->prompt = malloc(sizeof(cpulm_token) * (size_t)cap);
    cpulm_status st = r->prompt ? cpulm_tokenize(s->model, text.data, text.len, info.add_bos,
                                                 info.parse_special, r->prompt, cap, &n)
                                : CPULM_ERR_NOMEM;
    cpulm_buf_release(&text);
    if (st != CPULM_OK) return -cpulm_oai_error_set(e, 400, NULL, "cannot tokenize the prompt: %s",
                                                    cpulm_status_str(st));
    r->n_prompt = n;
    return 0;
}

/* Translates the parsed request into a scheduler request. Returns NULL with e set. */
static cpulm_sched_req *to_sched_req(cpulm_server *s, const cpulm_oai_request *q,
                                     int *opens_think, cpulm_oai_error *e) {
    cpulm_sched_req *r = cpulm_sched_req_new();
    if (!r) {
        cpulm_oai_error_set(e, 500, NULL, "out of memory");
        return NULL;
    }
    const char *extra_stop;
    if (build_prompt(s, q, r, &extra_stop, opens_think, e) < 0) {
        cpulm_sched_req_free(r);
        return NULL;
    }
    r->n_choices = q->n;
    r->max_tokens = q->max_tokens;
    r->sp = q->sp;
    r->logprobs = q->logprobs;
    r->ignore_eos = q->ignore_eos;
    r->timeout_s = s->p.timeout_s;
    for (int32_t i = 0; i < q->n_stop; i++) cpulm_sched_req_add_stop(r, q->stop[i], strlen(q->stop[i]));
    if (*extra_stop) cpulm_sched_req_add_stop(r, extra_stop, strlen(extra_stop));
    return r;
}

static route *route_new(cpulm_server *s, const cpulm_oai_request *q, int opens_think) {
    route *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->kind = q->kind;
    r->stream = q->stream;
    r->n = q->n;
    r->choices = calloc((size_t)q->n, sizeof *r->choices);
    r->started = calloc((size_t)q->n, 1);
    r->offset = calloc((size_t)q->n, sizeof *r->offset);
    r->think = calloc((size_t)q->n, sizeof *r->think);
    if (!r->choices || !r->started || !r->offset || !r->think) {
        route_free(r);
        return NULL;
    }
    for (int32_t i = 0; i < q->n; i++) cpulm_chat_think_init(&r->think[i], opens_think);
    for (int32_t i = 0; i < q->n; i++) cpulm_oai_choice_init(&r->choices[i]);
    snprintf(r->id, sizeof r->id, "%s-%016llx", q->kind == CPULM_OAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)((s->next_serial ^ (uint64_t)s->created) * 0x9E3779B97F4A7C15ull));
    r->meta = (cpulm_oai_meta){.kind = q->kind, .id = r->id, .created = (int64_t)time(NULL),
                               .model = s->alias, .m = s->model, .logprobs = q->logprobs,
                               .include_usage = q->include_usage};
    return r;
}

static int submit_error(cpulm_sched_submit_result res, const cpulm_sched_req *r, cpulm_server *s,
                        cpulm_oai_kind kind, cpulm_oai_error *e) {
    switch (res) {
    case CPULM_SCHED_QUEUE_FULL:
        return cpulm_oai_error_set(e, 429, NULL, "the server is busy: %d requests are waiting",
                                   s->p.max_queue);
    case CPULM_SCHED_TOO_LONG:
        cpulm_oai_error_set(e, 400, kind == CPULM_OAI_CHAT ? "messages" : "prompt", "the prompt has %d tokens; the context holds %d "
                            "(including at least one generated token)", r->n_prompt, s->p.n_ctx);
        e->code = "context_length_exceeded";
        return 400;
    case CPULM_SCHED_STOPPING: return cpulm_oai_error_set(e, 503, NULL, "the server is shutting down");
    default: return cpulm_oai_error_set(e, 400, NULL, "invalid request (empty prompt or bad token ids)");
    }
}

static void handle_generate(cpulm_server *s, cpulm_conn *c, cpulm_oai_kind kind) {
    cpulm_oai_error e;
    if (!is_ready(s)) {
        cpulm_oai_error_set(&e, 503, NULL, s->draining ? "the server is shutting down"
                                                      : "the model is still loading");
        respond_error(s, c, &e, "Retry-After: 1\r\n");
        return;
    }
    cpulm_oai_request q;
    if (cpulm_oai_parse(kind, c->body, c->body_len, s->p.max_body, &q, &e) != CPULM_OK) {
        respond_error(s, c, &e, NULL);
        return;
    }
    cpulm_sched_req *r = NULL;
    route *rt = NULL;
    int opens_think = 0;
    if (q.n > s->p.n_parallel)
        cpulm_oai_error_set(&e, 400, "n", "'n' must be at most %d on this server", s->p.n_parallel);
    else if ((r = to_sched_req(s, &q, &opens_think, &e)) &&
             (++s->next_serial, !(rt = route_new(s, &q, opens_think))))
        cpulm_oai_error_set(&e, 500, NULL, "out of memory");
    cpulm_oai_request_release(&q);
    if (r && rt) {
        uint64_t id = (s->next_serial << 16) | (uint64_t)c->index;
        r->id = id;
        cpulm_sched_submit_result res = cpulm_sched_submit(s->sched, r);
        if (res == CPULM_SCHED_ACCEPTED) { /* r belongs to the scheduler now: do not touch */
            c->req_id = id;
            c->route = rt;
            if (rt->stream) {
                cpulm_conn_sse_begin(c);
                cpulm_server_output(s, c);
            }
            return;
        }
        submit_error(res, r, s, kind, &e);
    }
    cpulm_sched_req_free(r);
    route_free(rt);
    respond_error(s, c, &e, e.status == 429 ? "Retry-After: 1\r\n" : NULL);
}

/* ---- scheduler events ---- */

/* A text event of a chat choice split into content and reasoning (<think>...</think>),
 * flushing the filter's held bytes at the end of the choice. Completions pass through. */
typedef struct split_text {
    char *buf; /* content, then reasoning */
    const char *text, *reasoning;
    size_t n_text, n_reasoning;
} split_text;

static int split_event(route *rt, const cpulm_sched_event *e, split_text *o) {
    memset(o, 0, sizeof *o);
    o->text = e->text;
    o->n_text = e->n_text;
    if (rt->kind != CPULM_OAI_CHAT) return 0;
    cpulm_chat_think *f = &rt->think[e->choice];
    int32_t cap = (int32_t)e->n_text + 32, nr1 = 0, nr2 = 0;
    if (!(o->buf = malloc(2 * (size_t)cap))) return -1;
    char *c = o->buf, *r = o->buf + cap;
    int32_t k = cpulm_chat_think_split(f, e->text, (int32_t)e->n_text, c, r, cap - 16, &nr1);
    if (k < 0) return -1;
    if (e->kind == CPULM_SCHED_EV_FINISH) {
        int32_t k2 = cpulm_chat_think_split(f, NULL, 0, c + k, r + nr1, 16, &nr2);
        if (k2 < 0) return -1;
        k += k2;
    }
    o->text = c;
    o->n_text = (size_t)k;
    o->reasoning = r;
    o->n_reasoning = (size_t)(nr1 + nr2);
    return 0;
}

static void stream_event(cpulm_conn *c, route *rt, const cpulm_sched_event *e) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    int32_t i = e->choice;
    if (e->kind == CPULM_SCHED_EV_TEXT || e->kind == CPULM_SCHED_EV_FINISH) {
        int first = !rt->started[i];
        if (first && rt->kind == CPULM_OAI_CHAT && e->kind == CPULM_SCHED_EV_FINISH) {
            cpulm_oai_delta open = {.index = i, .text = "", .finish = -1, .first = 1};
            cpulm_oai_write_chunk(&b, &rt->meta, &open); /* role before an empty finish */
            first = 0;
        }
        split_text st;
        if (split_event(rt, e, &st) < 0) st = (split_text){NULL, e->text, NULL, e->n_text, 0};
        cpulm_oai_delta d = {.index = i, .text = st.text, .n_text = st.n_text,
                             .reasoning = st.reasoning, .n_reasoning = st.n_reasoning,
                             .lp = e->has_lp ? &e->lp : NULL, .first = first && rt->kind == CPULM_OAI_CHAT,
                             .finish = e->kind == CPULM_SCHED_EV_FINISH ? (int)e->finish : -1,
                             .text_offset = rt->offset[i]};
        cpulm_oai_write_chunk(&b, &rt->meta, &d);
        free(st.buf);
        rt->started[i] = 1;
        rt->offset[i] += (int64_t)e->n_text;
    } else if (e->kind == CPULM_SCHED_EV_DONE) {
        if (rt->meta.include_usage) {
            cpulm_oai_usage u = {e->n_prompt, e->n_completion, e->n_cached};
            cpulm_oai_write_usage_chunk(&b, &rt->meta, &u);
        }
        cpulm_buf_puts(&b, "data: [DONE]\n\n");
    } else {
        cpulm_oai_error err;
        cpulm_oai_error_set(&err, e->error_status, NULL, "%s", e->error);
        cpulm_oai_write_stream_error(&b, &err);
        cpulm_buf_puts(&b, "data: [DONE]\n\n");
    }
    cpulm_conn_sse_frame(c, b.data, b.len);
    cpulm_buf_release(&b);
}

static void whole_event(cpulm_server *s, cpulm_conn *c, route *rt, const cpulm_sched_event *e) {
    cpulm_oai_choice *ch = &rt->choices[e->choice];
    if (e->kind == CPULM_SCHED_EV_TEXT || e->kind == CPULM_SCHED_EV_FINISH) {
        split_text st;
        if (split_event(rt, e, &st) < 0) st = (split_text){NULL, e->text, NULL, e->n_text, 0};
        cpulm_buf_append(&ch->text, st.text, st.n_text);
        if (st.n_reasoning) cpulm_buf_append(&ch->reasoning, st.reasoning, st.n_reasoning);
        free(st.buf);
        if (e->kind == CPULM_SCHED_EV_TEXT && e->has_lp) cpulm_oai_choice_add_lp(ch, &e->lp);
        if (e->kind == CPULM_SCHED_EV_FINISH) ch->finish = (int)e->finish;
    } else if (e->kind == CPULM_SCHED_EV_DONE) {
        cpulm_oai_usage u = {e->n_prompt, e->n_completion, e->n_cached};
        cpulm_buf b;
        cpulm_buf_init(&b, 0);
        cpulm_oai_write_response(&b, &rt->meta, rt->choices, rt->n, &u);
        cpulm_conn_respond(c, 200, "application/json", b.data, b.len, NULL);
        cpulm_buf_release(&b);
    } else {
        cpulm_oai_error err;
        cpulm_oai_error_set(&err, e->error_status, NULL, "%s", e->error);
        cpulm_buf b;
        cpulm_buf_init(&b, 0);
        cpulm_oai_write_error(&b, &err);
        cpulm_conn_respond(c, err.status, "application/json", b.data, b.len, NULL);
        cpulm_buf_release(&b);
    }
    (void)s;
}

void cpulm_routes_event(cpulm_server *s, cpulm_conn *c, const cpulm_sched_event *e) {
    route *rt = c->route;
    if (!rt) return;
    if (rt->stream) stream_event(c, rt, e);
    else whole_event(s, c, rt, e);
    if (e->kind == CPULM_SCHED_EV_DONE || e->kind == CPULM_SCHED_EV_ERROR) {
        if (rt->stream) cpulm_conn_sse_end(c);
        route_free(rt);
        c->route = NULL;
        c->req_id = 0;
        c->done = 1;
    }
    cpulm_server_output(s, c);
}

void cpulm_routes_abort(cpulm_server *s, cpulm_conn *c) {
    if (c->req_id && s->sched) cpulm_sched_cancel(s->sched, c->req_id);
    c->req_id = 0;
    route_free(c->route);
    c->route = NULL;
}

/* ---- dispatch ---- */

/* Constant-time comparison of the bearer token with the key. */
static int authorized(const cpulm_server *s, const cpulm_http_msg *m) {
    if (!s->p.api_key || !*s->p.api_key) return 1;
    const cpulm_http_str *h = cpulm_http_header_get(m, "authorization");
    if (!h || h->n < 7 || strncasecmp(h->p, "Bearer ", 7) != 0) return 0;
    const char *tok = h->p + 7;
    size_t n = h->n - 7, k = strlen(s->p.api_key);
    unsigned diff = n != k;
    for (size_t i = 0; i < n && i < k; i++) diff |= (unsigned char)(tok[i] ^ s->p.api_key[i]);
    return diff == 0;
}

static int path_is(const cpulm_http_str *p, const char *lit) {
    return p->n == strlen(lit) && memcmp(p->p, lit, p->n) == 0;
}

typedef enum { R_HEALTH, R_READY, R_METRICS, R_MODELS, R_CHAT, R_COMPLETIONS, R_COUNT } route_id;

static const struct {
    const char *path, *method;
    int auth;
} table[R_COUNT] = {
    [R_HEALTH] = {"/health", "GET", 0},         [R_READY] = {"/ready", "GET", 0},
    [R_METRICS] = {"/metrics", "GET", 0},       [R_MODELS] = {"/v1/models", "GET", 1},
    [R_CHAT] = {"/v1/chat/completions", "POST", 1}, [R_COMPLETIONS] = {"/v1/completions", "POST", 1},
};

void cpulm_routes_handle(cpulm_server *s, cpulm_conn *c) {
    const cpulm_http_msg *m = &c->msg;
    int r = 0;
    while (r < R_COUNT && !path_is(&m->path, table[r].path)) r++;
    cpulm_oai_error e;
    if (r == R_COUNT) {
        cpulm_oai_error_set(&e, 404, NULL, "no route for %.*s %.*s", (int)m->method.n, m->method.p,
                            (int)(m->path.n > 200 ? 200 : m->path.n), m->path.p);
        respond_error(s, c, &e, NULL);
        return;
    }
    if (!cpulm_http_str_ieq(&m->method, table[r].method) ||
        memcmp(m->method.p, table[r].method, m->method.n) != 0) {
        char allow[64];
        snprintf(allow, sizeof allow, "Allow: %s\r\n", table[r].method);
        cpulm_oai_error_set(&e, 405, NULL, "%s requires %s", table[r].path, table[r].method);
        respond_error(s, c, &e, allow);
        return;
    }
    if (table[r].auth && !authorized(s, m)) {
        cpulm_oai_error_set(&e, 401, NULL, "missing or invalid API key (Authorization: Bearer ...)");
        respond_error(s, c, &e, "WWW-Authenticate: Bearer\r\n");
        return;
    }
    switch ((route_id)r) {
    case R_HEALTH: respond_json(s, c, 200, "{\"status\":\"ok\"}"); break;
    case R_READY:
        if (is_ready(s)) respond_json(s, c, 200, "{\"status\":\"ready\"}");
        else respond_json(s, c, 503, s->draining ? "{\"status\":\"draining\"}" : "{\"status\":\"loading\"}");
        break;
    case R_METRICS: handle_metrics(s, c); break;
    case R_MODELS: handle_models(s, c); break;
    case R_CHAT: handle_generate(s, c, CPULM_OAI_CHAT); break;
    case R_COMPLETIONS: handle_generate(s, c, CPULM_OAI_COMPLETION); break;
    case R_COUNT: break;
    }
}
