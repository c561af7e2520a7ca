/* test_tools.c: tool calling and structured output on the API side: request parsing
 * (response_format, grammar, json_schema, tools, tool_choice) with 400s naming the
 * parameter, real chat templates rendering tools and tool turns, forced-call grammars in
 * each family's format, and the tool-call scanner on recorded model outputs (final and
 * streamed incrementally, byte by byte). */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "server/oai.h"
#include "test.h"

#ifndef CPULM_SOURCE_DIR
#define CPULM_SOURCE_DIR "."
#endif

#define TOOLS_JSON                                                                                \
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\"," \
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"         \
    "\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\"]}}},"                              \
    "{\"type\":\"function\",\"function\":{\"name\":\"add\",\"parameters\":{\"type\":\"object\","  \
    "\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},"                 \
    "\"required\":[\"a\",\"b\"]}}}]"

static int parse(const char *body, cpulm_oai_request *r, cpulm_oai_error *e) {
    return cpulm_oai_parse(CPULM_OAI_CHAT, body, strlen(body), 1 << 20, r, e) == CPULM_OK;
}

TEST(tools_parse_requests) {
    cpulm_oai_request r;
    cpulm_oai_error e;
    REQUIRE(t, parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":" TOOLS_JSON
                     ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"add\"}}}",
                     &r, &e));
    CHECK_EQ_INT(t, r.tool_choice, CPULM_OAI_TOOLS_NAMED);
    CHECK(t, r.tool_name && !strcmp(r.tool_name, "add"));
    CHECK(t, r.parallel_tool_calls == 1 && r.tools && !r.grammar);
    cpulm_oai_request_release(&r);
    REQUIRE(t,
            parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":" TOOLS_JSON "}",
                  &r, &e));
    CHECK_EQ_INT(t, r.tool_choice, CPULM_OAI_TOOLS_AUTO);
    cpulm_oai_request_release(&r);
    REQUIRE(t, parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":" TOOLS_JSON
                     ",\"tool_choice\":\"none\"}",
                     &r, &e));
    CHECK_EQ_INT(t, r.tool_choice, CPULM_OAI_TOOLS_OFF);
    cpulm_oai_request_release(&r);
    REQUIRE(t, parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":"
                     "{\"type\":\"json_object\"}}",
                     &r, &e));
    CHECK(t, r.grammar && strstr(r.grammar, "root ::= json-object1"));
    cpulm_oai_request_release(&r);
    REQUIRE(t, parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"grammar\":\"root ::= "
                     "[a-z]+\"}",
                     &r, &e));
    CHECK(t, r.grammar && !strcmp(r.grammar, "root ::= [a-z]+"));
    cpulm_oai_request_release(&r);
    REQUIRE(t, parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"json_schema\":{"
                     "\"type\":\"integer\"}}",
                     &r, &e));
    CHECK(t, r.grammar != NULL);
    cpulm_oai_request_release(&r);
}

static void bad(test_ctx *t, const char *extra, const char *param, const char *what) {
    char body[2048];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s}", extra);
    cpulm_oai_request r;
    cpulm_oai_error e;
    if (parse(body, &r, &e)) {
        fprintf(stderr, "  accepted: %s\n", extra);
        t->n_fail++;
        cpulm_oai_request_release(&r);
        return;
    }
    if (e.status != 400 || strcmp(e.param, param) != 0 || !strstr(e.message, what)) {
        fprintf(stderr, "  %s: status %d param '%s' message '%s' (want %s, '%s')\n", extra,
                e.status, e.param, e.message, param, what);
        t->n_fail++;
    }
}

