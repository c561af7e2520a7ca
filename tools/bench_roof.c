/* bench_roof.c: this machine's ceilings for the roofline: memory read bandwidth, and the
 * peak of the selected int8 kernels (the fastest of the level's repacked GEMM microkernels,
 * one per packed weight type, and the Q8_0 dot) and of the f32 kernels (the prompt
 * attention's register-blocked tile products, and the f32 dot) on cache-resident data;
 * plus the bytes and parameters a model's forward pass touches per token.
 *
 * Each measurement runs "rounds" on n threads: all threads start together at a barrier,
 * do the same work, and meet again; the fastest round counts (the least disturbed by other
 * processes). The kernels come from the table the engine itself uses, so the peaks are the
 * peaks of the code that runs the model, not of the hardware in theory.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "tools_api.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- running rounds on threads ---- */

typedef void (*round_fn)(void *arg, int ith, int nth);

typedef struct rounds_job {
    round_fn setup, work; /* setup runs once per thread, untimed (first touch, buffers) */
    void *arg;
    int nth, rounds;
    pthread_barrier_t bar;
    pthread_mutex_t mu; /* with cv and go: holds threads until all exist (or one failed) */
    pthread_cond_t cv;
    int go;               /* 0 wait, 1 run, -1 give up */
    double best_s, sum_s; /* thread 0's fastest round and all rounds' sum */
} rounds_job;

typedef struct rounds_thread {
    rounds_job *job;
    int ith;
} rounds_thread;

static void *rounds_main(void *v) {
    rounds_thread *rt = v;
    rounds_job *j = rt->job;
    pthread_mutex_lock(&j->mu);
    while (!j->go)
        pthread_cond_wait(&j->cv, &j->mu);
    int go = j->go;
    pthread_mutex_unlock(&j->mu);
    if (go < 0) return NULL;
    if (j->setup) j->setup(j->arg, rt->ith, j->nth);
    for (int r = 0; r < j->rounds; r++) {
        pthread_barrier_wait(&j->bar);
        double t0 = now_s();
        j->work(j->arg, rt->ith, j->nth);
        pthread_barrier_wait(&j->bar);
        double dt = now_s() - t0; /* thread 0's view: from the common start to the last finish */
        if (rt->ith == 0) j->sum_s += dt;
        if (rt->ith == 0 && dt < j->best_s) j->best_s = dt;
    }
    return NULL;
}

