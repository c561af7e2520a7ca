/* ssm_state.c: per-sequence recurrent state of hybrid models (see ssm_state.h). */
#include "ssm_state.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

uint64_t cpulm_ssm_bytes_for(int32_t n_layer, int32_t n_seq, int64_t conv_floats,
                             int64_t state_floats) {
    return sizeof(float) * (uint64_t)n_layer * (uint64_t)n_seq *
           (uint64_t)(conv_floats + state_floats);
}

cpulm_status cpulm_ssm_init(cpulm_ssm *s, int32_t n_layer, int32_t n_seq, int64_t conv_floats,
                            int64_t state_floats, cpulm_error *err) {
    memset(s, 0, sizeof *s);
    if (n_layer < 0 || n_seq < 1 || conv_floats < 0 || state_floats < 0)
        return cpulm_errf(err, CPULM_ERR_INVALID_ARG, "recurrent state: bad sizes");
    s->n_layer = n_layer;
    s->n_seq = n_seq;
    s->conv_floats = conv_floats;
    s->state_floats = state_floats;
    if (n_layer == 0) return CPULM_OK;
    const size_t runs = (size_t)n_layer * (size_t)n_seq;
    s->conv = calloc(runs * (size_t)conv_floats + 1, sizeof(float));
    s->state = calloc(runs * (size_t)state_floats + 1, sizeof(float));
    s->stale = calloc((size_t)n_seq, 1);
    if (!s->conv || !s->state || !s->stale) {
        cpulm_ssm_release(s);
        return cpulm_errf(err, CPULM_ERR_NOMEM, "recurrent state: out of memory");
    }
    return CPULM_OK;
}

void cpulm_ssm_release(cpulm_ssm *s) {
    free(s->conv);
    free(s->state);
    free(s->stale);
    s->conv = s->state = NULL;
    s->stale = NULL;
}

void cpulm_ssm_seq_clear(cpulm_ssm *s, int32_t seq) {
    if (s->stale) s->stale[seq] = 0;
    for (int32_t il = 0; il < s->n_layer; il++) {
        memset(cpulm_ssm_conv(s, il, seq), 0, sizeof(float) * (size_t)s->conv_floats);
        memset(cpulm_ssm_state(s, il, seq), 0, sizeof(float) * (size_t)s->state_floats);
    }
}

void cpulm_ssm_seq_cp(cpulm_ssm *s, int32_t src, int32_t dst) {
    if (src == dst) return;
    if (s->stale) s->stale[dst] = s->stale[src];
    for (int32_t il = 0; il < s->n_layer; il++) {
        memcpy(cpulm_ssm_conv(s, il, dst), cpulm_ssm_conv(s, il, src),
               sizeof(float) * (size_t)s->conv_floats);
        memcpy(cpulm_ssm_state(s, il, dst), cpulm_ssm_state(s, il, src),
               sizeof(float) * (size_t)s->state_floats);
    }
}

uint64_t cpulm_ssm_seq_bytes(const cpulm_ssm *s) {
    return sizeof(float) * (uint64_t)s->n_layer * (uint64_t)(s->conv_floats + s->state_floats);
}

void cpulm_ssm_seq_get(const cpulm_ssm *s, int32_t seq, uint8_t *dst) {
    const size_t cb = sizeof(float) * (size_t)s->conv_floats;
    const size_t sb = sizeof(float) * (size_t)s->state_floats;
    for (int32_t il = 0; il < s->n_layer; il++, dst += cb + sb) {
        memcpy(dst, cpulm_ssm_conv(s, il, seq), cb);
        memcpy(dst + cb, cpulm_ssm_state(s, il, seq), sb);
    }
}

void cpulm_ssm_seq_set(cpulm_ssm *s, int32_t seq, const uint8_t *src) {
    const size_t cb = sizeof(float) * (size_t)s->conv_floats;
    const size_t sb = sizeof(float) * (size_t)s->state_floats;
    for (int32_t il = 0; il < s->n_layer; il++, src += cb + sb) {
        memcpy(cpulm_ssm_conv(s, il, seq), src, cb);
        memcpy(cpulm_ssm_state(s, il, seq), src + cb, sb);
    }
    if (s->stale) s->stale[seq] = 0;
}
