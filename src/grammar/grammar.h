/* grammar.h: constrained decoding. A GBNF grammar (llama.cpp's syntax) is compiled into
 * rules of elements; a matcher follows a partial output as a set of pushdown stacks; a
 * token mask says which vocabulary tokens may come next. Also a JSON-schema compiler
 * that emits GBNF (schema.c) and the parser of models' native tool-call formats.
 *
 * Syntax accepted (llama.cpp's GBNF): `name ::= alternatives`, `|`, grouping `( )`,
 * postfix `* + ? {m} {m,} {m,n} {,n}`, literals "..." and character classes [a-z] [^...]
 * with escapes \n \r \t \\ \" \] \[ \- \xHH \uHHHH \UHHHHHHHH, `.` (any character), `#`
 * comments. A newline ends a rule unless it is inside a group or the next line starts
 * with `|`. Left recursion is rejected (the matcher could not terminate on it).
 *
 * Matching is over Unicode code points of the UTF-8 output; tokens are byte strings, so a
 * token may end inside a character: the partial character is carried in the state.
 *
 * The mask: every token's bytes sit in a byte trie (cpulm_grammar_vocab, built once per
 * model and shared, immutable). A matcher turns stack sets into lazily built DFA states
 * (hash-consed stacks and sets, a 256-entry transition row per state), so walking the
 * trie costs one table lookup per trie node, dead subtrees are pruned, and whole masks
 * are cached per DFA state. End-of-generation tokens are allowed only when the grammar
 * is complete (and no character is half-written). Each state also knows the fewest bytes
 * that complete the grammar from it, so a token budget can steer the output to a close
 * before max_tokens cuts it (cpulm_grammar_matcher_set_budget).
 *
 * Thread-safety: cpulm_grammar and cpulm_grammar_vocab are immutable after creation and may
 * be shared (a grammar is reference counted: the cache hands out references); a
 * cpulm_grammar_matcher is used by one thread at a time.
 */
#ifndef CPULM_GRAMMAR_GRAMMAR_H
#define CPULM_GRAMMAR_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/json.h"
#include "base/status.h"

typedef struct cpulm_grammar cpulm_grammar;
typedef struct cpulm_grammar_vocab cpulm_grammar_vocab;
typedef struct cpulm_grammar_matcher cpulm_grammar_matcher;

/* Size and complexity limits of one compilation. Each is checked before the work it guards
 * (a repetition's copies are counted before they are made), so a refused grammar costs
 * about as much as reading it, and compilation is linear in the text plus what the limits
 * allow (rule names are hashed; nullability, left recursion, chain depth and shortest
 * completions are worklist passes). Going over one is CPULM_ERR_LIMIT with a message naming
 * the limit (a client error: the server answers 400). */
typedef struct cpulm_grammar_limits {
    size_t max_bytes;        /* grammar text (4 MiB) */
    int32_t max_rules;       /* rules, those made for groups and repetitions included (65536) */
    int32_t max_elems;       /* elements after repetitions are expanded (1 << 21) */
    int32_t max_alts;        /* alternatives of one rule (2048) */
    int32_t max_repeat;      /* m and n of {m,n} (4096) */
    int32_t max_rep_product; /* nested bounded repetitions: product of their bounds (65536) */
    int32_t max_nesting;     /* nested groups ( ) (256) */
    int32_t max_chain;       /* rules deep a derivation's first symbol may be (4096) */
} cpulm_grammar_limits;
cpulm_grammar_limits cpulm_grammar_default_limits(void);

/* Compiles GBNF text; root names the start rule (NULL: "root"). *out owned
 * (cpulm_grammar_free). CPULM_ERR_FORMAT with "grammar: line L col C: ..." in err for
 * syntax errors and grammars that cannot be matched (left recursion, an empty character
 * class), CPULM_ERR_LIMIT for a limit (also: more than 2048 parse stacks at the start),
 * CPULM_ERR_NOMEM only for a failed allocation. */
cpulm_status cpulm_grammar_parse(const char *text, size_t len, const char *root,
                                 cpulm_grammar **out, cpulm_error *err);
/* Same with explicit limits (NULL: the defaults); *work (if non-NULL) gets the work units
 * spent (hash probes, elements made and visited: a deterministic measure of the cost, which
 * the fuzz target bounds by the size of the input and of the result). */
cpulm_status cpulm_grammar_parse_ex(const char *text, size_t len, const char *root,
                                    const cpulm_grammar_limits *lim, cpulm_grammar **out,
                                    uint64_t *work, cpulm_error *err);
/* A compiled grammar is immutable and reference counted (atomically): _ref adds a reference
 * and returns g; _free drops one and frees the grammar with the last. NULL is a no-op. */
cpulm_grammar *cpulm_grammar_ref(cpulm_grammar *g);
void cpulm_grammar_free(cpulm_grammar *g);
int32_t cpulm_grammar_n_rules(const cpulm_grammar *g);
/* Bytes the compiled grammar holds (the cache's accounting). */
size_t cpulm_grammar_bytes(const cpulm_grammar *g);

