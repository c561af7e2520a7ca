/* alloc_hook.c: counts heap allocations, and the bytes they ask for, made by code linked
 * into the test binary (the test binary is linked with --wrap=malloc,calloc,realloc,
 * aligned_alloc,free,mmap,munmap), so a test can check that a code path allocates nothing,
 * or exactly what an estimate says (bytes still live: what was freed again does not
 * count). Anonymous mappings count as allocations (the KV cache is one), file mappings do
 * not. Only the calling thread's allocations are counted. */
#define _GNU_SOURCE
#include <stddef.h>
#include <sys/mman.h>
#include <sys/types.h>

#include "test.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t a, size_t b);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t al, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t a, size_t b);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_aligned_alloc(size_t al, size_t n);

static _Thread_local int counting;
static _Atomic long n_allocs;
static _Thread_local unsigned long long n_bytes;

/* The live allocations of the counting thread, so memory freed again (temporary buffers,
 * stdio) does not count: a linear table is enough for the few dozen a context makes. */
#define N_LIVE 1024
static _Thread_local struct {
    void *p;
    size_t n;
} live[N_LIVE];
static _Thread_local int n_live;

static void note(void *p, size_t n) {
    if (!p) return;
    n_bytes += n;
    if (n_live < N_LIVE) live[n_live++] = (__typeof__(live[0])){p, n};
}

static void forget(void *p) {
    for (int i = 0; p && i < n_live; i++)
        if (live[i].p == p) {
            n_bytes -= live[i].n;
            live[i] = live[--n_live];
            return;
        }
}

void test_alloc_count_begin(void) {
    n_allocs = 0;
    n_bytes = 0;
    n_live = 0;
    counting = 1;
}

unsigned long long test_alloc_bytes(void) {
    return n_bytes;
}

void __real_free(void *p);
void __wrap_free(void *p);
void __wrap_free(void *p) {
    if (counting) forget(p);
    __real_free(p);
}

long test_alloc_count_end(void) {
    counting = 0;
    return n_allocs;
}

void *__wrap_malloc(size_t n) {
    void *p = __real_malloc(n);
    if (counting) {
        n_allocs++;
        note(p, n);
    }
    return p;
}

void *__wrap_calloc(size_t a, size_t b) {
    void *p = __real_calloc(a, b);
    if (counting) {
        n_allocs++;
        note(p, a * b);
    }
    return p;
}

void *__wrap_realloc(void *p, size_t n) {
    if (counting) forget(p);
    void *q = __real_realloc(p, n);
    if (counting) {
        n_allocs++;
        note(q, n);
    }
    return q;
}

void *__wrap_aligned_alloc(size_t al, size_t n) {
    void *p = __real_aligned_alloc(al, n);
    if (counting) {
        n_allocs++;
        note(p, n);
    }
    return p;
}

void *__real_mmap(void *addr, size_t n, int prot, int flags, int fd, off_t off);
int __real_munmap(void *addr, size_t n);
void *__wrap_mmap(void *addr, size_t n, int prot, int flags, int fd, off_t off);
int __wrap_munmap(void *addr, size_t n);

void *__wrap_mmap(void *addr, size_t n, int prot, int flags, int fd, off_t off) {
    void *p = __real_mmap(addr, n, prot, flags, fd, off);
    if (counting && p != MAP_FAILED && (flags & MAP_ANONYMOUS)) {
        n_allocs++;
        note(p, n);
    }
    return p;
}

int __wrap_munmap(void *addr, size_t n) {
    if (counting) forget(addr);
    return __real_munmap(addr, n);
}
