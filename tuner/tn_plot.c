/* tuner/tn_plot.c -- 'tuner plot': the tuning curve of a task (best GFLOPS over trials) as
** a PNG or SVG picture, drawn once with cairo (the same drawing for both surfaces): a
** title naming the task, device and best figure, both axes with round ticks and titles
** with their units, a grid, the best-so-far curve and a mark where the best was found.
** Text goes through cairo's font selection (fontconfig: DejaVu Sans on Debian). */
#include <cairo/cairo-svg.h>
#include <cairo/cairo.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/records.h"
#include "tuner/tuner_int.h"

#define W 800
#define H 480
#define ML 80 /* margins: left, right, top, bottom */
#define MR 30
#define MT 50
#define MB 60

typedef struct curve {
    int n;
    double *x, *y; /* trial, best GFLOPS */
    double x_max, y_max;
    double flops;
    char title[200];
} curve;

typedef struct pt {
    int64_t trial;
    double cost;
    int status;
} pt;

static int cmp_pt(const void *a, const void *b)
{
    const pt *x = a, *y = b;
    return x->trial < y->trial ? -1 : x->trial > y->trial;
}

/* Merge every group of the task (devices with records of build failures form their own
** group) into one curve of the best so far, by trial. */
static int build_curve(const rec_history *h, const char *key, curve *c, char *err, size_t n)
{
    pt *p;
    int m = 0;
    double best = INFINITY;
    const rec_history_group *g0 = NULL;
    for (int i = 0; i < h->n_groups; i++)
        if (!key || strcmp(h->groups[i].workload_key, key) == 0) m += h->groups[i].n_points;
    if (m == 0) {
        snprintf(err, n, "no records of task %s", key ? key : "(any)");
        return -1;
    }
    p = calloc((size_t)m, sizeof *p);
    c->x = calloc((size_t)m + 1, sizeof *c->x);
    c->y = calloc((size_t)m + 1, sizeof *c->y);
    if (!p || !c->x || !c->y) {
        free(p);
        snprintf(err, n, "out of memory");
        return -1;
    }
    m = 0;
    for (int i = 0; i < h->n_groups; i++) {
        const rec_history_group *g = &h->groups[i];
        if (key && strcmp(g->workload_key, key) != 0) continue;
        if (g0 == NULL || g->n_points > g0->n_points) g0 = g;
        for (int k = 0; k < g->n_points; k++) {
            p[m].trial = g->points[k].trial >= 0 ? g->points[k].trial : m;
            p[m].cost = g->points[k].cost;
            p[m].status = g->points[k].status;
            m++;
        }
    }
    qsort(p, (size_t)m, sizeof *p, cmp_pt);
    c->flops = g0->flops;
    c->n = 0;
    for (int i = 0; i < m; i++) {
        if (p[i].status == 0 && p[i].cost > 0 && p[i].cost < best) best = p[i].cost;
        c->x[c->n] = (double)(i + 1);
        c->y[c->n] = isfinite(best) ? c->flops / best * 1e-9 : 0;
        if (c->y[c->n] > c->y_max) c->y_max = c->y[c->n];
        c->n++;
    }
    c->x_max = m;
    snprintf(c->title, sizeof c->title, "task %.32s on %.24s: best %.1f GFLOPS after %d trials",
             g0->workload_key, g0->device_key, c->y_max, m);
    free(p);
    return 0;
}

/* A round step for the axis: 1, 2 or 5 times a power of ten. */
static double nice_step(double range, int ticks)
{
    double raw = range / ticks, p = pow(10, floor(log10(raw > 0 ? raw : 1))), r = raw / p;
    return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * p;
}

static double sx(const curve *c, double x)
{
    return ML + (W - ML - MR) * (c->x_max > 1 ? (x - 1) / (c->x_max - 1) : 0.5);
}

static double sy(double y, double y_top)
{
    return H - MB - (H - MT - MB) * (y_top > 0 ? y / y_top : 0);
}

