/* rope_body.h: the rope op's one loop (kernels.h, ROPE), included by generic/vec.c and by the
 * x86 avx2 file: the same C, but where the file is built with -mfma the two fmaf a pair are
 * vfmadd instructions instead of libm calls (the calls were ~1.4% of a 1B prompt). */
#ifndef CPULM_KERNELS_ROPE_BODY_H
#define CPULM_KERNELS_ROPE_BODY_H

#include <math.h>

static inline void cpulm_rope_body(float *v, int n_heads, int head_stride, int n_rot, int neox,
                                   const float *cs, const float *sn) {
    const int half = n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *x = v + (size_t)h * (size_t)head_stride;
        for (int i = 0; i < half; i++) {
            const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
            const float x0 = x[i0], x1 = x[i1];
            /* fused as the reference's build fuses them, so rotated values round alike */
            x[i0] = fmaf(x0, cs[i], -(x1 * sn[i]));
            x[i1] = fmaf(x0, sn[i], x1 * cs[i]);
        }
    }
}

#endif
