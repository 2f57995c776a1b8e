/* tuner/tuner_int.h -- what only the files of tuner/ see: the subcommand table's entry
** type, the flag parser every subcommand uses, and the subcommands themselves.
**
** Adding a subcommand: write 'int tn_cmd_NAME(const tn_cmd *cmd, int argc, char **argv)'
** in a tuner/tn_cli_*.c file, declare it here, and add one line to the table in
** tn_cli.c.  Parse flags with tn_opts_parse over a table of tn_opt, so that --help, the
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

typedef enum {
    TN_OPT_BOOL, /* --name; dest is int *, set to 1 */
    TN_OPT_STR,  /* --name VALUE or --name=VALUE; dest is const char ** */
    TN_OPT_INT   /* like STR, a decimal integer >= 0; dest is int * */
} tn_opt_kind;

typedef struct tn_opt {
    const char *name; /* long name without the dashes */
    char short_name;  /* -x, or 0 */
    tn_opt_kind kind;
    void *dest;
    const char *metavar; /* "FILE" in the help; NULL for BOOL */
    const char *help;
} tn_opt;

/* Parse argv[1..argc) of subcommand 'cmd' (argv[0] is its name).  Flags may come in any
** order and before, between or after positional arguments; "--" ends the flags; "-" is
** a positional argument.  Positional arguments are moved to the front of argv[1..] in
** order and counted in *n_pos (they start at argv[1]).  -h/--help sets *help.  Returns
** TN_EXIT_OK, or TN_EXIT_USAGE after printing a message naming the flag to stderr. */
int tn_opts_parse(const tn_cmd *cmd, const tn_opt *opts, int n_opts, int argc, char **argv,
                  int *n_pos, int *help);

/* Usage line, about text and the flags of 'cmd' (with its parent's name, e.g. "db"). */
void tn_opts_help(FILE *f, const char *parent, const tn_cmd *cmd, const tn_opt *opts,
                  int n_opts);

/* "tuner best: " etc. to stderr, then the message and a newline. */
void tn_err(const tn_cmd *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The subcommands of records (tn_cli_records.c). */
int tn_cmd_best(const tn_cmd *cmd, int argc, char **argv);
int tn_cmd_history(const tn_cmd *cmd, int argc, char **argv);
int tn_cmd_merge(const tn_cmd *cmd, int argc, char **argv);
int tn_cmd_export(const tn_cmd *cmd, int argc, char **argv);
int tn_cmd_import(const tn_cmd *cmd, int argc, char **argv);
int tn_cmd_db(const tn_cmd *cmd, int argc, char **argv);

/* The subcommands over whole models (tn_cli_model.c). */
int tn_cmd_tasks(const tn_cmd *cmd, int argc, char **argv);
int tn_cmd_run(const tn_cmd *cmd, int argc, char **argv);
int tn_cmd_export_lib(const tn_cmd *cmd, int argc, char **argv);

/* Measuring through the fleet (tn_cli_measure.c). */
int tn_cmd_measure(const tn_cmd *cmd, int argc, char **argv);

#endif /* TN_TUNER_INT_H */
