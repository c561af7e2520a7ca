/* ollama.c: Ollama's API (POST /api/generate, /api/chat, /api/show, GET
 * /api/tags, /api/ps, /api/version) on the same server, so Ollama's clients work
 * unchanged. The one model is listed under the server's alias; requests may name any
 * model (as the OpenAI routes accept any "model").
 *
 * Requests are rewritten into the OpenAI shape and parsed by cpulm_oai_parse, so every
 * field is validated in one place: "options" become sampling fields (Ollama's defaults
 * temperature 0.8, top_k 40, top_p 0.9, repeat_penalty 1.1, repeat_last_n 64 fill the
 * gaps), "format" becomes a JSON object or a JSON-schema constraint, "think" the template's
 * enable_thinking. Answers stream as NDJSON (one JSON object per line, "done": false,
 * then a last one with "done": true and the counts and durations in nanoseconds) unless
 * "stream": false.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "cpulm.h"
#include "server/native.h"

static const cpulm_json *field(const cpulm_json *root, const char *key) {
    const cpulm_json *v = cpulm_json_get(root, key);
    return v && v->type != CPULM_JSON_NULL ? v : NULL;
}

static int is_empty(const cpulm_json *v) {
    if (!v) return 1;
    if (v->type == CPULM_JSON_STRING) return v->u.str.len == 0;
    return (v->type == CPULM_JSON_ARRAY || v->type == CPULM_JSON_OBJECT) && v->u.list.n == 0;
}

/* ---- requests: Ollama's shape -> OpenAI's ---- */

/* options{} -> sampling fields. Options that only steer Ollama's runner (num_gpu, num_thread,
 * use_mmap, ...) or that cpulm fixes per server (num_ctx: -c) change nothing and are
 * dropped; the rest keep their names, so cpulm_oai_parse checks them (and refuses
 * mirostat, tfs_z, ... unless off). */
static void write_options(cpulm_json_writer *w, const cpulm_json *opt) {
    static const char *const same[] = {
        "temperature",    "top_k", "top_p",    "min_p", "typical_p",        "repeat_last_n",
        "repeat_penalty", "stop",  "mirostat", "tfs_z", "presence_penalty", "frequency_penalty"};
    static const struct {
        const char *key;
        double v;
    } defaults[] = {{"temperature", 0.8},
                    {"top_k", 40},
                    {"top_p", 0.9},
                    {"repeat_penalty", 1.1},
                    {"repeat_last_n", 64}};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        const cpulm_json *v = opt ? field(opt, same[i]) : NULL;
        if (!v) continue;
        cpulm_json_key(w, same[i]);
        cpulm_json_write_value(w, v);
    }
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
        if (opt && field(opt, defaults[i].key)) continue;
        cpulm_json_kv_double(w, defaults[i].key, defaults[i].v);
    }
    const cpulm_json *np = opt ? field(opt, "num_predict") : NULL;
    if (np && !(np->type == CPULM_JSON_NUMBER && np->u.num.f <= 0)) { /* -1, -2: no limit */
        cpulm_json_key(w, "max_tokens");
        cpulm_json_write_value(w, np);
    }
    const cpulm_json *seed = opt ? field(opt, "seed") : NULL;
    if (seed && !(seed->type == CPULM_JSON_NUMBER && seed->u.num.f < 0)) { /* -1: random */
        cpulm_json_key(w, "seed");
        cpulm_json_write_value(w, seed);
    }
}

/* format: "json" (any JSON object) or a JSON schema. */
static int write_format(cpulm_json_writer *w, const cpulm_json *fmt, cpulm_oai_error *e) {
    if (!fmt || (fmt->type == CPULM_JSON_STRING && fmt->u.str.len == 0)) return 0;
    if (fmt->type == CPULM_JSON_STRING && strcmp(fmt->u.str.s, "json") == 0) {
        cpulm_json_key(w, "response_format");
        cpulm_json_write_raw(w, "{\"type\":\"json_object\"}", 22);
        return 0;
    }
    if (fmt->type != CPULM_JSON_OBJECT)
        return cpulm_oai_fail(e, 400, "format",
                              "'format' must be \"json\" or a JSON schema object");
    cpulm_json_key(w, "json_schema");
    cpulm_json_write_value(w, fmt);
    return 0;
}

