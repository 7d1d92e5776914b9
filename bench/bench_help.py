"""Time ``probe --help``, ``probe <cmd> --help`` and refused command lines (an unknown
model, a missing input file, a non-empty ``--out``) in fresh processes; the median of several
runs, after one warm-up run that fills the OS file cache, and each refusal's ratio to
``probe --help`` measured beside it.

    python bench/bench_help.py [--runs 7] [--commands ablate,report]

Prints, never asserts. The budget is 1 s for help and 2 s for a refusal on an idle 2-core
machine; neither imports torch nor transformers (tests/test_architecture.py and
tests/test_preflight.py check that).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _time(cmd: list, runs: int, code: int = 0) -> list:
    """Wall seconds of ``runs`` runs of ``cmd``, each required to exit with ``code``."""
    out = []
    for i in range(runs + 1):  # the first is the warm-up
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != code:
            raise SystemExit(f"{' '.join(cmd)} exited {r.returncode}, not {code}: {r.stderr.strip()[-300:]}")
        if i:
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
    full = tempfile.mkdtemp()
    Path(full, "kept.txt").write_text("not the toolkit's")
    refused = [
        ("roles --model smollm (unknown model)", ["roles", "--model", "smollm", "--text", "a b", "--out", "/tmp/x"]),
        ("report --file missing.txt", ["report", "--file", "/nonexistent/missing.txt", "--out", "/tmp/x"]),
        ("report --out <not empty>", ["report", "--out", full]),
        ("ablate --model zoo:inducton", ["ablate", "--model", "zoo:inducton", "--out", "/tmp/x"]),
    ]
    cases += [(f"probe {name}", base + argv, 1) for name, argv in refused]
    print(f"{'command':<44} {'median':>8} {'min':>8} {'max':>8} {'/help':>6}  (s, {args.runs} runs)")
    help_median = None
    for name, cmd, *code in cases:
        t = _time(cmd, args.runs, *code)
        med = statistics.median(t)
        help_median = help_median or med
        print(f"{name:<44} {med:8.3f} {min(t):8.3f} {max(t):8.3f} {med / help_median:6.2f}")


if __name__ == "__main__":
    main()
