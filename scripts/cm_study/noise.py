# How accurate a run-time predictor must be for top-5 recall 0.8 (issue 16 study): each
# program's measured cost times exp(N(0, sigma)) as the score, over 400 random 40-program
# subsets of each task (the held-out splits' size).  Run: scripts/cm_study/run.sh noise.py
import sys, numpy as np
sys.path.insert(0, __import__('os').path.dirname(__file__))
import base
from base import ds, TASKS, recall
for t in TASKS:
    P = [p for p in ds if p['task'] == t and p['cost'] < 1e9]
    c = np.array([p['cost'] for p in P])
    out = []
    for sigma in (0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7):
        rng = np.random.default_rng(7)
        r = []
        for _ in range(400):
            idx = rng.choice(len(P), 40, replace=False)
            noisy = c[idx] * np.exp(rng.normal(0, sigma, 40))
            r.append(recall(-noisy, c[idx], 5))
        out.append('%.2f: %.3f' % (sigma, np.mean(r)))
    print(t[:6], 'sigma: top-5 recall  ', '  '.join(out), flush=True)
