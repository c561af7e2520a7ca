/* gguf.c: GGUF v2/v3 reader over a mapped buffer, plus typed getters and array helpers.
 *
 * Every read goes through a bounds-checked cursor; every count, length, offset and size is
 * checked against the bytes left BEFORE it is used, with overflow-safe arithmetic, so a
 * hostile file yields CPULM_ERR_FORMAT / CPULM_ERR_UNSUPPORTED and a one-line message,
 * never a crash, hang or giant allocation. Counts are capped by what the remaining bytes
 * could hold at the minimal encoding, so allocations stay within a small multiple of the
 * file size. Parsing takes O(n log n) in the file size whatever the input (duplicate names
 * are found by sorting, which crafted names cannot slow down).
 * Values are decoded little-endian byte by byte, so the reader is host-endian agnostic.
 * This module never touches tensor data beyond computing its range. The writer lives in
 * gguf_write.c.
 */
#include "gguf.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "quant.h"

#define MAX_ARRAY_DEPTH       8
#define MAX_TENSOR_NAME       63 /* llama.cpp's GGML_MAX_NAME is 64 incl. the NUL */
#define DEFAULT_ALIGNMENT     32
#define MIN_KV_BYTES          13 /* u64 key length + u32 type + a 1-byte value */
#define MIN_TENSOR_INFO_BYTES 32 /* u64 name length + u32 n_dims + u64 ne + u32 type + u64 off */
#define NO_INDEX              UINT64_MAX

#define TRY(expr)                        \
    do {                                 \
        cpulm_status st_ = (expr);       \
        if (st_ != CPULM_OK) return st_; \
    } while (0)

/* ---- little-endian decoding ---- */

static uint16_t le16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint64_t le64(const uint8_t *p) {
    return (uint64_t)le32(p) | ((uint64_t)le32(p + 4) << 32);
}

/* ---- cursor ---- */

typedef struct cursor {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos; /* invariant: pos <= size */
    cpulm_error *err;
    /* What is being read, for error messages; formatted only when something fails. */
    const char *what; /* "key", "value of key", "tensor", ... */
    cpulm_str name;   /* key or tensor name once known (len 0 = unknown) */
    uint64_t index;   /* item number, or NO_INDEX */
} cursor;

static void set_ctx(cursor *c, const char *what, cpulm_str name, uint64_t index) {
    c->what = what;
    c->name = name;
    c->index = index;
}

/* Copies up to 64 bytes of s into out, replacing anything but printable ASCII by '?', so a
 * hostile name cannot smuggle control characters into a log line. */
static void printable(cpulm_str s, char *out, size_t cap) {
    size_t n = 0, max = cap > 4 ? cap - 4 : 0;
    for (uint64_t i = 0; i < s.len && n < max && n < 64; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        out[n++] = (ch >= 0x20 && ch < 0x7f && ch != '\'') ? (char)ch : '?';
    }
    if (n < s.len && n + 3 < cap) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    if (cap) out[n < cap ? n : cap - 1] = 0;
}

static void describe(const cursor *c, char *out, size_t cap) {
    char nm[80];
    if (c->name.len) {
        printable(c->name, nm, sizeof nm);
        snprintf(out, cap, "%s '%s'", c->what, nm);
    } else if (c->index != NO_INDEX) {
        snprintf(out, cap, "%s #%llu", c->what, (unsigned long long)c->index);
    } else {
        snprintf(out, cap, "%s", c->what);
    }
}

/* Records "<what is being read>: <message>" and returns code. */
static cpulm_status fail(cursor *c, cpulm_status code, const char *fmt, ...) CPULM_PRINTF(3, 4);
static cpulm_status fail(cursor *c, cpulm_status code, const char *fmt, ...) {
    char where[128], msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    describe(c, where, sizeof where);
    return cpulm_errf(c->err, code, "%s: %s", where, msg);
}

static cpulm_status truncated(cursor *c, uint64_t need) {
    char where[128];
    describe(c, where, sizeof where);
    return cpulm_errf(c->err, CPULM_ERR_FORMAT,
                      "truncated at byte %llu while reading %s (need %llu bytes, %llu left)",
                      (unsigned long long)c->pos, where, (unsigned long long)need,
                      (unsigned long long)(c->size - c->pos));
}