/* 'text' with its anchor at (x, y): align 0 left, 1 centred, 2 right; baseline at y. */
static void label(cairo_t *cr, double x, double y, int align, const char *text)
{
    cairo_text_extents_t e;
    cairo_text_extents(cr, text, &e);
    cairo_move_to(cr, x - (align == 1 ? e.x_advance / 2 : align == 2 ? e.x_advance : 0), y);
    cairo_show_text(cr, text);
}

/* The white page, the title, the horizontal grid with its tick labels (0 to ytop by ystep). */
static void frame(cairo_t *cr, const char *title, double ytop, double ystep)
{
    char buf[64];
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
    cairo_set_font_size(cr, 14);
    cairo_set_source_rgb(cr, 0, 0, 0);
    label(cr, ML, 30, 0, title);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, 12);
    cairo_set_line_width(cr, 1);
    for (double y = 0; y <= ytop + 1e-9 * ytop; y += ystep) {
        double py = floor(sy(y, ytop)) + 0.5;
        cairo_set_source_rgb(cr, 0.87, 0.87, 0.87);
        cairo_move_to(cr, ML, py);
        cairo_line_to(cr, W - MR, py);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        snprintf(buf, sizeof buf, "%g", y);
        label(cr, ML - 8, py + 4, 2, buf);
    }
}

/* Both axes and their titles (with units). */
static void axes(cairo_t *cr, const char *x_title, const char *y_title)
{
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, 1);
    cairo_move_to(cr, ML + 0.5, MT);
    cairo_line_to(cr, ML + 0.5, H - MB + 0.5);
    cairo_line_to(cr, W - MR, H - MB + 0.5);
    cairo_stroke(cr);
    cairo_set_font_size(cr, 13);
    label(cr, (W + ML - MR) / 2.0, H - 14, 1, x_title);
    cairo_save(cr);
    cairo_translate(cr, 22, (H + MT - MB) / 2.0);
    cairo_rotate(cr, -M_PI / 2);
    label(cr, 0, 0, 1, y_title);
    cairo_restore(cr);
}

static void draw(cairo_t *cr, const void *ctx)
{
    const curve *c = ctx;
    double y_range = c->y_max > 0 ? c->y_max : 1, ystep = nice_step(y_range, 5);
    double ytop = ceil(y_range / ystep) * ystep, xstep = nice_step(c->x_max > 1 ? c->x_max : 2, 8);
    char buf[64];
    int best_i = -1;

    frame(cr, c->title, ytop, ystep);
    for (double x = 0; x <= c->x_max + 1e-9; x += xstep) {
        double px = floor(sx(c, x > 0 ? x : 1)) + 0.5;
        cairo_set_source_rgb(cr, 0, 0, 0);
        cairo_move_to(cr, px, H - MB);
        cairo_line_to(cr, px, H - MB + 5);
        cairo_stroke(cr);
        snprintf(buf, sizeof buf, "%g", x > 0 ? x : 1);
        label(cr, px, H - MB + 19, 1, buf);
    }
    axes(cr, "trials (measured candidates, in order)", "best so far (GFLOPS)");
    /* the curve, and a dot where the best was found */
    cairo_set_source_rgb(cr, 0x1f / 255.0, 0x6f / 255.0, 0xd0 / 255.0);
    cairo_set_line_width(cr, 2);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    for (int i = 0; i < c->n; i++) {
        double px = sx(c, c->x[i]), py = sy(c->y[i], ytop);
        if (i == 0)
            cairo_move_to(cr, px, py);
        else
            cairo_line_to(cr, px, py);
        if (best_i < 0 || c->y[i] > c->y[best_i]) best_i = i;
    }
    cairo_stroke(cr);
    if (best_i >= 0 && c->y[best_i] > 0) {
        cairo_arc(cr, sx(c, c->x[best_i]), sy(c->y[best_i], ytop), 4, 0, 2 * M_PI);
        cairo_fill(cr);
    }
}

