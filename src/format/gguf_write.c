/* gguf_write.c: builds GGUF v3 files (tests, synthetic models, quantization output).
 *
 * Layout, as llama.cpp writes it: header, kv pairs in insertion order, tensor infos, zero
 * padding to the alignment, then each tensor's data at the next multiple of the alignment
 * (each tensor padded, the last one too); a file without tensors ends after the kvs, unpadded.
 * The alignment is 32 unless general.alignment is set. The writer accepts exactly what the reader
 * accepts (unique keys without NUL bytes; unique tensor names of at most 63 bytes; known types and
 * valid shapes), so anything parsed can be rewritten. Setting a key twice replaces the value in
 * place. Tensor data added with data == NULL is produced at write time by a callback that fills a
 * MAP_SHARED window of the output file, so multi-GB models never sit in anonymous memory.
 * Assumes a little-endian host (arrays and tensor data are copied as raw bytes).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/status.h"
#include "gguf.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf_write.c copies host arrays and tensor data verbatim: little-endian hosts only"
#endif

#define DEFAULT_ALIGNMENT 32
#define MAX_TENSOR_NAME   63

typedef struct wkv {
    char *key;    /* owned, NUL-terminated */
    uint8_t *val; /* owned: u32 type, then the encoded value */
    uint64_t n_val;
} wkv;

typedef struct wtensor {
    char *name; /* owned */
    uint32_t type;
    int n_dims;
    int64_t ne[4];
    uint64_t n_bytes;
    uint64_t offset; /* from the data section start; set by build_header */
    uint8_t *data;   /* owned copy, or NULL: streamed by write_file's callback */
} wtensor;

struct cpulm_gguf_writer {
    wkv *kv;
    uint64_t n_kv, cap_kv;
    wtensor *t;
    uint64_t n_t, cap_t;
    uint64_t alignment;
};

/* ---- byte buffer with a sticky out-of-memory flag ---- */

typedef struct bytes {
    uint8_t *p;
    uint64_t n, cap;
    bool oom;
} bytes;

static void put(bytes *b, const void *src, uint64_t n) {
    if (b->oom || n == 0) return;
    if (n > b->cap - b->n) {
        uint64_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n)
            cap *= 2;
        uint8_t *p = realloc(b->p, (size_t)cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, (size_t)n);
    b->n += n;
}

static void put_le(bytes *b, uint64_t v, int n) {
    uint8_t tmp[8];
    for (int i = 0; i < n; i++)
        tmp[i] = (uint8_t)(v >> (8 * i));
    put(b, tmp, (uint64_t)n);
}

static void put_str(bytes *b, const char *s, uint64_t len) {
    put_le(b, len, 8);
    put(b, s, len);
}

static void put_zeros(bytes *b, uint64_t n) {
    static const uint8_t zeros[64];
    while (n) {
        uint64_t k = n < sizeof zeros ? n : sizeof zeros;
        put(b, zeros, k);
        n -= k;
    }
}

static uint64_t align_up(uint64_t x, uint64_t a) {
    return (x + a - 1) / a * a;
}

/* ---- lifecycle ---- */

cpulm_gguf_writer *cpulm_gguf_writer_new(void) {
    cpulm_gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->alignment = DEFAULT_ALIGNMENT;
    return w;
}

void cpulm_gguf_writer_free(cpulm_gguf_writer *w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    for (uint64_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->kv);
    free(w->t);
    free(w);
}

static bool grow(void **arr, uint64_t *cap, uint64_t n, size_t elem) {
    if (n < *cap) return true;
    uint64_t c = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, (size_t)(c * elem));
    if (!p) return false;
    *arr = p;
    *cap = c;
    return true;
}

/* ---- key/value pairs ---- */

/* general.alignment is what the reader will use as the alignment: keep the two in step. */
static cpulm_status check_alignment_kv(cpulm_gguf_writer *w, const bytes *val) {
    if (val->n != 8 || val->p[0] != CPULM_GGUF_U32) return CPULM_ERR_INVALID_ARG;
    uint64_t a = (uint64_t)val->p[4] | (uint64_t)val->p[5] << 8 | (uint64_t)val->p[6] << 16 |
                 (uint64_t)val->p[7] << 24;
    if (a == 0 || (a & (a - 1)) != 0) return CPULM_ERR_INVALID_ARG;
    w->alignment = a;
    return CPULM_OK;
}

