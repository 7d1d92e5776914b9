"""Capture attention probabilities: :class:`AttentionCapture` and :func:`capture`.

Two paths, chosen per model (``path="auto"``):

* **interface** — models whose attention modules call transformers' attention interface
  (most of transformers 5) run with the toolkit's registered implementation for the
  duration of the capture; it records the weights of the requested layers only (other
  layers run SDPA) — see :mod:`probe.tracing.attention_interface`.
* **hooks** — other models (Bloom, Falcon, …): forward hooks on the attention modules
  named by the adapter read the probabilities each module returns last in its output
  tuple, with the model switched to eager attention for the duration of the capture
  (:func:`probe.tracing.hooks.eager_attention`). This path is also the reference the interface
  path is tested against.

Each captured example records which in ``meta["attention_source"]`` (``interface …`` or
``eager …``).
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional, Sequence

import torch

from probe.errors import InputError

from probe.inputs.long_inputs import warn_if_capture_too_large
from probe.maps import AttentionMaps
from probe.models.batching import ONE_LENGTH, one_length_batches
from probe.models.sites import Site, supports_restart
from probe.tracing.site_keys import Reader, unsupported
from probe.tracing.trace_context import Trace, TraceView

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

log = logging.getLogger(__name__)


class AttentionCapture(TraceView):
    """Context manager that records attention of chosen layers on every forward.

    Example::

        with AttentionCapture(adapter, layers=[0, 5]) as cap:
            adapter.model(**batch)
        probs = cap.layer_tensors()   # {layer: [batch, head, query, key]}

    Args:
        adapter: a :class:`models.ModelAdapter`.
        layers: model layer indices to record (default: all).
        stack: ``encoder`` / ``decoder`` / ``cross`` (default: the model's main stack).
        keep_grad: keep the probabilities in the autograd graph (``retain_grad`` is
            called) for gradient-weighted analyses; otherwise they are detached.
        heads: head indices to keep (default all): the recorded tensors have
            ``len(heads)`` heads, in this order.
        query_rows: query positions to keep (default all): ``[..., len(rows), key]``.
        store_dtype: dtype the records are kept in (e.g. ``torch.float16``; default: as
            computed).
        path: ``auto`` (the attention interface where the model's attention modules call
            it, else hooks), ``interface`` or ``hooks``. See :mod:`probe.tracing.attention_interface`.
        into_buffer: record the first forward call into one ``[len(layers), batch, heads,
            query, key]`` tensor (:meth:`buffer`), allocated at the first record with its
            shape, dtype and device: the interface path computes each layer's weights in
            its slot, so recording costs no copy; the hooks path copies them there. Later
            calls, and records of another shape, are kept as usual.
        stop: end each forward after the last chosen layer (before the next layer, or
            after the stack's last layer: no final norm, no LM head; TransformerLens's
            ``stop_at_layer``), where the family's layers are modules of their own
            (:func:`probe.models.sites.supports_restart`); the model's output is then not
            computed (the forward returns nothing). Not with ``keep_grad``.

    A view of :class:`probe.tracing.trace_context.Trace`: it reads the ``pattern`` site of each chosen
    layer (layer identity by call where layers share a module: ALBERT). Hooks (or
    interface sessions) are removed and the attention implementation restored on exit,
    also when the forward raised. Captures nest: an inner capture records independently.
    ``attention_source`` says which path ran (``interface …`` or ``eager …`` for hooks).
    """

    def __init__(
        self,
        adapter: ModelAdapter,
        layers: Optional[Sequence[int]] = None,
        stack: Optional[str] = None,
        keep_grad: bool = False,
        *,
        heads: Optional[Sequence[int]] = None,
        query_rows: Optional[Sequence[int]] = None,
        store_dtype: Optional[torch.dtype] = None,
        path: str = "auto",
        into_buffer: bool = False,
        stop: bool = False,
    ) -> None:
        from probe.tracing.attention_interface import choose_path

        self.adapter = adapter
        self.stack = stack or adapter.default_stack
        modules = adapter.attention_modules(self.stack)
        n = len(modules)
        if layers is None:
            layers = list(range(n))
        layers = sorted({int(x) for x in layers})
        bad = [x for x in layers if not 0 <= x < n]
        if bad:
            raise InputError(f"layer(s) {bad} out of range: {adapter.name} has {self.stack} layers 0..{n - 1}")
        if not layers:
            raise InputError("no layers chosen to capture")
        if heads is not None:
            heads = [int(h) for h in heads]
            wrong = [h for h in heads if not 0 <= h < adapter.n_heads]
            if wrong or not heads:
                raise InputError(
                    f"head(s) {wrong or heads} out of range: {adapter.name} has heads 0..{adapter.n_heads - 1}"
                )
        self.layers = layers
        self.keep_grad = keep_grad
        self.heads = heads
        self.query_rows = None if query_rows is None else [int(r) for r in query_rows]
        self.store_dtype = store_dtype
        self.path = choose_path(adapter, self.stack, path)
        self._records: dict[int, list] = {}
        self.into_buffer = into_buffer
        if stop and keep_grad:
            raise InputError("a capture that stops after its last layer computes no output to take a gradient of")
        # after the last chosen layer: before the next one, or after the stack's last (no norm, no head)
        self.stop_before = self.layers[-1] + 1 if stop and supports_restart(adapter, self.stack) else None
        self._buffer: Optional[torch.Tensor] = None
        self._slot = {layer: k for k, layer in enumerate(layers)}
        self._in_buffer: set = set()
        self.attention_source = ""

    def _keep(self, layer: int, probs: torch.Tensor) -> None:
        """Store the requested slice of ``probs`` ``[batch, head, query, key]``."""
        if self.heads is not None:
            probs = probs[:, self.heads]
        if self.query_rows is not None:
            probs = probs[:, :, self.query_rows]
        if self.keep_grad:
            if probs.requires_grad:
                probs.retain_grad()
        else:
            probs = probs.detach()
        if self.store_dtype is not None:
            probs = probs.to(self.store_dtype)
        slot = self._slot_for(layer, tuple(probs.shape), probs.dtype, probs.device)
        if slot is not None:
            if probs.data_ptr() != slot.data_ptr() or probs.stride() != slot.stride():
                slot.copy_(probs)  # computed elsewhere (hooks path, soft-capping, …)
            probs = slot
            self._in_buffer.add(layer)
        self._records.setdefault(layer, []).append(probs)

    def _slot_for(self, layer: int, shape: tuple, dtype: torch.dtype, device: torch.device) -> Optional[torch.Tensor]:
        """``layer``'s slot of the buffer for a first record of ``shape`` (allocated with
        the first record), or None when the buffer holds records of another kind."""
        if not self.into_buffer or layer in self._records:
            return None
        if self._buffer is None:
            with torch.inference_mode(False):  # an ordinary tensor, also when the forward runs in inference mode
                self._buffer = torch.empty((len(self.layers),) + tuple(shape), dtype=dtype, device=device)
        elif (
            tuple(self._buffer.shape[1:]) != tuple(shape)
            or self._buffer.dtype != dtype
            or self._buffer.device != torch.device(device)
        ):
            return None
        return self._buffer[self._slot[layer]]

    def _weights_out(
        self, layer: int, shape: tuple, dtype: torch.dtype, device: torch.device
    ) -> Optional[torch.Tensor]:
        """Where the interface may compute ``layer``'s weights ``[batch, heads, q, k]``: its
        slot of the buffer when the record is kept as computed (all heads and rows,
        detached, same dtype)."""
        if (
            not self.into_buffer
            or self.heads is not None
            or self.query_rows is not None
            or self.keep_grad
            or (self.store_dtype is not None and self.store_dtype != dtype)
        ):
            return None
        return self._slot_for(layer, shape, dtype, device)

    def buffer(self) -> Optional[torch.Tensor]:
        """``[layer, batch, head, query, key]``: the first call's records of every layer, in
        one tensor (``into_buffer=True``); None when some layer's record is not in it."""
        if self._buffer is None or len(self._in_buffer) != len(self.layers):
            return None
        return self._buffer

    def _reader(self, layer: int) -> Reader:
        return Reader(
            lambda probs, ctx: self._keep(layer, probs),
            out=lambda shape, dtype, device: self._weights_out(layer, shape, dtype, device),
        )

    def _trace(self) -> Trace:
        read = {Site("pattern", layer, self.stack): self._reader(layer) for layer in self.layers}
        return Trace(self.adapter, read=read, path=self.path, stop_before=self.stop_before)

    def _entered(self, tr: Trace) -> None:
        self.attention_source = tr.attention_source

    def clear(self) -> None:
        """Forget what was recorded (between batches)."""
        self._records.clear()

    def layer_tensors(self, call: int = -1) -> dict:
        """``{layer: probs [batch, head, query, key]}`` of one recorded forward call
        (default the last). Generation makes one call per step; a plain forward, one."""
        missing = [layer for layer in self.layers if layer not in self._records]
        if missing:
            raise RuntimeError(f"no attention recorded for layers {missing}: was the model run?")
        return {layer: recs[call] for layer, recs in self._records.items()}

    def stacked(self, call: int = -1) -> torch.Tensor:
        """All recorded layers stacked: ``[layer, batch, head, query, key]``."""
        t = self.layer_tensors(call)
        shapes = {tuple(t[layer].shape[-2:]) for layer in self.layers}
        if len(shapes) > 1:
            raise unsupported(
                self.adapter,
                f"its layers attend over different lengths {sorted(shapes)} (pooled "
                "or downsampled): not one [layer, head, query, key] map",
            )
        rows = {tuple(t[layer].shape[:2]) for layer in self.layers}
        if len(rows) > 1:  # Swin: each stage attends within its own windows, with its own head count
            raise unsupported(
                self.adapter,
                f"its layers return attention of different [rows, heads] {sorted(rows)} (windowed attention: "
                "each stage's windows are rows of its own, Swin): not one [layer, head, query, key] map per input",
            )
        return torch.stack([t[layer] for layer in self.layers])


