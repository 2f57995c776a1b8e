/* tests/fleet/fleet_results.h -- collecting a tuner-side fleet's results in tests (static
** functions): tn_fleet_wait(f, ms, ft_on_result, &got) appends each result to a ft_got;
** ft_find gives the index of a job's result, or -1. */
#ifndef FLEET_RESULTS_H
#define FLEET_RESULTS_H

#include <stdio.h>
#include <string.h>

#include "tuner/tuner.h"

typedef struct ft_got {
    int n;
    char ids[64][64];
    int status[64];
    char text[64][512];
    double cost[64]; /* the first repeat's seconds per run, -1 when none */
    int n_costs[64];
} ft_got;

__attribute__((unused)) static void ft_on_result(void *ctx, const tn_fleet_job *job,
                                                 const at_wire_result *r)
{
    ft_got *g = ctx;
    (void)job;
    if (g->n >= 64) return;
    snprintf(g->ids[g->n], sizeof g->ids[0], "%s", r->id);
    g->status[g->n] = r->status;
    snprintf(g->text[g->n], sizeof g->text[0], "%s", r->error ? r->error : "");
    g->cost[g->n] = r->n_costs > 0 ? r->costs[0] : -1;
    g->n_costs[g->n] = r->n_costs;
    g->n++;
}

__attribute__((unused)) static int ft_find(const ft_got *g, const char *id)
{
    for (int i = 0; i < g->n; i++)
        if (strcmp(g->ids[i], id) == 0) return i;
    return -1;
}

#endif /* FLEET_RESULTS_H */
