"""Long inputs: estimate a capture's memory before it runs, and read large maps sparsely.

A full capture of ``n`` tokens stores ``layers × heads × n²`` weights per example: for a
24-layer, 16-head model at n = 2,048 that is 6 GiB in float32. The capture keeps only what
it is asked for (``layers=``, ``heads=``, ``AttentionCapture(query_rows=...)``, float16
storage); :func:`warn_if_capture_too_large` says so, with the estimate, before a forward
that would not fit in the memory available (``/proc/meminfo``'s ``MemAvailable`` on the
CPU, ``torch.cuda.mem_get_info`` on a GPU).

An ``n × n`` picture of 2,048 tokens is unreadable; :func:`top_k_edges` gives the ``k``
strongest query→key edges per head as a tidy table and :func:`attention_window` a square
window of the map, for views that show one of those instead.
"""

from __future__ import annotations

import logging
import time
import warnings
from typing import TYPE_CHECKING, Any, Optional, Sequence

import torch

from probe.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

    from probe.inputs.corpus import Corpus
    from probe.models.adapter import ModelAdapter

log = logging.getLogger(__name__)

#: eager attention holds about this many ``[batch, heads, q, k]`` tensors at once
#: (scores, softmax in float32, weights) while one layer runs
EAGER_TEMPORARIES = 3


def available_memory_bytes(device: torch.device | str = "cpu") -> Optional[int]:
    """Free memory on ``device`` in bytes (None when it cannot be read)."""
    device = torch.device(device)
    if device.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except (RuntimeError, AssertionError):
            return None
    now = time.monotonic()
    if now - _MEMINFO[0] < MEMINFO_TTL:  # a capture asks once per batch: read at most every TTL
        return _MEMINFO[1]
    free = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    free = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    _MEMINFO[:] = [now, free]
    return free


#: seconds a reading of ``/proc/meminfo`` is reused (reading it costs ~0.2 ms)
MEMINFO_TTL = 1.0
_MEMINFO: list = [-float("inf"), None]  # [monotonic time of the reading, bytes]


def capture_bytes(
    batch: int,
    n_query: int,
    n_key: int,
    *,
    layers: int,
    heads: int,
    model_heads: int,
    compute_bytes: int = 4,
    store_bytes: int = 4,
) -> int:
    """Estimated peak bytes of one capture forward (beyond the model's own activations).

    The recorded layers' weights ``batch × heads × q × k`` are held until the forward ends
    (``compute_bytes`` each) and copied per example into storage (``store_bytes``); the
    layer being computed holds :data:`EAGER_TEMPORARIES` full ``[batch, model_heads, q, k]``
    float32 tensors.
    """
    cells = batch * n_query * n_key
    kept = cells * layers * heads * (compute_bytes + store_bytes)
    return int(kept + cells * model_heads * 4 * EAGER_TEMPORARIES)


def warn_if_capture_too_large(
    adapter: ModelAdapter,
    batch: int,
    n_query: int,
    n_key: int,
    *,
    layers: int,
    heads: Optional[int] = None,
    store_dtype: torch.dtype = torch.float32,
) -> Optional[int]:
    """Warn (``ResourceWarning`` and the log) when a capture would need more memory than is
    available, naming the estimate and what to reduce. Returns the estimate in bytes."""
    model_heads = adapter.n_heads
    need = capture_bytes(
        batch,
        n_query,
        n_key,
        layers=layers,
        heads=heads or model_heads,
        model_heads=model_heads,
        compute_bytes=torch.finfo(adapter.model.dtype).bits // 8,
        store_bytes=torch.finfo(store_dtype).bits // 8,
    )
    free = available_memory_bytes(adapter.device)
    if free is not None and need > free:
        msg = (
            f"capturing {layers} layer(s) × {heads or model_heads} head(s) of {batch} example(s) "
            f"with {n_query}×{n_key} tokens needs about {need / 2**30:.1f} GiB, but only "
            f"{free / 2**30:.1f} GiB is available on {adapter.device}: capture fewer layers (layers=…), "
            "heads (heads=…) or query rows, store float16, or lower the batch size"
        )
        log.warning(msg)
        warnings.warn(msg, ResourceWarning, stacklevel=3)
    return need


