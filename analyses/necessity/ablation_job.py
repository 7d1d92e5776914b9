"""The single-head ablation sweep as a job over blocks of the corpus (:mod:`probe.runs.blocks`):
the same sweep in this process (one block) or in Ray actors (a block each).

The driver resolves the objective, checks the heads and, for mean-ablation, computes
every head's corpus mean (:func:`probe.analyses.necessity.ablation.position_kind_means`);
the job carries them, so every block measures the same thing. Each example's values
depend on that example alone (:func:`probe.analyses.necessity.ablation.sweep_values`),
so the blocks' values placed by corpus index (:class:`AblationSums`) are the sweep of
the whole corpus (Michel et al. 2019, "Are sixteen heads really better than one?").
"""

from __future__ import annotations

import time
from typing import Optional, Sequence, TYPE_CHECKING

import torch

from probe.runs.blocks import Part

from .ablation import MAX_TOKENS, setup_sweep, sweep_values
from .ablation_sums import AblationSums

if TYPE_CHECKING:
    from probe.analyses.common.objective import Objective

    from .ablation import SweepResult

__all__ = ["AblateJob", "sweep_heads_in_blocks"]


class AblateJob:
    """Ablate each of ``heads`` alone on a block of ``corpus`` (the items are corpus
    indices); the part's value is an :class:`AblationSums` of the block's examples.

    Args:
        corpus: the fitted :class:`probe.inputs.corpus.Corpus` (every example within the model's limit).
        objective: the run's resolved :class:`probe.analyses.common.objective.Objective` (picklable).
        heads: checked ``(layer, head)`` pairs.
        mode, means: ``zero`` (``means`` ``None``) or ``mean`` (``means`` a ``KindMeans``, ``[n_kinds, L, H, head_dim]``).
        batch_size, restart, max_tokens, stack: as :func:`probe.analyses.necessity.ablation.sweep_values`.
        n_boot, confidence, seed: the bootstrap of the merged result.
    """

    def __init__(
        self,
        corpus,
        objective,
        heads: Sequence,
        mode: str = "zero",
        means: Optional[torch.Tensor] = None,
        *,
        batch_size: int = 8,
        restart: bool = True,
        max_tokens: Optional[int] = None,
        stack: Optional[str] = None,
        n_boot: int = 1000,
        confidence: float = 0.95,
        seed: int = 0,
    ):
        self.corpus, self.objective, self.heads, self.mode, self.means = corpus, objective, list(heads), mode, means
        self.batch_size, self.restart, self.max_tokens, self.stack = batch_size, restart, max_tokens, stack
        self.n_boot, self.confidence, self.seed = n_boot, confidence, seed

    def run(self, adapter, items: Sequence, indices: Sequence[int], progress: bool = False) -> Part:

        started = time.time()
        block = [int(i) for i in items]
        sums = AblationSums(self.heads, self.mode, self.objective.name, self.n_boot, self.confidence, self.seed)
        clean, ablated, path = sweep_values(
            adapter,
            self.corpus.subset(block),
            self.objective,
            self.heads,
            self.means,
            batch_size=self.batch_size,
            restart=self.restart,
            max_tokens=self.max_tokens or MAX_TOKENS,
            stack=self.stack,
            progress=progress,
        )
        sums.add(block, clean, ablated, path)
        return Part(first=int(indices[0]), value=sums, n_items=len(block), started=started, ended=time.time())

    @staticmethod
    def merge(parts: Sequence[Part]) -> AblationSums:
        first = parts[0].value
        for p in parts[1:]:
            first.merge(p.value)
        return first


def sweep_heads_in_blocks(
    runner, adapter, corpus, objective: Objective, mode: str = "zero", heads=None, **settings
) -> SweepResult:
    """:func:`probe.analyses.necessity.ablation.sweep_heads` with its forwards on
    ``runner`` (:mod:`probe.runs.blocks`: this process, or an engine's workers, a block of the
    corpus each) → the same :class:`~probe.analyses.necessity.ablation.SweepResult`.
    The objective, the heads and mean-ablation's head means are settled here, on
    ``adapter``, before any block runs.

    Args:
        settings: :class:`AblateJob`'s (``batch_size``, ``restart``, ``max_tokens``,
            ``stack``, ``n_boot``, ``confidence``, ``seed``).

    Raises:
        InputError: as :func:`~probe.analyses.necessity.ablation.sweep_heads`.
    """
    batch_size, stack = settings.get("batch_size", 8), settings.get("stack")
    corpus, objective, heads, means = setup_sweep(adapter, corpus, objective, mode, heads, stack, batch_size)
    job = AblateJob(corpus, objective, heads, mode, means, **settings)
    return AblateJob.merge(runner(job, list(range(len(corpus))))).result()
