/* tests/schedule_space/test_dag.c -- DAG text format: parse, print, keys, errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule_space/schedule_space.h"

static const char *matmul_text = "# matmul with bias and relu\n"
                                 "input A[64, 32] float32\n"
                                 "const B[32, 48] float32\n"
                                 "const bias[48] float32\n"
                                 "C[i:64, j:48] = sum[k:32](A[i, k] * B[k, j])\n"
                                 "D[i:64, j:48] = max(C[i, j] + bias[j], 0)\n";

static ss_dag *parse_ok(const char *text)
{
    ss_dag *dag = NULL;
    char err[256];
    at_err e = ss_dag_parse(text, strlen(text), &dag, err, sizeof err);
    if (e != AT_OK)
        fail_msg("parse failed: %s", err);
    return dag;
}

static void test_parse_matmul(void **unused)
{
    ss_dag *dag;
    (void)unused;
    dag = parse_ok(matmul_text);
    assert_int_equal(dag->n_ops, 5);
    assert_int_equal(dag->n_inputs, 3);
    assert_int_equal(dag->n_outputs, 1);
    assert_int_equal(dag->n_args, 4);
    assert_int_equal(dag->args[3], 4);
    assert_int_equal(dag->ops[3].reduce, SS_RED_SUM);
    assert_int_equal(dag->ops[3].n_raxes, 1);
    assert_true(dag->ops[1].is_const);
    /* 2*M*N*K + 2*M*N (add, max) */
    assert_true(dag->flops == 2.0 * 64 * 48 * 32 + 2.0 * 64 * 48);
    assert_int_equal(strlen(dag->key), 32);
    ss_dag_unref(dag);
}

static void test_print_roundtrip_and_key(void **unused)
{
    ss_dag *a, *b, *c;
    at_buf pa, pb;
    (void)unused;
    a = parse_ok(matmul_text);
    at_buf_init(&pa);
    ss_dag_print(a, &pa);
    b = parse_ok(pa.data);
    at_buf_init(&pb);
    ss_dag_print(b, &pb);
    assert_string_equal(pa.data, pb.data);
    assert_string_equal(a->key, b->key);
    /* renaming tensors and axes keeps the workload key */
    c = parse_ok("input X[64, 32] float32\nconst W[32, 48] float32\nconst b[48] float32\n"
                 "Y[m:64, n:48] = sum[r:32](X[m, r] * W[r, n])\n"
                 "Z[m:64, n:48] = max(Y[m, n] + b[n], 0.0)\n");
    assert_string_equal(a->key, c->key);
    ss_dag_unref(c);
    /* a different shape changes it */
    c = parse_ok("input X[64, 32] float32\nconst W[32, 40] float32\nconst b[40] float32\n"
                 "Y[m:64, n:40] = sum[r:32](X[m, r] * W[r, n])\n"
                 "Z[m:64, n:40] = max(Y[m, n] + b[n], 0.0)\n");
    assert_string_not_equal(a->key, c->key);
    ss_dag_unref(c);
    at_buf_fini(&pa);
    at_buf_fini(&pb);
    ss_dag_unref(a);
    ss_dag_unref(b);
}

static void test_canonical_print_is_stable(void **unused)
{
    ss_dag *a;
    at_buf p;
    (void)unused;
    a = parse_ok("input A[4, 4] float32\n"
                 "P[i:6, j:6] = select(i >= 1 && i < 5 && j >= 1 && j < 5, A[i - 1, j - 1], "
                 "0.0)\n"
                 "Q[i:6, j:6] = exp(P[i, j] * 0.5) / (1 + tanh(-P[i, j])) - float32(i % 2)\n");
    at_buf_init(&p);
    ss_dag_print_canonical(a, &p);
    assert_string_equal(p.data,
                        "input t0[4, 4] float32\n"
                        "t1[i0:6, i1:6] = select(i0 >= 1 && i0 < 5 && i1 >= 1 && i1 < 5, "
                        "t0[i0 - 1, i1 - 1], 0.0)\n"
                        "t2[i0:6, i1:6] = exp(t1[i0, i1] * 0.5) / (1.0 + tanh(-t1[i0, i1])) - "
                        "float32(i0 % 2)\n");
    at_buf_fini(&p);
    ss_dag_unref(a);
}

