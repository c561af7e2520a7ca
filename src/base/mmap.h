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

#endif