TEST(tools_rejects_bad_requests) {
    bad(t,
        "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":"
        "{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}}}}}}",
        "response_format", "unsupported JSON schema keyword 'not' at #/properties/a");
    bad(t,
        "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":"
        "\"string\","
        "\"format\":\"email\"}}}",
        "response_format", "unsupported string format 'email'");
    bad(t, "\"json_schema\":{\"type\":\"array\",\"uniqueItems\":true}", "json_schema",
        "'uniqueItems'");
    bad(t, "\"response_format\":{\"type\":\"yaml\"}", "response_format",
        "unsupported response_format type");
    bad(t, "\"grammar\":\"root ::= foo\"", "grammar", "'foo' is used but not defined");
    bad(t, "\"grammar\":\"root ::= [a]\",\"json_schema\":{}", "grammar", "only one of");
    bad(t, "\"tools\":[{\"type\":\"function\"}]", "tools", "tools[0]");
    bad(t,
        "\"tools\":" TOOLS_JSON
        ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}",
        "tool_choice", "no tool named 'nope'");
    bad(t, "\"tool_choice\":\"required\"", "tool_choice", "needs 'tools'");
    bad(t, "\"tools\":" TOOLS_JSON ",\"tool_choice\":\"always\"", "tool_choice",
        "'tool_choice' must be");
    bad(t,
        "\"tools\":" TOOLS_JSON
        ",\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}",
        "tool_choice", "cannot be combined");
}

/* ---- templates ---- */

static char *read_all(const char *path) {
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

#define TURNS                                                                                     \
    "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"                             \
    "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"                                      \
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":"       \
    "\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": "         \
    "\\\"Paris\\\"}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"21 C\"}]," \
    "\"tools\":" TOOLS_JSON "}"

static char *render(test_ctx *t, const char *tmpl_file) {
    char rel[256];
    snprintf(rel, sizeof rel, "testdata/chat/templates/%s", tmpl_file);
    char *tmpl = read_all(test_shared_path(rel));
    if (!tmpl) return NULL;
    cpulm_oai_request r;
    cpulm_oai_error e;
    cpulm_buf out;
    cpulm_buf_init(&out, 0);
    cpulm_oai_chat_prompt info;
    char *res = NULL;
    if (!parse(TURNS, &r, &e)) {
        fprintf(stderr, "  %s\n", e.message);
        t->n_fail++;
    } else {
        if (cpulm_oai_render_chat_tools(tmpl, "<s>", "</s>", r.messages, r.tools, &out, &info,
                                        &e) == CPULM_OK)
            res = cpulm_buf_detach(&out, NULL);
        else
            fprintf(stderr, "  %s: %s\n", tmpl_file, e.message), t->n_fail++;
        cpulm_oai_request_release(&r);
    }
    cpulm_buf_release(&out);
    free(tmpl);
    return res;
}

TEST(tools_templates_render_tools_and_turns) {
    char *q = render(t, "qwen2.5.jinja");
    if (!q) SKIP(t, "CPULM_SHARED chat templates not found");
    CHECK(t,
          strstr(q, "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"") !=
              NULL);
    CHECK(t, strstr(q, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                       "\"Paris\"}}\n</tool_call>") != NULL);
    CHECK(t, strstr(q, "<tool_response>\n21 C\n</tool_response>") != NULL);
    CHECK(t, strstr(q, "<|im_start|>assistant\n") != NULL);
    free(q);
    char *l = render(t, "llama3.1.jinja");
    REQUIRE(t, l);
    CHECK(t, strstr(l, "\"name\": \"get_weather\"") != NULL); /* tool definitions in the prompt */
    CHECK(t,
          strstr(l, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}") != NULL);
    CHECK(t, strstr(l, "<|start_header_id|>ipython<|end_header_id|>\n\n") != NULL);
    CHECK(t, strstr(l, "21 C") != NULL);
    free(l);
    /* a template that never mentions tools: they come in a system message */
    char *p = render(t, "llama3.jinja");
    REQUIRE(t, p);
    CHECK(t, strstr(p, "You can call these tools") != NULL && strstr(p, "get_weather") != NULL);
    free(p);
}

/* ---- forced-call grammars ---- */

static void grammar_accepts(test_ctx *t, const char *family, const char *choice, const char *good,
                            const char *badtext) {
    char body[2048];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":" TOOLS_JSON
             ",\"tool_choice\":%s}",
             choice);
    cpulm_oai_request r;
    cpulm_oai_error e;
    REQUIRE(t, parse(body, &r, &e));
    char *text = NULL;
    CHECK(t, cpulm_oai_tool_grammar(&r, family, &text, &e) == 0);
    cpulm_grammar *g = NULL;
    cpulm_error err = {0};
    CHECK(t, text && cpulm_grammar_parse(text, strlen(text), NULL, &g, &err) == CPULM_OK);
    if (g) {
        cpulm_grammar_matcher *m = cpulm_grammar_matcher_new(g, NULL);
        int ok = cpulm_grammar_accept_bytes(m, good, strlen(good)) == CPULM_OK &&
                 cpulm_grammar_complete(m);
        if (!ok) fprintf(stderr, "  %s: rejected '%s'\n", family ? family : "generic", good);
        CHECK(t, ok);
        cpulm_grammar_matcher_reset(m);
        CHECK(t, cpulm_grammar_accept_bytes(m, badtext, strlen(badtext)) != CPULM_OK);
        cpulm_grammar_matcher_free(m);
        /* and the scanner finds exactly that call */
        cpulm_oai_scan sc;
        cpulm_oai_scan_calls(good, strlen(good), 1, 1, &sc);
        CHECK_EQ_INT(t, sc.n_calls, 1);
    }
    cpulm_grammar_free(g);
    free(text);
    cpulm_oai_request_release(&r);
}

TEST(tools_forced_call_grammars) {
    const char *named = "{\"type\":\"function\",\"function\":{\"name\":\"add\"}}";
    grammar_accepts(
        t, "chatml", named,
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\"");
    grammar_accepts(t, "llama3", named,
                    "{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": -2}}",
                    "{\"name\": \"add\", \"parameters\": {\"a\": 1}}");
    grammar_accepts(
        t, "mistral", "\"required\"",
        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]",
        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {}}]");
    grammar_accepts(t, "mistral-v11", named, "[TOOL_CALLS]add[ARGS]{\"a\": 1, \"b\": 2}",
                    "[TOOL_CALLS][{\"name\": \"add\"");
    grammar_accepts(t, "mistral-v11", "\"required\"",
                    "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\"}",
                    "[TOOL_CALLS]get_weather[ARGS]{}");
    /* Qwen3-Coder / Qwen3.5 XML: raw string values, enum members, JSON for integers */
    grammar_accepts(t, "qwen-xml", named,
                    "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n"
                    "<parameter=b>\n-2\n</parameter>\n</function>\n</tool_call>",
                    "<tool_call>\n<function=add>\n<parameter=a>\nx");
    grammar_accepts(t, "qwen-xml", "\"required\"",
                    "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Jose\n"
                    "</parameter>\n<parameter=unit>\nf\n</parameter>\n</function>\n</tool_call>",
                    "<tool_call>\n<function=get_weather>\n<parameter=unit>");
    grammar_accepts(
        t, NULL, "\"required\"",
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"c\"}}",
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"k\"}}");
}

