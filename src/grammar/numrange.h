/* numrange.h: GBNF for number ranges, shared by the JSON-schema compiler (schema.c). */
#ifndef CPULM_GRAMMAR_NUMRANGE_H
#define CPULM_GRAMMAR_NUMRANGE_H

#include <stddef.h>

#include "base/buf.h"

/* Appends alternatives for the decimal numbers of exactly n digits in [lo, hi] (digit
 * strings of length n, lo <= hi). */
void cpulm_grammar_digits_range(cpulm_buf *b, const char *lo, const char *hi, size_t n);

/* Appends "( ... )" matching the JSON numbers x (no exponent, at most 15 digits in all)
 * with lo <= x <= hi (lo < x if slo, x < hi if shi), such that the doubles they read as
 * compare the same way with the doubles lo and hi (see numrange.c). Bounds past
 * +-999999999999999 are cut to it. Returns 1, 0 if no such number exists (nothing
 * appended), or -1 if a bound has more than 24 fraction digits (unsupported). */
int cpulm_grammar_number_range(cpulm_buf *b, double lo, int slo, double hi, int shi);

#endif
