/* fuzz_http.c: fuzz target for the HTTP/1.1 head parser and the chunked decoder
 * (src/server/http.c). libFuzzer entry point; without libFuzzer it links with
 * tests/fuzz/fuzz_main.c, which replays tests/fuzz/corpus/http.
 * Invariants checked beyond "no crash, no sanitizer report":
 *   - feeding the input in pieces (with prev_len) gives the same answer as all at once;
 *   - every returned field points inside the input, and a complete head is <= the input;
 *   - an error always carries a 4xx/5xx status and a reason;
 *   - the chunked decoder never writes past what it read, and decoding in two pieces
 *     yields the same body as in one. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
    if (rb != CPULM_HTTP_INCOMPLETE && ra != rb && ra != CPULM_HTTP_ERROR && rb != CPULM_HTTP_ERROR) abort();
    if (ra > 0 && rb > 0 && (a.n_headers != b.n_headers || a.content_length != b.content_length ||
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 20) return 0;
    const char *buf = (const char *)data;
    size_t step = size ? 1 + data[0] % 17 : 1;
    fuzz_head(buf, size, 0, step);
    fuzz_head(buf, size, 1, step);
    fuzz_chunked(buf, size, size / 2);
    return 0;
}
