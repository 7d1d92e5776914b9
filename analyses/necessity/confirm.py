"""Confirm exactly what the screen says could matter, and audit what it ruled out.

A screen (:mod:`.screen`) is a first-order estimate; it is never evidence of necessity by
itself. From screened estimates with an upper bound, :func:`plan_confirmation` picks

* **confirm**: the heads whose upper bound reaches the claim's floor (or, for a screen whose
  estimates are not in the objective's units, the ``top`` heads by upper bound), and
* **audit**: a uniform random sample (without replacement) of the rest,

and :func:`confirm_heads` removes both exactly
(:func:`probe.analyses.claims.removal.removal_sweep`). An audited head that the exact
removal finds over the floor is a **miss** of the screen; the audit's misses bound the
screen's miss rate among all the heads it ruled out with a Clopper–Pearson upper bound
(Clopper & Pearson 1934; the binomial bound is conservative for a sample drawn without
replacement from a finite set of heads). A head that was never removed exactly is never
called necessary: :attr:`Confirmation.necessary` holds confirmed and audited heads only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from probe.analyses.common.objective import Objective

import numpy as np
from scipy.stats import beta

from probe.errors import InputError

__all__ = ["ConfirmationPlan", "Confirmation", "plan_confirmation", "miss_rate_bound", "confirm_heads"]


@dataclass(frozen=True)
class ConfirmationPlan:
    """Indices (into the screened heads) to remove exactly.

    Attributes:
        confirm: heads whose upper bound reaches the floor (or the ``top`` ones).
        audit: a random sample of the others; ruled_out: every head not in ``confirm``
            (``audit`` included).
    """

    confirm: tuple
    audit: tuple
    ruled_out: tuple


def plan_confirmation(
    upper: Sequence[float],
    floor: Optional[float] = None,
    *,
    top: Optional[int] = None,
    audit: float = 0.1,
    min_audit: int = 5,
    seed: int = 0,
    also: int = 0,
) -> ConfirmationPlan:
    """Choose the heads to confirm and to audit.

    Args:
        upper: ``[n_heads]`` upper bounds of the screened effects
            (:meth:`probe.analyses.necessity.screen.HeadScreen.upper`).
        floor: confirm every head with ``upper >= floor`` (the objective's units).
        top: instead, confirm the ``top`` heads with the largest upper bounds (a screen
            whose estimates are not harms, ``readout-sketch``).
        audit: the fraction of the ruled-out heads to audit; ``min_audit``: at least this
            many (all of them, when fewer are ruled out).
        also: with ``floor``, confirm besides the ``also`` heads with the largest upper
            bounds (a first-order screen of a saturated loss has vanishing estimates).

    Raises:
        InputError: neither or both of ``floor`` and ``top``; ``audit`` outside [0, 1].
    """
    u = np.asarray(upper, np.float64).reshape(-1)
    if (floor is None) == (top is None):
        raise InputError(
            "give a floor (confirm every head whose upper bound reaches it) or top (the k largest), not both"
        )
    if not 0.0 <= audit <= 1.0:
        raise InputError(f"audit is a fraction of the ruled-out heads, got {audit}")
    if floor is not None:
        chosen = np.flatnonzero(~(u < floor))  # NaN bounds are confirmed, never ruled out
        if also > 0:
            chosen = np.union1d(chosen, np.argsort(-np.nan_to_num(u, nan=np.inf), kind="stable")[:also])
    else:
        chosen = np.sort(np.argsort(-np.nan_to_num(u, nan=np.inf), kind="stable")[: max(0, int(top or 0))])
    rest = np.setdiff1d(np.arange(len(u)), chosen)
    k = min(len(rest), max(int(np.ceil(audit * len(rest))), min_audit))
    sample = np.sort(np.random.default_rng(seed).choice(rest, size=k, replace=False)) if k else np.array([], int)
    return ConfirmationPlan(
        confirm=tuple(int(i) for i in chosen),
        audit=tuple(int(i) for i in sample),
        ruled_out=tuple(int(i) for i in rest),
    )


def miss_rate_bound(n_audited: int, n_missed: int, confidence: float = 0.95) -> float:
    """The one-sided Clopper–Pearson upper bound on the miss rate from ``n_missed`` misses
    among ``n_audited`` audited heads (1.0 when none was audited)."""
    if n_missed < 0 or n_missed > n_audited:
        raise InputError(f"{n_missed} misses among {n_audited} audited heads")
    if n_audited == 0 or n_missed == n_audited:
        return 1.0
    return float(beta.ppf(confidence, n_missed + 1, n_audited - n_missed))


@dataclass(frozen=True)
class Confirmation:
    """The exact removals of a plan and the audit's verdict on the screen.

    Attributes:
        heads: ``[(layer, head)]`` all screened heads; plan: the :class:`ConfirmationPlan`.
        exact: head index -> ``[n]`` exact per-example harms (confirmed and audited heads).
        necessary: head indices the exact harms call necessary (``decide``).
        misses: audited heads called necessary (the screen ruled them out).
        miss_rate: misses / audited; miss_upper: its Clopper–Pearson bound at ``confidence``.
    """

    heads: tuple
    plan: ConfirmationPlan
    exact: dict
    necessary: tuple
    misses: tuple
    miss_rate: float
    miss_upper: float
    confidence: float

    def summary(self) -> dict:
        """What summary.json states: counts, the miss rate and its bound."""
        return {
            "screened": len(self.heads),
            "confirmed": len(self.plan.confirm),
            "audited": len(self.plan.audit),
            "necessary": len(self.necessary),
            "audit_misses": len(self.misses),
            "miss_rate": self.miss_rate,
            "miss_rate_upper": self.miss_upper,
            "confidence": self.confidence,
        }


def confirm_heads(
    adapter,
    corpus,
    heads: Sequence,
    plan: ConfirmationPlan,
    *,
    objective: Objective,
    mode: str = "mean",
    floor: Optional[float] = None,
    decide: Optional[Callable[[np.ndarray], np.ndarray]] = None,
    confidence: float = 0.95,
    **sweep_kwargs,
) -> Confirmation:
    """Remove the plan's confirmed and audited heads exactly in ``mode`` and decide them.

    Args:
        heads: ``[(layer, head)]`` the screened heads (``plan`` indexes them).
        decide: ``[k, n]`` exact harms -> ``[k]`` bool (the claim's rule); default: the
            mean harm reaches ``floor``.
        sweep_kwargs: passed to :func:`probe.analyses.claims.removal.removal_sweep`
            (``batch_size``, ``seed``, ``stack``, ``runner``).

    Raises:
        InputError: neither ``decide`` nor ``floor``.
    """
    from probe.analyses.claims.removal import removal_sweep

    if decide is None:
        if floor is None:
            raise InputError("give the claim's floor or its decision rule (decide)")
        decide = lambda h: h.mean(1) >= floor  # noqa: E731
    heads = tuple(tuple(map(int, h)) for h in heads)
    todo = sorted(set(plan.confirm) | set(plan.audit))
    exact: dict = {}
    necessary: tuple = ()
    if todo:
        sweep = removal_sweep(adapter, corpus, objective, [heads[i] for i in todo], modes=(mode,), **sweep_kwargs)
        harm = np.asarray(sweep.harm[mode], np.float64)
        called = np.asarray(decide(harm), bool)
        exact = {i: harm[j] for j, i in enumerate(todo)}
        necessary = tuple(i for j, i in enumerate(todo) if called[j])
    misses = tuple(i for i in plan.audit if i in necessary)
    n_audit = len(plan.audit)
    return Confirmation(
        heads=heads,
        plan=plan,
        exact=exact,
        necessary=necessary,
        misses=misses,
        miss_rate=len(misses) / n_audit if n_audit else float("nan"),
        miss_upper=miss_rate_bound(n_audit, len(misses), confidence),
        confidence=confidence,
    )
