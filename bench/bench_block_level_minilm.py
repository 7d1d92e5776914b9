"""The sequential path's block test at the bar on MiniLM's similarity structure: is it at its level?

    python bench/bench_block_level_minilm.py                  # 512 EWT dev sentences, 200 sequences, 10 heads
    python bench/bench_block_level_minilm.py --limit 1024 --rounds 400 --heads 20

The report's default path for MiniLM (the sequential path, 72 heads) decides each head's
necessity on the similarity structure, a corpus-level objective, one random block of 64
sentences at a time: each block's size-corrected harm and its jackknife variance feed the
normal-mixture e-process (:class:`probe.analyses.necessity.sequential.MixtureTest`). The
screened path's per-example block test was not at its level on SmolLM2's skewed heads
(``bench/bench_block_size.py``); this measures the corpus-level one on the model it serves.

Every head is mean-ablated on the first ``--limit`` sentences once (their clean and perturbed
embeddings); the ``--heads`` heads whose harm on 10 random blocks lies nearest the floor (0.02)
are kept. For each, ``--rounds`` random orders of the sentences are cut into blocks of 64, each
block's harm and variance computed as the test computes them
(:meth:`probe.analyses.common.similarity.SimilarityStructure.block_harm`), the block harms
shifted so their mean is the floor (the head necessary, just), and fed to the test: the share
of orders in which it stops the head as "not necessary" (``E' ≥ 1/q``) must be at most
``q = 0.05``. Also printed: the sentences' row harms' skewness, the spread of the block harms
against the mean jackknife standard deviation, and the share of block harms more than two
jackknife deviations under their mean (0.023 for a Gaussian). Prints, never asserts.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from bench_block_size import decide  # the block test fed block by block, as the report's


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--conllu", default="../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu")
    ap.add_argument("--limit", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--heads", type=int, default=10)
    ap.add_argument("--q", type=float, default=0.05)
    args = ap.parse_args()
    import torch

    from probe.analyses.claims import thresholds as T
    from probe.analyses.claims.removal import RemovalPlan, placed_readouts, run_removal_batches, sweep_batches
    from probe.analyses.common.objective import resolve_objective
    from probe.analyses.necessity.ablation import position_kind_means
    from probe.inputs.corpus import load_corpus
    from probe.models import load_model

    adapter = load_model("minilm")
    corpus = load_corpus(conllu=args.conllu, limit=args.limit)
    obj, _ = resolve_objective("auto", adapter, corpus)
    bar, n, block = T.min_effect(obj.name), len(corpus), 64
    units = [((layer, h),) for layer in range(adapter.n_layers) for h in range(adapter.n_heads)]
    t = time.perf_counter()
    means = position_kind_means(adapter, corpus, obj, 8, adapter.default_stack)
    plan = RemovalPlan(corpus, obj, tuple(units), ("mean",), means, 0, adapter.default_stack, 8)
    part = run_removal_batches(adapter, plan, sweep_batches(adapter, corpus, 8))
    clean_t, pert_t = placed_readouts([part], n, len(units))
    assert clean_t is not None
    clean, pert = clean_t.double().numpy(), pert_t["mean"].double().numpy()
    print(
        f"minilm, {n} sentences, objective {obj.name}, floor {bar}; every head mean-ablated "
        f"({time.perf_counter() - t:.0f} s, torch threads {torch.get_num_threads()}); {args.rounds} orders per head, "
        f"blocks of {block}, level {args.q}"
    )
    rng = np.random.default_rng(0)
    first = np.array(
        [
            np.mean([obj.block_harm(clean[i], pert[j][i]).estimate for i in (rng.choice(n, block, replace=False) for _ in range(10))])
            for j in range(len(units))
        ]
    )  # fmt: skip
    pick = np.argsort(np.abs(first - bar))[: args.heads]
    blocks = n // block
    print(
        "| head | mean block harm | sd of the block harms | mean jackknife sd | row skewness | block harms < −2 jackknife sd | "
        "stopped 'not necessary' at the bar |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    rates = []
    for j in pick:
        harm, var, rows = np.zeros((args.rounds, blocks)), np.zeros((args.rounds, blocks)), []
        for r in range(args.rounds):
            order = rng.permutation(n)
            for b in range(blocks):
                idx = order[b * block : (b + 1) * block]
                got = obj.block_harm(clean[idx], pert[j][idx])
                harm[r, b], var[r, b] = got.estimate, got.variance
                rows.append(got.rows)
        every = np.concatenate(rows)
        skew = float(((every - every.mean()) ** 3).mean() / every.std() ** 3)
        _, kind = decide(harm - harm.mean() + bar, var, [block] * blocks, bar, args.q)  # at the bar
        down = kind == -1
        z = (harm - harm.mean()) / np.sqrt(var)
        rates.append(float(down.mean()))
        ((layer, head),) = units[j]
        print(
            f"| L{layer}H{head} | {harm.mean():.4f} | {harm.std():.4f} | {np.sqrt(var).mean():.4f} | {skew:+.1f} | "
            f"{np.mean(z < -2):.3f} | {down.mean():.3f} |",
            flush=True,
        )
    print(f"stopped 'not necessary' at the bar: largest {max(rates):.3f}, mean {np.mean(rates):.3f} (level {args.q})")


if __name__ == "__main__":
    main()
