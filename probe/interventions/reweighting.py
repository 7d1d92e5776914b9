"""Replace a head's attention weights and recompute its output: :class:`AttentionReweighting`.

Counterfactual attention (Jain & Wallace 2019, "Attention is not Explanation"; Serrano &
Smith 2019): give head ``h`` other weights ``α'`` ``[query, key]`` and let its output be
``α' V`` instead of ``α V``. This needs the values of every key, which only the attention
function sees, so it runs on the attention-interface path
(:mod:`probe.tracing.attention_interface`); models that do not call the interface raise.

Modes (per :class:`AttentionEdit`):

* ``uniform`` — each query spreads evenly over the keys the mask allows (padding,
  causality and sliding windows respected);
* ``permute`` — each query's weights are shuffled among its allowed keys (seeded);
* ``given`` — weights supplied by the caller, ``[query, key]`` or ``[batch, query, key]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

import torch

from probe.errors import InputError

from probe.tracing.attention_interface import choose_path
from probe.tracing.edits import WEIGHT_MODES, Edit, ReplaceWeights, SiteContext, allowed_keys
from probe.models.sites import Site
from probe.tracing.trace_context import Trace, TraceView

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["WEIGHT_MODES", "AttentionEdit", "AttentionReweighting", "LayerWeights", "allowed_keys", "new_weights"]


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


def new_weights(edit: AttentionEdit, alpha: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """The replacement ``[batch, query, key]`` of one head's weights ``alpha``
    (:meth:`probe.tracing.edits.ReplaceWeights.replacement`)."""
    replace = ReplaceWeights(head=edit.head, mode=edit.mode, weights=edit.value, seed=edit.seed)
    return replace.replacement(alpha, allowed, SiteContext("", "pattern", edit.layer, "", 1))


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
    :class:`probe.tracing.trace_context.Trace`'s ``pattern`` edits; layer identity by call where layers
    share a module: ALBERT).

    Raises:
        ValueError: a head out of range, an unknown mode, ``given`` without weights, or a
            model whose attention modules do not call transformers' attention interface.
    """

    def __init__(self, adapter: ModelAdapter, edits: Sequence[AttentionEdit], stack: Optional[str] = None) -> None:
        self.adapter = adapter
        self.stack = stack or adapter.default_stack
        choose_path(adapter, self.stack, "interface")
        by_layer: dict[int, list] = {}
        for e in edits:
            adapter.check_head(e.layer, e.head, self.stack)
            if e.mode not in WEIGHT_MODES:
                raise InputError(f"unknown reweighting mode {e.mode!r}; use one of {', '.join(WEIGHT_MODES)}")
            if e.mode == "given" and e.value is None:
                raise InputError(f"mode 'given' needs weights for head ({e.layer}, {e.head})")
            by_layer.setdefault(int(e.layer), []).append(e)
        self._by_layer = by_layer

    def _trace(self) -> Trace:
        edit = {Site("pattern", layer, self.stack): LayerWeights(tuple(es)) for layer, es in self._by_layer.items()}
        return Trace(self.adapter, edit=edit, path="interface")
