/* topo.h: which CPUs this process may use, how they group into physical cores and NUMA
 * nodes, and which CPUs the pool's threads go to in each NUMA mode.
 * Reads sched_getaffinity, sysfs (SMT siblings, node cpulists, nodes with memory) and the
 * cgroup v2/v1 CPU quota. Never fails: without sysfs every allowed CPU is its own core on
 * node 0. Pure placement logic (cpulm_topo_place) works on a filled cpulm_topo, so tests can
 * drive it with fake topologies (cpulm_topo_set_root points the reads at a fake tree). */
#ifndef CPULM_THREADS_TOPO_H
#define CPULM_THREADS_TOPO_H

#include <stdint.h>

#include "cpulm.h"

#define CPULM_TOPO_MAX_CPUS  1024 /* CPU_SETSIZE */
#define CPULM_TOPO_MAX_NODES 64   /* node ids >= 64 are ignored (one 64-bit node mask) */

typedef struct cpulm_topo {
    int n_cpus; /* allowed CPUs (the affinity mask), ascending */
    int cpu[CPULM_TOPO_MAX_CPUS];
    int core[CPULM_TOPO_MAX_CPUS];     /* physical core key: package << 16 | first SMT sibling */
    int node[CPULM_TOPO_MAX_CPUS];     /* NUMA node of cpu[i]; 0 when sysfs lists no nodes */
    int n_nodes;                       /* >= 1 */
    int node_id[CPULM_TOPO_MAX_NODES]; /* ascending */
    uint64_t mem_nodes;                /* bit n: node n has memory (sysfs has_memory) */
} cpulm_topo;

/* Root of the sysfs reads ("/sys" by default; NULL restores it). For tests; not
 * thread-safe against concurrent scans. cgroup files are read under <root>/fs/cgroup. */
void cpulm_topo_set_root(const char *root);

/* Parses a kernel cpulist ("0-3,8,10-11\n"). Writes the first cap ids to out and returns
 * how many the list names, or -1 when malformed. "" (or just "\n") is an empty list. */
int cpulm_topo_parse_cpulist(const char *s, int *out, int cap);

/* Fills t for the allowed CPUs (NULL: this process's affinity mask). */
void cpulm_topo_scan(cpulm_topo *t, const int *allowed, int n_allowed);
/* Node of an allowed CPU, or -1 when cpu is not in t. */
int cpulm_topo_node_of(const cpulm_topo *t, int cpu);

/* CPUs for the pool's threads in mode (NONE, DISTRIBUTE, ISOLATE or NUMACTL; DEFAULT acts
 * as NONE), best first; thread i goes to out[i]. Returns the list length (<= cap) and sets
 * *n_cores to the number of threads the mode uses by default (before any cgroup cap):
 *   NONE:       one CPU per physical core (the lowest sibling), ascending;
 *   DISTRIBUTE: one CPU per physical core, taken round-robin over the nodes (node order
 *               ascending, each node's cores ascending), then the remaining SMT siblings
 *               round-robin the same way;
 *   ISOLATE:    as DISTRIBUTE, but only CPUs of home_node (NONE when it has none);
 *   NUMACTL:    every allowed CPU, ascending (exactly what numactl / taskset allowed). */
int cpulm_topo_place(const cpulm_topo *t, cpulm_numa mode, int home_node, int *out, int cap,
                     int *n_cores);

/* Fills cpus with one allowed CPU per physical core (the lowest-numbered sibling), at most
 * cap; returns how many physical cores are usable. */
int cpulm_topo_physical_cpus(int *cpus, int cap);
/* Default thread count: physical cores usable, capped by the cgroup CPU quota, >= 1. */
int cpulm_topo_default_threads(void);
/* CPU quota of the cgroup in CPUs (rounded up), or 0 when unlimited / unknown. */
int cpulm_topo_cgroup_cpus(void);

#endif
