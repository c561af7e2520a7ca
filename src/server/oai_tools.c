/* oai_tools.c: structured output requests, tool-call grammars and the tool-call scanner
 * (see oai_tools.h). */
#define _GNU_SOURCE
#include "server/oai_tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "server/oai.h"

#define MAX_PARALLEL 4 /* calls one forced reply may hold when parallel_tool_calls is on */

/* ---- request parsing ---- */

static int set_grammar_from_schema(const cpulm_json *schema, const char *param,
                                   cpulm_oai_request *r, cpulm_oai_error *e) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_error err = {0};
    if (cpulm_grammar_from_schema(schema, &b, &err) != CPULM_OK) {
        cpulm_buf_release(&b);
        return cpulm_oai_fail(e, 400, param, "%s: %s", param,
                              err.msg[0] ? err.msg : "cannot compile the JSON schema");
    }
    r->grammar = cpulm_buf_detach(&b, NULL);
    return r->grammar ? 0 : cpulm_oai_fail(e, 500, NULL, "out of memory");
}

static int parse_response_format(const cpulm_json *rf, cpulm_oai_request *r, cpulm_oai_error *e) {
    const char *type = cpulm_json_str(cpulm_json_get(rf, "type"));
    if (rf->type != CPULM_JSON_OBJECT || !type)
        return cpulm_oai_fail(e, 400, "response_format",
                              "'response_format' must be an object "
                              "with a 'type'");
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) {
        const cpulm_json *schema = cpulm_json_get(rf, "schema"); /* llama.cpp's extension */
        if (schema) return set_grammar_from_schema(schema, "response_format", r, e);
        cpulm_buf b;
        cpulm_buf_init(&b, 0);
        cpulm_grammar_json_any(&b, 1);
        r->grammar = cpulm_buf_detach(&b, NULL);
        return 0;
    }
    if (!strcmp(type, "json_schema")) {
        const cpulm_json *js = cpulm_json_get(rf, "json_schema");
        const cpulm_json *schema = cpulm_json_get(js, "schema");
        if (!js || js->type != CPULM_JSON_OBJECT)
            return cpulm_oai_fail(e, 400, "response_format",
                                  "'response_format.json_schema' "
                                  "must be an object");
        if (!schema) schema = cpulm_json_get(rf, "schema");
        if (schema) return set_grammar_from_schema(schema, "response_format", r, e);
        cpulm_buf b; /* no schema: any JSON object */
        cpulm_buf_init(&b, 0);
        cpulm_grammar_json_any(&b, 1);
        r->grammar = cpulm_buf_detach(&b, NULL);
        return 0;
    }
    return cpulm_oai_fail(e, 400, "response_format",
                          "unsupported response_format type '%s' "
                          "(text, json_object, json_schema)",
                          type);
}

/* Checks tools: [{type: "function", function: {name, description?, parameters?}}]. */
static int check_tools(const cpulm_json *tools, cpulm_oai_error *e) {
    if (tools->type != CPULM_JSON_ARRAY)
        return cpulm_oai_fail(e, 400, "tools", "'tools' must be an array");
    for (size_t i = 0; i < tools->u.list.n; i++) {
        const cpulm_json *t = &tools->u.list.items[i], *f = cpulm_json_get(t, "function");
        const char *type = cpulm_json_str(cpulm_json_get(t, "type"));
        const char *name = cpulm_json_str(cpulm_json_get(f, "name"));
        if (!type || strcmp(type, "function") != 0 || !f || f->type != CPULM_JSON_OBJECT || !name ||
            !*name)
            return cpulm_oai_fail(e, 400, "tools",
                                  "tools[%zu] must be {\"type\": \"function\", "
                                  "\"function\": {\"name\": ...}}",
                                  i);
        const cpulm_json *p = cpulm_json_get(f, "parameters");
        if (p && p->type != CPULM_JSON_OBJECT)
            return cpulm_oai_fail(e, 400, "tools",
                                  "tools[%zu].function.parameters must be an "
                                  "object",
                                  i);
    }
    return 0;
}

static const cpulm_json *find_tool(const cpulm_json *tools, const char *name) {
    for (size_t i = 0; i < cpulm_json_len(tools); i++) {
        const cpulm_json *f = cpulm_json_get(cpulm_json_at(tools, i), "function");
        const char *n = cpulm_json_str(cpulm_json_get(f, "name"));
        if (n && !strcmp(n, name)) return f;
    }
    return NULL;
}

static int parse_tool_choice(const cpulm_json *root, cpulm_oai_request *r, cpulm_oai_error *e) {
    const cpulm_json *tc = cpulm_json_get(root, "tool_choice");
    if (!tc || tc->type == CPULM_JSON_NULL) return 0;
    const char *s = cpulm_json_str(tc);
    if (s && !strcmp(s, "none"))
        r->tool_choice = CPULM_OAI_TOOLS_OFF;
    else if (s && !strcmp(s, "auto"))
        r->tool_choice = r->tools ? CPULM_OAI_TOOLS_AUTO : CPULM_OAI_TOOLS_OFF;
    else if (s && !strcmp(s, "required"))
        r->tool_choice = CPULM_OAI_TOOLS_REQUIRED;
    else if (!s && tc->type == CPULM_JSON_OBJECT) {
        const char *name = cpulm_json_str(cpulm_json_get(cpulm_json_get(tc, "function"), "name"));
        if (!name)
            return cpulm_oai_fail(e, 400, "tool_choice",
                                  "'tool_choice' must be \"none\", "
                                  "\"auto\", \"required\" or {\"type\": \"function\", "
                                  "\"function\": {\"name\": ...}}");
        r->tool_choice = CPULM_OAI_TOOLS_NAMED;
        r->tool_name = name;
    } else {
        return cpulm_oai_fail(e, 400, "tool_choice",
                              "'tool_choice' must be \"none\", \"auto\", "
                              "\"required\" or a named function");
    }
    if (r->tool_choice >= CPULM_OAI_TOOLS_REQUIRED && !r->tools)
        return cpulm_oai_fail(e, 400, "tool_choice", "'tool_choice' needs 'tools'");
    if (r->tool_choice == CPULM_OAI_TOOLS_NAMED && !find_tool(r->tools, r->tool_name))
        return cpulm_oai_fail(e, 400, "tool_choice", "no tool named '%.100s' in 'tools'",
                              r->tool_name);
    return 0;
}

