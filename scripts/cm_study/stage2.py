# A second model for the fast programs (issue 16 study): stage 1 is base.py's booster over
# all programs; stage 2 is trained only on each task's (and corpus workload's) fastest
# fraction Q, and re-ranks stage 1's top M of the held-out programs.
# Run: scripts/cm_study/run.sh stage2.py   (SPLITS, Q, M from the environment)
import sys, os, numpy as np
sys.path.insert(0, __import__('os').path.dirname(__file__))
import base
from base import ds, cp, fit, predict, split, recall, TASKS
S = int(os.environ.get('SPLITS', 21))
def fastest(progs, q):
    by = {}
    for p in progs:
        if p['cost'] < 1e9: by.setdefault(p['task'], []).append(p)
    out = []
    for t, ps in by.items():
        ps.sort(key=lambda p: p['cost']); out += ps[:max(8, int(q * len(ps)))]
    return out
extra = base.NONE
for q in [float(x) for x in os.environ.get('Q', '0.15 0.3 0.5').split()]:
    for M in [int(x) for x in os.environ.get('M', '10 15').split()]:
        r1, r2, rb = {t: [] for t in TASKS}, {t: [] for t in TASKS}, {t: [] for t in TASKS}
        for s in range(S):
            tr, te = split(s)
            b1 = fit(tr + cp, s, extra)
            b2 = fit(fastest(tr + cp, q), s, extra)
            for t in TASKS:
                P = te[t]; c = np.array([p['cost'] for p in P])
                p1 = predict(b1, P, extra); p2 = predict(b2, P, extra)
                top = np.argsort(-p1)[:M]
                # stage 2 orders stage 1's top M; the rest keep stage 1's order below them
                rest = np.setdiff1d(np.arange(len(P)), top)
                sc = np.full(len(P), -1e9); sc[top] = p2[top]
                sc[rest] -= np.argsort(np.argsort(-p1))[rest]
                r1[t].append(recall(p1, c, 5)); r2[t].append(recall(sc, c, 5))
                # blend: sum of the ranks among the top M
                o1 = np.argsort(np.argsort(-p1[top])); o2 = np.argsort(np.argsort(-p2[top]))
                sb = np.full(len(P), -1e9); sb[top] = -(o1 + o2)
                rb[t].append(recall(sb, c, 5))
        f = lambda r: {t[:6]: round(float(np.mean(v)), 3) for t, v in r.items()}
        print('Q %.2f M %d: stage 1 %s  stage 2 re-ranks %s  rank sum %s' % (q, M, f(r1), f(r2), f(rb)), flush=True)
