/* tests/fuzz/fuzz_tasks.c -- libFuzzer target: the tasks JSONL reader (models/md_tasks.c,
** which parses each line's DAG with schedule_space's parser) on any bytes.  What it accepts
** it must write again, and the writing must read back to the same tasks.  Seeds: a task
** list written by 'tuner tasks -o' (the Makefile's models section). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuner/tuner.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    md_task_list *tl = NULL, *again = NULL;
    char err[1024], *buf = NULL;
    size_t n = 0;
    FILE *f;
    if (md_tasks_read_jsonl("fuzz.jsonl", (const char *)data, size, &tl, err, sizeof err) != AT_OK) {
        if (tl != NULL || strncmp(err, "fuzz.jsonl:", 11) != 0)
            abort(); /* an error names the file and the line */
        return 0;
    }
    if ((f = open_memstream(&buf, &n)) == NULL)
        abort();
    if (md_tasks_write_jsonl(tl, f) != AT_OK)
        abort();
    fclose(f);
    if (md_tasks_read_jsonl("again.jsonl", buf, n, &again, err, sizeof err) != AT_OK ||
        again->n_tasks != tl->n_tasks)
        abort();
    for (int i = 0; i < tl->n_tasks; i++)
        if (strcmp(tl->tasks[i].key, again->tasks[i].key) != 0 ||
            tl->tasks[i].weight != again->tasks[i].weight)
            abort();
    md_task_list_free(again);
    md_task_list_free(tl);
    free(buf);
    return 0;
}