int cpulm_oai_parse_structured(const cpulm_json *root, cpulm_oai_request *r, cpulm_oai_error *e) {
    const cpulm_json *rf = cpulm_json_get(root, "response_format");
    const cpulm_json *js = cpulm_json_get(root, "json_schema");
    const cpulm_json *gr = cpulm_json_get(root, "grammar");
    rf = rf && rf->type != CPULM_JSON_NULL ? rf : NULL;
    js = js && js->type != CPULM_JSON_NULL ? js : NULL;
    gr = gr && gr->type != CPULM_JSON_NULL ? gr : NULL;
    if (!!rf + !!js + !!gr > 1)
        return cpulm_oai_fail(e, 400, gr ? "grammar" : "json_schema",
                              "give only one of "
                              "'response_format', 'json_schema' and 'grammar'");
    if (rf && parse_response_format(rf, r, e) < 0) return -1;
    if (js && set_grammar_from_schema(js, "json_schema", r, e) < 0) return -1;
    if (gr) {
        if (gr->type != CPULM_JSON_STRING)
            return cpulm_oai_fail(e, 400, "grammar", "'grammar' must be a string (GBNF)");
        cpulm_grammar *g = NULL;
        cpulm_error err = {0};
        cpulm_status st = cpulm_grammar_cache_get(cpulm_grammar_cache_shared(), gr->u.str.s,
                                                  gr->u.str.len, NULL, &g, &err);
        if (st != CPULM_OK)
            return cpulm_oai_fail(e, cpulm_oai_http_status(st), "grammar", "%s", err.msg);
        cpulm_grammar_free(g);
        r->grammar = malloc(gr->u.str.len + 1);
        if (!r->grammar) return cpulm_oai_fail(e, 500, NULL, "out of memory");
        memcpy(r->grammar, gr->u.str.s, gr->u.str.len + 1);
    }
    const cpulm_json *tools = cpulm_json_get(root, "tools");
    r->parallel_tool_calls = cpulm_json_bool(cpulm_json_get(root, "parallel_tool_calls"), 1);
    if (tools && tools->type != CPULM_JSON_NULL) {
        if (r->kind != CPULM_OAI_CHAT)
            return cpulm_oai_fail(e, 400, "tools", "'tools' needs /v1/chat/completions");
        if (check_tools(tools, e) < 0) return -1;
        if (tools->u.list.n > 0) {
            r->tools = tools;
            r->tool_choice = CPULM_OAI_TOOLS_AUTO;
        }
    }
    if (parse_tool_choice(root, r, e) < 0) return -1;
    if (r->tool_choice >= CPULM_OAI_TOOLS_REQUIRED && r->grammar)
        return cpulm_oai_fail(e, 400, "tool_choice",
                              "a forced tool call cannot be combined "
                              "with 'response_format', 'json_schema' or 'grammar'");
    return 0;
}

/* ---- grammars for forced calls ---- */

/* args_key for harmony's form (compared by address) */
static const char HARMONY_ARGS[] = "";

/* One alternative of the call rule: {"name": "<name>", "<key>": <arguments>}, with args_key
 * NULL Mistral v11's [TOOL_CALLS]<name>[ARGS]<arguments>, with HARMONY_ARGS harmony's
 * commentary message <|channel|>commentary to=functions.<name> <|constrain|>json<|message|>
 * <arguments> (its <|call|>, an end of generation, follows when the grammar is done). */
static int call_alt(const cpulm_json *fn, const char *args_key, cpulm_buf *rules, int *next,
                    cpulm_buf *alt, cpulm_oai_error *e) {
    const cpulm_json *params = cpulm_json_get(fn, "parameters");
    const char *name = cpulm_json_str(cpulm_json_get(fn, "name"));
    int r = -1;
    if (params) {
        cpulm_error err = {0};
        if ((r = cpulm_grammar_schema_rules(params, rules, next, &err)) < 0)
            return cpulm_oai_fail(e, 400, "tools", "tool '%.60s' parameters: %s", name, err.msg);
    }
    cpulm_buf q, lit;
    cpulm_buf_init(&q, 0);
    cpulm_buf_init(&lit, 0);
    cpulm_json_quote(&q, name, strlen(name), 0);
    if (args_key == HARMONY_ARGS)
        cpulm_buf_printf(&lit, "<|channel|>commentary to=functions.%s <|constrain|>json<|message|>",
                         name);
    else if (args_key)
        cpulm_buf_printf(&lit, "{\"name\": %s, \"%s\": ", q.data, args_key);
    else
        cpulm_buf_printf(&lit, "[TOOL_CALLS]%s[ARGS]", name);
    cpulm_buf_putc(alt, '"');
    for (size_t i = 0; i < lit.len; i++) { /* as a GBNF literal */
        char ch = lit.data[i];
        if (ch == '"' || ch == '\\') cpulm_buf_putc(alt, '\\');
        cpulm_buf_putc(alt, ch);
    }
    cpulm_buf_putc(alt, '"');
    const char *close = args_key && args_key != HARMONY_ARGS ? " \"}\"" : "";
    if (r >= 0)
        cpulm_buf_printf(alt, " r%d%s", r, close);
    else
        cpulm_buf_printf(alt, " json-object1%s", close);
    cpulm_buf_release(&q);
    cpulm_buf_release(&lit);
    return 0;
}

/* s as a GBNF literal ("..." with quotes and backslashes escaped; a newline as \n). */
static void gbnf_lit(cpulm_buf *b, const char *s) {
    cpulm_buf_putc(b, '"');
    for (; *s; s++) {
        if (*s == '\n') {
            cpulm_buf_puts(b, "\\n");
            continue;
        }
        if (*s == '"' || *s == '\\') cpulm_buf_putc(b, '\\');
        cpulm_buf_putc(b, *s);
    }
    cpulm_buf_putc(b, '"');
}

