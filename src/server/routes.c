/* routes.c: the HTTP endpoints: /v1/chat/completions, /v1/completions, /v1/embeddings
 * (embed.c), /v1/models,
 * /health, /ready, /metrics; authentication; and turning scheduler events into JSON
 * responses or SSE chunks. llama-server's and Ollama's routes (native.c, ollama.c) are
 * looked up when none of these matches, and share the generation and embedding paths below
 * (their requests are parsed, and their answers written, by those files). Runs on the I/O
 * thread and never waits for the model or for work proportional to a body: a generation
 * request goes to a request worker (gen_run: JSON, chat template, tokenization, grammar;
 * prep.h), then to the scheduler, and is answered from its events; an embedding request goes
 * worker, scheduler, worker (embed.c). A request is in exactly one of those places at a time
 * (c->req_id names it there), so a disconnect or the end of the grace period cancels it
 * wherever it is.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/clock.h"
#include "grammar/grammar.h"
#include "server/harmony.h"
#include "server/oai.h"
#include "server/server_int.h"

/* route_new's think code for harmony replies (plus their cpulm_harmony_start) */
#define THINK_HARMONY CPULM_THINK_HARMONY

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
    struct tool_stream *ts;    /* [n]: stream with tools: what was sent of each choice */
    cpulm_chat_think *think;   /* [n] or NULL: <think> splitting (reasoning_content) */
    cpulm_harmony *harmony;    /* [n] or NULL: harmony channels (reasoning, content, calls) */
    void *api;                 /* llama-server's or Ollama's answer state (native.c), or
                                * NULL: OpenAI's shapes, written here */
    cpulm_json_doc *tools;     /* owned copy of the request's tools (meta.tool_defs), or NULL */
} route;

/* Streaming a reply that may hold tool calls: content goes out up to where a call may
 * begin; each call's header once its name is known, then its arguments as they grow. */
typedef struct tool_stream {
    size_t content_sent;
    int32_t calls_sent;
    size_t args_sent[CPULM_OAI_MAX_CALLS];
} tool_stream;

static void route_free(route *r) {
    if (!r) return;
    for (int32_t i = 0; r->choices && i < r->n; i++)
        cpulm_oai_choice_release(&r->choices[i]);
    free(r->choices);
    free(r->started);
    free(r->offset);
    free(r->ts);
    free(r->think);
    for (int32_t i = 0; r->harmony && i < r->n; i++)
        cpulm_harmony_free(&r->harmony[i]);
    free(r->harmony);
    cpulm_api_state_free(r->api);
    cpulm_json_free(r->tools);
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
    cpulm_api_write_error(c->api, &b, e); /* the shape of the API the client speaks */
    respond(s, c, e->status, "application/json", b.data, b.len, extra);
    cpulm_buf_release(&b);
}

static void respond_json(cpulm_server *s, cpulm_conn *c, int status, const char *json) {
    respond(s, c, status, "application/json", json, strlen(json), NULL);
}

void cpulm_routes_bad_request(cpulm_server *s, cpulm_conn *c) {
    cpulm_oai_error e;
    cpulm_oai_error_set(&e, c->bad_status, NULL, "%s",
                        c->bad_reason ? c->bad_reason : "bad request");
    c->keep_alive = 0; /* the byte stream can no longer be trusted */
    c->api = CPULM_API_OPENAI;
    /* 503: the body budget is full for now (conn.h) */
    respond_error(s, c, &e, c->bad_status == 503 ? "Retry-After: 1\r\n" : NULL);
}

/* ---- probes, metrics, models ---- */

