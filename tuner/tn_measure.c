/* tuner/tn_measure.c -- measuring given states through the fleet, outside a tuning run:
** 'tuner measure', 'tuner dataset' and the cost model's tests and benchmarks.  The same
** parts as a tuning run (tn_builder for the builds, tn_fleet for checking and timing on an
** agent, the store for every result), so that there is one way a kernel gets measured.
** Also the pieces a tuning run shares with it: the task's reference and the record of a
** build failure. */
#include "tuner/tuner_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include "kernels/kernels.h"
#include "schedule_space/schedule_space.h"

struct tn_measurer {
    tn_measure_cfg cfg;
    kn_target target;
    rec_store *st;
    tn_fleet *fleet;
    tn_builder *builder;
    int64_t run_id;
    char uuid[REC_UUID_LEN + 1];
    int64_t n_jobs; /* jobs of this run so far: the next job's number and trial */
    struct utsname uts;
    rec_device build_dev;
    /* the task of the last batch */
    char key[REC_KEY_LEN + 1];
    int64_t task_id;
    char *dag_text;
    uint8_t ref_id[AT_WIRE_REFID_BYTES];
};

/* ---- shared with the tuning run ---------------------------------------------------------- */

void tn__build_device(const kn_target *t, const struct utsname *uts, rec_device *d)
{
    memset(d, 0, sizeof *d);
    d->arch = t->kind == KN_TARGET_CUDA ? t->triple : t->is_aarch64 ? "aarch64" : "x86_64";
    d->model = "(build failed on the tuner host: never measured)";
    d->n_cores = 1;
    d->os = uts->release;
    d->driver = "";
}

at_err tn__add_reference(tn_fleet *f, ss_dag *dag, const kn_target *t,
                         uint8_t id[AT_WIRE_REFID_BYTES], char *errmsg, size_t errmsg_size)
{
    ss_state *naive = NULL;
    kn_artifact *a = NULL;
    at_err err = t->kind == KN_TARGET_CUDA ? kn_gpu_naive(dag, 128, &naive, errmsg, errmsg_size)
                                           : ss_state_new(dag, &naive);
    if (err == AT_OK)
        err = kn_build_state(naive, t, "at_ref", &a, errmsg, errmsg_size);
    if (err == AT_OK)
        err = tn_fleet_add_ref(f, a, id);
    kn_artifact_free(a);
    ss_state_free(naive);
    return err;
}

at_err tn__record_build_failure(rec_store *st, const rec_device *dev, const tn_fleet_job *j,
                                const tn_build_res *b, int *status)
{
    double fail = AT_MEASURE_FAIL_COST;
    rec_result row;
    *status = b->timed_out ? AT_MEASURE_BUILD_TIMEOUT : AT_MEASURE_COMPILE_HOST;
    memset(&row, 0, sizeof row);
    row.task_id = j->task_id;
    row.job_id = j->w.id;
    row.state = j->state;
    row.costs = &fail;
    row.n_costs = 1;
    row.status = *status;
    row.error_text = b->errmsg;
    row.device = dev;
    row.agent = "tuner-build";
    row.tuner_version = TN_VERSION;
    row.run_id = j->run_id;
    row.trial = j->trial;
    return rec_put(st, &row, 1, NULL) == AT_OK ? AT_OK : AT_EIO;
}

/* ---- the measurer ---------------------------------------------------------------------- */

