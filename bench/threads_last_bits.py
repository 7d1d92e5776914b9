"""Why a Ray worker's removal readouts differ from this process's in the last bits:
``python bench/threads_last_bits.py``.

Runs every MiniLM head mean-ablated on the bundled sample (24 sentences, the similarity
structure's readouts: the clean and the 72 removed embeddings) in two fresh processes with
torch on 1 and on 2 threads (two Ray workers on 2 cores run one thread each, this process
two), and a third with 2 threads again; prints how many readout values differ and by how
much. Prints, never asserts (tests/test_report_engine.py compares the engines' reports).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CHILD = """
import sys, numpy as np, torch
torch.set_num_threads(int(sys.argv[1]))
from probe.analyses.claims.removal import RemovalPlan, block_batches, run_removal_batches
from probe.analyses.common.objective import resolve_objective
from probe.analyses.necessity.ablation import position_kind_means
from probe.app.report.bundled import sample_corpus
from probe.models import load_model
model, corpus = load_model("minilm"), sample_corpus(24)
obj, _ = resolve_objective("similarity-structure", model, corpus)
means = position_kind_means(model, corpus, obj, 8, model.default_stack)
units = tuple(((l, h),) for l in range(model.n_layers) for h in range(model.n_heads))
plan = RemovalPlan(corpus, obj, units, ("mean",), means, 0, None, 8)
got = run_removal_batches(model, plan, block_batches(model, corpus, range(len(corpus)), 8))
np.save(sys.argv[2], torch.cat([got.clean[None], got.perturbed["mean"]]).numpy())
"""


def readouts(threads: int, path: Path) -> np.ndarray:
    subprocess.run([sys.executable, "-c", CHILD, str(threads), str(path)], check=True)
    return np.load(path)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        one, two, again = (readouts(t, Path(tmp) / f"{k}.npy") for k, t in (("one", 1), ("two", 2), ("again", 2)))
    for name, a, b in (("1 vs 2 threads", one, two), ("2 vs 2 threads (rerun)", two, again)):
        print(f"{name}: {(a != b).sum():,} of {a.size:,} readout values differ, at most {np.abs(a - b).max():.2g}")


if __name__ == "__main__":
    main()
