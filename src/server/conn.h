/* conn.h: one client connection: bounded read buffer, request framing (head, then a
 * Content-Length or chunked body), buffered writes, keep-alive and pipelining, and the
 * Server-Sent Events writer (one send() per event frame, wrapped in chunked encoding so
 * the connection stays reusable after the stream).
 *
 * No policy here: routes.c decides what to answer; server.c owns the sockets' lifetime and
 * the event-loop registration. Used only by the I/O thread.
 */
#ifndef CPULM_SERVER_CONN_H
#define CPULM_SERVER_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "server/http.h"
#include "server/loop.h"

#define CPULM_CONN_MAX_WBUF  (8u << 20)  /* unsent bytes before a slow reader is dropped */
#define CPULM_CONN_FREE_RBUF (16u << 10) /* read buffer a connection holds outside the budget */

struct cpulm_conn;

/* The memory budget of request bodies (issue #25): read-buffer bytes beyond each
 * connection's first CPULM_CONN_FREE_RBUF, summed over the connections that share it (the
 * server's). A buffer that cannot grow within the limit, even after reclaim, fails the
 * request with 503 (see cpulm_conn_parse). */
typedef struct cpulm_conn_budget {
    size_t limit, used;
    /* Called when asking needs `need` more bytes than are left: may close other connections
     * (never asking) to free theirs. NULL: nothing can be freed. */
    void (*reclaim)(void *user, size_t need, const struct cpulm_conn *asking);
    void *user;
} cpulm_conn_budget;

typedef enum cpulm_conn_state {
    CPULM_CONN_READING, /* waiting for (the rest of) a request */
    CPULM_CONN_BUSY,    /* a request is being answered (possibly waiting for the model) */
    CPULM_CONN_CLOSING, /* answered and shut down for writing: discard input until EOF
                         * (closing with unread input would reset the connection and
                         * could destroy the answer before the client reads it) */
} cpulm_conn_state;

typedef enum cpulm_conn_parse_result {
    CPULM_CONN_NEED_MORE, /* read more bytes */
    CPULM_CONN_REQUEST,   /* msg and body are ready */
    CPULM_CONN_BAD,       /* malformed or too large: answer bad_status, then close */
} cpulm_conn_parse_result;

typedef struct cpulm_conn {
    cpulm_loop_handler h; /* registered with the loop (server.c) */
    int fd;
    int32_t index; /* slot in the server's connection table */
    cpulm_conn_state state;
    int events; /* CPULM_LOOP_* currently registered */

    char *rbuf; /* received bytes: current request, maybe pipelined ones after */
    size_t rlen, rcap, rmax;
    cpulm_conn_budget *budget; /* NULL: no budget (tests, fuzzing) */
    size_t charged;            /* bytes of budget rbuf holds */
    int over_budget;           /* rbuf could not grow within the budget */
    size_t head_seen;          /* bytes the last head parse looked at */

    /* The request. Its views (method, path, headers) and body point into rbuf, so they are
     * bound only once the whole request is buffered (CPULM_CONN_REQUEST: the head is parsed
     * again against the buffer as it is then), and from then until cpulm_conn_next the
     * buffer never moves (cpulm_conn_fill does not grow it in BUSY). Before that, while the
     * body may still make rbuf grow, only the framing fields below are kept. */
    cpulm_http_msg msg;
    int head_done;
    size_t head_len; /* framing of the request being received, from its head */
    int64_t content_length;
    int chunked, expect_continue;
    cpulm_http_chunked chunk;
    size_t chunk_in, chunk_out; /* chunked decode progress, offsets from msg.head_len */
    const char *body;           /* decoded body in rbuf, body_len bytes (not NUL-terminated) */
    size_t body_len;
    size_t req_len;    /* bytes of rbuf the current request occupies */
    int sent_continue; /* "100 Continue" already queued for this request */
    int bad_status;    /* CPULM_CONN_BAD: status to answer */
    const char *bad_reason;

    cpulm_buf wbuf; /* bytes not yet sent, from woff */
    size_t woff;
    int keep_alive;       /* after this response, read the next request */
    int sse, sse_chunked; /* streaming response in progress */
    int status;           /* status of the response being sent */
    int done;             /* the whole response is queued in wbuf */

    uint8_t peer[16];   /* client address key: IPv4, or an IPv6 /64 (server.c) */
    int32_t n_requests; /* requests answered on this connection */
    double t_active;    /* monotonic seconds of the last progress */
    double t_request;   /* when the current request's first byte arrived */
    uint64_t req_id;    /* scheduler request in flight; 0 when none */
    void *route;        /* routes.c's per-request state; owned there */
    int api;            /* CPULM_API_*: whose error shapes the current request gets */
    void *owner;        /* the server (borrowed), for the loop callback */
} cpulm_conn;

/* Sets up c for an accepted, non-blocking socket. rmax bounds the read buffer. */
void cpulm_conn_init(cpulm_conn *c, int fd, int32_t index, size_t rmax, double now);
/* Closes the socket and frees the buffers. */
void cpulm_conn_release(cpulm_conn *c);

/* Reads what the socket has (up to rmax buffered, at most 256 KiB per call so one fast
 * sender cannot hold the I/O thread; in BUSY only into the spare capacity, so the
 * request's views stay put). Returns bytes read (> 0), 0 when nothing was available
 * or the buffer is full, -1 on EOF or error. */
long cpulm_conn_fill(cpulm_conn *c, double now);
/* Appends bytes as if received (tests and the HTTP fuzzer's split-delivery mode), with the
 * same buffer growth rules as cpulm_conn_fill. Returns how many were taken. */
size_t cpulm_conn_feed(cpulm_conn *c, const char *data, size_t n, double now);
/* 1 when cpulm_conn_fill could take bytes now (the server's read interest). */
int cpulm_conn_wants_input(const cpulm_conn *c);

/* Frames the next request from the buffered bytes. Sends "100 Continue" itself when the
 * client asked for it and the body is still missing. A Content-Length body's whole buffer
 * is reserved from the budget as soon as the head is parsed (before any 100 Continue), a
 * chunked body's as it grows; when that does not fit: CPULM_CONN_BAD with 503. */
cpulm_conn_parse_result cpulm_conn_parse(cpulm_conn *c, const cpulm_http_limits *lim);

/* Queues a complete response with Content-Length. extra_headers: "" or lines each ending
 * in \r\n. Sets keep_alive from the request (and clears it for statuses that close). */
void cpulm_conn_respond(cpulm_conn *c, int status, const char *content_type, const char *body,
                        size_t n, const char *extra_headers);

/* Streaming: 200 with text/event-stream; frames go out as they are given. */
void cpulm_conn_stream_begin(cpulm_conn *c, const char *content_type); /* any streamed type
                                                                        * (Ollama's NDJSON) */
void cpulm_conn_sse_begin(cpulm_conn *c);
void cpulm_conn_sse_frame(cpulm_conn *c, const char *data, size_t n);
void cpulm_conn_sse_end(cpulm_conn *c);

/* Sends buffered bytes. Returns 0 when all are out, 1 when some remain (wait for
 * CPULM_LOOP_WRITE), -1 on a socket error or a peer that stopped reading. */
int cpulm_conn_flush(cpulm_conn *c, double now);

/* The response is complete and flushed: drop the request's bytes and read the next one
 * (keep-alive; a buffer grown for a large body shrinks back). Returns 0, or -1 when the
 * connection must close instead. */
int cpulm_conn_next(cpulm_conn *c);

#endif
