"""Kendall's τ-b and Spearman's ρ of every pair of score rows at once, with their p-values.

The agreement test (:mod:`.agreement`) correlates each attention score of an example (one
row per head, rollout, flow) with each attribution (one row per method) over the
example's words: ``Ka × Kb`` pairs of the same ``w`` words. :func:`rank_tests` computes
them all from two sign tensors and a rank matrix product instead of one scipy call per
pair (2 × 36 µs … 300 µs each; 11 s of the report on EWT dev), with scipy's own
definitions, so the numbers are scipy's (tested to 1e-9):

* τ-b (Kendall 1945): ``(C − D) / √((P − T_x)(P − T_y))`` over the ``P = w(w−1)/2`` pairs,
  ``T`` the pairs tied in one row; its two-sided p-value exact (the distribution of
  inversions, Kendall 1970 *Rank Correlation Methods* ch. 4) without ties when ``w ≤ 33``
  or ``min(D, P − D) ≤ 1``, otherwise the normal approximation with the tie-corrected
  variance (Kendall 1970, eq. 4.3) — ``scipy.stats.kendalltau``'s ``method="auto"``;
* ρ (Spearman 1904): Pearson's r of mid-ranks; two-sided p from Student's t with
  ``w − 2`` degrees of freedom — ``scipy.stats.spearmanr``.

A constant row, or one with a non-finite value, gives NaN for every test it is in.

Shapes: ``a [Ka, w]``, ``b [Kb, w]`` -> four ``[Ka, Kb]`` arrays.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np

__all__ = ["RankTests", "rank_tests", "kendall_exact_p"]

#: the most words for which scipy's ``auto`` takes the exact τ p-value without ties
EXACT_WORDS = 33


class RankTests(NamedTuple):
    """``[Ka, Kb]`` each: Kendall's τ-b and its two-sided p, Spearman's ρ and its two-sided p."""

    tau: np.ndarray
    tau_p: np.ndarray
    rho: np.ndarray
    rho_p: np.ndarray


@lru_cache(maxsize=None)
def _inversions(n: int) -> np.ndarray:
    """``[n(n−1)/2 + 1]``: how many permutations of ``n`` items have ``k`` inversions (Mahonian
    numbers, as floats; the recursion scipy uses)."""
    tot = n * (n - 1) // 2
    new = np.zeros(tot + 1)
    new[0:2] = 1.0
    for j in range(3, n + 1):
        new = np.cumsum(new)
        new[j:] -= new[: tot + 1 - j].copy()
    return new


def kendall_exact_p(n: int, c: int) -> float:
    """Two-sided exact p-value of Kendall's test for ``n`` untied items with ``c``
    concordant (or discordant) pairs: ``2 P(inversions ≤ min(c, P − c))`` (Kendall 1970), the
    cases scipy's ``_kendall_p_exact`` takes apart taken the same way."""
    tot = n * (n - 1) // 2
    c = int(min(c, tot - c))
    if n <= 2:
        return 1.0
    if c == 0:
        return min(1.0, 2.0 / math.factorial(n)) if n < 171 else 0.0
    if c == 1:
        return min(1.0, 2.0 / math.factorial(n - 1)) if n < 172 else 0.0
    if 4 * c == n * (n - 1):
        return 1.0
    if n < 171:
        return float(np.clip(2.0 * np.sum(_inversions(n)[: c + 1]) / math.factorial(n), 0.0, 1.0))
    new = np.zeros(c + 1)  # scipy's scaled recursion (n! overflows a float)
    new[0:2] = 1.0
    for j in range(3, n + 1):
        new = np.cumsum(new) / j
        if j <= c:
            new[j:] -= new[: c + 1 - j].copy()
    return float(np.clip(np.sum(new), 0.0, 1.0))