static uint64_t left(const cursor *c) {
    return c->size - c->pos;
}

static cpulm_status read_bytes(cursor *c, uint64_t n, const uint8_t **out) {
    if (n > left(c)) return truncated(c, n);
    *out = c->base + c->pos;
    c->pos += n;
    return CPULM_OK;
}

static cpulm_status read_u32(cursor *c, uint32_t *out) {
    const uint8_t *p = NULL;
    TRY(read_bytes(c, 4, &p));
    *out = le32(p);
    return CPULM_OK;
}

static cpulm_status read_u64(cursor *c, uint64_t *out) {
    const uint8_t *p = NULL;
    TRY(read_bytes(c, 8, &p));
    *out = le64(p);
    return CPULM_OK;
}

/* A string is a u64 byte length followed by the bytes (no NUL). */
static cpulm_status read_str(cursor *c, cpulm_str *out) {
    uint64_t len;
    const uint8_t *p = NULL;
    TRY(read_u64(c, &len));
    if (len > left(c)) {
        c->pos -= 8; /* report the position of the length field */
        return fail(c, CPULM_ERR_FORMAT,
                    "string length %llu at byte %llu exceeds the %llu bytes left (truncated or "
                    "corrupt)",
                    (unsigned long long)len, (unsigned long long)c->pos,
                    (unsigned long long)(left(c) - 8));
    }
    TRY(read_bytes(c, len, &p));
    out->ptr = (const char *)p;
    out->len = len;
    return CPULM_OK;
}

/* ---- value types ---- */

uint64_t cpulm_gguf_type_size(cpulm_gguf_type t) {
    switch (t) {
    case CPULM_GGUF_U8:
    case CPULM_GGUF_I8:
    case CPULM_GGUF_BOOL: return 1;
    case CPULM_GGUF_U16:
    case CPULM_GGUF_I16: return 2;
    case CPULM_GGUF_U32:
    case CPULM_GGUF_I32:
    case CPULM_GGUF_F32: return 4;
    case CPULM_GGUF_U64:
    case CPULM_GGUF_I64:
    case CPULM_GGUF_F64: return 8;
    default: return 0;
    }
}