at_err tn_measurer_open(rec_store *st, const tn_measure_cfg *cfg, tn_measurer **out,
                        char *errmsg, size_t errmsg_size)
{
    tn_measurer *m = at_calloc(1, sizeof *m);
    at_err err;
    *out = NULL;
    if (m == NULL)
        return AT_ENOMEM;
    m->cfg = *cfg;
    m->st = st;
    if (m->cfg.target == NULL) m->cfg.target = "llvm -mcpu=native";
    if (m->cfg.device_key == NULL) m->cfg.device_key = "local";
    if (m->cfg.priority <= 0) m->cfg.priority = 1;
    if (m->cfg.wait_timeout_s <= 0) m->cfg.wait_timeout_s = 600;
    if (m->cfg.number <= 0) m->cfg.number = 1;
    if (m->cfg.repeat <= 0) m->cfg.repeat = 3;
    if (m->cfg.timeout_ms <= 0) m->cfg.timeout_ms = 10000;
    if (m->cfg.build_timeout_ms <= 0) m->cfg.build_timeout_ms = 60000;
    if (m->cfg.command_line == NULL) m->cfg.command_line = "tuner measure";
    if (m->cfg.repeat > AT_WIRE_MAX_COSTS) {
        snprintf(errmsg, errmsg_size, "at most %d repeats, not %d", AT_WIRE_MAX_COSTS,
                 m->cfg.repeat);
        at_free(m);
        return AT_EINVAL;
    }
    uname(&m->uts);
    if ((err = kn_target_parse(m->cfg.target, &m->target, errmsg, errmsg_size)) != AT_OK) {
        at_free(m);
        return err;
    }
    tn__build_device(&m->target, &m->uts, &m->build_dev);
    if ((err = rec_run_begin(st, m->cfg.command_line, TN_VERSION, &m->run_id, m->uuid)) !=
        AT_OK) {
        snprintf(errmsg, errmsg_size, "%s", rec_store_errmsg(st));
        at_free(m);
        return err;
    }
    err = tn_builder_new(m->cfg.build_workers, m->cfg.build_timeout_ms, m->cfg.build_worker_exe,
                         &m->builder, errmsg, errmsg_size);
    if (err == AT_OK)
        err = tn_fleet_open(&(tn_fleet_cfg){.tracker = m->cfg.tracker,
                                            .keys = m->cfg.tracker ? m->cfg.keys : NULL,
                                            .n_keys = m->cfg.tracker ? m->cfg.n_keys : 0,
                                            .device_key = m->cfg.device_key,
                                            .priority = m->cfg.priority,
                                            .wait_timeout_ms = m->cfg.wait_timeout_s * 1000,
                                            .store = st,
                                            .embedded_threads = m->cfg.embedded_threads},
                            &m->fleet, errmsg, errmsg_size);
    if (err != AT_OK) {
        tn_measurer_close(m, 1);
        return err;
    }
    *out = m;
    return AT_OK;
}

const char *tn_measurer_uuid(const tn_measurer *m)
{
    return m->uuid;
}

void tn_measurer_close(tn_measurer *m, int failed)
{
    if (m == NULL)
        return;
    tn_fleet_close(m->fleet);
    tn_builder_free(m->builder);
    rec_run_end(m->st, m->run_id, failed ? "failed" : "done");
    at_free(m->dag_text);
    at_free(m);
}

/* The task of 'dag' in the store and its reference at the fleet (once per task in a row). */
static at_err use_task(tn_measurer *m, ss_dag *dag, char *errmsg, size_t errmsg_size)
{
    at_buf text;
    at_err err;
    if (m->dag_text && strcmp(m->key, dag->key) == 0)
        return AT_OK;
    at_free(m->dag_text);
    m->dag_text = NULL;
    m->key[0] = 0;
    at_buf_init(&text);
    ss_dag_print(dag, &text);
    if (text.err) {
        at_buf_fini(&text);
        return AT_ENOMEM;
    }
    m->dag_text = at_buf_take(&text);
    if ((err = rec_task_add(m->st,
                            &(rec_task){dag->key, m->target.text, m->cfg.device_key,
                                        m->dag_text, dag->flops},
                            &m->task_id)) != AT_OK) {
        snprintf(errmsg, errmsg_size, "%s", rec_store_errmsg(m->st));
        return err;
    }
    if (!m->cfg.no_check &&
        (err = tn__add_reference(m->fleet, dag, &m->target, m->ref_id, errmsg, errmsg_size)) !=
            AT_OK)
        return err;
    snprintf(m->key, sizeof m->key, "%s", dag->key);
    return AT_OK;
}

