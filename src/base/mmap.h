/* mmap.h: read-only file mapping. Weights are views into this mapping and never copied.
 * A zero-length file maps to data == NULL, size == 0 (valid). */
#ifndef CPULM_BASE_MMAP_H
#define CPULM_BASE_MMAP_H

#include <stddef.h>
#include <stdint.h>

#include "cpulm.h"

typedef struct cpulm_mmap {
    const uint8_t *data; /* borrowed by everyone until cpulm_mmap_close */
    uint64_t size;
} cpulm_mmap;

cpulm_status cpulm_mmap_open(cpulm_mmap *m, const char *path, cpulm_error *err);
void cpulm_mmap_close(cpulm_mmap *m);
/* Tells the OS the range [off, off+len) will not be read again (e.g. after repacking). */
void cpulm_mmap_discard(cpulm_mmap *m, uint64_t off, uint64_t len);
int cpulm_mmap_lock(cpulm_mmap *m);

/* Asks for transparent huge pages (2 MiB) on the whole 2 MiB-aligned pages of memory the
 * process allocated, before it is first written (Linux MADV_HUGEPAGE; elsewhere a no-op).
 * For large weight copies: one fault and one TLB entry per 2 MiB instead of 512. */
void cpulm_advise_huge(void *p, size_t len);

/* NUMA hint for the whole mapping (Linux mbind; elsewhere a no-op returning -1):
 * INTERLEAVE spreads its pages page by page over the nodes of node_mask, PREFER puts them
 * on the lowest node of node_mask while it has room. populate then faults every page in
 * now, from the calling thread: page-cache pages take the policy of the thread that faults
 * them rather than the mapping's, so the caller runs under the same thread policy
 * (threads/numa.c). Returns 0, or -1 when the OS refused the policy. */
typedef enum cpulm_mmap_policy {
    CPULM_MMAP_INTERLEAVE = 0,
    CPULM_MMAP_PREFER = 1
} cpulm_mmap_policy;
int cpulm_mmap_place(cpulm_mmap *m, cpulm_mmap_policy pol, uint64_t node_mask, int populate);

#endif
