import numpy as np, sqlite3, json, collections
def load(path, db):
    progs = collections.OrderedDict()
    names = None
    for line in open(path):
        p = line.split()
        if p[0] == 'names': names = p[1:]; continue
        rid, task, cost, ri, nr, cs = int(p[0]), p[1], float(p[2]), int(p[3]), int(p[4]), int(p[5])
        key = (db, rid)
        if key not in progs: progs[key] = dict(task=task, cost=cost, rows=[], code=cs, rid=rid)
        progs[key]['rows'].append(np.array([float(x) for x in p[6:]], dtype=np.float32))
    con = sqlite3.connect(db)
    st = dict(con.execute('select id, state from records_v'))
    for k, v in progs.items(): v['state'] = json.loads(st[v['rid']])
    return names, list(progs.values())
