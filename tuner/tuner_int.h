/* tuner/tuner_int.h -- what only the files of tuner/ see: the subcommand table's entry
** type, the flag parser every subcommand uses, and the subcommands themselves.
**
** Functions declared here are private to tuner/ and named tn__ (the public ones, tuner.h,
** tn_).  Adding a subcommand: write 'int tn__cmd_NAME(const tn_cmd *cmd, int argc, char **argv)'
** in a tuner/tn_cli_*.c file, declare it here, and add one line to the table in
** tn_cli.c.  Parse flags with tn__opts_parse over a table of at_opt, so that --help, the
** error messages and the exit status are the same everywhere. */
#ifndef TN_TUNER_INT_H
#define TN_TUNER_INT_H

#include <stdio.h>

#include "tuner/tuner.h"

typedef struct tn_cmd tn_cmd;

struct tn_cmd {
    const char *name;    /* "best" */
    const char *args;    /* what follows the name in the usage line: "[flags] OUT IN..." */
    const char *summary; /* one line for 'tuner --help' */
    const char *about;   /* a paragraph for 'tuner NAME --help' */
    /* argv[0] is the subcommand's name; returns a TN_EXIT_ status */
    int (*run)(const tn_cmd *cmd, int argc, char **argv);
};

/* Flags: the table type and parser of common/ (at_opt, at_opts_parse), shared with tracker and
** rpc_agent. */

/* Parse argv[1..argc) of subcommand 'cmd' (argv[0] is its name).  Flags may come in any
** order and before, between or after positional arguments; "--" ends the flags; "-" is
** a positional argument.  Positional arguments are moved to the front of argv[1..] in
** order and counted in *n_pos (they start at argv[1]).  -h/--help sets *help.  Returns
** TN_EXIT_OK, or TN_EXIT_USAGE after printing a message naming the flag to stderr. */
int tn__opts_parse(const tn_cmd *cmd, const at_opt *opts, int n_opts, int argc, char **argv,
                  int *n_pos, int *help);
/* tn__opts_parse, then --help printed (tn__opts_help with 'parent'): *done set when the
** command has nothing more to do (help printed, or a bad flag: return the status). */
int tn__opts_cmd(const char *parent, const tn_cmd *cmd, const at_opt *opts, int n_opts,
                 int argc, char **argv, int *n_pos, int *done);

/* Usage line, about text and the flags of 'cmd' (with its parent's name, e.g. "db"). */
void tn__opts_help(FILE *f, const char *parent, const tn_cmd *cmd, const at_opt *opts,
                  int n_opts);

