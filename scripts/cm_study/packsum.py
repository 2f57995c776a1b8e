# The product's model against the study's stand-in (issue 16 study): the product scores
# rows and ranks programs by the sum of their rows' scores ("pack-sum", a pairwise loss of
# its own on 32 random partners a program, pairs apart by more than 10 %); the stand-in
# (base.py) gives each program one vector (rows side by side and their sum) and XGBoost's
# rank:pairwise.  Both here, with the same custom objective, on the same splits, to see
# which difference holds the product's convolution figure below the stand-in's.
# Run: scripts/cm_study/run.sh packsum.py   (SPLITS from the environment)
import sys, os, numpy as np, xgboost as xgb
sys.path.insert(0, __import__('os').path.dirname(__file__))
import base
from base import ds, cp, split, recall, TASKS, labels, vec, NONE
S = int(os.environ.get('SPLITS', 21))
PR = dict(max_depth=6, eta=0.2, min_child_weight=0.1, max_bin=64, tree_method='hist', nthread=2,
          base_score=0.0, disable_default_eval_metric=1)
def design(progs, packed):
    if packed:
        X = np.concatenate([np.stack(p['rows']) for p in progs])
        owner = np.concatenate([np.full(len(p['rows']), k) for k, p in enumerate(progs)])
    else:
        X = np.stack([vec(p, NONE) for p in progs]); owner = np.arange(len(progs))
    return X, owner
def fit_custom(progs, seed, packed, partners=32, ratio=1.10, rounds=150, xgb_like=False):
    progs = sorted(progs, key=lambda p: p['task'])
    y = labels(progs); X, owner = design(progs, packed)
    n = len(progs); rng = np.random.default_rng(seed)
    tasks = {}
    for k, p in enumerate(progs): tasks.setdefault(p['task'], []).append(k)
    groups = [np.array(v) for v in tasks.values()]
    gid = np.zeros(n, int)
    for k, grp in enumerate(groups): gid[grp] = k
    def obj(preds, d):
        s = np.bincount(owner, weights=preds, minlength=n)
        I, J = [], []
        for g in groups:
            c = len(g)
            if c < 2: continue
            if c <= partners + 1:
                a, b = np.triu_indices(c, 1); I.append(g[a]); J.append(g[b])
            else:
                a = np.repeat(np.arange(c), partners); b = rng.integers(0, c - 1, len(a)); b += b >= a
                I.append(g[a]); J.append(g[b])
        I = np.concatenate(I); J = np.concatenate(J)
        yi, yj = y[I], y[J]
        ok = (yi > yj * ratio) | (yj > yi * ratio)
        I, J, yi, yj = I[ok], J[ok], yi[ok], yj[ok]
        hi = np.where(yi > yj, I, J); lo = np.where(yi > yj, J, I)
        p = 1 / (1 + np.exp(np.clip(s[hi] - s[lo], -35, 35)))
        w = np.ones(len(hi)); hs = 1.0
        if xgb_like:
            # XGBoost's rank:pairwise (3.x): each pair weighted by 1 / (|score gap| + 0.01)
            # once a task's scores differ, hessian doubled, and each task's gradients
            # scaled by log2(1 + S) / S, S the sum of its pairs' |gradients| x 2
            flat = np.array([np.ptp(s[grp]) == 0 for grp in groups])
            w = np.where(flat[gid[hi]], 1.0, 1 / (np.abs(s[hi] - s[lo]) + 0.01)); hs = 2.0
        g = np.zeros(n); h = np.zeros(n)
        np.add.at(g, hi, -p * w); np.add.at(g, lo, p * w)
        np.add.at(h, hi, hs * p * (1 - p) * w); np.add.at(h, lo, hs * p * (1 - p) * w)
        if xgb_like:
            S = 2 * np.bincount(gid[hi], weights=p * w, minlength=len(groups))
            f = np.where(S > 0, np.log2(1 + S) / np.maximum(S, 1e-300), 1.0)
            g *= f[gid]; h *= f[gid]
        return g[owner], np.maximum(h[owner], 1e-6)
    d = xgb.DMatrix(X)
    return xgb.train(dict(PR, seed=seed), d, rounds, obj=obj)
def predict(b, progs, packed):
    X, owner = design(progs, packed)
    return np.bincount(owner, weights=b.predict(xgb.DMatrix(X), output_margin=True), minlength=len(progs))
variants = [('pack-sum rows (the product)', dict(packed=True)),
            ('one vector a program, the same objective', dict(packed=False)),
            ('pack-sum, every pair, no ratio', dict(packed=True, partners=10**6, ratio=1.0)),
            ('one vector, every pair, no ratio', dict(packed=False, partners=10**6, ratio=1.0)),
            ('one vector, XGBoost-like weights, every pair', dict(packed=False, partners=10**6, ratio=1.0, xgb_like=True)),
            ('pack-sum, XGBoost-like weights, every pair', dict(packed=True, partners=10**6, ratio=1.0, xgb_like=True)),
            ('pack-sum, XGBoost-like weights, 32 partners, ratio 1.1', dict(packed=True, xgb_like=True))]
only = os.environ.get('VARIANTS')
for vi, (name, kw) in enumerate(variants):
    if only and str(vi) not in only.split(','): continue
    res = {t: [] for t in TASKS}
    for s in range(S):
        tr, te = split(s)
        b = fit_custom(tr + cp, s, **kw)
        for t in TASKS:
            c = np.array([p['cost'] for p in te[t]])
            res[t].append(recall(predict(b, te[t], kw['packed']), c, 5))
    print(name, {t[:6]: round(float(np.mean(v)), 3) for t, v in res.items()}, flush=True)
print('stand-in (base.py)', base.run(splits=S), flush=True)
