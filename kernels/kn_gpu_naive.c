/* kernels/kn_gpu_naive.c -- the naive GPU schedule: the reference GPU agents check
** candidates against, and a schedule that is valid for any DAG.
**
** Every compute stage stays at root (one launch each, tensors between launches in the
** workspace); its spatial loops are fused and split into blocks of 'threads' threads, one
** thread per output element; reductions run sequentially within the thread.  A stage
** without spatial axes (a scalar) runs on one thread. */
#include "kernels_int.h"

at_err kn_gpu_naive(ss_dag *dag, int threads, ss_state **out, char *errmsg, size_t errmsg_size)
{
    ss_state *st;
    at_err err;
    *out = NULL;
    if (threads < 1 || threads > 1024)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL, "threads per block must be 1 to 1024");
    if ((err = ss_state_new(dag, &st)) != AT_OK)
        return err;
    for (int s = 0; s < st->n_stages && err == AT_OK; s++) {
        const ss_op *op = &st->dag->ops[s];
        int64_t fuse[SS_MAX_AXES], len = threads, extent;
        if (op->kind != SS_OP_COMPUTE || op->n_axes == 0)
            continue;
        for (int a = 0; a < op->n_axes; a++)
            fuse[a] = a;
        if (op->n_axes > 1 && (err = ss_state_fuse(st, s, op->n_axes, fuse, errmsg,
                                                   errmsg_size)) != AT_OK)
            break;
        extent = st->stages[s].ivars[st->stages[s].leaves[0]].extent;
        if (extent <= threads) {
            err = ss_state_annotate(st, s, 0, SS_ANN_THREAD_X, errmsg, errmsg_size);
            continue;
        }
        if ((err = ss_state_split(st, s, 0, 1, &len, errmsg, errmsg_size)) != AT_OK ||
            (err = ss_state_annotate(st, s, 0, SS_ANN_BLOCK_X, errmsg, errmsg_size)) != AT_OK)
            break;
        err = ss_state_annotate(st, s, 1, SS_ANN_THREAD_X, errmsg, errmsg_size);
    }
    if (err != AT_OK) {
        ss_state_free(st);
        return err;
    }
    *out = st;
    return AT_OK;
}
