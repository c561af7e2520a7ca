/* harmony.h: the replies of models that speak OpenAI's harmony format (gpt-oss), split for
 * the chat API.
 *
 * A harmony reply is a sequence of messages, each a header and a body:
 *   <|start|>assistant<|channel|>analysis<|message|>...<|end|>
 *   <|start|>assistant<|channel|>final<|message|>...<|return|>
 *   <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>
 *   {"arg": 1}<|call|>
 * (the recipient, `to=...`, may also follow the role). The generation prompt ends with
 * `<|start|>assistant`, so the reply begins inside the first header. Bodies go by header:
 * the analysis channel to reasoning_content; final, and commentary without a recipient (a
 * preamble), to content; a commentary message to `functions.NAME` is a tool call, written
 * to the content as `<tool_call>{"name": "NAME", "arguments": BODY}</tool_call>`, the form
 * the tool-call scanner (oai_tools.h) finds and streams; messages to other recipients (the
 * built-in browser and python tools, which a client cannot run) go to the reasoning.
 * Control tokens arrive as their text (the request renders special tokens); one split
 * across pieces is held back until it is recognised. Pure functions, no I/O. */
#ifndef CPULM_SERVER_HARMONY_H
#define CPULM_SERVER_HARMONY_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/status.h"

enum { CPULM_HARMONY_HEAD, CPULM_HARMONY_BODY, CPULM_HARMONY_BETWEEN };

typedef struct cpulm_harmony {
    int state;      /* CPULM_HARMONY_*: inside a header, a body, or after a message */
    int sink;       /* where the body goes (harmony.c) */
    cpulm_buf head; /* the header's text so far (role, channel, recipient, content type) */
    char tag[16];   /* bytes that may begin a control token ("<|...|>") */
    int n_tag;
} cpulm_harmony;

/* A splitter for a reply that follows the rendered prompt p[0..n): inside the header the
 * prompt's last `<|start|>` opened, or inside a body when the prompt already wrote its
 * header (a template that prefills the channel). Free with cpulm_harmony_free. */
void cpulm_harmony_init(cpulm_harmony *h, const char *p, size_t n);
void cpulm_harmony_free(cpulm_harmony *h);
/* The same in two steps, for a request that renders the prompt before its reply exists:
 * where a reply after p[0..n) starts, as a small number (>= 0), and a splitter from it. */
int cpulm_harmony_start(const char *p, size_t n);
void cpulm_harmony_init_at(cpulm_harmony *h, int start);

/* Splits n bytes of the reply: content (tool calls included, as above) to text, analysis to
 * reasoning. final: the reply ended: held bytes are flushed and an open tool call is
 * closed (the <|call|> that ends it stops generation). CPULM_OK or CPULM_ERR_NOMEM. */
cpulm_status cpulm_harmony_feed(cpulm_harmony *h, const char *s, size_t n, int final,
                                cpulm_buf *text, cpulm_buf *reasoning);

/* Does this chat template write harmony (its text has `<|channel|>`)? */
int cpulm_harmony_template(const char *tmpl);

#endif
