/* cmd_grammar_bench.c: `cpulm grammar-bench`: what constrained decoding costs per token.
 *
 * 1. Masks alone, on a vocabulary (a model's, or a GPT-2-style byte-level encoder.json
 *    such as Llama 3's 128k one): a generation path is walked under the grammar (tokens
 *    drawn uniformly among the allowed ones, a new document when one ends) and every
 *    mask computation is timed: the first (cold) one, and the mean over the path.
 * 2. With -m and no --vocab-json: generation of the model itself, unconstrained and
 *    constrained (mask + masked sampling + accepting the token), runs interleaved, and
 *    the slowdown of the constrained one per token.
 */
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common.h"
#include "options.h"
#include "tools_api.h"

typedef struct gb_opts {
    const char *model, *vocab_json, *schema, *grammar_file;
    int n, runs, threads, json;
    uint64_t seed;
} gb_opts;

static const char *DEFAULT_SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":40},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},\"email\":{\"type\":\"string\","
    "\"maxLength\":60},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":"
    "20},"
    "\"maxItems\":8},\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":"
    "\"string\","
    "\"maxLength\":60},\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},\"required\":"
    "[\"street\",\"zip\"]}},\"required\":[\"name\",\"age\",\"tags\",\"address\"]}";

static void gb_usage(FILE *f) {
    fprintf(f, "usage: cpulm grammar-bench [-m MODEL] [--vocab-json FILE] [options]\n");
    cli_help(f, "grammar-bench");
}

static int gb_opt(cli *c, int id, const cli_val *v, void *ctx) {
    gb_opts *o = ctx;
    switch (id) {
    case OPT_MODEL: o->model = v->s; break;
    case OPT_VOCAB_JSON: o->vocab_json = v->s; break;
    case OPT_JSON_SCHEMA: o->schema = v->s; break;
    case OPT_GRAMMAR_FILE: o->grammar_file = v->s; break;
    case OPT_N_GEN:
        if (!cli_at_least(c, v, 1)) return EXIT_USAGE;
        o->n = (int)v->i;
        break;
    case OPT_REPS: o->runs = (int)v->i; break;
    case OPT_THREADS: o->threads = (int)v->i; break;
    case OPT_SEED:
        if (v->i >= 0) o->seed = (uint64_t)v->i;
        break;
    case OPT_JSON: o->json = 1; break;
    default: return cli_unhandled(c, v);
    }
    return 0;
}

static int gb_parse(int argc, char **argv, gb_opts *o) {
    cli c = {.cmd = "grammar-bench", .argc = argc, .argv = argv};
    o->n = 128;
    o->runs = 3;
    o->seed = 1;
    return cli_parse(&c, gb_usage, gb_opt, o);
}

/* ---- vocabulary from a GPT-2 style encoder.json ---- */

