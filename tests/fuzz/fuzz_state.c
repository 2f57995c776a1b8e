/* tests/fuzz/fuzz_state.c -- libFuzzer target: the schedule state decoder
** (ss_state_from_json and ss_state_from_json_fit, schedule_space/ss_state.c) on any bytes,
** replayed on a matmul with an epilogue and on a padded convolution.  States come from
** outside the process: a store's records (imported JSON lines, a merged store) and
** 'tuner measure --state FILE'.  What it refuses it must explain; what it accepts it must
** print, and the printed text must decode again to the same text (byte-stable).  Seeds
** (Makefile): states of both DAGs written by the search's own steps. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "schedule_space/schedule_space.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const dags[] = {
    "input A[64, 32] float32\n"
    "const B[32, 48] float32\n"
    "C[i:64, j:48] = sum[k:32](A[i, k] * B[k, j])\n"
    "D[i:64, j:48] = max(C[i, j], 0.0)\n",
    "input X[1, 8, 14, 14] float32\n"
    "const W[16, 8, 3, 3] float32\n"
    "pad[n:1, c:8, h:16, w:16] = select(h >= 1 && h < 15 && w >= 1 && w < 15, "
    "X[n, c, h - 1, w - 1], 0.0)\n"
    "conv[n:1, k:16, h:14, w:14] = sum[c:8, r:3, s:3](pad[n, c, h + r, w + s] * W[k, c, r, s])\n",
};

static void check(ss_dag *dag, const uint8_t *data, size_t size, int fit)
{
    ss_state *st = (ss_state *)1, *again = NULL;
    char err[512];
    at_buf a, b;
    err[0] = 0;
    if ((fit ? ss_state_from_json_fit : ss_state_from_json)(dag, (const char *)data, size, &st,
                                                            err, sizeof err) != AT_OK) {
        if (st != NULL || err[0] == 0)
            abort(); /* a refusal leaves nothing and says why */
        return;
    }
    at_buf_init(&a);
    at_buf_init(&b);
    ss_state_to_json(st, &a);
    if (a.err || ss_state_from_json(dag, a.data, a.len, &again, err, sizeof err) != AT_OK)
        abort(); /* what was accepted prints, and the print replays */
    ss_state_to_json(again, &b);
    if (b.err || a.len != b.len || memcmp(a.data, b.data, a.len) != 0)
        abort();
    at_buf_fini(&a);
    at_buf_fini(&b);
    ss_state_free(again);
    ss_state_free(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static ss_dag *parsed[sizeof dags / sizeof dags[0]];
    char err[512];
    for (size_t i = 0; i < sizeof dags / sizeof dags[0]; i++) {
        if (parsed[i] == NULL && ss_dag_parse(dags[i], strlen(dags[i]), &parsed[i], err,
                                              sizeof err) != AT_OK)
            abort();
        check(parsed[i], data, size, 0);
        check(parsed[i], data, size, 1);
    }
    return 0;
}
