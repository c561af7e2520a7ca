/* http.c: HTTP/1.1 head parser and chunked decoder (see http.h for the contract).
 *
 * The head is parsed only once it is complete: the end ("\n\n" or "\n\r\n") is searched in
 * the new bytes only, then the lines are walked once. Lines end in LF with an optional CR
 * before it (RFC 9112 §2.2 lets a recipient accept a bare LF); a CR anywhere else is an
 * error. Every index is checked against len; nothing here reads past the buffer, which the
 * tests verify with the input ending at a guard page.
 */
#include "server/http.h"

#include <string.h>

cpulm_http_limits cpulm_http_default_limits(void) {
    cpulm_http_limits l = {.max_head = 16 * 1024,
                           .max_line = 8 * 1024,
                           .max_headers = CPULM_HTTP_MAX_HEADERS,
                           .max_body = 1024 * 1024};
    return l;
}

/* ---- character classes (RFC 9110 §5.6.2) ---- */

static int is_tchar(unsigned char c) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int is_field_char(unsigned char c) { /* VCHAR, obs-text, SP, HTAB */
    return (c >= 0x20 && c != 0x7f) || c == '\t';
}

static int lower(int c) {
    return (c >= 'A' && c <= 'Z') ? c + 32 : c;
}

int cpulm_http_str_ieq(const cpulm_http_str *s, const char *lit) {
    size_t n = strlen(lit);
    if (!s || s->n != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (lower((unsigned char)s->p[i]) != lower((unsigned char)lit[i])) return 0;
    return 1;
}

const cpulm_http_str *cpulm_http_header_get(const cpulm_http_msg *m, const char *name) {
    for (int32_t i = 0; i < m->n_headers; i++)
        if (cpulm_http_str_ieq(&m->headers[i].name, name)) return &m->headers[i].value;
    return NULL;
}

static long fail(cpulm_http_msg *m, int status, const char *why) {
    m->error_status = status;
    m->error = why;
    return CPULM_HTTP_ERROR;
}

/* ---- finding the end of the head ---- */

/* Offset just past the blank line ending the head, or 0 if not in buf[from..len) yet.
 * Leading empty lines (RFC 9112 section 2.2: "SHOULD ignore at least one") are skipped
 * before, by skip_leading_crlf. */
static size_t find_head_end(const char *buf, size_t len, size_t from) {
    for (size_t i = from; i < len; i++) {
        if (buf[i] != '\n') continue;
        if (i + 1 < len && buf[i + 1] == '\n') return i + 2;
        if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n') return i + 3;
    }
    return 0;
}

static size_t skip_leading_crlf(const char *buf, size_t len) {
    size_t i = 0;
    while (i < len && (buf[i] == '\r' || buf[i] == '\n'))
        i++;
    return i;
}

/* One line of buf[*pos..end): sets *line and *n without its CR LF and advances *pos.
 * Returns 0 on success, -1 on a stray CR, -2 when the line exceeds max_line. */
static int next_line(const char *buf, size_t end, size_t *pos, const char **line, size_t *n,
                     size_t max_line) {
    size_t i = *pos;
    const char *lf = memchr(buf + i, '\n', end - i);
    size_t stop = lf ? (size_t)(lf - buf) : end;
    size_t e = stop;
    if (e > i && buf[e - 1] == '\r') e--;
    if (e - i > max_line) return -2;
    if (memchr(buf + i, '\r', e - i)) return -1;
    *line = buf + i;
    *n = e - i;
    *pos = lf ? stop + 1 : end;
    return 0;
}

/* ---- start lines ---- */

static int parse_version(const char *p, size_t n, int *minor) {
    if (n != 8 || memcmp(p, "HTTP/1.", 7) != 0 || p[7] < '0' || p[7] > '9') return -1;
    *minor = p[7] - '0';
    return 0;
}

static long parse_request_line(const char *s, size_t n, cpulm_http_msg *m, size_t max_line) {
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)s[i]))
        i++;
    if (i == 0 || i >= n || s[i] != ' ') return fail(m, 400, "malformed request line");
    m->method = (cpulm_http_str){s, i};
    size_t t0 = ++i;
    while (i < n && (unsigned char)s[i] > 0x20 && (unsigned char)s[i] < 0x7f)
        i++;
    if (i == t0 || i >= n || s[i] != ' ') return fail(m, 400, "malformed request target");
    if (i - t0 > max_line / 2) return fail(m, 414, "request target too long");
    m->target = (cpulm_http_str){s + t0, i - t0};
    if (s[t0] != '/' && !(i - t0 == 1 && s[t0] == '*'))
        return fail(m, 400, "request target must be in origin form");
    if (parse_version(s + i + 1, n - i - 1, &m->version_minor) != 0) {
        if (n - i - 1 >= 5 && memcmp(s + i + 1, "HTTP/", 5) == 0)
            return fail(m, 505, "HTTP version not supported");
        return fail(m, 400, "malformed HTTP version");
    }
    const char *q = memchr(m->target.p, '?', m->target.n);
    size_t plen = q ? (size_t)(q - m->target.p) : m->target.n;
    m->path = (cpulm_http_str){m->target.p, plen};
    m->query = q ? (cpulm_http_str){q + 1, m->target.n - plen - 1} : (cpulm_http_str){q, 0};
    return 0;
}