typedef struct mbatch {
    tn_measurer *m;
    int n;
    tn_fleet_job *jobs;  /* [n]: ids, states, trials (the artifact filled once built) */
    char (*ids)[64];
    kn_artifact **art;
    tn_measure_res *res;
    at_err err;
} mbatch;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void on_result(void *ctx, const tn_fleet_job *fj, const at_wire_result *r)
{
    mbatch *b = ctx;
    tn_measure_res *res;
    double c[AT_WIRE_MAX_COSTS];
    if (fj->index < 0 || fj->index >= b->n)
        return;
    res = &b->res[fj->index];
    res->status = r->status;
    snprintf(res->error, sizeof res->error, "%s", r->error ? r->error : "");
    if (r->status != AT_MEASURE_NO_ERROR || r->n_costs <= 0)
        return;
    memcpy(c, r->costs, (size_t)r->n_costs * sizeof *c);
    qsort(c, (size_t)r->n_costs, sizeof *c, cmp_double);
    res->n_costs = r->n_costs;
    res->min_s = c[0];
    res->median_s = r->median_s > 0 ? r->median_s : c[r->n_costs / 2];
    res->mean_s = 0;
    for (int i = 0; i < r->n_costs; i++)
        res->mean_s += c[i];
    res->mean_s /= r->n_costs;
}

static void on_built(void *ctx, const tn_build_res *r)
{
    mbatch *b = ctx;
    int status;
    if (r->id < 0 || r->id >= b->n) {
        kn_artifact_free(r->art);
        return;
    }
    if (r->err == AT_OK) {
        b->art[r->id] = r->art;
        return;
    }
    if (tn__record_build_failure(b->m->st, &b->m->build_dev, &b->jobs[r->id], r, &status) !=
        AT_OK)
        b->err = AT_EIO;
    b->res[r->id].status = status;
    snprintf(b->res[r->id].error, sizeof b->res[r->id].error, "%.255s", r->errmsg);
}

