"""What each head writes on SmolLM2: texts in batched forwards against one text a forward.

    python bench/bench_writes_smollm2.py [--limit 128] [--repeats 2]

Runs :func:`probe.analyses.writes.corpus.corpus_writes` on EWT dev's first ``--limit``
sentences in two processes in turn, ``--repeats`` times each (alternating): ``batched``
(:func:`probe.analyses.writes.stream.decompose_texts`, the report's way) and ``one`` (one traced
forward per text, :func:`probe.analyses.writes.claim.text_head_dla`, the way before). Prints each
run's wall and CPU seconds and peak RSS (the process's high-water mark, model load included),
the medians and their ratio, and the largest difference of the two tables' DLA.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EWT_DEV = "/work/shared/data/ud-english-ewt/en_ewt-ud-dev.conllu"


def one_run(mode: str, conllu: str, limit: int, out: Path) -> None:
    """In this process: corpus_writes the ``mode`` way; writes its table and figures to ``out``."""
    from probe.analyses.writes import claim, corpus
    from probe.inputs.corpus import fit_to_model, load_corpus
    from probe.models import load_model

    adapter = load_model("smollm2")
    texts = list(fit_to_model(load_corpus(conllu=conllu, limit=limit), adapter).texts)
    if mode == "one":

        def one_at_a_time(adapter, texts, answers=None):
            for i, text in enumerate(texts):
                yield i, claim.text_head_dla(adapter, text)

        claim.texts_head_dla = one_at_a_time  # corpus_writes imports it at the call
    t0, c0 = time.perf_counter(), time.process_time()
    w = corpus.corpus_writes(adapter, texts)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    w.table.to_csv(out / f"{mode}.csv", index=False)
    (out / f"{mode}.json").write_text(json.dumps({"wall": wall, "cpu": cpu, "peak_gib": peak}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conllu", default=EWT_DEV)
    ap.add_argument("--limit", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--mode", choices=("batched", "one"), help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mode:
        one_run(args.mode, args.conllu, args.limit, Path(args.out))
        return
    import pandas as pd

    print(f"load average before {os.getloadavg()}; torch threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    got: dict = {"batched": [], "one": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for mode in ("batched", "one") if r % 2 == 0 else ("one", "batched"):
                cmd = [sys.executable, __file__, "--mode", mode, "--out", tmp, "--conllu", args.conllu]
                subprocess.run([*cmd, "--limit", str(args.limit)], check=True, capture_output=True)
                one = json.loads((Path(tmp) / f"{mode}.json").read_text())
                got[mode].append(one)
                print(
                    f"{mode:8s} {one['wall']:6.1f} s wall, {one['cpu']:6.1f} s CPU, peak RSS {one['peak_gib']:.2f} GiB"
                )
        a, b = (pd.read_csv(Path(tmp) / f"{m}.csv") for m in ("batched", "one"))
    med = {m: {k: statistics.median(x[k] for x in v) for k in ("wall", "cpu", "peak_gib")} for m, v in got.items()}
    print(
        f"medians: batched {med['batched']['wall']:.1f} s / {med['batched']['peak_gib']:.2f} GiB, one text a forward "
        f"{med['one']['wall']:.1f} s / {med['one']['peak_gib']:.2f} GiB: ratio {med['batched']['wall'] / med['one']['wall']:.2f}× "
        f"by wall, {med['batched']['cpu'] / med['one']['cpu']:.2f}× by CPU, {med['batched']['peak_gib'] / med['one']['peak_gib']:.2f}× peak"
    )
    print(f"largest |Δ DLA| {float((a['dla'] - b['dla']).abs().max()):.2g} over {len(a)} heads")
    print(f"load average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