/* messages with Ollama's extras turned into OpenAI's: images refused, tool_name also as
 * name (templates read either), thinking dropped (past reasoning is not replayed). */
static int write_messages(cpulm_json_writer *w, const cpulm_json *msgs, cpulm_oai_error *e) {
    if (!msgs || msgs->type != CPULM_JSON_ARRAY)
        return cpulm_oai_fail(e, 400, "messages", "'messages' must be an array");
    cpulm_json_kv_arr_begin(w, "messages");
    for (size_t i = 0; i < msgs->u.list.n; i++) {
        const cpulm_json *m = &msgs->u.list.items[i];
        if (m->type != CPULM_JSON_OBJECT) {
            cpulm_json_write_value(w, m); /* cpulm_oai_parse names the problem */
            continue;
        }
        if (!is_empty(field(m, "images")))
            return cpulm_oai_fail(e, 400, "messages", "messages[%zu]: images are not supported", i);
        cpulm_json_obj_begin(w);
        for (size_t k = 0; k < m->u.list.n; k++) {
            const cpulm_json *f = &m->u.list.items[k];
            if (!strcmp(f->key, "images") || !strcmp(f->key, "thinking")) continue;
            cpulm_json_keyn(w, f->key, f->key_len);
            cpulm_json_write_value(w, f);
            if (!strcmp(f->key, "tool_name") && !field(m, "name")) {
                cpulm_json_key(w, "name");
                cpulm_json_write_value(w, f);
            }
        }
        cpulm_json_obj_end(w);
    }
    cpulm_json_arr_end(w);
    return 0;
}

/* /api/generate: prompt (+ system) as a chat turn, or the raw prompt with "raw": true. */
static int write_generate(cpulm_json_writer *w, const cpulm_json *root, cpulm_oai_kind *kind,
                          cpulm_oai_error *e) {
    static const char *const unsupported[] = {"suffix", "images", "template", "context"};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (!is_empty(field(root, unsupported[i])))
            return cpulm_oai_fail(e, 400, unsupported[i], "'%s' is not supported by this server",
                                  unsupported[i]);
    const cpulm_json *prompt = field(root, "prompt"), *system = field(root, "system");
    if ((prompt && prompt->type != CPULM_JSON_STRING) ||
        (system && system->type != CPULM_JSON_STRING))
        return cpulm_oai_fail(e, 400,
                              prompt && prompt->type != CPULM_JSON_STRING ? "prompt" : "system",
                              "'prompt' and 'system' must be strings");
    const char *p = prompt ? prompt->u.str.s : "";
    size_t n = prompt ? prompt->u.str.len : 0;
    if (cpulm_json_bool(field(root, "raw"), 0)) {
        *kind = CPULM_OAI_COMPLETION;
        cpulm_json_kv_strn(w, "prompt", p, n);
        return 0;
    }
    *kind = CPULM_OAI_CHAT;
    cpulm_json_kv_arr_begin(w, "messages");
    if (system) {
        cpulm_json_obj_begin(w);
        cpulm_json_kv_str(w, "role", "system");
        cpulm_json_kv_strn(w, "content", system->u.str.s, system->u.str.len);
        cpulm_json_obj_end(w);
    }
    cpulm_json_obj_begin(w);
    cpulm_json_kv_str(w, "role", "user");
    cpulm_json_kv_strn(w, "content", p, n);
    cpulm_json_obj_end(w);
    cpulm_json_arr_end(w);
    return 0;
}

