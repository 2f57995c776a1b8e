/* tuner/tn_cli_records.c -- the subcommands over the records store: best, history,
** merge, export, import and db (check, info).
**
** Every subcommand that only reads opens the store read-only, so a query never changes a
** file (an older schema is migrated in a private copy).  Writers (merge, import) do all
** their work in one transaction and remove a store they created if it fails, so a failed
** command leaves the files as they were. */
#include "tuner/tuner_int.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "records/records.h"

#define DEFAULT_DB "tuning.db"

static int no_positional(const tn_cmd *cmd, int n_pos, char **argv)
{
    if (n_pos == 0)
        return TN_EXIT_OK;
    tn__err(cmd, "unexpected argument '%s' (see 'tuner %s --help')", argv[1], cmd->name);
    return TN_EXIT_USAGE;
}

static rec_store *open_store(const tn_cmd *cmd, const char *path, int flags)
{
    rec_store *st;
    char err[1024];
    if (rec_store_open(path, flags, &st, err, sizeof err) != AT_OK) {
        tn__err(cmd, "%s", err);
        return NULL;
    }
    return st;
}

static void print_ms(FILE *f, double seconds)
{
    fprintf(f, "%12.6f", seconds * 1e3);
}

static const char *or_none(const char *s)
{
    return s && s[0] ? s : "none";
}

static void print_device(FILE *f, const char *key, const char *fp, const rec_device *d)
{
    fprintf(f, "device %s  fingerprint %s  (%s, %s, %d cores, os %s, driver %s)", key, fp,
            d->arch, d->model, d->n_cores, or_none(d->os), or_none(d->driver));
}

static void json_device(at_buf *b, const char *fp, const rec_device *d)
{
    at_buf_puts(b, "\"fingerprint\":");
    at_buf_json_str(b, fp);
    at_buf_puts(b, ",\"device\":{\"arch\":");
    at_buf_json_str(b, d->arch);
    at_buf_puts(b, ",\"model\":");
    at_buf_json_str(b, d->model);
    at_buf_printf(b, ",\"n_cores\":%d,\"os\":", d->n_cores);
    at_buf_json_str(b, d->os);
    at_buf_puts(b, ",\"driver\":");
    at_buf_json_str(b, d->driver);
    at_buf_putc(b, '}');
}

static int write_buf(const tn_cmd *cmd, at_buf *b)
{
    if (b->err) {
        tn__err(cmd, "out of memory");
        return TN_EXIT_FAIL;
    }
    if (b->len && fwrite(b->data, 1, b->len, stdout) != b->len) {
        tn__err(cmd, "write error on standard output");
        return TN_EXIT_FAIL;
    }
    return TN_EXIT_OK;
}

/* ---- best ---- */

