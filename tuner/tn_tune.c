/* tuner/tn_tune.c -- the tuning run: tasks, rounds, building, measuring, the cost model,
** the records store, progress, resume and the task scheduler.
**
** A tround of a task: the evolutionary search picks up to per_round programs never measured
** before; each is built in a build worker (a failed or timed-out build is recorded at once
** as COMPILE_HOST / BUILD_TIMEOUT); built ones are measured through the fleet (embedded by
** default) and each result is committed to the store before the search sees it; then the
** cost model retrains.  With a remote fleet the next tround is searched and built while the
** current one is measured (so devices do not wait); so too in the embedded mode with
** o->overlap, the kernels pinned to CPUs of their own (split_cpus, pin_kernels); without it,
** building and measuring alternate, so that timings stay clean.
**
** Resume: the records of each task (same target and device key) are read back first: their
** programs are never measured again, the best of them seed the search, they count against
** the trial budget, and the cost model is loaded from the store (or trained on them).
**
** Several tasks (a model): a warm-up tround each, then Ansor's gradient allocation (the task
** whose next tround is expected to lower the weighted total latency most goes next). */
#include "tuner/tuner_int.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "cost_model/cost_model.h"

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

typedef struct ttask {
    const char *name;
    ss_dag *dag;
    char *dag_text;
    int weight;
    const char *tag;  /* similarity group, or NULL */
    int64_t task_id;
    tn_search *search;
    uint8_t ref_id[AT_WIRE_REFID_BYTES];
    int64_t n_trials;          /* recorded (this run and, with resume, earlier ones) */
    int64_t n_trials_before;   /* recorded before this run */
    int64_t n_errors[AT_N_MEASURE + 1];
    double best_cost;          /* seconds; INFINITY if none */
    int64_t best_trial;
    int64_t last_improve;      /* trial count at the last new best */
    int rounds;
    double hist[4];            /* best cost after each of the last rounds (newest last) */
    int flat;                  /* rounds in a row that found nothing better (widens the
                               ** search: tn__search_set_widen) */
    int dead;
    int in_flight;             /* rounds of this task not finished */
    double first_round_best;   /* best after the first round of this run */
    int64_t next_trial;        /* trial index of the next job (continues across runs) */
    int warm;                  /* trials of its first round: its share of the model's work */
    int n_uses;                /* uses with a choice of alternatives (tn_tune_use), or 0 */
    const tn_tune_use *uses;
    int n_seeded;              /* programs of similar tasks offered to its first round */
    char *first_best;          /* JSON of its first round's best in this run: measured again
                               ** in its second round (the first measurements of a run are
                               ** the likeliest to be slow: docs/tuning.md, "Re-timing") */
    double first_best_cost;
    int64_t first_best_trial;
    int retime;                /* 0: nothing to re-time, 1: due, 2: done */
} ttask;

typedef struct job {
    int task;
    int tround;
    int64_t trial;
    char id[64];
    char *state;        /* its JSON (the build request, the record) */
    ss_state *st;       /* the program itself, kept from the search to training */
    cm_feats *feats;    /* its features from the search's scoring, or NULL */
    kn_artifact *art;
    int built, measured;
    int retime;         /* a program measured before, timed again (no search, no training) */
} job;

typedef struct tround {
    int task;
    int n_jobs;
    int first_job;      /* index into the run's jobs */
    int n_built, n_done;
    int submitted;      /* jobs handed to the fleet */
    double t_start;
    double t_built;     /* when its last build finished */
} tround;

typedef struct run {
    const tn_tune_opts *o;
    ttask *tasks;
    int n_tasks;
    kn_target target;
    ss_hw hw;
    rec_store *st;
    int64_t run_id;
    char uuid[REC_UUID_LEN + 1];
    tn_fleet *fleet;
    tn_builder *builder;
    cm_model *model;
    job *jobs;
    int n_jobs, cap_jobs;
    tround rounds[4];
    int n_rounds;
    int64_t total_trials, budget;
    int64_t n_rounds_done;
    cm_sample *samples; /* of the tround being finished (pointing into their jobs) */
    int n_samples, cap_samples;
    /* lowerings and state parses in this process during the rounds (issue 15: a trial is
    ** lowered and parsed once): counters at the start of the loop, and the expected parts */
    int64_t lower0, parse0, search_lower0, search_parse0, built0;
    int64_t n_train_lowered; /* trials the search did not score: lowered for training */
    rec_device build_dev;
    struct utsname uts;
    double t0;
    double measure_s;   /* agents' time spent on jobs (result run_s) */
    double search_s;    /* in the evolutionary search (this process) */
    int64_t n_scored, n_too_big; /* programs the search scored, and those over the code-size
                                 ** limit (never picked) */
    int64_t n_same_program; /* picks passed over: a program measured or picked already */
    int per_round;          /* o->per_round, or half of it (TN_WARM_MIN at least) when the
                            ** default meets a cost model that starts trained */
    int64_t n_submitted, n_flushed; /* jobs sent; of them, with inputs to evict */
    double train_s;     /* training the cost model (this process) */
    double build_wall_s;   /* rounds' starts to their last builds, summed */
    double measure_wall_s; /* rounds' last builds to their last results, summed */
    double build_cpu_s; /* summed over the builds (in the workers) */
    int64_t n_builds;
    int n_retimed, n_retimed_faster; /* first rounds' bests timed again; how many faster */
    int tty;
    char errmsg[512];
    at_err err;
} run;

