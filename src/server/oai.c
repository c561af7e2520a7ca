/* oai.c: OpenAI request validation and response writing (see oai.h).
 *
 * Sampling defaults follow OpenAI, not the CLI: temperature 1, top_p 1, no top-k/min-p,
 * presence/frequency penalties over the generated tokens only. Fields that do not change
 * the output are ignored (clients send many, e.g. "user"); known fields with a wrong type
 * or range are rejected with the parameter named, as OpenAI does, and so are fields of
 * OpenAI's, llama-server's and vLLM's APIs that cpulm does not implement (oai_fields.c).
 */
#include "server/oai.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpulm.h"
#include "server/harmony.h"

/* OpenAI's error type and code of the statuses that have their own (others: by class). */
static const struct {
    int status;
    const char *type, *code;
} error_kinds[] = {
    {401, "authentication_error", "invalid_api_key"},
    {404, "invalid_request_error", "not_found"},
    {429, "rate_limit_error", "rate_limit_exceeded"},
    {503, "server_error", "service_unavailable"},
    {504, "server_error", "timeout"},
};

/* CPULM_PRINTF(4, 0): fmt is checked at the callers' printf-style prototypes. */
static void verror_set(cpulm_oai_error *e, int status, const char *param, const char *fmt,
                       va_list ap) CPULM_PRINTF(4, 0);

static void verror_set(cpulm_oai_error *e, int status, const char *param, const char *fmt,
                       va_list ap) {
    memset(e, 0, sizeof *e);
    e->status = status;
    e->type = status >= 500 ? "server_error" : "invalid_request_error";
    for (size_t i = 0; i < sizeof error_kinds / sizeof error_kinds[0]; i++)
        if (error_kinds[i].status == status) {
            e->type = error_kinds[i].type;
            e->code = error_kinds[i].code;
        }
    if (param) snprintf(e->param, sizeof e->param, "%s", param);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
}

void cpulm_oai_error_set(cpulm_oai_error *e, int status, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    verror_set(e, status, param, fmt, ap);
    va_end(ap);
}

int cpulm_oai_fail(cpulm_oai_error *e, int status, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    verror_set(e, status, param, fmt, ap);
    va_end(ap);
    return -1;
}

int cpulm_oai_http_status(cpulm_status st) {
    if (st == CPULM_OK) return 200;
    return st == CPULM_ERR_NOMEM ? 500 : 400;
}

/* ---- typed field readers: absent and null mean "use the default" ---- */

static const cpulm_json *field(const cpulm_json *root, const char *key) {
    const cpulm_json *v = cpulm_json_get(root, key);
    return v && v->type != CPULM_JSON_NULL ? v : NULL;
}

static int read_num(const cpulm_json *root, const char *key, double lo, double hi, int integer,
                    double *out, cpulm_oai_error *e) {
    const cpulm_json *v = field(root, key);
    if (!v) return 0;
    if (v->type != CPULM_JSON_NUMBER || (integer && !v->is_int))
        return cpulm_oai_fail(e, 400, key, "'%s' must be %s", key,
                              integer ? "an integer" : "a number");
    if (!(v->u.num.f >= lo && v->u.num.f <= hi))
        return cpulm_oai_fail(e, 400, key, "'%s' must be between %g and %g", key, lo, hi);
    *out = v->u.num.f;
    return 1;
}

static int read_bool(const cpulm_json *root, const char *key, int *out, cpulm_oai_error *e) {
    const cpulm_json *v = field(root, key);
    if (!v) return 0;
    if (v->type != CPULM_JSON_BOOL)
        return cpulm_oai_fail(e, 400, key, "'%s' must be a boolean", key);
    *out = v->u.boolean;
    return 1;
}

static int read_stop(const cpulm_json *root, cpulm_oai_request *r, cpulm_oai_error *e) {
    const cpulm_json *v = field(root, "stop");
    if (!v) return 0;
    if (v->type == CPULM_JSON_STRING) {
        if (v->u.str.len) {
            r->stop_len[r->n_stop] = v->u.str.len;
            r->stop[r->n_stop++] = v->u.str.s;
        }
        return 0;
    }
    if (v->type != CPULM_JSON_ARRAY || v->u.list.n > CPULM_OAI_MAX_STOP)
        return cpulm_oai_fail(e, 400, "stop",
                              "'stop' must be a string or an array of at "
                              "most %d strings",
                              CPULM_OAI_MAX_STOP);
    for (size_t i = 0; i < v->u.list.n; i++) {
        const cpulm_json *s = &v->u.list.items[i];
        if (s->type != CPULM_JSON_STRING)
            return cpulm_oai_fail(e, 400, "stop", "'stop' items must be strings");
        if (!s->u.str.len) continue;
        r->stop_len[r->n_stop] = s->u.str.len;
        r->stop[r->n_stop++] = s->u.str.s;
    }
    return 0;
}

/* ---- per-kind inputs ---- */

static int check_content(const cpulm_json *c, size_t i, cpulm_oai_error *e) {
    if (!c || c->type == CPULM_JSON_NULL || c->type == CPULM_JSON_STRING) return 0;
    if (c->type != CPULM_JSON_ARRAY)
        return cpulm_oai_fail(e, 400, "messages",
                              "messages[%zu].content must be a string "
                              "or an array of parts",
                              i);
    for (size_t k = 0; k < c->u.list.n; k++) {
        const cpulm_json *part = &c->u.list.items[k];
        const char *type = cpulm_json_str(cpulm_json_get(part, "type"));
        if (!type || strcmp(type, "text") != 0 || !cpulm_json_str(cpulm_json_get(part, "text")))
            return cpulm_oai_fail(e, 400, "messages",
                                  "messages[%zu].content[%zu]: only "
                                  "text parts are supported",
                                  i, k);
    }
    return 0;
}

