/* test_http.c: the HTTP/1.1 head parser and chunked decoder (src/server/http.c):
 * field extraction, incremental feeding, every rejection path with its status code,
 * limits, keep-alive rules, chunked decoding split at every offset, and reads that end
 * exactly at a PROT_NONE guard page. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/conn.h"
#include "server/evict.h"
#include "server/http.h"
#include "test.h"

static int str_is(const cpulm_http_str *s, const char *lit) {
    return s && s->n == strlen(lit) && memcmp(s->p, lit, s->n) == 0;
}

static long parse(const char *s, cpulm_http_msg *m) {
    return cpulm_http_parse_request(s, strlen(s), 0, NULL, m);
}

TEST(http_parses_request_fields) {
    const char *req = "POST /v1/completions?x=1&y=2 HTTP/1.1\r\n"
                      "Host: 127.0.0.1:8080\r\n"
                      "Content-Type:application/json \r\n"
                      "Authorization: Bearer  sk-123\t\r\n"
                      "Content-Length: 17\r\n"
                      "\r\n"
                      "{\"prompt\":\"hi\"}..";
    cpulm_http_msg m;
    long n = parse(req, &m);
    CHECK_EQ_INT(t, n, (long)(strstr(req, "{") - req));
    CHECK(t, str_is(&m.method, "POST"));
    CHECK(t, str_is(&m.target, "/v1/completions?x=1&y=2"));
    CHECK(t, str_is(&m.path, "/v1/completions"));
    CHECK(t, str_is(&m.query, "x=1&y=2"));
    CHECK_EQ_INT(t, m.version_minor, 1);
    CHECK_EQ_INT(t, m.n_headers, 4);
    CHECK(t, str_is(cpulm_http_header_get(&m, "content-type"), "application/json"));
    CHECK(t, str_is(cpulm_http_header_get(&m, "AUTHORIZATION"), "Bearer  sk-123"));
    CHECK(t, cpulm_http_header_get(&m, "x-missing") == NULL);
    CHECK_EQ_INT(t, m.content_length, 17);
    CHECK_EQ_INT(t, m.chunked, 0);
    CHECK_EQ_INT(t, m.keep_alive, 1);
    CHECK_EQ_INT(t, (long)m.head_len, n);
}

TEST(http_accepts_bare_lf_and_leading_blank_lines) {
    cpulm_http_msg m;
    const char *req = "\r\n\nGET /health HTTP/1.1\nHost: x\n\n";
    CHECK_EQ_INT(t, parse(req, &m), (long)strlen(req));
    CHECK(t, str_is(&m.path, "/health"));
    CHECK_EQ_INT(t, m.query.n, 0);
    CHECK_EQ_INT(t, m.content_length, -1);
}

TEST(http_incremental_feed_is_linear_and_equal) {
    const char *req = "GET /v1/models HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\nGET /next";
    size_t head = strstr(req, "GET /next") - req;
    cpulm_http_msg m;
    size_t prev = 0;
    for (size_t len = 0; len < head; len++) {
        long r = cpulm_http_parse_request(req, len, prev, NULL, &m);
        if (r != CPULM_HTTP_INCOMPLETE) {
            fprintf(stderr, "  prefix %zu: %ld\n", len, r);
            t->n_fail++;
        }
        prev = len;
    }
    CHECK_EQ_INT(t, cpulm_http_parse_request(req, head, prev, NULL, &m), (long)head);
    CHECK_EQ_INT(t, cpulm_http_parse_request(req, strlen(req), head - 1, NULL, &m), (long)head);
    CHECK(t, str_is(cpulm_http_header_get(&m, "accept"), "*/*"));
}

static void expect_error(test_ctx *t, const char *req, int status) {
    cpulm_http_msg m;
    long r = parse(req, &m);
    if (r != CPULM_HTTP_ERROR || m.error_status != status) {
        fprintf(stderr, "  request %.40s...: got %ld status %d, wanted %d\n", req, r,
                m.error_status, status);
        t->n_fail++;
    } else if (!m.error || !*m.error) {
        t->n_fail++;
    }
}