/* An enum of strings only (a forced call writes its members raw). */
static int string_enum(const cpulm_json *prop) {
    const cpulm_json *en = cpulm_json_get(prop, "enum");
    int all_str = en && cpulm_json_len(en) > 0;
    for (size_t i = 0; all_str && i < cpulm_json_len(en); i++)
        all_str = cpulm_json_str(cpulm_json_at(en, i)) != NULL;
    return all_str;
}

/* Does a forced call write this parameter's value as raw text (a plain string: no enum,
 * pattern, anyOf or oneOf; a schema without a type is also taken as text)? Else the value
 * is written as the JSON its schema rule gives (a pattern string comes quoted). */
static int xml_raw_text(const cpulm_json *prop) {
    const char *type = cpulm_json_str(cpulm_json_get(prop, "type"));
    return !cpulm_json_get(prop, "enum") && (!type || !strcmp(type, "string")) &&
           !cpulm_json_get(prop, "pattern") && !cpulm_json_get(prop, "anyOf") &&
           !cpulm_json_get(prop, "oneOf");
}

/* The value of one XML parameter: raw text for a plain string (no '<', so it cannot run
 * into its closing tag), the raw members of a string enum, else the property's JSON rule
 * (numbers, booleans, objects, arrays: cpulm_oai_call_args reads them back as JSON). */
static int xml_value_rule(const cpulm_json *prop, cpulm_buf *rules, int *next, cpulm_buf *alt,
                          cpulm_oai_error *e) {
    const cpulm_json *en = cpulm_json_get(prop, "enum");
    if (string_enum(prop)) {
        cpulm_buf_puts(alt, "( ");
        for (size_t i = 0; i < cpulm_json_len(en); i++) {
            if (i) cpulm_buf_puts(alt, " | ");
            gbnf_lit(alt, cpulm_json_str(cpulm_json_at(en, i)));
        }
        cpulm_buf_puts(alt, " )");
        return 0;
    }
    if (xml_raw_text(prop)) {
        cpulm_buf_puts(alt, "xml-text");
        return 0;
    }
    cpulm_error err = {0};
    int r = cpulm_grammar_schema_rules(prop, rules, next, &err);
    if (r < 0) return cpulm_oai_fail(e, 400, "tools", "tool parameters: %s", err.msg);
    cpulm_buf_printf(alt, "r%d", r);
    return 0;
}

static int is_required(const cpulm_json *params, const char *key) {
    const cpulm_json *req = cpulm_json_get(params, "required");
    for (size_t i = 0; i < cpulm_json_len(req); i++) {
        const char *k = cpulm_json_str(cpulm_json_at(req, i));
        if (k && !strcmp(k, key)) return 1;
    }
    return 0;
}

/* One alternative of the call rule in the XML form: <function=NAME>\n, then each property
 * in the schema's order as <parameter=KEY>\nVALUE\n</parameter>\n (optional unless
 * required), then </function>. Without properties, any parameters of plain text. */
static int xml_alt(const cpulm_json *fn, cpulm_buf *rules, int *next, cpulm_buf *alt,
                   cpulm_oai_error *e) {
    const cpulm_json *params = cpulm_json_get(fn, "parameters");
    const cpulm_json *props = cpulm_json_get(params, "properties");
    cpulm_buf head;
    cpulm_buf_init(&head, 0);
    cpulm_buf_printf(&head, "<function=%s>\n", cpulm_json_str(cpulm_json_get(fn, "name")));
    gbnf_lit(alt, head.data);
    cpulm_buf_release(&head);
    if (!props || props->type != CPULM_JSON_OBJECT) cpulm_buf_puts(alt, " xml-any-param*");
    for (size_t i = 0; props && props->type == CPULM_JSON_OBJECT && i < cpulm_json_len(props);
         i++) {
        const cpulm_json *prop = cpulm_json_at(props, i);
        const char *key = prop->key;
        cpulm_buf open;
        cpulm_buf_init(&open, 0);
        cpulm_buf_printf(&open, "<parameter=%s>\n", key);
        int req = is_required(params, key);
        cpulm_buf_puts(alt, req ? " " : " ( ");
        gbnf_lit(alt, open.data);
        cpulm_buf_release(&open);
        cpulm_buf_putc(alt, ' ');
        if (xml_value_rule(prop, rules, next, alt, e)) return -1;
        cpulm_buf_puts(alt, req ? " \"\\n</parameter>\\n\"" : " \"\\n</parameter>\\n\" )?");
    }
    cpulm_buf_puts(alt, " \"</function>\"");
    return 0;
}

const char *cpulm_oai_tool_family(const char *tmpl) {
    const char *family = cpulm_chat_detect(tmpl);
    if (family && !strcmp(family, "mistral") && strstr(tmpl, "[ARGS]")) return "mistral-v11";
    if (family && !strcmp(family, "chatml") && strstr(tmpl, "<function=") &&
        strstr(tmpl, "<parameter="))
        return "qwen-xml";
    return family;
}