/* The roles of OpenAI's chat API. Anything else is refused: a template would render an
 * unknown role as free text the model may trust (a forged "evil" turn). */
static int known_role(const char *role) {
    static const char *const roles[] = {"system",    "developer", "user",
                                        "assistant", "tool",      "function"};
    for (size_t k = 0; k < sizeof roles / sizeof roles[0]; k++)
        if (strcmp(role, roles[k]) == 0) return 1;
    return 0;
}

static int parse_messages(const cpulm_json *root, cpulm_oai_request *r, cpulm_oai_error *e) {
    const cpulm_json *m = field(root, "messages");
    if (!m || m->type != CPULM_JSON_ARRAY || m->u.list.n == 0)
        return cpulm_oai_fail(e, 400, "messages", "'messages' must be a non-empty array");
    for (size_t i = 0; i < m->u.list.n; i++) {
        const cpulm_json *msg = &m->u.list.items[i];
        if (msg->type != CPULM_JSON_OBJECT || !cpulm_json_str(cpulm_json_get(msg, "role")))
            return cpulm_oai_fail(e, 400, "messages",
                                  "messages[%zu] must be an object "
                                  "with a 'role' string",
                                  i);
        if (!known_role(cpulm_json_str(cpulm_json_get(msg, "role"))))
            return cpulm_oai_fail(e, 400, "messages",
                                  "messages[%zu]: unknown role (use "
                                  "system, developer, user, assistant or tool)",
                                  i);
        if (check_content(cpulm_json_get(msg, "content"), i, e) < 0) return -1;
    }
    r->messages = m;
    return 0;
}

static int parse_prompt(const cpulm_json *root, cpulm_oai_request *r, cpulm_oai_error *e) {
    const cpulm_json *p = field(root, "prompt");
    if (p && p->type == CPULM_JSON_ARRAY && p->u.list.n == 1 &&
        p->u.list.items[0].type == CPULM_JSON_STRING)
        p = &p->u.list.items[0]; /* ["text"]: one prompt */
    if (p && p->type == CPULM_JSON_STRING) {
        r->prompt = p->u.str.s;
        r->prompt_len = p->u.str.len;
        return 0;
    }
    if (p && p->type == CPULM_JSON_ARRAY && p->u.list.n > 0) {
        for (size_t i = 0; i < p->u.list.n; i++)
            if (p->u.list.items[i].type != CPULM_JSON_NUMBER || !p->u.list.items[i].is_int)
                return cpulm_oai_fail(e, 400, "prompt",
                                      "'prompt' must be a string, one "
                                      "string in an array, or token ids");
        r->prompt_tokens = p;
        return 0;
    }
    return cpulm_oai_fail(e, 400, "prompt",
                          "'prompt' must be a string, one string in an "
                          "array, or token ids");
}

/* ---- sampling and output options shared by both kinds ---- */

static int parse_sampling(const cpulm_json *root, cpulm_oai_request *r, cpulm_oai_error *e) {
    double v;
    int rc;
    cpulm_sampler_params *sp = &r->sp;
    if ((rc = read_num(root, "temperature", 0, 2, 0, &v, e)) < 0) return -1;
    if (rc) sp->temp = (float)v;
    if ((rc = read_num(root, "top_p", 0, 1, 0, &v, e)) < 0) return -1;
    if (rc) sp->top_p = (float)v;
    if ((rc = read_num(root, "top_k", 0, 1 << 30, 1, &v, e)) < 0) return -1;
    if (rc) sp->top_k = (int32_t)v;
    if ((rc = read_num(root, "min_p", 0, 1, 0, &v, e)) < 0) return -1;
    if (rc) sp->min_p = (float)v;
    if ((rc = read_num(root, "presence_penalty", -2, 2, 0, &v, e)) < 0) return -1;
    if (rc) sp->presence_penalty = (float)v;
    if ((rc = read_num(root, "frequency_penalty", -2, 2, 0, &v, e)) < 0) return -1;
    if (rc) sp->frequency_penalty = (float)v;
    if ((rc = read_num(root, "repeat_penalty", 0, 100, 0, &v, e)) < 0) return -1;
    if (rc) sp->repeat_penalty = (float)v;
    if ((rc = read_num(root, "seed", -9.2e18, 9.2e18, 1, &v, e)) < 0) return -1;
    if (rc) sp->seed = (uint64_t)cpulm_json_get(root, "seed")->u.num.i;
    return 0;
}

static int parse_lengths(const cpulm_json *root, cpulm_oai_request *r, cpulm_oai_error *e) {
    double v;
    int rc;
    if ((rc = read_num(root, "max_tokens", 1, 1 << 24, 1, &v, e)) < 0) return -1;
    if (rc) r->max_tokens = (int32_t)v;
    if ((rc = read_num(root, "max_completion_tokens", 1, 1 << 24, 1, &v, e)) < 0) return -1;
    if (rc) r->max_tokens = (int32_t)v;
    if ((rc = read_num(root, "n", 1, CPULM_OAI_MAX_N, 1, &v, e)) < 0) return -1;
    if (rc) r->n = (int32_t)v;
    return 0;
}

