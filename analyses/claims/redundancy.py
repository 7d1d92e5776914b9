"""The *redundancy* claim: heads not needed alone that share a named pattern are needed
together ("redundant: needed as a group of k").

When several heads implement the same step, removing any one changes little and removing
all removes the step (Olsson et al. 2022's induction heads; Wang et al. 2023's name
movers). The group is every head of one layer whose necessity claim does not hold and whose
pattern claim names the same role; it is zero-ablated at once
mean-ablated at once (:mod:`.removal`) and its harm on the objective tested against the
objective's floor: one-sided Wilcoxon, Bonferroni across the groups tested, and the mean
harm must reach :func:`.thresholds.min_effect`. The same-norm random perturbation of the
whole group is reported as context.
"""

from __future__ import annotations

from typing import Any, Optional, TYPE_CHECKING

if TYPE_CHECKING:
    from probe.analyses.common.objective import Objective


from . import thresholds as T
from .claim import Claim
from .protocol import ClaimInputs, ClaimTest
from .null_model import null_quantile
from .statistics import detectable_effect, floor_test, mean_ci, paired_greater


def candidate_groups(pattern: dict, necessity: dict) -> dict:
    """``"<role> (layer l)"`` -> heads of layer ``l`` whose pattern holds with that role and
    whose necessity does not hold (parallel heads of one layer can stand in for each other)."""
    groups: dict = {}
    for key, p in pattern.items():
        n = necessity.get(key)
        if p.holds and n is not None and n.status == "does not hold":
            groups.setdefault(f"{p.statement} (layer {key[0]})", []).append(key)
    return {r: sorted(h) for r, h in groups.items() if len(h) >= T.GROUP_MIN}


def not_grouped(necessity: dict) -> dict:
    """``{(layer, head): Claim}`` "not tested", with the reason, for every head of
    ``necessity``: the claims a head keeps unless a candidate group takes it."""
    claims = {}
    for key, n in necessity.items():
        if n.status == "holds":
            claims[key] = Claim("redundancy", "not tested", reason="needed alone")
        elif n.status != "does not hold":
            claims[key] = Claim("redundancy", "not tested", reason=f"necessity {n.status}")
        else:
            claims[key] = Claim(
                "redundancy", "not tested", reason="no other head that is not needed alone shares a named pattern"
            )
    return claims


#: groups of each size drawn from each layer of the null model
NULL_GROUPS_PER_LAYER = 4


def null_groups(adapter, sizes, seed: int, per_size: Optional[int] = None) -> dict:
    """``{k: [group of k heads of one layer]}``: up to :data:`NULL_GROUPS_PER_LAYER`
    distinct random groups of each size ``k`` from every layer (seeded): the groups whose
    removal in the null model is the redundancy claim's null distribution. ``per_size``:
    instead, that many groups of each size in all, each from a layer drawn at random (the
    screened path's: a count that does not grow with the layers)."""
    import itertools
    import random

    rng = random.Random(seed)
    H = adapter.n_heads
    L = adapter.n_layers_of(adapter.default_stack)
    out: dict = {}
    for k in sizes:
        groups = []
        if per_size is not None:
            for _ in range(per_size):
                layer = rng.randrange(L)
                groups.append(tuple((layer, h) for h in sorted(rng.sample(range(H), k))))
            out[k] = groups
            continue
        for layer in range(L):
            combos = list(itertools.combinations(range(H), k))
            for c in rng.sample(combos, min(NULL_GROUPS_PER_LAYER, len(combos))):
                groups.append(tuple((layer, h) for h in c))
        out[k] = groups
    return out


