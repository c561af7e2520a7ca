/* gguf.h: GGUF v2/v3 reader over a mapped buffer, and a small writer.
 *
 * The reader validates every count, length, offset, alignment, tensor shape and type
 * against the buffer size before anything is used, so a hostile file gives
 * CPULM_ERR_FORMAT (or CPULM_ERR_UNSUPPORTED for a valid but unknown tensor type), never a
 * crash, hang or giant allocation. Strings and arrays are views into the buffer (not
 * NUL-terminated); the parsed index (kv and tensor tables) is the only allocation.
 * Layout facts: little-endian; header = magic "GGUF", u32 version, u64 n_tensors, u64 n_kv
 * (v1 used u32 counts and is rejected); strings = u64 length + bytes; tensor data starts at
 * the first multiple of general.alignment (default 32) after the tensor infos. A file with
 * no tensors may end right after the kv section with no padding.
 */
#ifndef CPULM_GGUF_H
#define CPULM_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpulm.h"

typedef enum cpulm_gguf_type {
    CPULM_GGUF_U8 = 0,
    CPULM_GGUF_I8 = 1,
    CPULM_GGUF_U16 = 2,
    CPULM_GGUF_I16 = 3,
    CPULM_GGUF_U32 = 4,
    CPULM_GGUF_I32 = 5,
    CPULM_GGUF_F32 = 6,
    CPULM_GGUF_BOOL = 7,
    CPULM_GGUF_STRING = 8,
    CPULM_GGUF_ARRAY = 9,
    CPULM_GGUF_U64 = 10,
    CPULM_GGUF_I64 = 11,
    CPULM_GGUF_F64 = 12,
    CPULM_GGUF_TYPE_COUNT
} cpulm_gguf_type;

typedef struct cpulm_str { /* a view: not NUL-terminated */
    const char *ptr;
    uint64_t len;
} cpulm_str;

typedef struct cpulm_gguf_arr {
    cpulm_gguf_type type; /* element type; may itself be ARRAY (nested) */
    uint64_t n;           /* element count */
    const uint8_t *data;  /* first element's bytes in the buffer */
    uint64_t n_bytes;     /* bytes spanned by all elements */
} cpulm_gguf_arr;

typedef struct cpulm_gguf_kv {
    cpulm_str key;
    cpulm_gguf_type type;
    union {
        uint64_t u;  /* U8..U64, BOOL (0/1) */
        int64_t i;   /* I8..I64 */
        double f;    /* F32, F64 */
        cpulm_str s; /* STRING */
        cpulm_gguf_arr arr;
    } v;
} cpulm_gguf_kv;

typedef struct cpulm_gguf_tensor {
    cpulm_str name;
    uint32_t type;   /* ggml type id (cpulm_dtype) */
    int32_t n_dims;  /* 1..4 */
    int64_t ne[4];   /* ne[0] contiguous; unused dims are 1 */
    uint64_t offset; /* from the start of the data section */
    uint64_t n_bytes;
    const void *data; /* into the buffer */
} cpulm_gguf_tensor;

typedef struct cpulm_gguf {
    const uint8_t *base;
    uint64_t size;
    uint32_t version;
    uint64_t n_kv;
    cpulm_gguf_kv *kv; /* owned */
    uint64_t n_tensors;
    cpulm_gguf_tensor *tensors; /* owned */
    uint64_t alignment;
    uint64_t data_offset; /* start of tensor data (== size allowed when n_tensors == 0) */
} cpulm_gguf;

/* Parses and validates buf[0..size). On error *g is released and err names what is wrong
 * (the caller prefixes the file name). Keys must be unique; tensor names too; tensor data
 * ranges must lie inside the buffer, be aligned, and have a known type whose block size
 * divides ne[0]. Keys and tensor names may not contain NUL bytes (so cpulm_gguf_find can
 * reach every one), and tensor names are at most 63 bytes (llama.cpp's limit). Arrays nest
 * at most 8 deep. A BOOL value is stored as v.u = (byte != 0). */
cpulm_status cpulm_gguf_parse(cpulm_gguf *g, const void *buf, uint64_t size, cpulm_error *err);
void cpulm_gguf_release(cpulm_gguf *g);

const cpulm_gguf_kv *cpulm_gguf_find(const cpulm_gguf *g, const char *key);
int64_t cpulm_gguf_find_tensor(const cpulm_gguf *g, const char *name); /* -1 if absent */

/* Typed getters with coercion between integer widths (range-checked) and float widths.
 * Return CPULM_OK, CPULM_ERR_NOT_FOUND (out untouched) or CPULM_ERR_FORMAT (wrong type,
 * message in err names the key and both types). */
cpulm_status cpulm_gguf_get_i64(const cpulm_gguf *g, const char *key, int64_t *out,
                                cpulm_error *err);
cpulm_status cpulm_gguf_get_f64(const cpulm_gguf *g, const char *key, double *out,
                                cpulm_error *err);
