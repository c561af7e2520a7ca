/* json.h: a small, strict JSON (RFC 8259) reader producing a read-only DOM, and a streaming
 * writer into a cpulm_buf. Used by the server (OpenAI requests/responses), the chat
 * templates (tojson) and the bench output.
 *
 * Reader: input must be UTF-8; any JSON value is accepted at the top level; a leading
 * UTF-8 BOM is skipped (RFC 8259 §8.1 allows it). Rejected with CPULM_ERR_FORMAT and the
 * byte offset: syntax errors, invalid UTF-8, raw control characters in strings, duplicate
 * object keys, numbers that overflow a double, nesting deeper than max_depth, input longer
 * than max_bytes, trailing non-space bytes. \u escapes become UTF-8; an unpaired surrogate
 * escape (valid JSON, but not a character) becomes U+FFFD. \u0000 is kept: strings carry
 * their length and may contain NUL.
 * The whole tree lives in one arena owned by the cpulm_json_doc: nodes and strings are
 * borrowed, valid until cpulm_json_free. A doc is immutable, so threads may share it.
 */
#ifndef CPULM_BASE_JSON_H
#define CPULM_BASE_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

typedef enum cpulm_json_type {
    CPULM_JSON_NULL = 0,
    CPULM_JSON_BOOL,
    CPULM_JSON_NUMBER,
    CPULM_JSON_STRING,
    CPULM_JSON_ARRAY,
    CPULM_JSON_OBJECT,
} cpulm_json_type;

typedef struct cpulm_json cpulm_json;
struct cpulm_json {
    cpulm_json_type type;
    int is_int;      /* NUMBER written as an integer that fits int64 (then u.num.i is exact) */
    const char *key; /* member name (NUL-terminated) inside an object, else NULL */
    size_t key_len;
    union {
        int boolean;
        struct {
            double f; /* always set, also for integers */
            int64_t i;
        } num;
        struct {
            const char *s; /* NUL-terminated UTF-8 */
            size_t len;
        } str;
        struct {
            cpulm_json *items; /* array elements or object members, in input order */
            size_t n;
        } list;
    } u;
};

typedef struct cpulm_json_doc cpulm_json_doc;

typedef struct cpulm_json_limits {
    size_t max_bytes;  /* input size; default 64 MiB */
    int32_t max_depth; /* nesting of arrays/objects; default 128, at most 1000 */
} cpulm_json_limits;

cpulm_json_limits cpulm_json_default_limits(void);

/* Parses text[0..len). lim NULL: defaults. On success *out is owned (cpulm_json_free).
 * On error *out = NULL, *err_off (if non-NULL) = byte offset of the problem, and err says
 * what ("json: byte 12: expected ':' after object key"). Returns CPULM_OK,
 * CPULM_ERR_FORMAT, CPULM_ERR_NOMEM, or CPULM_ERR_TOO_SMALL when len > max_bytes. */
cpulm_status cpulm_json_parse(const char *text, size_t len, const cpulm_json_limits *lim,
                              cpulm_json_doc **out, size_t *err_off, cpulm_error *err);
void cpulm_json_free(cpulm_json_doc *d);                    /* NULL is a no-op */
const cpulm_json *cpulm_json_root(const cpulm_json_doc *d); /* borrowed */

/* ---- DOM access: all accept NULL and wrong types, returning NULL / 0 / the fallback ---- */

/* Member of an object by key (NULL if absent or v is not an object). */
const cpulm_json *cpulm_json_get(const cpulm_json *v, const char *key);
/* Element i of an array or member i of an object. */
const cpulm_json *cpulm_json_at(const cpulm_json *v, size_t i);
/* Elements of an array / members of an object / bytes of a string; 0 otherwise. */
size_t cpulm_json_len(const cpulm_json *v);
/* String contents, or NULL if v is not a string. */
const char *cpulm_json_str(const cpulm_json *v);
/* Typed reads with a fallback for absent or mistyped values. */
double cpulm_json_num(const cpulm_json *v, double fallback);
int cpulm_json_bool(const cpulm_json *v, int fallback);

/* ---- writer ---- */

enum {
    CPULM_JSON_ASCII = 1,  /* escape every non-ASCII character as \uXXXX (Python's default) */
    CPULM_JSON_SPACED = 2, /* ", " and ": " between items (Python json.dumps without indent) */
};

#define CPULM_JSON_WRITER_MAX_DEPTH 256

