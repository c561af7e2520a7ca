/* test_rope.c: RoPE scaling keys (src/model/rope.c) and the rotation angles against a
 * float64 implementation of the YaRN formulas (rope.h), linear scaling kept bit for bit. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "format/gguf.h"
#include "model/rope.h"
#include "refcase.h"
#include "test.h"

#define PI64 3.14159265358979323846

typedef struct rope_keys {
    const char *type;                                            /* NULL: no scaling keys */
    float factor, attn_factor, ext_factor, beta_fast, beta_slow; /* 0: key absent */
    uint32_t orig_ctx;                                           /* 0: key absent */
} rope_keys;

/* The rope.scaling keys of k read back through a GGUF built in memory. */
static cpulm_status read_keys(const rope_keys *k, int32_t n_rot, float base, int32_t n_ctx_train,
                              cpulm_rope_scaling *rs, cpulm_error *err) {
    cpulm_gguf_writer *w = cpulm_gguf_writer_new();
    if (k->type) cpulm_gguf_writer_set_str(w, "llama.rope.scaling.type", k->type);
    if (k->factor) cpulm_gguf_writer_set_f32(w, "llama.rope.scaling.factor", k->factor);
    if (k->attn_factor)
        cpulm_gguf_writer_set_f32(w, "llama.rope.scaling.attn_factor", k->attn_factor);
    if (k->ext_factor)
        cpulm_gguf_writer_set_f32(w, "llama.rope.scaling.yarn_ext_factor", k->ext_factor);
    if (k->beta_fast)
        cpulm_gguf_writer_set_f32(w, "llama.rope.scaling.yarn_beta_fast", k->beta_fast);
    if (k->beta_slow)
        cpulm_gguf_writer_set_f32(w, "llama.rope.scaling.yarn_beta_slow", k->beta_slow);
    if (k->orig_ctx)
        cpulm_gguf_writer_set_u32(w, "llama.rope.scaling.original_context_length", k->orig_ctx);
    uint8_t *buf = NULL;
    uint64_t size = 0;
    cpulm_gguf g;
    cpulm_status s = cpulm_gguf_writer_to_buf(w, &buf, &size);
    if (s == CPULM_OK) s = cpulm_gguf_parse(&g, buf, size, err);
    if (s == CPULM_OK) {
        s = cpulm_rope_scaling_read(&g, "llama", n_rot, base, n_ctx_train, rs, err);
        cpulm_gguf_release(&g);
    }
    free(buf);
    cpulm_gguf_writer_free(w);
    return s;
}

/* The YaRN angle of pair i at pos in float64, from the paper's definitions as llama.cpp
 * parametrizes them (rope.h). */
static double yarn_angle64(int n_rot, double base, double s, int L, double bfast, double bslow,
                           double ext, int i, double pos) {
    const double te = pos * pow(base, -2.0 * i / n_rot), ti = te / s;
    double lo = floor(n_rot * log(L / (bfast * 2 * PI64)) / (2 * log(base)));
    double hi = ceil(n_rot * log(L / (bslow * 2 * PI64)) / (2 * log(base)));
    lo = fmax(0, lo);
    hi = fmin(n_rot - 1, hi);
    const double y = (i - lo) / fmax(0.001, hi - lo);
    const double mix = (1 - fmin(1, fmax(0, y))) * ext;
    return ti * (1 - mix) + te * mix;
}

TEST(rope_yarn_matches_float64) {
    static const struct {
        int n_rot, L;
        double base, s, bfast, bslow, ext, attn;
    } cases[] = {
        {128, 32768, 1e6, 4, 32, 1, 1, 1}, /* Qwen3 YaRN x4 */
        {64, 32, 10000, 8, 32, 1, 1, 1},   /* the synth e2e case */
        {128, 4096, 500000, 16, 16, 2, 0.5, 1.5},
        {64, 2048, 10000, 2.5, 32, 1, 1, 1},
    };
    static const double poss[] = {0, 1, 31, 32, 33, 100, 1000, 4095};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        rope_keys k = {.type = "yarn",
                       .factor = (float)cases[c].s,
                       .attn_factor = (float)cases[c].attn,
                       .beta_fast = (float)cases[c].bfast,
                       .beta_slow = (float)cases[c].bslow,
                       .orig_ctx = (uint32_t)cases[c].L};
        if (cases[c].ext != 1) k.ext_factor = (float)cases[c].ext;
        cpulm_rope_scaling rs;
        cpulm_error err = {0};
        REQUIRE(t, read_keys(&k, cases[c].n_rot, (float)cases[c].base, 1 << 20, &rs, &err) ==
                       CPULM_OK);
        CHECK_EQ_INT(t, rs.type, CPULM_ROPE_SCALING_YARN);
        const double mscale = cases[c].attn * (1 + 0.1 * log(cases[c].s));
        CHECK(t, fabs(rs.mscale - mscale) < 1e-6 * mscale);
        const float theta_scale = powf((float)cases[c].base, -2.0f / (float)cases[c].n_rot);
        float cs[64], sn[64];
        for (size_t p = 0; p < sizeof poss / sizeof poss[0]; p++) {
            cpulm_rope_angles(&rs, cases[c].n_rot, theta_scale, NULL, (float)poss[p], cs, sn);
            for (int i = 0; i < cases[c].n_rot / 2; i++) {
                const double th =
                    yarn_angle64(cases[c].n_rot, cases[c].base, cases[c].s, cases[c].L,
                                 cases[c].bfast, cases[c].bslow, cases[c].ext, i, poss[p]);
                /* the float angle is a running product: a few ulps per pair */
                const double tol = mscale * (fabs(th) * 4e-6 + 2e-6);
                const double dc = fabs(cs[i] - mscale * cos(th)),
                             ds = fabs(sn[i] - mscale * sin(th));
                if (!(dc <= tol && ds <= tol))
                    fprintf(stderr, "  case %zu pos %g pair %d: cos %g vs %g, sin %g vs %g\n", c,
                            poss[p], i, cs[i], mscale * cos(th), sn[i], mscale * sin(th));
                CHECK(t, dc <= tol && ds <= tol);
            }
        }
    }
}

