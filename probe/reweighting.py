"""Replace a head's attention weights and recompute its output: :class:`AttentionReweighting`.

Counterfactual attention (Jain & Wallace 2019, "Attention is not Explanation"; Serrano &
Smith 2019): give head ``h`` other weights ``α'`` ``[query, key]`` and let its output be
``α' V`` instead of ``α V``. This needs the values of every key, which only the attention
function sees, so it runs on the attention-interface path
(:mod:`probe.attention_interface`); models that do not call the interface raise.

Modes (per :class:`AttentionEdit`):

* ``uniform`` — each query spreads evenly over the keys the mask allows (padding,
  causality and sliding windows respected);
* ``permute`` — each query's weights are shuffled among its allowed keys (seeded);
* ``given`` — weights supplied by the caller, ``[query, key]`` or ``[batch, query, key]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from .attention_interface import choose_path
from .edits import Edit, SiteContext
from .models.sites import Site
from .trace import Trace, TraceView

WEIGHT_MODES = ("uniform", "permute", "given")


@dataclass(frozen=True)
class AttentionEdit:
    """New attention weights for one head: ``mode`` in :data:`WEIGHT_MODES`; ``value`` the
    ``given`` weights; ``rows`` the batch rows it applies to (None: all); ``seed`` for
    ``permute``."""

    layer: int
    head: int
    mode: str = "uniform"
    value: Optional[torch.Tensor] = None
    rows: Optional[tuple] = None
    seed: int = 0


def allowed_keys(weights: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """Bool ``[batch, query, key]``: keys the additive mask leaves open (all when None)."""
    b, _, q, k = weights.shape
    if mask is None:
        return torch.ones(b, q, k, dtype=torch.bool, device=weights.device)
    m = mask[..., :k]
    open_ = m > torch.finfo(m.dtype).min / 2 if m.is_floating_point() else m.bool()
    return open_[:, 0].expand(b, q, k)


def new_weights(edit: AttentionEdit, alpha: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """The replacement ``[batch, query, key]`` of one head's weights ``alpha``."""
    if edit.mode == "uniform":
        a = allowed.to(alpha.dtype)
        return a / a.sum(-1, keepdim=True).clamp(min=1)
    if edit.mode == "permute":
        gen = torch.Generator(device="cpu").manual_seed(edit.seed)
        r = torch.rand(alpha.shape, generator=gen).to(alpha.device)
        r = r.masked_fill(~allowed, 2.0)
        target = r.argsort(-1)  # allowed keys in random order, then the closed ones
        source = (~allowed).to(torch.int8).argsort(dim=-1, stable=True)  # allowed keys in order
        return torch.zeros_like(alpha).scatter_(-1, target, alpha.gather(-1, source))
    v = edit.value.to(alpha.dtype).to(alpha.device)  # type: ignore[union-attr]  # AttentionEdit checks on construction that "set" carries weights
    if v.shape[-2:] != alpha.shape[-2:]:
        raise ValueError(
            f"given weights for head ({edit.layer}, {edit.head}) have shape "
            f"{tuple(v.shape)}; the head's weights are [batch, {alpha.shape[-2]}, {alpha.shape[-1]}]"
        )
    return v.expand_as(alpha)


@dataclass(frozen=True)
class LayerWeights(Edit):
    """The :class:`AttentionEdit` s of one layer as one edit of its ``pattern`` site
    ``[batch, head, query, key]`` (each head's new weights from its clean weights)."""

    edits: tuple = ()

    def __call__(self, weights: torch.Tensor, ctx: SiteContext) -> torch.Tensor:
        allowed = allowed_keys(weights, ctx.mask)
        # every replacement from the clean weights first, then written (a head may repeat)
        new = [(e, new_weights(e, weights[:, e.head], allowed)) for e in self.edits]
        for e, w in new:
            rows = slice(None) if e.rows is None else list(e.rows)
            weights[rows, e.head] = w[rows]
        return weights


class AttentionReweighting(TraceView):
    """Context manager: on every forward inside it, the edited heads attend with the new
    weights and their outputs are recomputed from the values (a view of
    :class:`probe.trace.Trace`'s ``pattern`` edits; layer identity by call where layers
    share a module: ALBERT).

    Raises:
        ValueError: a head out of range, an unknown mode, ``given`` without weights, or a
            model whose attention modules do not call transformers' attention interface.
    """

    def __init__(self, adapter, edits: Sequence[AttentionEdit], stack: Optional[str] = None):
        self.adapter = adapter
        self.stack = stack or adapter.default_stack
        choose_path(adapter, self.stack, "interface")
        by_layer: dict[int, list] = {}
        for e in edits:
            adapter.check_head(e.layer, e.head, self.stack)
            if e.mode not in WEIGHT_MODES:
                raise ValueError(f"unknown reweighting mode {e.mode!r}; use one of {', '.join(WEIGHT_MODES)}")
            if e.mode == "given" and e.value is None:
                raise ValueError(f"mode 'given' needs weights for head ({e.layer}, {e.head})")
            by_layer.setdefault(int(e.layer), []).append(e)
        self._by_layer = by_layer

    def _trace(self) -> Trace:
        edit = {Site("pattern", layer, self.stack): LayerWeights(tuple(es)) for layer, es in self._by_layer.items()}
        return Trace(self.adapter, edit=edit, path="interface")
