/* schema_int.h: what schema.c (the JSON-schema compiler) shares with schema_merge.c (the
 * intersection of schemas that must all hold: allOf, and keywords beside $ref, anyOf,
 * oneOf). */
#ifndef CPULM_GRAMMAR_SCHEMA_INT_H
#define CPULM_GRAMMAR_SCHEMA_INT_H

#include <stddef.h>

#include "base/buf.h"
#include "base/json.h"

/* Keywords a part may have set aside (already applied elsewhere): bits of skip. */
enum {
    CPULM_SK_ENUM = 1,
    CPULM_SK_CONST = 2,
    CPULM_SK_ANYOF = 4,
    CPULM_SK_ONEOF = 8,
    CPULM_SK_ALLOF = 16,
    CPULM_SK_REF = 32,
};

/* One schema of a conjunction, minus the keywords in skip. */
typedef struct cpulm_grammar_part {
    const cpulm_json *s; /* an object or a boolean */
    unsigned skip;
} cpulm_grammar_part;

/* s's keyword key, NULL if absent or set aside by skip. */
const cpulm_json *cpulm_grammar_schema_kw(const cpulm_json *s, unsigned skip, const char *key);
/* Keywords that do not constrain values (title, $defs, ...). */
int cpulm_grammar_schema_annotation(const char *key);
/* JSON-equal values (numbers by value, objects whatever their key order). */
int cpulm_grammar_json_eq(const cpulm_json *a, const cpulm_json *b);

/* Writes to out one schema (JSON text) valid exactly for the values valid under every part
 * (objects or true; none may use anyOf, oneOf, allOf or $ref any more). -1 when that cannot
 * be written (two different patterns, formats or prefixItems), -2 when nothing is valid (no
 * common type or enum value, a required property another part forbids): msg (cap bytes)
 * then says why, naming the keyword. */
int cpulm_grammar_schema_merge(const cpulm_grammar_part *p, int n, cpulm_buf *out, char *msg,
                               size_t cap);

#endif