static void say(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(run *r, const char *fmt, ...)
{
    va_list ap;
    if (r->o->quiet)
        return;
    if (r->tty)
        fputs("\r\033[K", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ---- records: the tasks and what earlier runs measured ---- */

static at_err setup_task(run *r, int i)
{
    ttask *t = &r->tasks[i];
    at_buf text;
    at_err err;
    rec_iter *it;
    const rec_record *rec;
    rec_filter f;
    at_buf_init(&text);
    ss_dag_print(t->dag, &text);
    if (text.err)
        return AT_ENOMEM;
    t->dag_text = at_buf_take(&text);
    t->best_cost = INFINITY;
    if ((err = rec_task_add(r->st, &(rec_task){t->dag->key, r->target.text, r->o->device_key,
                                                t->dag_text, t->dag->flops},
                            &t->task_id)) != AT_OK) {
        snprintf(r->errmsg, sizeof r->errmsg, "%s", rec_store_errmsg(r->st));
        return err;
    }
    {
        /* Ctrl-C stops a round's search where it is */
        tn_search_cfg cfg = r->o->search;
        cfg.stop = (const volatile int *)&interrupted;
        if (r->target.kind == KN_TARGET_CUDA)
            cfg.max_code_size = 0; /* NVRTC's build cost is another matter */
        if ((err = tn__search_new(t->dag, &r->hw, &cfg, r->o->seed + (uint64_t)i * 7919,
                                 &t->search, r->errmsg, sizeof r->errmsg)) != AT_OK)
            return err;
    }
    /* what is recorded already: never measured again; with --resume it also counts */
    memset(&f, 0, sizeof f);
    f.workload_key = t->dag->key;
    f.target = r->target.text;
    f.device_key = r->o->device_key;
    if ((err = rec_iter_open(r->st, &f, REC_ORDER_ID, &it)) != AT_OK)
        return err;
    while ((err = rec_iter_next(it, &rec)) == AT_OK && rec) {
        int ok = rec->status == AT_MEASURE_NO_ERROR;
        if (rec->trial + 1 > t->next_trial)
            t->next_trial = rec->trial + 1;
        if ((err = tn__search_add_measured(t->search, rec->state, NULL, NULL, rec->mean, ok)) !=
            AT_OK)
            break;
        if (!r->o->resume)
            continue;
        t->n_trials++;
        t->n_errors[rec->status >= 0 && rec->status < AT_N_MEASURE ? rec->status
                                                                     : AT_N_MEASURE]++;
        if (ok && rec->mean < t->best_cost) {
            t->best_cost = rec->mean;
            t->best_trial = t->n_trials;
            t->last_improve = t->n_trials;
        }
    }
    rec_iter_close(it);
    t->n_trials_before = t->n_trials;
    r->total_trials += t->n_trials;
    return err;
}

/* The references (naive schedules) each agent checks outputs against, one per task.  On a
** CPU target they are built in the search's threads (LLVM builds are independent; ~20 ms
** each, 0.65 s for ResNet-18's 34 tasks on one thread) and handed to the fleet in task
** order; a GPU target's (NVRTC) one after the other. */
typedef struct ref_part {
    run *r;
    int first, stride;
    kn_artifact **arts;
    at_err err;
    char errmsg[512];
} ref_part;

static void *build_refs(void *arg)
{
    ref_part *p = arg;
    for (int i = p->first; i < p->r->n_tasks && p->err == AT_OK; i += p->stride) {
        ss_state *naive = NULL;
        p->err = ss_state_new(p->r->tasks[i].dag, &naive);
        if (p->err == AT_OK)
            p->err = kn_build_state(naive, &p->r->target, "at_ref", &p->arts[i], p->errmsg,
                                    sizeof p->errmsg);
        ss_state_free(naive);
    }
    return NULL;
}

static at_err add_references(run *r)
{
    ref_part part[AT_MAX_PARTS];
    int nt = AT_MAX(1, AT_MIN(AT_MIN(r->o->search.n_threads, AT_MAX_PARTS), r->n_tasks));
    kn_artifact **arts;
    at_err err = AT_OK;
    if (r->target.kind == KN_TARGET_CUDA) {
        for (int i = 0; i < r->n_tasks && err == AT_OK; i++)
            err = tn__add_reference(r->fleet, r->tasks[i].dag, &r->target, r->tasks[i].ref_id,
                                    r->errmsg, sizeof r->errmsg);
        return err;
    }
    if ((arts = at_calloc((size_t)r->n_tasks + 1, sizeof *arts)) == NULL)
        return AT_ENOMEM;
    for (int t = 0; t < nt; t++)
        part[t] = (ref_part){r, t, nt, arts, AT_OK, ""};
    at_run_parts(build_refs, part, sizeof *part, nt);
    for (int t = 0; t < nt && err == AT_OK; t++)
        if ((err = part[t].err) != AT_OK)
            snprintf(r->errmsg, sizeof r->errmsg, "%s", part[t].errmsg);
    for (int i = 0; i < r->n_tasks && err == AT_OK; i++)
        err = tn_fleet_add_ref(r->fleet, arts[i], r->tasks[i].ref_id);
    for (int i = 0; i < r->n_tasks; i++)
        kn_artifact_free(arts[i]);
    at_free(arts);
    return err;
}

/* ---- samples for the cost model ---- */

static void add_sample(run *r, const job *j, double cost, int status)
{
    cm_sample *x;
    if (r->model == NULL)
        return;
    if (r->n_samples == r->cap_samples) {
        int cap = r->cap_samples ? 2 * r->cap_samples : 128;
        cm_sample *s = at_realloc(r->samples, (size_t)cap * sizeof *s);
        if (s == NULL)
            return;
        r->samples = s;
        r->cap_samples = cap;
    }
    x = &r->samples[r->n_samples++];
    memset(x, 0, sizeof *x);
    x->task = r->tasks[j->task].dag->key;
    /* the features the search computed when it scored the program (cm_sample takes the
    ** first of state, ir, feats that is set): no second lowering */
    x->state = j->feats ? NULL : j->st;
    x->feats = j->feats;
    x->cost_s = cost;
    x->status = status;
    r->n_train_lowered += j->feats == NULL;
}

static void train(run *r)
{
    char err[256];
    double t0 = at_time_mono_s();
    if (r->model && r->n_samples > 0 &&
        cm_model_update(r->model, r->samples, r->n_samples, err, sizeof err) != AT_OK)
        at_log_warn("tuner: the cost model did not train: %s", err);
    r->train_s += at_time_mono_s() - t0;
    r->n_samples = 0;
}

/* ---- results ---- */

static void result_for(run *r, job *j, int status, double cost)
{
    ttask *t = &r->tasks[j->task];
    tround *rd = NULL;
    for (int k = 0; k < r->n_rounds; k++)
        if (j - r->jobs >= r->rounds[k].first_job &&
            j - r->jobs < r->rounds[k].first_job + r->rounds[k].n_jobs)
            rd = &r->rounds[k];
    if (j->measured)
        return;
    j->measured = 1;
    if (j->retime) {
        /* not a trial: the same program timed again; the store keeps the faster of the two
        ** measurements (rec_put), and so does the task */
        r->n_retimed++;
        if (status == AT_MEASURE_NO_ERROR) {
            r->n_retimed_faster += cost < t->first_best_cost;
            if (cost < t->first_best_cost * 0.95)
                say(r, "task %s: its first round's best, timed again, took %.3f ms where it "
                       "first took %.3f ms", t->name, cost * 1e3, t->first_best_cost * 1e3);
            if (cost < t->best_cost)
                t->best_cost = cost;
        }
        if (rd)
            rd->n_done++;
        return;
    }
    t->n_trials++;
    r->total_trials++;
    t->n_errors[status >= 0 && status < AT_N_MEASURE ? status : AT_N_MEASURE]++;
    if (status == AT_MEASURE_NO_ERROR) {
        tn__search_add_measured(t->search, j->state, j->st, j->feats, cost, 1);
        if (cost < t->best_cost) {
            t->best_cost = cost;
            t->best_trial = t->n_trials;
            t->last_improve = t->n_trials;
            if (t->rounds == 0 && j->state != NULL) {
                at_free(t->first_best);
                t->first_best = at_strdup(j->state);
                t->first_best_cost = cost;
                t->first_best_trial = j->trial;
            }
        }
    }
    add_sample(r, j, cost, status);
    if (rd)
        rd->n_done++;
}

static void on_result(void *ctx, const tn_fleet_job *fj, const at_wire_result *res)
{
    run *r = ctx;
    job *j = fj->index >= 0 && fj->index < r->n_jobs ? &r->jobs[fj->index] : NULL;
    double cost = AT_MEASURE_FAIL_COST;
    if (j == NULL)
        return;
    if (res->status == AT_MEASURE_NO_ERROR && res->n_costs > 0) {
        cost = 0;
        for (int i = 0; i < res->n_costs; i++)
            cost += res->costs[i];
        cost /= res->n_costs;
    }
    r->measure_s += res->run_s;
    result_for(r, j, res->status, cost);
}

/* A build failed: record it now (it never reaches a device). */
static void record_build_failure(run *r, job *j, const tn_build_res *b)
{
    tn_fleet_job fj;
    int status;
    memset(&fj, 0, sizeof fj);
    fj.w.id = j->id;
    fj.task_id = r->tasks[j->task].task_id;
    fj.state = j->state;
    fj.run_id = r->run_id;
    fj.trial = j->trial;
    if (tn__record_build_failure(r->st, &r->build_dev, &fj, b, &status) != AT_OK) {
        r->err = AT_EIO;
        snprintf(r->errmsg, sizeof r->errmsg, "cannot record a build failure: %s",
                 rec_store_errmsg(r->st));
        return;
    }
    result_for(r, j, status, AT_MEASURE_FAIL_COST);
}

static void submit_job(run *r, job *j)
{
    tn_fleet_job fj;
    at_wire_arg args[64];
    at_err err;
    memset(&fj, 0, sizeof fj);
    kn_artifact_to_wire(j->art, &fj.w.art, args);
    fj.w.id = j->id;
    at_wire_settings_default(&fj.w.run);
    fj.w.run.number = r->o->number;
    fj.w.run.repeat = r->o->repeat;
    fj.w.run.min_repeat_ms = r->o->min_repeat_ms;
    fj.w.run.flush_cache = r->o->flush_cache != TN_FLUSH_OFF;
    if (r->o->flush_cache == TN_FLUSH_WEIGHTS) {
        /* the weights only: bits of the task's constant inputs (the kernel's arguments are
        ** the DAG's, in order; a weight in a rewritten layout keeps its index); none:
        ** nothing to evict */
        const ss_dag *dag = r->tasks[j->task].dag;
        uint64_t mask = 0;
        for (int i = 0; i < dag->n_args && i < 63; i++)
            if (dag->ops[dag->args[i]].is_const && !dag->ops[dag->args[i]].is_output)
                mask |= (uint64_t)1 << i;
        fj.w.run.flush_args = mask;
        fj.w.run.flush_cache = mask != 0;
    }
    r->n_submitted++;
    r->n_flushed += fj.w.run.flush_cache != 0;
    fj.w.run.timeout_ms = r->o->timeout_ms;
    if (r->o->cutoff > 0 && isfinite(r->tasks[j->task].best_cost) &&
        r->tasks[j->task].best_cost > 0)
        fj.w.run.cutoff_s = r->o->cutoff * r->tasks[j->task].best_cost;
    fj.w.seed = r->o->seed + 1;
    fj.w.has_ref = 1;
    memcpy(fj.w.ref, r->tasks[j->task].ref_id, sizeof fj.w.ref);
    fj.task_id = r->tasks[j->task].task_id;
    fj.state = j->state;
    fj.run_id = r->run_id;
    fj.trial = j->trial;
    fj.index = j - r->jobs;
    err = tn_fleet_submit(r->fleet, &fj, 1);
    if (err != AT_OK) {
        r->err = err;
        snprintf(r->errmsg, sizeof r->errmsg, "cannot submit a job: %s", at_strerror(err));
    }
    kn_artifact_free(j->art);
    j->art = NULL;
}

static void on_built(void *ctx, const tn_build_res *b)
{
    run *r = ctx;
    job *j = b->id >= 0 && b->id < r->n_jobs ? &r->jobs[b->id] : NULL;
    if (j == NULL) {
        kn_artifact_free(b->art);
        return;
    }
    j->built = 1;
    r->build_cpu_s += b->build_s;
    r->n_builds++;
    for (int k = 0; k < r->n_rounds; k++)
        if (b->id >= r->rounds[k].first_job &&
            b->id < r->rounds[k].first_job + r->rounds[k].n_jobs &&
            ++r->rounds[k].n_built == r->rounds[k].n_jobs) {
            r->rounds[k].t_built = at_time_mono_s();
            r->build_wall_s += r->rounds[k].t_built - r->rounds[k].t_start;
        }
    if (b->err != AT_OK) {
        kn_artifact_free(b->art);
        record_build_failure(r, j, b);
        return;
    }
    j->art = b->art;
}

/* ---- overlap: the kernels' CPUs and the tuner's ---- */

/* "0-3,6" */
static void cpu_list(const cpu_set_t *s, char *out, size_t n)
{
    size_t len = 0;
    out[0] = 0;
    for (int c = 0; c < CPU_SETSIZE && len + 24 < n; c++) {
        int e = c;
        if (!CPU_ISSET(c, s))
            continue;
        while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, s))
            e++;
        len += (size_t)snprintf(out + len, n - len, e > c ? "%s%d-%d" : "%s%d", len ? "," : "",
                                c, e);
        c = e;
    }
}

/* The first o->kernel_cpus CPUs this process may use go to the kernels (*kern), the others
** to this thread, and so to the threads and build workers it starts from now on. */
static at_err split_cpus(run *r, cpu_set_t *kern)
{
    cpu_set_t all, rest;
    int k = 0;
    CPU_ZERO(kern);
    CPU_ZERO(&rest);
    if (sched_getaffinity(0, sizeof all, &all) != 0) {
        snprintf(r->errmsg, sizeof r->errmsg, "cannot read this process's CPUs: %s",
                 strerror(errno));
        return AT_EIO;
    }
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) {
            if (k++ < r->o->kernel_cpus)
                CPU_SET(c, kern);
            else
                CPU_SET(c, &rest);
        }
    if (CPU_COUNT(&rest) == 0) {
        snprintf(r->errmsg, sizeof r->errmsg, "cannot keep %d CPU%s for the kernels: this "
                 "process may use %d", r->o->kernel_cpus, r->o->kernel_cpus == 1 ? "" : "s",
                 CPU_COUNT(&all));
        return AT_EINVAL;
    }
    if (sched_setaffinity(0, sizeof rest, &rest) != 0) {
        snprintf(r->errmsg, sizeof r->errmsg, "cannot set the tuner's CPUs: %s",
                 strerror(errno));
        return AT_EIO;
    }
    return AT_OK;
}