static int parse_logprobs(const cpulm_json *root, cpulm_oai_request *r, cpulm_oai_error *e) {
    double v;
    int rc, on = 0;
    if (r->kind == CPULM_OAI_COMPLETION) { /* legacy: logprobs is an integer 0..5 */
        if ((rc = read_num(root, "logprobs", 0, 5, 1, &v, e)) < 0) return -1;
        if (rc) r->logprobs = (int32_t)v;
        return 0;
    }
    if (read_bool(root, "logprobs", &on, e) < 0) return -1;
    if ((rc = read_num(root, "top_logprobs", 0, CPULM_SCHED_MAX_TOP, 1, &v, e)) < 0) return -1;
    if (rc && !on)
        return cpulm_oai_fail(e, 400, "top_logprobs",
                              "'top_logprobs' requires "
                              "'logprobs': true");
    if (on) r->logprobs = rc ? (int32_t)v : 0;
    return 0;
}

static int parse_stream(const cpulm_json *root, cpulm_oai_request *r, cpulm_oai_error *e) {
    if (read_bool(root, "stream", &r->stream, e) < 0) return -1;
    const cpulm_json *so = field(root, "stream_options");
    if (so) {
        if (so->type != CPULM_JSON_OBJECT)
            return cpulm_oai_fail(e, 400, "stream_options", "'stream_options' must be an object");
        if (!r->stream)
            return cpulm_oai_fail(e, 400, "stream_options",
                                  "'stream_options' is only "
                                  "allowed with 'stream': true");
        if (read_bool(so, "include_usage", &r->include_usage, e) < 0) return -1;
    }
    if (read_bool(root, "ignore_eos", &r->ignore_eos, e) < 0) return -1;
    double prio;
    int rc = read_num(root, "priority", -1e6, 1e6, 1, &prio, e);
    if (rc < 0) return -1;
    if (rc) r->priority = (int32_t)prio;
    int echo = 0;
    if (read_bool(root, "echo", &echo, e) < 0) return -1;
    if (echo) return cpulm_oai_fail(e, 400, "echo", "'echo' is not supported");
    const cpulm_json *model = field(root, "model");
    if (model && model->type != CPULM_JSON_STRING)
        return cpulm_oai_fail(e, 400, "model", "'model' must be a string");
    r->model = cpulm_json_str(model);
    return 0;
}

/* chat_template_kwargs (vLLM, llama-server): only enable_thinking is honoured; other
 * members are accepted and ignored. */
static int parse_template_kwargs(const cpulm_json *root, cpulm_oai_request *r, cpulm_oai_error *e) {
    const cpulm_json *kw = field(root, "chat_template_kwargs");
    if (!kw) return 0;
    if (kw->type != CPULM_JSON_OBJECT)
        return cpulm_oai_fail(e, 400, "chat_template_kwargs",
                              "'chat_template_kwargs' must be an object");
    return read_bool(kw, "enable_thinking", &r->enable_thinking, e);
}

static void defaults(cpulm_oai_request *r, cpulm_oai_kind kind) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->max_tokens = -1;
    r->n = 1;
    r->logprobs = -1;
    r->sp = cpulm_sampler_default_params();
    r->sp.temp = 1.0f;
    r->sp.top_k = 0;
    r->sp.top_p = 1.0f;
    r->sp.min_p = 0.0f;
    r->sp.repeat_last_n = -1; /* OpenAI penalties count every generated token */
    r->enable_thinking = 1;
    r->spec_n_max = r->spec_n_min = -1;
    r->spec_p_min = -1.0f;
}

cpulm_status cpulm_oai_parse(cpulm_oai_kind kind, const char *body, size_t len, size_t max_body,
                             cpulm_oai_request *r, cpulm_oai_error *e) {
    defaults(r, kind);
    cpulm_json_limits lim = cpulm_json_default_limits();
    lim.max_bytes = max_body;
    lim.max_depth = 64;
    cpulm_error jerr;
    if (cpulm_json_parse(body, len, &lim, &r->doc, NULL, &jerr) != CPULM_OK) {
        cpulm_oai_error_set(e, 400, NULL, "invalid JSON body: %s", jerr.msg);
        return CPULM_ERR_FORMAT;
    }
    const cpulm_json *root = cpulm_json_root(r->doc);
    int bad = root->type != CPULM_JSON_OBJECT;
    if (bad) cpulm_oai_error_set(e, 400, NULL, "the request body must be a JSON object");
    if (!bad)
        bad = (kind == CPULM_OAI_CHAT ? parse_messages(root, r, e) : parse_prompt(root, r, e)) < 0;
    if (!bad) bad = parse_sampling(root, r, e) < 0 || parse_lengths(root, r, e) < 0;
    if (!bad) bad = parse_logprobs(root, r, e) < 0 || parse_stream(root, r, e) < 0;
    if (!bad) bad = read_stop(root, r, e) < 0;
    if (!bad) bad = cpulm_oai_parse_structured(root, r, e) < 0;
    if (!bad && kind == CPULM_OAI_CHAT) bad = parse_template_kwargs(root, r, e) < 0;
    if (!bad) bad = cpulm_oai_parse_fields(root, r, e) < 0;
    if (bad) {
        cpulm_oai_request_release(r);
        return CPULM_ERR_INVALID_ARG;
    }
    return CPULM_OK;
}

void cpulm_oai_request_release(cpulm_oai_request *r) {
    cpulm_json_free(r->doc);
    r->doc = NULL;
    free(r->grammar);
    r->grammar = NULL;
}

/* ---- chat prompt ---- */

