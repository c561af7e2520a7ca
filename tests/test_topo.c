/* test_topo.c: cpulist parsing, topology scans of fake sysfs trees, and the per-mode thread
 * placement lists on a two-node, 16-CPU fake machine (2 SMT threads per core). */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "test.h"
#include "threads/topo.h"

/* ---- fake sysfs ---- */

static int put_file(const char *root, const char *rel, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++) /* mkdir -p of the parents */
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

/* Two packages = two nodes; node0 CPUs 0-3 + siblings 8-11, node1 CPUs 4-7 + siblings
 * 12-15 (cpu c and c + 8 share a core, as Linux numbers SMT siblings); cgroup quota 2.5. */
const char *test_topo_fake_two_nodes(void);
const char *test_topo_fake_two_nodes(void) {
    static char root[300];
    if (root[0]) return root;
    snprintf(root, sizeof root, "%s/sys2node", test_tmp_dir());
    mkdir(root, 0755);
    int bad = put_file(root, "devices/system/node/online", "0-1\n");
    bad |= put_file(root, "devices/system/node/has_memory", "0-1\n");
    bad |= put_file(root, "devices/system/node/node0/cpulist", "0-3,8-11\n");
    bad |= put_file(root, "devices/system/node/node1/cpulist", "4-7,12-15\n");
    bad |= put_file(root, "fs/cgroup/cpu.max", "250000 100000\n");
    for (int c = 0; c < 16; c++) {
        char rel[128], text[32];
        snprintf(rel, sizeof rel, "devices/system/cpu/cpu%d/topology/thread_siblings_list", c);
        snprintf(text, sizeof text, "%d,%d\n", c % 8, c % 8 + 8);
        bad |= put_file(root, rel, text);
        snprintf(rel, sizeof rel, "devices/system/cpu/cpu%d/topology/physical_package_id", c);
        snprintf(text, sizeof text, "%d\n", c % 8 / 4);
        bad |= put_file(root, rel, text);
    }
    if (bad) root[0] = '\0';
    return root[0] ? root : NULL;
}

static void scan_fake(cpulm_topo *t, const int *allowed, int n) {
    cpulm_topo_set_root(test_topo_fake_two_nodes());
    cpulm_topo_scan(t, allowed, n);
    cpulm_topo_set_root(NULL);
}

static const int all16[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

static int same_list(const int *got, int n, const int *want, int n_want) {
    if (n != n_want) return 0;
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) return 0;
    return 1;
}

/* ---- tests ---- */