/* GPT-2's bytes_to_unicode, inverted: code point -> byte (-1 if not a byte's stand-in). */
static int unicode_to_byte(uint32_t cp) {
    static int table[324];
    static int ready;
    if (!ready) {
        for (int i = 0; i < 324; i++)
            table[i] = -1;
        int n = 0;
        for (int b = 0; b < 256; b++) {
            int printable =
                (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
            table[printable ? b : 256 + n++] = b;
        }
        ready = 1;
    }
    return cp < 324 ? table[cp] : -1;
}

static cpulm_grammar_vocab *vocab_from_json(const char *path, int32_t *n_out) {
    size_t len = 0;
    char *text = cli_read_file(path, &len);
    cpulm_json_doc *d = NULL;
    cpulm_error err = {0};
    if (!text || cpulm_json_parse(text, len, NULL, &d, NULL, &err) != CPULM_OK) {
        fprintf(stderr, "cpulm grammar-bench: %s: %s\n", path, text ? err.msg : "cannot read");
        free(text);
        return NULL;
    }
    const cpulm_json *root = cpulm_json_root(d);
    int32_t n = 0;
    for (size_t i = 0; i < cpulm_json_len(root); i++) {
        int64_t id = cpulm_json_at(root, i)->u.num.i;
        if (id + 1 > n) n = (int32_t)(id + 1);
    }
    char **bytes = calloc((size_t)n, sizeof *bytes);
    int32_t *lens = calloc((size_t)n, sizeof *lens);
    for (size_t i = 0; bytes && lens && i < cpulm_json_len(root); i++) {
        const cpulm_json *m = cpulm_json_at(root, i);
        int32_t id = (int32_t)m->u.num.i;
        char *out = malloc(m->key_len + 1);
        int32_t k = 0;
        for (size_t j = 0; out && j < m->key_len;) {
            uint32_t cp;
            int step = cpulm_json_utf8_next((const unsigned char *)m->key + j, m->key_len - j, &cp);
            j += (size_t)(step > 0 ? step : -step);
            int b = unicode_to_byte(cp);
            if (b >= 0) out[k++] = (char)b;
        }
        if (id >= 0 && id < n && !bytes[id])
            bytes[id] = out, lens[id] = k;
        else
            free(out);
    }
    cpulm_grammar_vocab *v =
        bytes && lens ? cpulm_grammar_vocab_from_pieces(n, (const char *const *)bytes, lens, NULL)
                      : NULL;
    for (int32_t i = 0; bytes && i < n; i++)
        free(bytes[i]);
    free(bytes);
    free(lens);
    cpulm_json_free(d);
    free(text);
    *n_out = n;
    return v;
}

/* ---- the grammar ---- */

/* The compiled grammar; *compile_ms = schema conversion plus compilation. */
static cpulm_grammar *load_grammar(const gb_opts *o, double *compile_ms) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_error err = {0};
    cpulm_grammar *g = NULL;
    char *file = NULL;
    if (o->grammar_file) {
        if (!(file = cli_read_file(o->grammar_file, NULL))) return NULL;
        cpulm_buf_puts(&b, file);
        *compile_ms = -cli_now_ms();
    } else {
        const char *s = o->schema ? o->schema : DEFAULT_SCHEMA;
        cpulm_json_doc *d = NULL;
        *compile_ms = -cli_now_ms();
        if (cpulm_json_parse(s, strlen(s), NULL, &d, NULL, &err) == CPULM_OK)
            cpulm_grammar_from_schema(cpulm_json_root(d), &b, &err);
        cpulm_json_free(d);
    }
    if (!err.msg[0] && cpulm_grammar_parse(b.data, b.len, NULL, &g, &err) != CPULM_OK) g = NULL;
    *compile_ms += cli_now_ms();
    if (!g) fprintf(stderr, "cpulm grammar-bench: %s\n", err.msg);
    cpulm_buf_release(&b);
    free(file);
    return g;
}

/* ---- 1: masks alone ---- */

typedef struct mask_stats {
    double cold_ms, mean_ms, max_ms;
    int64_t n_masks, hits, docs;
    uint64_t max_work; /* largest work units of one matcher call */
} mask_stats;

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A token drawn uniformly among the allowed ones (-1: none). */
static int32_t draw_allowed(const uint32_t *mask, int32_t n, uint64_t *rng) {
    int32_t count = 0;
    for (int32_t w = 0; w < (n + 31) / 32; w++)
        count += __builtin_popcount(mask[w]);
    if (count == 0) return -1;
    int32_t k = (int32_t)(xorshift(rng) % (uint64_t)count);
    for (int32_t t = 0; t < n; t++)
        if ((mask[t >> 5] >> (t & 31)) & 1 && k-- == 0) return t;
    return -1;
}