int cpulm_routes_ready(const cpulm_server *s) {
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
    g->kv_cached = st.kv_cached;
    g->kv_bytes_used = (uint64_t)st.kv_cached * st.kv_token_bytes;
    g->kv_bytes_reserved = st.kv_reserved_bytes;
    g->kv_budget = st.kv_budget;
    g->kv_budget_used = st.kv_budget_used;
    g->kv_bytes_resident = cpulm_sched_kv_resident_bytes(s->sched);
    g->kv_bytes_shared = cpulm_sched_kv_shared_bytes(s->sched);
    g->ready = st.ready && !s->draining;
    g->block_size = st.cache_block_tokens;
    g->cache_blocks = st.cache_blocks;
    g->cache_blocks_max = st.cache_blocks_max;
    g->cache_bytes = st.cache_bytes;
    g->cache_max_bytes = st.cache_max_bytes;
    g->step_target_s = st.step_ms_target * 1e-3;
    g->step_token_s = st.est_token_ms * 1e-3;
    g->step_gen_s = st.est_gen_ms * 1e-3;
    g->step_fixed_s = st.est_fixed_ms * 1e-3;
    g->n_steps = st.n_steps;
    g->n_long_steps = st.n_long_steps;
    g->embed_requests = st.n_embed;
    g->embed_batches = st.n_embed_batches;
    g->embed_inputs = st.n_embed_inputs;
    g->embed_tokens = st.n_embed_tokens;
    g->spec_draft_max = st.spec_draft_max;
    if (s->prep) {
        cpulm_prep_stats ps;
        cpulm_prep_get_stats(s->prep, &ps);
        g->prep_workers = ps.n_workers;
        g->prep_light = ps.n_light;
        g->prep_heavy = ps.n_heavy;
        g->prep_running = ps.n_running;
        g->prep_cancelled = ps.n_cancelled;
    }
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

/* The job must stop (cancelled or out of time): -1 with e set (sent only in the latter
 * case: a cancelled job's client is gone). */
static int stopped(cpulm_prep_job *job, cpulm_oai_error *e) {
    if (!cpulm_prep_stopped(job)) return 0;
    return cpulm_oai_fail(e, 504, NULL, "the request took longer than %.0f s to prepare",
                          CPULM_SERVER_PREP_LIMIT_S);
}

/* Prompt tokens for the request. Runs on a request worker (prep.h): it reads only what is
 * fixed once the model is loaded, and stops early when the job does (tokenizing polls it).
 * Returns 0, or -1 with e set. */
static int build_prompt(const cpulm_server *s, const cpulm_oai_request *q, cpulm_sched_req *r,
                        const char **extra_stop, int *think, cpulm_prep_job *job,
                        cpulm_oai_error *e) {
    *extra_stop = "";
    *think = 0;
    if (q->prompt_tokens) {
        size_t n = cpulm_json_len(q->prompt_tokens);
        r->prompt = malloc(sizeof(cpulm_token) * n);
        if (!r->prompt) return cpulm_oai_fail(e, 500, NULL, "out of memory");
        for (size_t i = 0; i < n; i++) {
            int64_t v = cpulm_json_at(q->prompt_tokens, i)->u.num.i;
            if (v < 0 || v >= cpulm_vocab_n(s->model))
                return cpulm_oai_fail(e, 400, "prompt", "token id %lld is out of range",
                                      (long long)v);
            r->prompt[i] = (cpulm_token)v;
        }
        r->n_prompt = (int32_t)n;
        return 0;
    }
    cpulm_buf text;
    cpulm_buf_init(&text, s->p.max_body * 4 + 4096);
    /* A completion's text prompt is the client's own rendering of a template: special tokens
     * written in it (`<|im_start|>`, `</s>`) are those tokens, as llama-server and vLLM read
     * them. A chat request's message contents are not: its renderer decides (oai.c). */
    cpulm_oai_chat_prompt info = {.parse_special = 1, .add_bos = 1, .extra_stop = ""};
    if (q->kind == CPULM_OAI_CHAT) {
        if (cpulm_oai_render_chat_req(s->chat_tmpl, s->bos_text, s->eos_text, q, &text, &info, e) !=
            CPULM_OK) {
            cpulm_buf_release(&text);
            return -1;
        }
        *extra_stop = info.extra_stop;
        *think = info.think && !q->reasoning_none ? 1 + info.think_open : 0;
        if (info.harmony && !q->reasoning_none) *think = THINK_HARMONY + info.harmony_start;
    } else {
        cpulm_buf_append(&text, q->prompt, q->prompt_len);
    }
    if (stopped(job, e) < 0) {
        cpulm_buf_release(&text);
        return -1;
    }
    int32_t cap = (int32_t)text.len + 8, n = 0;
    r->prompt = malloc(sizeof(cpulm_token) * (size_t)cap);
    cpulm_status st = r->prompt
                          ? cpulm_tokenize_cancellable(s->model, text.data, text.len, info.add_bos,
                                                       info.parse_special, r->prompt, cap, &n,
                                                       cpulm_prep_stopped_cb, job)
                          : CPULM_ERR_NOMEM;
    cpulm_buf_release(&text);
    if (st == CPULM_ERR_CANCELLED) /* the job stopped (sent only when out of time) */
        return cpulm_oai_fail(e, 504, NULL, "the request took longer than %.0f s to prepare",
                              CPULM_SERVER_PREP_LIMIT_S);
    if (st != CPULM_OK)
        return cpulm_oai_fail(e, 400, NULL, "cannot tokenize the prompt: %s", cpulm_status_str(st));
    r->n_prompt = n;
    return 0;
}

/* The request's grammar (response_format, grammar, json_schema, or a forced tool call in
 * the model family's format), compiled into r. harmony: 0, or 1 + where the harmony reply
 * starts (cpulm_harmony_start). Returns 0, or -1 with e set. */
static int attach_grammar(const cpulm_server *s, const cpulm_oai_request *q, cpulm_sched_req *r,
                          int harmony, cpulm_oai_error *e) {
    char *text = NULL;
    r->special = q->tool_choice != CPULM_OAI_TOOLS_OFF || harmony;
    const int forced = q->tool_choice >= CPULM_OAI_TOOLS_REQUIRED;
    /* a forced harmony call is a message header + body the grammar writes: only where the
     * reply starts inside the header the prompt opened */
    if (harmony && forced && ((harmony - 1) & 3) != CPULM_HARMONY_HEAD)
        return cpulm_oai_fail(e, 400, "tool_choice",
                              "a required or named tool_choice needs the template to "
                              "leave the reply's header open (harmony)");
    if (forced && cpulm_oai_tool_grammar(
                      q, harmony ? "harmony" : cpulm_oai_tool_family(s->chat_tmpl), &text, e) < 0)
        return -1;
    const char *g = text ? text : q->grammar;
    if (!g) return 0;
    cpulm_error err = {0};
    /* cached by text: an agent sending the same schema every call compiles it once; a
     * limit (CPULM_ERR_LIMIT) or syntax error is the client's: 400 */
    cpulm_status st = cpulm_grammar_cache_get(cpulm_grammar_cache_shared(), g, strlen(g), NULL,
                                              &r->grammar, &err);
    free(text);
    if (st != CPULM_OK)
        return cpulm_oai_fail(e, cpulm_oai_http_status(st),
                              q->tool_choice >= CPULM_OAI_TOOLS_REQUIRED ? "tools" : "grammar",
                              "%s", err.msg);
    return 0;
}

/* Translates the parsed request into a scheduler request (on the request worker).
 * Returns NULL with e set. */
static cpulm_sched_req *to_sched_req(const cpulm_server *s, const cpulm_oai_request *q, int *think,
                                     cpulm_prep_job *job, cpulm_oai_error *e) {
    cpulm_sched_req *r = cpulm_sched_req_new();
    if (!r) {
        cpulm_oai_error_set(e, 500, NULL, "out of memory");
        return NULL;
    }
    const char *extra_stop;
    if (build_prompt(s, q, r, &extra_stop, think, job, e) < 0) {
        cpulm_sched_req_free(r);
        return NULL;
    }
    if (stopped(job, e) < 0 ||
        attach_grammar(s, q, r, *think >= THINK_HARMONY ? 1 + *think - THINK_HARMONY : 0, e) < 0 ||
        cpulm_oai_resolve_bias(q, s->model, &r->bias, &r->sp.n_logit_bias, e) < 0) {
        cpulm_sched_req_free(r);
        return NULL;
    }
    r->n_choices = q->n;
    r->max_tokens = q->max_tokens;
    int32_t n_bias = r->sp.n_logit_bias;
    r->sp = q->sp;
    r->sp.logit_bias = r->bias;
    r->sp.n_logit_bias = n_bias;
    r->logprobs = q->logprobs;
    r->priority = q->priority;
    r->ignore_eos = q->ignore_eos;
    r->spec_n_max = q->spec_n_max;
    r->spec_n_min = q->spec_n_min;
    r->spec_p_min = q->spec_p_min;
    r->timeout_s = s->p.timeout_s;
    for (int32_t i = 0; i < q->n_stop; i++)
        cpulm_sched_req_add_stop(r, q->stop[i], q->stop_len[i]);
    if (*extra_stop) cpulm_sched_req_add_stop(r, extra_stop, strlen(extra_stop));
    return r;
}

/* think: 0 off, 1 split replies, 2 split replies that start inside <think>, THINK_HARMONY +
 * cpulm_harmony_start: harmony channels. */
static route *route_new(cpulm_server *s, const cpulm_oai_request *q, int think, uint64_t serial) {
    route *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->kind = q->kind;
    r->stream = q->stream;
    r->n = q->n;
    r->choices = calloc((size_t)q->n, sizeof *r->choices);
    r->started = calloc((size_t)q->n, 1);
    r->offset = calloc((size_t)q->n, sizeof *r->offset);
    r->ts = calloc((size_t)q->n, sizeof *r->ts);
    const int harmony = think >= THINK_HARMONY;
    if (harmony) {
        r->harmony = calloc((size_t)q->n, sizeof *r->harmony);
        for (int32_t i = 0; r->harmony && i < q->n; i++)
            cpulm_harmony_init_at(&r->harmony[i], think - THINK_HARMONY);
        think = 0;
    }
    r->think = think ? calloc((size_t)q->n, sizeof *r->think) : NULL;
    const int tools = q->kind == CPULM_OAI_CHAT && q->tool_choice != CPULM_OAI_TOOLS_OFF;
    if (!r->choices || !r->started || !r->offset || !r->ts || (think && !r->think) ||
        (harmony && !r->harmony) ||
        cpulm_oai_tools_copy(tools ? q->tools : NULL, &r->tools) != CPULM_OK) {
        route_free(r);
        return NULL;
    }
    for (int32_t i = 0; think && i < q->n; i++)
        cpulm_chat_think_init(&r->think[i], think == 2);
    for (int32_t i = 0; i < q->n; i++)
        cpulm_oai_choice_init(&r->choices[i]);
    snprintf(r->id, sizeof r->id, "%s-%016llx", q->kind == CPULM_OAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)((serial ^ (uint64_t)s->created) * 0x9E3779B97F4A7C15ull));
    r->meta = (cpulm_oai_meta){.kind = q->kind,
                               .id = r->id,
                               .created = (int64_t)time(NULL),
                               .model = s->alias,
                               .m = s->model,
                               .logprobs = q->logprobs,
                               .include_usage = q->include_usage,
                               .tools = tools,
                               .forced = q->tool_choice >= CPULM_OAI_TOOLS_REQUIRED,
                               .tool_defs = r->tools ? cpulm_json_root(r->tools) : NULL};
    return r;
}

