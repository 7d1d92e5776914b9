"""What a worker does with one block of the corpus: capture + accumulate, sweep, or store.

A job is a small picklable object with ``run(adapter, items, indices) -> Part``: the
same code runs in the single process (one block: the whole corpus) and in every Ray
actor (one block at a time, :mod:`probe.app.engine.ray_engine`). Each job first leaves
out the items longer than the model's limit (``Part.long``: corpus index and token
count), as :func:`probe.inputs.fit_to_model` does for one process.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

__all__ = ["Part", "StreamJob", "AblateJob", "RemovalJob", "StoreJob", "item_text"]


def item_text(item) -> str:
    return item if isinstance(item, str) else item.text


@dataclass
class Part:
    """The result of one block: ``value`` (accumulators, ablation values or store
    records), the over-long items left out, how many items the block had, the seconds
    the job spent on it (inside the worker) and when it started and ended (``time.time()``
    of the worker's machine: where a run's time went, start-up vs blocks vs hand-over)."""

    first: int
    value: Any
    long: list = field(default_factory=list)
    n_items: int = 0
    started: float = 0.0
    ended: float = 0.0

    @property
    def seconds(self) -> float:
        return self.ended - self.started


def _fit(adapter, items: Sequence, indices: Sequence[int], by_length: bool = False):
    """(kept positions, in input order or shortest first (``by_length``, as run_syntax
    orders them: batches of similar length carry little padding), [(index, n_tokens)]
    of the items beyond the model's limit)."""
    lengths = [len(x) for x in adapter.tokenizer([item_text(it) for it in items], add_special_tokens=True)["input_ids"]]
    keep = [k for k, n in enumerate(lengths) if n <= adapter.max_length]
    if by_length:
        keep.sort(key=lambda k: lengths[k])
    long = [(int(indices[k]), n) for k, n in enumerate(lengths) if n > adapter.max_length]
    return keep, long


class StreamJob:
    """Stream the block layer by layer into fresh copies of ``accumulators``.

    Args:
        accumulators: empty accumulators (:mod:`probe.analyses.common.accumulate`).
        batch_size: examples per forward.
        last_rows: keep only the last ``k`` query rows (see :func:`probe.streaming.stream_layers`).
    """

    def __init__(self, accumulators: Sequence, batch_size: int = 16, last_rows: Optional[int] = None):
        self.accumulators = list(accumulators)
        self.batch_size = batch_size
        self.last_rows = last_rows

    def run(self, adapter, items: Sequence, indices: Sequence[int]) -> Part:
        from probe.analyses.common.accumulate import fresh
        from probe.streaming import feed, stream_layers

        started = time.time()
        keep, long = _fit(adapter, items, indices, by_length=True)
        accs = fresh(self.accumulators)
        stream_layers(
            adapter,
            [items[k] for k in keep],
            feed(accs),
            indices=[indices[k] for k in keep],
            batch_size=self.batch_size,
            last_rows=self.last_rows,
        )
        return Part(
            first=int(indices[0]), value=accs, long=long, n_items=len(items), started=started, ended=time.time()
        )

    @staticmethod
    def merge(parts: Sequence[Part]) -> list:
        from probe.analyses.common.accumulate import merge_all

        return merge_all([p.value for p in parts])


class AblateJob:
    """Single-head ablation sweep of the block (:func:`probe.analyses.necessity.ablation.sweep_values`).

    ``metric="auto"``: the model's default (:func:`probe.analyses.common.metrics.default_metric`),
    the same in every block. Only zero-ablation: mean-ablation replaces a head's output by its mean over the
    whole corpus, which no block knows alone.
    """

    def __init__(
        self,
        metric: str = "loss",
        heads: Optional[Sequence] = None,
        batch_size: int = 8,
        max_tokens: Optional[int] = None,
        n_boot: int = 1000,
        confidence: float = 0.95,
        seed: int = 0,
        layers: Optional[Sequence[int]] = None,
    ):
        self.metric, self.heads, self.batch_size, self.layers = metric, heads, batch_size, layers
        self.max_tokens = max_tokens
        self.n_boot, self.confidence, self.seed = n_boot, confidence, seed

    def run(self, adapter, items: Sequence, indices: Sequence[int]) -> Part:
        from probe.analyses.common.objective import get_metric
        from probe.analyses.necessity.ablation import MAX_TOKENS, check_heads, sweep_values
        from probe.analyses.necessity.ablation_sums import AblationSums
        from probe.inputs import Corpus

        started = time.time()
        keep, long = _fit(adapter, items, indices)
        examples = tuple(getattr(items[k], "example", None) for k in keep)
        corpus = Corpus(
            texts=tuple(item_text(items[k]) for k in keep),
            source="block",
            examples=examples if all(e is not None for e in examples) else (),
        )
        metric = get_metric(self.metric or "auto", adapter, corpus)  # resolves "auto" (resolve_objective)
        heads = self.heads
        if heads is None and self.layers is not None:  # every head of these layers
            heads = [(layer, h) for layer in self.layers for h in range(adapter.n_heads)]
        heads = check_heads(adapter, heads)
        sums = AblationSums(heads, "zero", metric.name, self.n_boot, self.confidence, self.seed)
        if keep:
            clean, ablated, path = sweep_values(
                adapter,
                corpus,
                metric,
                heads,
                None,
                batch_size=self.batch_size,
                max_tokens=self.max_tokens or MAX_TOKENS,
            )
            sums.add([indices[k] for k in keep], clean, ablated, path)
        return Part(
            first=int(indices[0]), value=sums, long=long, n_items=len(items), started=started, ended=time.time()
        )

    @staticmethod
    def merge(parts: Sequence[Part]):
        first = parts[0].value
        for p in parts[1:]:
            first.merge(p.value)
        return first


class RemovalJob:
    """Batches of the claims' removal sweep (:func:`probe.analyses.claims.removal.run_removal_batches`):
    the items are the sweep's batches ``(number, example indices)``, the plan (examples,
    objective, units, modes, head means, seed) was made by the driver; the part's value is
    the batches' readouts, which the driver places by example index and turns into harms.
    Each batch draws its random sources from its own number, so the readouts do not
    depend on how the batches were split between workers."""

    def __init__(self, plan):
        self.plan = plan

    def run(self, adapter, items: Sequence, indices: Sequence[int]) -> Part:
        from probe.analyses.claims.removal import run_removal_batches

        started = time.time()
        value = run_removal_batches(adapter, self.plan, list(items))
        return Part(first=int(indices[0]), value=value, n_items=len(items), started=started, ended=time.time())

    @staticmethod
    def merge(parts: Sequence[Part]) -> list:
        return [p.value for p in parts]


class StoreJob:
    """Capture the block and write it as one shard of the store at ``out``; the part's
    value is the shard's index records (the driver appends them to ``index.jsonl``)."""

    #: items per block unless the caller says: a block's maps are held until its shard is
    #: written, so blocks stay at a local store's shard size
    block_size = 64

    def __init__(self, out: str, dtype: str = "float32", batch_size: int = 16, layers: Optional[Sequence] = None):
        self.out, self.dtype, self.batch_size, self.layers = str(out), dtype, batch_size, layers

    def run(self, adapter, items: Sequence, indices: Sequence[int]) -> Part:
        import torch

        from probe.capture import iter_capture
        from probe.store import write_shard

        started = time.time()
        keep, long = _fit(adapter, items, indices)
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
