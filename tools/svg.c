/* svg.c: line and grouped-bar charts as standalone SVG (see svg.h). Layout: title on top,
 * legend under it, the plot area with a light grid, y axis from 0 (throughputs, latencies
 * and costs are all read against zero), labelled ticks, axis titles, an optional note. */
#include "svg.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { LEFT = 84, RIGHT = 24, TOP = 78, BOTTOM = 72 };

static const char *palette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"};
#define N_COLORS (int)(sizeof palette / sizeof palette[0])

void svg_escape(cpulm_buf *out, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&': cpulm_buf_puts(out, "&amp;"); break;
        case '<': cpulm_buf_puts(out, "&lt;"); break;
        case '>': cpulm_buf_puts(out, "&gt;"); break;
        case '"': cpulm_buf_puts(out, "&quot;"); break;
        case '\'': cpulm_buf_puts(out, "&apos;"); break;
        default: cpulm_buf_putc(out, *s);
        }
    }
}

void svg_nice_axis(double lo, double hi, int max_ticks, double *top, double *step) {
    if (!(hi > lo)) hi = lo + 1;
    if (max_ticks < 1) max_ticks = 1;
    double raw = (hi - lo) / max_ticks, mag = pow(10, floor(log10(raw)));
    static const double mult[] = {1, 2, 2.5, 5, 10};
    double s = mag * 10;
    for (int i = 0; i < 5; i++)
        if (mag * mult[i] >= raw * (1 - 1e-9)) {
            s = mag * mult[i];
            break;
        }
    *step = s;
    *top = lo + ceil((hi - lo) / s - 1e-9) * s;
}

/* Tick label with as many decimals as the step needs. */
static void fmt_tick(char *buf, size_t cap, double v, double step) {
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (step < 1 && fabs(step * pow(10, dec) - round(step * pow(10, dec))) > 1e-6) dec++;
    snprintf(buf, cap, "%.*f", dec, v);
}

/* Value label of a point or bar: 3 significant digits, no exponent for usual ranges. */
static void fmt_value(char *buf, size_t cap, double v) {
    double a = fabs(v);
    if (a >= 100 || a == 0)
        snprintf(buf, cap, "%.0f", v);
    else if (a >= 10)
        snprintf(buf, cap, "%.1f", v);
    else if (a >= 1)
        snprintf(buf, cap, "%.2f", v);
    else
        snprintf(buf, cap, "%.3g", v);
}

static void text(cpulm_buf *o, double x, double y, const char *anchor, int size, const char *extra,
                 const char *s) {
    cpulm_buf_printf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\"%s>", x, y,
                     anchor, size, extra ? extra : "");
    svg_escape(o, s);
    cpulm_buf_puts(o, "</text>\n");
}

typedef struct frame {
    double x0, y0, w, h; /* plot area: left, top, width, height */
    double ymax, ystep;
} frame;

static double y_px(const frame *f, double v) {
    return f->y0 + f->h - v / f->ymax * f->h;
}

/* Opening tag, background, title, axis titles, legend, y grid and y tick labels. */
static void begin(cpulm_buf *o, const svg_chart *c, frame *f, double ymax_data) {
    f->x0 = LEFT;
    f->y0 = TOP;
    f->w = SVG_WIDTH - LEFT - RIGHT;
    f->h = SVG_HEIGHT - TOP - BOTTOM;
    svg_nice_axis(0, ymax_data > 0 ? ymax_data * 1.08 : 1, 6, &f->ymax, &f->ystep);
    cpulm_buf_printf(o,
                     "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                     "viewBox=\"0 0 %d %d\" font-family=\"Helvetica, Arial, sans-serif\">\n",
                     SVG_WIDTH, SVG_HEIGHT, SVG_WIDTH, SVG_HEIGHT);
    cpulm_buf_printf(o, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", SVG_WIDTH,
                     SVG_HEIGHT);
    text(o, SVG_WIDTH / 2.0, 26, "middle", 17, " font-weight=\"bold\"", c->title);
    double lx = LEFT; /* legend: one row of swatches under the title */
    for (int i = 0; i < c->n_series; i++) {
        const char *col = palette[i % N_COLORS];
        cpulm_buf_printf(o,
                         "<rect class=\"legend\" x=\"%.1f\" y=\"42\" width=\"14\" height=\"14\" "
                         "fill=\"%s\"/>\n",
                         lx, col);
        text(o, lx + 20, 54, "start", 13, NULL, c->series[i].name);
        lx += 40 + 7.5 * (double)strlen(c->series[i].name);
    }
    char buf[32];
    for (double v = 0; v <= f->ymax + f->ystep * 1e-6; v += f->ystep) {
        double y = y_px(f, v);
        cpulm_buf_printf(
            o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n",
            f->x0, y, f->x0 + f->w, y);
        fmt_tick(buf, sizeof buf, v, f->ystep);
        text(o, f->x0 - 8, y + 4, "end", 12, NULL, buf);
    }
    cpulm_buf_printf(o,
                     "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                     "stroke=\"#444\"/>\n",
                     f->x0, f->y0, f->w, f->h);
    text(o, f->x0 + f->w / 2, SVG_HEIGHT - 30, "middle", 14, NULL, c->x_label);
    cpulm_buf_printf(o,
                     "<text x=\"20\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"14\" "
                     "transform=\"rotate(-90 20 %.1f)\">",
                     f->y0 + f->h / 2, f->y0 + f->h / 2);
    svg_escape(o, c->y_label);
    cpulm_buf_puts(o, "</text>\n");
}

