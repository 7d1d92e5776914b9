"""Corpus statistics as sums: the accumulator protocol of streaming and distributed runs.

Every corpus-level statistic of the toolkit (head-role features, syntax relation counts
and offset baselines, coreference counts, ablation metric sums) is a sum over examples.
An accumulator holds such sums and implements three methods:

``update(layer, maps, meta)``
    add one layer of one batch: ``maps`` is a list of single-layer
    :class:`probe.maps.AttentionMaps` (``attentions [1, head, n, n]``, one per example),
    ``meta`` a :class:`probe.runs.streaming.BatchMeta` (corpus indices and items of the batch,
    every captured layer). :func:`probe.runs.streaming.stream_layers` calls it from the
    capture hook, so the full ``[layer, head, n, n]`` of an example is never held.
``update_examples(maps, meta)`` (optional)
    add whole examples (``[L, H, n, n]`` each) at once: held maps
    (:func:`probe.runs.streaming.feed_maps`), or a streamed batch whose layers were joined
    (:func:`probe.runs.streaming.feed` with ``join``, which :class:`probe.runs.blocks.StreamJob`
    uses while a batch of every layer fits its budget). Counting an example once with all
    its layers is several times cheaper than once per layer (the cost per call is
    Python's); the result is the same. An accumulator is fed one way or the other.
``merge(other)``
    add another accumulator's sums (from another process or machine) into this one and
    return ``self``; merging is associative, so partial results merge in any grouping.
``result()``
    the same table/object the single-process analysis returns.

The same accumulator runs in one process and in Ray actors (:mod:`probe.app.engine`):
each worker fills a fresh copy (``copy.deepcopy`` of an empty one) per block of the
corpus, the driver merges them. Sums are float64 (or integers), so the order of the
merge changes results only at the 1e-15 level.

:class:`PerLayer` turns an accumulator of whole examples (``update(maps)`` on
``[L, H, n, n]``) into a streaming one: one inner accumulator per layer, each fed the
single-layer maps; results are joined along the layer axis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence, runtime_checkable

from probe.runs.blocks import fresh, merge_all
from probe.errors import InputError

if TYPE_CHECKING:
    from typing import Self

    from probe.maps import AttentionMaps

__all__ = ["Accumulator", "PerLayer", "merge_all", "fresh"]


@runtime_checkable
class Accumulator(Protocol):
    """What :func:`probe.runs.streaming.feed` and the engine need of an accumulator."""

    def update(self, layer: int, maps: Sequence, meta: Any) -> None: ...

    def merge(self, other: "Accumulator") -> "Accumulator": ...

    def result(self) -> Any: ...


class PerLayer:
    """One inner accumulator per layer, made by ``make()`` on first sight of the layer.

    ``make`` must be picklable (a class or a ``functools.partial``) so copies travel to
    worker processes. The inner accumulators take whole examples (``update(maps)``);
    ``inner_update(acc, maps, meta, layer)`` may be overridden for inner accumulators
    that need more than the maps (e.g. the treebank sentence of each example).
    """

    def __init__(self, make: Callable[[], Any]):
        self.make = make
        self.inner: dict = {}

    def _acc(self, layer: int) -> Any:
        if layer not in self.inner:
            self.inner[layer] = self.make()
        return self.inner[layer]

    def update(self, layer: int, maps: Sequence, meta: Any) -> None:
        acc = self._acc(layer)
        for i, m in enumerate(maps):
            self.inner_update(acc, m, meta, i)

    def inner_update(self, acc: Any, maps: AttentionMaps, meta: Any, position: int) -> None:
        """Feed one single-layer example (``attentions [1, head, n, n]``, ``position`` in its batch) to ``acc``."""
        acc.update(maps)

    def merge(self, other: Self) -> Self:
        """Add ``other``'s per-layer sums (same class) to these; returns self."""
        if type(other) is not type(self):
            raise ValueError(f"cannot merge a {type(other).__name__} into a {type(self).__name__}")
        for layer, acc in other.inner.items():
            if layer in self.inner:
                self.inner[layer].merge(acc)
            else:
                self.inner[layer] = acc
        return self

    @property
    def layers(self) -> tuple:
        return tuple(sorted(self.inner))

    def results(self) -> dict:
        """``{layer: inner.result()}``, layers in order.

        Raises:
            ValueError: nothing was added.
        """
        if not self.inner:
            raise InputError("no examples: give at least one captured example")
        return {layer: self.inner[layer].result() for layer in self.layers}

    def result(self) -> Any:
        """What the corpus statistic is: here the :meth:`results`, ``{layer: inner.result()}``;
        subclasses join the layers into one result."""
        return self.results()
