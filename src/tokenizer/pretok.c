/* pretok.c: BPE pre-tokenizers, hand-written (no regex engine).
 *
 * Each pre-tokenizer is the pipeline of split regexes llama.cpp uses for that
 * tokenizer.ggml.pre name. A step is applied to every fragment left by the previous step
 * and keeps both its matches and the unmatched gaps between them as separate fragments,
 * like std::regex_iterator over each fragment. Every matcher below reproduces, at one
 * start position, exactly the match the regex would make there (leftmost alternative,
 * greedy quantifiers with backtracking), so scanning positions left to right yields the
 * regex search results in linear time.
 *
 * Conventions of the reference that matter: \s is the White_Space property; classes of
 * regexes without \p{..} see non-ASCII whitespace as U+000B (so it never matches a
 * literal class range); lookahead and $ see the end of the current fragment.
 */
#include "tokenizer/tok_internal.h"
#include "tokenizer/utf8.h"

/* Matches at position i of the fragment c[0..end); returns its length, 0 for no match. */
typedef size_t (*match_fn)(const uint32_t *c, size_t i, size_t end);

static unsigned fl(uint32_t cp) {
    return cpulm_unicode_flags(cp);
}
static int is_space(uint32_t cp) {
    return (fl(cp) & CPULM_UC_SPACE) != 0;
}
static int is_crlf(uint32_t cp) {
    return cp == '\r' || cp == '\n';
}
static uint32_t ascii_lower(uint32_t cp) {
    return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
static size_t contraction(const uint32_t *c, size_t i, size_t end) {
    if (c[i] != '\'' || i + 1 >= end) return 0;
    uint32_t a = ascii_lower(c[i + 1]);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 >= end) return 0;
    uint32_t b = ascii_lower(c[i + 2]);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

static size_t run(const uint32_t *c, size_t i, size_t end, unsigned mask) {
    size_t j = i;
    while (j < end && (fl(c[j]) & mask))
        j++;
    return j - i;
}

/* The Llama 3 split regex; max_digits is 3 for Llama 3 (\p{N}{1,3}) and 1 for Qwen2:
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t llama3_at(const uint32_t *c, size_t i, size_t end, size_t max_digits) {
    const unsigned lnw = CPULM_UC_LETTER | CPULM_UC_NUMBER | CPULM_UC_SPACE;
    size_t m = contraction(c, i, end);
    if (m) return m;
    unsigned f = fl(c[i]);
    if (!is_crlf(c[i]) && !(f & CPULM_UC_NUMBER)) {
        if (f & CPULM_UC_LETTER) return run(c, i, end, CPULM_UC_LETTER);
        if (i + 1 < end && (fl(c[i + 1]) & CPULM_UC_LETTER))
            return 1 + run(c, i + 1, end, CPULM_UC_LETTER);
    }
    if (f & CPULM_UC_NUMBER) {
        m = run(c, i, end, CPULM_UC_NUMBER);
        return m < max_digits ? m : max_digits;
    }
    size_t j = i + (c[i] == ' ');
    if (j < end && !(fl(c[j]) & lnw)) {
        while (j < end && !(fl(c[j]) & lnw))
            j++;
        while (j < end && is_crlf(c[j]))
            j++;
        return j - i;
    }
    size_t last_nl = 0; /* \s*[\r\n]+ ends at the run's last CR/LF */
    for (j = i; j < end && is_space(c[j]); j++)
        if (is_crlf(c[j])) last_nl = j + 1;
    if (last_nl) return last_nl - i;
    size_t n_ws = j - i;
    if (n_ws > 1 && j < end) return n_ws - 1; /* \s+(?!\S): leave one for the next word */
    return n_ws ? n_ws : 1;                   /* \s+ ; nothing else can be left over */
}

static size_t llama3_match(const uint32_t *c, size_t i, size_t end) {
    return llama3_at(c, i, end, 3);
}
static size_t qwen2_match(const uint32_t *c, size_t i, size_t end) {
    return llama3_at(c, i, end, 1);
}

/* [\r\n] */
static size_t crlf_match(const uint32_t *c, size_t i, size_t end) {
    (void)end;
    return is_crlf(c[i]) ? 1 : 0;
}

/* \s?X+ for a class X that contains no whitespace. */
static size_t opt_space_run(const uint32_t *c, size_t i, size_t end, int (*in)(uint32_t)) {
    size_t j = i;
    if (is_space(c[j]) && j + 1 < end && in(c[j + 1])) j++;
    while (j < end && in(c[j]))
        j++;
    return j > i && in(c[j - 1]) ? j - i : 0;
}

static int dsllm_letter(uint32_t cp) {
    return cpulm_unicode_is_dsllm_letter(cp);
}
/* [!-/:-~！-／：-～‘-‟　-。]; U+3000 is whitespace, seen as U+000B, so it never matches. */
static int dsllm_punct(uint32_t cp) {
    return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x7E) ||
           (cp >= 0xFF01 && cp <= 0xFF0F) || (cp >= 0xFF1A && cp <= 0xFF5E) ||
           (cp >= 0x2018 && cp <= 0x201F) || (cp >= 0x3001 && cp <= 0x3002);
}
/* [一-龥ࠀ-一가-퟿] = U+0800..U+9FA5, U+AC00..U+D7FF, minus whitespace (seen as U+000B). */
static int cjk(uint32_t cp) {
    return ((cp >= 0x0800 && cp <= 0x9FA5) || (cp >= 0xAC00 && cp <= 0xD7FF)) && !is_space(cp);
}
static int letter(uint32_t cp) {
    return (fl(cp) & CPULM_UC_LETTER) != 0;
}
static int punct(uint32_t cp) {
    return (fl(cp) & CPULM_UC_PUNCT) != 0;
}
static int number(uint32_t cp) {
    return (fl(cp) & CPULM_UC_NUMBER) != 0;
}

