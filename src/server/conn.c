/* conn.c: connection buffers, request framing and response writing (see conn.h). */
#define _GNU_SOURCE
#include "server/conn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RBUF_MIN 4096

void cpulm_conn_init(cpulm_conn *c, int fd, int32_t index, size_t rmax, double now) {
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->index = index;
    c->rmax = rmax;
    c->state = CPULM_CONN_READING;
    c->t_active = now;
    c->t_request = now;
    cpulm_buf_init(&c->wbuf, 0);
}

void cpulm_conn_release(cpulm_conn *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    free(c->rbuf);
    c->rbuf = NULL;
    c->rlen = c->rcap = 0;
    cpulm_buf_release(&c->wbuf);
}

/* ---- reading and framing ---- */

static int grow_rbuf(cpulm_conn *c) {
    if (c->rcap >= c->rmax) return -1;
    size_t cap = c->rcap ? c->rcap * 2 : RBUF_MIN;
    if (cap > c->rmax) cap = c->rmax;
    char *p = realloc(c->rbuf, cap);
    if (!p) return -1;
    c->rbuf = p;
    c->rcap = cap;
    return 0;
}

long cpulm_conn_fill(cpulm_conn *c, double now) {
    long total = 0;
    for (;;) {
        if (c->rlen == c->rcap && grow_rbuf(c) != 0) return total;
        ssize_t n = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
        if (n > 0) {
            if (c->rlen == 0 && c->state == CPULM_CONN_READING) c->t_request = now;
            c->rlen += (size_t)n;
            total += n;
            c->t_active = now;
            continue;
        }
        if (n == 0) return -1;
        if (errno == EINTR) continue;
        return (errno == EAGAIN || errno == EWOULDBLOCK) ? total : -1;
    }
}

static cpulm_conn_parse_result bad(cpulm_conn *c, int status, const char *why) {
    c->bad_status = status;
    c->bad_reason = why;
    return CPULM_CONN_BAD;
}

/* The body is incomplete: ask for it if the client waits for our go-ahead. */
static cpulm_conn_parse_result need_body(cpulm_conn *c) {
    if (c->rlen >= c->rmax) return bad(c, 413, "request body too large");
    if (c->msg.expect_continue && !c->sent_continue) {
        cpulm_buf_puts(&c->wbuf, "HTTP/1.1 100 Continue\r\n\r\n");
        c->sent_continue = 1;
    }
    return CPULM_CONN_NEED_MORE;
}

static cpulm_conn_parse_result parse_chunked(cpulm_conn *c) {
    size_t h = c->msg.head_len, in = h + c->chunk_in, out = h + c->chunk_out;
    int r = cpulm_http_chunked_feed(&c->chunk, c->rbuf, c->rlen, &in, &out);
    c->chunk_in = in - h;
    c->chunk_out = out - h;
    if (r == -413) return bad(c, 413, "request body too large");
    if (r < 0) return bad(c, 400, "malformed chunked body");
    if (r == 0) return need_body(c);
    c->body = c->rbuf + h;
    c->body_len = c->chunk_out;
    c->req_len = in;
    return CPULM_CONN_REQUEST;
}

cpulm_conn_parse_result cpulm_conn_parse(cpulm_conn *c, const cpulm_http_limits *lim) {
    if (!c->head_done) {
        long r = cpulm_http_parse_request(c->rbuf, c->rlen, c->head_seen, lim, &c->msg);
        c->head_seen = c->rlen;
        if (r == CPULM_HTTP_ERROR) return bad(c, c->msg.error_status, c->msg.error);
        if (r == CPULM_HTTP_INCOMPLETE)
            return c->rlen >= c->rmax ? bad(c, 431, "request head too large") : CPULM_CONN_NEED_MORE;
        c->head_done = 1;
        c->keep_alive = c->msg.keep_alive;
        if (c->msg.chunked) cpulm_http_chunked_init(&c->chunk, lim);
        c->chunk_in = c->chunk_out = 0;
    }
    if (c->msg.chunked) return parse_chunked(c);
    size_t h = c->msg.head_len;
    size_t cl = c->msg.content_length > 0 ? (size_t)c->msg.content_length : 0;
    if (h + cl > c->rmax) return bad(c, 413, "request body too large");
    if (c->rlen - h < cl) return need_body(c);
    c->body = c->rbuf + h;
    c->body_len = cl;
    c->req_len = h + cl;
    return CPULM_CONN_REQUEST;
}

/* ---- writing ---- */

void cpulm_conn_respond(cpulm_conn *c, int status, const char *content_type, const char *body,
                        size_t n, const char *extra_headers) {
    c->status = status;
    cpulm_buf_printf(&c->wbuf,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: %s\r\n%s\r\n",
                     status, cpulm_http_status_text(status), content_type, n,
                     c->keep_alive ? "keep-alive" : "close", extra_headers ? extra_headers : "");
    cpulm_buf_append(&c->wbuf, body, n);
}

void cpulm_conn_sse_begin(cpulm_conn *c) {
    c->status = 200;
    c->sse = 1;
    c->sse_chunked = c->msg.version_minor >= 1;
    if (!c->sse_chunked) c->keep_alive = 0; /* HTTP/1.0: the stream ends with the connection */
    cpulm_buf_printf(&c->wbuf,
                     "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\nConnection: %s\r\n%s\r\n",
                     c->keep_alive ? "keep-alive" : "close",
                     c->sse_chunked ? "Transfer-Encoding: chunked\r\n" : "");
}

void cpulm_conn_sse_frame(cpulm_conn *c, const char *data, size_t n) {
    if (n == 0) return; /* an empty chunk would end the chunked body */
    if (c->sse_chunked) cpulm_buf_printf(&c->wbuf, "%zx\r\n", n);
    cpulm_buf_append(&c->wbuf, data, n);
    if (c->sse_chunked) cpulm_buf_puts(&c->wbuf, "\r\n");
}

void cpulm_conn_sse_end(cpulm_conn *c) {
    if (c->sse_chunked) cpulm_buf_puts(&c->wbuf, "0\r\n\r\n");
    c->sse = 0;
}

int cpulm_conn_flush(cpulm_conn *c, double now) {
    if (cpulm_buf_status(&c->wbuf) != CPULM_OK) return -1; /* out of memory: drop the client */
    while (c->woff < c->wbuf.len) {
        ssize_t n = send(c->fd, c->wbuf.data + c->woff, c->wbuf.len - c->woff, MSG_NOSIGNAL);
        if (n > 0) {
            c->woff += (size_t)n;
            c->t_active = now;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return c->wbuf.len - c->woff > CPULM_CONN_MAX_WBUF ? -1 : 1;
        return -1;
    }
    cpulm_buf_reset(&c->wbuf);
    c->woff = 0;
    return 0;
}

int cpulm_conn_next(cpulm_conn *c) {
    if (!c->keep_alive) return -1;
    size_t rest = c->rlen - c->req_len;
    memmove(c->rbuf, c->rbuf + c->req_len, rest);
    c->rlen = rest;
    c->head_seen = 0;
    c->head_done = 0;
    c->body = NULL;
    c->body_len = c->req_len = 0;
    c->sent_continue = 0;
    c->req_id = 0;
    c->done = 0;
    c->sse = c->sse_chunked = 0;
    c->state = CPULM_CONN_READING;
    c->t_request = c->t_active;
    return 0;
}
