import sys, os, numpy as np
sys.path.insert(0, os.path.dirname(__file__))
import base
from base import cp, recall, fit, predict, split, TASKS, OUT
from load import load
# a tuning run's own records of each task (RUN_DBS: conv.db,matmul.db) added to the training
# data, as a run trains: does the model then rank held-out random programs' top 5 better?
run = []
for txt, db in zip(sys.argv[1].split(','), sys.argv[2].split(',')):
    run += load(txt, db)[1]
res = {t: [] for t in TASKS}; res0 = {t: [] for t in TASKS}
for s in range(21):
    tr, te = split(s)
    b = fit(tr + cp + run, s)
    for t in TASKS:
        res[t].append(recall(predict(b, te[t]), np.array([p['cost'] for p in te[t]]), 5))
print('with the run', {t[:6]: round(float(np.mean(v)), 3) for t, v in res.items()})