int cpulm_oai_tool_grammar(const cpulm_oai_request *q, const char *family, char **out,
                           cpulm_oai_error *e) {
    *out = NULL;
    int hermes = family && !strcmp(family, "chatml"), llama3 = family && !strcmp(family, "llama3");
    int mistral = family && !strcmp(family, "mistral");
    int v11 = family && !strcmp(family, "mistral-v11"); /* calls one after another */
    int harmony = family && !strcmp(family, "harmony"); /* one call per reply */
    int xml = family && !strcmp(family, "qwen-xml");
    hermes |= xml;
    const char *key = llama3 ? "parameters" : v11 ? NULL : harmony ? HARMONY_ARGS : "arguments";
    cpulm_buf rules, call;
    cpulm_buf_init(&rules, 0);
    cpulm_buf_init(&call, 0);
    int next = 0, rc = 0;
    cpulm_buf_puts(&call, "call ::= ");
    for (size_t i = 0, n = 0; rc == 0 && i < cpulm_json_len(q->tools); i++) {
        const cpulm_json *fn = cpulm_json_get(cpulm_json_at(q->tools, i), "function");
        const char *name = cpulm_json_str(cpulm_json_get(fn, "name"));
        if (q->tool_choice == CPULM_OAI_TOOLS_NAMED && strcmp(name, q->tool_name) != 0) continue;
        if (n++) cpulm_buf_puts(&call, " | ");
        rc =
            xml ? xml_alt(fn, &rules, &next, &call, e) : call_alt(fn, key, &rules, &next, &call, e);
    }
    if (rc) {
        cpulm_buf_release(&rules);
        cpulm_buf_release(&call);
        return -1;
    }
    int max = q->tool_choice == CPULM_OAI_TOOLS_REQUIRED && q->parallel_tool_calls && !harmony
                  ? MAX_PARALLEL
                  : 1;
    const char *one = hermes ? "\"<tool_call>\\n\" call \"\\n</tool_call>\"" : "call";
    const char *sep = mistral ? "\", \"" : v11 ? "" : "\"\\n\"";
    cpulm_buf g;
    cpulm_buf_init(&g, 0);
    cpulm_buf_printf(&g, "root ::= %s%s ( %s %s ){0,%d}%s\n", mistral ? "\"[TOOL_CALLS][\" " : "",
                     one, sep, one, max - 1, mistral ? " \"]\"" : "");
    cpulm_buf_printf(&g, "%s\n%s", call.data, rules.data);
    if (xml)
        cpulm_buf_puts(&g, "xml-text ::= [^<]*\nxml-any-param ::= \"<parameter=\" "
                           "[a-zA-Z0-9_.-]+ \">\\n\" xml-text \"\\n</parameter>\\n\"\n");
    cpulm_grammar_json_base(&g);
    cpulm_buf_release(&rules);
    cpulm_buf_release(&call);
    if (cpulm_buf_status(&g) != CPULM_OK) {
        cpulm_buf_release(&g);
        return cpulm_oai_fail(e, 500, NULL, "out of memory");
    }
    *out = cpulm_buf_detach(&g, NULL);
    return 0;
}

void cpulm_oai_tool_system_msg(const cpulm_json *tools, cpulm_buf *out) {
    cpulm_buf text;
    cpulm_buf_init(&text, 0);
    cpulm_buf_puts(&text, "You can call these tools (JSON descriptions):\n");
    for (size_t i = 0; i < cpulm_json_len(tools); i++) {
        cpulm_json_writer w;
        cpulm_json_writer_init(&w, &text, 0, 0);
        cpulm_json_write_value(&w, cpulm_json_get(cpulm_json_at(tools, i), "function"));
        cpulm_buf_putc(&text, '\n');
    }
    cpulm_buf_puts(&text, "To call a tool, reply with only a JSON object: {\"name\": <tool name>, "
                          "\"arguments\": <arguments object>}.");
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, out, 0, 0);
    cpulm_json_obj_begin(&w);
    cpulm_json_kv_str(&w, "role", "system");
    cpulm_json_kv_strn(&w, "content", text.data, text.len);
    cpulm_json_obj_end(&w);
    cpulm_buf_release(&text);
}

/* ---- scanning generated text ---- */

/* Markers that open a call region, as the families write them. */
static const char *const MARKERS[] = {
    "<tool_call>", "<|python_tag|>", "[TOOL_CALLS]",
    "<\xef\xbd\x9ctool\xe2\x96\x81"
    "calls\xe2\x96\x81"
    "begin\xef\xbd\x9c>", /* DeepSeek */
};
enum { M_HERMES, M_PYTAG, M_MISTRAL, M_DEEPSEEK, M_COUNT, M_BARE = M_COUNT };

#define DS_CALL_BEGIN               \
    "<\xef\xbd\x9ctool\xe2\x96\x81" \
    "call\xe2\x96\x81"              \
    "begin\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"
#define DS_CALL_END                 \
    "<\xef\xbd\x9ctool\xe2\x96\x81" \
    "call\xe2\x96\x81"              \
    "end\xef\xbd\x9c>"

enum { P_OK = 0, P_MORE = 1, P_BAD = 2 }; /* parsed / ran out of text / does not match */

typedef struct cur {
    const char *s;
    size_t n, i;
} cur;

static void skip_ws(cur *c) {
    while (c->i < c->n &&
           (c->s[c->i] == ' ' || c->s[c->i] == '\n' || c->s[c->i] == '\t' || c->s[c->i] == '\r'))
        c->i++;
}

/* Literal lit at the cursor: P_OK (consumed), P_MORE (text ends inside it), P_BAD. */
static int lit(cur *c, const char *l) {
    size_t k = strlen(l), avail = c->n - c->i;
    if (avail < k) return memcmp(c->s + c->i, l, avail) == 0 ? P_MORE : P_BAD;
    if (memcmp(c->s + c->i, l, k) != 0) return P_BAD;
    c->i += k;
    return P_OK;
}

/* A JSON string at the cursor (after its opening quote is checked here). */
static int jstring(cur *c, size_t *off, size_t *len) {
    if (c->i >= c->n) return P_MORE;
    if (c->s[c->i] != '"') return P_BAD;
    size_t start = ++c->i;
    while (c->i < c->n && c->s[c->i] != '"') {
        if (c->s[c->i] == '\\') c->i++;
        c->i++;
    }
    if (c->i >= c->n) return P_MORE;
    *off = start;
    *len = c->i - start;
    c->i++;
    return P_OK;
}

/* Any JSON value, by bracket depth outside strings (validity is checked later). */
static int jvalue(cur *c) {
    if (c->i >= c->n) return P_MORE;
    char ch = c->s[c->i];
    if (ch == '"') {
        size_t o, l;
        return jstring(c, &o, &l);
    }
    if (ch != '{' && ch != '[') { /* scalar: up to a delimiter */
        while (c->i < c->n && !strchr(",}] \n\t\r", c->s[c->i]))
            c->i++;
        return c->i < c->n ? P_OK : P_MORE;
    }
    int depth = 0;
    while (c->i < c->n) {
        ch = c->s[c->i];
        if (ch == '"') {
            size_t o, l;
            int r = jstring(c, &o, &l);
            if (r) return r;
            continue;
        }
        if (ch == '{' || ch == '[')
            depth++;
        else if (ch == '}' || ch == ']')
            depth--;
        c->i++;
        if (depth == 0) return P_OK;
    }
    return P_MORE;
}

