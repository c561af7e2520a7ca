/* fuzz_chunked.c: fuzz target for the chunked transfer-coding decoder
 * (cpulm_http_chunked_feed, src/server/http.c). libFuzzer entry point; without libFuzzer it
 * links with tests/fuzz/fuzz_main.c, which replays tests/fuzz/corpus/chunked.
 * Input: two parameter bytes (limits and split points), then the encoded stream.
 * Invariants checked beyond "no crash, no sanitizer report":
 *   - an independent whole-buffer reference parser of the RFC 9112 section 7.1 grammar
 *     (written separately below, as a recursive descent rather than a byte state machine)
 *     gives the same verdict (complete / need more / malformed / too large), the same body
 *     and the same number of bytes consumed;
 *   - the decoder fed whole, byte by byte, and in three pieces split anywhere agrees;
 *   - output never overtakes input (decoding in place is safe) and consumed bytes never
 *     exceed the input;
 *   - a decoded body, encoded again in chunks of input-chosen sizes (with an extension and
 *     a trailer), decodes to the same body and consumes exactly the encoding. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct result {
    int rc; /* 1 complete, 0 need more, CPULM_HTTP_ERROR, CPULM_HTTP_TOO_LARGE */
    size_t in, out;
} result;

/* ---- the decoder under test, fed in pieces ending at cuts[0..n_cuts) then len ---- */

static result decode(const char *src, size_t len, const cpulm_http_limits *lim, const size_t *cuts,
                     int n_cuts, char *body) {
    char *buf = malloc(len ? len : 1);
    if (!buf) abort();
    memcpy(buf, src, len);
    cpulm_http_chunked d;
    cpulm_http_chunked_init(&d, lim);
    result r = {0, 0, 0};
    for (int k = 0; k <= n_cuts && r.rc == 0; k++) {
        size_t end = k < n_cuts ? cuts[k] : len;
        if (end < r.in || end > len) continue;
        r.rc = cpulm_http_chunked_feed(&d, buf, end, &r.in, &r.out);
        if (r.in > end || r.out > r.in) abort();
    }
    memcpy(body, buf, r.out);
    free(buf);
    return r;
}

/* ---- the reference: RFC 9112 section 7.1 over the whole buffer ----
 * chunked-body = *chunk last-chunk trailer-section CRLF
 * chunk = chunk-size [chunk-ext] CRLF chunk-data CRLF; chunk-size = 1*HEXDIG
 * chunk-ext = *(";" token ["=" (token / quoted-string)]) (cpulm: no whitespace)
 * trailer-section = *(field-line CRLF) (cpulm: token ":" field bytes; at most 64)
 * Every control line, CRLF included, is at most max_line bytes; a body past max_body is
 * CPULM_HTTP_TOO_LARGE when the size line that announces it ends. */

typedef struct ref {
    const unsigned char *p;
    size_t len, pos, line; /* line: bytes of the current control line so far */
    const cpulm_http_limits *lim;
} ref;

enum { R_OK = 1, R_MORE = 0 };

/* The next control byte, or R_MORE at the end of the input / CPULM_HTTP_ERROR past max_line. */
static int ref_byte(ref *r, int *c) {
    if (r->pos >= r->len) return R_MORE;
    if (++r->line > r->lim->max_line) return CPULM_HTTP_ERROR;
    *c = r->p[r->pos++];
    return R_OK;
}

