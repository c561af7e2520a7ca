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
    if (!s->conv || !s->state) {
        cpulm_ssm_release(s);
        return cpulm_errf(err, CPULM_ERR_NOMEM, "recurrent state: out of memory");
    }
    return CPULM_OK;
}

void cpulm_ssm_release(cpulm_ssm *s) {
    free(s->conv);
    free(s->state);
    s->conv = s->state = NULL;
}

void cpulm_ssm_seq_clear(cpulm_ssm *s, int32_t seq) {
    for (int32_t il = 0; il < s->n_layer; il++) {
        memset(cpulm_ssm_conv(s, il, seq), 0, sizeof(float) * (size_t)s->conv_floats);
        memset(cpulm_ssm_state(s, il, seq), 0, sizeof(float) * (size_t)s->state_floats);
    }
}

void cpulm_ssm_seq_cp(cpulm_ssm *s, int32_t src, int32_t dst) {
    if (src == dst) return;
    for (int32_t il = 0; il < s->n_layer; il++) {
        memcpy(cpulm_ssm_conv(s, il, dst), cpulm_ssm_conv(s, il, src),
               sizeof(float) * (size_t)s->conv_floats);
        memcpy(cpulm_ssm_state(s, il, dst), cpulm_ssm_state(s, il, src),
               sizeof(float) * (size_t)s->state_floats);
    }
}