def redundancy_claims(
    adapter: Any,
    corpus: Any,
    objective: Objective,
    pattern: dict,
    necessity: dict,
    seed: int = 0,
    runner: Any = None,
    null_adapter: Any = None,
    null_per_size: Optional[int] = None,
    known: Any = None,
) -> tuple:
    """``({(layer, head): Claim}, groups table rows)`` for every head in ``necessity``: each
    candidate group mean-ablated at once (:func:`.removal.removal_sweep`, its batches run
    by ``runner``), its harm on the objective tested against the floor (one-sided
    Wilcoxon, Bonferroni over groups) and, with ``null_adapter`` (:mod:`.null_model`),
    against the same group mean-ablated in the null model, per example (paired; the
    larger p of the two); ``null_per_size``: that many null groups of each size in all
    (:func:`null_groups`); ``known``: ``corpus``'s clean readouts in the model already read
    (:func:`.removal.removal_sweep`'s)."""
    from .removal import removal_sweep

    groups = candidate_groups(pattern, necessity)
    claims, rows = not_grouped(necessity), []
    if not groups:
        return claims, rows
    items = sorted(groups.items())
    units = [heads for _, heads in items]
    sweep = removal_sweep(
        adapter, corpus, objective, units=units, modes=("mean",), seed=seed, runner=runner, known=known
    )
    sizes = sorted({len(h) for _, h in items})
    null_sets = null_groups(adapter, sizes, seed, null_per_size) if null_adapter is not None else {}
    null_units = [g for k in sorted(null_sets) for g in null_sets[k]]
    null = (
        removal_sweep(null_adapter, corpus, objective, units=null_units, modes=("mean",), seed=seed)
        if null_units
        else None
    )
    floor = T.min_effect(sweep.objective)
    for gi, (role, heads) in enumerate(items):
        harm = sweep.harm["mean"][gi]
        p_floor = floor_test(harm, floor)
        null_harm = None
        if null is not None:
            rows_k = [null.row(g) for g in null_sets[len(heads)]]
            null_harm = null_quantile(null.harm["mean"][rows_k], T.FDR)
        p_null = paired_greater(harm, null_harm) if null_harm is not None else float("nan")
        p = p_floor if null_harm is None else max(p_floor, 1.0 if p_null != p_null else p_null)
        eff, lo, hi = mean_ci(harm, seed=gi)
        bar = floor if null_harm is None else max(floor, float(null_harm.mean()))
        holds = len(harm) >= T.MIN_EXAMPLES and p <= T.FDR / len(groups) and eff >= bar
        k = len(heads)
        names = "+".join(f"L{l}H{h}" for l, h in heads)
        rnd = None  # a same-norm random perturbation of the group: context for a group that holds, below
        rows.append(
            {
                "role": role,
                "heads": names,
                "k": k,
                "objective": sweep.objective,
                "harm": eff,
                "ci_low": lo,
                "ci_high": hi,
                "floor": floor,
                "p": p,
                "random": rnd,
                "holds": holds,
            }
        )
        extra = {
            "group": names,
            "k": k,
            "p": p,
            "role": role,
            "min_effect": floor,
            "objective": sweep.objective,
            "random_harm": rnd,
            "tests": len(groups),
            "bar": bar,
        }
        if null_harm is not None:
            extra.update(
                null_harm=float(null_harm.mean()),
                p_null=p_null,
                p_floor=p_floor,
                null_source="the same group in " + null_adapter.card.get("null_source", "the null model"),
            )
            rows[-1]["null_harm"] = float(null_harm.mean())
        if not holds:
            extra["detectable"] = detectable_effect(harm, bar, q=T.FDR / len(groups))
        for key in heads:
            claims[key] = Claim(
                "redundancy",
                "holds" if holds else "does not hold",
                statement=f"needed as a group of {k}" if holds else f"group of {k} not needed either",
                effect=eff,
                ci_low=lo,
                ci_high=hi,
                count=len(harm),
                null=floor,
                unit=sweep.units_text,
                threshold="min_effect+fdr (Bonferroni over groups)",
                reason=f"{role} heads {names} mean-ablated together",
                extra=dict(extra),
            )
    claims = _random_beside(adapter, corpus, objective, items, rows, claims, seed, runner, known)
    return claims, rows


def _random_beside(
    adapter, corpus, objective, items: list, rows: list, claims: dict, seed: int, runner, known=None
) -> dict:
    """The same-norm random perturbation of each group that holds (``random`` mode of
    :mod:`.removal`; context, never a test), into its row's ``random`` and its heads' claims'
    ``random_harm``: run for those groups alone (for every group it cost as much as the
    groups' removals); and each such group removed under the other baselines
    (:mod:`.baselines`), judged by the same test (Wilcoxon against the floor, Bonferroni over
    the groups, the mean at least the bar): the claims returned, a group that fails one
    *depends on the baseline*."""
    from .baselines import BASELINES, judge, to_heads
    from .removal import removal_sweep

    held = [gi for gi, row in enumerate(rows) if row["holds"]]
    if not held:
        return claims
    sweep = removal_sweep(
        adapter, corpus, objective, units=[items[gi][1] for gi in held], modes=("random", *BASELINES[1:]),
        seed=seed, runner=runner, known=known,
    )  # fmt: skip
    floor, tests = T.min_effect(sweep.objective), len(rows)
    groups, values = {}, {}
    for j, gi in enumerate(held):
        rnd = float(sweep.harm["random"][j].mean())
        rows[gi]["random"] = rnd
        for key in items[gi][1]:
            if claims[key].extra.get("group") == rows[gi]["heads"]:
                claims[key].extra["random_harm"] = rnd
        row, heads = rows[gi], tuple(tuple(h) for h in items[gi][1])
        groups[heads] = Claim("redundancy", "holds", effect=row["harm"], ci_low=row["ci_low"], ci_high=row["ci_high"])
        for mode in BASELINES[1:]:
            harm = sweep.harm[mode][j]
            eff, lo, hi = mean_ci(harm, seed=gi)
            p = floor_test(harm, floor)
            bar = claims[heads[0]].extra.get("bar", floor)
            ok = len(harm) >= T.MIN_EXAMPLES and p <= T.FDR / tests and eff >= bar
            values.setdefault(heads, {})[mode] = {"effect": eff, "ci_low": lo, "ci_high": hi, "p": p, "holds": ok}
    groups = judge(groups, values)
    for gi in held:
        rows[gi]["baselines"] = groups[tuple(tuple(h) for h in items[gi][1])].status
    return to_heads(claims, groups)


def _redundancy_kind(inputs: ClaimInputs) -> dict:
    """The redundancy claims the run's causal path decided (``inputs.causal()``)."""
    return inputs.causal().redundancy


#: this module's claim kind (:mod:`.protocol`)
CLAIMS = (
    ClaimTest(
        "redundancy",
        "Redundancy",
        "removing it with its look-alikes harms more than each alone",
        _redundancy_kind,
        order=40,
    ),
)
