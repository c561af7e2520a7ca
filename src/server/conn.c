/* conn.c: connection buffers, request framing and response writing (see conn.h). */
#define _GNU_SOURCE
#include "server/conn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RBUF_MIN    4096
#define FILL_BUDGET (256 * 1024) /* bytes read per call */

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

/* ---- the body budget ---- */

static size_t charge_for(size_t cap) {
    return cap > CPULM_CONN_FREE_RBUF ? cap - CPULM_CONN_FREE_RBUF : 0;
}

/* Takes budget for a buffer of cap bytes (reclaiming from others if short). 0 or -1. */
static int budget_take(cpulm_conn *c, size_t cap) {
    cpulm_conn_budget *b = c->budget;
    size_t want = charge_for(cap);
    if (!b || want <= c->charged) return 0;
    size_t extra = want - c->charged;
    if (extra > b->limit - b->used && b->reclaim)
        b->reclaim(b->user, extra - (b->limit - b->used), c);
    if (extra > b->limit - b->used) {
        c->over_budget = 1;
        return -1;
    }
    b->used += extra;
    c->charged = want;
    return 0;
}

/* Gives back what a buffer of cap bytes no longer needs. */
static void budget_fit(cpulm_conn *c, size_t cap) {
    size_t want = charge_for(cap);
    if (!c->budget || want >= c->charged) return;
    c->budget->used -= c->charged - want;
    c->charged = want;
}

/* Resizes rbuf to cap bytes (>= rlen) within the budget. Returns 0 or -1. */
static int resize_rbuf(cpulm_conn *c, size_t cap) {
    if (budget_take(c, cap) != 0) return -1;
    char *p = realloc(c->rbuf, cap);
    if (!p) {
        budget_fit(c, c->rcap);
        return -1;
    }
    c->rbuf = p;
    c->rcap = cap;
    budget_fit(c, cap);
    return 0;
}

void cpulm_conn_release(cpulm_conn *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    budget_fit(c, 0);
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
    return resize_rbuf(c, cap);
}

/* Makes spare capacity in rbuf if the rules allow: never while a request is being answered
 * (its views point into rbuf), never beyond rmax. Returns 0 when there is room. */
static int make_room(cpulm_conn *c) {
    if (c->rlen < c->rcap) return 0;
    if (c->state == CPULM_CONN_BUSY) return -1;
    return grow_rbuf(c);
}

int cpulm_conn_wants_input(const cpulm_conn *c) {
    if (c->rlen < c->rcap) return 1;
    if (c->over_budget) return 0; /* cpulm_conn_parse answers 503 */
    return c->state != CPULM_CONN_BUSY && c->rcap < c->rmax;
}

static void received(cpulm_conn *c, size_t n, double now) {
    if (c->rlen == 0 && c->state == CPULM_CONN_READING) c->t_request = now;
    c->rlen += n;
    c->t_active = now;
}

/* With no room to read into (a request that filled its buffer exactly is being answered),
 * whether the peer is gone: -1 at EOF or on an error, else 0 (nothing read). Without this a
 * client that disconnects while its request is prepared would go unnoticed until the
 * answer, and its work would not be cancelled. */
static long peek_eof(int fd) {
    char b;
    for (;;) {
        ssize_t n = recv(fd, &b, 1, MSG_PEEK);
        if (n > 0) return 0; /* pipelined bytes: read once there is room */
        if (n == 0) return -1;
        if (errno == EINTR) continue;
        return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
    }
}

long cpulm_conn_fill(cpulm_conn *c, double now) {
    long total = 0;
    for (;;) {
        /* a fast sender must not hold the I/O thread: the (level-triggered) loop calls
         * again after the other ready connections had their turn */
        if (total >= FILL_BUDGET) return total;
        if (make_room(c) != 0) return total ? total : peek_eof(c->fd);
        ssize_t n = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
        if (n > 0) {
            received(c, (size_t)n, now);
            total += n;
            continue;
        }
        if (n == 0) return -1;
        if (errno == EINTR) continue;
        return (errno == EAGAIN || errno == EWOULDBLOCK) ? total : -1;
    }
}

size_t cpulm_conn_feed(cpulm_conn *c, const char *data, size_t n, double now) {
    size_t done = 0;
    while (done < n && make_room(c) == 0) {
        size_t k = c->rcap - c->rlen < n - done ? c->rcap - c->rlen : n - done;
        memcpy(c->rbuf + c->rlen, data + done, k);
        received(c, k, now);
        done += k;
    }
    return done;
}

static cpulm_conn_parse_result bad(cpulm_conn *c, int status, const char *why) {
    c->bad_status = status;
    c->bad_reason = why;
    return CPULM_CONN_BAD;
}

static cpulm_conn_parse_result refuse_over_budget(cpulm_conn *c) {
    return bad(c, 503, "the server is buffering too many request bodies; retry later");
}

/* The body is incomplete: ask for it if the client waits for our go-ahead. */
static cpulm_conn_parse_result need_body(cpulm_conn *c) {
    if (c->rlen >= c->rmax) return bad(c, 413, "request body too large");
    if (c->over_budget) return refuse_over_budget(c);
    if (c->expect_continue && !c->sent_continue) {
        cpulm_buf_puts(&c->wbuf, "HTTP/1.1 100 Continue\r\n\r\n");
        c->sent_continue = 1;
    }
    return CPULM_CONN_NEED_MORE;
}

