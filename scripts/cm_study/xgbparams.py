# XGBoost 3.2's rank:pairwise settings in the study's stand-in (issue 16 study): its pair
# weighting by score gap, its per-task normalisation, and sampled pairs (32 a program, as
# the product samples partners) in place of every pair.
# Run: scripts/cm_study/run.sh xgbparams.py   (SPLITS from the environment)
import sys, os
sys.path.insert(0, __import__('os').path.dirname(__file__))
import base
S = int(os.environ.get('SPLITS', 21))
print('stand-in', base.run(splits=S), flush=True)
print('no score normalization', base.run(splits=S, params=dict(lambdarank_score_normalization=False)), flush=True)
print('no group normalization', base.run(splits=S, params=dict(lambdarank_normalization=False)), flush=True)
print('neither', base.run(splits=S, params=dict(lambdarank_score_normalization=False, lambdarank_normalization=False)), flush=True)
print('mean pairs, 32 a program', base.run(splits=S, params=dict(lambdarank_pair_method='mean', lambdarank_num_pair_per_sample=32)), flush=True)
