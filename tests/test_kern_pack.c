/* test_kern_pack.c: the repacked-weight GEMM (gemm_x16) table entries at every ISA level
 * against the generic table, the 16-row repacking round
 * trip, batch-size independence of the GEMM, and the matmul driver on packed weights. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/fp16.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "levels.h"
#include "model/repack.h"
#include "test.h"

#define MAX_LEVELS 16

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static float frand(uint64_t *s) { /* roughly uniform in [-1, 1) */
    return (float)((double)(rng(s) >> 11) / 4503599627370496.0 - 1.0);
}

/* A random matrix of rows x n quantized to type, row-major, and its packed copy. */
typedef struct pack_case {
    cpulm_dtype type, vdt; /* vdt: the activations' type (Q8_0 or Q8_K) */
    int64_t n, rows, nt;
    uint8_t *w, *packed, *act; /* act: nt rows of cpulm_matmul_act_bytes(vdt, n), + 4 misaligned */
    uint64_t stride;
    double *abs_sum; /* [nt * rows] sum |w x| for tolerances */
} pack_case;

/* A field of a block (byte offset, size) filled with bytes drawn from vals[0..nv). */
static void fill_field(uint8_t *blk, size_t off, size_t sz, const uint8_t *vals, int nv,
                       uint64_t *seed) {
    for (size_t i = 0; i < sz; i++)
        blk[off + i] = vals[rng(seed) % (uint64_t)nv];
}

/* Quants (and K-quant sub-block scales) at the ends of their ranges. */
static void extremize(cpulm_dtype type, uint8_t *blk, uint64_t *seed) {
    static const uint8_t q4[] = {0x0F, 0xF0, 0x00, 0xFF}, q8[] = {0x7F, 0x80}, ff[] = {0xFF},
                         bits[] = {0x00, 0xFF, 0x55, 0xAA}, s6[] = {0x7F, 0x80},
                         mx[] = {0x77, 0xFF, 0x7F, 0xF7};
    switch (type) {
    case CPULM_DTYPE_Q4_0: fill_field(blk, 2, 16, q4, 2, seed); break;
    case CPULM_DTYPE_Q8_0: fill_field(blk, 2, 32, q8, 2, seed); break;
    case CPULM_DTYPE_MXFP4: fill_field(blk, 1, 16, mx, 4, seed); break; /* +-6 (12 doubled) */
    case CPULM_DTYPE_Q4_K:                                              /* every scale and min 63 */
        fill_field(blk, 4, 12, ff, 1, seed);
        fill_field(blk, 16, 128, q4, 4, seed);
        break;
    case CPULM_DTYPE_Q5_K:
        fill_field(blk, 4, 12, ff, 1, seed);
        fill_field(blk, 16, 32, bits, 4, seed);
        fill_field(blk, 48, 128, q4, 4, seed);
        break;
    case CPULM_DTYPE_Q6_K: /* scales +127 / -128 */
        fill_field(blk, 0, 128, q4, 4, seed);
        fill_field(blk, 128, 64, bits, 4, seed);
        fill_field(blk, 192, 16, s6, 2, seed);
        break;
    default: break;
    }
}

/* Q4_0 / Q8_0 / MXFP4 quants all at the end of largest magnitude (nibble 15, -128, +6):
 * with activations all at 127, every int16 partial sum of the x86 kernels is as large as it
 * gets. */
static void max_quants(cpulm_dtype type, uint8_t *blk, uint64_t *seed) {
    static const uint8_t q4[] = {0xFF}, q8[] = {0x80}, mx[] = {0x77};
    if (type == CPULM_DTYPE_MXFP4) fill_field(blk, 1, 16, mx, 1, seed); /* all +12: u = 24 */
    if (type == CPULM_DTYPE_Q4_0) fill_field(blk, 2, 16, q4, 1, seed);
    if (type == CPULM_DTYPE_Q8_0) fill_field(blk, 2, 32, q8, 1, seed);
}

/* Integer activations that put the Q8_K sums of 32 elements (b32, the K-quant min term's
 * input) at their ends (+-4064) and on the ties of the ARM split b32 = 256 a + c (c = -128:
 * +-128, +-3968), or anywhere in range: with element 0 of each super-block at -127 the Q8_K
 * scale is 1 and every quant equals its input. */
static void bsum_extremes(float *f, int64_t n, uint64_t *seed) {
    static const int targets[] = {4064, -4064, 128, -128, 3968, -3968, 384, 0};
    for (int64_t j = 0; j < n / 32; j++) {
        const uint64_t k = rng(seed) % 10;
        int rem = k < 8 ? targets[k] : (int)(rng(seed) % 8129) - 4064;
        float *s = f + 32 * j;
        const int first = j % 8 == 0;
        if (first) s[0] = -127.0f, rem += 127;
        for (int i = first; i < 32; i++) {
            int v = rem / (32 - i);
            v = v < -127 ? -127 : v > 127 ? 127 : v;
            s[i] = (float)v;
            rem -= v;
        }
    }
}

/* Q4_0 / Q8_0 block scales at the ends of fp16 (subnormals, the smallest normal, 65504,
 * zero, both signs): the ARM Q4_0 tile scales its products by 16 and dw by 1/16, exact only
 * if no scale falls out of fp32's normal range on the way. */