static void best_json(at_buf *b, const rec_best_result *r)
{
    at_buf_puts(b, "{\"results\":[");
    for (int i = 0; i < r->n_rows; i++) {
        const rec_best_row *w = &r->rows[i];
        const rec_record *c = &w->rec;
        at_buf_puts(b, i ? ",\n{" : "\n{");
        at_buf_puts(b, "\"workload_key\":");
        at_buf_json_str(b, c->workload_key);
        at_buf_puts(b, ",\"target\":");
        at_buf_json_str(b, c->target);
        at_buf_puts(b, ",\"device_key\":");
        at_buf_json_str(b, c->device_key);
        at_buf_putc(b, ',');
        json_device(b, c->fingerprint, &c->device);
        at_buf_printf(b, ",\"fallback\":%s,\"group\":%d,\"rank\":%d,\"job\":",
                      w->fallback ? "true" : "false", w->group, w->rank);
        at_buf_json_str(b, c->job_id);
        at_buf_puts(b, ",\"mean\":");
        at_buf_json_num(b, c->mean);
        at_buf_puts(b, ",\"median\":");
        at_buf_json_num(b, c->median);
        at_buf_puts(b, ",\"costs\":[");
        for (int k = 0; k < c->n_costs; k++) {
            if (k)
                at_buf_putc(b, ',');
            at_buf_json_num(b, c->costs[k]);
        }
        at_buf_puts(b, "],\"gflops\":");
        at_buf_json_num(b, w->gflops);
        at_buf_puts(b, ",\"flops\":");
        at_buf_json_num(b, c->flops);
        at_buf_puts(b, ",\"trial\":");
        if (c->trial >= 0)
            at_buf_printf(b, "%lld", (long long)c->trial);
        else
            at_buf_puts(b, "null");
        at_buf_puts(b, ",\"run\":");
        if (c->run_uuid)
            at_buf_json_str(b, c->run_uuid);
        else
            at_buf_puts(b, "null");
        at_buf_puts(b, ",\"measured_at\":");
        at_buf_json_num(b, c->measured_at);
        at_buf_puts(b, ",\"state\":");
        at_buf_json_str(b, c->state);
        at_buf_putc(b, '}');
    }
    at_buf_puts(b, "],\n\"skipped\":[");
    for (int i = 0; i < r->n_skipped; i++) {
        const rec_best_skip *k = &r->skipped[i];
        at_buf_puts(b, i ? ",\n{\"job\":" : "\n{\"job\":");
        at_buf_json_str(b, k->job_id);
        at_buf_puts(b, ",\"workload_key\":");
        at_buf_json_str(b, k->workload_key);
        at_buf_puts(b, ",\"target\":");
        at_buf_json_str(b, k->target);
        at_buf_puts(b, ",\"device_key\":");
        at_buf_json_str(b, k->device_key);
        at_buf_puts(b, ",\"reason\":");
        at_buf_json_str(b, k->reason);
        at_buf_putc(b, '}');
    }
    at_buf_puts(b, "],\n\"notes\":[");
    for (int i = 0; i < r->n_notes; i++) {
        at_buf_puts(b, i ? ",\n" : "\n");
        at_buf_json_str(b, r->notes[i]);
    }
    at_buf_puts(b, "]}\n");
}

static void best_table(FILE *f, const rec_best_result *r, int show_state)
{
    const rec_best_row *prev = NULL;
    for (int i = 0; i < r->n_rows; i++) {
        const rec_best_row *w = &r->rows[i];
        const rec_record *c = &w->rec;
        int new_task = prev == NULL || strcmp(prev->rec.workload_key, c->workload_key) ||
                       strcmp(prev->rec.target, c->target);
        int new_dev = new_task || prev->group != w->group ||
                      strcmp(prev->rec.device_key, c->device_key) ||
                      strcmp(prev->rec.fingerprint, c->fingerprint);
        if (new_task)
            fprintf(f, "%stask %s  target '%s'\n", prev ? "\n" : "", c->workload_key,
                    c->target);
        if (new_dev) {
            fprintf(f, "  ");
            print_device(f, c->device_key, c->fingerprint, &c->device);
            fprintf(f, "%s\n", w->fallback ? "\n  FALLBACK: same architecture, not the device "
                                             "asked for"
                                           : "");
            fprintf(f, "    %4s %12s %12s %10s %7s  %s\n", "rank", "mean (ms)", "median (ms)",
                    "GFLOPS", "trial", "job");
        }
        fprintf(f, "    %4d ", w->rank);
        print_ms(f, c->mean);
        fputc(' ', f);
        print_ms(f, c->median);
        fprintf(f, " %10.2f ", w->gflops);
        if (c->trial >= 0)
            fprintf(f, "%7lld", (long long)c->trial);
        else
            fprintf(f, "%7s", "-");
        fprintf(f, "  %s\n", c->job_id);
        if (show_state)
            fprintf(f, "         state %s\n", c->state);
        prev = w;
    }
    for (int i = 0; i < r->n_skipped; i++)
        fprintf(f, "%sskipped: record of job %s (task %s, target '%s', device %s): %s\n",
                i == 0 && r->n_rows ? "\n" : "", r->skipped[i].job_id,
                r->skipped[i].workload_key, r->skipped[i].target, r->skipped[i].device_key,
                r->skipped[i].reason);
    for (int i = 0; i < r->n_notes; i++)
        fprintf(f, "%snote: %s\n", i == 0 && (r->n_rows || r->n_skipped) ? "\n" : "",
                r->notes[i]);
}

