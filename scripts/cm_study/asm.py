# The machine code as more columns (issue 16 study): asm.c's counts of what LLVM emitted for
# each program (innermost loops, per loop depth), with ratios, added to the booster's input.
# Run: scripts/cm_study/run.sh asm.py after asm.c's outputs are in CM_STUDY_OUT
# (asm_ds.txt for the data set, asm_cp*.txt for the corpus).
import sys, os, glob, numpy as np
sys.path.insert(0, __import__('os').path.dirname(__file__))
import base
from base import ds, cp, run, OUT
def read(paths):
    m = {}
    for path in paths:
        for line in open(path):
            v = line.split()
            m[int(v[0])] = np.minimum(np.array([float(x) for x in v[1:]]), 1e30).astype(np.float32)  # a dynamic count past float's range
    return m
A = read([OUT + '/asm_ds.txt']); B = read(sorted(glob.glob(OUT + '/asm_cp*.txt')))
N = len(next(iter(A.values())))
def derived(a):
    # innermost: all fma vload vstore bcast stack pref memfma zmm
    al, fma, ld, stv, bc, stk, pf, mf, z = a[:9]
    dal, dfma, dld, dst, dbc, dstk, dpf, dmf, dz = a[-21:-12]
    cyc = a[-11]
    return np.array([fma / max(al, 1), stk / max(al, 1), (ld + bc + mf) / max(fma, 1),
                     stv / max(al, 1), z / max(al, 1), np.log2(1 + al), np.log2(1 + fma),
                     dfma / max(dal, 1), dstk / max(dal, 1), (dld + dbc + dmf) / max(dfma, 1),
                     dst / max(dal, 1), dz / max(dal, 1), np.log2(1 + dal), np.log2(1 + dfma),
                     np.log2(1 + dstk), np.log2(1 + dld + dbc + dmf), np.log2(1 + cyc)], np.float32)
for src, m in ((ds, A), (cp, B)):
    for p in src:
        a = m.get(p['rid'])
        p['asm'] = np.concatenate([a, derived(a)]) if a is not None else np.full(N + 17, np.nan, np.float32)
print('programs with code: ds %d/%d corpus %d/%d' % (sum(p['rid'] in A for p in ds), len(ds),
      sum(p['rid'] in B for p in cp), len(cp)), flush=True)
asm = lambda p: p['asm']
S = int(os.environ.get('SPLITS', 21))
print('base', run(splits=S), flush=True)
print('with machine code', run(extra=asm, splits=S), flush=True)
# the machine code alone (rows zeroed)
keep = {}
for p in ds + cp: keep[id(p)] = p['rows']; p['rows'] = [np.zeros_like(p['rows'][0])]
print('machine code alone', run(extra=asm, splits=S), flush=True)
for p in ds + cp: p['rows'] = keep[id(p)]

# the cycle estimate alone as the ranking
for t in base.TASKS:
    P = [p for p in ds if p['task'] == t and p['cost'] < 1e9]
    e = np.array([p['asm'][-1] for p in P]); c = np.array([p['cost'] for p in P])
    rng = np.random.default_rng(5)
    rs = [base.recall(-e[idx], c[idx], 5) for idx in (rng.choice(len(P), 40, replace=False) for _ in range(200))]
    print(t[:6], 'cycle estimate alone: top-5 recall', round(float(np.mean(rs)), 3),
          'rank corr', round(float(np.corrcoef(np.argsort(np.argsort(e)), np.argsort(np.argsort(c)))[0, 1]), 3))
if os.environ.get('ASM_VARIANTS'):
    nd = 17
    print('derived ratios only', run(extra=lambda p: p['asm'][-nd:], splits=S), flush=True)
    print('innermost + dynamic + derived', run(extra=lambda p: np.concatenate([p['asm'][:9], p['asm'][-nd - 21:-nd - 12], p['asm'][-nd:]]), splits=S), flush=True)
    print('hot loop + derived', run(extra=lambda p: np.concatenate([p['asm'][-nd - 10:]]), splits=S), flush=True)
