/* attn_oracle.h: the float64 softmax attention the attention tests measure against
 * (defined in test_attn.c). */
#ifndef CPULM_TESTS_ATTN_ORACLE_H
#define CPULM_TESTS_ATTN_ORACLE_H

/* The worst |out - exact| over rows r < m (query q + r * d at position pos[r], keys and values
 * 0..pos[r] of k, v, d apart, scale 1 / sqrt(d)), in float64. */
double test_attn_oracle_err(int d, int m, const float *q, const int *pos, const float *k,
                            const float *v, const float *out);

#endif
