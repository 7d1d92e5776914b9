"""What an objective is handed and the tensor helpers both of its faces share.

:class:`MetricBatch` is the sweep face's batch (model inputs and what the objective
scores against, rows first); :func:`token_nll` the one language-model loss;
:func:`check_scalar` the check that a face gave one scalar per example. See
:mod:`.objective` for the objective itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

import torch
import torch.nn.functional as F

from probe.errors import InputError
from probe.models.batching import ONE_LENGTH, one_length_batches

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["MetricBatch", "batch_indices", "by_one_length", "special_mask", "f32", "token_nll", "check_scalar"]


@dataclass(frozen=True)
class MetricBatch:
    """Model inputs and what an objective needs to score them, all with batch rows first.

    Attributes:
        inputs: keyword arguments of the model forward (``input_ids``, ``attention_mask``,
            optionally decoder inputs), ``[rows, seq]``.
        aux: tensors the objective scores against (``labels`` …), ``[rows, ...]``.
        special: bool ``[rows, seq]``: special-token positions (for per-kind means).
    """

    inputs: dict
    aux: dict = field(default_factory=dict)
    special: Optional[torch.Tensor] = None

    @property
    def rows(self) -> int:
        return int(self.inputs["input_ids"].shape[0])

    @property
    def lengths(self) -> torch.Tensor:
        """``[rows]``: each row's unpadded length (its attention mask's sum)."""
        return self.inputs["attention_mask"].sum(-1)

    def repeat(self, k: int) -> "MetricBatch":
        """The batch stacked ``k`` times: row ``j·rows + i`` is a copy of row ``i``."""
        rep = lambda t: t.repeat(k, *([1] * (t.dim() - 1)))  # noqa: E731
        return MetricBatch(
            inputs={n: rep(t) for n, t in self.inputs.items()},
            aux={n: rep(t) for n, t in self.aux.items()},
            special=None if self.special is None else rep(self.special),
        )


def batch_indices(texts: Sequence[str], batch_size: int, by_length: bool = False) -> list[list[int]]:
    """The example indices of each batch: in corpus order, or (``by_length``) examples of
    similar length together, longest first by characters, ties in corpus order (a batch is
    padded to its longest example). Callers place each batch's results by its indices.

    Raises:
        InputError: ``batch_size < 1``.
    """
    from probe.errors import InputError

    if batch_size < 1:
        raise InputError(f"batch_size must be ≥ 1, got {batch_size}")
    order = list(range(len(texts)))
    if by_length:
        order.sort(key=lambda i: -len(texts[i]))
    return [order[s : s + batch_size] for s in range(0, len(order), batch_size)]


def by_one_length(
    adapter: ModelAdapter,
    batches: Sequence[Sequence[int]],
    texts: Sequence[str],
    spans: Optional[Sequence] = None,
    *,
    truncate: bool = False,
) -> list[list[int]]:
    """``batches`` (indices into ``texts``) as they are, or split into groups of one token
    length where the model runs one length per batch (``adapter.batching``: its padding
    leaks into other positions, :mod:`probe.models.batching`). Callers place results by
    index, so the order of the results is kept."""
    if adapter.batching != ONE_LENGTH:
        return [list(b) for b in batches]
    lengths = [len(e) for e in adapter.encode_batch(list(texts), spans, truncate=truncate)]
    return list(one_length_batches(batches, lengths))


def special_mask(adapter: ModelAdapter, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Bool ``[rows, seq]``: the special-token positions of ``ids`` (padding excluded)."""
    from probe.inputs.corpus import special_token_ids  # [UNK] is input text, not a special token

    special_ids = torch.tensor(special_token_ids(adapter.tokenizer), dtype=ids.dtype, device=ids.device)
    return torch.isin(ids, special_ids) & mask.bool()


def f32(x: torch.Tensor) -> torch.Tensor:
    """Half-precision tensors up to float32; float32/float64 kept (any shape, unchanged)."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def token_nll(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The one language-model loss: ``−log softmax(logits)[label]`` per position.

    ``logits`` ``[..., vocab]`` and ``labels`` ``[...]`` (long; ``−100`` positions give an
    arbitrary value the caller masks out) -> ``[...]`` in float32 (half precision is
    upcast). Used by :class:`.metrics.LossMetric` (masked-LM, next-token, teacher-forced
    and zoo task losses) and by :class:`.targets.LMLoss` / :class:`.targets.OwnTokensLoss`.
    """
    logits = f32(logits)
    flat = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).clamp(min=0), reduction="none")
    return flat.reshape(labels.shape)


def check_scalar(value: object, batch: int, name: str = "target") -> torch.Tensor:
    """Return ``value`` if it is a tensor of shape ``[batch]`` (or ``[batch, 1]``, squeezed).

    Raises:
        InputError: any other shape, naming it ("one scalar per example" is needed).
    """
    if not torch.is_tensor(value):
        raise InputError(f"{name} must return a tensor with one scalar per example, got {type(value).__name__}")
    if value.dim() == 2 and value.shape == (batch, 1):
        value = value[:, 0]
    if tuple(value.shape) != (batch,):
        raise InputError(
            f"{name} must give one scalar per example, shape ({batch},) for a batch of {batch}; "
            f"got shape {tuple(value.shape)}. Choose a class (--target logit:<class>) or a "
            "position (--target loss:<position>)"
        )
    return value
