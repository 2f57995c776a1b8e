/* models/md_replay.c -- the replay check handed to the records store: a record is used only
** if its state still replays on its task's DAG (the schedule code may have changed since
** it was measured).  The last parsed DAG is kept (per thread), since records come grouped
** by task. */
#include "models/models.h"

#include <stdio.h>
#include <string.h>

#include "schedule_space/schedule_space.h"

static _Thread_local struct {
    char *text;
    ss_dag *dag;
} cache;

static void cache_clear(void)
{
    at_free(cache.text);
    ss_dag_unref(cache.dag);
    cache.text = NULL;
    cache.dag = NULL;
}

/* The cached DAG of 'dag_text', parsed when it is another text than the last one. */
static at_err cached_dag(const char *dag_text, char *errmsg, size_t n)
{
    ss_dag *dag;
    char msg[512];
    at_err err;
    if (cache.text != NULL && strcmp(cache.text, dag_text) == 0)
        return AT_OK;
    cache_clear();
    err = ss_dag_parse(dag_text, strlen(dag_text), &dag, msg, sizeof msg);
    if (err != AT_OK) {
        if (errmsg && n)
            snprintf(errmsg, n, "the task's DAG does not parse: %s", msg);
        return err == AT_ENOMEM ? err : AT_ESCHED;
    }
    cache.text = at_strdup(dag_text);
    if (cache.text == NULL) {
        ss_dag_unref(dag);
        return AT_ENOMEM;
    }
    cache.dag = dag;
    return AT_OK;
}

at_err md_task_check(void *ctx, const char *dag_text, char *key, double *flops, char *errmsg,
                     size_t n)
{
    at_err err;
    (void)ctx;
    if (errmsg && n)
        errmsg[0] = 0;
    if ((err = cached_dag(dag_text, errmsg, n)) != AT_OK)
        return err;
    memcpy(key, cache.dag->key, sizeof cache.dag->key);
    *flops = cache.dag->flops;
    return AT_OK;
}

at_err md_replay_check(void *ctx, const char *dag_text, const char *state_json, char *errmsg,
                       size_t n)
{
    ss_state *st = NULL;
    char msg[512];
    at_err err;
    (void)ctx;
    if (errmsg && n)
        errmsg[0] = 0;
    if (dag_text == NULL || state_json == NULL) {
        /* a release of the cache: md_replay_check(NULL, NULL, NULL, NULL, 0) */
        cache_clear();
        return AT_OK;
    }
    if ((err = cached_dag(dag_text, errmsg, n)) != AT_OK)
        return err;
    err = ss_state_from_json(cache.dag, state_json, strlen(state_json), &st, msg, sizeof msg);
    if (err != AT_OK) {
        if (errmsg && n)
            snprintf(errmsg, n, "%s", msg);
        return err == AT_ENOMEM ? err : AT_ESCHED;
    }
    ss_state_free(st);
    return AT_OK;
}
