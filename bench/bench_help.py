"""Time ``probe --help`` and ``probe <cmd> --help`` (fresh processes; the median of
several runs, after one warm-up run that fills the OS file cache).

    python bench/bench_help.py [--runs 7] [--commands ablate,report]

Prints, never asserts. The budget is 1 s on the 2-core CI machine; help imports
neither torch nor transformers (tests/test_architecture.py checks that).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def _time(cmd: list, runs: int) -> list:
    subprocess.run(cmd, capture_output=True, check=True)  # warm-up
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--commands", default="ablate,report,syntax")
    args = ap.parse_args()
    exe = shutil.which("probe")
    base = [exe] if exe else [sys.executable, "-m", "probe"]
    cases = [("probe --help", base + ["--help"])]
    cases += [(f"probe {c} --help", base + [c, "--help"]) for c in args.commands.split(",") if c]
    cases.append(("python -c 'import torch' (for scale)", [sys.executable, "-c", "import torch"]))
    print(f"{'command':<40} {'median':>8} {'min':>8} {'max':>8}  (s, {args.runs} runs, machine shared)")
    for name, cmd in cases:
        t = _time(cmd, args.runs)
        print(f"{name:<40} {statistics.median(t):8.3f} {min(t):8.3f} {max(t):8.3f}")


if __name__ == "__main__":
    main()
