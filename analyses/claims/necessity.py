"""The *necessity* and *weights* claims, from a :class:`.perturb.PerturbationSweep`.

*Necessity* (Michel et al. 2019): removing the head harms the metric more than the
null (the same-norm perturbation in a random direction, :mod:`.perturb`). Per head, the
paired one-sided Wilcoxon test of ``harm(zero) − harm(zero_null)`` over examples;
Benjamini–Hochberg across all heads at :data:`.thresholds.FDR`; the claim holds when the
head is a discovery *and* the mean excess harm is at least :func:`.thresholds.min_effect`
of the metric. The gradient importance (Michel et al.'s head-gate score) is reported
beside it, with the Spearman rank agreement of the two measures over all heads.

*Weights* (does *where* the head looks matter?): the same test for ``uniform`` (its
attention replaced by uniform weights over the keys it may see, values kept) against
``uniform_null``; reported with the share of the head's removal effect that uniform
weights reproduce. A head whose weights do not matter alone may still matter in a group
(see :mod:`.redundancy`): the claim says "not shown", never "meaningless".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

from . import thresholds as T
from .claim import Claim
from .statistics import benjamini_hochberg, mean_ci, paired_greater, spearman


def _tested(kind: str, sweep, real: str, null: str, unit: str) -> dict:
    harm, harm0 = sweep.harm(real), sweep.harm(null)
    n = harm.shape[1]
    p = np.array([paired_greater(harm[i], harm0[i]) for i in range(len(sweep.heads))])
    sig = benjamini_hochberg(np.nan_to_num(p, nan=1.0), T.FDR)
    floor = T.min_effect(sweep.metric)
    claims = {}
    for i, key in enumerate(sweep.heads):
        eff, lo, hi = mean_ci(harm[i] - harm0[i], seed=i)
        base = dict(effect=eff, ci_low=lo, ci_high=hi, count=n, null=float(harm0[i].mean()), unit=unit,
                    threshold="fdr+min_effect",
                    extra={"harm": float(harm[i].mean()), "p": float(p[i]), "bh_significant": bool(sig[i]),
                           "min_effect": floor, "metric": sweep.metric, "path": sweep.path})
        if n < T.MIN_EXAMPLES:
            claims[key] = Claim(kind, "not enough evidence", reason=f"{n} examples < {T.MIN_EXAMPLES}", **base)
            continue
        holds = bool(sig[i]) and eff >= floor
        claims[key] = Claim(kind, "holds" if holds else "does not hold", **base)
    return claims


def necessity_claims(sweep, importance: Optional[pd.DataFrame] = None) -> dict:
    """``{(layer, head): Claim}``; ``importance``: a table with ``layer, head, importance``
    (:func:`probe.analyses.necessity.importance.head_importance`) shown beside the effect."""
    unit = f"{sweep.metric} harm above the null"
    claims = _tested("necessity", sweep, "zero", "zero_null", unit)
    if importance is None or len(importance) == 0:
        return claims
    imp = {(int(l), int(h)): float(v) for l, h, v in zip(importance["layer"], importance["head"],
                                                         importance["importance"])}
    keys = list(sweep.heads)
    scores = np.array([imp.get(k, np.nan) for k in keys])
    harm = sweep.harm("zero").mean(1)
    rho = spearman(scores, harm)
    order = {k: r + 1 for r, k in enumerate(sorted(keys, key=lambda k: -np.nan_to_num(imp.get(k, np.nan), nan=-1e9)))}
    horder = {k: r + 1 for r, k in enumerate(sorted(keys, key=lambda k: -harm[keys.index(k)]))}
    for k, c in claims.items():
        c.extra.update(importance=imp.get(k), importance_rank=order[k], removal_rank=horder[k],
                       rank_agreement_spearman=rho, of=len(keys))
    return claims


def weights_claims(sweep, necessity: Optional[dict] = None) -> dict:
    """``{(layer, head): Claim}`` of the uniform-weights test (``not tested`` when the
    sweep could not replace attention, e.g. encoder-decoder models)."""
    if "uniform" not in sweep.scores:
        why = sweep.skipped.get("uniform", "uniform weights were not run")
        return {k: Claim("weights", "not tested", reason=why) for k in sweep.heads}
    claims = _tested("weights", sweep, "uniform", "uniform_null", f"{sweep.metric} harm above the null")
    zero = sweep.harm("zero").mean(1)
    for i, c in enumerate(claims.values()):
        c.extra["share_of_removal"] = float(c.extra["harm"] / zero[i]) if zero[i] > 0 else None
    return claims
