# Nearest neighbours in the schedule's knobs as the ranking, alone and blended with the
# booster (issue 16 study: interpolation among the few fast programs).
import sys, numpy as np
sys.path.insert(0, __import__('os').path.dirname(__file__))
import base
from base import ds, cp, fit, predict, recall, split, TASKS
from knob import knobs
def knn_pred(tr, te, k):
    X = np.stack([knobs(p) for p in tr]); y = np.log([p['cost'] for p in tr])
    Z = np.stack([knobs(p) for p in te])
    d = np.sqrt(((Z[:, None, :] - X[None, :, :]) ** 2).sum(-1)) + 1e-3
    idx = np.argsort(d, 1)[:, :k]
    w = 1 / np.take_along_axis(d, idx, 1)
    return -(w * y[idx]).sum(1) / w.sum(1)          # higher = faster
def rk(v): return np.argsort(np.argsort(v)) / len(v)
res = {}
for s in range(21):
    tr, te = split(s)
    b = fit(tr + cp, s)
    for t in TASKS:
        trt = [p for p in tr if p['task'] == t and p['cost'] < 1e9]
        c = np.array([p['cost'] for p in te[t]])
        px = predict(b, te[t])
        for k in (1, 3, 5):
            pk = knn_pred(trt, te[t], k)
            res.setdefault((t[:6], 'knn%d' % k), []).append(recall(pk, c, 5))
            res.setdefault((t[:6], 'blend%d' % k), []).append(recall(rk(px) + rk(pk), c, 5))
        res.setdefault((t[:6], 'xgb'), []).append(recall(px, c, 5))
for key in sorted(res): print(key, round(float(np.mean(res[key])), 3))
