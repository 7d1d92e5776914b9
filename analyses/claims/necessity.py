"""The *necessity* and *weights* claims, from a :class:`.removal.RemovalSweep`.

*Necessity*: the model needs the head on its objective. The head is mean-ablated (its
output replaced by its corpus mean, Wang et al. 2022) and the harm per example measured
in the objective's units (:mod:`probe.analyses.common.objective`). The claim holds when
the mean harm exceeds the objective's practical floor (:data:`.thresholds.MIN_EFFECT`):
one-sided Wilcoxon signed-rank test of ``harm − floor`` over examples, Benjamini–Hochberg
across heads at :data:`.thresholds.FDR`, and the mean at least the floor. Zero- and
resample-ablation (Michel et al. 2019; Chan et al. 2022) are reported beside it, and the
harm of a same-norm random perturbation only as context. The gradient importance
(Michel et al.'s head-gate score) is shown with its rank agreement over heads.

*Weights*: does *where* the head looks matter? Its attention replaced by uniform weights
over the keys it may see, values kept; the same test against the floor. Two readings
(:func:`weights_reading`): a **routing** head, whose uniform weights reproduce at least
:data:`.thresholds.ROUTING_SHARE` of its removal's harm (what it reads matters, and it is
needed), and an **inert sink** head, which removal barely harms but spreading its
attention does: it parks its attention on [CLS]/[SEP] as a no-op (Clark et al. 2019;
the attention sink of Xiao et al. 2023), and uniform weights turn the no-op into a
real write.

Every claim that does not hold states its power: the smallest mean harm the sample could
have detected (:func:`.statistics.detectable_effect`).
"""

from __future__ import annotations

import warnings

from typing import Any

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Optional

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

from probe.errors import InputError

from . import thresholds as T
from .claim import Claim
from .protocol import ClaimInputs, ClaimTest
from .null_model import null_quantile
from .statistics import benjamini_hochberg, detectable_effect, floor_test, mean_ci, paired_greater, spearman


@dataclass(frozen=True)
class NullSweep:
    """The removal sweep of a null model (:mod:`.null_model`) on the same heads, examples
    and objective; ``source`` says how the null model was made."""

    sweep: object
    source: str


def _side(sweep, mode: str, i: int) -> Optional[dict]:
    if mode not in sweep.harm:
        return None
    eff, lo, hi = mean_ci(sweep.harm[mode][i], seed=i)
    return {"effect": eff, "ci_low": lo, "ci_high": hi}


def _null_side(null, mode: str, n: int):
    """``(per-example null quantile [n] or None, the largest null head's mean harm, source)``
    of ``mode`` in ``null`` (a :class:`NullSweep`); a null removed on a sample of the
    examples (NaN elsewhere) gives the other examples the mean of its sampled quantiles."""
    if null is None or mode not in null.sweep.harm:
        return None, float("nan"), ""
    nh = null.sweep.harm[mode]
    if nh.shape[1] != n:
        raise InputError(f"the null sweep has {nh.shape[1]} examples, the sweep {n}: run both on the same examples")
    with warnings.catch_warnings():  # a null removed on a sample of the examples is NaN elsewhere
        warnings.simplefilter("ignore", RuntimeWarning)
        quantiles, null_max = null_quantile(nh, T.FDR), float(np.nanmax(np.nanmean(nh, 1)))
    measured = ~np.isnan(quantiles)
    if measured.any() and not measured.all():  # the examples it was not removed on take its mean level
        quantiles = np.where(measured, quantiles, float(np.mean(quantiles[measured])))
    return quantiles, null_max, null.source


def head_bar(floor: float, null_quantiles: Optional[np.ndarray], null_max: float) -> tuple:
    """``(bar, null_level)``: what a head's mean harm must reach to be necessary: the floor,
    the mean of the null model's per-example quantiles over its heads and its largest head's
    mean harm, whichever is highest (the floor alone without a null; a NaN part counts as the floor)."""
    if null_quantiles is None:
        return floor, float("nan")
    level = float(np.mean(null_quantiles))
    return max(floor, np.nan_to_num(level, nan=floor), np.nan_to_num(null_max, nan=floor)), level


