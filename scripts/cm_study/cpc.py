# The corpus's learning curve (issue 16 study): each corpus workload cut to 50 or 100 of
# its 200 programs, with and without the simulation and machine-code columns.  Does a
# larger corpus promise top-5 recall?  Run: scripts/cm_study/run.sh cpc.py (SPLITS=N, 32).
import sys, os, numpy as np
sys.path.insert(0, os.path.dirname(__file__))
import base
from base import ds, cp, fit, predict, split, recall, TASKS
here = os.path.dirname(__file__)
exec(open(os.path.join(here, 'sim.py')).read().split("for t in base.TASKS")[0])
exec(open(os.path.join(here, 'asm.py')).read().split("print('base'")[0])
S = int(os.environ.get('SPLITS', 32))
E = {'base': base.NONE, 'simasm': lambda p: np.concatenate([p['sim'], p['asm']])}
W = sorted(set(p['task'] for p in cp))
print('corpus workloads', len(W), [sum(p['task'] == w for p in cp) for w in W], flush=True)
for n in (0, 50, 100, 200):
    rng = np.random.default_rng(5)
    sub = []
    for w in W:
        q = [p for p in cp if p['task'] == w]; idx = rng.permutation(len(q))[:n]; sub += [q[i] for i in idx]
    for k, e in E.items():
        res = {t: [] for t in TASKS}
        for s in range(S):
            tr, te = split(s)
            b = fit(tr + sub, s, e)
            for t in TASKS:
                c = np.array([p['cost'] for p in te[t]]); res[t].append(recall(predict(b, te[t], e), c, 5))
        print(n, k, {t[:6]: round(float(np.mean(v)), 3) for t, v in res.items()}, flush=True)
