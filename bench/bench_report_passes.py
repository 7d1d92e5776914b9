"""The report in capture passes: each section's model work counted, beside one capture pass.

    python bench/bench_report_passes.py                      # the bundled sample (the main command)
    python bench/bench_report_passes.py --conllu /work/shared/data/ud-english-ewt/en_ewt-ud-dev.conllu
    python bench/bench_report_passes.py --model smollm2 --conllu /work/shared/data/ud-english-ewt/en_ewt-ud-dev.conllu --limit 256

Runs the default report of the bundled model (MiniLM) as ``probe report`` does (open the run,
capture, every default section, render) in this process, with a counter on every forward of
every model in the process (the null model's included): a global forward hook
(``torch.nn.modules.module.register_module_forward_hook``) counts

* **forwards**: calls of the model's top module (``BertModel``; a restarted forward counts
  as one: it calls the model's own forward; so does one that stops after a layer);
* **layer work**: the tokens (rows × padded length) through each layer's feed-forward block
  (``BertIntermediate``): a layer skipped by a restart is not counted, a restarted layer is;
  divided by the capture pass's own count, it is the section's work in **capture passes**;
* **backward layer work**: the same tokens when a gradient flows back through the block
  (a tensor hook on its output), in capture passes;
* **LM head**: the tokens projected onto the vocabulary by any model's output embedding
  (``get_output_embeddings()``, known from a pre-hook on the top module), as passes of the
  corpus' tokens (head tokens × layers / the capture's layer-tokens). A decoder's head costs
  ``vocab × d_model`` per token (SmolLM2: 49,152 × 576, about 8 of its 30 layers), which the
  layer work does not show.

Prints the capture pass's time (the median of ``--captures`` passes: the report's own and
the others after the run), the whole run's time (load, capture, sections, render) and
their ratio, each section's time, forwards, forward and backward work in capture passes,
peak resident memory (the process's high-water mark), the load average, and for the claims'
removals the floor their decisions need, read from summary.json: every (head, example)
removal the sequential test ran, in the model and its null, as restarted forwards (one
example's layers from the head's layer on, the mean over layers: (L+1)/2L of a pass).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import tempfile
import time
import weakref
from pathlib import Path


class WorkCounter:
    """Counts forwards of ``top`` (a module class) and tokens through ``block`` (a module
    class) forwards and backwards, for every module of those classes in the process."""

    def __init__(self, top: type, block: type) -> None:
        self.top, self.block = top, block
        self.forwards = 0
        self.tokens = 0
        self.back_tokens = 0
        self.head_tokens = 0
        self.heads: weakref.WeakSet = weakref.WeakSet()  # the output embeddings (LM heads) of the models seen

    def _hook(self, module, args, output) -> None:
        if module in self.heads and args and hasattr(args[0], "shape"):
            self.head_tokens += int(args[0].shape[:-1].numel())
        elif isinstance(module, self.block):
            n = int(args[0].shape[:-1].numel())
            self.tokens += n
            if getattr(output, "requires_grad", False):

                def back(grad, n=n):
                    self.back_tokens += n

                output.register_hook(back)

    def _pre_hook(self, module, args) -> None:
        if isinstance(module, self.top):  # counted as it starts (a forward that stops early too); its LM head
            self.forwards += 1  # known before the head runs (the null model's too)
            head = getattr(module, "get_output_embeddings", lambda: None)()
            if head is not None:
                self.heads.add(head)

    def __enter__(self):
        import torch

        self._handle = torch.nn.modules.module.register_module_forward_hook(self._hook)
        self._pre = torch.nn.modules.module.register_module_forward_pre_hook(self._pre_hook)
        return self

    def __exit__(self, *exc) -> None:
        self._handle.remove()
        self._pre.remove()

    def snapshot(self) -> tuple:
        return (self.forwards, self.tokens, self.back_tokens, self.head_tokens)


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def claims_floor(summary: dict, n_layers: int, n_examples: int) -> str:
    """The claims' removals as the sequential test needed them (summary.json), in capture passes."""
    claims = next((x for x in summary["sections"] if x["name"] == "claims"), None)
    causal = ((claims or {}).get("summary") or {}).get("causal") or {}
    if causal.get("path") != "sequential":
        return f"claims path {causal.get('path')!r}: no floor read"
    removals = int(causal.get("removals", 0)) + int(causal.get("null_removals", 0))
    red = causal.get("redundancy") or {}
    groups = int(red.get("removals", 0)) + int(red.get("null_removals", 0))
    restart = (n_layers + 1) / (2 * n_layers)
    passes = (removals + groups) * restart / n_examples
    return (
        f"claims floor: {removals} head removals + {groups} group removals (model and null) × "
        f"{restart:.2f} of an example's layers = {passes:.2f} capture passes, plus the null model's clean "
        f"pass of the examples it read (≤ 1)"
    )


