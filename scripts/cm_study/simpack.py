# sim.py's columns in the product's form of the model (packsum.py's emulation: rows scored
# and summed per program, our pairwise loss on 32 partners, pairs apart by more than 10 %):
# the program's simulated counts on its first row, missing on the others.  Does the
# stand-in's gain hold in the product's model?  Run: scripts/cm_study/run.sh simpack.py
# (SIM_ALLPAIRS=1: every pair of a task, any gap, as the bench's --partners 256
# --min-pair-ratio 1.0; SIM_ASM=1: asm.py's columns of the machine code too)
import sys, os, numpy as np
sys.path.insert(0, os.path.dirname(__file__))
os.environ['VARIANTS'] = 'none'
here = os.path.dirname(__file__)
exec(open(os.path.join(here, 'packsum.py')).read().split("print('stand-in")[0])
exec(open(os.path.join(here, 'sim.py')).read().split("for t in base.TASKS")[0])
if os.environ.get('SIM_ASM'):  # asm.py's columns too, beside the simulation's
    exec(open(os.path.join(here, 'asm.py')).read().split("print('base'")[0])
    for p in ds + cp: p['sim'] = np.concatenate([p['sim'], p['asm']])
KW = dict(partners=10**6, ratio=1.0) if os.environ.get('SIM_ALLPAIRS') else {}
def evaluate(name):
    res = {t: [] for t in TASKS}; res1 = {t: [] for t in TASKS}
    for s in range(S):
        tr, te = split(s)
        b = fit_custom(tr + cp, s, packed=True, **KW)
        for t in TASKS:
            c = np.array([p['cost'] for p in te[t]]); pr = predict(b, te[t], True)
            res[t].append(recall(pr, c, 5)); res1[t].append(recall(pr, c, 1))
    print(name, 'top-5', {t[:6]: round(float(np.mean(v)), 3) for t, v in res.items()},
          'top-1', {t[:6]: round(float(np.mean(v)), 3) for t, v in res1.items()}, flush=True)
keep = {id(p): p['rows'] for p in ds + cp}
nc = len(ds[0]['sim'])
for p in ds + cp:
    p['rows'] = [np.concatenate([r, np.zeros(nc, np.float32)]) for r in p['rows']]
evaluate('pack-sum (the product), zero columns')
for p in ds + cp:
    p['rows'] = [np.concatenate([r[:-nc], p['sim'] if i == 0 else np.full(nc, np.nan, np.float32)]) for i, r in enumerate(p['rows'])]
evaluate('pack-sum with the simulation on the first row')
for p in ds + cp: p['rows'] = keep[id(p)]
# One model for both paths: trained with the simulated columns missing on a random half of
# the programs, scored with them (the re-ranked candidates) and without (the population).
if os.environ.get('SIM_MASK'):
    def evaluate2(name, frac):
        res = {t: [] for t in TASKS}; res0 = {t: [] for t in TASKS}
        for s in range(S):
            tr, te = split(s)
            rng = np.random.default_rng(77 + s)
            full = {}
            for p in tr + cp:
                full[id(p)] = p['rows']
                if rng.random() < frac:
                    p['rows'] = [np.concatenate([r[:-nc], np.full(nc, np.nan, np.float32)]) for r in p['rows']]
            b = fit_custom(tr + cp, s, packed=True)
            for p in tr + cp: p['rows'] = full[id(p)]
            for t in TASKS:
                c = np.array([p['cost'] for p in te[t]])
                res[t].append(recall(predict(b, te[t], True), c, 5))
                bare = [dict(p, rows=[np.concatenate([r[:-nc], np.full(nc, np.nan, np.float32)]) for r in p['rows']]) for p in te[t]]
                res0[t].append(recall(predict(b, bare, True), c, 5))
        print(name, 'scored with the simulation', {t[:6]: round(float(np.mean(v)), 3) for t, v in res.items()},
              'without', {t[:6]: round(float(np.mean(v)), 3) for t, v in res0.items()}, flush=True)
    for p in ds + cp:
        p['rows'] = [np.concatenate([r, p['sim'] if i == 0 else np.full(nc, np.nan, np.float32)]) for i, r in enumerate(p['rows'])]
    for frac in (0.0, 0.5):
        evaluate2('trained with the columns missing on %d %% of the programs:' % (frac * 100), frac)
    for p in ds + cp: p['rows'] = keep[id(p)]
