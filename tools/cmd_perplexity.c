/* cmd_perplexity.c: `cpulm perplexity`: perplexity of a model on a text file, with the
 * semantics of llama.cpp's llama-perplexity so the numbers can be compared:
 *   - the whole text is tokenized once, with BOS when the vocab adds one;
 *   - it is cut into chunks of n_ctx tokens (a partial last chunk is dropped); each chunk is
 *     evaluated from an empty KV cache, its first token replaced by BOS;
 *   - only the second half is scored: the logits at positions n_ctx/2 .. n_ctx-2 predict the
 *     next token, so every scored token has at least n_ctx/2 tokens of context;
 *   - after each chunk the running exp(mean NLL) is printed as "[i]x.xxxx,", and at the end
 *     "Final estimate: PPL = p +/- e", e being the standard error of the mean NLL times p.
 * With -b >= 2*n_ctx several chunks go in one decode as separate sequences, as in
 * llama.cpp; the result does not depend on -b. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common.h"
#include "options.h"

static void ppl_usage(FILE *f) {
    fprintf(f, "usage: cpulm perplexity [-m MODEL] -f TEXT [options]\n");
    cli_help(f, "perplexity");
    fputs(CLI_COMPAT_HELP, f);
}

typedef struct ppl_opts {
    const char *model, *file, *kld_base;
    int n_ctx, n_batch, n_chunks, threads, attn_fast;
    cpulm_kv_type kv;
} ppl_opts;

typedef struct ppl_acc { /* running sums over scored tokens */
    double nll, nll2;
    long long count;
} ppl_acc;

/* One row of the table: 0 = ok, else the exit code. */
static int ppl_opt(cli *c, int id, const cli_val *v, void *ctx) {
    ppl_opts *o = ctx;
    switch (id) {
    case OPT_MODEL: o->model = v->s; break;
    case OPT_FILE: o->file = v->s; break;
    case OPT_CTX:
        if (!cli_at_least(c, v, 4)) return EXIT_USAGE; /* a chunk scores its second half */
        o->n_ctx = (int)v->i;
        break;
    case OPT_BATCH: o->n_batch = (int)v->i; break;
    case OPT_CHUNKS: o->n_chunks = (int)v->i; break;
    case OPT_THREADS: o->threads = (int)v->i; break;
    case OPT_KV: o->kv = (cpulm_kv_type)v->i; break;
    case OPT_ATTN: o->attn_fast = cli_attn_value(v); break;
    case OPT_KLD_BASE: o->kld_base = v->s; break;
    default: return cli_unhandled(c, v);
    }
    return 0;
}

static int parse_args(int argc, char **argv, ppl_opts *o) {
    cli c = {.cmd = "perplexity", .argc = argc, .argv = argv};
    *o = (ppl_opts){.n_ctx = 512, .n_chunks = -1, .kv = CPULM_KV_F16, .attn_fast = CPULM_ATTN_AUTO};
    int rc = cli_parse(&c, ppl_usage, ppl_opt, o);
    if (rc) return rc;
    if (!o->file) {
        fprintf(stderr, "cpulm perplexity: give the text with -f FILE\n");
        return EXIT_USAGE;
    }
    if (!o->n_batch) o->n_batch = o->n_ctx;
    return 0;
}

/* -log p(tok) from one row of logits, as llama.cpp computes it (float max, double sum). */
static double neg_log_prob(const float *logits, int32_t n_vocab, cpulm_token tok) {
    float mx = logits[0];
    for (int32_t i = 1; i < n_vocab; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++)
        sum += expf(logits[i] - mx);
    return -((double)(logits[tok] - mx) - log(sum));
}

/* --kl-divergence-base: llama-perplexity's file. Header "_logits_", n_ctx, n_vocab, n_chunk
 * (int32), the chunks' tokens (int32, as in the text: BOS not substituted); then per scored
 * position 2*ceil(n_vocab/2) + 4 uint16: the float step and the float log-probability of
 * code 0, then one code per token, log-probabilities quantized over the 16 nats below the
 * top (everything lower is code 0). Same record as llama.cpp writes, so either tool reads
 * the other's file. */
