/* topo.c: CPU topology from the affinity mask, sysfs and cgroups (Linux), and the
 * per-NUMA-mode thread placement lists built from it. */
#define _GNU_SOURCE
#include "topo.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

static char g_root[256] = "/sys";

void cpulm_topo_set_root(const char *root) {
    snprintf(g_root, sizeof g_root, "%s", root ? root : "/sys");
}

/* Reads the first line of <root>/<rel> into buf; 0 on success. */
static int read_sys(char *buf, size_t cap, const char *fmt, ...) CPULM_PRINTF(3, 4);
static int read_sys(char *buf, size_t cap, const char *fmt, ...) {
    char rel[160], path[448];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof rel, fmt, ap);
    va_end(ap);
    snprintf(path, sizeof path, "%s/%s", g_root, rel);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    return ok ? 0 : -1;
}

/* ---- cpulist parsing ---- */

static const char *parse_uint(const char *s, int *v) {
    if (*s < '0' || *s > '9') return NULL;
    long x = 0;
    while (*s >= '0' && *s <= '9') {
        x = x * 10 + (*s++ - '0');
        if (x > (1 << 20)) return NULL; /* far beyond any CPU id: malformed */
    }
    *v = (int)x;
    return s;
}

int cpulm_topo_parse_cpulist(const char *s, int *out, int cap) {
    int n = 0;
    while (*s && *s != '\n') {
        int a, b;
        if (!(s = parse_uint(s, &a))) return -1;
        b = a;
        if (*s == '-' && (!(s = parse_uint(s + 1, &b)) || b < a)) return -1;
        for (int c = a; c <= b; c++, n++)
            if (n < cap) out[n] = c;
        if (*s == ',')
            s++;
        else if (*s && *s != '\n')
            return -1;
    }
    return n;
}

/* ---- scanning ---- */

/* Physical core of cpu: package << 16 | first CPU of its thread_siblings_list. */
static int core_key(int cpu) {
    char line[256];
    int first = cpu, pkg = 0, ids[1];
    if (read_sys(line, sizeof line, "devices/system/cpu/cpu%d/topology/thread_siblings_list",
                 cpu) == 0 &&
        cpulm_topo_parse_cpulist(line, ids, 1) >= 1)
        first = ids[0];
    if (read_sys(line, sizeof line, "devices/system/cpu/cpu%d/topology/physical_package_id", cpu) ==
        0)
        pkg = atoi(line);
    return (pkg & 0x7fff) << 16 | (first & 0xffff);
}

static int affinity(int *cpus) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    int n = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && cpu < CPULM_TOPO_MAX_CPUS; cpu++)
        if (CPU_ISSET(cpu, &set)) cpus[n++] = cpu;
    return n;
}

/* Node ids from <root>/devices/system/node/online, else by probing node0..node63. */
static void scan_node_ids(cpulm_topo *t) {
    char line[1024];
    int ids[CPULM_TOPO_MAX_NODES];
    t->n_nodes = 0;
    int n = read_sys(line, sizeof line, "devices/system/node/online") == 0
                ? cpulm_topo_parse_cpulist(line, ids, CPULM_TOPO_MAX_NODES)
                : -1;
    if (n > CPULM_TOPO_MAX_NODES) n = CPULM_TOPO_MAX_NODES;
    for (int i = 0; i < n; i++)
        if (ids[i] < CPULM_TOPO_MAX_NODES) t->node_id[t->n_nodes++] = ids[i];
    if (n >= 0) return;
    for (int id = 0; id < CPULM_TOPO_MAX_NODES; id++)
        if (read_sys(line, sizeof line, "devices/system/node/node%d/cpulist", id) == 0)
            t->node_id[t->n_nodes++] = id;
}

/* Sets t->node[] from each node's cpulist and t->mem_nodes from has_memory. */
static void scan_nodes(cpulm_topo *t) {
    int list[CPULM_TOPO_MAX_CPUS];
    int node_of[CPULM_TOPO_MAX_CPUS];
    char line[4096];
    for (int c = 0; c < CPULM_TOPO_MAX_CPUS; c++)
        node_of[c] = -1;
    scan_node_ids(t);
    for (int k = 0; k < t->n_nodes; k++) {
        if (read_sys(line, sizeof line, "devices/system/node/node%d/cpulist", t->node_id[k]))
            continue;
        int n = cpulm_topo_parse_cpulist(line, list, CPULM_TOPO_MAX_CPUS);
        for (int i = 0; i < n && i < CPULM_TOPO_MAX_CPUS; i++)
            if (list[i] < CPULM_TOPO_MAX_CPUS) node_of[list[i]] = t->node_id[k];
    }
    if (t->n_nodes == 0) t->node_id[t->n_nodes++] = 0;
    for (int i = 0; i < t->n_cpus; i++)
        t->node[i] = node_of[t->cpu[i]] >= 0 ? node_of[t->cpu[i]] : t->node_id[0];
    t->mem_nodes = 0;
    int n = read_sys(line, sizeof line, "devices/system/node/has_memory") == 0
                ? cpulm_topo_parse_cpulist(line, list, CPULM_TOPO_MAX_CPUS)
                : -1;
    for (int i = 0; i < n && i < CPULM_TOPO_MAX_CPUS; i++)
        if (list[i] < CPULM_TOPO_MAX_NODES) t->mem_nodes |= 1ull << list[i];
    if (n < 0) /* no has_memory file: assume every node has memory */
        for (int k = 0; k < t->n_nodes; k++)
            t->mem_nodes |= 1ull << t->node_id[k];
}

