"""Percentile bootstrap confidence intervals over examples, vectorised (Efron 1979).

All rows of ``values [k, n]`` share the same ``n_boot`` resamples of the ``n``
examples, drawn as multinomial counts ``[n_boot, n]``; the resampled means of every
row are then one matrix product ``values @ countsᵀ / n`` — no Python loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from probe.errors import InputError

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["resample_counts", "bootstrap_mean_ci"]


def resample_counts(n: int, n_boot: int = 1000, seed: int = 0) -> np.ndarray:
    """``[n_boot, n]`` integer counts: how often each example is drawn in each resample.

    Raises:
        ValueError: ``n < 1`` or ``n_boot < 1``.
    """
    if n < 1:
        raise InputError("bootstrap needs at least one example")
    if n_boot < 1:
        raise InputError(f"n_boot must be ≥ 1, got {n_boot}")
    rng = np.random.default_rng(seed)
    return rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot)


def bootstrap_mean_ci(
    values: ArrayLike, n_boot: int = 1000, confidence: float = 0.95, seed: int = 0
) -> tuple[Any, Any]:  # [k] arrays, or floats for 1-d input
    """Confidence interval of the mean over examples, for each row of ``values``.

    Args:
        values: ``[k, n]`` (or ``[n]``) per-example values.
        confidence: the interval's coverage, in (0, 1).

    Returns:
        ``(low, high)``, each ``[k]`` (or scalars for 1-d input); NaN from a single
        example (every resample is that example: a zero-width interval would claim a
        certainty one example cannot give).

    Raises:
        InputError: confidence outside (0, 1), empty input.
    """
    if not 0 < confidence < 1:
        raise InputError(f"confidence must be in (0, 1), got {confidence}")
    v = np.asarray(values, dtype=np.float64)
    flat = v.ndim == 1
    v = np.atleast_2d(v)
    if v.shape[1] == 1:
        nan = np.full(v.shape[0], np.nan)
        return (nan[0], nan[0]) if flat else (nan, nan.copy())
    counts = resample_counts(v.shape[1], n_boot, seed)
    means = v @ counts.T / v.shape[1]  # [k, n_boot]
    alpha = (1 - confidence) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha], axis=1)
    return (low[0], high[0]) if flat else (low, high)