/* An empty prompt (generate) or no messages (chat) asks Ollama to load the model (or, with
 * keep_alive 0, to unload it): answered at once, without generating (see
 * cpulm_api_write_error's status 200). Returns 1 when root is such a request. */
static int load_request(int flavor, const cpulm_json *root, cpulm_oai_error *e) {
    const cpulm_json *p = field(root, "prompt"), *m = field(root, "messages");
    int empty = flavor == CPULM_GEN_OLLAMA_GENERATE
                    ? !p || (p->type == CPULM_JSON_STRING && p->u.str.len == 0)
                    : !m || (m->type == CPULM_JSON_ARRAY && m->u.list.n == 0);
    if (!empty) return 0;
    const cpulm_json *ka = field(root, "keep_alive");
    const char *kas = cpulm_json_str(ka);
    int unload = (ka && ka->type == CPULM_JSON_NUMBER && ka->u.num.f == 0) ||
                 (kas && (strcmp(kas, "0") == 0 || strcmp(kas, "0s") == 0));
    const char *model = cpulm_json_str(field(root, "model"));
    cpulm_oai_error_set(e, 200, flavor == CPULM_GEN_OLLAMA_CHAT ? "chat" : "generate", "%.200s",
                        model ? model : "");
    e->code = unload ? "unload" : "load";
    return 1;
}

/* The answer to a load request (e from load_request). */
void cpulm_ollama_write_load(cpulm_buf *out, const cpulm_oai_error *e) {
    char now[40];
    cpulm_api_rfc3339(now);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, out, 0, 0);
    cpulm_json_obj_begin(&w);
    cpulm_json_kv_str(&w, "model", e->message);
    cpulm_json_kv_str(&w, "created_at", now);
    if (strcmp(e->param, "chat") == 0) {
        cpulm_json_key(&w, "message");
        const char *msg = "{\"role\":\"assistant\",\"content\":\"\"}";
        cpulm_json_write_raw(&w, msg, strlen(msg));
    } else {
        cpulm_json_kv_str(&w, "response", "");
    }
    cpulm_json_kv_bool(&w, "done", 1);
    cpulm_json_kv_str(&w, "done_reason", e->code);
    cpulm_json_obj_end(&w);
}

int cpulm_ollama_rewrite(int flavor, const cpulm_json *root, cpulm_buf *out, cpulm_oai_kind *kind,
                         cpulm_oai_error *e) {
    if (load_request(flavor, root, e)) return -1;
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, out, 0, 0);
    cpulm_json_obj_begin(&w);
    const cpulm_json *opt = field(root, "options");
    if (opt && opt->type != CPULM_JSON_OBJECT)
        return cpulm_oai_fail(e, 400, "options", "'options' must be an object");
    int rc = flavor == CPULM_GEN_OLLAMA_GENERATE ? write_generate(&w, root, kind, e)
                                                 : write_messages(&w, field(root, "messages"), e);
    if (flavor == CPULM_GEN_OLLAMA_CHAT) *kind = CPULM_OAI_CHAT;
    if (rc < 0 || write_format(&w, field(root, "format"), e) < 0) return -1;
    write_options(&w, opt);
    const cpulm_json *tools = field(root, "tools"), *think = field(root, "think");
    if (tools && *kind == CPULM_OAI_CHAT) {
        cpulm_json_key(&w, "tools");
        cpulm_json_write_value(&w, tools);
    }
    if (think && *kind == CPULM_OAI_CHAT) { /* true/false, or a level ("high"): on */
        cpulm_json_kv_obj_begin(&w, "chat_template_kwargs");
        cpulm_json_kv_bool(&w, "enable_thinking",
                           think->type == CPULM_JSON_BOOL ? think->u.boolean : 1);
        cpulm_json_obj_end(&w);
    }
    const cpulm_json *model = field(root, "model");
    if (model) {
        cpulm_json_key(&w, "model");
        cpulm_json_write_value(&w, model);
    }
    const cpulm_json *stream = field(root, "stream");
    cpulm_json_key(&w, "stream");
    if (stream)
        cpulm_json_write_value(&w, stream); /* Ollama streams unless told not to */
    else
        cpulm_json_write_bool(&w, 1);
    cpulm_json_obj_end(&w);
    return 0;
}

