/* test_native.c: llama-server's and Ollama's request shapes onto cpulm's requests
 * (cpulm_api_parse: defaults, option names, format, think, refusals) and their error
 * shapes (cpulm_api_write_error), without a server (src/server/native.c, ollama.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "server/native.h"
#include "test.h"

static cpulm_status parse(int flavor, const char *body, cpulm_oai_request *q, cpulm_oai_error *e) {
    return cpulm_api_parse(flavor, NULL, body, strlen(body), 1 << 20, q, e);
}

/* /completion: llama-server's sampling defaults fill what the body lacks; its own fields
 * keep their meaning (n_predict, stop, typical_p) and win over the defaults. */
TEST(native_completion_defaults_are_llama_servers) {
    cpulm_oai_request q;
    cpulm_oai_error e;
    REQUIRE(t, parse(CPULM_GEN_LLAMA, "{\"prompt\":\"Once\",\"n_predict\":8}", &q, &e) == CPULM_OK);
    CHECK(t, q.kind == CPULM_OAI_COMPLETION && q.prompt && q.prompt_len == 4);
    CHECK_NEAR(t, q.sp.temp, 0.8, 1e-6);
    CHECK_EQ_INT(t, q.sp.top_k, 40);
    CHECK_NEAR(t, q.sp.top_p, 0.95, 1e-6);
    CHECK_NEAR(t, q.sp.min_p, 0.05, 1e-6);
    CHECK_EQ_INT(t, q.sp.repeat_last_n, 64);
    CHECK_EQ_INT(t, q.max_tokens, 8);
    CHECK_EQ_INT(t, q.stream, 0);
    cpulm_oai_request_release(&q);
    REQUIRE(t, parse(CPULM_GEN_LLAMA,
                     "{\"prompt\":[1,2,3],\"temperature\":0,\"top_k\":0,\"stream\":true,"
                     "\"stop\":[\"\\n\"],\"cache_prompt\":true,\"typical_p\":0.5}",
                     &q, &e) == CPULM_OK);
    CHECK(t, q.sp.temp == 0.0f && q.sp.top_k == 0 && q.stream && q.n_stop == 1);
    CHECK_EQ_INT(t, cpulm_json_len(q.prompt_tokens), 3);
    CHECK_NEAR(t, q.sp.typical_p, 0.5, 1e-6);
    CHECK_EQ_INT(t, q.max_tokens, -1);
    cpulm_oai_request_release(&q);
    const char *bad[][2] = {{"{\"prompt\":\"x\",\"n_probs\":3}", "n_probs"},
                            {"{\"prompt\":\"x\",\"samplers\":[\"top_k\"]}", "samplers"},
                            {"{\"prompt\":\"x\",\"n\":2}", "n"},
                            {"{\"prompt\":\"x\",\"temperature\":\"hot\"}", "temperature"},
                            {"[1]", ""},
                            {"{\"n_predict\":3}", "prompt"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(t, parse(CPULM_GEN_LLAMA, bad[i][0], &q, &e) != CPULM_OK);
        CHECK(t, e.status == 400 && strcmp(e.param, bad[i][1]) == 0);
    }
}

/* Ollama: options onto sampling fields (with Ollama's defaults), num_predict <= 0 and a
 * negative seed meaning none, stream by default, format json or a schema, think. */
TEST(native_ollama_chat_options) {
    cpulm_oai_request q;
    cpulm_oai_error e;
    REQUIRE(t, parse(CPULM_GEN_OLLAMA_CHAT,
                     "{\"model\":\"llama3.2\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\","
                     "\"images\":[]}],\"options\":{\"num_predict\":-1,\"seed\":-1,"
                     "\"num_ctx\":8192,\"num_gpu\":99}}",
                     &q, &e) == CPULM_OK);
    CHECK(t, q.kind == CPULM_OAI_CHAT && q.stream);
    CHECK_NEAR(t, q.sp.temp, 0.8, 1e-6);
    CHECK_EQ_INT(t, q.sp.top_k, 40);
    CHECK_NEAR(t, q.sp.top_p, 0.9, 1e-6);
    CHECK_NEAR(t, q.sp.repeat_penalty, 1.1, 1e-6);
    CHECK_EQ_INT(t, q.sp.repeat_last_n, 64);
    CHECK_EQ_INT(t, q.max_tokens, -1);
    CHECK(t, q.sp.seed == cpulm_sampler_default_params().seed); /* random */
    CHECK(t, !q.grammar);
    cpulm_oai_request_release(&q);
    REQUIRE(t, parse(CPULM_GEN_OLLAMA_CHAT,
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"stream\":false,"
                     "\"think\":false,\"format\":{\"type\":\"integer\"},\"options\":"
                     "{\"num_predict\":7,\"seed\":3,\"temperature\":0,\"top_k\":5,\"stop\":[\"x\"],"
                     "\"typical_p\":0.7,\"mirostat\":0}}",
                     &q, &e) == CPULM_OK);
    CHECK(t, !q.stream && q.max_tokens == 7 && q.sp.seed == 3 && q.sp.temp == 0.0f);
    CHECK(t, q.sp.top_k == 5 && q.n_stop == 1 && q.enable_thinking == 0 && q.grammar);
    CHECK_NEAR(t, q.sp.typical_p, 0.7, 1e-6);
    cpulm_oai_request_release(&q);
    REQUIRE(t, parse(CPULM_GEN_OLLAMA_CHAT,
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"format\":\"json\","
                     "\"think\":\"high\"}",
                     &q, &e) == CPULM_OK);
    CHECK(t, q.grammar && q.enable_thinking == 1);
    cpulm_oai_request_release(&q);
}

/* /api/generate: a chat turn (system + prompt) unless raw; refused extras; load requests. */
TEST(native_ollama_generate_shapes) {
    cpulm_oai_request q;
    cpulm_oai_error e;
    REQUIRE(t, parse(CPULM_GEN_OLLAMA_GENERATE, "{\"prompt\":\"Hi\",\"system\":\"Be brief.\"}", &q,
                     &e) == CPULM_OK);
    CHECK(t, q.kind == CPULM_OAI_CHAT && cpulm_json_len(q.messages) == 2);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(cpulm_json_at(q.messages, 1), "content")),
                    "Hi") == 0);
    cpulm_oai_request_release(&q);
    REQUIRE(t, parse(CPULM_GEN_OLLAMA_GENERATE, "{\"prompt\":\"Once\",\"raw\":true}", &q, &e) ==
                   CPULM_OK);
    CHECK(t, q.kind == CPULM_OAI_COMPLETION && q.prompt && strcmp(q.prompt, "Once") == 0);
    cpulm_oai_request_release(&q);
    const char *bad[][2] = {{"{\"prompt\":\"x\",\"images\":[\"aGk=\"]}", "images"},
                            {"{\"prompt\":\"x\",\"suffix\":\"end\"}", "suffix"},
                            {"{\"prompt\":\"x\",\"format\":\"yaml\"}", "format"},
                            {"{\"prompt\":\"x\",\"options\":{\"mirostat\":1}}", "mirostat"},
                            {"{\"prompt\":\"x\",\"options\":[]}", "options"},
                            {"{\"prompt\":5}", "prompt"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(t, parse(CPULM_GEN_OLLAMA_GENERATE, bad[i][0], &q, &e) != CPULM_OK);
        CHECK(t, e.status == 400 && strcmp(e.param, bad[i][1]) == 0);
    }
    CHECK(t, parse(CPULM_GEN_OLLAMA_GENERATE, "{\"model\":\"m\",\"prompt\":\"\"}", &q, &e) !=
                 CPULM_OK);
    CHECK(t, e.status == 200 && strcmp(e.code, "load") == 0 && strcmp(e.message, "m") == 0);
    CHECK(t,
          parse(CPULM_GEN_OLLAMA_CHAT, "{\"messages\":[],\"keep_alive\":0}", &q, &e) != CPULM_OK);
    CHECK(t, e.status == 200 && strcmp(e.code, "unload") == 0 && strcmp(e.param, "chat") == 0);
}

