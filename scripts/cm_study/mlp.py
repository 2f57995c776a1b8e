# A small neural ranker (TenSet's MLP: features -> 2 hidden layers -> score, RankNet loss
# per task) in place of the booster (issue 16 study). Run with Debian's torch:
#   /usr/bin/python3 scripts/cm_study/mlp.py     (after scripts/cm_study/run.sh made the dumps)
import os, sys, types, numpy as np, torch
sys.path.insert(0, os.path.dirname(__file__))
sys.modules.setdefault('xgboost', types.ModuleType('xgboost'))   # base.py imports it
import base
from base import ds, cp, vec, NONE, split, recall, TASKS
torch.set_num_threads(2)
def X_of(progs): return np.stack([vec(p, NONE) for p in progs])
def fit(train, seed, epochs=300, hidden=256):
    torch.manual_seed(seed)
    X = torch.tensor(X_of(train)); mu, sd = X.mean(0), X.std(0) + 1e-3
    X = (X - mu) / sd
    y = torch.tensor([np.log(p['cost']) if p['cost'] < 1e9 else 10.0 for p in train], dtype=torch.float32)
    tasks = [p['task'] for p in train]
    groups = [torch.tensor([i for i, t in enumerate(tasks) if t == u]) for u in sorted(set(tasks))]
    net = torch.nn.Sequential(torch.nn.Linear(X.shape[1], hidden), torch.nn.ReLU(),
                              torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=1e-4)
    for ep in range(epochs):
        opt.zero_grad(); loss = 0
        for g in groups:
            s = net(X[g]).squeeze(1); c = y[g]
            # RankNet over all pairs whose costs differ by more than 10 %
            ds_ = s[:, None] - s[None, :]; dc = c[None, :] - c[:, None]   # i faster than j: dc > 0
            m = (dc > np.log(1.1)).float()
            loss = loss + (torch.nn.functional.softplus(-ds_) * m).sum() / m.sum().clamp(min=1)
        loss.backward(); opt.step()
    return lambda progs: net((torch.tensor(X_of(progs)) - mu) / sd).squeeze(1).detach().numpy()
if __name__ == '__main__':
    corpus = os.environ.get('CORPUS', '1') == '1'
    splits = int(os.environ.get('SPLITS', '8'))
    res = {t: [] for t in TASKS}
    for s in range(splits):
        tr, te = split(s)
        f = fit(tr + (cp if corpus else []), s)
        for t in TASKS:
            c = np.array([p['cost'] for p in te[t]])
            res[t].append(recall(f(te[t]), c, 5))
        print(s, {t[:6]: round(float(np.mean(v)), 3) for t, v in res.items()}, flush=True)
