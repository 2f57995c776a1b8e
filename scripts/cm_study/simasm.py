# The cache simulation (sim.py's columns) and the machine code (asm.py's) together as more
# columns of the booster (issue 16 study).  Run: scripts/cm_study/run.sh simasm.py (SPLITS=N,
# default 64; SIM_DIR as in sim.py).
import sys, os, numpy as np
sys.path.insert(0, os.path.dirname(__file__))
import base
from base import ds, cp, run
S = int(os.environ.get('SPLITS', 64))
here = os.path.dirname(__file__)
exec(open(os.path.join(here, 'sim.py')).read().split("for t in base.TASKS")[0])
exec(open(os.path.join(here, 'asm.py')).read().split("print('base'")[0])
print('sim + asm', run(extra=lambda p: np.concatenate([p['sim'], p['asm']]), splits=S), flush=True)
print('asm', run(extra=lambda p: p['asm'], splits=S), flush=True)