void cpulm_topo_scan(cpulm_topo *t, const int *allowed, int n_allowed) {
    if (allowed) {
        t->n_cpus = 0;
        for (int i = 0; i < n_allowed && t->n_cpus < CPULM_TOPO_MAX_CPUS; i++)
            t->cpu[t->n_cpus++] = allowed[i];
    } else {
        t->n_cpus = affinity(t->cpu);
    }
    for (int i = 0; i < t->n_cpus; i++)
        t->core[i] = core_key(t->cpu[i]);
    scan_nodes(t);
}

int cpulm_topo_node_of(const cpulm_topo *t, int cpu) {
    for (int i = 0; i < t->n_cpus; i++)
        if (t->cpu[i] == cpu) return t->node[i];
    return -1;
}

/* ---- placement ---- */

/* is_primary[i]: cpu[i] is the lowest allowed CPU of its physical core. */
static int mark_primaries(const cpulm_topo *t, unsigned char *is_primary) {
    int n = 0;
    for (int i = 0; i < t->n_cpus; i++) {
        int dup = 0;
        for (int j = 0; j < i && !dup; j++)
            dup = t->core[j] == t->core[i];
        is_primary[i] = (unsigned char)!dup;
        n += !dup;
    }
    return n;
}

/* Appends the CPUs with is_primary[i] == want, one node at a time in turn (only node
 * `only` when only >= 0), to out[n..); returns the new length. */
static int round_robin(const cpulm_topo *t, const unsigned char *is_primary, int want, int only,
                       int *out, int n, int cap) {
    int next[CPULM_TOPO_MAX_NODES] = {0};
    for (int progress = 1; progress;) {
        progress = 0;
        for (int k = 0; k < t->n_nodes; k++) {
            if (only >= 0 && t->node_id[k] != only) continue;
            int i = next[k];
            while (i < t->n_cpus && (t->node[i] != t->node_id[k] || is_primary[i] != want))
                i++;
            if (i >= t->n_cpus) {
                next[k] = t->n_cpus;
                continue;
            }
            next[k] = i + 1;
            if (n < cap) out[n++] = t->cpu[i];
            progress = 1;
        }
    }
    return n;
}

int cpulm_topo_place(const cpulm_topo *t, cpulm_numa mode, int home_node, int *out, int cap,
                     int *n_cores) {
    unsigned char is_primary[CPULM_TOPO_MAX_CPUS];
    int n = 0;
    if (mode == CPULM_NUMA_NUMACTL) {
        for (int i = 0; i < t->n_cpus && n < cap; i++)
            out[n++] = t->cpu[i];
        *n_cores = n;
        return n;
    }
    int n_prim = mark_primaries(t, is_primary);
    if (mode == CPULM_NUMA_ISOLATE) {
        n = round_robin(t, is_primary, 1, home_node, out, 0, cap);
        *n_cores = n;
        if (n > 0) return round_robin(t, is_primary, 0, home_node, out, n, cap);
    }
    if (mode == CPULM_NUMA_DISTRIBUTE) {
        n = round_robin(t, is_primary, 1, -1, out, 0, cap);
        *n_cores = n;
        return round_robin(t, is_primary, 0, -1, out, n, cap);
    }
    for (int i = 0; i < t->n_cpus && n < cap; i++)
        if (is_primary[i]) out[n++] = t->cpu[i];
    *n_cores = n_prim;
    return n;
}

/* ---- defaults ---- */

int cpulm_topo_physical_cpus(int *cpus, int cap) {
    cpulm_topo *t = malloc(sizeof *t); /* 12 KiB: off the stack */
    int n_cores = 0;
    if (t) {
        cpulm_topo_scan(t, NULL, 0);
        if (t->n_cpus) cpulm_topo_place(t, CPULM_NUMA_NONE, 0, cpus, cap, &n_cores);
        free(t);
    }
    if (n_cores > 0) return n_cores;
    if (cap > 0) cpus[0] = -1;
    return 1;
}

int cpulm_topo_cgroup_cpus(void) {
    char line[64];
    long long quota = -1, period = 0;
    if (read_sys(line, sizeof line, "fs/cgroup/cpu.max") == 0) { /* v2: "max 100000" / "q p" */
        char q[32];
        if (sscanf(line, "%31s %lld", q, &period) == 2 && q[0] != 'm') quota = atoll(q);
    } else if (read_sys(line, sizeof line, "fs/cgroup/cpu/cpu.cfs_quota_us") == 0) { /* v1 */
        quota = atoll(line);
        if (read_sys(line, sizeof line, "fs/cgroup/cpu/cpu.cfs_period_us") == 0)
            period = atoll(line);
    }
    if (quota <= 0 || period <= 0) return 0;
    return (int)((quota + period - 1) / period);
}

int cpulm_topo_default_threads(void) {
    int cpus[CPULM_TOPO_MAX_CPUS];
    int n = cpulm_topo_physical_cpus(cpus, CPULM_TOPO_MAX_CPUS);
    int q = cpulm_topo_cgroup_cpus();
    if (q > 0 && q < n) n = q;
    return n < 1 ? 1 : n;
}
