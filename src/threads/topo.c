/* topo.c: CPU topology from the affinity mask, sysfs and cgroups (Linux). */
#define _GNU_SOURCE
#include "topo.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

/* First CPU listed in the cpu's thread_siblings_list ("0,64" or "0-1"), or cpu itself. */
static int core_key(int cpu) {
    char path[128];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", cpu);
    FILE *f = fopen(path, "r");
    if (!f) return cpu;
    int first = cpu;
    if (fscanf(f, "%d", &first) != 1) first = cpu;
    fclose(f);
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
    int pkg = 0;
    if ((f = fopen(path, "r"))) {
        if (fscanf(f, "%d", &pkg) != 1) pkg = 0;
        fclose(f);
    }
    return pkg * 65536 + first;
}

int cpulm_topo_physical_cpus(int *cpus, int cap) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        if (cap > 0) cpus[0] = -1;
        return 1;
    }
    int keys[CPU_SETSIZE];
    int n = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &set)) continue;
        int k = core_key(cpu), dup = 0;
        for (int j = 0; j < n && !dup; j++) dup = keys[j] == k;
        if (dup) continue;
        if (n < cap) cpus[n] = cpu;
        keys[n++] = k;
    }
    return n > 0 ? n : 1;
}

int cpulm_topo_cgroup_cpus(void) {
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r"); /* cgroup v2: "max 100000" or "q p" */
    long long quota = -1, period = 0;
    if (f) {
        char q[32];
        if (fscanf(f, "%31s %lld", q, &period) == 2 && q[0] != 'm') quota = atoll(q);
        fclose(f);
    } else if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r"))) { /* v1 */
        if (fscanf(f, "%lld", &quota) != 1) quota = -1;
        fclose(f);
        if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r"))) {
            if (fscanf(f, "%lld", &period) != 1) period = 0;
            fclose(f);
        }
    }
    if (quota <= 0 || period <= 0) return 0;
    return (int)((quota + period - 1) / period);
}

int cpulm_topo_default_threads(void) {
    int cpus[CPU_SETSIZE];
    int n = cpulm_topo_physical_cpus(cpus, CPU_SETSIZE);
    int q = cpulm_topo_cgroup_cpus();
    if (q > 0 && q < n) n = q;
    return n < 1 ? 1 : n;
}
