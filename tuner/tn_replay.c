/* tuner/tn_replay.c -- the replay check handed to the records store.
**
** Interim: it checks the form of a state ({"v":1,"steps":[[tag, ...], ...]}), which is
** what can be checked without the schedule module.  When ss_state_from_json lands, this
** function parses the DAG text and replays the steps instead; its callers do not change. */
#include "tuner/tuner.h"

#include <stdio.h>
#include <string.h>

at_err tn_replay_check(void *ctx, const char *dag_text, const char *state_json, char *errmsg,
                       size_t n)
{
    at_arena a;
    at_json *j;
    const at_json *v, *steps;
    char jerr[200];
    at_err err = AT_ESCHED;

    (void)ctx;
    (void)dag_text;
    if (errmsg && n)
        errmsg[0] = 0;
    at_arena_init(&a, 0);
    if (at_json_parse(&a, state_json, strlen(state_json), &j, jerr, sizeof jerr) != AT_OK) {
        snprintf(errmsg, n, "the state is not JSON: %s", jerr);
        goto out;
    }
    if (j->type != AT_JSON_OBJ) {
        snprintf(errmsg, n, "the state is not a JSON object");
        goto out;
    }
    v = at_json_get(j, "v");
    if (v == NULL || v->type != AT_JSON_NUM || !v->is_int || v->i != 1) {
        snprintf(errmsg, n, "the state has no \"v\":1");
        goto out;
    }
    steps = at_json_get(j, "steps");
    if (steps == NULL || steps->type != AT_JSON_ARR) {
        snprintf(errmsg, n, "the state has no \"steps\" array");
        goto out;
    }
    for (int i = 0; i < steps->n; i++) {
        const at_json *s = steps->items[i];
        if (s->type != AT_JSON_ARR || s->n < 1 || s->items[0]->type != AT_JSON_STR) {
            snprintf(errmsg, n, "step %d is not [tag, ...]", i);
            goto out;
        }
    }
    err = AT_OK;
out:
    at_arena_fini(&a);
    return err;
}