static long parse_status_line(const char *s, size_t n, cpulm_http_msg *m) {
    if (n < 12 || parse_version(s, 8, &m->version_minor) != 0 || s[8] != ' ')
        return fail(m, 502, "malformed status line");
    int st = 0;
    for (int k = 9; k < 12; k++) {
        if (s[k] < '0' || s[k] > '9') return fail(m, 502, "malformed status code");
        st = st * 10 + (s[k] - '0');
    }
    if (st < 100 || (n > 12 && s[12] != ' ')) return fail(m, 502, "malformed status code");
    m->status = st;
    m->reason = n > 13 ? (cpulm_http_str){s + 13, n - 13} : (cpulm_http_str){s + n, 0};
    return 0;
}

/* ---- header fields ---- */

static long parse_field(const char *s, size_t n, cpulm_http_msg *m, int32_t max_headers) {
    if (n > 0 && (s[0] == ' ' || s[0] == '\t')) return fail(m, 400, "obsolete line folding");
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)s[i]))
        i++;
    if (i == 0 || i >= n || s[i] != ':') return fail(m, 400, "malformed header field");
    size_t v0 = i + 1, v1 = n;
    for (size_t k = v0; k < n; k++)
        if (!is_field_char((unsigned char)s[k])) return fail(m, 400, "bad byte in header value");
    while (v0 < v1 && (s[v0] == ' ' || s[v0] == '\t'))
        v0++;
    while (v1 > v0 && (s[v1 - 1] == ' ' || s[v1 - 1] == '\t'))
        v1--;
    if (m->n_headers >= max_headers) return fail(m, 431, "too many header fields");
    cpulm_http_header *h = &m->headers[m->n_headers++];
    h->name = (cpulm_http_str){s, i};
    h->value = (cpulm_http_str){s + v0, v1 - v0};
    return 0;
}

/* Calls fn on each comma-separated, trimmed element of v; stops at a non-zero return. */
static int each_token(const cpulm_http_str *v, int (*fn)(const cpulm_http_str *, void *),
                      void *user) {
    size_t i = 0;
    while (i <= v->n) {
        size_t j = i;
        while (j < v->n && v->p[j] != ',')
            j++;
        size_t a = i, b = j;
        while (a < b && (v->p[a] == ' ' || v->p[a] == '\t'))
            a++;
        while (b > a && (v->p[b - 1] == ' ' || v->p[b - 1] == '\t'))
            b--;
        cpulm_http_str tok = {v->p + a, b - a};
        int r = b > a ? fn(&tok, user) : 0;
        if (r) return r;
        i = j + 1;
    }
    return 0;
}

