"""Benchmark: batched head sweep vs the naive loop, and the cost of gradient importance
in forward-equivalents, side by side in one run.

    python bench/bench_ablation.py [--n 64] [--repeats 3] [--batch-size 16] [--threads 2]
                                   [--max-tokens 2048]

Model: the bundled minilm (6 × 12 = 72 heads, loaded with SDPA attention; both sides
use the same model); data: the first N EWT dev sentences; metric: embedding-drift,
zero-ablation. The sweep restarts each forward at the ablated layer's output
projection and packs its rows into forwards of ≤ ``--max-tokens`` padded tokens, each
cut to its longest sentence (see :mod:`probe.analyses.necessity.ablation`); the naive loop runs one
full forward of each ``--batch-size`` chunk per ablated head, once in corpus order and
once over the sentences sorted by length (its least padding, so the ratio does not
credit the sweep with padding any loop could avoid). Timings are interleaved
(sweep, naive, naive-sorted, forward, gradient, repeated) and each is the median of ``--repeats``;
each method also runs once in a fresh subprocess to report its peak RSS. The load
average is printed before and after (the machine may be shared).
Gradient importance uses a differentiable stand-in metric (‖mean-pooled embedding‖²;
the cost of a forward + backward does not depend on the metric) and is divided by
the time of one clean forward pass over the same batches.

Targets (issue 7): sweep ≤ 0.6 × naive; gradient importance ≤ 3 forward-equivalents.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from probe.analyses.common.objective import get_metric

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
EWT = ROOT.parent / "shared" / "data" / "ud-english-ewt" / "en_ewt-ud-dev.conllu"


def emb_norm(outputs, batch):
    h = outputs.last_hidden_state
    m = batch.inputs["attention_mask"].to(h.dtype).unsqueeze(-1)
    return ((h * m).sum(1) / m.sum(1)).pow(2).sum(-1)


def _setup(n, threads):
    import torch

    torch.set_num_threads(threads)
    from probe.models import load_model
    from probe.inputs.corpus import load_corpus

    return load_model("minilm"), load_corpus(conllu=str(EWT), limit=n)


def sorted_by_length(adapter, corpus):
    """The corpus reordered longest first (token count), every parallel field alike: the
    naive loop's best case for padding, so the comparison does not credit the sweep's
    length-cut forwards with padding a naive loop could also avoid."""
    import dataclasses

    n = len(corpus.texts)
    lengths = [len(adapter.tokenizer(t)["input_ids"]) for t in corpus.texts]
    order = sorted(range(n), key=lambda i: -lengths[i])
    fields = {}
    for f in dataclasses.fields(corpus):
        v = getattr(corpus, f.name)
        if isinstance(v, tuple) and len(v) == n:
            fields[f.name] = tuple(v[i] for i in order)
    return dataclasses.replace(corpus, **fields)


def _run(name, adapter, corpus, bs, max_tokens=None):
    import torch

    from probe.analyses.necessity.ablation import sweep_heads, sweep_heads_naive
    from probe.analyses.necessity.importance import gradient_importance
    from probe.analyses.common.metrics import CallableMetric, prepare

    if name == "sweep":
        kw = {} if max_tokens is None else {"max_tokens": max_tokens}
        return sweep_heads(adapter, corpus, get_metric("embedding-drift", adapter), batch_size=bs, **kw)
    if name == "naive":
        return sweep_heads_naive(adapter, corpus, get_metric("embedding-drift", adapter), batch_size=bs)
    if name == "naive-sorted":
        return sweep_heads_naive(
            adapter, sorted_by_length(adapter, corpus), get_metric("embedding-drift", adapter), batch_size=bs
        )
    metric = CallableMetric(emb_norm, "emb-norm")
    chunks = prepare(adapter, corpus, metric, bs)
    if name == "forward":
        with torch.no_grad():
            for ch in chunks:
                metric.forward(adapter, ch.batch)
        return None
    return gradient_importance(adapter, corpus, metric, chunks=chunks)


def _timed(name, adapter, corpus, bs, max_tokens):
    if name in ("forward", "gradient"):
        # exclude tokenisation/clean pass: time only the measured stage
        import torch

        from probe.analyses.necessity.importance import gradient_importance
        from probe.analyses.common.metrics import CallableMetric, prepare

        metric = CallableMetric(emb_norm, "emb-norm")
        chunks = prepare(adapter, corpus, metric, bs)
        t = time.perf_counter()
        if name == "forward":
            with torch.no_grad():
                for ch in chunks:
                    metric.forward(adapter, ch.batch)
        else:
            gradient_importance(adapter, corpus, metric, chunks=chunks)
        return time.perf_counter() - t
    t = time.perf_counter()
    _run(name, adapter, corpus, bs, max_tokens)
    return time.perf_counter() - t


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith(key + ":")))


def _peak(name, n, bs, threads, max_tokens, q):
    """Peak RSS of one run in a fresh process: (RSS before, peak during) in KiB. The
    high-water mark is reset after loading (Linux ``clear_refs``), so the model load's
    own transient peak does not hide the run's; without that, ``ru_maxrss``."""
    adapter, corpus = _setup(n, threads)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        base, peak = _status_kib("VmRSS"), lambda: _status_kib("VmHWM")
    except OSError:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # noqa: E731
    _run(name, adapter, corpus, bs, max_tokens)
    q.put((base, peak()))