int tn__cmd_best(const tn_cmd *cmd, int argc, char **argv)
{
    const char *db = DEFAULT_DB, *fallback = NULL;
    rec_best_query q;
    rec_best_result *res;
    rec_store *st;
    int json = 0, show_state = 0, top = 1, n_pos, done, rc;
    memset(&q, 0, sizeof q);
    at_opt opts[] = {
        {"db", 0, AT_OPT_STR, &db, "FILE", "the records store (default " DEFAULT_DB ")"},
        {"task", 0, AT_OPT_STR, &q.workload_key, "KEY", "only this task (workload key)"},
        {"target", 0, AT_OPT_STR, &q.target, "T", "only this target string"},
        {"device", 0, AT_OPT_STR, &q.device_key, "KEY", "only records of this device key"},
        {"fingerprint", 0, AT_OPT_STR, &q.fingerprint, "FP",
         "only records of this device fingerprint"},
        {"fallback", 0, AT_OPT_STR, &fallback, "arch",
         "'arch': if the device has nothing, records of the same architecture"},
        {"arch", 0, AT_OPT_STR, &q.arch, "ARCH",
         "the architecture for --fallback (default: the device's, from the store)"},
        {"top", 'n', AT_OPT_INT, &top, "N", "rows per task and device (default 1)"},
        {"json", 0, AT_OPT_BOOL, &json, NULL, "JSON for scripts instead of a table"},
        {"state", 0, AT_OPT_BOOL, &show_state, NULL, "print each row's state too"},
    };
    if ((rc = tn__opts_cmd(NULL, cmd, opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos, &done)) !=
            TN_EXIT_OK ||
        done || (rc = no_positional(cmd, n_pos, argv)) != TN_EXIT_OK)
        return rc;
    if (top < 1) {
        tn__err(cmd, "--top needs a number >= 1");
        return TN_EXIT_USAGE;
    }
    if (fallback && strcmp(fallback, "arch") != 0 && strcmp(fallback, "none") != 0) {
        tn__err(cmd, "--fallback takes 'arch' or 'none', not '%s'", fallback);
        return TN_EXIT_USAGE;
    }
    q.fallback = fallback && strcmp(fallback, "arch") == 0 ? REC_FALLBACK_ARCH
                                                            : REC_FALLBACK_NONE;
    if (q.fallback == REC_FALLBACK_ARCH && !q.device_key && !q.fingerprint) {
        tn__err(cmd, "--fallback arch needs --device or --fingerprint (the device asked for)");
        return TN_EXIT_USAGE;
    }
    q.top = top;
    q.replay = md_replay_check;
    if ((st = open_store(cmd, db, REC_OPEN_READONLY)) == NULL)
        return TN_EXIT_FAIL;
    if (rec_best(st, &q, &res) != AT_OK) {
        tn__err(cmd, "%s", rec_store_errmsg(st));
        rec_store_close(st);
        return TN_EXIT_FAIL;
    }
    if (json) {
        at_buf b;
        at_buf_init(&b);
        best_json(&b, res);
        rc = write_buf(cmd, &b);
        at_buf_fini(&b);
    } else {
        best_table(stdout, res, show_state);
        rc = TN_EXIT_OK;
    }
    if (rc == TN_EXIT_OK && res->n_rows == 0)
        rc = TN_EXIT_EMPTY;
    rec_best_free(res);
    rec_store_close(st);
    return rc;
}

/* ---- history ---- */