static void submit_error(cpulm_sched_submit_result res, const cpulm_sched_req *r, cpulm_server *s,
                         cpulm_oai_kind kind, cpulm_oai_error *e) {
    switch (res) {
    case CPULM_SCHED_QUEUE_FULL:
        cpulm_oai_error_set(e, 429, NULL, "the server is busy: %d requests are waiting",
                            s->p.sched.max_queue);
        return;
    case CPULM_SCHED_TOO_LONG:
        cpulm_oai_error_set(e, 400, kind == CPULM_OAI_CHAT ? "messages" : "prompt",
                            "the prompt has %d tokens; the context holds %d "
                            "(including at least one generated token)",
                            r->n_prompt, s->p.sched.n_ctx);
        e->code = "context_length_exceeded";
        return;
    case CPULM_SCHED_STOPPING:
        cpulm_oai_error_set(e, 503, NULL, "the server is shutting down");
        return;
    default: cpulm_oai_error_set(e, 400, NULL, "invalid request (empty prompt or bad token ids)");
    }
}

/* A generation request on its way through the request worker (prep.h). */
typedef struct gen_job {
    cpulm_prep_job base;
    const cpulm_server *s; /* read-only fields only (fixed once the model is loaded) */
    cpulm_oai_kind kind;
    int flavor; /* CPULM_GEN_*: the API whose request and answer shapes apply */
    char *body; /* a copy: the connection may close while the worker runs */
    size_t n_body;
    cpulm_oai_request q;
    int parsed;         /* q holds a parsed request */
    cpulm_sched_req *r; /* the result, or NULL with e set */
    int think;          /* route_new's think */
    cpulm_oai_error e;
} gen_job;