/* ---- the scanner on recorded outputs ---- */

typedef struct rec {
    const char *text;
    int n_calls;
    const char *content; /* expected content before the calls */
    const char *name0, *args0, *name1, *args1;
} rec;

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const rec RECORDED[] = {
    /* Qwen2.5 / Hermes 2 Pro */
    {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
     1, "", "get_weather", "{\"city\": \"Paris\"}"},
    {"Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Paris\"}}\n"
     "</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": "
     "2}}\n</tool_call>",
     2, "Let me check.\n", "get_weather", "{\"city\": \"Paris\"}", "add", "{\"a\": 1, \"b\": 2}"},
    /* Llama 3.1/3.2 JSON tool calling, and the python tag form */
    {"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"San Francisco, CA\"}}", 1, "",
     "get_weather", "{\"city\": \"San Francisco, CA\"}"},
    {"<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 3, \"b\": 4}}", 1, "", "add",
     "{\"a\": 3, \"b\": 4}"},
    /* Mistral / Mixtral instruct v0.3 */
    {"[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
     "\"c\"}}, "
     "{\"name\": \"add\", \"arguments\": {\"a\": 5, \"b\": 6}}]",
     2, "", "get_weather", "{\"city\": \"Paris\", \"unit\": \"c\"}", "add", "{\"a\": 5, \"b\": 6}"},
    /* Mistral tokenizer v11+ (Mistral Small 3.1+, Magistral, Devstral): NAME[ARGS]{...}
     * after each [TOOL_CALLS]; v13 adds [CALL_ID]ID; content may come first */
    {"[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"unit\": \"c\"}", 1, "", "get_weather",
     "{\"city\": \"Paris\", \"unit\": \"c\"}"},
    {"Checking both.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\"}[TOOL_CALLS]add[ARGS]{\"a\": "
     "5, \"b\": 6}",
     2, "Checking both.", "get_weather", "{\"city\": \"Oslo\"}", "add", "{\"a\": 5, \"b\": 6}"},
    {"[TOOL_CALLS]add[CALL_ID]a1B2c3D4e[ARGS]{\"a\": 1, \"b\": 2}", 1, "", "add",
     "{\"a\": 1, \"b\": 2}"},
    {"[TOOL_CALLS]add{\"a\": 1, \"b\": 2}", 1, "", "add", "{\"a\": 1, \"b\": 2}"},
    /* Llama 3.1+ built-in tools: <|python_tag|>NAME.call(keyword arguments) */
    {"<|python_tag|>brave_search.call(query=\"weather in Paris, today\")", 1, "", "brave_search",
     "{\"query\": \"weather in Paris, today\"}"},
    {"<|python_tag|>wolfram_alpha.call(query='x = 2, \\'y\\'', limit=3, exact=True, unit=None)", 1,
     "", "wolfram_alpha",
     "{\"query\": \"x = 2, 'y'\", \"limit\": 3, \"exact\": true, \"unit\": null}"},
    {"<|python_tag|>brave_search.call(, query=\"a\", ids=[1, 2], opts={\"k\": \"v, w\"})", 1, "",
     "brave_search", "{\"query\": \"a\", \"ids\": [1, 2], \"opts\": {\"k\": \"v, w\"}}"},
    /* DeepSeek V3 / R1 */
    {"<\xef\xbd\x9ctool\xe2\x96\x81"
     "calls\xe2\x96\x81"
     "begin\xef\xbd\x9c><\xef\xbd\x9ctool\xe2\x96\x81"
     "call\xe2\x96\x81"
     "begin\xef\xbd\x9c>function<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>get_weather\n"
     "```json\n{\"city\": \"Tokyo\"}\n```<\xef\xbd\x9ctool\xe2\x96\x81"
     "call\xe2\x96\x81"
     "end\xef\xbd\x9c>"
     "<\xef\xbd\x9ctool\xe2\x96\x81"
     "calls\xe2\x96\x81"
     "end\xef\xbd\x9c>",
     1, "", "get_weather", "{\"city\": \"Tokyo\"}"},
    /* arguments given as a JSON string (some fine-tunes) */
    {"{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1, \\\"b\\\": 2}\"}", 1, "", "add",
     "{\"a\": 1, \"b\": 2}"},
    /* Qwen3-Coder / Qwen3.5 XML: values framed by newlines or not, JSON kept, text as a
     * string (quotes and newlines escaped), two calls */
    {"I'll check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
     "<parameter=unit>\nc\n</parameter>\n</function>\n</tool_call>",
     1, "I'll check.\n", "get_weather", "{\"city\": \"Paris\", \"unit\": \"c\"}"},
    {"<tool_call><function=add><parameter=a>1</parameter><parameter=b>[2, 3]</parameter>"
     "</function></tool_call>\n<tool_call>\n<function=write>\n<parameter=text>\nsay \"hi\"\n"
     "2 lines\n</parameter>\n</function>\n</tool_call>",
     2, "", "add", "{\"a\": 1, \"b\": [2, 3]}", "write",
     "{\"text\": \"say \\\"hi\\\"\\n2 lines\"}"},
    {"<tool_call>\n<function=now>\n</function>\n</tool_call>", 1, "", "now", "{}"},
    /* not calls: plain prose, JSON without a name, a broken call */
    {"The weather is nice {today}.", 0, "The weather is nice {today}."},
    {"{\"city\": \"Paris\"}", 0, "{\"city\": \"Paris\"}"},
    {"<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1", 0,
     "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1"},
    {"[TOOL_CALLS]not a call", 0, "[TOOL_CALLS]not a call"},
    {"[TOOL_CALLS]add[ARGS]{\"a\": 1", 0, "[TOOL_CALLS]add[ARGS]{\"a\": 1"},
    {"<|python_tag|>print(1)", 0, "<|python_tag|>print(1)"},
    {"<tool_call>\n<function=add>\n<parameter=a>\n1\n", 0,
     "<tool_call>\n<function=add>\n<parameter=a>\n1\n"},
};
#pragma GCC diagnostic pop

