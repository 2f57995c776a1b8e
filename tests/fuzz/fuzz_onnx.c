/* tests/fuzz/fuzz_onnx.c -- libFuzzer target: the ONNX loader (models/md_onnx.c's decoding
** with protobuf-c and the depth pre-check, then md_graph.c/md_infer.c/md_rewrite.c's checks,
** shape inference, constant folding and rewrites) on any bytes.  Whatever the bytes, the
** result is a graph or an error with a message; a decoded graph must prepare without a
** crash, and every warning and error must name the file.  Seeds: small models from
** scripts/make_models.py (the Makefile's models section writes them into the corpus). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "models/md_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    md_graph *g = NULL;
    char err[1024];
    at_err e = md__onnx_decode(data, size, "fuzz.onnx", NULL, &g, err, sizeof err);
    if (e != AT_OK) {
        if (g != NULL || (e != AT_ENOMEM && strncmp(err, "fuzz.onnx: ", 11) != 0))
            abort(); /* an error must say which file */
        return 0;
    }
    e = md__graph_prepare(g, err, sizeof err);
    if (e != AT_OK && e != AT_ENOMEM && strncmp(err, "fuzz.onnx: ", 11) != 0)
        abort();
    for (int i = 0; i < g->n_warnings; i++)
        if (strncmp(g->warnings[i], "fuzz.onnx: ", 11) != 0)
            abort();
    md__graph_free(g);
    return 0;
}