/* Text of a content array: its text parts joined with newlines (checked by parse). */
static void write_joined_content(cpulm_json_writer *w, const cpulm_json *c) {
    cpulm_buf t;
    cpulm_buf_init(&t, 0);
    for (size_t k = 0; k < c->u.list.n; k++) {
        const cpulm_json *x = cpulm_json_get(&c->u.list.items[k], "text");
        if (k) cpulm_buf_putc(&t, '\n');
        cpulm_buf_append(&t, x->u.str.s, x->u.str.len);
    }
    cpulm_json_write_strn(w, t.data, t.len);
    cpulm_buf_release(&t);
}

/* tool_calls with each function.arguments string given as the object it holds (templates
 * write arguments with tojson); arguments that are not JSON stay strings. */
static void write_tool_calls(cpulm_json_writer *w, const cpulm_json *calls) {
    if (calls->type != CPULM_JSON_ARRAY) {
        cpulm_json_write_value(w, calls);
        return;
    }
    cpulm_json_arr_begin(w);
    for (size_t i = 0; i < calls->u.list.n; i++) {
        const cpulm_json *c = &calls->u.list.items[i];
        if (c->type != CPULM_JSON_OBJECT) {
            cpulm_json_write_value(w, c);
            continue;
        }
        cpulm_json_obj_begin(w);
        for (size_t k = 0; k < c->u.list.n; k++) {
            const cpulm_json *f = &c->u.list.items[k];
            cpulm_json_keyn(w, f->key, f->key_len);
            if (strcmp(f->key, "function") != 0 || f->type != CPULM_JSON_OBJECT) {
                cpulm_json_write_value(w, f);
                continue;
            }
            cpulm_json_obj_begin(w);
            for (size_t j = 0; j < f->u.list.n; j++) {
                const cpulm_json *x = &f->u.list.items[j];
                cpulm_json_doc *d = NULL;
                cpulm_json_keyn(w, x->key, x->key_len);
                if (!strcmp(x->key, "arguments") && x->type == CPULM_JSON_STRING &&
                    cpulm_json_parse(x->u.str.s, x->u.str.len, NULL, &d, NULL, NULL) == CPULM_OK)
                    cpulm_json_write_value(w, cpulm_json_root(d));
                else
                    cpulm_json_write_value(w, x);
                cpulm_json_free(d);
            }
            cpulm_json_obj_end(w);
        }
        cpulm_json_obj_end(w);
    }
    cpulm_json_arr_end(w);
}

/* The messages as the template sees them: every member kept, array contents joined,
 * tool-call arguments as objects; sys (if non-empty) is a system message put first. */
static cpulm_status messages_json(const cpulm_json *messages, const cpulm_buf *sys,
                                  cpulm_buf *out) {
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, out, 0, 0);
    cpulm_json_arr_begin(&w);
    if (sys && sys->len) cpulm_json_write_raw(&w, sys->data, sys->len);
    for (size_t i = 0; i < messages->u.list.n; i++) {
        const cpulm_json *m = &messages->u.list.items[i];
        cpulm_json_obj_begin(&w);
        for (size_t k = 0; k < m->u.list.n; k++) {
            const cpulm_json *f = &m->u.list.items[k];
            cpulm_json_keyn(&w, f->key, f->key_len);
            if (!strcmp(f->key, "content") && f->type == CPULM_JSON_ARRAY)
                write_joined_content(&w, f);
            else if (!strcmp(f->key, "tool_calls"))
                write_tool_calls(&w, f);
            else
                cpulm_json_write_value(&w, f);
        }
        cpulm_json_obj_end(&w);
    }
    cpulm_json_arr_end(&w);
    return cpulm_json_writer_status(&w);
}

/* {"tools": [...], "reasoning_effort": "..."} (those given) for the template's variables. */
static void extra_vars(const cpulm_json *tools, const char *effort, cpulm_buf *out) {
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, out, 0, 0);
    cpulm_json_obj_begin(&w);
    if (tools) {
        cpulm_json_key(&w, "tools");
        cpulm_json_write_value(&w, tools);
    }
    if (effort && *effort) {
        cpulm_json_kv_str(&w, "reasoning_effort", effort);
    }
    cpulm_json_obj_end(&w);
}

static cpulm_status render_chat(const char *tmpl, const char *bos, const char *eos,
                                const cpulm_json *messages, const cpulm_json *tools,
                                int enable_thinking, const char *effort, cpulm_buf *out,
                                cpulm_oai_chat_prompt *info, cpulm_oai_error *e);

cpulm_status cpulm_oai_render_chat(const char *tmpl, const char *bos, const char *eos,
                                   const cpulm_json *messages, cpulm_buf *out,
                                   cpulm_oai_chat_prompt *info, cpulm_oai_error *e) {
    return cpulm_oai_render_chat_tools(tmpl, bos, eos, messages, NULL, out, info, e);
}

cpulm_status cpulm_oai_render_chat_tools(const char *tmpl, const char *bos, const char *eos,
                                         const cpulm_json *messages, const cpulm_json *tools,
                                         cpulm_buf *out, cpulm_oai_chat_prompt *info,
                                         cpulm_oai_error *e) {
    return cpulm_oai_render_chat_full(tmpl, bos, eos, messages, tools, 1, out, info, e);
}

cpulm_status cpulm_oai_render_chat_full(const char *tmpl, const char *bos, const char *eos,
                                        const cpulm_json *messages, const cpulm_json *tools,
                                        int enable_thinking, cpulm_buf *out,
                                        cpulm_oai_chat_prompt *info, cpulm_oai_error *e) {
    return render_chat(tmpl, bos, eos, messages, tools, enable_thinking, NULL, out, info, e);
}