/* {"name": "...", "arguments" | "parameters": {...} | "...", other keys...} */
static int json_call(cur *c, cpulm_oai_call *call) {
    memset(call, 0, sizeof *call);
    int r, has_name = 0;
    if ((r = lit(c, "{"))) return r;
    for (int first = 1;; first = 0) {
        skip_ws(c);
        if (!first) {
            if (c->i < c->n && c->s[c->i] == '}') {
                c->i++;
                call->complete = has_name;
                return has_name ? P_OK : P_BAD;
            }
            if ((r = lit(c, ","))) return r;
            skip_ws(c);
        }
        size_t ko, kl;
        if ((r = jstring(c, &ko, &kl))) return r;
        skip_ws(c);
        if ((r = lit(c, ":"))) return r;
        skip_ws(c);
        int is_name = kl == 4 && !memcmp(c->s + ko, "name", 4);
        int is_args = (kl == 9 && !memcmp(c->s + ko, "arguments", 9)) ||
                      (kl == 10 && !memcmp(c->s + ko, "parameters", 10));
        if (is_name) {
            if ((r = jstring(c, &call->name_off, &call->name_len))) return r;
            has_name = 1;
        } else if (is_args) {
            if (!has_name) return P_BAD; /* name first: the stream must know it */
            call->args_off = c->i;
            call->args_is_string = c->i < c->n && c->s[c->i] == '"';
            r = jvalue(c);
            call->args_len = c->i - call->args_off;
            if (r) return r;
        } else if ((r = jvalue(c))) {
            return r;
        }
        if (first && !is_name) return P_BAD;
    }
}

/* DeepSeek: <tool call begin>function<sep>NAME\n```json\nARGS\n```<tool call end> */
static int ds_call(cur *c, cpulm_oai_call *call) {
    memset(call, 0, sizeof *call);
    int r;
    if ((r = lit(c, DS_CALL_BEGIN)) || (r = lit(c, "function")) || (r = lit(c, DS_SEP))) return r;
    call->name_off = c->i;
    while (c->i < c->n && c->s[c->i] != '\n')
        c->i++;
    if (c->i >= c->n) return P_MORE;
    call->name_len = c->i - call->name_off;
    c->i++;
    if ((r = lit(c, "```json\n"))) return r;
    call->args_off = c->i;
    if ((r = jvalue(c))) return r;
    call->args_len = c->i - call->args_off;
    skip_ws(c);
    if ((r = lit(c, "```")) || (r = lit(c, DS_CALL_END))) return r;
    call->complete = 1;
    return P_OK;
}

/* Qwen3-Coder / Qwen3.5: <function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...
 * </function>. A value runs to its </parameter> whatever it holds (code, JSON, newlines);
 * the arguments are the text between the two function tags (cpulm_oai_call_args converts
 * them). The name counts once its '>' is seen. */
static int xml_call(cur *c, cpulm_oai_call *call) {
    memset(call, 0, sizeof *call);
    int r;
    if ((r = lit(c, "<function="))) return r;
    size_t start = c->i;
    while (c->i < c->n && c->s[c->i] != '>' && c->s[c->i] != '\n' && c->s[c->i] != '<')
        c->i++;
    if (c->i == c->n) return P_MORE;
    if (c->i == start || c->s[c->i] != '>') return P_BAD;
    call->name_off = start;
    call->name_len = c->i - start;
    call->args_xml = 1;
    call->args_off = ++c->i;
    for (;;) {
        call->args_len = c->i - call->args_off;
        skip_ws(c);
        if (c->i == c->n) return P_MORE;
        if ((r = lit(c, "</function>")) == P_OK) break;
        if (r == P_MORE) return r;
        if ((r = lit(c, "<parameter="))) return r;
        const char *end = memmem(c->s + c->i, c->n - c->i, "</parameter>", 12);
        const char *gt = memchr(c->s + c->i, '>', c->n - c->i);
        if (gt && end && gt > end) return P_BAD; /* no '>' closing the key */
        if (!end) return P_MORE;
        c->i = (size_t)(end - c->s) + 12;
    }
    call->complete = 1;
    return P_OK;
}

/* Characters of a tool name in the marker-delimited forms (no JSON string around it). */
static int name_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '-' || ch == '.';
}

/* Mistral v11+ (tokenizer v11 and later: Mistral Small 3.1+, Magistral, Devstral): after
 * each [TOOL_CALLS], NAME[ARGS]{...}, with an optional [CALL_ID]ID before [ARGS] (v13);
 * several calls repeat the whole. The name counts only once its end is seen. */
static int mistral_v11(cur *c, cpulm_oai_scan *out) {
    for (int k = 0;; k++) {
        int r;
        if (k > 0) {
            skip_ws(c);
            if (c->i == c->n) return P_OK;
            if ((r = lit(c, MARKERS[M_MISTRAL]))) return r;
        }
        if (out->n_calls >= CPULM_OAI_MAX_CALLS) return P_BAD;
        cpulm_oai_call *call = &out->calls[out->n_calls];
        memset(call, 0, sizeof *call);
        size_t start = c->i;
        while (c->i < c->n && name_char(c->s[c->i]))
            c->i++;
        if (c->i == c->n) return P_MORE;
        if (c->i == start || (c->s[c->i] != '[' && c->s[c->i] != '{')) return P_BAD;
        size_t name_end = c->i;
        r = c->s[c->i] == '[' ? lit(c, "[CALL_ID]") : P_BAD;
        if (r == P_MORE) return r;
        if (r == P_OK) {
            while (c->i < c->n && name_char(c->s[c->i]))
                c->i++;
        }
        /* [ARGS], or nothing where a template drops it: NAME{...} */
        if (c->i < c->n && c->s[c->i] != '{' && (r = lit(c, "[ARGS]")))
            return r == P_MORE || c->i == c->n ? P_MORE : r;
        if (c->i == c->n) return P_MORE;
        call->name_off = start;
        call->name_len = name_end - start;
        out->n_calls++;
        skip_ws(c);
        if (c->i < c->n && c->s[c->i] != '{') return P_BAD;
        call->args_off = c->i;
        r = jvalue(c);
        call->args_len = c->i - call->args_off;
        if (r) return r;
        call->complete = 1;
    }
}

/* Llama 3.1+ built-in tools: <|python_tag|>NAME.call(key="value", ...), e.g.
 * brave_search.call(query="...") or wolfram_alpha.call(query="..."); the arguments are
 * Python keyword arguments (cpulm_oai_call_args writes them as a JSON object). */
