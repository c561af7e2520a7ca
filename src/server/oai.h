/* oai.h: the OpenAI API's JSON shapes <-> the server's structs.
 *
 * Parsing validates a request body (chat completions or legacy completions) into a
 * cpulm_oai_request: types, ranges and required fields, with a 400 error naming the
 * offending parameter. Writing produces response bodies, SSE chunks ("data: {...}\n\n"),
 * the model list and OpenAI-shaped errors {"error":{"message","type","param","code"}}.
 * Pure functions of their inputs (no I/O, no globals): the HTTP layer (routes.c) and the
 * tests use them directly.
 */
#ifndef CPULM_SERVER_OAI_H
#define CPULM_SERVER_OAI_H

#include <stdint.h>

#include "base/buf.h"
#include "base/json.h"
#include "server/oai_tools.h"
#include "server/sched.h"

#define CPULM_OAI_MAX_STOP 4   /* OpenAI's limit on stop sequences */
#define CPULM_OAI_MAX_N    128 /* OpenAI's limit on n (the server also caps it at --parallel) */

typedef enum cpulm_oai_kind { CPULM_OAI_CHAT = 0, CPULM_OAI_COMPLETION = 1 } cpulm_oai_kind;

typedef struct cpulm_oai_error {
    int status;       /* HTTP status */
    const char *type; /* "invalid_request_error", ... */
    const char *code; /* NULL or e.g. "invalid_api_key" */
    char param[64];   /* offending parameter or "" */
    char message[256];
} cpulm_oai_error;

typedef struct cpulm_oai_request {
    cpulm_oai_kind kind;
    cpulm_json_doc *doc;        /* owned; every pointer below borrows from it */
    const cpulm_json *messages; /* chat: non-empty array of {role, content} */
    const char *prompt;         /* completion: text prompt (NULL with prompt_tokens) */
    size_t prompt_len;
    const cpulm_json *prompt_tokens; /* completion: prompt given as an array of token ids */
    const char *model;               /* as sent, or NULL */
    int stream, include_usage;
    int32_t max_tokens; /* -1 when absent */
    int32_t n;
    cpulm_sampler_params sp;              /* temperature, top_p, penalties, seed (+ extensions) */
    const char *stop[CPULM_OAI_MAX_STOP]; /* may hold NUL ("\u0000"): see stop_len */
    size_t stop_len[CPULM_OAI_MAX_STOP];
    int32_t n_stop;
    int32_t logprobs;         /* -1 off; else alternatives per token (top_logprobs) */
    int ignore_eos;           /* extension: "ignore_eos": true */
    char *grammar;            /* owned GBNF text the output must follow, or NULL */
    const cpulm_json *tools;  /* chat: the tools array, NULL if none */
    int tool_choice;          /* cpulm_oai_tool_choice */
    const char *tool_name;    /* CPULM_OAI_TOOLS_NAMED: the function */
    int parallel_tool_calls;  /* default 1 */
    int32_t priority;         /* extension (vLLM's): lower is served sooner; default 0 */
    int enable_thinking;      /* chat_template_kwargs.enable_thinking; default 1 */
    int reasoning_none;       /* reasoning_format "none": <think> text stays in content */
    char reasoning_effort[8]; /* "low", "medium", "high", or "" when absent: the template's
                                 reasoning_effort variable (gpt-oss's system message) */
    /* logit_bias as sent (shape checked), or NULL; its ids are resolved by
     * cpulm_oai_resolve_bias (they need the vocabulary) */
    const cpulm_json *logit_bias;
    /* llama-server's speculative.n_max / n_min / p_min (dotted keys, or members of a
     * "speculative" object): this request's draft limits; -1 when absent (the server's) */
    int32_t spec_n_max, spec_n_min;
    float spec_p_min;
} cpulm_oai_request;

/* Parses body[0..len) as a request of the given kind. JSON nesting is limited to 64 and the
 * body to max_body bytes. On error fills e (status 400) and returns CPULM_ERR_FORMAT or
 * CPULM_ERR_INVALID_ARG; out then owns nothing. On success release with
 * cpulm_oai_request_release. */
cpulm_status cpulm_oai_parse(cpulm_oai_kind kind, const char *body, size_t len, size_t max_body,
                             cpulm_oai_request *out, cpulm_oai_error *e);
void cpulm_oai_request_release(cpulm_oai_request *r);

/* ---- fields beyond OpenAI's core (oai_fields.c) ----
 * llama-server's and vLLM's names for what cpulm implements (n_predict, n_keep,
 * repeat_last_n, typical_p, reasoning_format, logit_bias in every form), and a 400 naming
 * any field of those APIs that would change the output but is not implemented
 * (mirostat, dry_*, best_of > n, ...), unless it holds its neutral value. Called by
 * cpulm_oai_parse. Returns 0, or -1 with e set. */
