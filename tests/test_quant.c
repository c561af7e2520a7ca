/* test_quant.c: dtype traits, fp16/bf16 conversions, reference quantize/dequantize round
 * trips with per-type error budgets, edge values, and bit-compatibility with files written
 * by llama.cpp (tiny-llama-*.gguf in the shared test data), and the exact widening of Q5_0
 * to Q8_0. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/fp16.h"
#include "format/quant.h"
#include "kernels/generic/generic.h"
#include "test.h"

/* ---- deterministic data ---- */

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static float rng_uniform(uint64_t *s) { /* [-1, 1) */
    return (float)((double)(rng_next(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static void fill_normalish(float *x, int64_t n, uint64_t seed, float scale) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        float v = 0; /* sum of 4 uniforms: bell-shaped with some outliers from the tails */
        for (int k = 0; k < 4; k++)
            v += rng_uniform(&s);
        x[i] = v * scale;
    }
}

/* ---- a minimal GGUF tensor locator (test-only; the real reader is src/gguf.c) ---- */

typedef struct {
    char name[96];
    uint32_t type;
    int64_t ne[4];
    uint64_t offset;
} tinfo;

typedef struct {
    char *buf;
    size_t size;
    uint64_t n;
    tinfo *t;
    const uint8_t *data;
} tfile;

typedef struct {
    const uint8_t *p, *end;
    int ok;
} rd;

static uint64_t rd_u(rd *r, int nb) {
    uint64_t v = 0;
    if (r->end - r->p < nb) {
        r->ok = 0;
        return 0;
    }
    for (int i = 0; i < nb; i++)
        v |= (uint64_t)r->p[i] << (8 * i);
    r->p += nb;
    return v;
}

static void rd_skip(rd *r, uint64_t nb) {
    if ((uint64_t)(r->end - r->p) < nb)
        r->ok = 0;
    else
        r->p += nb;
}

static void skip_value(rd *r, uint32_t type, uint64_t *u32_out) {
    static const int sizes[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == 8) {
        rd_skip(r, rd_u(r, 8));
    } else if (type == 9) {
        uint32_t et = (uint32_t)rd_u(r, 4);
        uint64_t n = rd_u(r, 8);
        for (uint64_t i = 0; i < n && r->ok; i++)
            skip_value(r, et, NULL);
    } else if (type < 13) {
        uint64_t v = rd_u(r, sizes[type]);
        if (u32_out && type == 4) *u32_out = v;
    } else {
        r->ok = 0;
    }
}

static int tfile_load(tfile *f, const char *rel) {
    memset(f, 0, sizeof *f);
    const char *path = test_shared_path(rel);
    if (!path || !(f->buf = test_read_file(path, &f->size))) return 0;
    rd r = {(const uint8_t *)f->buf, (const uint8_t *)f->buf + f->size, 1};
    if (rd_u(&r, 4) != 0x46554747u || rd_u(&r, 4) != 3) return 0;
    f->n = rd_u(&r, 8);
    uint64_t n_kv = rd_u(&r, 8), align = 32;
    for (uint64_t i = 0; i < n_kv && r.ok; i++) {
        uint64_t klen = rd_u(&r, 8);
        int is_align = klen == 17 && r.end - r.p >= 17 && !memcmp(r.p, "general.alignment", 17);
        rd_skip(&r, klen);
        skip_value(&r, (uint32_t)rd_u(&r, 4), is_align ? &align : NULL);
    }
    f->t = calloc(f->n ? f->n : 1, sizeof *f->t);
    for (uint64_t i = 0; i < f->n && r.ok; i++) {
        uint64_t len = rd_u(&r, 8);
        if (len >= sizeof f->t[i].name || (uint64_t)(r.end - r.p) < len) return 0;
        memcpy(f->t[i].name, r.p, len);
        r.p += len;
        uint32_t nd = (uint32_t)rd_u(&r, 4);
        for (int d = 0; d < 4; d++)
            f->t[i].ne[d] = d < (int)nd ? (int64_t)rd_u(&r, 8) : 1;
        f->t[i].type = (uint32_t)rd_u(&r, 4);
        f->t[i].offset = rd_u(&r, 8);
    }
    size_t pos = (size_t)(r.p - (const uint8_t *)f->buf);
    f->data = (const uint8_t *)f->buf + (pos + align - 1) / align * align;
    return r.ok;
}

static void tfile_free(tfile *f) {
    free(f->buf);
    free(f->t);
}

static const tinfo *tfile_find(const tfile *f, const char *name) {
    for (uint64_t i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

static int64_t tinfo_nel(const tinfo *t) {
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

/* ---- traits ---- */

TEST(quant_traits_block_sizes) {
    static const struct {
        int id, block, size;
        const char *name;
    } want[] = {
        {0, 1, 4, "F32"},         {1, 1, 2, "F16"},         {2, 32, 18, "Q4_0"},
        {3, 32, 20, "Q4_1"},      {6, 32, 22, "Q5_0"},      {7, 32, 24, "Q5_1"},
        {8, 32, 34, "Q8_0"},      {9, 32, 36, "Q8_1"},      {10, 256, 84, "Q2_K"},
        {11, 256, 110, "Q3_K"},   {12, 256, 144, "Q4_K"},   {13, 256, 176, "Q5_K"},
        {14, 256, 210, "Q6_K"},   {15, 256, 292, "Q8_K"},   {16, 256, 66, "IQ2_XXS"},
        {17, 256, 74, "IQ2_XS"},  {18, 256, 98, "IQ3_XXS"}, {19, 256, 50, "IQ1_S"},
        {20, 32, 18, "IQ4_NL"},   {21, 256, 110, "IQ3_S"},  {22, 256, 82, "IQ2_S"},
        {23, 256, 136, "IQ4_XS"}, {24, 1, 1, "I8"},         {25, 1, 2, "I16"},
        {26, 1, 4, "I32"},        {27, 1, 8, "I64"},        {28, 1, 8, "F64"},
        {29, 256, 56, "IQ1_M"},   {30, 1, 2, "BF16"},       {34, 256, 54, "TQ1_0"},
        {35, 256, 66, "TQ2_0"},   {39, 32, 17, "MXFP4"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const cpulm_dtype_traits *tr = cpulm_dtype_traits_get((uint32_t)want[i].id);
        REQUIRE(t, tr != NULL);
        CHECK_EQ_INT(t, tr->block, want[i].block);
        CHECK_EQ_INT(t, tr->type_size, want[i].size);
        CHECK(t, strcmp(tr->name, want[i].name) == 0);
        CHECK_EQ_INT(t, cpulm_dtype_from_name(want[i].name), want[i].id);
    }
    /* the ids ggml retired (4, 5: Q4_2/Q4_3; 31-33) and out of range are unknown */
    CHECK(t, cpulm_dtype_traits_get(4) == NULL);
    CHECK(t, cpulm_dtype_traits_get(31) == NULL);
    CHECK(t, cpulm_dtype_traits_get(1000) == NULL);
    CHECK(t, strcmp(cpulm_dtype_name(5), "?") == 0);
}

TEST(quant_traits_computable_and_vec_dot_type) {
    static const struct {
        cpulm_dtype w, act;
    } want[] = {
        {CPULM_DTYPE_F32, CPULM_DTYPE_F32},   {CPULM_DTYPE_F16, CPULM_DTYPE_F16},
        {CPULM_DTYPE_BF16, CPULM_DTYPE_BF16}, {CPULM_DTYPE_Q8_0, CPULM_DTYPE_Q8_0},
        {CPULM_DTYPE_Q4_0, CPULM_DTYPE_Q8_0}, {CPULM_DTYPE_Q5_0, CPULM_DTYPE_Q8_0},
        {CPULM_DTYPE_Q4_1, CPULM_DTYPE_Q8_1}, {CPULM_DTYPE_Q5_1, CPULM_DTYPE_Q8_1},
        {CPULM_DTYPE_Q4_K, CPULM_DTYPE_Q8_K}, {CPULM_DTYPE_Q5_K, CPULM_DTYPE_Q8_K},
        {CPULM_DTYPE_Q6_K, CPULM_DTYPE_Q8_K}, {CPULM_DTYPE_MXFP4, CPULM_DTYPE_Q8_0},
    };
    int n_computable = 0;
    for (uint32_t id = 0; id < CPULM_DTYPE_COUNT; id++) {
        const cpulm_dtype_traits *tr = cpulm_dtype_traits_get(id);
        n_computable += tr && tr->computable;
    }
    CHECK_EQ_INT(t, n_computable, (int)(sizeof want / sizeof want[0]));
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const cpulm_dtype_traits *tr = cpulm_dtype_traits_get(want[i].w);
        CHECK(t, tr->computable);
        CHECK_EQ_INT(t, tr->vec_dot_type, want[i].act);
        /* every computable type can be produced and read back by the reference */
        CHECK(t, cpulm_quantize_supported(want[i].w) && cpulm_dequantize_supported(want[i].w));
        CHECK(t, cpulm_quantize_supported(want[i].act));
    }
}

TEST(quant_dtype_names_and_row_bytes) {
    CHECK_EQ_INT(t, cpulm_dtype_from_name("q4_0"), CPULM_DTYPE_Q4_0);
    CHECK_EQ_INT(t, cpulm_dtype_from_name("q4_k"), CPULM_DTYPE_Q4_K);
    CHECK_EQ_INT(t, cpulm_dtype_from_name("Bf16"), CPULM_DTYPE_BF16);
    CHECK_EQ_INT(t, cpulm_dtype_from_name("iq2_xxs"), CPULM_DTYPE_IQ2_XXS);
    CHECK_EQ_INT(t, cpulm_dtype_from_name("q4"), -1);
    CHECK_EQ_INT(t, cpulm_dtype_from_name("q4_0x"), -1);
    CHECK_EQ_INT(t, cpulm_dtype_from_name(""), -1);
    CHECK_EQ_INT(t, cpulm_dtype_from_name(NULL), -1);
    CHECK_EQ_INT(t, cpulm_dtype_row_bytes(CPULM_DTYPE_Q4_0, 4096), 4096 / 32 * 18);
    CHECK_EQ_INT(t, cpulm_dtype_row_bytes(CPULM_DTYPE_Q6_K, 4096), 4096 / 256 * 210);
    CHECK_EQ_INT(t, cpulm_dtype_row_bytes(CPULM_DTYPE_F16, 7), 14);
    CHECK_EQ_INT(t, cpulm_dtype_row_bytes(CPULM_DTYPE_F32, 0), 0);
}

/* ---- MXFP4 (ggml's layout: e, then 16 bytes of E2M1 codes, element j low nibble of
 * qs[j], j + 16 high nibble; x = E2M1 value * 2^(e - 127)) ---- */

/* Blocks decoded by hand from the OCP E2M1 table (0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 the
 * sign) and the E8M0 scale 2^(e - 127), not from the code under test's doubled table. */
TEST(quant_mxfp4_dequantize_hand_blocks) {
    static const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    static const uint8_t es[] = {127, 130, 0, 1, 2, 100, 252}; /* 254: 6 * 2^127 overflows */
    cpulm_block_mxfp4 b;
    for (size_t k = 0; k < sizeof es; k++) {
        b.e = es[k];
        for (int j = 0; j < 16; j++) /* low nibble j, high nibble 15 - j: every code twice */
            b.qs[j] = (uint8_t)(j | (15 - j) << 4);
        float y[32];
        cpulm_dequantize_row_ref(CPULM_DTYPE_MXFP4, &b, y, 32);
        const double scale = ldexp(1.0, (int)es[k] - 127);
        for (int j = 0; j < 32; j++) {
            const int code = j < 16 ? j : 15 - (j - 16);
            const double want = (code & 8 ? -1.0 : 1.0) * e2m1[code & 7] * scale;
            if ((double)y[j] != want)
                fprintf(stderr, "  e=%d element %d: %g, want %g\n", es[k], j, y[j], want);
            CHECK(t, (double)y[j] == want);
        }
    }
    /* e = 130, codes 1 and 7: 0.5 * 8 = 4 and 6 * 8 = 48 */
    memset(&b, 0, sizeof b);
    b.e = 130;
    b.qs[0] = 0x71;
    b.qs[1] = 0x9F; /* -0.5 * 8 and -6 * 8 */
    float y[32];
    cpulm_dequantize_row_mxfp4_ref(&b, y, 32);
    CHECK(t, y[0] == 4.0f && y[16] == 48.0f && y[1] == -48.0f && y[17] == -4.0f && y[2] == 0.0f);
    CHECK_EQ_INT(t, sizeof(cpulm_block_mxfp4), 17);
}

/* llama.cpp's quantizer rule: e = floor(log2(amax)) - 2 + 127, each value to the nearest
 * E2M1 multiple of 2^(e - 127), the lower code on ties, values past 6 clipped to 6. */
TEST(quant_mxfp4_quantize_rule) {
    float x[32] = {6.0f, 3.0f, -0.5f, 0.25f, 0.75f, -5.0f, 1.25f, -0.2f};
    for (int j = 8; j < 32; j++)
        x[j] = (float)(j % 7) * 0.5f - 1.5f; /* on the grid: -1.5 .. 1.5 */
    cpulm_block_mxfp4 b;
    cpulm_quantize_row_ref(CPULM_DTYPE_MXFP4, x, &b, 32);
    CHECK_EQ_INT(t, b.e, 127); /* amax 6: floor(log2 6) = 2 */
    const int lo[8] = {b.qs[0] & 15, b.qs[1] & 15, b.qs[2] & 15, b.qs[3] & 15,
                       b.qs[4] & 15, b.qs[5] & 15, b.qs[6] & 15, b.qs[7] & 15};
    CHECK_EQ_INT(t, lo[0], 7);  /* 6 */
    CHECK_EQ_INT(t, lo[1], 5);  /* 3 */
    CHECK_EQ_INT(t, lo[2], 9);  /* -0.5 */
    CHECK_EQ_INT(t, lo[3], 0);  /* 0.25: tie between 0 and 0.5, the first code */
    CHECK_EQ_INT(t, lo[4], 1);  /* 0.75: tie between 0.5 and 1 */
    CHECK_EQ_INT(t, lo[5], 14); /* -5: tie between -4 (14) and -6 (15) */
    CHECK_EQ_INT(t, lo[6], 2);  /* 1.25: tie between 1 and 1.5 */
    CHECK_EQ_INT(t, lo[7], 0);  /* -0.2: nearest 0, code 0 before -0 (8) */
    float y[32];
    cpulm_dequantize_row_ref(CPULM_DTYPE_MXFP4, &b, y, 32);
    for (int j = 8; j < 32; j++)
        CHECK(t, y[j] == x[j]);
    /* amax 7 (> 6 times the scale): clipped; amax 0.3: e = floor(log2 0.3) - 2 + 127 = 123 */
    float z[32] = {7.0f, -7.0f};
    cpulm_quantize_row_ref(CPULM_DTYPE_MXFP4, z, &b, 32);
    CHECK_EQ_INT(t, b.e, 127);
    CHECK_EQ_INT(t, b.qs[0] & 15, 7);
    CHECK_EQ_INT(t, b.qs[1] & 15, 15);
    memset(z, 0, sizeof z);
    z[31] = 0.3f;
    cpulm_quantize_row_ref(CPULM_DTYPE_MXFP4, z, &b, 32);
    CHECK_EQ_INT(t, b.e, 123); /* scale 2^-4: 0.3 / 0.0625 = 4.8, nearest E2M1 4 (code 6) */
    CHECK_EQ_INT(t, b.qs[15] >> 4, 6);
    memset(z, 0, sizeof z); /* all zero: e = 0, codes 0 */
    cpulm_quantize_row_ref(CPULM_DTYPE_MXFP4, z, &b, 32);
    CHECK_EQ_INT(t, b.e, 0);
    for (int j = 0; j < 16; j++)
        CHECK_EQ_INT(t, b.qs[j], 0);
}

/* ---- fp16 / bf16 ---- */

TEST(quant_fp16_all_values_round_trip) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = cpulm_fp16_to_f32((uint16_t)h);
        uint16_t back = cpulm_f32_to_fp16(f);
        if (isnan(f))
            bad += !((back & 0x7c00) == 0x7c00 && (back & 0x3ff));
        else
            bad += back != h;
    }
    CHECK_EQ_INT(t, bad, 0);
    /* subnormals: smallest is 2^-24, largest (0x03ff) is 1023 * 2^-24 */
    CHECK(t, cpulm_fp16_to_f32(0x0001) == ldexpf(1.0f, -24));
    CHECK(t, cpulm_fp16_to_f32(0x03ff) == 1023.0f * ldexpf(1.0f, -24));
    CHECK(t, cpulm_fp16_to_f32(0x8001) == -ldexpf(1.0f, -24));
    /* rounding: half of the smallest subnormal ties to even (0), a bit more rounds up */
    CHECK_EQ_INT(t, cpulm_f32_to_fp16(ldexpf(1.0f, -25)), 0);
    CHECK_EQ_INT(t, cpulm_f32_to_fp16(ldexpf(1.5f, -25)), 1);
    CHECK_EQ_INT(t, cpulm_f32_to_fp16(65504.0f), 0x7bff);
    CHECK_EQ_INT(t, cpulm_f32_to_fp16(65520.0f), 0x7c00);                 /* rounds to infinity */
    CHECK_EQ_INT(t, cpulm_f32_to_fp16(1.0f + ldexpf(1.0f, -11)), 0x3c00); /* tie to even */
}

TEST(quant_bf16_round_trip) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = cpulm_bf16_to_f32((uint16_t)h);
        uint16_t back = cpulm_f32_to_bf16(f);
        bad += isnan(f) ? !isnan(cpulm_bf16_to_f32(back)) : back != h;
    }
    CHECK_EQ_INT(t, bad, 0);
    CHECK_EQ_INT(t, cpulm_f32_to_bf16(1.0f + ldexpf(1.0f, -8)), 0x3f80); /* tie to even */
    CHECK_EQ_INT(t, cpulm_f32_to_bf16(1.0f + ldexpf(3.0f, -9)), 0x3f81); /* 0.75 ulp: up */
    CHECK_EQ_INT(t, cpulm_f32_to_bf16(1.0f + ldexpf(3.0f, -8)), 0x3f82); /* tie to even */
}

/* ---- round trips ---- */

/* Relative RMS error of quantize -> dequantize on bell-shaped data; NaN-prefilled output
 * catches elements a dequantizer forgets to write. */
static double roundtrip_rel_rmse(cpulm_dtype type, const float *x, int64_t n) {
    const cpulm_dtype_traits *tr = cpulm_dtype_traits_get(type);
    void *q = malloc(cpulm_dtype_row_bytes(type, n) + 1);
    float *y = malloc((size_t)n * sizeof *y);
    for (int64_t i = 0; i < n; i++)
        y[i] = NAN;
    cpulm_quantize_row_ref(type, x, q, n);
    cpulm_dequantize_row_ref(type, q, y, n);
    double se = 0, sx = 0;
    for (int64_t i = 0; i < n; i++) {
        se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        sx += (double)x[i] * x[i];
    }
    free(q);
    free(y);
    (void)tr;
    return sqrt(se / sx); /* NaN if any output was left unwritten */
}

TEST(quant_roundtrip_error_budgets) {
    /* Budgets: about 1.25x what the formats achieve on this data (measured), so a subtly
     * wrong scale search or bit layout fails while an honest quantizer passes. */
    static const struct {
        cpulm_dtype type;
        double budget;
    } cases[] = {
        {CPULM_DTYPE_F32, 0.0},     {CPULM_DTYPE_F16, 2.5e-4},  {CPULM_DTYPE_BF16, 2.1e-3},
        {CPULM_DTYPE_Q8_0, 6.5e-3}, {CPULM_DTYPE_Q8_1, 6.5e-3}, {CPULM_DTYPE_Q8_K, 8e-3},
        {CPULM_DTYPE_Q4_0, 0.104},  {CPULM_DTYPE_Q4_1, 0.095},  {CPULM_DTYPE_Q5_0, 0.051},
        {CPULM_DTYPE_Q5_1, 0.046},  {CPULM_DTYPE_Q4_K, 0.086},  {CPULM_DTYPE_Q5_K, 0.044},
        {CPULM_DTYPE_Q6_K, 0.0215},
    };
    enum { N = 256 * 37 };
    float *x = malloc(N * sizeof *x);
    fill_normalish(x, N, 7, 0.05f);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double e = roundtrip_rel_rmse(cases[i].type, x, N);
        if (getenv("CPULM_TEST_VERBOSE"))
            printf("  %-5s rel rmse %.5f (budget %.5f)\n", cpulm_dtype_name(cases[i].type), e,
                   cases[i].budget);
        if (!(e <= cases[i].budget))
            fprintf(stderr, "  %s: rel rmse %.5f > %.5f\n", cpulm_dtype_name(cases[i].type), e,
                    cases[i].budget);
        CHECK(t, e <= cases[i].budget);
    }
    free(x);
}