def top_k_edges(
    maps: Any,  # AttentionMaps (probe.maps is not below this room)
    k: int = 20,
    *,
    layers: Optional[Sequence[int]] = None,
    heads: Optional[Sequence[int]] = None,
    skip_special: bool = False,
) -> pd.DataFrame:
    """The ``k`` strongest query→key weights of each head, as a tidy table.

    Args:
        maps: an :class:`probe.maps.AttentionMaps` (``[layer, head, query, key]``).
        k: edges per head.
        layers: model layers (default: all captured); heads: head indices (default all).
        skip_special: leave out edges from or to special tokens.

    Returns:
        ``pandas.DataFrame`` with columns ``layer, head, query, key, weight, query_token,
        key_token``, strongest first within each head.

    Raises:
        ValueError: ``k < 1``, or a layer that was not captured.
    """
    import pandas as pd

    if k < 1:
        raise InputError(f"k must be ≥ 1, got {k}")
    layers = list(maps.layers) if layers is None else [int(x) for x in layers]
    heads = list(range(maps.n_heads)) if heads is None else [int(h) for h in heads]
    q_tokens = maps.query_tokens if maps.kind == "cross" else maps.tokens
    q_special = maps.query_special_mask if maps.kind == "cross" else maps.special_mask
    assert q_tokens is not None and q_special is not None  # a cross map carries its query side
    rows = []
    for layer in layers:
        block = maps.layer(layer).float()
        for h in heads:
            a = block[h]
            if skip_special:
                a = a.masked_fill(q_special[:, None] | maps.special_mask[None, :], float("-inf"))
            n_keys = a.shape[1]
            top = torch.topk(a.flatten(), min(k, a.numel()))
            for w, idx in zip(top.values.tolist(), top.indices.tolist()):
                if w == float("-inf"):
                    break
                q, key = divmod(idx, n_keys)
                rows.append((layer, h, q, key, w, q_tokens[q], maps.tokens[key]))
    return pd.DataFrame(rows, columns=["layer", "head", "query", "key", "weight", "query_token", "key_token"])


def attention_window(maps: Any, start: int, stop: int, *, layer: int, head: int) -> dict:
    """A square window ``[start, stop)`` of one head's map, for display.

    Returns:
        ``{"weights": [w, w] tensor, "tokens": tokens[start:stop], "mass": [w]}`` where
        ``mass`` is each query row's total weight inside the window (the rest goes to
        keys outside it).

    Raises:
        ValueError: an empty or out-of-range window.
    """
    n = maps.n_tokens
    if not 0 <= start < stop <= n:
        raise InputError(f"window [{start}, {stop}) is not inside the {n} tokens; use 0 ≤ start < stop ≤ {n}")
    w = maps.head(layer, head)[start:stop, start:stop].float()
    return {"weights": w, "tokens": tuple(maps.tokens[start:stop]), "mass": w.sum(-1)}


# ---- inputs longer than the model's limit: windows or truncation ------------------
def check_window(
    window: Optional[int], stride: Optional[int], truncate: bool = False, limit: Optional[int] = None
) -> None:
    """Refuse bad ``--window``/``--stride``/``--truncate`` values (before a model loads).

    Raises:
        ValueError: a non-positive window or stride, a stride without a window, a stride
            not smaller than the window, a window larger than the model's ``limit``
            (tokens, when known), or ``--truncate`` with ``--window``.
    """
    if window is None:
        if stride is not None:
            raise InputError("--stride needs --window N (the window's length in tokens)")
        return
    if truncate:
        raise InputError("--truncate and --window are alternatives: give one of them")
    if window < 1:
        raise InputError(f"--window must be a positive number of tokens, got {window}")
    if limit is not None and window > limit:
        raise InputError(
            f"--window {window} is larger than the model's limit of {limit} tokens: use --window {limit} or less"
        )
    if stride is not None:
        if stride < 1:
            raise InputError(f"--stride must be a positive number of tokens, got {stride}")
        if stride >= window:
            raise InputError(
                f"--stride {stride} must be smaller than --window {window} (windows overlap by window − stride tokens)"
            )


