/* cmd_pull.c: `cpulm pull OWNER/REPO/FILE`: downloads a model file from Hugging Face (or any
 * server with the same URL layout: {BASE}/{owner}/{repo}/resolve/{revision}/{file}) into a
 * cache directory and prints the final path.
 *
 * The download goes to FILE.part and is renamed only after its SHA-256 matched: against
 * --sha256 when given, else against the X-Linked-Etag / ETag header when that is a 64-digit
 * hex string (Hugging Face sends the file's sha256 there for LFS files). A bad checksum
 * deletes the .part, so a corrupt file is never kept. An existing .part is resumed with an
 * HTTP Range request; a server that ignores Range (200 instead of 206) restarts the file.
 * Needs libcurl at build time; without it the command explains that and exits 1.
 * `cpulm pull --hash FILE...` prints sha256sum-style lines for local files. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "common.h"
#include "options.h"

#if defined(CPULM_HAVE_CURL)
#include <curl/curl.h>
#endif

/* ---- SHA-256 (FIPS 180-4) ---- */

typedef struct sha256 {
    uint32_t h[8];
    uint64_t n_bytes;
    uint8_t buf[64];
    size_t n_buf;
} sha256;

static const uint32_t sha_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int n) {
    return (x >> n) | (x << (32 - n));
}

static void sha256_init(sha256 *s) {
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, h0, sizeof h0);
    s->n_bytes = 0;
    s->n_buf = 0;
}

static void sha256_block(sha256 *s, const uint8_t *p) {
    uint32_t w[64], v[8];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    memcpy(v, s->h, sizeof v);
    for (int i = 0; i < 64; i++) { /* v = a b c d e f g h */
        uint32_t t1 = v[7] + (ror(v[4], 6) ^ ror(v[4], 11) ^ ror(v[4], 25)) +
                      ((v[4] & v[5]) ^ (~v[4] & v[6])) + sha_k[i] + w[i];
        uint32_t t2 = (ror(v[0], 2) ^ ror(v[0], 13) ^ ror(v[0], 22)) +
                      ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
        memmove(v + 1, v, 7 * sizeof v[0]);
        v[4] += t1;
        v[0] = t1 + t2;
    }
    for (int i = 0; i < 8; i++)
        s->h[i] += v[i];
}

static void sha256_update(sha256 *s, const void *data, size_t n) {
    const uint8_t *p = data;
    s->n_bytes += n;
    while (n) {
        if (s->n_buf == 0 && n >= 64) {
            sha256_block(s, p);
            p += 64;
            n -= 64;
            continue;
        }
        size_t k = 64 - s->n_buf < n ? 64 - s->n_buf : n;
        memcpy(s->buf + s->n_buf, p, k);
        s->n_buf += k;
        p += k;
        n -= k;
        if (s->n_buf == 64) {
            sha256_block(s, s->buf);
            s->n_buf = 0;
        }
    }
}