/* ---- answers ---- */

static void write_head(cpulm_json_writer *w, const cpulm_api_state *st) {
    char now[40];
    cpulm_api_rfc3339(now);
    cpulm_json_obj_begin(w);
    /* the name asked for, as Ollama answers */
    cpulm_json_kv_str(w, "model", st->model[0] ? st->model : st->s->alias);
    cpulm_json_kv_str(w, "created_at", now);
}

/* A tool call's arguments as the object Ollama gives (the call's JSON text parsed). */
static void write_args(cpulm_json_writer *w, const char *json, size_t n) {
    cpulm_json_doc *d = NULL;
    if (cpulm_json_parse(json, n, NULL, &d, NULL, NULL) == CPULM_OK &&
        cpulm_json_root(d)->type == CPULM_JSON_OBJECT)
        cpulm_json_write_value(w, cpulm_json_root(d));
    else
        cpulm_json_write_raw(w, "{}", 2);
    cpulm_json_free(d);
}

static void write_tool_calls(cpulm_json_writer *w, const cpulm_api_state *st, const char *text,
                             const cpulm_oai_scan *sc) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_json_kv_arr_begin(w, "tool_calls");
    for (int32_t k = 0; k < sc->n_calls; k++) {
        cpulm_json_obj_begin(w);
        cpulm_json_kv_obj_begin(w, "function");
        cpulm_json_key(w, "name");
        cpulm_buf_reset(&b);
        cpulm_oai_call_name(text, &sc->calls[k], &b);
        cpulm_json_write_strn(w, b.data ? b.data : "", b.len);
        cpulm_json_key(w, "arguments");
        cpulm_buf_reset(&b);
        cpulm_oai_call_args(text, &sc->calls[k],
                            st->tool_defs ? cpulm_json_root(st->tool_defs) : NULL, &b);
        write_args(w, b.data ? b.data : "", b.len);
        cpulm_json_obj_end(w);
        cpulm_json_obj_end(w);
    }
    cpulm_json_arr_end(w);
    cpulm_buf_release(&b);
}

/* The reply part of a line: "message" {role, content, thinking?, tool_calls?} for chat,
 * "response" (+ "thinking") for generate. sc: calls found (chat with tools) or NULL. */
static void write_reply(cpulm_json_writer *w, const cpulm_api_state *st, const char *text, size_t n,
                        const char *rsn, size_t n_rsn, const cpulm_oai_scan *sc, const char *full) {
    if (st->flavor == CPULM_GEN_OLLAMA_GENERATE) {
        cpulm_json_kv_strn(w, "response", text, n);
        if (n_rsn) {
            cpulm_json_kv_strn(w, "thinking", rsn, n_rsn);
        }
        return;
    }
    cpulm_json_kv_obj_begin(w, "message");
    cpulm_json_kv_str(w, "role", "assistant");
    cpulm_json_kv_strn(w, "content", text, n);
    if (n_rsn) {
        cpulm_json_kv_strn(w, "thinking", rsn, n_rsn);
    }
    if (sc && sc->n_calls) write_tool_calls(w, st, full, sc);
    cpulm_json_obj_end(w);
}

