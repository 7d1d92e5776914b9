"""The objective of a sentence encoder: the similarity structure of the corpus.

``similarity-structure`` measures how the similarity structure of the corpus under the
model's own pooling (:mod:`.pooling`) changes: per sentence, ``1 − ρ`` with ``ρ`` the
Spearman rank correlation of its cosine similarities to every other sentence, perturbed vs
clean (both sides perturbed: what a search index rebuilt with the perturbed model would
rank), corrected for the number of others (below; :func:`corrected_row_harm`). Beside it: the share of sentences whose nearest neighbour changes, the ``1 − ρ`` of
all pairwise cosines at once, and the embedding drift ``1 − cos``. Label-free and bounded
(``0 ≤ 1 − ρ ≤ 2``); for search, clustering and STS the ranking of similarities is what
matters (Reimers & Gurevych 2019 report STS as Spearman ρ).

It is an :class:`.objective.Objective` with a sweep face only (a harm needs every
sentence's readout at once, ``corpus_level``). On a random **block** of the corpus
(:func:`block_row_harm`, what the sequential claims take block by block) each sentence's
``1 − ρ`` is over the block's others, corrected for the block's size: Spearman's ``r_s``
over ``k`` pairs drawn from a population has ``E r_s = ((k − 2) ρ_s + 3τ) / (k + 1)``
(Kendall & Gibbons 1990, *Rank Correlation Methods*, ch. 4; a U-statistic, Hoeffding 1948),
so ``((k + 1) r_s − 3τ̂) / (k − 2)`` with Kendall's ``τ̂`` of the same pairs is unbiased
for ``ρ_s``; uncorrected, a block of 64 reads MiniLM's harms 28% above the whole corpus's,
and the 24 sentences of the bundled sample read them 30–60% high. The whole corpus's harm
(:meth:`SimilarityStructure.harm`, what the exhaustive sweep takes) is corrected the same
way, so both paths read the same number on the same sentences.
The block's mean harm comes with its delete-one jackknife variance (Quenouille 1956; Efron
& Stein 1981), which carries the dependence between a block's sentences (each sentence is
in every other's ranking). :class:`NextTokenLoss` (``next-token-loss``)
is the loss of a causal language model, refused on any other model.

Shapes: readouts ``[n, d]`` (rows first); :meth:`SimilarityStructure.harm` -> ``[n]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch

from .metrics import LossMetric, applicable_metrics, has_lm_head, zoo_task
from .objective_base import Objective
from .pooling import Pooling, model_pooling
from probe.errors import NotApplicable

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter
    from probe.inputs.corpus import Corpus
    from numpy.typing import ArrayLike

    from .batch import MetricBatch

__all__ = [
    "applicable_objectives",
    "SimilarityStructure",
    "NextTokenLoss",
    "MIN_SENTENCES",
    "row_rank_harm",
    "corrected_row_harm",
    "TAU_OTHERS",
    "neighbour_changed",
    "pairwise_rank_harm",
    "drift",
    "BlockHarm",
    "block_row_harm",
    "MIN_BLOCK",
]

#: fewest sentences for a similarity structure (a rank correlation over ≥ 3 others)
MIN_SENTENCES = 4


def distinct_sentences(corpus: Any) -> int:
    """How many different texts ``corpus`` holds (the similarity structure of copies of one
    sentence is undefined: every cosine is 1, so no head can change their ranking)."""
    return len(set(getattr(corpus, "texts", corpus)))


#: fewest sentences in a block of :func:`block_row_harm` (its jackknife ranks ``b − 2`` others)
MIN_BLOCK = 8


def _ranks(x: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(x, axis=-1)


def _off_diagonal(c: np.ndarray) -> np.ndarray:
    """``[n, n]`` -> ``[n, n−1]``: each row without its diagonal entry."""
    n = c.shape[0]
    return c[~np.eye(n, dtype=bool)].reshape(n, n - 1)


def _cosines(e: np.ndarray) -> np.ndarray:
    e = e / np.clip(np.linalg.norm(e, axis=-1, keepdims=True), 1e-12, None)
    return e @ e.T


def row_rank_harm(clean: np.ndarray, perturbed: np.ndarray) -> np.ndarray:
    """Per sentence, ``1 − ρ`` of its cosine similarities to the others (Spearman 1904).

    Args: ``clean``, ``perturbed``: embeddings ``[n, d]`` (n ≥ 4). Returns ``[n]``.
    """
    a, b = _ranks(_off_diagonal(_cosines(clean))), _ranks(_off_diagonal(_cosines(perturbed)))
    a = a - a.mean(1, keepdims=True)
    b = b - b.mean(1, keepdims=True)
    den = np.sqrt((a * a).sum(1) * (b * b).sum(1))
    rho = np.where(den > 0, (a * b).sum(1) / np.where(den > 0, den, 1.0), 1.0)
    return 1.0 - rho


#: the most of a row's others whose pairs Kendall's τ̂ of :func:`corrected_row_harm` is taken
#: over (a seeded random subset where there are more: a U-statistic, unbiased either way; its
#: term is ``3τ̂/(k − 2)``, so its noise is a few 10⁻⁴ of a row at ``k = 511`` and averages out)
TAU_OTHERS = 128


def _row_tau(cx: np.ndarray, cy: np.ndarray, seed: int = 0) -> np.ndarray:
    """``[n]`` Kendall's τ-a of each row's ranking of its others, clean ``cx`` vs perturbed
    ``cy`` (cosines ``[n, n]``), over all ``n − 1`` others or :data:`TAU_OTHERS` of them."""
    n = cx.shape[0]
    m = min(n - 1, TAU_OTHERS)
    rng = np.random.default_rng(seed)
    out = np.empty(n)
    step = max(1, 4_000_000 // (m * m))  # rows per chunk (memory)
    for start in range(0, n, step):
        rows = np.arange(start, min(n, start + step))
        draw = rng.random((len(rows), n))
        draw[np.arange(len(rows)), rows] = np.inf  # never the row itself
        others = np.argpartition(draw, m - 1, axis=1)[:, :m] if m < n - 1 else np.argsort(draw, 1)[:, :m]
        x = np.take_along_axis(cx[rows], others, 1)
        y = np.take_along_axis(cy[rows], others, 1)
        sx = np.sign(x[:, :, None] - x[:, None, :]).astype(np.int8)
        sy = np.sign(y[:, :, None] - y[:, None, :]).astype(np.int8)
        out[rows] = (sx * sy).sum((1, 2), dtype=np.int64) / (m * (m - 1.0))
    return out


def corrected_row_harm(clean: np.ndarray, perturbed: np.ndarray) -> np.ndarray:
    """Per sentence, ``1 − ρ̂`` with ``ρ̂ = ((k + 1) r_s − 3τ̂) / (k − 2)`` over its ``k = n − 1``
    others: :func:`row_rank_harm` corrected for the corpus's size (module docstring; the
    sequential path's :func:`block_row_harm` on a whole corpus). On 24 sentences the
    uncorrected ``1 − r_s`` reads MiniLM's head harms 30–60% high; on 2,001, 0.6%.

    Args: ``clean``, ``perturbed``: embeddings ``[n, d]`` (n ≥ 4). Returns ``[n]``.
    """
    k = clean.shape[0] - 1
    rs = 1.0 - row_rank_harm(clean, perturbed)
    tau = _row_tau(_cosines(clean), _cosines(perturbed))
    return 1.0 - ((k + 1.0) * rs - 3.0 * tau) / (k - 2.0)


def neighbour_changed(clean: np.ndarray, perturbed: np.ndarray) -> np.ndarray:
    """``[n]`` 1.0 where a sentence's nearest neighbour (cosine, itself excluded) changes."""
    c0, c1 = _cosines(clean), _cosines(perturbed)
    np.fill_diagonal(c0, -np.inf)
    np.fill_diagonal(c1, -np.inf)
    return (c0.argmax(1) != c1.argmax(1)).astype(np.float64)


