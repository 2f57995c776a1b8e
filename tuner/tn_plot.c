/* tuner/tn_plot.c -- 'tuner plot': the tuning curve of a task (best GFLOPS over trials) as
** an SVG or PNG picture.  The PNG is drawn here (lines and a small bitmap font) and
** written uncompressed (stored deflate blocks): no image library needed. */
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
        if (!key || strcmp(h->groups[i].workload_key, key) == 0)
            m += h->groups[i].n_points;
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
        if (key && strcmp(g->workload_key, key) != 0)
            continue;
        if (g0 == NULL || g->n_points > g0->n_points)
            g0 = g;
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
        if (p[i].status == 0 && p[i].cost > 0 && p[i].cost < best)
            best = p[i].cost;
        c->x[c->n] = (double)(i + 1);
        c->y[c->n] = isfinite(best) ? c->flops / best * 1e-9 : 0;
        if (c->y[c->n] > c->y_max)
            c->y_max = c->y[c->n];
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

static double sy(const curve *c, double y, double y_top)
{
    (void)c;
    return H - MB - (H - MT - MB) * (y_top > 0 ? y / y_top : 0);
}

static int write_svg(const curve *c, FILE *f)
{
    double ystep = nice_step(c->y_max > 0 ? c->y_max : 1, 5), ytop = ceil((c->y_max > 0 ? c->y_max : 1) / ystep) * ystep;
    double xstep = nice_step(c->x_max > 1 ? c->x_max : 2, 8);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"13\">\n",
            W, H, W, H);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"%d\" y=\"28\" font-size=\"15\">%s</text>\n", ML, c->title);
    for (double y = 0; y <= ytop + 1e-9; y += ystep) {
        double py = sy(c, y, ytop);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", ML, py,
                W - MR, py);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", ML - 8, py + 4, y);
    }
    for (double x = 0; x <= c->x_max + 1e-9; x += xstep) {
        double px = sx(c, x > 0 ? x : 1);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", px, H - MB + 20,
                x > 0 ? x : 1);
    }
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", ML, H - MB,
            W - MR, H - MB);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", ML, MT, ML,
            H - MB);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">trials</text>\n", (W + ML - MR) / 2,
            H - 15);
    fprintf(f, "<text x=\"18\" y=\"%d\" transform=\"rotate(-90 18 %d)\" text-anchor=\"middle\">"
               "best GFLOPS</text>\n", (H + MT - MB) / 2, (H + MT - MB) / 2);
    fprintf(f, "<polyline fill=\"none\" stroke=\"#1f6fd0\" stroke-width=\"2\" points=\"");
    for (int i = 0; i < c->n; i++)
        fprintf(f, "%.1f,%.1f ", sx(c, c->x[i]), sy(c, c->y[i], ytop));
    fprintf(f, "\"/>\n</svg>\n");
    return ferror(f) ? -1 : 0;
}

/* ---- PNG ---- */

static uint32_t crc_table[256];

static void crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