static void scale_ends(cpulm_dtype type, uint8_t *blk, uint64_t *seed) {
    static const uint16_t ends[] = {0x0001, 0x03FF, 0x0400, 0x7BFF, 0x8001, 0xFBFF, 0x0000, 0x3C00};
    if (type != CPULM_DTYPE_Q4_0 && type != CPULM_DTYPE_Q8_0 && type != CPULM_DTYPE_MXFP4) return;
    static const uint8_t e8[] = {0, 1, 2, 3, 127, 128, 200, 1};
    if (type == CPULM_DTYPE_MXFP4) { /* the subnormal scales 2^-128, 2^-127 included */
        blk[0] = e8[rng(seed) % 8];
        return;
    }
    const uint16_t h = ends[rng(seed) % 8];
    memcpy(blk, &h, 2); /* d is the block's first field (little-endian fp16) */
}

static int make_case(pack_case *c, cpulm_dtype type, int64_t n, int64_t rows, int64_t nt,
                     uint64_t seed, int extreme) {
    memset(c, 0, sizeof *c);
    c->type = type, c->n = n, c->rows = rows, c->nt = nt;
    c->vdt = cpulm_dtype_traits_get(type)->vec_dot_type;
    const uint64_t rb = cpulm_dtype_row_bytes(type, n);
    const int64_t qk = cpulm_dtype_traits_get(type)->block;
    c->stride = (cpulm_matmul_act_bytes(c->vdt, n) + 4 + 63) / 64 * 64 + 4; /* misaligned rows */
    c->w = malloc(rb * (size_t)rows);
    c->packed = malloc(rb * (size_t)rows);
    c->act = malloc(c->stride * (size_t)nt + 64);
    c->abs_sum = calloc((size_t)(nt * rows), sizeof *c->abs_sum);
    float *f = malloc(sizeof(float) * (size_t)n), *wf = malloc(sizeof(float) * (size_t)(n * rows));
    if (!c->w || !c->packed || !c->act || !c->abs_sum || !f || !wf) return 0;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++)
            f[i] = frand(&seed) * 0.05f;
        cpulm_quantize_row_ref(type, f, c->w + (size_t)r * rb, n);
        for (int64_t b = 0; extreme && b < n / qk; b++) {
            uint8_t *blk = c->w + (size_t)r * rb + (size_t)b * (rb / (size_t)(n / qk));
            if (extreme == 3)
                max_quants(type, blk, &seed);
            else if (extreme == 4)
                scale_ends(type, blk, &seed);
            else
                extremize(type, blk, &seed);
        }
        cpulm_dequantize_row_ref(type, c->w + (size_t)r * rb, wf + r * n, n);
    }
    cpulm_repack_x16(type, CPULM_X16_STD, c->w, c->packed, n, rows);
    for (int64_t j = 0; j < nt; j++) {
        if (extreme == 2 && c->vdt == CPULM_DTYPE_Q8_K)
            bsum_extremes(f, n, &seed);
        else if (extreme == 3)
            for (int64_t i = 0; i < n; i++)
                f[i] = 1.0f;
        else
            for (int64_t i = 0; i < n; i++)
                f[i] = extreme ? ((rng(&seed) & 1) ? 1.0f : -1.0f) : frand(&seed) * 2.0f;
        uint8_t *row = c->act + 4 + (size_t)j * c->stride;
        cpulm_matmul_quantize_act(&cpulm_kernels_generic, c->vdt, f, row, n);
        cpulm_dequantize_row_ref(c->vdt, row, f, n);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < n; i++)
                c->abs_sum[j * rows + r] += fabs((double)wf[r * n + i] * f[i]);
    }
    free(f);
    free(wf);
    return 1;
}

static void free_case(pack_case *c) {
    free(c->w);
    free(c->packed);
    free(c->act);
    free(c->abs_sum);
}

/* Runs level k's gemm over every group of the case into out [nt][rows], on the weights
 * packed in the layout k reads (c->packed when that is the shared one). */
static void run_gemm(test_ctx *t, const cpulm_kernels *k, const pack_case *c, float *out) {
    const uint64_t rb = cpulm_dtype_row_bytes(c->type, c->n);
    const int layout = k->x16_layout[c->type];
    uint8_t *own = layout == CPULM_X16_STD ? NULL : malloc(rb * (size_t)c->rows);
    REQUIRE(t, layout == CPULM_X16_STD || own);
    if (own) cpulm_repack_x16(c->type, layout, c->w, own, c->n, c->rows);
    const uint8_t *w = own ? own : c->packed;
    for (int64_t g = 0; g < c->rows / CPULM_PACK_ROWS; g++)
        k->gemm_x16[c->type](c->n, (int)c->nt, out + g * CPULM_PACK_ROWS, c->rows,
                             w + (size_t)g * CPULM_PACK_ROWS * rb, c->act + 4, c->stride);
    free(own);
}

static int is_k_quant(cpulm_dtype t) {
    return t == CPULM_DTYPE_Q4_K || t == CPULM_DTYPE_Q5_K || t == CPULM_DTYPE_Q6_K;
}

/* Every level's gemm against the generic vec_dot of the original rows, and every level's
 * token j (of nt) bit-identical to the same level run on token j alone. K-quant levels
 * also equal the generic gemm bit for bit (exact int sums, the same fused float steps). */
