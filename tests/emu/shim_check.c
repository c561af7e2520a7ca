/* shim_check.c: tests/emu/simde_avx512.h's shims (and the SIMDe operations whose rounding the
 * canonical kernels depend on) against scalar definitions. Built like the emulated kernel
 * objects (avx2 flags, the header forced in; cmake/emu512.cmake); called by test_emu512.c
 * only on CPUs with AVX2. Returns the number of failed checks, the first one named in msg. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int cpulm_emu512_shim_check(char *msg, size_t cap);

typedef struct {
    int fails;
    char *msg;
    size_t cap;
} chk;

static void check(chk *c, int ok, const char *what, int lane) {
    if (ok) return;
    if (!c->fails) snprintf(c->msg, c->cap, "%s (lane %d)", what, lane);
    c->fails++;
}

static uint32_t rnd(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s;
}

static float rndf(uint32_t *s) { /* mixed magnitudes, both signs */
    const float m = (float)(rnd(s) >> 8) / 16777216.0f - 0.5f;
    return ldexpf(m, (int)(rnd(s) % 40) - 20);
}

static int same_bits_f(float a, float b) {
    return memcmp(&a, &b, sizeof a) == 0;
}

static int same_bits_d(double a, double b) {
    return memcmp(&a, &b, sizeof a) == 0;
}