static int conn_token(const cpulm_http_str *tok, void *user) {
    int *ka = user;
    if (cpulm_http_str_ieq(tok, "close"))
        *ka = 0;
    else if (cpulm_http_str_ieq(tok, "keep-alive") && *ka < 0)
        *ka = 1;
    return 0;
}

/* Transfer codings over all Transfer-Encoding fields: the only accepted list is a single
 * "chunked". Anything else ("gzip, chunked", "chunked, chunked") is refused with 501
 * rather than decoded as plain chunked, which would disagree with a proxy that decodes it. */
typedef struct te_state {
    int n_codings, n_chunked;
} te_state;

static int te_token(const cpulm_http_str *tok, void *user) {
    te_state *te = user;
    te->n_codings++;
    te->n_chunked += cpulm_http_str_ieq(tok, "chunked");
    return 0;
}

/* Content-Length = 1*DIGIT (RFC 9110 section 8.6), read without overflow: a value past
 * the body limit is 413 however many digits (or leading zeros) it is written with. */
static long parse_length(const cpulm_http_str *v, cpulm_http_msg *m, uint64_t max_body) {
    if (v->n == 0) return fail(m, 400, "bad Content-Length");
    uint64_t x = 0;
    int over = 0;
    for (size_t i = 0; i < v->n; i++) {
        if (v->p[i] < '0' || v->p[i] > '9') return fail(m, 400, "bad Content-Length");
        if (x > (UINT64_MAX - 9) / 10)
            over = 1; /* saturated: the value no longer matters, only that it is huge */
        else
            x = x * 10 + (uint64_t)(v->p[i] - '0');
    }
    if (over || x > max_body || x > (uint64_t)INT64_MAX)
        return fail(m, 413, "request body too large");
    if (m->content_length >= 0 && (uint64_t)m->content_length != x)
        return fail(m, 400, "conflicting Content-Length");
    m->content_length = (int64_t)x;
    return 0;
}

/* Framing and connection semantics from the fields (RFC 9112 §6, §9.3). */
static long interpret_fields(cpulm_http_msg *m, const cpulm_http_limits *lim, int is_request) {
    te_state te = {0, 0};
    int ka = -1, n_auth = 0;
    for (int32_t i = 0; i < m->n_headers; i++) {
        const cpulm_http_header *h = &m->headers[i];
        if (cpulm_http_str_ieq(&h->name, "content-length")) {
            if (parse_length(&h->value, m, lim->max_body) != 0) return CPULM_HTTP_ERROR;
        } else if (cpulm_http_str_ieq(&h->name, "transfer-encoding")) {
            int before = te.n_codings;
            each_token(&h->value, te_token, &te);
            if (te.n_codings == before) return fail(m, 400, "empty Transfer-Encoding");
        } else if (is_request && cpulm_http_str_ieq(&h->name, "authorization")) {
            if (++n_auth > 1) return fail(m, 400, "duplicate Authorization header");
        } else if (cpulm_http_str_ieq(&h->name, "connection")) {
            each_token(&h->value, conn_token, &ka);
        } else if (is_request && cpulm_http_str_ieq(&h->name, "expect")) {
            if (!cpulm_http_str_ieq(&h->value, "100-continue"))
                return fail(m, 417, "unsupported expectation");
            m->expect_continue = 1;
        }
    }
    /* RFC 9112 section 6.1: an HTTP/1.0 message with Transfer-Encoding is faulty framing (a
     * 1.0 recipient in front of us would not have decoded it) */
    if (te.n_codings > 0 && m->version_minor == 0)
        return fail(m, is_request ? 400 : 502, "Transfer-Encoding in an HTTP/1.0 message");
    if (te.n_codings > 0 && (te.n_codings != 1 || te.n_chunked != 1))
        return fail(m, 501, "unsupported transfer coding (only a single chunked is accepted)");
    if (te.n_codings && m->content_length >= 0)
        return fail(m, 400, "both Content-Length and Transfer-Encoding");
    m->chunked = te.n_codings == 1;
    m->keep_alive = ka >= 0 ? ka : (m->version_minor >= 1);
    if (ka == 0) m->keep_alive = 0;
    if (is_request && m->version_minor >= 1 && !cpulm_http_header_get(m, "host"))
        return fail(m, 400, "missing Host header");
    return 0;
}