static void check_gemm(test_ctx *t, const pack_case *c) {
    const cpulm_kernels *lv[MAX_LEVELS];
    const int nl = test_kernel_levels(lv, MAX_LEVELS);
    const size_t nout = (size_t)(c->nt * c->rows);
    float *ref = malloc(sizeof(float) * nout), *got = malloc(sizeof(float) * nout);
    float *one = malloc(sizeof(float) * (size_t)c->rows), *gen = malloc(sizeof(float) * nout);
    REQUIRE(t, ref && got && one && gen);
    run_gemm(t, &cpulm_kernels_generic, c, gen);
    const uint64_t rb = cpulm_dtype_row_bytes(c->type, c->n);
    for (int64_t j = 0; j < c->nt; j++)
        for (int64_t r = 0; r < c->rows; r++)
            cpulm_kernels_generic.vec_dot[c->type](c->n, &ref[j * c->rows + r],
                                                   c->w + (size_t)r * rb,
                                                   c->act + 4 + (size_t)j * c->stride);
    for (int l = 0; l < nl; l++) {
        for (size_t i = 0; i < nout; i++)
            got[i] = NAN;
        run_gemm(t, lv[l], c, got);
        int bad = 0;
        for (size_t i = 0; i < nout; i++)
            bad += !(fabs((double)got[i] - ref[i]) <= 1e-5 * c->abs_sum[i] + 1e-30);
        if (bad)
            fprintf(stderr, "  %s %s n=%lld nt=%lld: %d of %zu off (e.g. %g vs %g)\n", lv[l]->name,
                    cpulm_dtype_name(c->type), (long long)c->n, (long long)c->nt, bad, nout, got[0],
                    ref[0]);
        CHECK_EQ_INT(t, bad, 0);
        if (is_k_quant(c->type)) CHECK(t, memcmp(got, gen, sizeof(float) * nout) == 0);
        pack_case single = *c;
        single.nt = 1;
        for (int64_t j = 0; j < c->nt; j++) {
            single.act = c->act + (size_t)j * c->stride;
            run_gemm(t, lv[l], &single, one);
            CHECK(t, memcmp(one, got + j * c->rows, sizeof(float) * (size_t)c->rows) == 0);
        }
    }
    free(ref);
    free(got);
    free(one);
    free(gen);
}

TEST(kern_pack_gemm_all_levels) {
    static const cpulm_dtype types[] = {CPULM_DTYPE_Q4_0, CPULM_DTYPE_Q8_0, CPULM_DTYPE_MXFP4};
    static const int64_t nblocks[] = {1, 37, 100};
    static const int64_t nts[] = {1, 3, 4, 9};
    uint64_t seed = 7;
    for (int ti = 0; ti < 3; ti++)
        for (int bi = 0; bi < 3; bi++)
            for (int ni = 0; ni < 4; ni++) {
                pack_case c;
                REQUIRE(t, make_case(&c, types[ti], nblocks[bi] * 32, 32, nts[ni], seed++, 0));
                check_gemm(t, &c);
                free_case(&c);
            }
}

TEST(kern_pack_gemm_k_all_levels) {
    static const cpulm_dtype types[] = {CPULM_DTYPE_Q4_K, CPULM_DTYPE_Q5_K, CPULM_DTYPE_Q6_K};
    static const int64_t nsb[] = {1, 3, 11};
    static const int64_t nts[] = {1, 2, 5, 8, 11};
    uint64_t seed = 17;
    for (int ti = 0; ti < 3; ti++)
        for (int bi = 0; bi < 3; bi++)
            for (int ni = 0; ni < 5; ni++) {
                pack_case c;
                REQUIRE(t, make_case(&c, types[ti], nsb[bi] * 256, 32, nts[ni], seed++, 0));
                check_gemm(t, &c);
                free_case(&c);
            }
}

TEST(kern_pack_gemm_extreme_quants) {
    static const cpulm_dtype types[] = {CPULM_DTYPE_Q4_0, CPULM_DTYPE_Q8_0, CPULM_DTYPE_Q4_K,
                                        CPULM_DTYPE_Q5_K, CPULM_DTYPE_Q6_K, CPULM_DTYPE_MXFP4};
    for (int ti = 0; ti < 6; ti++) {
        pack_case c;
        const int64_t n = is_k_quant(types[ti]) ? 5 * 256 : 37 * 32;
        REQUIRE(t, make_case(&c, types[ti], n, 16, 9, 99 + (uint64_t)ti, 1));
        check_gemm(t, &c);
        free_case(&c);
    }
}

/* K-quant GEMMs with every min / scale at 63 (extreme weights) against activations whose
 * 32-element sums sit at their ends and on the rounding ties of the ARM min term's split
 * (x16_ksdot.h): bit-identical to generic at every level. 17 super-blocks: past the ARM
 * Q4_K tile's chunk of 16 staged splits. */
TEST(kern_pack_gemm_k_bsum_extremes) {
    static const cpulm_dtype types[] = {CPULM_DTYPE_Q4_K, CPULM_DTYPE_Q5_K, CPULM_DTYPE_Q6_K};
    for (int ti = 0; ti < 3; ti++) {
        pack_case c;
        REQUIRE(t, make_case(&c, types[ti], 17 * 256, 16, 9, 41 + (uint64_t)ti, 2));
        check_gemm(t, &c);
        free_case(&c);
    }
}

/* Q4_0 / Q8_0 weight scales at the ends of fp16, MXFP4's subnormal and large ones (scale_ends),
 * every level against generic and each token bit for bit against itself alone (the 8-token tile
 * against decode). */
TEST(kern_pack_gemm_scale_ends) {
    static const cpulm_dtype types[] = {CPULM_DTYPE_Q4_0, CPULM_DTYPE_Q8_0, CPULM_DTYPE_MXFP4};
    for (int ti = 0; ti < 3; ti++) {
        pack_case c;
        REQUIRE(t, make_case(&c, types[ti], 37 * 32, 32, 9, 61 + (uint64_t)ti, 4));
        check_gemm(t, &c);
        free_case(&c);
    }
}

/* Every token count 1..67 (with two groups, so ld = 32): the SIMD levels tile tokens (the
 * ARM ones by 7 and 8, x86 by 8) and every tail size, and more than one full tile
 * plus a tail, must give each token the same result as alone. */
