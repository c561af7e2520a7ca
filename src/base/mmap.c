/* mmap.c: POSIX read-only mapping of model files. */
#define _GNU_SOURCE
#include "mmap.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif

#include "status.h"

cpulm_status cpulm_mmap_open(cpulm_mmap *m, const char *path, cpulm_error *err) {
    m->data = NULL;
    m->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cpulm_errf(err, CPULM_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return cpulm_errf(err, CPULM_ERR_IO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return cpulm_errf(err, CPULM_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return cpulm_errf(err, CPULM_ERR_IO, "%s: mmap: %s", path, strerror(e));
        }
        m->data = p;
        m->size = (uint64_t)st.st_size;
    }
    close(fd);
    return CPULM_OK;
}

void cpulm_mmap_close(cpulm_mmap *m) {
    if (m->data) munmap((void *)m->data, (size_t)m->size);
    m->data = NULL;
    m->size = 0;
}

void cpulm_mmap_discard(cpulm_mmap *m, uint64_t off, uint64_t len) {
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t a = (off + (uint64_t)pg - 1) / (uint64_t)pg * (uint64_t)pg;
    uint64_t b = (off + len) / (uint64_t)pg * (uint64_t)pg;
    if (!m->data || b <= a || b > m->size) return;
    madvise((void *)(m->data + a), (size_t)(b - a), MADV_DONTNEED);
}

void cpulm_advise_huge(void *p, size_t len) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const uintptr_t huge = (uintptr_t)2 << 20, a = ((uintptr_t)p + huge - 1) & ~(huge - 1);
    const uintptr_t b = ((uintptr_t)p + len) & ~(huge - 1);
    if (b > a) madvise((void *)a, (size_t)(b - a), MADV_HUGEPAGE);
#else
    (void)p;
    (void)len;
#endif
}

int cpulm_mmap_lock(cpulm_mmap *m) {
    if (!m->data) return 0;
    return mlock(m->data, (size_t)m->size);
}

/* Faults the mapping in: MADV_POPULATE_READ (Linux 5.14), else one read per page. */
static void populate(const cpulm_mmap *m) {
#if defined(__linux__)
#if !defined(MADV_POPULATE_READ)
#define MADV_POPULATE_READ 22 /* older libc headers */
#endif
    if (madvise((void *)m->data, (size_t)m->size, MADV_POPULATE_READ) == 0) return;
#endif
    const uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
    volatile const uint8_t *p = m->data;
    uint8_t sink = 0;
    for (uint64_t off = 0; off < m->size; off += pg)
        sink ^= p[off];
    (void)sink;
}

int cpulm_mmap_place(cpulm_mmap *m, cpulm_mmap_policy pol, uint64_t node_mask, int populate_now) {
    if (!m->data || !node_mask) return -1;
    int rc = -1;
#if defined(__linux__) && defined(SYS_mbind)
    /* MPOL_INTERLEAVE = 3, MPOL_PREFERRED = 1; maxnode 64 + 1 as the kernel drops a bit */
    unsigned long w[4] = {0};
    for (unsigned b = 0; b < 64; b++)
        if (node_mask >> b & 1) w[b / (8 * sizeof w[0])] |= 1ul << (b % (8 * sizeof w[0]));
    if (pol == CPULM_MMAP_PREFER) { /* only the lowest node */
        unsigned b = 0;
        while (!(node_mask >> b & 1))
            b++;
        memset(w, 0, sizeof w);
        w[b / (8 * sizeof w[0])] = 1ul << (b % (8 * sizeof w[0]));
    }
    rc = syscall(SYS_mbind, m->data, (size_t)m->size, pol == CPULM_MMAP_INTERLEAVE ? 3 : 1, w,
                 64ul + 1, 0ul) == 0
             ? 0
             : -1;
#else
    (void)pol;
#endif
    if (populate_now) populate(m);
    return rc;
}