TEST(http_rejects_malformed_with_status) {
    expect_error(t, "GET\r\n\r\n", 400);
    expect_error(t, "GET / \r\nHost: a\r\n\r\n", 400);
    expect_error(t, "G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    expect_error(t, "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    expect_error(t, "GET x HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    expect_error(t, "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505);
    expect_error(t, "GET / HTTX/1.1\r\nHost: a\r\n\r\n", 400);
    expect_error(t, "GET / HTTP/1.1\r\n\r\n", 400); /* Host is required in 1.1 */
    expect_error(t, "GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n", 400);
    expect_error(t, "GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n", 400);
    expect_error(t, "GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", 400);
    expect_error(t, "GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400);
    expect_error(t, "GET / HTTP/1.1\r\nHost: a\x01\r\n\r\n", 400);
    expect_error(t, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n\r\n", 400);
    expect_error(t, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400);
    expect_error(t, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                 400);
    expect_error(t,
                 "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n",
                 400);
    expect_error(t, "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501);
    expect_error(t, "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 501);
    expect_error(t, "POST / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n", 417);
    expect_error(t, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
                 413);
    expect_error(t, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1048577\r\n\r\n", 413);
}

TEST(http_limits_head_lines_and_header_count) {
    cpulm_http_limits lim = cpulm_http_default_limits();
    lim.max_head = 512;
    lim.max_line = 128;
    lim.max_headers = 4;
    char buf[2048];
    cpulm_http_msg m;
    /* too many fields */
    snprintf(buf, sizeof buf, "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n");
    CHECK_EQ_INT(t, cpulm_http_parse_request(buf, strlen(buf), 0, &lim, &m), CPULM_HTTP_ERROR);
    CHECK_EQ_INT(t, m.error_status, 431);
    /* a long header line */
    memset(buf, 0, sizeof buf);
    strcpy(buf, "GET / HTTP/1.1\r\nHost: a\r\nX: ");
    memset(buf + strlen(buf), 'v', 200);
    strcat(buf, "\r\n\r\n");
    CHECK_EQ_INT(t, cpulm_http_parse_request(buf, strlen(buf), 0, &lim, &m), CPULM_HTTP_ERROR);
    CHECK_EQ_INT(t, m.error_status, 431);
    /* a long target: 414 even before the head is complete */
    memset(buf, 0, sizeof buf);
    strcpy(buf, "GET /");
    memset(buf + 5, 'p', 300);
    CHECK_EQ_INT(t, cpulm_http_parse_request(buf, strlen(buf), 0, &lim, &m), CPULM_HTTP_ERROR);
    CHECK_EQ_INT(t, m.error_status, 414);
    /* a head that never ends */
    memset(buf, 0, sizeof buf);
    strcpy(buf, "GET / HTTP/1.1\r\n");
    for (int i = 0; i < 80; i++)
        strcat(buf, "X-A: b\r\n");
    CHECK_EQ_INT(t, cpulm_http_parse_request(buf, strlen(buf), 0, &lim, &m), CPULM_HTTP_ERROR);
    CHECK_EQ_INT(t, m.error_status, 431);
    /* body limit */
    lim.max_body = 10;
    snprintf(buf, sizeof buf, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\n");
    CHECK_EQ_INT(t, cpulm_http_parse_request(buf, strlen(buf), 0, &lim, &m), CPULM_HTTP_ERROR);
    CHECK_EQ_INT(t, m.error_status, 413);
    snprintf(buf, sizeof buf, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n");
    CHECK(t, cpulm_http_parse_request(buf, strlen(buf), 0, &lim, &m) > 0);
}

TEST(http_keep_alive_rules) {
    cpulm_http_msg m;
    CHECK(t, parse("GET / HTTP/1.0\r\n\r\n", &m) > 0);
    CHECK_EQ_INT(t, m.keep_alive, 0);
    CHECK(t, parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &m) > 0);
    CHECK_EQ_INT(t, m.keep_alive, 1);
    CHECK(t, parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", &m) > 0);
    CHECK_EQ_INT(t, m.keep_alive, 0);
    CHECK(t, parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Close\r\n\r\n", &m) > 0);
    CHECK_EQ_INT(t, m.keep_alive, 0);
    CHECK(t, parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n", &m) > 0);
    CHECK_EQ_INT(t, m.keep_alive, 1);
    CHECK(t, parse("POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n",
                   &m) > 0);
    CHECK_EQ_INT(t, m.expect_continue, 1);
    CHECK_EQ_INT(t, m.chunked, 1);
}

TEST(http_parses_response_heads) {
    cpulm_http_msg m;
    const char *r =
        "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 2\r\n\r\n{}";
    long n = cpulm_http_parse_response(r, strlen(r), 0, NULL, &m);
    CHECK_EQ_INT(t, n, (long)strlen(r) - 2);
    CHECK_EQ_INT(t, m.status, 429);
    CHECK(t, str_is(&m.reason, "Too Many Requests"));
    CHECK(t, str_is(cpulm_http_header_get(&m, "retry-after"), "1"));
    CHECK_EQ_INT(t, m.content_length, 2);
    r = "HTTP/1.1 200\r\nTransfer-Encoding: chunked\r\n\r\n";
    CHECK(t, cpulm_http_parse_response(r, strlen(r), 0, NULL, &m) > 0);
    CHECK_EQ_INT(t, m.status, 200);
    CHECK_EQ_INT(t, m.chunked, 1);
    r = "HTTP/1.1 2x0 OK\r\n\r\n";
    CHECK_EQ_INT(t, cpulm_http_parse_response(r, strlen(r), 0, NULL, &m), CPULM_HTTP_ERROR);
}

/* Decodes enc fed in two pieces split at `split`; returns the status and the body. */
static int dechunk_split(const char *enc, size_t split, char *body, size_t *body_len, size_t *end,
                         uint64_t max_body) {
    char buf[512];
    size_t n = strlen(enc);
    memcpy(buf, enc, n);
    cpulm_http_limits lim = cpulm_http_default_limits();
    lim.max_body = max_body;
    cpulm_http_chunked d;
    cpulm_http_chunked_init(&d, &lim);
    size_t in = 0, out = 0;
    int r = cpulm_http_chunked_feed(&d, buf, split, &in, &out);
    if (r == 0) r = cpulm_http_chunked_feed(&d, buf, n, &in, &out);
    memcpy(body, buf, out);
    *body_len = out;
    *end = in;
    return r;
}

TEST(http_chunked_decodes_at_every_split) {
    const char *enc =
        "5;ext=1\r\nhello\r\n1\r\n \r\nA\r\nworld12345\r\n0\r\nTrailer: x\r\n\r\nNEXT";
    size_t msg_len = strstr(enc, "NEXT") - enc;
    for (size_t split = 0; split <= strlen(enc); split++) {
        char body[512];
        size_t blen, end;
        int r = dechunk_split(enc, split, body, &blen, &end, 1 << 20);
        if (r != 1 || blen != 16 || memcmp(body, "hello world12345", 16) != 0 || end != msg_len) {
            fprintf(stderr, "  split %zu: r %d len %zu end %zu\n", split, r, blen, end);
            t->n_fail++;
        }
    }
}

TEST(http_chunked_rejects_bad_encodings) {
    char body[512];
    size_t blen, end;
    CHECK_EQ_INT(t, dechunk_split("x\r\n", 3, body, &blen, &end, 100), CPULM_HTTP_ERROR);
    CHECK_EQ_INT(t, dechunk_split("3\r\nabcX\r\n", 9, body, &blen, &end, 100), CPULM_HTTP_ERROR);
    CHECK_EQ_INT(t, dechunk_split("1234567890abcdef0\r\n", 19, body, &blen, &end, 100),
                 CPULM_HTTP_ERROR);
    CHECK_EQ_INT(t, dechunk_split("3\x01\r\nabc\r\n", 10, body, &blen, &end, 100),
                 CPULM_HTTP_ERROR);
    CHECK_EQ_INT(t, dechunk_split("8\r\n12345678\r\n8\r\n", 16, body, &blen, &end, 10),
                 CPULM_HTTP_TOO_LARGE);
    CHECK_EQ_INT(t, dechunk_split("8\r\n1234", 7, body, &blen, &end, 10), 0);
}

/* Maps len bytes so that the last one sits just before a PROT_NONE page. */
static char *guarded_copy(const char *s, size_t len, void **map, size_t *map_len) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t pages = (len + pg - 1) / pg + 1;
    char *base = mmap(NULL, pages * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return NULL;
    mprotect(base + (pages - 1) * pg, pg, PROT_NONE);
    char *p = base + (pages - 1) * pg - len;
    memcpy(p, s, len);
    *map = base;
    *map_len = pages * pg;
    return p;
}

TEST(http_never_reads_past_the_input) {
    const char *reqs[] = {
        "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n",
        "GET / HTTP/1.1\nHost: a\n\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
    };
    for (size_t k = 0; k < 3; k++) {
        size_t n = strlen(reqs[k]);
        for (size_t len = 0; len <= n; len++) {
            void *map;
            size_t map_len;
            char *p = guarded_copy(reqs[k], len, &map, &map_len);
            REQUIRE(t, p);
            cpulm_http_msg m;
            long r = k < 2 ? cpulm_http_parse_request(p, len, 0, NULL, &m)
                           : cpulm_http_parse_response(p, len, 0, NULL, &m);
            CHECK(t, len == n ? r == (long)n : r == CPULM_HTTP_INCOMPLETE);
            cpulm_http_chunked d;
            cpulm_http_chunked_init(&d, NULL);
            size_t in = 0, out = 0;
            CHECK(t, cpulm_http_chunked_feed(&d, p, len, &in, &out) <= 1);
            munmap(map, map_len);
        }
    }
}

TEST(http_status_texts) {
    CHECK(t, strcmp(cpulm_http_status_text(429), "Too Many Requests") == 0);
    CHECK(t, strcmp(cpulm_http_status_text(413), "Content Too Large") == 0);
    CHECK(t, strcmp(cpulm_http_status_text(299), "Unknown") == 0);
}

/* ---- connection framing (src/server/conn.c) ---- */

/* Issue #9, item 1: the head arrives first and is parsed; the body then makes the read
 * buffer grow (realloc). The request's method, path and header views must still show the
 * head's bytes (they pointed into the freed buffer before the fix: ASan heap-use-after-free,
 * garbage in a release build). Driven through a socketpair like a real client. */
TEST(http_conn_views_survive_buffer_growth) {
    int sv[2];
    REQUIRE(t, socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    int big = 1 << 20;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    cpulm_conn c;
    cpulm_conn_init(&c, sv[1], 0, 1 << 20, 0.0);
    cpulm_http_limits lim = cpulm_http_default_limits();
    const char *head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                       "Authorization: Bearer sk-secret\r\nContent-Length: 15009\r\n\r\n";
    CHECK_EQ_INT(t, write(sv[0], head, strlen(head)), (long)strlen(head));
    CHECK(t, cpulm_conn_fill(&c, 0.0) > 0);
    CHECK_EQ_INT(t, cpulm_conn_parse(&c, &lim), CPULM_CONN_NEED_MORE);
    char *body = malloc(15009);
    REQUIRE(t, body);
    memset(body, 'b', 15009);
    body[0] = '{';
    body[15008] = '}';
    size_t off = 0;
    for (int k = 0; k < 64 && off < 15009; k++) { /* bounded: the pair buffers it all */
        ssize_t w = write(sv[0], body + off, 15009 - off);
        if (w > 0) off += (size_t)w;
        cpulm_conn_fill(&c, 0.0);
    }
    CHECK_EQ_INT(t, off, 15009);
    CHECK_EQ_INT(t, cpulm_conn_parse(&c, &lim), CPULM_CONN_REQUEST);
    CHECK(t, c.rcap > 4096); /* the buffer did grow after the head was parsed */
    CHECK(t, str_is(&c.msg.method, "POST"));
    CHECK(t, str_is(&c.msg.path, "/v1/completions"));
    CHECK(t, str_is(cpulm_http_header_get(&c.msg, "authorization"), "Bearer sk-secret"));
    CHECK_EQ_INT(t, c.body_len, 15009);
    CHECK(t, c.body && c.body[0] == '{' && c.body[15008] == '}');
    free(body);
    cpulm_conn_release(&c);
    close(sv[0]);
}

/* Issue #9, item 5: only a single "chunked" coding is accepted (anything else is 501, as
 * docs/SERVER.md promises); two Authorization fields are 400, not "the first wins". */
TEST(http_strict_transfer_coding_and_single_authorization) {
    expect_error(t, "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501);
    expect_error(t, "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
                 501);
    expect_error(t,
                 "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n",
                 501);
    expect_error(t,
                 "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n",
                 501);
    expect_error(t, "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n", 501);
    expect_error(t, "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ,\r\n\r\n", 400);
    expect_error(t,
                 "GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer a\r\n"
                 "Authorization: Bearer b\r\n\r\n",
                 400);
    expect_error(t,
                 "GET / HTTP/1.1\r\nHost: a\r\nauthorization: Bearer a\r\n"
                 "AUTHORIZATION: Bearer a\r\n\r\n",
                 400);
    cpulm_http_msg m;
    CHECK(t, parse("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:  Chunked \r\n"
                   "Authorization: Bearer a\r\n\r\n",
                   &m) > 0);
    CHECK_EQ_INT(t, m.chunked, 1);
}

/* ---- issue #25: strict framing ---- */

/* Content-Length is parsed without signed overflow (UBSan aborted on 19 nines); any value
 * too large for the body limit is 413, however many digits; leading zeros are still a
 * number (RFC 9110 section 8.6: 1*DIGIT). */
TEST(http_content_length_never_overflows) {
    expect_error(t, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9999999999999999999\r\n\r\n",
                 413);
    expect_error(t, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9223372036854775808\r\n\r\n",
                 413);
    expect_error(t, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551617\r\n\r\n",
                 413);
    char buf[400];
    memset(buf, 0, sizeof buf);
    strcpy(buf, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: ");
    memset(buf + strlen(buf), '9', 200);
    strcat(buf, "\r\n\r\n");
    expect_error(t, buf, 413);
    expect_error(t, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: \r\n\r\n", 400);
    expect_error(t, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", 400);
    expect_error(t, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", 400);
    cpulm_http_msg m;
    CHECK(t,
          parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0000000000000000000000017\r\n\r\n",
                &m) > 0);
    CHECK_EQ_INT(t, m.content_length, 17);
    CHECK(t, parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1048576\r\n\r\n", &m) > 0);
    CHECK_EQ_INT(t, m.content_length, 1048576);
    CHECK(t, parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 7\r\nContent-Length: 7\r\n\r\n",
                   &m) > 0);
    CHECK_EQ_INT(t, m.content_length, 7);
}

/* RFC 9112 section 6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing. */
TEST(http_rejects_transfer_encoding_in_http_1_0) {
    expect_error(t, "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400);
    expect_error(t, "POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 400);
    expect_error(t,
                 "POST / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n",
                 400);
    cpulm_http_msg m;
    const char *r = "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    CHECK_EQ_INT(t, cpulm_http_parse_response(r, strlen(r), 0, NULL, &m), CPULM_HTTP_ERROR);
    CHECK(t, parse("POST / HTTP/1.0\r\nContent-Length: 2\r\n\r\n", &m) > 0);
}

/* The whole encoding decoded in every two-piece split must give `want` (1: complete, or
 * CPULM_HTTP_ERROR); returns the number of splits that disagreed. */
static int chunked_all_splits(const char *enc, int want, const char *what, size_t i) {
    int bad = 0;
    for (size_t split = 0; split <= strlen(enc); split++) {
        char body[512];
        size_t blen, end;
        int r = dechunk_split(enc, split, body, &blen, &end, 1 << 20);
        if (r != want) {
            if (!bad)
                fprintf(stderr, "  %s[%zu]: split %zu gave %d, wanted %d\n", what, i, split, r,
                        want);
            bad++;
        }
    }
    return bad;
}

/* Issue #25 row 6: a chunk-size line is 1*HEXDIG, then only chunk extensions
 * (";" token ["=" token / quoted-string]) and CRLF. Anything else after the digits was
 * taken as an extension: "0x35" read as a last chunk of size 0 (a smuggling shape). Bare CR
 * and bare LF are refused anywhere in the framing. */
TEST(http_chunked_strict_size_lines) {
    static const char *bad[] = {
        "0x35\r\n01234567890123456789012345678901234567890123456789012\r\n0\r\n\r\n",
        "3cg\r\nabc\r\n0\r\n\r\n",
        "3;e\rx=1\r\nabc\r\n0\r\n\r\n",
        "3;e=\"a\rb\"\r\nabc\r\n0\r\n\r\n",
        "3;e=1\rx\r\nabc\r\n0\r\n\r\n",
        "3;e\nx\r\nabc\r\n0\r\n\r\n",
        "3\nabc\r\n0\r\n\r\n",
        "3\r\nabc\n0\r\n\r\n",
        "3\r\nabc\r\r\n0\r\n\r\n",
        "3\r\nabc\r\n0\n\r\n",
        "3\r\nabc\r\n0\r\n\n",
        "3\r\nabc\r\n0\r\nX: y\n\r\n",
        "3\r\nabc\r\n0\r\nX: y\r\r\n\r\n",
        "3\r\nabc\r\n0\r\nbad trailer\r\n\r\n",
        "\r\nabc\r\n0\r\n\r\n",
        ";e\r\nabc\r\n0\r\n\r\n",
        "3 \r\nabc\r\n0\r\n\r\n",
        " 3\r\nabc\r\n0\r\n\r\n",
        "3\t\r\nabc\r\n0\r\n\r\n",
        "3;\r\nabc\r\n0\r\n\r\n",
        "3;=1\r\nabc\r\n0\r\n\r\n",
        "3;e=\r\nabc\r\n0\r\n\r\n",
        "3;e=\"x\r\nabc\r\n0\r\n\r\n",
        "3;e=\"x\"y\r\nabc\r\n0\r\n\r\n",
        "3;e=a b\r\nabc\r\n0\r\n\r\n",
        "3;e@\r\nabc\r\n0\r\n\r\n",
        "3;e=\"\x01\"\r\nabc\r\n0\r\n\r\n",
        "-3\r\nabc\r\n0\r\n\r\n",
        "+3\r\nabc\r\n0\r\n\r\n",
        "3\r\nabcd\r\n0\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        t->n_fail += chunked_all_splits(bad[i], CPULM_HTTP_ERROR, "bad", i);
    static const char *good[] = {
        "3\r\nabc\r\n0\r\n\r\n",
        "03\r\nabc\r\n000\r\n\r\n",
        "3;e\r\nabc\r\n0\r\n\r\n",
        "3;e=1;f=tok-en.x;g\r\nabc\r\n0;last\r\n\r\n",
        "3;e=\"quoted ; = \\\" \\\\ \t text\"\r\nabc\r\n0\r\n\r\n",
        "3;e=\"\"\r\nabc\r\n0\r\n\r\n",
        "3\r\nabc\r\n0\r\nX-T: 1\r\nY:\r\n\r\n",
        "A\r\n0123456789\r\n0\r\n\r\n",
        "a\r\n0123456789\r\n0\r\n\r\n",
        "000000000000000000000000001\r\nx\r\n0\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        t->n_fail += chunked_all_splits(good[i], 1, "good", i);
    /* "0x35" is not a size-0 last chunk followed by a second request */
    char body[512];
    size_t blen, end;
    CHECK_EQ_INT(t, dechunk_split("0x35\r\n\r\nGET / HTTP/1.1\r\n", 4, body, &blen, &end, 100),
                 CPULM_HTTP_ERROR);
}

/* The same through a connection: a chunk line "0x35" is a 400 that closes, never a
 * request with an empty body followed by a second request. */
TEST(http_conn_refuses_hex_prefix_chunk_size) {
    cpulm_http_limits lim = cpulm_http_default_limits();
    cpulm_conn c;
    cpulm_conn_init(&c, -1, 0, 1 << 16, 0.0);
    const char *req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                      "\r\n0x35\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ_INT(t, cpulm_conn_feed(&c, req, strlen(req), 0.0), strlen(req));
    CHECK_EQ_INT(t, cpulm_conn_parse(&c, &lim), CPULM_CONN_BAD);
    CHECK_EQ_INT(t, c.bad_status, 400);
    cpulm_conn_release(&c);
}

/* ---- issue #25 row 1: the body budget and eviction ---- */

static cpulm_conn_parse_result feed_parse(cpulm_conn *c, const char *s, size_t n) {
    cpulm_http_limits lim = cpulm_http_default_limits();
    if (cpulm_conn_feed(c, s, n, 0.0) != n) return (cpulm_conn_parse_result)-1;
    return cpulm_conn_parse(c, &lim);
}

static const char *post_head(char *buf, size_t cap, size_t content_length) {
    snprintf(buf, cap, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n",
             content_length);
    return buf;
}

/* A Content-Length body reserves its whole buffer from the budget as soon as the head is
 * parsed; one that does not fit is 503 at once (before any 100 Continue); the memory goes
 * back when the request is done (the buffer shrinks) and when the connection closes. */
TEST(http_conn_body_budget) {
    cpulm_conn_budget b = {.limit = 200000};
    cpulm_conn a, c, d;
    size_t rmax = 16384 + (1 << 20) + 65536;
    cpulm_conn_init(&a, -1, 0, rmax, 0.0);
    cpulm_conn_init(&c, -1, 1, rmax, 0.0);
    cpulm_conn_init(&d, -1, 2, rmax, 0.0);
    a.budget = c.budget = d.budget = &b;
    char h[256];
    post_head(h, sizeof h, 150000);
    CHECK_EQ_INT(t, feed_parse(&a, h, strlen(h)), CPULM_CONN_NEED_MORE);
    CHECK(t, a.rcap >= strlen(h) + 150000);
    CHECK_EQ_INT(t, b.used, a.charged);
    CHECK_EQ_INT(t, a.charged, a.rcap - CPULM_CONN_FREE_RBUF);
    post_head(h, sizeof h, 100000);
    char e[512];
    snprintf(e, sizeof e, "%.*sExpect: 100-continue\r\n\r\n", (int)strlen(h) - 2, h);
    CHECK_EQ_INT(t, feed_parse(&c, e, strlen(e)), CPULM_CONN_BAD);
    CHECK_EQ_INT(t, c.bad_status, 503);
    CHECK_EQ_INT(t, c.wbuf.len, 0); /* no 100 Continue went out */
    /* a small body needs no budget, even now */
    const char *small = "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";
    CHECK_EQ_INT(t, feed_parse(&d, small, strlen(small)), CPULM_CONN_REQUEST);
    /* a's body arrives; once answered, its buffer shrinks and the budget is free */
    char *body = malloc(150000);
    REQUIRE(t, body);
    memset(body, 'x', 150000);
    CHECK_EQ_INT(t, feed_parse(&a, body, 150000), CPULM_CONN_REQUEST);
    CHECK_EQ_INT(t, a.body_len, 150000);
    a.state = CPULM_CONN_BUSY;
    CHECK_EQ_INT(t, cpulm_conn_next(&a), 0);
    CHECK(t, a.rcap <= CPULM_CONN_FREE_RBUF);
    CHECK_EQ_INT(t, a.charged, 0);
    CHECK_EQ_INT(t, b.used, 0);
    /* a chunked body is charged as it grows, and refused past the budget */
    const char *ch = "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    CHECK_EQ_INT(t, feed_parse(&a, ch, strlen(ch)), CPULM_CONN_NEED_MORE);
    cpulm_conn_parse_result r = CPULM_CONN_NEED_MORE;
    for (int k = 0; k < 40 && r == CPULM_CONN_NEED_MORE; k++) { /* 40 x 10000 > the budget */
        char chunk[10010];
        int n = snprintf(chunk, sizeof chunk, "2710\r\n");
        memcpy(chunk + n, body, 10000);
        memcpy(chunk + n + 10000, "\r\n", 2);
        cpulm_conn_feed(&a, chunk, (size_t)n + 10002, 0.0);
        cpulm_http_limits lim = cpulm_http_default_limits();
        r = cpulm_conn_parse(&a, &lim);
    }
    CHECK_EQ_INT(t, r, CPULM_CONN_BAD);
    CHECK_EQ_INT(t, a.bad_status, 503);
    CHECK(t, b.used <= b.limit);
    free(body);
    cpulm_conn_release(&a);
    cpulm_conn_release(&c);
    cpulm_conn_release(&d);
    CHECK_EQ_INT(t, b.used, 0);
}

/* Reclaim: when the budget is short, the server's callback may close others' connections. */
typedef struct reclaim_state {
    cpulm_conn *victim;
    int calls;
} reclaim_state;

static void test_reclaim(void *user, size_t need, const cpulm_conn *asking) {
    reclaim_state *st = user;
    st->calls++;
    if (st->victim && st->victim != asking && need > 0) {
        cpulm_conn_release(st->victim);
        st->victim = NULL;
    }
}

TEST(http_conn_body_budget_reclaims) {
    reclaim_state st = {NULL, 0};
    cpulm_conn_budget b = {.limit = 200000, .reclaim = test_reclaim, .user = &st};
    cpulm_conn a, c;
    size_t rmax = 16384 + (1 << 20) + 65536;
    cpulm_conn_init(&a, -1, 0, rmax, 0.0);
    cpulm_conn_init(&c, -1, 1, rmax, 0.0);
    a.budget = c.budget = &b;
    char h[256];
    post_head(h, sizeof h, 150000);
    CHECK_EQ_INT(t, feed_parse(&a, h, strlen(h)), CPULM_CONN_NEED_MORE);
    CHECK_EQ_INT(t, st.calls, 0);
    st.victim = &a;
    CHECK_EQ_INT(t, feed_parse(&c, h, strlen(h)), CPULM_CONN_NEED_MORE);
    CHECK_EQ_INT(t, st.calls, 1);
    CHECK_EQ_INT(t, b.used, c.charged);
    cpulm_conn_release(&c);
    cpulm_conn_release(&a); /* released twice: the second is a no-op */
    CHECK_EQ_INT(t, b.used, 0);
}

static cpulm_conn *fake_conn(uint8_t client, cpulm_conn_state state, int head_done, size_t charged,
                             double t_active) {
    cpulm_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    cpulm_conn_init(c, -1, 0, 1 << 20, t_active);
    c->peer[0] = client;
    c->state = state;
    c->head_done = head_done;
    c->charged = charged;
    return c;
}

/* The eviction choice: CLOSING first; a client over its share loses its own; else the
 * client holding the most loses its least recently active; requests being answered, and
 * (for the budget) bodies still flowing, are never chosen. */
TEST(http_evict_is_fair) {
    enum { N = 12 };
    cpulm_conn *t_[N] = {0};
    cpulm_evict *e = cpulm_evict_new(N);
    REQUIRE(t, e);
    /* client 1: five connections waiting for bodies; client 2: two idle, one answering */
    for (int i = 0; i < 5; i++)
        t_[i] = fake_conn(1, CPULM_CONN_READING, 1, 1000 * (size_t)(i + 1), 10.0 + i);
    t_[5] = fake_conn(2, CPULM_CONN_READING, 0, 0, 1.0); /* the oldest of all */
    t_[6] = fake_conn(2, CPULM_CONN_READING, 0, 0, 2.0);
    t_[7] = fake_conn(2, CPULM_CONN_BUSY, 1, 50000, 0.5);
    for (int i = 0; i < 8; i++)
        REQUIRE(t, t_[i]);
    uint8_t k3[16] = {3}, k2[16] = {2}, k1[16] = {1};
    cpulm_evict_query q = {.kind = CPULM_EVICT_SLOT, .key = k3, .limit = 8};
    /* a new client: the heaviest client (1, five) loses its least recently active */
    CHECK_EQ_INT(t, cpulm_evict_pick(e, t_, N, &q), 0);
    /* client 2 asks (3 of 8 with 2 clients present: under its share of 4): client 1 loses */
    q.key = k2;
    CHECK_EQ_INT(t, cpulm_evict_pick(e, t_, N, &q), 0);
    /* client 1 asks, over its share: its own least recently active */
    q.key = k1;
    CHECK_EQ_INT(t, cpulm_evict_pick(e, t_, N, &q), 0);
    /* own only (per-client limit): client 2's oldest idle, never its busy one */
    q.key = k2;
    q.own_only = 1;
    CHECK_EQ_INT(t, cpulm_evict_pick(e, t_, N, &q), 5);
    q.own_only = 0;
    /* a closing connection goes first */
    t_[8] = fake_conn(3, CPULM_CONN_CLOSING, 0, 0, 100.0);
    REQUIRE(t, t_[8]);
    CHECK_EQ_INT(t, cpulm_evict_pick(e, t_, N, &q), 8);
    t_[8]->state = CPULM_CONN_BUSY;
    /* budget: client 2 holds the most (its busy request) but that one is never a
     * candidate; of client 1's, only those stalled for 1 s (now 14.5: indexes 0..3) */
    cpulm_evict_query qb = {.kind = CPULM_EVICT_BUDGET,
                            .key = k3,
                            .limit = 100000,
                            .now = 14.5,
                            .stall_s = 1.0,
                            .asking = t_[0]};
    CHECK_EQ_INT(t, cpulm_evict_pick(e, t_, N, &qb), 1);
    qb.now = 11.5; /* only index 0 is stalled, and it is the asking one */
    CHECK_EQ_INT(t, cpulm_evict_pick(e, t_, N, &qb), -1);
    for (int i = 0; i < N; i++)
        if (t_[i]) {
            cpulm_conn_release(t_[i]);
            free(t_[i]);
        }
    cpulm_evict_free(e);
}

/* Found by fuzz_http (split delivery): the status of an over-limit head depended on how
 * many bytes came at once. 3,000 bytes without a line end were 431 when they came together
 * and 414 when the first 1,025 came first; a first line of 1,100 bytes was 414 alone and
 * 431 with more than 2,048 bytes of head behind it. The first line's limit now comes first:
 * every prefix that shows it broken answers like the whole. */
TEST(http_over_limit_status_independent_of_split) {
    cpulm_http_limits lim = cpulm_http_default_limits();
    lim.max_head = 2048;
    lim.max_line = 1024;
    char buf[4096];
    memset(buf, 'A', sizeof buf);
    cpulm_http_msg m;
    static const size_t lens[] = {1025, 1500, 2048, 2049, 3000, 4096};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        CHECK_EQ_INT(t, cpulm_http_parse_request(buf, lens[k], 0, &lim, &m), CPULM_HTTP_ERROR);
        CHECK_EQ_INT(t, m.error_status, 414);
    }
    /* a 1,100-byte request line, then a LF and more than max_head of header bytes */
    memcpy(buf, "GET /", 5);
    memcpy(buf + 1100, "\nX: ", 4);
    for (size_t len = 1101; len <= sizeof buf; len += 499) {
        CHECK_EQ_INT(t, cpulm_http_parse_request(buf, len, 0, &lim, &m), CPULM_HTTP_ERROR);
        CHECK_EQ_INT(t, m.error_status, 414);
    }
    /* a short first line: a head past max_head is 431 however it arrives */
    memcpy(buf, "GET / HTTP/1.1\r\n", 16);
    for (size_t len = 2049; len <= sizeof buf; len += 500) {
        CHECK_EQ_INT(t, cpulm_http_parse_request(buf, len, 0, &lim, &m), CPULM_HTTP_ERROR);
        CHECK_EQ_INT(t, m.error_status, 431);
    }
}
