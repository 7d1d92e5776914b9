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
from .edits import WEIGHT_MODES, ReplaceWeights, allowed_keys
from .models.sites import Site
from .trace import Trace

__all__ = ["AttentionEdit", "AttentionReweighting", "allowed_keys", "new_weights", "WEIGHT_MODES"]


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

    def as_edit(self) -> ReplaceWeights:
        """The :class:`probe.edits.ReplaceWeights` of this edit (``pattern`` site)."""
        return ReplaceWeights(head=self.head, mode=self.mode, weights=self.value, rows=self.rows, seed=self.seed)


def new_weights(edit: AttentionEdit, alpha: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """The replacement ``[batch, query, key]`` of one head's weights ``alpha``."""
    from .edits import SiteContext

    ctx = SiteContext(f"blocks.{edit.layer}.attn.hook_pattern", "pattern", edit.layer, "", 1)
    return edit.as_edit().replacement(alpha, allowed, ctx)


class AttentionReweighting(Trace):
    """Context manager: on every forward inside it, the edited heads attend with the new
    weights and their outputs are recomputed from the values (a :class:`probe.trace.Trace`
    with :class:`probe.edits.ReplaceWeights` on the ``pattern`` sites).

    Raises:
        ValueError: a head out of range, an unknown mode, ``given`` without weights, or a
            model whose attention modules do not call transformers' attention interface.
    """

    def __init__(self, adapter, edits: Sequence[AttentionEdit], stack: Optional[str] = None):
        stack = stack or adapter.default_stack
        choose_path(adapter, stack, "interface")
        by_layer: dict[int, list] = {}
        for e in edits:
            adapter.check_head(e.layer, e.head, stack)
            if e.mode not in WEIGHT_MODES:
                raise ValueError(f"unknown reweighting mode {e.mode!r}; use one of {', '.join(WEIGHT_MODES)}")
            if e.mode == "given" and e.value is None:
                raise ValueError(f"mode 'given' needs weights for head ({e.layer}, {e.head})")
            by_layer.setdefault(int(e.layer), []).append(e.as_edit())
        self.stack = stack
        super().__init__(adapter, edit={Site("pattern", layer, stack): es for layer, es in by_layer.items()},
                         stack=stack, path="interface")
