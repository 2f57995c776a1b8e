/* tests/schedule_space/test_state.c -- steps: validation with clear errors, state
** unchanged after a refused step, JSON round trips and bad JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "schedule_space/schedule_space.h"

static const char *mm = "input A[64, 32] float32\n"
                        "const B[32, 48] float32\n"
                        "C[i:64, j:48] = sum[k:32](A[i, k] * B[k, j])\n"
                        "D[i:64, j:48] = max(C[i, j], 0.0)\n";

static ss_dag *parse(const char *text)
{
    ss_dag *d;
    char err[256];
    if (ss_dag_parse(text, strlen(text), &d, err, sizeof err) != AT_OK)
        fail_msg("%s", err);
    return d;
}

static char *print_state(const ss_state *st)
{
    at_buf b;
    at_buf_init(&b);
    ss_state_print(st, &b);
    ss_state_to_json(st, &b);
    return at_buf_take(&b);
}

/* Apply a step that must be refused with 'code' and a message starting with 'msg';
** the state must be unchanged. */
static void refused(ss_state *st, const ss_step *s, at_err code, const char *msg)
{
    char err[512];
    char *before = print_state(st), *after;
    at_err e = ss_state_apply(st, s, err, sizeof err);
    if (e != code)
        fail_msg("expected %s, got %s (%s)", at_errname(code), at_errname(e), err);
    if (strncmp(err, msg, strlen(msg)) != 0)
        fail_msg("message '%s' does not start with '%s'", err, msg);
    after = print_state(st);
    assert_string_equal(before, after);
    at_free(before);
    at_free(after);
}

static ss_step mk(ss_step_kind k, int stage, int iter)
{
    ss_step s;
    memset(&s, 0, sizeof s);
    s.kind = k;
    s.stage = stage;
    s.iter = iter;
    return s;
}

static void test_illegal_steps(void **unused)
{
    ss_dag *dag = parse(mm);
    ss_state *st;
    ss_step s;
    char err[256];
    (void)unused;
    assert_int_equal(ss_state_new(dag, &st), AT_OK);
    /* vectorizing a reduction loop */
    s = mk(SS_STEP_ANNOTATE, 2, 2);
    s.a = SS_ANN_VECTORIZE;
    refused(st, &s, AT_ESCHED, "cannot vectorize C.k: it is a reduction loop");
    /* parallel on a reduction loop */
    s.a = SS_ANN_PARALLEL;
    refused(st, &s, AT_ESCHED, "cannot parallelize C.k: it is a reduction loop");
    /* a split whose lengths do not fit */
    s = mk(SS_STEP_SPLIT, 2, 0);
    s.n_ints = 2;
    s.ints[0] = 16;
    s.ints[1] = 8;
    refused(st, &s, AT_ESCHED, "split of C.i: the lengths' product 128 exceeds the extent 64");
    s.ints[1] = -2;
    refused(st, &s, AT_ESCHED, "split of C.i: length -2 is not valid");
    /* a recorded extent that does not match */
    s.ints[1] = 2;
    s.extent = 128;
    refused(st, &s, AT_ESCHED, "split of C.i: the step was recorded for extent 128");
    /* compute_at to a stage that does not read it */
    s = mk(SS_STEP_COMPUTE_AT, 3, 0);
    s.a = 2;
    refused(st, &s, AT_ESCHED, "compute_at of D: it is an output of the DAG");
    assert_int_equal(ss_dag_parse("input A[8] float32\nB[i:8] = A[i] + 1\nC[i:8] = A[i] * 2\n"
                                  "D[i:8] = B[i] + C[i]\n", 83, &(ss_dag *){NULL}, err,
                                  sizeof err) == AT_OK || 1, 1);
    {
        ss_dag *d2 = parse("input A[8] float32\nB[i:8] = A[i] + 1\nC[i:8] = A[i] * 2\n"
                           "D[i:8] = B[i] + C[i]\n");
        ss_state *s2;
        assert_int_equal(ss_state_new(d2, &s2), AT_OK);
        s = mk(SS_STEP_COMPUTE_AT, 1, 0);
        s.a = 2;
        refused(s2, &s, AT_ESCHED, "compute_at of B into C: C does not read B");
        s.a = 3;
        s.b = 5;
        refused(s2, &s, AT_ESCHED, "stage D has 1 loops; iterator 5 does not exist");
        ss_state_free(s2);
        ss_dag_unref(d2);
    }
    /* inlining a reduction */
    s = mk(SS_STEP_COMPUTE_INLINE, 2, 0);
    refused(st, &s, AT_ESCHED, "cannot inline C: it is a reduction");
    /* transforming an input */
    s = mk(SS_STEP_SPLIT, 0, 0);
    s.n_ints = 1;
    s.ints[0] = 2;
    refused(st, &s, AT_ESCHED, "stage 0 (A) is an input");
    /* reorder that is not a permutation, fuse that is not consecutive */
    s = mk(SS_STEP_REORDER, 2, 0);
    s.n_ints = 3;
    s.ints[0] = 0, s.ints[1] = 0, s.ints[2] = 1;
    refused(st, &s, AT_ESCHED, "reorder of C: the order is not a permutation of 0..2");
    s = mk(SS_STEP_FUSE, 2, 0);
    s.n_ints = 2;
    s.ints[0] = 0, s.ints[1] = 2;
    refused(st, &s, AT_ESCHED, "fuse in C: positions must be consecutive");
    /* stage out of range */
    s = mk(SS_STEP_COMPUTE_ROOT, 9, 0);
    refused(st, &s, AT_ESCHED, "stage 9 does not exist");
    /* cache_write after other steps on the stage */
    assert_int_equal(ss_state_split(st, 2, 0, 1, (int64_t[]){8}, err, sizeof err), AT_OK);
    s = mk(SS_STEP_CACHE_WRITE, 2, 0);
    strcpy(s.scope, "local");
    refused(st, &s, AT_ESCHED, "cache_write of C: it must come before other steps");
    /* rfactor on a spatial loop */
    s = mk(SS_STEP_RFACTOR, 2, 0);
    refused(st, &s, AT_ESCHED, "rfactor of C on i.0: the loop is not a reduction loop");
    /* splitting a loop that hosts another stage */
    assert_int_equal(ss_state_compute_at(st, 2, 3, 1, err, sizeof err), AT_OK);
    s = mk(SS_STEP_SPLIT, 3, 1);
    s.n_ints = 1;
    s.ints[0] = 4;
    refused(st, &s, AT_ESCHED, "split of D.j: stage C is computed at this loop");
    ss_state_free(st);
    ss_dag_unref(dag);
}

