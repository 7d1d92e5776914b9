"""Which examples to explain: a sample drawn across the corpus, stratified by length.

The first ``n`` rows of a corpus are whatever its file happens to start with (a treebank's
first document, a log's first hour); attributions on them speak for that part only, and
a sentence's length changes both its attributions and how easily a Kendall τ reaches
significance. :func:`stratified_sample` splits the examples into equal-count length
strata (quantile bins of the token length) and draws from every stratum in proportion to
its size (proportionate stratified sampling, Cochran 1977, ch. 5), so short and long
sentences are explained in the share the corpus has them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from probe.errors import InputError

__all__ = ["N_STRATA", "length_strata", "stratified_sample"]

#: length strata of the explained sample (each an equal share of the corpus by length rank)
N_STRATA = 8


def length_strata(lengths: Any, n_strata: int) -> np.ndarray:
    """``int [m]``: each example's length stratum, ``0`` (shortest) … ``n_strata − 1``.

    Examples are ranked by length (ties in index order, so the strata are deterministic)
    and the ranks cut into ``n_strata`` bins of equal count (``⌊rank · n_strata / m⌋``):
    quantile bins that stay equal-sized when many examples share a length.

    Raises:
        InputError: no lengths, or ``n_strata < 1``.
    """
    ln = np.asarray(lengths, dtype=np.int64)
    if ln.ndim != 1 or not ln.size:
        raise InputError("no examples to sample from: give a corpus with at least one example")
    if n_strata < 1:
        raise InputError(f"the number of length strata must be ≥ 1, got {n_strata}")
    m = ln.size
    rank = np.empty(m, dtype=np.int64)
    rank[np.lexsort((np.arange(m), ln))] = np.arange(m)
    return rank * min(n_strata, m) // m


def stratified_sample(lengths: Any, n: int, seed: int = 0, n_strata: int = N_STRATA) -> np.ndarray:
    """``n`` example indices drawn across the corpus, stratified by length (sorted, ``int [n]``).

    Args:
        lengths: ``[m]`` token length of each example.
        n: how many to draw; ``n ≥ m`` returns every index.
        seed: the draw's seed (the same seed and lengths give the same indices).
        n_strata: length strata (:func:`length_strata`); fewer when ``n`` is smaller, so
            each stratum still gets an example.

    Each stratum ``s`` of size ``m_s`` gets ``n · m_s / m`` examples rounded by largest
    remainder (Hamilton's method), drawn without replacement; every stratum gets at least
    one because ``n ≥`` the number of strata.

    Raises:
        InputError: ``n < 1``, no lengths, ``n_strata < 1``.
    """
    if n < 1:
        raise InputError(f"the number of examples to explain must be ≥ 1, got {n}")
    m = len(lengths)
    strata = length_strata(lengths, min(n_strata, n, max(m, 1)))
    if n >= m:
        return np.arange(m)
    k = int(strata.max()) + 1
    sizes = np.bincount(strata, minlength=k)
    quota = n * sizes / m
    take = np.floor(quota).astype(np.int64)
    extra = n - int(take.sum())
    take[np.argsort(-(quota - take), kind="stable")[:extra]] += 1
    rng = np.random.default_rng(seed)
    picked = [rng.choice(np.flatnonzero(strata == s), size=int(take[s]), replace=False) for s in range(k)]
    return np.sort(np.concatenate(picked))
