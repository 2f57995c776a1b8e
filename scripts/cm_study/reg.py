import sys
sys.path.insert(0, __import__('os').path.dirname(__file__))
import base
for name, pr, r in [
  ('depth3', dict(max_depth=3), 150),
  ('depth4 eta0.1 300', dict(max_depth=4, eta=0.1), 300),
  ('mcw 2', dict(min_child_weight=2), 150),
  ('lambda 10 alpha 1', dict(reg_lambda=10, reg_alpha=1), 150),
  ('colsample_bynode 0.3', dict(colsample_bynode=0.3), 150),
  ('rounds 50', dict(), 50),
]:
    print(name, base.run(splits=32, params=pr, rounds=r), flush=True)