cpulm_status cpulm_oai_render_chat_req(const char *tmpl, const char *bos, const char *eos,
                                       const cpulm_oai_request *q, cpulm_buf *out,
                                       cpulm_oai_chat_prompt *info, cpulm_oai_error *e) {
    const cpulm_json *tools = q->tool_choice != CPULM_OAI_TOOLS_OFF ? q->tools : NULL;
    return render_chat(tmpl, bos, eos, q->messages, tools, q->enable_thinking, q->reasoning_effort,
                       out, info, e);
}

static cpulm_status render_chat(const char *tmpl, const char *bos, const char *eos,
                                const cpulm_json *messages, const cpulm_json *tools,
                                int enable_thinking, const char *effort, cpulm_buf *out,
                                cpulm_oai_chat_prompt *info, cpulm_oai_error *e) {
    int plain = !tmpl || !*tmpl;
    info->parse_special = !plain;
    info->extra_stop = plain ? "\nUser:" : "";
    cpulm_buf js, sys, extra;
    cpulm_buf_init(&js, 0);
    cpulm_buf_init(&sys, 0);
    cpulm_buf_init(&extra, 0);
    cpulm_chat_params p = cpulm_chat_default_params();
    p.add_generation_prompt = 1;
    p.bos_token = bos;
    p.eos_token = eos;
    p.enable_thinking = enable_thinking;
    info->think = !plain && strstr(tmpl, "<think>") != NULL;
    info->think_open = 0;
    const int tools_sys = tools && (plain || !strstr(tmpl, "tools"));
    if (tools_sys) cpulm_oai_tool_system_msg(tools, &sys);
    if ((tools && !tools_sys) || (effort && *effort)) {
        extra_vars(tools_sys ? NULL : tools, effort, &extra);
        p.extra_json = extra.data;
    }
    char *text = NULL;
    cpulm_error err = {0};
    cpulm_status st = messages_json(messages, &sys, &js);
    if (st == CPULM_OK)
        st = cpulm_chat_render_json(plain ? cpulm_chat_builtin("plain") : tmpl, js.data, &p, &text,
                                    &err);
    cpulm_buf_release(&js);
    cpulm_buf_release(&sys);
    cpulm_buf_release(&extra);
    if (st != CPULM_OK) {
        cpulm_oai_error_set(e, cpulm_oai_http_status(st), "messages",
                            "cannot apply the chat template: %s",
                            err.msg[0] ? err.msg : cpulm_status_str(st));
        return st;
    }
    size_t bl = bos ? strlen(bos) : 0;
    info->add_bos = !(bl && strncmp(text, bos, bl) == 0);
    info->think_open = info->think && cpulm_chat_opens_think(text, strlen(text));
    info->harmony = !plain && cpulm_harmony_template(tmpl);
    info->harmony_start = info->harmony ? cpulm_harmony_start(text, strlen(text)) : 0;
    cpulm_buf_puts(out, text);
    free(text);
    if (cpulm_buf_status(out) != CPULM_OK) {
        cpulm_oai_error_set(e, 400, "messages", "the rendered prompt is too long");
        return CPULM_ERR_TOO_SMALL;
    }
    return CPULM_OK;
}

/* ---- errors ---- */

static void write_error_obj(cpulm_json_writer *w, const cpulm_oai_error *e) {
    cpulm_json_kv_obj_begin(w, "error");
    cpulm_json_kv_str(w, "message", e->message);
    cpulm_json_kv_str(w, "type", e->type ? e->type : "server_error");
    cpulm_json_key(w, "param");
    if (e->param[0])
        cpulm_json_write_str(w, e->param);
    else
        cpulm_json_write_null(w);
    cpulm_json_key(w, "code");
    if (e->code)
        cpulm_json_write_str(w, e->code);
    else
        cpulm_json_write_null(w);
    cpulm_json_obj_end(w);
}

void cpulm_oai_write_error(cpulm_buf *out, const cpulm_oai_error *e) {
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, out, 0, 0);
    cpulm_json_obj_begin(&w);
    write_error_obj(&w, e);
    cpulm_json_obj_end(&w);
}

void cpulm_oai_write_stream_error(cpulm_buf *out, const cpulm_oai_error *e) {
    cpulm_buf_puts(out, "data: ");
    cpulm_oai_write_error(out, e);
    cpulm_buf_puts(out, "\n\n");
}

/* ---- choices ---- */

void cpulm_oai_choice_init(cpulm_oai_choice *c) {
    memset(c, 0, sizeof *c);
    cpulm_buf_init(&c->text, 0);
    cpulm_buf_init(&c->reasoning, 0);
    c->finish = -1;
}

void cpulm_oai_choice_release(cpulm_oai_choice *c) {
    cpulm_buf_release(&c->text);
    cpulm_buf_release(&c->reasoning);
    free(c->lp);
    c->lp = NULL;
    c->n_lp = c->cap_lp = 0;
}

cpulm_status cpulm_oai_choice_add_lp(cpulm_oai_choice *c, const cpulm_sched_lp *lp) {
    if (c->n_lp == c->cap_lp) {
        int32_t cap = c->cap_lp ? c->cap_lp * 2 : 16;
        cpulm_sched_lp *p = realloc(c->lp, sizeof *p * (size_t)cap);
        if (!p) return CPULM_ERR_NOMEM;
        c->lp = p;
        c->cap_lp = cap;
    }
    c->lp[c->n_lp++] = *lp;
    return CPULM_OK;
}

