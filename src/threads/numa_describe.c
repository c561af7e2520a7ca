/* numa_describe.c: cpulm_numa_describe, the thread and NUMA part of `cpulm info --cpu`:
 * the default thread count and what decided it, the nodes, and a mode's placement. Reads
 * the same topology and plans the contexts use, so the text cannot drift from behaviour. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "numa.h"

/* "0-3,8" for ascending lists, else "0 4 1 5"; at most 64 entries, then "...". */
static void put_cpus(cpulm_buf *b, const int *c, int n) {
    int ascending = 1;
    for (int i = 1; i < n; i++)
        ascending &= c[i] > c[i - 1];
    if (!ascending) {
        for (int i = 0; i < n && i < 64; i++)
            cpulm_buf_printf(b, "%s%d", i ? " " : "", c[i]);
        if (n > 64) cpulm_buf_puts(b, " ...");
        return;
    }
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && c[j + 1] == c[j] + 1)
            j++;
        cpulm_buf_printf(b, "%s%d", i ? "," : "", c[i]);
        if (j > i) cpulm_buf_printf(b, "-%d", c[j]);
        i = j + 1;
    }
}

static void put_threads(cpulm_buf *b, const cpulm_topo *t, cpulm_numa m, int home) {
    int list[CPULM_TOPO_MAX_CPUS], n_cores = 0, cores_all = 0;
    cpulm_topo_place(t, m, home, list, CPULM_TOPO_MAX_CPUS, &n_cores);
    cpulm_topo_place(t, CPULM_NUMA_NONE, home, list, CPULM_TOPO_MAX_CPUS, &cores_all);
    const int quota = cpulm_topo_cgroup_cpus();
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    cpulm_buf_printf(b,
                     "threads:       %d by default = ", cpulm_numa_plan_default(t, m, home, quota));
    if (m == CPULM_NUMA_NUMACTL)
        cpulm_buf_printf(b, "%d CPUs in the affinity mask", n_cores);
    else if (m == CPULM_NUMA_ISOLATE && n_cores != cores_all)
        cpulm_buf_printf(b, "%d physical cores of node %d in the affinity mask", n_cores, home);
    else
        cpulm_buf_printf(b, "%d physical cores in the affinity mask", n_cores);
    if (quota > 0)
        cpulm_buf_printf(b, "; cgroup CPU quota %d CPU%s%s", quota, quota > 1 ? "s" : "",
                         quota < n_cores ? " (caps it)" : "");
    else
        cpulm_buf_puts(b, "; no cgroup CPU quota");
    cpulm_buf_printf(b, "\naffinity:      %d of %ld online CPUs allowed (", t->n_cpus, online);
    put_cpus(b, t->cpu, t->n_cpus);
    cpulm_buf_printf(b, "), %d physical cores\n", cores_all);
}

static void put_nodes(cpulm_buf *b, const cpulm_topo *t) {
    cpulm_buf_printf(b, "numa nodes:    %d", t->n_nodes);
    for (int k = 0; k < t->n_nodes; k++) {
        int cpus[CPULM_TOPO_MAX_CPUS], n = 0;
        for (int i = 0; i < t->n_cpus; i++)
            if (t->node[i] == t->node_id[k]) cpus[n++] = t->cpu[i];
        cpulm_buf_printf(b, "%snode%d: allowed cpus ", k ? "; " : " (", t->node_id[k]);
        if (n)
            put_cpus(b, cpus, n);
        else
            cpulm_buf_puts(b, "none");
        if (t->node_id[k] < 64 && (t->mem_nodes >> t->node_id[k] & 1))
            cpulm_buf_puts(b, ", memory");
    }
    cpulm_buf_puts(b, ")\n");
}

static void put_mode(cpulm_buf *b, const cpulm_topo *t, cpulm_numa m, int home) {
    int cpus[CPULM_TOPO_MAX_CPUS];
    const int n = cpulm_numa_plan_default(t, m, home, cpulm_topo_cgroup_cpus());
    cpulm_buf_printf(b, "numa mode:     %s", cpulm_numa_name(m));
    if (m == CPULM_NUMA_ISOLATE) cpulm_buf_printf(b, " (home node %d)", home);
    if (cpulm_numa_plan_threads(t, m, home, n, cpus, CPULM_TOPO_MAX_CPUS)) {
        cpulm_buf_printf(b, "; %d threads pinned to CPUs ", n);
        put_cpus(b, cpus, n);
    } else {
        cpulm_buf_puts(b, "; threads not pinned");
    }
    uint64_t mask;
    cpulm_numa_mem_kind k = cpulm_numa_plan_memory(t, m, home, &mask);
    cpulm_buf_puts(b, "; weights: ");
    if (k == CPULM_NUMA_MEM_OS) {
        cpulm_buf_puts(b, "OS placement (first touch)");
    } else {
        int nodes[64], nn = 0;
        for (int i = 0; i < 64; i++)
            if (mask >> i & 1) nodes[nn++] = i;
        cpulm_buf_puts(b, k == CPULM_NUMA_MEM_INTERLEAVE ? "interleaved over nodes "
                                                         : "preferred on node ");
        put_cpus(b, nodes, nn);
    }
    cpulm_buf_puts(b, "\n");
}

cpulm_status cpulm_numa_describe(cpulm_numa mode, char *buf, size_t cap, size_t *n_out) {
    cpulm_topo *t = malloc(sizeof *t);
    if (!t) return CPULM_ERR_NOMEM;
    cpulm_topo_scan(t, NULL, 0);
    const cpulm_numa m = cpulm_numa_resolve(mode);
    const int home = cpulm_numa_home_node(t);
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    put_threads(&b, t, m, home);
    put_nodes(&b, t);
    put_mode(&b, t, m, home);
    free(t);
    cpulm_status s = cpulm_buf_status(&b);
    if (s == CPULM_OK) {
        if (n_out) *n_out = b.len + 1;
        if (cap > 0) {
            size_t n = b.len < cap - 1 ? b.len : cap - 1;
            memcpy(buf, b.data, n);
            buf[n] = '\0';
        }
        if (b.len + 1 > cap) s = CPULM_ERR_TOO_SMALL;
    }
    cpulm_buf_release(&b);
    return s;
}
