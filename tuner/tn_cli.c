/* tuner/tn_cli.c -- the 'tuner' command: the table of subcommands, dispatch, usage and
** the flag parser that every subcommand uses.
**
** Exit statuses are TN_EXIT_* (tuner.h): 0 done, 1 failed, 2 bad command line, 3 a
** query found nothing.  Results go to stdout, messages to stderr. */
#include "tuner/tuner_int.h"

#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include "records/records.h"

static int cmd_help(const tn_cmd *cmd, int argc, char **argv);

/* The main tuning run: the command line names no subcommand. */
static const tn_cmd tune_cmd = {
    "", "[flags] SPEC...", "tune operators, DAG files, ONNX models or task lists",
    "Tune every SPEC within the trial budget: a library operator with its shapes\n"
    "(matmul:M=1024,N=1024,K=1024, docs/operators.md), a DAG text file (docs/dag_format.md),\n"
    "an ONNX model (its tasks: docs/models.md) or a task list written by 'tuner tasks -o'.\n"
    "Without --tracker the embedded tracker and agent measure on this machine.  Every trial\n"
    "is committed to the records store (--db) as it completes; Ctrl-C stops after the round\n"
    "in flight; --resume continues a run from the store.  Exit status: 0 done, 1 failed,\n"
    "2 bad command line, 130 interrupted.",
    tn__cmd_tune};

