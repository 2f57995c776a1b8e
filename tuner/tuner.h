/* tuner/tuner.h -- the user-facing 'tuner' command (prefix tn_).
**
**   int main(int argc, char **argv) { return tn_cli_main(argc, argv); }
**
** 'tuner SUBCOMMAND [flags] [args]' runs one subcommand from the table in tn_cli.c
** (docs/cli.md lists them); 'tuner --help' and 'tuner SUBCOMMAND --help' print usage.
** The main tuning run ('tuner [flags] SPEC...') joins the table later. */
#ifndef TN_TUNER_H
#define TN_TUNER_H

#include <stddef.h>

#include "common/common.h"

#define TN_VERSION "0.1.0-dev"

/* Exit statuses of the command, the same for every subcommand. */
#define TN_EXIT_OK 0    /* done */
#define TN_EXIT_FAIL 1  /* the work failed (message on stderr), or a check found damage */
#define TN_EXIT_USAGE 2 /* bad command line: unknown subcommand or flag, missing value */
#define TN_EXIT_EMPTY 3 /* a query ran and found nothing (the notes say why) */

/* Run the command line; returns the exit status.  Writes results to stdout, messages to
** stderr.  Not reentrant across threads (it parses flags into static tables). */
int tn_cli_main(int argc, char **argv);

/* The replay check the command uses for records ('tuner best', 'tuner db check'), shaped
** as records.h's rec_replay_fn: AT_OK if 'state_json' is a schedule state that can be
** replayed on 'dag_text', otherwise AT_ESCHED with the reason in errmsg[0..n).  Until the
** schedule module's replay is wired in (it is being written), it checks the state's form
** only: a JSON object {"v":1,"steps":[[tag, ...], ...]} with a string tag first in every
** step.  It rejects nothing that the schedule module's JSON form allows. */
at_err tn_replay_check(void *ctx, const char *dag_text, const char *state_json, char *errmsg,
                       size_t n);

#endif /* TN_TUNER_H */
