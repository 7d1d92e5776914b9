"""What a worker does with one block of the corpus that is the engine's own business:
write it into a store (:class:`StoreJob`, ``probe capture --engine``).

The analyses' jobs live with their analyses and share :mod:`probe.runs.blocks`' contract
(``run(adapter, items, indices) -> Part``): :class:`probe.runs.blocks.StreamJob` (streamed
accumulators), :class:`probe.analyses.necessity.ablation_job.AblateJob` (the
single-head sweep), :class:`probe.analyses.claims.removal.RemovalJob` (the claims'
removals). Each job first leaves out the items longer than the model's limit
(``Part.long``), as :func:`probe.inputs.corpus.fit_to_model` does for one process.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional, Sequence

from probe.runs.blocks import Part, fit_items, item_text

if TYPE_CHECKING:
    from probe.models import ModelAdapter

__all__ = ["StoreJob"]


class StoreJob:
    """Capture the block and write it as one shard of the store at ``out``; the part's
    value is the shard's index records (the driver appends them to ``index.jsonl``)."""

    #: items per block unless the caller says: a block's maps are held until its shard is
    #: written, so blocks stay at a local store's shard size
    block_size = 64

    def __init__(self, out: str, dtype: str = "float32", batch_size: int = 16, layers: Optional[Sequence] = None):
        self.out, self.dtype, self.batch_size, self.layers = str(out), dtype, batch_size, layers

    def run(self, adapter: ModelAdapter, items: Sequence, indices: Sequence[int], progress: bool = False) -> Part:
        import torch

        from probe.runs.capture import iter_capture
        from probe.store.directory import write_shard

        started = time.time()
        keep, long = fit_items(adapter, items, indices)
        records = []
        if keep:
            kept = [items[k] for k in keep]
            spans = [getattr(it, "spans", None) for it in kept]
            stream = iter_capture(
                adapter,
                [item_text(it) for it in kept],
                layers=self.layers,
                batch_size=self.batch_size,
                standalone=True,
                word_spans=spans if any(s is not None for s in spans) else None,
            )
            pairs = list(zip([int(indices[k]) for k in keep], stream))  # standalone: no batch buffer held
            # named by its first example, 8 digits: never one of a local writer's 5-digit shards
            records = write_shard(self.out, f"shard-{pairs[0][0]:08d}.safetensors", pairs, getattr(torch, self.dtype))
        return Part(
            first=int(indices[0]), value=records, long=long, n_items=len(items), started=started, ended=time.time()
        )

    @staticmethod
    def merge(parts: Sequence[Part]) -> list:
        return [r for p in parts for r in p.value]
