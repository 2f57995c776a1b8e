# A pairwise comparator instead of a scoring function (issue 16 study): a booster trained on
# pairs of programs of one task, [x_a, x_b, x_a - x_b] -> P(a faster than b), each held-out
# program ranked by its summed win probability over the other 39 (soft Borda count), so the
# trees may compare two programs by different columns in different regions, which a score
# f(x_a) - f(x_b) cannot.  Columns: each program's summed rows with the caches simulated and
# the machine code (simasm.py's best set).  Run: scripts/cm_study/run.sh cmp.py (SPLITS=N,
# default 21; PARTNERS=N, default 24; ROUNDS=N, default 150; CMP_COLS=base: the feature rows
# only, without the caches and the machine code; CMP_COLS=derived: the machine code's 17
# ratios and logs only, as the product's group 11; innerdyn: those and the innermost and
# dynamic counts; depth: the ratios, the counts per loop depth and the code's size; hot:
# the ratios and the counts of the innermost loop with the most FMAs); with CM_STUDY_OUT and
# CM_STUDY_DIR pointing at a corpus of 400 a workload as in docs/cost_model.md; SYM=1: each
# training pair in both orders.  Also prints
# the stand-in (base.fit with the same columns) and both models' ranks averaged.
# Printed by task hash, sorted: 4688ec is the ResNet convolution, ac161c matmul 1024³.
import sys, os, numpy as np, xgboost as xgb
sys.path.insert(0, os.path.dirname(__file__))
import base
from base import ds, cp, NF, split, recall, TASKS
K = int(os.environ.get('PARTNERS', 24))
here = os.path.dirname(__file__)
exec(open(os.path.join(here, 'sim.py')).read().split("for t in base.TASKS")[0])
exec(open(os.path.join(here, 'asm.py')).read().split("print('base'")[0])
S = int(os.environ.get('SPLITS', 21))
EX = ((lambda p: np.zeros(0, np.float32)) if os.environ.get('CMP_COLS') == 'base'
      else (lambda p: np.concatenate([p['sim'], p['asm'][-17:]]))
      if os.environ.get('CMP_COLS') == 'derived'  # the product's group 11: the 17 ratios
      else (lambda p: np.concatenate([p['sim'], p['asm'][:9], p['asm'][-38:-29], p['asm'][-17:]]))
      if os.environ.get('CMP_COLS') == 'innerdyn'  # the ratios, the innermost and dynamic counts
      else (lambda p: np.concatenate([p['sim'], p['asm'][9:55], p['asm'][-17:]]))
      if os.environ.get('CMP_COLS') == 'depth'  # the ratios, the counts per loop depth, the size
      else (lambda p: np.concatenate([p['sim'], p['asm'][-27:]]))
      if os.environ.get('CMP_COLS') == 'hot'  # the ratios and the hottest loop's 10 counts
      else lambda p: np.concatenate([p['sim'], p['asm']]))
def v1(p): return np.concatenate([np.sum(p['rows'], axis=0), EX(p)]).astype(np.float32)
for p in ds + cp: p['v1'] = v1(p)
def pairs(progs, rng):
    by = {}
    for p in progs:
        if p['cost'] < 1e9: by.setdefault(p['task'], []).append(p)
    A, B, Y = [], [], []
    for t, P in by.items():
        n = len(P)
        for i in range(n):
            for j in rng.choice(n, min(K, n - 1), replace=False):
                if j == i: continue
                r = P[i]['cost'] / P[j]['cost']
                if 1 / 1.05 < r < 1.05: continue
                A.append(P[i]['v1']); B.append(P[j]['v1']); Y.append(1.0 if r < 1 else 0.0)
    A = np.stack(A); B = np.stack(B); Y = np.array(Y)
    if os.environ.get('SYM') == '1':  # both orders of every pair
        A, B, Y = np.vstack([A, B]), np.vstack([B, A]), np.concatenate([Y, 1 - Y])
    return np.hstack([A, B, A - B]), Y
def fitc(tr, seed):
    X, y = pairs(tr, np.random.default_rng(seed))
    d = xgb.DMatrix(X, label=y)
    pr = dict(objective='binary:logistic', max_depth=6, eta=0.2, min_child_weight=1, max_bin=64,
              tree_method='hist', nthread=2, seed=seed)
    return xgb.train(pr, d, int(os.environ.get('ROUNDS', 150)))
def scorec(b, te):
    V = np.stack([p['v1'] for p in te]); n = len(te)
    ii, jj = np.meshgrid(np.arange(n), np.arange(n), indexing='ij'); m = ii != jj
    ii = ii[m]; jj = jj[m]
    P = b.predict(xgb.DMatrix(np.hstack([V[ii], V[jj], V[ii] - V[jj]])))
    s = np.zeros(n); np.add.at(s, ii, P); np.add.at(s, jj, 1 - P)
    return s
res = {t: [] for t in TASKS}; rb = {t: [] for t in TASKS}; ra = {t: [] for t in TASKS}
rk = lambda x: np.argsort(np.argsort(x))
for s in range(S):
    tr, te = split(s)
    b = fitc(tr + cp, s)
    bb = base.fit(tr + cp, s, EX)
    for t in TASKS:
        c = np.array([p['cost'] for p in te[t]])
        sc = scorec(b, te[t]); sb = base.predict(bb, te[t], EX)
        res[t].append(recall(sc, c, 5)); rb[t].append(recall(sb, c, 5))
        ra[t].append(recall(rk(sc) + rk(sb), c, 5))
    print(s, {t[:6]: round(float(np.mean(v)), 3) for t, v in res.items()},
          'stand-in', {t[:6]: round(float(np.mean(v)), 3) for t, v in rb.items()},
          'ranks averaged', {t[:6]: round(float(np.mean(v)), 3) for t, v in ra.items()}, flush=True)