at_err tn_measurer_run(tn_measurer *m, ss_dag *dag, const ss_state *const *states, int n,
                       tn_measure_res *res, char *errmsg, size_t errmsg_size)
{
    mbatch b;
    at_wire_arg(*args)[64] = NULL;
    int n_sub = 0;
    at_err err;
    if (errmsg && errmsg_size)
        errmsg[0] = 0;
    for (int i = 0; i < n; i++) {
        memset(&res[i], 0, sizeof res[i]);
        res[i].status = AT_MEASURE_UNKNOWN_ERROR;
        res[i].mean_s = res[i].min_s = res[i].median_s = AT_MEASURE_FAIL_COST;
        snprintf(res[i].error, sizeof res[i].error, "not measured: the batch stopped first");
    }
    if (n <= 0)
        return AT_OK;
    if ((err = use_task(m, dag, errmsg, errmsg_size)) != AT_OK)
        return err;
    memset(&b, 0, sizeof b);
    b.m = m;
    b.n = n;
    b.res = res;
    b.jobs = at_calloc((size_t)n, sizeof *b.jobs);
    b.ids = at_calloc((size_t)n, sizeof *b.ids);
    b.art = at_calloc((size_t)n, sizeof *b.art);
    args = at_calloc((size_t)n, sizeof *args);
    if (!b.jobs || !b.ids || !b.art || !args) {
        err = AT_ENOMEM;
        goto out;
    }
    /* build every state (the builders are idle while the agent times them) */
    for (int i = 0; i < n && err == AT_OK; i++) {
        tn_fleet_job *j = &b.jobs[i];
        at_buf json;
        at_buf_init(&json);
        ss_state_to_json(states[i], &json);
        if (json.err) {
            at_buf_fini(&json);
            err = AT_ENOMEM;
            break;
        }
        snprintf(b.ids[i], sizeof b.ids[i], "%s-%lld", m->uuid, (long long)(m->n_jobs + i));
        j->w.id = b.ids[i];
        j->task_id = m->task_id;
        j->state = at_buf_take(&json);
        j->run_id = m->run_id;
        j->trial = m->n_jobs + i;
        j->index = i;
        err = tn_builder_submit(m->builder, &(tn_build_req){i, m->target.text, m->dag_text,
                                                             j->state, NULL});
    }
    m->n_jobs += n;
    while (err == AT_OK && tn_builder_pending(m->builder) > 0)
        err = tn_builder_poll(m->builder, 100, on_built, &b);
    if (err == AT_OK && b.err != AT_OK) {
        err = b.err;
        snprintf(errmsg, errmsg_size, "cannot record a build failure: %s",
                 rec_store_errmsg(m->st));
    }
    if (err != AT_OK)
        goto out;
    /* then time the built ones */
    for (int i = 0; i < n; i++) {
        tn_fleet_job *j = &b.jobs[i];
        if (b.art[i] == NULL)
            continue;
        kn_artifact_to_wire(b.art[i], &j->w.art, args[i]);
        at_wire_settings_default(&j->w.run);
        j->w.run.number = m->cfg.number;
        j->w.run.repeat = m->cfg.repeat;
        j->w.run.min_repeat_ms = m->cfg.min_repeat_ms;
        j->w.run.timeout_ms = m->cfg.timeout_ms;
        j->w.run.cutoff_s = m->cfg.cutoff_s > 0 ? m->cfg.cutoff_s : 0;
        j->w.seed = 1;
        j->w.has_ref = !m->cfg.no_check;
        memcpy(j->w.ref, m->ref_id, sizeof j->w.ref);
        if ((err = tn_fleet_submit(m->fleet, j, 1)) != AT_OK) {
            snprintf(errmsg, errmsg_size, "cannot submit a job: %s", at_strerror(err));
            goto out;
        }
        n_sub++;
    }
    {
        double last = at_time_mono_s();
        while (tn_fleet_pending(m->fleet) > 0) {
            at_err e = tn_fleet_wait(m->fleet, 1000, on_result, &b);
            if (e == AT_ETIMEDOUT) {
                snprintf(errmsg, errmsg_size, "%s", tn_fleet_status(m->fleet));
                tn_fleet_fail_pending(m->fleet, AT_MEASURE_DEVICE_LOST, tn_fleet_status(m->fleet),
                                      on_result, &b);
                err = AT_ETIMEDOUT;
                break;
            }
            if (e != AT_OK) {
                snprintf(errmsg, errmsg_size, "measuring failed: %s", tn_fleet_status(m->fleet));
                err = e;
                break;
            }
            if (!m->cfg.quiet && at_time_mono_s() - last > 5) {
                fprintf(stderr, "tuner: %s\n", tn_fleet_status(m->fleet));
                last = at_time_mono_s();
            }
        }
    }
out:
    (void)n_sub;
    for (int i = 0; b.jobs && i < n; i++)
        at_free((char *)b.jobs[i].state);
    for (int i = 0; b.art && i < n; i++)
        kn_artifact_free(b.art[i]);
    at_free(b.jobs);
    at_free(b.ids);
    at_free(b.art);
    at_free(args);
    return err;
}

