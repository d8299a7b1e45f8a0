"""Issue 18: the growth-model fits of a run, alternated in one process: A with main's
`_earlier_sharp_break` (its three fits always run), B with this branch's (skipped where an O(n)
bound proves no earlier break can pass). The breaks must be equal (pickled).

    .venv/bin/python benchmarks/fits_ab.py RUN [ROUNDS]
"""
import pickle
import sys
import time

from postmortem import onset, ranking
from postmortem.analysis import first_nonfinite, manifest_order
from postmortem.loading import load_run
from postmortem.series import read_series


def main_version(x, y, th):
    return branch_version(x, y, th, bound=False)  # main's search: its three fits always run


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
skipped = [0, 0]


def probe(x, y, th):
    skipped[0] += 1
    skipped[1] += len(y) >= onset._MIN_POINTS and onset._held_bound(y) < th.sharp_decades / 2
    return main_version(x, y, th)


onset._earlier_sharp_break = probe
ranking.fit_breaks(table, scalars, cut)
print("calls", skipped[0], "skipped by the bound", skipped[1])
