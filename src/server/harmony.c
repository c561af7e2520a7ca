/* harmony.c: splitting harmony replies (see harmony.h). A byte machine: outside a possible
 * control token, bytes go to the header or the current body; "<|" starts a token, held
 * until "|>" closes it (or a byte that no token has shows it was text). */
#define _GNU_SOURCE /* memmem */
#include "server/harmony.h"

#include <string.h>

enum { SINK_CONTENT, SINK_REASONING, SINK_CALL, SINK_DROP };

typedef struct out {
    cpulm_buf *text, *reasoning;
} out;

/* The word after key in the header (up to a space, '<' or the end), or NULL. */
static const char *head_word(const cpulm_buf *head, const char *key, size_t *len) {
    const char *h = head->data ? head->data : "", *p = strstr(h, key);
    if (!p) return NULL;
    p += strlen(key);
    size_t n = 0;
    while (p[n] && p[n] != ' ' && p[n] != '<' && p[n] != '\n')
        n++;
    *len = n;
    return p;
}

/* The JSON string contents of s[0..n) (a tool name: quotes and backslashes escaped). */
static void put_escaped(cpulm_buf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '"' || s[i] == '\\') cpulm_buf_append(b, "\\", 1);
        if ((unsigned char)s[i] >= 0x20) cpulm_buf_append(b, s + i, 1);
    }
}

/* The header is complete (<|message|>): where its body goes. */
static void open_body(cpulm_harmony *h, out *o) {
    size_t cl = 0, rl = 0;
    const char *ch = head_word(&h->head, "<|channel|>", &cl);
    const char *to = head_word(&h->head, "to=", &rl);
    h->state = CPULM_HARMONY_BODY;
    if (to && rl > 10 && !memcmp(to, "functions.", 10)) {
        h->sink = SINK_CALL;
        cpulm_buf_puts(o->text, "<tool_call>{\"name\": \"");
        put_escaped(o->text, to + 10, rl - 10);
        cpulm_buf_puts(o->text, "\", \"arguments\": ");
    } else if (to && rl > 0) {
        h->sink = SINK_REASONING; /* a built-in tool's call: not the client's to run */
    } else if (ch && cl == 8 && !memcmp(ch, "analysis", 8)) {
        h->sink = SINK_REASONING;
    } else {
        h->sink = SINK_CONTENT; /* final, a commentary preamble, or no channel */
    }
}

static void close_body(cpulm_harmony *h, out *o) {
    if (h->state == CPULM_HARMONY_BODY && h->sink == SINK_CALL)
        cpulm_buf_puts(o->text, "}</tool_call>");
    h->state = CPULM_HARMONY_BETWEEN;
}

static void text_bytes(cpulm_harmony *h, const char *s, size_t n, out *o) {
    if (h->state == CPULM_HARMONY_HEAD) {
        cpulm_buf_append(&h->head, s, n);
    } else if (h->state == CPULM_HARMONY_BETWEEN) {
        cpulm_buf_append(o->text, s, n); /* text outside any message: show it */
    } else if (h->sink == SINK_REASONING) {
        cpulm_buf_append(o->reasoning, s, n);
    } else if (h->sink != SINK_DROP) {
        cpulm_buf_append(o->text, s, n);
    }
}

/* A complete control token <|name|> (len: its bytes). */
static void control(cpulm_harmony *h, const char *tok, size_t len, out *o) {
    const char *name = tok + 2;
    const size_t nl = len - 4;
#define IS(lit) (nl == sizeof lit - 1 && !memcmp(name, lit, nl))
    if (IS("start")) {
        close_body(h, o);
        h->state = CPULM_HARMONY_HEAD;
        cpulm_buf_reset(&h->head);
    } else if (IS("message") && h->state == CPULM_HARMONY_HEAD) {
        open_body(h, o);
    } else if (IS("end") || IS("return") || IS("call")) {
        close_body(h, o);
    } else if (h->state == CPULM_HARMONY_HEAD) {
        cpulm_buf_append(&h->head, tok, len); /* <|channel|>, <|constrain|> */
    }
#undef IS
}

