# Diverse models rank-averaged (issue 16 study): boosters trained on different column sets
# (base; + the cache simulation; + the machine code; + both), each split's held-out programs
# ranked by the mean of their ranks under each model.  Run: scripts/cm_study/run.sh ens.py
# (after simasm.py's inputs exist; SPLITS=N, default 64).
import sys, os, numpy as np
sys.path.insert(0, os.path.dirname(__file__))
import base
from base import ds, cp, fit, predict, split, recall, TASKS
here = os.path.dirname(__file__)
exec(open(os.path.join(here, 'sim.py')).read().split("for t in base.TASKS")[0])
exec(open(os.path.join(here, 'asm.py')).read().split("print('base'")[0])
S = int(os.environ.get('SPLITS', 64))
E = {'base': base.NONE, 'sim': lambda p: p['sim'], 'asm': lambda p: p['asm'],
     'simasm': lambda p: np.concatenate([p['sim'], p['asm']])}
combos = [('base',), ('sim',), ('asm',), ('simasm',), ('base', 'sim'), ('sim', 'asm'),
          ('base', 'sim', 'asm'), ('base', 'sim', 'asm', 'simasm'), ('sim', 'asm', 'simasm')]
res = {c: {t: [] for t in TASKS} for c in combos}
rk = lambda x: np.argsort(np.argsort(x)).astype(np.float64)
for s in range(S):
    tr, te = split(s)
    B = {k: fit(tr + cp, s, e) for k, e in E.items()}
    for t in TASKS:
        c = np.array([p['cost'] for p in te[t]])
        R = {k: rk(predict(B[k], te[t], E[k])) for k in E}
        for cb in combos:
            res[cb][t].append(recall(sum(R[k] for k in cb), c, 5))
for cb in combos:
    print('+'.join(cb), {t[:6]: round(float(np.mean(v)), 3) for t, v in res[cb].items()}, flush=True)
