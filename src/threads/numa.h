/* numa.h: the NUMA modes of cpulm.h applied: the process-wide mode, the CPUs a context's
 * pool is pinned to, and the memory policy a model load runs under. Linux raw syscalls
 * (set_mempolicy / get_mempolicy; mbind is in base/mmap.c), no libnuma; where they do not
 * exist every memory step is a no-op and placement falls back to the affinity mask.
 * The plan functions are pure (a cpulm_topo in, lists out) so tests can feed fake
 * multi-node topologies. */
#ifndef CPULM_THREADS_NUMA_H
#define CPULM_THREADS_NUMA_H

#include <stdint.h>

#include "base/mmap.h"
#include "topo.h"

/* DEFAULT -> the process-wide mode (cpulm_numa_init), NONE when never set. */
cpulm_numa cpulm_numa_resolve(cpulm_numa m);
/* "none", "distribute", ... for a resolved mode. Static string. */
const char *cpulm_numa_name(cpulm_numa m);
/* ISOLATE's node: the node of the CPU the process ran on at cpulm_numa_init (or at the
 * first call, if init was never called); t's first allowed CPU's node when unknown. */
int cpulm_numa_home_node(const cpulm_topo *t);

/* CPUs for a pool of n threads in resolved mode m: fills cpus[0..n) (n <= cap) and returns
 * 1, or returns 0 when threads should not be pinned: mode NONE with more threads than
 * physical cores (as before NUMA modes existed), or an empty topology. The other modes
 * always pin, wrapping around their list when n exceeds it, so threads never leave the
 * CPUs the mode chose. */
int cpulm_numa_plan_threads(const cpulm_topo *t, cpulm_numa m, int home, int n, int *cpus, int cap);
/* Default thread count for resolved mode m: the mode's physical cores, capped by the
 * cgroup CPU quota (0: none), >= 1. */
int cpulm_numa_plan_default(const cpulm_topo *t, cpulm_numa m, int home, int cgroup_cpus);

typedef enum cpulm_numa_mem_kind {
    CPULM_NUMA_MEM_OS = 0,     /* no policy change: the OS places pages (first touch) */
    CPULM_NUMA_MEM_INTERLEAVE, /* pages round-robin over the nodes of the mask */
    CPULM_NUMA_MEM_PREFER,     /* pages on the (single) node of the mask while it has room */
} cpulm_numa_mem_kind;
/* Memory policy of resolved mode m for the weights; *mask = nodes it uses. OS on a machine
 * with fewer than two memory nodes, and for NONE / NUMACTL. */
cpulm_numa_mem_kind cpulm_numa_plan_memory(const cpulm_topo *t, cpulm_numa m, int home,
                                           uint64_t *mask);

/* ---- applied to this process ---- */

/* Same, for this machine and process (sysfs scan, affinity mask, cgroup quota). */
int cpulm_numa_default_threads(cpulm_numa m);
int cpulm_numa_thread_cpus(cpulm_numa m, int n, int *cpus, int cap);

/* The calling thread's memory policy while a model loads, so everything it first-touches
 * (file pages read through map, repacked copies) follows the mode; map's range also gets
 * the policy (mbind) and, for INTERLEAVE, is pre-faulted now. saved restores the previous
 * thread policy in cpulm_numa_mem_end (a no-op when begin changed nothing). */
typedef struct cpulm_numa_mem {
    int changed;
    int old_mode;
    unsigned long old_mask[4]; /* >= 64 node bits plus the kernel's spare word */
} cpulm_numa_mem;
void cpulm_numa_mem_begin(cpulm_numa m, cpulm_mmap *map, cpulm_numa_mem *saved);
void cpulm_numa_mem_end(cpulm_numa_mem *saved);

#endif
