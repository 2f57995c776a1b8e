import sys, numpy as np, xgboost as xgb
sys.path.insert(0, __import__('os').path.dirname(__file__))
from load import load
import os
OUT = os.environ.get('CM_STUDY_OUT', '/tmp/cm_study')
names, ds = load(OUT + '/ds.txt', os.environ.get('CM_STUDY_DIR', 'build/rel/bench') + '/cost_model.db')
_, cp = load(OUT + '/corpus.txt', os.environ.get('CM_STUDY_DIR', 'build/rel/bench') + '/corpus.db')
NF = len(names)
MAXR = 3
def vec(p, extra):
    v = np.zeros(NF * MAXR, np.float32)
    for i, r in enumerate(p['rows'][:MAXR]): v[i*NF:(i+1)*NF] = r
    s = np.sum(p['rows'], axis=0)
    return np.concatenate([v, s, extra(p)])
def labels(progs):
    best = {}
    for p in progs:
        if p['cost'] < 1e9: best[p['task']] = min(best.get(p['task'], 1e30), p['cost'])
    return np.array([best[p['task']] / p['cost'] if p['cost'] < 1e9 else 0 for p in progs])
def recall(pred, cost, k):
    ok = cost < 1e9
    pi = np.argsort(-pred)[:k]; ci = np.argsort(np.where(ok, cost, 1e30))[:min(k, ok.sum())]
    return len(set(pi) & set(ci)) / len(ci)
NONE = lambda p: np.zeros(0, np.float32)
def fit(train, seed, extra=NONE, params=None, rounds=150):
    """A pairwise ranking booster on 'train' (programs), grouped by task."""
    train = sorted(train, key=lambda p: p['task'])
    X = np.stack([vec(p, extra) for p in train]); y = labels(train)
    groups = []; last = None
    for p in train:
        if p['task'] != last: groups.append(0); last = p['task']
        groups[-1] += 1
    d = xgb.DMatrix(X, label=y); d.set_group(groups)
    pr = dict(objective='rank:pairwise', max_depth=6, eta=0.2, min_child_weight=0.1, max_bin=64,
              tree_method='hist', nthread=2, seed=seed)
    if params: pr.update(params)
    return xgb.train(pr, d, rounds)
def predict(b, progs, extra=NONE):
    return b.predict(xgb.DMatrix(np.stack([vec(p, extra) for p in progs])))
TASKS = sorted(set(p['task'] for p in ds))
def split(s, n_test=None, n_train=None):
    """Split s of each task: (training programs, {task: held-out programs}); 80/20 by default,
    else n_test held out and n_train of the rest for training."""
    rng = np.random.default_rng(1000 + s)
    tr, te = [], {}
    for t in TASKS:
        idx = [i for i, p in enumerate(ds) if p['task'] == t]
        rng.shuffle(idx)
        if n_test is None:
            n = int(0.8 * len(idx)); tr += [ds[i] for i in idx[:n]]; te[t] = [ds[i] for i in idx[n:]]
        else:
            te[t] = [ds[i] for i in idx[:n_test]]; tr += [ds[i] for i in idx[n_test:n_test + n_train]]
    return tr, te
def run(extra=NONE, corpus=True, splits=21, params=None, rounds=150):
    res = {t: [] for t in TASKS}
    for s in range(splits):
        tr, te = split(s)
        b = fit(tr + (cp if corpus else []), s, extra, params, rounds)
        for t in TASKS:
            c = np.array([p['cost'] for p in te[t]])
            res[t].append(recall(predict(b, te[t], extra), c, 5))
    return {t[:6]: round(float(np.mean(v)), 3) for t, v in res.items()}
if __name__ == '__main__':
    print('base', run())