static int kld_write_header(FILE *f, int32_t n_ctx, int32_t n_vocab, int32_t n_chunk,
                            const cpulm_token *tokens) {
    int32_t h[3] = {n_ctx, n_vocab, n_chunk};
    size_t n = (size_t)n_ctx * (size_t)n_chunk;
    return fwrite("_logits_", 1, 8, f) == 8 && fwrite(h, sizeof h, 1, f) == 1 &&
           fwrite(tokens, sizeof *tokens, n, f) == n;
}

static int kld_write_row(FILE *f, const float *lg, int32_t n_vocab, uint16_t *row) {
    float mx = lg[0], mn = lg[0];
    for (int32_t i = 1; i < n_vocab; i++) {
        mx = lg[i] > mx ? lg[i] : mx;
        mn = lg[i] < mn ? lg[i] : mn;
    }
    if (mn < mx - 16) mn = mx - 16;
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++)
        sum += expf(lg[i] - mx);
    float lse = (float)log(sum), step = (mx - mn) / 65535.0f;
    float head[2] = {step, mn - mx - lse};
    memcpy(row, head, sizeof head);
    size_t nv = 2 * (((size_t)n_vocab + 1) / 2) + 4;
    memset(row + 4, 0, (nv - 4) * sizeof *row);
    for (int32_t i = 0; step > 0 && i < n_vocab; i++)
        if (lg[i] > mn) row[4 + i] = (uint16_t)lrintf((lg[i] - mn) / step);
    return fwrite(row, sizeof *row, nv, f) == nv;
}

typedef struct ppl_run {
    FILE *kld; /* --kl-divergence-base, or NULL */
    uint16_t *kld_row;
    const ppl_opts *o;
    const cpulm_model *m;
    cpulm_ctx *ctx;
    const cpulm_token *tokens;
    int32_t n_ctx, n_batch, n_seq, n_chunk, first, n_vocab;
    cpulm_token bos;
    cpulm_token *b_tok; /* [n_batch] decode arrays */
    int32_t *b_pos, *b_seq;
    int8_t *b_want;
} ppl_run;

/* One decode: positions [p0, p0 + len) of chunks c0 .. c0 + n_seq_batch - 1. Scores the
 * outputs right away (logits are only valid until the next decode). */
static int decode_part(ppl_run *r, int32_t c0, int32_t n_seq_batch, int32_t p0, int32_t len,
                       ppl_acc *acc) {
    int32_t n = 0;
    for (int32_t s = 0; s < n_seq_batch; s++) {
        const cpulm_token *chunk = r->tokens + (int64_t)(c0 + s) * r->n_ctx;
        for (int32_t k = 0; k < len; k++, n++) {
            int32_t pos = p0 + k;
            r->b_tok[n] = pos == 0 && r->bos >= 0 ? r->bos : chunk[pos];
            r->b_pos[n] = pos;
            r->b_seq[n] = s;
            /* the last position's prediction has no target inside the chunk */
            r->b_want[n] = pos >= r->first && pos < r->n_ctx - 1;
        }
    }
    cpulm_batch b = {
        .n = n, .token = r->b_tok, .pos = r->b_pos, .seq = r->b_seq, .want_logits = r->b_want};
    cpulm_status st = cpulm_ctx_decode(r->ctx, &b);
    if (st != CPULM_OK) {
        fprintf(stderr, "cpulm perplexity: decode failed: %s\n", cpulm_status_str(st));
        return 0;
    }
    int32_t out = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!r->b_want[i]) continue;
        const cpulm_token *chunk = r->tokens + (int64_t)(c0 + r->b_seq[i]) * r->n_ctx;
        const float *lg = cpulm_ctx_logits(r->ctx, out++);
        double v = neg_log_prob(lg, r->n_vocab, chunk[r->b_pos[i] + 1]);
        if (r->kld && !kld_write_row(r->kld, lg, r->n_vocab, r->kld_row)) {
            fprintf(stderr, "cpulm perplexity: writing %s failed\n", r->o->kld_base);
            return 0;
        }
        acc[r->b_seq[i]].nll += v;
        acc[r->b_seq[i]].nll2 += v * v;
        acc[r->b_seq[i]].count++;
    }
    return 1;
}