int cpulm_oai_parse_fields(const cpulm_json *root, cpulm_oai_request *r, cpulm_oai_error *e);
/* q's logit_bias as sampler entries for model m: token ids must be in the vocabulary (else
 * 400 naming logit_bias); string keys (llama-server's form) bias each token of the text.
 * *out: owned (malloc'd) or NULL when there is none. Returns 0, or -1 with e set. */
int cpulm_oai_resolve_bias(const cpulm_oai_request *q, const cpulm_model *m, cpulm_logit_bias **out,
                           int32_t *n, cpulm_oai_error *e);

/* The server's error convention: a request step (parsing, validation, submission) returns
 * 0 on success or -1 with its cpulm_oai_error filled, and the HTTP status travels only in
 * e->status, never in a return value (a status is not a cpulm_status; negating one gave
 * returns such as -400 that callers could mistake for a cpulm_status code).
 * cpulm_oai_error_set fills e and returns nothing, so it cannot be returned or negated;
 * cpulm_oai_fail fills e and returns -1, for `return cpulm_oai_fail(e, 400, ...)`.
 * The message is printf-formatted. */
void cpulm_oai_error_set(cpulm_oai_error *e, int status, const char *param, const char *fmt, ...)
    CPULM_PRINTF(4, 5);
int cpulm_oai_fail(cpulm_oai_error *e, int status, const char *param, const char *fmt, ...)
    CPULM_PRINTF(4, 5);
/* The one mapping of an engine cpulm_status to the HTTP status of the request that got it:
 * CPULM_OK 200, CPULM_ERR_NOMEM 500 (the server's fault), any other error 400 (the input's:
 * a bad grammar, a limit, a token out of range). */
int cpulm_oai_http_status(cpulm_status st);
/* {"error": {...}} for e. */
void cpulm_oai_write_error(cpulm_buf *out, const cpulm_oai_error *e);

/* ---- chat prompt ----
 * Renders messages with the model's chat template (tmpl: tokenizer.chat_template; NULL or
 * "" for models without one, which get the chat module's "plain" built-in: "System: ...\n
 * User: ...\nAssistant:", documented in docs/SERVER.md). Content given as an array of text
 * parts is joined with newlines first. bos/eos: the model's token texts (NULL: "").
 * *parse_special: tokenize the result with control tokens recognised (template output;
 * 0 for the plain template, so user text cannot smuggle control tokens in).
 * *add_bos: 0 when the rendered text already starts with the BOS text.
 * *extra_stop: "\nUser:" for the plain template (the model would go on to write the
 * user's next turn), else "". */
typedef struct cpulm_oai_chat_prompt {
    int parse_special, add_bos;
    const char *extra_stop;
    int think;         /* the template writes <think> blocks: split replies (reasoning_content) */
    int think_open;    /* the rendered prompt ends inside an opened <think> block */
    int harmony;       /* the template writes harmony (gpt-oss): split replies by channel */
    int harmony_start; /* cpulm_harmony_start of the rendered prompt */
} cpulm_oai_chat_prompt;

cpulm_status cpulm_oai_render_chat(const char *tmpl, const char *bos, const char *eos,
                                   const cpulm_json *messages, cpulm_buf *out,
                                   cpulm_oai_chat_prompt *info, cpulm_oai_error *e);
/* Same, with tools (NULL: none): the template receives them as `tools`; a template that
 * never mentions tools gets them described in a system message instead. Assistant
 * tool_calls' arguments strings are given to the template as objects, as the families'
 * templates expect (they write them with tojson). */
cpulm_status cpulm_oai_render_chat_tools(const char *tmpl, const char *bos, const char *eos,
                                         const cpulm_json *messages, const cpulm_json *tools,
                                         cpulm_buf *out, cpulm_oai_chat_prompt *info,
                                         cpulm_oai_error *e);
/* Same, with enable_thinking given to the template (chat_template_kwargs). */
cpulm_status cpulm_oai_render_chat_full(const char *tmpl, const char *bos, const char *eos,
                                        const cpulm_json *messages, const cpulm_json *tools,
                                        int enable_thinking, cpulm_buf *out,
                                        cpulm_oai_chat_prompt *info, cpulm_oai_error *e);

/* Same, from a chat request: its messages, its tools unless tool_choice is "none",
 * enable_thinking and reasoning_effort. */
cpulm_status cpulm_oai_render_chat_req(const char *tmpl, const char *bos, const char *eos,
                                       const cpulm_oai_request *q, cpulm_buf *out,
                                       cpulm_oai_chat_prompt *info, cpulm_oai_error *e);