static void history_json(at_buf *b, const rec_history *h)
{
    at_buf_puts(b, "{\"groups\":[");
    for (int i = 0; i < h->n_groups; i++) {
        const rec_history_group *g = &h->groups[i];
        at_buf_puts(b, i ? ",\n{\"workload_key\":" : "\n{\"workload_key\":");
        at_buf_json_str(b, g->workload_key);
        at_buf_puts(b, ",\"target\":");
        at_buf_json_str(b, g->target);
        at_buf_puts(b, ",\"device_key\":");
        at_buf_json_str(b, g->device_key);
        at_buf_putc(b, ',');
        json_device(b, g->fingerprint, &g->device);
        at_buf_puts(b, ",\"flops\":");
        at_buf_json_num(b, g->flops);
        at_buf_printf(b, ",\"n_trials\":%d,\"n_failed\":%d,\"points\":[", g->n_points,
                      g->n_failed);
        for (int k = 0; k < g->n_points; k++) {
            const rec_history_point *p = &g->points[k];
            at_buf_puts(b, k ? ",\n {\"trial\":" : "\n {\"trial\":");
            if (p->trial >= 0)
                at_buf_printf(b, "%lld", (long long)p->trial);
            else
                at_buf_puts(b, "null");
            at_buf_puts(b, ",\"cost\":");
            at_buf_json_num(b, p->cost);
            at_buf_puts(b, ",\"best\":");
            at_buf_json_num(b, p->best);
            at_buf_printf(b, ",\"error_code\":%d,\"measured_at\":", p->status);
            at_buf_json_num(b, p->measured_at);
            at_buf_puts(b, ",\"job\":");
            at_buf_json_str(b, p->job_id);
            at_buf_putc(b, '}');
        }
        at_buf_puts(b, "]}");
    }
    at_buf_puts(b, "]}\n");
}

static void history_table(FILE *f, const rec_history *h, int all)
{
    for (int i = 0; i < h->n_groups; i++) {
        const rec_history_group *g = &h->groups[i];
        double best = AT_MEASURE_FAIL_COST;
        int64_t best_trial = -1;
        fprintf(f, "%stask %s  target '%s'\n  ", i ? "\n" : "", g->workload_key, g->target);
        print_device(f, g->device_key, g->fingerprint, &g->device);
        fprintf(f, "\n    %7s %12s %12s %10s  %s\n", "trial", "cost (ms)", "best (ms)",
                "GFLOPS", "");
        for (int k = 0; k < g->n_points; k++) {
            const rec_history_point *p = &g->points[k];
            int improved = p->status == 0 && p->best < best;
            if (improved) {
                best = p->best;
                best_trial = p->trial;
            }
            if (!all && !improved)
                continue;
            if (p->trial >= 0)
                fprintf(f, "    %7lld ", (long long)p->trial);
            else
                fprintf(f, "    %7s ", "-");
            if (p->status == 0)
                print_ms(f, p->cost);
            else
                fprintf(f, "%12s", "failed");
            fputc(' ', f);
            if (p->best < AT_MEASURE_FAIL_COST) {
                print_ms(f, p->best);
                fprintf(f, " %10.2f", g->flops / p->best / 1e9);
            } else {
                fprintf(f, "%12s %10s", "-", "-");
            }
            if (p->status != 0)
                fprintf(f, "  %s", at_measure_name(p->status));
            else if (improved)
                fprintf(f, "  new best");
            fputc('\n', f);
        }
        fprintf(f, "  %d trials, %d failed", g->n_points, g->n_failed);
        if (best < AT_MEASURE_FAIL_COST) {
            fprintf(f, "; best %.6f ms (%.2f GFLOPS)", best * 1e3, g->flops / best / 1e9);
            if (best_trial >= 0)
                fprintf(f, " at trial %lld", (long long)best_trial);
        }
        fputc('\n', f);
    }
}