static void test_parse_errors(void **unused)
{
    static const struct {
        const char *text, *msg;
    } cases[] = {
        {"input A[4] float32\nB[i:4] = A[i] +\n", "2:16: expected an expression, found end of line"},
        {"input A[4] float32\nB[i:4] = A[i + 1]\n", "2:1: B: A[i + 1]: index 0 ranges over [1, 4]"},
        {"input A[4] float32\nB[i:4] = C[i]\n", "2:10: unknown tensor 'C'"},
        {"input A[4] float32\nB[i:4] = A[j]\n", "2:12: unknown name 'j'"},
        {"input A[4] float32\nB[i:4] = A[i, i]\n", "2:10: A has 1 dimension, 2 indices given"},
        {"input A[4] float32\nB[i:4, i:3] = A[i]\n", "2:8: axis 'i' appears twice"},
        {"input A[4] float32\nA[i:4] = A[i]\n", "2:1: tensor 'A' is defined twice"},
        {"input A[4] float32\nB[i:4] = A[i] * i\n", "2:15: operands of '*' have types float32 and int32"},
        {"input A[4] float32\nB[i:0] = A[i]\n", "2:5: expected a positive extent for axis 'i'"},
        {"input A[4] float64\n", "1:12: type float64 is not supported yet"},
        {"input A[4] float32\nB[i:4] = sum[k:4](A[k]) + 1\n", "2:25: expected end of line, found '+'"},
        {"input A[4] float32\nB[i:4] = A[i] $ 2\n", "2:15: unexpected character '$'"},
        {"input A[4] float32\ninput Z[2] float32\nB[i:4] = A[i]\n", "2:1: input Z is never read"},
        {"input sum[4] float32\n", "1:7: 'sum' is a reserved word"},
        {"input A[4] float32\nB[i:4] = A[i] < 1 < 2\n", "2:19: comparisons do not chain"},
        {"input A[4] float32\nB[i:4] = exp(A[i], 2)\n", "2:10: exp takes 1 argument, 2 given"},
        {"input A[4] float32\nB[i:4] = A[i] % 2\n", "2:15: '%' needs int32 operands"},
        {"", "the DAG has no tensors"},
        /* issue 14, item 3: the spec's limits hold for DAG text too */
        {"input A[32768, 16384] float32\nB[i:4] = A[i, 0]\n",
         "1:7: A: 536870912 elements (2.00 GiB): a tensor holds at most 2147483647 elements "
         "and 1 GiB (the largest buffer an agent takes)"},
        {"input A[4] float32\nB[i:65536, j:65536] = A[0]\n", "2:1: B: 4294967296 elements"},
    };
    (void)unused;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ss_dag *dag = (ss_dag *)1;
        char err[256];
        at_err e = ss_dag_parse(cases[i].text, strlen(cases[i].text), &dag, err, sizeof err);
        if (e == AT_OK)
            fail_msg("case %zu parsed but should not: %s", i, cases[i].text);
        assert_null(dag);
        if (strncmp(err, cases[i].msg, strlen(cases[i].msg)) != 0)
            fail_msg("case %zu: got '%s', want prefix '%s'", i, err, cases[i].msg);
    }
}

/* Input that nests deep (10,000 parentheses, 200,000 unary minuses, a 30,000-term sum) is
** refused with the limit in the message, not a stack overflow (these crashed the tuner);
** at the limits, it parses (a 256-term sum, 128 parentheses). */
static char *text_of(const char *head, const char *unit, int n, const char *sep,
                     const char *tail)
{
    size_t len = strlen(head) + (size_t)n * (strlen(unit) + strlen(sep)) + strlen(tail) + 1;
    char *t = malloc(len), *p = t;
    assert_non_null(t);
    p += sprintf(p, "%s", head);
    for (int i = 0; i < n; i++)
        p += sprintf(p, "%s%s", i ? sep : "", unit);
    sprintf(p, "%s", tail);
    return t;
}

static void expect_deep(char *text, const char *msg)
{
    ss_dag *dag = (ss_dag *)1;
    char err[256];
    at_err e = ss_dag_parse(text, strlen(text), &dag, err, sizeof err);
    if (msg == NULL) {
        if (e != AT_OK)
            fail_msg("should parse: %s", err);
        ss_dag_unref(dag);
    } else {
        assert_int_equal(e, AT_EPARSE);
        assert_null(dag);
        if (strstr(err, msg) == NULL)
            fail_msg("got '%s', want '%s'", err, msg);
    }
    free(text);
}

/* B = A[i] inside n parentheses */
static char *parens(int n)
{
    char *open = text_of("", "(", n, "", ""), *close = text_of("", ")", n, "", "\n");
    char *t = malloc(strlen(open) + strlen(close) + 64);
    assert_non_null(t);
    sprintf(t, "input A[4] float32\nB[i:4] = %sA[i]%s", open, close);
    free(open);
    free(close);
    return t;
}