def _tested(kind: str, sweep, mode: str, statement: str, null=None, tests: Optional[int] = None) -> dict:
    """``{unit: Claim}`` of ``mode``'s harm against the objective's floor and, with
    ``null``, the null model's per-example ``1 − q`` quantile over its heads (the larger
    one-sided Wilcoxon p of the two, an intersection–union test; BH across units); the
    mean harm must also reach the floor and, with ``null``, the largest mean harm of any
    null head (a head-level bar: per-example tests alone would let a head that is
    consistently a little above the others' quantile through)."""
    harm = sweep.harm[mode]
    n = harm.shape[1]
    floor = T.min_effect(sweep.objective)
    nq, null_max, null_source = _null_side(null, mode, n)
    p_floor = np.array([floor_test(harm[i], floor) for i in range(len(sweep.units))])
    p_null = (
        np.array([paired_greater(harm[i], nq) for i in range(len(sweep.units))])
        if nq is not None
        else np.full(len(sweep.units), np.nan)
    )
    p = p_floor if nq is None else np.fmax(p_floor, np.nan_to_num(p_null, nan=1.0))
    total = len(sweep.units) if tests is None else max(int(tests), len(sweep.units))
    padded = np.concatenate([np.nan_to_num(p, nan=1.0), np.ones(total - len(p))])
    sig = benjamini_hochberg(padded, T.FDR)[: len(p)]
    bar, null_level = head_bar(floor, nq, null_max)
    claims = {}
    for i, unit in enumerate(sweep.units):
        eff, lo, hi = mean_ci(harm[i], seed=i)
        extra = {
            "mode": mode,
            "p": float(p[i]),
            "p_floor": float(p_floor[i]),
            "bh_significant": bool(sig[i]),
            "min_effect": floor,
            "floor_source": T.floor_source(sweep.objective),
            "objective": sweep.objective,
            "objective_described": sweep.describe,
            "fdr": T.FDR,
            "tests": int(total),
        }
        if nq is not None:
            extra.update(
                null_quantile=null_level,
                null_max=null_max,
                null_quantile_level=1.0 - T.FDR,
                null_source=null_source,
                p_null=float(p_null[i]),
                beyond_null_share=float(np.mean(harm[i] > nq)),
            )
        for other in ("mean", "zero", "resample", "uniform", "random"):
            side = _side(sweep, other, i) if other != mode else None
            if side is not None:
                extra[f"{other}_harm"] = side
        for name, vals in (sweep.measures.get(mode) or {}).items():
            extra[name] = float(vals[i].mean())
        for name, vals in (sweep.corpus.get(mode) or {}).items():
            extra[name] = float(vals[i])
        base = dict(
            statement=statement,
            effect=eff,
            ci_low=lo,
            ci_high=hi,
            count=n,
            null=floor,
            unit=sweep.units_text,
            threshold="min_effect+fdr",
            extra=extra,
        )
        key = unit[0] if len(unit) == 1 else unit
        if n < T.MIN_EXAMPLES:
            claims[key] = Claim(
                kind, "not enough evidence", reason=f"{n} examples < the minimum {T.MIN_EXAMPLES}", **base
            )
            continue
        holds = bool(sig[i]) and eff >= bar
        extra["bar"] = bar
        if not holds:
            extra["detectable"] = detectable_effect(harm[i], bar, q=T.FDR, power=T.POWER)
        claims[key] = Claim(kind, "holds" if holds else "does not hold", **base)
    return claims


def necessity_claims(
    sweep: Any, importance: Optional[pd.DataFrame] = None, null: Any = None, tests: Optional[int] = None
) -> dict:
    """``{(layer, head): Claim}`` from single-head units; ``importance``: a table with
    ``layer, head, importance`` (:func:`probe.analyses.necessity.importance.head_importance`);
    ``null``: a :class:`NullSweep` of the same heads, examples and objective on a null model;
    ``tests``: as :func:`_tested`'s (a screen's selection of the sweep's heads)."""
    claims = _tested("necessity", sweep, "mean", "needed alone", null, tests)
    beside_modes(claims, sweep)
    return add_importance(claims, importance)


def add_importance(claims: dict, importance: Optional[pd.DataFrame] = None) -> dict:
    """The necessity ``claims`` with each head's rank by its removal harm (``removal_rank``
    ``of``; only the heads with a measured harm are ranked, among themselves) and, given
    ``importance`` (``layer, head, importance``), its gradient importance, rank and the
    Spearman agreement of the two over heads."""
    keys = list(claims)
    harm = np.array([claims[k].effect for k in keys], np.float64)
    measured = [k for k, v in zip(keys, harm) if np.isfinite(v)]  # a head never removed exactly has no rank
    order = {k: r + 1 for r, k in enumerate(sorted(measured, key=lambda k: -harm[keys.index(k)]))}
    for k in measured:
        claims[k].extra.update(removal_rank=order[k], of=len(measured))
        if len(measured) < len(keys):
            claims[k].extra.update(ranked_among="the heads removed exactly")
    if importance is None or len(importance) == 0:
        return claims
    imp = {
        (int(l), int(h)): float(v) for l, h, v in zip(importance["layer"], importance["head"], importance["importance"])
    }
    scores = np.array([imp.get(k, np.nan) for k in keys])
    rho = spearman(scores, harm)
    rank = {k: r + 1 for r, k in enumerate(sorted(keys, key=lambda k: -np.nan_to_num(imp.get(k, np.nan), nan=-1e9)))}
    for k, c in claims.items():
        c.extra.update(importance=imp.get(k), importance_rank=rank[k], rank_agreement_spearman=rho)
    return claims