int tn__cmd_history(const tn_cmd *cmd, int argc, char **argv)
{
    const char *db = DEFAULT_DB;
    rec_filter fl;
    rec_history *h;
    rec_store *st;
    int json = 0, all = 0, n_pos, done, rc;
    memset(&fl, 0, sizeof fl);
    at_opt opts[] = {
        {"db", 0, AT_OPT_STR, &db, "FILE", "the records store (default " DEFAULT_DB ")"},
        {"task", 0, AT_OPT_STR, &fl.workload_key, "KEY", "only this task (workload key)"},
        {"target", 0, AT_OPT_STR, &fl.target, "T", "only this target string"},
        {"device", 0, AT_OPT_STR, &fl.device_key, "KEY", "only records of this device key"},
        {"fingerprint", 0, AT_OPT_STR, &fl.fingerprint, "FP",
         "only records of this device fingerprint"},
        {"all", 0, AT_OPT_BOOL, &all, NULL, "every trial, not only new bests"},
        {"json", 0, AT_OPT_BOOL, &json, NULL, "JSON for scripts (every trial)"},
    };
    if ((rc = tn__opts_cmd(NULL, cmd, opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos, &done)) !=
            TN_EXIT_OK ||
        done || (rc = no_positional(cmd, n_pos, argv)) != TN_EXIT_OK)
        return rc;
    if ((st = open_store(cmd, db, REC_OPEN_READONLY)) == NULL)
        return TN_EXIT_FAIL;
    if (rec_history_get(st, &fl, &h) != AT_OK) {
        tn__err(cmd, "%s", rec_store_errmsg(st));
        rec_store_close(st);
        return TN_EXIT_FAIL;
    }
    if (json) {
        at_buf b;
        at_buf_init(&b);
        history_json(&b, h);
        rc = write_buf(cmd, &b);
        at_buf_fini(&b);
    } else {
        history_table(stdout, h, all);
        if (h->n_groups == 0)
            fprintf(stdout, "no records match\n");
        rc = TN_EXIT_OK;
    }
    if (rc == TN_EXIT_OK && h->n_groups == 0)
        rc = TN_EXIT_EMPTY;
    rec_history_free(h);
    rec_store_close(st);
    return rc;
}

/* ---- helpers of the writing subcommands ---- */

/* Remove a store this command created and could not fill. */
static void remove_store(const char *path)
{
    static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
    char p[4096];
    for (size_t i = 0; i < AT_ARRAY_LEN(suffix); i++) {
        snprintf(p, sizeof p, "%s%s", path, suffix[i]);
        unlink(p);
    }
}

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static void print_stats(FILE *f, const char *verb, const rec_put_stats *s, const char *into)
{
    fprintf(f, "%s %lld records into %s: %lld new, %lld replaced by a better result, %lld "
            "kept (a better one was there), %lld already there (same job)\n",
            verb, (long long)(s->n_new + s->n_replaced + s->n_kept + s->n_same_job), into,
            (long long)s->n_new, (long long)s->n_replaced, (long long)s->n_kept,
            (long long)s->n_same_job);
}

/* ---- merge ---- */

int tn__cmd_merge(const tn_cmd *cmd, int argc, char **argv)
{
    rec_store **in = NULL, *out = NULL;
    rec_put_stats stats = {0, 0, 0, 0};
    const char *out_path;
    struct stat so, si;
    int quiet = 0, n_pos, done, rc, n_in, created, ok = 0;
    at_opt opts[] = {
        {"quiet", 'q', AT_OPT_BOOL, &quiet, NULL, "print nothing when it works"},
    };
    if ((rc = tn__opts_cmd(NULL, cmd, opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos, &done)) !=
            TN_EXIT_OK ||
        done)
        return rc;
    if (n_pos < 2) {
        tn__err(cmd, "needs OUT and at least one IN (see 'tuner merge --help')");
        return TN_EXIT_USAGE;
    }
    out_path = argv[1];
    n_in = n_pos - 1;
    if (stat(out_path, &so) == 0) {
        for (int i = 0; i < n_in; i++) {
            if (stat(argv[2 + i], &si) == 0 && si.st_dev == so.st_dev &&
                si.st_ino == so.st_ino) {
                tn__err(cmd, "OUT (%s) is also an input", out_path);
                return TN_EXIT_USAGE;
            }
        }
    }
    if ((in = at_calloc((size_t)n_in, sizeof *in)) == NULL) {
        tn__err(cmd, "out of memory");
        return TN_EXIT_FAIL;
    }
    /* every input must open before OUT is touched */
    for (int i = 0; i < n_in; i++)
        if ((in[i] = open_store(cmd, argv[2 + i], REC_OPEN_READONLY | REC_OPEN_VERIFY)) ==
            NULL)
            goto out;
    created = !exists(out_path);
    if ((out = open_store(cmd, out_path, REC_OPEN_CREATE | REC_OPEN_VERIFY)) == NULL) {
        if (created)
            remove_store(out_path);
        goto out;
    }
    if (rec_tx_begin(out) != AT_OK) {
        tn__err(cmd, "%s", rec_store_errmsg(out));
        goto fail_out;
    }
    for (int i = 0; i < n_in; i++) {
        if (rec_merge(out, in[i], &stats) != AT_OK) {
            tn__err(cmd, "merging %s: %s", argv[2 + i], rec_store_errmsg(out));
            rec_tx_rollback(out);
            goto fail_out;
        }
    }
    if (rec_tx_commit(out) != AT_OK) {
        tn__err(cmd, "%s", rec_store_errmsg(out));
        goto fail_out;
    }
    ok = 1;
    if (!quiet)
        print_stats(stdout, "merged", &stats, out_path);
fail_out:
    rec_store_close(out);
    if (!ok && created)
        remove_store(out_path);
out:
    for (int i = 0; i < n_in; i++)
        rec_store_close(in[i]);
    at_free(in);
    return ok ? TN_EXIT_OK : TN_EXIT_FAIL;
}

