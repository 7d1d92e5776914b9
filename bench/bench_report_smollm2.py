"""Time `probe report` on SmolLM2 beside one capture pass of the same sentences (issue 54 item 4).

    python bench/bench_report_smollm2.py --conllu /work/shared/data/ud-english-ewt/en_ewt-ud-dev.conllu --limit 256
    python bench/bench_report_smollm2.py --model minilm --limit 0          # the default report on all of EWT dev
    python bench/bench_report_smollm2.py --model minilm --conllu bundled   # the main command (the bundled 24)

(issue 57's goals: the default EWT dev report within 15 capture passes, the bundled main command
within 60; ``--limit 0`` takes every sentence, ``--conllu bundled`` the report's own sample,
which ``probe report`` reads when given no input and ``probe capture`` is given by its path.)

runs, each in its own process under GNU time (``/usr/bin/time -v``: wall seconds, peak RSS):

1. one capture pass: ``probe capture --model smollm2 --conllu … --limit N`` (the model's
   attention maps of every sentence, as the report's capture step makes them);
2. the whole report: ``probe report --model smollm2 --conllu … --limit N -v`` (the default
   ``--causal auto``: at 270 heads, more than 144, the screened path);
3. ``--captures`` − 1 more capture passes (default 2): the ratio divides by the median of all
   of them, since one capture pass moved from 18.7 to 25.0 s between runs of the same hour.

Prints each command's wall and CPU seconds (user + system) and peak RSS, the report's own capture time and each
section's time (from its ``-v`` log: "captured N examples in …", "section X ran in …"), the
machine's load average before and after, and the ratio of the report's wall time to the
capture pass's (the goal: ≤ 25 capture passes). Both include loading the model from the
GGUF cache (``load_model("smollm2")``; the first load dequantises, ~1 min: run the bench a
second time for the cached figure). On a shared machine the wall times are upper bounds and
the CPU-time ratio is the steadier one (a loaded machine stretches wall time, much less the
CPU seconds a process is given).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EWT_DEV = "/work/shared/data/ud-english-ewt/en_ewt-ud-dev.conllu"


def timed(cmd: list, log: Path) -> dict:
    """Run ``cmd`` under ``/usr/bin/time -v`` writing its output to ``log``: ``{wall, rss_gib, rc}``."""
    started = time.perf_counter()
    with open(log, "w", encoding="utf-8") as f:
        rc = subprocess.run(["/usr/bin/time", "-v", *cmd], stdout=f, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - started
    text = log.read_text(encoding="utf-8", errors="replace")
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", text))
    rss_gib = int(rss.group(1)) / 2**20 if rss else float("nan")
    return {"wall": wall, "cpu": cpu, "rss_gib": rss_gib, "rc": rc, "log": text}


def sections(text: str) -> list:
    """``[(name, seconds)]`` of the report's ``-v`` log, with its capture step first."""
    out = [("capture (in the report)", float(m)) for m in re.findall(r"captured \d+ examples in ([\d.]+)s", text)]
    out += [(n, float(s)) for n, s in re.findall(r"section (\S+) ran in ([\d.]+)s", text)]
    return out


def capture_pass(probe: list, given: list, base: Path, k: int) -> dict:
    """One ``probe capture`` of the corpus into its own store (the ``k``-th, emptied first: a
    complete store left by an earlier run would be resumed, not captured), timed and printed."""
    shutil.rmtree(base / f"store{k}", ignore_errors=True)
    cap = timed([*probe, "capture", *given, "--out", str(base / f"store{k}")], base / f"capture{k}.log")
    print(
        f"capture pass {k}: {cap['wall']:.1f} s wall, {cap['cpu']:.1f} s CPU, peak RSS {cap['rss_gib']:.2f} GiB "
        f"(rc {cap['rc']})",
        flush=True,
    )
    return cap


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2", help="the model both commands take (default smollm2)")
    ap.add_argument("--conllu", default=EWT_DEV, help="the treebank, or 'bundled' for the report's own sample")
    ap.add_argument("--limit", type=int, default=256, help="first N sentences; 0 for all")
    ap.add_argument(
        "--goal", type=float, default=None, help="the goal in capture passes (bundled 60, smollm2 25, else 15)"
    )
    ap.add_argument("--out", default=None, help="folder for the report, the store and the logs (default: temporary)")
    ap.add_argument("--report-args", default="", help="more arguments for probe report, e.g. '--causal exhaustive'")
    ap.add_argument(
        "--captures",
        type=int,
        default=3,
        help="capture passes, one before the report and the others after it; the ratio takes their median",
    )
    args = ap.parse_args()
    probe = [str(Path(sys.executable).with_name("probe"))]  # the venv's console script
    base = Path(args.out or tempfile.mkdtemp(prefix="bench-smollm2-"))
    base.mkdir(parents=True, exist_ok=True)
    bundled = str(Path(__file__).resolve().parents[1] / "app" / "report" / "sample" / "sample.conllu")
    sample = args.conllu == "bundled"  # the report reads it given no input; the capture by its path
    limit = ["--limit", str(args.limit)] if args.limit and not sample else []  # the sample: all 24
    given = ["--model", args.model, "--conllu", bundled if sample else args.conllu, *limit]
    goal = args.goal or (60 if sample else 25 if args.model == "smollm2" else 15)
    print(f"load average before: {os.getloadavg()}", flush=True)
    captures = [capture_pass(probe, given, base, 1)]
    asked = ["--model", args.model, *limit] if sample else given
    report_cmd = [*probe, "report", *asked, "-v", "--no-resume", "--force", "--out", str(base / "report")]
    report_cmd += args.report_args.split()
    print("report: " + " ".join(report_cmd), flush=True)
    rep = timed(report_cmd, base / "report.log")
    print(
        f"report: {rep['wall']:.1f} s wall, {rep['cpu']:.1f} s CPU, peak RSS {rep['rss_gib']:.2f} GiB (rc {rep['rc']})"
    )
    for name, s in sections(rep["log"]):
        print(f"  {name}: {s:.1f} s wall")
    captures += [capture_pass(probe, given, base, k) for k in range(2, max(1, args.captures) + 1)]
    walls = [c["wall"] for c in captures]
    wall, cpu = statistics.median(walls), statistics.median(c["cpu"] for c in captures)
    shown = ", ".join(f"{w:.1f}" for w in walls)
    print(f"capture pass, median of {len(captures)}: {wall:.1f} s wall, {cpu:.1f} s CPU (walls {shown})")
    print(
        f"ratio: report / capture pass = {rep['wall'] / wall:.1f} by wall time, "
        f"{rep['cpu'] / max(cpu, 1e-9):.1f} by CPU time (goal ≤ {goal:g})"
    )
    print(f"load average after: {os.getloadavg()}")
    if rep["rc"] != 0:
        print(rep["log"][-3000:])


if __name__ == "__main__":
    main()