static int tag_char(char c) {
    return (c >= 'a' && c <= 'z') || c == '_';
}

/* One byte through the token matcher (tag[] holds a proper prefix of a possible token). */
static void feed_byte(cpulm_harmony *h, char c, out *o) {
    if (h->n_tag == 0) {
        if (c == '<')
            h->tag[h->n_tag++] = c;
        else
            text_bytes(h, &c, 1, o);
        return;
    }
    h->tag[h->n_tag++] = c;
    const int i = h->n_tag - 1;
    int ok = i == 1 ? c == '|' : tag_char(c) || c == '|';
    if (i >= 3 && h->tag[i - 1] == '|' && c == '>') {
        control(h, h->tag, (size_t)h->n_tag, o);
        h->n_tag = 0;
        return;
    }
    if (i >= 3 && h->tag[i - 1] == '|') ok = 0; /* a "|" inside must close the token */
    if (ok && h->n_tag < (int)sizeof h->tag - 1) return;
    /* not a token: its first byte is text, the rest may still start one */
    char rest[sizeof h->tag];
    const int n_rest = h->n_tag - 1;
    memcpy(rest, h->tag + 1, (size_t)n_rest);
    h->n_tag = 0;
    text_bytes(h, h->tag, 1, o);
    for (int k = 0; k < n_rest; k++)
        feed_byte(h, rest[k], o);
}

cpulm_status cpulm_harmony_feed(cpulm_harmony *h, const char *s, size_t n, int final,
                                cpulm_buf *text, cpulm_buf *reasoning) {
    out o = {text, reasoning};
    for (size_t i = 0; i < n; i++)
        feed_byte(h, s[i], &o);
    if (final) {
        const int k = h->n_tag;
        h->n_tag = 0;
        text_bytes(h, h->tag, (size_t)k, &o);
        close_body(h, &o);
    }
    if (cpulm_buf_status(text) || cpulm_buf_status(reasoning) || cpulm_buf_status(&h->head))
        return CPULM_ERR_NOMEM;
    return CPULM_OK;
}

void cpulm_harmony_init_at(cpulm_harmony *h, int start) {
    memset(h, 0, sizeof *h);
    cpulm_buf_init(&h->head, 0);
    h->state = start & 3;
    h->sink = start >> 2;
}

int cpulm_harmony_start(const char *p, size_t n) {
    cpulm_harmony h;
    cpulm_harmony_init(&h, p, n);
    cpulm_harmony_free(&h);
    return h.state | h.sink << 2;
}

void cpulm_harmony_init(cpulm_harmony *h, const char *p, size_t n) {
    cpulm_harmony_init_at(h, CPULM_HARMONY_HEAD);
    /* replay the prompt's last message opening, output discarded */
    const char *last = NULL;
    for (const char *q = p; q && (q = memmem(q, n - (size_t)(q - p), "<|start|>", 9)); q += 9)
        last = q;
    if (!last) {
        h->state = CPULM_HARMONY_BETWEEN; /* no message opened: text is content */
        return;
    }
    cpulm_buf sink;
    cpulm_buf_init(&sink, 0);
    out o = {&sink, &sink};
    for (size_t i = (size_t)(last - p); i < n; i++)
        feed_byte(h, p[i], &o);
    cpulm_buf_release(&sink);
    if (h->state == CPULM_HARMONY_BODY && h->sink == SINK_CALL) h->sink = SINK_DROP;
}

void cpulm_harmony_free(cpulm_harmony *h) {
    cpulm_buf_release(&h->head);
}

int cpulm_harmony_template(const char *tmpl) {
    return tmpl && strstr(tmpl, "<|channel|>") != NULL;
}