/* Pin the embedded agent's kernels (the launcher, whose children run them) to *kern and say
** where everything runs, as the OS reports it. */
static at_err pin_kernels(run *r, const cpu_set_t *kern)
{
    pid_t pid = tn_fleet_kernel_pid(r->fleet);
    cpu_set_t k, t;
    char ks[256], ts[256];
    if (pid <= 0 || sched_setaffinity(pid, sizeof *kern, kern) != 0 ||
        sched_getaffinity(pid, sizeof k, &k) != 0 || sched_getaffinity(0, sizeof t, &t) != 0) {
        snprintf(r->errmsg, sizeof r->errmsg, "cannot pin the kernels to their CPUs: %s",
                 pid <= 0 ? "no embedded agent" : strerror(errno));
        return AT_EIO;
    }
    cpu_list(&k, ks, sizeof ks);
    cpu_list(&t, ts, sizeof ts);
    say(r, "builds overlap the measuring: kernels on CPU%s %s, the tuner and its %d build "
           "worker%s on CPU%s %s", CPU_COUNT(&k) == 1 ? "" : "s", ks, r->o->build_workers,
        r->o->build_workers == 1 ? "" : "s", CPU_COUNT(&t) == 1 ? "" : "s", ts);
    return AT_OK;
}

/* ---- the task scheduler ---- */

static int task_done(const run *r, const ttask *t)
{
    if (t->dead)
        return 1;
    if (r->o->early_stop > 0 && t->n_trials - t->last_improve >= r->o->early_stop &&
        t->n_trials > t->n_trials_before)
        return 1;
    return 0;
}

/* No better program in its last two rounds: it gives its turn to the others. */
static int stalled(const ttask *t)
{
    return t->rounds >= 3 && !(t->hist[3] < t->hist[1] * (1 - 1e-3));
}

/* The cost of side 'side' of choice 'c': the best costs of its tasks, per use. */
static double side_cost(const run *r, int c, int side)
{
    double sum = 0;
    for (int k = 0; k < r->n_tasks; k++)
        for (int u = 0; u < r->tasks[k].n_uses; u++)
            if (r->tasks[k].uses[u].choice == c && r->tasks[k].uses[u].side == side)
                sum += r->tasks[k].best_cost;
    return sum;
}

