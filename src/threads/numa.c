/* numa.c: NUMA modes (see numa.h and cpulm.h): process-wide mode, thread and memory plans,
 * and the loading thread's memory policy (the text is in numa_describe.c). */
#define _GNU_SOURCE
#include "numa.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__linux__)
#include <sys/syscall.h>
#endif
#if defined(__linux__) && defined(SYS_set_mempolicy) && defined(SYS_get_mempolicy)
#define HAVE_MEMPOLICY 1
#else
#define HAVE_MEMPOLICY 0
#endif

/* Linux MPOL_* values (uapi linux/mempolicy.h); spelled out to need no kernel headers. */
enum { POL_DEFAULT = 0, POL_PREFERRED = 1, POL_INTERLEAVE = 3 };

static atomic_int g_mode = CPULM_NUMA_NONE;
static atomic_int g_home_cpu = -1;

static int current_cpu(void) {
#if defined(__linux__)
    return sched_getcpu();
#else
    return -1;
#endif
}

void cpulm_numa_init(cpulm_numa mode) {
    const int valid = mode >= CPULM_NUMA_NONE && mode <= CPULM_NUMA_NUMACTL;
    atomic_store(&g_mode, valid ? (int)mode : CPULM_NUMA_NONE);
    atomic_store(&g_home_cpu, current_cpu());
}

cpulm_status cpulm_numa_parse(const char *s, cpulm_numa *out) {
    static const char *names[] = {"none", "distribute", "isolate", "numactl"};
    for (int i = 0; s && i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (cpulm_numa)(CPULM_NUMA_NONE + i);
            return CPULM_OK;
        }
    return CPULM_ERR_INVALID_ARG;
}

cpulm_numa cpulm_numa_resolve(cpulm_numa m) {
    if (m >= CPULM_NUMA_NONE && m <= CPULM_NUMA_NUMACTL) return m;
    return (cpulm_numa)atomic_load(&g_mode);
}

const char *cpulm_numa_name(cpulm_numa m) {
    switch (cpulm_numa_resolve(m)) {
    case CPULM_NUMA_DISTRIBUTE: return "distribute";
    case CPULM_NUMA_ISOLATE: return "isolate";
    case CPULM_NUMA_NUMACTL: return "numactl";
    default: return "none";
    }
}

int cpulm_numa_home_node(const cpulm_topo *t) {
    int expect = -1;
    atomic_compare_exchange_strong(&g_home_cpu, &expect, current_cpu());
    int node = cpulm_topo_node_of(t, atomic_load(&g_home_cpu));
    if (node >= 0) return node;
    return t->n_cpus > 0 ? t->node[0] : t->node_id[0];
}

/* ---- plans (pure) ---- */

int cpulm_numa_plan_threads(const cpulm_topo *t, cpulm_numa m, int home, int n, int *cpus,
                            int cap) {
    int list[CPULM_TOPO_MAX_CPUS], n_cores = 0;
    int len = cpulm_topo_place(t, m, home, list, CPULM_TOPO_MAX_CPUS, &n_cores);
    if (len == 0 || n > cap) return 0;
    if (m != CPULM_NUMA_DISTRIBUTE && m != CPULM_NUMA_ISOLATE && m != CPULM_NUMA_NUMACTL && n > len)
        return 0;
    for (int i = 0; i < n; i++)
        cpus[i] = list[i % len];
    return 1;
}

int cpulm_numa_plan_default(const cpulm_topo *t, cpulm_numa m, int home, int cgroup_cpus) {
    int list[CPULM_TOPO_MAX_CPUS], n = 0;
    cpulm_topo_place(t, m, home, list, CPULM_TOPO_MAX_CPUS, &n);
    if (cgroup_cpus > 0 && cgroup_cpus < n) n = cgroup_cpus;
    return n < 1 ? 1 : n;
}

static int popcount64(uint64_t x) {
    int n = 0;
    for (; x; x &= x - 1)
        n++;
    return n;
}