TEST(kern_pack_gemm_token_counts) {
    uint64_t seed = 11;
    for (int ti = 0; ti < 3; ti++)
        for (int64_t nt = 1; nt <= 67; nt++) {
            pack_case c;
            const cpulm_dtype type = ti == 2 ? CPULM_DTYPE_MXFP4
                                     : ti    ? CPULM_DTYPE_Q8_0
                                             : CPULM_DTYPE_Q4_0;
            REQUIRE(t, make_case(&c, type, 3 * 32, 32, nt, seed++, nt % 5 == 0));
            check_gemm(t, &c);
            free_case(&c);
        }
}

/* A level's multi-group GEMM (x16_groups) against its one-group gemm_x16, bit for bit: 10
 * groups in one call and split 3 + 7 (the ARM i8mm level shares its staged tokens among 8
 * groups), 37 blocks (past its 32-block chunk), the 8-token tile, a tail and one token. */
TEST(kern_pack_gemm_groups) {
    const cpulm_kernels *lv[MAX_LEVELS];
    const int nl = test_kernel_levels(lv, MAX_LEVELS);
    static const cpulm_dtype types[] = {CPULM_DTYPE_Q4_0, CPULM_DTYPE_Q8_0};
    static const int64_t nts[] = {1, 9, 16};
    const int64_t rows = 160, ng = rows / CPULM_PACK_ROWS;
    uint64_t seed = 71;
    for (int ti = 0; ti < 2; ti++)
        for (int ni = 0; ni < 3; ni++) {
            pack_case c;
            REQUIRE(t, make_case(&c, types[ti], 37 * 32, rows, nts[ni], seed++, ni == 1));
            const size_t nout = (size_t)(c.nt * rows);
            float *one = malloc(sizeof(float) * nout), *all = malloc(sizeof(float) * nout);
            REQUIRE(t, one && all);
            for (int l = 0; l < nl; l++) {
                cpulm_gemm_groups_fn groups = lv[l]->x16_groups[c.type];
                CHECK(t, groups || strcmp(lv[l]->name, "i8mm") != 0); /* it has one */
                if (!groups) continue;
                const uint64_t gb = cpulm_dtype_row_bytes(c.type, c.n) * CPULM_PACK_ROWS;
                uint8_t *w = malloc(gb * (size_t)ng);
                REQUIRE(t, w);
                cpulm_repack_x16(c.type, lv[l]->x16_layout[c.type], c.w, w, c.n, rows);
                for (int64_t g = 0; g < ng; g++)
                    lv[l]->gemm_x16[c.type](c.n, (int)c.nt, one + g * CPULM_PACK_ROWS, rows,
                                            w + (size_t)g * gb, c.act + 4, c.stride);
                for (int split = 0; split < 2; split++) {
                    for (size_t i = 0; i < nout; i++)
                        all[i] = NAN;
                    const int first = split ? 3 : (int)ng;
                    groups(c.n, (int)c.nt, first, all, rows, w, gb, c.act + 4, c.stride);
                    if (split)
                        groups(c.n, (int)c.nt, (int)ng - first, all + first * CPULM_PACK_ROWS, rows,
                               w + (size_t)first * gb, gb, c.act + 4, c.stride);
                    CHECK(t, memcmp(one, all, sizeof(float) * nout) == 0);
                }
                free(w);
            }
            free(one);
            free(all);
            free_case(&c);
        }
}

/* The largest int16 partial sums (max_quants: a Q4_0 block's 8 maddubs summed in int16 reach
 * 16 * 15 * 127 = 30480 per lane) at every token count a level tiles differently. */
TEST(kern_pack_gemm_int16_bounds) {
    static const int64_t nts[] = {1, 2, 3, 4, 5};
    for (int ti = 0; ti < 3; ti++)
        for (int ni = 0; ni < 5; ni++) {
            pack_case c;
            const cpulm_dtype type = ti == 2 ? CPULM_DTYPE_MXFP4
                                     : ti    ? CPULM_DTYPE_Q8_0
                                             : CPULM_DTYPE_Q4_0;
            REQUIRE(t, make_case(&c, type, 37 * 32, 32, nts[ni], 5 + (uint64_t)ni, 3));
            check_gemm(t, &c);
            free_case(&c);
        }
}

/* The merged level called name among those this CPU runs, or NULL. */
static const cpulm_kernels *native_level(const char *name) {
    const cpulm_kernels *lv[MAX_LEVELS];
    const int n = cpulm_kernels_levels(lv, MAX_LEVELS);
    for (int i = 0; i < n; i++)
        if (strcmp(lv[i]->name, name) == 0) return lv[i];
    return NULL;
}

/* The amx level's int8 tiles: 16 tokens per tile, panels of 32 blocks (1, 33 and 70 blocks:
 * one, two and three panels, an odd block count ends on a single-block step) or of 4 K-quant
 * super-blocks (1, 5, 9; Q6_K: one at a time; with bsum extremes among the cases), token counts
 * with and without a tail (9 alone, 16 + 14; MXFP4's tails of 6+ as AMX tiles), random, extreme
 * (+-1 activations, max quants) and fp16-end scales. Every element must equal avx512vnni's bit for
 * bit (the same per-block float steps on exact sums), besides check_gemm's generic tolerance and
 * token-alone identity. Applies where the CPU has AMX-INT8 and the OS grants the tile state (a CPU
 * with AMX must get the level: a detection that loses it fails here). */