static void gen_destroy(cpulm_prep_job *base) {
    gen_job *j = (gen_job *)base;
    free(j->body);
    if (j->parsed) cpulm_oai_request_release(&j->q);
    cpulm_sched_req_free(j->r);
    free(j);
}

/* On the worker: JSON, validation, chat template and tokenization. A cancelled job stops
 * between these steps (its client is gone: nothing is answered); one out of time answers
 * 504. */
static void gen_run(cpulm_prep_job *base) {
    gen_job *j = (gen_job *)base;
    j->parsed = (j->flavor ? cpulm_api_parse(j->flavor, j->s->model, j->body, j->n_body,
                                             j->s->p.max_body, &j->q, &j->e)
                           : cpulm_oai_parse(j->kind, j->body, j->n_body, j->s->p.max_body, &j->q,
                                             &j->e)) == CPULM_OK;
    free(j->body);
    j->body = NULL;
    if (!j->parsed) return;
    if (stopped(base, &j->e) < 0) return;
    if (j->q.n > j->s->p.sched.n_parallel)
        cpulm_oai_error_set(&j->e, 400, "n", "'n' must be at most %d on this server",
                            j->s->p.sched.n_parallel);
    else
        j->r = to_sched_req(j->s, &j->q, &j->think, base, &j->e);
}

void cpulm_routes_push_job(cpulm_server *s, cpulm_conn *c, cpulm_prep_job *j) {
    j->deadline = cpulm_clock_s() + CPULM_SERVER_PREP_LIMIT_S;
    c->req_id = j->id;
    cpulm_prep_push(s->prep, j);
}

/* Whether preparing this body may take long: a large body, or fields that compile a
 * grammar (the heavy lane, see prep.h). A cheap scan: a false positive only changes the
 * lane. */
static int heavy_body(const char *b, size_t n) {
    static const char *const keys[] = {"\"grammar\"", "json_schema", "\"tool_choice\"",
                                       "\"response_format\""};
    if (n > CPULM_SERVER_LIGHT_BODY) return 1;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        if (memmem(b, n, keys[k], strlen(keys[k]))) return 1;
    return 0;
}

void *cpulm_routes_new_job(cpulm_server *s, cpulm_conn *c, size_t size, char **body) {
    cpulm_oai_error e;
    if (!cpulm_routes_ready(s)) { /* llama-server's words for its own routes */
        cpulm_oai_error_set(&e, 503, NULL,
                            s->draining                 ? "the server is shutting down"
                            : c->api == CPULM_API_LLAMA ? "Loading model"
                                                        : "the model is still loading");
        respond_error(s, c, &e, "Retry-After: 1\r\n");
        return NULL;
    }
    cpulm_prep_job *j = calloc(1, size);
    *body = j ? malloc(c->body_len ? c->body_len : 1) : NULL;
    if (!*body) {
        free(j);
        cpulm_oai_error_set(&e, 500, NULL, "out of memory");
        respond_error(s, c, &e, NULL);
        return NULL;
    }
    memcpy(*body, c->body, c->body_len);
    j->id = (++s->next_serial << 16) | (uint64_t)c->index;
    return j;
}