/* ---- compiled-grammar cache (cache.c) ----
 * Agents send the same schema (so the same GBNF text) with every call; the cache compiles
 * each text once. Keyed by the text and the root name (hash, then a full compare), bounded
 * in entries and bytes (text plus compiled grammar), least recently used evicted first.
 * Thread-safe: one mutex guards the table, compilation runs outside it (two threads missing
 * on the same text both compile; the first insert wins). Entries are refcounted grammars,
 * so what a caller got stays valid after eviction until it calls cpulm_grammar_free.
 * Failures are not cached (a refused grammar is refused again, fast). */
typedef struct cpulm_grammar_cache cpulm_grammar_cache;
typedef struct cpulm_grammar_cache_stats {
    uint64_t hits, misses, evictions;
    int32_t entries;
    size_t bytes;
} cpulm_grammar_cache_stats;
/* max_entries <= 0 or max_bytes == 0: a cache that keeps nothing. NULL on OOM. */
cpulm_grammar_cache *cpulm_grammar_cache_new(int32_t max_entries, size_t max_bytes);
void cpulm_grammar_cache_free(cpulm_grammar_cache *c); /* grammars handed out stay valid */
/* The grammar of text (compiled, or the cached one): *out is one reference of the caller's
 * (cpulm_grammar_free). Errors as cpulm_grammar_parse. */
cpulm_status cpulm_grammar_cache_get(cpulm_grammar_cache *c, const char *text, size_t len,
                                     const char *root, cpulm_grammar **out, cpulm_error *err);
void cpulm_grammar_cache_stats_get(cpulm_grammar_cache *c, cpulm_grammar_cache_stats *out);
/* The process-wide cache the server uses (64 entries, 64 MiB), created on first use;
 * NULL if that allocation failed (callers then compile directly). */
cpulm_grammar_cache *cpulm_grammar_cache_shared(void);

/* The token trie of a model's vocabulary (token pieces as bytes; control tokens have no
 * bytes and are never allowed, except end-of-generation tokens at a complete grammar).
 * Owned; NULL on OOM. */
cpulm_grammar_vocab *cpulm_grammar_vocab_new(const cpulm_model *m);
/* Same from explicit pieces (tests, benchmarks): piece i is bytes[i][0..len[i]); eog[i]
 * (may be NULL) marks end-of-generation tokens. */
cpulm_grammar_vocab *cpulm_grammar_vocab_from_pieces(int32_t n, const char *const *bytes,
                                                     const int32_t *len, const uint8_t *eog);
void cpulm_grammar_vocab_free(cpulm_grammar_vocab *v);
int32_t cpulm_grammar_vocab_n(const cpulm_grammar_vocab *v);
int32_t cpulm_grammar_vocab_trie_nodes(const cpulm_grammar_vocab *v);

/* A matcher for one output: starts at the grammar's root. g and v are borrowed and must
 * outlive it (v may be NULL for byte-only use: no masks, no accept_token). */
cpulm_grammar_matcher *cpulm_grammar_matcher_new(const cpulm_grammar *g,
                                                 const cpulm_grammar_vocab *v);
void cpulm_grammar_matcher_free(cpulm_grammar_matcher *m);
/* Back to the start state (caches and the budget are kept; its count restarts). */
void cpulm_grammar_matcher_reset(cpulm_grammar_matcher *m);

/* Budget-aware closing: at most n_tokens more tokens will be sampled (the end token
 * included; n_tokens <= 0: no budget). Each accepted token counts. Masks then keep only
 * the tokens after which the grammar can still be completed in time, counting each byte
 * still needed as one token (exact when every byte is a token, as in byte-level BPE and
 * SentencePiece byte-fallback vocabularies, so the mask is never empty if the budget
 * covered the grammar's shortest sentence at the start; if it did not, the tokens that
 * get closest are kept). Without this a generation stopped by max_tokens would end
 * mid-sentence. Masks away from the limit are the unrestricted, cached ones. */
void cpulm_grammar_matcher_set_budget(cpulm_grammar_matcher *m, int32_t n_tokens);
/* The fewest bytes that complete the grammar from the current state (0: complete;
 * >= 1 << 29: it cannot be completed). */
int32_t cpulm_grammar_distance(const cpulm_grammar_matcher *m);

/* Feeds bytes. CPULM_ERR_INVALID_ARG (state unchanged) when they cannot continue the
 * grammar; CPULM_ERR_TOO_SMALL when the grammar is too ambiguous (stack or work limit). */