TEST(kern_pack_gemm_amx) {
    const char *f = cpulm_cpu_features();
    if (!strstr(f, " amx-tile") || !strstr(f, " amx-int8"))
        NOT_APPLICABLE(t, "the CPU has no AMX-TILE / AMX-INT8");
    if (strstr(f, "(os: no amx state)") || strstr(f, "(os: amx not granted)") ||
        strstr(f, "(amx: os not supported)"))
        NOT_APPLICABLE(t, "the OS does not give this process the AMX tile state");
    const cpulm_kernels *amx = native_level("amx"), *vnni = native_level("avx512vnni");
    REQUIRE(t, amx && vnni);
    static const cpulm_dtype types[] = {CPULM_DTYPE_Q4_0, CPULM_DTYPE_Q8_0, CPULM_DTYPE_MXFP4,
                                        CPULM_DTYPE_Q4_K, CPULM_DTYPE_Q5_K, CPULM_DTYPE_Q6_K};
    static const int64_t nblocks[] = {1, 33, 70};
    static const int64_t nsb[] = {1, 5, 9};
    /* tails of 5, 3 tokens go to avx512vnni; 9 (alone) and 14 too, except MXFP4's, which run
     * as tiles of the tail's rows (AMX_TAIL_MIN), the second 16-row group after the first
     * one's tail tile (the tail first, no reconfiguration) */
    static const int64_t nts[] = {16, 21, 64, 67, 9, 30};
    static const int extremes[] = {0, 1, 3, 4, 2};
    uint64_t seed = 2026;
    for (int ti = 0; ti < 6; ti++)
        for (int bi = 0; bi < 3; bi++)
            for (int ni = 0; ni < 6; ni++) {
                pack_case c;
                const int kq = is_k_quant(types[ti]);
                const int ex = extremes[(ti + bi + ni) % (kq ? 5 : 4)];
                const int64_t n = kq ? nsb[bi] * 256 : nblocks[bi] * 32;
                REQUIRE(t, make_case(&c, types[ti], n, 32, nts[ni], seed++, ex));
                CHECK(t, amx->gemm_x16[c.type] != vnni->gemm_x16[c.type]);
                const size_t nout = (size_t)(c.nt * c.rows);
                float *a = malloc(sizeof(float) * nout), *v = malloc(sizeof(float) * nout);
                REQUIRE(t, a && v);
                run_gemm(t, amx, &c, a);
                run_gemm(t, vnni, &c, v);
                const int same = memcmp(a, v, sizeof(float) * nout) == 0;
                if (!same)
                    fprintf(stderr, "  amx %s n=%lld nt=%lld: differs from avx512vnni\n",
                            cpulm_dtype_name(c.type), (long long)c.n, (long long)c.nt);
                CHECK(t, same);
                check_gemm(t, &c);
                free(a);
                free(v);
                free_case(&c);
            }
}

TEST(kern_pack_repack_roundtrip) {
    static const cpulm_dtype types[] = {CPULM_DTYPE_Q4_0, CPULM_DTYPE_Q8_0, CPULM_DTYPE_Q4_K,
                                        CPULM_DTYPE_Q5_K, CPULM_DTYPE_Q6_K, CPULM_DTYPE_MXFP4};
    for (int ti = 0; ti < 6; ti++) {
        const cpulm_dtype type = types[ti];
        pack_case c;
        /* more blocks than get_row rebuilds per step */
        const int64_t n = is_k_quant(type) ? 23 * 256 : 245 * 32;
        REQUIRE(t, make_case(&c, type, n, 48, 1, 3, 0));
        for (int layout = CPULM_X16_STD; layout <= CPULM_X16_PAIRS; layout++) {
            cpulm_tensor packed = {.data = c.packed,
                                   .type = type,
                                   .ne = {n, 48},
                                   .row_bytes = cpulm_dtype_row_bytes(type, n),
                                   .packed = 1 + layout};
            cpulm_repack_x16(type, layout, c.w, c.packed, n, 48);
            float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
            REQUIRE(t, a && b);
            int bad = 0;
            for (int64_t r = 0; r < 48; r++) {
                cpulm_dequantize_row_ref(type, c.w + (size_t)r * packed.row_bytes, a, n);
                cpulm_repack_get_row(&cpulm_kernels_generic, &packed, r, b);
                bad += memcmp(a, b, sizeof(float) * (size_t)n) != 0;
            }
            CHECK_EQ_INT(t, bad, 0);
            free(a);
            free(b);
        }
        free_case(&c);
    }
}

/* The packed layout written out from its rule (kernels.h), one byte at a time: per 16-row
 * group and block, each field as the 16 rows' copies, 1- and 2-byte fields side by side, longer
 * ones as 64-byte chunks of 4-byte lanes. */
static void repack_oracle(cpulm_dtype type, const uint8_t *src, uint8_t *dst, int64_t n,
                          int64_t rows) {
    int nf = 0, sz[5] = {0};
    switch (type) {
    case CPULM_DTYPE_Q4_0: nf = 2, sz[0] = 2, sz[1] = 16; break;
    case CPULM_DTYPE_Q8_0: nf = 2, sz[0] = 2, sz[1] = 32; break;
    case CPULM_DTYPE_MXFP4: nf = 2, sz[0] = 1, sz[1] = 16; break;
    case CPULM_DTYPE_Q4_K: nf = 4, sz[0] = 2, sz[1] = 2, sz[2] = 12, sz[3] = 128; break;
    case CPULM_DTYPE_Q5_K: nf = 5, sz[0] = 2, sz[1] = 2, sz[2] = 12, sz[3] = 32, sz[4] = 128; break;
    case CPULM_DTYPE_Q6_K: nf = 4, sz[0] = 128, sz[1] = 64, sz[2] = 16, sz[3] = 2; break;
    default: return;
    }
    const size_t rb = cpulm_dtype_row_bytes(type, n);
    const int64_t nb = n / cpulm_dtype_traits_get(type)->block;
    const size_t bb = rb / (size_t)nb;
    size_t o = 0;
    for (int64_t g = 0; g < rows / 16; g++)
        for (int64_t b = 0; b < nb; b++)
            for (int f = 0, off = 0; f < nf; off += sz[f++])
                for (int c = 0; c < (sz[f] <= 2 ? 1 : sz[f] / 4); c++)
                    for (int r = 0; r < 16; r++)
                        for (int i = 0; i < (sz[f] <= 2 ? sz[f] : 4); i++)
                            dst[o++] = src[(size_t)(g * 16 + r) * rb + (size_t)b * bb +
                                           (size_t)off + (size_t)(sz[f] <= 2 ? i : 4 * c + i)];
}

