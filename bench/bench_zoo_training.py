"""Benchmark: retrain every zoo model from scratch, as `probe train` does (issue 3).

For each task, in a fresh subprocess (so peak RSS is per task): train with the seed and
step count written in the committed card, then report the wall time (training plus the
held-out evaluation), the held-out accuracy beside the card's, and whether the weights
are bit-identical to the committed ones. The issue asks for ≤ 3 minutes per task on 2
CPU cores and for retraining with the same seed to reproduce the committed model.

    python bench/bench_zoo_training.py                    # all tasks
    python bench/bench_zoo_training.py --tasks induction brackets

Training uses one torch thread (as `probe train` does), so run this on a quiet machine:
other jobs on the same cores inflate the times.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _one(task: str, out: str) -> dict:
    """Retrain ``task`` into ``out`` with the committed card's seed and steps."""
    from safetensors.torch import load_file

    from probe.models import zoo

    committed = zoo.load_zoo(task)
    t0 = time.perf_counter()
    card = zoo.train(task, out, steps=committed.card["train_steps"], seed=committed.card["seed"])
    seconds = time.perf_counter() - t0
    name = next(p.name for p in (zoo.WEIGHTS_DIR / task).glob("*.safetensors"))
    new, old = load_file(str(Path(out) / name)), load_file(str(zoo.WEIGHTS_DIR / task / name))
    identical = new.keys() == old.keys() and all(bool((new[k] == old[k]).all()) for k in new)
    return {
        "task": task,
        "steps": card["train_steps"],
        "seed": card["seed"],
        "seconds": round(seconds, 1),
        "accuracy": card["accuracy"],
        "card_accuracy": committed.card["accuracy"],
        "identical_weights": identical,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def main() -> None:
    from probe.models import zoo

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="*", default=[t for t in zoo.TASKS if t != "constructed"])
    p.add_argument("--json", action="store_true", help="print one JSON object per task")
    p.add_argument("--_one", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args._one:
        print(json.dumps(_one(*args._one)))
        return
    print(f"cpus={os.cpu_count()} load={os.getloadavg()[0]:.2f} (1-min average before the run)")
    print(
        f"{'task':<14} {'steps':>6} {'seconds':>8} {'≤180 s':>7} {'accuracy':>9} {'card':>7} "
        f"{'same weights':>13} {'peak MiB':>9}"
    )
    rows = []
    for task in args.tasks:
        with tempfile.TemporaryDirectory() as tmp:
            res = subprocess.run(
                [sys.executable, __file__, "--_one", task, str(Path(tmp) / task)],
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
        if res.returncode:
            print(f"{task:<14} failed: {res.stderr.strip().splitlines()[-1] if res.stderr.strip() else res.returncode}")
            continue
        r = json.loads(res.stdout.strip().splitlines()[-1])
        rows.append(r)
        print(
            json.dumps(r)
            if args.json
            else f"{r['task']:<14} {r['steps']:>6} {r['seconds']:>8.1f} {'yes' if r['seconds'] <= 180 else 'NO':>7} "
            f"{r['accuracy']:>9.2f} {r['card_accuracy']:>7.2f} {str(r['identical_weights']):>13} "
            f"{r['peak_rss_mib']:>9}"
        )
    print(f"load={os.getloadavg()[0]:.2f} (1-min average after the run)")


if __name__ == "__main__":
    main()