TEST(quant_roundtrip_exact_grid_values) {
    /* Values already on a block's grid must survive exactly: q * d with d a power of 2. */
    float x[32];
    cpulm_block_q8_0 b8;
    cpulm_block_q4_0 b4;
    float y[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)((j * 37) % 255 - 127) * 0.25f;
    x[5] = 127 * 0.25f; /* amax = 127 d exactly */
    cpulm_quantize_row_q8_0_ref(x, &b8, 32);
    cpulm_dequantize_row_q8_0_ref(&b8, y, 32);
    for (int j = 0; j < 32; j++)
        CHECK(t, y[j] == x[j]);
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j % 16 - 8) * 0.5f; /* -8..7, extreme is -8 */
    cpulm_quantize_row_q4_0_ref(x, &b4, 32);
    cpulm_dequantize_row_q4_0_ref(&b4, y, 32);
    for (int j = 0; j < 32; j++)
        CHECK(t, y[j] == x[j]);
}

TEST(quant_extremes_and_zero_blocks) {
    /* -128 never comes out of the quantizer, but files may hold it: dequantize as is */
    cpulm_block_q8_0 b = {.d = cpulm_f32_to_fp16(0.5f)};
    for (int j = 0; j < 32; j++)
        b.qs[j] = (int8_t)(j % 2 ? 127 : -128);
    float y[256];
    cpulm_dequantize_row_q8_0_ref(&b, y, 32);
    CHECK(t, y[0] == -64.0f && y[1] == 63.5f);
    /* quantizing the largest magnitude gives exactly +-127 */
    float x[256] = {0};
    x[3] = -2.0f;
    x[9] = 1.0f;
    cpulm_quantize_row_q8_0_ref(x, &b, 32);
    CHECK_EQ_INT(t, b.qs[3], -127);
    CHECK_EQ_INT(t, b.qs[9], 64); /* roundf(63.5) = 64: half away from zero */
    /* all-zero blocks: d = 0 and every decoded value is exactly 0 (no NaN from 0/0) */
    static const cpulm_dtype zero_types[] = {
        CPULM_DTYPE_Q4_0, CPULM_DTYPE_Q4_1, CPULM_DTYPE_Q5_0, CPULM_DTYPE_Q5_1, CPULM_DTYPE_Q8_0,
        CPULM_DTYPE_Q8_1, CPULM_DTYPE_Q8_K, CPULM_DTYPE_Q4_K, CPULM_DTYPE_Q5_K, CPULM_DTYPE_Q6_K};
    memset(x, 0, sizeof x);
    for (size_t i = 0; i < sizeof zero_types / sizeof zero_types[0]; i++) {
        uint8_t buf[512];
        cpulm_quantize_row_ref(zero_types[i], x, buf, 256);
        for (int j = 0; j < 256; j++)
            y[j] = NAN;
        cpulm_dequantize_row_ref(zero_types[i], buf, y, 256);
        int bad = 0;
        for (int j = 0; j < 256; j++)
            bad += y[j] != 0.0f;
        CHECK_EQ_INT(t, bad, 0);
    }
}

