/* schedule_space/ss_dag.c -- building, checking, printing and hashing compute DAGs.
**
** Invariants once ss_dag_finish returned AT_OK: ops are in topological order; every
** load names an earlier op with one int32 index per dimension; every index stays inside
** the tensor for all axis values, except under a select arm (the code generator clamps
** those); names are unique; dag->key is the workload key. */
#include "ss_int.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

at_err ss__fail(char *errmsg, size_t errmsg_size, at_err err, const char *fmt, ...)
{
    va_list ap;
    if (errmsg && errmsg_size) {
        va_start(ap, fmt);
        vsnprintf(errmsg, errmsg_size, fmt, ap);
        va_end(ap);
    }
    return err;
}

ss_dag *ss_dag_new(void)
{
    ss_dag *dag = at_calloc(1, sizeof *dag);
    if (dag == NULL)
        return NULL;
    at_arena_init(&dag->arena, 8192);
    atomic_init(&dag->refs, 1);
    return dag;
}

ss_dag *ss_dag_ref(ss_dag *dag)
{
    if (dag)
        atomic_fetch_add(&dag->refs, 1);
    return dag;
}

void ss_dag_unref(ss_dag *dag)
{
    if (dag == NULL || atomic_fetch_sub(&dag->refs, 1) != 1)
        return;
    at_arena_fini(&dag->arena);
    at_free(dag->ops);
    ss_dag_unref(dag->parent);
    at_free(dag);
}