TEST(topo_parse_cpulist) {
    int c[16];
    CHECK_EQ_INT(t, cpulm_topo_parse_cpulist("0-3,8,10-11\n", c, 16), 7);
    static const int want[] = {0, 1, 2, 3, 8, 10, 11};
    CHECK(t, same_list(c, 7, want, 7));
    CHECK_EQ_INT(t, cpulm_topo_parse_cpulist("", c, 16), 0);
    CHECK_EQ_INT(t, cpulm_topo_parse_cpulist("\n", c, 16), 0);
    CHECK_EQ_INT(t, cpulm_topo_parse_cpulist("5", c, 16), 1);
    CHECK_EQ_INT(t, c[0], 5);
    /* cap: the count is still the whole list's */
    CHECK_EQ_INT(t, cpulm_topo_parse_cpulist("0-99", c, 2), 100);
    CHECK(t, c[0] == 0 && c[1] == 1);
    const char *bad[] = {"3-1", "a", "1,,2", "1-", "1 2", "-1", "0-99999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_EQ_INT(t, cpulm_topo_parse_cpulist(bad[i], c, 16), -1);
}

TEST(topo_scan_fake_two_nodes) {
    REQUIRE(t, test_topo_fake_two_nodes());
    static cpulm_topo tp;
    scan_fake(&tp, all16, 16);
    CHECK_EQ_INT(t, tp.n_cpus, 16);
    CHECK_EQ_INT(t, tp.n_nodes, 2);
    CHECK(t, tp.node_id[0] == 0 && tp.node_id[1] == 1);
    CHECK(t, tp.mem_nodes == 3);
    for (int c = 0; c < 16; c++) {
        CHECK_EQ_INT(t, tp.node[c], c % 8 / 4);
        CHECK_EQ_INT(t, cpulm_topo_node_of(&tp, c), c % 8 / 4);
        CHECK_EQ_INT(t, tp.core[c], tp.core[c % 8]); /* SMT siblings share a core */
    }
    CHECK(t, tp.core[0] != tp.core[1] && tp.core[3] != tp.core[4]);
    CHECK_EQ_INT(t, cpulm_topo_node_of(&tp, 99), -1);
    cpulm_topo_set_root(test_topo_fake_two_nodes());
    CHECK_EQ_INT(t, cpulm_topo_cgroup_cpus(), 3); /* 2.5 CPUs rounds up */
    cpulm_topo_set_root(NULL);
}

TEST(topo_scan_without_sysfs) {
    char root[300];
    snprintf(root, sizeof root, "%s/empty_sys", test_tmp_dir());
    mkdir(root, 0755);
    static cpulm_topo tp;
    static const int cpus[] = {0, 2, 5};
    cpulm_topo_set_root(root);
    cpulm_topo_scan(&tp, cpus, 3);
    CHECK_EQ_INT(t, cpulm_topo_cgroup_cpus(), 0);
    cpulm_topo_set_root(NULL);
    CHECK_EQ_INT(t, tp.n_nodes, 1);
    CHECK(t, tp.mem_nodes == 1);
    int out[8], n_cores = 0;
    /* every CPU its own core on node 0: every mode uses all three */
    for (int m = CPULM_NUMA_NONE; m <= CPULM_NUMA_NUMACTL; m++) {
        int n = cpulm_topo_place(&tp, (cpulm_numa)m, 0, out, 8, &n_cores);
        CHECK(t, same_list(out, n, cpus, 3));
        CHECK_EQ_INT(t, n_cores, 3);
    }
}

TEST(topo_place_two_nodes) {
    REQUIRE(t, test_topo_fake_two_nodes());
    static cpulm_topo tp;
    scan_fake(&tp, all16, 16);
    int out[32], n_cores = 0, n;
    static const int none[] = {0, 1, 2, 3, 4, 5, 6, 7};
    n = cpulm_topo_place(&tp, CPULM_NUMA_NONE, 0, out, 32, &n_cores);
    CHECK(t, same_list(out, n, none, 8));
    CHECK_EQ_INT(t, n_cores, 8);
    static const int dist[] = {0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15};
    n = cpulm_topo_place(&tp, CPULM_NUMA_DISTRIBUTE, 0, out, 32, &n_cores);
    CHECK(t, same_list(out, n, dist, 16));
    CHECK_EQ_INT(t, n_cores, 8);
    static const int iso1[] = {4, 5, 6, 7, 12, 13, 14, 15};
    n = cpulm_topo_place(&tp, CPULM_NUMA_ISOLATE, 1, out, 32, &n_cores);
    CHECK(t, same_list(out, n, iso1, 8));
    CHECK_EQ_INT(t, n_cores, 4);
    n = cpulm_topo_place(&tp, CPULM_NUMA_NUMACTL, 0, out, 32, &n_cores);
    CHECK(t, same_list(out, n, all16, 16));
    CHECK_EQ_INT(t, n_cores, 16);
    /* cap bounds the list */
    n = cpulm_topo_place(&tp, CPULM_NUMA_DISTRIBUTE, 0, out, 3, &n_cores);
    CHECK(t, same_list(out, n, dist, 3));
}

TEST(topo_place_respects_affinity) {
    REQUIRE(t, test_topo_fake_two_nodes());
    static cpulm_topo tp;
    static const int allowed[] = {0, 1, 4, 8, 12}; /* as `taskset -c 0,1,4,8,12` */
    scan_fake(&tp, allowed, 5);
    int out[16], n_cores = 0, n;
    static const int dist[] = {0, 4, 1, 8, 12}; /* cores 0, 4, 1, then siblings 8, 12 */
    n = cpulm_topo_place(&tp, CPULM_NUMA_DISTRIBUTE, 0, out, 16, &n_cores);
    CHECK(t, same_list(out, n, dist, 5));
    CHECK_EQ_INT(t, n_cores, 3);
    static const int none[] = {0, 1, 4};
    n = cpulm_topo_place(&tp, CPULM_NUMA_NONE, 0, out, 16, &n_cores);
    CHECK(t, same_list(out, n, none, 3));
    n = cpulm_topo_place(&tp, CPULM_NUMA_NUMACTL, 0, out, 16, &n_cores);
    CHECK(t, same_list(out, n, allowed, 5));
    static const int iso0[] = {0, 1, 8};
    n = cpulm_topo_place(&tp, CPULM_NUMA_ISOLATE, 0, out, 16, &n_cores);
    CHECK(t, same_list(out, n, iso0, 3));
    CHECK_EQ_INT(t, n_cores, 2);
    /* a home node with no allowed CPU: isolate falls back to the whole mask */
    static cpulm_topo t0;
    static const int only0[] = {0, 1};
    scan_fake(&t0, only0, 2);
    n = cpulm_topo_place(&t0, CPULM_NUMA_ISOLATE, 1, out, 16, &n_cores);
    CHECK(t, same_list(out, n, only0, 2));
    CHECK_EQ_INT(t, n_cores, 2);
}

TEST(topo_this_machine) {
    static cpulm_topo tp;
    cpulm_topo_scan(&tp, NULL, 0);
    REQUIRE(t, tp.n_cpus >= 1);
    int cpus[CPULM_TOPO_MAX_CPUS];
    const int n_phys = cpulm_topo_physical_cpus(cpus, CPULM_TOPO_MAX_CPUS);
    CHECK(t, n_phys >= 1 && n_phys <= tp.n_cpus);
    for (int i = 0; i < n_phys; i++)
        CHECK(t, cpulm_topo_node_of(&tp, cpus[i]) >= 0);
    const int d = cpulm_topo_default_threads();
    CHECK(t, d >= 1 && d <= n_phys);
}
