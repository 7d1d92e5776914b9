"""Capture value vectors and output projections next to attention, for norm-based analyses.

Kobayashi et al. (2020), "Attention is Not Only a Weight", need per head the vector
``f_h(x_j) = (x_j W_V + b_V)_h W_O^h`` that head ``h`` moves from token ``j``. Forward hooks
on the adapter's value projections record ``x W_V + b_V``; the output projections give
``W_O``. The values are the ``v`` sites of :class:`probe.tracing.trace_context.Trace` (fused q|k|v split and
grouped-query repeat as :mod:`probe.models.sites` says).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, cast

import torch

from probe.errors import NotApplicable

from probe.runs.capture import capture
from probe.models.sites import Site
from probe.tracing.trace_context import Trace
from probe.maps import AttentionMaps

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["ValueCapture", "capture_values", "projection_weight"]


@dataclass(frozen=True)
class ValueCapture:
    """Attention, value vectors and output projections of one example.

    Attributes:
        maps: the attention maps (``[layer, head, n, n]``).
        values: ``[layer, n, head, head_dim]``, the value projection output
            ``x W_V + b_V`` per head (key/value heads repeated for grouped-query models).
        w_o: ``[layer, d_model, head * head_dim]``, each layer's output projection weight
            in ``y = W z`` orientation (its bias is not part of ``f``: it is added once
            per position, not per head and token).
    """

    maps: AttentionMaps
    values: torch.Tensor
    w_o: torch.Tensor


def projection_weight(module: torch.nn.Module) -> torch.Tensor:
    """The weight of a Linear (``[out, in]``) or GPT-2 Conv1D (stored ``[in, out]``) as
    ``[out, in]``."""
    w = cast(torch.Tensor, module.weight)  # torch types module attributes as Tensor | Module
    if isinstance(module, torch.nn.Linear):
        return w
    if hasattr(module, "nf"):  # transformers Conv1D: y = x W + b with W [in, out]
        return w.T
    raise NotApplicable(f"cannot read a projection matrix from {type(module).__name__}")


def capture_values(adapter: ModelAdapter, text: str, *, stack: Optional[str] = None) -> ValueCapture:
    """Run ``adapter``'s model on ``text`` once; return attention, values and ``W_O``.

    Raises:
        ValueError: encoder-decoder models (not supported here), empty text, text
            beyond the model's length limit.
    """
    if adapter.arch == "encoder-decoder":
        raise NotApplicable("value capture supports encoder or decoder models, not encoder-decoder")
    stack = stack or adapter.default_stack
    n_layers = len(adapter.value_modules(stack))
    # the value sites (fused split and grouped-query repeat: probe.models.sites) read in the capture's forward
    with Trace(adapter, read=[Site("v", layer, stack) for layer in range(n_layers)], stack=stack) as tr:
        (maps,) = capture(adapter, [text], stack=stack, batch_size=1)
    values = [tr.cache[Site("v", layer, stack)][0].float() for layer in range(n_layers)]  # [n, H, dh]
    w_o = torch.stack([projection_weight(m).detach().float() for m in adapter.head_output_modules(stack)])
    return ValueCapture(maps=maps, values=torch.stack(values), w_o=w_o)
