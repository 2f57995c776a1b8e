# A physical model of the run time fitted over every workload (issue 16 study): the cost of
# a program as a non-negative sum of counts times cycles each -- its vector arithmetic
# (lane_ops), and sim.c's line accesses, L1 / L2 misses (those on the next line and the
# others), TLB misses and stored lines, per thread -- fitted by least relative squares on
# the training programs (the task's and the corpus's), then used as the ranking, and its
# log as one more column of the booster.  Run: scripts/cm_study/run.sh simlin.py (SPLITS).
import sys, os, numpy as np
from scipy.optimize import nnls
sys.path.insert(0, os.path.dirname(__file__))
import base
from base import ds, cp, run, split, recall, TASKS, names
S = int(os.environ.get('SPLITS', 64))
here = os.path.dirname(__file__)
exec(open(os.path.join(here, 'sim.py')).read().split("for t in base.TASKS")[0])
LO = names.index('lane_ops')
for src, m in ((ds, A), (cp, B)):
    for p in src:
        a = m.get(p['rid'])
        lo = float(np.sum(2.0 ** np.array([r[LO] for r in p['rows']]) - 1))
        if a is None: p['cnt'] = None; continue
        st, acc, m1, m1n, m2, m2n, tlb, sto = a[:8]
        p['cnt'] = np.array([lo, acc, m1 - m1n, m1n, m2 - m2n, m2n, tlb, sto, 1.0])
def fitlin(train):
    P = [p for p in train if p['cnt'] is not None and p['cost'] < 1e9]
    X = np.stack([p['cnt'] / p['cost'] for p in P]); y = np.ones(len(P))
    sc = X.max(axis=0) + 1e-30
    c, _ = nnls(X / sc, y)
    return c / sc
res = {t: [] for t in TASKS}; coefs = []
for s in range(S):
    tr, te = split(s)
    c = fitlin(tr + cp); coefs.append(c)
    for t in TASKS:
        P = te[t]; cost = np.array([p['cost'] for p in P])
        pred = np.array([p['cnt'] @ c for p in P])
        res[t].append(recall(-pred, cost, 5))
np.set_printoptions(precision=3)
print('coefficients (s a count; median over splits): lane_ops, accesses, L1 next-line, L1 other, L2 next-line, L2 other, TLB, stores, constant:', np.median(np.array(coefs), axis=0))
print('physical model alone, top-5', {t[:6]: round(float(np.mean(v)), 3) for t, v in res.items()}, flush=True)
# its log as a column: fitted on all programs (an upper bound: the held-out ones included)
c = fitlin(ds + cp)
for p in ds + cp: p['lin'] = np.array([np.log2(p['cnt'] @ c) if p['cnt'] is not None else np.nan], np.float32)
print('booster + sim + physical (fitted on all)', run(extra=lambda p: np.concatenate([p['sim'], p['lin']]), splits=S), flush=True)
