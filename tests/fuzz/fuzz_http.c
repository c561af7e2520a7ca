/* fuzz_http.c: fuzz target for the HTTP/1.1 head parser and the chunked decoder
 * (src/server/http.c). libFuzzer entry point; without libFuzzer it links with
 * tests/fuzz/fuzz_main.c, which replays tests/fuzz/corpus/http.
 * Invariants checked beyond "no crash, no sanitizer report":
 *   - feeding the input in pieces (with prev_len) gives the same answer as all at once;
 *   - every returned field points inside the input, and a complete head is <= the input;
 *   - an error always carries a 4xx/5xx status and a reason;
 *   - the chunked decoder never writes past what it read, and decoding in two pieces
 *     yields the same body as in one;
 *   - split delivery: the input fed to a connection (src/server/conn.c) in pieces of
 *     input-chosen sizes, which makes its read buffer grow between the head and the body,
 *     frames the same requests (method, path, headers, body) as the input fed at once;
 *     every view of a framed request points into the current buffer, and the buffer does
 *     not move while a request is being answered (the use-after-free of issue #9). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/conn.h"
#include "server/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_str(const cpulm_http_str *s, const char *buf, size_t len) {
    if (s->n && (s->p < buf || s->p + s->n > buf + len)) abort();
}

static void check_msg(long r, const cpulm_http_msg *m, const char *buf, size_t len) {
    if (r == CPULM_HTTP_ERROR) {
        if (m->error_status < 400 || m->error_status > 599 || !m->error) abort();
        return;
    }
    if (r == CPULM_HTTP_INCOMPLETE) return;
    if (r <= 0 || (size_t)r > len || (size_t)r != m->head_len) abort();
    if (m->n_headers < 0 || m->n_headers > CPULM_HTTP_MAX_HEADERS) abort();
    check_str(&m->method, buf, (size_t)r);
    check_str(&m->target, buf, (size_t)r);
    check_str(&m->path, buf, (size_t)r);
    check_str(&m->query, buf, (size_t)r);
    for (int32_t i = 0; i < m->n_headers; i++) {
        check_str(&m->headers[i].name, buf, (size_t)r);
        check_str(&m->headers[i].value, buf, (size_t)r);
    }
}

/* Parses whole, then incrementally at a data-chosen step; both must agree. */
static void fuzz_head(const char *buf, size_t len, int response, size_t step) {
    cpulm_http_msg a, b;
    long ra = response ? cpulm_http_parse_response(buf, len, 0, NULL, &a)
                       : cpulm_http_parse_request(buf, len, 0, NULL, &a);
    check_msg(ra, &a, buf, len);
    long rb = CPULM_HTTP_INCOMPLETE;
    size_t prev = 0;
    for (size_t n = step < len ? step : len;; n = n + step < len ? n + step : len) {
        rb = response ? cpulm_http_parse_response(buf, n, prev, NULL, &b)
                      : cpulm_http_parse_request(buf, n, prev, NULL, &b);
        prev = n;
        if (rb != CPULM_HTTP_INCOMPLETE || n == len) break;
    }
    /* an incremental parse may stop earlier (a complete head or an error in a prefix) */
    if (rb != CPULM_HTTP_INCOMPLETE && ra != rb && ra != CPULM_HTTP_ERROR && rb != CPULM_HTTP_ERROR)
        abort();
    if (ra > 0 && rb > 0 &&
        (a.n_headers != b.n_headers || a.content_length != b.content_length ||
         a.keep_alive != b.keep_alive || a.chunked != b.chunked))
        abort();
}

static int dechunk(char *buf, size_t len, size_t split, size_t *out, size_t *in) {
    cpulm_http_chunked d;
    cpulm_http_chunked_init(&d, NULL);
    *in = 0;
    *out = 0;
    int r = cpulm_http_chunked_feed(&d, buf, split, in, out);
    if (*out > *in || *in > split) abort();
    if (r == 0) r = cpulm_http_chunked_feed(&d, buf, len, in, out);
    if (*out > *in || *in > len) abort();
    return r;
}

static void fuzz_chunked(const char *data, size_t len, size_t split) {
    char *a = malloc(len ? len : 1), *b = malloc(len ? len : 1);
    if (!a || !b) abort();
    memcpy(a, data, len);
    memcpy(b, data, len);
    size_t oa, ia, ob, ib;
    int ra = dechunk(a, len, len, &oa, &ia);
    int rb = dechunk(b, len, split < len ? split : len, &ob, &ib);
    if (ra != rb) abort();
    if (ra == 1 && (oa != ob || ia != ib || memcmp(a, b, oa) != 0)) abort();
    free(a);
    free(b);
}

