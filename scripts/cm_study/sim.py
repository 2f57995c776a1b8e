# The cache simulation as more columns (issue 16 study): sim.c's per-thread counts of each
# program's line accesses, L1 / L2 / TLB misses, added to the booster's input, as logs and
# per statement run.  Run: scripts/cm_study/run.sh sim.py after sim.c's outputs are in
# CM_STUDY_OUT or SIM_DIR (sim_ds.txt for the data set, sim_cp*.txt for the corpus; run.sh
# makes them).  SIM_REG=1 adds the register-file columns (32 and 16 lines), SIM_ITER=1 the
# kept loops' iterations (all, and the innermost); SPLITS=N.
import sys, os, glob, numpy as np
sys.path.insert(0, os.path.dirname(__file__))
import base
from base import ds, cp, run, OUT
def read(paths):
    m = {}
    for path in paths:
        for line in open(path):
            v = line.split()
            m[int(v[0])] = np.array([float(x) for x in v[1:]], np.float64)
    return m
SD = os.environ.get('SIM_DIR', OUT)
A = read([SD + '/sim_ds.txt']); B = read(sorted(glob.glob(SD + '/sim_cp*.txt')))
def cols(a):
    st, acc, m1, m1n, m2, m2n, tlb, sto, _ = a[:9]
    l = lambda x: np.log2(1 + x)
    return np.array([l(st), l(acc), l(m1), l(m1n), l(m2), l(m2n), l(tlb), l(sto),
                     acc / st, m1 / st, m1n / st, m2 / st, m2n / st, tlb / st, sto / st,
                     l(m1 * 4 + m1n * 8 + m2 * 20 + m2n * 60 + tlb * 10)] +
                    ([l(a[9]), l(a[10]), a[9] / st, a[10] / st] if os.environ.get('SIM_REG') else []) +
                    ([l(a[11]), l(a[12]), a[11] / st, a[12] / st] if os.environ.get('SIM_ITER') else []),
                    np.float32)
NC = len(cols(next(iter(A.values()))))
for src, m in ((ds, A), (cp, B)):
    for p in src:
        a = m.get(p['rid'])
        p['sim'] = cols(a) if a is not None else np.full(NC, np.nan, np.float32)
print('programs simulated: ds %d/%d corpus %d/%d' % (sum(p['rid'] in A for p in ds), len(ds),
      sum(p['rid'] in B for p in cp), len(cp)), flush=True)
for t in base.TASKS:
    P = [p for p in ds if p['task'] == t and p['cost'] < 1e9]
    c = np.array([p['cost'] for p in P])
    for j, nm in enumerate(['stmts', 'acc', 'm1', 'm1n', 'm2', 'm2n', 'tlb', 'st']):
        e = np.array([p['sim'][j] for p in P])
        rc = np.corrcoef(np.argsort(np.argsort(e)), np.argsort(np.argsort(c)))[0, 1]
        print(t[:6], nm, 'rank corr with cost %.3f' % rc)
S = int(os.environ.get('SPLITS', 21))
print('base', run(splits=S), flush=True)
print('with cache simulation', run(extra=lambda p: p['sim'], splits=S), flush=True)
print('without corpus: base', run(splits=S, corpus=False), 'with', run(extra=lambda p: p['sim'], splits=S, corpus=False), flush=True)
