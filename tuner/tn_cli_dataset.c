/* tuner/tn_cli_dataset.c -- 'tuner dataset': build a data set of measured random schedules
** for the cost model, pre-train a model on a store, or evaluate one on held-out records.
**
**   tuner dataset --db F --task SPEC|KEY|FILE --random N     measure N random states here
**   tuner dataset --db F --corpus N                          N of each corpus workload
**   tuner dataset --db F --pretrain [--target T]             train on every record, save
**   tuner dataset --db F --eval                              80/20 held-out metrics
**
** Measuring goes the way of every measurement (tn_measurer: build workers, then the
** embedded tracker and agent, sandboxed and checked against the naive schedule, or a real
** tracker's agents with --tracker), so without --tracker the target must be this host.
** The store is created if missing; a failed run leaves the records measured before the
** failure (each batch is committed). */
#include "tuner/tuner_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cost_model/cost_model.h"

#define DEFAULT_DB "tuning.db"

/* A task from an operator spec, a DAG text file, or a workload key the store knows.  On
** failure *rc is TN_EXIT_USAGE (TASK is none of those) or TN_EXIT_FAIL. */
static ss_dag *task_dag(const tn_cmd *cmd, rec_store *st, const char *task, int *rc)
{
    ss_dag *dag = NULL;
    char err[1024], *text = NULL;
    size_t n;
    FILE *f;
    int is_key = strlen(task) == REC_KEY_LEN && strspn(task, "0123456789abcdef") == REC_KEY_LEN;
    *rc = TN_EXIT_FAIL;
    if (is_key) {
        rec_filter flt = {task, NULL, NULL, NULL};
        rec_iter *it = NULL;
        const rec_record *r = NULL;
        at_err e = rec_iter_open(st, &flt, REC_ORDER_ID, &it);
        if (e == AT_OK)
            e = rec_iter_next(it, &r);
        if (e == AT_OK && r == NULL) {
            tn__err(cmd, "the store has no record of task %s, so its DAG is unknown: give an "
                   "operator spec (matmul:M=128) or a DAG file instead", task);
        } else if (e != AT_OK) {
            tn__err(cmd, "%s", rec_store_errmsg(st));
        } else if ((e = ss_dag_parse(r->dag, strlen(r->dag), &dag, err, sizeof err)) != AT_OK) {
            tn__err(cmd, "task %s: its DAG does not parse: %s", task, err);
            dag = NULL;
        }
        rec_iter_close(it);
        return dag;
    }
    if ((f = fopen(task, "r")) != NULL) {
        fclose(f);
        if (at_file_read(task, &text, &n, err, sizeof err) != AT_OK) {
            tn__err(cmd, "%s", err);
            return NULL;
        }
        if (ss_dag_parse(text, n, &dag, err, sizeof err) != AT_OK) {
            tn__err(cmd, "%s:%s", task, err);
            dag = NULL;
        }
        at_free(text);
        return dag;
    }
    if (kn_op_build(task, &dag, err, sizeof err) != AT_OK) {
        tn__err(cmd, "--task '%s' is no workload key, no readable DAG file and no operator "
               "spec: %s", task, err);
        *rc = TN_EXIT_USAGE;
        return NULL;
    }
    return dag;
}

static void command_line(int argc, char **argv, char *out, size_t n)
{
    size_t len = (size_t)snprintf(out, n, "tuner");
    for (int i = 0; i < argc && len < n; i++)
        len += (size_t)snprintf(out + len, n - len, " %s", argv[i]);
}

/* The target of --random and --corpus: parsed, and this host unless a tracker measures. */
static int measure_target(const tn_cmd *cmd, const tn_measure_cfg *cfg, kn_target *t)
{
    char err[512];
    if (kn_target_parse(cfg->target, t, err, sizeof err) != AT_OK) {
        tn__err(cmd, "--target: %s", err);
        return TN_EXIT_USAGE;
    }
    if (!t->is_host && cfg->tracker == NULL) {
        tn__err(cmd, "--target '%s' is not this host: without --tracker the data set is "
                "measured here", cfg->target);
        return TN_EXIT_USAGE;
    }
    return TN_EXIT_OK;
}