def _kind(adapter: ModelAdapter, stack: str) -> str:
    if stack == "cross":
        return "cross"
    if stack == "decoder":
        return "causal"
    return "self"


def _shifted(target: Any) -> tuple[tuple, tuple, torch.Tensor]:
    """Query-side token facts of teacher-forced decoder inputs: start + target[:-1]."""
    tokens = ("<start>",) + tuple(target.tokens[:-1])
    word_ids = (None,) + tuple(target.word_ids[:-1])
    special = torch.cat([torch.tensor([True]), target.special_mask[:-1]])
    return tokens, word_ids, special


#: default bound on the bytes of maps :func:`iter_capture` holds in its sort window
WINDOW_BYTES = 256 * 2**20


def iter_capture(
    adapter: ModelAdapter,
    texts: Iterable[str],
    *,
    layers: Optional[Sequence[int]] = None,
    batch_size: int = 16,
    stack: Optional[str] = None,
    word_spans: Optional[Iterable] = None,
    targets: Optional[Iterable[str]] = None,
    truncate: bool = False,
    dtype: Optional[torch.dtype] = None,
    progress: bool = False,
    total: Optional[int] = None,
    sort_window: int = 8,
    heads: Optional[Sequence[int]] = None,
    path: str = "auto",
    window_bytes: int = WINDOW_BYTES,
    standalone: bool = False,
) -> Iterator[AttentionMaps]:
    """Like :func:`capture`, but yields maps one example at a time, in input order.

    Examples are read into a window and batched by length within it (less padding). The
    window is bounded in bytes, not only in examples: it closes at ``batch_size *
    sort_window`` examples or as soon as the maps it will hold — per example ``layers ×
    heads × query × key × bytes per value``, known from its encoding before any forward —
    reach ``window_bytes`` (texts are read and tokenized ``batch_size`` at a time, one
    tokenizer call each; what the window does not take waits, as text and token ids, for the
    next one); a batch is cut as well before its padded maps would pass
    ``window_bytes``. Peak memory for maps is thus about ``2 × window_bytes`` (the window's
    finished maps, with the padding of their batches unless ``standalone``, which the
    length sort keeps small; plus one batch's forward), or one example when a single example is larger,
    whatever the corpus size and text lengths (``sort_window=1``: strictly one batch).

    Each example's map is a view of its batch's buffer (no copy after the forward; see
    :func:`_buffer_fits`), so a batch's maps are freed when the last of them is;
    ``standalone=True`` gives each its own contiguous tensor instead (one copy), for
    callers that keep some examples long after their batch, such as a store writer
    queueing a shard.
    """
    stack = stack or adapter.default_stack
    dtype = _storage_dtype(adapter, dtype)
    if batch_size < 1 or sort_window < 1:
        raise InputError(f"batch_size and sort_window must be ≥ 1, got {batch_size}, {sort_window}")
    needs_target = adapter.arch == "encoder-decoder" and stack in ("decoder", "cross")
    texts = iter(texts)
    spans_it = iter(word_spans) if word_spans is not None else None
    targets_it = iter(targets) if targets is not None else None
    if needs_target and targets_it is None:
        raise InputError(
            f"capturing the {stack} attention of an encoder-decoder model needs target texts (targets=... / --target)"
        )
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, unit="ex", desc=f"capture {adapter.name}")
    AttentionCapture(adapter, layers=layers, stack=stack, heads=heads, path=path)  # validates before any work
    n_layers = len(set(layers)) if layers is not None else adapter.n_layers_of(stack)
    n_heads = len(set(heads)) if heads is not None else adapter.n_heads
    cell_bytes = max(1, n_layers * n_heads * torch.tensor([], dtype=dtype).element_size())
    pending: deque = deque()  # read and tokenized, not yet in a window
    settings = dict(layers=layers, stack=stack, needs_target=needs_target, dtype=dtype, heads=heads, path=path)
    settings["standalone"] = standalone

    def read() -> list:
        return _read_chunk(adapter, texts, spans_it, targets_it, batch_size, truncate)

    try:
        while True:
            window, encs, tencs, cells = _fill_window(
                pending, read, batch_size * sort_window, window_bytes, cell_bytes, stack
            )
            if not window:
                break
            done = _window_maps(adapter, encs, tencs, cells, batch_size, window_bytes // cell_bytes, bar, **settings)
            for k in range(len(window)):
                yield done.pop(k)
    finally:
        if bar is not None:
            bar.close()


def _window_maps(
    adapter: ModelAdapter,
    encs: list,
    tencs: list,
    cells: list[int],
    batch_size: int,
    max_cells: int,
    bar: Any,
    **batch: Any,
) -> dict[int, AttentionMaps]:
    """The maps of one window's examples ``{position in the window: maps}``, captured in
    batches of similar length (:func:`_batches`; ``batch``: :func:`_capture_batch`'s
    settings), of one length where the model leaks padding (``adapter.batching``);
    ``bar``: a progress bar or None."""
    order = sorted(range(len(encs)), key=lambda k: len(encs[k]))
    done: dict[int, AttentionMaps] = {}
    batches = _batches(order, cells, batch_size, max_cells)
    if adapter.batching == ONE_LENGTH:
        lengths = [(len(e), len(tencs[k]) if tencs else 0) for k, e in enumerate(encs)]
        batches = one_length_batches(batches, lengths)
    for idx in batches:
        maps = _capture_batch(adapter, [encs[k] for k in idx], [tencs[k] for k in idx] if tencs else None, **batch)
        done.update(zip(idx, maps))
        if bar is not None:
            bar.update(len(idx))
    return done


def _read_chunk(
    adapter: ModelAdapter,
    texts: Iterator[str],
    spans_it: Optional[Iterator],
    targets_it: Optional[Iterator[str]],
    batch_size: int,
    truncate: bool,
) -> list[tuple]:
    """The next ``batch_size`` texts (fewer at the end, none after it), tokenized in one
    call with one vectorised alignment: ``[((text, spans, target), encoding, target
    encoding or None)]`` (an encoder-decoder's decoder inputs: the targets, else the source)."""
    chunk: list[tuple[str, Any, Any]] = []  # (text, word spans, target text)
    for text in texts:
        spans = next(spans_it) if spans_it is not None else None
        target = next(targets_it) if targets_it is not None else None
        chunk.append((text, spans, target))
        if len(chunk) == batch_size:
            break
    if not chunk:
        return []
    chunk_encs = adapter.encode_batch([t for t, _, _ in chunk], [s for _, s, _ in chunk], truncate=truncate)
    chunk_tencs: list = [None] * len(chunk)
    if adapter.arch == "encoder-decoder":
        chunk_tencs = adapter.encode_batch(
            [tg if targets_it is not None else t for t, _, tg in chunk], truncate=truncate, target=True
        )
    return list(zip(chunk, chunk_encs, chunk_tencs))


def _fill_window(
    pending: deque, read: Callable[[], list], max_examples: int, window_bytes: int, cell_bytes: int, stack: str
) -> tuple[list, list, list, list[int]]:
    """The next window: examples taken one at a time from ``pending`` (refilled by
    ``read()``) until it holds ``max_examples`` or its maps reach ``window_bytes``;
    ``(items, encodings, target encodings, map cells per example)`` (empty at the end)."""
    window: list = []
    encs: list = []
    tencs: list = []
    cells: list[int] = []
    held = 0
    while len(window) < max_examples and held < window_bytes:
        if not pending:
            pending.extend(read())
            if not pending:
                break
        item, enc, tenc = pending.popleft()  # the window takes one example at a time
        window.append(item)
        encs.append(enc)
        if tenc is not None:
            tencs.append(tenc)
        cells.append(_map_cells(enc, tenc, stack))
        held += cells[-1] * cell_bytes
    return window, encs, tencs, cells


def _storage_dtype(adapter: ModelAdapter, dtype: Optional[torch.dtype]) -> torch.dtype:
    """``dtype``, else float64 for a float64 model (its maps at its own accuracy), else float32."""
    if dtype is not None:
        return dtype
    param = next(adapter.model.parameters(), None)
    return torch.float64 if param is not None and param.dtype == torch.float64 else torch.float32


def _map_cells(enc: Any, tenc: Any, stack: str) -> int:
    """Query × key cells of one example's map (per layer and head)."""
    if tenc is None or stack == "encoder":
        return len(enc) ** 2
    return len(tenc) ** 2 if stack == "decoder" else len(tenc) * len(enc)


def _batches(order: list, cells: list, batch_size: int, max_cells: int) -> Iterator[list]:
    """Consecutive runs of ``order`` (ascending length) of at most ``batch_size`` examples
    whose padded maps (``len(batch) × largest cells``) stay within ``max_cells``; an example
    larger than that alone forms a batch."""
    batch: list = []
    for k in order:
        if batch and (len(batch) == batch_size or (len(batch) + 1) * max(cells[k], cells[batch[-1]]) > max_cells):
            yield batch
            batch = []
        batch.append(k)
    if batch:
        yield batch


#: batches whose records are smaller than this are trimmed example by example with one
#: ``torch.stack`` each (fewer calls); larger ones layer by layer (lower peak memory)
STACK_BYTES = 32 * 2**20


def _query_key_lengths(enc: Any, tenc: Any, stack: str) -> tuple[int, int]:
    """Unpadded (query, key) lengths of one example's map in ``stack``."""
    if tenc is None:
        return len(enc), len(enc)
    n_q = len(tenc)  # teacher forcing: start + target[:-1]
    return (n_q, n_q) if stack == "decoder" else (n_q, len(enc))


def _trimmed(per_layer: dict, layers: list, shapes: list, dtype: torch.dtype) -> list[torch.Tensor]:
    """Per example, its map without padding ``[layer, head, query, key]`` (``dtype``, CPU),
    from ``per_layer`` ``{layer: [batch, head, query, key]}`` (emptied on the way).

    Records above :data:`STACK_BYTES`: each example gets one tensor written layer by
    layer, and each layer's record is released once copied, so the batch's maps exist
    about once (not records plus stacked copies: at n = 512, batch 16, MiniLM, 1.2 GB
    less at the peak). Smaller ones: one ``torch.stack`` per example. Same values.
    Half-precision records are renormalised in float32 as before storage.
    """
    first = per_layer[layers[0]]
    low_precision = first.dtype not in (torch.float32, torch.float64)
    work = torch.float32 if low_precision else dtype
    device = first.device if low_precision else torch.device("cpu")
    n_heads = first.shape[1]
    if not low_precision and len(layers) * first.numel() * first.element_size() <= STACK_BYTES:
        # small batch: one stacking call per example costs less than a copy call per layer
        return [
            torch.stack([per_layer[layer][i, :, :n_q, :n_k] for layer in layers]).to(dtype).cpu()
            for i, (n_q, n_k) in enumerate(shapes)
        ]
    maps = [torch.empty((len(layers), n_heads, n_q, n_k), dtype=work, device=device) for n_q, n_k in shapes]
    for j, layer in enumerate(layers):
        rec = per_layer.pop(layer)
        for i, (n_q, n_k) in enumerate(shapes):
            maps[i][j].copy_(rec[i, :, :n_q, :n_k])
        del rec
    if low_precision:
        maps = [(a / a.sum(-1, keepdim=True).clamp(min=1e-12)).to(dtype).cpu() for a in maps]
    return maps


def _buffer_fits(adapter: ModelAdapter, dtype: torch.dtype) -> bool:
    """Whether a batch's maps can be kept as recorded in one ``[layer, batch, head, query,
    key]`` buffer (:meth:`AttentionCapture.buffer`): not for a GPU model (the maps go to
    the CPU) nor a compute dtype other than ``dtype`` (half-precision records are
    renormalised in float32), where each example is converted anyway.

    Each example's map is then the view ``buffer[:, i, :, :n_query, :n_key]`` — no copy
    beyond the forward's own weights, as HF's ``output_attentions`` hands out one tensor
    per layer for the batch. The examples of a batch share the buffer (as the maps of HF's
    batch do); ``.clone()`` one to keep it alone. A store writes each as its own tensor.
    """
    param = next(adapter.model.parameters(), None)
    return (
        param is not None
        and param.device.type == "cpu"
        and param.dtype == dtype
        and dtype in (torch.float32, torch.float64)
    )


def _capture_batch(
    adapter: ModelAdapter,
    encs: list,
    tencs: Optional[list],
    layers: Optional[Sequence[int]],
    stack: str,
    needs_target: bool,
    dtype: torch.dtype,
    *,
    heads: Optional[Sequence[int]] = None,
    path: str = "auto",
    standalone: bool = False,
) -> list[AttentionMaps]:
    """One forward over a batch of encodings; the maps of each example, padding trimmed:
    views of one buffer, or (``standalone``) each its own tensor."""
    inputs = adapter.batch(encs)
    if tencs is not None:
        inputs.update(adapter.decoder_inputs(tencs))
    n_source = inputs["input_ids"].shape[1]
    n_target = inputs["decoder_input_ids"].shape[1] if tencs is not None else n_source
    n_key = n_target if stack == "decoder" else n_source
    n_query = n_target if stack != "encoder" else n_source
    warn_if_capture_too_large(
        adapter,
        len(encs),
        n_query,
        n_key,
        store_dtype=dtype,
        layers=len(layers) if layers is not None else adapter.n_layers_of(stack),
        heads=len(heads) if heads is not None else None,
    )
    into_buffer = not standalone and _buffer_fits(adapter, dtype)
    # hooks live only during the forward, never while the caller holds a yielded map;
    # inference mode (no autograd bookkeeping at all: the records are detached anyway)
    # costs ~1–2% less than no_grad at small n; the buffer is made outside it, so the
    # maps handed out are ordinary tensors; the forward ends after the last captured layer
    # (no final norm or LM head: SmolLM2's 49,152-token head is a fifth of its forward)
    with (
        AttentionCapture(
            adapter, layers=layers, stack=stack, heads=heads, path=path, into_buffer=into_buffer, stop=True
        ) as cap,
        torch.inference_mode(),
    ):
        adapter.model(**inputs)
    targets = tencs if tencs is not None else []  # the decoder stack's encodings, where needs_target
    shapes = [_query_key_lengths(enc, targets[i] if needs_target else None, stack) for i, enc in enumerate(encs)]
    per_layer = cap.layer_tensors()  # {layer: [batch, head, query, key]}; raises unless every layer ran
    for layer, rec in per_layer.items():
        if tuple(rec.shape[-2:]) != (n_query, n_key):
            raise unsupported(
                adapter,
                f"layer {layer} attends {tuple(rec.shape[-2:])} (query, key) positions "
                f"for an input of {(n_query, n_key)}: not one [query, key] map per layer",
            )
    into = cap.buffer()
    cap.clear()  # per_layer now holds the only reference to each record
    if into is not None:  # each example a view of its part of the batch's buffer
        maps = [into[:, i, :, :n_q, :n_k] for i, (n_q, n_k) in enumerate(shapes)]
    else:
        maps = _trimmed(per_layer, cap.layers, shapes, dtype)
    kind = _kind(adapter, stack)
    return [
        _example_maps(adapter, enc, targets[i] if needs_target else None, maps[i], stack, kind, cap, heads)
        for i, enc in enumerate(encs)
    ]


def _example_maps(
    adapter: ModelAdapter,
    enc: Any,
    tenc: Any,
    a: torch.Tensor,
    stack: str,
    kind: str,
    cap: AttentionCapture,
    heads: Optional[Sequence[int]],
) -> AttentionMaps:
    """One example's :class:`AttentionMaps` from its map ``a`` ``[layer, head, query, key]``
    (padding left out), its encoding ``enc`` and, where the queries are the decoder's
    (``stack`` decoder or cross), its target encoding ``tenc``."""
    extra = {}
    tokens, wids, special, words = enc.tokens, enc.word_ids, enc.special_mask, enc.words
    if tenc is not None:
        q_tokens, q_wids, q_special = _shifted(tenc)
        if stack == "decoder":
            tokens, wids, special, words = q_tokens, q_wids, q_special, tenc.words
        else:
            extra = dict(
                query_tokens=q_tokens,
                query_word_ids=q_wids,
                query_special_mask=q_special,
                query_words=tenc.words,
            )
    meta: dict[str, Any] = {"model": adapter.name, "stack": stack, "attention_source": cap.attention_source}
    if heads is not None and cap.heads is not None:  # partial capture: the model head index of each stored head
        meta["heads"] = list(cap.heads)
    if enc.truncated:
        meta["truncated"] = True
    if enc.unaligned_words:
        meta["unaligned_words"] = list(enc.unaligned_words)
    if enc.absorbed_words:  # words without a token of their own: [word, token] pairs
        meta["absorbed_words"] = [list(x) for x in enc.absorbed_words]
    return AttentionMaps(
        attentions=a,
        tokens=tokens,
        word_ids=wids,
        special_mask=special,
        words=words,
        layers=tuple(cap.layers),
        kind=kind,
        text=enc.text,
        meta=meta,
        validate=False,
        **extra,
    )


def capture(adapter: ModelAdapter, texts: Sequence[str] | str, **kwargs: Any) -> list[AttentionMaps]:
    """Run the model on ``texts`` and return one :class:`AttentionMaps` per text.

    Args:
        adapter: a :class:`models.ModelAdapter` (``models.load_model(...)``).
        texts: a string or a sequence of strings.
        layers: model layers to capture (default all).
        batch_size: examples per forward; batches of mixed length are right-padded and
            the padding is trimmed from every map. A model whose padding leaks into other
            positions (``adapter.batching == "one length per batch"``) gets batches of one
            token length, each text exactly the maps of its own forward.
        stack: ``encoder`` | ``decoder`` | ``cross`` (default: the main stack).
        word_spans: per text, the ``(start, end)`` character spans of its words
            (treebank words); default: words and punctuation split from the text.
        targets: per text, the target text (encoder-decoder decoder/cross attention,
            teacher forcing).
        truncate: cut texts beyond the model's limit instead of refusing them.
        dtype: storage dtype of the maps (float32, float16, float64; default float32, or
            float64 for a float64 model).
        progress: show a tqdm progress bar.
        heads: model heads to keep (default all); the maps then hold ``len(heads)``
            heads and ``meta["heads"]`` names them.
        path: ``auto`` | ``interface`` | ``hooks`` (see :class:`AttentionCapture`).
        standalone: give each example's map a tensor of its own (one copy after the
            forward) instead of a view of its batch's buffer.

    Returns:
        ``list[AttentionMaps]``, each ``attentions[layer, head, query, key]``.

    Raises:
        ValueError: empty text, text beyond the model's length limit, layer out of range.
    """
    if isinstance(texts, str):
        texts = [texts]
    texts = list(texts)
    if not texts:
        raise InputError("no input texts: give at least one sentence")
    return list(iter_capture(adapter, texts, total=len(texts), **kwargs))


def capture_inputs(
    adapter: ModelAdapter,
    inputs: dict,
    *,
    layers: Optional[Sequence[int]] = None,
    stack: Optional[str] = None,
    dtype: Optional[torch.dtype] = None,
    path: str = "auto",
) -> list[AttentionMaps]:
    """Capture the attention of a model whose input is not text — ``pixel_values``
    ``[batch, channels, height, width]`` (ViT, CLIP vision; Dosovitskiy et al., 2021),
    ``input_features`` ``[batch, mel bins, frames]`` (Whisper; Radford et al., 2022),
    ``input_values`` ``[batch, samples]`` (wav2vec 2.0) — from one forward over ``inputs``.

    Positions are named ``<0>``, ``<1>``, … (patches, frames) and belong to no word. An
    encoder-decoder without ``decoder_input_ids`` gets its start token as the decoder input.

    Returns:
        one :class:`AttentionMaps` per batch row, ``attentions[layer, head, query, key]``
        (no padding: every row has the batch's full length).

    Raises:
        ValueError: ``inputs`` without the model's main input, a layer out of range.
        UnsupportedModel: the model returns another layout than ``[batch, head, query, key]``.
    """
    stack = stack or adapter.default_stack
    name = adapter.input_name
    if name not in inputs:
        raise InputError(f"{adapter.name} takes {name!r}; the inputs have {', '.join(inputs) or 'nothing'}")
    inputs = dict(inputs)
    batch = int(inputs[name].shape[0])
    if adapter.arch == "encoder-decoder" and "decoder_input_ids" not in inputs:
        inputs["decoder_input_ids"] = torch.full(
            (batch, 1), adapter.decoder_start_id(), dtype=torch.long, device=adapter.device
        )
    dtype = _storage_dtype(adapter, dtype)
    with AttentionCapture(adapter, layers=layers, stack=stack, path=path) as cap, torch.inference_mode():
        adapter.model(**inputs)
    stacked = cap.stacked().to(dtype).cpu()  # [layer, batch, head, query, key]
    if stacked.shape[1] != batch:
        raise unsupported(
            adapter,
            f"it attends over its {batch} inputs as {stacked.shape[1]} sequence(s) (Pixtral "
            "concatenates images): not one map per input",
        )
    kind = _kind(adapter, stack)
    meta = {"model": adapter.name, "stack": stack, "attention_source": cap.attention_source, "inputs": name}
    return [_input_maps(adapter, stacked[:, i].clone(), kind, tuple(cap.layers), dict(meta)) for i in range(batch)]


def _input_maps(adapter: ModelAdapter, a: torch.Tensor, kind: str, layers: tuple, meta: dict) -> AttentionMaps:
    """One input's maps ``a`` ``[layer, head, query, key]``: positions named ``<0>``, ``<1>``,
    … and of no word (a cross stack's queries too).

    Raises:
        UnsupportedModel: the weights the model's attention modules return are not
            probabilities (the model's own, not the user's input).
    """
    n_q, n_k = a.shape[-2:]
    keys = tuple(f"<{k}>" for k in range(n_k))
    extra: dict = {}
    if kind == "cross":
        extra = dict(
            query_tokens=tuple(f"<{k}>" for k in range(n_q)),
            query_word_ids=(None,) * n_q,
            query_special_mask=torch.zeros(n_q, dtype=torch.bool),
        )
    try:
        return AttentionMaps(
            attentions=a,
            tokens=keys,
            word_ids=(None,) * n_k,
            special_mask=torch.zeros(n_k, dtype=torch.bool),
            layers=layers,
            kind=kind,
            meta=meta,
            **extra,
        )
    except InputError as e:  # the model's own weights, not the user's input: a model we cannot read
        raise unsupported(
            adapter,
            f"the weights its attention modules return are not attention probabilities ({e}; "
            "Autoformer's auto-correlation): no [query, key] distribution to capture",
        ) from None