/* The whole request is in rbuf, which stays put until cpulm_conn_next: parse the head
 * again so msg's views point into the buffer as it is now (the first parse may have seen
 * a buffer that has grown, and moved, since). */
static cpulm_conn_parse_result complete(cpulm_conn *c, const cpulm_http_limits *lim,
                                        size_t body_len, size_t req_len) {
    long r = cpulm_http_parse_request(c->rbuf, c->head_len, 0, lim, &c->msg);
    if (r != (long)c->head_len) return bad(c, 500, "request head changed while buffered");
    c->body = c->rbuf + c->head_len;
    c->body_len = body_len;
    c->req_len = req_len;
    return CPULM_CONN_REQUEST;
}

static cpulm_conn_parse_result parse_chunked(cpulm_conn *c, const cpulm_http_limits *lim) {
    size_t h = c->head_len, in = h + c->chunk_in, out = h + c->chunk_out;
    int r = cpulm_http_chunked_feed(&c->chunk, c->rbuf, c->rlen, &in, &out);
    c->chunk_in = in - h;
    c->chunk_out = out - h;
    if (r == CPULM_HTTP_TOO_LARGE) return bad(c, 413, "request body too large");
    if (r < 0) return bad(c, 400, "malformed chunked body");
    if (r == 0) return need_body(c);
    return complete(c, lim, c->chunk_out, in);
}

/* Parses the head once it is complete, keeping only its framing (see conn.h). Returns
 * CPULM_CONN_REQUEST when the head is done and framing of the body can go on. */
static cpulm_conn_parse_result parse_head(cpulm_conn *c, const cpulm_http_limits *lim) {
    cpulm_http_msg *m = &c->msg;
    long r = cpulm_http_parse_request(c->rbuf, c->rlen, c->head_seen, lim, m);
    c->head_seen = c->rlen;
    if (r == CPULM_HTTP_ERROR) return bad(c, m->error_status, m->error);
    if (r == CPULM_HTTP_INCOMPLETE) {
        if (c->rlen >= c->rmax) return bad(c, 431, "request head too large");
        return c->over_budget ? refuse_over_budget(c) : CPULM_CONN_NEED_MORE;
    }
    c->head_done = 1;
    c->head_len = m->head_len;
    c->content_length = m->content_length;
    c->chunked = m->chunked;
    c->expect_continue = m->expect_continue;
    c->keep_alive = m->keep_alive;
    if (c->chunked) cpulm_http_chunked_init(&c->chunk, lim);
    c->chunk_in = c->chunk_out = 0;
    memset(m, 0, sizeof *m); /* no views survive until complete() binds them */
    m->content_length = -1;
    return CPULM_CONN_REQUEST;
}

cpulm_conn_parse_result cpulm_conn_parse(cpulm_conn *c, const cpulm_http_limits *lim) {
    if (!c->head_done) {
        cpulm_conn_parse_result r = parse_head(c, lim);
        if (r != CPULM_CONN_REQUEST) return r;
    }
    if (c->chunked) return parse_chunked(c, lim);
    size_t h = c->head_len;
    size_t cl = c->content_length > 0 ? (size_t)c->content_length : 0;
    if (h + cl > c->rmax) return bad(c, 413, "request body too large");
    if (c->rlen - h < cl) {
        /* the whole buffer at once: a body that cannot fit is refused before it is sent */
        if (h + cl > c->rcap && resize_rbuf(c, h + cl) != 0)
            return c->over_budget ? refuse_over_budget(c) : bad(c, 500, "out of memory");
        return need_body(c);
    }
    return complete(c, lim, cl, h + cl);
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

void cpulm_conn_stream_begin(cpulm_conn *c, const char *content_type) {
    c->status = 200;
    c->sse = 1;
    c->sse_chunked = c->msg.version_minor >= 1;
    if (!c->sse_chunked) c->keep_alive = 0; /* HTTP/1.0: the stream ends with the connection */
    cpulm_buf_printf(&c->wbuf,
                     "HTTP/1.1 200 OK\r\nContent-Type: %s\r\n"
                     "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\nConnection: %s\r\n%s\r\n",
                     content_type, c->keep_alive ? "keep-alive" : "close",
                     c->sse_chunked ? "Transfer-Encoding: chunked\r\n" : "");
}

void cpulm_conn_sse_begin(cpulm_conn *c) {
    cpulm_conn_stream_begin(c, "text/event-stream");
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
    if (c->rcap > CPULM_CONN_FREE_RBUF && rest <= RBUF_MIN) /* the body's memory goes back */
        resize_rbuf(c, RBUF_MIN);
    c->head_seen = 0;
    c->head_done = 0;
    c->body = NULL;
    c->body_len = c->req_len = c->head_len = 0;
    c->chunked = c->expect_continue = 0;
    c->sent_continue = 0;
    c->over_budget = 0;
    c->req_id = 0;
    c->n_requests++;
    c->done = 0;
    c->sse = c->sse_chunked = 0;
    c->state = CPULM_CONN_READING;
    c->t_request = c->t_active;
    return 0;
}