static int llama_builtin(cur *c, cpulm_oai_call *call) {
    memset(call, 0, sizeof *call);
    size_t start = c->i;
    while (c->i < c->n && name_char(c->s[c->i]) && c->s[c->i] != '.')
        c->i++;
    if (c->i == c->n) return P_MORE;
    if (c->i == start) return P_BAD;
    size_t name_end = c->i;
    int r = lit(c, ".call(");
    if (r) return r;
    call->name_off = start;
    call->name_len = name_end - start;
    call->args_py = 1;
    call->args_off = c->i;
    char quote = 0;
    for (; c->i < c->n; c->i++) {
        char ch = c->s[c->i];
        if (quote && ch == '\\')
            c->i++;
        else if (quote && ch == quote)
            quote = 0;
        else if (!quote && (ch == '"' || ch == '\''))
            quote = ch;
        else if (!quote && ch == ')')
            break;
    }
    if (c->i >= c->n) return P_MORE;
    call->args_len = c->i - call->args_off;
    c->i++;
    call->complete = 1;
    return P_OK;
}

/* The calls of one region kind from the cursor; P_OK when the text ends cleanly after
 * complete calls. */
static int region(cur *c, int kind, cpulm_oai_scan *out) {
    int r = P_OK;
    if (kind == M_MISTRAL) {
        skip_ws(c);
        if (c->i == c->n) return P_MORE;
        if (c->s[c->i] != '[') return mistral_v11(c, out); /* v11+: NAME[ARGS]{...} */
        if ((r = lit(c, "["))) return r;
    }
    if (kind == M_PYTAG) { /* a built-in tool call rather than JSON */
        skip_ws(c);
        if (c->i == c->n) return P_MORE;
        if (c->s[c->i] != '{') {
            r = llama_builtin(c, &out->calls[0]);
            if (out->calls[0].name_len) out->n_calls = 1;
            skip_ws(c);
            return r ? r : c->i == c->n ? P_OK : P_BAD;
        }
    }
    for (int k = 0;; k++) {
        skip_ws(c);
        if (c->i >= c->n) return k == 0 ? P_MORE : (kind == M_MISTRAL ? P_MORE : P_OK);
        if (kind == M_MISTRAL && k > 0) {
            if (c->s[c->i] == ']') {
                c->i++;
                skip_ws(c);
                return c->i == c->n ? P_OK : P_BAD;
            }
            if ((r = lit(c, ","))) return r;
            skip_ws(c);
        }
        if (kind == M_HERMES && (r = lit(c, MARKERS[M_HERMES]))) return r;
        if (kind == M_HERMES) skip_ws(c);
        if (kind == M_PYTAG && k > 0) {
            if ((r = lit(c, ";"))) return r;
            skip_ws(c);
        }
        if (kind == M_DEEPSEEK && k > 0 &&
            lit(c, "<\xef\xbd\x9ctool\xe2\x96\x81"
                   "calls\xe2\x96\x81"
                   "end\xef\xbd\x9c>") == P_OK) {
            skip_ws(c);
            return c->i == c->n ? P_OK : P_BAD;
        }
        if (out->n_calls >= CPULM_OAI_MAX_CALLS) return P_BAD;
        cpulm_oai_call *call = &out->calls[out->n_calls];
        int xml = kind == M_HERMES && c->i < c->n && c->s[c->i] == '<';
        r = kind == M_DEEPSEEK ? ds_call(c, call) : xml ? xml_call(c, call) : json_call(c, call);
        if (r == P_BAD) return r;
        if (call->name_len || r == P_OK) out->n_calls++;
        if (r) return r;
        if (kind == M_HERMES) {
            skip_ws(c);
            if ((r = lit(c, "</tool_call>"))) return r;
        }
    }
}

/* Where the call region starts and its kind: a marker, or a '{' opening the output. */
static size_t find_region(const char *t, size_t n, int forced, int *kind, size_t *hold) {
    size_t best = n;
    *kind = -1;
    for (int k = 0; k < M_COUNT; k++) {
        const char *hit = memmem(t, n, MARKERS[k], strlen(MARKERS[k]));
        if (hit && (size_t)(hit - t) < best) best = (size_t)(hit - t), *kind = k;
    }
    size_t lead = 0;
    while (lead < n && strchr(" \n\t\r", t[lead]))
        lead++;
    if (forced && *kind < 0) /* a forced reply may still be opening with a marker */
        for (int m = 0; m < M_COUNT; m++)
            if (n - lead < strlen(MARKERS[m]) && !memcmp(t + lead, MARKERS[m], n - lead)) {
                *hold = lead;
                return n;
            }
    if ((lead < n && t[lead] == '{' && lead < best) || (forced && *kind < 0)) {
        *kind = M_BARE;
        best = lead;
    }
    /* hold back a tail that may become a marker, and leading whitespace (maybe a '{') */
    *hold = best;
    if (*kind < 0) {
        if (lead == n) *hold = 0;
        for (size_t k = n > 32 ? n - 32 : 0; k < n && *hold == n; k++)
            for (int m = 0; m < M_COUNT; m++) {
                size_t ml = strlen(MARKERS[m]);
                if (n - k < ml && !memcmp(t + k, MARKERS[m], n - k)) {
                    *hold = k;
                    break;
                }
            }
    }
    return best;
}

void cpulm_oai_scan_calls(const char *text, size_t n, int final, int forced, cpulm_oai_scan *out) {
    memset(out, 0, sizeof *out);
    int kind;
    size_t hold, start = find_region(text, n, forced, &kind, &hold);
    if (kind < 0) {
        out->content_len = final ? n : hold;
        return;
    }
    out->in_calls = 1;
    out->content_len = start;
    cur c = {text, n, start};
    if (kind != M_BARE && kind != M_MISTRAL && kind != M_HERMES) c.i += strlen(MARKERS[kind]);
    if (kind == M_MISTRAL) c.i += strlen(MARKERS[M_MISTRAL]);
    int r = region(&c, kind, out);
    if (!final) {
        if (r == P_BAD && out->n_calls == 0) { /* not a call after all: it is content */
            out->in_calls = 0;
            out->content_len = n;
        }
        return;
    }
    if (r != P_OK || out->n_calls == 0) { /* the whole text is content */
        out->n_calls = 0;
        out->in_calls = 0;
        out->content_len = n;
    }
}