cpulm_status cpulm_oai_think_feed(cpulm_chat_think *f, const char *s, size_t n, int final,
                                  cpulm_buf *text, cpulm_buf *reasoning) {
    /* in slices so the scratch stays small whatever the event size */
    char out[512 + 16], rsn[512 + 16];
    cpulm_status st = CPULM_OK;
    for (size_t off = 0; off < n || final; off += 512) {
        int32_t k = (int32_t)(n - off < 512 ? n - off : 512), nr = 0;
        int32_t nt =
            k ? cpulm_chat_think_split(f, s + off, k, out, rsn, (int32_t)sizeof out, &nr) : 0;
        if (nt < 0) return CPULM_ERR_INVALID_ARG;
        if (cpulm_buf_append(text, out, (size_t)nt) != CPULM_OK) st = CPULM_ERR_NOMEM;
        if (cpulm_buf_append(reasoning, rsn, (size_t)nr) != CPULM_OK) st = CPULM_ERR_NOMEM;
        if (off + (size_t)k >= n && final) { /* the end: what was held back */
            nt = cpulm_chat_think_split(f, NULL, 0, out, rsn, (int32_t)sizeof out, &nr);
            if (nt < 0) return CPULM_ERR_INVALID_ARG;
            if (cpulm_buf_append(text, out, (size_t)nt) != CPULM_OK) st = CPULM_ERR_NOMEM;
            if (cpulm_buf_append(reasoning, rsn, (size_t)nr) != CPULM_OK) st = CPULM_ERR_NOMEM;
            break;
        }
    }
    return st;
}

/* ---- logprobs ---- */

/* The token's raw bytes (may be a partial UTF-8 sequence for byte tokens). */
static int32_t piece(const cpulm_model *m, cpulm_token t, char *buf, int32_t cap) {
    int32_t n = 0;
    if (cpulm_token_to_piece(m, t, 1, buf, cap, &n) != CPULM_OK) n = 0;
    return n;
}

static void write_token_obj(cpulm_json_writer *w, const cpulm_model *m, cpulm_token t, float lp) {
    char buf[256];
    int32_t n = piece(m, t, buf, sizeof buf);
    cpulm_json_obj_begin(w);
    cpulm_json_kv_strn(w, "token", buf, (size_t)n);
    cpulm_json_kv_double(w, "logprob", lp);
    cpulm_json_kv_arr_begin(w, "bytes");
    for (int32_t i = 0; i < n; i++)
        cpulm_json_write_int(w, (unsigned char)buf[i]);
    cpulm_json_arr_end(w);
}

/* Chat shape: {"content": [{token, logprob, bytes, top_logprobs: [...]}], "refusal": null} */
static void write_chat_lp(cpulm_json_writer *w, const cpulm_model *m, const cpulm_sched_lp *lp,
                          int32_t n) {
    cpulm_json_obj_begin(w);
    cpulm_json_kv_arr_begin(w, "content");
    for (int32_t i = 0; i < n; i++) {
        write_token_obj(w, m, lp[i].token, lp[i].logprob);
        cpulm_json_kv_arr_begin(w, "top_logprobs");
        for (int32_t k = 0; k < lp[i].n_top; k++) {
            write_token_obj(w, m, lp[i].top[k].token, lp[i].top[k].logprob);
            cpulm_json_obj_end(w);
        }
        cpulm_json_arr_end(w);
        cpulm_json_obj_end(w);
    }
    cpulm_json_arr_end(w);
    cpulm_json_kv_null(w, "refusal");
    cpulm_json_obj_end(w);
}

/* Legacy completions shape: parallel arrays plus {token: logprob} maps. */
static void write_completion_lp(cpulm_json_writer *w, const cpulm_model *m,
                                const cpulm_sched_lp *lp, int32_t n, int64_t offset) {
    char buf[256];
    cpulm_json_obj_begin(w);
    cpulm_json_kv_arr_begin(w, "tokens");
    for (int32_t i = 0; i < n; i++) {
        int32_t k = piece(m, lp[i].token, buf, sizeof buf);
        cpulm_json_write_strn(w, buf, (size_t)k);
    }
    cpulm_json_arr_end(w);
    cpulm_json_kv_arr_begin(w, "token_logprobs");
    for (int32_t i = 0; i < n; i++)
        cpulm_json_write_double(w, lp[i].logprob);
    cpulm_json_arr_end(w);
    cpulm_json_kv_arr_begin(w, "top_logprobs");
    for (int32_t i = 0; i < n; i++) {
        cpulm_json_obj_begin(w);
        for (int32_t k = 0; k < lp[i].n_top; k++) {
            int32_t len = piece(m, lp[i].top[k].token, buf, sizeof buf);
            cpulm_json_keyn(w, buf, (size_t)len);
            cpulm_json_write_double(w, lp[i].top[k].logprob);
        }
        cpulm_json_obj_end(w);
    }
    cpulm_json_arr_end(w);
    cpulm_json_kv_arr_begin(w, "text_offset");
    for (int32_t i = 0; i < n; i++) {
        cpulm_json_write_int(w, offset);
        offset += piece(m, lp[i].token, buf, sizeof buf);
    }
    cpulm_json_arr_end(w);
    cpulm_json_obj_end(w);
}