static int do_random(const tn_cmd *cmd, rec_store *st, const char *db, const char *task,
                     int n, int seed, const tn_measure_cfg *cfg, int quiet)
{
    kn_target t;
    ss_dag *dag;
    tn_measurer *m;
    tn_dataset_stats s;
    char err[1024];
    at_err e;
    int rc;
    if ((rc = measure_target(cmd, cfg, &t)) != TN_EXIT_OK)
        return rc;
    if ((dag = task_dag(cmd, st, task, &rc)) == NULL)
        return rc;
    if ((e = tn_measurer_open(st, cfg, &m, err, sizeof err)) != AT_OK) {
        tn__err(cmd, "%s", err);
        ss_dag_unref(dag);
        return TN_EXIT_FAIL;
    }
    e = tn_dataset_random(m, dag, n, (uint64_t)seed, &s, err, sizeof err);
    tn_measurer_close(m, e != AT_OK);
    if (e != AT_OK) {
        tn__err(cmd, "%s%s(%s; %d records were stored)", err, err[0] ? " " : "", at_strerror(e),
               s.n_measured);
        ss_dag_unref(dag);
        return TN_EXIT_FAIL;
    }
    if (!quiet) {
        rec_best_result *best = NULL;
        rec_best_query q = {dag->key, t.text, cfg->device_key, NULL, NULL, REC_FALLBACK_NONE, 1,
                            NULL, NULL};
        printf("measured %d random states of task %s into %s: %d failed, %d duplicates "
               "skipped, %.1f s\n",
               s.n_measured, dag->key, db, s.n_failed, s.n_duplicate, s.seconds);
        if (s.n_measured < n)
            printf("the schedule space has fewer distinct states than asked for\n");
        if (rec_best(st, &q, &best) == AT_OK && best->n_rows > 0)
            printf("best: %.6f ms (%.2f GFLOPS), job %s\n", best->rows[0].rec.mean * 1e3,
                   best->rows[0].gflops, best->rows[0].rec.job_id);
        rec_best_free(best);
    }
    ss_dag_unref(dag);
    return TN_EXIT_OK;
}

static int do_corpus(const tn_cmd *cmd, rec_store *st, const char *db, int n, int seed,
                     const tn_measure_cfg *cfg, int quiet)
{
    kn_target t;
    tn_measurer *m;
    tn_corpus_stats s;
    char err[1024];
    at_err e;
    int rc;
    if ((rc = measure_target(cmd, cfg, &t)) != TN_EXIT_OK)
        return rc;
    if ((e = tn_measurer_open(st, cfg, &m, err, sizeof err)) != AT_OK) {
        tn__err(cmd, "%s", err);
        return TN_EXIT_FAIL;
    }
    e = tn_dataset_corpus(m, n, (uint64_t)seed, NULL, 0, &s, err, sizeof err);
    tn_measurer_close(m, e != AT_OK);
    if (e != AT_OK) {
        tn__err(cmd, "%s%s(%s; %d records were stored)", err, err[0] ? " " : "", at_strerror(e),
               s.n_measured);
        return TN_EXIT_FAIL;
    }
    if (!quiet)
        printf("corpus of %d workloads in %s: %d random states measured (%d failed), %d were "
               "there before, %.1f s; 'tuner dataset --pretrain' trains on them\n",
               s.n_workloads, db, s.n_measured, s.n_failed, s.n_present, s.seconds);
    return TN_EXIT_OK;
}

static int do_pretrain(const tn_cmd *cmd, rec_store *st, const char *db, const cm_params *p,
                       const char *target, int quiet)
{
    cm_model *m;
    cm_load_stats ls;
    cm_train_info ti;
    char err[1024];
    kn_target t;
    at_err e;
    if (kn_target_parse(target, &t, err, sizeof err) != AT_OK) {
        tn__err(cmd, "--target: %s", err);
        return TN_EXIT_USAGE;
    }
    if (cm_model_new(p, &m) != AT_OK) {
        tn__err(cmd, "out of memory");
        return TN_EXIT_FAIL;
    }
    if ((e = cm_model_pretrain(m, st, NULL, &ls, err, sizeof err)) != AT_OK ||
        (e = cm_model_save_store(m, st, t.text, err, sizeof err)) != AT_OK) {
        tn__err(cmd, "%s", err);
        cm_model_free(m);
        return TN_EXIT_FAIL;
    }
    cm_model_train_info(m, &ti);
    if (!quiet)
        printf("pre-trained a cost model (objective %s, feature version %d) on %lld records "
               "of %d tasks (%lld failed, %lld skipped: no longer replay) in %.1f s, %d "
               "rounds; saved in %s for target '%s'\n",
               cm_objective_name(p->objective), CM_FEATURE_VERSION, (long long)ls.n_used,
               ls.n_tasks, (long long)ls.n_failed, (long long)ls.n_unreplay, ti.seconds,
               ti.n_rounds, db, t.text);
    cm_model_free(m);
    return TN_EXIT_OK;
}

