"""A necessity claim that survives the choice of baseline (issue 58).

Mean-ablation asks what the model loses when a head writes only what it writes on average
(Wang et al. 2022); *which* average is a choice, and a head can look necessary under one
and not another (MiniLM's L0H9 under a mean that pooled [CLS] with [SEP]). A claim is
decided as before under the default baseline, the per-kind means; each head that holds is
then removed under every other reasonable baseline the toolkit offers, on the same
examples and judged by the same statistics:

* ``mean`` — per position kind (:mod:`probe.analyses.necessity.position_kinds`), the default;
* ``one-mean`` — one mean over all positions;
* ``resample`` — another sentence's output at a position of the same kind (Chan et al. 2022).

It holds only if it holds under each; otherwise its status is :data:`DEPENDS` ("depends on
the baseline") with each baseline's value, which every renderer shows side by side. Only
the heads that hold are run again, so the cost is a few heads' removals, not the sweep's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from . import thresholds as T
from .claim import DEPENDS, Claim
from .statistics import benjamini_hochberg, floor_test, mean_ci

__all__ = [
    "BASELINES",
    "BASELINE_WORDS",
    "confirm_sweep",
    "judge",
    "baselines_info",
    "baselines_note",
    "to_heads",
]

#: the baselines a mean-ablation claim must hold under, the default (deciding) one first
BASELINES = ("mean", "one-mean", "resample")
#: each baseline in words, as the pages and summary.json name it
BASELINE_WORDS = {
    "mean": "per-kind means",
    "one-mean": "one mean over all positions",
    "resample": "resample (same kind)",
}


def judge(claims: dict, values: dict) -> dict:
    """``claims`` with each held claim's baselines side by side in ``extra["baselines"]``
    (``{mode: {effect, ci_low, ci_high, holds, p?}}``, the default's taken from the claim), and
    the status :data:`DEPENDS` where any other baseline did not hold.

    ``values``: ``{key: {mode: {effect, ci_low, ci_high, holds, …}}}`` of the other baselines."""
    out = dict(claims)
    for key, by in values.items():
        c = out.get(key)
        if c is None or not c.holds:
            continue
        side = {"mean": {"effect": c.effect, "ci_low": c.ci_low, "ci_high": c.ci_high, "holds": True}}
        side.update(by)
        extra = dict(c.extra, baselines=side)
        failed = [m for m, v in side.items() if not v["holds"]]
        if not failed:
            out[key] = replace(c, extra=extra)
            continue
        held = [m for m, v in side.items() if v["holds"]]
        reason = (
            "holds under "
            + ", ".join(f"{BASELINE_WORDS[m]} ({side[m]['effect']:+.3g})" for m in held)
            + "; not under "
            + ", ".join(f"{BASELINE_WORDS[m]} ({side[m]['effect']:+.3g})" for m in failed)
        )
        out[key] = replace(c, status=DEPENDS, reason=reason, extra=extra)
    return out


def confirm_sweep(claims: dict, sweep: Any, tests: int) -> dict:
    """The exhaustive test (:func:`.necessity._tested`) of the held ``claims``' heads under the
    other baselines, read from ``sweep`` (a :class:`.removal.RemovalSweep` of those heads, on the
    claims' examples, in the modes of :data:`BASELINES` past the first): one-sided Wilcoxon of
    harm − floor, Benjamini–Hochberg at :data:`.thresholds.FDR` counting all ``tests`` heads (the
    heads not run again count as p = 1), and the mean at least the claim's own bar (the floor, or
    the null model's where the claim was calibrated). Returns :func:`judge`'s claims."""
    floor = T.min_effect(sweep.objective)
    values: dict = {}
    for mode in BASELINES[1:]:
        if mode not in sweep.harm:
            continue
        harm = sweep.harm[mode]
        p = np.array([floor_test(harm[i], floor) for i in range(len(sweep.units))])
        padded = np.concatenate([np.nan_to_num(p, nan=1.0), np.ones(max(0, int(tests) - len(p)))])
        sig = benjamini_hochberg(padded, T.FDR)[: len(p)]
        for i, unit in enumerate(sweep.units):
            key = unit[0] if len(unit) == 1 else unit
            c = claims.get(key)
            if c is None:
                continue
            eff, lo, hi = mean_ci(harm[i], seed=i)
            bar = float(c.extra.get("bar", floor))
            values.setdefault(key, {})[mode] = {
                "effect": eff, "ci_low": lo, "ci_high": hi, "p": float(p[i]), "holds": bool(sig[i]) and eff >= bar,
            }  # fmt: skip
    return judge(claims, values)


def baselines_info(necessity: dict, kinds: dict) -> dict:
    """What summary.json states of the baselines: each in words, the means' position kinds
    (``kinds``: ``KindMeans.to_dict`` with ``described``), the heads confirmed under each and
    those whose claim depends on the baseline."""
    kinds = dict(kinds or {})
    return {
        "baselines": dict(BASELINE_WORDS),
        "means": kinds.pop("described", "per position kind"),
        "kinds": kinds or None,
        "confirmed": sorted(f"L{l}H{h}" for (l, h), c in _heads(necessity) if c.holds and "baselines" in c.extra),
        "depends": sorted(f"L{l}H{h}" for (l, h), c in _heads(necessity) if c.status == DEPENDS),
    }


def _heads(claims: dict) -> list:
    return [(k, c) for k, c in claims.items() if len(k) == 2 and not isinstance(k[0], tuple)]


def baselines_note(b: dict) -> str:
    """One sentence for the report's notes: the baselines and what they left."""
    return (
        f"mean-ablation's means {b['means']}; a necessary head must hold under each baseline ({', '.join(b['baselines'].values())}), confirmed on "
        f"the same examples by the same test: {len(b['confirmed'])} held under each"
        + (f", {len(b['depends'])} {DEPENDS} ({', '.join(b['depends'])})" if b["depends"] else "")
    )


def to_heads(claims: dict, groups: dict) -> dict:
    """The redundancy ``claims`` of every head (``{(layer, head): Claim}``) with the verdict of
    its group under the baselines: ``groups`` ``{group heads: Claim}`` as :func:`judge` left
    them (a group that depends on the baseline makes each of its heads' claims depend on it)."""
    out = dict(claims)
    for heads, g in groups.items():
        for key in heads:
            c = out.get(key)
            if c is None or c.extra.get("group") != "+".join(f"L{l}H{h}" for l, h in heads):
                continue
            out[key] = replace(c, status=g.status, reason=g.reason or c.reason, extra=dict(c.extra, **_side(g)))
    return out


def _side(g: Claim) -> dict:
    return {"baselines": g.extra["baselines"]} if "baselines" in g.extra else {}