/* ---- random data sets -------------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

at_err tn_dataset_random(tn_measurer *m, ss_dag *dag, int n, uint64_t seed,
                         tn_dataset_stats *stats, char *errmsg, size_t errmsg_size)
{
    enum { CHUNK = 64 };
    ss_space *sp = NULL;
    ss_hw hw;
    at_rng rng;
    ss_state *batch[CHUNK];
    tn_measure_res res[CHUNK];
    uint64_t *seen = NULL;
    int n_seen = 0, attempts = 0, n_done = 0, exhausted = 0;
    tn_dataset_stats local;
    double t0 = at_time_mono_s();
    at_err err = AT_OK;
    if (stats == NULL)
        stats = &local;
    memset(stats, 0, sizeof *stats);
    if (errmsg && errmsg_size)
        errmsg[0] = 0;
    if (n < 0)
        return AT_EINVAL;
    for (int i = 0; i < CHUNK; i++)
        batch[i] = NULL;
    kn_target_hw(&m->target, &hw);
    if ((seen = at_malloc((size_t)(n + 1) * sizeof *seen)) == NULL) {
        err = AT_ENOMEM;
        goto out;
    }
    if ((err = ss_space_new(dag, &hw, NULL, &sp, errmsg, errmsg_size)) != AT_OK)
        goto out;
    at_rng_seed(&rng, seed);
    while (n_done < n && !exhausted && err == AT_OK) {
        int nb = 0;
        /* a chunk of distinct new states */
        while (nb < CHUNK && n_done + nb < n) {
            ss_state *s = NULL;
            uint64_t h;
            if (++attempts > 20 * n + 100) {
                exhausted = 1; /* the space has fewer distinct states than asked for */
                break;
            }
            err = ss_space_sample(sp, &rng, &s);
            if (err == AT_ESCHED) {
                err = AT_OK;
                continue;
            }
            if (err != AT_OK)
                break;
            h = ss_state_hash(s); /* distinct programs, as the search tells them apart */
            if (bsearch(&h, seen, (size_t)n_seen, sizeof *seen, cmp_u64)) {
                stats->n_duplicate++;
                ss_state_free(s);
                continue;
            }
            seen[n_seen++] = h;
            qsort(seen, (size_t)n_seen, sizeof *seen, cmp_u64);
            batch[nb++] = s;
        }
        if (err == AT_OK && nb > 0)
            err = tn_measurer_run(m, dag, (const ss_state *const *)batch, nb, res, errmsg,
                                  errmsg_size);
        for (int i = 0; i < nb; i++) {
            if (err == AT_OK || err == AT_ETIMEDOUT) {
                stats->n_measured++;
                stats->n_failed += res[i].status != AT_MEASURE_NO_ERROR;
            }
            ss_state_free(batch[i]);
            batch[i] = NULL;
        }
        n_done += nb;
    }
out:
    stats->seconds = at_time_mono_s() - t0;
    ss_space_free(sp);
    at_free(seen);
    for (int i = 0; i < CHUNK; i++)
        ss_state_free(batch[i]);
    return err;
}

/* ---- the pre-training corpus ------------------------------------------------------------- */

/* Workloads common in vision and language models, each quick to measure (at most about a
** GFLOP), none of them the benchmarks' own (bench_cost_model's matmul 1024^3 and ResNet
** conv2d 64->64 56x56): the layers of ResNet-18 and MobileNetV2 at other widths, and the
** projections and attention products of a BERT-base layer.  docs/cost_model.md lists them
** with why; changing the list changes what a store's corpus holds, so append only. */
static const char *const corpus_specs[] = {
    "conv2d:N=1,C=64,H=56,W=56,K=128,R=3,S=3,pad=1,stride=2",
    "conv2d:N=1,C=128,H=28,W=28,K=128,R=3,S=3,pad=1",
    "conv2d:N=1,C=128,H=28,W=28,K=256,R=3,S=3,pad=1,stride=2",
    "conv2d:N=1,C=256,H=14,W=14,K=256,R=3,S=3,pad=1",
    "conv2d:N=1,C=512,H=7,W=7,K=512,R=3,S=3,pad=1",
    "conv2d:N=1,C=64,H=56,W=56,K=128,R=1,S=1,stride=2",
    "conv2d:N=1,C=3,H=224,W=224,K=64,R=7,S=7,pad=3,stride=2",
    "conv2d:N=1,C=24,H=56,W=56,K=144,R=1,S=1",
    "conv2d:N=1,C=144,H=56,W=56,K=24,R=1,S=1",
    "depthwise_conv2d:N=1,C=144,H=56,W=56,R=3,S=3,pad=1",
    "depthwise_conv2d:N=1,C=96,H=112,W=112,R=3,S=3,pad=1,stride=2",
    "matmul:M=512,N=512,K=512",
    "dense:M=128,N=768,K=768",
    "dense:M=128,N=3072,K=768",
    "matmul:M=256,N=2048,K=512",
    "batch_matmul:B=12,M=128,N=128,K=64",
};

