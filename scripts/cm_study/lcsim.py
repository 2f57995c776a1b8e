# The task's learning curve with the simulation and machine-code columns (issue 16 study):
# lc.py's question (the same 40 held out, 40-160 of the task's programs to train on, with
# the corpus) for simasm.py's model.  Run: scripts/cm_study/run.sh lcsim.py (SPLITS=N, 32).
import sys, os, numpy as np
sys.path.insert(0, os.path.dirname(__file__))
import base
from base import ds, cp, fit, predict, split, recall, TASKS
here = os.path.dirname(__file__)
exec(open(os.path.join(here, 'sim.py')).read().split("for t in base.TASKS")[0])
exec(open(os.path.join(here, 'asm.py')).read().split("print('base'")[0])
S = int(os.environ.get('SPLITS', 32))
E = lambda p: np.concatenate([p['sim'], p['asm']])
for n in (40, 80, 120, 160):
    res = {t: [] for t in TASKS}
    for s in range(S):
        tr, te = split(s, 40, n)
        b = fit(tr + cp, s, E)
        for t in TASKS:
            res[t].append(recall(predict(b, te[t], E), np.array([p['cost'] for p in te[t]]), 5))
    print(n, {t[:6]: round(float(np.mean(v)), 3) for t, v in res.items()}, flush=True)
