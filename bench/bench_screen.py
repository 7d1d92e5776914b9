"""The head screen (attribution patching) against the exact removal sweep, side by side in
one run: per model and mode, Spearman's ρ between every head's screened estimate and its
exact mean harm, the overlap of their top-5 heads, and the time of each.

    python bench/bench_screen.py                                   # bundled sample + zoo:induction
    python bench/bench_screen.py --conllu ../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu --limit 128

MiniLM runs its default objective (the similarity structure of the corpus, corpus-level:
the screen is the readout sketch, ``‖J Δz‖²`` of the normalised sentence embedding, with
``--projections`` random projections); zoo:induction its own loss, screened both by
first-order AtP and by the output sketch (its log-probabilities).
The exact side is :func:`probe.analyses.claims.removal.removal_sweep` in the same modes.
Prints, never asserts (tests/test_screen.py asserts).
"""

from __future__ import annotations

import argparse
import time

MODES = ("mean", "zero", "resample")


def compare(name: str, adapter, corpus, objective, projections: int, batch_size: int, kinds=("auto",)) -> list:
    import numpy as np
    from scipy.stats import spearmanr

    from probe.analyses.claims.removal import removal_sweep
    from probe.analyses.necessity.screen import screen_heads

    screens = []
    for kind in kinds:
        t = time.perf_counter()
        screen = screen_heads(
            adapter, corpus, objective, modes=MODES, kind=kind, n_projections=projections, batch_size=batch_size
        )
        screens.append((screen, time.perf_counter() - t))
    t = time.perf_counter()
    sweep = removal_sweep(adapter, corpus, objective, modes=MODES, batch_size=batch_size)
    t_exact = time.perf_counter() - t
    rows = []
    for screen, t_screen in screens:
        for mode in MODES:
            est, exact = screen.mean(mode), sweep.harm[mode].mean(1)
            rho = spearmanr(est, exact).statistic
            top = len(set(np.argsort(-est)[:5]) & set(np.argsort(-exact)[:5]))
            rows.append((name, len(corpus), sweep.objective, screen.kind, mode, rho, top, t_screen, t_exact))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--conllu", default=None, help="a treebank for MiniLM (default: the bundled sample)")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--decoder", default="zoo:induction")
    ap.add_argument("--decoder-limit", type=int, default=64)
    ap.add_argument("--projections", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args()
    import torch

    from probe.app.report.bundled import sample_corpus
    from probe.inputs.corpus import load_corpus
    from probe.models import load_model

    torch.set_num_threads(max(1, torch.get_num_threads()))
    corpus = load_corpus(conllu=args.conllu, limit=args.limit) if args.conllu else sample_corpus(args.limit)
    rows = compare("minilm", load_model("minilm"), corpus, "auto", args.projections, args.batch_size)
    dec = load_corpus(model=args.decoder, limit=args.decoder_limit)
    rows += compare(
        args.decoder,
        load_model(args.decoder),
        dec,
        "auto",
        args.projections,
        args.batch_size,
        ("first-order", "output-sketch"),
    )
    print(f"torch threads: {torch.get_num_threads()}; projections: {args.projections}; batch size: {args.batch_size}\n")
    print(
        "| model | n | objective | screen | mode | Spearman ρ | top-5 overlap | screen s (all modes) | exact s (all modes) | ratio |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, n, obj, kind, mode, rho, top, ts, te in rows:
        print(
            f"| {name} | {n} | {obj} | {kind} | {mode} | {rho:.2f} | {top}/5 | {ts:.1f} | {te:.1f} | {te / ts:.1f}× |"
        )


if __name__ == "__main__":
    main()
