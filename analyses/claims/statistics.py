"""The tests behind the claims: Benjamini–Hochberg, a paired one-sided test against a null,
percentile bootstrap intervals, a Wilson interval for held-out accuracy."""

from __future__ import annotations

from typing import Any

import functools

import math

import numpy as np

from probe.analyses.common.bootstrap import bootstrap_mean_ci
from probe.errors import InputError

__all__ = [
    "benjamini_hochberg",
    "paired_greater",
    "floor_test",
    "detectable_effect",
    "detectable_from_se",
    "detectable_share",
    "examples_for_power",
    "mean_ci",
    "se_from_interval",
    "wilson_interval",
    "spearman",
]


def benjamini_hochberg(p_values: Any, q: float = 0.05) -> np.ndarray:
    """Which hypotheses the Benjamini–Hochberg (1995) step-up procedure rejects at FDR ``q``.

    The largest ``k`` with ``p_(k) ≤ k·q/m`` (``m`` tests, NaN p-values not counted);
    every hypothesis with ``p ≤ p_(k)`` is rejected.

    Returns:
        bool ``[m]`` (NaN → False).

    Raises:
        ValueError: ``q`` outside (0, 1).
    """
    if not 0 < q < 1:
        raise InputError(f"the false discovery rate must be in (0, 1), got {q}")
    p = np.asarray(p_values, dtype=np.float64)
    ok = ~np.isnan(p)
    m = int(ok.sum())
    out = np.zeros(p.shape, dtype=bool)
    if m == 0:
        return out
    ranked = np.sort(p[ok])
    below = np.nonzero(ranked <= q * np.arange(1, m + 1) / m)[0]
    if len(below):
        out[ok] = p[ok] <= ranked[below[-1]]
    return out


def paired_greater(effect: Any, null: Any) -> float:
    """One-sided p-value that ``effect`` exceeds ``null`` per example (Wilcoxon 1945
    signed-rank on the differences; exact for small ``n``). ``NaN`` for fewer than two
    examples; 1.0 when every difference is 0."""
    from scipy.stats import wilcoxon

    d = np.asarray(effect, dtype=np.float64) - np.asarray(null, dtype=np.float64)
    if len(d) < 2:
        return float("nan")
    if not np.any(d != 0):
        return 1.0
    return float(wilcoxon(d, alternative="greater", zero_method="zsplit").pvalue)


def floor_test(harm: Any, floor: float) -> float:
    """One-sided p-value that the harm per example exceeds ``floor`` (Wilcoxon 1945
    signed-rank test of ``harm − floor``; NaN for fewer than two examples)."""
    h = np.asarray(harm, dtype=np.float64)
    return paired_greater(h, np.full_like(h, float(floor)))


def detectable_effect(values: Any, floor: float = 0.0, q: float = 0.05, power: float = 0.8) -> float:
    """The smallest mean effect a sample like ``values`` could have detected above ``floor``:
    ``floor + (z_{1−q} + z_{power}) · sd / √n`` (one-sided test at level ``q``, the most
    lenient level Benjamini–Hochberg can give one test; Cohen 1988's normal approximation).
    NaN for fewer than two values."""
    from scipy.stats import norm

    v = np.asarray(values, dtype=np.float64)
    if v.size < 2:
        return float("nan")
    return float(floor + (norm.ppf(1 - q) + norm.ppf(power)) * v.std(ddof=1) / np.sqrt(v.size))


def detectable_from_se(se: float, floor: float = 0.0, q: Any = 0.05, power: float = 0.8) -> float:
    """The smallest true value an estimate with standard error ``se`` would show above
    ``floor`` with probability ``power``: ``floor + (z_{1−q} + z_{power}) · se`` for a one-sided
    test at level ``q``; ``q=None`` for a rule that compares the point estimate with the floor
    and tests nothing (``floor + z_{power} · se``). NaN for a NaN or negative ``se``."""
    from scipy.stats import norm

    if not se >= 0:
        return float("nan")
    z = (norm.ppf(1 - q) if q is not None else 0.0) + norm.ppf(power)
    return float(floor + z * se)