/* done: true with the statistics (Ollama's names; durations in nanoseconds). */
static void write_done(cpulm_json_writer *w, const cpulm_api_state *st,
                       const cpulm_sched_event *e) {
    double now = cpulm_clock_s(), prompt_s, pred_s;
    cpulm_api_phase_times(st, e, now, &prompt_s, &pred_s);
    cpulm_json_kv_bool(w, "done", 1);
    cpulm_json_kv_str(w, "done_reason", st->finish == CPULM_FINISH_LENGTH ? "length" : "stop");
    cpulm_json_kv_int(w, "total_duration", (int64_t)((now - st->t_start) * 1e9));
    cpulm_json_kv_int(w, "load_duration", 0);
    cpulm_json_kv_int(w, "prompt_eval_count", e->n_prompt);
    cpulm_json_kv_int(w, "prompt_eval_duration", (int64_t)(prompt_s * 1e9));
    cpulm_json_kv_int(w, "eval_count", e->n_completion);
    cpulm_json_kv_int(w, "eval_duration", (int64_t)(pred_s * 1e9));
}

/* One streamed line with a piece of the reply (nothing when both parts are empty). */
static void stream_piece(cpulm_buf *b, const cpulm_api_state *st, const cpulm_buf *vis,
                         const cpulm_buf *rsn) {
    if (!vis->len && !rsn->len) return;
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, b, 0, 0);
    write_head(&w, st);
    write_reply(&w, st, vis->data ? vis->data : "", vis->len, rsn->data, rsn->len, NULL, NULL);
    cpulm_json_kv_bool(&w, "done", 0);
    cpulm_json_obj_end(&w);
    cpulm_buf_putc(b, '\n');
}

/* The end: a whole answer, or (streamed) the held reply of a chat with tools and then the
 * done line. */
static void write_end(cpulm_buf *b, cpulm_api_state *st, const cpulm_sched_event *e) {
    cpulm_oai_scan sc = {0};
    const char *text = st->text.data ? st->text.data : "";
    size_t n = st->text.len;
    if (st->tools && st->finish != CPULM_FINISH_LENGTH) {
        cpulm_oai_scan_calls(text, n, 1, st->forced, &sc);
        if (sc.n_calls) n = sc.content_len;
    }
    cpulm_json_writer w;
    if (st->stream && (n || sc.n_calls)) { /* held content (and calls) of a chat with tools */
        cpulm_json_writer_init(&w, b, 0, 0);
        write_head(&w, st);
        write_reply(&w, st, text, n, NULL, 0, &sc, text);
        cpulm_json_kv_bool(&w, "done", 0);
        cpulm_json_obj_end(&w);
        cpulm_buf_putc(b, '\n');
    }
    cpulm_json_writer_init(&w, b, 0, 0);
    write_head(&w, st);
    if (st->stream)
        write_reply(&w, st, "", 0, NULL, 0, NULL, NULL);
    else
        write_reply(&w, st, text, n, st->reasoning.data, st->reasoning.len, &sc, text);
    write_done(&w, st, e);
    cpulm_json_obj_end(&w);
    if (st->stream) cpulm_buf_putc(b, '\n');
}

/* Text of an event through the <think> or harmony splitter (final: flush it). Streamed at once
 * unless the reply must be whole first (not streaming, or tools: a call must not leak as text). */
static void on_text(cpulm_buf *b, cpulm_api_state *st, const char *s, size_t n, int final) {
    cpulm_buf vis, rsn;
    cpulm_buf_init(&vis, 0);
    cpulm_buf_init(&rsn, 0);
    if (st->split_harmony) /* analysis to thinking, calls as <tool_call> text to the scanner */
        (void)cpulm_harmony_feed(&st->harmony, s, n, final, &vis, &rsn);
    else if (st->split_think)
        cpulm_oai_think_feed(&st->think, s, n, final, &vis, &rsn);
    else
        cpulm_buf_append(&vis, s, n);
    if (st->stream && !st->tools) {
        stream_piece(b, st, &vis, &rsn);
    } else {
        cpulm_buf_append(&st->text, vis.data ? vis.data : "", vis.len);
        cpulm_buf_append(&st->reasoning, rsn.data ? rsn.data : "", rsn.len);
        if (st->stream) stream_piece(b, st, &(cpulm_buf){0}, &rsn); /* reasoning goes now */
    }
    cpulm_buf_release(&vis);
    cpulm_buf_release(&rsn);
}