static void release_threads(rounds_job *j, int go) {
    pthread_mutex_lock(&j->mu);
    j->go = go;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* Runs `rounds` rounds on nth threads (the caller is thread 0); returns the fastest in
 * seconds, or -1 when the threads could not be started; *mean_s (may be NULL): their mean. */
static double run_rounds(round_fn setup, round_fn work, void *arg, int nth, int rounds,
                         double *mean_s) {
    rounds_job j = {
        .setup = setup, .work = work, .arg = arg, .nth = nth, .rounds = rounds, .best_s = 1e30};
    rounds_thread *ts = calloc((size_t)nth, sizeof *ts);
    pthread_t *th = calloc((size_t)nth, sizeof *th);
    double best = -1;
    if (!ts || !th || pthread_barrier_init(&j.bar, NULL, (unsigned)nth) != 0) goto out;
    pthread_mutex_init(&j.mu, NULL);
    pthread_cond_init(&j.cv, NULL);
    int started = 1;
    for (int i = 0; i < nth; i++)
        ts[i] = (rounds_thread){&j, i};
    for (int i = 1; i < nth; i++, started++)
        if (pthread_create(&th[i], NULL, rounds_main, &ts[i]) != 0) break;
    release_threads(&j, started == nth ? 1 : -1);
    if (started == nth) {
        rounds_main(&ts[0]);
        best = j.best_s;
        if (mean_s) *mean_s = j.sum_s / rounds;
    }
    for (int i = 1; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&j.bar);
    pthread_mutex_destroy(&j.mu);
    pthread_cond_destroy(&j.cv);
out:
    free(ts);
    free(th);
    return best;
}

/* One calibration round, then enough rounds to fill min_s (at least 3); *mean_s (may be
 * NULL): the mean of those rounds. */
static double best_round(round_fn setup, round_fn work, void *arg, int nth, double min_s,
                         double *mean_s) {
    double one = run_rounds(setup, work, arg, nth, 2, NULL); /* round 1 also faults pages in */
    if (one <= 0) return one;
    int rounds = (int)(min_s / one);
    rounds = rounds < 3 ? 3 : rounds > 500 ? 500 : rounds;
    double best = run_rounds(setup, work, arg, nth, rounds, mean_s);
    return best < one ? best : one;
}

/* ---- memory bandwidth ---- */

typedef struct bw_job {
    uint64_t *buf;
    size_t n_words;
    uint64_t sink[512]; /* per thread, so the loads are not optimised away */
} bw_job;

static void slice(size_t n, int ith, int nth, size_t *lo, size_t *hi) {
    size_t per = (n / (size_t)nth) & ~(size_t)7; /* 64-byte pieces */
    *lo = per * (size_t)ith;
    *hi = ith == nth - 1 ? n : *lo + per;
}

/* Each thread writes its own slice first, so pages land on its NUMA node. */
static void bw_setup(void *arg, int ith, int nth) {
    bw_job *j = arg;
    size_t lo, hi;
    slice(j->n_words, ith, nth, &lo, &hi);
    for (size_t i = lo; i < hi; i++)
        j->buf[i] = i * 0x9E3779B97F4A7C15ULL;
}

/* Eight independent XOR lanes over 64-byte pieces, kept in registers: integer XOR is
 * associative, so gcc and clang at -O2 pack the lanes into vector registers (SLP) and the
 * loop is one wide load and XOR per 16/32 bytes, far below what memory can feed. */
static void bw_work(void *arg, int ith, int nth) {
    bw_job *j = arg;
    size_t lo, hi;
    slice(j->n_words, ith, nth, &lo, &hi);
    const uint64_t *p = j->buf;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    for (size_t i = lo; i + 8 <= hi; i += 8) {
        a0 ^= p[i];
        a1 ^= p[i + 1];
        a2 ^= p[i + 2];
        a3 ^= p[i + 3];
        a4 ^= p[i + 4];
        a5 ^= p[i + 5];
        a6 ^= p[i + 6];
        a7 ^= p[i + 7];
    }
    j->sink[ith] ^= a0 ^ a1 ^ a2 ^ a3 ^ a4 ^ a5 ^ a6 ^ a7;
}

double bench_mem_bw(int n_threads, size_t bytes, double min_s, double *mean_bw) {
    bw_job j = {.n_words = bytes / 8};
    j.buf = aligned_alloc(64, (j.n_words * 8 + 63) / 64 * 64);
    if (!j.buf || n_threads < 1 || n_threads > 512) {
        free(j.buf);
        return -1;
    }
    double mean_s = 0, s = best_round(bw_setup, bw_work, &j, n_threads, min_s, &mean_s);
    free(j.buf);
    if (mean_bw) *mean_bw = s > 0 && mean_s > 0 ? (double)(j.n_words * 8) / mean_s : -1;
    return s > 0 ? (double)(j.n_words * 8) / s : -1;
}

/* ---- kernel peaks ---- */

enum { PEAK_N = 4096, PEAK_ROWS = 4, PEAK_CALLS = 2048, PEAK_MAX_THREADS = 512 };
enum { PEAK_F32_DOT, PEAK_Q8_DOT, PEAK_TILES }; /* what a peak job times */

/* The prompt attention's f32 tile products (attn_scores, then attn_pv): one item's rows
 * against one tile of keys, as the tiled attention calls them. A dot is load-bound (two
 * loads per fma): it ran at a quarter of what these register-blocked products reach, so
 * attention read as 270% of an f32 "peak" that was the dot's. */
enum { TILE_D = 64, TILE_ROWS = 128, TILE_KEYS = CPULM_ATTN_TILE, TILE_CALLS = 64 };

typedef struct tile_data {
    float q[TILE_ROWS][TILE_D], k[TILE_KEYS][TILE_D], v[TILE_KEYS][TILE_D];
    float s[TILE_ROWS][TILE_KEYS], o[TILE_ROWS][TILE_D], a[TILE_ROWS];
} tile_data;

/* Per thread: PEAK_ROWS rows of x against one y (a GEMV's access pattern), all in L1/L2:
 * 5 x 4352 bytes for Q8_0, 5 x 16 KiB for f32; the tiles (PEAK_TILES only) 320 KiB. */
typedef struct peak_data {
    float xf[PEAK_ROWS][PEAK_N], yf[PEAK_N];
    cpulm_block_q8_0 xq[PEAK_ROWS][PEAK_N / 32], yq[PEAK_N / 32];
    tile_data *t;
} peak_data;

typedef struct peak_job {
    int what; /* PEAK_* */
    const cpulm_kernels *k;
    peak_data *d[PEAK_MAX_THREADS]; /* owned; made by the thread that uses it */
    float sink[PEAK_MAX_THREADS];
} peak_job;

static void tile_init(tile_data *d, int ith) {
    for (int i = 0; i < TILE_D; i++) {
        for (int r = 0; r < TILE_ROWS; r++)
            d->q[r][i] = (float)((i * 3 + r + ith) % 7) * 0.05f - 0.15f;
        for (int n = 0; n < TILE_KEYS; n++) {
            d->k[n][i] = (float)((i * 5 + n) % 11) * 0.02f - 0.1f;
            d->v[n][i] = (float)((i + n * 3) % 13) * 0.02f - 0.12f;
        }
    }
    for (int r = 0; r < TILE_ROWS; r++)
        d->a[r] = 0.5f; /* the running rescale: keeps o bounded over the calls */
}

static float tile_calls(const cpulm_kernels *k, tile_data *d, int ith) {
    for (int c = 0; c < TILE_CALLS; c++) {
        k->attn_scores(TILE_D, TILE_ROWS, TILE_KEYS, &d->q[0][0], TILE_D, &d->k[0][0], TILE_D,
                       0.125f, &d->s[0][0], TILE_KEYS);
        k->attn_pv(TILE_D, TILE_ROWS, TILE_KEYS, &d->s[0][0], TILE_KEYS, &d->v[0][0], TILE_D, d->a,
                   &d->o[0][0], TILE_D);
    }
    return d->o[ith % TILE_ROWS][0];
}

static void peak_setup(void *arg, int ith, int nth) {
    (void)nth;
    peak_job *j = arg;
    if (j->d[ith]) return; /* kept across the calibration and the measured run */
    peak_data *d = j->d[ith] = calloc(1, sizeof *d);
    if (!d) return;
    if (j->what == PEAK_TILES) { /* the tiles only */
        if ((d->t = calloc(1, sizeof *d->t)))
            tile_init(d->t, ith);
        else
            free(d), j->d[ith] = NULL;
        return;
    }
    for (int i = 0; i < PEAK_N; i++) {
        d->yf[i] = (float)((i * 7 + ith) % 13) * 0.1f - 0.6f;
        for (int r = 0; r < PEAK_ROWS; r++)
            d->xf[r][i] = (float)((i * 5 + r) % 11) * 0.1f - 0.5f;
    }
    cpulm_from_float_fn q = j->k->from_float[CPULM_DTYPE_Q8_0];
    q(d->yf, d->yq, PEAK_N);
    for (int r = 0; r < PEAK_ROWS; r++)
        q(d->xf[r], d->xq[r], PEAK_N);
}

static void peak_work(void *arg, int ith, int nth) {
    (void)nth;
    peak_job *j = arg;
    peak_data *d = j->d[ith];
    if (!d) return;
    if (j->what == PEAK_TILES) {
        j->sink[ith] += tile_calls(j->k, d->t, ith);
        return;
    }
    float acc = 0, s;
    for (int c = 0; c < PEAK_CALLS; c++) {
        int r = c % PEAK_ROWS;
        if (j->what == PEAK_Q8_DOT)
            j->k->vec_dot[CPULM_DTYPE_Q8_0](PEAK_N, &s, d->xq[r], d->yq);
        else
            s = j->k->dot_f32(PEAK_N, d->xf[r], d->yf);
        acc += s;
    }
    j->sink[ith] += acc;
}

static double peak(int what, int n_threads, double min_s) {
    if (n_threads < 1 || n_threads > PEAK_MAX_THREADS) return -1;
    peak_job *j = calloc(1, sizeof *j);
    if (!j) return -1;
    j->what = what;
    j->k = cpulm_kernels_get();
    double s = best_round(peak_setup, peak_work, j, n_threads, min_s, NULL);
    int ok = 1;
    for (int i = 0; i < n_threads; i++) {
        ok = ok && j->d[i];
        if (j->d[i]) free(j->d[i]->t);
        free(j->d[i]);
    }
    free(j);
    /* a dot: one multiply and one add per element; the tiles: two products of rows x keys x
     * d multiply-adds each */
    const double flops = what == PEAK_TILES ? 4.0 * TILE_ROWS * TILE_KEYS * TILE_D * TILE_CALLS
                                            : 2.0 * PEAK_N * PEAK_CALLS;
    return s > 0 && ok ? flops * n_threads / s : -1;
}

/* ---- the repacked int8 GEMM microkernels (what prompt processing runs) ----
 * One per packed weight type: their instruction mixes differ per level. On AVX2 (no VNNI)
 * the Q8_0 tile pays a sign fix-up and an int16 -> int32 madd per maddubs (both on the
 * multiply ports), the Q4_0 tile sums 8 maddubs in int16 before one madd, so Q4_0 does
 * about twice the int8 MACs per cycle, and a Q4_0 model's pp ran at about 2x a Q8_0-only
 * "peak". The ceiling is the fastest of them. */

/* Calls of the size prompt processing makes (CPULM_MATMUL_TOK_CHUNK tokens): with 8 tokens
 * the amx level's GEMM, whose tiles take 16, handed the whole call to avx512vnni, so the
 * "peak" was VNNI's and pp read up to 108% of it. */
enum { GEMM_GROUPS = 4, GEMM_TOKENS = CPULM_MATMUL_TOK_CHUNK, GEMM_CALLS = 64 };

typedef struct gemm_data {
    uint8_t *w;   /* GEMM_GROUPS packed 16-row groups of PEAK_N weights of the type */
    uint8_t *act; /* GEMM_TOKENS activation rows with their extras */
    uint64_t group_bytes, act_stride;
    float out[GEMM_TOKENS * CPULM_PACK_ROWS * GEMM_GROUPS];
} gemm_data;

typedef struct gemm_job {
    const cpulm_kernels *k;
    cpulm_dtype type; /* the weights'; activations are its vec_dot_type */
    gemm_data *d[PEAK_MAX_THREADS];
    float sink[PEAK_MAX_THREADS];
} gemm_job;

static void gemm_setup(void *arg, int ith, int nth) {
    (void)nth;
    gemm_job *j = arg;
    if (j->d[ith]) return;
    gemm_data *d = j->d[ith] = calloc(1, sizeof *d);
    if (!d) return;
    const int64_t rows = GEMM_GROUPS * CPULM_PACK_ROWS;
    const cpulm_dtype vdt = cpulm_dtype_traits_get(j->type)->vec_dot_type;
    const uint64_t rb = cpulm_dtype_row_bytes(j->type, PEAK_N);
    d->group_bytes = rb * CPULM_PACK_ROWS;
    d->act_stride = cpulm_matmul_act_bytes(vdt, PEAK_N);
    uint8_t *src = malloc(rb * (size_t)rows);
    float *x = malloc(sizeof(float) * PEAK_N);
    d->w = malloc(rb * (size_t)rows);
    d->act = malloc(d->act_stride * GEMM_TOKENS);
    if (src && x && d->w && d->act) {
        for (int64_t r = 0; r < rows; r++) {
            for (int i = 0; i < PEAK_N; i++)
                x[i] = (float)((i * 5 + r + ith) % 11) * 0.1f - 0.5f;
            j->k->from_float[j->type](x, src + (size_t)r * rb, PEAK_N);
        }
        cpulm_repack_x16(j->type, j->k->x16_layout[j->type], src, d->w, PEAK_N, rows);
        for (int t = 0; t < GEMM_TOKENS; t++) {
            for (int i = 0; i < PEAK_N; i++)
                x[i] = (float)((i * 7 + t) % 13) * 0.1f - 0.6f;
            cpulm_matmul_quantize_act(j->k, vdt, x, d->act + t * d->act_stride, PEAK_N);
        }
    } else {
        free(d->w), free(d->act);
        free(d);
        j->d[ith] = NULL;
    }
    free(src);
    free(x);
}

static void gemm_work(void *arg, int ith, int nth) {
    (void)nth;
    gemm_job *j = arg;
    gemm_data *d = j->d[ith];
    if (!d) return;
    cpulm_gemm_fn gemm = j->k->gemm_x16[j->type];
    cpulm_gemm_groups_fn groups = j->k->x16_groups[j->type];
    for (int c = 0; c < GEMM_CALLS; c++)
        if (groups) /* as matmul calls it: the groups together, the tokens prepared once */
            groups(PEAK_N, GEMM_TOKENS, GEMM_GROUPS, d->out, CPULM_PACK_ROWS * GEMM_GROUPS, d->w,
                   d->group_bytes, d->act, d->act_stride);
        else
            gemm(PEAK_N, GEMM_TOKENS, d->out, CPULM_PACK_ROWS,
                 d->w + (c % GEMM_GROUPS) * d->group_bytes, d->act, d->act_stride);
    j->sink[ith] += d->out[0];
}

/* Ops/s of the level's repacked GEMM of a type (64 tokens x 16 rows per call), or -1 when
 * the level has none of its own (the generic one is the oracle, not a production kernel). */
static double gemm_peak(cpulm_dtype type, int n_threads, double min_s) {
    const cpulm_kernels *k = cpulm_kernels_get();
    if (n_threads < 1 || n_threads > PEAK_MAX_THREADS || !k->gemm_x16[type] ||
        k->gemm_x16[type] == cpulm_kernels_generic.gemm_x16[type])
        return -1;
    gemm_job *j = calloc(1, sizeof *j);
    if (!j) return -1;
    j->k = k;
    j->type = type;
    double s = best_round(gemm_setup, gemm_work, j, n_threads, min_s, NULL);
    int ok = 1;
    for (int i = 0; i < n_threads; i++) {
        ok = ok && j->d[i];
        if (j->d[i]) free(j->d[i]->w), free(j->d[i]->act);
        free(j->d[i]);
    }
    free(j);
    const double per_call = k->x16_groups[type] ? GEMM_GROUPS : 1; /* groups a call */
    return s > 0 && ok ? 2.0 * PEAK_N * CPULM_PACK_ROWS * GEMM_TOKENS * GEMM_CALLS * per_call *
                             n_threads / s
                       : -1;
}

/* The int8 ceiling: the fastest of the level's repacked GEMM microkernels and the Q8_0 dot;
 * *kernel (if not NULL) names the one that set it. */
double bench_peak_int8(int n_threads, double min_s, const char **kernel) {
    static const struct {
        cpulm_dtype type;
        const char *name;
    } gemms[] = {{CPULM_DTYPE_Q4_0, "Q4_0 GEMM"},
                 {CPULM_DTYPE_Q8_0, "Q8_0 GEMM"},
                 {CPULM_DTYPE_Q4_K, "Q4_K GEMM"},
                 {CPULM_DTYPE_Q5_K, "Q5_K GEMM"},
                 {CPULM_DTYPE_Q6_K, "Q6_K GEMM"}};
    double top = peak(PEAK_Q8_DOT, n_threads, min_s);
    const char *top_k = "Q8_0 dot";
    for (size_t i = 0; i < sizeof gemms / sizeof gemms[0]; i++) {
        double g = gemm_peak(gemms[i].type, n_threads, min_s);
        if (g > top) top = g, top_k = gemms[i].name;
    }
    if (kernel) *kernel = top_k;
    return top;
}

double bench_peak_f32(int n_threads, double min_s, const char **kernel) {
    const double dot = peak(PEAK_F32_DOT, n_threads, min_s),
                 tiles = peak(PEAK_TILES, n_threads, min_s);
    if (kernel) *kernel = tiles > dot ? "attention tiles" : "f32 dot";
    return tiles > dot ? tiles : dot;
}

/* ---- what a model touches per token ---- */

static int has_tensor(const cpulm_model *m, int32_t n, const char *want) {
    const char *name;
    for (int32_t i = 0; i < n; i++)
        if (cpulm_model_tensor(m, i, &name, NULL, NULL, NULL) == CPULM_OK && !strcmp(name, want))
            return 1;
    return 0;
}

/* Sums tensor bytes (or elements) of weights that take part in a token's matrix products. */
static uint64_t sum_tensors(const cpulm_model *m, int bytes) {
    cpulm_model_info in;
    cpulm_model_get_info(m, &in);
    int untied = has_tensor(m, in.n_tensors, "output.weight");
    uint64_t total = 0;
    for (int32_t i = 0; i < in.n_tensors; i++) {
        const char *name;
        int64_t ne[4];
        uint64_t nb;
        if (cpulm_model_tensor(m, i, &name, NULL, ne, &nb) != CPULM_OK) continue;
        if (untied && !strcmp(name, "token_embd.weight")) continue; /* one row is looked up */
        if (bytes)
            total += nb;
        else if (ne[1] > 1) {
            uint64_t n = (uint64_t)(ne[0] * ne[1] * ne[2] * ne[3]); /* 2-D and expert stacks */
            if (in.n_expert > 0 && ne[2] == in.n_expert) /* a token computes with n_used of them */
                n = n / (uint64_t)in.n_expert * (uint64_t)in.n_expert_used;
            total += n;
        }
    }
    return total;
}

/* The weight bytes a generated token reads: for a mixture of experts only the chosen
 * experts' (cpulm_model_info.active_bytes), which is what bounds generation. */
uint64_t bench_bytes_per_token(const cpulm_model *m) {
    cpulm_model_info in;
    cpulm_model_get_info(m, &in);
    return in.active_bytes;
}

int64_t bench_matmul_params(const cpulm_model *m) {
    return (int64_t)sum_tensors(m, 0);
}

int64_t bench_matmul_io(const cpulm_model *m) {
    cpulm_model_info in;
    cpulm_model_get_info(m, &in);
    int64_t total = 0;
    for (int32_t i = 0; i < in.n_tensors; i++) {
        const char *name;
        int64_t ne[4];
        if (cpulm_model_tensor(m, i, &name, NULL, ne, NULL) != CPULM_OK) continue;
        if (strncmp(name, "blk.", 4) || ne[1] < 2) continue; /* the layers' matrices only */
        int64_t used = in.n_expert > 0 && ne[2] == in.n_expert ? in.n_expert_used : 1;
        total += (ne[0] + ne[1]) * used;
    }
    return total;
}

int64_t bench_output_params(const cpulm_model *m) {
    cpulm_model_info in;
    cpulm_model_get_info(m, &in);
    const char *want =
        has_tensor(m, in.n_tensors, "output.weight") ? "output.weight" : "token_embd.weight";
    for (int32_t i = 0; i < in.n_tensors; i++) {
        const char *name;
        int64_t ne[4];
        if (cpulm_model_tensor(m, i, &name, NULL, ne, NULL) == CPULM_OK && !strcmp(name, want))
            return ne[0] * ne[1];
    }
    return 0;
}

double bench_pp_ops_per_token(int64_t matmul_params, int64_t output_params, int n_prompt) {
    if (n_prompt < 1) return 0;
    return 2.0 * (double)(matmul_params - output_params) + 2.0 * (double)output_params / n_prompt;
}

/* Keys of the n_prompt queries of a layer with window w (0: none), summed. */
static double keys_seen(int n_prompt, int32_t w) {
    const double n = n_prompt;
    if (w <= 0 || w >= n_prompt) return n * (n + 1) / 2;
    return (double)w * (w + 1) / 2 + (n - w) * w;
}

double bench_attn_flops(const cpulm_model *m, int n_prompt) {
    const cpulm_hparams *hp = &m->hp;
    double keys = 0;
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const cpulm_layer *ly = &m->layers[il];
        if (ly->recurrent) continue;
        int32_t w = ly->window;
        keys += keys_seen(n_prompt, w);
    }
    return 4.0 * hp->n_head * hp->head_dim * keys;
}

