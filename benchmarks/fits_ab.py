"""Issue 18: the growth-model fits of a run, alternated in one process: A with main's
`_earlier_sharp_break` (its three fits always run), B with this branch's (skipped where an O(n)
bound proves no earlier break can pass). The breaks must be equal (pickled).

    .venv/bin/python benchmarks/fits_ab.py RUN [ROUNDS]
"""
import pickle
import sys
import time

import numpy as np
from postmortem import onset, ranking
from postmortem.analysis import first_nonfinite, manifest_order
from postmortem.loading import load_run
from postmortem.models import median, select_break
from postmortem.series import read_series

def main_version(x, y, th):
    if len(y) < onset._MIN_POINTS:
        return None
    model, delta_bic = select_break(x, y)
    k = model.index_
    held = float(np.min(y[k:])) - median(y[:k])
    if delta_bic < th.bic_margin or model.jump_decades_ < th.sharp_decades or held < th.sharp_decades / 2:
        return None
    return model, delta_bic

branch_version = onset._earlier_sharp_break
run = load_run(sys.argv[1])
table = read_series(run)
scalars = run.scalars()
scaled = bool((scalars["name"] == "grad_scale").any())
first = first_nonfinite(table, scalars, manifest_order(run.manifest), ignore_grads=scaled)
cut = first.step if first else None
out = {}
times = {"A": [], "B": []}
for r in range(int(sys.argv[2]) if len(sys.argv) > 2 else 4):
    for name, fn in (("A", main_version), ("B", branch_version)):
        onset._earlier_sharp_break = fn
        t0, c0 = time.perf_counter(), time.process_time()
        b = ranking.fit_breaks(table, scalars, cut)
        times[name].append((time.perf_counter() - t0, time.process_time() - c0))
        out.setdefault(name, pickle.dumps(b))
        assert pickle.dumps(b) == out[name]
print("identical:", out["A"] == out["B"], "breaks:", len(pickle.loads(out["A"])))
for name in "AB":
    w = sorted(t[0] for t in times[name]); c = sorted(t[1] for t in times[name])
    print(name, "wall", [round(t[0], 3) for t in times[name]], "median wall %.3f cpu %.3f" % (w[len(w)//2], c[len(c)//2]))
# how often the bound skips
import postmortem.onset as o
skipped = [0, 0]
def probe(x, y, th):
    skipped[0] += 1
    if len(y) >= o._MIN_POINTS:
        reach = np.minimum.accumulate(y[::-1])[::-1][1:] - np.minimum.accumulate(y)[:-1]
        if float(np.max(reach)) < th.sharp_decades / 2:
            skipped[1] += 1
    return main_version(x, y, th)
onset._earlier_sharp_break = probe
ranking.fit_breaks(table, scalars, cut)
print("calls", skipped[0], "skipped by the bound", skipped[1])
