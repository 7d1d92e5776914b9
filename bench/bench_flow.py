"""Benchmark: attention flow and rollout, ours against the baselines, side by side.

    python bench/bench_flow.py            # all three measurements
    python bench/bench_flow.py --quick    # fewer repeats, 200 sentences

1. [CLS]-row flow, n = 32, L = 6, 12 heads: fast exact path vs the networkx reference
   (one ``maximum_flow_value`` per pair on the same graph).
2. Full flow matrix, n = 64, L = 6 on all cores; the networkx time is extrapolated from a
   timed sample of pairs (the whole matrix would take tens of minutes).
3. Rollout of EWT dev sentences captured with the bundled model: batched torch rollout
   of the [CLS] rows vs a per-example numpy loop of full matrix products (the
   samiraabnar/attention_flow approach).

Prints medians of several runs, ratios, and peak memory (traced Python/numpy
allocations; process peak RSS).
"""

from __future__ import annotations

import argparse
import os
import resource
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


def random_attention(L, H, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(L, H, n, n, generator=g) * 2, -1)


def networkx_rows(attn, rows):
    import networkx as nx

    ahat = adjusted_attention(attn)
    L, n, _ = ahat.shape
    g = flow_graph(ahat)
    return np.array([[nx.maximum_flow_value(g, (0, j), (L, i)) for j in range(n)] for i in rows])


def bench_cls_row(repeats):
    a = random_attention(6, 12, 32)
    t_ours, m_ours, ours = timed(lambda: attention_flow(a, output_positions=[0], workers=1), repeats)
    t_nx, m_nx, ref = timed(lambda: networkx_rows(a, [0]), 3)
    err = float(np.abs(ours.numpy() - ref).max())
    print(f"[CLS]-row flow n=32 L=6: ours {t_ours * 1e3:.1f} ms (peak {m_ours:.1f} MiB), "
          f"networkx {t_nx * 1e3:.0f} ms (peak {m_nx:.1f} MiB) -> {t_nx / t_ours:.0f}x faster; "
          f"max |diff| {err:.1e}")


def bench_full(repeats, sample_pairs=16):
    import networkx as nx

    a = random_attention(6, 12, 64, seed=1)
    workers = os.cpu_count() or 1
    t_ours, m_ours, _ = timed(lambda: attention_flow(a, workers=workers), repeats)
    ahat = adjusted_attention(a)
    g = flow_graph(ahat)
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, 64, size=(sample_pairs, 2))
    t = time.perf_counter()
    for j, i in pairs:
        nx.maximum_flow_value(g, (0, int(j)), (6, int(i)))
    t_nx = (time.perf_counter() - t) / sample_pairs * 64 * 64
    print(f"full flow matrix n=64 L=6 on {workers} cores: ours {t_ours:.1f} s "
          f"(peak {m_ours:.1f} MiB traced in the parent), networkx ~{t_nx:.0f} s "
          f"(extrapolated from {sample_pairs} pairs) -> ~{t_nx / t_ours:.0f}x faster")


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
    from probe.capture import capture

    texts = []
    for line in EWT_DEV.read_text(encoding="utf-8").splitlines():
        if line.startswith("# text = "):
            texts.append(line[len("# text = "):])
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
    print(f"rollout (torch threads: {torch.get_num_threads()}) of {len(maps)} EWT sentences ({n_tok} tokens; capture took {t_cap:.1f} s): "
          f"ours {t_ours:.3f} s ({t_val:.3f} s with input validation; torch memory is not "
          f"traced, see peak RSS), numpy loop {t_base:.3f} s (peak {m_base:.0f} MiB) -> "
          f"{t_base / t_ours:.1f}x faster; max |diff| {err:.1e}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--sentences", type=int, default=1000)
    args = p.parse_args()
    repeats = 3 if args.quick else 7
    # small per-example matmuls: torch's intra-op threads only add synchronisation
    # (and on a shared 2-core machine they spin against other jobs); both sides 1 thread
    torch.set_num_threads(1)
    bench_cls_row(repeats)
    bench_full(1 if args.quick else 2)
    bench_rollout(200 if args.quick else args.sentences, repeats)
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"process peak RSS {peak_rss:.0f} MiB")


if __name__ == "__main__":
    main()
