/* fuzz_grammar.c: fuzz target for GBNF and JSON-schema compilation and the matcher
 * (libFuzzer entry point; without libFuzzer it links with tests/fuzz/fuzz_main.c, which
 * replays the files of corpus/grammar). The first byte picks the mode: even = the rest is
 * GBNF text, odd = the rest is a JSON schema (JSON -> GBNF -> compiled).
 * Invariants checked beyond "no crash, no sanitizer report":
 *   - compilation's work units are bounded by the input's and the result's size (linear
 *     time: no input makes it quadratic), and a failure is never "out of memory";
 *   - a schema the schema compiler accepts gives GBNF the parser accepts or refuses only
 *     for a limit, left recursion (a $ref cycle) or an empty character class;
 *   - budget-aware closing: with a byte vocabulary and a budget of the grammar's shortest
 *     completion (+1 for the end token), always taking the first allowed byte ends at a
 *     complete sentence within the budget, and every masked byte is accepted.
 * Limits are lowered (fewer rules per input) so executions stay fast; the code paths are
 * the same as with the defaults. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/json.h"
#include "grammar/grammar_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#if defined(FUZZ_GRAMMAR_STANDALONE)
/* The libFuzzer build compiles only the grammar sources; vocab.c's model reader is never
 * called here, so these stand in for the model API it references. */
int32_t cpulm_vocab_n(const cpulm_model *m) {
    (void)m;
    return 0;
}
int cpulm_token_is_eog(const cpulm_model *m, cpulm_token t) {
    (void)m, (void)t;
    return 0;
}
cpulm_status cpulm_token_to_piece(const cpulm_model *m, cpulm_token t, int special, char *buf,
                                  int32_t cap, int32_t *n_out) {
    (void)m, (void)t, (void)special, (void)buf, (void)cap, (void)n_out;
    return CPULM_ERR_UNSUPPORTED;
}
#endif

/* 256 single bytes and an end token (id 256). */
static cpulm_grammar_vocab *byte_vocab(void) {
    static cpulm_grammar_vocab *v;
    static char bytes[256];
    if (v) return v;
    const char *b[257];
    int32_t len[257];
    uint8_t eog[257] = {0};
    for (int i = 0; i < 256; i++)
        bytes[i] = (char)i, b[i] = &bytes[i], len[i] = 1;
    b[256] = "", len[256] = 0, eog[256] = 1;
    v = cpulm_grammar_vocab_from_pieces(257, b, len, eog);
    if (!v) abort();
    return v;
}

static int allowed(const uint32_t *m, int t) {
    return (m[t >> 5] >> (t & 31)) & 1;
}

static void check_budget_closing(const cpulm_grammar *g) {
    cpulm_grammar_matcher *m = cpulm_grammar_matcher_new(g, byte_vocab());
    if (!m) abort(); /* the compile-time start check guarantees the start state */
    int32_t d0 = cpulm_grammar_distance(m);
    if (d0 > 64) { /* no finite sentence, or a long one: not walked (executions stay fast) */
        cpulm_grammar_matcher_free(m);
        return;
    }
    cpulm_grammar_matcher_set_budget(m, d0 + 1);
    for (int32_t step = 0; step <= d0; step++) {
        const uint32_t *mask = cpulm_grammar_mask(m);
        if (!mask) break; /* too ambiguous: a clean failure */
        if (cpulm_grammar_complete(m)) {
            if (!allowed(mask, 256)) abort(); /* complete: the end token is allowed */
            cpulm_grammar_matcher_free(m);
            return;
        }
        int t = 0;
        while (t < 256 && !allowed(mask, t))
            t++;
        if (t == 256) abort(); /* incomplete yet nothing allowed */
        cpulm_status st = cpulm_grammar_accept_token(m, t);
        if (st == CPULM_ERR_TOO_SMALL) break;
        if (st != CPULM_OK) abort(); /* a masked byte was refused */
    }
    cpulm_grammar_matcher_free(m);
    return;
}

static cpulm_grammar_limits fuzz_limits(void) {
    cpulm_grammar_limits lim = cpulm_grammar_default_limits();
    lim.max_rules = 2048;
    lim.max_elems = 1 << 14;
    lim.max_repeat = 64;
    lim.max_rep_product = 1024;
    lim.max_chain = 512;
    return lim;
}

static void compile_checked(const char *text, size_t n, int from_schema) {
    cpulm_grammar_limits lim = fuzz_limits();
    cpulm_grammar *g = NULL;
    cpulm_error err = {0};
    uint64_t work = 0;
    cpulm_status st = cpulm_grammar_parse_ex(text, n, NULL, &lim, &g, &work, &err);
    if (st == CPULM_ERR_NOMEM) abort();
    /* linear: generated rule names cost up to ~110 bytes each; the start check may visit
     * up to 2048 stacks per rule of a chain */
    uint64_t made = g ? (uint64_t)g->n_elems + (uint64_t)g->n_alt + (uint64_t)g->n_rules
                      : (uint64_t)lim.max_elems + (uint64_t)lim.max_rules;
    uint64_t bound = 256 * ((uint64_t)n + made + 16) + 4 * 2049 * ((uint64_t)lim.max_chain + 2);
    if (work > bound) abort();
    if (from_schema && st != CPULM_OK && st != CPULM_ERR_LIMIT &&
        !strstr(err.msg, "left-recursive") && !strstr(err.msg, "matches no character"))
        abort(); /* the schema compiler wrote GBNF the parser refuses */
    if (g) check_budget_closing(g);
    cpulm_grammar_free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 8192) return 0;
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    if (!(data[0] & 1)) {
        compile_checked(text, n, 0);
        return 0;
    }
    cpulm_json_doc *d = NULL;
    if (cpulm_json_parse(text, n, NULL, &d, NULL, NULL) != CPULM_OK) return 0;
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_error err = {0};
    cpulm_status st = cpulm_grammar_from_schema(cpulm_json_root(d), &b, &err);
    if (st == CPULM_ERR_NOMEM) abort();
    if (st == CPULM_OK) compile_checked(b.data, b.len, 1);
    cpulm_buf_release(&b);
    cpulm_json_free(d);
    return 0;
}