TEST(quant_fp16_subnormal_scales) {
    /* tiny blocks give subnormal fp16 scales; the round trip must still be sane */
    float x[32], y[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 16) * 1e-5f; /* d = 1.26e-6 < 2^-14 */
    cpulm_block_q8_0 b;
    cpulm_quantize_row_q8_0_ref(x, &b, 32);
    CHECK(t, (b.d & 0x7c00) == 0 && b.d != 0); /* subnormal */
    cpulm_dequantize_row_q8_0_ref(&b, y, 32);
    /* d's absolute precision is 2^-25 (half a subnormal step), times |q| <= 127, plus the
     * usual half step of rounding x / d */
    const double tol = 127 * ldexp(1, -25) + 0.5 * 1.6e-4 / 127;
    for (int j = 0; j < 32; j++)
        CHECK_NEAR(t, y[j], x[j], tol);
}

TEST(quant_q4_k_scale_packing) {
    /* 6-bit scales/mins 0..63 must survive the 12-byte packing for each sub-block */
    float x[256];
    fill_normalish(x, 256, 3, 1.0f);
    for (int j = 0; j < 256; j++)
        x[j] += (float)(j / 32) * 0.3f; /* varied mins */
    cpulm_block_q4_K b;
    cpulm_quantize_row_q4_K_ref(x, &b, 256);
    uint8_t sc, m, max_sc = 0;
    for (int j = 0; j < 8; j++) {
        cpulm_k4_scale_min(j, b.scales, &sc, &m);
        CHECK(t, sc <= 63 && m <= 63);
        if (sc > max_sc) max_sc = sc;
    }
    CHECK_EQ_INT(t, max_sc, 63); /* the largest sub-scale uses the full 6-bit range */
}

