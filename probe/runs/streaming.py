"""Streaming capture: hand each layer's attention to a callback inside the forward.

:func:`probe.runs.capture.iter_capture` keeps every layer of a batch until the forward ends
and then copies each example out (``[layer, head, query, key]``), so its peak memory is
all layers of one batch, twice. :func:`stream_layers` instead calls ``on_layer`` from
the trace's reader of each layer's ``pattern`` site (:class:`probe.tracing.trace_context.Trace`, hooks path), with that layer's probabilities of the whole
batch, and keeps nothing afterwards: peak memory is one layer's maps of one batch plus
the model (the eager attention of the next layer reuses the freed memory). The
corpus-level analyses consume it through accumulators
(:mod:`probe.analyses.common.accumulate`): ``update(layer, maps_of_one_layer, meta)``.

For decoders whose analysis reads only the last ``k`` query rows (next-token analyses),
``last_rows=k`` keeps just those rows of every example (``LayerBatch.rows``).

Only self- and causal attention of one stack (encoder, or a decoder-only model) are
streamed; encoder-decoder captures go through :func:`probe.runs.capture.iter_capture`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence

import torch

from probe.errors import InputError, NotApplicable

from probe.models.batching import ONE_LENGTH, one_length_batches
from probe.models.sites import Site
from probe.tracing.trace_context import Trace
from probe.maps import AttentionMaps

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

log = logging.getLogger(__name__)

__all__ = [
    "BatchMeta",
    "LayerBatch",
    "stream_layers",
    "feed",
    "join_layers",
    "join_batch_size",
    "JOIN_BYTES",
    "feed_maps",
    "held_items",
]


@dataclass(frozen=True)
class BatchMeta:
    """What an accumulator may know about a batch besides its attention.

    Attributes:
        indices: input position of each example of the batch (in the corpus given to
            :func:`stream_layers`; batches are sorted by length, so not contiguous).
        items: the corpus item of each example (a string, or e.g. a treebank
            ``Sentence`` / coreference window), as given in ``items=``.
        layers: every captured layer, in order (``layers[0]`` is called first).
    """

    indices: tuple
    items: tuple
    layers: tuple

    @property
    def first_layer(self) -> int:
        return self.layers[0]


class LayerBatch:
    """One layer's probabilities of one batch, as the hook saw them.

    ``probs`` is ``[batch, head, query, key]`` (padded, on the model's device);
    :meth:`maps` trims the padding and gives one single-layer :class:`AttentionMaps`
    per example (float32 on the CPU), :attr:`rows` the kept query rows ``[head, q, n]``.
    """

    def __init__(
        self,
        layer: int,
        probs: torch.Tensor,
        encodings: list,
        meta: BatchMeta,
        kind: str,
        source: str,
        model_name: str,
        last_rows: Optional[int],
    ) -> None:
        self.layer, self.meta, self.kind = layer, meta, kind
        self._encs, self._source, self._model = encodings, source, model_name
        self.last_rows = last_rows
        low = probs.dtype not in (torch.float32, torch.float64)
        self.rows = []
        for i, e in enumerate(encodings):
            n = len(e)
            start = 0 if last_rows is None else max(0, n - last_rows)
            a = probs[i, :, start:n, :n]
            if low:  # renormalise rows of a half-precision softmax, as iter_capture does
                a = a.float()
                a = a / a.sum(-1, keepdim=True).clamp(min=1e-12)
            self.rows.append(a.float().cpu())
        self._maps: Optional[list[AttentionMaps]] = None

    def maps(self) -> list:
        """One :class:`AttentionMaps` per example with ``attentions [1, head, n, n]``.

        Raises:
            ValueError: the stream keeps only the last query rows (``last_rows``).
        """
        if self.last_rows is not None:
            raise InputError(
                f"this analysis needs every query row, but the capture keeps only the last "
                f"{self.last_rows}; run it without last_rows"
            )
        if self._maps is None:
            self._maps = []
            for a, e in zip(self.rows, self._encs):
                meta: dict[str, Any] = {"model": self._model, "attention_source": self._source}
                if e.truncated:
                    meta["truncated"] = True
                if e.unaligned_words:
                    meta["unaligned_words"] = list(e.unaligned_words)
                if e.absorbed_words:  # as probe.capture: words sharing the token that absorbed them
                    meta["absorbed_words"] = [list(x) for x in e.absorbed_words]
                self._maps.append(
                    AttentionMaps(
                        attentions=a[None],
                        tokens=e.tokens,
                        word_ids=e.word_ids,
                        special_mask=e.special_mask,
                        words=e.words,
                        layers=(self.layer,),
                        kind=self.kind,
                        text=e.text,
                        meta=meta,
                        validate=False,
                    )
                )
        return self._maps


def _text_and_spans(item: Any) -> tuple[str, Any]:
    if isinstance(item, str):
        return item, None
    return item.text, getattr(item, "spans", None)


def _checked_settings(
    adapter: ModelAdapter,
    layers: Optional[Sequence[int]],
    batch_size: int,
    sort_window: int,
    last_rows: Optional[int],
) -> list[int]:
    """The layers :func:`stream_layers` hooks (sorted, default all), its settings checked.

    Raises:
        NotApplicable: an encoder-decoder model.
        InputError: a batch setting below 1, a layer out of range.
    """
    if adapter.arch == "encoder-decoder":
        raise NotApplicable(
            "streaming covers encoder and decoder-only models; capture encoder-decoder "
            "models with probe.runs.capture.iter_capture"
        )
    if batch_size < 1 or sort_window < 1:
        raise InputError(f"batch_size and sort_window must be ≥ 1, got {batch_size}, {sort_window}")
    if last_rows is not None and last_rows < 1:
        raise InputError(f"last_rows must be ≥ 1, got {last_rows}")
    modules = adapter.attention_modules(adapter.default_stack)
    chosen = list(range(len(modules))) if layers is None else sorted({int(x) for x in layers})
    bad = [x for x in chosen if not 0 <= x < len(modules)]
    if bad or not chosen:
        raise InputError(f"layer(s) {bad or chosen} out of range: {adapter.name} has layers 0..{len(modules) - 1}")
    return chosen


def stream_layers(
    adapter: ModelAdapter,
    items: Iterable,
    on_layer: Callable[[LayerBatch], None],
    *,
    indices: Optional[Iterable[int]] = None,
    layers: Optional[Sequence[int]] = None,
    batch_size: int = 16,
    truncate: bool = False,
    last_rows: Optional[int] = None,
    sort_window: int = 8,
    progress: bool = False,
    total: Optional[int] = None,
) -> int:
    """Run the model over ``items`` and call ``on_layer`` once per (batch, layer).

    Args:
        adapter: a :class:`probe.models.ModelAdapter` (encoder or decoder-only).
        items: strings, or objects with ``.text`` and optional ``.spans`` (word spans,
            e.g. :class:`probe.inputs.readers.Sentence`); passed on in :attr:`BatchMeta.items`.
        on_layer: called with a :class:`LayerBatch`, inside the forward, layers in
            order; what it keeps is its own business (an accumulator keeps sums).
        indices: the corpus position of each item (default 0, 1, 2, …).
        layers: layers to hook (default all).
        batch_size, sort_window: as :func:`probe.runs.capture.iter_capture` (batches of
            similar length within windows of ``batch_size * sort_window`` items).
        truncate: cut texts beyond the model's limit instead of refusing them.
        last_rows: keep only the last ``k`` query rows of each example (causal models'
            next-token analyses); ``LayerBatch.maps()`` then refuses.

    Returns:
        the number of examples streamed.

    Raises:
        ValueError: an encoder-decoder model, bad batch settings or layers, a text
            beyond the model's limit (as :meth:`ModelAdapter.encode`).
    """
    chosen = _checked_settings(adapter, layers, batch_size, sort_window, last_rows)
    stack = adapter.default_stack
    kind = "causal" if adapter.arch == "decoder" or stack == "decoder" else "self"
    items = iter(items)
    index_it = iter(indices) if indices is not None else None
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, unit="ex", desc=f"stream {adapter.name}")
    count, position = 0, 0
    try:
        while True:
            window = []
            for item in items:
                idx = next(index_it) if index_it is not None else position
                position += 1
                window.append((idx, item))
                if len(window) == batch_size * sort_window:
                    break
            if not window:
                break
            encs = [adapter.encode(*_text_and_spans(item), truncate=truncate) for _, item in window]
            order = sorted(range(len(window)), key=lambda k: len(encs[k]))
            parts: Iterable = (order[start : start + batch_size] for start in range(0, len(order), batch_size))
            if adapter.batching == ONE_LENGTH:  # its padding leaks: texts of one length per forward
                parts = one_length_batches(parts, [len(e) for e in encs])
            for part in parts:
                meta = BatchMeta(
                    indices=tuple(window[k][0] for k in part),
                    items=tuple(window[k][1] for k in part),
                    layers=tuple(chosen),
                )
                _forward(adapter, [encs[k] for k in part], meta, on_layer, stack, kind, last_rows)
                count += len(part)
                if bar is not None:
                    bar.update(len(part))
    finally:
        if bar is not None:
            bar.close()
    return count


def _forward(
    adapter: ModelAdapter,
    encs: list,
    meta: BatchMeta,
    on_layer: Callable[[LayerBatch], None],
    stack: str,
    kind: str,
    last_rows: Optional[int],
) -> None:
    """One forward of a batch, reading each chosen layer's ``pattern`` site (hooks, eager
    attention) and handing it on."""
    inputs = adapter.batch(encs)

    def hand_on(layer: int) -> Callable:
        return lambda probs, ctx: on_layer(
            LayerBatch(layer, probs.detach(), encs, meta, kind, tr.attention_source, adapter.name, last_rows)
        )

    tr = Trace(
        adapter,
        read={Site("pattern", layer, stack): hand_on(layer) for layer in meta.layers},
        stack=stack,
        path="hooks",
    )
    with tr, torch.no_grad():
        adapter.model(**inputs)


def feed(accumulators: Sequence, join: bool = False) -> Callable[[LayerBatch], None]:
    """An ``on_layer`` callback that gives every accumulator
    ``update(layer, batch.maps(), batch.meta)``.

    With ``join``, an accumulator that counts whole examples (``update_examples(maps,
    meta)``) gets each example of the batch once, all its layers joined, when the batch's
    last layer has passed (as :func:`feed_maps` gives held maps): counted once per
    example instead of once per layer, which is several times cheaper where the cost
    per call is Python's. The batch's maps of every layer are then held until its
    forward ends (the caller bounds that: :func:`join_batch_size`); the others are
    still fed layer by layer.
    """
    whole = [acc for acc in accumulators if join and hasattr(acc, "update_examples")]
    by_layer = [acc for acc in accumulators if not (join and hasattr(acc, "update_examples"))]
    held: dict = {}

    def on_layer(batch: LayerBatch) -> None:
        maps = batch.maps()
        for acc in by_layer:
            acc.update(batch.layer, maps, batch.meta)
        if not whole:
            return
        held[batch.layer] = maps
        if batch.layer == batch.meta.layers[-1]:
            joined = join_layers([held[x] for x in batch.meta.layers], batch.meta.layers)
            held.clear()
            for acc in whole:
                acc.update_examples(joined, batch.meta)

    return on_layer


def join_layers(by_layer: Sequence[Sequence], layers: Sequence[int]) -> list:
    """Single-layer maps ``by_layer[j][i]`` (layer ``layers[j]`` of example ``i``) as one
    :class:`AttentionMaps` per example with ``attentions [L, H, n, n]``."""
    import dataclasses

    return [
        dataclasses.replace(parts[0], attentions=torch.cat([m.attentions for m in parts]), layers=tuple(layers))
        for parts in zip(*by_layer)
    ]


#: the most bytes of float32 maps (every layer of a batch) a joined stream may hold
JOIN_BYTES = 1 << 30


def join_batch_size(adapter: ModelAdapter, batch_size: int, budget: Optional[int] = None) -> int:
    """The batch size at which a batch's maps of every layer, at the model's longest
    input (``L · H · n_max² · 4`` bytes each), fit in ``budget``: ``batch_size`` or less;
    0 when not even one example fits (then stream layer by layer). A function of the
    model alone, so every block of a corpus (every Ray worker) decides alike."""
    budget = JOIN_BYTES if budget is None else budget
    per_example = len(adapter.attention_modules(adapter.default_stack)) * adapter.n_heads * adapter.max_length**2 * 4
    return int(min(batch_size, budget // max(per_example, 1)))


def held_items(corpus: Any) -> Optional[list]:
    """The items accumulators fed ``corpus``'s held maps see (``BatchMeta.items``): its
    treebank sentences, or ``None``, for which :func:`feed_maps` gives each example's text."""
    sentences = getattr(corpus, "sentences", None)
    return list(sentences) if sentences else None


