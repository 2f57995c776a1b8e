import sys, numpy as np, xgboost as xgb
sys.path.insert(0, __import__('os').path.dirname(__file__))
from base import ds, cp, vec, labels, recall
tasks = sorted(set(p['task'] for p in ds))
ex = lambda p: np.zeros(0, np.float32)
def fit(train, s):
    train = sorted(train, key=lambda p: p['task'])
    X = np.stack([vec(p, ex) for p in train]); y = labels(train)
    groups = []; last = None
    for p in train:
        if p['task'] != last: groups.append(0); last = p['task']
        groups[-1] += 1
    d = xgb.DMatrix(X, label=y); d.set_group(groups)
    return xgb.train(dict(objective='rank:pairwise', max_depth=6, eta=0.2, min_child_weight=0.1, max_bin=64, tree_method='hist', nthread=2, seed=s), d, 150)
for frac in (0.2, 0.4, 0.6, 0.8):
    res = {t: [] for t in tasks}
    for s in range(32):
        rng = np.random.default_rng(1000 + s)
        tr, te = [], {}
        for t in tasks:
            idx = [i for i, p in enumerate(ds) if p['task'] == t]
            rng.shuffle(idx)
            te[t] = [ds[i] for i in idx[:40]]; tr += [ds[i] for i in idx[40:40 + int(frac * 200)]]
        b = fit(tr + cp, s)
        for t in tasks:
            c = np.array([p['cost'] for p in te[t]])
            res[t].append(recall(b.predict(xgb.DMatrix(np.stack([vec(p, ex) for p in te[t]]))), c, 5))
    print(frac, {t[:6]: round(float(np.mean(v)), 3) for t, v in res.items()}, flush=True)