/* ---- bit-compatibility with llama.cpp's files ---- */

typedef struct {
    int64_t blocks, same, tensors;
    double se, sx;
} match_stats;

/* For every tensor of `type` in `qrel`, quantize the F32 original and compare blocks, and
 * dequantize the file's bytes and compare with the original. */
static int compare_with_llamacpp(test_ctx *t, const char *qrel, cpulm_dtype type, match_stats *st) {
    tfile f32, fq;
    memset(st, 0, sizeof *st);
    if (!tfile_load(&f32, "testdata/models/tiny-llama-f32.gguf") || !tfile_load(&fq, qrel)) {
        tfile_free(&f32);
        return 0;
    }
    const int bs = cpulm_dtype_traits_get(type)->type_size;
    for (uint64_t i = 0; i < fq.n; i++) {
        const tinfo *tq = &fq.t[i], *tf = tfile_find(&f32, tq->name);
        if (tq->type != (uint32_t)type || !tf || tf->type != CPULM_DTYPE_F32) continue;
        const int64_t n = tinfo_nel(tq);
        const float *orig = (const float *)(f32.data + tf->offset);
        const uint8_t *theirs = fq.data + tq->offset;
        uint8_t *mine = malloc(cpulm_dtype_row_bytes(type, n));
        float *deq = malloc((size_t)n * sizeof *deq);
        cpulm_quantize_row_ref(type, orig, mine, n);
        cpulm_dequantize_row_ref(type, theirs, deq, n);
        for (int64_t b = 0; b < (int64_t)cpulm_dtype_row_bytes(type, n) / bs; b++)
            st->same += !memcmp(mine + b * bs, theirs + b * bs, (size_t)bs);
        st->blocks += (int64_t)cpulm_dtype_row_bytes(type, n) / bs;
        for (int64_t k = 0; k < n; k++) {
            st->se += ((double)deq[k] - orig[k]) * ((double)deq[k] - orig[k]);
            st->sx += (double)orig[k] * orig[k];
        }
        st->tensors++;
        free(mine);
        free(deq);
    }
    tfile_free(&f32);
    tfile_free(&fq);
    CHECK(t, st->tensors > 0);
    printf("  %-36s %-5s %3lld tensors: %lld/%lld blocks identical (%.3f%%), dequant rel rmse "
           "%.4f\n",
           qrel + 16, cpulm_dtype_name(type), (long long)st->tensors, (long long)st->same,
           (long long)st->blocks, 100.0 * (double)st->same / (double)(st->blocks ? st->blocks : 1),
           sqrt(st->se / (st->sx > 0 ? st->sx : 1)));
    return 1;
}

