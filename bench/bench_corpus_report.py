"""The whole ``probe report`` command on a corpus, three ways side by side in one run (issue 44):

* **default** — ``--causal auto``: every causal claim on the whole corpus, each head (group)
  decided in random blocks (the sequential path), importance until every head is within its
  width, faithfulness on the examples its power needs;
* **capped** — ``--causal exhaustive``: the report of before, every model-run section
  (ablation, importance, claims) on the first 128 examples;
* **exhaustive** — ``--causal exhaustive --max-model-examples 0``: every head removed in every
  mode on every example (the exact answer the default decides towards), faithfulness as in
  the default.

    python bench/bench_corpus_report.py                        # EWT dev (2,001 sentences), 1 round, all three
    python bench/bench_corpus_report.py --runs 3 --no-exhaustive
    python bench/bench_corpus_report.py --conllu FILE --limit 512

Each command runs in its own process under GNU time (wall seconds, peak resident set); the
default and capped commands alternate round by round, so a drifting machine moves both
alike. Prints each run, the medians, the ratios to the default, how many examples each
report's causal sections read (from its summary.json), and the default's causal verdicts
against the exhaustive run's — necessity and weights per head, redundancy per candidate
group —: agreement per claim and every disagreement. Prints, never asserts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

EWT_DEV = "../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu"
CAUSAL = ("necessity", "weights", "redundancy")
VARIANTS = {
    "default": [],
    "capped": ["--causal", "exhaustive"],
    "exhaustive": ["--causal", "exhaustive", "--max-model-examples", "0"],
}


def run_report(name: str, conllu: str, limit: int | None, out: Path) -> tuple[float, float]:
    """One whole command under GNU time; returns (wall seconds, peak RSS GiB)."""
    probe = Path(sys.executable).with_name("probe")
    cmd = [str(probe), "report", "--conllu", conllu, "--out", str(out), *VARIANTS[name]]
    if limit:
        cmd += ["--limit", str(limit)]
    timing = out.with_suffix(".time")
    with open(out.with_suffix(".log"), "w") as log:
        done = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", str(timing), *cmd], stdout=log, stderr=log)
    if done.returncode != 0:
        sys.exit(f"Error: `{' '.join(cmd)}` exited {done.returncode}; see {out.with_suffix('.log')}")
    wall, kib = timing.read_text().split()[-2:]
    return float(wall), float(kib) / 2**20


def causal_counts(summary: dict) -> str:
    """The examples the report's model-run sections read, as its settings state them."""
    return str(summary["settings"].get("model-run examples", "?")).split(":")[0]


def verdicts(summary: dict) -> dict[tuple[str, str], str]:
    """``{(claim, unit): status}``: necessity and weights per head (``L2H4``), redundancy per
    tested group (``L4H2+L4H4+…``: each of its heads carries the group's verdict; a head in no
    group is not a verdict)."""
    got = {}
    for head in summary["heads"]:
        for kind in CAUSAL:
            claim = head.get("claims", {}).get(kind)
            if claim is None or claim["status"] == "not tested":
                continue
            unit = claim["extra"]["group"] if kind == "redundancy" else f"L{head['layer']}H{head['head']}"
            got[(kind, unit)] = claim["status"]
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conllu", default=EWT_DEV)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--runs", type=int, default=1, help="rounds of the default and capped commands")
    ap.add_argument("--no-exhaustive", action="store_true", help="skip the exhaustive command")
    ap.add_argument("--out", default=None, help="keep the reports here (default: a temporary directory)")
    args = ap.parse_args()
    if not Path(args.conllu).is_file():
        sys.exit(f"Error: no corpus at {args.conllu}; give --conllu (the treebanks live in ../shared/data)")
    root = Path(args.out or tempfile.mkdtemp(prefix="corpus-report-"))
    root.mkdir(parents=True, exist_ok=True)

    times: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    order = [name for _ in range(args.runs) for name in ("default", "capped")]
    if not args.no_exhaustive:
        order.append("exhaustive")
    for i, name in enumerate(order):
        wall, peak = run_report(name, args.conllu, args.limit, root / f"{name}{i}")
        times[name].append((wall, peak))
        print(f"{name:<10} run {len(times[name])}: {wall:7.1f} s, peak {peak:.2f} GiB", flush=True)

    base = statistics.median(w for w, _ in times["default"])
    print()
    print("| command | runs | median s | ratio to default | peak GiB (max) | causal sections read |")
    print("| --- | --- | --- | --- | --- | --- |")
    summaries = {}
    for i, name in enumerate(order):
        summaries.setdefault(name, json.loads((root / f"{name}{i}" / "summary.json").read_text(encoding="utf-8")))
    for name, runs in times.items():
        if not runs:
            continue
        med = statistics.median(w for w, _ in runs)
        print(
            f"| {name} (`{' '.join(['probe report', *VARIANTS[name]])}`) | {len(runs)} | {med:.1f} | {med / base:.2f}× | "
            f"{max(p for _, p in runs):.2f} | {causal_counts(summaries[name])} |"
        )
    if "exhaustive" not in summaries:
        print(f"\nreports in {root}")
        return
    default, exact = verdicts(summaries["default"]), verdicts(summaries["exhaustive"])
    print()
    print("| claim | units (heads; redundancy: groups) | agree | holds (exhaustive) | holds (default) |")
    print("| --- | --- | --- | --- | --- |")
    disagreements = []
    for kind in CAUSAL:
        keys = [k for k in exact if k[0] == kind and k in default]
        agree = sum(default[k] == exact[k] for k in keys)
        print(
            f"| {kind} | {len(keys)} | {agree} | {sum(exact[k] == 'holds' for k in keys)} | "
            f"{sum(default[k] == 'holds' for k in keys)} |"
        )
        only = {k for k in set(exact) ^ set(default) if k[0] == kind}  # tested on one side only
        disagreements += [f"{kind} {k[1]}: tested on one side only" for k in sorted(only)]
        disagreements += [f"{kind} {k[1]}: exhaustive {exact[k]}, default {default[k]}" for k in keys
                          if default[k] != exact[k]]  # fmt: skip
    print("\ndisagreements:" if disagreements else "\ndisagreements: none")
    for line in disagreements:
        print("  " + line)
    print(f"\nreports in {root}")


if __name__ == "__main__":
    main()