static void write_lp(cpulm_json_writer *w, const cpulm_oai_meta *meta, const cpulm_sched_lp *lp,
                     int32_t n, int64_t offset) {
    cpulm_json_key(w, "logprobs");
    if (meta->logprobs < 0 || !lp)
        cpulm_json_write_null(w);
    else if (meta->kind == CPULM_OAI_CHAT)
        write_chat_lp(w, meta->m, lp, n);
    else
        write_completion_lp(w, meta->m, lp, n, offset);
}

/* ---- responses ---- */

static const char *finish_str(int finish) {
    return finish == CPULM_FINISH_LENGTH           ? "length"
           : finish == CPULM_OAI_FINISH_TOOL_CALLS ? "tool_calls"
                                                   : "stop";
}

void cpulm_oai_call_id(const cpulm_oai_meta *meta, int32_t choice, int32_t k, char out[64]) {
    const char *dash = strrchr(meta->id, '-');
    snprintf(out, 64, "call_%.24s%d%d", dash ? dash + 1 : meta->id, (int)choice, (int)k);
}

/* "tool_calls": [{id, type, function: {name, arguments}}] of a finished reply. */
static void write_tool_calls_out(cpulm_json_writer *w, const cpulm_oai_meta *meta, int32_t choice,
                                 const char *text, const cpulm_oai_scan *sc) {
    cpulm_json_kv_arr_begin(w, "tool_calls");
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    for (int32_t k = 0; k < sc->n_calls; k++) {
        char id[64];
        cpulm_oai_call_id(meta, choice, k, id);
        cpulm_json_obj_begin(w);
        cpulm_json_kv_str(w, "id", id);
        cpulm_json_kv_str(w, "type", "function");
        cpulm_json_kv_obj_begin(w, "function");
        cpulm_json_key(w, "name");
        cpulm_buf_reset(&b);
        cpulm_oai_call_name(text, &sc->calls[k], &b);
        cpulm_json_write_strn(w, b.data, b.len);
        cpulm_json_key(w, "arguments");
        cpulm_buf_reset(&b);
        cpulm_oai_call_args(text, &sc->calls[k], meta->tool_defs, &b);
        cpulm_json_write_strn(w, b.data, b.len);
        cpulm_json_obj_end(w);
        cpulm_json_obj_end(w);
    }
    cpulm_buf_release(&b);
    cpulm_json_arr_end(w);
}

/* Content before the calls, without the whitespace around it; NULL when empty. */
static void write_call_content(cpulm_json_writer *w, const char *text, size_t n) {
    size_t a = 0;
    while (a < n && strchr(" \n\t\r", text[a]))
        a++;
    while (n > a && strchr(" \n\t\r", text[n - 1]))
        n--;
    if (n > a)
        cpulm_json_write_strn(w, text + a, n - a);
    else
        cpulm_json_write_null(w);
}

static void write_head(cpulm_json_writer *w, const cpulm_oai_meta *meta, int chunk) {
    static const char *objects[2][2] = {{"chat.completion", "chat.completion.chunk"},
                                        {"text_completion", "text_completion"}};
    cpulm_json_kv_str(w, "id", meta->id);
    cpulm_json_kv_str(w, "object", objects[meta->kind][chunk]);
    cpulm_json_kv_int(w, "created", meta->created);
    cpulm_json_kv_str(w, "model", meta->model);
    cpulm_json_kv_str(w, "system_fingerprint", "cpulm");
}

static void write_usage(cpulm_json_writer *w, const cpulm_oai_usage *u) {
    cpulm_json_kv_obj_begin(w, "usage");
    cpulm_json_kv_int(w, "prompt_tokens", u->prompt_tokens);
    cpulm_json_kv_int(w, "completion_tokens", u->completion_tokens);
    cpulm_json_kv_int(w, "total_tokens", (int64_t)u->prompt_tokens + u->completion_tokens);
    cpulm_json_kv_obj_begin(w, "prompt_tokens_details");
    cpulm_json_kv_int(w, "cached_tokens", u->cached_tokens);
    cpulm_json_obj_end(w);
    cpulm_json_obj_end(w);
    if (u->draft_n <= 0) return;
    cpulm_json_kv_obj_begin(w, "timings");
    cpulm_json_kv_int(w, "draft_n", u->draft_n);
    cpulm_json_kv_int(w, "draft_n_accepted", u->draft_n_accepted);
    cpulm_json_obj_end(w);
}

static void write_choice(cpulm_json_writer *w, const cpulm_oai_meta *meta, int32_t i,
                         const cpulm_oai_choice *c) {
    cpulm_json_obj_begin(w);
    cpulm_json_kv_int(w, "index", i);
    cpulm_oai_scan sc = {0};
    if (meta->tools && c->finish != CPULM_FINISH_LENGTH)
        cpulm_oai_scan_calls(c->text.data, c->text.len, 1, meta->forced, &sc);
    if (meta->kind == CPULM_OAI_CHAT) {
        cpulm_json_kv_obj_begin(w, "message");
        cpulm_json_kv_str(w, "role", "assistant");
        cpulm_json_key(w, "content");
        if (sc.n_calls)
            write_call_content(w, c->text.data, sc.content_len);
        else
            cpulm_json_write_strn(w, c->text.data, c->text.len);
        size_t nr = c->reasoning.len; /* the whitespace before </think> is not reasoning */
        while (nr > 0 && (c->reasoning.data[nr - 1] == '\n' || c->reasoning.data[nr - 1] == ' '))
            nr--;
        if (nr) {
            cpulm_json_kv_strn(w, "reasoning_content", c->reasoning.data, nr);
        }
        cpulm_json_kv_null(w, "refusal");
        if (sc.n_calls) write_tool_calls_out(w, meta, i, c->text.data, &sc);
        cpulm_json_obj_end(w);
    } else {
        cpulm_json_kv_strn(w, "text", c->text.data, c->text.len);
    }
    write_lp(w, meta, c->lp, c->n_lp, 0);
    cpulm_json_kv_str(w, "finish_reason",
                      finish_str(sc.n_calls ? CPULM_OAI_FINISH_TOOL_CALLS : c->finish));
    cpulm_json_obj_end(w);
}