/* Writes 64 lower-case hex digits and a NUL. */
static void sha256_hex(sha256 *s, char out[65]) {
    uint64_t bits = s->n_bytes * 8;
    uint8_t pad[72] = {0x80};
    size_t n_pad = (s->n_buf < 56 ? 56 : 120) - s->n_buf;
    for (int i = 0; i < 8; i++)
        pad[n_pad + (size_t)i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_update(s, pad, n_pad + 8);
    for (int i = 0; i < 32; i++)
        sprintf(out + 2 * i, "%02x", (s->h[i / 4] >> (24 - 8 * (i % 4))) & 255);
}

/* Hashes the first `limit` bytes of f (all of it when limit < 0). 0 on a read error. */
static int sha256_stream(sha256 *s, FILE *f, long long limit) {
    static uint8_t buf[1 << 16];
    long long left = limit;
    size_t k;
    while ((limit < 0 || left > 0) &&
           (k = fread(buf, 1, limit < 0 || left > (long long)sizeof buf ? sizeof buf : (size_t)left,
                      f)) > 0) {
        sha256_update(s, buf, k);
        left -= (long long)k;
    }
    return !ferror(f) && (limit < 0 || left == 0);
}

static int hash_files(int n, char **paths) {
    int rc = 0;
    for (int i = 0; i < n; i++) {
        FILE *f = fopen(paths[i], "rb");
        sha256 s;
        char hex[65];
        sha256_init(&s);
        if (!f || !sha256_stream(&s, f, -1)) {
            fprintf(stderr, "cpulm pull: %s: %s\n", paths[i], strerror(errno));
            rc = 1;
        } else {
            sha256_hex(&s, hex);
            printf("%s  %s\n", hex, paths[i]);
        }
        if (f) fclose(f);
    }
    return rc;
}

static int is_sha256_hex(const char *s) {
    size_t n = 0;
    while (isxdigit((unsigned char)s[n]))
        n++;
    return n == 64 && s[n] == 0;
}

/* ---- arguments and paths ---- */

static void pull_usage(FILE *f) {
    fprintf(f, "usage: cpulm pull OWNER/REPO/FILE [options]     (e.g. ggml-org/models/x.gguf)\n"
               "       cpulm pull --hash FILE...                print SHA-256 of local files\n");
    cli_help(f, "pull");
    fprintf(f, "Sends $HF_TOKEN as a bearer token when set. Prints the file's path on stdout.\n");
}

typedef struct pull_opts {
    const char *spec, *dir, *base, *rev, *sha;
    int force, quiet;
    char repo[512], file[1024]; /* "owner/name", "sub/dir/file.gguf" */
} pull_opts;

/* Splits OWNER/REPO/FILE; rejects empty, "." and ".." components so the cache path stays
 * inside the cache directory. */
static int split_spec(pull_opts *o) {
    const char *s = o->spec, *p = s;
    if (strlen(s) >= sizeof o->file || *s == '/') return 0;
    for (const char *c = s;; c++) {
        if (*c != '/' && *c) continue;
        size_t n = (size_t)(c - p);
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) return 0;
        if (!*c) break;
        p = c + 1;
    }
    const char *slash1 = strchr(s, '/');
    const char *slash2 = slash1 ? strchr(slash1 + 1, '/') : NULL;
    if (!slash2) return 0;
    snprintf(o->repo, sizeof o->repo, "%.*s", (int)(slash2 - s), s);
    snprintf(o->file, sizeof o->file, "%s", slash2 + 1);
    return 1;
}

static const char *env_or(const char *a, const char *b, const char *dflt) {
    const char *v = a ? getenv(a) : NULL;
    if (v && *v) return v;
    v = b ? getenv(b) : NULL;
    return v && *v ? v : dflt;
}

/* One row of the table or the OWNER/REPO/FILE argument: 0 = ok, else the exit code. */
static int pull_opt(cli *c, int id, const cli_val *v, void *ctx) {
    pull_opts *o = ctx;
    switch (id) {
    case CLI_POS:
        if (o->spec) {
            fprintf(stderr, "cpulm pull: unexpected argument '%s'\n", c->argv[c->i]);
            return EXIT_USAGE;
        }
        o->spec = c->argv[c->i];
        break;
    case OPT_DIR: o->dir = v->s; break;
    case OPT_PULL_URL: o->base = v->s; break;
    case OPT_REVISION: o->rev = v->s; break;
    case OPT_SHA256: o->sha = v->s; break;
    case OPT_FORCE: o->force = 1; break;
    case OPT_QUIET: o->quiet = 1; break;
    default: return cli_unhandled(c, v);
    }
    return 0;
}

static int parse_args(int argc, char **argv, pull_opts *o) {
    cli c = {.cmd = "pull", .argc = argc, .argv = argv};
    o->rev = "main";
    int rc = cli_parse(&c, pull_usage, pull_opt, o);
    if (rc) return rc;
    if (o->sha && !is_sha256_hex(o->sha)) {
        fprintf(stderr, "cpulm pull: --sha256 wants 64 hex digits, got '%s'\n", o->sha);
        return EXIT_USAGE;
    }
    if (!o->spec || !split_spec(o)) {
        fprintf(stderr,
                "cpulm pull: want OWNER/REPO/FILE (e.g. ggml-org/models/tinyllamas/"
                "stories260K.gguf), got '%s'\n",
                o->spec ? o->spec : "");
        return EXIT_USAGE;
    }
    o->base =
        o->base ? o->base : env_or("CPULM_HF_ENDPOINT", "HF_ENDPOINT", "https://huggingface.co");
    return 0;
}

/* mkdir -p of the directory part of path. */
static int make_parents(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        int ok = mkdir(path, 0755) == 0 || errno == EEXIST;
        *p = '/';
        if (!ok) return 0;
    }
    return 1;
}

