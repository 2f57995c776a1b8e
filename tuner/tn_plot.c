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
    if ((rc = tn__opts_parse(cmd, opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos, &help)) !=
        TN_EXIT_OK)
        return rc;
    if (help) {
        tn__opts_help(stdout, NULL, cmd, opts, (int)AT_ARRAY_LEN(opts));
        return TN_EXIT_OK;
    }
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

/* ---- latency histograms ('tuner run --histogram') -------------------------------------- */

typedef struct hist {
    const double *ms; /* sorted */
    int n;
    double lo, width; /* first bin's left edge, bin width (ms) */
    int n_bins, *count, max_count;
    double p50, p90, p99;
    char title[200];
} hist;

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

static void draw_hist(cairo_t *cr, const void *ctx)
{
    const hist *h = ctx;
    double x0 = h->lo, x1 = h->lo + h->n_bins * h->width, ystep = nice_step(h->max_count, 5);
    double ytop = ceil(h->max_count / ystep) * ystep, xstep = nice_step(x1 - x0, 8);
    const struct { double v; const char *name; } marks[3] = {
        {h->p50, "p50"}, {h->p90, "p90"}, {h->p99, "p99"}};
    char buf[64];
#define HX(v) (ML + (W - ML - MR) * ((v) - x0) / (x1 - x0))
    frame(cr, h->title, ytop, ystep);
    for (double x = ceil(x0 / xstep) * xstep; x <= x1 + 1e-9 * x1; x += xstep) {
        double px = floor(HX(x)) + 0.5;
        cairo_move_to(cr, px, H - MB);
        cairo_line_to(cr, px, H - MB + 5);
        cairo_stroke(cr);
        snprintf(buf, sizeof buf, "%g", x);
        label(cr, px, H - MB + 19, 1, buf);
    }
    /* the bars */
    cairo_set_source_rgb(cr, 0x1f / 255.0, 0x6f / 255.0, 0xd0 / 255.0);
    for (int b = 0; b < h->n_bins; b++) {
        double l = HX(h->lo + b * h->width), r = HX(h->lo + (b + 1) * h->width);
        double top = sy(h->count[b], ytop);
        if (h->count[b] == 0)
            continue;
        cairo_rectangle(cr, l + 0.5, top, AT_MAX(r - l - 1, 1), H - MB - top);
        cairo_fill(cr);
    }
    /* the percentiles */
    cairo_set_line_width(cr, 1.5);
    for (int k = 0; k < 3; k++) {
        double px = HX(marks[k].v);
        cairo_set_source_rgb(cr, 0.8, 0.2, 0.1);
        cairo_move_to(cr, px, MT);
        cairo_line_to(cr, px, H - MB);
        cairo_stroke(cr);
        snprintf(buf, sizeof buf, "%s %.3g", marks[k].name, marks[k].v);
        label(cr, px + 3, MT + 12 + 14 * k, 0, buf);
    }
    axes(cr, "latency of one run of the model (ms)", "runs");
#undef HX
}

int tn__plot_histogram(const double *sorted_ms, int n, const char *title, const char *path,
                       char *err, size_t err_size)
{
    hist h;
    int png = strlen(path) > 4 && strcmp(path + strlen(path) - 4, ".png") == 0, rc;
    double range;
    if (n < 1) {
        snprintf(err, err_size, "no runs to draw");
        return -1;
    }
    memset(&h, 0, sizeof h);
    h.ms = sorted_ms;
    h.n = n;
    h.p50 = tn__percentile(sorted_ms, n, 50);
    h.p90 = tn__percentile(sorted_ms, n, 90);
    h.p99 = tn__percentile(sorted_ms, n, 99);
    /* bins: Freedman-Diaconis width over the whole range, 10 to 80 of them */
    range = sorted_ms[n - 1] - sorted_ms[0];
    {
        double iqr = tn__percentile(sorted_ms, n, 75) - tn__percentile(sorted_ms, n, 25);
        double w = iqr > 0 ? 2 * iqr / cbrt((double)n) : range / 10;
        int nb = w > 0 ? (int)ceil(range / w) : 1;
        h.n_bins = nb < 10 ? 10 : nb > 80 ? 80 : nb;
    }
    if (range <= 0)
        range = sorted_ms[0] > 0 ? sorted_ms[0] * 0.01 : 1e-3;
    h.width = range / h.n_bins * 1.0001;
    h.lo = sorted_ms[0];
    if ((h.count = calloc((size_t)h.n_bins, sizeof *h.count)) == NULL) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        int b = (int)((sorted_ms[i] - h.lo) / h.width);
        b = b < 0 ? 0 : b >= h.n_bins ? h.n_bins - 1 : b;
        if (++h.count[b] > h.max_count)
            h.max_count = h.count[b];
    }
    snprintf(h.title, sizeof h.title, "%.150s: %d runs, p50 %.3f ms, max %.3f ms", title, n,
             h.p50, sorted_ms[n - 1]);
    rc = write_picture(draw_hist, &h, path, png, err, err_size);
    free(h.count);
    return rc;
}