/* Error bodies: OpenAI's, llama-server's {"error": {code, message, type}}, Ollama's
 * {"error": "message"} (and a stream's line); a load answer for status 200. */
TEST(native_error_shapes) {
    cpulm_oai_error e;
    cpulm_oai_error_set(&e, 400, "top_k", "'top_k' must be an integer");
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_api_write_error(CPULM_API_LLAMA, &b, &e);
    cpulm_json_doc *d = NULL;
    REQUIRE(t, cpulm_json_parse(b.data, b.len, NULL, &d, NULL, NULL) == CPULM_OK);
    const cpulm_json *err = cpulm_json_get(cpulm_json_root(d), "error");
    CHECK(t, cpulm_json_num(cpulm_json_get(err, "code"), 0) == 400);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(err, "type")), "invalid_request_error") == 0);
    CHECK(t, strstr(cpulm_json_str(cpulm_json_get(err, "message")), "top_k") != NULL);
    cpulm_json_free(d);
    cpulm_buf_reset(&b);
    cpulm_api_write_error(CPULM_API_OLLAMA, &b, &e);
    CHECK(t, strcmp(b.data, "{\"error\":\"'top_k' must be an integer\"}") == 0);
    cpulm_buf_reset(&b);
    cpulm_api_write_stream_error(CPULM_API_OLLAMA, &b, &e);
    CHECK(t, b.len > 0 && b.data[b.len - 1] == '\n' && memchr(b.data, '\n', b.len - 1) == NULL);
    cpulm_buf_reset(&b);
    cpulm_api_write_stream_error(CPULM_API_LLAMA, &b, &e);
    CHECK(t, strncmp(b.data, "data: {\"error\":{", 16) == 0);
    cpulm_buf_reset(&b);
    cpulm_api_write_error(CPULM_API_OPENAI, &b, &e);
    CHECK(t, strstr(b.data, "\"param\":\"top_k\"") != NULL);
    cpulm_oai_error_set(&e, 200, "generate", "m");
    e.code = "load";
    cpulm_buf_reset(&b);
    cpulm_api_write_error(CPULM_API_OLLAMA, &b, &e);
    REQUIRE(t, cpulm_json_parse(b.data, b.len, NULL, &d, NULL, NULL) == CPULM_OK);
    CHECK(t, cpulm_json_bool(cpulm_json_get(cpulm_json_root(d), "done"), 0) == 1);
    CHECK(t,
          strcmp(cpulm_json_str(cpulm_json_get(cpulm_json_root(d), "done_reason")), "load") == 0);
    cpulm_json_free(d);
    cpulm_buf_release(&b);
    char ts[40];
    cpulm_api_rfc3339(ts);
    CHECK(t, strlen(ts) == 30 && ts[4] == '-' && ts[10] == 'T' && ts[19] == '.' && ts[29] == 'Z');
}