/* The subcommands.  Later issues add theirs here (and the main tuning run, which takes
** over a command line that names no subcommand). */
static const tn_cmd commands[] = {
    {"best", "[--db FILE] [--task KEY] [--target T] [--device KEY [--fallback arch]] "
             "[--top N] [--json]",
     "the best schedules of tasks, per target and device",
     "Print the best measured schedules: for each task (workload key) and target, the TOP\n"
     "fastest successful records of each device that measured it.  Records of another\n"
     "target or device are never shown as if they were the one asked for: every row names\n"
     "its target, device key and device fingerprint, and with --device a fallback to\n"
     "other devices of the same architecture happens only with --fallback arch, marked\n"
     "FALLBACK.  Records whose state no longer replays on the task's DAG are skipped and\n"
     "listed.  Exit status 3 when nothing matches.",
     tn__cmd_best},
    {"history", "[--db FILE] [--task KEY] [--target T] [--device KEY] [--all] [--json]",
     "a task's best cost over its trials",
     "Print how the best cost of each task (per target and device) improved trial by\n"
     "trial: by default the trials that set a new best, with --all every trial.\n"
     "Exit status 3 when nothing matches.",
     tn__cmd_history},
    {"merge", "[--quiet] OUT IN...", "merge record stores into one",
     "Copy every record of the stores IN... into the store OUT (created if missing).\n"
     "Records of the same task, state and device fingerprint are kept once (the better\n"
     "one: a success over a failure, then the lower mean cost); a job id already in OUT\n"
     "is skipped.  All inputs are checked before OUT is touched, and the merge is one\n"
     "transaction: if anything fails, OUT is left as it was.",
     tn__cmd_merge},
    {"export", "[--db FILE] [--format jsonl] [-o FILE] [--task KEY] [--target T] "
               "[--device KEY]",
     "write records as JSON lines",
     "Write the records (all, or those of one task, target or device key) as JSON lines,\n"
     "one record per line, in a stable order (docs/records.md describes the format).\n"
     "Exporting a store that was imported from an export gives the same bytes.",
     tn__cmd_export},
    {"import", "[--db FILE] [--quiet] [FILE...]", "read records from JSON lines",
     "Read records written by 'tuner export' from the FILEs (or standard input, also as\n"
     "'-') into the store, with merge's rules for duplicates.  The import is one\n"
     "transaction: a malformed line is reported as FILE:LINE:COLUMN and nothing is stored.",
     tn__cmd_import},
    {"db", "check|info [--db FILE] [flags]", "check or describe a records store",
     "  check   integrity check: SQLite's own, then every row, then whether each\n"
     "          successful record's state still replays; exit status 1 on damage\n"
     "  info    schema version and counts",
     tn__cmd_db},
    {"measure", "[--tracker HOST:PORT --fleet-key FILE] [--key K] [--db FILE] [flags] SPEC...",
     "measure operators' naive and hand-written schedules through the fleet",
     "Build each library operator SPEC (e.g. matmul:M=256,N=256,K=256) with its naive and its\n"
     "hand-written schedule, measure both on the fleet (docs/fleet.md: the embedded tracker and\n"
     "agent in this process unless --tracker is given), check them against the naive reference,\n"
     "store every result in the records store, and print their times.  With --state FILE,\n"
     "measure the schedule states of FILE (one JSON object a line) of the one SPEC instead;\n"
     "with --rounds N, measure the list N times over, interleaved, and print the medians.",
     tn__cmd_measure},
    {"dataset", "--random N --task TASK | --corpus N | --pretrain | --eval [--db FILE] [flags]",
     "measure random schedules for the cost model; pre-train or evaluate it",
     "Build the cost model's data: with --random N, sample N distinct random schedules of\n"
     "TASK, measure each on this host (checked against the naive schedule) and store the\n"
     "results.  With --corpus N, do that for each workload of the pre-training corpus\n"
     "(common vision and language layers) until the store holds N of each: a new store's\n"
     "cost model then starts from what they teach.  With --pretrain, train a cost model on\n"
     "every record of the store and save it there for the target, so a new run starts with\n"
     "it.  With --eval, train on 80% of\n"
     "the records and print ranking metrics on the other 20%.  docs/cost_model.md.",
     tn_cmd_dataset},
    {"tasks", "[-o FILE] [-v] [--dim N] MODEL", "the tasks of a model (ONNX) or task list",
     "Cut an ONNX model into tasks (each anchor operator fused with its elementwise\n"
     "consumers; docs/models.md) and list them with their workload keys, weights (uses in\n"
     "the model), FLOPs and shapes.  -o writes them as JSON lines, which 'tuner export-lib'\n"
     "and the tuner read without the model.  Unsupported operators are warnings naming\n"
     "their nodes; the rest of the model still gives tasks.",
     tn__cmd_tasks},
    {"run", "[--db FILE] [--lib FILE] [--repeat N] [flags] MODEL",
     "run a model with its tuned kernels and check it against the naive lowering",
     "Run the whole model once on this machine with each task's best kernel from the records\n"
     "store (the naive kernel for tasks without records), or with the kernels of a library\n"
     "made by export-lib (--lib), then once with every task's naive kernel, and compare the\n"
     "outputs.  Inputs and weights without values are filled with deterministic random\n"
     "values (--seed).  Exit status 1 when an output differs by more than 1e-4 (relative).",
     tn__cmd_run},
    {"export-lib", "--db FILE [--target T] -o LIB.so [flags] MODEL|TASKS.jsonl",
     "a shared library of the best kernel of every task, and its C header",
     "Build the best kernel of every task of the model (or of a task list from 'tuner tasks\n"
     "-o') for the target, naive ones for tasks without records, and link them into one\n"
     "shared library (x86-64 Linux, aarch64 Linux or aarch64 Android) with one C function\n"
     "per task, declared in LIB.h.  docs/models.md has the calling convention.",
     tn__cmd_export_lib},
    {"plot", "[--db FILE] [--task KEY] [--target T] [--device KEY] -o FILE.svg|FILE.png",
     "draw a task's tuning curve",
     "Draw the best GFLOPS of a task over its trials (every record of the task, in trial\n"
     "order) as an SVG or PNG picture.",
     tn__cmd_plot},
    {"plot-latency", "-o FILE.svg|FILE.png [--title TEXT] NAME=FILE...",
     "draw several runners' latency distributions on the same axes",
     "Draw the latencies of one to eight runners (each FILE: milliseconds, one per line, as\n"
     "lib_run --latencies and make bench-model write them) as histograms on the same axes,\n"
     "with each one's p50, p90 and p99, and print those figures.",
     tn__cmd_plot_latency},
    {"help", "[SUBCOMMAND]", "help on the command or a subcommand", NULL, cmd_help},
};

const tn_cmd *tn__find_cmd(const char *name)
{
    for (size_t i = 0; i < AT_ARRAY_LEN(commands); i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tuner [--trials N] [--target T] [--tracker HOST:PORT --key K] [--db F]\n"
               "             [--seed S] [--resume] [flags] SPEC...   tune (tuner --help-tune)\n"
               "       tuner SUBCOMMAND [flags] [args]\n"
               "       tuner SUBCOMMAND --help\n\n"
               "subcommands:\n");
    for (size_t i = 0; i < AT_ARRAY_LEN(commands); i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nflags before the subcommand:\n"
               "  --log-level LEVEL  debug, info, warn, error or off (default warn)\n"
               "  --version          print the version\n"
               "  -h, --help         this help\n\n"
               "Exit status: 0 done, 1 failed, 2 bad command line, 3 a query found nothing.\n"
               "docs/cli.md describes every subcommand.\n");
}