/* ---- export ---- */

int tn__cmd_export(const tn_cmd *cmd, int argc, char **argv)
{
    const char *db = DEFAULT_DB, *format = "jsonl", *out_path = NULL;
    char tmp[4096];
    rec_filter fl;
    rec_store *st;
    FILE *f = stdout;
    int64_t n = 0;
    int quiet = 0, n_pos, done, rc;
    at_err err;
    memset(&fl, 0, sizeof fl);
    at_opt opts[] = {
        {"db", 0, AT_OPT_STR, &db, "FILE", "the records store (default " DEFAULT_DB ")"},
        {"format", 0, AT_OPT_STR, &format, "jsonl", "the format (only jsonl)"},
        {"output", 'o', AT_OPT_STR, &out_path, "FILE",
         "write to FILE (replaced when complete) instead of standard output"},
        {"task", 0, AT_OPT_STR, &fl.workload_key, "KEY", "only this task (workload key)"},
        {"target", 0, AT_OPT_STR, &fl.target, "T", "only this target string"},
        {"device", 0, AT_OPT_STR, &fl.device_key, "KEY", "only records of this device key"},
        {"quiet", 'q', AT_OPT_BOOL, &quiet, NULL, "no summary on standard error"},
    };
    if ((rc = tn__opts_cmd(NULL, cmd, opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos, &done)) !=
            TN_EXIT_OK ||
        done || (rc = no_positional(cmd, n_pos, argv)) != TN_EXIT_OK)
        return rc;
    if (strcmp(format, "jsonl") != 0) {
        tn__err(cmd, "unknown format '%s' (only jsonl)", format);
        return TN_EXIT_USAGE;
    }
    if ((st = open_store(cmd, db, REC_OPEN_READONLY)) == NULL)
        return TN_EXIT_FAIL;
    if (out_path) {
        snprintf(tmp, sizeof tmp, "%s.tmp.%d", out_path, (int)getpid());
        if ((f = fopen(tmp, "w")) == NULL) {
            tn__err(cmd, "%s: %s", tmp, strerror(errno));
            rec_store_close(st);
            return TN_EXIT_FAIL;
        }
    }
    err = rec_export_jsonl(st, &fl, f, &n);
    if (err != AT_OK)
        tn__err(cmd, "%s", rec_store_errmsg(st));
    if (out_path) {
        if (fclose(f) != 0 && err == AT_OK) {
            tn__err(cmd, "%s: %s", tmp, strerror(errno));
            err = AT_EIO;
        }
        if (err == AT_OK && rename(tmp, out_path) != 0) {
            tn__err(cmd, "%s: %s", out_path, strerror(errno));
            err = AT_EIO;
        }
        if (err != AT_OK)
            unlink(tmp);
    }
    if (err == AT_OK && !quiet)
        fprintf(stderr, "tuner export: %lld records from %s\n", (long long)n, db);
    rec_store_close(st);
    return err == AT_OK ? TN_EXIT_OK : TN_EXIT_FAIL;
}