static uint32_t crc(uint32_t c, const uint8_t *p, size_t n)
{
    c = ~c;
    while (n--)
        c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

static void be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static void chunk(FILE *f, const char *type, const uint8_t *data, size_t n)
{
    uint8_t hdr[8];
    uint32_t c;
    be32(hdr, (uint32_t)n);
    memcpy(hdr + 4, type, 4);
    fwrite(hdr, 1, 8, f);
    if (n)
        fwrite(data, 1, n, f);
    c = crc(0, (const uint8_t *)type, 4);
    c = crc(c, data, n);
    be32(hdr, c);
    fwrite(hdr, 1, 4, f);
}

/* 5x7 glyphs for digits, '.', letters we print (upper case drawn for lower case too). */
static const char *glyph(char ch)
{
    static const struct {
        char c;
        const char *rows;
    } g[] = {
        {'0', "01110100011001110101110011000101110"}, {'1', "00100011000010000100001000010001110"},
        {'2', "01110100010000100010001000100011111"}, {'3', "11111000100010000010000011000101110"},
        {'4', "00010001100101010010111110001000010"}, {'5', "11111100001111000001000011000101110"},
        {'6', "00110010001000011110100011000101110"}, {'7', "11111000010001000100010000100001000"},
        {'8', "01110100011000101110100011000101110"}, {'9', "01110100011000101111000010001001100"},
        {'.', "00000000000000000000000000110001100"}, {'G', "01110100011000010111100011000101111"},
        {'F', "11111100001000011110100001000010000"}, {'L', "10000100001000010000100001000011111"},
        {'O', "01110100011000110001100011000101110"}, {'P', "11110100011000111110100001000010000"},
        {'S', "01111100001000001110000010000111110"}, {'T', "11111001000010000100001000010000100"},
        {'R', "11110100011000111110101001001010001"}, {'I', "01110001000010000100001000010001110"},
        {'A', "01110100011000111111100011000110001"}, {'B', "11110100011000111110100011000111110"},
        {'E', "11111100001000011110100001000011111"}, {'K', "10001100101010011000101001001010001"},
        {'N', "10001110011010110011100011000110001"}, {'U', "10001100011000110001100011000101110"},
        {'V', "10001100011000110001100010101000100"}, {'C', "01110100011000010000100001000101110"},
        {'D', "11110100011000110001100011000111110"}, {'M', "10001110111010110101100011000110001"},
        {' ', "00000000000000000000000000000000000"}, {'-', "00000000000000011111000000000000000"},
    };
    if (ch >= 'a' && ch <= 'z')
        ch = (char)(ch - 'a' + 'A');
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        if (g[i].c == ch)
            return g[i].rows;
    return NULL;
}

typedef struct img {
    uint8_t *px; /* RGB */
} img;

static void put(img *m, int x, int y, uint8_t r, uint8_t g, uint8_t b)
{
    if (x < 0 || y < 0 || x >= W || y >= H)
        return;
    m->px[(y * W + x) * 3] = r, m->px[(y * W + x) * 3 + 1] = g, m->px[(y * W + x) * 3 + 2] = b;
}

static void line(img *m, int x0, int y0, int x1, int y1, uint8_t r, uint8_t g, uint8_t b, int thick)
{
    int dx = abs(x1 - x0), dy = -abs(y1 - y0), sxs = x0 < x1 ? 1 : -1, sys = y0 < y1 ? 1 : -1;
    int e = dx + dy;
    for (;;) {
        for (int t = 0; t < thick; t++) {
            put(m, x0, y0 + t, r, g, b);
            put(m, x0 + t, y0, r, g, b);
        }
        if (x0 == x1 && y0 == y1)
            break;
        int e2 = 2 * e;
        if (e2 >= dy) {
            e += dy;
            x0 += sxs;
        }
        if (e2 <= dx) {
            e += dx;
            y0 += sys;
        }
    }
}

static void text(img *m, int x, int y, const char *s, int right)
{
    int len = (int)strlen(s);
    if (right)
        x -= len * 7;
    for (int i = 0; s[i]; i++) {
        const char *gl = glyph(s[i]);
        if (gl == NULL)
            continue;
        for (int row = 0; row < 7; row++)
            for (int col = 0; col < 5; col++)
                if (gl[row * 5 + col] == '1')
                    put(m, x + i * 7 + col, y + row, 0, 0, 0);
    }
}

static int write_png(const curve *c, FILE *f)
{
    static const uint8_t sig[8] = {137, 80, 78, 71, 13, 10, 26, 10};
    double ystep = nice_step(c->y_max > 0 ? c->y_max : 1, 5), ytop = ceil((c->y_max > 0 ? c->y_max : 1) / ystep) * ystep;
    double xstep = nice_step(c->x_max > 1 ? c->x_max : 2, 8);
    img m;
    uint8_t ihdr[13];
    size_t raw_n = (size_t)H * (1 + 3 * W), z_n, pos = 0;
    uint8_t *raw, *z;
    uint32_t a = 1, b = 0;
    char buf[64];
    crc_init();
    m.px = malloc((size_t)W * H * 3);
    raw = malloc(raw_n);
    z_n = 2 + raw_n + 5 * (raw_n / 65535 + 1) + 4;
    z = malloc(z_n);
    if (!m.px || !raw || !z) {
        free(m.px);
        free(raw);
        free(z);
        return -1;
    }
    memset(m.px, 255, (size_t)W * H * 3);
    for (double y = 0; y <= ytop + 1e-9; y += ystep) {
        int py = (int)sy(c, y, ytop);
        line(&m, ML, py, W - MR, py, 225, 225, 225, 1);
        snprintf(buf, sizeof buf, "%g", y);
        text(&m, ML - 8, py - 3, buf, 1);
    }
    for (double x = 0; x <= c->x_max + 1e-9; x += xstep) {
        int px = (int)sx(c, x > 0 ? x : 1);
        snprintf(buf, sizeof buf, "%g", x > 0 ? x : 1);
        text(&m, px - (int)strlen(buf) * 3, H - MB + 10, buf, 0);
    }
    line(&m, ML, H - MB, W - MR, H - MB, 0, 0, 0, 1);
    line(&m, ML, MT, ML, H - MB, 0, 0, 0, 1);
    text(&m, ML, 20, "BEST GFLOPS OVER TRIALS", 0);
    snprintf(buf, sizeof buf, "BEST %.1f GFLOPS", c->y_max);
    text(&m, W - MR, 20, buf, 1);
    for (int i = 1; i < c->n; i++)
        line(&m, (int)sx(c, c->x[i - 1]), (int)sy(c, c->y[i - 1], ytop), (int)sx(c, c->x[i]),
             (int)sy(c, c->y[i], ytop), 31, 111, 208, 2);
    for (int y = 0; y < H; y++) {
        raw[y * (1 + 3 * W)] = 0;
        memcpy(raw + y * (1 + 3 * W) + 1, m.px + y * W * 3, (size_t)W * 3);
    }
    /* zlib stream of stored blocks */
    z[pos++] = 0x78, z[pos++] = 0x01;
    for (size_t off = 0; off < raw_n;) {
        size_t k = raw_n - off > 65535 ? 65535 : raw_n - off;
        z[pos++] = off + k == raw_n;
        z[pos++] = (uint8_t)k, z[pos++] = (uint8_t)(k >> 8);
        z[pos++] = (uint8_t)~k, z[pos++] = (uint8_t)(~k >> 8);
        memcpy(z + pos, raw + off, k);
        pos += k;
        off += k;
    }
    for (size_t i = 0; i < raw_n; i++) {
        a = (a + raw[i]) % 65521;
        b = (b + a) % 65521;
    }
    be32(z + pos, (b << 16) | a);
    pos += 4;
    fwrite(sig, 1, 8, f);
    be32(ihdr, W);
    be32(ihdr + 4, H);
    ihdr[8] = 8, ihdr[9] = 2, ihdr[10] = 0, ihdr[11] = 0, ihdr[12] = 0;
    chunk(f, "IHDR", ihdr, 13);
    chunk(f, "IDAT", z, pos);
    chunk(f, "IEND", NULL, 0);
    free(m.px);
    free(raw);
    free(z);
    return ferror(f) ? -1 : 0;
}

int tn_cmd_plot(const tn_cmd *cmd, int argc, char **argv)
{
    const char *db = "tuning.db", *task = NULL, *out = NULL, *target = NULL, *device = NULL;
    int n_pos, help, rc, png;
    tn_opt opts[] = {
        {"db", 0, TN_OPT_STR, &db, "FILE", "the records store (default tuning.db)"},
        {"task", 0, TN_OPT_STR, &task, "KEY", "the task's workload key (default: the only one)"},
        {"target", 0, TN_OPT_STR, &target, "T", "only records of this target"},
        {"device", 0, TN_OPT_STR, &device, "KEY", "only records of this device key"},
        {"output", 'o', TN_OPT_STR, &out, "FILE", "the picture: FILE.svg or FILE.png"},
    };
    rec_store *st;
    rec_history *h;
    rec_filter f;
    curve c;
    char err[512];
    FILE *fp;
    if ((rc = tn_opts_parse(cmd, opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos, &help)) !=
        TN_EXIT_OK)
        return rc;
    if (help) {
        tn_opts_help(stdout, NULL, cmd, opts, (int)AT_ARRAY_LEN(opts));
        return TN_EXIT_OK;
    }
    if (out == NULL || n_pos != 0) {
        tn_err(cmd, "give the picture to write: -o curve.svg or -o curve.png");
        return TN_EXIT_USAGE;
    }
    png = strlen(out) > 4 && strcmp(out + strlen(out) - 4, ".png") == 0;
    if (!png && !(strlen(out) > 4 && strcmp(out + strlen(out) - 4, ".svg") == 0)) {
        tn_err(cmd, "-o %s: the name must end in .svg or .png", out);
        return TN_EXIT_USAGE;
    }
    if (rec_store_open(db, REC_OPEN_READONLY, &st, err, sizeof err) != AT_OK) {
        tn_err(cmd, "%s", err);
        return TN_EXIT_FAIL;
    }
    memset(&f, 0, sizeof f);
    f.workload_key = task;
    f.target = target;
    f.device_key = device;
    if (rec_history_get(st, &f, &h) != AT_OK) {
        tn_err(cmd, "%s", rec_store_errmsg(st));
        rec_store_close(st);
        return TN_EXIT_FAIL;
    }
    if (task == NULL && h->n_groups > 0) {
        for (int i = 1; i < h->n_groups; i++)
            if (strcmp(h->groups[i].workload_key, h->groups[0].workload_key) != 0) {
                tn_err(cmd, "the store has several tasks: choose one with --task KEY "
                       "('tuner best' lists them)");
                rec_history_free(h);
                rec_store_close(st);
                return TN_EXIT_USAGE;
            }
        task = h->groups[0].workload_key;
    }
    memset(&c, 0, sizeof c);
    if (build_curve(h, task, &c, err, sizeof err) != 0) {
        tn_err(cmd, "%s", err);
        rec_history_free(h);
        rec_store_close(st);
        return TN_EXIT_EMPTY;
    }
    fp = fopen(out, "wb");
    if (fp == NULL || (png ? write_png(&c, fp) : write_svg(&c, fp)) != 0 || fclose(fp) != 0) {
        tn_err(cmd, "cannot write %s", out);
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