def _ties(row: np.ndarray) -> tuple:
    """``(pairs tied, Σ t(t−1)(t−2), Σ t(t−1)(2t+5))`` over the tie groups ``t`` of one row."""
    _, cnt = np.unique(row, return_counts=True)
    cnt = cnt[cnt > 1].astype(np.float64)
    return (
        float((cnt * (cnt - 1) / 2).sum()),
        float((cnt * (cnt - 1) * (cnt - 2)).sum()),
        float((cnt * (cnt - 1) * (2 * cnt + 5)).sum()),
    )


def _mid_ranks(x: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(x, axis=-1)


def rank_tests(a: np.ndarray, b: np.ndarray) -> RankTests:
    """Kendall's τ-b and Spearman's ρ of every row of ``a [Ka, w]`` with every row of
    ``b [Kb, w]``, two-sided p-values as scipy's (module docstring).

    Raises:
        InputError: rows of different lengths.
    """
    from scipy.stats import norm, t as student_t

    from probe.errors import InputError

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise InputError(f"rank tests need [Ka, w] and [Kb, w] rows of the same words; got {a.shape} and {b.shape}")
    w = a.shape[1]
    tot = w * (w - 1) // 2
    shape = (len(a), len(b))
    nan = np.full(shape, np.nan)
    if w < 2:
        return RankTests(nan, nan.copy(), nan.copy(), nan.copy())
    ok_a = np.isfinite(a).all(1) & (np.ptp(np.nan_to_num(a), axis=1) > 0)
    ok_b = np.isfinite(b).all(1) & (np.ptp(np.nan_to_num(b), axis=1) > 0)
    a, b = np.nan_to_num(a), np.nan_to_num(b)
    iu = np.triu_indices(w, 1)
    sa = np.sign(a[:, iu[0]] - a[:, iu[1]])  # [Ka, P]: each pair's order in each row
    sb = np.sign(b[:, iu[0]] - b[:, iu[1]])
    s = sa @ sb.T  # C − D, exact in float64 (|s| ≤ P)
    joint = (sa == 0).astype(np.float64) @ (sb == 0).astype(np.float64).T  # pairs tied in both
    ta = np.array([_ties(r) for r in a]).reshape(len(a), 3)
    tb = np.array([_ties(r) for r in b]).reshape(len(b), 3)
    xt, yt = ta[:, 0][:, None], tb[:, 0][None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        tau = np.clip(s / np.sqrt(tot - xt) / np.sqrt(tot - yt), -1.0, 1.0)
        dis = (tot - xt - yt + joint - s) / 2.0
        m = w * (w - 1.0)
        var = (
            (m * (2 * w + 5) - ta[:, 2][:, None] - tb[:, 2][None, :]) / 18
            + (2 * xt * yt) / m
            + ta[:, 1][:, None] * tb[:, 1][None, :] / (9 * m * (w - 2))
        )
        p_asym = 2 * norm.sf(np.abs(s / np.sqrt(var)))
    untied = (xt == 0) & (yt == 0)
    exact = untied & ((w <= EXACT_WORDS) | (np.minimum(dis, tot - dis) <= 1))
    tau_p = np.where(exact, np.nan, np.minimum(p_asym, 1.0))
    for i, j in zip(*np.nonzero(exact & ok_a[:, None] & ok_b[None, :])):
        tau_p[i, j] = kendall_exact_p(w, int(round(tot - dis[i, j])))
    ra, rb = _mid_ranks(a), _mid_ranks(b)
    ra = ra - ra.mean(1, keepdims=True)
    rb = rb - rb.mean(1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = (ra @ rb.T) / np.sqrt((ra * ra).sum(1)[:, None] * (rb * rb).sum(1)[None, :])
        rho = np.clip(rho, -1.0, 1.0)
        dof = w - 2
        t = rho * np.sqrt((dof / ((rho + 1.0) * (1.0 - rho))).clip(0))
        rho_p = np.minimum(2 * student_t.sf(np.abs(t), dof), 1.0) if dof > 0 else np.full(shape, np.nan)
    ok = ok_a[:, None] & ok_b[None, :]
    return RankTests(*(np.where(ok, v, np.nan) for v in (tau, tau_p, rho, rho_p)))