/* Draw with fn(cr, ctx) into 'path' (PNG or SVG); 0, or -1 with the reason in err. */
static int write_picture(void (*fn)(cairo_t *, const void *), const void *ctx,
                         const char *path, int png, char *err, size_t n)
{
    cairo_surface_t *s = png ? cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H)
                             : cairo_svg_surface_create(path, W, H);
    cairo_status_t st = cairo_surface_status(s);
    if (st == CAIRO_STATUS_SUCCESS) {
        cairo_t *cr = cairo_create(s);
        fn(cr, ctx);
        st = cairo_status(cr);
        cairo_destroy(cr);
    }
    if (st == CAIRO_STATUS_SUCCESS && png) st = cairo_surface_write_to_png(s, path);
    cairo_surface_finish(s);
    if (st == CAIRO_STATUS_SUCCESS) st = cairo_surface_status(s);
    cairo_surface_destroy(s);
    if (st != CAIRO_STATUS_SUCCESS) {
        snprintf(err, n, "cannot write %s: %s", path, cairo_status_to_string(st));
        return -1;
    }
    return 0;
}

int tn__cmd_plot(const tn_cmd *cmd, int argc, char **argv)
{
    const char *db = "tuning.db", *task = NULL, *out = NULL, *target = NULL, *device = NULL;
    int n_pos, help, rc, png;
    at_opt opts[] = {
        {"db", 0, AT_OPT_STR, &db, "FILE", "the records store (default tuning.db)"},
        {"task", 0, AT_OPT_STR, &task, "KEY", "the task's workload key (default: the only one)"},
        {"target", 0, AT_OPT_STR, &target, "T", "only records of this target"},
        {"device", 0, AT_OPT_STR, &device, "KEY", "only records of this device key"},
        {"output", 'o', AT_OPT_STR, &out, "FILE", "the picture: FILE.svg or FILE.png"},
    };
    rec_store *st;
    rec_history *h;
    rec_filter f;
    curve c;
    char err[512];
    if ((rc = tn__opts_cmd(NULL, cmd, opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos,
                           &help)) != TN_EXIT_OK || help)
        return rc;
    if (out == NULL || n_pos != 0) {
        tn__err(cmd, "give the picture to write: -o curve.svg or -o curve.png");
        return TN_EXIT_USAGE;
    }
    png = strlen(out) > 4 && strcmp(out + strlen(out) - 4, ".png") == 0;
    if (!png && !(strlen(out) > 4 && strcmp(out + strlen(out) - 4, ".svg") == 0)) {
        tn__err(cmd, "-o %s: the name must end in .svg or .png", out);
        return TN_EXIT_USAGE;
    }
    if (rec_store_open(db, REC_OPEN_READONLY, &st, err, sizeof err) != AT_OK) {
        tn__err(cmd, "%s", err);
        return TN_EXIT_FAIL;
    }
    memset(&f, 0, sizeof f);
    f.workload_key = task;
    f.target = target;
    f.device_key = device;
    if (rec_history_get(st, &f, &h) != AT_OK) {
        tn__err(cmd, "%s", rec_store_errmsg(st));
        rec_store_close(st);
        return TN_EXIT_FAIL;
    }
    if (task == NULL && h->n_groups > 0) {
        for (int i = 1; i < h->n_groups; i++)
            if (strcmp(h->groups[i].workload_key, h->groups[0].workload_key) != 0) {
                tn__err(cmd, "the store has several tasks: choose one with --task KEY "
                            "('tuner best' lists them)");
                rec_history_free(h);
                rec_store_close(st);
                return TN_EXIT_USAGE;
            }
        task = h->groups[0].workload_key;
    }
    memset(&c, 0, sizeof c);
    if (build_curve(h, task, &c, err, sizeof err) != 0) {
        tn__err(cmd, "%s", err);
        rec_history_free(h);
        rec_store_close(st);
        return TN_EXIT_EMPTY;
    }
    if (write_picture(draw, &c, out, png, err, sizeof err) != 0) {
        tn__err(cmd, "%s", err);
        rc = TN_EXIT_FAIL;
    } else {
        printf("%s: %d trials, best %.2f GFLOPS\n", out, c.n, c.y_max);
        rc = TN_EXIT_OK;
    }
    free(c.x);
    free(c.y);
    rec_history_free(h);
    rec_store_close(st);
    return rc;
}

