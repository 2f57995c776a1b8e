/* models/md_plan.c -- where every tensor of a model's run lives: the buffer plan that
** 'tuner run' and the exported library share.
**
** Each root tensor (aliases share their root's bytes) that a step reads or writes gets one
** buffer:
**   - a constant (weights, and the constants rewrites made): its bytes, in the constants'
**     block, each at a 64-byte aligned offset;
**   - everything else in one arena, at a 64-byte aligned offset chosen by liveness: a
**     buffer is live from the first step that uses it to the last (graph inputs and
**     weights given without values from before the first step, graph outputs to after the
**     last), and two buffers whose live ranges meet never overlap.  Offsets are given
**     largest buffer first, each at the lowest offset free for its whole range (first
**     fit); a step never writes a buffer another of its arguments lives in.
** The arena is what a run needs at most at once: for ResNet-18 a few MB instead of the
** sum of every activation. */
#include "models/md_int.h"

#include <stdlib.h>
#include <string.h>

#define ALIGN 64

static int64_t round_up(int64_t v)
{
    return (v + ALIGN - 1) / ALIGN * ALIGN;
}

static int64_t tensor_bytes(const md_tensor *t)
{
    return t->n_elems * (int64_t)at_dtype_bytes(t->dtype);
}

const int *md__step_tensors(const md_model *m, const md_step *s, int *n_in, int *n_out)
{
    const md_node *nd = &m->g->nodes[s->node];
    if (s->kind == MD_STEP_TASK) {
        *n_in = s->n_args - 1;
        *n_out = 1;
        return s->args;
    }
    *n_in = nd->n_in;
    *n_out = 0;
    return nd->in;
}

static void touch(md_plan *p, const md_graph *g, int t, int step)
{
    int r;
    md_plan_buf *b;
    if (t < 0)
        return;
    r = md__root(g, t);
    if (p->buf_of[r] < 0) {
        b = &p->bufs[p->n_bufs];
        memset(b, 0, sizeof *b);
        b->root = r;
        b->bytes = round_up(tensor_bytes(&g->tensors[r]));
        b->kind = g->tensors[r].data ? MD_BUF_CONST
                  : g->tensors[r].is_input ? MD_BUF_INPUT
                                           : MD_BUF_ARENA;
        b->first = b->last = step;
        p->buf_of[r] = p->n_bufs++;
    }
    b = &p->bufs[p->buf_of[r]];
    if (step < b->first)
        b->first = step;
    if (step > b->last)
        b->last = step;
    p->buf_of[t] = p->buf_of[r];
}

static int cmp_size_desc(const void *a, const void *b, void *ctx)
{
    const md_plan_buf *bufs = ctx;
    const md_plan_buf *x = &bufs[*(const int *)a], *y = &bufs[*(const int *)b];
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    return x->first - y->first;
}

at_err md__plan_make(const md_model *m, md_plan *p)
{
    const md_graph *g = m->g;
    int *order = NULL, n_placed = 0;
    memset(p, 0, sizeof *p);
    p->buf_of = at_malloc((size_t)(g->n_tensors + 1) * sizeof *p->buf_of);
    p->bufs = at_calloc((size_t)g->n_tensors + 1, sizeof *p->bufs);
    if (p->buf_of == NULL || p->bufs == NULL) {
        md__plan_free(p);
        return AT_ENOMEM;
    }
    for (int t = 0; t < g->n_tensors; t++)
        p->buf_of[t] = -1;
    /* graph inputs first (their order gives the fill streams), live from before step 0 */
    for (int i = 0; i < g->n_inputs; i++)
        touch(p, g, g->inputs[i], -1);
    for (int s = 0; s < m->n_steps; s++) {
        const md_step *st = &m->steps[s];
        int n_in, n_out;
        const int *ts = md__step_tensors(m, st, &n_in, &n_out);
        for (int k = 0; k < n_in + n_out; k++)
            touch(p, g, ts[k], s);
        if (st->kind == MD_STEP_COPY)
            for (int k = 0; k < g->nodes[st->node].n_out; k++)
                touch(p, g, g->nodes[st->node].out[k], s);
    }
    for (int i = 0; i < g->n_outputs; i++)
        touch(p, g, g->outputs[i], m->n_steps);
    for (int i = 0; i < p->n_bufs; i++) {
        md_plan_buf *b = &p->bufs[i];
        if (b->kind == MD_BUF_INPUT) {
            /* inputs and weights without values: filled once, read by every run */
            b->first = -1;
            b->last = m->n_steps;
        }
        if (g->tensors[b->root].is_output)
            b->last = m->n_steps;
    }
    /* constants: in order, each aligned */
    for (int i = 0; i < p->n_bufs; i++)
        if (p->bufs[i].kind == MD_BUF_CONST) {
            p->bufs[i].offset = p->const_bytes;
            p->const_bytes += p->bufs[i].bytes;
        }
    /* the arena (inputs included): first fit, largest first */
    if ((order = at_malloc((size_t)(p->n_bufs + 1) * sizeof *order)) == NULL) {
        md__plan_free(p);
        return AT_ENOMEM;
    }
    for (int i = 0; i < p->n_bufs; i++)
        if (p->bufs[i].kind != MD_BUF_CONST)
            order[n_placed++] = i;
    qsort_r(order, (size_t)n_placed, sizeof *order, cmp_size_desc, p->bufs);
    for (int k = 0; k < n_placed; k++) {
        md_plan_buf *b = &p->bufs[order[k]];
        int64_t off = 0;
        for (int moved = 1; moved;) {
            moved = 0;
            for (int j = 0; j < k; j++) {
                const md_plan_buf *o = &p->bufs[order[j]];
                if (o->last < b->first || b->last < o->first)
                    continue; /* never live at once */
                if (off < o->offset + o->bytes && o->offset < off + b->bytes) {
                    off = o->offset + o->bytes;
                    moved = 1;
                }
            }
        }
        b->offset = off;
        if (off + b->bytes > p->arena_bytes)
            p->arena_bytes = off + b->bytes;
    }
    at_free(order);
    return AT_OK;
}

void md__plan_free(md_plan *p)
{
    at_free(p->bufs);
    at_free(p->buf_of);
    memset(p, 0, sizeof *p);
}
