"""Benchmark: attention flow and rollout, ours against the baselines, side by side.

    python bench/bench_flow.py                 # flow table + rollout
    python bench/bench_flow.py --no-rollout    # the flow table only

1. Flow on real MiniLM attention (L = 6, 12 heads, head mean, residual 0.5) of EWT dev
   text cut to n tokens: the [CLS] row at n = 32, 128, 512 and the full matrix at
   n = 64, 128. Three solvers on the same maps: the compiled layered Dinic (default,
   ``workers`` threads), today's scipy path (integer-scaled Dinic, ``workers``
   processes) and networkx (one ``maximum_flow_value`` per pair, the reference).
   The new and scipy runs are interleaved (new, scipy, new, scipy, ...) and their medians
   quoted. Where a whole job would take too long, a sample is timed and scaled: scipy
   by output rows (rows cost the same), networkx by pairs; networkx per-pair time is
   fitted as ``t = c·n^b`` over the sizes where it was timed and extrapolated beyond
   (the fit is printed). max |Δ| compares the new values with networkx on every pair
   networkx solved, and with scipy on every value both computed.
2. Rollout of EWT dev sentences captured with the bundled model: batched torch rollout
   of the [CLS] rows vs a per-example numpy loop of full matrix products (the
   samiraabnar/attention_flow approach).

Prints medians, ratios, the machine load (1-minute load average before and after) and
peak RSS.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from probe.analyses.flow.attention_flow import adjusted_attention, attention_flow, flow_graph  # noqa: E402
from probe.analyses.flow.rollout import rollout_batch  # noqa: E402
from timing import timed  # noqa: E402

EWT_DEV = ROOT.parent / "shared" / "data" / "ud-english-ewt" / "en_ewt-ud-dev.conllu"


def ewt_texts():
    if not EWT_DEV.exists():
        return []
    return [
        line[len("# text = ") :]
        for line in EWT_DEV.read_text(encoding="utf-8").splitlines()
        if line.startswith("# text = ")
    ]


def minilm_attention(n: int, texts: list[str]) -> torch.Tensor:
    """MiniLM's attention [L, H, n, n] on the first n−2 word pieces of EWT dev (+[CLS]/[SEP]);
    random softmax maps when the treebank is missing."""
    if not texts:
        g = torch.Generator().manual_seed(n)
        return torch.softmax(torch.randn(6, 12, n, n, generator=g) * 2, -1)
    from probe.models import load_model

    adapter = load_model("minilm")
    tok = adapter.tokenizer
    ids = tok(" ".join(texts[:200]), add_special_tokens=False)["input_ids"][: n - 2]
    ids = torch.tensor([[tok.cls_token_id, *ids, tok.sep_token_id]])
    model = adapter.model
    model.set_attn_implementation("eager")
    with torch.no_grad():
        out = model(input_ids=ids, output_attentions=True)
    return torch.stack([a[0] for a in out.attentions]).double()


def networkx_pairs(ahat: np.ndarray, pairs) -> tuple[float, np.ndarray]:
    """Seconds per pair (graph built once, not counted) and the values."""
    import networkx as nx

    L = ahat.shape[0]
    g = flow_graph(ahat)
    t = time.perf_counter()
    vals = np.array([nx.maximum_flow_value(g, (0, int(j)), (L, int(i))) for i, j in pairs])
    return (time.perf_counter() - t) / len(pairs), vals


def interleaved(fns: dict, repeats: int) -> dict:
    """Median seconds and last result of each function, run A B A B ..."""
    times = {k: [] for k in fns}
    results = {}
    for _ in range(repeats):
        for k, fn in fns.items():
            t = time.perf_counter()
            results[k] = fn()
            times[k].append(time.perf_counter() - t)
    return {k: (statistics.median(v), results[k]) for k, v in times.items()}


def bench_flow(repeats: int, workers: int, nx_budget_pairs: dict, scipy_rows: int, scipy_512_repeats: int = 3):
    texts = ewt_texts()
    cases = [("[CLS] row", 32), ("[CLS] row", 128), ("[CLS] row", 512), ("full matrix", 64), ("full matrix", 128)]
    nx_fit = {}
    rows_out = []
    for what, n in cases:
        attn = minilm_attention(n, texts)
        ahat = adjusted_attention(attn)
        rows = [0] if what == "[CLS] row" else list(range(n))
        # today's scipy path: a sample of output rows when the job is large, scaled by rows
        sample = rows if len(rows) <= scipy_rows else rows[:: max(1, len(rows) // scipy_rows)][:scipy_rows]
        res = interleaved(
            {
                "new": lambda: attention_flow(
                    attn, output_positions=rows, solver="dinic", workers=workers, max_tokens=10**6
                ).numpy(),
                "scipy": lambda: attention_flow(
                    attn, output_positions=sample, solver="scipy", workers=workers, max_tokens=10**6
                ).numpy(),
            },
            repeats if n < 512 else min(repeats, scipy_512_repeats),
        )
        t_new, new = res["new"]
        t_sp, sp = res["scipy"]
        t_sp *= len(rows) / len(sample)
        d_sp = float(np.abs(new[[rows.index(r) for r in sample]] - sp).max())
        # networkx: every pair of the n = 32 row, else a sample of pairs
        k_nx = nx_budget_pairs.get(n, 0)
        d_nx, t_nx_pair = float("nan"), float("nan")
        if k_nx:
            rng = np.random.default_rng(n)
            pairs = (
                [(0, j) for j in range(n)]
                if k_nx >= n and what == "[CLS] row"
                else [(int(rng.choice(rows)), int(j)) for j in rng.integers(0, n, k_nx)]
            )
            t_nx_pair, ref = networkx_pairs(ahat, pairs)
            got = np.array([new[rows.index(i), j] for i, j in pairs])
            d_nx = float(np.abs(got - ref).max())
            nx_fit.setdefault(n, t_nx_pair)
        rows_out.append((what, n, len(rows) * n, t_new, t_sp, len(sample) < len(rows), t_nx_pair, d_sp, d_nx))
        print(
            f"  done: {what} n={n}: new {t_new:.3f} s, scipy {t_sp:.2f} s, networkx {t_nx_pair:.3f} s/pair "
            f"({k_nx} pairs), max|Δ| nx {d_nx:.1e}, scipy {d_sp:.1e}; load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    ns = np.array(sorted(nx_fit))
    b, log_c = np.polyfit(np.log(ns), np.log([nx_fit[x] for x in ns]), 1) if len(ns) >= 2 else (np.nan, np.nan)
    print(
        f"networkx seconds per max-flow fitted as t = {np.exp(log_c):.2e}·n^{b:.2f} over n = "
        f"{', '.join(map(str, ns))} (timed); '~' marks extrapolated or scaled times"
    )
    print(
        f"{'flow':<12} {'n':>4} {'pairs':>6} {'new s':>8} {'scipy s':>10} {'networkx s':>12} "
        f"{'new/scipy':>10} {'new/nx':>9} {'max|Δ| nx':>10} {'max|Δ| scipy':>12}"
    )
    for what, n, pairs, t_new, t_sp, sp_scaled, t_pair, d_sp, d_nx in rows_out:
        timed_nx = not np.isnan(t_pair) and (pairs <= nx_budget_pairs.get(n, 0))
        t_nx = (t_pair if not np.isnan(t_pair) else np.exp(log_c) * n**b) * pairs
        nx_s = f"{'' if timed_nx else '~'}{t_nx:.1f}"
        sp_s = f"{'~' if sp_scaled else ''}{t_sp:.2f}"
        print(
            f"{what:<12} {n:>4} {pairs:>6} {t_new:>8.3f} {sp_s:>10} {nx_s:>12} {t_sp / t_new:>9.0f}x "
            f"{t_nx / t_new:>8.0f}x {d_nx:>10.1e} {d_sp:>12.1e}"
        )


def numpy_rollout_loop(examples):
    """Baseline: per example, head mean, residual, full chain of matrix products."""
    out = []
    for a in examples:
        att = a.numpy().mean(1)
        n = att.shape[-1]
        aug = att + np.eye(n)[None]
        aug = aug / aug.sum(-1, keepdims=True)
        joint = aug[0]
        for l in range(1, aug.shape[0]):
            joint = aug[l] @ joint
        out.append(joint[0])
    return out


def bench_rollout(n_sentences, repeats):
    if not EWT_DEV.exists():
        print(f"rollout: skipped, {EWT_DEV} is missing")
        return
    from probe.models import load_model
    from probe.runs.capture import capture

    texts = []
    for line in EWT_DEV.read_text(encoding="utf-8").splitlines():
        if line.startswith("# text = "):
            texts.append(line[len("# text = ") :])
    texts = [t for t in texts if t.strip()][:n_sentences]
    adapter = load_model("minilm")
    t = time.perf_counter()
    maps = capture(adapter, texts, batch_size=32, truncate=True)
    t_cap = time.perf_counter() - t
    attn = [m.attentions for m in maps]
    n_tok = sum(m.n_tokens for m in maps)
    t_ours, _, ours = timed(lambda: rollout_batch(attn, validate=False), repeats)
    t_val, _, _ = timed(lambda: rollout_batch(attn), max(1, repeats // 2))
    t_base, m_base, base = timed(lambda: numpy_rollout_loop(attn), max(1, repeats // 2))
    err = max(float(np.abs(o[0].numpy() - b).max()) for o, b in zip(ours, base))
    print(
        f"rollout (torch threads: {torch.get_num_threads()}) of {len(maps)} EWT sentences ({n_tok} tokens; capture took {t_cap:.1f} s): "
        f"ours {t_ours:.3f} s ({t_val:.3f} s with input validation; torch memory is not "
        f"traced, see peak RSS), numpy loop {t_base:.3f} s (peak {m_base:.0f} MiB) -> "
        f"{t_base / t_ours:.1f}x faster; max |diff| {err:.1e}"
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5, help="interleaved runs per timing (median)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--scipy-rows", type=int, default=16, help="rows timed for scipy's full matrices")
    p.add_argument("--nx-pairs", type=int, default=8, help="networkx pairs timed at n = 64 (half at 128)")
    p.add_argument("--long-repeats", type=int, default=3, help="interleaved runs at n = 512 (scipy takes ~30 s)")
    p.add_argument("--no-rollout", action="store_true")
    p.add_argument("--sentences", type=int, default=1000)
    args = p.parse_args()
    # small per-example matmuls: torch's intra-op threads only add synchronisation
    # (and on a shared 2-core machine they spin against other jobs); both sides 1 thread
    torch.set_num_threads(1)
    load0 = os.getloadavg()[0]
    print(f"{os.cpu_count()} cores, flow workers {args.workers}; 1-minute load average {load0:.1f} at start")
    nx_pairs = {32: 32, 64: args.nx_pairs, 128: max(1, args.nx_pairs // 2)}
    bench_flow(args.repeats, args.workers, nx_pairs, args.scipy_rows, args.long_repeats)
    if not args.no_rollout:
        bench_rollout(args.sentences, args.repeats)
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"process peak RSS {peak_rss:.0f} MiB; 1-minute load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