/* The CPULM_X16_PAIRS layout of Q4_0 / Q8_0 (qb quant bytes per row) from its rule
 * (kernels.h), one byte at a time: per group and block the 16 fp16 d in row order, then per
 * row pair p and 8-byte piece j a 16-byte vector: row 2p's piece j, then row 2p + 1's; Q4_0
 * bytes XOR 0x88. */
static void repack_oracle_pairs(cpulm_dtype type, const uint8_t *src, uint8_t *dst, int64_t n,
                                int64_t rows) {
    const size_t qb = type == CPULM_DTYPE_Q4_0 ? 16 : 32, bb = 2 + qb, nb = (size_t)n / 32;
    const uint8_t flip = type == CPULM_DTYPE_Q4_0 ? 0x88 : 0;
    size_t o = 0;
    for (int64_t g = 0; g < rows / 16; g++)
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = src + (size_t)(g * 16) * nb * bb + b * bb; /* row 0's */
            for (size_t r = 0; r < 16; r++)
                for (size_t i = 0; i < 2; i++)
                    dst[o++] = blk[r * nb * bb + i];
            for (size_t p = 0; p < 8; p++)
                for (size_t j = 0; j < qb / 8; j++)
                    for (size_t h = 0; h < 2; h++)
                        for (size_t i = 0; i < 8; i++)
                            dst[o++] = blk[(2 * p + h) * nb * bb + 2 + 8 * j + i] ^ flip;
        }
}

#if defined(__aarch64__)
/* Byte i (0..3) of row blk's lane in quant chunk ch of the ARM layout of its super-block. */
typedef uint8_t (*arm_byte_fn)(const uint8_t *blk, int ch, int i);

/* The ARM layout of a type (blocks of bb bytes, n_ch quant chunks from byte off of each group
 * super-block) one byte at a time: chunk ch, byte 4r + i is byte(row r's block, ch, i). */
static void repack_oracle_arm(const uint8_t *src, uint8_t *dst, int64_t n, int64_t rows, size_t bb,
                              int n_ch, size_t off, arm_byte_fn byte) {
    const size_t rb = bb * (size_t)(n / 256);
    for (int64_t g = 0; g < rows / 16; g++)
        for (int64_t b = 0; b < n / 256; b++)
            for (int ch = 0; ch < n_ch; ch++)
                for (int r = 0; r < 16; r++)
                    for (int i = 0; i < 4; i++) {
                        const uint8_t *blk = src + (size_t)(g * 16 + r) * rb + (size_t)b * bb;
                        dst[(size_t)(g * (n / 256) + b) * 16 * bb + off + 64 * (size_t)ch +
                            4 * (size_t)r + (size_t)i] = byte(blk, ch, i);
                    }
}

/* Q6_K quant (0..63) of element e of a row-major block (ql at 0, qh at 128). */
static int k6_q(const uint8_t *blk, int e) {
    const int lo = blk[64 * (e / 128) + e % 64] >> (4 * (e % 128 / 64)) & 15;
    return lo | (blk[128 + 32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32)) & 3) << 4;
}

/* Q6_K's 48 quant chunks in the ARM layout, from its rule (kernels/arm/k6_layout.h): chunk
 * 3gi + k, byte 4r + b = top 6 bits of 4q - 128 of element 16gi + 4k + b, and in its low 2
 * bits bits 7-2k, 6-2k of 4q - 128 of element 16gi + 12 + b. */
static uint8_t k6_arm_byte(const uint8_t *blk, int ch, int i) {
    const int k = ch % 3, e = 16 * (ch / 3) + 4 * k + i;
    const int v = (4 * k6_q(blk, e) - 128) & 0xFF;
    const int v3 = (4 * k6_q(blk, e + 12 - 4 * k) - 128) & 0xFF;
    return (uint8_t)((v & 0xFC) | (v3 >> (6 - 2 * k) & 3));
}

/* Q5_K quant (0..31) of element e of a row-major block (qh at 16, qs at 48). */
static int k5_q(const uint8_t *blk, int e) {
    const int lo = blk[48 + 32 * (e / 64) + e % 32] >> (4 * (e / 32 % 2)) & 15;
    return lo | (blk[16 + e % 32] >> (e / 32) & 1) << 4;
}

/* Q5_K's 40 quant chunks in the ARM layout, from its rule (kernels/arm/k5_layout.h): chunk
 * 5j + k, byte 4r + b = in bits 4-0 the quant of element 32j + 4k + b, in bits 7-5 (q5, q6,
 * q7: the quants of elements 32j + 20 + b, 24 + b, 28 + b): k = 0: q5 bits 4-2; 1: q5 bits
 * 1-0, q6 bit 4; 2: q6 bits 3-1; 3: q6 bit 0, q7 bits 1-0; 4: q7 bits 4-2 (for k < 3 the
 * top of the 15 bits q5 q6 q7, 3 at a time). */