/* Takes ownership of val->p on success and on failure. */
static cpulm_status set_kv(cpulm_gguf_writer *w, const char *key, bytes *val) {
    cpulm_status st = CPULM_OK;
    if (!key || val->oom) st = val->oom ? CPULM_ERR_NOMEM : CPULM_ERR_INVALID_ARG;
    if (st == CPULM_OK && strcmp(key, "general.alignment") == 0) st = check_alignment_kv(w, val);
    if (st != CPULM_OK) {
        free(val->p);
        return st;
    }
    for (uint64_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) {
            free(w->kv[i].val);
            w->kv[i].val = val->p;
            w->kv[i].n_val = val->n;
            return CPULM_OK;
        }
    }
    char *k = strdup(key);
    if (!k || !grow((void **)&w->kv, &w->cap_kv, w->n_kv, sizeof *w->kv)) {
        free(k);
        free(val->p);
        return CPULM_ERR_NOMEM;
    }
    w->kv[w->n_kv++] = (wkv){k, val->p, val->n};
    return CPULM_OK;
}

static cpulm_status set_scalar(cpulm_gguf_writer *w, const char *key, cpulm_gguf_type t,
                               uint64_t bits) {
    bytes b = {0};
    put_le(&b, t, 4);
    put_le(&b, bits, (int)cpulm_gguf_type_size(t));
    return set_kv(w, key, &b);
}

cpulm_status cpulm_gguf_writer_set_u32(cpulm_gguf_writer *w, const char *key, uint32_t v) {
    return set_scalar(w, key, CPULM_GGUF_U32, v);
}

cpulm_status cpulm_gguf_writer_set_i32(cpulm_gguf_writer *w, const char *key, int32_t v) {
    return set_scalar(w, key, CPULM_GGUF_I32, (uint32_t)v);
}

cpulm_status cpulm_gguf_writer_set_f32(cpulm_gguf_writer *w, const char *key, float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    return set_scalar(w, key, CPULM_GGUF_F32, bits);
}

cpulm_status cpulm_gguf_writer_set_bool(cpulm_gguf_writer *w, const char *key, bool v) {
    return set_scalar(w, key, CPULM_GGUF_BOOL, v ? 1 : 0);
}

cpulm_status cpulm_gguf_writer_set_str(cpulm_gguf_writer *w, const char *key, const char *v) {
    if (!v) return CPULM_ERR_INVALID_ARG;
    bytes b = {0};
    put_le(&b, CPULM_GGUF_STRING, 4);
    put_str(&b, v, strlen(v));
    return set_kv(w, key, &b);
}

cpulm_status cpulm_gguf_writer_set_arr(cpulm_gguf_writer *w, const char *key, cpulm_gguf_type elem,
                                       const void *data, uint64_t n) {
    uint64_t esz = cpulm_gguf_type_size(elem);
    if (!esz || (n && !data) || n > UINT64_MAX / esz) return CPULM_ERR_INVALID_ARG;
    bytes b = {0};
    put_le(&b, CPULM_GGUF_ARRAY, 4);
    put_le(&b, elem, 4);
    put_le(&b, n, 8);
    put(&b, data, n * esz);
    return set_kv(w, key, &b);
}

cpulm_status cpulm_gguf_writer_set_arr_str(cpulm_gguf_writer *w, const char *key,
                                           const char *const *strs, uint64_t n) {
    if (n && !strs) return CPULM_ERR_INVALID_ARG;
    for (uint64_t i = 0; i < n; i++)
        if (!strs[i]) return CPULM_ERR_INVALID_ARG;
    bytes b = {0};
    put_le(&b, CPULM_GGUF_ARRAY, 4);
    put_le(&b, CPULM_GGUF_STRING, 4);
    put_le(&b, n, 8);
    for (uint64_t i = 0; i < n; i++)
        put_str(&b, strs[i], strlen(strs[i]));
    return set_kv(w, key, &b);
}

/* Scalars are re-encoded from the decoded value; strings and arrays (nested ones too) are
 * copied as the validated bytes the reader pointed at. */
static void encode_value(bytes *b, const cpulm_gguf_kv *kv) {
    uint64_t esz = cpulm_gguf_type_size(kv->type);
    if (kv->type == CPULM_GGUF_F32) {
        float f = (float)kv->v.f;
        uint32_t bits;
        memcpy(&bits, &f, 4);
        put_le(b, bits, 4);
    } else if (kv->type == CPULM_GGUF_F64) {
        uint64_t bits;
        memcpy(&bits, &kv->v.f, 8);
        put_le(b, bits, 8);
    } else if (esz) {
        /* u and i share storage; two's complement truncation gives the right bytes */
        put_le(b, kv->v.u, (int)esz);
    } else if (kv->type == CPULM_GGUF_STRING) {
        put_str(b, kv->v.s.ptr, kv->v.s.len);
    } else {
        put_le(b, kv->v.arr.type, 4);
        put_le(b, kv->v.arr.n, 8);
        put(b, kv->v.arr.data, kv->v.arr.n_bytes);
    }
}

