import sys, numpy as np
sys.path.insert(0, __import__('os').path.dirname(__file__))
from base import cp, fit, predict, split, TASKS
# each split's 8 fastest held-out programs: cost / best @ the model's rank of them
for s in range(8):
    tr, te = split(s)
    b = fit(tr + cp, s)
    for t in TASKS:
        c = np.array([p['cost'] for p in te[t]]); pr = predict(b, te[t])
        order_c = np.argsort(c); best = c[order_c[0]]
        rank_p = np.empty(len(c), int); rank_p[np.argsort(-pr)] = np.arange(len(c))
        print(t[:6], 'split', s, 'true order (cost/best @ predicted rank):',
              ' '.join('%.2f@%d' % (c[i] / best, rank_p[i]) for i in order_c[:8]))