static void test_parse_limits(void **unused)
{
    (void)unused;
    expect_deep(parens(10000), "expression nested more than 128 deep (parentheses, unary '-' or '!', '?:')");
    expect_deep(text_of("input A[4] float32\nB[i:4] = ", "-", 200000, "", "A[i]\n"),
                "expression nested more than 128 deep");
    expect_deep(text_of("input A[4] float32\nB[i:4] = ", "A[i]", 30000, " + ", "\n"),
                "2:1: the expression of 'B' is more than 256 operations deep (a chain of more "
                "than 256 terms?): split it into stages");
    expect_deep(text_of("input A[4] float32\nB[i:4] = ", "A[i]", 257, " * ", "\n"),
                "more than 256 operations deep");
    expect_deep(text_of("input A[4] float32\nB[i:4] = ", "A[i]", 256, " + ", "\n"), NULL);
    expect_deep(parens(120), NULL);
    /* 100 unary minuses are within the limit, and so is the text they print as ("---A[i]";
    ** "-(-(-A[i]))" nested twice as deep, over the limit: found by fuzz_dag) */
    {
        char *t = text_of("input A[4] float32\nB[i:4] = ", "-", 100, "", "A[i]\n");
        ss_dag *d = NULL, *d2 = NULL;
        char err[256];
        at_buf b;
        assert_int_equal(ss_dag_parse(t, strlen(t), &d, err, sizeof err), AT_OK);
        at_buf_init(&b);
        ss_dag_print(d, &b);
        if (ss_dag_parse(b.data, b.len, &d2, err, sizeof err) != AT_OK)
            fail_msg("the printed DAG does not parse: %s", err);
        assert_string_equal(d->key, d2->key);
        at_buf_fini(&b);
        ss_dag_unref(d2);
        ss_dag_unref(d);
        free(t);
    }
}

static void test_simplify_index(void **unused)
{
    at_arena ar;
    int64_t lo[3] = {0, 0, 0}, hi[3] = {3, 7, 15};
    ss_var_ranges r = {3, lo, hi};
    ss_expr *v0, *v1, *e, *s;
    at_buf b;
    (void)unused;
    at_arena_init(&ar, 0);
    v0 = ss_expr_var(&ar, 0);
    v1 = ss_expr_var(&ar, 1);
    /* (v0 * 8 + v1) / 8 -> v0 ; (v0 * 8 + v1) % 8 -> v1 */
    e = ss_expr_op(&ar, SS_E_ADD, ss_expr_op(&ar, SS_E_MUL, v0, ss_expr_imm_int(&ar, AT_DT_I32, 8)), v1);
    s = ss_expr_simplify(&ar, ss_expr_op(&ar, SS_E_DIV, e, ss_expr_imm_int(&ar, AT_DT_I32, 8)), &r);
    assert_true(ss_expr_equal(s, v0));
    s = ss_expr_simplify(&ar, ss_expr_op(&ar, SS_E_MOD, e, ss_expr_imm_int(&ar, AT_DT_I32, 8)), &r);
    assert_true(ss_expr_equal(s, v1));
    /* (v0*8 + v1 + 3) - (v0*8) -> v1 + 3 */
    s = ss_expr_simplify(&ar, ss_expr_op(&ar, SS_E_SUB, ss_expr_op(&ar, SS_E_ADD, e, ss_expr_imm_int(&ar, AT_DT_I32, 3)),
                                        ss_expr_op(&ar, SS_E_MUL, v0, ss_expr_imm_int(&ar, AT_DT_I32, 8))), &r);
    at_buf_init(&b);
    ss_expr_print(&b, s, NULL, NULL, NULL, NULL);
    assert_string_equal(b.data, "v1 + 3");
    /* (v1 + 4) / 8 stays a division (range 4..11 crosses 8) */
    at_buf_reset(&b);
    s = ss_expr_simplify(&ar, ss_expr_op(&ar, SS_E_DIV, ss_expr_op(&ar, SS_E_ADD, ss_expr_imm_int(&ar, AT_DT_I32, 4), v1),
                                        ss_expr_imm_int(&ar, AT_DT_I32, 8)), &r);
    ss_expr_print(&b, s, NULL, NULL, NULL, NULL);
    assert_string_equal(b.data, "(v1 + 4) / 8");
    at_buf_fini(&b);
    at_arena_fini(&ar);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_matmul),
        cmocka_unit_test(test_print_roundtrip_and_key),
        cmocka_unit_test(test_canonical_print_is_stable),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_parse_limits),
        cmocka_unit_test(test_simplify_index),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