def beside_modes(claims: dict, sweep: Any) -> None:
    """Add to the necessity ``claims`` the harms of the modes beside ``mean`` (zero- and
    resample-ablation, the ``random`` perturbation; :mod:`.removal`) of each single head in
    ``sweep`` (every head, or some, e.g. the necessary ones): ``{mode}_harm`` (effect and
    interval) and ``times_random``, the head's necessity effect over the random
    perturbation's mean harm (context, never a test)."""
    for i, unit in enumerate(sweep.units):
        c = claims.get(unit[0])
        if c is None or len(unit) != 1:
            continue
        for mode in ("zero", "resample", "random"):
            side = _side(sweep, mode, i)
            if side is not None:
                c.extra[f"{mode}_harm"] = side
        if "random" in sweep.harm:
            rnd = float(sweep.harm["random"][i].mean())
            if rnd > 0 and c.effect == c.effect:
                c.extra["times_random"] = float(c.effect / rnd)


def weights_reading(removal: float, uniform: float, floor: float) -> str:
    """``routing`` | ``inert sink`` | ``mixed``: what a uniform-weights harm above the floor means."""
    if removal < floor:
        return "inert sink"
    if uniform >= T.ROUTING_SHARE * removal:
        return "routing"
    return "partly routing"


def weights_claims(
    sweep: Any,
    pattern: Optional[dict] = None,
    null: Any = None,
    tests: Optional[int] = None,
    removal: Optional[np.ndarray] = None,
) -> dict:
    """``{(layer, head): Claim}`` of the uniform-weights test (``not tested`` when the
    sweep could not replace attention, e.g. encoder-decoder models). ``pattern``: the
    pattern claims, naming where an inert head parks its attention; ``tests``: the heads BH
    counts (default the sweep's); ``removal``: each unit's mean-ablation harm (default the
    sweep's ``mean`` mode)."""
    keys = [u[0] for u in sweep.units]
    if "uniform" not in sweep.harm:
        why = sweep.skipped.get("uniform", "uniform weights were not run")
        return {k: Claim("weights", "not tested", reason=why) for k in keys}
    claims = _tested("weights", sweep, "uniform", "where it looks matters", null, tests=tests)
    if removal is None:
        removal = sweep.harm["mean"].mean(1) if "mean" in sweep.harm else np.full(len(keys), np.nan)
    return read_weights(claims, keys, removal, pattern, T.min_effect(sweep.objective))


def read_weights(claims: dict, keys: list, removal: np.ndarray, pattern: Optional[dict], floor: float) -> dict:
    """The weights ``claims`` with their reading (:func:`weights_reading`): each head's
    removal harm ``removal`` ``[len(keys)]`` (mean-ablation) beside its uniform-weights
    harm, and for a head that holds, what it does and where it parks its attention
    (``pattern``: the pattern claims' profiles)."""
    claims = dict(claims)
    for i, k in enumerate(keys):
        c = claims[k]
        c.extra["removal_harm"] = float(removal[i])
        c.extra["share_of_removal"] = float(c.effect / removal[i]) if removal[i] > 0 else None
        if not c.holds:
            continue
        reading = weights_reading(float(removal[i]), c.effect, floor)
        c.extra["reading"] = reading
        where = ""
        prof = (pattern or {}).get(k)
        if prof is not None:
            top = sorted(((v, w) for w, v in (prof.extra.get("profile") or {}).items() if v == v), reverse=True)
            where = top[0][1] if top else ""
        c.extra["parks_on"] = where
        statement = {
            "routing": "routes information",
            "partly routing": "routes information in part",
            "inert sink": f"inert: parks its attention on {where or 'a sink token'}",
        }[reading]
        claims[k] = replace(c, statement=statement)
    return claims


def _necessity_kind(inputs: ClaimInputs) -> dict:
    """The necessity claims the run's causal path decided (``inputs.causal()``)."""
    return inputs.causal().necessity


def _weights_kind(inputs: ClaimInputs) -> dict:
    """The weights claims the run's causal path decided (``inputs.causal()``)."""
    return inputs.causal().weights


#: this module's claim kinds (:mod:`.protocol`)
CLAIMS = (
    ClaimTest(
        "necessity",
        "Necessity",
        "removing it alone harms the objective past the floor (Wang et al. 2022)",
        _necessity_kind,
        order=30,
    ),
    ClaimTest(
        "weights",
        "Do the weights matter",
        "uniform weights in its place harm the objective",
        _weights_kind,
        order=50,
    ),
)