/* What an expected change 'delta' (< 0) of task t's cost brings the model: delta per use,
** except for the uses of a choice, where the model runs the cheaper side (min(A + delta,
** B) - min(A, B)): a task of the dearer side gains only by overtaking the other. */
static double model_gain(const run *r, const ttask *t, double delta)
{
    double g = 0;
    if (t->n_uses == 0)
        return t->weight * delta;
    for (int u = 0; u < t->n_uses; u++) {
        const tn_tune_use *us = &t->uses[u];
        double a, b;
        if (us->choice < 0) {
            g += delta;
            continue;
        }
        a = side_cost(r, us->choice, us->side);
        b = side_cost(r, us->choice, !us->side);
        if (!isfinite(a) || !isfinite(b)) {
            g += delta;
            continue;
        }
        g += AT_MIN(a + delta, b) - AT_MIN(a, b);
    }
    return g;
}

/* The next task to tune: a warm-up tround each, then the largest expected gain in the
** weighted total latency (Ansor's gradient, alpha 0.2, beta 2, window 3) among the tasks
** still improving; the stalled ones only when every task has stalled.  Where the model
** has alternatives (direct or Winograd convolutions), the gain is the choice's. */
static int pick_task(run *r)
{
    double best = 0;
    int pick = -1;
    for (int i = 0; i < r->n_tasks; i++) {
        ttask *t = &r->tasks[i];
        if (task_done(r, t) || t->in_flight)
            continue;
        if (t->rounds == 0)
            return i;
    }
    for (int pass = 0; pass < 2 && pick < 0; pass++)
    for (int i = 0; i < r->n_tasks; i++) {
        ttask *t = &r->tasks[i];
        double g = isfinite(t->best_cost) ? t->best_cost : 1.0, back = 0, fwd, grad;
        double best_flops_rate = 0;
        if (task_done(r, t) || t->in_flight || (pass == 0 && stalled(t)))
            continue;
        if (t->rounds >= 4)
            back = (t->hist[3] - t->hist[0]) / 3;
        fwd = g - g / (t->rounds + 1.0);
        /* similar tasks (the same tag: anchor kind and FLOPs' order of magnitude): can we
        ** get within 2x of their speed? */
        for (int k = 0; k < r->n_tasks; k++) {
            const ttask *u = &r->tasks[k];
            if (k != i && t->tag && u->tag && strcmp(t->tag, u->tag) == 0 &&
                isfinite(u->best_cost) && u->best_cost > 0)
                best_flops_rate = AT_MAX(best_flops_rate, u->dag->flops / u->best_cost);
        }
        if (best_flops_rate > 0)
            fwd = AT_MIN(fwd, 2 * t->dag->flops / best_flops_rate); /* beta x their speed */
        fwd = fwd - g;
        grad = model_gain(r, t, 0.2 * back + 0.8 * fwd);
        if (pass == 0 && !(grad < 0))
            continue; /* the dearer side of a choice, too far behind to matter now */
        if (pick < 0 || grad < best) {
            best = grad;
            pick = i;
        }
    }
    return pick;
}

/* The first round of each task: per_round trials scaled by its share of the run's weighted
** FLOPs times the number of tasks (a task of average size gets per_round), at least
** TN_WARM_MIN (a pooling layer gets a handful, never a full round), at most per_round. */
#define TN_WARM_MIN 8
static void plan_warmup(run *r)
{
    double total = 0;
    for (int i = 0; i < r->n_tasks; i++)
        total += r->tasks[i].weight * r->tasks[i].dag->flops;
    for (int i = 0; i < r->n_tasks; i++) {
        ttask *t = &r->tasks[i];
        double share = total > 0 ? t->weight * t->dag->flops / total : 1.0 / r->n_tasks;
        int lo = AT_MIN(TN_WARM_MIN, r->per_round);
        double w = ceil(r->per_round * r->n_tasks * share);
        t->warm = w >= r->per_round ? r->per_round : w <= lo ? lo : (int)w;
    }
}

/* ---- rounds ---- */

/* Offer a hand-written state to a task's first round: 1 if the search took it. */
static int offer_state(ttask *t, const ss_state *st)
{
    at_buf b;
    int n;
    at_buf_init(&b);
    ss_state_to_json(st, &b);
    n = !b.err && tn__search_seed(t->search, b.data) > 0;
    at_buf_fini(&b);
    return n;
}

/* Variant v of the hand-written schedule of a matmul (or a dense layer with its epilogue)
** or an NCHW convolution, applied to
** the naive state 'st' (both refuse the other's DAG untouched); AT_EINVAL when neither
** applies or there is no variant v. */
static at_err hand_variant(const run *r, ss_state *st, int v)
{
    if (kn_hand_matmul_tiled(st, r->hw.vector_bytes, r->hw.layout_rewrite, v, NULL, 0) == AT_OK)
        return AT_OK;
    if (st->n_steps != 0 || v >= KN_HAND_CONV_NCHW_VARIANTS)
        return AT_EINVAL;
    return kn_hand_conv_nchw(st, r->hw.vector_bytes, v, NULL, 0);
}

/* A task's first round here: offer it the best programs of the tasks of its tag that ran
** before it (this run's, and what the store held for them), replayed on its DAG. */
static void seed_from_similar(run *r, ttask *t)
{
    int offered = 0, nhwc = 0;
    ss_state *hand = NULL;
    if (t->n_trials > 0)
        return;
    /* the matmuls, the Winograd transforms, the convolutions and the row-wise operators
    ** start from their hand-written schedule too: structures the sampler draws rarely
    ** (kn_hand_matmul_tiled: the 1,000-trial best's register tiles summed over all of K,
    ** B in their order, in five block sizes, 4.7-5.4 ms on matmul 1024^3 where the
    ** 1,000-trial bests re-measure at 4.5-4.9; a dense layer's bias, GELU or residual add
    ** inlined after it: BERT's 16 x 768 x 768 projection 0.15 ms where its 8 first-round
    ** trials had found 0.57; kn_hand_winograd: the transforms' a-term
    ** reductions in registers; kn_hand_conv_nhwc: a depthwise convolution's taps into a
    ** register tile, 2-2.5x faster than 1,500 trials found on MobileNetV2's first ones;
    ** kn_hand_conv_nchw: an NCHW convolution's block of output channels x a row, 305 GFLOPS
    ** on the ResNet conv2d where 64 trials found 225-320; kn_hand_rowwise: a softmax or
    ** layer norm a row at a time with vector accumulators, 1.3-1.6x faster than 128 trials
    ** found on BERT's; kn_hand_bmm: a batched product's register tiles, which 8 random
    ** trials miss) */
    for (int v = 0; !r->hw.is_gpu && v < KN_HAND_MATMUL_VARIANTS; v++) {
        /* every variant of a matmul, or of an NCHW convolution: the first round measures
        ** them all, so one unlucky measurement does not set the task's start */
        if (ss_state_new(t->dag, &hand) != AT_OK || hand_variant(r, hand, v) != AT_OK)
            break;
        offered += offer_state(t, hand);
        ss_state_free(hand);
        hand = NULL;
    }
    if (offered == 0 && hand && hand->n_steps == 0 &&
        (kn_hand_winograd(hand, r->hw.vector_bytes, NULL, 0) == AT_OK ||
         (nhwc = kn_hand_conv_nhwc(hand, r->hw.vector_bytes, 0, NULL, 0) == AT_OK) ||
         kn_hand_rowwise(hand, r->hw.vector_bytes, NULL, 0) == AT_OK ||
         kn_hand_bmm(hand, r->hw.vector_bytes, NULL, 0) == AT_OK))
        offered += offer_state(t, hand);
    ss_state_free(hand);
    hand = NULL;
    /* an NHWC convolution's wider channel blocks, where they divide its channels */
    for (int v = 1; nhwc && v < KN_HAND_CONV_NHWC_VARIANTS; v++) {
        if (ss_state_new(t->dag, &hand) == AT_OK &&
            kn_hand_conv_nhwc(hand, r->hw.vector_bytes, v, NULL, 0) == AT_OK)
            offered += offer_state(t, hand);
        ss_state_free(hand);
        hand = NULL;
    }
    if (t->tag == NULL) {
        t->n_seeded = offered;
        return;
    }
    for (int k = 0; k < r->n_tasks && offered < TN_SEARCH_MAX_SEEDS; k++) {
        ttask *u = &r->tasks[k];
        if (u == t || u->tag == NULL || strcmp(u->tag, t->tag) != 0 || u->search == NULL)
            continue;
        for (int j = 0; j < 4; j++) {
            const char *js = tn__search_best_json(u->search, j);
            int rc;
            if (js == NULL)
                break;
            if ((rc = tn__search_seed(t->search, js)) < 0)
                return;
            offered += rc;
        }
    }
    t->n_seeded = offered;
}