void cpulm_oai_write_response(cpulm_buf *out, const cpulm_oai_meta *meta,
                              const cpulm_oai_choice *choices, int32_t n,
                              const cpulm_oai_usage *u) {
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, out, 0, 0);
    cpulm_json_obj_begin(&w);
    write_head(&w, meta, 0);
    cpulm_json_kv_arr_begin(&w, "choices");
    for (int32_t i = 0; i < n; i++)
        write_choice(&w, meta, i, &choices[i]);
    cpulm_json_arr_end(&w);
    write_usage(&w, u);
    cpulm_json_obj_end(&w);
}

/* delta.tool_calls as OpenAI streams them: the first delta of a call carries index, id,
 * type and function {name, arguments: ""}; later ones index and an arguments fragment. */
static void write_tool_delta(cpulm_json_writer *w, const cpulm_oai_delta *d) {
    cpulm_json_kv_arr_begin(w, "tool_calls");
    cpulm_json_obj_begin(w);
    cpulm_json_kv_int(w, "index", d->tool_index);
    if (d->tool_id) {
        cpulm_json_kv_str(w, "id", d->tool_id);
        cpulm_json_kv_str(w, "type", "function");
    }
    cpulm_json_kv_obj_begin(w, "function");
    if (d->tool_name) {
        cpulm_json_kv_str(w, "name", d->tool_name);
    }
    cpulm_json_kv_strn(w, "arguments", d->tool_args ? d->tool_args : "", d->n_tool_args);
    cpulm_json_obj_end(w);
    cpulm_json_obj_end(w);
    cpulm_json_arr_end(w);
}

static void write_delta(cpulm_json_writer *w, const cpulm_oai_meta *meta,
                        const cpulm_oai_delta *d) {
    if (meta->kind == CPULM_OAI_CHAT) {
        cpulm_json_kv_obj_begin(w, "delta");
        if (d->first) {
            cpulm_json_kv_str(w, "role", "assistant");
        }
        if (d->has_tool) {
            write_tool_delta(w, d);
        } else if (d->first || d->n_text || (d->finish < 0 && !d->n_reasoning)) {
            cpulm_json_kv_strn(w, "content", d->text ? d->text : "", d->n_text);
        }
        if (d->n_reasoning) {
            cpulm_json_kv_strn(w, "reasoning_content", d->reasoning, d->n_reasoning);
        }
        cpulm_json_obj_end(w);
    } else {
        cpulm_json_kv_strn(w, "text", d->text ? d->text : "", d->n_text);
    }
}

/* An SSE chunk up to its open "choices" array. */
static void chunk_begin(cpulm_json_writer *w, cpulm_buf *out, const cpulm_oai_meta *meta) {
    cpulm_buf_puts(out, "data: ");
    cpulm_json_writer_init(w, out, 0, 0);
    cpulm_json_obj_begin(w);
    write_head(w, meta, 1);
    cpulm_json_kv_arr_begin(w, "choices");
}

void cpulm_oai_write_chunk(cpulm_buf *out, const cpulm_oai_meta *meta, const cpulm_oai_delta *d) {
    cpulm_json_writer w;
    chunk_begin(&w, out, meta);
    cpulm_json_obj_begin(&w);
    cpulm_json_kv_int(&w, "index", d->index);
    write_delta(&w, meta, d);
    write_lp(&w, meta, d->lp, d->lp ? 1 : 0, d->text_offset);
    cpulm_json_key(&w, "finish_reason");
    if (d->finish >= 0)
        cpulm_json_write_str(&w, finish_str(d->finish));
    else
        cpulm_json_write_null(&w);
    cpulm_json_obj_end(&w);
    cpulm_json_arr_end(&w);
    if (meta->include_usage) {
        cpulm_json_kv_null(&w, "usage");
    }
    cpulm_json_obj_end(&w);
    cpulm_buf_puts(out, "\n\n");
}

void cpulm_oai_write_usage_chunk(cpulm_buf *out, const cpulm_oai_meta *meta,
                                 const cpulm_oai_usage *u) {
    cpulm_json_writer w;
    chunk_begin(&w, out, meta);
    cpulm_json_arr_end(&w);
    write_usage(&w, u);
    cpulm_json_obj_end(&w);
    cpulm_buf_puts(out, "\n\n");
}

void cpulm_oai_write_models(cpulm_buf *out, const char *model, int64_t created) {
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, out, 0, 0);
    cpulm_json_obj_begin(&w);
    cpulm_json_kv_str(&w, "object", "list");
    cpulm_json_kv_arr_begin(&w, "data");
    cpulm_json_obj_begin(&w);
    cpulm_json_kv_str(&w, "id", model);
    cpulm_json_kv_str(&w, "object", "model");
    cpulm_json_kv_int(&w, "created", created);
    cpulm_json_kv_str(&w, "owned_by", "cpulm");
    cpulm_json_obj_end(&w);
    cpulm_json_arr_end(&w);
    cpulm_json_obj_end(&w);
}