/* ---- latency histograms ('tuner run --histogram', 'tuner plot-latency') ----------------
** One or more distributions of run latencies on the same axes: common bins (Freedman-Diaconis
** width of the series with the narrowest spread, 10 to 80 bins over the whole range; the
** x axis logarithmic when the largest latency is over 4 times the smallest, so that
** distributions of very different speeds all show), each series' bars in its own colour
** (translucent where they overlap), its p50, p90 and p99 marked, and a legend. */

#define MAX_SERIES 8

typedef struct hist {
    int n_series;
    const tn_lat_series *s;
    int log_x;
    double lo, hi;      /* the x range (log10 of ms when log_x) */
    int n_bins;
    int *count[MAX_SERIES], max_count;
    double p[MAX_SERIES][3];
    char title[240];
} hist;

static const double palette[MAX_SERIES][3] = {
    {0x1f / 255.0, 0x6f / 255.0, 0xd0 / 255.0}, {0.85, 0.45, 0.1}, {0.2, 0.6, 0.25},
    {0.6, 0.25, 0.7}, {0.75, 0.15, 0.2}, {0.3, 0.3, 0.3}, {0.1, 0.6, 0.6}, {0.6, 0.5, 0.1}};

double tn__percentile(const double *sorted, int n, double p)
{
    double pos;
    int i;
    if (n <= 0)
        return 0;
    pos = p / 100.0 * (n - 1);
    i = (int)floor(pos);
    if (i >= n - 1)
        return sorted[n - 1];
    return sorted[i] + (pos - i) * (sorted[i + 1] - sorted[i]);
}

static double hx(const hist *h, double ms)
{
    double v = h->log_x ? log10(ms) : ms;
    return ML + (W - ML - MR) * (v - h->lo) / (h->hi - h->lo);
}

