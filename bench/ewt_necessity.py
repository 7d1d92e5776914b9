"""Do the heads whose removal matters most still hold necessity? The bundled MiniLM on the
first N sentences of EWT dev: an exhaustive removal sweep computed independently of the
toolkit (every one of the 72 heads mean-ablated with plain transformers forward pre-hooks,
the similarity structure under mean pooling: ``tests/test_objective.py``'s
``_independent_similarity_harm``) ranks the heads; beside each, its necessity claim as the
report computes it (:func:`probe.analyses.claims.necessity.necessity_claims` on the
toolkit's removal sweep, calibrated on each null model of
:mod:`probe.analyses.claims.null_model`).

    python bench/ewt_necessity.py [--limit 128] [--top 8] [--nulls reinit permute]

The default N is the report's model-run cap (its claims run on the first 128 sentences).
Prints Markdown; never asserts.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EWT_DEV = ROOT.parent / "shared" / "data" / "ud-english-ewt" / "en_ewt-ud-dev.conllu"


def main() -> None:
    import numpy as np
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conllu", default=str(EWT_DEV))
    ap.add_argument("--limit", type=int, default=128, help="first N sentences (default: the report's cap, 128)")
    ap.add_argument("--top", type=int, default=8, help="heads shown, by the independent harm")
    ap.add_argument("--nulls", nargs="*", default=["reinit", "permute"], choices=("reinit", "permute"))
    args = ap.parse_args()
    torch.set_num_threads(2)

    sys.path.insert(0, str(ROOT / "tests"))  # the independent computation the tests check the sweep against
    from test_objective import _independent_similarity_harm

    from probe.analyses.claims.necessity import NullSweep, necessity_claims
    from probe.analyses.claims.null_model import null_adapter
    from probe.analyses.claims.removal import removal_sweep
    from probe.analyses.common.objective import resolve_objective
    from probe.inputs.corpus import fit_to_model, load_corpus
    from probe.models import load_model

    adapter = load_model("minilm")
    corpus = fit_to_model(load_corpus(conllu=args.conllu, limit=args.limit), adapter)
    heads = [(layer, h) for layer in range(adapter.n_layers) for h in range(adapter.n_heads)]
    t0 = time.perf_counter()
    ref = _independent_similarity_harm(adapter, list(corpus.texts), heads)
    t_ref = time.perf_counter() - t0
    obj, why = resolve_objective("auto", adapter, corpus)
    t0 = time.perf_counter()
    sweep = removal_sweep(adapter, corpus, obj, units=heads, modes=("mean",))
    t_sweep = time.perf_counter() - t0
    gap = max(float(np.abs(sweep.harm["mean"][i] - ref[k]).max()) for i, k in enumerate(heads))
    claims, bars, t_null = {}, {}, {}
    for kind in args.nulls:
        t0 = time.perf_counter()
        nadapter = null_adapter(adapter, seed=0, kind=kind)
        nsweep = removal_sweep(nadapter, corpus, obj, units=heads, modes=("mean",))
        claims[kind] = necessity_claims(sweep, null=NullSweep(nsweep, nadapter.card["null_source"]))
        x = claims[kind][heads[0]].extra
        bars[kind] = (x["null_quantile"], x["null_max"])
        t_null[kind] = time.perf_counter() - t0
    floor = claims[args.nulls[0]][heads[0]].extra["min_effect"] if args.nulls else float("nan")
    print(
        f"corpus: {args.conllu}, first {len(corpus)} sentences; objective {obj.describe()} ({why}); floor {floor:g}; "
        f"independent sweep {t_ref:.0f} s, toolkit sweep {t_sweep:.0f} s (largest per-sentence difference "
        f"{gap:.1e}); null sweeps " + ", ".join(f"{k} {t:.0f} s" for k, t in t_null.items()) + "\n"
    )
    for kind, (q, m) in bars.items():
        print(f"- null `{kind}`: per-sentence 95% head quantile, mean {q:.4f}; largest null head mean {m:.4f}")
    order = sorted(heads, key=lambda k: -ref[k].mean())
    cols = " | ".join(f"necessity ({k} null)" for k in args.nulls)
    print(
        f"\n| rank | head | independent harm (1 − ρ) | toolkit harm | {cols} |\n| --- | --- | --- | --- |"
        + " --- |" * len(args.nulls)
    )
    for rank, k in enumerate(order[: args.top], 1):
        c = next(iter(claims.values()))[k] if claims else None
        statuses = " | ".join(claims[n][k].status for n in args.nulls)
        eff = f"{c.effect:.4f}" if c is not None else ""
        print(f"| {rank} | L{k[0]}H{k[1]} | {ref[k].mean():.4f} | {eff} | {statuses} |")
    for kind in args.nulls:
        held = [f"L{a}H{b}" for a, b in heads if claims[kind][(a, b)].holds]
        print(f"\nnecessity holds ({kind} null): {len(held)} of {len(heads)}: {', '.join(held) or '—'}")


if __name__ == "__main__":
    main()