int tn__usable_cpus(void)
{
    cpu_set_t s;
    long n;
    if (sched_getaffinity(0, sizeof s, &s) == 0 && CPU_COUNT(&s) > 0)
        return CPU_COUNT(&s);
    n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void tn__err(const tn_cmd *cmd, const char *fmt, ...)
{
    va_list ap;
    int named = cmd && cmd->name[0];
    fprintf(stderr, "tuner%s%s: ", named ? " " : "", named ? cmd->name : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static int cmd_help(const tn_cmd *cmd, int argc, char **argv)
{
    const tn_cmd *c;
    char *sub[3];
    (void)cmd;
    if (argc < 2) {
        usage(stdout);
        return TN_EXIT_OK;
    }
    if ((c = tn__find_cmd(argv[1])) == NULL || c->run == cmd_help) {
        tn__err(cmd, "unknown subcommand '%s' (see 'tuner --help')", argv[1]);
        return TN_EXIT_USAGE;
    }
    sub[0] = argv[1];
    sub[1] = (char *)"--help";
    sub[2] = NULL;
    return c->run(c, 2, sub);
}

int tn_cli_main(int argc, char **argv)
{
    const tn_cmd *c;
    int i = 1;

    at_log_set_level(AT_LOG_WARN);
    while (i < argc && argv[i][0] == '-') {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return TN_EXIT_OK;
        }
        if (strcmp(a, "--help-tune") == 0) {
            char *sub[3] = {(char *)"tuner", (char *)"--help", NULL};
            return tn__cmd_tune(&tune_cmd, 2, sub);
        }
        if (strcmp(a, "--version") == 0) {
            printf("tuner %s (records schema %d, JSONL format %d)\n", TN_VERSION,
                   REC_SCHEMA_VERSION, REC_JSONL_VERSION);
            return TN_EXIT_OK;
        }
        if (strcmp(a, "--log-level") == 0 || strncmp(a, "--log-level=", 12) == 0) {
            const char *v = a[11] == '=' ? a + 12 : (i + 1 < argc ? argv[++i] : NULL);
            at_log_level lv;
            if (v == NULL || at_log_parse_level(v, &lv) != AT_OK) {
                tn__err(NULL, "--log-level needs debug, info, warn, error or off");
                return TN_EXIT_USAGE;
            }
            at_log_set_level(lv);
            i++;
            continue;
        }
        /* a flag of the tuning run: the whole command line is a tuning run */
        return tn__cmd_tune(&tune_cmd, argc, argv);
    }
    if (i >= argc) {
        usage(stderr);
        return TN_EXIT_USAGE;
    }
    if (strcmp(argv[i], "__build-worker") == 0)
        return tn_build_worker_main();
    if ((c = tn__find_cmd(argv[i])) == NULL)
        return tn__cmd_tune(&tune_cmd, argc, argv); /* tuner [flags] SPEC... */
    return c->run(c, argc - i, argv + i);
}

/* ---- flags ---- */

int tn__opts_parse(const tn_cmd *cmd, const at_opt *opts, int n_opts, int argc, char **argv,
                  int *n_pos, int *help)
{
    char prog[80];
    snprintf(prog, sizeof prog, "tuner%s%s", cmd->name[0] ? " " : "", cmd->name);
    return at_opts_parse(prog, opts, n_opts, argc, argv, n_pos, help) ? TN_EXIT_USAGE
                                                                        : TN_EXIT_OK;
}

int tn__opts_cmd(const char *parent, const tn_cmd *cmd, const at_opt *opts, int n_opts,
                 int argc, char **argv, int *n_pos, int *done)
{
    int help, rc = tn__opts_parse(cmd, opts, n_opts, argc, argv, n_pos, &help);
    *done = 1;
    if (rc != TN_EXIT_OK)
        return rc;
    if (help) {
        tn__opts_help(stdout, parent, cmd, opts, n_opts);
        return TN_EXIT_OK;
    }
    *done = 0;
    return TN_EXIT_OK;
}

void tn__opts_help(FILE *f, const char *parent, const tn_cmd *cmd, const at_opt *opts,
                  int n_opts)
{
    fprintf(f, "usage: tuner %s%s%s %s\n", parent ? parent : "", parent ? " " : "", cmd->name,
            cmd->args);
    if (cmd->about)
        fprintf(f, "\n%s\n", cmd->about);
    fprintf(f, "\nflags:\n");
    at_opts_help(f, opts, n_opts);
}
