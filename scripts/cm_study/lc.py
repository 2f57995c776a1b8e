import sys, numpy as np
sys.path.insert(0, __import__('os').path.dirname(__file__))
from base import cp, recall, fit, predict, split, TASKS
# the same 40 held out, 20-80 % of the task's 200 programs to train on (with the corpus)
for frac in (0.2, 0.4, 0.6, 0.8):
    res = {t: [] for t in TASKS}
    for s in range(32):
        tr, te = split(s, 40, int(frac * 200))
        b = fit(tr + cp, s)
        for t in TASKS:
            res[t].append(recall(predict(b, te[t]), np.array([p['cost'] for p in te[t]]), 5))
    print(frac, {t[:6]: round(float(np.mean(v)), 3) for t, v in res.items()}, flush=True)