TEST(quant_llamacpp_q8_0_exact) {
    match_stats st;
    if (!compare_with_llamacpp(t, "testdata/models/tiny-llama-q8_0.gguf", CPULM_DTYPE_Q8_0, &st))
        SKIP(t, "tiny-llama-{f32,q8_0}.gguf not found (CPULM_SHARED)");
    CHECK_EQ_INT(t, st.same, st.blocks);
    CHECK(t, sqrt(st.se / st.sx) < 6e-3);
}

TEST(quant_llamacpp_q4_0_exact) {
    match_stats st;
    if (!compare_with_llamacpp(t, "testdata/models/tiny-llama-q4_0.gguf", CPULM_DTYPE_Q4_0, &st))
        SKIP(t, "tiny-llama-{f32,q4_0}.gguf not found (CPULM_SHARED)");
    CHECK_EQ_INT(t, st.same, st.blocks);
    CHECK(t, sqrt(st.se / st.sx) < 0.12);
}

TEST(quant_llamacpp_k_quants) {
    static const struct {
        const char *file;
        cpulm_dtype type;
        double rmse;
    } cases[] = {
        {"testdata/models/tiny-llama-q6_k.gguf", CPULM_DTYPE_Q6_K, 0.022},
        {"testdata/models/tiny-llama-q4_k_m.gguf", CPULM_DTYPE_Q4_K, 0.09},
        {"testdata/models/tiny-llama-q4_k_m.gguf", CPULM_DTYPE_Q6_K, 0.022},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        match_stats st;
        if (!compare_with_llamacpp(t, cases[i].file, cases[i].type, &st))
            SKIP(t, "tiny-llama k-quant files not found (CPULM_SHARED)");
        CHECK(t, sqrt(st.se / st.sx) < cases[i].rmse);
        /* the scale search follows the reference's arithmetic, so bytes match exactly */
        CHECK_EQ_INT(t, st.same, st.blocks);
    }
}