/* Linear scaling, no scaling and "none" keep the angles cpulm always computed:
 * freq_scale * (theta / freq_factor), cos and sin unscaled, bit for bit. */
TEST(rope_linear_and_none_unchanged) {
    static const char *types[] = {NULL, "none", "linear"};
    const float ff[32] = {1, 1, 2, 4, 8, 1, 1, 1, 3, 1, 1, 1, 1, 1, 1, 1,
                          1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    for (int k = 0; k < 3; k++) {
        rope_keys keys = {.type = types[k], .factor = k == 2 ? 4.0f : 0};
        cpulm_rope_scaling rs;
        REQUIRE(t, read_keys(&keys, 64, 10000, 4096, &rs, NULL) == CPULM_OK);
        const float fs = k == 2 ? 0.25f : 1.0f, ts = powf(10000.0f, -2.0f / 64);
        CHECK(t, rs.freq_scale == fs && rs.mscale == 1.0f && rs.ext_factor == 0.0f);
        float cs[32], sn[32];
        cpulm_rope_angles(&rs, 64, ts, ff, 777.0f, cs, sn);
        float theta = 777.0f;
        for (int i = 0; i < 32; i++) {
            const float th = fs * (theta / ff[i]);
            CHECK(t, cs[i] == cosf(th) && sn[i] == sinf(th));
            theta *= ts;
        }
    }
}

TEST(rope_scaling_keys_refused) {
    cpulm_rope_scaling rs;
    cpulm_error err = {0};
    rope_keys k = {.type = "longrope", .factor = 4};
    CHECK_EQ_INT(t, read_keys(&k, 64, 10000, 4096, &rs, &err), CPULM_ERR_UNSUPPORTED);
    CHECK(t, strstr(err.msg, "longrope") != NULL);
    rope_keys big = {.type = "yarn", .factor = 5000};
    CHECK_EQ_INT(t, read_keys(&big, 64, 10000, 4096, &rs, &err), CPULM_ERR_FORMAT);
    rope_keys beta = {.type = "yarn", .factor = 4, .beta_fast = -1};
    CHECK_EQ_INT(t, read_keys(&beta, 64, 10000, 4096, &rs, &err), CPULM_ERR_FORMAT);
    /* original_context_length defaults to the trained context */
    rope_keys dflt = {.type = "yarn", .factor = 4};
    REQUIRE(t, read_keys(&dflt, 64, 10000, 4096, &rs, &err) == CPULM_OK);
    CHECK_EQ_INT(t, rs.n_ctx_orig, 4096);
    CHECK(t, rs.ext_factor == 1.0f && rs.corr_lo >= 0 && rs.corr_hi <= 63);
}

/* Logits of YaRN-scaled files against llama.cpp's (tests/data/yarn-ref.json, made by
 * `scripts/ref-logits.py yarn` with llama-perplexity): the tiny shape as llama and as qwen3,
 * scaled over 32 or 128 original positions, so all 256 scored positions of the 512-token
 * chunk lie past the original context. F32's reference tolerance; Q8_0's smallest (as
 * test_gptoss.c). A wrong ramp end or attention factor moves these by ~0.01-0.1. */
TEST(rope_yarn_ref_tiny_past_the_original_context) {
    if (test_emulated())
        NOT_APPLICABLE(t, "minutes under emulation: the rope angles are checked above");
    cpulm_json_doc *d = refcase_load("yarn-ref.json");
    REQUIRE(t, d);
    const cpulm_json *cases = cpulm_json_get(cpulm_json_root(d), "cases");
    REQUIRE(t, cpulm_json_len(cases) >= 3);
    /* under sanitizers the first case only (the arithmetic is the same, ASan's time is not) */
    const size_t n = test_sanitized() ? 1 : cpulm_json_len(cases);
    for (size_t i = 0; i < n; i++) {
        const cpulm_json *c = cpulm_json_at(cases, i);
        const double tol = strcmp(cpulm_json_str(cpulm_json_get(c, "type")), "f32") ? 0.14 : 0.0022;
        double w1 = 0, w2 = 0;
        /* one 512-token call: the default rule gives build 9928's f32 (tiled) numerics; in
         * batches of 7 the same numerics are asked for (the default would take the F16
         * accumulation there: 0.0034-0.0038 on the F32 files, past F32's tolerance) */
        CHECK_EQ_INT(t, refcase_check(c, 512, CPULM_ATTN_AUTO, tol, &w1), 0);
        CHECK_EQ_INT(t, refcase_check(c, 7, 1, tol, &w2), 0);
        fprintf(stderr, "  %s: worst |diff| %.5f, %.5f in batches of 7 (tol %.4f)\n",
                cpulm_json_str(cpulm_json_get(c, "name")), w1, w2, tol);
    }
    cpulm_json_free(d);
}
