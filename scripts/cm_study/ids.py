#!/usr/bin/env python3
# scripts/cm_study/ids.py DUMP [STORE] [N] -- the store's record ids of the programs in a
# bench_cost_model --dump-scores file (issue 16 study; not the product).  A dump names a
# program by its label only (its fastest repeat over the --passes stores: STORE.db and
# STORE_pass2.db ... , default build/rel/bench/cost_model), so the label is matched back to
# the record of STORE.db.  Prints, per task, the N fastest (80) as rRANK=ID(COST/BEST), the
# ranks prog.py prints, and the ids that asm.c's ASM_PRINT=ID disassembles.
import sqlite3, json, sys, os
dump = sys.argv[1]
base = sys.argv[2] if len(sys.argv) > 2 else 'build/rel/bench/cost_model'
N = int(sys.argv[3]) if len(sys.argv) > 3 else 80
dbs = [base + '.db'] + [p for p in (base + '_pass%d.db' % i for i in range(2, 9)) if os.path.exists(p)]
lab, ids, task = {}, {}, {}
for k, p in enumerate(dbs):
    c = sqlite3.connect(p)
    for rid, h, costs, fl in c.execute('select r.id, state_hash, costs, t.flops from records r '
                                       'join tasks t on t.id = r.task_id where error_code = 0'):
        lab[h] = min(lab.get(h, 1e30), min(json.loads(costs)))
        if k == 0:
            ids[h], task[h] = rid, fl
dc = {}
for line in open(dump):
    h = line.split('|')[0].split()
    dc.setdefault(h[0], set()).add(h[2])
for t, costs in sorted(dc.items()):
    v = sorted(costs, key=float)
    b = float(v[0])
    byc = {'%.9f' % lab[h]: ids[h] for h in lab}
    print(t, ' '.join('r%d=%d(%.2f)' % (i, byc.get('%.9f' % float(c), -1), float(c) / b)
                      for i, c in enumerate(v[:N])))