def feed_maps(accumulators: Sequence, maps: Sequence, items: Optional[Sequence] = None, batch_size: int = 16) -> list:
    """Give held whole maps to streaming accumulators, layer by layer, as
    :func:`stream_layers` would: the same accumulators serve a run that keeps every
    example's maps (the local engine) and one that streams them (``--engine``). An
    accumulator with ``update_examples(maps, meta)`` gets the whole examples of each
    batch at once instead (faster; it must equal the layer-by-layer result).

    Args:
        accumulators: objects with ``update(layer, maps, meta)`` (filled in place).
        maps: :class:`AttentionMaps` ``[L, H, n, n]`` of examples ``0, 1, …`` (corpus order).
        items: the corpus item of each example (``BatchMeta.items``; default: its text).
        batch_size: examples per :class:`BatchMeta`.

    Returns:
        ``accumulators``.
    """
    import dataclasses

    maps = list(maps)
    if not maps:
        return list(accumulators)
    items = list(items) if items is not None else [m.text for m in maps]
    layers = tuple(maps[0].layers)
    for start in range(0, len(maps), batch_size):
        block = maps[start : start + batch_size]
        meta = BatchMeta(
            indices=tuple(range(start, start + len(block))),
            items=tuple(items[start : start + len(block)]),
            layers=layers,
        )
        whole = [acc for acc in accumulators if hasattr(acc, "update_examples")]
        for acc in whole:
            acc.update_examples(block, meta)
        by_layer = [acc for acc in accumulators if not hasattr(acc, "update_examples")]
        for j, layer in enumerate(layers if by_layer else ()):
            one = [dataclasses.replace(m, attentions=m.attentions[j : j + 1], layers=(layer,)) for m in block]
            for acc in by_layer:
                acc.update(layer, one, meta)
    return list(accumulators)
