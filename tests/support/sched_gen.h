/* tests/support/sched_gen.h -- random but valid schedules for tests (prefix sg_).
**
** Applies a random sequence of steps to the naive state of a DAG: inlining, compute_at at
** random loops, cache_write, rfactor, splits (divisible or not), reorders, fuses and
** annotations.  Steps the state refuses are skipped (that exercises the validation); the
** result is a state that the schedule code accepted, not necessarily one that lowers. */
#ifndef SG_SCHED_GEN_H
#define SG_SCHED_GEN_H

#include "schedule_space/schedule_space.h"

typedef struct sg_stats {
    int applied;  /* steps accepted */
    int refused;  /* steps refused with AT_ESCHED */
} sg_stats;

/* On AT_OK the caller owns *out. */
at_err sg_random_state(ss_dag *dag, at_rng *rng, ss_state **out, sg_stats *stats);

#endif