void cpulm_routes_generate(cpulm_server *s, cpulm_conn *c, cpulm_oai_kind kind, int flavor) {
    char *body;
    if (cpulm_routes_ready(s) && cpulm_model_is_encoder(s->model)) {
        cpulm_oai_error e;
        cpulm_oai_error_set(&e, 501, NULL,
                            "this model is an encoder: it serves embeddings%s, not text",
                            s->p.rerank ? " and rerank" : "");
        respond_error(s, c, &e, NULL);
        return;
    }
    gen_job *j = cpulm_routes_new_job(s, c, sizeof *j, &body);
    if (!j) return; /* answered */
    j->base.run = gen_run;
    j->base.destroy = gen_destroy;
    j->base.heavy = heavy_body(c->body, c->body_len);
    j->s = s;
    j->kind = kind;
    j->flavor = flavor;
    j->body = body;
    j->n_body = c->body_len;
    cpulm_routes_push_job(s, c, &j->base); /* busy until cpulm_routes_prepared */
}

/* POST /v1/embeddings: a request worker tokenizes, the scheduler embeds, a worker writes
 * the response (embed.c). */
void cpulm_routes_embeddings(cpulm_server *s, cpulm_conn *c, int api) {
    cpulm_oai_error e;
    if (api == CPULM_API_RERANK && !s->p.rerank) { /* llama-server's answer without --rerank */
        cpulm_oai_error_set(&e, 501, NULL,
                            "reranking is not supported by this server: start it with --rerank");
        respond_error(s, c, &e, NULL);
        return;
    }
    if (api != CPULM_API_RERANK && s->p.rerank) {
        cpulm_oai_error_set(&e, 501, NULL,
                            "this server ranks documents (--rerank): use POST /v1/rerank; "
                            "embeddings need a server started with --embeddings");
        respond_error(s, c, &e, NULL);
        return;
    }
    if (!s->p.embeddings) {
        cpulm_oai_error_set(&e, 501, NULL,
                            "this server does not serve embeddings: start it with "
                            "--embeddings");
        respond_error(s, c, &e, NULL);
        return;
    }
    if (!cpulm_routes_ready(s)) {
        cpulm_oai_error_set(&e, 503, NULL,
                            s->draining ? "the server is shutting down"
                                        : "the model is still loading");
        respond_error(s, c, &e, "Retry-After: 1\r\n");
        return;
    }
    uint64_t id = (++s->next_serial << 16) | (uint64_t)c->index;
    cpulm_prep_job *j = cpulm_embed_job_new(s, c->body, c->body_len, id, api);
    if (!j) {
        cpulm_oai_error_set(&e, 500, NULL, "out of memory");
        respond_error(s, c, &e, NULL);
        return;
    }
    cpulm_routes_push_job(s, c, j); /* busy until its response is written */
}

/* An embedding job back from a worker: its inputs go to the scheduler, or its response
 * (or error) to the client. Returns 1 when the scheduler took it. */
static int embed_prepared(cpulm_server *s, cpulm_conn *c, cpulm_prep_job *j) {
    cpulm_sched_embed *se = cpulm_embed_job_ready(j);
    if (se) {
        cpulm_sched_submit_result res = cpulm_sched_embed_submit(s->sched, se);
        if (res == CPULM_SCHED_ACCEPTED) return 1;
        cpulm_oai_error e;
        if (res == CPULM_SCHED_QUEUE_FULL)
            cpulm_oai_error_set(&e, 429, NULL, "the server is busy: %d embedding requests wait",
                                s->p.sched.max_queue);
        else if (res == CPULM_SCHED_STOPPING)
            cpulm_oai_error_set(&e, 503, NULL, "the server is shutting down");
        else
            cpulm_oai_error_set(&e, 400, "input", "invalid input");
        c->req_id = 0;
        respond_error(s, c, &e, e.status == 400 ? NULL : "Retry-After: 1\r\n");
        return 0;
    }
    const char *body;
    size_t n;
    int status = cpulm_embed_job_result(j, &body, &n);
    c->req_id = 0;
    respond(s, c, status, "application/json", body, n, NULL);
    return 0;
}

/* Hands r to the scheduler. A stream sends its header only with its first event (the
 * request is running then), so a request still queued at shutdown can get a plain 503. */
int cpulm_routes_prepared(cpulm_server *s, cpulm_conn *c, cpulm_prep_job *base) {
    if (cpulm_embed_job_is(base)) return embed_prepared(s, c, base);
    if (cpulm_native_job_is(base)) { /* /tokenize, /detokenize, /apply-template, /api/show */
        const char *body;
        size_t n;
        int status = cpulm_native_job_result(base, &body, &n);
        c->req_id = 0;
        respond(s, c, status, "application/json", body, n, NULL);
        return 0;
    }
    gen_job *j = (gen_job *)base;
    route *rt = NULL;
    cpulm_sched_submit_result res = CPULM_SCHED_INVALID;
    if (j->r &&
        (!(rt = route_new(s, &j->q, j->think, j->base.id >> 16)) ||
         (j->flavor && !(rt->api = cpulm_api_state_new(j->flavor, s, &j->q, j->r, j->think))))) {
        cpulm_oai_error_set(&j->e, 500, NULL, "out of memory");
    } else if (j->r) {
        j->r->id = j->base.id;
        res = cpulm_sched_submit(s->sched, j->r);
        if (res == CPULM_SCHED_ACCEPTED) {
            j->r = NULL; /* the scheduler's now */
            c->route = rt;
            return 0;
        }
        submit_error(res, j->r, s, j->kind, &j->e);
    }
    route_free(rt);
    c->req_id = 0;
    respond_error(s, c, &j->e, j->e.status == 429 ? "Retry-After: 1\r\n" : NULL);
    return 0;
}

