/* numrange.c: GBNF for the decimal numbers between two bounds (JSON schema minimum,
 * maximum and their exclusive forms, fractional bounds included).
 *
 * A validator compares the double nearest to the output with the double of the bound, so
 * the grammar must be right after rounding, not only on decimal text. Two facts make it so:
 * rounding to nearest is monotonic (decimal x >= L implies double(x) >= double(L)), and a
 * decimal of at most 15 significant digits never rounds to the same double as a different
 * decimal of at most 15 (DBL_DIG). Each bound is written as the shortest decimal that reads
 * back as its double (at most 15 digits whenever an output could collide with it), and
 * outputs have at most 15 digits in all (integer part and fraction, no exponent), so a
 * strict decimal comparison stays strict after rounding.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/numrange.h"

#define MAX_DIGITS 15 /* integer part plus fraction of an output */
#define MAX_FRAC   24 /* fraction digits of a bound (past this: refused) */
#define CAP        999999999999999ULL

typedef struct dec {
    uint64_t ip;
    char fr[MAX_FRAC + 1]; /* fraction digits, no trailing zeros */
} dec;

static int n_digits(uint64_t v) {
    int n = 1;
    while (v >= 10)
        v /= 10, n++;
    return n;
}

/* |x| (x finite, |x| <= CAP) as the shortest decimal that reads back as x. -1 if its
 * fraction has more than MAX_FRAC digits. */
static int to_dec(double x, dec *d) {
    char buf[48], digs[24];
    x = fabs(x);
    for (int p = 0; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p, x);
        if (strtod(buf, NULL) == x) break;
    }
    int nd = 0;
    const char *q = buf;
    for (; *q && *q != 'e' && nd < 20; q++)
        if (*q >= '0' && *q <= '9') digs[nd++] = *q;
    int point = atoi(q + 1) + 1; /* digits before the decimal point */
    d->ip = 0;
    for (int i = 0; i < point; i++)
        d->ip = d->ip * 10 + (uint64_t)(i < nd ? digs[i] - '0' : 0);
    int n = 0;
    for (int i = point < 0 ? point : 0; i < 0; i++) {
        if (n >= MAX_FRAC) return -1;
        d->fr[n++] = '0';
    }
    for (int i = point > 0 ? point : 0; i < nd; i++) {
        if (n >= MAX_FRAC) return -1;
        d->fr[n++] = digs[i];
    }
    while (n > 0 && d->fr[n - 1] == '0')
        n--;
    d->fr[n] = 0;
    return 0;
}

/* Appends alternatives for the decimal numbers of exactly len(a) digits in [a, b] (same
 * length strings). */
void cpulm_grammar_digits_range(cpulm_buf *b, const char *lo, const char *hi, size_t n) {
    if (n == 0) return;
    if (n == 1) {
        cpulm_buf_printf(b, "[%c-%c]", lo[0], hi[0]);
        return;
    }
    if (lo[0] == hi[0]) {
        cpulm_buf_printf(b, "\"%c\" ", lo[0]);
        cpulm_grammar_digits_range(b, lo + 1, hi + 1, n - 1);
        return;
    }
    int lo_zero = strspn(lo + 1, "0") == n - 1, hi_nine = strspn(hi + 1, "9") == n - 1;
    char nines[32], zeros[32];
    memset(nines, '9', n - 1);
    memset(zeros, '0', n - 1);
    nines[n - 1] = zeros[n - 1] = 0;
    cpulm_buf_puts(b, "( ");
    int any = 0;
    char a0 = lo[0], b0 = hi[0];
    if (!lo_zero) {
        cpulm_buf_printf(b, "\"%c\" ( ", a0);
        cpulm_grammar_digits_range(b, lo + 1, nines, n - 1);
        cpulm_buf_puts(b, " )");
        a0++;
        any = 1;
    }
    char top = hi_nine ? b0 : (char)(b0 - 1);
    if (a0 <= top) {
        cpulm_buf_printf(b, "%s[%c-%c] [0-9]{%zu}", any ? " | " : "", a0, top, n - 1);
        any = 1;
    }
    if (!hi_nine) {
        cpulm_buf_printf(b, "%s\"%c\" ( ", any ? " | " : "", b0);
        cpulm_grammar_digits_range(b, zeros, hi + 1, n - 1);
        cpulm_buf_puts(b, " )");
    }
    cpulm_buf_puts(b, " )");
}

/* One fraction bound still in play: the output's digits so far equal its first i digits. */
typedef struct fb {
    const char *s; /* NULL: no bound (or already satisfied) */
    int strict;
} fb;

static void alt(cpulm_buf *b, int *n, const char *text) {
    cpulm_buf_printf(b, "%s%s", *n ? " | " : "", text);
    (*n)++;
}

/* Appends alternatives for the digit strings t of length 0..rem such that the fraction
 * (prefix, t) is >= lo (> if strict) and <= hi (< if strict), both compared as decimals
 * padded with zeros; the prefix equals the first i digits of each bound in play. Counts
 * alternatives in *n; nonempty: leave out the empty string. */