cpulm_status cpulm_gguf_get_bool(const cpulm_gguf *g, const char *key, bool *out, cpulm_error *err);
cpulm_status cpulm_gguf_get_str(const cpulm_gguf *g, const char *key, cpulm_str *out,
                                cpulm_error *err);
cpulm_status cpulm_gguf_get_arr(const cpulm_gguf *g, const char *key, cpulm_gguf_type elem,
                                cpulm_gguf_arr *out, cpulm_error *err);

/* Array element access. Fixed-size element types index directly; string arrays are walked
 * with an iterator (elements are variable length). Values were validated at parse time. */
uint64_t cpulm_gguf_type_size(cpulm_gguf_type t); /* 0 for STRING/ARRAY */
int64_t cpulm_gguf_arr_i64(const cpulm_gguf_arr *a, uint64_t i);
double cpulm_gguf_arr_f64(const cpulm_gguf_arr *a, uint64_t i);

typedef struct cpulm_gguf_str_iter {
    const uint8_t *p;
    uint64_t left;
} cpulm_gguf_str_iter;
void cpulm_gguf_str_iter_init(cpulm_gguf_str_iter *it, const cpulm_gguf_arr *a);
cpulm_str cpulm_gguf_str_iter_next(cpulm_gguf_str_iter *it); /* call exactly a->n times */

/* Nested arrays (element type ARRAY): walks the sub-arrays in order; call exactly a->n times. */
typedef struct cpulm_gguf_arr_iter {
    const uint8_t *p;
    uint64_t left;
} cpulm_gguf_arr_iter;
void cpulm_gguf_arr_iter_init(cpulm_gguf_arr_iter *it, const cpulm_gguf_arr *a);
cpulm_gguf_arr cpulm_gguf_arr_iter_next(cpulm_gguf_arr_iter *it);

/* Bytes of a tensor of this ggml type and shape (ne[0..n_dims)). CPULM_ERR_UNSUPPORTED for
 * an unknown type, CPULM_ERR_FORMAT for n_dims outside 1..4, a negative ne, a block size
 * that does not divide ne[0], or a size that overflows; err says which (no tensor name). */
cpulm_status cpulm_gguf_tensor_nbytes(uint32_t type, int n_dims, const int64_t *ne,
                                      uint64_t *n_bytes, cpulm_error *err);

const char *cpulm_gguf_type_name(cpulm_gguf_type t);
bool cpulm_str_eq(cpulm_str s, const char *z);

/* ---- writer: builds a GGUF v3 file in memory (tests, synth, quantize) ---- */

typedef struct cpulm_gguf_writer cpulm_gguf_writer;
cpulm_gguf_writer *cpulm_gguf_writer_new(void);
void cpulm_gguf_writer_free(cpulm_gguf_writer *w);
cpulm_status cpulm_gguf_writer_set_u32(cpulm_gguf_writer *w, const char *key, uint32_t v);
cpulm_status cpulm_gguf_writer_set_i32(cpulm_gguf_writer *w, const char *key, int32_t v);
cpulm_status cpulm_gguf_writer_set_f32(cpulm_gguf_writer *w, const char *key, float v);
cpulm_status cpulm_gguf_writer_set_bool(cpulm_gguf_writer *w, const char *key, bool v);
cpulm_status cpulm_gguf_writer_set_str(cpulm_gguf_writer *w, const char *key, const char *v);
/* Array of fixed-size elements (copied). */
cpulm_status cpulm_gguf_writer_set_arr(cpulm_gguf_writer *w, const char *key, cpulm_gguf_type elem,
                                       const void *data, uint64_t n);
cpulm_status cpulm_gguf_writer_set_arr_str(cpulm_gguf_writer *w, const char *key,
                                           const char *const *strs, uint64_t n);
/* Copies a raw kv (any type, incl. nested arrays) from a parsed file. */
cpulm_status cpulm_gguf_writer_copy_kv(cpulm_gguf_writer *w, const cpulm_gguf_kv *kv);
/* Adds a tensor; data (n_bytes, must match type and shape) is copied unless it is NULL,
 * in which case the caller streams it later with cpulm_gguf_writer_write_file's callback. */
cpulm_status cpulm_gguf_writer_add_tensor(cpulm_gguf_writer *w, const char *name, uint32_t type,
                                          int n_dims, const int64_t *ne, const void *data);
/* Serialises to a malloc'd buffer (owned by caller). */
cpulm_status cpulm_gguf_writer_to_buf(cpulm_gguf_writer *w, uint8_t **out, uint64_t *size);
/* Streams to a file. For tensors added with data == NULL, fill(i, dst, n_bytes, user) is
 * called to produce their bytes, in tensor order, so multi-GB models never sit in RAM. */
typedef cpulm_status (*cpulm_gguf_fill_fn)(int64_t i_tensor, void *dst, uint64_t n_bytes,
                                           void *user);
cpulm_status cpulm_gguf_writer_write_file(cpulm_gguf_writer *w, const char *path,
                                          cpulm_gguf_fill_fn fill, void *user, cpulm_error *err);

#endif
