/* topo.h: which CPUs this process may use, and one CPU per physical core among them.
 * Reads sched_getaffinity, sysfs topology (SMT siblings) and the cgroup v2/v1 CPU quota.
 * Never fails: without sysfs every allowed CPU counts as a core. */
#ifndef CPULM_THREADS_TOPO_H
#define CPULM_THREADS_TOPO_H

/* Fills cpus with one allowed CPU per physical core (the lowest-numbered sibling), at most
 * cap; returns how many physical cores are usable. */
int cpulm_topo_physical_cpus(int *cpus, int cap);
/* Default thread count: physical cores usable, capped by the cgroup CPU quota, >= 1. */
int cpulm_topo_default_threads(void);
/* CPU quota of the cgroup in CPUs (rounded up), or 0 when unlimited / unknown. */
int cpulm_topo_cgroup_cpus(void);

#endif
