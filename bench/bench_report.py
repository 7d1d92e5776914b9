"""Time `probe report` for the bundled model, phase by phase.

    python bench/bench_report.py                      # the bundled sample (README's command)
    python bench/bench_report.py --conllu ../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu

Prints wall and CPU seconds of loading, capture, each section and rendering, the peak
memory, and the ratio of the total to the budget (3 min for the sample, 15 min for EWT dev
on 2 cores). Writes the report to a temporary directory (or --out).
"""

from __future__ import annotations

import argparse
import logging
import resource
import tempfile
import time
from pathlib import Path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conllu", default=None)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--sections", default=None, help="comma-separated (default: all)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    import torch

    from probe.models import load_model
    from probe.capture import capture
    from probe.inputs import fit_to_model, load_corpus
    from probe.app.report.build import analyse, write_report
    from probe.app.report.bundled import sample_corpus
    from probe.app.report.context import ReportContext

    budget = 15 * 60 if args.conllu else 3 * 60
    clock = {}
    t0, c0 = time.perf_counter(), time.process_time()

    def lap(name, t, c):
        clock[name] = (time.perf_counter() - t, time.process_time() - c)
        return time.perf_counter(), time.process_time()

    t, c = t0, c0
    adapter = load_model("minilm")
    corpus = load_corpus(conllu=args.conllu, limit=args.limit) if args.conllu else sample_corpus(args.limit)
    corpus = fit_to_model(corpus, adapter)
    t, c = lap("load model + corpus", t, c)
    maps = capture(adapter, list(corpus.texts), word_spans=list(corpus.word_spans), progress=True)
    t, c = lap(f"capture ({len(maps)} examples)", t, c)
    ctx = ReportContext(adapter=adapter, corpus=corpus, maps=maps, settings={"model": "minilm"})
    data = analyse(ctx, sections=args.sections.split(",") if args.sections else None)
    t, c = lap("sections", t, c)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp()) / "report"
    write_report(data, out, force=True)
    lap("render pages", t, c)
    total = time.perf_counter() - t0
    print(f"torch threads: {torch.get_num_threads()}")
    for name, (w, cpu) in clock.items():
        print(f"{name:<36} {w:8.1f}s wall {cpu:8.1f}s cpu")
    for o in data.outcomes:
        print(f"  section {o.name:<14} {o.status:<8} {o.seconds:8.1f}s  {o.reason}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"total {total:.1f}s wall, {time.process_time() - c0:.1f}s cpu; peak RSS {peak:.0f} MiB; "
          f"{total / budget:.2f} of the {budget // 60}-minute budget; report in {out}")


if __name__ == "__main__":
    main()