static void bench_masks(const cpulm_grammar *g, const cpulm_grammar_vocab *v, const gb_opts *o,
                        mask_stats *st) {
    memset(st, 0, sizeof *st);
    int32_t n = cpulm_grammar_vocab_n(v);
    double total = 0;
    uint64_t rng = o->seed * 2654435761u + 1;
    for (int r = 0; r < o->runs; r++) {
        cpulm_grammar_matcher *m = cpulm_grammar_matcher_new(g, v); /* cold caches each run */
        for (int i = 0; m && i < o->n; i++) {
            double t0 = cli_now_ms();
            const uint32_t *mask = cpulm_grammar_mask(m);
            double dt = cli_now_ms() - t0;
            if (!mask) break;
            if (r == 0 && i == 0) st->cold_ms = dt;
            if (dt > st->max_ms) st->max_ms = dt;
            total += dt;
            st->n_masks++;
            int32_t t = draw_allowed(mask, n, &rng);
            if (t < 0 || cpulm_grammar_accept_token(m, t) != CPULM_OK ||
                cpulm_grammar_must_end(m)) {
                cpulm_grammar_matcher_reset(m); /* the document is done: start another */
                st->docs++;
            }
        }
        cpulm_grammar_stats gs;
        if (m) cpulm_grammar_matcher_stats(m, &gs), st->hits += (int64_t)gs.mask_cache_hits;
        if (m && gs.max_work > st->max_work) st->max_work = gs.max_work;
        cpulm_grammar_matcher_free(m);
    }
    st->mean_ms = st->n_masks ? total / (double)st->n_masks : 0;
}

/* ---- 2: generation with the model ---- */

/* ms per generated token over o->n tokens (constrained when gm != NULL). */
static double gen_run(cpulm_ctx *ctx, const cpulm_model *m, cpulm_grammar_matcher *gm,
                      const gb_opts *o, uint64_t seed) {
    cpulm_sampler_params sp = cpulm_sampler_default_params();
    sp.temp = 0.9f;
    sp.seed = seed;
    cpulm_sampler *smp = cpulm_sampler_new(&sp, cpulm_vocab_n(m));
    (void)cpulm_ctx_seq_rm(ctx, 0, 0); /* clearing (p0 = 0) cannot fail */
    cpulm_token t = cpulm_token_bos(m) >= 0 ? cpulm_token_bos(m) : 0;
    cpulm_batch b1 = {.n = 1, .token = &t};
    int ok = cpulm_ctx_decode(ctx, &b1) == CPULM_OK; /* else no token is timed: 0 ms */
    double t0 = cli_now_ms();
    int i = 0;
    for (; i < o->n && smp && ok; i++) {
        const uint32_t *mask = gm ? cpulm_grammar_mask(gm) : NULL;
        t = cpulm_sampler_sample_masked(smp, cpulm_ctx_logits(ctx, 0), mask);
        if (gm && (cpulm_token_is_eog(m, t) || cpulm_grammar_accept_token(gm, t) != CPULM_OK ||
                   cpulm_grammar_must_end(gm)))
            cpulm_grammar_matcher_reset(gm);
        if (cpulm_token_is_eog(m, t)) t = 0; /* keep decoding: the cost is per token */
        cpulm_batch b = {.n = 1, .token = &t};
        if (cpulm_ctx_decode(ctx, &b) != CPULM_OK) break;
    }
    double ms = cli_now_ms() - t0;
    cpulm_sampler_free(smp);
    return i ? ms / i : 0;
}

static int bench_model(cpulm_model *m, const cpulm_grammar *g, const cpulm_grammar_vocab *v,
                       const gb_opts *o, double *plain, double *constrained) {
    cpulm_ctx_params cp = cpulm_ctx_default_params();
    cp.n_ctx = o->n + 16;
    cp.n_threads = o->threads;
    cpulm_error err = {0};
    cpulm_ctx *ctx = cpulm_ctx_new(m, &cp, &err);
    if (!ctx) {
        fprintf(stderr, "cpulm grammar-bench: %s\n", err.msg);
        return 1;
    }
    *plain = *constrained = 1e30;
    for (int r = 0; r < o->runs; r++) { /* interleaved A/B; best of the runs */
        double a = gen_run(ctx, m, NULL, o, o->seed + (uint64_t)r);
        cpulm_grammar_matcher *gm = cpulm_grammar_matcher_new(g, v);
        double b = gm ? gen_run(ctx, m, gm, o, o->seed + (uint64_t)r) : 0;
        cpulm_grammar_matcher_free(gm);
        if (a < *plain) *plain = a;
        if (b < *constrained) *constrained = b;
    }
    cpulm_ctx_free(ctx);
    return 0;
}