static int cache_path(const pull_opts *o, char *out, size_t cap) {
    const char *dir = o->dir;
    char dflt[2048];
    if (!dir) dir = env_or("CPULM_CACHE", NULL, NULL);
    if (!dir) {
        const char *home = env_or("HOME", NULL, NULL);
        if (!home) {
            fprintf(stderr, "cpulm pull: no cache directory: set --dir, CPULM_CACHE or HOME\n");
            return 0;
        }
        snprintf(dflt, sizeof dflt, "%s/.cache/cpulm", home);
        dir = dflt;
    }
    int n = snprintf(out, cap, "%s/%s/%s", dir, o->repo, o->file);
    if (n < 0 || (size_t)n >= cap - 8) {
        fprintf(stderr, "cpulm pull: cache path too long\n");
        return 0;
    }
    if (!make_parents(out)) {
        fprintf(stderr, "cpulm pull: cannot create the directories of %s: %s\n", out,
                strerror(errno));
        return 0;
    }
    return 1;
}

/* Percent-encodes everything but unreserved characters and '/'. */
static void url_append(char *out, size_t cap, const char *s) {
    size_t n = strlen(out);
    for (; *s && n + 4 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if (isalnum(ch) || strchr("-._~/", ch))
            out[n++] = (char)ch;
        else
            n += (size_t)snprintf(out + n, cap - n, "%%%02X", ch);
    }
    out[n] = 0;
}

static void build_url(const pull_opts *o, char *url, size_t cap) {
    size_t nb = strlen(o->base);
    while (nb && o->base[nb - 1] == '/')
        nb--;
    snprintf(url, cap, "%.*s/", (int)nb, o->base);
    url_append(url, cap, o->repo);
    strncat(url, "/resolve/", cap - strlen(url) - 1);
    url_append(url, cap, o->rev);
    strncat(url, "/", cap - strlen(url) - 1);
    url_append(url, cap, o->file);
}

/* Checks a complete file against the expected hash; prints why not. */
static int verify_file(const char *path, const char *want) {
    FILE *f = fopen(path, "rb");
    sha256 s;
    char hex[65];
    sha256_init(&s);
    int ok = f && sha256_stream(&s, f, -1);
    if (f) fclose(f);
    if (!ok) {
        fprintf(stderr, "cpulm pull: %s: %s\n", path, strerror(errno));
        return 0;
    }
    sha256_hex(&s, hex);
    if (strcasecmp(hex, want) != 0) {
        fprintf(stderr, "cpulm pull: %s: sha256 %s, expected %s\n", path, hex, want);
        return 0;
    }
    return 1;
}

#if defined(CPULM_HAVE_CURL)
/* ---- the transfer (libcurl) ---- */

typedef struct dl {
    const pull_opts *o;
    FILE *f; /* the .part file */
    const char *part;
    sha256 sha;
    int hashing;       /* sha covers every byte of the .part so far */
    int started;       /* the first body byte of the final response arrived */
    long status;       /* of the response being received */
    long long have;    /* bytes in the .part before this request */
    long long written; /* bytes written by this request */
    long long total;   /* whole file size when the server said, else -1 */
    char etag[160], linked_etag[160];
    double t0, last_draw;
    int tty;
} dl;

/* "ETag: W/\"abc\"" -> "abc" */
static void header_value(const char *v, size_t n, char *out, size_t cap) {
    while (n && (*v == ' ' || *v == '\t'))
        v++, n--;
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
        n--;
    if (n >= 2 && v[0] == 'W' && v[1] == '/') v += 2, n -= 2;
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') v++, n -= 2;
    snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), v);
}

static int header_is(const char *line, size_t n, const char *name, const char **val) {
    size_t k = strlen(name);
    if (n <= k || strncasecmp(line, name, k) != 0 || line[k] != ':') return 0;
    *val = line + k + 1;
    return 1;
}