cpulm_status cpulm_gguf_writer_copy_kv(cpulm_gguf_writer *w, const cpulm_gguf_kv *kv) {
    if (!kv || (unsigned)kv->type >= CPULM_GGUF_TYPE_COUNT ||
        (kv->key.len && memchr(kv->key.ptr, 0, kv->key.len)))
        return CPULM_ERR_INVALID_ARG;
    char *key = malloc((size_t)kv->key.len + 1);
    if (!key) return CPULM_ERR_NOMEM;
    if (kv->key.len) memcpy(key, kv->key.ptr, (size_t)kv->key.len);
    key[kv->key.len] = 0;
    bytes b = {0};
    put_le(&b, kv->type, 4);
    encode_value(&b, kv);
    cpulm_status st = set_kv(w, key, &b);
    free(key);
    return st;
}

/* ---- tensors ---- */

static bool tensor_exists(const cpulm_gguf_writer *w, const char *name) {
    for (uint64_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) return true;
    return false;
}

cpulm_status cpulm_gguf_writer_add_tensor(cpulm_gguf_writer *w, const char *name, uint32_t type,
                                          int n_dims, const int64_t *ne, const void *data) {
    wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}};
    if (!name || !ne || strlen(name) > MAX_TENSOR_NAME || tensor_exists(w, name))
        return CPULM_ERR_INVALID_ARG;
    cpulm_status st = cpulm_gguf_tensor_nbytes(type, n_dims, ne, &t.n_bytes, NULL);
    if (st != CPULM_OK) return st == CPULM_ERR_UNSUPPORTED ? st : CPULM_ERR_INVALID_ARG;
    memcpy(t.ne, ne, (size_t)n_dims * sizeof *ne);
    if (data && t.n_bytes > SIZE_MAX - 1) return CPULM_ERR_NOMEM;
    t.name = strdup(name);
    t.data = data ? malloc((size_t)t.n_bytes + 1) : NULL;
    if (!t.name || (data && !t.data) || !grow((void **)&w->t, &w->cap_t, w->n_t, sizeof *w->t)) {
        free(t.name);
        free(t.data);
        return CPULM_ERR_NOMEM;
    }
    if (data) memcpy(t.data, data, (size_t)t.n_bytes);
    w->t[w->n_t++] = t;
    return CPULM_OK;
}

/* ---- serialisation ---- */

/* Everything before the tensor data, padded to the alignment; assigns tensor offsets and
 * returns the total file size in *total. */
static cpulm_status build_header(cpulm_gguf_writer *w, bytes *b, uint64_t *total) {
    put(b, "GGUF", 4);
    put_le(b, 3, 4);
    put_le(b, w->n_t, 8);
    put_le(b, w->n_kv, 8);
    for (uint64_t i = 0; i < w->n_kv; i++) {
        put_str(b, w->kv[i].key, strlen(w->kv[i].key));
        put(b, w->kv[i].val, w->kv[i].n_val);
    }
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_t; i++) {
        wtensor *t = &w->t[i];
        put_str(b, t->name, strlen(t->name));
        put_le(b, (uint64_t)t->n_dims, 4);
        for (int d = 0; d < t->n_dims; d++)
            put_le(b, (uint64_t)t->ne[d], 8);
        put_le(b, t->type, 4);
        put_le(b, off, 8);
        t->offset = off;
        uint64_t padded = align_up(t->n_bytes, w->alignment);
        if (padded < t->n_bytes || off > UINT64_MAX - padded) return CPULM_ERR_INVALID_ARG;
        off += padded;
    }
    /* Like llama.cpp, a file without tensors (vocab-only) ends right after the kvs. */
    if (w->n_t) put_zeros(b, align_up(b->n, w->alignment) - b->n);
    if (b->oom) return CPULM_ERR_NOMEM;
    if (off > UINT64_MAX - b->n) return CPULM_ERR_INVALID_ARG;
    *total = b->n + off;
    return CPULM_OK;
}

cpulm_status cpulm_gguf_writer_to_buf(cpulm_gguf_writer *w, uint8_t **out, uint64_t *size) {
    for (uint64_t i = 0; i < w->n_t; i++)
        if (!w->t[i].data && w->t[i].n_bytes) return CPULM_ERR_INVALID_ARG; /* needs streaming */
    bytes h = {0};
    uint64_t total = 0;
    cpulm_status st = build_header(w, &h, &total);
    uint8_t *buf = st == CPULM_OK && total <= SIZE_MAX ? calloc(1, (size_t)total) : NULL;
    if (st == CPULM_OK && !buf) st = CPULM_ERR_NOMEM;
    if (st == CPULM_OK) {
        memcpy(buf, h.p, (size_t)h.n);
        for (uint64_t i = 0; i < w->n_t; i++)
            if (w->t[i].n_bytes)
                memcpy(buf + h.n + w->t[i].offset, w->t[i].data, (size_t)w->t[i].n_bytes);
        *out = buf;
        *size = total;
    }
    free(h.p);
    return st;
}

