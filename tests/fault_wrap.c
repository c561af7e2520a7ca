/* fault_wrap.c: link-time fault injection for the command-line tests. cpulm-faults is the
 * cpulm command built from the same objects with cpulm_ctx_decode and cpulm_spec_step
 * wrapped (-Wl,--wrap, cmake/cli.cmake): CPULM_FAULT=FN:N:STATUS makes the Nth call (from
 * 1) of FN (decode or spec_step) return STATUS (a cpulm_status number: -1 out of memory,
 * -6 kv cache full) without doing anything; every other call goes through. So a test
 * reaches the error paths of the commands that the engine takes only on out-of-memory or
 * a broken invariant, without a hook in the shipped command. */
#include <stdlib.h>
#include <string.h>

#include "cpulm.h"
#include "spec/spec.h"

cpulm_status __real_cpulm_ctx_decode(cpulm_ctx *ctx, const cpulm_batch *b);
cpulm_status __wrap_cpulm_ctx_decode(cpulm_ctx *ctx, const cpulm_batch *b);
cpulm_status __real_cpulm_spec_step(cpulm_spec *s, cpulm_ctx *ctx, int32_t seq, cpulm_token pending,
                                    const cpulm_spec_pick *pick, cpulm_token *out, int32_t *n_out);
cpulm_status __wrap_cpulm_spec_step(cpulm_spec *s, cpulm_ctx *ctx, int32_t seq, cpulm_token pending,
                                    const cpulm_spec_pick *pick, cpulm_token *out, int32_t *n_out);

/* CPULM_OK, or the status this call of fn is to fail with. Single-threaded callers only
 * (the commands' generation loops). */
static cpulm_status injected(const char *fn, long *calls) {
    const char *e = getenv("CPULM_FAULT");
    size_t n = strlen(fn);
    ++*calls;
    if (!e || strncmp(e, fn, n) != 0 || e[n] != ':') return CPULM_OK;
    char *end;
    long at = strtol(e + n + 1, &end, 10);
    if (*end != ':' || at != *calls) return CPULM_OK;
    return (cpulm_status)strtol(end + 1, NULL, 10);
}

cpulm_status __wrap_cpulm_ctx_decode(cpulm_ctx *ctx, const cpulm_batch *b) {
    static long calls;
    cpulm_status st = injected("decode", &calls);
    return st != CPULM_OK ? st : __real_cpulm_ctx_decode(ctx, b);
}

cpulm_status __wrap_cpulm_spec_step(cpulm_spec *s, cpulm_ctx *ctx, int32_t seq, cpulm_token pending,
                                    const cpulm_spec_pick *pick, cpulm_token *out, int32_t *n_out) {
    static long calls;
    cpulm_status st = injected("spec_step", &calls);
    if (st == CPULM_OK) return __real_cpulm_spec_step(s, ctx, seq, pending, pick, out, n_out);
    *n_out = 0; /* as the step's own errors leave it */
    return st;
}