static void draw_hist(cairo_t *cr, const void *ctx)
{
    const hist *h = ctx;
    double ystep = nice_step(h->max_count, 5), ytop = ceil(h->max_count / ystep) * ystep;
    double width = (h->hi - h->lo) / h->n_bins;
    char buf[96];
    frame(cr, h->title, ytop, ystep);
    /* x ticks: round values; on a log axis 1, 2, 5 times a power of ten */
    cairo_set_source_rgb(cr, 0, 0, 0);
    if (h->log_x) {
        for (double dec = floor(h->lo); dec <= h->hi; dec += 1)
            for (int k = 0; k < 5; k++) {
                static const double m[5] = {1, 2, 3, 5, 7};
                double v = m[k] * pow(10, dec), px;
                if (log10(v) < h->lo - 1e-9 || log10(v) > h->hi + 1e-9)
                    continue;
                px = floor(hx(h, v)) + 0.5;
                cairo_move_to(cr, px, H - MB);
                cairo_line_to(cr, px, H - MB + 5);
                cairo_stroke(cr);
                snprintf(buf, sizeof buf, "%g", v);
                label(cr, px, H - MB + 19, 1, buf);
            }
    } else {
        double xstep = nice_step(h->hi - h->lo, 8);
        for (double x = ceil(h->lo / xstep) * xstep; x <= h->hi + 1e-9 * h->hi; x += xstep) {
            double px = floor(hx(h, x)) + 0.5;
            cairo_move_to(cr, px, H - MB);
            cairo_line_to(cr, px, H - MB + 5);
            cairo_stroke(cr);
            snprintf(buf, sizeof buf, "%g", x);
            label(cr, px, H - MB + 19, 1, buf);
        }
    }
    /* the bars of each series */
    for (int k = 0; k < h->n_series; k++) {
        cairo_set_source_rgba(cr, palette[k][0], palette[k][1], palette[k][2],
                              h->n_series > 1 ? 0.6 : 1.0);
        for (int b = 0; b < h->n_bins; b++) {
            double l = ML + (W - ML - MR) * b * width / (h->hi - h->lo);
            double r = ML + (W - ML - MR) * (b + 1) * width / (h->hi - h->lo);
            double top = sy(h->count[k][b], ytop);
            if (h->count[k][b] == 0)
                continue;
            cairo_rectangle(cr, l + 0.5, top, AT_MAX(r - l - 1, 1), H - MB - top);
            cairo_fill(cr);
        }
    }
    /* the percentiles of each series, and the legend on the side whose bars are lower */
    double leg_x = W - MR - 250;
    {
        int left = 0, right = 0;
        for (int k = 0; k < h->n_series; k++)
            for (int b = 0; b < h->n_bins; b++) {
                int *side = b < h->n_bins * 2 / 5 ? &left : b >= h->n_bins * 3 / 5 ? &right : NULL;
                if (side && h->count[k][b] > *side)
                    *side = h->count[k][b];
            }
        if (left < right) {
            leg_x = ML + 15;
        } else if (h->n_series > 1) {
            /* right-aligned: as wide as its longest line */
            double wmax = 0;
            cairo_set_font_size(cr, 11);
            for (int k = 0; k < h->n_series; k++) {
                cairo_text_extents_t e;
                snprintf(buf, sizeof buf, "%.20s: p50 %.4g, p90 %.4g, p99 %.4g ms",
                         h->s[k].name, h->p[k][0], h->p[k][1], h->p[k][2]);
                cairo_text_extents(cr, buf, &e);
                wmax = e.x_advance > wmax ? e.x_advance : wmax;
            }
            cairo_set_font_size(cr, 12);
            leg_x = W - MR - 25 - wmax;
        }
    }
    cairo_set_line_width(cr, 1.5);
    for (int k = 0; k < h->n_series; k++) {
        static const char *const pn[3] = {"p50", "p90", "p99"};
        static const double dash[2] = {5, 3};
        for (int q = 0; q < 3; q++) {
            double px = hx(h, h->p[k][q]);
            cairo_set_source_rgb(cr, h->n_series > 1 ? palette[k][0] : 0.8,
                                 h->n_series > 1 ? palette[k][1] : 0.2,
                                 h->n_series > 1 ? palette[k][2] : 0.1);
            cairo_set_dash(cr, dash, q == 0 ? 0 : 2, 0);
            cairo_move_to(cr, px, MT);
            cairo_line_to(cr, px, H - MB);
            cairo_stroke(cr);
            cairo_set_dash(cr, NULL, 0, 0);
            if (h->n_series == 1) {
                snprintf(buf, sizeof buf, "%s %.3g", pn[q], h->p[k][q]);
                label(cr, px + 3, MT + 12 + 14 * q, 0, buf);
            }
        }
        if (h->n_series > 1) {
            double y = MT + 14 + 16 * k;
            if (k == 0) {
                cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
                cairo_rectangle(cr, leg_x - 5, MT + 1, W - MR - leg_x + 5, 16 * h->n_series + 6);
                cairo_fill(cr);
            }
            cairo_set_source_rgb(cr, palette[k][0], palette[k][1], palette[k][2]);
            cairo_rectangle(cr, leg_x, y - 9, 10, 10);
            cairo_fill(cr);
            cairo_set_source_rgb(cr, 0, 0, 0);
            snprintf(buf, sizeof buf, "%.20s: p50 %.4g, p90 %.4g, p99 %.4g ms", h->s[k].name,
                     h->p[k][0], h->p[k][1], h->p[k][2]);
            cairo_set_font_size(cr, 11);
            label(cr, leg_x + 15, y, 0, buf);
            cairo_set_font_size(cr, 12);
        }
    }
    axes(cr, h->log_x ? "latency of one run of the model (ms, logarithmic)"
                      : "latency of one run of the model (ms)", "runs");
}