/* Evaluates chunks c0.. (up to n_seq of them), adding each one's sums to *total in chunk
 * order and printing the running estimate after each. */
static int eval_chunks(ppl_run *r, int32_t c0, ppl_acc *total) {
    int32_t n_seq_batch = r->n_chunk - c0 < r->n_seq ? r->n_chunk - c0 : r->n_seq;
    ppl_acc acc[64] = {{0}};
    for (int32_t s = 0; s < n_seq_batch; s++)
        (void)cpulm_ctx_seq_rm(r->ctx, s, 0); /* clearing (p0 = 0) cannot fail */
    int32_t step = r->n_batch < r->n_ctx ? r->n_batch : r->n_ctx;
    for (int32_t p0 = 0; p0 < r->n_ctx; p0 += step) {
        int32_t len = r->n_ctx - p0 < step ? r->n_ctx - p0 : step;
        if (!decode_part(r, c0, n_seq_batch, p0, len, acc)) return 0;
    }
    for (int32_t s = 0; s < n_seq_batch; s++) {
        total->nll += acc[s].nll;
        total->nll2 += acc[s].nll2;
        total->count += acc[s].count;
        printf("[%d]%.4f,", c0 + s + 1, exp(total->nll / (double)total->count));
        fflush(stdout);
    }
    return 1;
}

static void print_final(const ppl_acc *a) {
    double nll = a->nll / (double)a->count, nll2 = a->nll2 / (double)a->count;
    double ppl = exp(nll), var = nll2 - nll * nll;
    printf("\n");
    if (var > 0 && a->count > 1)
        printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl,
               sqrt(var / (double)(a->count - 1)) * ppl);
    else
        printf("Final estimate: PPL = %.4f (no spread: too few tokens)\n", ppl);
}

static int evaluate(ppl_run *r) {
    ppl_acc total = {0};
    double t0 = cli_now_ms();
    for (int32_t c = 0; c < r->n_chunk; c += r->n_seq) {
        if (!eval_chunks(r, c, &total)) return 1;
        if (c == 0) {
            double s = (cli_now_ms() - t0) / 1e3;
            fprintf(stderr, "cpulm perplexity: %.2f seconds per pass - ETA %.2f minutes\n", s,
                    s * ((r->n_chunk + r->n_seq - 1) / r->n_seq) / 60.0);
        }
    }
    print_final(&total);
    fprintf(stderr, "cpulm perplexity: %lld tokens scored in %.2f s\n", total.count,
            (cli_now_ms() - t0) / 1e3);
    return 0;
}

/* Opens --kl-divergence-base's file and writes its header; 0 on success. */
static int kld_open(ppl_run *r) {
    if (!r->o->kld_base) return 0;
    r->kld_row = malloc((2 * (((size_t)r->n_vocab + 1) / 2) + 4) * sizeof *r->kld_row);
    r->kld = r->kld_row ? fopen(r->o->kld_base, "wb") : NULL;
    if (r->kld && kld_write_header(r->kld, r->n_ctx, r->n_vocab, r->n_chunk, r->tokens)) return 0;
    fprintf(stderr, "cpulm perplexity: cannot write %s\n", r->o->kld_base);
    return 1;
}