/* ---- answers: scheduler events through cpulm_ollama_event into a connection's buffer ---- */

static cpulm_sched_event *ev(cpulm_sched_ev_kind kind, const char *text) {
    size_t n = text ? strlen(text) : 0;
    cpulm_sched_event *e = calloc(1, sizeof *e + n + 1);
    e->kind = kind;
    e->n_text = n;
    if (n) memcpy(e->text, text, n);
    e->n_prompt = 7;
    e->n_completion = 3;
    return e;
}

/* Feeds texts then FINISH (stop) and DONE to a fresh state of flavor; returns the body
 * written to the connection (after the head), caller frees. */
/* tools_json: the request's tools array (freed before the events, as the request is), or
 * NULL. */
static char *run_events_tools(int flavor, int stream, int tools, const char *tools_json, int think,
                              const char *const *texts, int n_texts) {
    static cpulm_server s; /* only the alias is read */
    s.alias = "m";
    cpulm_oai_request q;
    memset(&q, 0, sizeof q);
    q.kind = CPULM_OAI_CHAT;
    q.n = 1;
    q.stream = stream;
    q.tool_choice = tools ? CPULM_OAI_TOOLS_AUTO : CPULM_OAI_TOOLS_OFF;
    cpulm_json_doc *td = NULL;
    if (tools_json && cpulm_json_parse(tools_json, strlen(tools_json), NULL, &td, NULL, NULL))
        return NULL;
    q.tools = td ? cpulm_json_root(td) : NULL;
    cpulm_sched_req r = {.n_prompt = 7};
    cpulm_api_state *st = cpulm_api_state_new(flavor, &s, &q, &r, think);
    cpulm_json_free(td);
    cpulm_conn c;
    memset(&c, 0, sizeof c);
    c.keep_alive = 1; /* HTTP/1.0 (version_minor 0): a stream is not chunked, easy to read */
    cpulm_buf_init(&c.wbuf, 0);
    for (int i = 0; i <= n_texts + 1; i++) {
        cpulm_sched_event *e = i < n_texts    ? ev(CPULM_SCHED_EV_TEXT, texts[i])
                               : i == n_texts ? ev(CPULM_SCHED_EV_FINISH, NULL)
                                              : ev(CPULM_SCHED_EV_DONE, NULL);
        cpulm_api_event(&s, &c, st, e);
        free(e);
    }
    cpulm_api_state_free(st);
    const char *body = c.wbuf.data ? strstr(c.wbuf.data, "\r\n\r\n") : NULL;
    body = body ? body + 4 : "";
    char *out = malloc(strlen(body) + 1);
    memcpy(out, body, strlen(body) + 1);
    cpulm_buf_release(&c.wbuf);
    return out;
}