static void conversions(chk *c, uint32_t *s) {
    int32_t i32[16];
    uint16_t u16[16];
    float f[16], g[16], r[16];
    double d[8], rd[8];
    for (int l = 0; l < 16; l++) {
        i32[l] = (int32_t)rnd(s);
        u16[l] = (uint16_t)rnd(s);
        f[l] = rndf(s);
        g[l] = rndf(s);
    }
    for (int l = 0; l < 8; l++)
        d[l] = (double)rndf(s) * (1.0 + 1e-9 * l); /* not exactly a float */
    _mm512_storeu_ps(r, _mm512_cvtepi32_ps(_mm512_loadu_si512(i32)));
    for (int l = 0; l < 16; l++)
        check(c, same_bits_f(r[l], (float)i32[l]), "cvtepi32_ps", l);
    int32_t w[16];
    _mm512_storeu_si512(w, _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)u16)));
    for (int l = 0; l < 16; l++)
        check(c, w[l] == (int32_t)u16[l], "cvtepu16_epi32", l);
    int8_t i8[16];
    for (int l = 0; l < 16; l++)
        i8[l] = (int8_t)rnd(s);
    _mm512_storeu_si512(w, _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)i8)));
    for (int l = 0; l < 16; l++)
        check(c, w[l] == (int32_t)i8[l], "cvtepi8_epi32", l);
    _mm512_storeu_pd(rd, _mm512_cvtps_pd(_mm256_loadu_ps(f)));
    for (int l = 0; l < 8; l++)
        check(c, same_bits_d(rd[l], (double)f[l]), "cvtps_pd", l);
    _mm256_storeu_ps(r, _mm512_cvtpd_ps(_mm512_loadu_pd(d)));
    for (int l = 0; l < 8; l++)
        check(c, same_bits_f(r[l], (float)d[l]), "cvtpd_ps", l);
    /* halves: the scalar F16C conversions are the definition */
    uint16_t h[16];
    _mm256_storeu_si256((__m256i *)h,
                        _mm512_cvtps_ph(_mm512_loadu_ps(f), _MM_FROUND_TO_NEAREST_INT));
    for (int l = 0; l < 16; l++)
        check(c, h[l] == _cvtss_sh(f[l], _MM_FROUND_TO_NEAREST_INT), "cvtps_ph", l);
    _mm512_storeu_ps(r, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)u16)));
    for (int l = 0; l < 16; l++)
        check(c, same_bits_f(r[l], _cvtsh_ss(u16[l])) || (isnan(r[l]) && isnan(_cvtsh_ss(u16[l]))),
              "cvtph_ps", l);
    check(c, same_bits_f(_mm512_cvtss_f32(_mm512_loadu_ps(f)), f[0]), "cvtss_f32", 0);
    static const unsigned counts[] = {0, 1, 7, 24, 31};
    for (int k = 0; k < 5; k++) {
        _mm512_storeu_si512(w, _mm512_srai_epi32(_mm512_loadu_si512(i32), counts[k]));
        for (int l = 0; l < 16; l++)
            check(c, w[l] == (i32[l] < 0 ? ~(~i32[l] >> counts[k]) : i32[l] >> counts[k]),
                  "srai_epi32", l);
    }
    /* the fused multiply-adds the canonical kernels rely on: one rounding */
    _mm512_storeu_ps(r,
                     _mm512_fmadd_ps(_mm512_loadu_ps(f), _mm512_loadu_ps(g), _mm512_set1_ps(0.3f)));
    for (int l = 0; l < 16; l++)
        check(c, same_bits_f(r[l], fmaf(f[l], g[l], 0.3f)), "fmadd_ps", l);
    /* scalef: one rounding, into the subnormals and to 0 (the exp kernels' underflow) */
    for (int k = 0; k < 16; k++) {
        float sa[16], sb[16];
        for (int l = 0; l < 16; l++) {
            sa[l] = 1.0f + (float)(rnd(s) >> 9) / 8388608.0f;
            sb[l] = (float)(-160 + 10 * k + l) + 0.25f;
        }
        _mm512_storeu_ps(r, _mm512_scalef_ps(_mm512_loadu_ps(sa), _mm512_loadu_ps(sb)));
        for (int l = 0; l < 16; l++)
            check(c, same_bits_f(r[l], ldexpf(sa[l], (int)floorf(sb[l]))), "scalef_ps", l);
    }
    _mm512_storeu_ps(
        r, _mm512_roundscale_ps(_mm512_loadu_ps(f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (int l = 0; l < 16; l++)
        check(c, same_bits_f(r[l], nearbyintf(f[l])), "roundscale_ps", l);
    int16_t a16[32], b16[32];
    for (int l = 0; l < 32; l++) {
        a16[l] = (int16_t)rnd(s);
        b16[l] = (int16_t)rnd(s);
    }
    _mm512_storeu_si512(w, _mm512_madd_epi16(_mm512_loadu_si512(a16), _mm512_loadu_si512(b16)));
    for (int l = 0; l < 16; l++)
        check(c,
              w[l] == (int32_t)((uint32_t)(a16[2 * l] * b16[2 * l]) +
                                (uint32_t)(a16[2 * l + 1] * b16[2 * l + 1])),
              "madd_epi16", l);
}

/* Masked loads and stores next to a PROT_NONE page: touching an unselected lane past the
 * end faults, as the hardware's fault suppression makes it legal not to. */
static void masked(chk *c, uint32_t *s) {
    const long pg = sysconf(_SC_PAGESIZE);
    uint8_t *m =
        mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m + pg, (size_t)pg, PROT_NONE)) {
        check(c, 0, "mmap guard page", 0);
        return;
    }
    for (int live = 0; live <= 16; live++) {
        const __mmask16 k = (__mmask16)((1u << live) - 1);
        float *fp = (float *)(m + pg) - live;
        uint16_t *hp = (uint16_t *)(m + pg) - live;
        double *dp = (double *)(m + pg) - (live < 8 ? live : 8);
        for (int l = 0; l < live; l++) {
            fp[l] = rndf(s);
            hp[l] = (uint16_t)rnd(s); /* overwrites fp's tail bytes; read back below */
        }
        float src[16], r[16];
        for (int l = 0; l < 16; l++)
            src[l] = (float)l + 100.0f;
        float want[16];
        memcpy(want, fp, sizeof(float) * (size_t)live);
        _mm512_storeu_ps(r, _mm512_mask_loadu_ps(_mm512_loadu_ps(src), k, fp));
        for (int l = 0; l < 16; l++)
            check(c, same_bits_f(r[l], l < live ? want[l] : src[l]), "mask_loadu_ps", l);
        _mm512_storeu_ps(r, _mm512_maskz_loadu_ps(k, fp));
        for (int l = 0; l < 16; l++)
            check(c, same_bits_f(r[l], l < live ? want[l] : 0.0f), "maskz_loadu_ps", l);
        if (live <= 4) { /* the 128-bit form: lanes 0-3 */
            float q4[4] = {-1.0f, -2.0f, -3.0f, -4.0f};
            _mm_mask_storeu_ps(fp, (__mmask8)k, _mm_loadu_ps(q4));
            for (int l = 0; l < live; l++)
                check(c, same_bits_f(fp[l], q4[l]), "mask_storeu_ps (128)", l);
        }
        _mm512_mask_storeu_ps(fp, k, _mm512_loadu_ps(src));
        for (int l = 0; l < live; l++)
            check(c, same_bits_f(fp[l], src[l]), "mask_storeu_ps", l);
        uint16_t hw[16], hr[16], hs[16];
        memcpy(hw, hp, 2 * (size_t)live);
        _mm256_storeu_si256((__m256i *)hr, _mm256_maskz_loadu_epi16(k, hp));
        for (int l = 0; l < 16; l++)
            check(c, hr[l] == (l < live ? hw[l] : 0), "maskz_loadu_epi16", l);
        for (int l = 0; l < 16; l++)
            hs[l] = (uint16_t)(0xA000 + l);
        _mm256_mask_storeu_epi16(hp, k, _mm256_loadu_si256((const __m256i *)hs));
        for (int l = 0; l < live; l++)
            check(c, hp[l] == hs[l], "mask_storeu_epi16", l);
        const int dl = live < 8 ? live : 8;
        double dr[8];
        for (int l = 0; l < dl; l++)
            dp[l] = (double)l - 0.25;
        _mm512_storeu_pd(dr, _mm512_maskz_loadu_pd((__mmask8)((1u << dl) - 1), dp));
        for (int l = 0; l < 8; l++)
            check(c, same_bits_d(dr[l], l < dl ? (double)l - 0.25 : 0.0), "maskz_loadu_pd", l);
    }
    munmap(m, (size_t)pg * 2);
}

