/* test_numa.c: NUMA modes: parsing, the thread / default-count / memory plans on a fake
 * two-node machine, the describe text, and every mode end to end on this machine (which
 * must match the default mode bit for bit when it has one node). */
#define _GNU_SOURCE
#include <string.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "test.h"
#include "threads/numa.h"

const char *test_topo_fake_two_nodes(void); /* test_topo.c */

static void scan_fake(cpulm_topo *tp) {
    static const int all16[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    cpulm_topo_set_root(test_topo_fake_two_nodes());
    cpulm_topo_scan(tp, all16, 16);
    cpulm_topo_set_root(NULL);
}

TEST(numa_parse) {
    cpulm_numa m = CPULM_NUMA_DEFAULT;
    CHECK(t, cpulm_numa_parse("distribute", &m) == CPULM_OK && m == CPULM_NUMA_DISTRIBUTE);
    CHECK(t, cpulm_numa_parse("isolate", &m) == CPULM_OK && m == CPULM_NUMA_ISOLATE);
    CHECK(t, cpulm_numa_parse("numactl", &m) == CPULM_OK && m == CPULM_NUMA_NUMACTL);
    CHECK(t, cpulm_numa_parse("none", &m) == CPULM_OK && m == CPULM_NUMA_NONE);
    CHECK(t, cpulm_numa_parse("mirror", &m) == CPULM_ERR_INVALID_ARG);
    CHECK(t, cpulm_numa_parse("", &m) == CPULM_ERR_INVALID_ARG);
    CHECK(t, cpulm_numa_parse(NULL, &m) == CPULM_ERR_INVALID_ARG);
    CHECK(t, strcmp(cpulm_numa_name(CPULM_NUMA_ISOLATE), "isolate") == 0);
    CHECK(t, cpulm_numa_resolve(CPULM_NUMA_NUMACTL) == CPULM_NUMA_NUMACTL);
}

TEST(numa_init_sets_process_mode) {
    CHECK(t, cpulm_numa_resolve(CPULM_NUMA_DEFAULT) == CPULM_NUMA_NONE);
    cpulm_numa_init(CPULM_NUMA_DISTRIBUTE);
    CHECK(t, cpulm_numa_resolve(CPULM_NUMA_DEFAULT) == CPULM_NUMA_DISTRIBUTE);
    CHECK(t, cpulm_numa_resolve(CPULM_NUMA_NUMACTL) == CPULM_NUMA_NUMACTL); /* explicit wins */
    cpulm_numa_init((cpulm_numa)99);
    CHECK(t, cpulm_numa_resolve(CPULM_NUMA_DEFAULT) == CPULM_NUMA_NONE);
    cpulm_numa_init(CPULM_NUMA_NONE); /* leave the process as the other tests expect */
}

TEST(numa_plan_threads_two_nodes) {
    REQUIRE(t, test_topo_fake_two_nodes());
    static cpulm_topo tp;
    scan_fake(&tp);
    int cpus[64];
    /* distribute wraps around its 16-CPU list rather than leaving the chosen CPUs */
    static const int dist[] = {0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15};
    REQUIRE(t, cpulm_numa_plan_threads(&tp, CPULM_NUMA_DISTRIBUTE, 0, 20, cpus, 64));
    for (int i = 0; i < 20; i++)
        CHECK_EQ_INT(t, cpus[i], dist[i % 16]);
    static const int iso1[] = {4, 5, 6, 7, 12, 13};
    REQUIRE(t, cpulm_numa_plan_threads(&tp, CPULM_NUMA_ISOLATE, 1, 6, cpus, 64));
    for (int i = 0; i < 6; i++)
        CHECK_EQ_INT(t, cpus[i], iso1[i]);
    /* none keeps the old rule: pin only while each thread has its own physical core */
    REQUIRE(t, cpulm_numa_plan_threads(&tp, CPULM_NUMA_NONE, 0, 8, cpus, 64));
    for (int i = 0; i < 8; i++)
        CHECK_EQ_INT(t, cpus[i], i);
    CHECK(t, !cpulm_numa_plan_threads(&tp, CPULM_NUMA_NONE, 0, 9, cpus, 64));
    CHECK(t, !cpulm_numa_plan_threads(&tp, CPULM_NUMA_DISTRIBUTE, 0, 65, cpus, 64));
}

TEST(numa_plan_default_threads) {
    REQUIRE(t, test_topo_fake_two_nodes());
    static cpulm_topo tp;
    scan_fake(&tp);
    CHECK_EQ_INT(t, cpulm_numa_plan_default(&tp, CPULM_NUMA_NONE, 0, 0), 8);
    CHECK_EQ_INT(t, cpulm_numa_plan_default(&tp, CPULM_NUMA_DISTRIBUTE, 0, 0), 8);
    CHECK_EQ_INT(t, cpulm_numa_plan_default(&tp, CPULM_NUMA_ISOLATE, 1, 0), 4);
    CHECK_EQ_INT(t, cpulm_numa_plan_default(&tp, CPULM_NUMA_NUMACTL, 0, 0), 16);
    CHECK_EQ_INT(t, cpulm_numa_plan_default(&tp, CPULM_NUMA_DISTRIBUTE, 0, 3), 3); /* cgroup */
    CHECK_EQ_INT(t, cpulm_numa_plan_default(&tp, CPULM_NUMA_ISOLATE, 1, 6), 4);
}

TEST(numa_plan_memory) {
    REQUIRE(t, test_topo_fake_two_nodes());
    static cpulm_topo tp;
    scan_fake(&tp);
    uint64_t mask = 99;
    CHECK(t, cpulm_numa_plan_memory(&tp, CPULM_NUMA_DISTRIBUTE, 0, &mask) ==
                     CPULM_NUMA_MEM_INTERLEAVE &&
                 mask == 3);
    CHECK(t, cpulm_numa_plan_memory(&tp, CPULM_NUMA_ISOLATE, 1, &mask) == CPULM_NUMA_MEM_PREFER &&
                 mask == 2);
    CHECK(t, cpulm_numa_plan_memory(&tp, CPULM_NUMA_NUMACTL, 0, &mask) == CPULM_NUMA_MEM_OS &&
                 mask == 0);
    CHECK(t, cpulm_numa_plan_memory(&tp, CPULM_NUMA_NONE, 0, &mask) == CPULM_NUMA_MEM_OS);
    tp.mem_nodes = 1; /* a single memory node: nothing to spread over */
    CHECK(t, cpulm_numa_plan_memory(&tp, CPULM_NUMA_DISTRIBUTE, 0, &mask) == CPULM_NUMA_MEM_OS);
    CHECK(t, cpulm_numa_plan_memory(&tp, CPULM_NUMA_ISOLATE, 0, &mask) == CPULM_NUMA_MEM_OS);
}

TEST(numa_describe_text) {
    char buf[4096];
    size_t need = 0;
    REQUIRE(t, cpulm_numa_describe(CPULM_NUMA_NONE, buf, sizeof buf, &need) == CPULM_OK);
    CHECK_EQ_INT(t, (long)need, (long)strlen(buf) + 1);
    char want[64];
    snprintf(want, sizeof want, "threads:       %d by default",
             cpulm_numa_default_threads(CPULM_NUMA_NONE));
    CHECK(t, strstr(buf, want) != NULL);
    CHECK(t, strstr(buf, "numa mode:     none") != NULL);
    char small[8];
    CHECK(t,
          cpulm_numa_describe(CPULM_NUMA_NONE, small, sizeof small, &need) == CPULM_ERR_TOO_SMALL);
    CHECK_EQ_INT(t, (long)strlen(small), 7);
    /* on the fake two-node tree (with this process's real affinity mask) */
    REQUIRE(t, test_topo_fake_two_nodes());
    cpulm_topo_set_root(test_topo_fake_two_nodes());
    cpulm_status s = cpulm_numa_describe(CPULM_NUMA_DISTRIBUTE, buf, sizeof buf, NULL);
    cpulm_topo_set_root(NULL);
    REQUIRE(t, s == CPULM_OK);
    CHECK(t, strstr(buf, "numa nodes:    2 (node0: ") != NULL);
    CHECK(t, strstr(buf, "weights: interleaved over nodes 0-1") != NULL);
    CHECK(t, strstr(buf, "cgroup CPU quota 3 CPUs") != NULL);
}

/* Greedy logits of a short prompt with model and context in mode m. */
static int run_mode(test_ctx *t, const char *path, cpulm_numa m, float *out, int *n_threads) {
    cpulm_model_params mp = cpulm_model_default_params();
    mp.numa = m;
    cpulm_model *model = cpulm_model_load(path, &mp, NULL);
    if (!model) return 0;
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.numa = m;
    cp.n_ctx = 64;
    cpulm_ctx *ctx = cpulm_ctx_new(model, &cp, NULL);
    static const cpulm_token toks[] = {1, 403, 407, 261, 378};
    cpulm_batch b = {.n = 5, .token = toks};
    int ok = ctx && cpulm_ctx_decode(ctx, &b) == CPULM_OK;
    if (ok) {
        memcpy(out, cpulm_ctx_logits(ctx, 0), sizeof(float) * (size_t)cpulm_vocab_n(model));
        *n_threads = cpulm_ctx_threads(ctx);
    }
    CHECK(t, ok);
    cpulm_ctx_free(ctx);
    cpulm_model_free(model);
    return ok;
}

TEST(numa_modes_end_to_end) {
    const char *path = test_shared_path("models/stories260K.gguf");
    if (!path) SKIP(t, "stories260K.gguf not found (CPULM_SHARED)");
    static float ref[512], got[512];
    int n_ref = 0, n_got = 0;
    REQUIRE(t, run_mode(t, path, CPULM_NUMA_NONE, ref, &n_ref));
    CHECK_EQ_INT(t, n_ref, cpulm_numa_default_threads(CPULM_NUMA_NONE));
    static cpulm_topo tp;
    cpulm_topo_scan(&tp, NULL, 0);
    for (int m = CPULM_NUMA_DISTRIBUTE; m <= CPULM_NUMA_NUMACTL; m++) {
        REQUIRE(t, run_mode(t, path, (cpulm_numa)m, got, &n_got));
        CHECK_EQ_INT(t, n_got, cpulm_numa_default_threads((cpulm_numa)m));
        if (tp.n_nodes == 1 && n_got == n_ref) /* same threads, same CPUs: same bits */
            CHECK(t, memcmp(ref, got, sizeof(float) * 512) == 0);
        else
            for (int i = 0; i < 512; i++)
                CHECK_NEAR(t, got[i], ref[i], 1e-4);
    }
}

/* The calling thread's memory policy mode and first mask word; -1 where unknown. */
static int thread_policy(unsigned long *mask) {
    int mode = -1;
    unsigned long w[4] = {0};
#if defined(__linux__) && defined(SYS_get_mempolicy)
    if (syscall(SYS_get_mempolicy, &mode, w, 64ul + 1, NULL, 0) != 0) mode = -1;
#endif
    *mask = w[0];
    return mode;
}

TEST(numa_load_on_fake_nodes_restores_policy) {
    /* distribute on a fake two-node tree runs the whole memory path (this kernel clips the
     * interleave mask to its one node): the model loads, computes, and the loading thread's
     * memory policy is what it was before */
    const char *path = test_shared_path("models/stories260K.gguf");
    if (!path) SKIP(t, "stories260K.gguf not found (CPULM_SHARED)");
    REQUIRE(t, test_topo_fake_two_nodes());
    unsigned long mask0, mask1;
    const int mode0 = thread_policy(&mask0);
    cpulm_model_params mp = cpulm_model_default_params();
    mp.numa = CPULM_NUMA_DISTRIBUTE;
    cpulm_topo_set_root(test_topo_fake_two_nodes());
    cpulm_model *m = cpulm_model_load(path, &mp, NULL);
    cpulm_topo_set_root(NULL);
    REQUIRE(t, m != NULL);
    const int mode1 = thread_policy(&mask1);
    CHECK_EQ_INT(t, mode1, mode0);
    CHECK(t, mask1 == mask0);
    cpulm_ctx *ctx = cpulm_ctx_new(m, NULL, NULL);
    static const cpulm_token toks[] = {1, 403, 407, 261, 378};
    cpulm_batch b = {.n = 5, .token = toks};
    CHECK(t, ctx && cpulm_ctx_decode(ctx, &b) == CPULM_OK);
    cpulm_ctx_free(ctx);
    cpulm_model_free(m);
    cpulm_numa_mem none;
    cpulm_numa_mem_begin(CPULM_NUMA_NONE, NULL, &none); /* NONE never touches the policy */
    CHECK_EQ_INT(t, none.changed, 0);
    cpulm_numa_mem_end(&none);
}