static char *run_events(int flavor, int stream, int tools, int think, const char *const *texts,
                        int n_texts) {
    return run_events_tools(flavor, stream, tools, NULL, think, texts, n_texts);
}

/* Ollama's chat: a Qwen3.5 XML call's arguments are typed by the tool's schema (a string
 * parameter reading 42 stays a string; an undeclared one is guessed), whole and streamed. */
TEST(native_ollama_xml_args_typed_by_schema) {
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                        "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},"
                        "\"n\":{\"type\":\"integer\"}}}}}]";
    const char *call[] = {"<tool_call>\n<function=f>\n<parameter=id>\n42\n</parameter>\n",
                          "<parameter=n>\n7\n</parameter>\n<parameter=x>\ntrue\n</parameter>\n"
                          "</function>\n</tool_call>"};
    for (int stream = 0; stream < 2; stream++) {
        char *out = run_events_tools(CPULM_GEN_OLLAMA_CHAT, stream, 1, tools, 0, call, 2);
        REQUIRE(t, out);
        char *line = strstr(out, "\"tool_calls\"");
        REQUIRE(t, line);
        while (line > out && line[-1] != '\n')
            line--;
        char *end = strchr(line, '\n');
        cpulm_json_doc *d = NULL;
        REQUIRE(t, cpulm_json_parse(line, end ? (size_t)(end - line) : strlen(line), NULL, &d, NULL,
                                    NULL) == CPULM_OK);
        const cpulm_json *msg = cpulm_json_get(cpulm_json_root(d), "message");
        const cpulm_json *args = cpulm_json_get(
            cpulm_json_get(cpulm_json_at(cpulm_json_get(msg, "tool_calls"), 0), "function"),
            "arguments");
        const char *id = cpulm_json_str(cpulm_json_get(args, "id"));
        CHECK(t, id && strcmp(id, "42") == 0);
        CHECK(t, cpulm_json_num(cpulm_json_get(args, "n"), 0) == 7);
        CHECK(t, cpulm_json_get(args, "x") && cpulm_json_get(args, "x")->type == CPULM_JSON_BOOL);
        cpulm_json_free(d);
        free(out);
    }
}