def default_stride(window: int) -> int:
    """Half a window: every token is seen by two windows (except at the ends)."""
    return max(1, window // 2)


def _content_offsets(adapter: ModelAdapter, text: str) -> list:
    """Character ``(start, end)`` of each non-special token of ``text``."""
    enc = adapter.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return [tuple(o) for o in enc["offset_mapping"]]


def _specials(adapter: ModelAdapter) -> int:
    return len(adapter.tokenizer("", add_special_tokens=True)["input_ids"])


def window_corpus(
    corpus: Corpus, adapter: ModelAdapter, window: int, stride: Optional[int] = None
) -> tuple[Corpus, dict]:
    """Each example longer than ``window`` tokens split into overlapping windows.

    Window ``j`` of an example holds its content tokens ``j·stride … j·stride + w`` (``w``
    = ``window`` minus the model's special tokens), cut from the text at token
    boundaries, and becomes an example of its own (``[CLS] … [SEP]`` added as for any
    input); the last window ends at the example's end. **How windows are joined:** they
    are not merged into one map: every window is an example, so per-head statistics
    average over windows like over sentences, and a token in an overlap counts once per
    window that holds it. Examples that fit are kept whole. Treebank sentences (their
    word annotation would be cut) are kept only when they fit.

    Returns ``(corpus, windows)``: the new corpus and ``{original index: number of
    windows}`` for the examples that were split.
    """
    from probe.inputs.corpus import Corpus

    stride = stride or default_stride(window)
    check_window(window, stride)
    room = window - _specials(adapter)
    if room < 1:
        raise InputError(f"--window {window} leaves no room for text beside the model's special tokens")
    lengths = [len(_content_offsets(adapter, t)) for t in corpus.texts]
    if corpus.sentences or corpus.examples or corpus.word_spans:
        keep = [i for i, n in enumerate(lengths) if n <= room]
        return corpus.subset(
            keep, reason=f"annotated example longer than --window {window} tokens (windows split plain text only)"
        ), {}
    texts, split = [], {}
    for i, text in enumerate(corpus.texts):
        if lengths[i] <= room:
            texts.append(text)
            continue
        offs = _content_offsets(adapter, text)
        starts = sorted(set(range(0, len(offs) - room, stride)) | {len(offs) - room})
        texts.extend(text[offs[s][0] : offs[s + room - 1][1]] for s in starts)
        split[i] = len(starts)
    return Corpus(texts=tuple(texts), source=corpus.source, skipped=dict(corpus.skipped)), split


def truncate_corpus(corpus: Corpus, adapter: ModelAdapter, limit: Optional[int] = None) -> tuple[Corpus, int]:
    """Each example cut to its first ``limit`` (default the model's) tokens, at a token
    boundary; returns ``(corpus, n_truncated)``. Treebank sentences too long are skipped
    instead (their annotation would be cut)."""
    from probe.inputs.corpus import Corpus

    limit = limit or adapter.max_length
    room = limit - _specials(adapter)
    texts, n = [], 0
    for text in corpus.texts:
        offs = _content_offsets(adapter, text)
        if len(offs) <= room:
            texts.append(text)
            continue
        n += 1
        texts.append(text[: offs[room - 1][1]])
    if not n:
        return corpus, 0
    if corpus.sentences or corpus.examples or corpus.word_spans:
        keep = [i for i, t in enumerate(corpus.texts) if len(_content_offsets(adapter, t)) <= room]
        return corpus.subset(keep, reason=f"annotated example longer than {limit} tokens (not truncated)"), 0
    return Corpus(texts=tuple(texts), source=corpus.source, skipped=dict(corpus.skipped)), n
