"""Head clustering by behaviour, as in Clark et al. (2019), "What Does BERT Look At?", §6.

The distance between heads ``h`` and ``g`` is the Jensen–Shannon divergence between
their attention distributions at the same query token, averaged over every
(non-special) query token of the corpus — Clark et al.'s sum over tokens divided by
the number of tokens, which only rescales it. Base-2 logarithms, so values lie in
``[0, 1]``. The matrix is embedded in 2-D with metric multidimensional scaling
(scikit-learn ``MDS`` on the precomputed dissimilarities) and cut into clusters by
average-linkage agglomerative clustering.

Per example every pair of heads is compared at once: with ``P`` the ``[LH, n, n]``
stack of head maps, ``JS(P_h, P_g) = H((P_h + P_g)/2) − (H(P_h) + H(P_g))/2`` is
evaluated in chunks of heads (memory ``chunk × LH × n × n``) for the pairs ``g ≥ h``
only (the matrix is symmetric), never per head pair in Python.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Sequence, Sized
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Optional

import numpy as np
import pandas as pd
import torch

from probe.errors import InputError, NotApplicable

if TYPE_CHECKING:
    from numpy.typing import ArrayLike
    from probe.maps import AttentionMaps
    from probe.runs.streaming import BatchMeta

log = logging.getLogger(__name__)

__all__ = [
    "HeadClusters",
    "HeadDivergence",
    "HeadDivergenceAccumulator",
    "KeptDivergence",
    "head_divergence",
    "embed_heads",
    "cluster_heads",
    "clusters_from",
    "head_clusters",
]

_CHUNK_ELEMENTS = 8_000_000


@dataclass(frozen=True)
class HeadDivergence:
    """Mean Jensen–Shannon divergence between heads: ``matrix[LH, LH]`` (row
    ``layer_index * n_heads + head``), over ``n_rows`` query tokens of ``n_examples``."""

    matrix: np.ndarray
    layers: tuple
    n_heads: int
    n_examples: int
    n_rows: int


class HeadDivergenceAccumulator:
    """Streams examples into the pairwise JS sums; ``update(maps)`` then ``result()``.

    Memory: the ``[LH, LH]`` sums plus one chunk of ``chunk × LH × rows × keys``.
    Examples past ``max_examples`` are ignored (``update`` returns False).
    """

    def __init__(self, max_examples: Optional[int] = None):
        if max_examples is not None and max_examples < 1:
            raise InputError(f"max_examples must be ≥ 1, got {max_examples}")
        self.max_examples = max_examples
        self.total: Optional[torch.Tensor] = None  # [L·h, L·h] summed divergences, once the first map is seen
        self.rows, self.n_examples = 0, 0
        self.layers: Optional[tuple] = None
        self.n_heads: Optional[int] = None

    @property
    def full(self) -> bool:
        return self.max_examples is not None and self.n_examples >= self.max_examples

    def update(self, maps: AttentionMaps) -> bool:
        """Add one example; False (and nothing done) once ``max_examples`` were added.

        Raises:
            ValueError: cross-attention, or other layers/heads than the first example.
        """
        if self.full:
            return False
        if maps.kind == "cross":
            raise NotApplicable("head clustering is defined for self- and causal attention; got cross-attention")
        a = maps.attentions.float()
        L, h, n, _ = a.shape
        if self.layers is None:
            self.layers, self.n_heads = tuple(maps.layers), h
            self.total = torch.zeros(L * h, L * h, dtype=torch.float64)
        elif tuple(maps.layers) != self.layers or h != self.n_heads:
            raise InputError(
                f"example {self.n_examples} has layers {list(maps.layers)} × {h} heads; earlier "
                f"ones had {list(self.layers)} × {self.n_heads}: analyse one model's capture at a time"
            )
        self.n_examples += 1
        q = ~maps.special_mask
        if not q.any():
            return True
        p = a[:, :, q].reshape(L * h, int(q.sum()), n)  # [LH, rows, keys]
        plogp = torch.special.xlogy(p, p).sum(-1)  # [LH, rows]
        lh = L * h
        ln2 = math.log(2.0)
        total = self.total
        assert total is not None  # made with self.layers above
        chunk = max(1, _CHUNK_ELEMENTS // max(1, lh * p.shape[1] * n))
        for s in range(0, lh, chunk):
            # only pairs (h, g ≥ s): the matrix is symmetric, the lower part is mirrored
            m = (p[s : s + chunk, None] + p[None, s:]).clamp_(min=1e-30)  # p + q, [c, LH-s, rows, keys]
            s_log = (m * m.log()).sum(-1)  # Σ (p+q) ln(p+q)
            # JS = ½Σp ln p + ½Σq ln q − Σ m ln m, with m = (p+q)/2 and Σ(p+q) = 2
            js = 0.5 * (plogp[s : s + chunk, None] + plogp[None, s:]) - 0.5 * s_log + ln2
            total[s : s + chunk, s:] += js.clamp(min=0).sum(-1).double() / ln2
        self.rows += p.shape[1]
        return True

    def merge(self, other: "HeadDivergenceAccumulator") -> "HeadDivergenceAccumulator":
        """Add ``other``'s sums (examples of the same model) into this one and return it."""
        if other.layers is None:
            return self
        if self.layers is None:
            self.layers, self.n_heads, self.total = other.layers, other.n_heads, other.total
        elif (other.layers, other.n_heads) != (self.layers, self.n_heads):
            raise InputError("cannot merge head divergences of another model's capture")
        else:
            assert self.total is not None and other.total is not None  # set with the layers
            self.total = self.total + other.total
        self.rows += other.rows
        self.n_examples += other.n_examples
        return self

    def result(self) -> HeadDivergence:
        """The symmetric, zero-diagonal mean divergence. Raises ValueError without examples."""
        if self.layers is None:
            raise InputError("no examples: give at least one captured example")
        assert self.total is not None and self.n_heads is not None  # set by the first example (checked above)
        upper = np.triu((self.total / max(self.rows, 1)).numpy())
        matrix = upper + np.triu(upper, 1).T
        np.fill_diagonal(matrix, 0.0)
        return HeadDivergence(
            matrix=matrix, layers=self.layers, n_heads=self.n_heads, n_examples=self.n_examples, n_rows=self.rows
        )