/* Appends the JSON string contents s[0..n) unescaped. */
static void unescape(const char *s, size_t n, cpulm_buf *out) {
    cpulm_buf q;
    cpulm_buf_init(&q, 0);
    cpulm_buf_putc(&q, '"');
    cpulm_buf_append(&q, s, n);
    cpulm_buf_putc(&q, '"');
    cpulm_json_doc *d = NULL;
    if (cpulm_json_parse(q.data, q.len, NULL, &d, NULL, NULL) == CPULM_OK) {
        const cpulm_json *v = cpulm_json_root(d);
        cpulm_buf_append(out, v->u.str.s, v->u.str.len);
    } else {
        cpulm_buf_append(out, s, n);
    }
    cpulm_json_free(d);
    cpulm_buf_release(&q);
}

/* A Python literal v[0..n) (trimmed) as JSON: a quoted string, True/False/None, a number
 * or a list / dict already valid as JSON; anything else as a JSON string of its text. */
static void py_value(const char *v, size_t n, cpulm_buf *out) {
    while (n && strchr(" \t\n", v[0]))
        v++, n--;
    while (n && strchr(" \t\n", v[n - 1]))
        n--;
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, out, 0, 0);
    if (n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n - 1] == v[0]) {
        cpulm_buf str;
        cpulm_buf_init(&str, 0);
        for (size_t i = 1; i + 1 < n; i++) {
            char ch = v[i];
            if (ch == '\\' && i + 2 < n) {
                ch = v[++i];
                ch = ch == 'n' ? '\n' : ch == 't' ? '\t' : ch;
            }
            cpulm_buf_putc(&str, ch);
        }
        cpulm_json_write_strn(&w, str.data ? str.data : "", str.len);
        cpulm_buf_release(&str);
        return;
    }
    static const char *const lits[][2] = {{"True", "true"}, {"False", "false"}, {"None", "null"}};
    for (size_t k = 0; k < 3; k++)
        if (n == strlen(lits[k][0]) && !memcmp(v, lits[k][0], n)) {
            cpulm_buf_puts(out, lits[k][1]);
            return;
        }
    cpulm_json_doc *d = NULL; /* a number, or a list / dict that is JSON as written */
    if (n && cpulm_json_parse(v, n, NULL, &d, NULL, NULL) == CPULM_OK)
        cpulm_buf_append(out, v, n);
    else
        cpulm_json_write_strn(&w, v, n);
    cpulm_json_free(d);
}

/* Python keyword arguments a[0..n) (key=value, ...) as a JSON object. */
static void py_kwargs(const char *a, size_t n, cpulm_buf *out) {
    cpulm_buf_putc(out, '{');
    size_t i = 0;
    for (int written = 0; i < n;) {
        size_t key = i;
        while (i < n && a[i] != '=' && a[i] != ',')
            i++;
        if (i >= n || a[i] == ',') { /* no key=value here */
            i++;
            continue;
        }
        size_t key_end = i++, val = i;
        char quote = 0;
        int depth = 0; /* a comma inside quotes or brackets does not end the value */
        for (; i < n && (quote || depth || a[i] != ','); i++) {
            if (quote && a[i] == '\\')
                i++;
            else if (quote && a[i] == quote)
                quote = 0;
            else if (!quote && (a[i] == '"' || a[i] == '\''))
                quote = a[i];
            else if (!quote)
                depth += (a[i] == '[' || a[i] == '{' || a[i] == '(') -
                         (a[i] == ']' || a[i] == '}' || a[i] == ')');
        }
        while (key < key_end && strchr(" \t\n", a[key]))
            key++;
        while (key_end > key && strchr(" \t\n", a[key_end - 1]))
            key_end--;
        if (key_end > key && val <= n) {
            if (written++) cpulm_buf_puts(out, ", ");
            cpulm_json_quote(out, a + key, key_end - key, 0);
            cpulm_buf_puts(out, ": ");
            py_value(a + val, (i < n ? i : n) - val, out);
        }
        i++;
    }
    cpulm_buf_putc(out, '}');
}

/* ---- XML arguments, typed by the tool's parameter schemas ---- */

/* The JSON kinds a parameter schema allows, as bits (0: it names none, the value's text
 * decides). */
enum { K_STR = 1, K_NUM = 2, K_BOOL = 4, K_NULL = 8, K_OBJ = 16, K_ARR = 32 };

static int kind_bit(cpulm_json_type t) {
    static const int bits[] = {
        [CPULM_JSON_NULL] = K_NULL,  [CPULM_JSON_BOOL] = K_BOOL, [CPULM_JSON_NUMBER] = K_NUM,
        [CPULM_JSON_STRING] = K_STR, [CPULM_JSON_ARRAY] = K_ARR, [CPULM_JSON_OBJECT] = K_OBJ};
    return bits[t];
}

static int type_name_bit(const char *t) {
    static const struct {
        const char *name;
        int bit;
    } names[] = {{"string", K_STR}, {"integer", K_NUM}, {"number", K_NUM}, {"boolean", K_BOOL},
                 {"null", K_NULL},  {"object", K_OBJ},  {"array", K_ARR}};
    for (size_t i = 0; t && i < sizeof names / sizeof *names; i++)
        if (!strcmp(t, names[i].name)) return names[i].bit;
    return 0;
}

/* The kinds of "type" (a name or an array of names), else of the enum's or const's
 * values, else the union of the anyOf / oneOf branches' kinds (depth: nesting left). */