static void test_compute_at_infers_bounds(void **unused)
{
    ss_dag *dag = parse(mm);
    ss_state *st;
    char err[256];
    (void)unused;
    assert_int_equal(ss_state_new(dag, &st), AT_OK);
    assert_int_equal(ss_state_split(st, 3, 0, 1, (int64_t[]){16}, err, sizeof err), AT_OK);
    assert_int_equal(ss_state_split(st, 3, 2, 1, (int64_t[]){8}, err, sizeof err), AT_OK);
    assert_int_equal(ss_state_reorder(st, 3, 4, (int64_t[]){0, 2, 1, 3}, err, sizeof err), AT_OK);
    assert_int_equal(ss_state_compute_at(st, 2, 3, 1, err, sizeof err), AT_OK);
    assert_int_equal(ss_state_infer_bounds(st, err, sizeof err), AT_OK);
    /* C is computed per 16x8 tile of D */
    assert_int_equal(st->stages[2].region[0], 16);
    assert_int_equal(st->stages[2].region[1], 8);
    assert_int_equal(st->stages[2].ivars[2].extent, 32); /* the reduction keeps its extent */
    ss_state_free(st);
    ss_dag_unref(dag);
}

static void test_json_roundtrip(void **unused)
{
    ss_dag *dag = parse(mm);
    ss_state *st, *back;
    char err[256];
    at_buf a, b;
    (void)unused;
    assert_int_equal(ss_state_new(dag, &st), AT_OK);
    assert_int_equal(ss_state_cache_write(st, 2, "local", err, sizeof err), AT_OK);
    assert_int_equal(ss_state_split(st, 2, 2, 1, (int64_t[]){8}, err, sizeof err), AT_OK);
    assert_int_equal(ss_state_rfactor(st, 2, 3, 1, err, sizeof err), AT_OK);
    /* C.local.rf = 2, C.local = 3, C = 4, D = 5 */
    assert_int_equal(ss_state_split(st, 2, 0, 2, (int64_t[]){4, 2}, err, sizeof err), AT_OK);
    assert_int_equal(ss_state_annotate(st, 2, 0, SS_ANN_PARALLEL, err, sizeof err), AT_OK);
    assert_int_equal(ss_state_pragma_unroll(st, 2, 0, 64, err, sizeof err), AT_OK);
    assert_int_equal(ss_state_compute_inline(st, 5, err, sizeof err), AT_ESCHED);
    at_buf_init(&a);
    at_buf_init(&b);
    ss_state_to_json(st, &a);
    assert_string_equal(a.data,
                        "{\"v\":1,\"steps\":[[\"CHW\",2,\"local\"],[\"SP\",2,2,32,[8],1],"
                        "[\"RF\",2,3,1],[\"SP\",2,0,64,[4,2],1],"
                        "[\"AN\",2,0,3],[\"PR\",2,0,\"auto_unroll_max_step$64\"]]}");
    assert_int_equal(ss_state_from_json(dag, a.data, a.len, &back, err, sizeof err), AT_OK);
    ss_state_to_json(back, &b);
    assert_string_equal(a.data, b.data);
    at_buf_reset(&a);
    at_buf_reset(&b);
    ss_state_print(st, &a);
    ss_state_print(back, &b);
    assert_string_equal(a.data, b.data);
    at_buf_fini(&a);
    at_buf_fini(&b);
    ss_state_free(back);
    ss_state_free(st);
    ss_dag_unref(dag);
}