static void check_call(test_ctx *t, const char *text, const cpulm_oai_call *c, const char *name,
                       const char *args) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_oai_call_name(text, c, &b);
    if (strcmp(b.data, name)) fprintf(stderr, "  name '%s' != '%s'\n", b.data, name), t->n_fail++;
    cpulm_buf_reset(&b);
    cpulm_oai_call_args(text, c, NULL, &b);
    if (strcmp(b.data, args)) fprintf(stderr, "  args '%s' != '%s'\n", b.data, args), t->n_fail++;
    cpulm_buf_release(&b);
}

TEST(tools_scan_recorded_outputs) {
    for (size_t i = 0; i < sizeof RECORDED / sizeof *RECORDED; i++) {
        const rec *r = &RECORDED[i];
        cpulm_oai_scan sc;
        cpulm_oai_scan_calls(r->text, strlen(r->text), 1, 0, &sc);
        if (sc.n_calls != r->n_calls) {
            fprintf(stderr, "  case %zu: %d calls, want %d\n", i, sc.n_calls, r->n_calls);
            t->n_fail++;
            continue;
        }
        CHECK(t,
              sc.content_len == strlen(r->content) && !memcmp(r->text, r->content, sc.content_len));
        if (r->n_calls > 0) check_call(t, r->text, &sc.calls[0], r->name0, r->args0);
        if (r->n_calls > 1) check_call(t, r->text, &sc.calls[1], r->name1, r->args1);
    }
}