static uint8_t k5_arm_byte(const uint8_t *blk, int ch, int i) {
    const int j = ch / 5, k = ch % 5, e = 32 * j + i;
    const int q5 = k5_q(blk, e + 20), q6 = k5_q(blk, e + 24), q7 = k5_q(blk, e + 28);
    const int bits = q5 << 10 | q6 << 5 | q7; /* 15 bits, q5 first */
    const int top = k < 3 ? bits >> (12 - 3 * k) & 7 : k == 3 ? (q6 & 1) << 2 | (q7 & 3) : q7 >> 2;
    return (uint8_t)(k5_q(blk, e + 4 * k) | top << 5);
}
#endif

/* cpulm_repack_x16 and its threaded form write exactly the bytes of the rule, for every
 * packed type and thread count (splits that do not divide the groups evenly included). */
TEST(kern_pack_repack_bytes) {
    static const cpulm_dtype types[] = {CPULM_DTYPE_Q4_0, CPULM_DTYPE_Q8_0, CPULM_DTYPE_Q4_K,
                                        CPULM_DTYPE_Q5_K, CPULM_DTYPE_Q6_K, CPULM_DTYPE_MXFP4};
    uint64_t seed = 77;
    for (int ti = 0; ti < 6; ti++) {
        const cpulm_dtype type = types[ti];
        const int64_t n = is_k_quant(type) ? 2 * 256 : 3 * 32, rows = 16 * 203;
        const size_t bytes = cpulm_dtype_row_bytes(type, n) * (size_t)rows;
        uint8_t *src = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes);
        REQUIRE(t, src && want && got);
        for (size_t i = 0; i < bytes; i++)
            src[i] = (uint8_t)rng(&seed);
        repack_oracle(type, src, want, n, rows);
#if defined(__aarch64__)
        if (type == CPULM_DTYPE_Q6_K)
            repack_oracle_arm(src, want, n, rows, sizeof(cpulm_block_q6_K), 48, 0, k6_arm_byte);
        if (type == CPULM_DTYPE_Q5_K) /* its quants from byte 256, after d, dmin, scales */
            repack_oracle_arm(src, want, n, rows, sizeof(cpulm_block_q5_K), 40, 256, k5_arm_byte);
#endif
        for (int layout = CPULM_X16_STD; layout <= CPULM_X16_PAIRS; layout++) {
            /* PAIRS is a variant of Q4_0 and Q8_0 only: the others pack as STD */
            if (layout == CPULM_X16_PAIRS && (type == CPULM_DTYPE_Q4_0 || type == CPULM_DTYPE_Q8_0))
                repack_oracle_pairs(type, src, want, n, rows);
            memset(got, 0xA5, bytes);
            cpulm_repack_x16(type, layout, src, got, n, rows);
            CHECK(t, memcmp(got, want, bytes) == 0);
            static const int nths[] = {1, 2, 3, 4, 64};
            for (int k = 0; k < 5; k++) {
                memset(got, 0x5A, bytes);
                cpulm_repack_x16_mt(type, layout, src, got, n, rows, nths[k]);
                CHECK(t, memcmp(got, want, bytes) == 0);
            }
        }
        free(src);
        free(want);
        free(got);
    }
}

/* cpulm_matmul on packed weights (any thread split, bias, accumulate, plain stores that the
 * kernel writes into the output rows themselves, more tokens than a chunk, output rows wider
 * than the matrix) equals the row-major path bit for bit at the generic level, and within
 * tolerance at the best level; the columns past the matrix stay untouched. */
static void check_driver(test_ctx *t, cpulm_dtype type, int64_t n, int64_t rows) {
    pack_case c;
    const int64_t nt = 70, ld = rows + 16;
    REQUIRE(t, make_case(&c, type, n, rows, nt, 5, 0));
    float *bias = malloc(sizeof(float) * (size_t)rows);
    REQUIRE(t, bias);
    for (int i = 0; i < rows; i++)
        bias[i] = (float)i * 0.25f;
    float *a = malloc(sizeof(float) * (size_t)(nt * ld)),
          *b = malloc(sizeof(float) * (size_t)(nt * ld));
    REQUIRE(t, a && b);
    const cpulm_kernels *best = cpulm_kernels_get();
    for (int p = 0; p < 3; p++) { /* bias; bias and accumulate; neither */
        for (int64_t i = 0; i < nt * ld; i++)
            a[i] = b[i] = 1.0f;
        cpulm_matmul_args args = {.w = c.w,
                                  .w_type = c.type,
                                  .w_row_bytes = cpulm_dtype_row_bytes(c.type, n),
                                  .n_in = n,
                                  .n_out = rows,
                                  .act = c.act + 4,
                                  .act_stride = c.stride,
                                  .n_rows = nt,
                                  .out = a,
                                  .ld_out = ld,
                                  .bias = p < 2 ? bias : NULL,
                                  .accumulate = p == 1};
        cpulm_matmul(&cpulm_kernels_generic, &args, 0, 1);
        cpulm_repack_x16(type, best->x16_layout[type], c.w, c.packed, n, rows);
        args.w = c.packed;
        args.packed = 1 + best->x16_layout[type];
        args.out = b;
        for (int ith = 0; ith < 3; ith++)
            cpulm_matmul(best, &args, ith, 3);
        int bad = 0;
        for (int64_t j = 0; j < nt; j++)
            for (int64_t r = 0; r < ld; r++) {
                const float x = a[j * ld + r], y = b[j * ld + r];
                bad += r < rows ? !(fabs((double)x - y) <=
                                    1e-5 * c.abs_sum[j * rows + r] + 1e-6 * (fabs(x) + 1))
                                : !(x == 1.0f && y == 1.0f);
            }
        CHECK_EQ_INT(t, bad, 0);
    }
    free(bias);
    free(a);
    free(b);
    free_case(&c);
}