static int builder_fail(ss_dag *dag, at_err err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int builder_fail(ss_dag *dag, at_err err, const char *fmt, ...)
{
    va_list ap;
    if (dag->err)
        return -1;
    dag->err = err;
    va_start(ap, fmt);
    vsnprintf(dag->errmsg, sizeof dag->errmsg, fmt, ap);
    va_end(ap);
    return -1;
}

static ss_op *new_op(ss_dag *dag, const char *name)
{
    ss_op *op;
    if (dag->finished) {
        builder_fail(dag, AT_EINVAL, "the DAG is finished; no op can be added");
        return NULL;
    }
    if (ss_dag_find(dag, name) >= 0) {
        builder_fail(dag, AT_EINVAL, "tensor '%s' is defined twice", name);
        return NULL;
    }
    if (dag->n_ops == dag->n_cap) {
        int cap = dag->n_cap ? dag->n_cap * 2 : 8;
        ss_op *p = at_realloc(dag->ops, (size_t)cap * sizeof *p);
        if (p == NULL) {
            builder_fail(dag, AT_ENOMEM, "out of memory");
            return NULL;
        }
        dag->ops = p;
        dag->n_cap = cap;
    }
    op = &dag->ops[dag->n_ops];
    memset(op, 0, sizeof *op);
    op->name = at_arena_strdup(&dag->arena, name);
    if (op->name == NULL) {
        builder_fail(dag, AT_ENOMEM, "out of memory");
        return NULL;
    }
    return op;
}

/* The size limits of one tensor; -1 (with the message) beyond them. */
static int size_ok(ss_dag *dag, const char *name, at_dtype dt, int n, const int64_t *shape)
{
    double elems = 1;
    for (int i = 0; i < n; i++)
        elems *= (double)shape[i];
    if (elems > (double)SS_MAX_TENSOR_ELEMS ||
        elems * at_dtype_bytes(dt) > (double)SS_MAX_TENSOR_BYTES)
        return builder_fail(dag, AT_EINVAL,
                            "%s: %.0f elements (%.2f GiB): a tensor holds at most %lld "
                            "elements and 1 GiB (the largest buffer an agent takes)",
                            name, elems, elems * at_dtype_bytes(dt) / (1 << 30),
                            SS_MAX_TENSOR_ELEMS);
    return 0;
}

int ss_dag_placeholder(ss_dag *dag, const char *name, at_dtype dt, int n_dims,
                       const int64_t *shape, int is_const)
{
    ss_op *op;
    if (dag->err)
        return -1;
    if (n_dims < 0 || n_dims > SS_MAX_DIMS)
        return builder_fail(dag, AT_EINVAL, "%s: %d dimensions (at most %d)", name, n_dims,
                            SS_MAX_DIMS);
    for (int i = 0; i < n_dims; i++)
        if (shape[i] <= 0 || shape[i] > (1ll << 31))
            return builder_fail(dag, AT_EINVAL, "%s: dimension %d has extent %lld", name, i,
                                (long long)shape[i]);
    if (size_ok(dag, name, dt, n_dims, shape) != 0)
        return -1;
    if ((op = new_op(dag, name)) == NULL)
        return -1;
    op->kind = SS_OP_PLACEHOLDER;
    op->dtype = dt;
    op->is_const = is_const;
    op->n_dims = n_dims;
    memcpy(op->shape, shape, (size_t)n_dims * sizeof *shape);
    return dag->n_ops++;
}

int ss_dag_compute(ss_dag *dag, const char *name, int n_axes, const ss_axis *axes, int n_raxes,
                   const ss_axis *raxes, ss_reduce red, ss_expr *body)
{
    ss_op *op;
    if (dag->err)
        return -1;
    if (body == NULL)
        return builder_fail(dag, AT_ENOMEM, "%s: no body (out of memory?)", name);
    if (n_axes < 0 || n_axes > SS_MAX_DIMS)
        return builder_fail(dag, AT_EINVAL, "%s: %d axes (at most %d)", name, n_axes,
                            SS_MAX_DIMS);
    if (n_raxes < 0 || n_axes + n_raxes > SS_MAX_AXES)
        return builder_fail(dag, AT_EINVAL, "%s: %d axes in all (at most %d)", name,
                            n_axes + n_raxes, SS_MAX_AXES);
    if ((red == SS_RED_NONE) != (n_raxes == 0))
        return builder_fail(dag, AT_EINVAL,
                            "%s: reduce axes need a reduction (sum, max, min, prod) and "
                            "a reduction needs reduce axes",
                            name);
    if ((op = new_op(dag, name)) == NULL)
        return -1;
    op->kind = SS_OP_COMPUTE;
    op->dtype = (at_dtype)body->dtype;
    op->n_dims = op->n_axes = n_axes;
    op->n_raxes = n_raxes;
    for (int i = 0; i < n_axes + n_raxes; i++) {
        const ss_axis *ax = i < n_axes ? &axes[i] : &raxes[i - n_axes];
        if (ax->extent <= 0 || ax->extent > (1ll << 31))
            return builder_fail(dag, AT_EINVAL, "%s: axis %s has extent %lld", name, ax->name,
                                (long long)ax->extent);
        op->axes[i].extent = ax->extent;
        op->axes[i].name = at_arena_strdup(&dag->arena, ax->name);
        if (op->axes[i].name == NULL)
            return builder_fail(dag, AT_ENOMEM, "out of memory");
        for (int j = 0; j < i; j++)
            if (strcmp(op->axes[j].name, ax->name) == 0)
                return builder_fail(dag, AT_EINVAL, "%s: axis '%s' appears twice", name,
                                    ax->name);
        if (i < n_axes)
            op->shape[i] = ax->extent;
    }
    if (size_ok(dag, name, op->dtype, n_axes, op->shape) != 0)
        return -1;
    op->reduce = red;
    op->body = body;
    return dag->n_ops++;
}

int ss_dag_find(const ss_dag *dag, const char *name)
{
    for (int i = 0; i < dag->n_ops; i++)
        if (strcmp(dag->ops[i].name, name) == 0)
            return i;
    return -1;
}

int64_t ss_op_n_elems(const ss_op *op)
{
    int64_t n = 1;
    for (int i = 0; i < op->n_dims; i++)
        n *= op->shape[i];
    return n;
}

static int expr_reads(const ss_expr *e, int tensor)
{
    if (e->kind == SS_E_LOAD && e->id == tensor)
        return 1;
    for (int i = 0; i < e->n; i++)
        if (expr_reads(e->a[i], tensor))
            return 1;
    return 0;
}

int ss_op_reads(const ss_op *reader, int tensor)
{
    return reader->kind == SS_OP_COMPUTE && expr_reads(reader->body, tensor);
}

/* ---- checking ---- */

typedef struct checker {
    const ss_dag *dag;
    const ss_op *op;
    int64_t lo[SS_MAX_AXES], hi[SS_MAX_AXES];
    at_arena scratch;
    char *msg;
    size_t msg_size;
    at_err err;
} checker;

static const char *op_axis_name(void *ctx, int id)
{
    const ss_op *op = ctx;
    return id >= 0 && id < op->n_axes + op->n_raxes ? op->axes[id].name : NULL;
}

static const char *dag_tensor_name(void *ctx, int id)
{
    const ss_dag *dag = ctx;
    return id >= 0 && id < dag->n_ops ? dag->ops[id].name : NULL;
}

/* Names for a checker print: axes of ck->op, tensors of ck->dag. */
typedef struct name_ctx {
    const ss_dag *dag;
    const ss_op *op;
} name_ctx;

static const char *nc_axis(void *ctx, int id)
{
    return op_axis_name((void *)((name_ctx *)ctx)->op, id);
}

static const char *nc_tensor(void *ctx, int id)
{
    return dag_tensor_name((void *)((name_ctx *)ctx)->dag, id);
}

static void check_fail(checker *ck, at_err err, const ss_expr *e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void check_fail(checker *ck, at_err err, const ss_expr *e, const char *fmt, ...)
{
    va_list ap;
    at_buf b;
    name_ctx nc = {ck->dag, ck->op};
    if (ck->err)
        return;
    ck->err = err;
    at_buf_init(&b);
    at_buf_printf(&b, "%s: ", ck->op->name);
    if (e) {
        ss_expr_print(&b, e, nc_axis, NULL, nc_tensor, &nc);
        at_buf_puts(&b, ": ");
    }
    if (b.data && ck->msg)
        snprintf(ck->msg, ck->msg_size, "%s", b.data);
    at_buf_fini(&b);
    if (ck->msg) {
        size_t used = strlen(ck->msg);
        va_start(ap, fmt);
        vsnprintf(ck->msg + used, ck->msg_size - used, fmt, ap);
        va_end(ap);
    }
}

static int is_int_type(int dt)
{
    return dt == AT_DT_I32 || dt == AT_DT_I64 || dt == AT_DT_I8;
}

/* Integer bounds of an index expression over the op's axes: 1 known, 0 unknown, -1 out
** of memory. */
static int axis_bounds(checker *ck, const ss_expr *e, int64_t *lo, int64_t *hi)
{
    ss_expr *vars[SS_MAX_AXES], *ve;
    ss_var_ranges r = {ck->op->n_axes + ck->op->n_raxes, ck->lo, ck->hi};
    for (int i = 0; i < r.n; i++)
        if ((vars[i] = ss_expr_var(&ck->scratch, i)) == NULL)
            return -1;
    ve = ss_expr_subst(&ck->scratch, e, vars, r.n, NULL, 0, NULL);
    if (ve == NULL)
        return -1;
    return ss_expr_bounds(ve, &r, lo, hi);
}

static void check_expr(checker *ck, const ss_expr *e, int guarded)
{
    const ss_op *op = ck->op;
    if (ck->err)
        return;
    switch (e->kind) {
    case SS_E_IMM_INT:
    case SS_E_IMM_FLOAT:
    case SS_E_VAR:
        return;
    case SS_E_AXIS:
        if (e->id < 0 || e->id >= op->n_axes + op->n_raxes)
            check_fail(ck, AT_EINVAL, NULL, "axis %d does not exist", e->id);
        return;
    case SS_E_LOAD: {
        const ss_op *t;
        if (e->id < 0 || e->id >= (int)(op - ck->dag->ops)) {
            check_fail(ck, AT_EINVAL, NULL, "loads tensor %d, which is not defined before it",
                       e->id);
            return;
        }
        t = &ck->dag->ops[e->id];
        if (e->n != t->n_dims) {
            check_fail(ck, AT_EINVAL, e, "%s has %d dimensions, %d indices given", t->name,
                       t->n_dims, e->n);
            return;
        }
        if (e->dtype != t->dtype) {
            check_fail(ck, AT_EINVAL, e, "load type %s differs from %s's type %s",
                       at_dtype_name((at_dtype)e->dtype), t->name, at_dtype_name(t->dtype));
            return;
        }
        for (int d = 0; d < e->n; d++) {
            int64_t lo, hi;
            check_expr(ck, e->a[d], guarded);
            if (ck->err)
                return;
            if (e->a[d]->dtype != AT_DT_I32) {
                check_fail(ck, AT_EINVAL, e, "index %d is %s, not int32", d,
                           at_dtype_name((at_dtype)e->a[d]->dtype));
                return;
            }
            int known = axis_bounds(ck, e->a[d], &lo, &hi);
            if (known < 0) {
                check_fail(ck, AT_ENOMEM, NULL, "out of memory");
                return;
            }
            if (!known) {
                check_fail(ck, AT_EINVAL, e, "cannot bound index %d (indices must be affine "
                           "in the axes, with / and %% by positive constants)", d);
                return;
            }
            if (!guarded && (lo < 0 || hi >= t->shape[d])) {
                check_fail(ck, AT_EINVAL, e,
                           "index %d ranges over [%lld, %lld] but %s's dimension %d has "
                           "extent %lld (guard the load with select)",
                           d, (long long)lo, (long long)hi, t->name, d, (long long)t->shape[d]);
                return;
            }
        }
        return;
    }
    case SS_E_SELECT:
        check_expr(ck, e->a[0], guarded);
        check_expr(ck, e->a[1], 1);
        check_expr(ck, e->a[2], 1);
        if (ck->err)
            return;
        if (e->a[0]->dtype != AT_DT_BOOL)
            check_fail(ck, AT_EINVAL, e, "the condition is not a comparison (bool)");
        else if (e->a[1]->dtype != e->a[2]->dtype)
            check_fail(ck, AT_EINVAL, e, "the two arms have types %s and %s",
                       at_dtype_name((at_dtype)e->a[1]->dtype),
                       at_dtype_name((at_dtype)e->a[2]->dtype));
        return;
    case SS_E_CAST:
        check_expr(ck, e->a[0], guarded);
        return;
    default:
        for (int i = 0; i < e->n; i++)
            check_expr(ck, e->a[i], guarded);
        if (ck->err)
            return;
        if (e->n == 2 && e->a[0]->dtype != e->a[1]->dtype) {
            check_fail(ck, AT_EINVAL, e, "operands have types %s and %s (use a cast)",
                       at_dtype_name((at_dtype)e->a[0]->dtype),
                       at_dtype_name((at_dtype)e->a[1]->dtype));
            return;
        }
        if ((e->kind == SS_E_AND || e->kind == SS_E_OR || e->kind == SS_E_NOT) &&
            e->a[0]->dtype != AT_DT_BOOL) {
            check_fail(ck, AT_EINVAL, e, "logic operators need bool operands");
            return;
        }
        if (e->kind >= SS_E_EXP && e->kind <= SS_E_SIGMOID && e->kind != SS_E_ABS &&
            !at_dtype_is_float((at_dtype)e->a[0]->dtype)) {
            check_fail(ck, AT_EINVAL, e, "%s needs a float operand", ss_expr_kind_name(
                                                                        (ss_expr_kind)e->kind));
            return;
        }
        if (e->kind == SS_E_MOD && !is_int_type(e->a[0]->dtype)) {
            check_fail(ck, AT_EINVAL, e, "%% needs integer operands");
            return;
        }
        if ((e->kind == SS_E_DIV || e->kind == SS_E_MOD) && is_int_type(e->a[1]->dtype) &&
            e->a[1]->kind == SS_E_IMM_INT && e->a[1]->v.i == 0) {
            check_fail(ck, AT_EINVAL, e, "division by zero");
            return;
        }
        if ((e->kind == SS_E_ADD || e->kind == SS_E_SUB || e->kind == SS_E_MUL ||
             e->kind == SS_E_DIV || e->kind == SS_E_MIN || e->kind == SS_E_MAX ||
             e->kind == SS_E_NEG) &&
            e->a[0]->dtype == AT_DT_BOOL)
            check_fail(ck, AT_EINVAL, e, "arithmetic on bool");
        return;
    }
}

at_err ss__check_op(const ss_dag *dag, int opi, char *msg, size_t msg_size)
{
    checker ck;
    const ss_op *op = &dag->ops[opi];
    if (op->kind != SS_OP_COMPUTE)
        return AT_OK;
    memset(&ck, 0, sizeof ck);
    ck.dag = dag;
    ck.op = op;
    ck.msg = msg;
    ck.msg_size = msg_size;
    at_arena_init(&ck.scratch, 4096);
    for (int i = 0; i < op->n_axes + op->n_raxes; i++) {
        ck.lo[i] = 0;
        ck.hi[i] = op->axes[i].extent - 1;
    }
    check_expr(&ck, op->body, 0);
    if (!ck.err && op->reduce != SS_RED_NONE && op->dtype == AT_DT_BOOL)
        check_fail(&ck, AT_EINVAL, NULL, "a reduction over bool values");
    at_arena_fini(&ck.scratch);
    return ck.err;
}

/* ---- FLOPs ---- */

static double count_ops(const ss_expr *e)
{
    double n = 0;
    switch (e->kind) {
    case SS_E_ADD: case SS_E_SUB: case SS_E_MUL: case SS_E_DIV: case SS_E_MOD:
    case SS_E_MIN: case SS_E_MAX: case SS_E_NEG:
    case SS_E_EXP: case SS_E_LOG: case SS_E_SQRT: case SS_E_TANH: case SS_E_ERF:
    case SS_E_ABS: case SS_E_SIGMOID:
        n = 1;
        break;
    case SS_E_LOAD:
        return 0; /* index arithmetic is not counted */
    default:
        break;
    }
    for (int i = 0; i < e->n; i++)
        n += count_ops(e->a[i]);
    return n;
}

at_err ss_dag_finish(ss_dag *dag)
{
    at_buf b;
    if (dag->err)
        return dag->err;
    if (dag->finished)
        return AT_OK;
    if (dag->n_ops == 0) {
        snprintf(dag->errmsg, sizeof dag->errmsg, "the DAG has no tensors");
        return dag->err = AT_EINVAL;
    }
    dag->flops = 0;
    dag->n_inputs = dag->n_outputs = dag->n_args = 0;
    for (int i = 0; i < dag->n_ops; i++) {
        ss_op *op = &dag->ops[i];
        at_err err = ss__check_op(dag, i, dag->errmsg, sizeof dag->errmsg);
        if (err)
            return dag->err = err;
        op->n_readers = 0;
        for (int j = i + 1; j < dag->n_ops; j++)
            op->n_readers += ss_op_reads(&dag->ops[j], i);
        if (op->kind == SS_OP_COMPUTE) {
            double per = count_ops(op->body) + (op->reduce != SS_RED_NONE);
            double n = (double)ss_op_n_elems(op);
            for (int r = 0; r < op->n_raxes; r++)
                n *= (double)op->axes[op->n_axes + r].extent;
            dag->flops += per * n;
        }
    }
    for (int i = 0; i < dag->n_ops; i++) {
        ss_op *op = &dag->ops[i];
        if (op->kind == SS_OP_PLACEHOLDER) {
            dag->n_inputs++;
            if (op->n_readers == 0) {
                snprintf(dag->errmsg, sizeof dag->errmsg, "input %s is never read", op->name);
                return dag->err = AT_EINVAL;
            }
        }
        op->is_output = op->kind == SS_OP_COMPUTE && op->n_readers == 0;
        dag->n_outputs += op->is_output;
    }
    if (dag->n_outputs == 0) {
        snprintf(dag->errmsg, sizeof dag->errmsg, "the DAG computes nothing");
        return dag->err = AT_EINVAL;
    }
    if (dag->n_inputs + dag->n_outputs > (int)AT_ARRAY_LEN(dag->args)) {
        snprintf(dag->errmsg, sizeof dag->errmsg, "too many inputs and outputs (%d, at most %d)",
                 dag->n_inputs + dag->n_outputs, (int)AT_ARRAY_LEN(dag->args));
        return dag->err = AT_EINVAL;
    }
    for (int i = 0; i < dag->n_ops; i++)
        if (dag->ops[i].kind == SS_OP_PLACEHOLDER)
            dag->args[dag->n_args++] = i;
    for (int i = 0; i < dag->n_ops; i++)
        if (dag->ops[i].is_output)
            dag->args[dag->n_args++] = i;
    dag->finished = 1;
    at_buf_init(&b);
    ss_dag_print_canonical(dag, &b);
    if (b.err) {
        at_buf_fini(&b);
        dag->finished = 0;
        snprintf(dag->errmsg, sizeof dag->errmsg, "out of memory");
        return dag->err = AT_ENOMEM;
    }
    at_sha256_hex(b.data, b.len, 16, dag->key);
    at_buf_fini(&b);
    return AT_OK;
}

/* ---- printing ---- */

typedef struct print_ctx {
    const ss_dag *dag;
    const ss_op *op;
    int canonical;
    char tmp[2][24];
} print_ctx;

static const char *pc_axis(void *ctx, int id)
{
    print_ctx *pc = ctx;
    if (!pc->canonical)
        return op_axis_name((void *)pc->op, id);
    if (id < pc->op->n_axes)
        snprintf(pc->tmp[0], sizeof pc->tmp[0], "i%d", id);
    else
        snprintf(pc->tmp[0], sizeof pc->tmp[0], "r%d", id - pc->op->n_axes);
    return pc->tmp[0];
}

static const char *pc_tensor(void *ctx, int id)
{
    print_ctx *pc = ctx;
    if (!pc->canonical)
        return dag_tensor_name((void *)pc->dag, id);
    snprintf(pc->tmp[1], sizeof pc->tmp[1], "t%d", id);
    return pc->tmp[1];
}

static const char *const red_names[] = {
#define X(id, name) name,
    SS_REDUCE_MAP(X)
#undef X
};

static void print_dag(const ss_dag *dag, at_buf *b, int canonical)
{
    print_ctx pc;
    memset(&pc, 0, sizeof pc);
    pc.dag = dag;
    pc.canonical = canonical;
    for (int i = 0; i < dag->n_ops; i++) {
        const ss_op *op = &dag->ops[i];
        pc.op = op;
        if (op->kind == SS_OP_PLACEHOLDER) {
            at_buf_printf(b, "%s %s[", op->is_const ? "const" : "input", pc_tensor(&pc, i));
            for (int d = 0; d < op->n_dims; d++)
                at_buf_printf(b, "%s%lld", d ? ", " : "", (long long)op->shape[d]);
            at_buf_printf(b, "] %s\n", at_dtype_name(op->dtype));
            continue;
        }
        at_buf_printf(b, "%s[", pc_tensor(&pc, i));
        for (int a = 0; a < op->n_axes; a++)
            at_buf_printf(b, "%s%s:%lld", a ? ", " : "", pc_axis(&pc, a),
                          (long long)op->axes[a].extent);
        at_buf_puts(b, "] = ");
        if (op->reduce != SS_RED_NONE) {
            at_buf_printf(b, "%s[", red_names[op->reduce]);
            for (int r = 0; r < op->n_raxes; r++)
                at_buf_printf(b, "%s%s:%lld", r ? ", " : "", pc_axis(&pc, op->n_axes + r),
                              (long long)op->axes[op->n_axes + r].extent);
            at_buf_puts(b, "](");
        }
        ss_expr_print(b, op->body, pc_axis, NULL, pc_tensor, &pc);
        if (op->reduce != SS_RED_NONE)
            at_buf_putc(b, ')');
        at_buf_putc(b, '\n');
    }
}

void ss_dag_print(const ss_dag *dag, at_buf *b)
{
    print_dag(dag, b, 0);
}

void ss_dag_print_canonical(const ss_dag *dag, at_buf *b)
{
    print_dag(dag, b, 1);
}