static size_t on_header(char *line, size_t size, size_t nitems, void *user) {
    dl *d = user;
    size_t n = size * nitems;
    const char *v;
    char tmp[160];
    if (n > 5 && !strncmp(line, "HTTP/", 5)) { /* a new response (redirects give several) */
        const char *sp = memchr(line, ' ', n);
        d->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        d->etag[0] = 0;
    } else if (header_is(line, n, "etag", &v)) {
        header_value(v, n - (size_t)(v - line), d->etag, sizeof d->etag);
    } else if (header_is(line, n, "x-linked-etag", &v)) {
        header_value(v, n - (size_t)(v - line), d->linked_etag, sizeof d->linked_etag);
    } else if (header_is(line, n, "content-range", &v)) {
        header_value(v, n - (size_t)(v - line), tmp, sizeof tmp);
        const char *slash = strchr(tmp, '/');
        if (slash && isdigit((unsigned char)slash[1])) d->total = strtoll(slash + 1, NULL, 10);
    } else if (header_is(line, n, "content-length", &v) && d->status == 200) {
        d->total = strtoll(v, NULL, 10);
    }
    return n;
}

/* First body bytes: a 206 continues the .part (hash its bytes first), a 200 replaces it. */
static int start_body(dl *d) {
    d->started = 1;
    if (d->status == 206 && d->have > 0) {
        fseeko(d->f, 0, SEEK_SET);
        if (!sha256_stream(&d->sha, d->f, d->have)) return 0;
        return fseeko(d->f, d->have, SEEK_SET) == 0;
    }
    if (d->have > 0 && !d->o->quiet)
        fprintf(stderr, "cpulm pull: the server ignored the resume request; starting over\n");
    d->have = 0;
    return fflush(d->f) == 0 && ftruncate(fileno(d->f), 0) == 0 && fseeko(d->f, 0, SEEK_SET) == 0;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *user) {
    dl *d = user;
    size_t n = size * nmemb;
    if (d->status != 200 && d->status != 206) return n; /* an error page: not file content */
    if (!d->started && !start_body(d)) return 0;        /* 0 aborts the transfer */
    if (fwrite(data, 1, n, d->f) != n) return 0;
    sha256_update(&d->sha, data, n);
    d->written += (long long)n;
    return n;
}

static void draw_bar(dl *d, int final) {
    double now = cli_now_ms();
    if (d->o->quiet || (!final && (!d->tty || now - d->last_draw < 100))) return;
    d->last_draw = now;
    double mib = 1048576.0, got = (double)(d->have + d->written);
    double secs = (now - d->t0) / 1e3, rate = secs > 0 ? d->written / mib / secs : 0;
    char bar[31] = "                              ";
    if (d->total > 0) {
        double frac = got / (double)d->total;
        for (int i = 0; i < 30 && i < (int)(frac * 30); i++)
            bar[i] = '#';
        fprintf(stderr, "%s[%s] %3.0f%% %.1f/%.1f MiB %.1f MiB/s%s", d->tty ? "\r" : "", bar,
                frac * 100, got / mib, d->total / mib, rate, final || !d->tty ? "\n" : "");
    } else {
        fprintf(stderr, "%s%.1f MiB %.1f MiB/s%s", d->tty ? "\r" : "", got / mib, rate,
                final || !d->tty ? "\n" : "");
    }
}

static int on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow) {
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    draw_bar(user, 0);
    return 0;
}

static CURLcode transfer(dl *d, const char *url) {
    CURL *c = curl_easy_init();
    if (!c) return CURLE_FAILED_INIT;
    char range[64], auth[1024], agent[64];
    struct curl_slist *hdrs = NULL;
    const char *token = env_or("HF_TOKEN", NULL, NULL);
    if (token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        hdrs = curl_slist_append(hdrs, auth);
    }
    snprintf(agent, sizeof agent, "cpulm/%s", cpulm_version());
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_USERAGENT, agent);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L); /* a stalled server: give up after 60 s */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, d);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, d);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, d);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    if (hdrs) curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    if (d->have > 0) {
        snprintf(range, sizeof range, "%lld-", d->have);
        curl_easy_setopt(c, CURLOPT_RANGE, range);
    }
    CURLcode res = curl_easy_perform(c);
    if (res == CURLE_OK && d->status == 206 && d->total < 0) d->total = d->have + d->written;
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    return res;
}

/* The checksum to hold the file to: the user's, else a sha256-shaped (linked) ETag. */
static const char *expected_sha(const dl *d) {
    if (d->o->sha) return d->o->sha;
    if (is_sha256_hex(d->linked_etag)) return d->linked_etag;
    if (is_sha256_hex(d->etag)) return d->etag;
    return NULL;
}