def pairwise_rank_harm(clean: np.ndarray, perturbed: np.ndarray) -> float:
    """``1 − ρ`` of all pairwise cosines (upper triangle) of embeddings ``[n, d]``, perturbed vs clean."""
    from scipy.stats import spearmanr

    iu = np.triu_indices(clean.shape[0], 1)
    return float(1.0 - spearmanr(_cosines(clean)[iu], _cosines(perturbed)[iu]).statistic)


def drift(clean: np.ndarray, perturbed: np.ndarray) -> np.ndarray:
    """``[n]`` ``1 − cos`` of each sentence's embedding, perturbed vs clean."""
    num = (clean * perturbed).sum(-1)
    den = np.linalg.norm(clean, axis=-1) * np.linalg.norm(perturbed, axis=-1)
    return 1.0 - num / np.clip(den, 1e-12, None)


@dataclass(frozen=True)
class BlockHarm:
    """The similarity-structure harm of one block of sentences (:func:`block_row_harm`).

    Attributes:
        rows: ``[b]`` each sentence's size-corrected ``1 − ρ`` over the block's others;
        estimate: their mean; variance: the delete-one jackknife variance of ``estimate``.
    """

    rows: np.ndarray
    estimate: float
    variance: float


def _corrected_harm(d2: np.ndarray, concordance: np.ndarray, k: int) -> np.ndarray:
    """``1 − ρ̂`` from ``Σ d²`` of the rank differences and ``Σ sign·sign`` over ordered
    pairs of ``k`` items: ``ρ̂ = ((k + 1) r_s − 3τ) / (k − 2)`` (module docstring)."""
    rs = 1.0 - 6.0 * d2 / (k * (k * k - 1.0))
    tau = concordance / (k * (k - 1.0))
    return 1.0 - ((k + 1.0) * rs - 3.0 * tau) / (k - 2.0)


