"""Time `probe report` for the bundled model, phase by phase.

    python bench/bench_report.py                      # the bundled sample (README's command)
    python bench/bench_report.py --conllu ../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu
    python bench/bench_report.py --document ../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu

``--document`` runs the report on a document made from the treebank's text: 3,000 words
in 136 lines, the first line about 393 tokens (consecutive sentences joined), as
``probe report --file`` reads it: the case whose importance step once peaked at 18.9 GB.

``--engine stream|ray`` (``--workers``, ``--kept-examples``) runs the corpus statistics
as ``probe report --engine`` does (one streamed pass, here or on Ray actors) and captures
only the kept sample.

Prints wall and CPU seconds of loading, capture, each section and rendering, the peak
RSS after each section (the process's high-water mark so far, so the section that raised it
shows), the ratio of the total to the budget (3 min on 2 cores), and the claims' causal
path (``--causal``: the report's default ``auto`` decides necessity and weights per head on
every example; ``exhaustive`` is the capped report of before). Writes the report to a
temporary directory (or --out).
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
    ap.add_argument(
        "--document",
        default=None,
        metavar="CONLLU",
        help="the 136-line document built from this treebank's text, read as --file",
    )
    ap.add_argument("--memory-budget", default="2G")
    ap.add_argument("--max-model-examples", type=int, default=None, help="0: every example")
    ap.add_argument(
        "--causal",
        default=None,
        choices=("auto", "sequential", "exhaustive", "screened"),
        help="the causal claims' path (default: the report's, auto); exhaustive: the capped report of before",
    )
    ap.add_argument("--engine", default="local", choices=("local", "stream", "ray"))
    ap.add_argument("--workers", type=int, default=2, help="Ray actors (--engine ray)")
    ap.add_argument("--kept-examples", type=int, default=None, help="--engine stream|ray: maps held (default 128)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    import torch

    from probe.models import load_model
    from probe.inputs.corpus import fit_to_model, load_corpus
    from probe.app.registry import open_run
    from probe.app.engine.kind import Engine
    from probe.app.registry.context import ReportState
    from probe.app.report.build import analyse, write_report
    from probe.app.report.bundled import sample_corpus
    from probe.app.report.engine_sections import KEPT_EXAMPLES

    from probe.app.report.build import _model_examples_setting, _overrides
    from probe.inputs.budget import memory_budget, parse_size

    budget = 3 * 60
    clock = {}
    t0, c0 = time.perf_counter(), time.process_time()

    def lap(name, t, c):
        clock[name] = (time.perf_counter() - t, time.process_time() - c)
        return time.perf_counter(), time.process_time()

    t, c = t0, c0
    adapter = load_model("minilm")
    if args.document:
        doc = Path(tempfile.mkdtemp()) / "document.txt"
        doc.write_text("\n".join(long_document(args.document, adapter)) + "\n", encoding="utf-8")
        corpus = load_corpus(file=str(doc), limit=args.limit)
    elif args.conllu:
        corpus = load_corpus(conllu=args.conllu, limit=args.limit)
    else:
        corpus = sample_corpus(args.limit)
    corpus = fit_to_model(corpus, adapter)
    lengths = [len(x) for x in adapter.tokenizer(list(corpus.texts))["input_ids"]]
    print(f"{len(corpus)} examples, {sum(len(t.split()) for t in corpus.texts)} words, longest {max(lengths)} tokens")
    t, c = lap("load model + corpus", t, c)
    ctx = open_run(
        "minilm",
        corpus,
        adapter=adapter,
        engine=Engine(args.engine, workers=args.workers),
        kept_examples=(args.kept_examples or KEPT_EXAMPLES) if args.engine != "local" else None,
        report=ReportState(overrides=_overrides(args.max_model_examples, causal=args.causal)),
        quiet=False,
        echo=False,
    )
    corpus, on_engine = ctx.corpus.kept, None
    if args.engine != "local":
        from probe.app.report.build import _engine_statistics

        on_engine = _engine_statistics(ctx, 16, False)
        t, c = lap(f"engine {args.engine} statistics ({len(on_engine.corpus)} examples)", t, c)
    maps = ctx.maps
    t, c = lap(f"capture ({len(maps)} examples)", t, c)
    settings = ctx.report.settings
    settings.update({"model": "minilm", **_model_examples_setting(len(ctx.corpus.as_given), args.max_model_examples)})
    if on_engine is not None:
        from probe.app.report.sections import choose

        chosen = choose(args.sections.split(",") if args.sections else None)
        settings.update(on_engine.statement(len(corpus), chosen))
    rss = {}

    cpu_at = {}  # section -> process CPU seconds when it started

    def progress(i, n, name):
        rss[name.split(" ")[0]] = _peak_mib()
        cpu_at[name.split(" ")[0]] = time.process_time()
        print(
            f"[{i + 1}/{n}] {name} at {time.perf_counter() - t0:.0f}s, peak RSS so far {rss[name.split(' ')[0]]:.0f} "
            "MiB",
            flush=True,
        )

    with memory_budget(parse_size(args.memory_budget)):
        data = analyse(ctx, sections=args.sections.split(",") if args.sections else None, progress=progress)
    names = [o.name for o in data.outcomes]
    after = {}  # peak RSS when each section ended (the next one's start, or the end of all)
    for j, name in enumerate(names):
        later = [rss[m] for m in names[j + 1 :] if m in rss]
        after[name] = later[0] if later else _peak_mib()
    cpu_end = time.process_time()
    cpu_of = {}  # section -> CPU seconds (this process's threads; the next section's start, or the end)
    for j, name in enumerate(names):
        later = [cpu_at[m] for m in names[j + 1 :] if m in cpu_at]
        cpu_of[name] = (later[0] if later else cpu_end) - cpu_at[name] if name in cpu_at else 0.0
    t, c = lap("sections", t, c)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp()) / "report"
    write_report(data, out, force=True)
    lap("render pages", t, c)
    total = time.perf_counter() - t0
    print(f"torch threads: {torch.get_num_threads()}")
    for name, (w, cpu) in clock.items():
        print(f"{name:<36} {w:8.1f}s wall {cpu:8.1f}s cpu")
    for o in data.outcomes:
        print(
            f"  section {o.name:<14} {o.status:<8} {o.seconds:8.1f}s wall {cpu_of[o.name]:7.1f}s cpu  "
            f"peak RSS so far {after[o.name]:6.0f} MiB  "
            f"{o.reason}"
        )
    _causal_line(out)
    peak = _peak_mib()
    print(
        f"total {total:.1f}s wall, {time.process_time() - c0:.1f}s cpu; peak RSS {peak:.0f} MiB; "
        f"{total / budget:.2f} of the {budget // 60}-minute budget; report in {out}"
    )


def _causal_line(out: Path) -> None:
    """The claims' causal path as summary.json states it (the examples each head took)."""
    import json

    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    claims = next((x for x in summary["sections"] if x["name"] == "claims"), None)
    causal = (claims or {}).get("summary", {}).get("causal")
    if not causal:
        return
    if causal.get("path") != "sequential":
        print(f"claims: {causal.get('path')} path on {causal.get('examples')} examples")
        return
    for mode, m in causal["modes"].items():
        print(
            f"claims ({mode}): sequential on all {causal['examples']} examples, {m['holds']} hold, examples per head "
            f"{m['examples_min']}–{m['examples_max']} (median {m['examples_median']:g}), {m['undecided']} undecided "
            f"after every example"
        )
    print(
        f"claims: {causal['removals']} + {causal['null_removals']} (null) removals of the exhaustive "
        f"{causal['exhaustive_removals']}; bars {causal['bars']}"
    )
    red = causal.get("redundancy") or {}
    if red.get("groups"):
        print(
            f"redundancy: {red['groups']} groups on all {red['examples']} examples, {red['holds']} hold; "
            f"{red['removals']} + {red['null_removals']} (null) group removals of the exhaustive "
            f"{red['exhaustive_removals']}"
        )
    imp = next((x for x in summary["sections"] if x["name"] == "importance"), None)
    blocks = ((imp or {}).get("summary") or {}).get("blocks")
    if blocks:
        print(
            f"importance: {imp['summary']['examples']} of {blocks['of']} examples in {blocks['blocks']} random blocks, "
            f"widest 95% half-width ±{blocks['widest']:.3f} (asked ±{blocks['precision']:g})"
        )


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def long_document(conllu_path, adapter, lines: int = 136, words: int = 3000, long_tokens: int = 393) -> list:
    """``lines`` lines holding about ``words`` words of the treebank's text: the first line
    consecutive sentences (and words of the next) up to ``long_tokens`` tokens, the rest the
    following sentences shared evenly over the other lines."""
    import conllu

    with open(conllu_path, encoding="utf-8") as fh:
        sents = [s.metadata["text"] for s in conllu.parse(fh.read())]
    n_tok = lambda words_: len(adapter.tokenizer(" ".join(words_))["input_ids"])  # noqa: E731
    first, k = [], 0
    while n_tok(first + [sents[k]]) <= long_tokens:
        first.append(sents[k])
        k += 1
    extra = sents[k].split()
    k += 1
    while extra and n_tok(first + extra[:1]) <= long_tokens:
        first.append(extra.pop(0))
    out, rest, left = [" ".join(first)], [], words - len(" ".join(first).split())
    while left > 0 and k < len(sents):
        rest.append(sents[k])
        left -= len(sents[k].split())
        k += 1
    per = len(rest) / (lines - 1)
    out += [" ".join(rest[round(j * per) : round((j + 1) * per)]) for j in range(lines - 1)]
    return [line for line in out if line]


if __name__ == "__main__":
    main()