static int setup_and_run(ppl_run *r, int32_t n_tokens) {
    const ppl_opts *o = r->o;
    r->n_ctx = o->n_ctx;
    if (n_tokens < 2 * r->n_ctx) {
        fprintf(stderr,
                "cpulm perplexity: you need at least %d tokens for a context of %d; "
                "%s tokenizes to only %d\n",
                2 * r->n_ctx, r->n_ctx, o->file, n_tokens);
        return 1;
    }
    int32_t n_max = n_tokens / r->n_ctx;
    r->n_chunk = o->n_chunks > 0 && o->n_chunks < n_max ? o->n_chunks : n_max;
    r->n_seq = o->n_batch / r->n_ctx;
    r->n_seq = r->n_seq < 1 ? 1 : r->n_seq > 64 ? 64 : r->n_seq;
    if (r->n_seq > r->n_chunk) r->n_seq = r->n_chunk;
    r->n_batch = o->n_batch < r->n_ctx ? o->n_batch : r->n_seq * r->n_ctx;
    r->first = r->n_ctx / 2;
    r->n_vocab = cpulm_vocab_n(r->m);
    r->bos = cpulm_vocab_add_bos(r->m) ? cpulm_token_bos(r->m) : -1;
    cpulm_ctx_params cp = cli_ctx_default_params();
    cp.n_ctx = r->n_ctx;
    cp.n_seq_max = r->n_seq;
    cp.n_batch = r->n_batch;
    /* logits are kept for scored positions only: n_vocab floats each, the big buffer */
    int32_t scored = r->n_ctx - r->first - 1;
    cp.n_outputs_max =
        r->n_batch < r->n_ctx ? (r->n_batch < scored ? r->n_batch : scored) : r->n_seq * scored;
    cp.n_threads = cp.n_threads_batch = o->threads;
    cp.kv_type = o->kv;
    cp.attn_fast = o->attn_fast;
    cpulm_error err = {0};
    r->ctx = cpulm_ctx_new(r->m, &cp, &err);
    if (!r->ctx) {
        fprintf(stderr, "cpulm perplexity: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "cpulm perplexity: %d tokens; %d chunks, n_ctx=%d, batch_size=%d, n_seq=%d\n",
            n_tokens, r->n_chunk, r->n_ctx, r->n_batch, r->n_seq);
    size_t nb = (size_t)r->n_batch;
    r->b_tok = malloc(nb * sizeof *r->b_tok);
    r->b_pos = malloc(nb * sizeof *r->b_pos);
    r->b_seq = malloc(nb * sizeof *r->b_seq);
    r->b_want = malloc(nb);
    int rc = r->b_tok && r->b_pos && r->b_seq && r->b_want ? kld_open(r) : 1;
    if (!rc) rc = evaluate(r);
    if (r->kld && fclose(r->kld) != 0 && !rc) {
        fprintf(stderr, "cpulm perplexity: writing %s failed\n", o->kld_base);
        rc = 1;
    }
    free(r->kld_row);
    free(r->b_tok);
    free(r->b_pos);
    free(r->b_seq);
    free(r->b_want);
    cpulm_ctx_free(r->ctx);
    return rc;
}

int cmd_perplexity(int argc, char **argv) {
    ppl_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    size_t len = 0;
    char *text = cli_read_file(o.file, &len);
    if (!text) return EXIT_USAGE;
    const char *path = cli_model_path(o.model);
    cpulm_model *m = path ? cli_load_model(path, 0, NULL) : NULL;
    if (!m) {
        free(text);
        return path ? cli_load_failed_rc(path) : EXIT_USAGE;
    }
    cpulm_token *tokens = NULL;
    double t0 = cli_now_ms();
    int32_t n = cli_tokenize(m, text, len, 1, 0, &tokens);
    free(text);
    rc = 1;
    if (n >= 0) {
        fprintf(stderr, "cpulm perplexity: tokenized %s in %.0f ms\n", o.file, cli_now_ms() - t0);
        ppl_run r = {.o = &o, .m = m, .tokens = tokens};
        rc = setup_and_run(&r, n);
    }
    free(tokens);
    cpulm_model_free(m);
    return rc;
}
