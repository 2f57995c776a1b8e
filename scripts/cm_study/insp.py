import sys, numpy as np, xgboost as xgb
sys.path.insert(0, __import__('os').path.dirname(__file__))
import base
from base import ds, cp, vec, labels
tasks = sorted(set(p['task'] for p in ds))
ex = lambda p: np.zeros(0, np.float32)
allr = {t: [] for t in tasks}
for s in range(8):
    rng = np.random.default_rng(1000 + s)
    tr, te = [], {}
    for t in tasks:
        idx = [i for i, p in enumerate(ds) if p['task'] == t]
        rng.shuffle(idx); n = int(0.8 * len(idx))
        tr += [ds[i] for i in idx[:n]]; te[t] = [ds[i] for i in idx[n:]]
    train = sorted(tr + cp, key=lambda p: p['task'])
    X = np.stack([vec(p, ex) for p in train]); y = labels(train)
    groups = []; last = None
    for p in train:
        if p['task'] != last: groups.append(0); last = p['task']
        groups[-1] += 1
    d = xgb.DMatrix(X, label=y); d.set_group(groups)
    b = xgb.train(dict(objective='rank:pairwise', max_depth=6, eta=0.2, min_child_weight=0.1, max_bin=64, tree_method='hist', nthread=2, seed=s), d, 150)
    for t in tasks:
        c = np.array([p['cost'] for p in te[t]]); pr = b.predict(xgb.DMatrix(np.stack([vec(p, ex) for p in te[t]])))
        order_c = np.argsort(c); best = c[order_c[0]]
        rank_p = np.empty(len(c), int); rank_p[np.argsort(-pr)] = np.arange(len(c))
        line = ' '.join('%.2f@%d' % (c[i] / best, rank_p[i]) for i in order_c[:8])
        print(t[:6], 'split', s, 'true order (cost/best @ predicted rank):', line)
