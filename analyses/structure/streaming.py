"""The syntax and coreference statistics as streaming accumulators.

Each accumulator follows :mod:`probe.analyses.common.accumulate`: ``update(layer, maps,
meta)`` with the single-layer maps of one batch, or ``update_examples(maps, meta)`` with
whole examples (held maps, or a streamed batch's layers joined: each example's word graph
is then made once, not once per layer), where ``meta.items`` are the corpus items of the
batch (treebank :class:`probe.inputs.readers.Sentence` s, or
:class:`probe.analyses.structure.coref.CorefWindow` s); ``merge``; ``result``. An
accumulator is fed one way; the result is the same either way.

* :class:`LayerwiseRelations`: Clark et al. (2019) relation hit counts and the
  fixed-offset baselines → :class:`~probe.analyses.structure.syntax.RelationAccuracy`,
  equal to :func:`~probe.analyses.structure.syntax.relation_accuracy` (integer counts).
* :class:`KeptGraphs`: the word graphs of chosen sentences (the tree decoder and the
  attention probe need all layers of a sentence), assembled layer by layer.
* :class:`LayerwiseCoref`: antecedent choices →
  :class:`~probe.analyses.structure.coref.CorefAccuracy`.

A sentence whose words do not align to tokens raises on every layer; it is listed in
``skipped`` once (at the first layer), as ``(index, sent_id, line, reason)``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence

import numpy as np
import torch

from probe.analyses.common.accumulate import PerLayer
from probe.analyses.structure.coref import CorefCounter
from probe.analyses.structure.syntax import OFFSETS, RelationAccuracy, RelationCounter
from probe.analyses.structure.word_graph import AlignmentError, WordGraph, word_attention, word_graph

if TYPE_CHECKING:
    from typing import Self

    from probe.analyses.structure.coref import CorefAccuracy
    from probe.maps import AttentionMaps
    from probe.runs.streaming import BatchMeta

__all__ = ["SkippingPerLayer", "GraphsByIndex", "LayerwiseRelations", "KeptGraphs", "LayerwiseCoref"]


class SkippingPerLayer(PerLayer):
    """PerLayer that lists the examples whose words do not align, once each."""

    def __init__(self, make):
        super().__init__(make)
        self.skipped: list = []
        #: the accumulator of whole examples (``update_examples``), made on first use
        self.whole = None

    def update_examples(self, maps: Sequence[AttentionMaps], meta: BatchMeta) -> None:
        """Whole examples (``[L, H, n, n]``: held maps, or a streamed batch joined), each
        counted once with all its layers (``whole_update``)."""
        self._one_way(layer_fed=bool(self.inner))
        if self.whole is None:
            self.whole = self.make()
        for position, m in enumerate(maps):
            self.whole_update(self.whole, m, meta, position)

    def whole_update(self, acc: Any, maps: AttentionMaps, meta: BatchMeta, position: int) -> None:
        """Feed one whole example (``[layer, head, n, n]``) to ``acc``: as :meth:`inner_update`."""
        self.inner_update(acc, maps, meta, position)

    def _one_way(self, layer_fed: bool) -> None:
        """An accumulator is fed one way: layer by layer, or whole examples."""
        if layer_fed:
            raise ValueError(f"{type(self).__name__} was fed both by layer and whole examples: feed one way")

    def update(self, layer: int, maps: Sequence[AttentionMaps], meta: BatchMeta) -> None:
        """One layer of a batch (``[1, head, n, n]`` per example); refused once whole examples were fed."""
        self._one_way(layer_fed=self.whole is not None)
        super().update(layer, maps, meta)

    def _skip(self, meta: BatchMeta, position: int, layer: int, exc: Exception) -> None:
        if layer == meta.first_layer:
            item = meta.items[position]
            self.skipped.append(
                (meta.indices[position], getattr(item, "sent_id", None), getattr(item, "line", None), str(exc))
            )

    def merge(self, other: Self) -> Self:
        """Add ``other``'s counts and skipped examples to these; returns self."""
        super().merge(other)
        if other.whole is not None:
            self.whole = other.whole if self.whole is None else self.whole.merge(other.whole)
        self.skipped.extend(other.skipped)
        self.skipped.sort(key=lambda row: row[0])
        return self

    def parts(self) -> list:
        """The inner results, one per layer, or the whole examples' result alone."""
        if self.whole is not None:
            self._one_way(layer_fed=bool(self.inner))
            return [self.whole.result()]
        return list(self.results().values())