static int schema_kinds(const cpulm_json *s, int depth) {
    const cpulm_json *type = cpulm_json_get(s, "type"), *en = cpulm_json_get(s, "enum");
    const cpulm_json *cst = cpulm_json_get(s, "const");
    int k = 0;
    if (type && type->type == CPULM_JSON_ARRAY)
        for (size_t i = 0; i < cpulm_json_len(type); i++)
            k |= type_name_bit(cpulm_json_str(cpulm_json_at(type, i)));
    else if (type)
        k = type_name_bit(cpulm_json_str(type));
    else if (en && en->type == CPULM_JSON_ARRAY)
        for (size_t i = 0; i < cpulm_json_len(en); i++)
            k |= kind_bit(cpulm_json_at(en, i)->type);
    else if (cst)
        k = kind_bit(cst->type);
    for (int b = 0; !type && !en && !cst && depth > 0 && b < 2; b++) {
        const cpulm_json *br = cpulm_json_get(s, b ? "oneOf" : "anyOf");
        for (size_t i = 0; i < cpulm_json_len(br); i++) {
            int bk = schema_kinds(cpulm_json_at(br, i), depth - 1);
            if (!bk) return 0; /* a branch of any kind: the union is any kind */
            k |= bk;
        }
    }
    if (k && cpulm_json_bool(cpulm_json_get(s, "nullable"), 0)) k |= K_NULL; /* OpenAPI's */
    return k;
}

/* One XML parameter value v[0..n) as JSON (see cpulm_oai_call_args); prop: its schema, or
 * NULL when the tool does not declare it. */
static void xml_value(const char *v, size_t n, const cpulm_json *prop, cpulm_buf *out) {
    if (n && v[0] == '\n') v++, n--;
    if (n && v[n - 1] == '\n') n--;
    const int kinds = prop ? schema_kinds(prop, 4) : 0;
    size_t a = 0, b = n; /* the trimmed text, read as JSON */
    while (a < b && strchr(" \t\r\n", v[a]))
        a++;
    while (b > a && strchr(" \t\r\n", v[b - 1]))
        b--;
    cpulm_json_doc *d = NULL;
    int vk = 0; /* the kind of the text as JSON, 0 when it is not JSON */
    if (b > a && cpulm_json_parse(v + a, b - a, NULL, &d, NULL, NULL) == CPULM_OK)
        vk = kind_bit(cpulm_json_root(d)->type);
    int as_json;
    if (kinds == 0) /* undeclared or untyped: any JSON but a quoted string is that JSON */
        as_json = vk && vk != K_STR;
    else if (!(kinds & K_STR)) /* declared other than string: its JSON when it parses */
        as_json = vk != 0;
    else if (vk == K_STR) /* a forced call quotes strings of schemas it does not write raw */
        as_json = !xml_raw_text(prop) && !string_enum(prop);
    else /* a string or other kinds: the text is a string unless JSON of another kind */
        as_json = vk && (kinds & vk);
    if (as_json) {
        cpulm_buf_append(out, v + a, b - a);
    } else {
        cpulm_json_writer w;
        cpulm_json_writer_init(&w, out, 0, 0);
        cpulm_json_write_strn(&w, v, n);
    }
    cpulm_json_free(d);
}

/* <parameter=KEY>VALUE</parameter>... (the text between the function tags) as an object;
 * props: the tool's parameters.properties, or NULL. */
static void xml_args(const char *a, size_t n, const cpulm_json *props, cpulm_buf *out) {
    cpulm_buf_putc(out, '{');
    const char *p = a, *e = a + n;
    cpulm_buf key;
    cpulm_buf_init(&key, 0);
    for (int written = 0;;) {
        const char *k = memmem(p, (size_t)(e - p), "<parameter=", 11);
        if (!k) break;
        k += 11;
        const char *gt = memchr(k, '>', (size_t)(e - k));
        const char *end = gt ? memmem(gt, (size_t)(e - gt), "</parameter>", 12) : NULL;
        if (!end) break;
        if (written++) cpulm_buf_puts(out, ", ");
        cpulm_json_quote(out, k, (size_t)(gt - k), 0);
        cpulm_buf_puts(out, ": ");
        cpulm_buf_reset(&key);
        cpulm_buf_append(&key, k, (size_t)(gt - k));
        const cpulm_json *prop = key.data ? cpulm_json_get(props, key.data) : NULL;
        xml_value(gt + 1, (size_t)(end - gt - 1), prop, out);
        p = end + 12;
    }
    cpulm_buf_release(&key);
    cpulm_buf_putc(out, '}');
}

/* The properties of the tool named like call c (NULL: no such tool, or none declared). */
static const cpulm_json *call_props(const char *text, const cpulm_oai_call *c,
                                    const cpulm_json *tools) {
    if (!tools) return NULL;
    cpulm_buf name;
    cpulm_buf_init(&name, 0);
    cpulm_oai_call_name(text, c, &name);
    const cpulm_json *fn = name.data ? find_tool(tools, name.data) : NULL;
    cpulm_buf_release(&name);
    const cpulm_json *props = cpulm_json_get(cpulm_json_get(fn, "parameters"), "properties");
    return props && props->type == CPULM_JSON_OBJECT ? props : NULL;
}

cpulm_status cpulm_oai_tools_copy(const cpulm_json *tools, cpulm_json_doc **out) {
    *out = NULL;
    if (!tools) return CPULM_OK;
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_json_writer w;
    cpulm_json_writer_init(&w, &b, 0, 0);
    cpulm_json_write_value(&w, tools);
    cpulm_status st = cpulm_json_writer_status(&w);
    if (st == CPULM_OK) st = cpulm_json_parse(b.data, b.len, NULL, out, NULL, NULL);
    cpulm_buf_release(&b);
    return st;
}

void cpulm_oai_call_args(const char *text, const cpulm_oai_call *c, const cpulm_json *tools,
                         cpulm_buf *out) {
    if (c->args_xml) {
        xml_args(text + c->args_off, c->args_len, call_props(text, c, tools), out);
        return;
    }
    if (c->args_py) {
        py_kwargs(text + c->args_off, c->args_len, out);
        return;
    }
    if (c->args_len == 0) {
        cpulm_buf_puts(out, "{}");
        return;
    }
    if (c->args_is_string && c->args_len >= 2)
        unescape(text + c->args_off + 1, c->args_len - 2, out);
    else
        cpulm_buf_append(out, text + c->args_off, c->args_len);
}

void cpulm_oai_call_name(const char *text, const cpulm_oai_call *c, cpulm_buf *out) {
    if (memchr(text + c->name_off, '\\', c->name_len))
        unescape(text + c->name_off, c->name_len, out);
    else
        cpulm_buf_append(out, text + c->name_off, c->name_len);
}
