"""The change of per-head measures between two checkpoints, with its uncertainty.

Every measure is a value per example and head on the same inputs, so the two checkpoints
are compared *paired by example*: the change of a head is the mean over examples of
``b_e − a_e``, with a percentile bootstrap interval over examples (Efron 1979; all heads
share the resamples, :func:`probe.analyses.common.bootstrap.bootstrap_mean_ci`) and a
two-sided Wilcoxon (1945) signed-rank p-value. A pattern divergence (``jsd``, ≥ 0, zero
for the same weights) is tested one-sided against its floor. Across the heads of one
measure the false discovery rate is held at ``q`` (Benjamini & Hochberg 1995,
:func:`probe.analyses.claims.statistics.benjamini_hochberg`); a change is *flagged* when
it is significant and at least its floor (:mod:`.floors`).

Shapes: per-example values ``[examples, heads]`` with heads layer-major (``l·H + h``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Mapping, Optional

import numpy as np
import pandas as pd

from probe.analyses.claims.statistics import benjamini_hochberg
from probe.analyses.common.bootstrap import bootstrap_mean_ci
from probe.errors import InputError

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["CHANGE_COLUMNS", "paired_change", "divergence_change", "head_changes"]

CHANGE_COLUMNS = [
    "measure",
    "layer",
    "head",
    "a",
    "b",
    "change",
    "ci_low",
    "ci_high",
    "p",
    "n",
    "floor",
    "significant",
    "flagged",
]


def _signed_rank_p(d: np.ndarray, alternative: str) -> float:
    """Wilcoxon signed-rank p of the differences ``d`` (NaN dropped); 1 when all are 0,
    NaN for fewer than two."""
    from scipy.stats import wilcoxon

    d = d[~np.isnan(d)]
    if len(d) < 2:
        return float("nan")
    if not np.any(np.abs(d) > 1e-12):
        return 1.0
    if alternative == "greater" and not np.any(d > 0):
        # no positive difference: the observed rank sum of the positives is 0, the least any
        # sign flip gives, so the exact p is 1. Said without scipy, whose test falls back to a
        # permutation test over 2^n sign flips in a Python loop for n <= 13 with ties (every
        # unchanged head's JSD - floor is tied): minutes over SmolLM2's 270 heads
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(wilcoxon(d, zero_method="wilcox", alternative=alternative).pvalue)


def _ci(d: np.ndarray, n_boot: int, confidence: float, seed: int) -> tuple:
    """``(mean, low, high, n)`` per column of ``d [E, K]``, NaN rows of a column dropped."""
    E, K = d.shape
    mean, low, high = np.full(K, np.nan), np.full(K, np.nan), np.full(K, np.nan)
    n = (~np.isnan(d)).sum(0)
    full = n == E
    if full.any() and E > 0:
        mean[full] = d[:, full].mean(0)
        lo, hi = bootstrap_mean_ci(d[:, full].T, n_boot=n_boot, confidence=confidence, seed=seed)
        low[full], high[full] = lo, hi
    for k in np.nonzero(~full & (n > 0))[0]:  # columns with missing examples, one by one
        col = d[~np.isnan(d[:, k]), k]
        mean[k] = col.mean()
        lo, hi = bootstrap_mean_ci(col, n_boot=n_boot, confidence=confidence, seed=seed)
        low[k], high[k] = float(lo), float(hi)
    return mean, low, high, n


def paired_change(a: ArrayLike, b: ArrayLike, n_boot: int = 1000, confidence: float = 0.95, seed: int = 0) -> dict:
    """The change ``b − a`` per column of two ``[examples, K]`` arrays, paired by example.

    Returns:
        ``{"a", "b", "change", "ci_low", "ci_high", "p", "n"}``, each ``[K]`` (means over
        the examples where both are defined; ``p`` two-sided signed-rank).

    Raises:
        InputError: the arrays differ in shape.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise InputError(f"paired values must be [examples, K] of one shape, got {a.shape} and {b.shape}")
    d = b - a
    both = ~np.isnan(d)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean_a = np.nanmean(np.where(both, a, np.nan), 0)
        mean_b = np.nanmean(np.where(both, b, np.nan), 0)
    change, low, high, n = _ci(d, n_boot, confidence, seed)
    p = np.array([_signed_rank_p(d[:, k], "two-sided") for k in range(d.shape[1])])
    return {"a": mean_a, "b": mean_b, "change": change, "ci_low": low, "ci_high": high, "p": p, "n": n}