/* Free what a job holds of its program (after training used it). */
static void job_forget(job *j)
{
    at_free(j->state);
    ss_state_free(j->st);
    tn__feats_free(j->feats);
    j->state = NULL;
    j->st = NULL;
    j->feats = NULL;
}

/* A first round while the cost model has nothing to go on (no saved model, nothing
** measured yet) measures at most this many random programs: the model trains on them
** (cm_params.warmup is the same) and guides the rest of the task's warm-up budget.  On the
** cached random data sets of bench_cost_model, 16 random programs then three model-picked
** rounds of 16 found 0.996x the pool's best matmul 1024^3 where 64 random ones found 0.915x
** (30 draws); the convolution 0.595x against 0.548x.  Tuned for real (--trials 64, 2
** threads, seeds 1-3): matmul 1024^3 391/409/425 GFLOPS against 360/326/342 with a random
** first round of 64, in 20-29 s against 32-58 s. */
#define TN_COLD_ROUND 16

/* Append a job of round 'rd' (capacity reserved) and hand it to the builders; it owns
** 'state', 'st' and 'feats' (freed here when it cannot be built).  A re-time measures a
** program again: no search, no training, not a trial. */
static at_err add_job(run *r, tround *rd, int64_t trial, char *state, ss_state *st,
                      cm_feats *feats, int retime)
{
    const ttask *t = &r->tasks[rd->task];
    job *j = &r->jobs[r->n_jobs];
    at_err err;
    memset(j, 0, sizeof *j);
    j->task = rd->task;
    j->tround = (int)r->n_rounds_done;
    j->trial = trial;
    j->retime = retime;
    snprintf(j->id, sizeof j->id, "%s-%d", r->uuid, r->n_jobs);
    j->state = state;
    j->st = st;
    j->feats = feats;
    if (j->state == NULL) {
        job_forget(j);
        return AT_ENOMEM;
    }
    err = tn_builder_submit(r->builder, &(tn_build_req){r->n_jobs, r->target.text,
                                                         t->dag_text, j->state, NULL});
    if (err != AT_OK) {
        job_forget(j);
        return err;
    }
    r->n_jobs++;
    rd->n_jobs++;
    return AT_OK;
}

static at_err start_round(run *r, int ti)
{
    ttask *t = &r->tasks[ti];
    int64_t left = r->budget - r->total_trials;
    int m = (int)AT_MIN((int64_t)(t->rounds == 0 ? t->warm : r->per_round), left), n = 0;
    int cold = 0, retime;
    ss_state **cands;
    cm_feats **feats;
    tn_search_stats stats;
    tround *rd;
    at_err err;
    for (int k = 0; k < r->n_rounds; k++)
        left -= r->rounds[k].n_jobs - r->rounds[k].n_done;
    m = (int)AT_MIN((int64_t)m, left);
    if (m <= 0)
        return AT_OK;
    /* the first round's best, timed again first thing in the second round (not a trial) */
    retime = t->retime == 1 && t->rounds >= 1 && !r->o->no_retime;
    if (t->rounds == 0 && r->model && m > TN_COLD_ROUND && r->n_jobs == 0 &&
        tn__search_n_seen(t->search) == 0) {
        /* the run's very first round, on a task with nothing measured: 16 random programs,
        ** whatever the model.  A cold model learns from them; a model trained elsewhere (a
        ** saved one, or on the store's other tasks) is refined on this task's own
        ** measurements before it picks: matmul 1024^3's model, which picked conv2d
        ** programs at 82 GFLOPS where 64 trials from scratch found 225, is not trusted on a
        ** conv2d before the conv2d has a say */
        m = TN_COLD_ROUND;
        t->warm = m;
        cold = 1;
    }
    cands = at_calloc((size_t)m, sizeof *cands);
    feats = at_calloc((size_t)m, sizeof *feats);
    if (cands == NULL || feats == NULL) {
        at_free(cands);
        at_free(feats);
        return AT_ENOMEM;
    }
    if (t->rounds == 0)
        seed_from_similar(r, t);
    {
        double t0 = at_time_mono_s();
        tn__search_set_widen(t->search, t->flat);
        err = tn__search_round(t->search, cold ? NULL : r->model, m, cands, feats, &n, &stats);
        r->search_s += at_time_mono_s() - t0;
        r->n_scored += stats.n_scored;
        r->n_too_big += stats.n_too_big;
        r->n_same_program += stats.n_same_program;
    }
    if (err != AT_OK) {
        at_free(cands);
        at_free(feats);
        return err;
    }
    if (n == 0) {
        /* the space is exhausted (or nothing new could be found twice): the task is done */
        t->dead = 1;
        at_free(cands);
        at_free(feats);
        say(r, "task %s: no new programs to measure (search space exhausted)", t->name);
        return AT_OK;
    }
    rd = &r->rounds[r->n_rounds++];
    memset(rd, 0, sizeof *rd);
    rd->task = ti;
    rd->first_job = r->n_jobs;
    rd->t_start = at_time_mono_s();
    if (r->n_jobs + n + retime > r->cap_jobs) {
        int cap = AT_MAX(2 * r->cap_jobs, r->n_jobs + n + retime + 64);
        job *p = at_realloc(r->jobs, (size_t)cap * sizeof *p);
        if (p == NULL) {
            for (int i = 0; i < n; i++) {
                ss_state_free(cands[i]);
                tn__feats_free(feats[i]);
            }
            at_free(cands);
            at_free(feats);
            r->n_rounds--;
            return AT_ENOMEM;
        }
        r->jobs = p;
        r->cap_jobs = cap;
    }
    if (retime) {
        /* the program's trial: its record keeps it */
        add_job(r, rd, t->first_best_trial, at_strdup(t->first_best), NULL, NULL, 1);
        t->retime = 2;
    }
    for (int i = 0; i < n; i++) {
        at_buf json;
        at_buf_init(&json);
        ss_state_to_json(cands[i], &json);
        err = add_job(r, rd, t->next_trial++, at_buf_take(&json), cands[i], feats[i], 0);
    }
    at_free(cands);
    at_free(feats);
    t->in_flight++;
    return err;
}

