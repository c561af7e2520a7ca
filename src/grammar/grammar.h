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
 * be shared; a cpulm_grammar_matcher is used by one thread at a time.
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

/* Compiles GBNF text; root names the start rule (NULL: "root"). *out owned
 * (cpulm_grammar_free). CPULM_ERR_FORMAT with "grammar: line L col C: ..." in err. */
cpulm_status cpulm_grammar_parse(const char *text, size_t len, const char *root,
                                 cpulm_grammar **out, cpulm_error *err);
void cpulm_grammar_free(cpulm_grammar *g); /* NULL is a no-op */
int32_t cpulm_grammar_n_rules(const cpulm_grammar *g);

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
 * grammar; CPULM_ERR_TOO_SMALL when the grammar is too ambiguous (stack limit). */
cpulm_status cpulm_grammar_accept_bytes(cpulm_grammar_matcher *m, const char *s, size_t n);
/* Feeds one token (its piece; an end-of-generation token only at a complete grammar). */
cpulm_status cpulm_grammar_accept_token(cpulm_grammar_matcher *m, cpulm_token t);
/* The output so far is a complete sentence of the grammar (it may still go on). */
int cpulm_grammar_complete(const cpulm_grammar_matcher *m);
/* No further bytes are possible: the only way on is to end. */
int cpulm_grammar_must_end(const cpulm_grammar_matcher *m);

/* Bit t of allow[(n_vocab + 31) / 32] is set iff token t may come next. Borrowed pointer,
 * valid until the next call on m; NULL on OOM or a too-ambiguous grammar. */
const uint32_t *cpulm_grammar_mask(cpulm_grammar_matcher *m);

typedef struct cpulm_grammar_stats {
    uint64_t masks, mask_cache_hits, trie_steps, dfa_states, stack_nodes;
    uint64_t budget_masks; /* masks restricted by the token budget */
} cpulm_grammar_stats;
void cpulm_grammar_matcher_stats(const cpulm_grammar_matcher *m, cpulm_grammar_stats *out);

/* ---- JSON schema -> GBNF (schema.c) ----
 * Appends a GBNF grammar (root rule "root") for values valid under the schema. Supported:
 * type (incl. arrays of types, "null"), properties, required, additionalProperties (false,
 * true, or a schema), enum, const, anyOf, oneOf (branches provably disjoint, else
 * CPULM_ERR_UNSUPPORTED), allOf of one schema, $ref to
 * "#", "#/$defs/..", "#/definitions/..", items, prefixItems, minItems, maxItems,
 * minLength, maxLength, pattern (a regex subset), format date, time, date-time, uuid,
 * minimum, maximum, exclusiveMinimum, exclusiveMaximum (integers exactly; numbers: the
 * integer part's sign and bound where the bound is 0), and the annotations title,
 * description, default, examples, $schema, $id, $comment. Anything else (e.g. "not",
 * "if", "patternProperties", "multipleOf", "uniqueItems", other formats) is refused:
 * CPULM_ERR_UNSUPPORTED with err->msg naming the keyword and its JSON path. Whitespace
 * between tokens is bounded (at most one newline and a few spaces), so no output loops
 * on whitespace. Object properties come in the schema's order. */
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