/* ---- responses ---- */

#define CPULM_OAI_FINISH_TOOL_CALLS 2 /* beside cpulm_sched_finish's values */

typedef struct cpulm_oai_choice {
    cpulm_buf text;
    cpulm_buf reasoning; /* chat: <think>...</think> text, kept out of text (reasoning_content) */
    int finish;          /* -1 while running, else cpulm_sched_finish */
    cpulm_sched_lp *lp;  /* owned array of the choice's token logprobs */
    int32_t n_lp, cap_lp;
} cpulm_oai_choice;

void cpulm_oai_choice_init(cpulm_oai_choice *c);
void cpulm_oai_choice_release(cpulm_oai_choice *c);
cpulm_status cpulm_oai_choice_add_lp(cpulm_oai_choice *c, const cpulm_sched_lp *lp);
/* Splits n bytes of a reply through the think filter f: visible text is appended to text,
 * the <think> block's content to reasoning. final: the reply ended (flushes held bytes).
 * Returns CPULM_OK or CPULM_ERR_NOMEM. */
cpulm_status cpulm_oai_think_feed(cpulm_chat_think *f, const char *s, size_t n, int final,
                                  cpulm_buf *text, cpulm_buf *reasoning);

typedef struct cpulm_oai_meta {
    cpulm_oai_kind kind;
    const char *id;       /* "chatcmpl-..." / "cmpl-..." */
    int64_t created;      /* unix seconds */
    const char *model;    /* the served model's id */
    const cpulm_model *m; /* for token texts in logprobs */
    int32_t logprobs;     /* -1 off, else top alternatives */
    int include_usage;    /* streaming: "usage": null on chunks, then a usage chunk */
    int tools;            /* chat with tools: replies are scanned for tool calls */
    int forced;           /* the reply is a forced (required / named) tool call */
    /* the request's tools (borrowed, a copy the caller keeps: cpulm_oai_tools_copy), whose
     * parameter schemas type XML call arguments; NULL: none */
    const cpulm_json *tool_defs;
} cpulm_oai_meta;

typedef struct cpulm_oai_usage {
    int32_t prompt_tokens, completion_tokens, cached_tokens;
    /* speculative decoding: draft tokens verified / accepted; when draft_n > 0 a "timings"
     * object next to "usage" carries them under llama-server's names */
    int32_t draft_n, draft_n_accepted;
} cpulm_oai_usage;

/* The whole non-streaming response body. */
void cpulm_oai_write_response(cpulm_buf *out, const cpulm_oai_meta *meta,
                              const cpulm_oai_choice *choices, int32_t n, const cpulm_oai_usage *u);
/* One streamed piece of a choice. */
typedef struct cpulm_oai_delta {
    int32_t index;    /* choice */
    const char *text; /* delta text (may be empty) */
    size_t n_text;
    const char *reasoning; /* chat: delta of reasoning_content (NULL or n_reasoning 0: none) */
    size_t n_reasoning;
    const cpulm_sched_lp *lp; /* NULL or the logprobs of the token behind this delta */
    int finish;               /* -1: not finished, else cpulm_sched_finish */
    int first;                /* chat: the opening delta carries the assistant role */
    int64_t text_offset;      /* completions logprobs: bytes of this choice sent before */
    int has_tool;             /* a delta.tool_calls entry instead of content */
    int32_t tool_index;       /* the call's index in the choice */
    const char *tool_id;      /* first delta of a call: its id; then NULL */
    const char *tool_name;    /* first delta of a call: the function name; then NULL */
    const char *tool_args;    /* a fragment of function.arguments ("" on the first) */
    size_t n_tool_args;
} cpulm_oai_delta;

/* One SSE event ("data: {...}\n\n") for a delta. */
void cpulm_oai_write_chunk(cpulm_buf *out, const cpulm_oai_meta *meta, const cpulm_oai_delta *d);
/* The final usage event of a stream with include_usage (empty choices). */
void cpulm_oai_write_usage_chunk(cpulm_buf *out, const cpulm_oai_meta *meta,
                                 const cpulm_oai_usage *u);
/* An error inside an SSE stream (after the 200 was sent): data: {"error": {...}}. */
void cpulm_oai_write_stream_error(cpulm_buf *out, const cpulm_oai_error *e);
/* The id of call k of choice i of a response ("call_" + response id tail + i + k). */
void cpulm_oai_call_id(const cpulm_oai_meta *meta, int32_t choice, int32_t k, char out[64]);
/* GET /v1/models. */
void cpulm_oai_write_models(cpulm_buf *out, const char *model, int64_t created);

#endif