/* Hand a tround's built jobs to the fleet: in the embedded mode only once every build of
** the tround is done (building pauses while kernels are timed).  A task's first
** measurements go in waves of FIRST_WAVE until one succeeds: the jobs after it carry the
** cutoff (o->cutoff times the best so far), so that random candidates far slower than the
** best are not timed in full (the first round of matmul 1024^3 spent most of its time on
** them). */
#define FIRST_WAVE 8
static void submit_built(run *r, tround *rd)
{
    int in_wave = 0, all = 1;
    const ttask *t = &r->tasks[rd->task];
    if (r->o->tracker == NULL && !r->o->overlap && rd->n_built < rd->n_jobs)
        return;
    if (r->o->cutoff > 0 && !isfinite(t->best_cost)) {
        for (int k = rd->first_job; k < rd->first_job + rd->n_jobs; k++) {
            const job *j = &r->jobs[k];
            in_wave += j->built && j->art == NULL && !j->measured; /* submitted, no result */
        }
        if (in_wave > 0)
            return; /* wait for the wave */
    }
    for (int k = rd->first_job; k < rd->first_job + rd->n_jobs; k++) {
        job *j = &r->jobs[k];
        if (!(j->built && j->art && !j->measured))
            continue;
        if (r->o->cutoff > 0 && !isfinite(t->best_cost) && in_wave >= FIRST_WAVE) {
            all = 0;
            break;
        }
        submit_job(r, j);
        in_wave++;
    }
    if (all && rd->n_built == rd->n_jobs)
        rd->submitted = 1;
}

static void progress(run *r, const ttask *t, const tround *rd)
{
    double gf = isfinite(t->best_cost) && t->best_cost > 0 ? t->dag->flops / t->best_cost * 1e-9
                                                          : 0;
    int64_t n_err = 0;
    for (int k = 1; k <= AT_N_MEASURE; k++)
        n_err += t->n_errors[k];
    if (r->o->quiet)
        return;
    fprintf(stderr, "%sround %lld  task %s  trials %lld/%lld  best %.2f GFLOPS (%.3f ms)  "
                    "round %.1f s  errors %lld%s%s",
            r->tty ? "\r\033[K" : "", (long long)r->n_rounds_done, t->name,
            (long long)r->total_trials, (long long)r->budget, gf,
            isfinite(t->best_cost) ? t->best_cost * 1e3 : 0, at_time_mono_s() - rd->t_start,
            (long long)n_err, t->search->widen ? "  (search widened)" : "", r->tty ? "" : "\n");
    fflush(stderr);
}

static void finish_round(run *r, int k)
{
    tround *rd = &r->rounds[k];
    ttask *t = &r->tasks[rd->task];
    if (t->rounds == 0 && t->n_seeded > 0)
        say(r, "task %s: its first round was seeded with %d programs of similar tasks",
            t->name, t->n_seeded);
    t->rounds++;
    t->in_flight--;
    memmove(t->hist, t->hist + 1, sizeof t->hist - sizeof t->hist[0]);
    t->hist[3] = isfinite(t->best_cost) ? t->best_cost : 1.0;
    t->flat = t->rounds >= 2 && !(t->hist[3] < t->hist[2] * (1 - 1e-3)) ? t->flat + 1 : 0;
    if (t->rounds == 1) {
        t->first_round_best = t->best_cost;
        t->retime = t->first_best != NULL;
    }
    r->n_rounds_done++;
    if (rd->t_built > 0)
        r->measure_wall_s += at_time_mono_s() - rd->t_built;
    train(r);
    progress(r, t, rd);
    for (int i = rd->first_job; i < rd->first_job + rd->n_jobs; i++)
        job_forget(&r->jobs[i]);
    memmove(&r->rounds[k], &r->rounds[k + 1], (size_t)(r->n_rounds - k - 1) * sizeof *rd);
    r->n_rounds--;
}

/* ---- the run ---- */

static void report(run *r)
{
    double total_s = at_time_mono_s() - r->t0;
    if (r->o->quiet)
        return;
    if (r->tty)
        fputs("\r\033[K", stderr);
    printf("\n%-28s %6s %8s %6s %12s %10s %8s  %s\n", "TASK", "WEIGHT", "TRIALS", "WARM",
           "BEST (ms)", "GFLOPS", "ERRORS", "WORKLOAD KEY");
    for (int i = 0; i < r->n_tasks; i++) {
        const ttask *t = &r->tasks[i];
        int64_t n_err = 0;
        for (int k = 1; k <= AT_N_MEASURE; k++)
            n_err += t->n_errors[k];
        printf("%-28.28s %6d %8lld %6d %12.4f %10.2f %8lld  %s\n", t->name, t->weight,
               (long long)t->n_trials, t->warm, isfinite(t->best_cost) ? t->best_cost * 1e3 : 0,
               isfinite(t->best_cost) ? t->dag->flops / t->best_cost * 1e-9 : 0,
               (long long)n_err, t->dag->key);
    }
    for (int k = 1; k <= AT_N_MEASURE; k++) {
        int64_t n = 0;
        for (int i = 0; i < r->n_tasks; i++)
            n += r->tasks[i].n_errors[k];
        if (n > 0)
            printf("  %lld x %s: %s (%s)\n", (long long)n,
                   k < AT_N_MEASURE ? at_measure_name(k) : "UNKNOWN",
                   at_measure_cause(k), at_measure_hint(k));
    }
    printf("%lld trials in %.1f s (%.2f trials/s); agents busy %.0f%% of the time; records in %s "
           "(run %s)\n",
           (long long)(r->total_trials), total_s,
           total_s > 0 ? (double)(r->total_trials) / total_s : 0,
           total_s > 0 ? 100.0 * r->measure_s / total_s : 0, r->o->db, r->uuid);
    printf("time: search %.1f s, training %.1f s, builds %.1f s in %d worker%s (%lld builds, "
           "%.3f s each; rounds waited %.1f s for them), measuring %.1f s on the agents "
           "(rounds waited %.1f s for it)\n", r->search_s, r->train_s, r->build_cpu_s,
           r->o->build_workers, r->o->build_workers == 1 ? "" : "s", (long long)r->n_builds,
           r->n_builds ? r->build_cpu_s / (double)r->n_builds : 0, r->build_wall_s,
           r->measure_s, r->measure_wall_s);
    if (r->n_too_big > 0)
        printf("over the code-size limit (--max-code-size %lld), never picked: %.1f%% of the "
               "%lld programs scored\n", (long long)r->o->search.max_code_size,
               100.0 * (double)r->n_too_big / (double)AT_MAX(r->n_scored, 1),
               (long long)r->n_scored);
    if (r->n_same_program > 0)
        printf("passed over: %lld pick%s that lowered to a program already measured or picked "
               "(another state of the same loops)\n",
               (long long)r->n_same_program, r->n_same_program == 1 ? "" : "s");
    if (r->o->flush_cache != TN_FLUSH_OFF)
        printf("evicted from the caches before each repeat: %s of %lld of %lld jobs%s\n",
               r->o->flush_cache == TN_FLUSH_ALL ? "the inputs" : "the weights",
               (long long)r->n_flushed, (long long)r->n_submitted,
               r->o->flush_cache == TN_FLUSH_ALL ? "" : " (the others' kernels have none)");
    if (r->n_retimed > 0)
        printf("re-timed the first round's best of %d task%s: %d faster the second time (the "
               "store keeps the faster)\n",
               r->n_retimed, r->n_retimed == 1 ? "" : "s", r->n_retimed_faster);
    {
        /* each trial is lowered once here (by the search's scoring, whose features training
        ** reuses, or by training when the search did not score it) and its JSON never
        ** parsed back: "other" counts what breaks that */
        int64_t lowered = kn_lower_count() - r->lower0, parsed = ss_state_parse_count() - r->parse0;
        int64_t scoring = -r->search_lower0, seeds = -r->search_parse0, local = 0;
        for (int i = 0; i < r->n_tasks; i++) {
            scoring += r->tasks[i].search->n_lowered;
            seeds += r->tasks[i].search->n_parsed;
        }
        if (r->o->build_workers == 0) {
            int64_t n_to, n_crash;
            tn_builder_stats(r->builder, &local, &n_to, &n_crash);
            local -= r->built0; /* each build in this process parses and lowers once */
        }
        printf("in this process during the rounds: %lld lowerings (%lld scoring new programs, "
               "%lld of trials not scored, %lld builds here, %lld other), %lld state parses "
               "(%lld of seeds from similar tasks, %lld builds here, %lld other)\n",
               (long long)lowered, (long long)scoring, (long long)r->n_train_lowered,
               (long long)local, (long long)(lowered - scoring - r->n_train_lowered - local),
               (long long)parsed, (long long)seeds, (long long)local,
               (long long)(parsed - seeds - local));
    }
}