/* Qwen3.5 XML arguments are typed by the tool's parameter schemas, not by their text: a
 * string parameter holding "42" or "true" stays a string, typed parameters are their JSON,
 * undeclared ones (and every one without tools) keep the text's guess. */
#define XML_TOOLS                                                                               \
    "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"," \
    "\"properties\":{\"s\":{\"type\":\"string\"},\"i\":{\"type\":\"integer\"},"                 \
    "\"b\":{\"type\":\"boolean\"},\"o\":{\"type\":\"object\"},\"a\":{\"type\":\"array\"},"      \
    "\"e\":{\"enum\":[\"1\",\"2\"]},\"p\":{\"type\":\"string\",\"pattern\":\"^[0-9]+$\"},"      \
    "\"sn\":{\"type\":[\"string\",\"null\"]},\"u\":{\"anyOf\":[{\"type\":\"integer\"},"         \
    "{\"type\":\"string\"}]},\"d\":{\"description\":\"untyped\"}}}}}]"
#define XML_CALL(params) "<tool_call>\n<function=f>\n" params "</function>\n</tool_call>"
#define XP(k, v)         "<parameter=" k ">\n" v "\n</parameter>\n"

static void typed_args(test_ctx *t, const cpulm_json *tools, const char *text, const char *want) {
    cpulm_oai_scan sc;
    cpulm_oai_scan_calls(text, strlen(text), 1, 0, &sc);
    CHECK_EQ_INT(t, sc.n_calls, 1);
    if (sc.n_calls != 1) return;
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_oai_call_args(text, &sc.calls[0], tools, &b);
    if (strcmp(b.data, want)) fprintf(stderr, "  args '%s' != '%s'\n", b.data, want), t->n_fail++;
    cpulm_buf_release(&b);
}