/* GCC's reduction trees (avx512fintrin.h): halves of 256, of 128, then pairs. */
static void reductions(chk *c, uint32_t *s) {
    for (int rep = 0; rep < 64; rep++) {
        float f[16], t[8];
        double d[8], u[4];
        for (int l = 0; l < 16; l++)
            f[l] = rndf(s);
        for (int l = 0; l < 8; l++)
            d[l] = (double)rndf(s) * 1.0000001;
        for (int i = 0; i < 8; i++)
            t[i] = f[i + 8] + f[i];
        for (int i = 0; i < 4; i++)
            t[i] = t[i + 4] + t[i];
        const float want = (t[0] + t[2]) + (t[1] + t[3]);
        check(c, same_bits_f(_mm512_reduce_add_ps(_mm512_loadu_ps(f)), want), "reduce_add_ps", rep);
        for (int i = 0; i < 4; i++)
            u[i] = d[i + 4] + d[i];
        const double wd = (u[2] + u[0]) + (u[3] + u[1]);
        check(c, same_bits_d(_mm512_reduce_add_pd(_mm512_loadu_pd(d)), wd), "reduce_add_pd", rep);
        float mx = f[0];
        for (int l = 1; l < 16; l++)
            mx = fmaxf(mx, f[l]);
        check(c, same_bits_f(_mm512_reduce_max_ps(_mm512_loadu_ps(f)), mx), "reduce_max_ps", rep);
    }
}

static uint16_t bf16_bits(float f) { /* nearest even; subnormals and zeros to signed 0 */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* vcvtne2ps2bf16 and vdpbf16ps as the SDM defines them, on cases the order of a lane's two
 * steps and their separate rounding decide (each verified against the instruction on Zen 5):
 * from 2^30, hi -2^30 then lo 1 gives 1 (lo first: 0); from 1, two products of 2^-24 stay 1
 * (a pair sum rounded once: 1 + 2^-23); a subnormal result is 0. */
static void bf16(chk *c, uint32_t *s) {
    float lo[16], hi[16];
    uint16_t r16[32];
    for (int l = 0; l < 16; l++)
        lo[l] = rndf(s), hi[l] = l == 3 ? 0x1p-130f : rndf(s);
    _mm512_storeu_si512(r16, _mm512_cvtne2ps_pbh(_mm512_loadu_ps(hi), _mm512_loadu_ps(lo)));
    for (int l = 0; l < 16; l++) {
        check(c, r16[l] == bf16_bits(lo[l]), "cvtne2ps_pbh lo", l);
        check(c, r16[16 + l] == bf16_bits(hi[l]), "cvtne2ps_pbh hi", l);
    }
    const float acc0[3] = {0x1p30f, 1.0f, 0.0f}, want[3] = {1.0f, 1.0f, 0.0f};
    const float a_lo[3] = {1.0f, 0x1p-12f, 0x1p-64f}, a_hi[3] = {-0x1p30f, 0x1p-12f, 0x1p-64f};
    const float b_lo[3] = {1.0f, 0x1p-12f, 0x1p-64f}, b_hi[3] = {1.0f, 0x1p-12f, 0x1p-64f};
    for (int k = 0; k < 3; k++) {
        uint32_t a[16], b[16];
        float r[16];
        for (int l = 0; l < 16; l++) {
            a[l] = (uint32_t)bf16_bits(a_lo[k]) | (uint32_t)bf16_bits(a_hi[k]) << 16;
            b[l] = (uint32_t)bf16_bits(b_lo[k]) | (uint32_t)bf16_bits(b_hi[k]) << 16;
        }
        _mm512_storeu_ps(r, _mm512_dpbf16_ps(_mm512_set1_ps(acc0[k]), _mm512_loadu_si512(a),
                                             _mm512_loadu_si512(b)));
        for (int l = 0; l < 16; l++)
            check(c, same_bits_f(r[l], want[k]), "dpbf16_ps", k * 16 + l);
    }
}

int cpulm_emu512_shim_check(char *msg, size_t cap) {
    chk c = {0, msg, cap};
    uint32_t s = 2024;
    if (cap) msg[0] = 0;
    conversions(&c, &s);
    masked(&c, &s);
    reductions(&c, &s);
    bf16(&c, &s);
    return c.fails;
}
