/* oai_tools.h: structured output and tool calling for the OpenAI API.
 *
 * Request side: response_format ({type: text | json_object | json_schema}), llama.cpp's
 * "grammar" and "json_schema" fields, tools / tool_choice / parallel_tool_calls. A schema
 * outside the supported subset is a 400 naming the keyword, never unconstrained output.
 * Named and required tool calls are generated under a grammar in the model family's
 * native format, so they always parse and their arguments validate.
 *
 * Output side: a scanner that finds tool calls in generated text in the families' native
 * formats (Hermes/Qwen <tool_call> with JSON, or with Qwen3-Coder / Qwen3.5's XML
 * <function=NAME><parameter=KEY>VALUE</parameter>...</function>, Llama 3.x JSON and <|python_tag|>
 * with JSON or a built-in tool's NAME.call(key="value"), Mistral's [TOOL_CALLS] JSON array (before
 * tokenizer v11) and [TOOL_CALLS]NAME[ARGS]{...} (v11+), DeepSeek's tool-call tokens, and
 * a bare {"name", "arguments"} object),
 * both on the final text and incrementally while streaming (content before a call is
 * released as soon as it cannot be the start of one; arguments stream as they grow).
 * Pure functions (no I/O): routes.c and the tests use them directly.
 */
#ifndef CPULM_SERVER_OAI_TOOLS_H
#define CPULM_SERVER_OAI_TOOLS_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/json.h"

struct cpulm_oai_request;
struct cpulm_oai_error;

typedef enum cpulm_oai_tool_choice {
    CPULM_OAI_TOOLS_OFF = 0, /* no tools, or tool_choice "none" */
    CPULM_OAI_TOOLS_AUTO,
    CPULM_OAI_TOOLS_REQUIRED,
    CPULM_OAI_TOOLS_NAMED,
} cpulm_oai_tool_choice;

/* Reads response_format, grammar, json_schema, tools, tool_choice, parallel_tool_calls
 * from a request body into r (r->grammar: owned GBNF text). Returns 0, or -1 with e set
 * (400 naming the parameter and, for schemas, the keyword and its path). */
int cpulm_oai_parse_structured(const cpulm_json *root, struct cpulm_oai_request *r,
                               struct cpulm_oai_error *e);

/* The tool-call format of a chat template: cpulm_chat_detect's family, with "mistral"
 * told apart as "mistral-v11" when the template writes calls as NAME[ARGS]{...}, and
 * "chatml" as "qwen-xml" when it writes them as <function=NAME><parameter=KEY>... (the
 * Qwen3-Coder and Qwen3.5 templates). */
const char *cpulm_oai_tool_family(const char *tmpl);

/* The grammar for a required or named tool call in the format of the template family
 * (cpulm_oai_tool_family's name, "harmony" for gpt-oss's commentary message to
 * functions.NAME, written from the reply's first header: no analysis message before it,
 * one call per reply; NULL for others). *out owned. Returns 0 or -1 with e set. */
int cpulm_oai_tool_grammar(const struct cpulm_oai_request *r, const char *family, char **out,
                           struct cpulm_oai_error *e);

/* A system message describing the tools and the call format, for templates that do not
 * render `tools` themselves (JSON text of one message object appended to out). */
void cpulm_oai_tool_system_msg(const cpulm_json *tools, cpulm_buf *out);

/* ---- scanning generated text for calls ---- */

#define CPULM_OAI_MAX_CALLS 16

typedef struct cpulm_oai_call {
    size_t name_off, name_len; /* the name's JSON string contents (escapes left as written) */
    size_t args_off, args_len; /* the arguments' JSON text (an object), as far as known */
    int args_is_string;        /* arguments were written as a JSON string holding JSON */
    int args_py;               /* arguments are Python keyword arguments (Llama's built-in
                                * tools: NAME.call(key="value")), written out as JSON */
    int args_xml;              /* arguments are <parameter=KEY>VALUE</parameter> elements
                                * (Qwen3-Coder, Qwen3.5), written out as a JSON object */
    int complete;              /* the arguments (and the call) are finished */
} cpulm_oai_call;

typedef struct cpulm_oai_scan {
    size_t content_len; /* text[0..content_len) is plain content, safe to send */
    int32_t n_calls;
    cpulm_oai_call calls[CPULM_OAI_MAX_CALLS];
    int in_calls; /* a tool-call region was found (content ends before it) */
} cpulm_oai_scan;

/* Scans text[0..n). final = 0 while streaming: a region that may still become a call is
 * held back (not counted in content_len) and the last call may be incomplete. final = 1
 * at the end: if the call region does not parse, everything is content and n_calls = 0.
 * forced: the whole output is a call region (required/named generation). */
void cpulm_oai_scan_calls(const char *text, size_t n, int final, int forced, cpulm_oai_scan *out);

/* The call's arguments as the JSON string OpenAI expects in function.arguments (the
 * object's text; a string-wrapped one is unwrapped). XML parameters become a JSON object:
 * a value's one framing newline on each side is dropped (the templates write
 * <parameter=KEY>\nVALUE\n</parameter>), and the value is typed by the parameter's schema
 * in tools (the request's tools array; NULL: none), whose declared type wins over what
 * the text looks like:
 *   - declared a string only: a string, whatever its text ("42", "true", "[1]"), except a
 *     quoted JSON string where a forced call writes one (pattern, anyOf, non-string enum);
 *   - declared integer, number, boolean, null, object or array only: that JSON when the
 *     (trimmed) text parses as JSON, else a string;
 *   - a string or other kinds (["string", "null"], anyOf): JSON of one of the other
 *     declared kinds is kept, anything else is a string;
 *   - undeclared, or declared without a type, enum, const or typed anyOf/oneOf: guessed
 *     from the text: a JSON object, array, number, true, false or null is kept as that
 *     JSON, anything else is a string.
 * Appends to out. */
void cpulm_oai_call_args(const char *text, const cpulm_oai_call *c, const cpulm_json *tools,
                         cpulm_buf *out);
/* A copy of a request's tools array that outlives the request: the response writers type
 * XML arguments by it (cpulm_oai_call_args) after the request is released. *out owned
 * (cpulm_json_free); NULL when tools is NULL. Returns CPULM_OK or CPULM_ERR_NOMEM. */
cpulm_status cpulm_oai_tools_copy(const cpulm_json *tools, cpulm_json_doc **out);
/* The call's name, unescaped, appended to out. */
void cpulm_oai_call_name(const char *text, const cpulm_oai_call *c, cpulm_buf *out);

#endif