/* ---- driver shared by requests and responses ---- */

/* Length of the first line (so far) without its CR LF; stops at the first LF. */
static size_t first_line_len(const char *buf, size_t start, size_t len) {
    const char *lf = memchr(buf + start, '\n', len - start);
    size_t n = lf ? (size_t)(lf - buf) - start : len - start;
    if (n > 0 && buf[start + n - 1] == '\r') n--;
    return n;
}

static long parse_head(const char *buf, size_t len, size_t prev_len, const cpulm_http_limits *lim,
                       cpulm_http_msg *m, int is_request) {
    cpulm_http_limits dl = cpulm_http_default_limits();
    if (!lim) lim = &dl;
    int32_t max_headers = lim->max_headers;
    if (max_headers <= 0 || max_headers > CPULM_HTTP_MAX_HEADERS)
        max_headers = CPULM_HTTP_MAX_HEADERS;
    memset(m, 0, sizeof *m);
    m->content_length = -1;
    size_t start = skip_leading_crlf(buf, len);
    size_t from = prev_len > 2 ? prev_len - 2 : 0;
    if (from < start) from = start;
    /* the first line's limit first: any prefix that shows it too long must give the same
     * answer as the whole head (414, not 431 because more bytes came at once) */
    if (first_line_len(buf, start, len) > lim->max_line)
        return fail(m, is_request ? 414 : 502, "first line too long");
    size_t end = find_head_end(buf, len, from);
    if (end == 0) {
        if (len > lim->max_head) return fail(m, 431, "request head too large");
        return CPULM_HTTP_INCOMPLETE;
    }
    if (end > lim->max_head) return fail(m, 431, "request head too large");
    size_t pos = start;
    const char *line;
    size_t n;
    int r = next_line(buf, end, &pos, &line, &n, lim->max_line);
    if (r == -2) return fail(m, is_request ? 414 : 502, "first line too long");
    if (r != 0) return fail(m, 400, "stray CR in start line");
    long e =
        is_request ? parse_request_line(line, n, m, lim->max_line) : parse_status_line(line, n, m);
    if (e != 0) return e;
    for (;;) {
        r = next_line(buf, end, &pos, &line, &n, lim->max_line);
        if (r == -2) return fail(m, 431, "header line too long");
        if (r != 0) return fail(m, 400, "stray CR in header field");
        if (n == 0) break;
        if (parse_field(line, n, m, max_headers) != 0) return CPULM_HTTP_ERROR;
    }
    if (interpret_fields(m, lim, is_request) != 0) return CPULM_HTTP_ERROR;
    m->head_len = end;
    return (long)end;
}

long cpulm_http_parse_request(const char *buf, size_t len, size_t prev_len,
                              const cpulm_http_limits *lim, cpulm_http_msg *m) {
    return parse_head(buf, len, prev_len, lim, m, 1);
}

long cpulm_http_parse_response(const char *buf, size_t len, size_t prev_len,
                               const cpulm_http_limits *lim, cpulm_http_msg *m) {
    return parse_head(buf, len, prev_len, lim, m, 0);
}