def block_row_harm(clean: ArrayLike, perturbed: ArrayLike) -> BlockHarm:
    """The similarity-structure harm of a random block of ``b`` sentences, corrected for the
    block's size, with the jackknife variance of its mean (module docstring).

    Each sentence ``i`` ranks the block's ``k = b − 1`` others by cosine, clean and
    perturbed; ``r_s`` (Spearman) and ``τ`` (Kendall's τ-a, ties count 0) of the two
    rankings give ``1 − ρ̂_i``. The jackknife deletes each sentence ``j`` in turn, from the
    rows and from every other row's ranking (``O(b³)`` in numpy, 15 ms at ``b = 64``).

    Args: ``clean``, ``perturbed``: embeddings ``[b, d]``, ``b ≥`` :data:`MIN_BLOCK`.

    Raises:
        InputError: fewer than :data:`MIN_BLOCK` rows, or shapes that differ.
    """
    from probe.errors import InputError

    x, y = np.asarray(clean, np.float64), np.asarray(perturbed, np.float64)
    if x.shape != y.shape or x.ndim != 2 or len(x) < MIN_BLOCK:
        raise InputError(
            f"a block's similarity structure needs two [b, d] readouts of the same shape with b ≥ {MIN_BLOCK}; "
            f"got {x.shape} and {y.shape}"
        )
    cx, cy = _cosines(x), _cosines(y)
    b = len(x)
    eye = np.eye(b, dtype=bool)
    other = ~eye  # [i, a]: a is one of row i's others
    pair = other[:, :, None] & other[:, None, :]  # [i, a, c]: both a and c are others of i
    gx = (cx[:, :, None] > cx[:, None, :]) & pair  # a above c in row i's clean ranking
    gy = (cy[:, :, None] > cy[:, None, :]) & pair
    conc = (gx.astype(np.int8) - gx.transpose(0, 2, 1)) * (gy.astype(np.int8) - gy.transpose(0, 2, 1))
    conc_row = conc.sum((1, 2), dtype=np.float64)  # [i]
    d = np.where(other, gx.sum(2) - gy.sum(2), 0).astype(np.float64)  # [i, a] rank differences
    k = b - 1
    rows = _corrected_harm((d * d).sum(1), conc_row, k)
    # without sentence j, a's rank in row i falls by 1 where j ranked below a
    dj = d[:, :, None] - (gx.astype(np.float64) - gy)  # [i, a, j]
    keep = other[:, :, None] & other[None, :, :]  # a ≠ i and a ≠ j
    d2j = np.where(keep, dj * dj, 0.0).sum(1)  # [i, j]
    concj = conc_row[:, None] - 2.0 * conc.sum(2, dtype=np.float64)  # [i, j]: j's pairs removed
    rows_j = np.where(eye, 0.0, _corrected_harm(d2j, concj, k - 1))  # [i, j], row i without j
    replicates = rows_j.sum(0) / (b - 1)  # [j]: the block's mean harm without sentence j
    variance = (b - 1.0) / b * float(((replicates - replicates.mean()) ** 2).sum())
    return BlockHarm(rows=rows, estimate=float(rows.mean()), variance=variance)