const char *cpulm_gguf_type_name(cpulm_gguf_type t) {
    static const char *const names[CPULM_GGUF_TYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64"};
    return (unsigned)t < CPULM_GGUF_TYPE_COUNT ? names[t] : "?";
}

static bool is_unsigned(cpulm_gguf_type t) {
    return t == CPULM_GGUF_U8 || t == CPULM_GGUF_U16 || t == CPULM_GGUF_U32 || t == CPULM_GGUF_U64;
}

static bool is_signed(cpulm_gguf_type t) {
    return t == CPULM_GGUF_I8 || t == CPULM_GGUF_I16 || t == CPULM_GGUF_I32 || t == CPULM_GGUF_I64;
}

static bool is_float(cpulm_gguf_type t) {
    return t == CPULM_GGUF_F32 || t == CPULM_GGUF_F64;
}

/* Decodes one fixed-size value of type t at p into kv->v (u for unsigned and bool, i for
 * signed, f for floats). */
static void decode_scalar(cpulm_gguf_type t, const uint8_t *p, cpulm_gguf_kv *kv) {
    switch (t) {
    case CPULM_GGUF_U8: kv->v.u = p[0]; break;
    case CPULM_GGUF_I8: kv->v.i = (int8_t)p[0]; break;
    case CPULM_GGUF_BOOL: kv->v.u = p[0] != 0; break;
    case CPULM_GGUF_U16: kv->v.u = le16(p); break;
    case CPULM_GGUF_I16: kv->v.i = (int16_t)le16(p); break;
    case CPULM_GGUF_U32: kv->v.u = le32(p); break;
    case CPULM_GGUF_I32: kv->v.i = (int32_t)le32(p); break;
    case CPULM_GGUF_U64: kv->v.u = le64(p); break;
    case CPULM_GGUF_I64: kv->v.i = (int64_t)le64(p); break;
    case CPULM_GGUF_F32: {
        uint32_t bits = le32(p);
        float f;
        memcpy(&f, &bits, 4);
        kv->v.f = f;
        break;
    }
    case CPULM_GGUF_F64: {
        uint64_t bits = le64(p);
        memcpy(&kv->v.f, &bits, 8);
        break;
    }
    default: CPULM_ASSERT(!"decode_scalar: not a fixed-size type");
    }
}

/* ---- arrays ---- */

static cpulm_status read_array(cursor *c, cpulm_gguf_arr *arr, int depth);

/* Skips n elements of type et, checking each; depth is the nesting level of their array. */
static cpulm_status skip_elements(cursor *c, cpulm_gguf_type et, uint64_t n, int depth) {
    uint64_t esz = cpulm_gguf_type_size(et);
    uint64_t min = esz ? esz : (et == CPULM_GGUF_STRING ? 8 : 12); /* str: u64; arr: u32+u64 */
    if (n > left(c) / min)
        return fail(c, CPULM_ERR_FORMAT,
                    "array of %llu %s at byte %llu cannot fit in the %llu bytes left (truncated "
                    "or corrupt)",
                    (unsigned long long)n, cpulm_gguf_type_name(et), (unsigned long long)c->pos,
                    (unsigned long long)left(c));
    if (esz) {
        c->pos += n * esz;
        return CPULM_OK;
    }
    for (uint64_t i = 0; i < n; i++) {
        if (et == CPULM_GGUF_STRING) {
            cpulm_str s;
            TRY(read_str(c, &s));
        } else {
            cpulm_gguf_arr sub;
            TRY(read_array(c, &sub, depth + 1));
        }
    }
    return CPULM_OK;
}

/* Reads an array header (u32 element type, u64 count) and validates its elements. */
static cpulm_status read_array(cursor *c, cpulm_gguf_arr *arr, int depth) {
    uint32_t et;
    uint64_t n;
    if (depth > MAX_ARRAY_DEPTH)
        return fail(c, CPULM_ERR_FORMAT, "arrays nested deeper than %d levels at byte %llu",
                    MAX_ARRAY_DEPTH, (unsigned long long)c->pos);
    TRY(read_u32(c, &et));
    if (et >= CPULM_GGUF_TYPE_COUNT)
        return fail(c, CPULM_ERR_FORMAT, "invalid array element type %u at byte %llu", et,
                    (unsigned long long)(c->pos - 4));
    TRY(read_u64(c, &n));
    uint64_t start = c->pos;
    TRY(skip_elements(c, (cpulm_gguf_type)et, n, depth));
    arr->type = (cpulm_gguf_type)et;
    arr->n = n;
    arr->data = c->base + start;
    arr->n_bytes = c->pos - start;
    return CPULM_OK;
}

/* ---- header ---- */

static cpulm_status check_version(cursor *c, uint32_t version) {
    if (version == 2 || version == 3) return CPULM_OK;
    uint32_t swapped =
        (version >> 24) | ((version >> 8) & 0xff00) | ((version << 8) & 0xff0000) | (version << 24);
    if (swapped >= 1 && swapped <= 3)
        return fail(c, CPULM_ERR_UNSUPPORTED, "big-endian gguf files are not supported");
    return fail(c, CPULM_ERR_UNSUPPORTED,
                "gguf version %u is not supported (only versions 2 and 3)", version);
}

static cpulm_status parse_header(cursor *c, cpulm_gguf *g) {
    const uint8_t *magic;
    set_ctx(c, "header", (cpulm_str){0}, NO_INDEX);
    TRY(read_bytes(c, 4, &magic));
    if (memcmp(magic, "GGUF", 4) != 0)
        return fail(c, CPULM_ERR_FORMAT, "not a gguf file (bad magic)");
    TRY(read_u32(c, &g->version));
    TRY(check_version(c, g->version));
    TRY(read_u64(c, &g->n_tensors));
    TRY(read_u64(c, &g->n_kv));
    /* Caps: no count may promise more items than the remaining bytes could encode. */
    uint64_t rest = left(c);
    if (g->n_kv > rest / MIN_KV_BYTES || g->n_tensors > rest / MIN_TENSOR_INFO_BYTES ||
        g->n_kv * MIN_KV_BYTES > rest - g->n_tensors * MIN_TENSOR_INFO_BYTES)
        return fail(c, CPULM_ERR_FORMAT,
                    "%llu keys and %llu tensors cannot fit in the %llu bytes after the header "
                    "(truncated or corrupt)",
                    (unsigned long long)g->n_kv, (unsigned long long)g->n_tensors,
                    (unsigned long long)rest);
    return CPULM_OK;
}

/* ---- duplicate detection ---- */

static bool str_same(cpulm_str a, cpulm_str b) {
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

typedef struct named {
    cpulm_str s;
    uint64_t idx; /* position in the file; breaks ties so the order is total */
} named;

static int named_cmp(const named *a, const named *b) {
    uint64_t n = a->s.len < b->s.len ? a->s.len : b->s.len;
    int c = n ? memcmp(a->s.ptr, b->s.ptr, n) : 0;
    if (c) return c;
    if (a->s.len != b->s.len) return a->s.len < b->s.len ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static void sift_down(named *a, uint64_t root, uint64_t n) {
    for (;;) {
        uint64_t child = 2 * root + 1;
        if (child >= n) return;
        if (child + 1 < n && named_cmp(&a[child], &a[child + 1]) < 0) child++;
        if (named_cmp(&a[root], &a[child]) >= 0) return;
        named tmp = a[root];
        a[root] = a[child];
        a[child] = tmp;
        root = child;
    }
}

/* Heapsort: O(n log n) whatever the names are. (A hash set could be flooded with crafted
 * collisions, and qsort's worst case depends on the libc.) */
static void sort_named(named *a, uint64_t n) {
    for (uint64_t i = n / 2; i-- > 0;)
        sift_down(a, i, n);
    for (uint64_t end = n; end-- > 1;) {
        named tmp = a[0];
        a[0] = a[end];
        a[end] = tmp;
        sift_down(a, 0, end);
    }
}

/* Names are the cpulm_str at byte name_off of each stride-byte item. Returns the index of the
 * first item whose name repeats an earlier one, -1 if all differ, -2 when out of memory. */
static int64_t find_duplicate(const void *items, size_t stride, size_t name_off, uint64_t n) {
    if (n < 2) return -1;
    named *a = malloc((size_t)n * sizeof *a);
    if (!a) return -2;
    for (uint64_t i = 0; i < n; i++) {
        memcpy(&a[i].s, (const char *)items + i * stride + name_off, sizeof a[i].s);
        a[i].idx = i;
    }
    sort_named(a, n);
    /* equal names sit together, ordered by position: the earliest repeat is the smallest
     * index that has an equal predecessor */
    int64_t dup = -1;
    for (uint64_t i = 1; i < n; i++)
        if (str_same(a[i].s, a[i - 1].s) && (dup < 0 || a[i].idx < (uint64_t)dup))
            dup = (int64_t)a[i].idx;
    free(a);
    return dup;
}

/* ---- key/value section ---- */

static cpulm_status check_name(cursor *c, cpulm_str s) {
    if (memchr(s.ptr, 0, s.len)) return fail(c, CPULM_ERR_FORMAT, "name contains a NUL byte");
    return CPULM_OK;
}

static cpulm_status read_value(cursor *c, cpulm_gguf_kv *kv) {
    uint64_t esz = cpulm_gguf_type_size(kv->type);
    if (esz) {
        const uint8_t *p = NULL;
        TRY(read_bytes(c, esz, &p));
        decode_scalar(kv->type, p, kv);
        return CPULM_OK;
    }
    if (kv->type == CPULM_GGUF_STRING) return read_str(c, &kv->v.s);
    return read_array(c, &kv->v.arr, 1);
}

static cpulm_status parse_kv(cursor *c, cpulm_gguf_kv *kv, uint64_t i) {
    uint32_t type;
    set_ctx(c, "key", (cpulm_str){0}, i);
    TRY(read_str(c, &kv->key));
    TRY(check_name(c, kv->key));
    set_ctx(c, "type of key", kv->key, i);
    TRY(read_u32(c, &type));
    if (type >= CPULM_GGUF_TYPE_COUNT)
        return fail(c, CPULM_ERR_FORMAT, "invalid value type %u at byte %llu", type,
                    (unsigned long long)(c->pos - 4));
    kv->type = (cpulm_gguf_type)type;
    set_ctx(c, "value of key", kv->key, i);
    return read_value(c, kv);
}

/* general.alignment must be a u32 power of two; absent means 32. */
static cpulm_status read_alignment(cursor *c, cpulm_gguf *g) {
    const cpulm_gguf_kv *kv = cpulm_gguf_find(g, "general.alignment");
    g->alignment = DEFAULT_ALIGNMENT;
    if (!kv) return CPULM_OK;
    set_ctx(c, "key", kv->key, NO_INDEX);
    if (kv->type != CPULM_GGUF_U32)
        return fail(c, CPULM_ERR_FORMAT, "must be a u32, found %s", cpulm_gguf_type_name(kv->type));
    if (kv->v.u == 0 || (kv->v.u & (kv->v.u - 1)) != 0)
        return fail(c, CPULM_ERR_FORMAT, "%llu is not a power of two", (unsigned long long)kv->v.u);
    g->alignment = kv->v.u;
    return CPULM_OK;
}

static cpulm_status parse_kvs(cursor *c, cpulm_gguf *g) {
    if (g->n_kv) {
        g->kv = calloc((size_t)g->n_kv, sizeof *g->kv);
        if (!g->kv)
            return cpulm_errf(c->err, CPULM_ERR_NOMEM, "out of memory for %llu keys",
                              (unsigned long long)g->n_kv);
    }
    for (uint64_t i = 0; i < g->n_kv; i++)
        TRY(parse_kv(c, &g->kv[i], i));
    int64_t dup = find_duplicate(g->kv, sizeof *g->kv, offsetof(cpulm_gguf_kv, key), g->n_kv);
    if (dup == -2) return cpulm_errf(c->err, CPULM_ERR_NOMEM, "out of memory");
    if (dup >= 0) {
        set_ctx(c, "key", g->kv[dup].key, (uint64_t)dup);
        return fail(c, CPULM_ERR_FORMAT, "duplicate key (entry #%lld)", (long long)dup);
    }
    return read_alignment(c, g);
}

/* ---- tensor infos ---- */

cpulm_status cpulm_gguf_tensor_nbytes(uint32_t type, int n_dims, const int64_t *ne,
                                      uint64_t *n_bytes, cpulm_error *err) {
    const cpulm_dtype_traits *tr = cpulm_dtype_traits_get(type);
    if (!tr) return cpulm_errf(err, CPULM_ERR_UNSUPPORTED, "unknown type %u", type);
    if (n_dims < 1 || n_dims > 4)
        return cpulm_errf(err, CPULM_ERR_FORMAT, "n_dims %d is not in 1..4", n_dims);
    for (int d = 0; d < n_dims; d++)
        if (ne[d] < 0)
            return cpulm_errf(err, CPULM_ERR_FORMAT, "ne[%d] = %lld is negative", d,
                              (long long)ne[d]);
    if (ne[0] % tr->block != 0)
        return cpulm_errf(err, CPULM_ERR_FORMAT,
                          "ne[0] = %lld is not a multiple of the %s block size %d",
                          (long long)ne[0], tr->name, tr->block);
    /* ggml counts elements in int64: the element count and the byte count must both fit. */
    uint64_t n_el = (uint64_t)ne[0], n_blocks = (uint64_t)(ne[0] / tr->block);
    if (n_blocks > (uint64_t)INT64_MAX / (uint64_t)tr->type_size)
        return cpulm_errf(err, CPULM_ERR_FORMAT, "shape overflows: ne[0] = %lld", (long long)ne[0]);
    uint64_t bytes = n_blocks * (uint64_t)tr->type_size;
    for (int d = 1; d < n_dims; d++) {
        uint64_t m = (uint64_t)ne[d];
        if (m && (n_el > (uint64_t)INT64_MAX / m || bytes > (uint64_t)INT64_MAX / m))
            return cpulm_errf(err, CPULM_ERR_FORMAT, "shape overflows: ne[%d] = %lld", d,
                              (long long)ne[d]);
        n_el *= m;
        bytes *= m;
    }
    *n_bytes = bytes;
    return CPULM_OK;
}

static cpulm_status check_tensor_shape(cursor *c, cpulm_gguf_tensor *t) {
    cpulm_error e = {0};
    cpulm_status st = cpulm_gguf_tensor_nbytes(t->type, t->n_dims, t->ne, &t->n_bytes, &e);
    if (st != CPULM_OK) return fail(c, st, "%s", e.msg);
    return CPULM_OK;
}

static cpulm_status parse_tensor_info(cursor *c, cpulm_gguf_tensor *t, uint64_t i) {
    uint32_t n_dims;
    set_ctx(c, "name of tensor info", (cpulm_str){0}, i);
    TRY(read_str(c, &t->name));
    TRY(check_name(c, t->name));
    set_ctx(c, "tensor", t->name, i);
    if (t->name.len > MAX_TENSOR_NAME)
        return fail(c, CPULM_ERR_FORMAT, "name is %llu bytes long (the limit is %d)",
                    (unsigned long long)t->name.len, MAX_TENSOR_NAME);
    TRY(read_u32(c, &n_dims));
    if (n_dims < 1 || n_dims > 4)
        return fail(c, CPULM_ERR_FORMAT, "n_dims %u is not in 1..4", n_dims);
    t->n_dims = (int32_t)n_dims;
    for (int d = 0; d < 4; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t v;
        TRY(read_u64(c, &v));
        t->ne[d] = (int64_t)v; /* > INT64_MAX becomes negative and is rejected below */
    }
    TRY(read_u32(c, &t->type));
    TRY(read_u64(c, &t->offset));
    return check_tensor_shape(c, t);
}

static cpulm_status parse_tensor_infos(cursor *c, cpulm_gguf *g) {
    if (g->n_tensors) {
        g->tensors = calloc((size_t)g->n_tensors, sizeof *g->tensors);
        if (!g->tensors)
            return cpulm_errf(c->err, CPULM_ERR_NOMEM, "out of memory for %llu tensors",
                              (unsigned long long)g->n_tensors);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++)
        TRY(parse_tensor_info(c, &g->tensors[i], i));
    int64_t dup = find_duplicate(g->tensors, sizeof *g->tensors, offsetof(cpulm_gguf_tensor, name),
                                 g->n_tensors);
    if (dup == -2) return cpulm_errf(c->err, CPULM_ERR_NOMEM, "out of memory");
    if (dup >= 0) {
        set_ctx(c, "tensor", g->tensors[dup].name, (uint64_t)dup);
        return fail(c, CPULM_ERR_FORMAT, "duplicate tensor name (entry #%lld)", (long long)dup);
    }
    return CPULM_OK;
}

/* ---- data section ---- */

static cpulm_status check_tensor_range(cursor *c, const cpulm_gguf *g, cpulm_gguf_tensor *t,
                                       uint64_t i) {
    set_ctx(c, "tensor", t->name, i);
    if (t->offset % g->alignment != 0)
        return fail(c, CPULM_ERR_FORMAT, "data offset %llu is not a multiple of the alignment %llu",
                    (unsigned long long)t->offset, (unsigned long long)g->alignment);
    uint64_t avail = g->size - g->data_offset;
    if (t->offset > avail)
        return fail(c, CPULM_ERR_FORMAT,
                    "data offset %llu lies past the end of the file (%llu bytes; truncated or "
                    "corrupt)",
                    (unsigned long long)t->offset, (unsigned long long)g->size);
    if (t->n_bytes > avail - t->offset)
        return fail(c, CPULM_ERR_FORMAT,
                    "%llu bytes of data at file byte %llu run past the end of the file (%llu "
                    "bytes; truncated or corrupt)",
                    (unsigned long long)t->n_bytes,
                    (unsigned long long)(g->data_offset + t->offset), (unsigned long long)g->size);
    t->data = g->base + g->data_offset + t->offset;
    return CPULM_OK;
}

/* Tensor data starts at the first multiple of the alignment after the tensor infos. A file
 * without tensors may end before that point (vocab-only files do). */
static cpulm_status layout_data(cursor *c, cpulm_gguf *g) {
    uint64_t pad = (g->alignment - c->pos % g->alignment) % g->alignment;
    if (g->n_tensors == 0) {
        g->data_offset = pad <= left(c) ? c->pos + pad : c->size;
        return CPULM_OK;
    }
    set_ctx(c, "tensor data", (cpulm_str){0}, NO_INDEX);
    if (pad > left(c))
        return fail(c, CPULM_ERR_FORMAT,
                    "truncated: the data section would start at byte %llu but the file ends at "
                    "byte %llu",
                    (unsigned long long)c->pos + pad, (unsigned long long)c->size);
    g->data_offset = c->pos + pad;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        TRY(check_tensor_range(c, g, &g->tensors[i], i));
    return CPULM_OK;
}

/* ---- entry points ---- */

cpulm_status cpulm_gguf_parse(cpulm_gguf *g, const void *buf, uint64_t size, cpulm_error *err) {
    memset(g, 0, sizeof *g);
    g->base = buf;
    g->size = size;
    if (!buf) size = 0; /* a zero-length mapping is NULL; it fails as truncated */
    cursor c = {.base = buf, .size = size, .pos = 0, .err = err};
    cpulm_status st = parse_header(&c, g);
    if (st == CPULM_OK) st = parse_kvs(&c, g);
    if (st == CPULM_OK) st = parse_tensor_infos(&c, g);
    if (st == CPULM_OK) st = layout_data(&c, g);
    if (st != CPULM_OK) cpulm_gguf_release(g);
    return st;
}

void cpulm_gguf_release(cpulm_gguf *g) {
    free(g->kv);
    free(g->tensors);
    memset(g, 0, sizeof *g);
}

bool cpulm_str_eq(cpulm_str s, const char *z) {
    size_t n = strlen(z);
    return s.len == n && (n == 0 || memcmp(s.ptr, z, n) == 0);
}

const cpulm_gguf_kv *cpulm_gguf_find(const cpulm_gguf *g, const char *key) {
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (cpulm_str_eq(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

int64_t cpulm_gguf_find_tensor(const cpulm_gguf *g, const char *name) {
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (cpulm_str_eq(g->tensors[i].name, name)) return (int64_t)i;
    return -1;
}

/* ---- typed getters ---- */

static void kv_type_desc(const cpulm_gguf_kv *kv, char *out, size_t cap) {
    if (kv->type == CPULM_GGUF_ARRAY)
        snprintf(out, cap, "array of %s", cpulm_gguf_type_name(kv->v.arr.type));
    else
        snprintf(out, cap, "%s", cpulm_gguf_type_name(kv->type));
}

static cpulm_status wrong_type(const cpulm_gguf_kv *kv, const char *want, cpulm_error *err) {
    char nm[80], have[32];
    printable(kv->key, nm, sizeof nm);
    kv_type_desc(kv, have, sizeof have);
    return cpulm_errf(err, CPULM_ERR_FORMAT, "key '%s': expected %s, found %s", nm, want, have);
}

cpulm_status cpulm_gguf_get_i64(const cpulm_gguf *g, const char *key, int64_t *out,
                                cpulm_error *err) {
    const cpulm_gguf_kv *kv = cpulm_gguf_find(g, key);
    if (!kv) return CPULM_ERR_NOT_FOUND;
    if (is_signed(kv->type)) {
        *out = kv->v.i;
        return CPULM_OK;
    }
    if (!is_unsigned(kv->type)) return wrong_type(kv, "an integer", err);
    if (kv->v.u > (uint64_t)INT64_MAX)
        return cpulm_errf(err, CPULM_ERR_FORMAT, "key '%s': value %llu does not fit in i64", key,
                          (unsigned long long)kv->v.u);
    *out = (int64_t)kv->v.u;
    return CPULM_OK;
}

cpulm_status cpulm_gguf_get_f64(const cpulm_gguf *g, const char *key, double *out,
                                cpulm_error *err) {
    const cpulm_gguf_kv *kv = cpulm_gguf_find(g, key);
    if (!kv) return CPULM_ERR_NOT_FOUND;
    if (is_float(kv->type))
        *out = kv->v.f;
    else if (is_signed(kv->type))
        *out = (double)kv->v.i;
    else if (is_unsigned(kv->type))
        *out = (double)kv->v.u;
    else
        return wrong_type(kv, "a number", err);
    return CPULM_OK;
}

cpulm_status cpulm_gguf_get_bool(const cpulm_gguf *g, const char *key, bool *out,
                                 cpulm_error *err) {
    const cpulm_gguf_kv *kv = cpulm_gguf_find(g, key);
    if (!kv) return CPULM_ERR_NOT_FOUND;
    if (kv->type != CPULM_GGUF_BOOL) return wrong_type(kv, "bool", err);
    *out = kv->v.u != 0;
    return CPULM_OK;
}

cpulm_status cpulm_gguf_get_str(const cpulm_gguf *g, const char *key, cpulm_str *out,
                                cpulm_error *err) {
    const cpulm_gguf_kv *kv = cpulm_gguf_find(g, key);
    if (!kv) return CPULM_ERR_NOT_FOUND;
    if (kv->type != CPULM_GGUF_STRING) return wrong_type(kv, "str", err);
    *out = kv->v.s;
    return CPULM_OK;
}

cpulm_status cpulm_gguf_get_arr(const cpulm_gguf *g, const char *key, cpulm_gguf_type elem,
                                cpulm_gguf_arr *out, cpulm_error *err) {
    const cpulm_gguf_kv *kv = cpulm_gguf_find(g, key);
    if (!kv) return CPULM_ERR_NOT_FOUND;
    if (kv->type != CPULM_GGUF_ARRAY || kv->v.arr.type != elem) {
        char want[32];
        snprintf(want, sizeof want, "array of %s", cpulm_gguf_type_name(elem));
        return wrong_type(kv, want, err);
    }
    *out = kv->v.arr;
    return CPULM_OK;
}

/* ---- array element access ---- */

/* Saturating float -> int64 (NaN -> 0): file data must not reach an undefined cast. */
static int64_t f64_to_i64(double f) {
    if (!(f == f)) return 0;
    if (f >= 9223372036854775807.0) return INT64_MAX;
    if (f <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)f;
}

/* Element i decoded into kv->v; false for non-fixed-size element types. */
static bool arr_elem(const cpulm_gguf_arr *a, uint64_t i, cpulm_gguf_kv *kv) {
    CPULM_ASSERT(i < a->n);
    uint64_t esz = cpulm_gguf_type_size(a->type);
    if (!esz) return false;
    decode_scalar(a->type, a->data + i * esz, kv);
    return true;
}

int64_t cpulm_gguf_arr_i64(const cpulm_gguf_arr *a, uint64_t i) {
    cpulm_gguf_kv kv;
    if (!arr_elem(a, i, &kv)) return 0;
    if (is_signed(a->type)) return kv.v.i;
    if (is_float(a->type)) return f64_to_i64(kv.v.f);
    return kv.v.u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)kv.v.u;
}

double cpulm_gguf_arr_f64(const cpulm_gguf_arr *a, uint64_t i) {
    cpulm_gguf_kv kv;
    if (!arr_elem(a, i, &kv)) return 0;
    if (is_signed(a->type)) return (double)kv.v.i;
    if (is_float(a->type)) return kv.v.f;
    return (double)kv.v.u;
}

void cpulm_gguf_str_iter_init(cpulm_gguf_str_iter *it, const cpulm_gguf_arr *a) {
    it->p = a->data;
    it->left = a->type == CPULM_GGUF_STRING ? a->n_bytes : 0;
}

cpulm_str cpulm_gguf_str_iter_next(cpulm_gguf_str_iter *it) {
    cpulm_str s = {"", 0};
    if (it->left < 8) return s; /* called more than n times */
    uint64_t len = le64(it->p);
    if (len > it->left - 8) { /* cannot happen on a parsed array; stay in bounds anyway */
        it->left = 0;
        return s;
    }
    s.ptr = (const char *)it->p + 8;
    s.len = len;
    it->p += 8 + len;
    it->left -= 8 + len;
    return s;
}

void cpulm_gguf_arr_iter_init(cpulm_gguf_arr_iter *it, const cpulm_gguf_arr *a) {
    it->p = a->data;
    it->left = a->type == CPULM_GGUF_ARRAY ? a->n_bytes : 0;
}

cpulm_gguf_arr cpulm_gguf_arr_iter_next(cpulm_gguf_arr_iter *it) {
    /* The bytes were validated at parse time; re-walking them through a cursor keeps this
     * in bounds even if called too often. */
    cpulm_gguf_arr sub = {CPULM_GGUF_U8, 0, it->p, 0};
    cursor c = {.base = it->p, .size = it->left, .pos = 0, .err = NULL, .what = "array"};
    if (it->left == 0 || read_array(&c, &sub, 2) != CPULM_OK) {
        it->left = 0;
        return (cpulm_gguf_arr){CPULM_GGUF_U8, 0, it->p, 0};
    }
    it->p += c.pos;
    it->left -= c.pos;
    return sub;
}
