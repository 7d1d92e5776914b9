"""The sequential test on a live model against the exhaustive exact sweep, side by side:
per head, the verdict and the sentences it took before it was decided, and the time of
each.

    python bench/bench_sequential.py                  # zoo:induction, 256 examples, mean-ablation

The floor is the claims' practical floor for the objective (0.01 nats of loss); harms are
clipped to ``(-2, 20) × floor`` (a-priori bounds: the test is of the clipped mean). The
exhaustive verdict is "mean exact harm over all examples ≥ floor". Prints, never asserts
(tests/test_sequential.py asserts the error rates on simulated heads).
"""

from __future__ import annotations

import argparse
import time
from probe.analyses.common.objective import resolve_objective


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="zoo:induction")
    ap.add_argument("--limit", type=int, default=256)
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--q", type=float, default=0.05)
    ap.add_argument("--floor", type=float, default=0.01)
    args = ap.parse_args()
    from probe.analyses.claims.removal import removal_sweep
    from probe.analyses.necessity.sequential import sequential_necessity
    from probe.inputs.corpus import load_corpus
    from probe.models import load_model

    adapter = load_model(args.model)
    corpus = load_corpus(model=args.model, limit=args.limit)
    heads = [(layer, h) for layer in range(adapter.n_layers) for h in range(adapter.n_heads)]
    bounds = (-2 * args.floor, 20 * args.floor)
    objective = resolve_objective("auto", adapter, corpus)[0]
    t = time.perf_counter()
    seq = sequential_necessity(
        adapter, corpus, heads, floor=args.floor, bounds=bounds, objective=objective, q=args.q, block=args.block
    )
    t_seq = time.perf_counter() - t
    t = time.perf_counter()
    sweep = removal_sweep(adapter, corpus, objective, heads, modes=("mean",))
    t_exact = time.perf_counter() - t
    exact = sweep.harm["mean"].mean(1)
    print(
        f"{args.model}, {len(corpus)} examples, objective {sweep.objective}, floor {args.floor}, bounds {bounds}, "
        f"q {args.q}, blocks of {args.block}\n"
    )
    print("| head | exact mean harm (all) | exhaustive verdict | sequential verdict | examples used |")
    print("| --- | --- | --- | --- | --- |")
    agree = 0
    for j, (layer, h) in enumerate(heads):
        ex = "necessary" if exact[j] >= args.floor else "not necessary"
        agree += ex == seq.decision[j]
        print(f"| {layer}.{h} | {exact[j]:.4f} | {ex} | {seq.decision[j]} | {seq.n_used[j]} |")
    s = seq.summary()
    print(
        f"\nverdicts agree on {agree}/{len(heads)} heads; examples removed: {s['examples_used']} of "
        f"{s['examples_exhaustive']} ({s['examples_used'] / s['examples_exhaustive']:.0%}); "
        f"sequential {t_seq:.1f} s, exhaustive {t_exact:.1f} s"
    )


if __name__ == "__main__":
    main()