/* ---- chunked decoder ----
 * Strict RFC 9112 section 7.1 framing, one byte at a time (so any split of the input
 * decodes alike): chunk-size = 1*HEXDIG, then only chunk extensions without whitespace
 * (";" token ["=" token / quoted-string]), then CRLF; the data's CRLF; trailer fields
 * (token ":" field bytes CRLF, at most CPULM_HTTP_MAX_HEADERS); the final CRLF. A bare
 * CR or LF anywhere is an error: whatever a front end made of it, we would disagree. */

enum {
    CH_SIZE,      /* hex digits */
    CH_EXT_NAME0, /* after ';': the extension's name starts */
    CH_EXT_NAME,
    CH_EXT_VAL0, /* after '=': a token or a quoted string starts */
    CH_EXT_TOKEN,
    CH_EXT_QUOTED,
    CH_EXT_QPAIR, /* after a backslash in a quoted string */
    CH_EXT_QEND,  /* after the closing quote */
    CH_SIZE_LF,   /* the size line's CR came */
    CH_DATA,
    CH_DATA_CR, /* the CRLF after a chunk's data */
    CH_DATA_LF,
    CH_TRAILER_START, /* a trailer field or the final CRLF */
    CH_TRAILER_NAME,
    CH_TRAILER_VALUE,
    CH_TRAILER_LF,
    CH_END_LF,
    CH_DONE
};