cpulm_numa_mem_kind cpulm_numa_plan_memory(const cpulm_topo *t, cpulm_numa m, int home,
                                           uint64_t *mask) {
    *mask = 0;
    if (popcount64(t->mem_nodes) < 2) return CPULM_NUMA_MEM_OS;
    if (m == CPULM_NUMA_DISTRIBUTE) {
        *mask = t->mem_nodes;
        return CPULM_NUMA_MEM_INTERLEAVE;
    }
    if (m == CPULM_NUMA_ISOLATE && home >= 0 && home < 64 && (t->mem_nodes >> home & 1)) {
        *mask = 1ull << home;
        return CPULM_NUMA_MEM_PREFER;
    }
    return CPULM_NUMA_MEM_OS;
}

/* ---- this process ---- */

/* Scans this machine; NULL when out of memory (callers then fall back to no placement). */
static cpulm_topo *scan_here(void) {
    cpulm_topo *t = malloc(sizeof *t); /* 12 KiB: off the stack */
    if (t) cpulm_topo_scan(t, NULL, 0);
    return t;
}

int cpulm_numa_default_threads(cpulm_numa m) {
    cpulm_topo *t = scan_here();
    if (!t) return cpulm_topo_default_threads();
    m = cpulm_numa_resolve(m);
    int n = cpulm_numa_plan_default(t, m, cpulm_numa_home_node(t), cpulm_topo_cgroup_cpus());
    free(t);
    return n;
}

int cpulm_numa_thread_cpus(cpulm_numa m, int n, int *cpus, int cap) {
    cpulm_topo *t = scan_here();
    if (!t) return 0;
    m = cpulm_numa_resolve(m);
    int pin = cpulm_numa_plan_threads(t, m, cpulm_numa_home_node(t), n, cpus, cap);
    free(t);
    return pin;
}

static void mask_words(uint64_t mask, unsigned long *w, size_t n_words) {
    const unsigned bits = 8 * sizeof(unsigned long);
    memset(w, 0, n_words * sizeof *w);
    for (unsigned b = 0; b < 64 && b / bits < n_words; b++)
        if (mask >> b & 1) w[b / bits] |= 1ul << (b % bits);
}

void cpulm_numa_mem_begin(cpulm_numa m, cpulm_mmap *map, cpulm_numa_mem *saved) {
    memset(saved, 0, sizeof *saved);
    m = cpulm_numa_resolve(m);
    if (m != CPULM_NUMA_DISTRIBUTE && m != CPULM_NUMA_ISOLATE) return; /* no sysfs scan */
    cpulm_topo *t = scan_here();
    if (!t) return;
    uint64_t mask;
    cpulm_numa_mem_kind kind = cpulm_numa_plan_memory(t, m, cpulm_numa_home_node(t), &mask);
    free(t);
    if (kind == CPULM_NUMA_MEM_OS) return;
#if HAVE_MEMPOLICY
    /* maxnode 64 + 1: the kernel drops one bit of maxnode; the mask arrays have spare words */
    const unsigned long maxnode = 64 + 1;
    if (syscall(SYS_get_mempolicy, &saved->old_mode, saved->old_mask, maxnode, NULL, 0) != 0)
        return;
    unsigned long w[4];
    mask_words(mask, w, 4);
    int mode = kind == CPULM_NUMA_MEM_INTERLEAVE ? POL_INTERLEAVE : POL_PREFERRED;
    if (syscall(SYS_set_mempolicy, mode, w, maxnode) != 0) return;
    saved->changed = 1;
    /* page-cache pages follow the faulting thread's policy (set above); the mapping's own
     * policy covers pages the kernel allocates for the range by other paths */
    cpulm_mmap_place(map,
                     kind == CPULM_NUMA_MEM_INTERLEAVE ? CPULM_MMAP_INTERLEAVE : CPULM_MMAP_PREFER,
                     mask, kind == CPULM_NUMA_MEM_INTERLEAVE);
#else
    (void)map;
    (void)mask_words;
#endif
}

void cpulm_numa_mem_end(cpulm_numa_mem *saved) {
#if HAVE_MEMPOLICY
    if (saved->changed)
        syscall(SYS_set_mempolicy, saved->old_mode,
                saved->old_mode == POL_DEFAULT ? NULL : saved->old_mask, 64ul + 1);
#endif
    saved->changed = 0;
}