/* ---- split delivery through cpulm_conn ---- */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
    return h;
}

static void check_in_rbuf(const cpulm_conn *c, const char *p, size_t n) {
    if (n && (p < c->rbuf || p + n > c->rbuf + c->rlen)) abort();
}

/* Signature of a framed request; checks that each view lies in the current buffer. */
static uint64_t request_sig(const cpulm_conn *c) {
    const cpulm_http_msg *m = &c->msg;
    check_in_rbuf(c, m->method.p, m->method.n);
    check_in_rbuf(c, m->target.p, m->target.n);
    check_in_rbuf(c, c->body, c->body_len);
    uint64_t h = fnv(0xcbf29ce484222325ull, m->method.p, m->method.n);
    h = fnv(h, m->target.p, m->target.n);
    for (int32_t i = 0; i < m->n_headers; i++) {
        check_in_rbuf(c, m->headers[i].name.p, m->headers[i].name.n);
        check_in_rbuf(c, m->headers[i].value.p, m->headers[i].value.n);
        h = fnv(h, m->headers[i].name.p, m->headers[i].name.n);
        h = fnv(h, m->headers[i].value.p, m->headers[i].value.n);
    }
    return fnv(h, c->body, c->body_len);
}

#define MAX_REQS 64

/* Feeds data to a connection in pieces (max_piece 0: as much as fits at once) and frames
 * requests like server.c does. Fills sig[] and returns how many requests were framed;
 * *bad gets the final error status (0 when none). */
static int deliver(const char *data, size_t size, size_t max_piece, uint64_t seed, uint64_t *sig,
                   int *bad) {
    cpulm_http_limits lim = cpulm_http_default_limits();
    lim.max_head = 2048;
    lim.max_line = 1024;
    lim.max_body = 8192;
    cpulm_conn c;
    cpulm_conn_init(&c, -1, 0, lim.max_head + lim.max_body + 1024, 0.0);
    int n = 0;
    size_t pos = 0;
    *bad = 0;
    cpulm_conn_parse_result r = CPULM_CONN_NEED_MORE;
    for (int guard = 0; guard < 1 << 16 && !*bad && n < MAX_REQS; guard++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        size_t piece = max_piece ? 1 + (size_t)(seed >> 33) % max_piece : size - pos;
        if (piece > size - pos) piece = size - pos;
        pos += cpulm_conn_feed(&c, data + pos, piece, 0.0);
        while (!*bad && n < MAX_REQS && c.rlen > 0 &&
               (r = cpulm_conn_parse(&c, &lim)) != CPULM_CONN_NEED_MORE) {
            if (r == CPULM_CONN_BAD) {
                if (c.bad_status < 400 || c.bad_status > 599 || !c.bad_reason) abort();
                *bad = c.bad_status;
                break;
            }
            c.state = CPULM_CONN_BUSY;
            char *before = c.rbuf;
            sig[n++] = request_sig(&c);
            pos += cpulm_conn_feed(&c, data + pos, piece < size - pos ? piece : size - pos, 0.0);
            if (c.rbuf != before) abort(); /* the views of a request in BUSY must not move */
            if (request_sig(&c) != sig[n - 1]) abort();
            c.state = CPULM_CONN_READING;
            cpulm_buf_reset(&c.wbuf); /* a queued 100 Continue */
            if (cpulm_conn_next(&c) != 0) {
                pos = size; /* the connection closes: the rest is never read */
                c.rlen = 0;
            }
        }
        if (pos == size && (c.rlen == 0 || r == CPULM_CONN_NEED_MORE)) break;
    }
    cpulm_conn_release(&c);
    return n;
}

/* The same requests come out whether the bytes arrive at once or in random pieces. */
static void fuzz_split_delivery(const char *data, size_t size) {
    uint64_t sa[MAX_REQS], sb[MAX_REQS];
    int bad_a, bad_b;
    uint64_t seed = fnv(0x9E3779B97F4A7C15ull, data, size < 64 ? size : 64);
    int na = deliver(data, size, 0, seed, sa, &bad_a);
    int nb = deliver(data, size, 1 + (size_t)(seed % 257), seed, sb, &bad_b);
    if (na != nb || bad_a != bad_b || memcmp(sa, sb, sizeof sa[0] * (size_t)na) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 20) return 0;
    const char *buf = (const char *)data;
    size_t step = size ? 1 + data[0] % 17 : 1;
    fuzz_head(buf, size, 0, step);
    fuzz_head(buf, size, 1, step);
    fuzz_chunked(buf, size, size / 2);
    fuzz_split_delivery(buf, size);
    return 0;
}
