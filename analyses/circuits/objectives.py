"""The objective of a circuit in a sentence encoder: embedding similarity to a partner.

``m(x) = cos(e(x), e(p))``: the cosine between the mean-pooled sentence embedding of the
run (the pooling the bundled sentence model was trained with, Reimers & Gurevych 2019)
and the clean model's embedding of a partner sentence ``p``. With the corrupted sentence
as the partner (the default), the clean run scores ``cos(e(A), e(A'))`` and the corrupted
run 1, so a path's effect is how far corrupting it alone moves the sentence's embedding
onto its corrupted partner. Unlike ``embedding-drift`` it is not at an extremum on the
clean input, so its gradient there is informative (edge attribution needs that).

Shapes: ``aux["partner"]`` ``[rows, d_model]``; :meth:`SimilarityMetric.score` ``[rows]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from probe.analyses.common.metrics import DriftMetric, MetricBatch, as_corpus
from probe.errors import InputError, NotApplicable

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter
    from probe.inputs.corpus import Corpus

__all__ = ["SimilarityMetric"]


class SimilarityMetric(DriftMetric):
    """Cosine similarity of the run's pooled embedding to a partner's clean embedding.

    Args:
        partners: the partner of each example, in corpus order (a Corpus or texts).
    """

    name = "similarity"
    higher_is_better = True
    stationary_at_clean = False

    def __init__(self, partners):
        self.partners = as_corpus(partners)

    def check(self, adapter: ModelAdapter, corpus: Corpus | None = None) -> None:
        if corpus is not None and len(corpus) != len(self.partners):
            raise InputError(
                f"{len(corpus)} examples but {len(self.partners)} partner sentences: give one partner per example"
            )

    def make_batch(self, adapter: ModelAdapter, corpus: Corpus, indices: Sequence[int]) -> MetricBatch:
        base = super().make_batch(adapter, corpus, indices)
        partner = DriftMetric.make_batch(self, adapter, self.partners, indices)
        with torch.no_grad():
            e = self.embed(DriftMetric.forward(self, adapter, partner), partner).detach()
        return replace(base, aux={"partner": e})

    def reference(self, outputs: Any, batch: MetricBatch) -> torch.Tensor | None:
        """None: the partners' embeddings travel in the batch (``aux["partner"]``)."""
        return None

    def aux(self, adapter: ModelAdapter, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Refused: the partner of an example is known only from its corpus index (the sweep face)."""
        raise NotApplicable("the similarity to a partner reads the partner of each corpus example: sweep it")

    def score(self, outputs: Any, batch: MetricBatch, reference: torch.Tensor | None = None) -> torch.Tensor:
        """``[rows]``: cosine of the run's pooled embedding ``[rows, d_model]`` with the partner's."""
        e = self.embed(outputs, batch)
        e = e.float() if e.dtype in (torch.float16, torch.bfloat16) else e
        return F.cosine_similarity(e, batch.aux["partner"].to(e.dtype), dim=-1)