cpulm_status cpulm_grammar_accept_bytes(cpulm_grammar_matcher *m, const char *s, size_t n);
/* Feeds one token (its piece; an end-of-generation token only at a complete grammar). */
cpulm_status cpulm_grammar_accept_token(cpulm_grammar_matcher *m, cpulm_token t);
/* The output so far is a complete sentence of the grammar (it may still go on). */
int cpulm_grammar_complete(const cpulm_grammar_matcher *m);
/* No further bytes are possible: the only way on is to end. */
int cpulm_grammar_must_end(const cpulm_grammar_matcher *m);

/* Bit t of allow[(n_vocab + 31) / 32] is set iff token t may come next. Borrowed pointer,
 * valid until the next call on m; NULL on OOM or a too-ambiguous grammar.
 * Bounded work: one call (mask, accept_bytes/token, matcher_new) may spend at most
 * CPULM_GRAMMAR_MAX_WORK units (a stack node made or visited, a trie node walked: about
 * 10-50 ns each; ~330,000 for a JSON-schema mask over a 150k vocabulary) and no state may
 * hold more than 2048 parse stacks; past either the
 * matcher fails for good (NULL / CPULM_ERR_TOO_SMALL), so a hostile grammar costs the
 * thread that runs it a bounded time per token instead of seconds. */
#if !defined(CPULM_GRAMMAR_MAX_WORK)   /* the fuzz target lowers it: more executions */
#define CPULM_GRAMMAR_MAX_WORK 8388608 /* 2^23 */
#endif
const uint32_t *cpulm_grammar_mask(cpulm_grammar_matcher *m);

/* Why the matcher failed (a NULL mask, CPULM_ERR_TOO_SMALL), as a static message naming the
 * limit, or NULL if it has not. *client = 1 when the grammar is at fault (too ambiguous: a
 * client error), 0 for a failed allocation. */
const char *cpulm_grammar_matcher_failure(const cpulm_grammar_matcher *m, int *client);

typedef struct cpulm_grammar_stats {
    uint64_t masks, mask_cache_hits, trie_steps, dfa_states, stack_nodes;
    uint64_t budget_masks; /* masks restricted by the token budget */
    uint64_t max_work;     /* most work units one call took (CPULM_GRAMMAR_MAX_WORK) */
} cpulm_grammar_stats;
void cpulm_grammar_matcher_stats(const cpulm_grammar_matcher *m, cpulm_grammar_stats *out);

/* ---- JSON schema -> GBNF (schema.c) ----
 * Appends a GBNF grammar (root rule "root") for values valid under the schema. Supported:
 * type (incl. arrays of types, "null"), properties, required, additionalProperties (false,
 * true, or a schema), enum, const, anyOf, oneOf (branches provably disjoint, else
 * CPULM_ERR_UNSUPPORTED), allOf, $ref to "#", "#/$defs/..", "#/definitions/..", items,
 * prefixItems, minItems, maxItems, minLength, maxLength, pattern (a regex subset), format
 * date, time, date-time, uuid, minimum, maximum, exclusiveMinimum, exclusiveMaximum
 * (fractional bounds exactly), and the annotations title, description, default, examples,
 * $schema, $id, $comment. Every keyword of a schema holds together (keywords beside enum,
 * const, $ref, anyOf and oneOf included; allOf is an intersection). Anything else (e.g.
 * "not", "if", "patternProperties", "multipleOf", "uniqueItems", other formats) is refused:
 * CPULM_ERR_UNSUPPORTED with err->msg naming the keyword and its JSON path; so is a schema
 * no value satisfies (CPULM_ERR_INVALID_ARG, naming the keyword that empties it).
 * Whitespace between tokens is bounded (at most one newline and a few spaces), so no
 * output loops on whitespace. Object properties come in the schema's order. */
cpulm_status cpulm_grammar_from_schema(const cpulm_json *schema, cpulm_buf *out, cpulm_error *err);
/* Any JSON value (json_object mode; root an object if object_only). */
void cpulm_grammar_json_any(cpulm_buf *out, int object_only);
/* Building block for combined grammars: appends the rules of schema (named r<N>, numbered
 * from *next_rule, which is advanced) without a root rule or the shared json-* rules.
 * Returns the schema's top rule number, or -1 with err set. */
int cpulm_grammar_schema_rules(const cpulm_json *schema, cpulm_buf *out, int *next_rule,
                               cpulm_error *err);
/* The shared rules the schema rules use: ws, json-string, json-number, json-value0.. */
void cpulm_grammar_json_base(cpulm_buf *out);

/* ---- regex subset -> GBNF (regex.c) ----
 * Appends GBNF alternatives matching the whole string of a JSON-schema "pattern" (a regex
 * implicitly anchored by ^...$ when given; unanchored patterns are allowed any text around
 * them). Supported: literals, escapes \d \w \s \D \W \S \. etc., [...] classes, ., groups
 * (?:...), |, * + ? {m,n}. Backreferences, lookaround and flags are refused. rule_prefix
 * names generated helper rules. */
cpulm_status cpulm_grammar_from_regex(const char *re, size_t n, cpulm_buf *out, cpulm_error *err);

#endif
