"""The objective of a sentence encoder: the similarity structure of the corpus.

``similarity-structure`` measures how the similarity structure of the corpus under the
model's own pooling (:mod:`.pooling`) changes: per sentence, ``1 − ρ`` with ``ρ`` the
Spearman rank correlation of its cosine similarities to every other sentence, perturbed vs
clean (both sides perturbed: what a search index rebuilt with the perturbed model would
rank). Beside it: the share of sentences whose nearest neighbour changes, the ``1 − ρ`` of
all pairwise cosines at once, and the embedding drift ``1 − cos``. Label-free and bounded
(``0 ≤ 1 − ρ ≤ 2``); for search, clustering and STS the ranking of similarities is what
matters (Reimers & Gurevych 2019 report STS as Spearman ρ).

It is an :class:`.objective.Objective` with a sweep face only (a harm needs every
sentence's readout at once, ``corpus_level``). :class:`NextTokenLoss` (``next-token-loss``)
is the loss of a causal language model, refused on any other model.

Shapes: readouts ``[n, d]`` (rows first); :meth:`SimilarityStructure.harm` -> ``[n]``.
"""

from __future__ import annotations

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
    "neighbour_changed",
    "pairwise_rank_harm",
    "drift",
]

#: fewest sentences for a similarity structure (a rank correlation over ≥ 3 others)
MIN_SENTENCES = 4


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
        if corpus is not None and len(corpus) < MIN_SENTENCES:
            raise NotApplicable(
                f"objective 'similarity-structure' compares each sentence with the others: give at "
                f"least {MIN_SENTENCES} sentences (got {len(corpus)})"
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
        """``[n]`` from the readouts ``[n, d_model]`` of the clean and the perturbed run."""
        return row_rank_harm(np.asarray(clean, np.float64), np.asarray(perturbed, np.float64))

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
    if adapter.arch == "encoder" and (corpus is None or len(corpus) >= MIN_SENTENCES):
        out.insert(len(out) - 1, "similarity-structure")
    return out
