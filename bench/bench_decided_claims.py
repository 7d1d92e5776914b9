"""The causal claims decided head by head (the sequential path) against the exhaustive exact
path, side by side in one run (issue 44): the time of each, the removals each ran, the
verdicts' agreement per claim (every disagreement listed with both harms), and per head the
examples its decision took.

    python bench/bench_decided_claims.py                       # MiniLM, the bundled sample (24)
    python bench/bench_decided_claims.py --conllu ../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu --limit 512
    python bench/bench_decided_claims.py --conllu ../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu   # all 2,001
    python bench/bench_decided_claims.py --model zoo:induction --limit 256                               # a decoder's loss

Both sides use the claims' default null model (:data:`probe.analyses.claims.null_model.DEFAULT_NULL`)
and the model's default objective (MiniLM: the similarity structure). The exhaustive side is
what ``probe claims --causal exhaustive`` runs: :func:`~probe.analyses.claims.removal.removal_sweep`
of every head in mean and uniform modes on the model and on the null model, then
:func:`~probe.analyses.claims.necessity.necessity_claims` and
:func:`~probe.analyses.claims.necessity.weights_claims`. The sequential side is
:func:`~probe.analyses.claims.decided.decided_claims` (beside modes off, as the exhaustive
side runs none). ``--decided-only`` skips the exhaustive side. Peak memory is the process's
maximum resident set. Prints, never asserts (tests/test_block_sequential.py and
tests/test_decided_claims.py assert).
"""

from __future__ import annotations

import argparse
import resource
import time


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def exhaustive(adapter, corpus, obj, heads, nadapter, batch_size: int):
    from probe.analyses.claims.necessity import NullSweep, necessity_claims, weights_claims
    from probe.analyses.claims.removal import removal_sweep

    t = time.perf_counter()
    modes = ("mean", "uniform")
    sweep = removal_sweep(adapter, corpus, obj, heads, modes=modes, batch_size=batch_size)
    null = removal_sweep(nadapter, corpus, obj, heads, modes=modes, batch_size=batch_size)
    ns = NullSweep(null, nadapter.card["null_source"])
    got = {"mean": necessity_claims(sweep, null=ns), "uniform": weights_claims(sweep, null=ns)}
    return got, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--conllu", default=None)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--decided-only", action="store_true")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(2)
    from probe.analyses.claims.decided import decided_claims
    from probe.analyses.claims.null_model import DEFAULT_NULL, null_adapter
    from probe.analyses.common.objective import resolve_objective
    from probe.app.report.bundled import sample_corpus
    from probe.inputs.corpus import fit_to_model, load_corpus
    from probe.models import load_model

    adapter = load_model(args.model)
    if args.conllu:
        corpus = fit_to_model(load_corpus(conllu=args.conllu, limit=args.limit), adapter)
    elif args.model == "minilm":
        corpus = sample_corpus(args.limit or 24)
    else:
        corpus = fit_to_model(load_corpus(model=args.model, limit=args.limit), adapter)
    obj, _ = resolve_objective("auto", adapter, corpus)
    heads = [(layer, h) for layer in range(adapter.n_layers) for h in range(adapter.n_heads)]
    nadapter = null_adapter(adapter, 0, DEFAULT_NULL)
    n = len(corpus)
    print(f"{args.model}: {n} examples, {len(heads)} heads, objective {obj.describe()}, null {DEFAULT_NULL}")

    t = time.perf_counter()
    got = decided_claims(
        adapter, corpus, obj, heads, null_adapter=nadapter, null_source=nadapter.card["null_source"],
        batch_size=args.batch_size, beside=(),
    )  # fmt: skip
    t_decided = time.perf_counter() - t
    info = got.info
    print(
        f"sequential: {t_decided:.1f} s, {info['removals']} + {info['null_removals']} (null) head × example removals "
        f"of the exhaustive {info['exhaustive_removals']} + {info['exhaustive_removals']} (null); peak {peak_gib():.2f} GiB"
    )
    print(got.note())
    if args.decided_only:
        return
    exact, t_exact = exhaustive(adapter, corpus, obj, heads, nadapter, args.batch_size)
    print(f"exhaustive: {t_exact:.1f} s; peak {peak_gib():.2f} GiB; ratio {t_exact / t_decided:.2f}×")
    print()
    print(
        "| claim | heads | agree | holds (exhaustive) | holds (sequential) | examples per head (min / median / max) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    disagreements = []
    for mode, kind, decided in (("mean", "necessity", got.necessity), ("uniform", "weights", got.weights)):
        agree = sum(decided[h].holds == exact[mode][h].holds for h in heads)
        used = sorted(decided[h].count for h in heads)
        print(
            f"| {kind} | {len(heads)} | {agree} | {sum(exact[mode][h].holds for h in heads)} | "
            f"{sum(decided[h].holds for h in heads)} | {used[0]} / {used[len(used) // 2]} / {used[-1]} |"
        )
        for h in heads:
            if decided[h].holds != exact[mode][h].holds:
                disagreements.append(
                    f"{kind} L{h[0]}H{h[1]}: exhaustive {exact[mode][h].status} (harm {exact[mode][h].effect:.4f} "
                    f"on {n}), sequential {decided[h].status} (harm {decided[h].effect:.4f} on {decided[h].count}; "
                    f"{decided[h].extra.get('decision', '')})"
                )
    print()
    print("disagreements:" if disagreements else "disagreements: none")
    for d in disagreements:
        print("  " + d)


if __name__ == "__main__":
    main()