static void end(cpulm_buf *o, const svg_chart *c) {
    if (c->note) { /* a note wider than the chart (~5.6 px per character) is squeezed in */
        char extra[128] = " fill=\"#555\"";
        double room = SVG_WIDTH - 24, est = 5.6 * (double)strlen(c->note);
        if (est > room)
            snprintf(extra, sizeof extra,
                     " fill=\"#555\" textLength=\"%.0f\" lengthAdjust=\"spacingAndGlyphs\"", room);
        text(o, 12, SVG_HEIGHT - 8, "start", 11, extra, c->note);
    }
    cpulm_buf_puts(o, "</svg>\n");
}

/* Half-width of the error bar of point j of series i; 0 when there is none. */
static double err_at(const svg_chart *c, int i, int j) {
    double e = c->err && c->err[i] ? c->err[i][j] : 0;
    return e > 0 && isfinite(e) ? e : 0; /* NaN and negative values draw no bar */
}

static double max_y(const svg_chart *c) {
    double m = 0;
    for (int i = 0; i < c->n_series; i++)
        for (int j = 0; j < c->series[i].n; j++) {
            double top = c->series[i].y[j] + err_at(c, i, j); /* bars must fit the axis */
            if (top > m) m = top;                             /* NaN compares false */
        }
    return m;
}

/* A vertical error bar at x from y - e (not below 0) to y + e, with 8 px caps. */
static void err_bar(cpulm_buf *o, const frame *f, double x, double y, double e) {
    double lo = y - e > 0 ? y - e : 0, y0 = y_px(f, lo), y1 = y_px(f, y + e);
    cpulm_buf_printf(o,
                     "<path class=\"err\" d=\"M%.1f %.1fV%.1fM%.1f %.1fH%.1fM%.1f %.1fH%.1f\" "
                     "stroke-width=\"1.5\" fill=\"none\"/>\n",
                     x, y0, y1, x - 4, y0, x + 4, x - 4, y1, x + 4);
}

/* ---- line chart ---- */

typedef struct xaxis {
    double lo, hi; /* in axis units (log2 x when log2) */
    int log2;
} xaxis;

static double xv(const xaxis *a, double x) {
    return a->log2 ? log2(x) : x;
}

static double x_px(const frame *f, const xaxis *a, double x) {
    double span = a->hi - a->lo;
    return f->x0 + 20 + (xv(a, x) - a->lo) / (span > 0 ? span : 1) * (f->w - 40);
}

static void x_ticks(cpulm_buf *o, const frame *f, const xaxis *a) {
    char buf[32];
    double step, top;
    if (a->log2) {
        step = a->hi - a->lo > 10 ? 2 : 1; /* every power of two, or every other one */
        top = a->hi;
        for (double e = ceil(a->lo); e <= top + 1e-9; e += step) {
            double x = x_px(f, a, pow(2, e));
            snprintf(buf, sizeof buf, "%.0f", pow(2, e));
            cpulm_buf_printf(
                o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", x,
                f->y0 + f->h, x, f->y0 + f->h + 5);
            text(o, x, f->y0 + f->h + 20, "middle", 12, NULL, buf);
        }
        return;
    }
    svg_nice_axis(a->lo, a->hi, 8, &top, &step);
    for (double v = ceil(a->lo / step - 1e-9) * step; v <= a->hi + step * 1e-6; v += step) {
        double x = x_px(f, a, v);
        fmt_tick(buf, sizeof buf, v, step);
        cpulm_buf_printf(
            o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", x,
            f->y0 + f->h, x, f->y0 + f->h + 5);
        text(o, x, f->y0 + f->h + 20, "middle", 12, NULL, buf);
    }
}