/* --eval: train on 'frac' of each task's records (--train-fraction, default 80 %) and score
** the others; with 'from' (another store: --train-db), train on every record of that one too
** (frac defaults to 0 then): how well what one network's store learned ranks another's
** programs, alone or next to a few of its own (a pre-trained start, some rounds in). */
static int do_eval(const tn_cmd *cmd, rec_store *st, rec_store *from, double frac,
                   const cm_params *p, int seed)
{
    cm_data *d = NULL, *a = NULL, *b = NULL;
    cm_model *m = NULL;
    cm_load_stats ls;
    cm_metrics mt;
    double *scores = NULL;
    char err[1024];
    int rc = TN_EXIT_FAIL;
    if (cm_data_new(&d) != AT_OK || cm_model_new(p, &m) != AT_OK) {
        tn__err(cmd, "out of memory");
        goto out;
    }
    if (cm_data_load_store(d, st, NULL, &ls, err, sizeof err) != AT_OK) {
        tn__err(cmd, "%s", err);
        goto out;
    }
    if (cm_data_count(d) < 10) {
        tn__err(cmd, "the store has %d usable records; evaluating needs at least 10",
               cm_data_count(d));
        goto out;
    }
    if (frac > 0 && cm_data_split(d, frac, (uint64_t)seed, &a, &b) != AT_OK) {
        tn__err(cmd, "out of memory");
        goto out;
    }
    if (frac <= 0) {
        b = d;
        d = NULL;
        if (cm_data_new(&a) != AT_OK) {
            tn__err(cmd, "out of memory");
            goto out;
        }
    }
    if (from) {
        cm_data *f = NULL;
        int own = cm_data_count(a);
        if (cm_data_new(&f) != AT_OK) {
            tn__err(cmd, "out of memory");
            goto out;
        }
        if (cm_data_load_store(f, from, NULL, &ls, err, sizeof err) != AT_OK) {
            tn__err(cmd, "--train-db: %s", err);
            cm_data_free(f);
            goto out;
        }
        if (cm_data_count(f) < 10) {
            tn__err(cmd, "--train-db: the store has %d usable records; training needs at "
                    "least 10", cm_data_count(f));
            cm_data_free(f);
            goto out;
        }
        /* the other store's programs first, then this one's share (as a run's store) */
        if (own > 0) {
            int *idx = at_malloc((size_t)own * sizeof *idx);
            at_err e = AT_ENOMEM;
            if (idx) {
                for (int i = 0; i < own; i++)
                    idx[i] = i;
                e = cm_data_append(f, a, idx, own);
            }
            at_free(idx);
            if (e != AT_OK) {
                tn__err(cmd, "out of memory");
                cm_data_free(f);
                goto out;
            }
        }
        cm_data_free(a);
        a = f;
    }
    if (cm_data_count(b) < 2) {
        tn__err(cmd, "--train-fraction %.2f leaves %d records to score", frac, cm_data_count(b));
        goto out;
    }
    if ((scores = at_malloc((size_t)cm_data_count(b) * sizeof *scores + 1)) == NULL) {
        tn__err(cmd, "out of memory");
        goto out;
    }
    if (cm_model_fit(m, a, err, sizeof err) != AT_OK ||
        cm_model_predict_data(m, b, scores) != AT_OK) {
        tn__err(cmd, "training failed: %s", err);
        goto out;
    }
    cm_metrics_eval(b, scores, 1.05, &mt);
    printf("objective %s: trained on %d records%s, scored %d%s (%d tasks)\n"
           "pairwise accuracy %.3f (%lld pairs differing by more than 5%%)\n"
           "top-1 recall %.3f, top-5 recall %.3f, top-1 score %.3f, top-5 score %.3f\n",
           cm_objective_name(p->objective), cm_data_count(a),
           !from ? "" : frac > 0 ? " (--train-db's and some of --db's)" : " of --train-db",
           cm_data_count(b), frac > 0 ? " held out" : ", every record of --db", mt.n_tasks,
           mt.pairwise_acc, (long long)mt.n_pairs, mt.top1_recall, mt.top5_recall, mt.top1_score,
           mt.top5_score);
    rc = TN_EXIT_OK;
out:
    at_free(scores);
    cm_model_free(m);
    cm_data_free(a);
    cm_data_free(b);
    cm_data_free(d);
    return rc;
}

