"""Batches of texts of different lengths, padded on the left or the right, that give each
text what its own unpadded forward gives.

Two things must hold for a padded row to equal its text alone: the padding is masked out
of every row's keys (the attention mask), and the text's tokens keep their positions. The
second fails silently for left padding when a model numbers positions by index: rotary and
learned absolute position embeddings would see the text shifted by its padding. So the
batch carries ``position_ids`` counted over the real tokens only (``cumsum(mask) - 1``),
as transformers' ``generate`` does for decoders. ``tests/test_trace_decoders.py`` checks
every site and the outputs of each text in batches of three lengths against its own
forward, padded either side.

That holds where the padding is masked out of every layer. A model whose layers mix
positions without the mask (convolutions over the sequence) is found at load and runs one
length per batch (``adapter.batching``, :mod:`probe.models.batching`); :func:`padding_leak`
measures the leak on texts.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Sequence

import torch

from probe.errors import InputError
from probe.models.batching import LEAK_TOLERANCE, output_leak

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["padded_inputs", "real_positions", "padding_leak", "LEAK_TOLERANCE"]

_PROBE = ("A short text.", "A much longer text, with several clauses, that makes the batch ragged and padded.")


def _takes(model: torch.nn.Module, name: str) -> bool:
    params = inspect.signature(model.forward).parameters
    return name in params


def padded_inputs(adapter: ModelAdapter, texts: Sequence[str], side: str = "right") -> dict:
    """``input_ids``, ``attention_mask`` ``[batch, max_len]`` (and ``position_ids`` where the
    model takes them) of ``texts`` padded on ``side`` (``left`` | ``right``).

    Raises:
        InputError: an unknown side, no texts, or as :meth:`ModelAdapter.encode_batch`.
    """
    if side not in ("left", "right"):
        raise InputError(f"padding side is 'left' or 'right', got {side!r}")
    texts = [texts] if isinstance(texts, str) else list(texts)
    if not texts:
        raise InputError("no input texts: give at least one sentence")
    encodings = adapter.encode_batch(texts)
    n = max(len(e) for e in encodings)
    ids = torch.full((len(texts), n), adapter.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(texts), n), dtype=torch.long)
    for i, e in enumerate(encodings):
        length = len(e)
        start = n - length if side == "left" else 0
        ids[i, start : start + length] = e.input_ids
        mask[i, start : start + length] = 1
    out = {"input_ids": ids, "attention_mask": mask}
    if _takes(adapter.model, "position_ids"):
        out["position_ids"] = real_positions(mask)
    return {k: v.to(adapter.device) for k, v in out.items()}


def real_positions(mask: torch.Tensor) -> torch.Tensor:
    """``[batch, seq]`` position of each token among its row's real tokens (padding: 0)."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def padding_leak(adapter: ModelAdapter, texts: Sequence[str] = _PROBE) -> float:
    """Max |Δ| of the first text's outputs on its real positions between its own forward
    and a right-padded batch with the others: 0 up to float noise where padding is masked
    out everywhere; large where a layer mixes positions without the mask (ConvBERT's span
    convolutions, Jiang et al. 2020; Nyströmformer's convolution on the values, Xiong et al. 2021).
    Such a model runs one length per batch: the adapter finds it at load (``adapter.batching``).
    ``LEAK_TOLERANCE`` (1e-4) separates the two on float32 models."""
    batch = padded_inputs(adapter, list(texts), side="right")
    alone = padded_inputs(adapter, [texts[0]], side="right")
    return output_leak(adapter.model, batch, alone)[0]