static int finish(dl *d, const char *path) {
    const char *want = expected_sha(d);
    char hex[65];
    if (!want) {
        fprintf(stderr, "cpulm pull: warning: no checksum to verify against (pass --sha256)\n");
    } else if (d->hashing && d->started) {
        sha256_hex(&d->sha, hex);
        if (strcasecmp(hex, want) != 0) {
            fprintf(stderr,
                    "cpulm pull: checksum mismatch for %s: sha256 %s, expected %s; "
                    "removed the download\n",
                    d->part, hex, want);
            unlink(d->part);
            return 1;
        }
    } else if (!verify_file(d->part, want)) { /* resumed from a complete .part (HTTP 416) */
        fprintf(stderr, "cpulm pull: removed %s\n", d->part);
        unlink(d->part);
        return 1;
    }
    if (rename(d->part, path) != 0) {
        fprintf(stderr, "cpulm pull: rename %s -> %s: %s\n", d->part, path, strerror(errno));
        return 1;
    }
    return 0;
}

static int failed(dl *d, CURLcode res, const char *url) {
    if (res == CURLE_OK)
        fprintf(stderr, "cpulm pull: %s: HTTP %ld\n", url, d->status);
    else
        fprintf(stderr, "cpulm pull: %s: %s\n", url, curl_easy_strerror(res));
    struct stat st;
    if (stat(d->part, &st) == 0 && st.st_size == 0)
        unlink(d->part);
    else if (!d->o->quiet)
        fprintf(stderr, "cpulm pull: kept %s; run again to resume\n", d->part);
    return 1;
}

static int download(const pull_opts *o, const char *url, const char *path) {
    char part[4200];
    snprintf(part, sizeof part, "%s.part", path);
    struct stat st;
    dl d = {.o = o, .part = part, .hashing = 1, .total = -1, .tty = isatty(2), .t0 = cli_now_ms()};
    d.have = stat(part, &st) == 0 ? (long long)st.st_size : 0;
    sha256_init(&d.sha);
    d.f = fopen(part, d.have ? "r+b" : "wb");
    if (!d.f) {
        fprintf(stderr, "cpulm pull: %s: %s\n", part, strerror(errno));
        return 1;
    }
    if (!o->quiet) fprintf(stderr, "cpulm pull: %s%s\n", url, d.have ? " (resuming)" : "");
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fclose(d.f);
        fprintf(stderr, "cpulm pull: libcurl failed to initialise\n");
        return 1;
    }
    CURLcode res = transfer(&d, url);
    int io_ok = fclose(d.f) == 0;
    curl_global_cleanup();
    /* a 416 whose Content-Range total is what we have: the .part was already complete */
    int complete = res == CURLE_OK && d.status == 416 && d.have > 0 && d.total == d.have;
    int ok = res == CURLE_OK && (d.status == 200 || d.status == 206);
    if (!ok && !complete) return failed(&d, res, url);
    if (!io_ok) {
        fprintf(stderr, "cpulm pull: %s: %s\n", part, strerror(errno));
        return 1;
    }
    if (!complete) draw_bar(&d, 1);
    return finish(&d, path);
}
#else
static int download(const pull_opts *o, const char *url, const char *path) {
    (void)o;
    (void)path;
    fprintf(stderr,
            "cpulm pull: this cpulm was built without libcurl, so it cannot download %s. "
            "Install libcurl (e.g. libcurl4-openssl-dev) and rebuild, or fetch the file "
            "yourself and pass it with -m.\n",
            url);
    return 1;
}
#endif

int cmd_pull(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--hash")) {
        if (argc > 2) return hash_files(argc - 2, argv + 2);
        fprintf(stderr, "cpulm pull: --hash needs one or more files\n");
        return EXIT_USAGE;
    }
    pull_opts o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    char path[4096], url[4096];
    if (!cache_path(&o, path, sizeof path)) return 1;
    build_url(&o, url, sizeof url);
    if (!o.force && access(path, R_OK) == 0) {
        if (o.sha && !verify_file(path, o.sha)) return 1;
        if (!o.quiet) fprintf(stderr, "cpulm pull: already in the cache\n");
        printf("%s\n", path);
        return 0;
    }
    rc = download(&o, url, path);
    if (rc == 0) printf("%s\n", path);
    return rc;
}