/* cpulm_widen_q8_0 (the loader's widening of Q5_0, Q4_1 and Q5_1 matrices to Q8_0): random
 * block bytes, every fp16 scale class (normal, subnormal, zero, negative, inf, NaN; mins too)
 * and all-0 / all-max quants give, as Q8_0 plus the block's min, the same floats as the
 * type's own dequantization, bit for bit; and the same generic dots against the activations
 * (Q8_0, or Q8_1 for the types with mins: their s term is then the matmul's, not Q8_0's). */
static void widen_case(test_ctx *t, cpulm_dtype type) {
    enum { NB = 64 };
    const size_t bb = cpulm_dtype_traits_get(type)->type_size;
    uint8_t x[NB * 24];
    cpulm_block_q8_0 y[NB];
    float mins[NB];
    static const uint16_t scales[] = {0x3c00, 0x0001, 0x0000, 0xbc00, 0x7c00, 0x7e00, 0x2e66};
    uint64_t s = 11 + (uint64_t)type;
    for (size_t k = 0; k < sizeof x; k++)
        x[k] = (uint8_t)rng_next(&s);
    const int has_m = cpulm_widens_to_q8_0(type) == 2;
    for (int i = 0; i < NB; i++) {
        uint8_t *b = x + (size_t)i * bb;
        if (i % 3 == 0) memcpy(b, &scales[(i / 3) % 7], 2);
        if (has_m && i % 5 == 0) memcpy(b + 2, &scales[(i / 5) % 7], 2);
        if (i == 1 || i == 2) memset(b + (has_m ? 4 : 2), i == 1 ? 0 : 0xff, bb - (has_m ? 4 : 2));
    }
    cpulm_widen_q8_0(type, x, y, mins, 32 * NB);
    float fx[32 * NB], fy[32 * NB];
    cpulm_dequantize_row_ref(type, x, fx, 32 * NB);
    cpulm_dequantize_row_q8_0_ref(y, fy, 32 * NB);
    for (int i = 0; has_m && i < 32 * NB; i++)
        fy[i] += mins[i / 32];
    int same = 1;
    for (int i = 0; i < 32 * NB; i++) /* bits, NaN included */
        same &= memcmp(&fx[i], &fy[i], sizeof(float)) == 0;
    CHECK(t, same);
    int lo = 0, hi = 0;
    const int qmin = type == CPULM_DTYPE_Q5_0 ? -16 : 0,
              qmax = type == CPULM_DTYPE_Q4_1 ? 15 : qmin + 31;
    for (int i = 0; i < NB; i++)
        for (int j = 0; j < 32; j++)
            lo += y[i].qs[j] == qmin, hi += y[i].qs[j] == qmax;
    CHECK(t, lo >= 32 && hi >= 32); /* both ends of the range reached */
}

