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


from . import thresholds as T
from .claim import Claim
from .statistics import detectable_effect, floor_test, mean_ci


def candidate_groups(pattern: dict, necessity: dict) -> dict:
    """``"<role> (layer l)"`` -> heads of layer ``l`` whose pattern holds with that role and
    whose necessity does not hold (parallel heads of one layer can stand in for each other)."""
    groups: dict = {}
    for key, p in pattern.items():
        n = necessity.get(key)
        if p.holds and n is not None and n.status == "does not hold":
            groups.setdefault(f"{p.statement} (layer {key[0]})", []).append(key)
    return {r: sorted(h) for r, h in groups.items() if len(h) >= T.GROUP_MIN}


def redundancy_claims(adapter, corpus, objective, pattern: dict, necessity: dict, seed: int = 0, runner=None) -> tuple:
    """``({(layer, head): Claim}, groups table rows)`` for every head in ``necessity``: each
    candidate group mean-ablated at once (:func:`.removal.removal_sweep`, its batches run
    by ``runner``), its harm on the objective tested against the floor (one-sided
    Wilcoxon, Bonferroni over groups)."""
    from .removal import removal_sweep

    groups = candidate_groups(pattern, necessity)
    claims, rows = {}, []
    for key, n in necessity.items():
        if n.status == "holds":
            claims[key] = Claim("redundancy", "not tested", reason="needed alone")
        elif n.status != "does not hold":
            claims[key] = Claim("redundancy", "not tested", reason=f"necessity {n.status}")
        else:
            claims[key] = Claim(
                "redundancy", "not tested", reason="no other head that is not needed alone shares a named pattern"
            )
    if not groups:
        return claims, rows
    items = sorted(groups.items())
    sweep = removal_sweep(
        adapter,
        corpus,
        objective,
        units=[heads for _, heads in items],
        modes=("mean", "random"),
        seed=seed,
        runner=runner,
    )
    floor = T.min_effect(sweep.objective)
    for gi, (role, heads) in enumerate(items):
        harm = sweep.harm["mean"][gi]
        p = floor_test(harm, floor)
        eff, lo, hi = mean_ci(harm, seed=gi)
        holds = len(harm) >= T.MIN_EXAMPLES and p <= T.FDR / len(groups) and eff >= floor
        k = len(heads)
        names = "+".join(f"L{l}H{h}" for l, h in heads)
        rnd = float(sweep.harm["random"][gi].mean())
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
        }
        if not holds:
            extra["detectable"] = detectable_effect(harm, floor, q=T.FDR / len(groups))
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
    return claims, rows