int cmd_grammar_bench(int argc, char **argv) {
    gb_opts o;
    memset(&o, 0, sizeof o);
    int rc = gb_parse(argc, argv, &o);
    if (rc) return rc;
    double compile_ms = 0;
    cpulm_grammar *g = load_grammar(&o, &compile_ms);
    if (!g) return EXIT_USAGE;
    cpulm_model *m = NULL;
    cpulm_grammar_vocab *v = NULL;
    int32_t n_vocab = 0;
    double t0 = cli_now_ms();
    if (o.vocab_json) {
        v = vocab_from_json(o.vocab_json, &n_vocab); /* includes reading the JSON */
    } else {
        const char *path = cli_model_path(o.model);
        if (!path || !(m = cli_load_model(path, 0, NULL))) {
            cpulm_grammar_free(g);
            return path ? 1 : EXIT_USAGE;
        }
        t0 = cli_now_ms();
        v = cpulm_grammar_vocab_new(m);
        n_vocab = cpulm_vocab_n(m);
    }
    double build_ms = cli_now_ms() - t0;
    rc = 1;
    if (v) {
        mask_stats st;
        bench_masks(g, v, &o, &st);
        double plain = 0, constrained = 0;
        rc = m ? bench_model(m, g, v, &o, &plain, &constrained) : 0;
        double slow = plain > 0 ? (constrained / plain - 1) * 100 : 0;
        if (o.json)
            printf("{\"n_vocab\":%d,\"trie_nodes\":%d,\"trie_build_ms\":%.1f,\"masks\":%lld,"
                   "\"documents\":%lld,\"cache_hit_rate\":%.4f,\"mask_cold_ms\":%.3f,"
                   "\"mask_mean_ms\":%.4f,\"mask_max_ms\":%.3f,\"gen_ms_per_token\":%.3f,"
                   "\"gen_constrained_ms_per_token\":%.3f,\"slowdown_pct\":%.2f,"
                   "\"compile_ms\":%.3f,\"max_work\":%llu}\n",
                   n_vocab, cpulm_grammar_vocab_trie_nodes(v), build_ms, (long long)st.n_masks,
                   (long long)st.docs, st.n_masks ? (double)st.hits / (double)st.n_masks : 0,
                   st.cold_ms, st.mean_ms, st.max_ms, plain, constrained, slow, compile_ms,
                   (unsigned long long)st.max_work);
        else {
            printf("grammar: %d rules, compiled in %.3f ms\n", cpulm_grammar_n_rules(g),
                   compile_ms);
            printf("vocabulary: %d tokens, trie of %d nodes built in %.1f ms\n", n_vocab,
                   cpulm_grammar_vocab_trie_nodes(v), build_ms);
            printf("masks: %lld over %d runs (%lld documents), cache hits %.1f%%: first (cold) "
                   "%.3f ms, mean %.4f ms, max %.3f ms per token\n",
                   (long long)st.n_masks, o.runs, (long long)st.docs,
                   st.n_masks ? 100.0 * (double)st.hits / (double)st.n_masks : 0, st.cold_ms,
                   st.mean_ms, st.max_ms);
            printf("work: at most %llu units in one matcher call (limit %d)\n",
                   (unsigned long long)st.max_work, CPULM_GRAMMAR_MAX_WORK);
            if (m)
                printf("generation: %.3f ms/token unconstrained, %.3f ms/token constrained: "
                       "%+.1f%% per token (best of %d interleaved runs of %d tokens)\n",
                       plain, constrained, slow, o.runs, o.n);
        }
    } else {
        fprintf(stderr, "cpulm grammar-bench: cannot build the vocabulary trie\n");
    }
    cpulm_grammar_vocab_free(v);
    cpulm_grammar_free(g);
    cpulm_model_free(m);
    return rc;
}
