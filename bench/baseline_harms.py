"""Each head's mean-ablation harm under each baseline (issue 58): MiniLM's heads on the
bundled sample or a treebank, harms in the claims' objective (1 − ρ of the similarity
structure under mean pooling) and embedding drift (1 − cos of the mean-pooled embedding):

* one mean — every position given the head's one mean over all positions;
* words / special (pooled) — one mean over the words, one over the special tokens with
  [CLS] and [SEP] pooled (what the toolkit did before issue 58);
* per kind — content, [CLS], [SEP] each apart (the toolkit's default now);
* resample — another sentence's output at a position of the same kind (context).

    python bench/baseline_harms.py                                    # the bundled sample
    python bench/baseline_harms.py --conllu /work/shared/data/ud-english-ewt/en_ewt-ud-dev.conllu --limit 300

Heads shown: L0H9, L5H10, L5H5 and the ``--top`` heads by harm under per-kind means and
under the pooled means (every head is swept under both; the other baselines for the heads
shown). Prints Markdown; never asserts (tests/test_position_kinds.py and
tests/test_objective.py assert).
"""

from __future__ import annotations

import argparse
import time

NAMED = [(0, 9), (5, 10), (5, 5)]


def pooled_words_special(means):
    """The per-kind means with every special-token kind given their pooled mean (weighted by
    positions): the toolkit's words / special means before issue 58."""
    import torch

    from probe.analyses.necessity.position_kinds import KindMeans

    special = [i for i, t in enumerate(means.kinds.token_ids) if t >= 0 and means.counts[i] > 0]
    counts = torch.tensor([float(means.counts[i]) for i in special])
    values = means.values.clone()
    values[special] = (means.values[special] * counts[:, None, None, None]).sum(0) / counts.sum()
    return KindMeans(values, means.overall, means.kinds, means.counts)


def main() -> None:
    import numpy as np
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conllu", default=None, help="a CoNLL-U file (default: the bundled sample)")
    ap.add_argument("--limit", type=int, default=None, help="first N sentences")
    ap.add_argument("--top", type=int, default=5, help="heads shown by harm under each of the two kinds of means")
    args = ap.parse_args()
    torch.set_num_threads(2)

    from probe.analyses.claims.removal import removal_sweep
    from probe.analyses.common.objective import resolve_objective
    from probe.analyses.necessity.ablation import position_kind_means
    from probe.inputs.corpus import fit_to_model, load_corpus
    from probe.models import load_model

    adapter = load_model("minilm")
    from probe.app.report.bundled import SAMPLE_CONLLU

    corpus = fit_to_model(load_corpus(conllu=args.conllu or str(SAMPLE_CONLLU), limit=args.limit), adapter)
    obj, _ = resolve_objective("auto", adapter, corpus)
    t0 = time.perf_counter()
    means = position_kind_means(adapter, corpus, obj, 8)
    pooled = pooled_words_special(means)
    heads = [(layer, h) for layer in range(adapter.n_layers) for h in range(adapter.n_heads)]
    kind = removal_sweep(adapter, corpus, obj, units=heads, modes=("mean",), means=means)
    old = removal_sweep(adapter, corpus, obj, units=heads, modes=("mean",), means=pooled)
    rank_kind = np.argsort(-kind.harm["mean"].mean(1))
    rank_old = np.argsort(-old.harm["mean"].mean(1))
    shown = list(NAMED)
    for i in list(rank_kind[: args.top]) + list(rank_old[: args.top]):
        if heads[i] not in shown:
            shown.append(heads[i])
    rest = removal_sweep(adapter, corpus, obj, units=shown, modes=("one-mean", "resample"), means=means)
    seconds = time.perf_counter() - t0

    def cell(sweep, mode, head):
        i = sweep.row((head,))
        return f"{sweep.harm[mode][i].mean():.4f} / {sweep.measures[mode]['embedding_drift'][i].mean():.4f}"

    source = args.conllu or "the bundled sample"
    print(
        f"MiniLM, {source}, {len(corpus)} sentences ({seconds:.0f} s); harm: 1 − ρ / embedding drift "
        f"(floor 0.02 / 0.005); {means.describe()}\n"
    )
    names = means.kinds.names
    print(
        "| head | one mean over all positions | words / special (pooled) | per kind (content, [CLS], [SEP]) | "
        "resample (same kind) | rank pooled → per kind | ‖mean‖ content / [CLS] / [SEP] |\n"
        "| --- | --- | --- | --- | --- | --- | --- |"
    )
    pos_kind = {h: int(np.nonzero(rank_kind == i)[0][0]) + 1 for i, h in enumerate(heads)}
    pos_old = {h: int(np.nonzero(rank_old == i)[0][0]) + 1 for i, h in enumerate(heads)}
    for head in shown:
        layer, h = head
        norms = " / ".join(
            f"{float(means.values[names.index(k), layer, h].norm()):.2f}" for k in ("content", "[CLS]", "[SEP]")
        )
        print(
            f"| L{layer}H{h} | {cell(rest, 'one-mean', head)} | {cell(old, 'mean', head)} | {cell(kind, 'mean', head)} "
            f"| {cell(rest, 'resample', head)} | {pos_old[head]} → {pos_kind[head]} | {norms} |"
        )
    from scipy.stats import spearmanr

    rho = spearmanr(kind.harm["mean"].mean(1), old.harm["mean"].mean(1)).statistic
    print(f"\nSpearman ρ of the 72 heads' harms, pooled vs per-kind means: {rho:.3f}")


if __name__ == "__main__":
    main()