TEST(quant_widen_q8_0_exactly) {
    widen_case(t, CPULM_DTYPE_Q5_0);
    widen_case(t, CPULM_DTYPE_Q4_1);
    widen_case(t, CPULM_DTYPE_Q5_1);
    /* Q5_0's dots are Q8_0's: one generic formula, the same integer sums */
    enum { NB = 64 };
    cpulm_block_q5_0 x[NB];
    cpulm_block_q8_0 y[NB], a[NB];
    uint64_t s = 3;
    for (int i = 0; i < NB; i++) {
        uint8_t *b = (uint8_t *)&x[i];
        for (size_t k = 0; k < sizeof x[i]; k++)
            b[k] = (uint8_t)rng_next(&s);
        x[i].d = (uint16_t)(0x2000 + rng_next(&s) % 0x2000); /* finite */
    }
    cpulm_widen_q8_0(CPULM_DTYPE_Q5_0, x, y, NULL, 32 * NB);
    float act[32 * NB];
    fill_normalish(act, 32 * NB, 5, 1.0f);
    cpulm_quantize_row_q8_0_ref(act, a, 32 * NB);
    float d5, d8;
    cpulm_generic_vec_dot_q5_0_q8_0(32 * NB, &d5, x, a);
    cpulm_generic_vec_dot_q8_0_q8_0(32 * NB, &d8, y, a);
    CHECK(t, memcmp(&d5, &d8, sizeof d5) == 0);
}
