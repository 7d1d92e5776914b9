"""Benchmark: the syntax analyses, ours vs the straightforward baseline, side by side.

1. Relation accuracy over a corpus of word graphs: a per-(layer, head) Python loop with a
   per-word argmax (the shape of Clark et al.'s notebook code) vs
   ``probe.analyses.structure.syntax.relation_accuracy`` (one argmax per sentence for all heads, one
   grouped sum for the corpus). Same counts are checked.
2. Trees: ``networkx.maximum_spanning_arborescence`` vs ``probe.analyses.structure.trees.max_arborescence``
   on the same attention maps (same total score checked).

Word graphs come from real EWT dev gold trees with random (Dirichlet) attention, so no
capture is needed. Prints medians of several runs, ratios and peak Python memory.

    python bench/bench_syntax.py [--sentences 400] [--repeats 3]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from probe.analyses.structure.syntax import relation_accuracy
from probe.analyses.structure.trees import max_arborescence
from probe.analyses.structure.word_graph import WordGraph, gold_heads
from probe.inputs.readers import read_conllu
from timing import timed

EWT = Path(__file__).resolve().parents[2] / "shared/data/ud-english-ewt/en_ewt-ud-dev.conllu"


def graphs(n, layers=6, heads=12, seed=0):
    torch.manual_seed(seed)  # Dirichlet.sample takes no generator: seed the global one
    out = []
    for i, s in enumerate(read_conllu(EWT, limit=n)):
        w = len(s)
        a = torch.distributions.Dirichlet(torch.ones(w + 2)).sample((layers, heads, w))
        out.append(
            WordGraph(
                attention=a[..., :w],
                to_special=a[..., w:].sum(-1),
                from_special=torch.zeros(layers, heads, w),
                heads=gold_heads(s),
                deprels=s.deprels,
                layers=tuple(range(layers)),
                index=i,
            )
        )
    return out


def naive_relation_counts(gs):
    counts, hits = {}, {}
    L, H = gs[0].attention.shape[:2]
    for layer in range(L):
        for head in range(H):
            for g in gs:
                a = g.attention[layer, head].numpy().copy()
                np.fill_diagonal(a, -1)
                for i, (h, r) in enumerate(zip(g.heads.tolist(), g.deprels)):
                    if h < 0:
                        continue
                    if layer == 0 and head == 0:
                        counts[r] = counts.get(r, 0) + 1
                    hits[(r, layer, head)] = hits.get((r, layer, head), 0) + int(a[i].argmax() == h)
    return counts, hits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sentences", type=int, default=400)
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    gs = graphs(args.sentences)
    tn, mn, (counts, hits) = timed(lambda: naive_relation_counts(gs), args.repeats)
    to, mo, acc = timed(lambda: relation_accuracy(gs), args.repeats)
    r = acc.relations.index("det")
    assert acc.counts[r] == counts["det"] and acc.hits[0, r, 2, 5] == hits[("det", 2, 5)]
    print(
        f"relation accuracy, {len(gs)} sentences × 72 heads: naive {tn:.3f}s ({mn:.1f} MiB), "
        f"ours {to:.3f}s ({mo:.1f} MiB), speed-up ×{tn / to:.1f}"
    )

    import networkx as nx

    maps = [np.pad(g.attention[0, 0].numpy(), ((1, 0), (1, 0)), constant_values=-1.0) for g in gs[: args.trees]]

    def nx_trees():
        out = []
        for s in maps:
            n = len(s)
            G = nx.DiGraph()
            G.add_weighted_edges_from((h, d, s[d, h]) for d in range(1, n) for h in range(n) if h != d)
            out.append(sum(w for _, _, w in nx.maximum_spanning_arborescence(G).edges(data="weight")))
        return out

    def our_trees():
        return [sum(s[d, h[d]] for d in range(1, len(s))) for s in maps for h in [max_arborescence(s)]]

    tn, mn, ref = timed(nx_trees, args.repeats)
    to, mo, ours = timed(our_trees, args.repeats)
    assert np.allclose(ref, ours)
    print(
        f"trees, {len(maps)} maps: networkx {tn:.3f}s ({mn:.1f} MiB), ours {to:.3f}s "
        f"({mo:.1f} MiB), speed-up ×{tn / to:.1f}"
    )


if __name__ == "__main__":
    main()