TEST(tools_xml_args_typed_by_schema) {
    cpulm_json_doc *d = NULL, *copy = NULL;
    CHECK(t, cpulm_json_parse(XML_TOOLS, strlen(XML_TOOLS), NULL, &d, NULL, NULL) == CPULM_OK);
    /* the writers keep a copy: the request (d) is gone by the time they run */
    CHECK(t, cpulm_oai_tools_copy(cpulm_json_root(d), &copy) == CPULM_OK);
    cpulm_json_free(d);
    const cpulm_json *tools = cpulm_json_root(copy);
    const char *text = XML_CALL(XP("s", "42") XP("i", "42") XP("b", "true") XP("o", "{\"x\": 1}")
                                    XP("a", "[1, 2]") XP("e", "2") XP("p", "\"7\"") XP("sn", "null")
                                        XP("u", "5") XP("d", "3") XP("z", "false"));
    typed_args(t, tools, text,
               "{\"s\": \"42\", \"i\": 42, \"b\": true, \"o\": {\"x\": 1}, \"a\": [1, 2], "
               "\"e\": \"2\", \"p\": \"7\", \"sn\": null, \"u\": 5, \"d\": 3, \"z\": false}");
    /* strings whatever they look like; typed values that are not JSON stay text */
    typed_args(t, tools,
               XML_CALL(XP("s", "true") XP("b", "yes") XP("i", "four") XP("sn", "null!")
                            XP("u", "five") XP("s", "[1, 2]")),
               "{\"s\": \"true\", \"b\": \"yes\", \"i\": \"four\", \"sn\": \"null!\", \"u\": "
               "\"five\", \"s\": \"[1, 2]\"}");
    /* a raw string keeps its quotes (only a forced pattern string comes quoted), a string
     * of a union its text */
    typed_args(t, tools, XML_CALL(XP("s", "\"q\"") XP("sn", "\"q\"") XP("u", "\"q\"")),
               "{\"s\": \"\\\"q\\\"\", \"sn\": \"\\\"q\\\"\", \"u\": \"q\"}");
    /* without tools, or for another tool's name: today's guess */
    typed_args(t, NULL, XML_CALL(XP("s", "42") XP("b", "true")), "{\"s\": 42, \"b\": true}");
    typed_args(t, tools, "<tool_call>\n<function=g>\n" XP("s", "42") "</function>\n</tool_call>",
               "{\"s\": 42}");
    cpulm_json_doc *none = NULL;
    CHECK(t, cpulm_oai_tools_copy(NULL, &none) == CPULM_OK && none == NULL);
    cpulm_json_free(copy);
}

/* Streaming: prefixes of a reply never release call text as content, and the pieces the
 * stream would send (content, then each call's arguments as they grow) add up. */
TEST(tools_scan_streams_incrementally) {
    const char *text = "Sure.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 10, \"b\": "
                       "2}}\n</tool_call>";
    size_t n = strlen(text), content_sent = 0, args_sent = 0;
    int named_at = -1;
    for (size_t k = 1; k <= n; k++) {
        cpulm_oai_scan sc;
        cpulm_oai_scan_calls(text, k, 0, 0, &sc);
        CHECK(t, sc.content_len <= 6 && sc.content_len >= content_sent);
        content_sent = sc.content_len;
        if (sc.n_calls == 1) {
            if (named_at < 0) named_at = (int)k;
            CHECK(t, sc.calls[0].args_len >= args_sent);
            args_sent = sc.calls[0].args_len;
        }
    }
    CHECK_EQ_INT(t, content_sent, 6);
    CHECK(t, named_at > 0 && named_at < (int)(strstr(text, "{\"a\"") - text) + 1);
    CHECK_EQ_INT(t, args_sent, strlen("{\"a\": 10, \"b\": 2}"));
    /* plain text streams out at once, except a tail that may open a marker */
    cpulm_oai_scan sc;
    cpulm_oai_scan_calls("Hello <tool", 11, 0, 0, &sc);
    CHECK_EQ_INT(t, sc.content_len, 6);
    cpulm_oai_scan_calls("Hello there", 11, 0, 0, &sc);
    CHECK_EQ_INT(t, sc.content_len, 11);
}