TEST(kern_pack_matmul_driver) {
    check_driver(t, CPULM_DTYPE_Q4_0, 8 * 32, 64);
    check_driver(t, CPULM_DTYPE_Q4_K, 2 * 256, 64);
    check_driver(t, CPULM_DTYPE_Q6_K, 2 * 256, 64);
    /* 9 groups per thread: past the 8 of one x16_groups call */
    check_driver(t, CPULM_DTYPE_Q8_0, 3 * 32, 27 * 16);
}

static void groups_stub(int64_t n, int nt, int ng, float *s, int64_t ld, const void *w,
                        uint64_t group_bytes, const uint8_t *act, uint64_t act_stride) {
    (void)n, (void)nt, (void)ng, (void)s, (void)ld, (void)w, (void)group_bytes, (void)act;
    (void)act_stride;
}

/* The packed layout a GEMM reads (and its multi-group form) travels with its gemm_x16 entry
 * when levels merge: a level that sets the entry brings its layout (STD when it declares
 * none), one that leaves it NULL keeps its base's; and every real level's entry that is the
 * portable one reads STD. */
TEST(kern_pack_layout_travels_with_gemm) {
    const cpulm_dtype q4 = CPULM_DTYPE_Q4_0;
    cpulm_kernels base = cpulm_kernels_generic, lvl, k;
    base.gemm_x16[q4] = cpulm_kernels_generic.gemm_x16[CPULM_DTYPE_Q8_0];
    base.x16_layout[q4] = CPULM_X16_PAIRS;
    base.x16_groups[q4] = groups_stub;
    memset(&lvl, 0, sizeof lvl);
    lvl.name = "test";
    k = base;
    cpulm_kernels_overlay(&k, &lvl);
    CHECK_EQ_INT(t, k.x16_layout[q4], CPULM_X16_PAIRS);
    CHECK(t, k.x16_groups[q4] == groups_stub); /* and so does the multi-group form */
    lvl.gemm_x16[q4] = cpulm_kernels_generic.gemm_x16[q4];
    k = base;
    cpulm_kernels_overlay(&k, &lvl);
    CHECK_EQ_INT(t, k.x16_layout[q4], CPULM_X16_STD);
    CHECK(t, k.x16_groups[q4] == NULL);
    lvl.x16_layout[q4] = CPULM_X16_PAIRS;
    k = base;
    cpulm_kernels_overlay(&k, &lvl);
    CHECK_EQ_INT(t, k.x16_layout[q4], CPULM_X16_PAIRS);
    const cpulm_kernels *lv[MAX_LEVELS];
    const int nl = test_kernel_levels(lv, MAX_LEVELS);
    for (int l = 0; l < nl; l++)
        for (int ty = 0; ty < CPULM_DTYPE_COUNT; ty++)
            if (lv[l]->gemm_x16[ty] == cpulm_kernels_generic.gemm_x16[ty])
                CHECK_EQ_INT(t, lv[l]->x16_layout[ty], CPULM_X16_STD);
}

/* The Q8_K activation quantizer (the K-quant GEMMs' input) at every level, bit for bit, on
 * blocks the random tests rarely make: all zero, one nonzero, a denormal extreme, ties of
 * the largest magnitude with either sign first, every element at the extreme. */
TEST(kern_pack_q8k_edges_all_levels) {
    enum { NB = 6, N = NB * 256 };
    static float x[N];
    uint64_t seed = 5;
    for (int i = 0; i < N; i++)
        x[i] = frand(&seed);
    for (int i = 0; i < 256; i++)
        x[i] = 0.0f; /* block 0: zero */
    for (int i = 256; i < 512; i++)
        x[i] = 0.0f;
    x[300] = -3.0f; /* block 1: one */
    for (int i = 512; i < 768; i++)
        x[i] = (float)(i % 7) * 1e-42f;        /* block 2: denormals */
    x[768 + 9] = 2.0f, x[768 + 100] = -2.0f;   /* block 3: +a first */
    x[1024 + 9] = -2.0f, x[1024 + 100] = 2.0f; /* block 4: -a first */
    for (int i = 1280; i < N; i++)
        x[i] = (i & 1) ? 1.5f : -1.5f; /* block 5: all extreme */
    const size_t bytes = cpulm_dtype_row_bytes(CPULM_DTYPE_Q8_K, N);
    uint8_t *ref = malloc(bytes), *got = malloc(bytes);
    REQUIRE(t, ref && got);
    cpulm_kernels_generic.from_float[CPULM_DTYPE_Q8_K](x, ref, N);
    const cpulm_kernels *lv[MAX_LEVELS];
    const int nl = test_kernel_levels(lv, MAX_LEVELS);
    for (int l = 0; l < nl; l++) {
        memset(got, 0xA5, bytes);
        lv[l]->from_float[CPULM_DTYPE_Q8_K](x, got, N);
        for (int b = 0; b < NB; b++) {
            const size_t bb = sizeof(cpulm_block_q8_K);
            if (memcmp(got + b * bb, ref + b * bb, bb) != 0)
                fprintf(stderr, "  %s Q8_K block %d differs\n", lv[l]->name, b);
            CHECK(t, memcmp(got + b * bb, ref + b * bb, bb) == 0);
        }
    }
    free(ref);
    free(got);
}
