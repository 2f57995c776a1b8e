/* cost_model/cost_model_int.h -- what only the files of cost_model/ see (prefix cm__).
**
** Invariants:
**   - a cm_data owns one flat float array of rows; program i has rows
**     [row_off[i], row_off[i] + n_rows[i]); a program with no rows (did not lower) is a
**     failure with label 0 and is never given to XGBoost.
**   - labels are derived data: cm__data_labels recomputes every label from the costs
**     (best cost of the task / cost) whenever programs were added.
**   - a cm_model's boosters: 'base' is a loaded model (never retrained here), 'boost' is
**     trained on the model's own data on top of base's scores; a program's score is the
**     sum over its rows of base(row) + boost(row). */
#ifndef CM_COST_MODEL_INT_H
#define CM_COST_MODEL_INT_H

#include <xgboost/c_api.h>

#include "cost_model/cost_model.h"

struct cm_data {
    int n, cap;            /* programs */
    int *task;             /* task index of each program */
    double *cost;          /* mean cost; AT_MEASURE_FAIL_COST when failed */
    double *label;         /* best cost of the task / cost; 0 when failed */
    int64_t *row_off;      /* first row of each program */
    int *n_rows;           /* rows of each program (0: not lowered) */
    int64_t n_all_rows, cap_rows;
    float *rows;           /* n_all_rows * CM_N_FEATS */
    int n_tasks, cap_tasks;
    char **task_names;     /* owned */
    int labels_dirty;
    int use_sim;           /* group 10 filled with 'sim' (cm_data_set_sim) */
    cm_sim_params sim;
    int use_code;          /* group 11 filled with code built for 'code' (cm_data_set_code) */
    kn_target code;
};

/* Task index of 'name', added if new; -1 when out of memory. */
int cm__data_task(cm_data *d, const char *name);
/* Append one program with its rows (copied) and cost. */
at_err cm__data_push(cm_data *d, int task, const float *rows, int n_rows, double cost);
/* Recompute labels if needed. */
void cm__data_labels(cm_data *d);
double cm__data_label(const cm_data *d, int i);

/* XGBoost's log routed to ours, once per process (before any XGBoost call). */
void cm__xgb_init(void);
/* XGBoost's last error as our error text; returns AT_EIO. */
at_err cm__xgb_fail(char *errmsg, size_t errmsg_size, const char *what);

/* Booster access for cm_blob.c: the loaded ones (0..n_base-1), then the one trained
** here (NULL if none). */
int cm__model_n_base(const cm_model *m);
BoosterHandle cm__model_base(const cm_model *m, int i);
BoosterHandle cm__model_boost(const cm_model *m);
/* Install loaded boosters (ownership moves on AT_OK) as the model's base, dropping any
** booster it had; their scores add up.  AT_EINVAL for more than the chain limit. */
at_err cm__model_set_base(cm_model *m, BoosterHandle *b, int n, int64_t n_records);
#define CM__MAX_BASE 8

#endif /* CM_COST_MODEL_INT_H */