int tn_corpus_count(void)
{
    return (int)AT_ARRAY_LEN(corpus_specs);
}

const char *tn_corpus_spec(int i)
{
    return i >= 0 && i < tn_corpus_count() ? corpus_specs[i] : NULL;
}

at_err tn_dataset_corpus(tn_measurer *m, int n, uint64_t seed, const char *const *skip_keys,
                         int n_skip, tn_corpus_stats *stats, char *errmsg, size_t errmsg_size)
{
    tn_corpus_stats local;
    double t0 = at_time_mono_s();
    at_err err = AT_OK;
    if (stats == NULL)
        stats = &local;
    memset(stats, 0, sizeof *stats);
    if (errmsg && errmsg_size)
        errmsg[0] = 0;
    if (n < 0)
        return AT_EINVAL;
    for (int w = 0; w < tn_corpus_count() && err == AT_OK; w++) {
        ss_dag *dag = NULL;
        rec_filter f;
        rec_iter *it = NULL;
        const rec_record *r;
        int64_t have = 0;
        int skip = 0;
        tn_dataset_stats s;
        char e2[512];
        if ((err = kn_op_build(corpus_specs[w], &dag, e2, sizeof e2)) != AT_OK) {
            if (errmsg)
                snprintf(errmsg, errmsg_size, "corpus workload %s: %s", corpus_specs[w], e2);
            break;
        }
        for (int k = 0; k < n_skip; k++)
            skip |= skip_keys[k] && strcmp(skip_keys[k], dag->key) == 0;
        if (skip) {
            stats->n_skipped++;
            ss_dag_unref(dag);
            continue;
        }
        /* what the store already holds of it, here: the corpus tops up */
        f.workload_key = dag->key;
        f.target = m->target.text;
        f.device_key = m->cfg.device_key ? m->cfg.device_key : "local";
        f.fingerprint = NULL;
        if (rec_iter_open(m->st, &f, REC_ORDER_ID, &it) != AT_OK) {
            if (errmsg)
                snprintf(errmsg, errmsg_size, "%s", rec_store_errmsg(m->st));
            ss_dag_unref(dag);
            err = AT_EIO;
            break;
        }
        while (rec_iter_next(it, &r) == AT_OK && r)
            have++;
        rec_iter_close(it);
        stats->n_workloads++;
        if (have >= n) {
            stats->n_present += (int)have;
            ss_dag_unref(dag);
            continue;
        }
        stats->n_present += (int)have;
        /* a different sample per workload and per top-up */
        err = tn_dataset_random(m, dag, (int)(n - have),
                                seed + 1000003u * (uint64_t)(w + 1) + (uint64_t)have, &s,
                                errmsg, errmsg_size);
        stats->n_measured += s.n_measured;
        stats->n_failed += s.n_failed;
        if (!m->cfg.quiet)
            fprintf(stderr, "tuner: corpus %d/%d %s: %d measured (%d failed, %lld there "
                    "before) in %.1f s\n", w + 1, tn_corpus_count(), corpus_specs[w],
                    s.n_measured, s.n_failed, (long long)have, s.seconds);
        ss_dag_unref(dag);
    }
    stats->seconds = at_time_mono_s() - t0;
    return err;
}
