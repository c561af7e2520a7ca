/* svg.h: small self-contained SVG charts for `cpulm report`: line charts (x-y series, with
 * an optional powers-of-two x axis) and grouped bar charts (categories x series), with
 * title, axis labels with units, ticks, grid, legend, optional error bars and escaped text.
 * The output is one standalone <svg> element (valid XML), which also embeds as-is in HTML.
 * Writes into a cpulm_buf; the buffer's sticky status reports memory errors. */
#ifndef CPULM_TOOLS_SVG_H
#define CPULM_TOOLS_SVG_H

#include "tools_api.h"

typedef struct svg_series {
    const char *name; /* legend text */
    const double *x;  /* line charts: n x values (ignored by bar charts) */
    const double *y;  /* n values; NaN = no point / no bar */
    int n;
} svg_series;

typedef struct svg_chart {
    const char *title;
    const char *x_label, *y_label; /* with units, e.g. "threads", "tokens/s" */
    int log2_x;                    /* line charts: x axis in powers of two (x > 0) */
    const svg_series *series;
    int n_series;
    const char *const *categories; /* bar charts: n_categories group labels */
    int n_categories;
    const char *note; /* optional small text under the chart (assumptions) */
    /* Optional error bars: err[i] holds series i's n half-widths (e.g. one sample standard
     * deviation), drawn as a vertical bar from y - e to y + e with caps; a NULL entry, or a
     * value that is NaN or <= 0, draws none. Kept out of svg_series so existing positional
     * series initializers stay complete. */
    const double *const *err;
} svg_chart;

enum { SVG_WIDTH = 760, SVG_HEIGHT = 440 };

void svg_line_chart(cpulm_buf *out, const svg_chart *c);
void svg_bar_chart(cpulm_buf *out, const svg_chart *c);

/* "Nice" axis: from 0 (or lo) to a round number >= hi with steps of 1, 2 or 5 x 10^k and at
 * most max_ticks intervals. Sets *top and *step. hi <= lo gives [lo, lo + 1]. */
void svg_nice_axis(double lo, double hi, int max_ticks, double *top, double *step);
/* Appends s with &, <, >, " and ' escaped for XML text and attributes. */
void svg_escape(cpulm_buf *out, const char *s);

#endif