/* Ollama's chat: a Hermes-style call in the reply comes back as message.tool_calls with the
 * arguments as an object and nothing of it in content, streamed (held to the end) or not;
 * <think> text goes to message.thinking. */
TEST(native_ollama_tool_calls_and_thinking) {
    const char *call[] = {"Sure.", "<tool_call>\n{\"name\": \"add\", \"arguments\": ",
                          "{\"a\": 1, \"b\": 2}}\n</tool_call>"};
    for (int stream = 0; stream < 2; stream++) {
        char *out = run_events(CPULM_GEN_OLLAMA_CHAT, stream, 1, 0, call, 3);
        /* the last line with a message holding tool_calls */
        char *line = strstr(out, "\"tool_calls\"");
        REQUIRE(t, line);
        while (line > out && line[-1] != '\n')
            line--;
        char *end = strchr(line, '\n');
        cpulm_json_doc *d = NULL;
        REQUIRE(t, cpulm_json_parse(line, end ? (size_t)(end - line) : strlen(line), NULL, &d, NULL,
                                    NULL) == CPULM_OK);
        const cpulm_json *msg = cpulm_json_get(cpulm_json_root(d), "message");
        const cpulm_json *fn =
            cpulm_json_get(cpulm_json_at(cpulm_json_get(msg, "tool_calls"), 0), "function");
        CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(fn, "name")), "add") == 0);
        CHECK(t, cpulm_json_num(cpulm_json_get(cpulm_json_get(fn, "arguments"), "b"), 0) == 2);
        CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(msg, "content")), "Sure.") == 0);
        CHECK(t, strstr(out, "tool_call>") == NULL); /* the markup never reaches the client */
        cpulm_json_free(d);
        free(out);
    }
    const char *th[] = {"<think>", "let me see", "</think>", "Hello"};
    char *out = run_events(CPULM_GEN_OLLAMA_CHAT, 0, 0, 1, th, 4);
    cpulm_json_doc *d = NULL;
    REQUIRE(t, cpulm_json_parse(out, strlen(out), NULL, &d, NULL, NULL) == CPULM_OK);
    const cpulm_json *msg = cpulm_json_get(cpulm_json_root(d), "message");
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(msg, "content")), "Hello") == 0);
    CHECK(t, strcmp(cpulm_json_str(cpulm_json_get(msg, "thinking")), "let me see") == 0);
    CHECK(t, cpulm_json_num(cpulm_json_get(cpulm_json_root(d), "eval_count"), 0) == 3);
    cpulm_json_free(d);
    free(out);
    /* generate, streamed: NDJSON lines, done false then true; the pieces join to the reply */
    const char *g[] = {"Once", " upon"};
    out = run_events(CPULM_GEN_OLLAMA_GENERATE, 1, 0, 0, g, 2);
    int lines = 0;
    char joined[64] = "";
    for (char *p = out, *nl; (nl = strchr(p, '\n')); p = nl + 1, lines++) {
        REQUIRE(t, cpulm_json_parse(p, (size_t)(nl - p), NULL, &d, NULL, NULL) == CPULM_OK);
        const cpulm_json *root = cpulm_json_root(d);
        strncat(joined, cpulm_json_str(cpulm_json_get(root, "response")), 20);
        CHECK_EQ_INT(t, cpulm_json_bool(cpulm_json_get(root, "done"), -1), lines == 2);
        cpulm_json_free(d);
    }
    CHECK_EQ_INT(t, lines, 3);
    CHECK(t, strcmp(joined, "Once upon") == 0);
    free(out);
}