/* The template decides Mistral's call format: NAME[ARGS]{...} templates are v11+. */
TEST(tools_family_of_template) {
    CHECK(t, !strcmp(cpulm_oai_tool_family("[INST]{{ m }}[/INST]"), "mistral"));
    CHECK(t, !strcmp(cpulm_oai_tool_family("[INST]{{ m }}[/INST][TOOL_CALLS]{{ n }}[ARGS]{{ a }}"),
                     "mistral-v11"));
    CHECK(t, !strcmp(cpulm_oai_tool_family("<|im_start|>"), "chatml"));
    CHECK(t, !strcmp(cpulm_oai_tool_family("<|im_start|>{{ '<function=' }}{{ '<parameter=' }}"),
                     "qwen-xml"));
    CHECK(t, cpulm_oai_tool_family("plain") == NULL);
}

/* Streaming the v11+ and built-in forms: a call is announced only with its whole name,
 * nothing of it is released as content, and the arguments grow to the whole. */
static void stream_one(test_ctx *t, const char *text, const char *name, size_t content,
                       int forced) {
    size_t n = strlen(text), args_sent = 0;
    for (size_t k = 1; k <= n; k++) {
        cpulm_oai_scan sc;
        cpulm_oai_scan_calls(text, k, 0, forced, &sc);
        CHECK(t, sc.content_len <= content);
        if (sc.n_calls == 0) continue;
        CHECK(t, sc.calls[0].name_len == strlen(name) &&
                     !memcmp(text + sc.calls[0].name_off, name, strlen(name)));
        CHECK(t, sc.calls[0].args_len >= args_sent);
        args_sent = sc.calls[0].args_len;
    }
    cpulm_oai_scan sc;
    cpulm_oai_scan_calls(text, n, 1, forced, &sc);
    CHECK_EQ_INT(t, sc.n_calls, 1);
    CHECK_EQ_INT(t, sc.content_len, content);
    CHECK(t, sc.calls[0].complete && sc.calls[0].args_len == args_sent);
}

TEST(tools_scan_streams_new_formats) {
    stream_one(t, "Ok.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}", "get_weather", 3, 0);
    stream_one(t, "[TOOL_CALLS]add[CALL_ID]x9Y8z7W6v[ARGS]{\"a\": 1, \"b\": 2}", "add", 0, 0);
    stream_one(t, "<|python_tag|>brave_search.call(query=\"a (b)\")", "brave_search", 0, 0);
    /* forced replies (a grammar writes the marker): its first bytes are never content */
    stream_one(t, "[TOOL_CALLS]add[ARGS]{\"a\": 1, \"b\": 2}", "add", 0, 1);
    stream_one(t, "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1}}]", "add", 0, 1);
    stream_one(t, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>",
               "add", 0, 1);
    stream_one(t, "{\"name\": \"add\", \"arguments\": {\"a\": 1}}", "add", 0, 1);
    stream_one(t,
               "Sure.\n<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n"
               "<parameter=b>\n2\n</parameter>\n</function>\n</tool_call>",
               "add", 6, 0);
    stream_one(t,
               "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n</function>\n"
               "</tool_call>",
               "add", 0, 1);
}

/* A template in the Qwen3.5 family's format (tests/data/qwen35-style.jinja: XML tool
 * descriptions and calls, <think> reasoning, a generation prompt opening <think>): the
 * family is told apart, a conversation with a call and its result renders in the format,
 * the prompt opens a think block (reasoning_content split) unless thinking is off, and a
 * reply in the format scans back to the call it describes. */
