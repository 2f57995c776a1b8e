import sys, numpy as np, math
sys.path.insert(0, __import__('os').path.dirname(__file__))
import base
def knobs(p):
    v = np.full(8 * 4 + 8, -1.0, np.float32)
    steps = p['state']['steps']
    fu_done = False
    n_an2 = 0
    for s in steps:
        if s[0] == 'CHW': v[32] = 1
        elif s[0] == 'SP':
            it, ext, fs = s[2], s[3], s[4]
            if it < 8 and len(fs) <= 3:
                prod = 1
                for j, f in enumerate(fs):
                    v[it*4 + 1 + j] = math.log2(f); prod *= f
                v[it*4] = math.log2(max(1, ext / prod))
        elif s[0] == 'PR': v[33] = math.log2(1 + int(s[3].split('$')[1]))
        elif s[0] == 'FU' and not fu_done: v[34] = len(s[2]); fu_done = True
        elif s[0] == 'CA': v[35] = s[3]
        elif s[0] == 'AN' and s[3] == 2: n_an2 += 1; v[36] = s[2]
        elif s[0] == 'AN' and s[3] == 3: v[37] = s[2]
    v[38] = n_an2
    v[39] = len(steps)
    return v
if __name__ == '__main__':
    print('knobs', base.run(extra=knobs))
    print('knobs nocorpus', base.run(extra=knobs, corpus=False))
    print('base nocorpus', base.run(corpus=False))