class KeptDivergence:
    """The head × head divergences of the examples whose corpus index is in ``keep``, as
    a streaming accumulator (:mod:`probe.analyses.common.accumulate`): a kept example is
    counted once all its layers have passed (layer by layer), or at once
    (``update_examples``); the blocks' sums add up. ``result()`` is the filled
    :class:`HeadDivergenceAccumulator`. Memory: the ``[LH, LH]`` sums and the layers of
    the kept examples of the batch in flight, not every kept example's maps."""

    def __init__(self, keep: Iterable[int]):
        self.keep = frozenset(int(i) for i in keep)
        self.divergence = HeadDivergenceAccumulator()
        self.pending: dict = {}  # index -> {layer: single-layer maps} until its last layer

    def update(self, layer: int, maps: Sequence[AttentionMaps], meta: BatchMeta) -> None:
        """Hold one layer of the batch's kept examples (``[1, head, n, n]`` each); an example
        is added once its last layer arrived."""
        from probe.runs.streaming import join_layers

        for index, m in zip(meta.indices, maps):
            if int(index) not in self.keep:
                continue
            parts = self.pending.setdefault(int(index), {})
            parts[layer] = m
            if len(parts) == len(meta.layers):
                del self.pending[int(index)]
                self.divergence.update(join_layers([[parts[x]] for x in meta.layers], meta.layers)[0])

    def update_examples(self, maps: Sequence[AttentionMaps], meta: BatchMeta) -> None:
        """Add the kept ones of whole examples (``[layer, head, n, n]`` each)."""
        for index, m in zip(meta.indices, maps):
            if int(index) in self.keep:
                self.divergence.update(m)

    def merge(self, other: "KeptDivergence") -> "KeptDivergence":
        self.divergence.merge(other.divergence)
        return self

    def result(self) -> HeadDivergenceAccumulator:
        return self.divergence


def head_divergence(source: Iterable, max_examples: Optional[int] = None, progress: bool = False) -> HeadDivergence:
    """Pairwise mean JS divergence between all captured heads over a corpus.

    Args:
        source: a :class:`probe.store.directory.Store` or an iterable of ``AttentionMaps``
            (self or causal attention), streamed; reading stops after ``max_examples``.
        max_examples: use only the first N examples (the cost is ``(L·H)² · n²`` per
            example).
        progress: tqdm bar.

    Returns:
        :class:`HeadDivergence`; its matrix is symmetric with a zero diagonal.

    Raises:
        ValueError: no examples, cross-attention, mixed captures, ``max_examples < 1``.
    """
    acc = HeadDivergenceAccumulator(max_examples)
    it = source
    if progress:
        from tqdm.auto import tqdm

        total = len(source) if isinstance(source, Sized) else None
        if total is not None and max_examples:
            total = min(total, max_examples)
        it = tqdm(source, total=total, unit="ex", desc="head divergence")
    for maps in it:
        if not acc.update(maps):
            break
    return acc.result()


