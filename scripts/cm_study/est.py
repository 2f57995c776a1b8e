# An analytic estimate of run time from the feature rows, as one more column (issue 16 study).
import sys, numpy as np
sys.path.insert(0, __import__('os').path.dirname(__file__))
import base
from base import names, ds, run
ix = {n: i for i, n in enumerate(names)}
ex = lambda r, n: 2.0 ** r[ix[n]] - 1          # undo log2(1+x)
def est(p, lanes_per_fma=2, l2bw=32.0, membw=8.0):
    tot = 0.0
    for r in p['rows']:
        flops = ex(r, 'float_mad') * 2 + ex(r, 'float_addsub') + ex(r, 'float_mul')
        lane_ops = ex(r, 'lane_ops')
        bl = ex(r, 'block_loads')
        comp = lane_ops / lanes_per_fma
        ld = lane_ops * bl / 2
        accr = ex(r, 'acc_regs')
        if accr > 32: comp *= accr / 32
        ai1, ai2 = r[ix['ai_l1']], r[ix['ai_l2']]
        l2 = flops / max(ai1, 1e-3) / l2bw
        mem = flops / max(ai2, 1e-3) / membw
        pp = ex(r, 'parallel_prod')
        par = 1.0 if pp < 2 else pp / (2 * np.ceil(pp / 2)) * 2
        tot += max(comp, ld, l2, mem) / par
    return tot
if __name__ == '__main__':
    ests = {}
    for t in base.TASKS:
        pr = [p for p in ds if p['task'] == t and p['cost'] < 1e9]
        e = np.array([est(p) for p in pr]); c = np.array([p['cost'] for p in pr])
        # rank correlation and held-out-like top-5 recall over random 40-subsets
        rng = np.random.default_rng(1); rs = []
        for _ in range(200):
            s = rng.choice(len(pr), 40, replace=False)
            rs.append(base.recall(-e[s], c[s], 5))
        from itertools import combinations
        i, j = np.triu_indices(len(pr), 1); m = np.abs(np.log(c[i] / c[j])) > np.log(1.05)
        acc = np.mean((np.sign(e[i] - e[j]) == np.sign(c[i] - c[j]))[m])
        print(t[:6], 'est alone: pairwise %.3f top5 %.3f' % (acc, np.mean(rs)))
    f = lambda p: np.array([np.log2(1 + est(p))], np.float32)
    print('base     ', run())
    print('with est ', run(f))