def divergence_change(d: ArrayLike, floor: float, n_boot: int = 1000, confidence: float = 0.95, seed: int = 0) -> dict:
    """A divergence per example ``[examples, K]`` (≥ 0; 0 for the same weights) as a
    change: its mean with the bootstrap interval, ``p`` one-sided that it exceeds ``floor``."""
    d = np.asarray(d, dtype=np.float64)
    mean, low, high, n = _ci(d, n_boot, confidence, seed)
    p = np.array([_signed_rank_p(d[:, k] - floor, "greater") for k in range(d.shape[1])])
    zero = np.zeros(d.shape[1])
    return {"a": zero, "b": mean, "change": mean, "ci_low": low, "ci_high": high, "p": p, "n": n}


def head_changes(
    values_a: Mapping[str, np.ndarray],
    values_b: Mapping[str, np.ndarray],
    n_heads: int,
    floors: Mapping[str, float],
    *,
    divergences: Optional[Mapping[str, np.ndarray]] = None,
    layers: Sequence[int] | None = None,
    q: float = 0.05,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """The tidy table of every measure's change per head between checkpoints A and B.

    Args:
        values_a, values_b: measure -> per-example values ``[examples, L·H]`` of each
            checkpoint on the same examples (the same keys).
        n_heads: heads per layer (``H``).
        floors: measure -> the floor its ``|change|`` must reach to be flagged.
        divergences: measure -> ``[examples, L·H]`` divergences of A from B (``jsd``).
        layers: the model layer of each block of ``H`` columns (default ``0..L−1``).
        q: the false discovery rate, held across the heads of each measure.

    Returns:
        :data:`CHANGE_COLUMNS`: one row per measure and head (``a``, ``b``: the means of
        each checkpoint; ``change = b − a``; the interval; ``p``; ``n`` paired examples;
        ``significant``: rejected by Benjamini–Hochberg; ``flagged``: significant and
        ``|change| ≥ floor``).

    Raises:
        InputError: the checkpoints' measures differ, a measure has no floor, or ``q``
            is outside (0, 1).
    """
    if set(values_a) != set(values_b):
        raise InputError(f"the checkpoints were measured differently: {sorted(values_a)} vs {sorted(values_b)}")
    blocks = []
    tests = [(name, paired_change(values_a[name], values_b[name], n_boot, confidence, seed)) for name in values_a]
    for name, d in (divergences or {}).items():
        if name not in floors:
            raise InputError(f"no floor for the divergence {name!r}")
        tests.append((name, divergence_change(d, floors[name], n_boot, confidence, seed)))
    for name, res in tests:
        if name not in floors:
            raise InputError(f"no floor for the measure {name!r}; known: {', '.join(floors)}")
        K = len(res["change"])
        if K % n_heads:
            raise InputError(f"{K} head columns for {n_heads} heads per layer")
        L = K // n_heads
        layer_ids = np.asarray(layers if layers is not None else range(L))
        significant = benjamini_hochberg(res["p"], q=q)
        frame = pd.DataFrame(
            {
                "measure": name,
                "layer": np.repeat(layer_ids, n_heads),
                "head": np.tile(np.arange(n_heads), L),
                **{k: res[k] for k in ("a", "b", "change", "ci_low", "ci_high", "p", "n")},
                "floor": float(floors[name]),
                "significant": significant,
            }
        )
        frame["flagged"] = frame["significant"] & (frame["change"].abs() >= frame["floor"])
        blocks.append(frame)
    return pd.concat(blocks, ignore_index=True)[CHANGE_COLUMNS]