int tn__plot_latencies(const tn_lat_series *series, int n_series, const char *title,
                       const char *path, char *err, size_t err_size)
{
    hist h;
    int png = strlen(path) > 4 && strcmp(path + strlen(path) - 4, ".png") == 0, rc;
    double mn = INFINITY, mx = 0, w = INFINITY;
    memset(&h, 0, sizeof h);
    if (n_series < 1 || n_series > MAX_SERIES) {
        snprintf(err, err_size, "%d series: 1 to %d can be drawn", n_series, MAX_SERIES);
        return -1;
    }
    h.n_series = n_series;
    h.s = series;
    for (int k = 0; k < n_series; k++) {
        const double *v = series[k].sorted_ms;
        int n = series[k].n;
        if (n < 1 || !(v[0] > 0)) {
            snprintf(err, err_size, "%s: %s", series[k].name, n < 1 ? "no runs to draw"
                     : "a latency is not above 0");
            return -1;
        }
        mn = v[0] < mn ? v[0] : mn;
        mx = v[n - 1] > mx ? v[n - 1] : mx;
        for (int q = 0; q < 3; q++)
            h.p[k][q] = tn__percentile(v, n, q == 0 ? 50 : q == 1 ? 90 : 99);
    }
    h.log_x = mx > 4 * mn;
    h.lo = h.log_x ? log10(mn) : mn;
    h.hi = h.log_x ? log10(mx) : mx;
    /* bins: Freedman-Diaconis of the series with the narrowest spread, 10 to 80 of them */
    for (int k = 0; k < n_series; k++) {
        const double *v = series[k].sorted_ms;
        int n = series[k].n;
        double q1 = tn__percentile(v, n, 25), q3 = tn__percentile(v, n, 75);
        double iqr = h.log_x ? log10(q3) - log10(q1) : q3 - q1;
        if (iqr > 0 && 2 * iqr / cbrt((double)n) < w)
            w = 2 * iqr / cbrt((double)n);
    }
    {
        double range = h.hi - h.lo;
        int nb = isfinite(w) && w > 0 && range > 0 ? (int)ceil(range / w) : 10;
        h.n_bins = nb < 10 ? 10 : nb > 80 ? 80 : nb;
        if (range <= 0) {
            double pad = h.log_x ? 0.01 : (mn > 0 ? mn * 0.01 : 1e-3);
            h.lo -= pad / 2;
            h.hi += pad / 2;
        }
        h.hi = h.lo + (h.hi - h.lo) * 1.0001;
    }
    for (int k = 0; k < n_series; k++) {
        if ((h.count[k] = calloc((size_t)h.n_bins, sizeof *h.count[k])) == NULL) {
            snprintf(err, err_size, "out of memory");
            for (int j = 0; j < k; j++)
                free(h.count[j]);
            return -1;
        }
        for (int i = 0; i < series[k].n; i++) {
            double v = h.log_x ? log10(series[k].sorted_ms[i]) : series[k].sorted_ms[i];
            int b = (int)((v - h.lo) / (h.hi - h.lo) * h.n_bins);
            b = b < 0 ? 0 : b >= h.n_bins ? h.n_bins - 1 : b;
            if (++h.count[k][b] > h.max_count)
                h.max_count = h.count[k][b];
        }
    }
    if (n_series == 1)
        snprintf(h.title, sizeof h.title, "%.150s: %d runs, p50 %.3f ms, max %.3f ms", title,
                 series[0].n, h.p[0][0], series[0].sorted_ms[series[0].n - 1]);
    else
        snprintf(h.title, sizeof h.title, "%.200s", title);
    rc = write_picture(draw_hist, &h, path, png, err, err_size);
    for (int k = 0; k < n_series; k++)
        free(h.count[k]);
    return rc;
}

int tn__plot_histogram(const double *sorted_ms, int n, const char *title, const char *path,
                       char *err, size_t err_size)
{
    tn_lat_series s = {"this run", sorted_ms, n};
    return tn__plot_latencies(&s, 1, title, path, err, err_size);
}