TEST(tools_qwen35_template_round_trip) {
    size_t len;
    char *tmpl = test_read_file(CPULM_SOURCE_DIR "/tests/data/qwen35-style.jinja", &len);
    REQUIRE(t, tmpl);
    CHECK(t, !strcmp(cpulm_oai_tool_family(tmpl), "qwen-xml"));
    cpulm_oai_request r;
    cpulm_oai_error e;
    REQUIRE(t, parse(TURNS, &r, &e));
    for (int think = 0; think < 2; think++) {
        cpulm_buf out;
        cpulm_buf_init(&out, 0);
        cpulm_oai_chat_prompt info;
        cpulm_status st = cpulm_oai_render_chat_full(tmpl, "", "<|im_end|>", r.messages, r.tools,
                                                     think, &out, &info, &e);
        if (st != CPULM_OK) fprintf(stderr, "  render: %s\n", e.message);
        REQUIRE(t, st == CPULM_OK);
        const char *q = out.data;
        CHECK(t, strstr(q, "<function>\n<name>get_weather</name>") != NULL);
        CHECK(t, strstr(q, "<|im_start|>assistant\n<tool_call>\n<function=get_weather>\n"
                           "<parameter=city>\nParis\n</parameter>\n</function>\n"
                           "</tool_call><|im_end|>\n") != NULL);
        CHECK(t, strstr(q, "<|im_start|>user\n<tool_response>\n21 C\n</tool_response><|im_end|>") !=
                     NULL);
        const char *tail = think ? "<|im_start|>assistant\n<think>\n"
                                 : "<|im_start|>assistant\n<think>\n\n</think>\n\n";
        CHECK(t, out.len >= strlen(tail) && !strcmp(q + out.len - strlen(tail), tail));
        CHECK_EQ_INT(t, info.think, 1);
        CHECK_EQ_INT(t, info.think_open, think);
        cpulm_buf_release(&out);
    }
    cpulm_oai_request_release(&r);
    const char *reply = "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n"
                        "</parameter>\n</function>\n</tool_call>";
    cpulm_oai_scan sc;
    cpulm_oai_scan_calls(reply, strlen(reply), 1, 0, &sc);
    REQUIRE(t, sc.n_calls == 1);
    check_call(t, reply, &sc.calls[0], "get_weather", "{\"city\": \"Oslo\"}");
    free(tmpl);
}

/* harmony (gpt-oss): a forced call is the commentary message to functions.NAME, written
 * from the reply's open header, one per reply (its <|call|> ends generation); the harmony
 * splitter (test_harmony) turns it into the call. */
TEST(tools_forced_call_grammar_harmony) {
    static const char *const choices[] = {"{\"type\":\"function\",\"function\":{\"name\":\"add\"}}",
                                          "\"required\""};
    const char *add = "<|channel|>commentary to=functions.add <|constrain|>json<|message|>"
                      "{\"a\": 1, \"b\": 2}";
    for (int i = 0; i < 2; i++) {
        char body[2048];
        snprintf(body, sizeof body,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":" TOOLS_JSON
                 ",\"tool_choice\":%s}",
                 choices[i]);
        cpulm_oai_request r;
        cpulm_oai_error e;
        REQUIRE(t, parse(body, &r, &e));
        char *text = NULL;
        cpulm_grammar *g = NULL;
        cpulm_error err = {0};
        CHECK(t, cpulm_oai_tool_grammar(&r, "harmony", &text, &e) == 0);
        CHECK(t, text && cpulm_grammar_parse(text, strlen(text), NULL, &g, &err) == CPULM_OK);
        if (g) {
            cpulm_grammar_matcher *m = cpulm_grammar_matcher_new(g, NULL);
            CHECK(t, cpulm_grammar_accept_bytes(m, add, strlen(add)) == CPULM_OK &&
                         cpulm_grammar_complete(m));
            /* one call per reply: nothing may follow it */
            CHECK(t, cpulm_grammar_accept_bytes(m, "\n", 1) != CPULM_OK);
            cpulm_grammar_matcher_reset(m);
            const char *weather = "<|channel|>commentary to=functions.get_weather <|constrain|>"
                                  "json<|message|>{\"city\": \"x\"}";
            int ok = cpulm_grammar_accept_bytes(m, weather, strlen(weather)) == CPULM_OK &&
                     cpulm_grammar_complete(m);
            CHECK_EQ_INT(t, ok, i == 1); /* the named choice allows only add */
            cpulm_grammar_matcher_reset(m);
            const char *json = "{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}";
            CHECK(t, cpulm_grammar_accept_bytes(m, json, strlen(json)) != CPULM_OK);
            cpulm_grammar_matcher_free(m);
        }
        cpulm_grammar_free(g);
        free(text);
        cpulm_oai_request_release(&r);
    }
}