def recapture(ctx) -> float:
    """Seconds of one more capture pass of the run's corpus, as the run captured it (the
    report's batch size), outside the report's time: one capture pass moved by a fifth
    between runs of the same hour, more than the changes measured against it."""
    from probe.runs.capture import capture

    c = ctx.corpus.kept
    t = time.perf_counter()
    capture(
        ctx.adapter,
        list(c.texts),
        word_spans=list(c.word_spans) if c.word_spans else None,
        targets=list(c.targets) if c.targets else None,
        batch_size=16,  # open_run's, the report's
    )
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conllu", default=None)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--model", default="minilm", help="the model (default minilm; smollm2 counts its LlamaMLP blocks)")
    ap.add_argument("--sections", default=None, help="comma-separated (default: all)")
    ap.add_argument("--out", default=None, help="where the report is written (default: a temporary folder)")
    ap.add_argument(
        "--captures",
        type=int,
        default=3,
        help="capture passes timed: the report's own and the others after it; the ratio takes their median",
    )
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    load0 = os.getloadavg()
    t0 = time.perf_counter()

    import torch

    from probe.app.registry import open_run
    from probe.app.registry.context import ReportState
    from probe.app.report.build import _model_examples_setting, _overrides, analyse, write_report
    from probe.app.report.bundled import sample_corpus
    from probe.inputs.corpus import fit_to_model, load_corpus
    from probe.models import load_model

    adapter = load_model(args.model)
    corpus = load_corpus(conllu=args.conllu, limit=args.limit) if args.conllu else sample_corpus(args.limit)
    corpus = fit_to_model(corpus, adapter)
    block = next(type(m) for m in adapter.model.modules() if type(m).__name__.endswith(("Intermediate", "MLP")))
    t_load = time.perf_counter() - t0
    n_layers = adapter.n_layers  # LM-head tokens × layers / layer-tokens: passes of the corpus' tokens through the head
    with WorkCounter(type(adapter.model), block) as counter:
        ctx = open_run(
            args.model,
            corpus,
            adapter=adapter,
            report=ReportState(overrides=_overrides(None)),
            quiet=True,
            echo=False,
        )
        t = time.perf_counter()
        maps = ctx.maps
        t_capture = time.perf_counter() - t
        capture = counter.snapshot()
        ctx.report.settings.update({"model": args.model, **_model_examples_setting(len(ctx.corpus.as_given), None)})
        marks: list = []  # (section, time, counts, peak) at each section's start

        print(
            f"capture pass {t_capture:.1f} s: {capture[0]} forwards, {capture[1]} layer-tokens, "
            f"{capture[3]} LM-head tokens "
            f"(load average {os.getloadavg()[0]:.2f})",
            flush=True,
        )

        def progress(i, n, name):
            marks.append((name.split(" ")[0], time.perf_counter(), counter.snapshot(), _peak_mib()))
            if len(marks) > 1:
                (done, ts, c0, _), (_, te, c1, peak) = marks[-2], marks[-1]
                print(
                    f"  {done}: {te - ts:.1f} s, {c1[0] - c0[0]} forwards, work {(c1[1] - c0[1]) / max(1, capture[1]):.2f} "
                    f"+ backward {(c1[2] - c0[2]) / max(1, capture[1]):.2f} capture passes, LM head "
                    f"{(c1[3] - c0[3]) * n_layers / max(1, capture[1]):.2f} passes of the tokens, peak {peak:.0f} MiB "
                    f"(load {os.getloadavg()[0]:.2f})",
                    flush=True,
                )

        data = analyse(ctx, sections=args.sections.split(",") if args.sections else None, progress=progress)
        marks.append(("end", time.perf_counter(), counter.snapshot(), _peak_mib()))
    t = time.perf_counter()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp()) / "report"
    write_report(data, out, force=True)
    t_render = time.perf_counter() - t
    total = time.perf_counter() - t0
    captures = [t_capture] + [recapture(ctx) for _ in range(max(1, args.captures) - 1)]
    t_capture = statistics.median(captures)
    unit = max(1, capture[1])
    n = len(maps)
    print(
        f"{'EWT dev' if args.conllu else 'bundled sample'}: {n} examples, model {args.model}, torch threads "
        f"{torch.get_num_threads()}; load average before {' '.join(f'{x:.2f}' for x in load0)}, "
        f"after {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"capture pass {t_capture:.1f} s, the median of {len(captures)} ({', '.join(f'{x:.1f}' for x in captures)} s; "
        f"{capture[0]} forwards, {capture[1]} layer-tokens); whole run {total:.1f} s "
        f"(load {t_load:.1f} s, render {t_render:.1f} s) = {total / t_capture:.1f} capture passes of time"
    )
    print(
        "| section | status | s | × capture time | forwards | forward work (capture passes) | backward work | "
        "LM head (passes of the tokens) | peak RSS MiB |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    status = {o.name: o.status for o in data.outcomes}
    sums = [0.0, 0, 0, 0, 0]
    for (name, ts, c0, _), (_, te, c1, peak) in zip(marks, marks[1:]):
        s, f, w, b, h = te - ts, c1[0] - c0[0], c1[1] - c0[1], c1[2] - c0[2], c1[3] - c0[3]
        sums = [sums[0] + s, sums[1] + f, sums[2] + w, sums[3] + b, sums[4] + h]
        print(
            f"| {name} | {status.get(name, '?')} | {s:.1f} | {s / t_capture:.1f} | {f} | {w / unit:.2f} | "
            f"{b / unit:.2f} | {h * n_layers / unit:.2f} | {peak:.0f} |"
        )
    print(
        f"| all sections | | {sums[0]:.1f} | {sums[0] / t_capture:.1f} | {sums[1]} | {sums[2] / unit:.2f} | "
        f"{sums[3] / unit:.2f} | {sums[4] * n_layers / unit:.2f} | {_peak_mib():.0f} |"
    )
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    print(claims_floor(summary, adapter.n_layers, n))
    print(f"peak RSS {_peak_mib():.0f} MiB; report in {out}")


if __name__ == "__main__":
    main()