class SimilarityStructure(Objective):
    """The similarity structure of the corpus under the model's own pooling (module docstring).

    Args:
        pooling: a :class:`.pooling.Pooling`; ``None``: the model's (:func:`.pooling.model_pooling`).

    Raises (from :meth:`check`):
        NotApplicable: a model that is not an encoder, fewer than 4 sentences.
    """

    name = "similarity-structure"
    units = "1 − Spearman ρ of a sentence's cosine similarities to the others (0 = same ranking)"
    higher_is_better = False
    differentiable = False
    ignores_padding = True
    corpus_level = True

    def __init__(self, pooling: Optional[Pooling] = None):
        self.pooling = pooling

    def check(self, adapter: ModelAdapter, corpus: Corpus | None = None) -> None:
        if adapter.arch != "encoder":
            ok = ", ".join(applicable_objectives(adapter, corpus))
            raise NotApplicable(
                f"objective 'similarity-structure' pools a sentence encoder's states; {adapter.name} "
                f"is a {adapter.arch}; objectives that fit it: {ok}"
            )
        if corpus is not None and distinct_sentences(corpus) < MIN_SENTENCES:
            raise NotApplicable(
                f"objective 'similarity-structure' compares each sentence with the others: give at "
                f"least {MIN_SENTENCES} different sentences (got {distinct_sentences(corpus)} different "
                f"of {len(corpus)}: copies of one sentence have no structure to harm)"
            )
        if self.pooling is None:
            self.pooling = model_pooling(adapter)

    def forward(self, adapter: ModelAdapter, batch: MetricBatch) -> Any:
        base = getattr(adapter.model, "base_model", adapter.model)
        return base(**batch.inputs)

    def readout(self, outputs: Any, batch: MetricBatch) -> torch.Tensor:
        """The pooled sentence embedding ``[rows, d_model]`` of a run."""
        pooling = self.pooling or Pooling()
        h = outputs.last_hidden_state
        return pooling.pool(
            h.float() if h.dtype in (torch.float16, torch.bfloat16) else h, batch.inputs["attention_mask"]
        )

    def score(self, outputs: Any, batch: MetricBatch, reference: torch.Tensor | None = None) -> torch.Tensor:
        """Refused: the objective compares whole corpora (:meth:`readout` then :meth:`harm`)."""
        raise ValueError("similarity-structure compares whole corpora (readout + harm), not one run's scores")

    def harm(self, clean: ArrayLike, perturbed: ArrayLike) -> np.ndarray:
        """``[n]`` from the readouts ``[n, d_model]`` of the clean and the perturbed run, each
        sentence's ``1 − ρ`` corrected for the corpus's size (:func:`corrected_row_harm`)."""
        return corrected_row_harm(np.asarray(clean, np.float64), np.asarray(perturbed, np.float64))

    def block_harm(self, clean: ArrayLike, perturbed: ArrayLike) -> BlockHarm:
        """The harm on one random block of the corpus, readouts ``[b, d_model]`` (:func:`block_row_harm`)."""
        return block_row_harm(clean, perturbed)

    def measures(self, clean: ArrayLike, perturbed: ArrayLike) -> dict:
        """``neighbour_changed`` and ``embedding_drift``, each ``[n]``, from readouts ``[n, d_model]``."""
        clean, perturbed = np.asarray(clean, np.float64), np.asarray(perturbed, np.float64)
        return {"neighbour_changed": neighbour_changed(clean, perturbed), "embedding_drift": drift(clean, perturbed)}

    def corpus_measures(self, clean: ArrayLike, perturbed: ArrayLike) -> dict:
        """``pairwise_rank_harm``: one float over the whole corpus's readouts ``[n, d_model]``."""
        return {
            "pairwise_rank_harm": pairwise_rank_harm(np.asarray(clean, np.float64), np.asarray(perturbed, np.float64))
        }

    def describe(self) -> str:
        how = self.pooling.describe() if self.pooling is not None else "the model's pooling"
        return f"{self.name} ({how})"


class NextTokenLoss(LossMetric):
    """The next-token loss of a causal language model (``loss`` on a decoder with an LM head)."""

    name = "loss"

    def check(self, adapter: ModelAdapter, corpus: Corpus | None = None) -> None:
        if adapter.arch != "decoder" or not has_lm_head(adapter):
            ok = ", ".join(applicable_objectives(adapter, corpus))
            raise NotApplicable(
                f"objective 'next-token-loss' needs a causal language model with an LM head; "
                f"{adapter.name} is a{' headless' if not has_lm_head(adapter) else 'n'} "
                f"{adapter.arch}; objectives that fit it: {ok}"
            )
        super().check(adapter, corpus)


def applicable_objectives(adapter: ModelAdapter, corpus: Corpus | None = None) -> list[str]:
    """Names of the corpus objectives that fit ``adapter`` (and ``corpus``): the metrics'
    (:func:`.metrics.applicable_metrics`) and this module's (the next-token loss, the
    similarity structure)."""
    out = list(applicable_metrics(adapter, corpus))
    if adapter.arch == "decoder" and has_lm_head(adapter) and not zoo_task(adapter):
        out.insert(0, "next-token-loss")
    if adapter.arch == "encoder" and (corpus is None or distinct_sentences(corpus) >= MIN_SENTENCES):
        out.insert(len(out) - 1, "similarity-structure")
    return out