/* "tuner best: " etc. to stderr, then the message and a newline. */
void tn__err(const tn_cmd *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The subcommand of that name (not the tuning run), or NULL. */
const tn_cmd *tn__find_cmd(const char *name);

/* The subcommands of records (tn_cli_records.c). */
int tn__cmd_best(const tn_cmd *cmd, int argc, char **argv);
int tn__cmd_history(const tn_cmd *cmd, int argc, char **argv);
int tn__cmd_merge(const tn_cmd *cmd, int argc, char **argv);
int tn__cmd_export(const tn_cmd *cmd, int argc, char **argv);
int tn__cmd_import(const tn_cmd *cmd, int argc, char **argv);
int tn__cmd_db(const tn_cmd *cmd, int argc, char **argv);

/* "nhwc" or "nchw" (any case) into *layout (TN_LAYOUT_*); NULL gives the default.  0, or
** -1 after printing a message naming the flag. */
int tn__parse_layout(const tn_cmd *cmd, const char *s, int *layout);
/* "auto", "on" or "off" into *mode (TN_WINOGRAD_*); NULL gives auto.  As above. */
int tn__parse_winograd(const tn_cmd *cmd, const char *s, int *mode);
/* The CPUs this process may run on (its affinity mask: a container's or taskset's limit,
** not the machine's count), at least 1. */
int tn__usable_cpus(void);

/* --dim, as tune, tasks, run and export-lib take it (tn_cli_model.c): each occurrence is N
** (every symbolic dimension not named: 1 by default) or NAME=V[,V...], one value, or for
** one name at most several: the buckets a model is tuned for (ascending, distinct). */
#define TN_MAX_DIMS 8
#define TN_MAX_BUCKETS 32
typedef struct tn_dims {
    int64_t dflt;
    int n;
    char name[TN_MAX_DIMS][64];
    int n_values[TN_MAX_DIMS];
    int64_t values[TN_MAX_DIMS][TN_MAX_BUCKETS];
    int multi;             /* the name with several values, or -1 */
} tn_dims;
/* 0, or -1 after a message naming the bad --dim. */
int tn__parse_dims(const tn_cmd *cmd, const at_opt_list *l, tn_dims *d);
/* The buckets '--dim NAME=LO..HI' stands for (at most max of them, ascending): their count. */
int tn__dim_range(int64_t lo, int64_t hi, int64_t *out, int max);
/* The model options' dims (out[TN_MAX_DIMS]) with the multi-valued name at its value b. */
int tn__dims_at(const tn_dims *d, int b, md_dim *out);
#define TN_DIM_HELP "N, or NAME=V for a symbolic dimension ('seq=128'); " \
    "repeatable"
/* what a list of values may hold besides numbers (tuning, tasks, export-lib) */
#define TN_DIM_RANGE_HELP " (an element LO..HI: the buckets the tuner chooses over the range, " \
    "multiples of 16 at most 1.25x apart: 'seq=16..256')"

/* The subcommands over whole models (tn_cli_model.c). */
int tn__cmd_tasks(const tn_cmd *cmd, int argc, char **argv);
int tn__cmd_run(const tn_cmd *cmd, int argc, char **argv);
int tn__cmd_export_lib(const tn_cmd *cmd, int argc, char **argv);

/* Measuring through the fleet (tn_cli_measure.c). */
int tn__cmd_measure(const tn_cmd *cmd, int argc, char **argv);

/* ---- the evolutionary search of one task (tn_search.c) -------------------------------- */

#include "cost_model/cost_model.h"

typedef struct tn_search_cfg {
    int population;        /* states per generation (2048) */
    int n_generations;     /* generations of mutation per round (4) */
    double measured_ratio; /* part of the first generation taken from the best measured (0.2) */
    double eps_greedy;     /* part of each round picked at random (0.05) */
    double mutation_prob;  /* a child is a mutant with this probability, else a copy (0.85) */
    int n_threads;         /* threads lowering and featurizing a population (1; the tuner
                           ** gives its CPUs: nothing else runs while it searches) */
    const volatile int *stop; /* when set and nonzero, a round stops where it is and picks
                           ** from what it has (the tuner's SIGINT flag); NULL: never */
    int64_t max_code_size; /* programs whose kn_ir_code_size exceeds this are not picked
                           ** (they still breed); 0: no limit.  Needs the model's features:
                           ** a round without a model picks blind (TN_MAX_CODE_SIZE) */
} tn_search_cfg;

/* The default of --pretrain-max (docs/tuning.md, "Learn"). */
#define TN_PRETRAIN_MAX 20000
/* The default of --max-code-size (docs/tuning.md, "Building"). */
#define TN_MAX_CODE_SIZE 16000

void tn__search_cfg_default(tn_search_cfg *c);

typedef struct tn_search_good {
    char *json;
    ss_state *st;   /* the program, parsed once */
    cm_feats *f;    /* its features once known (from the tuner, or its first scoring) */
    double cost;
} tn_search_good;

typedef struct tn_search {
    ss_dag *dag;
    ss_space *sp;
    tn_search_cfg cfg;
    at_rng rng;
    uint64_t *seen;        /* programs measured or picked: hash set of their states' texts
                           ** and, once lowered, of the programs (kn_ir_hash) */
    int n_seen, cap_seen;
    tn_search_good *good;  /* measured successfully: state JSON and mean cost */
    int n_good, cap_good;
    ss_state **seeds;      /* states of similar tasks, replayed on this DAG: offered to the
                           ** next round's first population (then dropped) */
    int n_seeds;
    int64_t n_lowered;     /* programs lowered for scoring (each once: copies keep theirs) */
    int64_t n_parsed;      /* state JSON parsed (records from the store, seeds) */
    int widen;             /* 0..TN_SEARCH_MAX_WIDEN: rounds of the task without a better
                           ** program (tn__search_set_widen); each level draws more fresh
                           ** samples, picks more at random and mutates further */
} tn_search;

typedef struct tn_search_stats {
    int n_sampled, n_sample_fail, n_scored, n_mutated, n_mutation_fail;
    int n_picked_model, n_picked_random;
    int n_too_big;         /* scored members over max_code_size (each generation) */
    int n_picked_big;      /* picked over it: the round found nothing within it */
    int n_same_program;    /* picks passed over: another state of a program measured or
                           ** picked already (the same kn_ir_hash) */
} tn_search_stats;

at_err tn__search_new(ss_dag *dag, const ss_hw *hw, const tn_search_cfg *cfg, uint64_t seed,
                     tn_search **out, char *errmsg, size_t errmsg_size);
void tn__search_free(tn_search *s);
/* A measured program (from this run or from the store): never picked again; a successful
** one may seed later populations.  'st' is the program when the caller has it (then the JSON
** is not parsed), and 'f' its features when known (may be NULL); both are copied. */
at_err tn__search_add_measured(tn_search *s, const char *state_json, const ss_state *st,
                               const cm_feats *f, double cost_s, int ok);
int tn__search_n_seen(const tn_search *s);
/* Exploration that keeps finding (issue 16, item 2): the tuner says how many rounds in a
** row found nothing better (capped at TN_SEARCH_MAX_WIDEN).  At level w the next round's
** first population takes measured_ratio / (1 + w) from the best measured (the rest fresh
** samples), picks eps_greedy + 0.1 w of its programs at random, and breeds children with
** up to 1 + w mutations each; level 0 is the plain round. */
#define TN_SEARCH_MAX_WIDEN 3
void tn__search_set_widen(tn_search *s, int level);
/* Offer a state of another task (its JSON), or a hand-written one, to this task's next
** round: kept when it replays on this task's DAG (1), dropped otherwise (0); -1 on ENOMEM.
** At most TN_SEARCH_MAX_SEEDS are kept.  The next round puts them in its first population
** and measures them (up to half of its picks) whatever the cost model predicts. */
#define TN_SEARCH_MAX_SEEDS 32
int tn__search_seed(tn_search *s, const char *state_json);
/* The JSON of the k-th best measured program (0: the best), or NULL. */
const char *tn__search_best_json(tn_search *s, int k);
/* Free features the search handed out (cm_feats_fini, then at_free); NULL is fine. */
void tn__feats_free(cm_feats *f);
/* One round: up to n_pick programs never measured or picked before, into out[] (the caller
** owns them), and when out_feats is not NULL the features their scoring computed in
** out_feats[] (at_malloc'd, the caller frees them with cm_feats_fini and at_free; NULL for
** a program that was not scored).  'model' NULL scores at random (no features). */
at_err tn__search_round(tn_search *s, cm_model *model, int n_pick, ss_state **out,
                        cm_feats **out_feats, int *n_out, tn_search_stats *stats);

/* ---- the tuning run (tn_tune.c) ------------------------------------------------------- */

enum { TN_FLUSH_OFF, TN_FLUSH_ALL, TN_FLUSH_WEIGHTS };

typedef struct tn_tune_opts {
    int64_t trials;          /* the budget of the whole run (all tasks) */
    const char *target;      /* compilation target string */
    const char *tracker;     /* NULL: the embedded tracker and agent */
    const at_wire_key *keys; /* fleet keys (remote) */
    int n_keys;
    const char *device_key;  /* the agents' key ("local" in the embedded mode) */
    int priority;
    int wait_timeout_s;      /* give up when no agent serves the key this long */
    const char *db;          /* the records store */
    const char *cmdline;     /* stored with the run */
    uint64_t seed;
    int resume;              /* count and reuse what the store has for these tasks */
    int per_round;           /* measurements per round (64) */
    int per_round_auto;      /* per_round is the default (trials / tasks, at most 64): halved
                             ** when the cost model starts trained */
    int number, repeat;      /* timing: calls per repeat, repeats */
    double min_repeat_ms;
    int flush_cache;         /* evict before each repeat: TN_FLUSH_OFF, _ALL (every input) or
                             ** _WEIGHTS (the constant inputs: what a model reads from
                             ** memory at every step) */
    int timeout_ms;          /* a job's run timeout on the device */
    double cutoff;           /* a candidate whose checked run is over this many times the
                             ** task's best so far is not repeated (0: off; default 10) */
    int early_stop;          /* a task stops after this many trials without a new best (0: off) */
    int no_retime;           /* 1: a task's first-round best is not timed again */
    int build_workers;       /* build worker processes (0: build in this process) */
    int build_timeout_ms;
    const char *build_worker_exe; /* NULL: this program */
    int embedded_threads;    /* the embedded agent's kernel threads (0: all cores) */
    int overlap;             /* embedded mode: the next round is searched and built while the
                             ** agent measures this one (a tracker's rounds always overlap) */
    int kernel_cpus;         /* with overlap: the kernels are pinned to the first kernel_cpus
                             ** CPUs this process may use, the tuner, its threads and its build
                             ** workers to the others (0: no pinning) */
    int layout_rewrite;      /* let schedules store weights in their tiles' order */
    int no_model;            /* random scores instead of the cost model (for experiments) */
    int64_t pretrain_max;    /* train the model at the start on the store's records when it
                             ** holds 16 to this many (else start from its saved model) */
    int quiet;               /* no progress, no report */
    tn_search_cfg search;
    int n_buckets;           /* models tuned for several values of a symbolic dimension: */
    const struct tn_tune_buckets {
        const char *sig, *dim, *model; /* recorded in the store (rec_buckets_put) */
        int n;
        const int64_t *values;
    } *buckets;
} tn_tune_opts;

/* One use of a task in a model whose task list has alternatives (a convolution's direct
** task, side 0, or its Winograd tasks, side 1): the model runs whichever side costs less,
** so a round of a task on the dearer side is worth only what it could bring the choice. */
typedef struct tn_tune_use {
    int choice; /* the convolution (an id shared by both sides' tasks), -1: no choice */
    int side;
} tn_tune_use;

typedef struct tn_tune_task {
    const char *name;
    ss_dag *dag;
    int weight;
    const char *tag; /* similarity group (md_task.tag), or NULL: similar to no other task */
    int n_uses;      /* 0: 'weight' uses without choices */
    const tn_tune_use *uses;
} tn_tune_task;

#define TN_TUNE_MAX_REPORT 256

typedef struct tn_tune_report {
    int64_t total_trials;
    int interrupted;
    int n_tasks;
    double best_cost[TN_TUNE_MAX_REPORT];
    double first_round_best[TN_TUNE_MAX_REPORT];
    int64_t trials[TN_TUNE_MAX_REPORT];
    int warm[TN_TUNE_MAX_REPORT];    /* trials planned for each task's first round */
    int seeded[TN_TUNE_MAX_REPORT];  /* programs of similar tasks offered to it */
} tn_tune_report;

/* Tune the tasks within o->trials trials; every trial ends as one record in o->db. */
at_err tn__tune(const tn_tune_opts *o, tn_tune_task *tasks, int n_tasks, tn_tune_report *rep,
               char *errmsg, size_t errmsg_size);

/* The main tuning command (the command line that names no subcommand). */
int tn__cmd_tune(const tn_cmd *cmd, int argc, char **argv);
/* 'tuner plot' (tn_plot.c). */
int tn__cmd_plot(const tn_cmd *cmd, int argc, char **argv);
/* The p-th percentile (0..100) of sorted[0..n), interpolated between neighbours. */
double tn__percentile(const double *sorted, int n, double p);
/* A histogram of n run latencies (sorted_ms ascending, in ms) with p50/p90/p99 marked,
** into 'path' (.png or .svg, by its name); 0, or -1 with the reason in err. */
int tn__plot_histogram(const double *sorted_ms, int n, const char *title, const char *path,
                       char *err, size_t err_size);
/* Several runners' latencies on the same axes (common bins, each series in its colour with
** its p50/p90/p99 and a legend; a logarithmic x axis when they span over 4x); as above. */
typedef struct tn_lat_series {
    const char *name;
    const double *sorted_ms;
    int n;
} tn_lat_series;
int tn__plot_latencies(const tn_lat_series *series, int n_series, const char *title,
                       const char *path, char *err, size_t err_size);
/* 'tuner plot-latency -o FILE NAME=FILE...' (tn_plot.c). */
int tn__cmd_plot_latency(const tn_cmd *cmd, int argc, char **argv);

/* ---- what a tuning run and tn_measurer share (tn_measure.c) ---------------------------- */

struct utsname;
/* The records device of a result the tuner host writes itself (a failed build). */
void tn__build_device(const kn_target *t, const struct utsname *uts, rec_device *d);
/* Build the naive schedule of 'dag' for 't' (on a GPU the naive GPU schedule) and register
** it at the fleet as the reference agents check outputs against; sets id. */
at_err tn__add_reference(tn_fleet *f, ss_dag *dag, const kn_target *t,
                         uint8_t id[AT_WIRE_REFID_BYTES], char *errmsg, size_t errmsg_size);
/* Record job j's failed build b (COMPILE_HOST, or BUILD_TIMEOUT) on 'dev', agent
** "tuner-build"; *status gets the code.  AT_EIO when the store refuses it. */
at_err tn__record_build_failure(rec_store *st, const rec_device *dev, const tn_fleet_job *j,
                                const tn_build_res *b, int *status);

#endif /* TN_TUNER_INT_H */