static void x_range(const svg_chart *c, xaxis *a) {
    a->lo = INFINITY;
    a->hi = -INFINITY;
    for (int i = 0; i < c->n_series; i++)
        for (int j = 0; j < c->series[i].n; j++) {
            double x = c->series[i].x[j];
            if (isnan(c->series[i].y[j]) || (a->log2 && !(x > 0))) continue;
            if (xv(a, x) < a->lo) a->lo = xv(a, x);
            if (xv(a, x) > a->hi) a->hi = xv(a, x);
        }
    if (a->lo > a->hi) a->lo = a->hi = 0;
}

static void line_series(cpulm_buf *o, const frame *f, const xaxis *a, const svg_chart *c, int i,
                        int label) {
    const svg_series *s = &c->series[i];
    const char *col = palette[i % N_COLORS];
    char v[32];
    cpulm_buf_printf(o, "<g class=\"series\" data-name=\"");
    svg_escape(o, s->name);
    cpulm_buf_printf(
        o, "\" fill=\"%s\" stroke=\"%s\">\n<polyline fill=\"none\" stroke-width=\"2.5\" points=\"",
        col, col);
    for (int j = 0; j < s->n; j++)
        if (!isnan(s->y[j]) && (!a->log2 || s->x[j] > 0))
            cpulm_buf_printf(o, "%.1f,%.1f ", x_px(f, a, s->x[j]), y_px(f, s->y[j]));
    cpulm_buf_puts(o, "\"/>\n");
    for (int j = 0; j < s->n; j++) {
        if (isnan(s->y[j]) || (a->log2 && !(s->x[j] > 0))) continue;
        double px = x_px(f, a, s->x[j]), py = y_px(f, s->y[j]), e = err_at(c, i, j);
        if (e > 0) err_bar(o, f, px, s->y[j], e);
        fmt_value(v, sizeof v, s->y[j]);
        cpulm_buf_printf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\"><title>", px, py);
        svg_escape(o, s->name);
        cpulm_buf_printf(o, ": %s</title></circle>\n", v);
        if (label && e > 0)
            text(o, px + 7, py - 6, "start", 11, " stroke=\"none\"", v); /* beside the bar */
        else if (label)
            text(o, px, py - 9, "middle", 11, " stroke=\"none\"", v);
    }
    cpulm_buf_puts(o, "</g>\n");
}

void svg_line_chart(cpulm_buf *o, const svg_chart *c) {
    frame f;
    xaxis a = {.log2 = c->log2_x};
    begin(o, c, &f, max_y(c));
    x_range(c, &a);
    x_ticks(o, &f, &a);
    int max_n = 0;
    for (int i = 0; i < c->n_series; i++)
        max_n = c->series[i].n > max_n ? c->series[i].n : max_n;
    int label = c->n_series <= 2 && max_n <= 8; /* value labels only while they stay legible */
    for (int i = 0; i < c->n_series; i++)
        line_series(o, &f, &a, c, i, label);
    end(o, c);
}

/* ---- grouped bar chart ---- */

void svg_bar_chart(cpulm_buf *o, const svg_chart *c) {
    frame f;
    begin(o, c, &f, max_y(c));
    int nc = c->n_categories > 0 ? c->n_categories : 1, ns = c->n_series > 0 ? c->n_series : 1;
    double group = f.w / nc, bar = group * 0.8 / ns;
    char v[32];
    for (int k = 0; k < c->n_categories; k++)
        text(o, f.x0 + group * (k + 0.5), f.y0 + f.h + 20, "middle", 12, NULL, c->categories[k]);
    for (int i = 0; i < c->n_series; i++) {
        const svg_series *s = &c->series[i];
        cpulm_buf_puts(o, "<g class=\"series\" data-name=\"");
        svg_escape(o, s->name);
        cpulm_buf_printf(o, "\" fill=\"%s\">\n", palette[i % N_COLORS]);
        for (int k = 0; k < s->n && k < c->n_categories; k++) {
            if (isnan(s->y[k])) continue;
            double x = f.x0 + group * k + group * 0.1 + bar * i, y = y_px(&f, s->y[k]);
            double e = err_at(c, i, k);
            fmt_value(v, sizeof v, s->y[k]);
            cpulm_buf_printf(o,
                             "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"><title>",
                             x, y, bar * 0.92, f.y0 + f.h - y);
            svg_escape(o, s->name);
            cpulm_buf_printf(o, ": %s</title></rect>\n", v);
            if (e > 0) { /* dark, so it shows over the bar; the label goes above it */
                cpulm_buf_puts(o, "<g stroke=\"#222\">");
                err_bar(o, &f, x + bar * 0.46, s->y[k], e);
                cpulm_buf_puts(o, "</g>\n");
            }
            text(o, x + bar * 0.46, y_px(&f, s->y[k] + e) - 5, "middle", 11, " fill=\"#222\"", v);
        }
        cpulm_buf_puts(o, "</g>\n");
    }
    end(o, c);
}