void cpulm_ollama_event(cpulm_server *s, cpulm_conn *c, cpulm_api_state *st,
                        const cpulm_sched_event *e) {
    (void)s;
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    if (st->stream && !c->sse && e->kind != CPULM_SCHED_EV_ERROR)
        cpulm_conn_stream_begin(c, "application/x-ndjson");
    if (e->kind == CPULM_SCHED_EV_TEXT && e->n_text) {
        if (st->t_first == 0) st->t_first = cpulm_clock_s();
        on_text(&b, st, e->text, e->n_text, 0);
    } else if (e->kind == CPULM_SCHED_EV_FINISH) {
        st->finish = (int)e->finish;
        on_text(&b, st, "", 0, 1);
    } else if (e->kind == CPULM_SCHED_EV_DONE) {
        write_end(&b, st, e);
        if (!st->stream) {
            cpulm_conn_respond(c, 200, "application/json", b.data, b.len, NULL);
            b.len = 0;
        }
    }
    cpulm_api_event_send(c, CPULM_API_OLLAMA, e, &b);
    cpulm_buf_release(&b);
}

/* ---- models ---- */

/* "8.0B", "260.0K": Ollama's parameter_size. */
static void param_size(int64_t n, char out[24]) {
    if (n >= 1000000000)
        snprintf(out, 24, "%.1fB", (double)n / 1e9);
    else if (n >= 1000000)
        snprintf(out, 24, "%.1fM", (double)n / 1e6);
    else
        snprintf(out, 24, "%.1fK", (double)n / 1e3);
}

/* A stable 64-hex-digit digest of the served file (name and size): Ollama's clients use
 * the digest as a key, nothing checks it against the bytes. */
static void digest(const cpulm_server *s, const cpulm_model_info *mi, char out[65]) {
    uint64_t h = 0xcbf29ce484222325ull ^ mi->file_size;
    for (const char *p = s->alias; *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    for (int i = 0; i < 4; i++) {
        uint64_t z = (h += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        snprintf(out + 16 * i, 17, "%016llx", (unsigned long long)(z ^ (z >> 31)));
    }
}

static void write_details(cpulm_json_writer *w, const cpulm_model_info *mi) {
    char ps[24];
    param_size(mi->n_params, ps);
    cpulm_json_kv_obj_begin(w, "details");
    cpulm_json_kv_str(w, "parent_model", "");
    cpulm_json_kv_str(w, "format", "gguf");
    cpulm_json_kv_str(w, "family", mi->arch);
    cpulm_json_kv_arr_begin(w, "families");
    cpulm_json_write_str(w, mi->arch);
    cpulm_json_arr_end(w);
    cpulm_json_kv_str(w, "parameter_size", ps);
    cpulm_json_kv_str(w, "quantization_level", mi->ftype);
    cpulm_json_obj_end(w);
}

/* /api/tags and /api/ps: the served model (none while it loads). */
static void list_models(cpulm_server *s, cpulm_conn *c, int running) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, &b, 0, 0);
    cpulm_json_obj_begin(&w);
    cpulm_json_kv_arr_begin(&w, "models");
    if (s->sched) {
        cpulm_model_info mi;
        cpulm_model_get_info(s->model, &mi);
        char dg[65], now[40];
        digest(s, &mi, dg);
        cpulm_api_rfc3339(now);
        cpulm_json_obj_begin(&w);
        cpulm_json_kv_str(&w, "name", s->alias);
        cpulm_json_kv_str(&w, "model", s->alias);
        cpulm_json_key(&w, running ? "expires_at" : "modified_at");
        cpulm_json_write_str(&w, running ? "2099-01-01T00:00:00Z" : now);
        cpulm_json_kv_int(&w, "size", (int64_t)mi.file_size);
        cpulm_json_kv_str(&w, "digest", dg);
        write_details(&w, &mi);
        if (running) {
            cpulm_json_kv_int(&w, "size_vram", 0);
        }
        cpulm_json_obj_end(&w);
    }
    cpulm_json_arr_end(&w);
    cpulm_json_obj_end(&w);
    cpulm_conn_respond(c, 200, "application/json", b.data, b.len, NULL);
    cpulm_buf_release(&b);
    c->done = 1;
    cpulm_server_output(s, c);
}