/* ---- scheduler events ---- */

static void tool_delta(cpulm_buf *b, route *rt, int32_t i, int32_t k, const char *id,
                       const char *name, const char *args, size_t n) {
    cpulm_oai_delta d = {.index = i,
                         .finish = -1,
                         .has_tool = 1,
                         .tool_index = k,
                         .tool_id = id,
                         .tool_name = name,
                         .tool_args = args,
                         .n_tool_args = n};
    cpulm_oai_write_chunk(b, &rt->meta, &d);
}

/* Sends what became known of choice i's calls (see tool_stream). */
static void stream_calls(cpulm_buf *b, route *rt, int32_t i, const cpulm_oai_scan *sc) {
    const char *text = rt->choices[i].text.data;
    tool_stream *ts = &rt->ts[i];
    cpulm_buf tmp;
    cpulm_buf_init(&tmp, 0);
    for (int32_t k = 0; k < sc->n_calls; k++) {
        const cpulm_oai_call *call = &sc->calls[k];
        if (k >= ts->calls_sent) {
            char id[64];
            cpulm_oai_call_id(&rt->meta, i, k, id);
            cpulm_buf_reset(&tmp);
            cpulm_oai_call_name(text, call, &tmp);
            tool_delta(b, rt, i, k, id, tmp.data, "", 0);
            ts->calls_sent = k + 1;
            ts->args_sent[k] = 0;
        }
        if (call->args_is_string || call->args_py || call->args_xml) { /* converted: whole, */
            if (!call->complete || ts->args_sent[k]) continue;         /* once complete */
            cpulm_buf_reset(&tmp);
            cpulm_oai_call_args(text, call, rt->meta.tool_defs, &tmp);
            tool_delta(b, rt, i, k, NULL, NULL, tmp.data, tmp.len);
            ts->args_sent[k] = call->args_len + 1; /* sent (also when the text was empty) */
        } else if (call->args_len > ts->args_sent[k]) {
            tool_delta(b, rt, i, k, NULL, NULL, text + call->args_off + ts->args_sent[k],
                       call->args_len - ts->args_sent[k]);
            ts->args_sent[k] = call->args_len;
        }
    }
    cpulm_buf_release(&tmp);
}

/* An event's text through the choice's <think> or harmony splitter. */
static void split_text(route *rt, const cpulm_sched_event *e, cpulm_buf *txt, cpulm_buf *rsn) {
    const int final = e->kind == CPULM_SCHED_EV_FINISH;
    if (rt->harmony)
        cpulm_harmony_feed(&rt->harmony[e->choice], e->text, e->n_text, final, txt, rsn);
    else
        cpulm_oai_think_feed(&rt->think[e->choice], e->text, e->n_text, final, txt, rsn);
}

/* With <think> splitting, the visible part of an event's text goes to txt and the
 * reasoning to rsn, and *tx, *n point into txt; else they stay the event's text. */
static void split_event(route *rt, const cpulm_sched_event *e, cpulm_buf *txt, cpulm_buf *rsn,
                        const char **tx, size_t *n) {
    *tx = e->text;
    *n = e->n_text;
    if ((!rt->think && !rt->harmony) ||
        (e->kind != CPULM_SCHED_EV_TEXT && e->kind != CPULM_SCHED_EV_FINISH))
        return;
    split_text(rt, e, txt, rsn);
    *tx = txt->data ? txt->data : "";
    *n = txt->len;
}

/* A TEXT or FINISH event of a chat with tools, streamed. */
static void stream_tool_event(cpulm_buf *b, route *rt, const cpulm_sched_event *e, const char *tx,
                              size_t ntx) {
    int32_t i = e->choice;
    cpulm_oai_choice *ch = &rt->choices[i];
    tool_stream *ts = &rt->ts[i];
    if (!rt->started[i]) {
        cpulm_oai_delta open = {.index = i, .text = "", .finish = -1, .first = 1};
        cpulm_oai_write_chunk(b, &rt->meta, &open);
        rt->started[i] = 1;
    }
    cpulm_buf_append(&ch->text, tx, ntx);
    int final = e->kind == CPULM_SCHED_EV_FINISH;
    cpulm_oai_scan sc;
    cpulm_oai_scan_calls(ch->text.data, ch->text.len, final, rt->meta.forced, &sc);
    if (ts->calls_sent == 0 && sc.content_len > ts->content_sent) {
        cpulm_oai_delta d = {.index = i,
                             .text = ch->text.data + ts->content_sent,
                             .n_text = sc.content_len - ts->content_sent,
                             .finish = -1};
        cpulm_oai_write_chunk(b, &rt->meta, &d);
        ts->content_sent = sc.content_len;
    }
    stream_calls(b, rt, i, &sc);
    if (final) {
        int fin = ts->calls_sent && e->finish != CPULM_FINISH_LENGTH ? CPULM_OAI_FINISH_TOOL_CALLS
                                                                     : (int)e->finish;
        cpulm_oai_delta d = {.index = i, .text = "", .finish = fin};
        cpulm_oai_write_chunk(b, &rt->meta, &d);
    }
}

