"""Mean-ablation's head means over a random sample of the corpus against the whole corpus's
(issue 44): the time of each means pass, how far the means move, and how far every head's
mean-ablation harm moves on the first 128 sentences (MiniLM, the similarity structure).

    python bench/bench_means_sample.py --conllu ../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu

``position_kind_means`` averages over a seeded random :data:`MEAN_SAMPLE` (512) of the
sentences where the corpus has more; this prints that against ``sample=None`` (every
sentence) and a sample of 256. Prints, never asserts.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conllu", required=True)
    ap.add_argument("--harm-on", type=int, default=128, help="sentences the harms are compared on")
    args = ap.parse_args()

    import numpy as np
    import torch

    torch.set_num_threads(2)
    from probe.analyses.claims.removal import removal_sweep
    from probe.analyses.common.objective import resolve_objective
    from probe.analyses.necessity.ablation import position_kind_means
    from probe.inputs.corpus import fit_to_model, load_corpus
    from probe.models import load_model

    adapter = load_model("minilm")
    corpus = fit_to_model(load_corpus(conllu=args.conllu), adapter)
    obj, _ = resolve_objective("auto", adapter, corpus)
    stack = adapter.default_stack
    t = time.perf_counter()
    full = position_kind_means(adapter, corpus, obj, 8, stack, sample=None)
    print(f"every sentence ({len(corpus)}): {time.perf_counter() - t:.1f} s")
    first = corpus.subset(list(range(min(args.harm_on, len(corpus)))))
    heads = [(layer, h) for layer in range(adapter.n_layers) for h in range(adapter.n_heads)]
    base = removal_sweep(adapter, first, obj, units=heads, modes=("mean",), means=full).harm["mean"].mean(1)
    for n in (256, 512):
        t = time.perf_counter()
        m = position_kind_means(adapter, corpus, obj, 8, stack, sample=n)
        took = time.perf_counter() - t
        rel = (m - full).norm(dim=-1) / full.norm(dim=-1)
        harm = removal_sweep(adapter, first, obj, units=heads, modes=("mean",), means=m).harm["mean"].mean(1)
        d = np.abs(harm - base)
        print(
            f"sample {n}: {took:.1f} s; means' relative change per head: median {rel.median():.3f}, max {rel.max():.3f}; "
            f"harm on the first {len(first)}: max |Δ| {d.max():.5f}, max relative {(d / np.abs(base)).max():.3f}, "
            f"Pearson r {np.corrcoef(harm, base)[0, 1]:.5f}"
        )


if __name__ == "__main__":
    main()