/* ---- import ---- */

int tn__cmd_import(const tn_cmd *cmd, int argc, char **argv)
{
    const char *db = DEFAULT_DB;
    rec_put_stats stats = {0, 0, 0, 0};
    rec_store *st;
    int quiet = 0, n_pos, done, rc, created, ok = 0;
    at_opt opts[] = {
        {"db", 0, AT_OPT_STR, &db, "FILE",
         "the records store, created if missing (default " DEFAULT_DB ")"},
        {"quiet", 'q', AT_OPT_BOOL, &quiet, NULL, "print nothing when it works"},
    };
    if ((rc = tn__opts_cmd(NULL, cmd, opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos, &done)) !=
            TN_EXIT_OK ||
        done)
        return rc;
    created = !exists(db);
    if ((st = open_store(cmd, db, REC_OPEN_CREATE | REC_OPEN_VERIFY)) == NULL) {
        if (created)
            remove_store(db);
        return TN_EXIT_FAIL;
    }
    if (rec_tx_begin(st) != AT_OK) {
        tn__err(cmd, "%s", rec_store_errmsg(st));
        goto out;
    }
    for (int i = 0; i < (n_pos ? n_pos : 1); i++) {
        const char *name = n_pos ? argv[1 + i] : "-";
        int is_stdin = strcmp(name, "-") == 0;
        FILE *f = is_stdin ? stdin : fopen(name, "r");
        at_err err;
        if (f == NULL) {
            tn__err(cmd, "%s: %s", name, strerror(errno));
            rec_tx_rollback(st);
            goto out;
        }
        /* each task's key and FLOPs recomputed from its DAG: a record that contradicts its
        ** DAG would make the store refuse to tune its operator */
        err = rec_import_jsonl(st, is_stdin ? "<stdin>" : name, f,
                               &(rec_checks){md_task_check, NULL, NULL}, &stats);
        md_replay_check(NULL, NULL, NULL, NULL, 0);
        if (!is_stdin)
            fclose(f);
        if (err != AT_OK) {
            tn__err(cmd, "%s (nothing was imported)", rec_store_errmsg(st));
            rec_tx_rollback(st);
            goto out;
        }
    }
    if (rec_tx_commit(st) != AT_OK) {
        tn__err(cmd, "%s", rec_store_errmsg(st));
        goto out;
    }
    ok = 1;
    if (!quiet)
        print_stats(stdout, "imported", &stats, db);
out:
    rec_store_close(st);
    if (!ok && created)
        remove_store(db);
    return ok ? TN_EXIT_OK : TN_EXIT_FAIL;
}

/* ---- db check, db info ---- */

static int db_check(const tn_cmd *cmd, int argc, char **argv)
{
    const char *db = DEFAULT_DB;
    rec_check_report rep;
    rec_store *st;
    char err[1024];
    int n_pos, done, rc, no_replay = 0;
    at_opt opts[] = {
        {"db", 0, AT_OPT_STR, &db, "FILE", "the records store (default " DEFAULT_DB ")"},
        {"no-replay", 0, AT_OPT_BOOL, &no_replay, NULL,
         "skip the replay check of states (faster)"},
    };
    if ((rc = tn__opts_cmd(NULL, cmd, opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos, &done)) !=
            TN_EXIT_OK ||
        done || (rc = no_positional(cmd, n_pos, argv)) != TN_EXIT_OK)
        return rc;
    printf("checking %s\n", db);
    if (rec_store_open(db, REC_OPEN_READONLY, &st, err, sizeof err) != AT_OK) {
        printf("FAILED: %s\n", err);
        return TN_EXIT_FAIL;
    }
    if (rec_store_check(st, &(rec_checks){md_task_check, no_replay ? NULL : md_replay_check, NULL},
                        &rep) != AT_OK) {
        md_replay_check(NULL, NULL, NULL, NULL, 0);
        printf("FAILED: %s\n", rec_store_errmsg(st));
        rec_store_close(st);
        return TN_EXIT_FAIL;
    }
    md_replay_check(NULL, NULL, NULL, NULL, 0);
    printf("schema version %d (this build writes %d)%s\n", rep.schema_version,
           REC_SCHEMA_VERSION,
           rep.schema_version < REC_SCHEMA_VERSION ? "; the next write migrates it" : "");
    printf("%lld records, %lld tasks, %lld devices, %lld runs, %lld cost models\n",
           (long long)rep.n_records, (long long)rep.n_tasks, (long long)rep.n_devices,
           (long long)rep.n_runs, (long long)rep.n_models);
    for (int i = 0; i < rep.n_lines; i++)
        printf("%s\n", rep.lines[i]);
    if (rep.n_unreplayable)
        printf("%lld successful records do not replay on their task's DAG: best-schedule "
               "queries skip them\n",
               (long long)rep.n_unreplayable);
    if (rep.n_unknown_status)
        printf("%lld records carry a status this build does not know\n",
               (long long)rep.n_unknown_status);
    if (rep.n_problems) {
        printf("FAILED: %lld problems\n", (long long)rep.n_problems);
        rc = TN_EXIT_FAIL;
    } else {
        printf("OK\n");
        rc = TN_EXIT_OK;
    }
    rec_check_fini(&rep);
    rec_store_close(st);
    return rc;
}

