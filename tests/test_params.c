/* test_params.c: switches that change library behaviour are parameters, never environment
 * variables the library reads behind its caller (only CPULM_ISA, the kernel-level override
 * of dispatch.c, remains, and it cannot change results beyond the level's numerics). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdlib.h>
#include <string.h>

#include "runtime/context.h"
#include "model/model.h"
#include "test.h"

/* Does the loaded model hold any repacked matrix? */
static int any_packed(const cpulm_model *m) {
    for (int32_t il = 0; il < m->hp.n_layer; il++)
        if (m->layers[il].wq.packed || m->layers[il].w_down.packed) return 1;
    return 0;
}

TEST(params_no_repack_is_a_param_not_the_environment) {
    const char *path = test_shared_path("testdata/models/tiny-llama-q4_0.gguf");
    if (!path) SKIP(t, "CPULM_SHARED tiny-llama-q4_0 not found");
    cpulm_model *m = cpulm_model_load(path, NULL, NULL);
    REQUIRE(t, m != NULL);
    const cpulm_tensor *wq = &m->layers[0].wq;
    const int level_packs = cpulm_kernels_packs(cpulm_kernels_get(), CPULM_DTYPE_Q4_0, wq->ne[1]);
    CHECK_EQ_INT(t, any_packed(m), level_packs);
    cpulm_model_free(m);

    /* the variable the CLI reads does nothing to the library */
    setenv("CPULM_NO_REPACK", "1", 1);
    m = cpulm_model_load(path, NULL, NULL);
    unsetenv("CPULM_NO_REPACK");
    REQUIRE(t, m != NULL);
    CHECK_EQ_INT(t, any_packed(m), level_packs);
    cpulm_model_free(m);

    cpulm_model_params mp = cpulm_model_default_params();
    mp.no_repack = 1;
    m = cpulm_model_load(path, &mp, NULL);
    REQUIRE(t, m != NULL);
    CHECK_EQ_INT(t, any_packed(m), 0);
    cpulm_model_free(m);
}

TEST(params_no_pin_reaches_the_context) {
    const char *path = test_shared_path("models/stories260K.gguf");
    if (!path) SKIP(t, "CPULM_SHARED stories260K not found");
    cpulm_model *m = cpulm_model_load(path, NULL, NULL);
    REQUIRE(t, m != NULL);
    cpulm_ctx_params p = cpulm_ctx_default_params();
    CHECK_EQ_INT(t, p.no_pin, 0);
    p.no_pin = 1;
    p.n_ctx = 32;
    cpulm_ctx *c = cpulm_ctx_new(m, &p, NULL);
    REQUIRE(t, c != NULL);
    CHECK_EQ_INT(t, c->p.no_pin, 1); /* kept for make_pool, which pins only without it */
    cpulm_ctx_free(c);
    cpulm_model_free(m);
}