def examples_for_power(sd: float, margin: float, power: float = 0.8, q: Any = None) -> int:
    """The fewest examples at which a mean of per-example values with spread ``sd`` resolves
    ``margin``: ``⌈((z_{1−q} + z_{power}) · sd / margin)²⌉`` (Cohen 1988's sample size for a
    one-sided test at level ``q``; ``q=None`` for a rule that compares the point estimate
    with a bar and tests nothing, ``⌈(z_{power} · sd / margin)²⌉``). The inverse of
    :func:`detectable_from_se` with ``se = sd / √n``; at least 1.

    Raises:
        InputError: ``margin ≤ 0``, ``sd < 0`` (or NaN), ``power`` or ``q`` outside (0, 1).
    """
    from scipy.stats import norm

    if not margin > 0:
        raise InputError(f"the effect to resolve must be > 0, got {margin}")
    if not sd >= 0:
        raise InputError(f"the per-example spread must be ≥ 0, got {sd}")
    if not 0 < power < 1 or (q is not None and not 0 < q < 1):
        raise InputError(f"power and level must be in (0, 1), got power {power}, level {q}")
    z = (norm.ppf(1 - q) if q is not None else 0.0) + norm.ppf(power)
    return max(1, math.ceil((z * sd / margin) ** 2 - 1e-9))


def se_from_interval(low: float, high: float, confidence: float = 0.95) -> float:
    """The standard error a two-sided normal interval ``[low, high]`` at ``confidence`` implies."""
    from scipy.stats import norm

    return float((high - low) / (2 * norm.ppf(0.5 + confidence / 2)))


def detectable_share(n: int, share: float = 0.5, power: float = 0.8) -> float:
    """The smallest per-example rate ``p`` at which ``n`` independent examples reach an observed
    share ``k/n ≥ share`` with probability ``power`` (binomial, exact; bisection to 1e-6). NaN for
    ``n < 1``; it falls toward ``share`` as ``n`` grows."""
    from scipy.stats import binom

    if n < 1:
        return float("nan")
    k = math.ceil(share * n - 1e-12)  # fewest examples that give the share
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if binom.sf(k - 1, n, mid) >= power:
            hi = mid
        else:
            lo = mid
    return float(hi)


def mean_ci(values: Any, n_boot: int = 1000, confidence: float = 0.95, seed: int = 0) -> tuple:
    """``(mean, low, high)``: the mean over examples with its percentile bootstrap interval.

    A pure function of its arguments: the necessity, weights and removal tables ask for
    the same heads' intervals, so results are memoised on the values' bytes."""
    v = np.ascontiguousarray(values, dtype=np.float64)
    if v.size == 0:
        return float("nan"), float("nan"), float("nan")
    return _mean_ci(v.tobytes(), v.shape, n_boot, confidence, seed)


@functools.lru_cache(maxsize=4096)
def _mean_ci(data: bytes, shape: tuple, n_boot: int, confidence: float, seed: int) -> tuple:
    v = np.frombuffer(data, dtype=np.float64).reshape(shape)
    low, high = bootstrap_mean_ci(v, n_boot=n_boot, confidence=confidence, seed=seed)
    return float(v.mean()), float(low), float(high)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple:
    """Wilson (1927) score interval of a proportion ``successes / n``.

    Raises:
        ValueError: ``n < 1`` or ``successes`` outside ``[0, n]``.
    """
    from scipy.stats import norm

    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"a proportion needs 0 ≤ successes ≤ n and n ≥ 1, got {successes}/{n}")
    z = float(norm.ppf(0.5 + confidence / 2))
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def spearman(a: Any, b: Any) -> float:
    """Spearman's rank correlation of two equal-length vectors (NaN when undefined)."""
    from scipy.stats import spearmanr

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    ok = ~(np.isnan(a) | np.isnan(b))
    if ok.sum() < 3 or np.ptp(a[ok]) == 0 or np.ptp(b[ok]) == 0:
        return float("nan")
    return float(spearmanr(a[ok], b[ok]).statistic)