static int cmp_ms(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* 'tuner plot-latency -o FILE NAME=FILE...': latencies (milliseconds, one per line, as
** lib_run --latencies and the benchmark's references write them) of several runners on
** the same axes. */
int tn__cmd_plot_latency(const tn_cmd *cmd, int argc, char **argv)
{
    const char *out = NULL, *title = "latency of one run";
    int n_pos, help, rc = TN_EXIT_OK, n = 0;
    at_opt opts[] = {
        {"output", 'o', AT_OPT_STR, &out, "FILE", "the picture: FILE.svg or FILE.png"},
        {"title", 0, AT_OPT_STR, &title, "TEXT", "its title"},
    };
    tn_lat_series s[MAX_SERIES];
    double *v[MAX_SERIES] = {0};
    char names[MAX_SERIES][64], err[512];
    if ((rc = tn__opts_cmd(NULL, cmd, opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos,
                           &help)) != TN_EXIT_OK || help)
        return rc;
    if (out == NULL || (strlen(out) <= 4 || (strcmp(out + strlen(out) - 4, ".png") != 0 &&
                                             strcmp(out + strlen(out) - 4, ".svg") != 0))) {
        tn__err(cmd, out ? "-o %s: the name must end in .png or .svg"
                         : "missing -o FILE.png or FILE.svg%s", out ? out : "");
        return TN_EXIT_USAGE;
    }
    if (n_pos < 1 || n_pos > MAX_SERIES) {
        tn__err(cmd, "give 1 to %d series as NAME=FILE (milliseconds, one per line)", MAX_SERIES);
        return TN_EXIT_USAGE;
    }
    for (int i = 0; i < n_pos && rc == TN_EXIT_OK; i++) {
        const char *a = argv[1 + i], *eq = strchr(a, '=');
        char *text = NULL;
        size_t len;
        int cap = 0;
        if (eq == NULL || eq == a || (size_t)(eq - a) >= sizeof names[0]) {
            tn__err(cmd, "'%s': give NAME=FILE", a);
            rc = TN_EXIT_USAGE;
            break;
        }
        snprintf(names[n], sizeof names[0], "%.*s", (int)(eq - a), a);
        if (at_file_read(eq + 1, &text, &len, err, sizeof err) != AT_OK) {
            tn__err(cmd, "%s", err);
            rc = TN_EXIT_FAIL;
            break;
        }
        s[n] = (tn_lat_series){names[n], NULL, 0};
        for (char *p = text, *end; rc == TN_EXIT_OK && *p;) {
            double x;
            while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
                p++;
            if (*p == 0)
                break;
            x = strtod(p, &end);
            if (end == p || !isfinite(x) || x <= 0) {
                int line = 1;
                for (const char *q = text; q < p; q++)
                    line += *q == '\n';
                tn__err(cmd, "%s:%d: not a latency in milliseconds (a number above 0)", eq + 1,
                        line);
                rc = TN_EXIT_FAIL;
                break;
            }
            if (s[n].n == cap) {
                double *q = realloc(v[n], (size_t)(cap = cap ? 2 * cap : 256) * sizeof *q);
                if (q == NULL) {
                    tn__err(cmd, "out of memory");
                    rc = TN_EXIT_FAIL;
                    break;
                }
                v[n] = q;
            }
            v[n][s[n].n++] = x;
            p = end;
        }
        at_free(text);
        if (rc == TN_EXIT_OK && s[n].n == 0) {
            tn__err(cmd, "%s: no latencies in it", eq + 1);
            rc = TN_EXIT_FAIL;
        }
        if (rc == TN_EXIT_OK) {
            qsort(v[n], (size_t)s[n].n, sizeof *v[n], cmp_ms);
            s[n].sorted_ms = v[n];
            n++;
        }
    }
    if (rc == TN_EXIT_OK) {
        for (int k = 0; k < n; k++)
            printf("%s: %d runs, p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms\n",
                   s[k].name, s[k].n, tn__percentile(s[k].sorted_ms, s[k].n, 50),
                   tn__percentile(s[k].sorted_ms, s[k].n, 90),
                   tn__percentile(s[k].sorted_ms, s[k].n, 99), s[k].sorted_ms[s[k].n - 1]);
        if (tn__plot_latencies(s, n, title, out, err, sizeof err) != 0) {
            tn__err(cmd, "%s", err);
            rc = TN_EXIT_FAIL;
        } else {
            printf("written to %s\n", out);
        }
    }
    for (int k = 0; k < MAX_SERIES; k++)
        free(v[k]);
    return rc;
}
