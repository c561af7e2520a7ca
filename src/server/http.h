/* http.h: incremental HTTP/1.1 message parser (requests for the server, responses for the
 * load generator) and a chunked transfer-coding decoder.
 *
 * No I/O and no allocation: the caller owns the bytes and calls again when more arrive.
 * Zero-copy: method, target and header fields point into the caller's buffer (borrowed,
 * valid while those bytes are unchanged). Bounded: the head (start line + header fields),
 * each line, the number of header fields and the declared body size all have limits; an
 * over-limit or malformed message yields CPULM_HTTP_ERROR with the status code the server
 * should answer (400, 413, 414, 417, 431, 501, 505) and a short reason. The server closes
 * the connection after such an answer, so a parse error never desynchronises a stream.
 * Request smuggling defenses (RFC 9112 §6.3): Content-Length together with
 * Transfer-Encoding, differing duplicate Content-Lengths, and obsolete line folding are
 * rejected; Transfer-Encoding must be exactly one "chunked" (any other coding or list,
 * "chunked, chunked" included, is 501). A request with two Authorization fields is 400
 * (which one a proxy checked is unknowable).
 */
#ifndef CPULM_SERVER_HTTP_H
#define CPULM_SERVER_HTTP_H

#include <stddef.h>
#include <stdint.h>

#define CPULM_HTTP_MAX_HEADERS 64 /* hard cap on header fields a message may carry */

enum {
    CPULM_HTTP_INCOMPLETE = -2, /* the head is not complete yet: read more bytes */
    CPULM_HTTP_ERROR = -1,      /* malformed or over a limit: see error_status, error */
    CPULM_HTTP_TOO_LARGE = -3,  /* chunked body past max_body (answered with 413) */
};

typedef struct cpulm_http_limits {
    size_t max_head;     /* start line + header fields + blank line; default 16 KiB */
    size_t max_line;     /* one line; default 8 KiB */
    int32_t max_headers; /* default 64, at most CPULM_HTTP_MAX_HEADERS */
    uint64_t max_body;   /* declared or decoded body bytes; default 1 MiB */
} cpulm_http_limits;

cpulm_http_limits cpulm_http_default_limits(void);

typedef struct cpulm_http_str {
    const char *p; /* borrowed, not NUL-terminated */
    size_t n;
} cpulm_http_str;

typedef struct cpulm_http_header {
    cpulm_http_str name, value; /* value without leading/trailing whitespace */
} cpulm_http_header;

typedef struct cpulm_http_msg {
    /* request start line */
    cpulm_http_str method, target; /* target as sent */
    cpulm_http_str path, query;    /* target split at '?' (query without the '?') */
    /* response status line */
    int status;
    cpulm_http_str reason;
    int version_minor; /* HTTP/1.<minor>: 0 or 1 */

    cpulm_http_header headers[CPULM_HTTP_MAX_HEADERS];
    int32_t n_headers;
    size_t head_len; /* bytes of the head, including the blank line */

    int64_t content_length; /* -1 when absent */
    int chunked;            /* Transfer-Encoding: chunked */
    int keep_alive;         /* persistent connection per version + Connection header */
    int expect_continue;    /* Expect: 100-continue */

    int error_status;  /* on CPULM_HTTP_ERROR: the status code to answer */
    const char *error; /* on CPULM_HTTP_ERROR: static text, e.g. "header line too long" */
} cpulm_http_msg;

/* Parses a request head from buf[0..len). prev_len: how many of these bytes the previous
 * call on the same message saw (0 the first time); only the new bytes are scanned for the
 * end of the head, so feeding a slow client byte by byte stays linear. lim NULL: defaults.
 * Returns the head length (> 0), CPULM_HTTP_INCOMPLETE, or CPULM_HTTP_ERROR. */
long cpulm_http_parse_request(const char *buf, size_t len, size_t prev_len,
                              const cpulm_http_limits *lim, cpulm_http_msg *m);

/* The same for a response head ("HTTP/1.1 200 OK"). A response to a HEAD request or with
 * status 1xx/204/304 has no body whatever its headers say: the caller knows which. */
long cpulm_http_parse_response(const char *buf, size_t len, size_t prev_len,
                               const cpulm_http_limits *lim, cpulm_http_msg *m);

/* Header value by case-insensitive name (first occurrence); NULL if absent. Borrowed. */
const cpulm_http_str *cpulm_http_header_get(const cpulm_http_msg *m, const char *name);

/* ---- chunked transfer-coding decoder (RFC 9112 §7.1) ----
 * Decodes in place: the body bytes are moved to the front of the region the caller passes
 * (decoded output never overtakes the input, so one buffer is enough). Strict framing: a
 * size line is 1*HEXDIG, then only ";name[=token|"quoted"]" extensions (no whitespace),
 * then CRLF; a bare CR or LF anywhere, or anything else after the digits, is an error.
 * Chunk extensions and trailer fields are checked and skipped (each line bounded by
 * max_line, at most CPULM_HTTP_MAX_HEADERS trailer fields). */
typedef struct cpulm_http_chunked {
    int state;
    uint64_t remaining; /* bytes left in the current chunk */
    uint64_t total;     /* body bytes decoded so far */
    uint64_t max_body;
    size_t line_len; /* length of the size/trailer line being skipped */
    size_t max_line;
    int n_digits;   /* the size line has its hex digit(s) */
    int n_trailers; /* trailer fields so far */
} cpulm_http_chunked;

void cpulm_http_chunked_init(cpulm_http_chunked *d, const cpulm_http_limits *lim);

/* Feeds buf[*in_pos..in_len). Body bytes are written to buf[*out_len..) (always at or
 * before *in_pos) and *out_len grows; *in_pos advances over consumed input. Returns 1 when
 * the last chunk and trailers are complete (*in_pos is then just past the message, where a
 * pipelined next message starts), 0 when more input is needed, CPULM_HTTP_ERROR on a
 * malformed encoding, and CPULM_HTTP_TOO_LARGE when the body exceeds max_body. */
int cpulm_http_chunked_feed(cpulm_http_chunked *d, char *buf, size_t in_len, size_t *in_pos,
                            size_t *out_len);

/* Text of a status code ("Not Found"); "Unknown" for codes this server never sends. */
const char *cpulm_http_status_text(int status);

/* 1 when s equals the NUL-terminated lit, ignoring ASCII case. */
int cpulm_http_str_ieq(const cpulm_http_str *s, const char *lit);

#endif