void cpulm_ollama_tags(cpulm_server *s, cpulm_conn *c) {
    list_models(s, c, 0);
}

void cpulm_ollama_ps(cpulm_server *s, cpulm_conn *c) {
    list_models(s, c, 1);
}

void cpulm_ollama_version(cpulm_server *s, cpulm_conn *c) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, &b, 0, 0);
    cpulm_json_obj_begin(&w);
    const char *v = cpulm_version(); /* "0.1.0 (commit)": the number alone, as Ollama's */
    cpulm_json_kv_strn(&w, "version", v, strcspn(v, " "));
    cpulm_json_obj_end(&w);
    cpulm_conn_respond(c, 200, "application/json", b.data, b.len, NULL);
    cpulm_buf_release(&b);
    c->done = 1;
    cpulm_server_output(s, c);
}

/* POST /api/show: details, the chat template, and model_info from the GGUF metadata. */
int cpulm_ollama_show(const cpulm_server *s, const cpulm_json *req, cpulm_buf *out) {
    (void)req; /* one model: whatever it is called */
    cpulm_model_info mi;
    cpulm_model_get_info(s->model, &mi);
    cpulm_json_writer w;
    char key[128], now[40];
    cpulm_api_rfc3339(now);
    cpulm_json_writer_init(&w, out, 0, 0);
    cpulm_json_obj_begin(&w);
    cpulm_json_key(&w, "modelfile");
    cpulm_buf mf;
    cpulm_buf_init(&mf, 0);
    cpulm_buf_printf(&mf, "# served by cpulm\nFROM %s\n", s->p.model_path ? s->p.model_path : "");
    cpulm_json_write_strn(&w, mf.data, mf.len);
    cpulm_buf_release(&mf);
    cpulm_json_kv_str(&w, "parameters", "");
    cpulm_json_kv_str(&w, "template", s->chat_tmpl ? s->chat_tmpl : "");
    write_details(&w, &mi);
    cpulm_json_kv_obj_begin(&w, "model_info");
    cpulm_json_kv_str(&w, "general.architecture", mi.arch);
    cpulm_json_kv_int(&w, "general.parameter_count", mi.n_params);
    const struct {
        const char *name;
        int64_t v;
    } dims[] = {{"context_length", mi.n_ctx_train},  {"embedding_length", mi.n_embd},
                {"block_count", mi.n_layer},         {"feed_forward_length", mi.n_ff},
                {"attention.head_count", mi.n_head}, {"attention.head_count_kv", mi.n_head_kv}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        snprintf(key, sizeof key, "%s.%s", mi.arch, dims[i].name);
        cpulm_json_kv_int(&w, key, dims[i].v);
    }
    cpulm_json_kv_int(&w, "tokenizer.ggml.vocab_size", mi.n_vocab);
    cpulm_json_obj_end(&w);
    cpulm_json_kv_arr_begin(&w, "capabilities");
    cpulm_json_write_str(&w, "completion");
    if (s->chat_tmpl && strstr(s->chat_tmpl, "tools")) cpulm_json_write_str(&w, "tools");
    if (s->chat_tmpl && strstr(s->chat_tmpl, "<think>")) cpulm_json_write_str(&w, "thinking");
    if (s->p.embeddings) cpulm_json_write_str(&w, "embedding");
    cpulm_json_arr_end(&w);
    cpulm_json_kv_str(&w, "modified_at", now);
    cpulm_json_obj_end(&w);
    return 200;
}