static void frac_alts(cpulm_buf *b, int *n, fb lo, fb hi, int i, int rem, int nonempty) {
    int lo_end = lo.s && i >= (int)strlen(lo.s), hi_end = hi.s && i >= (int)strlen(hi.s);
    if (lo_end && !lo.strict) lo.s = NULL; /* equal so far, the rest of lo zeros: satisfied */
    if (!nonempty && !lo.s && (!hi.s || !hi_end || !hi.strict)) alt(b, n, "\"\"");
    if (rem == 0) return;
    char tmp[64];
    for (int d = 0; d <= 9;) {
        /* the bounds after digit d: 0 dead, 1 still equal, 2 released */
        int lc = lo.s ? (lo_end ? '0' : lo.s[i]) - '0' : -1;
        int hc = hi.s ? (hi_end ? '0' : hi.s[i]) - '0' : 10;
        int dead = d < lc || d > hc || (hi_end && d > 0);
        int lo_eq = lo.s && d == lc, hi_eq = hi.s && d == hc;
        if (dead) {
            d++;
            continue;
        }
        if (!lo_eq && !hi_eq) { /* free: a run of such digits, anything may follow */
            int e = d;
            while (e + 1 <= 9 && e + 1 > lc && e + 1 < hc && !(hi_end && e + 1 > 0))
                e++;
            if (rem > 1)
                snprintf(tmp, sizeof tmp, "[%d-%d] [0-9]{0,%d}", d, e, rem - 1);
            else
                snprintf(tmp, sizeof tmp, "[%d-%d]", d, e);
            alt(b, n, tmp);
            d = e + 1;
            continue;
        }
        cpulm_buf sub;
        cpulm_buf_init(&sub, 0);
        int k = 0;
        fb nlo = lo_eq ? lo : (fb){NULL, 0}, nhi = hi_eq ? hi : (fb){NULL, 0};
        frac_alts(&sub, &k, nlo, nhi, i + 1, rem - 1, 0);
        if (k > 0) {
            cpulm_buf_printf(b, "%s\"%d\" ( %s )", *n ? " | " : "", d, sub.data);
            (*n)++;
        }
        cpulm_buf_release(&sub);
        d++;
    }
}

/* Appends one alternative: integer text ip, then the fractions allowed by lo/hi. */
static void int_then_frac(cpulm_buf *b, int *n, uint64_t ip, fb lo, fb hi) {
    int cap = MAX_DIGITS - n_digits(ip);
    cpulm_buf sub;
    cpulm_buf_init(&sub, 0);
    int k_empty = 0, k = 0;
    frac_alts(&sub, &k_empty, lo, hi, 0, 0, 0); /* just the empty fraction, if allowed */
    cpulm_buf_reset(&sub);
    frac_alts(&sub, &k, lo, hi, 0, cap, 1);
    if (k_empty || k) {
        cpulm_buf_printf(b, "%s\"%llu\"", *n ? " | " : "", (unsigned long long)ip);
        if (k) cpulm_buf_printf(b, " ( \".\" ( %s ) )%s", sub.data, k_empty ? "?" : "");
        (*n)++;
    }
    cpulm_buf_release(&sub);
}

/* Nonnegative decimals in [lo, hi] (strict ends as flagged; lo <= hi). */
static void nonneg(cpulm_buf *b, int *n, const dec *lo, int slo, const dec *hi, int shi) {
    fb flo = {lo->fr, slo}, fhi = {hi->fr, shi};
    if (lo->ip == hi->ip) {
        int_then_frac(b, n, lo->ip, flo, fhi);
        return;
    }
    int_then_frac(b, n, lo->ip, flo, (fb){NULL, 0});
    for (uint64_t a = lo->ip + 1; a < hi->ip;) { /* whole integer parts, by length */
        int len = n_digits(a);
        uint64_t top = 9;
        for (int i = 1; i < len; i++)
            top = top * 10 + 9;
        uint64_t z = top < hi->ip - 1 ? top : hi->ip - 1;
        char sa[24], sz[24];
        snprintf(sa, sizeof sa, "%llu", (unsigned long long)a);
        snprintf(sz, sizeof sz, "%llu", (unsigned long long)z);
        cpulm_buf_puts(b, *n ? " | " : "");
        cpulm_grammar_digits_range(b, sa, sz, (size_t)len);
        if (MAX_DIGITS - len > 0) cpulm_buf_printf(b, " ( \".\" [0-9]{1,%d} )?", MAX_DIGITS - len);
        (*n)++;
        if (z >= hi->ip - 1) break;
        a = z + 1;
    }
    int_then_frac(b, n, hi->ip, (fb){NULL, 0}, fhi);
}

int cpulm_grammar_number_range(cpulm_buf *b, double lo, int slo, double hi, int shi) {
    if (!(lo <= hi) || (lo == hi && (slo || shi))) return 0;
    if (lo < -(double)CAP) lo = -(double)CAP, slo = 0;
    if (hi > (double)CAP) hi = (double)CAP, shi = 0;
    if (lo > hi || hi < -(double)CAP || lo > (double)CAP) return 0;
    dec dl, dh, zero = {0, ""};
    if (to_dec(lo, &dl) < 0 || to_dec(hi, &dh) < 0) return -1;
    cpulm_buf t;
    cpulm_buf_init(&t, 0);
    int n = 0;
    if (hi >= 0) { /* the nonnegative part: [max(lo, 0), hi] */
        if (lo >= 0)
            nonneg(&t, &n, &dl, slo, &dh, shi);
        else
            nonneg(&t, &n, &zero, 0, &dh, shi);
    }
    if (lo < 0) { /* negative: magnitudes in (max(-hi, 0), -lo], zero left out ("-0") */
        cpulm_buf neg;
        cpulm_buf_init(&neg, 0);
        int k = 0;
        if (hi < 0)
            nonneg(&neg, &k, &dh, shi, &dl, slo);
        else
            nonneg(&neg, &k, &zero, 1, &dl, slo);
        if (k) {
            cpulm_buf_printf(&t, "%s\"-\" ( %s )", n ? " | " : "", neg.data);
            n++;
        }
        cpulm_buf_release(&neg);
    }
    if (n) cpulm_buf_printf(b, "( %s )", t.data);
    cpulm_buf_release(&t);
    return n > 0;
}
