# The hot loop through llvm-mca (issue 16 study): asm.c with ASM_HOT_DIR=DIR writes each
# program's innermost loop with the most FMAs to DIR/ID.s; llvm-mca (LLVM 16's, AVX-512
# Ice Lake server model: it has none for Zen 4/5) gives its cycles per iteration and block
# throughput, and so the loop's FLOPs a cycle and how far dependencies hold it below its
# throughput: trip-count-free columns, added to the booster's with and without asm.c's.
# Run: scripts/cm_study/run.sh mca.py (it builds asm.c's outputs, asm_*.txt and hot/, first)
import sys, os, glob, re, subprocess, numpy as np
from concurrent.futures import ThreadPoolExecutor
sys.path.insert(0, __import__('os').path.dirname(__file__))
import base
from base import ds, cp, run, OUT
HOT = OUT + '/hot'; CACHE = OUT + '/mca.txt'
def mca(path):
    r = subprocess.run(['llvm-mca', '-mtriple=x86_64-unknown-linux-gnu', '-mcpu=' + os.environ.get('MCA_CPU', 'icelake-server'),
                        '-iterations=100', path], capture_output=True, text=True)
    m1 = re.search(r'Total Cycles:\s+(\d+)', r.stdout); m2 = re.search(r'Block RThroughput:\s+([\d.]+)', r.stdout)
    if not m1 or not m2: return None
    txt = open(path).read()
    fma = len(re.findall(r'vf[n]?m(add|sub)', txt))
    lanes = 16 if 'zmm' in txt else 8 if 'ymm' in txt else 4 if 'xmm' in txt else 1
    ins = txt.count('\n')
    cyc = int(m1.group(1)) / 100; rt = float(m2.group(1))
    return [cyc, rt, fma, ins, lanes, 2 * lanes * fma / max(cyc, 1e-9), cyc / max(rt, 1e-9), fma / max(cyc, 1e-9)]
if not os.path.exists(CACHE):
    files = sorted(glob.glob(HOT + '/*.s'))
    with ThreadPoolExecutor(2) as ex: res = list(ex.map(mca, files))
    with open(CACHE, 'w') as f:
        for fn, v in zip(files, res):
            if v: f.write(os.path.basename(fn)[:-2] + ' ' + ' '.join('%g' % x for x in v) + '\n')
M = {}
for line in open(CACHE):
    v = line.split(); M[int(v[0])] = np.array([float(x) for x in v[1:]], np.float32)
NM = 8
for p in ds + cp:
    p['mca'] = M.get(p['rid'], np.full(NM, np.nan, np.float32))
print('programs with a hot loop: ds %d/%d corpus %d/%d' % (sum(p['rid'] in M for p in ds), len(ds),
      sum(p['rid'] in M for p in cp), len(cp)), flush=True)
S = int(os.environ.get('SPLITS', 21))
# asm.c's columns, as asm.py reads them
def read(paths):
    m = {}
    for path in paths:
        for line in open(path):
            v = line.split(); m[int(v[0])] = np.array([float(x) for x in v[1:]], np.float32)
    return m
A = read([OUT + '/asm_ds.txt']); B = read(sorted(glob.glob(OUT + '/asm_cp?.txt')))
N = len(next(iter(A.values())))
for src, m in ((ds, A), (cp, B)):
    for p in src:
        a = m.get(p['rid']); p['asm'] = a if a is not None else np.full(N, np.nan, np.float32)
for t in base.TASKS:
    P = [p for p in ds if p['task'] == t and p['cost'] < 1e9 and p['rid'] in M]
    e = np.array([p['mca'][5] for p in P]); c = np.array([p['cost'] for p in P])
    rng = np.random.default_rng(5)
    rs = [base.recall(e[idx], c[idx], 5) for idx in (rng.choice(len(P), 40, replace=False) for _ in range(200))]
    print(t[:6], 'hot loop FLOPs/cycle alone: top-5 recall', round(float(np.mean(rs)), 3), flush=True)
print('base', run(splits=S), flush=True)
print('with mca', run(extra=lambda p: p['mca'], splits=S), flush=True)
print('with asm', run(extra=lambda p: p['asm'], splits=S), flush=True)
print('with asm + mca', run(extra=lambda p: np.concatenate([p['asm'], p['mca']]), splits=S), flush=True)
