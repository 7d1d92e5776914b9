"""Capture a whole corpus to a store, resumably: :func:`capture_corpus`."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

import torch

from probe.runs.capture import iter_capture
from probe.errors import InputError
from probe.inputs.corpus import Corpus, fit_to_model
from probe.store.directory import Store, StoreWriter, fingerprint

if TYPE_CHECKING:
    from probe.maps import AttentionMaps
    from probe.models.adapter import ModelAdapter

log = logging.getLogger(__name__)

#: batches are formed within fixed blocks of ``batch_size * SORT_WINDOW`` consecutive examples
#: (sorted by length inside a block), so an example's batch depends only on its block: a resumed
#: capture recomputes a partly finished block whole and stores bit for bit what a clean one does
SORT_WINDOW = 8


def capture_corpus(
    adapter: ModelAdapter,
    corpus: Corpus,
    out: str | os.PathLike,
    *,
    layers: Optional[Sequence[int]] = None,
    batch_size: int = 16,
    dtype: str = "float32",
    shard_size: int = 64,
    stack: Optional[str] = None,
    progress: bool = False,
    on_long: str = "skip",
) -> Store:
    """Capture every example of ``corpus`` into the store at ``out``.

    Examples longer than the model's limit are skipped and counted in the manifest
    (``on_long="skip"``), refused (``"error"``), or cut to the limit (``"truncate"``). Running it again on the same model, layers and corpus resumes: finished
    examples are kept, the rest are captured, none twice. Peak memory for maps is
    bounded in bytes, whatever the corpus size or text lengths: about twice
    :data:`probe.runs.capture.WINDOW_BYTES` (256 MiB; the sort window's maps are capped at that
    many bytes, estimated from each encoding before the forward, and so is each padded
    batch), plus one shard waiting to be written (written at ``shard_size`` examples or
    :data:`probe.store.directory.SHARD_BYTES`, 256 MiB, whichever comes first).
    Batches are formed inside fixed blocks of ``batch_size × 8`` consecutive examples, so
    that a resumed capture (which recaptures a partly finished block whole, keeping only
    the missing examples) stores exactly the values a clean capture stores: the same
    batch composition, hence the same padding and the same floating-point sums. Files a
    killed capture left behind (shards without index lines) are removed on resume.
    Only one process writes a store at a time (a second one fails at once, see
    :mod:`probe.store.lock`).

    Raises:
        ValueError: ``out`` holds a capture of other input or settings; layer out of range;
            over-long input with ``on_long="error"``; nothing left to capture.
    """
    fitted = _fitted(adapter, corpus, on_long)
    ids = _ids_after_fit(corpus, fitted, adapter)
    stack = stack or adapter.default_stack
    options = {"batch_size": batch_size, "truncate": on_long == "truncate"}  # both change what is stored
    with StoreWriter(
        out, store_manifest(adapter, corpus, fitted, layers, stack, options=options), shard_size=shard_size, dtype=dtype
    ) as writer:
        todo = [k for k, i in enumerate(ids) if i not in writer.done]
        if len(todo) < len(ids):
            log.info("resuming: %d of %d examples already in %s", len(ids) - len(todo), len(ids), out)
        bar = None
        if progress and todo:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(todo), unit="ex", desc=f"capture {adapter.name}")
        block = batch_size * SORT_WINDOW
        try:
            for start in range(0, len(ids), block):
                ks = list(range(start, min(len(ids), start + block)))
                if all(ids[k] in writer.done for k in ks):
                    continue  # a finished block; a partly finished one is captured whole (same batches)
                stream = iter_capture(
                    adapter,
                    [fitted.texts[k] for k in ks],
                    layers=layers,
                    batch_size=batch_size,
                    stack=stack,
                    sort_window=SORT_WINDOW,
                    word_spans=[fitted.word_spans[k] for k in ks] if fitted.word_spans else None,
                    targets=[fitted.targets[k] for k in ks] if fitted.targets else None,
                    truncate=on_long == "truncate",
                    standalone=True,
                )
                _write_block(writer, fitted, ids, ks, stream, bar)
        finally:
            if bar is not None:
                bar.close()
    return Store(out)


def _fitted(adapter: ModelAdapter, corpus: Corpus, on_long: str) -> Corpus:
    """``corpus`` as it will be captured: examples over the model's limit dropped
    (``on_long="skip"``), refused (``"error"``) or kept to be cut (``"truncate"``).

    Raises:
        InputError: an unknown ``on_long``; an over-long input with ``"error"``; nothing left.
    """
    if on_long not in ("skip", "error", "truncate"):
        raise InputError(f"on_long must be skip, error or truncate, got {on_long!r}")
    fitted = corpus if on_long == "truncate" else fit_to_model(corpus, adapter, allow_empty=True)
    if len(fitted) < len(corpus) and on_long == "error":
        raise InputError(
            f"{len(corpus) - len(fitted)} input text(s) longer than {adapter.name}'s limit of "
            f"{adapter.max_length} tokens: shorten them or pass --truncate"
        )
    if not len(fitted):
        raise InputError(f"all {len(corpus)} examples are longer than {adapter.max_length} tokens; nothing to capture")
    return fitted


def _write_block(
    writer: StoreWriter, fitted: Corpus, ids: list, ks: list[int], stream: Iterator[AttentionMaps], bar: Any
) -> None:
    """Add the maps of block ``ks`` (``stream``, in order) the store does not hold yet,
    each with its count of unknown tokens in its index meta; ``bar``: a progress bar or None."""
    for k, maps in zip(ks, stream):
        if ids[k] not in writer.done:
            if fitted.unknown:  # per example in the store's index (meta)
                maps.meta["unknown_tokens"] = int(fitted.unknown[k])
            writer.add(ids[k], maps)
            if bar is not None:
                bar.update(1)


def store_manifest(
    adapter: ModelAdapter,
    corpus: Corpus,
    fitted: Corpus,
    layers: Optional[Sequence[int]] = None,
    stack: Optional[str] = None,
    *,
    options: Optional[dict] = None,
    forward_dtype: Optional[str] = None,
    device: Optional[str] = None,
) -> dict:
    """The manifest of a store of ``corpus`` (``fitted``: what is left after the length check),
    with its provenance: fingerprints of the weights and the tokenizer
    (:mod:`probe.models.fingerprint`), the forward dtype and device kind (read from the
    model unless given: an engine's workers run it elsewhere), the toolkit version and the
    capture ``options``. A resume that differs in any of them is refused
    (:func:`probe.store.directory.refuse_other_capture`)."""
    from probe.models.fingerprint import device_kind, tokenizer_fingerprint, weights_fingerprint
    from probe.models.fingerprint import forward_dtype as dtype_of

    stack = stack or adapter.default_stack
    if layers is not None and len(set(layers)) != len(layers):
        raise InputError(f"layers {list(layers)} name a layer twice: give each layer once")
    if layers is not None and not len(layers):
        raise InputError("no layer to capture: give layers like 0,2,5 (or leave --layers out: every layer)")
    return {
        "model": adapter.name,
        "stack": stack,
        "layers": sorted(layers) if layers is not None else list(range(adapter.n_layers_of(stack))),
        "input": fingerprint(corpus.texts),
        "source": corpus.source,
        # the inputs given, those the reader skipped (--skip-invalid) included: a finished
        # store holds n_input less every skipped count (Store.expected)
        "n_input": len(corpus) + sum(corpus.skipped.values()),
        "skipped": fitted.skipped,
        "n_heads": adapter.n_heads,
        "weights": weights_fingerprint(adapter.model),
        "forward_dtype": forward_dtype or dtype_of(adapter.model),
        "device": device or device_kind(adapter.model),
        "tokenizer": tokenizer_fingerprint(adapter.tokenizer),
        "toolkit": toolkit_version(),
        "options": dict(options or {}),
        # learned sinks (gpt-oss) take a softmax column that is dropped: rows sum below 1
        "rows": "at most 1"
        if any(torch.is_tensor(getattr(m, "sinks", None)) for m in adapter.model.modules())
        else "sum to 1",
    }


def toolkit_version() -> str:
    """The installed attention-probe version (``"unknown"`` when run from a bare checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("attention-probe")
    except PackageNotFoundError:
        return "unknown"


def _ids_after_fit(corpus: Corpus, fitted: Corpus, adapter: ModelAdapter) -> list:
    """Corpus indices of the examples that survived :func:`fit_to_model`."""
    if len(fitted) == len(corpus):
        return list(range(len(corpus)))
    lengths = [len(x) for x in adapter.tokenizer(list(corpus.texts), add_special_tokens=True)["input_ids"]]
    return [i for i, n in enumerate(lengths) if n <= adapter.max_length]
