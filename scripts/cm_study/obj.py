import sys, numpy as np
sys.path.insert(0, __import__('os').path.dirname(__file__))
import base
orig = base.labels
def mk(f):
    def lab(progs):
        return f(orig(progs))
    return lab
tests = [
 ('ndcg lab*10', dict(objective='rank:ndcg'), lambda y: np.floor(y * 10)),
 ('ndcg lab*20', dict(objective='rank:ndcg'), lambda y: np.floor(y * 20)),
 ('ndcg topk lab*10', dict(objective='rank:ndcg', lambdarank_pair_method='topk', lambdarank_num_pair_per_sample=8), lambda y: np.floor(y * 10)),
 ('pairwise lab*10', dict(objective='rank:pairwise'), lambda y: np.floor(y * 10)),
 ('ndcg exp-off lab', dict(objective='rank:ndcg', ndcg_exp_gain=False), lambda y: y),
]
for name, pr, f in tests:
    base.labels = mk(f)
    print(name, base.run(params=pr), flush=True)