class LayerwiseRelations(SkippingPerLayer):
    """Relation accuracy counts per layer; ``result()`` joins them along the layer axis.

    Args:
        base: count base relations (``nmod:poss`` as ``nmod``).
        offsets: the baseline's fixed offsets.
    """

    def __init__(self, base: bool = False, offsets: Sequence[int] = OFFSETS):
        super().__init__(functools.partial(RelationCounter, base=base, offsets=offsets))

    def inner_update(self, acc: RelationCounter, maps: AttentionMaps, meta: BatchMeta, position: int) -> None:
        """Count one example's word graph (``[layer, head, W, W]``); a misaligned one is skipped."""
        layer = maps.layers[0]
        try:
            acc.update(word_graph(maps, meta.items[position], index=meta.indices[position]))
        except AlignmentError as exc:
            self._skip(meta, position, layer, exc)

    def result(self) -> RelationAccuracy:
        """The :class:`RelationAccuracy` of all layers, relations in alphabetical order
        (so the order does not depend on how the corpus was split); counts and
        baselines are the same on every layer."""
        parts = self.parts()
        first = parts[0]
        relations = tuple(sorted(first.relations))

        def ordered(p, values, axis):
            return np.take(values, [p.relations.index(r) for r in relations], axis=axis)

        return RelationAccuracy(
            relations=relations,
            hits=np.concatenate([ordered(p, p.hits, 1) for p in parts], 2),
            counts=ordered(first, first.counts, 0),
            offset_hits=ordered(first, first.offset_hits, 0),
            offsets=first.offsets,
            layers=tuple(x for p in parts for x in p.layers),
            n_sentences=first.n_sentences,
            left=None if first.left is None else ordered(first, first.left, 0),
            causal=first.causal,
        )


class GraphsByIndex:
    """One layer's word graphs, or what ``keep`` makes of each (a picklable function of a
    :class:`WordGraph`): ``{corpus index: kept}``, merged across blocks by index."""

    def __init__(self, keep: Optional[Callable] = None):
        self.keep = keep
        self.graphs: dict = {}

    def update(self, graph: WordGraph) -> None:
        self.graphs[graph.index] = graph if self.keep is None else self.keep(graph)

    def merge(self, other: "GraphsByIndex") -> "GraphsByIndex":
        self.graphs.update(other.graphs)
        return self

    def result(self) -> dict:
        return self.graphs


class KeptGraphs(SkippingPerLayer):
    """Word graphs (all layers) of the sentences whose corpus index is in ``keep``.

    Memory: the word-level maps of the kept sentences only (``[L, H, W, W]`` each).
    """

    def __init__(self, keep: Iterable[int]):
        super().__init__(GraphsByIndex)
        self.keep = frozenset(int(i) for i in keep)

    def inner_update(self, acc: GraphsByIndex, maps: AttentionMaps, meta: BatchMeta, position: int) -> None:
        """Keep one example's word graph when its corpus index is kept; a misaligned one is skipped."""
        index = meta.indices[position]
        if index in self.keep:
            try:
                acc.update(word_graph(maps, meta.items[position], index=index))
            except AlignmentError as exc:
                self._skip(meta, position, maps.layers[0], exc)

    def result(self) -> list:
        """The kept :class:`WordGraph` s in corpus order (misaligned ones left out)."""
        if self.whole is not None:
            graphs = self.parts()[0]
            return [graphs[i] for i in sorted(graphs)]
        if not self.inner:
            return []
        parts = self.results()
        out = []
        for index in sorted(next(iter(parts.values()))):
            pieces = [parts[layer][index] for layer in self.layers]
            g = pieces[0]
            out.append(
                WordGraph(
                    attention=torch.cat([p.attention for p in pieces]),
                    to_special=torch.cat([p.to_special for p in pieces]),
                    from_special=torch.cat([p.from_special for p in pieces]),
                    heads=g.heads,
                    deprels=g.deprels,
                    layers=self.layers,
                    index=index,
                )
            )
        return out


class LayerwiseCoref(SkippingPerLayer):
    """Coreference antecedent counts per layer (items: ``CorefWindow`` s)."""

    def __init__(self):
        super().__init__(CorefCounter)

    def inner_update(self, acc: CorefCounter, maps: AttentionMaps, meta: BatchMeta, position: int) -> None:
        """Count one window's word-level attention (``[layer, head, W, W]``); a misaligned one is skipped."""
        window = meta.items[position]
        try:
            a, _, _ = word_attention(maps, len(window.words))
        except AlignmentError as exc:
            self._skip(meta, position, maps.layers[0], exc)
            return
        acc.update(window, a, maps.layers)

    def result(self) -> CorefAccuracy:
        """The :class:`CorefAccuracy` of all layers."""
        from probe.analyses.structure.coref import CorefAccuracy

        parts = self.parts()
        return CorefAccuracy(
            hits=np.concatenate([p.hits for p in parts], 1),
            baseline_hits=parts[0].baseline_hits,
            counts=parts[0].counts,
            layers=tuple(x for p in parts for x in p.layers),
        )