def clusters_from(div: HeadDivergence, n_clusters: int = 8, seed: int = 0) -> "HeadClusters":
    """MDS layout and agglomerative clusters of a :class:`HeadDivergence`."""
    return HeadClusters(
        divergence=div, xy=embed_heads(div.matrix, seed=seed), cluster=cluster_heads(div.matrix, n_clusters=n_clusters)
    )


def embed_heads(matrix: np.ndarray, seed: int = 0) -> np.ndarray:
    """2-D metric MDS of a precomputed dissimilarity matrix ``[N, N]`` → ``[N, 2]``.

    Raises:
        ValueError: not a square symmetric non-negative matrix.
    """
    d = _check_matrix(matrix)
    if len(d) < 3:
        return np.column_stack([np.arange(len(d), dtype=float), np.zeros(len(d))])
    from sklearn.manifold import MDS

    params = inspect.signature(MDS).parameters
    kw: dict[str, object] = dict(n_components=2, random_state=seed, n_init=1)
    if "metric_mds" in params:  # scikit-learn ≥ 1.8: classical-MDS start, deterministic
        kw.update(metric="precomputed", metric_mds=True, init="classical_mds")
    else:
        kw.update(dissimilarity="precomputed", n_init=4)
    return MDS(**kw).fit_transform(d)


def cluster_heads(matrix: np.ndarray, n_clusters: int = 8) -> np.ndarray:
    """Average-linkage agglomerative clusters on a precomputed distance matrix.

    Returns ``[N]`` integer labels (0-based; with ``N ≤ n_clusters`` every head is its
    own cluster).

    Raises:
        ValueError: bad matrix, ``n_clusters < 1``.
    """
    d = _check_matrix(matrix)
    if n_clusters < 1:
        raise InputError(f"n_clusters must be ≥ 1, got {n_clusters}")
    if len(d) <= n_clusters:
        return np.arange(len(d))
    from sklearn.cluster import AgglomerativeClustering

    return AgglomerativeClustering(n_clusters=n_clusters, metric="precomputed", linkage="average").fit_predict(d)


def _check_matrix(matrix: ArrayLike) -> np.ndarray:
    d = np.asarray(matrix, dtype=float)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise InputError(f"expected a square distance matrix, got shape {d.shape}")
    if not np.isfinite(d).all() or (d < -1e-9).any() or not np.allclose(d, d.T, atol=1e-8):
        raise InputError("distance matrix must be finite, non-negative and symmetric")
    return np.clip(d, 0, None)


@dataclass(frozen=True)
class HeadClusters:
    """Heads laid out by behaviour: divergence matrix, 2-D MDS coordinates, clusters."""

    divergence: HeadDivergence
    xy: np.ndarray
    cluster: np.ndarray

    def to_frame(self) -> pd.DataFrame:
        """``layer, head, mds_x, mds_y, cluster``, one row per head."""
        d = self.divergence
        H = d.n_heads
        return pd.DataFrame(
            {
                "layer": np.repeat(np.array(d.layers), H),
                "head": np.tile(np.arange(H), len(d.layers)),
                "mds_x": self.xy[:, 0],
                "mds_y": self.xy[:, 1],
                "cluster": self.cluster.astype(int),
            }
        )

    def distances_frame(self) -> pd.DataFrame:
        """The divergence matrix as a square table labelled ``L<layer>H<head>``."""
        d = self.divergence
        labels = [f"L{layer}H{h}" for layer in d.layers for h in range(d.n_heads)]
        return pd.DataFrame(d.matrix, index=labels, columns=labels)


def head_clusters(
    source: Iterable, n_clusters: int = 8, seed: int = 0, max_examples: Optional[int] = None, progress: bool = False
) -> HeadClusters:
    """Clark et al. (2019) head clustering: JS divergences, MDS layout, clusters.

    See :func:`head_divergence`, :func:`embed_heads`, :func:`cluster_heads`.
    """
    return clusters_from(
        head_divergence(source, max_examples=max_examples, progress=progress), n_clusters=n_clusters, seed=seed
    )
