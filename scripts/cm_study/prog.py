#!/usr/bin/env python3
# scripts/cm_study/prog.py DUMP TASK [N] -- which held-out programs the model gets wrong, across
# bench_cost_model's splits (issue 16 study; not the product).  DUMP is --dump-scores FILE
# (with --dump-cols P,P for the columns shown); TASK a task name prefix (matmul, resnet).
# Per program: r = its rank by cost among all held-out programs of the task, its cost over
# the best, the splits that hold it out, those where it is in the measured five, and those
# where the model missed it (misses) or put it in its five wrongly (false positives).
import sys, collections
path, task = sys.argv[1], sys.argv[2]
N = int(sys.argv[3]) if len(sys.argv) > 3 else 15
splits = collections.defaultdict(list)
cols = {}
for line in open(path):
    parts = line.split('|')
    h = parts[0].split()
    if not h[0].startswith(task): continue
    c, s = float(h[2]), float(h[3])
    splits[int(h[1])].append((c, s))
    cols[c] = [p.split() for p in parts[1:]]
allc = sorted(set(c for v in splits.values() for c, _ in v))
best = allc[0]
rank = {c: i for i, c in enumerate(allc)}
# direction: higher score = faster?
agree = tot = 0
for v in splits.values():
    for i in range(len(v)):
        for j in range(i+1, len(v)):
            if v[i][0] == v[j][0]: continue
            tot += 1
            agree += (v[i][0] < v[j][0]) == (v[i][1] > v[j][1])
sign = 1 if agree > tot / 2 else -1
st = collections.defaultdict(lambda: [0, 0, 0, 0])  # heldout, in meas top5, missed, FP
rec = []
for r, v in sorted(splits.items()):
    meas = set(c for c, _ in sorted(v)[:5])
    mod = set(c for c, _ in sorted(v, key=lambda x: -sign * x[1])[:5])
    rec.append(len(meas & mod) / 5)
    for c, _ in v:
        st[c][0] += 1
        if c in meas: st[c][1] += 1
        if c in meas and c not in mod: st[c][2] += 1
        if c in mod and c not in meas: st[c][3] += 1
print("splits %d top5 recall %.3f sign %d" % (len(rec), sum(rec) / len(rec), sign))
print("misses:")
for c in sorted(st, key=lambda c: -st[c][2])[:N]:
    if st[c][2] == 0: break
    print("  r=%3d %.3fx held %2d top5 %2d missed %2d" % (rank[c], c / best, st[c][0], st[c][1], st[c][2]), ' '.join(' '.join(x) for x in cols[c])[:200])
print("false positives:")
for c in sorted(st, key=lambda c: -st[c][3])[:N]:
    if st[c][3] == 0: break
    print("  r=%3d %.3fx held %2d top5 %2d FP %2d" % (rank[c], c / best, st[c][0], st[c][1], st[c][3]), ' '.join(' '.join(x) for x in cols[c])[:200])
