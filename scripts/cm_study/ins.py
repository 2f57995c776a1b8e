import sys, numpy as np, xgboost as xgb
sys.path.insert(0, __import__('os').path.dirname(__file__))
from base import ds, cp, vec, labels, recall
tasks = sorted(set(p['task'] for p in ds))
ex = lambda p: np.zeros(0, np.float32)
train = sorted(ds + cp, key=lambda p: p['task'])
X = np.stack([vec(p, ex) for p in train]); y = labels(train)
groups = []; last = None
for p in train:
    if p['task'] != last: groups.append(0); last = p['task']
    groups[-1] += 1
d = xgb.DMatrix(X, label=y); d.set_group(groups)
b = xgb.train(dict(objective='rank:pairwise', max_depth=6, eta=0.2, min_child_weight=0.1, max_bin=64, tree_method='hist', nthread=2, seed=1), d, 150)
for t in tasks:
    P = [p for p in ds if p['task'] == t]
    pr = b.predict(xgb.DMatrix(np.stack([vec(p, ex) for p in P]))); c = np.array([p['cost'] for p in P])
    rs = []
    rng = np.random.default_rng(5)
    for s in range(200):
        idx = rng.choice(len(P), 40, replace=False)
        rs.append(recall(pr[idx], c[idx], 5))
    print(t[:6], 'in-sample top-5 recall', np.mean(rs))
