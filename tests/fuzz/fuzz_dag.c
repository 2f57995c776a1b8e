/* tests/fuzz/fuzz_dag.c -- libFuzzer target: the DAG text parser and checker
** (schedule_space/ss_parse.c, ss_dag.c) on any bytes.  What it accepts it must print, and
** the printed text must parse to the same workload key.  Seeds (Makefile): small DAGs of
** several shapes, and the inputs that once crashed it by recursion (10,000 nested
** parentheses, 200,000 unary minuses, a 30,000-term sum); scripts/fuzz.sh runs it with a
** 1 MiB stack, so that unbounded recursion fails the run. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "schedule_space/schedule_space.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ss_dag *dag = NULL, *again = NULL;
    char err[512];
    at_buf b;
    if (ss_dag_parse((const char *)data, size, &dag, err, sizeof err) != AT_OK) {
        if (dag != NULL || err[0] == 0)
            abort(); /* an error says what is wrong */
        return 0;
    }
    at_buf_init(&b);
    ss_dag_print(dag, &b);
    if (b.err)
        abort();
    if (ss_dag_parse(b.data, b.len, &again, err, sizeof err) != AT_OK ||
        strcmp(again->key, dag->key) != 0)
        abort();
    at_buf_fini(&b);
    ss_dag_unref(again);
    ss_dag_unref(dag);
    return 0;
}