at_err tn__tune(const tn_tune_opts *o, tn_tune_task *tasks, int n_tasks, tn_tune_report *rep,
               char *errmsg, size_t errmsg_size)
{
    static run r; /* one run per process */
    struct sigaction sa, old_int, old_term;
    cpu_set_t kern_cpus, own_cpus; /* overlap: the kernels' CPUs; this thread's before */
    int pinned = 0;
    double t_int = 0; /* when the interrupt came */
    at_err err = AT_OK;
    char err2[512];
    memset(&r, 0, sizeof r);
    r.o = o;
    r.t0 = at_time_mono_s();
    r.tty = isatty(2) && !o->quiet;
    r.budget = o->trials;
    memset(rep, 0, sizeof *rep);
    if ((err = kn_target_parse(o->target, &r.target, errmsg, errmsg_size)) != AT_OK)
        return err;
    kn_target_hw(&r.target, &r.hw); /* a GPU's rules and limits for a cuda target */
    if (r.target.kind != KN_TARGET_CUDA)
        r.hw.layout_rewrite = o->layout_rewrite;
    uname(&r.uts);
    tn__build_device(&r.target, &r.uts, &r.build_dev);
    r.tasks = at_calloc((size_t)n_tasks, sizeof *r.tasks);
    if (r.tasks == NULL)
        return AT_ENOMEM;
    r.n_tasks = n_tasks;
    for (int i = 0; i < n_tasks; i++) {
        r.tasks[i].name = tasks[i].name;
        r.tasks[i].dag = ss_dag_ref(tasks[i].dag);
        r.tasks[i].weight = tasks[i].weight > 0 ? tasks[i].weight : 1;
        r.tasks[i].tag = tasks[i].tag;
        r.tasks[i].n_uses = tasks[i].uses ? tasks[i].n_uses : 0;
        r.tasks[i].uses = tasks[i].uses;
    }
    /* every page read before anything is written (REC_OPEN_VERIFY): a damaged store is
    ** refused with its name, as import and merge refuse it, instead of getting a 'failed'
    ** run row written into it */
    if ((err = rec_store_open(o->db, REC_OPEN_CREATE | REC_OPEN_VERIFY, &r.st, r.errmsg,
                              sizeof r.errmsg)) != AT_OK)
        goto out;
    {
        /* runs of this host left 'running' by a tuner killed with SIGKILL (issue 14, item 9):
        ** 'interrupted' now; a failure here costs nothing but the label */
        int n_reaped = 0;
        if (rec_run_reap(r.st, &n_reaped) == AT_OK && n_reaped > 0)
            say(&r, "%d run(s) left 'running' by a tuner that is gone: marked interrupted",
                n_reaped);
    }
    if ((err = rec_run_begin(r.st, o->cmdline ? o->cmdline : "tuner", TN_VERSION, &r.run_id,
                             r.uuid)) != AT_OK) {
        snprintf(r.errmsg, sizeof r.errmsg, "%s", rec_store_errmsg(r.st));
        goto out;
    }
    /* the buckets of models tuned for several lengths: 'tuner run --dim seq=77' finds them */
    for (int i = 0; i < o->n_buckets && err == AT_OK; i++)
        if ((err = rec_buckets_put(r.st, o->buckets[i].sig, o->buckets[i].dim,
                                   o->buckets[i].values, o->buckets[i].n,
                                   o->buckets[i].model)) != AT_OK)
            snprintf(r.errmsg, sizeof r.errmsg, "%s", rec_store_errmsg(r.st));
    if (err != AT_OK)
        goto out;
    for (int i = 0; i < n_tasks && err == AT_OK; i++)
        err = setup_task(&r, i);
    if (err != AT_OK)
        goto out;
    r.per_round = o->per_round;
    if (o->resume && r.total_trials > 0)
        say(&r, "resuming: %lld trials recorded already (of %lld)", (long long)r.total_trials,
            (long long)r.budget);
    /* the cost model: trained at once on what the store holds for this target (every task:
    ** what other models taught it too), this device's records first, else any device's
    ** (issue 16, item 3); the model saved in the store where it holds more records than
    ** --pretrain-max (training on all of them at every retrain would cost more than it
    ** teaches) or none of this target.  Trained on the records, later retrains keep
    ** learning from them; a saved model would only be a base that the run's own programs
    ** refine, and measured worse (docs/cost_model.md) */
    if (!o->no_model) {
        cm_params p;
        rec_filter f;
        cm_load_stats ls;
        int64_t n_rec = 0, n_tk = 0, n_dev = 0;
        at_err e = AT_ENOTFOUND;
        int warm;
        cm_params_default(&p);
        p.seed = o->seed;
        p.warmup = TN_COLD_ROUND;
        p.predict_threads = o->search.n_threads; /* the search's: nothing else runs then */
        if ((err = cm_model_new(&p, &r.model)) != AT_OK)
            goto out;
        warm = cm_model_params(r.model)->warmup;
        memset(&f, 0, sizeof f);
        f.target = r.target.text;
        f.device_key = o->device_key;
        if (rec_store_count(r.st, &n_rec, &n_tk, &n_dev, NULL) != AT_OK)
            n_rec = 0;
        /* fewer records than a warm-up round: random picks measure as well */
        if (n_rec >= warm && n_rec <= o->pretrain_max) {
            e = cm_model_pretrain(r.model, r.st, &f, &ls, err2, sizeof err2);
            if (e == AT_ENOTFOUND && o->device_key) {
                f.device_key = NULL;
                e = cm_model_pretrain(r.model, r.st, &f, &ls, err2, sizeof err2);
            }
        }
        if (e == AT_OK)
            say(&r, "cost model: trained at the start on %lld records of %d task%s in %s "
                    "(%s)", (long long)ls.n_used, ls.n_tasks, ls.n_tasks == 1 ? "" : "s",
                o->db, f.device_key ? "this device key" : "all devices of this target");
        else if (e != AT_ENOTFOUND)
            at_log_warn("tuner: cannot train the cost model on the recorded trials: %s", err2);
        if (e != AT_OK && cm_model_load_or_scratch(r.model, r.st, r.target.text))
            say(&r, "cost model: starting from the model saved in %s for this target "
                    "(trained on %lld records)", o->db, (long long)cm_model_n_records(r.model));
        else if (e != AT_OK && n_rec < warm)
            say(&r, "no cost model to start from in %s: the first round of each task picks "
                    "at random ('tuner dataset --corpus 200 --db %s' measures a start for "
                    "this device once: docs/cost_model.md)", o->db, o->db);
        /* a model that ranks from the start needs fewer programs of each task to find its
        ** good ones: half the rounds, so that twice as many go where the scheduler sees
        ** gains (MobileNetV2, 750 trials in a ResNet-18 store: docs/tuning.md, "Learn") */
        if (o->per_round_auto && cm_model_get_state(r.model) == CM_MODEL_TRAINED &&
            o->per_round > TN_WARM_MIN) {
            r.per_round = AT_MAX(TN_WARM_MIN, o->per_round / 2);
            say(&r, "rounds of %d programs (half of trials / tasks: the cost model starts "
                    "trained; --per-round sets them)", r.per_round);
        }
    }
    plan_warmup(&r);
    if (o->overlap && o->tracker == NULL && o->kernel_cpus > 0) {
        pinned = sched_getaffinity(0, sizeof own_cpus, &own_cpus) == 0;
        if ((err = split_cpus(&r, &kern_cpus)) != AT_OK)
            goto out;
    }
    if ((err = tn_builder_new(o->build_workers, o->build_timeout_ms, o->build_worker_exe,
                              &r.builder, r.errmsg, sizeof r.errmsg)) != AT_OK)
        goto out;
    if ((err = tn_fleet_open(&(tn_fleet_cfg){.tracker = o->tracker, .keys = o->keys,
                                              .n_keys = o->n_keys, .device_key = o->device_key,
                                              .priority = o->priority,
                                              .wait_timeout_ms = o->wait_timeout_s * 1000,
                                              .store = r.st,
                                              .embedded_threads = o->embedded_threads},
                             &r.fleet, r.errmsg, sizeof r.errmsg)) != AT_OK)
        goto out;
    if (o->overlap && o->tracker == NULL) {
        if (o->kernel_cpus > 0 && (err = pin_kernels(&r, &kern_cpus)) != AT_OK)
            goto out;
        if (o->kernel_cpus == 0)
            say(&r, "builds overlap the measuring on shared CPUs: timings are noisier "
                    "(--overlap-builds off keeps them apart)");
    }
    if (o->flush_cache != TN_FLUSH_OFF)
        say(&r, "timing with %s evicted from the caches before each repeat",
            o->flush_cache == TN_FLUSH_ALL ? "every input" : "the weights");
    if ((err = add_references(&r)) != AT_OK)
        goto out;
    r.lower0 = kn_lower_count();
    r.parse0 = ss_state_parse_count();
    for (int i = 0; i < n_tasks; i++) {
        r.search_lower0 += r.tasks[i].search->n_lowered;
        r.search_parse0 += r.tasks[i].search->n_parsed;
    }
    {
        int64_t n_to, n_crash;
        tn_builder_stats(r.builder, &r.built0, &n_to, &n_crash);
    }
    interrupted = 0;
    t_int = 0;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    /* any thread may take the signal (the embedded agent's and tracker's among them): its
    ** blocking calls resume rather than fail with EINTR */
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    /* the loop: keep up to 'depth' rounds in flight */
    for (;;) {
        int depth = o->tracker || o->overlap ? 2 : 1;
        if (r.err) {
            err = r.err;
            break;
        }
        while (!interrupted && r.n_rounds < depth && r.total_trials < r.budget) {
            int ti = pick_task(&r), before = r.n_rounds;
            if (ti < 0)
                break;
            if ((err = start_round(&r, ti)) != AT_OK)
                break;
            if (r.n_rounds == before && r.tasks[ti].dead == 0)
                break; /* nothing left in the budget */
        }
        if (err != AT_OK || r.n_rounds == 0)
            break;
        /* builds */
        if (tn_builder_pending(r.builder) > 0)
            tn_builder_poll(r.builder, 50, on_built, &r);
        for (int k = 0; k < r.n_rounds; k++)
            if (!r.rounds[k].submitted)
                submit_built(&r, &r.rounds[k]);
        /* measurements */
        if (tn_fleet_pending(r.fleet) > 0) {
            at_err e = tn_fleet_wait(r.fleet, tn_builder_pending(r.builder) > 0 ? 20 : 500,
                                     on_result, &r);
            if (e == AT_ETIMEDOUT) {
                say(&r, "giving up on the device key: %s", tn_fleet_status(r.fleet));
                e = tn_fleet_fail_pending(r.fleet, AT_MEASURE_DEVICE_LOST, tn_fleet_status(r.fleet),
                                          on_result, &r);
                err = AT_ETIMEDOUT;
                snprintf(r.errmsg, sizeof r.errmsg, "no agent served key '%s' within %d s",
                         o->device_key, o->wait_timeout_s);
            } else if (e != AT_OK) {
                err = e;
                snprintf(r.errmsg, sizeof r.errmsg, "measuring failed: %s",
                         tn_fleet_status(r.fleet));
            }
        }
        for (int k = 0; k < r.n_rounds;) {
            if (r.rounds[k].n_done >= r.rounds[k].n_jobs)
                finish_round(&r, k);
            else
                k++;
        }
        if (err != AT_OK)
            break;
        if (interrupted && r.n_rounds == 0)
            break;
        /* interrupted: what finishes within a quarter of a second is still stored, the rest
        ** is dropped (a kernel stuck in its build or run timeout does not hold the run) */
        if (interrupted && t_int == 0)
            t_int = at_time_mono_s();
        if (interrupted && at_time_mono_s() - t_int > 0.25)
            break;
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (r.model && cm_model_get_state(r.model) == CM_MODEL_TRAINED &&
        cm_model_save_store(r.model, r.st, r.target.text, err2, sizeof err2) != AT_OK)
        at_log_warn("tuner: cannot save the cost model: %s", err2);
    report(&r);
out:
    if (pinned)
        sched_setaffinity(0, sizeof own_cpus, &own_cpus);
    rep->total_trials = r.total_trials;
    rep->interrupted = interrupted;
    rep->n_tasks = n_tasks;
    for (int i = 0; i < n_tasks && i < TN_TUNE_MAX_REPORT; i++) {
        rep->best_cost[i] = r.tasks[i].best_cost;
        rep->trials[i] = r.tasks[i].n_trials;
        rep->first_round_best[i] = r.tasks[i].first_round_best;
        rep->warm[i] = r.tasks[i].warm;
        rep->seeded[i] = r.tasks[i].n_seeded;
    }
    if (err != AT_OK && errmsg)
        snprintf(errmsg, errmsg_size, "%s", r.errmsg[0] ? r.errmsg : at_strerror(err));
    tn_fleet_close(r.fleet);
    tn_builder_free(r.builder);
    if (r.st) {
        if (r.run_id)
            rec_run_end(r.st, r.run_id,
                        err != AT_OK ? "failed" : interrupted ? "interrupted" : "done");
        rec_store_close(r.st);
    }
    for (int i = 0; i < r.n_jobs; i++) {
        job_forget(&r.jobs[i]);
        kn_artifact_free(r.jobs[i].art);
    }
    at_free(r.jobs);
    at_free(r.samples);
    cm_model_free(r.model);
    for (int i = 0; i < n_tasks; i++) {
        tn__search_free(r.tasks[i].search);
        at_free(r.tasks[i].first_best);
        ss_dag_unref(r.tasks[i].dag);
        at_free(r.tasks[i].dag_text);
    }
    at_free(r.tasks);
    return err;
}
