"""The redundancy claim on the whole corpus, each group decided in blocks (issue 44).

The exhaustive redundancy claim (:mod:`.redundancy`) mean-ablates each candidate group
(heads of one layer that share a named pattern and are not needed alone) on every example
of a capped corpus. Here, as :mod:`.decided` does for single heads, the corpus is taken in
random blocks and each group stops as soon as its claim is decided:

1. **the null model's bar** — the null model's random groups of each size
   (:func:`.redundancy.null_groups`: up to four per layer) removed block by block (the
   null's blocks, :data:`.decided.NULL_BLOCK`) and decided
   against the floor; the bar for a group of ``k`` is the largest of the floor, the null's
   size-``k`` groups' mean harms and the mean over the first block's sentences of their
   per-sentence ``1 − q`` quantile (the exhaustive claim's bar, and the single heads' three);
2. **the candidate groups** — removed together block by block (every size in one pass, each
   size its own family against its own bar) until the sequential test
   decides each against its size's bar (:func:`probe.analyses.necessity.sequential.sequential_necessity`:
   normal-mixture e-processes on a corpus-level objective's size-corrected block harms,
   betting e-processes on per-example harms), e-BH over the groups at
   :data:`.thresholds.FDR`; a group undecided after every example is decided by the
   exhaustive claim's own test (one-sided Wilcoxon against the bar, Bonferroni over the groups);
3. **beside a group that holds** — its same-norm random perturbation on the first block (context).

Every claim states the examples its group took and why it stopped. Shapes: the groups
table one row per group.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, TYPE_CHECKING

if TYPE_CHECKING:
    from probe.analyses.common.objective import Objective

import numpy as np

from . import thresholds as T
from .claim import DEPENDS, Claim

__all__ = ["decided_redundancy"]


def _null_bars(nadapter, corpus, objective, sizes, *, floor, seed, batch_size, block, means) -> dict:
    """``{k: {bar, null_max, null_level, groups, removals}}``: the null model's random groups of
    each size decided against the floor (module docstring, step 1); in this process (the run's
    runner holds the trained model)."""
    from .decided import NULL_BLOCK, decided_removals, null_bar
    from .redundancy import null_groups

    sets = null_groups(nadapter, sizes, seed)
    units = [g for k in sorted(sets) for g in sets[k]]
    run = decided_removals(
        nadapter, corpus, objective, units, bar=floor, seed=seed, runner=None, batch_size=batch_size,
        block=min(block, NULL_BLOCK), means=means,
    )  # fmt: skip
    out, at = {}, 0
    for k in sorted(sets):
        rows = np.arange(at, at + len(sets[k]))
        at += len(sets[k])
        out[k] = dict(null_bar(run, rows, floor), groups=len(rows), removals=int(run.result.n_used[rows].sum()))
    return out


def _key(heads) -> tuple:
    return tuple(tuple(int(x) for x in h) for h in heads)


def _confirm_groups(adapter, corpus, objective, rows, row_heads, claims, bars, *, n_groups, means, common, runner):
    """``(head claims, removals)``: the groups that hold decided again under the other baselines
    (:func:`.decided.confirm_decided`, each size against its own bar, e-BH over all
    ``n_groups``); a group that fails one makes its heads' claims *depend on the baseline*."""
    from .baselines import to_heads
    from .decided import confirm_decided

    removals = 0
    for k in sorted({len(h) for h in row_heads}):
        mine = [i for i, h in enumerate(row_heads) if len(h) == k and rows[i]["holds"]]
        if not mine:
            continue
        groups = {
            _key(row_heads[i]): Claim(
                "redundancy", "holds", effect=rows[i]["harm"], ci_low=rows[i]["ci_low"], ci_high=rows[i]["ci_high"]
            )
            for i in mine
        }
        got, used = confirm_decided(
            adapter, corpus, objective, groups, bar=bars[k]["bar"], tests=n_groups, means=means,
            seed=common["seed"], batch_size=common["batch_size"], block=common["block"], runner=runner,
        )  # fmt: skip
        removals += used
        for i in mine:
            rows[i]["baselines"] = got[_key(row_heads[i])].status
        claims = to_heads(claims, got)
    return claims, removals