/* Streams the reasoning part of a split event as its own delta (before tool events). */
static void stream_reasoning(cpulm_buf *b, route *rt, int32_t i, const cpulm_buf *rsn) {
    if (!rsn->len) return;
    cpulm_oai_delta d = {.index = i,
                         .text = "",
                         .reasoning = rsn->data,
                         .n_reasoning = rsn->len,
                         .finish = -1,
                         .first = !rt->started[i]};
    cpulm_oai_write_chunk(b, &rt->meta, &d);
    rt->started[i] = 1;
}

static void stream_event(cpulm_conn *c, route *rt, const cpulm_sched_event *e) {
    cpulm_buf b, txt, rsn;
    cpulm_buf_init(&b, 0);
    cpulm_buf_init(&txt, 0);
    cpulm_buf_init(&rsn, 0);
    const char *tx;
    size_t ntx;
    split_event(rt, e, &txt, &rsn, &tx, &ntx);
    int32_t i = e->choice;
    if (rt->meta.tools && (e->kind == CPULM_SCHED_EV_TEXT || e->kind == CPULM_SCHED_EV_FINISH)) {
        stream_reasoning(&b, rt, i, &rsn);
        stream_tool_event(&b, rt, e, tx, ntx);
    } else if (e->kind == CPULM_SCHED_EV_TEXT || e->kind == CPULM_SCHED_EV_FINISH) {
        int first = !rt->started[i];
        if (first && rt->kind == CPULM_OAI_CHAT && e->kind == CPULM_SCHED_EV_FINISH) {
            cpulm_oai_delta open = {.index = i, .text = "", .finish = -1, .first = 1};
            cpulm_oai_write_chunk(&b, &rt->meta, &open); /* role before an empty finish */
            first = 0;
        }
        cpulm_oai_delta d = {.index = i,
                             .text = tx,
                             .n_text = ntx,
                             .reasoning = rsn.data,
                             .n_reasoning = rsn.len,
                             .lp = e->has_lp ? &e->lp : NULL,
                             .first = first && rt->kind == CPULM_OAI_CHAT,
                             .finish = e->kind == CPULM_SCHED_EV_FINISH ? (int)e->finish : -1,
                             .text_offset = rt->offset[i]};
        cpulm_oai_write_chunk(&b, &rt->meta, &d);
        rt->started[i] = 1;
        rt->offset[i] += (int64_t)ntx;
    } else if (e->kind == CPULM_SCHED_EV_DONE) {
        if (rt->meta.include_usage) {
            cpulm_oai_usage u = {e->n_prompt, e->n_completion, e->n_cached, e->n_drafted,
                                 e->n_draft_accepted};
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
    cpulm_buf_release(&txt);
    cpulm_buf_release(&rsn);
}

static void whole_event(cpulm_server *s, cpulm_conn *c, route *rt, const cpulm_sched_event *e) {
    cpulm_oai_choice *ch = &rt->choices[e->choice];
    const int split = rt->think || rt->harmony;
    if (split && (e->kind == CPULM_SCHED_EV_TEXT || e->kind == CPULM_SCHED_EV_FINISH))
        split_text(rt, e, &ch->text, &ch->reasoning);
    if (e->kind == CPULM_SCHED_EV_TEXT) {
        if (!split) cpulm_buf_append(&ch->text, e->text, e->n_text);
        if (e->has_lp) cpulm_oai_choice_add_lp(ch, &e->lp);
    } else if (e->kind == CPULM_SCHED_EV_FINISH) {
        ch->finish = (int)e->finish;
    } else if (e->kind == CPULM_SCHED_EV_DONE) {
        cpulm_oai_usage u = {e->n_prompt, e->n_completion, e->n_cached, e->n_drafted,
                             e->n_draft_accepted};
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
    if (e->kind == CPULM_SCHED_EV_EMBED) { /* embedded: a worker writes the response */
        cpulm_routes_push_job(s, c, cpulm_embed_job_embedded(e->embed));
        return;
    }
    route *rt = c->route;
    if (!rt) return;
    if (rt->api) /* llama-server's or Ollama's shapes (it ends its stream itself) */
        cpulm_api_event(s, c, rt->api, e);
    else if (rt->stream && !c->sse && e->kind == CPULM_SCHED_EV_ERROR)
        rt->stream = 0; /* no header yet */
    else if (rt->stream && !c->sse)
        cpulm_conn_sse_begin(c);
    if (!rt->api && rt->stream)
        stream_event(c, rt, e);
    else if (!rt->api)
        whole_event(s, c, rt, e);
    if (e->kind == CPULM_SCHED_EV_DONE || e->kind == CPULM_SCHED_EV_ERROR) {
        if (rt->stream && !rt->api) cpulm_conn_sse_end(c);
        route_free(rt);
        c->route = NULL;
        c->req_id = 0;
        c->done = 1;
    }
    cpulm_server_output(s, c);
}

void cpulm_routes_expire(cpulm_server *s, cpulm_conn *c) {
    route *rt = c->route;
    if (!c->req_id) return;
    if (s->sched) cpulm_sched_cancel(s->sched, c->req_id);
    if (s->prep) cpulm_prep_cancel(s->prep, c->req_id);
    cpulm_oai_error err;
    cpulm_oai_error_set(&err, 503, NULL, "the server is shutting down: the grace period ended");
    c->keep_alive = 0;
    if (c->sse) { /* an error event, [DONE], then the final chunk */
        cpulm_buf b;
        cpulm_buf_init(&b, 0);
        if (c->api) {
            cpulm_api_write_stream_error(c->api, &b, &err);
        } else {
            cpulm_oai_write_stream_error(&b, &err);
            cpulm_buf_puts(&b, "data: [DONE]\n\n");
        }
        cpulm_conn_sse_frame(c, b.data, b.len);
        cpulm_buf_release(&b);
        cpulm_conn_sse_end(c);
        c->done = 1;
    } else { /* queued, tokenizing or not streamed: nothing was sent yet */
        cpulm_buf b;
        cpulm_buf_init(&b, 0);
        cpulm_api_write_error(c->api, &b, &err);
        cpulm_conn_respond(c, 503, "application/json", b.data, b.len, "Retry-After: 1\r\n");
        cpulm_buf_release(&b);
        c->done = 1;
    }
    route_free(rt);
    c->route = NULL;
    c->req_id = 0;
    cpulm_server_output(s, c);
}

void cpulm_routes_abort(cpulm_server *s, cpulm_conn *c) {
    if (c->req_id && s->sched) cpulm_sched_cancel(s->sched, c->req_id);
    if (c->req_id && s->prep) cpulm_prep_cancel(s->prep, c->req_id);
    c->req_id = 0;
    route_free(c->route);
    c->route = NULL;
}

/* ---- dispatch ---- */

/* Constant-time comparison of the bearer token with the key. */
int cpulm_routes_authorized(const cpulm_server *s, const cpulm_http_msg *m) {
    if (!s->p.api_key || !*s->p.api_key) return 1;
    const cpulm_http_str *h = cpulm_http_header_get(m, "authorization");
    if (!h || h->n < 7 || strncasecmp(h->p, "Bearer ", 7) != 0) return 0;
    const char *tok = h->p + 7;
    size_t n = h->n - 7, k = strlen(s->p.api_key);
    unsigned diff = n != k;
    for (size_t i = 0; i < n && i < k; i++)
        diff |= (unsigned char)(tok[i] ^ s->p.api_key[i]);
    return diff == 0;
}

static int path_is(const cpulm_http_str *p, const char *lit) {
    return p->n == strlen(lit) && memcmp(p->p, lit, p->n) == 0;
}

typedef enum {
    R_HEALTH,
    R_READY,
    R_METRICS,
    R_MODELS,
    R_CHAT,
    R_COMPLETIONS,
    R_EMBEDDINGS,
    R_COUNT
} route_id;

static const struct {
    const char *path, *method;
    int auth;
} table[R_COUNT] = {
    [R_HEALTH] = {"/health", "GET", 0},
    [R_READY] = {"/ready", "GET", 0},
    [R_METRICS] = {"/metrics", "GET", 0},
    [R_MODELS] = {"/v1/models", "GET", 1},
    [R_CHAT] = {"/v1/chat/completions", "POST", 1},
    [R_COMPLETIONS] = {"/v1/completions", "POST", 1},
    [R_EMBEDDINGS] = {"/v1/embeddings", "POST", 1},
};

void cpulm_routes_handle(cpulm_server *s, cpulm_conn *c) {
    const cpulm_http_msg *m = &c->msg;
    int r = 0;
    while (r < R_COUNT && !path_is(&m->path, table[r].path))
        r++;
    cpulm_oai_error e;
    c->api = CPULM_API_OPENAI;
    if (r == R_COUNT && cpulm_native_handle(s, c)) return; /* llama-server's and Ollama's */
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
    if (table[r].auth && !cpulm_routes_authorized(s, m)) {
        cpulm_oai_error_set(&e, 401, NULL,
                            "missing or invalid API key (Authorization: Bearer ...)");
        respond_error(s, c, &e, "WWW-Authenticate: Bearer\r\n");
        return;
    }
    switch ((route_id)r) {
    case R_HEALTH: respond_json(s, c, 200, "{\"status\":\"ok\"}"); break;
    case R_READY:
        if (cpulm_routes_ready(s))
            respond_json(s, c, 200, "{\"status\":\"ready\"}");
        else
            respond_json(s, c, 503,
                         s->draining ? "{\"status\":\"draining\"}" : "{\"status\":\"loading\"}");
        break;
    case R_METRICS: handle_metrics(s, c); break;
    case R_MODELS: handle_models(s, c); break;
    case R_CHAT: cpulm_routes_generate(s, c, CPULM_OAI_CHAT, CPULM_GEN_OPENAI); break;
    case R_COMPLETIONS: cpulm_routes_generate(s, c, CPULM_OAI_COMPLETION, CPULM_GEN_OPENAI); break;
    case R_EMBEDDINGS: cpulm_routes_embeddings(s, c, CPULM_API_OPENAI); break;
    case R_COUNT: break;
    }
}
