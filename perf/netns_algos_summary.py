#!/usr/bin/env python3
# Tables from perf/netns_algos.sh output: best (smallest) out-of-place time in us of every
# repetition per collective, algorithm and size; "auto / best" compares the automatic choice
# (with the measured constants) with the fastest forced algorithm at that size.
# With --median, the median of the repetitions instead of the best (small sizes are noisy).
#   perf/netns_algos_summary.py [--median] OUT_DIR/raw.txt [more raw files]
import sys, collections, statistics
args = sys.argv[1:]
pick = min
if args and args[0] == '--median':
    pick, args = statistics.median, args[1:]
d = collections.defaultdict(dict)  # (coll,size) -> algo -> [times]
for line in (l for p in args for l in open(p)):
    f = line.split()
    if len(f) < 13 or f[0].startswith('#') or not f[3].isdigit(): continue
    coll, algo, size, t = f[0], f[1], int(f[3]), float(f[8])
    d[(coll, size)].setdefault(algo, []).append(t)
colls = sorted(set(k[0] for k in d), key=lambda c: ['allreduce','broadcast','reduce_scatter'].index(c))
def fmt(b):
    for u, s in (('MiB', 20), ('KiB', 10)):
        if b >= 1 << s: return '%d %s' % (b >> s, u)
    return '%d B' % b
for coll in colls:
    algos = []
    for k, v in d.items():
        if k[0] == coll:
            for a in v:
                if a not in algos: algos.append(a)
    print('\n' + coll)
    print('| size | ' + ' | '.join(algos) + ' | best forced | auto / best |')
    print('|---' * (len(algos) + 3) + '|')
    for size in sorted(s for c, s in d if c == coll):
        row = d[(coll, size)]
        best = {a: pick(row[a]) for a in row}
        forced = {a: t for a, t in best.items() if not a.startswith('auto')}
        bf = min(forced, key=forced.get) if forced else None
        cells = []
        for a in algos:
            cells.append('%.1f' % best[a] if a in best else '-')
        ratio = '%.2f' % (best['auto'] / forced[bf]) if 'auto' in best and bf else '-'
        print('| %s | %s | %s | %s |' % (fmt(size), ' | '.join(cells), bf, ratio))
