"""Side by side over two source trees: bench/bench_ablation.py's own timed stages (the batched
sweep, the naive loop, gradient importance over head gates), one fresh process per tree,
the trees alternated per round; medians.

    python bench/bench_trees.py BEFORE_TREE AFTER_TREE [N] [ROUNDS]

Each tree is a checkout of this repository whose ``probe/`` folder can import
``probe.models`` etc. from it (an editable install, or links ``probe/models -> ../models``,
``probe/analyses``, ``probe/app`` in an exported tree) and which sees ``../shared/data``.
"""

import json
import statistics
import subprocess
import sys
from pathlib import Path

TREES = {"before": str(Path(sys.argv[1]).resolve()), "after": str(Path(sys.argv[2]).resolve())}
sys.argv = [sys.argv[0]] + sys.argv[3:]
CHILD = r"""
import json, sys, time
sys.argv = ["bench_ablation.py"]
sys.path.insert(0, "bench")
import bench_ablation as B
adapter, corpus = B._setup(%d, 2)
B._timed("sweep", adapter, corpus, 16, 2048)  # warm-up
out = {k: B._timed(k, adapter, corpus, 16, None if k != "sweep" else 2048) for k in ("sweep", "naive", "gradient")}
import probe.interventions.heads as I
out["module"] = I.__file__
print(json.dumps(out))
"""
n = int(sys.argv[1]) if len(sys.argv) > 1 else 8
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
times = {t: {"sweep": [], "naive": [], "gradient": []} for t in TREES}
for r in range(rounds):
    for tree, path in TREES.items() if r % 2 == 0 else reversed(list(TREES.items())):
        res = subprocess.run([sys.executable, "-c", CHILD % n], cwd=path, capture_output=True, text=True)
        line = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""
        if not line.startswith("{"):
            print(tree, "failed", res.stderr[-2000:])
            sys.exit(1)
        d = json.loads(line)
        print(r, tree, d, flush=True)
        for k in times[tree]:
            times[tree][k].append(d[k])
for tree, d in times.items():
    med = {k: statistics.median(v) for k, v in d.items()}
    print(
        f"{tree}: sweep {med['sweep']:.2f} s {['%.2f' % x for x in d['sweep']]}  naive {med['naive']:.2f} s "
        f"{['%.2f' % x for x in d['naive']]}  ratio {med['sweep'] / med['naive']:.3f}  gradient {med['gradient']:.2f} s "
        f"{['%.2f' % x for x in d['gradient']]}"
    )
