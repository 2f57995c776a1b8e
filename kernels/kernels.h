/* kernels/kernels.h -- the operator library, lowering of schedule states to loop IR, and
** code generation (prefix kn_).  The runtime half that devices link is kernels_rt.h.
**
**   ss_dag *dag;  kn_op_build("matmul:M=1024,N=1024,K=1024", &dag, err, sizeof err);
**   ... schedule a state (schedule_space.h) ...
**   kn_lower(state, &ir, err, sizeof err);                     loop IR
**   kn_build(ir, target, &artifact, err, sizeof err);          object code + signature
*/
#ifndef KN_KERNELS_H
#define KN_KERNELS_H

#include "common/common.h"
#include "kernels/kernels_rt.h"
#include "schedule_space/schedule_space.h"

/* ---- operator library (kn_ops.c) ---------------------------------------------------- */

/* One library operator: its name, parameters with defaults, and a one-line summary. */
typedef struct kn_op_info {
    const char *name;    /* "matmul" */
    const char *params;  /* "M=1024,N=1024,K=1024,tb=0" -- every parameter with its default */
    const char *summary; /* one line for --help and docs/operators.md */
} kn_op_info;

/* The table of library operators, terminated by an entry with name NULL. */
const kn_op_info *kn_op_list(void);

/* Build the DAG of an operator spec "NAME:KEY=VALUE,KEY=VALUE..." (parameters not given
** take their defaults; "NAME" alone is all defaults).  On AT_OK the caller owns *out
** (ss_dag_unref).  On AT_EINVAL 'errmsg' names the spec and the problem (unknown
** operator, unknown parameter, bad value, inconsistent shapes). */
at_err kn_op_build(const char *spec, ss_dag **out, char *errmsg, size_t errmsg_size);

/* The DAG text of a spec (what kn_op_build parses); caller frees with at_free. */
at_err kn_op_text(const char *spec, char **out, char *errmsg, size_t errmsg_size);

#endif /* KN_KERNELS_H */
