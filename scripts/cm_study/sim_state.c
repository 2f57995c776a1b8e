/* scripts/cm_study/sim_state.c -- issue 16 study, not the product: the product's cache
** simulation (cost_model/cm_sim.c, cm_sim_run) run on one schedule state at a cap of your
** choice, with the host's caches, printing each count and its rate per store.  It showed
** that the bench's cap of 3e6 accesses hides matmul 1024^3 programs that stream B from L3
** (docs/cost_model.md, "Zen 5, 2026-12-07/08 (eighth session ...)").
** Build (from the repository root, after 'make'):
**   L=build/rel/lib; cc -O2 -std=c11 -D_GNU_SOURCE -I. -o /tmp/sim_state \
**     scripts/cm_study/sim_state.c $L/libcost_model.a $L/librecords.a $L/libkernels.a \
**     $L/libkernels_rt.a $L/libschedule_space.a $L/libcommon.a -L/usr/lib/llvm-16/lib \
**     -lLLVM-16 -lxgboost -lsqlite3 -lmbedcrypto -lmsgpackc -lm -lpthread -ldl
** Usage: sim_state SPEC STATE_JSON_FILE CAP   (e.g. matmul:M=1024,N=1024,K=1024 s.json 3e6) */
#include "cost_model/cost_model.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv)
{
    char err[512];
    if (argc != 4) {
        fprintf(stderr, "usage: sim_state SPEC STATE_JSON_FILE CAP\n");
        return 2;
    }
    ss_dag *dag; ss_state *st; kn_ir *ir; kn_target t;
    if (kn_op_build(argv[1], &dag, err, sizeof err) != AT_OK) { fprintf(stderr, "%s\n", err); return 1; }
    FILE *f = fopen(argv[2], "r");
    if (!f) { perror(argv[2]); return 1; }
    static char js[65536]; size_t n = fread(js, 1, sizeof js - 1, f); js[n] = 0; fclose(f);
    while (n && (js[n-1] == '\n')) js[--n] = 0;
    if (ss_state_from_json(dag, js, n, &st, err, sizeof err) != AT_OK) { fprintf(stderr, "state: %s\n", err); return 1; }
    if (kn_lower(st, &ir, err, sizeof err) != AT_OK) { fprintf(stderr, "lower: %s\n", err); return 1; }
    kn_target_host(&t);
    cm_sim_params p; cm_sim_params_init(&p, &t); p.cap = atof(argv[3]);
    printf("l1 %d l2 %d threads %d cap %g\n", (int)p.l1_bytes, (int)p.l2_bytes, p.n_threads, p.cap);
    double c[CM_SIM_N];
    if (cm_sim_run(ir, &p, c, err, sizeof err) != AT_OK) { fprintf(stderr, "sim: %s\n", err); return 1; }
    const char *nm[] = {"stmts","lines","l1","l1_far","l2","l2_far","tlb","store_lines"};
    for (int i = 0; i < CM_SIM_N; i++) printf("%s %.4g  per store %.4g\n", nm[i], c[i], c[i] / c[0]);
    return 0;
}