/* ---- streaming to a file ---- */

static cpulm_status pwrite_all(int fd, const void *p, uint64_t n, uint64_t off, const char *path,
                               cpulm_error *err) {
    const uint8_t *s = p;
    while (n) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t k = pwrite(fd, s, chunk, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return cpulm_errf(err, CPULM_ERR_IO, "%s: write: %s", path, strerror(errno));
        s += k;
        off += (uint64_t)k;
        n -= (uint64_t)k;
    }
    return CPULM_OK;
}

/* Maps the tensor's byte range of the output file and lets fill write it in place. */
static cpulm_status fill_tensor(int fd, const wtensor *t, uint64_t file_off, int64_t i,
                                cpulm_gguf_fill_fn fill, void *user, const char *path,
                                cpulm_error *err) {
    static uint8_t empty;
    if (t->n_bytes == 0) return fill(i, &empty, 0, user);
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t start = file_off / page * page, delta = file_off - start;
    void *map = mmap(NULL, (size_t)(delta + t->n_bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                     (off_t)start);
    if (map == MAP_FAILED)
        return cpulm_errf(err, CPULM_ERR_IO, "%s: mmap for tensor '%s': %s", path, t->name,
                          strerror(errno));
    cpulm_status st = fill(i, (uint8_t *)map + delta, t->n_bytes, user);
    munmap(map, (size_t)(delta + t->n_bytes));
    if (st != CPULM_OK)
        return cpulm_errf(err, st, "%s: fill callback failed for tensor '%s' (%s)", path, t->name,
                          cpulm_status_str(st));
    return CPULM_OK;
}

/* Sizes the file up front: a sparse file gives zero padding for free, and reserving the
 * blocks turns a full disk into an error here instead of SIGBUS inside a mapped write. */
static cpulm_status size_file(int fd, uint64_t total, const char *path, cpulm_error *err) {
    if (ftruncate(fd, (off_t)total) != 0)
        return cpulm_errf(err, CPULM_ERR_IO, "%s: %s", path, strerror(errno));
    int e = total ? posix_fallocate(fd, 0, (off_t)total) : 0;
    if (e == ENOSPC || e == EFBIG)
        return cpulm_errf(err, CPULM_ERR_IO, "%s: %s", path, strerror(e));
    return CPULM_OK; /* other errors (EOPNOTSUPP, EINVAL): the filesystem cannot reserve */
}

static cpulm_status write_body(cpulm_gguf_writer *w, int fd, const bytes *h, uint64_t total,
                               cpulm_gguf_fill_fn fill, void *user, const char *path,
                               cpulm_error *err) {
    cpulm_status st = size_file(fd, total, path, err);
    if (st == CPULM_OK) st = pwrite_all(fd, h->p, h->n, 0, path, err);
    for (uint64_t i = 0; i < w->n_t && st == CPULM_OK; i++) {
        const wtensor *t = &w->t[i];
        if (t->data)
            st = pwrite_all(fd, t->data, t->n_bytes, h->n + t->offset, path, err);
        else if (fill)
            st = fill_tensor(fd, t, h->n + t->offset, (int64_t)i, fill, user, path, err);
        else if (t->n_bytes)
            st = cpulm_errf(err, CPULM_ERR_INVALID_ARG,
                            "tensor '%s' has no data and no fill callback", t->name);
    }
    return st;
}

cpulm_status cpulm_gguf_writer_write_file(cpulm_gguf_writer *w, const char *path,
                                          cpulm_gguf_fill_fn fill, void *user, cpulm_error *err) {
    bytes h = {0};
    uint64_t total = 0;
    cpulm_status st = build_header(w, &h, &total);
    if (st != CPULM_OK) {
        free(h.p);
        return cpulm_errf(err, st, "%s: cannot lay out the file (%s)", path, cpulm_status_str(st));
    }
    size_t n = strlen(path);
    char *tmp = malloc(n + 5);
    if (!tmp) {
        free(h.p);
        return cpulm_errf(err, CPULM_ERR_NOMEM, "out of memory");
    }
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp", 5);
    /* Write path.tmp and rename it over path, so readers never see a half-written file. */
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = cpulm_errf(err, CPULM_ERR_IO, "%s: %s", tmp, strerror(errno));
    } else {
        st = write_body(w, fd, &h, total, fill, user, tmp, err);
        if (close(fd) != 0 && st == CPULM_OK)
            st = cpulm_errf(err, CPULM_ERR_IO, "%s: close: %s", tmp, strerror(errno));
        if (st == CPULM_OK && rename(tmp, path) != 0)
            st = cpulm_errf(err, CPULM_ERR_IO, "%s: rename to %s: %s", tmp, path, strerror(errno));
        if (st != CPULM_OK) unlink(tmp);
    }
    free(tmp);
    free(h.p);
    return st;
}