static int db_info(const tn_cmd *cmd, int argc, char **argv)
{
    const char *db = DEFAULT_DB;
    rec_store *st;
    int64_t n_rec, n_task, n_dev, n_run;
    int n_pos, done, rc;
    at_opt opts[] = {
        {"db", 0, AT_OPT_STR, &db, "FILE", "the records store (default " DEFAULT_DB ")"},
    };
    if ((rc = tn__opts_cmd(NULL, cmd, opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos, &done)) !=
            TN_EXIT_OK ||
        done || (rc = no_positional(cmd, n_pos, argv)) != TN_EXIT_OK)
        return rc;
    if ((st = open_store(cmd, db, REC_OPEN_READONLY)) == NULL)
        return TN_EXIT_FAIL;
    if (rec_store_count(st, &n_rec, &n_task, &n_dev, &n_run) != AT_OK) {
        tn__err(cmd, "%s", rec_store_errmsg(st));
        rec_store_close(st);
        return TN_EXIT_FAIL;
    }
    printf("%s: records store, schema version %d (this build writes %d)\n", db,
           rec_store_disk_version(st), REC_SCHEMA_VERSION);
    printf("%lld records, %lld tasks, %lld devices, %lld runs\n", (long long)n_rec,
           (long long)n_task, (long long)n_dev, (long long)n_run);
    rec_store_close(st);
    return TN_EXIT_OK;
}

static const tn_cmd db_cmds[] = {
    {"db check", "[--db FILE] [--no-replay]", "integrity check",
     "Check the store: SQLite's integrity and foreign-key checks, then every row (state\n"
     "hashes, costs against mean and median, device fingerprints, pools), then whether the\n"
     "state of each successful record still replays on its task's DAG.  Prints one line\n"
     "per finding and OK or FAILED.  Exit status 0 when there is no damage (records that\n"
     "do not replay are listed but are not damage), 1 otherwise or when the file is not a\n"
     "readable records store.  Reads only.",
     db_check},
    {"db info", "[--db FILE]", "schema version and counts",
     "Print the schema version and the number of records, tasks, devices and runs.", db_info},
};

int tn__cmd_db(const tn_cmd *cmd, int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: tuner db check|info [flags]\n\n%s\n", cmd->about);
        return argc < 2 ? TN_EXIT_USAGE : TN_EXIT_OK;
    }
    for (size_t i = 0; i < AT_ARRAY_LEN(db_cmds); i++)
        if (strcmp(argv[1], db_cmds[i].name + 3) == 0)
            return db_cmds[i].run(&db_cmds[i], argc - 1, argv + 1);
    tn__err(cmd, "unknown subcommand 'db %s' (see 'tuner db --help')", argv[1]);
    return TN_EXIT_USAGE;
}