void cpulm_http_chunked_init(cpulm_http_chunked *d, const cpulm_http_limits *lim) {
    cpulm_http_limits dl = cpulm_http_default_limits();
    if (!lim) lim = &dl;
    memset(d, 0, sizeof *d);
    d->state = CH_SIZE;
    d->max_body = lim->max_body;
    d->max_line = lim->max_line;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int is_qdtext(unsigned char c) { /* RFC 9110 section 5.6.4, plus obs-text */
    return c == '\t' || c == ' ' || c == 0x21 || (c >= 0x23 && c <= 0x5b) ||
           (c >= 0x5d && c <= 0x7e) || c >= 0x80;
}

/* Where a size line may go after a complete element: another extension, or its end. */
static int ext_next(cpulm_http_chunked *d, char c) {
    if (c == ';')
        d->state = CH_EXT_NAME0;
    else if (c == '\r')
        d->state = CH_SIZE_LF;
    else
        return CPULM_HTTP_ERROR;
    return 1;
}

/* The size line is complete: the data follows, or the trailer section after a last chunk. */
static int size_line_done(cpulm_http_chunked *d) {
    if (d->n_digits == 0) return CPULM_HTTP_ERROR;
    if (d->total + d->remaining > d->max_body) return CPULM_HTTP_TOO_LARGE;
    d->state = d->remaining ? CH_DATA : CH_TRAILER_START;
    d->line_len = 0;
    return 1;
}

static int size_byte(cpulm_http_chunked *d, char c) {
    int h = hexval(c);
    if (h < 0) return d->n_digits ? ext_next(d, c) : CPULM_HTTP_ERROR;
    if (d->remaining >> 56) return CPULM_HTTP_ERROR; /* 16^15 or more: far past any limit */
    d->remaining = d->remaining * 16 + (uint64_t)h;
    d->n_digits = 1;
    return 1;
}

/* One byte of a size line's extensions. */
static int ext_byte(cpulm_http_chunked *d, char c) {
    unsigned char u = (unsigned char)c;
    switch (d->state) {
    case CH_EXT_NAME0:
        if (!is_tchar(u)) return CPULM_HTTP_ERROR;
        d->state = CH_EXT_NAME;
        return 1;
    case CH_EXT_NAME:
        if (is_tchar(u)) return 1;
        if (c != '=') return ext_next(d, c);
        d->state = CH_EXT_VAL0;
        return 1;
    case CH_EXT_VAL0:
        if (c == '"')
            d->state = CH_EXT_QUOTED;
        else if (is_tchar(u))
            d->state = CH_EXT_TOKEN;
        else
            return CPULM_HTTP_ERROR;
        return 1;
    case CH_EXT_TOKEN: return is_tchar(u) ? 1 : ext_next(d, c);
    case CH_EXT_QUOTED:
        if (c == '"')
            d->state = CH_EXT_QEND;
        else if (c == '\\')
            d->state = CH_EXT_QPAIR;
        else if (!is_qdtext(u))
            return CPULM_HTTP_ERROR;
        return 1;
    case CH_EXT_QPAIR:
        if (!(c == '\t' || (u >= 0x20 && u != 0x7f))) return CPULM_HTTP_ERROR;
        d->state = CH_EXT_QUOTED;
        return 1;
    default: /* CH_EXT_QEND */ return ext_next(d, c);
    }
}

/* One byte of the trailer section (fields are checked for syntax, then dropped). */
static int trailer_byte(cpulm_http_chunked *d, char c) {
    unsigned char u = (unsigned char)c;
    switch (d->state) {
    case CH_TRAILER_START:
        if (c == '\r') {
            d->state = CH_END_LF;
        } else {
            if (!is_tchar(u) || ++d->n_trailers > CPULM_HTTP_MAX_HEADERS) return CPULM_HTTP_ERROR;
            d->state = CH_TRAILER_NAME;
        }
        return 1;
    case CH_TRAILER_NAME:
        if (c == ':')
            d->state = CH_TRAILER_VALUE;
        else if (!is_tchar(u))
            return CPULM_HTTP_ERROR;
        return 1;
    case CH_TRAILER_VALUE:
        if (c == '\r')
            d->state = CH_TRAILER_LF;
        else if (!is_field_char(u))
            return CPULM_HTTP_ERROR;
        return 1;
    case CH_TRAILER_LF:
        if (c != '\n') return CPULM_HTTP_ERROR;
        d->state = CH_TRAILER_START;
        d->line_len = 0;
        return 1;
    default: /* CH_END_LF */
        if (c != '\n') return CPULM_HTTP_ERROR;
        d->state = CH_DONE;
        return 1;
    }
}

/* One byte of framing (anything but chunk data). Returns 1, or an error. */
static int chunk_ctl_byte(cpulm_http_chunked *d, char c) {
    if (++d->line_len > d->max_line) return CPULM_HTTP_ERROR;
    switch (d->state) {
    case CH_SIZE: return size_byte(d, c);
    case CH_SIZE_LF: return c == '\n' ? size_line_done(d) : CPULM_HTTP_ERROR;
    case CH_DATA_CR:
        if (c != '\r') return CPULM_HTTP_ERROR;
        d->state = CH_DATA_LF;
        return 1;
    case CH_DATA_LF:
        if (c != '\n') return CPULM_HTTP_ERROR;
        d->state = CH_SIZE;
        d->n_digits = 0;
        d->line_len = 0;
        return 1;
    default: return d->state >= CH_TRAILER_START ? trailer_byte(d, c) : ext_byte(d, c);
    }
}

int cpulm_http_chunked_feed(cpulm_http_chunked *d, char *buf, size_t in_len, size_t *in_pos,
                            size_t *out_len) {
    size_t i = *in_pos, o = *out_len;
    int rc = 0;
    while (i < in_len && d->state != CH_DONE) {
        if (d->state == CH_DATA) {
            size_t k = in_len - i;
            if (k > d->remaining) k = (size_t)d->remaining;
            memmove(buf + o, buf + i, k);
            i += k;
            o += k;
            d->remaining -= k;
            d->total += k;
            if (d->remaining == 0) {
                d->state = CH_DATA_CR;
                d->line_len = 0;
            }
            continue;
        }
        int r = chunk_ctl_byte(d, buf[i]);
        if (r < 0) {
            rc = r;
            break;
        }
        i += (size_t)r;
    }
    *in_pos = i;
    *out_len = o;
    if (rc < 0) return rc;
    return d->state == CH_DONE;
}

const char *cpulm_http_status_text(int status) {
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}