static int tchar(int c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int hexdig(int c) {
    return (c >= '0' && c <= '9')   ? c - '0'
           : (c >= 'a' && c <= 'f') ? c - 'a' + 10
           : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                    : -1;
}

#define NEXT(r, c)                     \
    do {                               \
        int st_ = ref_byte((r), &(c)); \
        if (st_ != R_OK) return st_;   \
    } while (0)

/* A quoted string after its opening quote; *c gets the byte after the closing one. */
static int ref_quoted(ref *r, int *c) {
    for (;;) {
        int q;
        NEXT(r, q);
        if (q == '"') break;
        if (q == '\\') {
            NEXT(r, q);
            if (!(q == '\t' || (q >= 0x20 && q != 0x7f))) return CPULM_HTTP_ERROR;
        } else if (!(q == '\t' || q == ' ' || q == 0x21 || (q >= 0x23 && q <= 0x5b) ||
                     (q >= 0x5d && q <= 0x7e) || q >= 0x80)) {
            return CPULM_HTTP_ERROR;
        }
    }
    NEXT(r, *c);
    return R_OK;
}

/* Extensions from the byte after the digits (c) to the CRLF, which it consumes. */
static int ref_exts(ref *r, int c) {
    while (c == ';') {
        NEXT(r, c);
        if (!tchar(c)) return CPULM_HTTP_ERROR;
        while (tchar(c))
            NEXT(r, c);
        if (c != '=') continue;
        NEXT(r, c);
        if (c == '"') {
            int st = ref_quoted(r, &c);
            if (st != R_OK) return st;
        } else {
            if (!tchar(c)) return CPULM_HTTP_ERROR;
            while (tchar(c))
                NEXT(r, c);
        }
    }
    if (c != '\r') return CPULM_HTTP_ERROR;
    NEXT(r, c);
    return c == '\n' ? R_OK : CPULM_HTTP_ERROR;
}

static int ref_size_line(ref *r, uint64_t *size) {
    int c, n = 0, significant = 0;
    *size = 0;
    r->line = 0;
    for (;;) {
        NEXT(r, c);
        int h = hexdig(c);
        if (h < 0) break;
        n++;
        if (significant || h) significant++;
        if (significant > 15) return CPULM_HTTP_ERROR; /* 16^15 or more */
        *size = *size * 16 + (uint64_t)h;
    }
    if (n == 0) return CPULM_HTTP_ERROR;
    return ref_exts(r, c);
}

static int ref_trailers(ref *r) {
    for (int n = 0;; n++) {
        int c;
        r->line = 0;
        NEXT(r, c);
        if (c == '\r') {
            NEXT(r, c);
            return c == '\n' ? R_OK : CPULM_HTTP_ERROR;
        }
        if (!tchar(c) || n >= CPULM_HTTP_MAX_HEADERS) return CPULM_HTTP_ERROR;
        while (tchar(c))
            NEXT(r, c);
        if (c != ':') return CPULM_HTTP_ERROR;
        do
            NEXT(r, c);
        while (c == '\t' || (c >= 0x20 && c != 0x7f));
        if (c != '\r') return CPULM_HTTP_ERROR;
        NEXT(r, c);
        if (c != '\n') return CPULM_HTTP_ERROR;
    }
}

static result reference(const char *src, size_t len, const cpulm_http_limits *lim, char *body) {
    ref r = {(const unsigned char *)src, len, 0, 0, lim};
    result res = {0, 0, 0};
    for (;;) {
        uint64_t size;
        res.rc = ref_size_line(&r, &size);
        if (res.rc == R_OK && res.out + size > lim->max_body) res.rc = CPULM_HTTP_TOO_LARGE;
        if (res.rc != R_OK) break;
        if (size == 0) {
            res.rc = ref_trailers(&r);
            break;
        }
        size_t k = len - r.pos < size ? len - r.pos : (size_t)size;
        memcpy(body + res.out, src + r.pos, k);
        res.out += k;
        r.pos += k;
        if (k < size) {
            res.rc = R_MORE; /* the data ends early */
            break;
        }
        int c;
        r.line = 0;
        res.rc = ref_byte(&r, &c);
        if (res.rc == R_OK && c != '\r') res.rc = CPULM_HTTP_ERROR;
        if (res.rc == R_OK) res.rc = ref_byte(&r, &c);
        if (res.rc == R_OK && c != '\n') res.rc = CPULM_HTTP_ERROR;
        if (res.rc != R_OK) break;
    }
    res.in = r.pos;
    return res;
}

/* ---- properties ---- */

static void same(const result *a, const char *ba, const result *b, const char *bb, int exact) {
    if (a->rc != b->rc) abort();
    /* after an error the position of the bad byte is the decoder's business */
    if (a->rc == CPULM_HTTP_ERROR || a->rc == CPULM_HTTP_TOO_LARGE) return;
    if (a->out != b->out || memcmp(ba, bb, a->out) != 0) abort();
    if (exact && a->in != b->in) abort();
}

/* Encodes body[0..n) in chunks of sizes drawn from seed, with an extension and a trailer. */
static size_t reencode(const char *body, size_t n, uint32_t seed, char *out) {
    static const char hex[] = "0123456789abcdef";
    size_t o = 0, i = 0;
    while (i < n) {
        seed = seed * 1103515245u + 12345u;
        size_t k = 1 + (seed >> 16) % 97;
        if (k > n - i) k = n - i;
        char tmp[20];
        int t = 0;
        for (size_t v = k; v; v >>= 4)
            tmp[t++] = hex[v & 15];
        while (t)
            out[o++] = tmp[--t];
        if (seed & 1) {
            memcpy(out + o, ";x=\"q\\\"\"", 8);
            o += 8;
        }
        out[o++] = '\r';
        out[o++] = '\n';
        memcpy(out + o, body + i, k);
        o += k;
        i += k;
        out[o++] = '\r';
        out[o++] = '\n';
    }
    memcpy(out + o, "0;end\r\nX-T: v\r\n\r\n", 17);
    return o + 17;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2 || size > 1 << 16) return 0;
    cpulm_http_limits lim = cpulm_http_default_limits();
    lim.max_line = 8 + data[0] % 64; /* small, so the limits are reached */
    lim.max_body = (data[0] & 0x80) ? 1 << 20 : 1 + (size_t)data[1] * 8;
    const char *src = (const char *)data + 2;
    size_t len = size - 2;
    char *b1 = malloc(len + 1), *b2 = malloc(len + 1), *b3 = malloc(len + 1), *b4 = malloc(len + 1);
    if (!b1 || !b2 || !b3 || !b4) abort();
    result whole = decode(src, len, &lim, NULL, 0, b1);
    result want = reference(src, len, &lim, b2);
    same(&whole, b1, &want, b2, 1);
    size_t cuts[3] = {len ? data[1] % (len + 1) : 0, len / 2, len ? (data[0] * 7u) % (len + 1) : 0};
    if (cuts[0] > cuts[1]) cuts[0] = cuts[1];
    if (cuts[2] < cuts[1]) cuts[2] = cuts[1];
    result split = decode(src, len, &lim, cuts, 3, b3);
    same(&whole, b1, &split, b3, 1);
    size_t *every = malloc((len + 1) * sizeof *every);
    if (!every) abort();
    for (size_t i = 0; i <= len; i++)
        every[i] = i;
    result bytes = decode(src, len, &lim, every, (int)(len < 4096 ? len : 0), b4);
    same(&whole, b1, &bytes, b4, 1);
    free(every);
    if (whole.rc == 1) { /* round trip through another encoding */
        char *enc = malloc(whole.out * 2 + 32 * (whole.out + 1) + 64);
        char *b5 = malloc(whole.out * 2 + 32 * (whole.out + 1) + 64);
        if (!enc || !b5) abort();
        size_t n = reencode(b1, whole.out, (uint32_t)data[0] << 8 | data[1], enc);
        lim.max_line = 64;
        result again = decode(enc, n, &lim, NULL, 0, b5);
        if (again.rc != 1 || again.in != n || again.out != whole.out ||
            memcmp(b5, b1, whole.out) != 0)
            abort();
        free(enc);
        free(b5);
    }
    free(b1);
    free(b2);
    free(b3);
    free(b4);
    return 0;
}