static void test_bad_json(void **unused)
{
    static const struct {
        const char *json;
        at_err code;
        const char *msg;
    } cases[] = {
        {"{\"v\":1,\"steps\":[", AT_EPARSE, "1:17: value expected"},
        {"[1,2]", AT_EPARSE, "a state is an object"},
        {"{\"v\":2,\"steps\":[]}", AT_EVERSION, "the state has format version 2"},
        {"{\"v\":1,\"steps\":[[\"XX\",1]]}", AT_EPARSE, "1:18: step 0: unknown step tag"},
        {"{\"v\":1,\"steps\":[[\"SP\",2,0]]}", AT_EPARSE, "1:17: step 0: wrong number of fields"},
        {"{\"v\":1,\"steps\":[[\"SP\",2,0,64,[4],0]]}", AT_EPARSE,
         "1:34: step 0: only inner_to_outer=1"},
        {"{\"v\":1,\"steps\":[[\"SP\",2,0,64,[\"a\"],1]]}", AT_EPARSE,
         "1:31: step 0: expected a non-negative integer"},
        {"{\"v\":1,\"steps\":[[\"PR\",2,0,\"auto_unroll_max_step$x\"]]}", AT_EPARSE,
         "1:27: step 0: bad auto_unroll_max_step value"},
        {"{\"v\":1,\"steps\":[[\"SP\",2,0,128,[4],1]]}", AT_ESCHED,
         "step 0 (SP) does not replay: split of C.i: the step was recorded for extent 128"},
        {"{\"v\":1,\"steps\":[[\"AN\",2,2,2]]}", AT_ESCHED,
         "step 0 (AN) does not replay: cannot vectorize C.k"},
    };
    ss_dag *dag = parse(mm);
    (void)unused;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ss_state *st = (ss_state *)1;
        char err[256];
        at_err e = ss_state_from_json(dag, cases[i].json, strlen(cases[i].json), &st, err,
                                      sizeof err);
        if (e != cases[i].code)
            fail_msg("case %zu: expected %s got %s (%s)", i, at_errname(cases[i].code),
                     at_errname(e), err);
        assert_null(st);
        if (strncmp(err, cases[i].msg, strlen(cases[i].msg)) != 0)
            fail_msg("case %zu: '%s' does not start with '%s'", i, err, cases[i].msg);
    }
    ss_dag_unref(dag);
}

static void test_from_json_survives_oom(void **unused)
{
    const char *json = "{\"v\":1,\"steps\":[[\"CHW\",2,\"local\"],[\"SP\",2,0,64,[4,2],1],"
                       "[\"RE\",2,[1,0,2,3,4]],[\"CA\",2,3,1]]}";
    ss_dag *dag = parse(mm);
    (void)unused;
    for (size_t limit = 0;; limit++) {
        ss_state *st = NULL;
        long live = at_test_live_allocs();
        at_err e;
        char err[256] = "";
        at_test_alloc_limit(limit);
        e = ss_state_from_json(dag, json, strlen(json), &st, err, sizeof err);
        at_test_alloc_limit(SIZE_MAX);
        if (e == AT_OK) {
            ss_state_free(st);
            break;
        }
        if (e != AT_ENOMEM)
            fail_msg("limit %zu: %s instead of ENOMEM: %s", limit, at_errname(e), err);
        assert_int_equal(at_test_live_allocs(), live);
        assert_true(limit < 100000);
    }
    ss_dag_unref(dag);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_illegal_steps),
        cmocka_unit_test(test_compute_at_infers_bounds),
        cmocka_unit_test(test_json_roundtrip),
        cmocka_unit_test(test_bad_json),
        cmocka_unit_test(test_from_json_survives_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