def decided_redundancy(
    adapter: Any,
    corpus: Any,
    objective: Objective,
    pattern: dict,
    necessity: dict,
    *,
    null_adapter: Any = None,
    null_source: str = "",
    seed: int = 0,
    runner: Optional[Callable] = None,
    batch_size: int = 8,
    block: Optional[int] = None,
    means: Any = None,
    null_means: Any = None,
    known: Optional[np.ndarray] = None,
) -> tuple:
    """``({(layer, head): Claim}, groups table rows, info)``: the redundancy claim of every
    head in ``necessity``, its candidate groups decided on random blocks of ``corpus``
    (module docstring).

    Args:
        objective: a resolved :class:`probe.analyses.common.objective.Objective`.
        pattern, necessity: the heads' pattern and necessity claims (:func:`.redundancy.candidate_groups`).
        means, null_means: the mean mode's head means of the model and the null model
            (:func:`probe.analyses.necessity.ablation.position_kind_means`; made here when ``None``).
        known: ``[n, ...]`` the model's clean readouts an earlier pass took (the single
            heads'): the groups' clean forwards stop after the groups' layers there.
        runner: where the model's blocks run (:mod:`probe.runs.blocks`).
    """
    from probe.analyses.common.metrics import as_corpus
    from probe.analyses.necessity.ablation import position_kind_means

    from .decided import BLOCK, Decide, at_the_end, block_removals, decided_effect, decided_pass
    from .redundancy import candidate_groups, not_grouped
    from .statistics import floor_test

    corpus = as_corpus(corpus)
    block = block or BLOCK
    claims = not_grouped(necessity)
    groups = sorted(candidate_groups(pattern, necessity).items())
    info: dict = {"path": "sequential", "groups": len(groups), "examples": len(corpus), "block": block}
    if not groups:
        return claims, [], info
    floor = T.min_effect(objective.name)
    common: dict = dict(seed=seed, batch_size=batch_size, block=block)
    sizes = sorted({len(h) for _, h in groups})
    bars = {k: {"bar": floor} for k in sizes}
    if null_adapter is not None:
        if null_means is None:
            null_means = position_kind_means(null_adapter, corpus, objective, batch_size, null_adapter.default_stack)
        bars = _null_bars(null_adapter, corpus, objective, sizes, floor=floor, means=null_means, **common)
    if means is None:
        means = position_kind_means(adapter, corpus, objective, batch_size, adapter.default_stack)
    block_level = bool(getattr(objective, "corpus_level", False))
    rows, row_heads, removals, first = [], [], 0, None
    by_size = {k: [(role, heads) for role, heads in groups if len(heads) == k] for k in sizes}
    asks = [Decide([heads for _, heads in by_size[k]], "mean", bars[k]["bar"], tests=len(groups)) for k in sizes]
    runs = decided_pass(adapter, corpus, objective, asks, means=means, runner=runner, known=known, **common)
    for k, rec in zip(sizes, runs):
        members, bar = by_size[k], bars[k]["bar"]
        res = rec.result
        first = rec.first if first is None else first
        removals += int(res.n_used.sum())
        end = at_the_end(res, rec, bar, len(groups))
        for i, (role, heads) in enumerate(members):
            used, decision = int(res.n_used[i]), res.decision[i]
            h, eff, lo, hi = decided_effect(res, rec, i, block_level)
            e_value = float(res.e_value[i])
            p = float(min(1.0, 1.0 / e_value)) if e_value > 0 else 1.0
            holds = decision == "necessary" and eff >= bar
            said = f"{decision} after {used} of {len(corpus)} examples"
            if i in end:  # every example taken: the exhaustive claim's test, Bonferroni over the groups
                p = floor_test(h, bar)
                holds = bool(p <= T.FDR / len(groups)) and eff >= bar
                said = (
                    f"undecided by the sequential test after all {len(corpus)} examples; the exhaustive test on "
                    f"them: p = {p:.3g} (Wilcoxon against the bar, Bonferroni over {len(groups)} groups)"
                )
            names = "+".join(f"L{l}H{hh}" for l, hh in heads)
            row = {
                "role": role, "heads": names, "k": k, "objective": objective.name, "harm": eff, "ci_low": lo,
                "ci_high": hi, "floor": floor, "bar": bar, "p": p, "e_value": e_value, "examples": used,
                "decision": said, "random": None, "holds": holds,
            }  # fmt: skip
            if null_adapter is not None:
                row["null_harm"] = bars[k]["null_max"]
            rows.append(row)
            row_heads.append(heads)
            extra = {
                "group": names, "k": k, "p": p, "role": role, "min_effect": floor, "objective": objective.name,
                "random_harm": None, "tests": len(groups), "bar": bar, "decision": said, "e_value": e_value,
                "test": res.method + (", then Wilcoxon against the bar on every example" if i in end else ""),
                "stopped_early": used < len(corpus),
            }  # fmt: skip
            if null_adapter is not None:
                extra.update(
                    null_harm=bars[k]["null_max"], null_quantile=bars[k]["null_level"],
                    null_source="the same-size random groups of " + (null_source or "the null model"),
                )  # fmt: skip
            for key in heads:
                claims[key] = Claim(
                    "redundancy", "holds" if holds else "does not hold",
                    statement=f"needed as a group of {k}" if holds else f"group of {k} not needed either",
                    effect=eff, ci_low=lo, ci_high=hi, count=used, null=floor, unit=objective.units,
                    threshold="min_effect+fdr (e-BH over groups)", reason=f"{role} heads {names} mean-ablated together",
                    extra=dict(extra),
                )  # fmt: skip
    held = [i for i, r in enumerate(rows) if r["holds"]]
    claims, baseline_removals = _confirm_groups(
        adapter,
        corpus,
        objective,
        rows,
        row_heads,
        claims,
        bars,
        n_groups=len(groups),
        means=means,
        common=common,
        runner=runner,
    )
    if held and first is not None:  # the same-norm random perturbation beside a group that holds
        units = [row_heads[i] for i in held]
        got = block_removals(adapter, corpus, objective, units, ("random",), first, seed=seed, batch_size=batch_size)
        for j, i in enumerate(held):
            rnd = float(np.mean(got["random"][j]))
            rows[i]["random"] = rnd
            for key in row_heads[i]:
                claims[key].extra["random_harm"] = rnd
    info.update(
        removals=removals,
        null_removals=int(sum(b.get("removals", 0) for b in bars.values())),
        exhaustive_removals=len(groups) * len(corpus),
        bars={int(k): b for k, b in bars.items()},
        holds=len(held),
        baseline_removals=baseline_removals,
        depends=sorted(r["heads"] for r in rows if r.get("baselines") == DEPENDS),
        test="normal-mixture e-processes on block means" if block_level else "betting e-processes per example",
    )
    return claims, rows, info