static size_t dsllm_letters_match(const uint32_t *c, size_t i, size_t end) {
    return opt_space_run(c, i, end, dsllm_letter);
}
static size_t dsllm_punct_match(const uint32_t *c, size_t i, size_t end) {
    return opt_space_run(c, i, end, dsllm_punct);
}
static size_t letters_match(const uint32_t *c, size_t i, size_t end) {
    return opt_space_run(c, i, end, letter);
}
static size_t punct_match(const uint32_t *c, size_t i, size_t end) {
    return opt_space_run(c, i, end, punct);
}
static size_t cjk_match(const uint32_t *c, size_t i, size_t end) {
    size_t j = i;
    while (j < end && cjk(c[j]))
        j++;
    return j - i;
}
static size_t numbers_match(const uint32_t *c, size_t i, size_t end) {
    return run(c, i, end, CPULM_UC_NUMBER);
}
static size_t number_match(const uint32_t *c, size_t i, size_t end) {
    (void)end;
    return number(c[i]) ? 1 : 0;
}
/* \s+$ : only the fragment's trailing whitespace can match; signalled specially. */
static size_t trailing_space_match(const uint32_t *c, size_t i, size_t end) {
    (void)c, (void)i, (void)end;
    return 0;
}

static cpulm_status push_len(tok_ivec *out, size_t n) {
    return n ? tok_ivec_push(out, (int32_t)n) : CPULM_OK;
}

/* Applies one step to every fragment of `in`, appending the new fragments to `out`. */
static cpulm_status apply_step(const uint32_t *cps, const tok_ivec *in, match_fn m, tok_ivec *out) {
    size_t start = 0;
    out->n = 0;
    for (size_t k = 0; k < in->n; k++) {
        size_t end = start + (size_t)in->v[k], gap = start, i = start;
        cpulm_status st = CPULM_OK;
        if (m == trailing_space_match) {
            while (i < end && is_space(cps[end - 1 - (i - start)]))
                i++;
            size_t t = end - (i - start); /* start of the trailing whitespace */
            if ((st = push_len(out, t - start)) == CPULM_OK) st = push_len(out, end - t);
            if (st != CPULM_OK) return st;
            start = end;
            continue;
        }
        while (i < end && st == CPULM_OK) {
            size_t len = m(cps, i, end);
            if (!len) {
                i++;
                continue;
            }
            if ((st = push_len(out, i - gap)) == CPULM_OK) st = push_len(out, len);
            i += len;
            gap = i;
        }
        if (st == CPULM_OK) st = push_len(out, end - gap);
        if (st != CPULM_OK) return st;
        start = end;
    }
    return CPULM_OK;
}

/* Gemma 4's [^\n]+|[\n]+: runs of newlines and runs of anything else. */
static cpulm_status newline_runs(const uint32_t *cps, size_t n, tok_ivec *lens) {
    cpulm_status st = CPULM_OK;
    for (size_t i = 0; i < n && st == CPULM_OK;) {
        size_t j = i + 1;
        while (j < n && (cps[j] == '\n') == (cps[i] == '\n'))
            j++;
        st = tok_ivec_push(lens, (int32_t)(j - i));
        i = j;
    }
    return st;
}

cpulm_status tok_pretok_split(tok_pre pre, const uint32_t *cps, size_t n, tok_ivec *lens) {
    static const match_fn llama3[] = {llama3_match, NULL};
    static const match_fn qwen2[] = {qwen2_match, NULL};
    static const match_fn dsllm[] = {crlf_match,
                                     dsllm_letters_match,
                                     dsllm_punct_match,
                                     trailing_space_match,
                                     cjk_match,
                                     numbers_match,
                                     NULL};
    static const match_fn dscoder[] = {crlf_match, letters_match, punct_match,
                                       cjk_match,  number_match,  NULL};
    const match_fn *steps = pre == TOK_PRE_LLAMA3           ? llama3
                            : pre == TOK_PRE_QWEN2          ? qwen2
                            : pre == TOK_PRE_DEEPSEEK_LLM   ? dsllm
                            : pre == TOK_PRE_DEEPSEEK_CODER ? dscoder
                                                            : NULL;
    if (n == 0) return CPULM_OK;
    if (n > INT32_MAX) return CPULM_ERR_INVALID_ARG;
    if (pre == TOK_PRE_GEMMA4) return newline_runs(cps, n, lens);
    CPULM_ASSERT(steps != NULL);
    tok_ivec a = {0}, b = {0};
    cpulm_status st = tok_ivec_push(&a, (int32_t)n);
    for (const match_fn *s = steps; *s && st == CPULM_OK; s++) {
        st = apply_step(cps, &a, *s, &b);
        tok_ivec t = a;
        a = b;
        b = t;
    }
    for (size_t k = 0; k < a.n && st == CPULM_OK; k++)
        st = tok_ivec_push(lens, a.v[k]);
    tok_ivec_free(&a);
    tok_ivec_free(&b);
    return st;
}
