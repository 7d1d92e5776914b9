"""The necessity claims by the screened path against the exhaustive exact path, side by side
in one run (issue 44): time of each, the verdicts' agreement (every disagreement listed),
the audit's miss rate, and Spearman's ρ of the screened estimates against the exact harms
per mode.

    python bench/bench_screened_claims.py                       # MiniLM, the bundled sample (24)
    python bench/bench_screened_claims.py --conllu ../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu --limit 128
    python bench/bench_screened_claims.py --conllu ... --screened-only            # every sentence, screened only
    python bench/bench_screened_claims.py --model zoo:induction --limit 256       # a decoder's loss: blocks, stops

Both paths use the claims' default null model (:data:`probe.analyses.claims.null_model.DEFAULT_NULL`)
and the model's default objective (MiniLM: the similarity structure, corpus-level, screened
by the readout sketch). The exhaustive side is what ``probe claims`` runs for necessity:
:func:`~probe.analyses.claims.removal.removal_sweep` of every head in mean mode on the model
and on the null model, then :func:`~probe.analyses.claims.necessity.necessity_claims`. The
screened side is :func:`~probe.analyses.claims.screened.screened_necessity`. ρ per mode:
:func:`~probe.analyses.necessity.screen.screen_heads` in that mode against the exact sweep's
mean harm (``--rho-modes``; mean: the screened path's own estimates; the zero and resample sweeps
cost an exhaustive sweep each).
Peak memory is the process's maximum resident set (``resource.getrusage``). Prints, never
asserts (tests/test_screen.py asserts).
"""

from __future__ import annotations

import argparse
import resource
import time


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def screened(adapter, corpus, obj, heads, nadapter, batch_size: int):
    from probe.analyses.claims.screened import screened_necessity

    t = time.perf_counter()
    got = screened_necessity(adapter, corpus, obj, heads, null_adapter=nadapter, batch_size=batch_size)
    return got, time.perf_counter() - t


def exhaustive(adapter, corpus, obj, heads, nadapter, batch_size: int):
    from probe.analyses.claims.necessity import NullSweep, necessity_claims
    from probe.analyses.claims.removal import removal_sweep

    t = time.perf_counter()
    sweep = removal_sweep(adapter, corpus, obj, heads, modes=("mean",), batch_size=batch_size)
    null_sweep = removal_sweep(nadapter, corpus, obj, heads, modes=("mean",), batch_size=batch_size)
    claims = necessity_claims(sweep, null=NullSweep(null_sweep, nadapter.card["null_source"]))
    return claims, sweep, time.perf_counter() - t


def rho(adapter, corpus, obj, sweep, modes, batch_size: int, screened_mean=None) -> list:
    """``[(mode, ρ, screen s, exact s)]``: the screen's mean estimate against the exact mean harm
    (``mean``: the screened path's own estimates, ``screened_mean``, when given)."""
    from scipy.stats import spearmanr

    from probe.analyses.claims.removal import removal_sweep
    from probe.analyses.necessity.screen import screen_heads

    rows = []
    for mode in modes:
        t = time.perf_counter()
        if mode == "mean" and screened_mean is not None:
            est, t_screen = screened_mean, float("nan")
        else:
            est = screen_heads(adapter, corpus, obj, modes=(mode,), batch_size=batch_size).mean(mode)
            t_screen = time.perf_counter() - t
        t = time.perf_counter()
        exact = (
            sweep.harm["mean"]
            if mode == "mean"
            else removal_sweep(adapter, corpus, obj, modes=(mode,), batch_size=batch_size).harm[mode]
        )
        t_exact = time.perf_counter() - t if mode != "mean" else float("nan")
        rows.append((mode, spearmanr(est, exact.mean(1)).statistic, t_screen, t_exact))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--conllu", default=None, help="a treebank (default: the bundled sample)")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--rho-modes", default="mean,zero,resample", help="modes for ρ ('' for none)")
    ap.add_argument("--screened-only", action="store_true", help="the screened path alone (time, peak memory)")
    args = ap.parse_args()
    import torch

    from probe.analyses.claims.null_model import null_model_for
    from probe.analyses.common.objective import resolve_objective
    from probe.app.report.bundled import sample_corpus
    from probe.inputs.corpus import load_corpus
    from probe.models import load_model

    adapter = load_model(args.model)
    if args.conllu:
        corpus = load_corpus(conllu=args.conllu, limit=args.limit)
    elif args.model.startswith("zoo:"):  # its task's examples (a per-example loss: the sequential test)
        corpus = load_corpus(model=args.model, limit=args.limit)
    else:
        corpus = sample_corpus(args.limit)
    obj, why = resolve_objective("auto", adapter, corpus)
    heads = [(layer, h) for layer in range(adapter.n_layers) for h in range(adapter.n_heads)]
    nadapter = null_model_for(adapter, None, 0)
    print(
        f"{args.model}, {len(corpus)} examples, objective {obj.name} ({why}), null: {nadapter.card['null_source']}; "
        f"torch threads {torch.get_num_threads()}, batch size {args.batch_size}"
    )
    got, t_s = screened(adapter, corpus, obj, heads, nadapter, args.batch_size)
    i = got.info
    print(
        f"screened: {t_s:.1f} s, peak RSS {peak_gib():.2f} GiB; {i['screen']} screen on {i['examples_screened']} "
        f"examples; confirmed {i['confirmed']}, audited {i['audited']}, screened out {i['screened_out']}; "
        f"exact removals {i['exact_removals']} of {i['exhaustive_removals']}; null heads removed "
        f"{(i['null'] or {}).get('heads_removed')}; audit misses {i['audit_misses']} of {i['audited']} "
        f"(miss rate {i['miss_rate']}, upper bound {i['miss_rate_upper']:.3f} at {i['confidence']:.0%}); "
        f"necessary {sum(c.holds for c in got.claims.values())}"
    )
    if args.screened_only:
        return
    claims, sweep, t_e = exhaustive(adapter, corpus, obj, heads, nadapter, args.batch_size)
    print(f"exhaustive: {t_e:.1f} s; necessary {sum(c.holds for c in claims.values())}")
    harm = dict(zip(heads, sweep.harm["mean"].mean(1)))
    role = dict(zip(zip(got.table["layer"], got.table["head"]), got.table["role"]))
    differ = [h for h in heads if claims[h].holds != got.claims[h].holds]
    print(f"verdicts agree on {len(heads) - len(differ)} of {len(heads)} heads ({1 - len(differ) / len(heads):.1%})")
    for h in differ:
        print(
            f"  L{h[0]}H{h[1]}: exhaustive {claims[h].status} (mean harm {harm[h]:.4f}, p {claims[h].extra['p']:.3g}, "
            f"bar {claims[h].extra.get('bar', float('nan')):.4f}); screened {got.claims[h].status} ({role[h]})"
        )
    missed = [h for h in heads if claims[h].holds and role[h] == "screened out"]
    print(f"exhaustively necessary heads the screen ruled out (never removed): {len(missed)}")
    modes = [m for m in args.rho_modes.split(",") if m]
    if modes:
        print("| mode | Spearman ρ (screen vs exact mean harm) | screen s | exact s |\n| --- | --- | --- | --- |")
        screened_mean = got.table.set_index(["layer", "head"]).loc[heads, "screened"].to_numpy()
        for mode, r, ts, te in rho(adapter, corpus, obj, sweep, modes, args.batch_size, screened_mean):
            print(f"| {mode} | {r:.2f} | {ts:.1f} | {te:.1f} |")
    print(f"peak RSS {peak_gib():.2f} GiB")


if __name__ == "__main__":
    main()