def _fmt(values, digits=2) -> str:
    return "[" + ", ".join(f"{v:.{digits}f}" for v in values) + "]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="padded tokens per sweep forward (default: probe.analyses.necessity.ablation.MAX_TOKENS)",
    )
    args = ap.parse_args()
    if args.max_tokens is None:
        from probe.analyses.necessity.ablation import MAX_TOKENS

        args.max_tokens = MAX_TOKENS
    load_before = os.getloadavg()
    adapter, corpus = _setup(args.n, args.threads)
    names = ["sweep", "naive", "naive-sorted", "forward", "gradient"]
    times = {k: [] for k in names}
    for _ in range(args.repeats):
        for k in names:  # interleaved, so load changes hit both sides alike
            times[k].append(_timed(k, adapter, corpus, args.batch_size, args.max_tokens))
    med = {k: statistics.median(v) for k, v in times.items()}
    ratios = [s / n for s, n in zip(times["sweep"], times["naive"])]
    ratios_sorted = [s / n for s, n in zip(times["sweep"], times["naive-sorted"])]
    # exactness of the run we time
    fast = _run("sweep", adapter, corpus, args.batch_size, args.max_tokens)
    slow = _run("naive", adapter, corpus, args.batch_size)
    err = float(abs(fast.ablated - slow.ablated).max())
    ctx = mp.get_context("spawn")
    peaks = {}
    for k in ("sweep", "naive", "gradient"):
        q = ctx.Queue()
        p = ctx.Process(target=_peak, args=(k, args.n, args.batch_size, args.threads, args.max_tokens, q))
        p.start()
        base, peak = q.get()
        p.join()
        peaks[k] = (base / 1024, peak / 1024)
    attn = getattr(adapter.model.config, "_attn_implementation", "?")
    print(
        f"minilm ({attn} attention), {len(corpus)} EWT sentences, 72 heads, batch {args.batch_size}, "
        f"{args.threads} threads, max_tokens {args.max_tokens}, median of {args.repeats}"
    )
    print(
        f"  load average (1/5/15 min): before {' '.join(f'{x:.2f}' for x in load_before)}, "
        f"after {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"  sweep ({fast.path}): {med['sweep']:.2f} s {_fmt(times['sweep'])}   naive loop: {med['naive']:.2f} s "
        f"{_fmt(times['naive'])}"
    )
    print(
        f"  ratio {med['sweep'] / med['naive']:.3f} of medians (target ≤ 0.6); per repeat {_fmt(ratios, 3)}   "
        f"max |Δ| {err:.1e}"
    )
    print(
        f"  naive loop over length-sorted sentences (its least padding): {med['naive-sorted']:.2f} s "
        f"{_fmt(times['naive-sorted'])}; ratio {med['sweep'] / med['naive-sorted']:.3f} of medians; "
        f"per repeat {_fmt(ratios_sorted, 3)}"
    )
    print(
        f"  clean forward: {med['forward']:.3f} s   gradient importance: {med['gradient']:.3f} s   "
        f"= {med['gradient'] / med['forward']:.2f} forward-equivalents (target ≤ 3)"
    )
    for k, (b, p) in peaks.items():
        print(f"  peak RSS {k:<9} {p:.0f} MiB (RSS before the run {b:.0f} MiB, +{p - b:.0f} MiB)")


if __name__ == "__main__":
    main()