int tn_cmd_dataset(const struct tn_cmd *cmd, int argc, char **argv)
{
    const char *db = DEFAULT_DB, *task = NULL, *target = "llvm -mcpu=native";
    const char *device = "local", *objective = "rank", *tracker = NULL, *key_path = NULL;
    const char *train_db = NULL;
    double train_frac = -1;
    int n = -1, n_corpus = -1, seed = 1, threads = 0, repeat = 5, min_ms = 1, no_check = 0, quiet = 0;
    int pretrain = 0, eval = 0, measuring, build_workers = -1, n_pos, help, rc, modes;
    int ncpu = tn__usable_cpus();
    char cmdline[1024];
    at_wire_key key;
    tn_measure_cfg mc;
    cm_params p;
    rec_store *st;
    at_opt opts[] = {
        {"db", 0, AT_OPT_STR, &db, "FILE", "the records store, created if missing (default "
                                           DEFAULT_DB ")"},
        {"task", 0, AT_OPT_STR, &task, "TASK",
         "an operator spec (matmul:M=128,N=128,K=128), a DAG text file, or the workload key "
         "of a task the store has records of"},
        {"random", 0, AT_OPT_INT, &n, "N", "measure N distinct random states of the task"},
        {"corpus", 0, AT_OPT_INT, &n_corpus, "N",
         "measure random states of the pre-training corpus's workloads until the store holds "
         "N of each (docs/cost_model.md)"},
        {"seed", 0, AT_OPT_INT, &seed, "S", "random seed of the states and of --eval's split "
                                             "(default 1)"},
        {"target", 0, AT_OPT_STR, &target, "T",
         "with --random: this host unless --tracker (default 'llvm -mcpu=native'); with "
         "--pretrain: "
         "the target the model is saved for"},
        {"device", 0, AT_OPT_STR, &device, "KEY",
         "device key: the agents that measure, and the records' key (default local)"},
        {"tracker", 0, AT_OPT_STR, &tracker, "HOST:PORT",
         "measure on this tracker's agents (default: the embedded tracker and agent)"},
        {"fleet-key", 0, AT_OPT_STR, &key_path, "FILE", "the fleet key (or $AT_FLEET_KEY)"},
        {"threads", 0, AT_OPT_INT, &threads, "N",
         "the embedded agent's kernel threads (default: every core)"},
        {"build-workers", 0, AT_OPT_INT, &build_workers, "N", "build processes (default: cores)"},
        {"repeat", 0, AT_OPT_INT, &repeat, "N", "timed repeats per state (default 5, at most 16)"},
        {"min-repeat-ms", 0, AT_OPT_INT, &min_ms, "MS",
         "each repeat runs the kernel for at least MS ms (default 1)"},
        {"no-check", 0, AT_OPT_BOOL, &no_check, NULL,
         "do not compare outputs with the naive schedule's"},
        {"pretrain", 0, AT_OPT_BOOL, &pretrain, NULL,
         "train a cost model on every record of the store and save it there"},
        {"eval", 0, AT_OPT_BOOL, &eval, NULL,
         "train on 80% of the records, print ranking metrics on the other 20%"},
        {"train-db", 0, AT_OPT_STR, &train_db, "FILE",
         "with --eval: train on every record of this other store instead, and score every "
         "record of --db"},
        {"train-fraction", 0, AT_OPT_NUM, &train_frac, "F",
         "with --eval: train on this share of each task's records of --db, score the others "
         "(default 0.8; with --train-db 0: every record scored)"},
        {"objective", 0, AT_OPT_STR, &objective, "rank|reg",
         "the training objective of --pretrain and --eval (default rank)"},
        {"quiet", 'q', AT_OPT_BOOL, &quiet, NULL, "print nothing when it works"},
    };
    command_line(argc, argv, cmdline, sizeof cmdline);
    if ((rc = tn__opts_cmd(NULL, cmd, opts, (int)AT_ARRAY_LEN(opts), argc, argv, &n_pos,
                           &help)) != TN_EXIT_OK || help)
        return rc;
    if (n_pos) {
        tn__err(cmd, "unexpected argument '%s' (see 'tuner %s --help')", argv[1], cmd->name);
        return TN_EXIT_USAGE;
    }
    modes = (n >= 0) + (n_corpus >= 0) + pretrain + eval;
    if (modes != 1) {
        tn__err(cmd, "give exactly one of --random N, --corpus N, --pretrain and --eval (see "
               "'tuner %s "
               "--help')", cmd->name);
        return TN_EXIT_USAGE;
    }
    if ((train_db || train_frac >= 0) && !eval) {
        tn__err(cmd, "%s goes with --eval", train_db ? "--train-db" : "--train-fraction");
        return TN_EXIT_USAGE;
    }
    if (train_frac < 0)
        train_frac = train_db ? 0 : 0.8;
    else if (!(train_frac < 1) || (train_frac <= 0 && !train_db)) {
        tn__err(cmd, "--train-fraction must be %s and below 1, not %g",
                train_db ? "0 or more" : "above 0", train_frac);
        return TN_EXIT_USAGE;
    }
    if (n >= 0 && task == NULL) {
        tn__err(cmd, "--random needs --task");
        return TN_EXIT_USAGE;
    }
    if (n < 0 && task) {
        tn__err(cmd, "--task goes with --random");
        return TN_EXIT_USAGE;
    }
    if (repeat < 1 || repeat > 16) {
        tn__err(cmd, "--repeat must be 1..16, not %d", repeat);
        return TN_EXIT_USAGE;
    }
    if (!device[0]) {
        tn__err(cmd, "--device must not be empty");
        return TN_EXIT_USAGE;
    }
    cm_params_default(&p);
    if (cm_objective_parse(objective, &p.objective) != AT_OK) {
        tn__err(cmd, "--objective must be rank or reg, not '%s'", objective);
        return TN_EXIT_USAGE;
    }
    p.seed = (uint64_t)seed;
    if (min_ms < 0) {
        tn__err(cmd, "--min-repeat-ms must be 0 or more, not %d", min_ms);
        return TN_EXIT_USAGE;
    }
    memset(&mc, 0, sizeof mc);
    mc.target = target;
    mc.device_key = device;
    mc.embedded_threads = threads;
    mc.repeat = repeat;
    mc.min_repeat_ms = min_ms;
    mc.no_check = no_check;
    mc.build_workers = build_workers >= 0 ? build_workers : ncpu;
    mc.command_line = cmdline;
    mc.quiet = quiet;
    if (n_corpus >= 0 && n_corpus > 100000) {
        tn__err(cmd, "--corpus must be 0..100000, not %d", n_corpus);
        return TN_EXIT_USAGE;
    }
    measuring = n >= 0 || n_corpus >= 0;
    if (measuring && tracker) {
        char err[512];
        if (key_path == NULL) key_path = getenv("AT_FLEET_KEY");
        if (key_path == NULL) {
            tn__err(cmd, "a tracker needs the fleet key: --fleet-key FILE");
            return TN_EXIT_USAGE;
        }
        if (at_wire_key_load(key_path, &key, err, sizeof err) != AT_OK) {
            tn__err(cmd, "%s", err);
            return TN_EXIT_FAIL;
        }
        mc.tracker = tracker;
        mc.keys = &key;
        mc.n_keys = 1;
    } else if (measuring) {
        tn_fleet_prepare(); /* the embedded agent's launcher, while we have one thread */
    }
    {
        char err[1024];
        int flags = measuring ? REC_OPEN_CREATE : pretrain ? 0 : REC_OPEN_READONLY;
        if (rec_store_open(db, flags, &st, err, sizeof err) != AT_OK) {
            tn__err(cmd, "%s", err);
            return TN_EXIT_FAIL;
        }
    }
    if (n_corpus >= 0)
        rc = do_corpus(cmd, st, db, n_corpus, seed, &mc, quiet);
    else if (n >= 0)
        rc = do_random(cmd, st, db, task, n, seed, &mc, quiet);
    else if (pretrain)
        rc = do_pretrain(cmd, st, db, &p, target, quiet);
    else {
        rec_store *from = NULL;
        char err[1024];
        if (train_db &&
            rec_store_open(train_db, REC_OPEN_READONLY, &from, err, sizeof err) != AT_OK) {
            tn__err(cmd, "--train-db: %s", err);
            rec_store_close(st);
            return TN_EXIT_FAIL;
        }
        rc = do_eval(cmd, st, from, train_frac, &p, seed);
        if (from)
            rec_store_close(from);
    }
    rec_store_close(st);
    return rc;
}