/* Streaming writer: commas, colons, indentation and nesting are tracked here, so callers
 * just emit values in order. Errors are sticky (see cpulm_json_writer_status); misuse such
 * as a key outside an object is a programming error and asserts. */
typedef struct cpulm_json_writer {
    cpulm_buf *out; /* borrowed */
    int flags;
    int indent; /* > 0: pretty-print with this many spaces, items separated by "," */
    int32_t depth;
    int after_key; /* a key was written; its value comes next */
    cpulm_status status;
    unsigned char n_items[CPULM_JSON_WRITER_MAX_DEPTH]; /* 0: container empty so far, 1: not */
    unsigned char is_obj[CPULM_JSON_WRITER_MAX_DEPTH];
} cpulm_json_writer;

void cpulm_json_writer_init(cpulm_json_writer *w, cpulm_buf *out, int flags, int indent);
void cpulm_json_obj_begin(cpulm_json_writer *w);
void cpulm_json_obj_end(cpulm_json_writer *w);
void cpulm_json_arr_begin(cpulm_json_writer *w);
void cpulm_json_arr_end(cpulm_json_writer *w);
void cpulm_json_key(cpulm_json_writer *w, const char *key);
void cpulm_json_keyn(cpulm_json_writer *w, const char *key, size_t n);
void cpulm_json_write_str(cpulm_json_writer *w, const char *s);
void cpulm_json_write_strn(cpulm_json_writer *w, const char *s, size_t n);
void cpulm_json_write_int(cpulm_json_writer *w, int64_t v);
void cpulm_json_write_double(cpulm_json_writer *w, double v); /* NaN/inf: null */
void cpulm_json_write_bool(cpulm_json_writer *w, int v);
void cpulm_json_write_null(cpulm_json_writer *w);
/* Pre-formatted JSON text, inserted as one value (the caller vouches for it). */
void cpulm_json_write_raw(cpulm_json_writer *w, const char *json, size_t n);
/* A DOM subtree (keys of a member are not written: v is written as a value). */
void cpulm_json_write_value(cpulm_json_writer *w, const cpulm_json *v);
/* An object member in one call: cpulm_json_key, then the value (or the container's begin). */
void cpulm_json_kv_str(cpulm_json_writer *w, const char *key, const char *s);
void cpulm_json_kv_strn(cpulm_json_writer *w, const char *key, const char *s, size_t n);
void cpulm_json_kv_int(cpulm_json_writer *w, const char *key, int64_t v);
void cpulm_json_kv_double(cpulm_json_writer *w, const char *key, double v);
void cpulm_json_kv_bool(cpulm_json_writer *w, const char *key, int v);
void cpulm_json_kv_null(cpulm_json_writer *w, const char *key);
void cpulm_json_kv_obj_begin(cpulm_json_writer *w, const char *key);
void cpulm_json_kv_arr_begin(cpulm_json_writer *w, const char *key);
/* First error: the buffer's (NOMEM / TOO_SMALL), or CPULM_ERR_INVALID_ARG for nesting
 * beyond CPULM_JSON_WRITER_MAX_DEPTH or an unfinished document at the end. */
cpulm_status cpulm_json_writer_status(const cpulm_json_writer *w);

/* ---- helpers shared with other writers (chat templates' tojson) ---- */

/* Appends s[0..n) as a quoted JSON string. Invalid UTF-8 becomes U+FFFD (one per maximal
 * ill-formed subsequence, as Unicode recommends), written raw or as \ufffd with ASCII. */
cpulm_status cpulm_json_quote(cpulm_buf *b, const char *s, size_t n, int flags);

/* Shortest text that reads back as exactly v. JS style: "1", "0.1", "1e+21".
 * Python style (repr): "1.0", "0.1", "1e+16", "inf", "nan". Returns the length (< 32). */
enum { CPULM_JSON_FMT_JS = 0, CPULM_JSON_FMT_PY = 1 };
size_t cpulm_json_fmt_double(double v, int style, char out[32]);

/* Decodes one UTF-8 character from s[0..n) (n >= 1). Returns the bytes consumed (>= 1)
 * and sets *cp, or -(bytes of the maximal ill-formed subpart) with *cp = 0xFFFD. */
int cpulm_json_utf8_next(const unsigned char *s, size_t n, uint32_t *cp);
/* Encodes cp (<= 0x10FFFF, not a surrogate) into out; returns 1-4. */
int cpulm_json_utf8_put(uint32_t cp, char out[4]);

#endif