/* ---- roofline rows ---- */

int bench_roof_measure(bench_roof *r, size_t buf_bytes, double min_s) {
    r->bw = bench_mem_bw(r->n_threads, buf_bytes, min_s, NULL);
    r->int8_ops = bench_peak_int8(r->n_threads, min_s, &r->int8_kernel);
    r->f32_flops = bench_peak_f32(r->n_threads, min_s, &r->f32_kernel);
    return r->bw > 0 && r->int8_ops > 0 && r->f32_flops > 0 ? 0 : -1;
}

int bench_roof_remeasure(bench_roof *r, size_t buf_bytes, double min_s) {
    bench_roof again = {.n_threads = r->n_threads};
    if (bench_roof_measure(&again, buf_bytes, min_s)) return -1;
    if (again.bw > r->bw) r->bw = again.bw;
    if (again.int8_ops > r->int8_ops)
        r->int8_ops = again.int8_ops, r->int8_kernel = again.int8_kernel;
    if (again.f32_flops > r->f32_flops)
        r->f32_flops = again.f32_flops, r->f32_kernel = again.f32_kernel;
    return 0;
}

int bench_roof_read(bench_roof *r, size_t buf_bytes, double min_s) {
    if (r->n_bw_windows >= BENCH_ROOF_WINDOWS) return 0;
    double mean = 0, best = bench_mem_bw(r->n_threads, buf_bytes, min_s, &mean);
    if (best <= 0 || mean <= 0) return -1;
    r->bw_windows_best[r->n_bw_windows] = best;
    r->bw_windows[r->n_bw_windows++] = mean;
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void bench_roof_read_median(bench_roof *r) {
    int n = r->n_bw_windows;
    if (n < 1) return;
    double v[BENCH_ROOF_WINDOWS];
    memcpy(v, r->bw_windows, (size_t)n * sizeof v[0]);
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    r->bw = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void bench_roof_fractions(bench_roof *r, uint64_t bytes_per_token, double pp_ops_per_token) {
    r->pp_ops = r->pp_ts * pp_ops_per_token;
    r->tg_frac = r->bw > 0 ? r->tg_ts * (double)bytes_per_token / r->bw : 0;
    r->pp_frac = r->int8_ops > 0 ? r->pp_ops / r->int8_ops : 0;
}

void bench_default_threads(bench_list *l) {
    int n = cpulm_topo_default_threads();
    l->n = 0;
    for (int t = 1; t < n && l->n < BENCH_MAX_LIST - 1; t *= 2)
        l->v[l->n++] = t;
    l->v[l->n++] = n;
}

void bench_roof_attention(bench_roof *r, double attn_flops_total, int n_prompt) {
    const double pp_s = r->pp_ts > 0 ? n_prompt / r->pp_ts : 0, attn_s = r->attn_frac * pp_s;
    r->attn_flops_per_token = n_prompt > 0 ? attn_flops_total / n_prompt : 0;
    r->attn_flops = attn_s > 0 ? attn_flops_total / attn_s : 0;
    r->gemm_frac = r->attn_frac < 1 ? r->pp_frac / (1 - r->attn_frac) : 0;
}
