/* alloc_hook.c: counts heap allocations made by code linked into the test binary (the test
 * binary is linked with --wrap=malloc,calloc,realloc,aligned_alloc), so a test can check
 * that a code path allocates nothing. */
#include <stddef.h>

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

void test_alloc_count_begin(void) {
    n_allocs = 0;
    counting = 1;
}

long test_alloc_count_end(void) {
    counting = 0;
    return n_allocs;
}

void *__wrap_malloc(size_t n) {
    if (counting) n_allocs++;
    return __real_malloc(n);
}

void *__wrap_calloc(size_t a, size_t b) {
    if (counting) n_allocs++;
    return __real_calloc(a, b);
}

void *__wrap_realloc(void *p, size_t n) {
    if (counting) n_allocs++;
    return __real_realloc(p, n);
}

void *__wrap_aligned_alloc(size_t al, size_t n) {
    if (counting) n_allocs++;
    return __real_aligned_alloc(al, n);
}
