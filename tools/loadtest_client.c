/* loadtest_client.c: blocking HTTP/1.1 client for `cpulm loadtest` (see loadtest.h).
 * Every wait is bounded by poll() against the exchange's deadline; response sizes are
 * bounded by MAX_RESPONSE. */
#define _GNU_SOURCE
#include "loadtest.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tools_api.h"

#define MAX_RESPONSE (64u << 20)

double lt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int lt_url_parse(const char *url, lt_url *u, char *why, size_t why_cap) {
    memset(u, 0, sizeof *u);
    if (strncmp(url, "http://", 7) != 0) {
        snprintf(why, why_cap, "only http:// URLs are supported");
        return -1;
    }
    const char *h = url + 7, *end = h + strcspn(h, "/"), *colon = memchr(h, ':', (size_t)(end - h));
    size_t hl = (size_t)((colon ? colon : end) - h);
    size_t pl = colon ? (size_t)(end - colon - 1) : 2;
    if (hl == 0 || hl >= sizeof u->host || pl == 0 || pl >= sizeof u->port ||
        strlen(end) >= sizeof u->prefix) {
        snprintf(why, why_cap, "malformed URL '%s'", url);
        return -1;
    }
    memcpy(u->host, h, hl);
    memcpy(u->port, colon ? colon + 1 : "80", pl);
    snprintf(u->prefix, sizeof u->prefix, "%s", end);
    size_t n = strlen(u->prefix);
    while (n && u->prefix[n - 1] == '/')
        u->prefix[--n] = 0;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(u->host, u->port, &hints, &res);
    if (rc != 0) {
        snprintf(why, why_cap, "cannot resolve '%s': %s", u->host, gai_strerror(rc));
        return -1;
    }
    memcpy(&u->addr, res->ai_addr, res->ai_addrlen);
    u->addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

void lt_conn_init(lt_conn *c) {
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

void lt_conn_close(lt_conn *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}

void lt_result_release(lt_result *r) {
    free(r->t_events);
    r->t_events = NULL;
}

/* Records "what: detail" (or just what) as the exchange's error. */
static int fail(lt_result *r, const char *what, const char *detail) {
    snprintf(r->error, sizeof r->error, "%s%s%s", what, detail ? ": " : "", detail ? detail : "");
    return -1;
}

/* Waits until fd is ready for `events` or the deadline passes. */
static int wait_fd(int fd, short events, double deadline) {
    double left = deadline - lt_now();
    if (left <= 0) return -1;
    struct pollfd p = {.fd = fd, .events = events};
    int ms = left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
    return poll(&p, 1, ms) == 1 ? 0 : -1;
}

static int do_connect(lt_conn *c, const lt_url *u, double deadline, lt_result *r) {
    c->fd = socket(u->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (c->fd < 0) return fail(r, "socket", strerror(errno));
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (const struct sockaddr *)&u->addr, u->addr_len) != 0 && errno != EINPROGRESS)
        return fail(r, "connect", strerror(errno));
    int err = 0;
    socklen_t el = sizeof err;
    if (wait_fd(c->fd, POLLOUT, deadline) != 0) return fail(r, "connect", "timed out");
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
    return err ? fail(r, "connect", strerror(err)) : 0;
}

static int send_all(int fd, const char *p, size_t n, double deadline) {
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
        } else if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (wait_fd(fd, POLLOUT, deadline) != 0) return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

/* Appends what the socket has to c->buf. Returns bytes read, 0 on EOF, -1 on error/timeout. */
static long recv_some(lt_conn *c, double deadline) {
    if (c->cap - c->len < 65536) {
        size_t cap = c->cap ? c->cap * 2 : 131072;
        if (cap > MAX_RESPONSE + 65536) return -1;
        char *p = realloc(c->buf, cap);
        if (!p) return -1;
        c->buf = p;
        c->cap = cap;
    }
    for (;;) {
        ssize_t k = recv(c->fd, c->buf + c->len, c->cap - c->len - 1, 0);
        if (k >= 0) {
            c->len += (size_t)k;
            return k;
        }
        if (errno != EAGAIN && errno != EINTR) return -1;
        if (wait_fd(c->fd, POLLIN, deadline) != 0) return -1;
    }
}

/* ---- response body handling ---- */

typedef struct reader {
    cpulm_http_msg msg;
    long head; /* head length once parsed, else 0 */
    cpulm_http_chunked ch;
    size_t in, out; /* chunked progress (absolute offsets into buf) */
    size_t scanned; /* SSE: decoded bytes already split into events */
    int done, sse, close_after;
    double t0;
} reader;

static void add_event(lt_result *r, double t) {
    if (r->n_events == r->cap_events) {
        int32_t cap = r->cap_events ? r->cap_events * 2 : 64;
        double *p = realloc(r->t_events, sizeof *p * (size_t)cap);
        if (!p) return;
        r->t_events = p;
        r->cap_events = cap;
    }
    r->t_events[r->n_events++] = t;
}

/* Reads usage and the streamed text of one JSON object (response or SSE event). */
static void take_json(const char *s, size_t n, lt_result *r, int is_event, double t) {
    cpulm_json_doc *d = NULL;
    if (cpulm_json_parse(s, n, NULL, &d, NULL, NULL) != CPULM_OK) return;
    const cpulm_json *root = cpulm_json_root(d);
    const cpulm_json *u = cpulm_json_get(root, "usage");
    if (u && u->type == CPULM_JSON_OBJECT) {
        r->prompt_tokens = (int32_t)cpulm_json_num(cpulm_json_get(u, "prompt_tokens"), -1);
        r->completion_tokens = (int32_t)cpulm_json_num(cpulm_json_get(u, "completion_tokens"), -1);
    }
    const cpulm_json *tk = cpulm_json_get(root, "tokens");
    if (!is_event && tk && tk->type == CPULM_JSON_ARRAY) r->n_tokens = (int32_t)cpulm_json_len(tk);
    if (cpulm_json_get(root, "error") && !r->error[0]) {
        const char *m = cpulm_json_str(cpulm_json_get(cpulm_json_get(root, "error"), "message"));
        snprintf(r->error, sizeof r->error, "%s", m ? m : "error");
    }
    const cpulm_json *c0 = cpulm_json_at(cpulm_json_get(root, "choices"), 0);
    const char *text = cpulm_json_str(cpulm_json_get(c0, "text"));
    if (!text) text = cpulm_json_str(cpulm_json_get(cpulm_json_get(c0, "delta"), "content"));
    if (is_event && text && *text) {
        if (r->t_first < 0) r->t_first = t;
        add_event(r, t);
    }
    cpulm_json_free(d);
}

/* Splits decoded SSE bytes [scanned, end) into events. */
static void scan_sse(lt_conn *c, reader *rd, size_t end, lt_result *r) {
    double t = lt_now() - rd->t0;
    for (;;) {
        char *base = c->buf + rd->scanned;
        char *sep = memmem(base, end - rd->scanned, "\n\n", 2);
        if (!sep) return;
        if ((size_t)(sep - base) > 6 && memcmp(base, "data: ", 6) == 0) {
            if ((size_t)(sep - base) == 12 && memcmp(base + 6, "[DONE]", 6) == 0)
                rd->done = 1;
            else
                take_json(base + 6, (size_t)(sep - base) - 6, r, 1, t);
        }
        rd->scanned = (size_t)(sep - c->buf) + 2;
    }
}

/* Advances the body after new bytes arrived. Returns -1 on a framing error. */
static int feed_body(lt_conn *c, reader *rd, lt_result *r, int eof) {
    size_t h = (size_t)rd->head, end;
    if (rd->msg.chunked) {
        int st = cpulm_http_chunked_feed(&rd->ch, c->buf, c->len, &rd->in, &rd->out);
        if (st < 0) return fail(r, "bad chunked encoding", NULL);
        end = rd->out;
        if (st == 1) rd->done = 1;
    } else if (rd->msg.content_length >= 0) {
        end = c->len < h + (size_t)rd->msg.content_length ? c->len
                                                          : h + (size_t)rd->msg.content_length;
        if (end == h + (size_t)rd->msg.content_length) rd->done = 1;
    } else {
        end = c->len;
        rd->close_after = 1;
        if (eof) rd->done = 1;
    }
    int body_done = rd->done;
    if (rd->sse) scan_sse(c, rd, end, r);
    if (body_done && !rd->sse) take_json(c->buf + h, end - h, r, 0, 0);
    rd->done = body_done;
    return 0;
}

static int read_response(lt_conn *c, reader *rd, lt_result *r, int stream, double deadline) {
    size_t prev = 0;
    while (!rd->done) {
        long k = recv_some(c, deadline);
        if (k < 0) return fail(r, "receive failed or timed out", NULL);
        if (!rd->head) {
            long h = cpulm_http_parse_response(c->buf, c->len, prev, NULL, &rd->msg);
            prev = c->len;
            if (h == CPULM_HTTP_ERROR) return fail(r, "bad response", rd->msg.error);
            if (h == CPULM_HTTP_INCOMPLETE) {
                if (k == 0) return fail(r, "connection closed before a response", NULL);
                continue;
            }
            rd->head = h;
            r->status = rd->msg.status;
            rd->sse = stream && rd->msg.status == 200;
            rd->in = rd->out = rd->scanned = (size_t)h;
            cpulm_http_chunked_init(&rd->ch, NULL);
            rd->ch.max_body = MAX_RESPONSE;
            rd->close_after = !rd->msg.keep_alive;
        }
        if (feed_body(c, rd, r, k == 0) != 0) return -1;
        if (k == 0 && !rd->done) return fail(r, "connection closed mid-response", NULL);
    }
    return 0;
}

/* One exchange: a POST of body[0..n), or a GET when body is NULL. */
static void exchange(lt_conn *c, const lt_url *u, const char *path, const char *body, size_t n,
                     const char *api_key, int stream, double timeout_s, lt_result *r) {
    memset(r, 0, sizeof *r);
    r->t_first = -1;
    r->prompt_tokens = r->completion_tokens = r->n_tokens = -1;
    cpulm_buf req;
    cpulm_buf_init(&req, 0);
    cpulm_buf_printf(&req, "%s %s%s HTTP/1.1\r\nHost: %s:%s\r\n", body ? "POST" : "GET", u->prefix,
                     path, u->host, u->port);
    if (body)
        cpulm_buf_printf(&req, "Content-Type: application/json\r\nContent-Length: %zu\r\n", n);
    if (api_key) cpulm_buf_printf(&req, "Authorization: Bearer %s\r\n", api_key);
    cpulm_buf_puts(&req, "\r\n");
    if (body) cpulm_buf_append(&req, body, n);
    double t0 = lt_now(), deadline = t0 + timeout_s;
    for (int attempt = 0; attempt < 2; attempt++) {
        int reused = c->fd >= 0;
        r->error[0] = 0;
        if (!reused && do_connect(c, u, deadline, r) != 0) break;
        c->len = 0;
        reader rd;
        memset(&rd, 0, sizeof rd);
        rd.t0 = t0;
        int ok = send_all(c->fd, req.data, req.len, deadline) == 0 &&
                 read_response(c, &rd, r, stream, deadline) == 0;
        if (ok && !rd.close_after) break;
        lt_conn_close(c);
        if (ok || !reused || rd.head) break; /* retry only a stale kept-alive connection */
    }
    if (r->error[0] && r->status == 200) r->status = 0; /* an error event inside a stream */
    r->t_total = lt_now() - t0;
    cpulm_buf_release(&req);
}

void lt_post(lt_conn *c, const lt_url *u, const char *path, const char *body, size_t n,
             const char *api_key, int stream, double timeout_s, lt_result *r) {
    exchange(c, u, path, body ? body : "", n, api_key, stream, timeout_s, r);
}

void lt_get(lt_conn *c, const lt_url *u, const char *path, const char *api_key, double timeout_s,
            lt_result *r) {
    exchange(c, u, path, NULL, 0, api_key, 0, timeout_s, r);
}
