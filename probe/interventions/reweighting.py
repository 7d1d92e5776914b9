"""Replace a head's attention weights and recompute its output: :class:`AttentionReweighting`.

Counterfactual attention (Jain & Wallace 2019, "Attention is not Explanation"; Serrano &
Smith 2019): give head ``h`` other weights ``α'`` ``[query, key]`` and let its output be
``α' V`` instead of ``α V``. This needs the values of every key, which only the attention
function sees, so it runs on the attention-interface path
(:mod:`probe.tracing.attention_interface`); models that do not call the interface raise.

Modes (per :class:`probe.tracing.edits.ReplaceWeights`, the trace's edit of a ``pattern`` site):

* ``uniform`` — each query spreads evenly over the keys the mask allows (padding,
  causality and sliding windows respected);
* ``permute`` — each query's weights are shuffled among its allowed keys (seeded);
* ``given`` — weights supplied by the caller, ``[query, key]`` or ``[batch, query, key]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Optional, Sequence, Union

from probe.errors import InputError

from probe.tracing.attention_interface import choose_path
from probe.tracing.edits import ReplaceWeights
from probe.models.sites import Site
from probe.tracing.trace_context import Trace, TraceView

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["AttentionReweighting"]


class AttentionReweighting(TraceView):
    """Context manager: on every forward inside it, the edited heads attend with the new
    weights and their outputs are recomputed from the values (a view of
    :class:`probe.tracing.trace_context.Trace`'s ``pattern`` edits ``[batch, head, query,
    key]``; layer identity by call where layers share a module: ALBERT).

    Args:
        adapter: a :class:`probe.models.ModelAdapter`.
        edits: ``{layer: ReplaceWeights(head=h, mode=…) or a list of them}`` (applied in
            order; each replaces its head's weights as the earlier ones left them).
        stack: ``encoder`` / ``decoder`` / ``cross`` (default: the main stack).

    Raises:
        InputError: a head or layer out of range, an edit that is not a
            :class:`ReplaceWeights`, or a model whose attention modules do not call
            transformers' attention interface.
    """

    def __init__(
        self,
        adapter: ModelAdapter,
        edits: Mapping[int, Union[ReplaceWeights, Sequence[ReplaceWeights]]],
        stack: Optional[str] = None,
    ) -> None:
        self.adapter = adapter
        self.stack = stack or adapter.default_stack
        choose_path(adapter, self.stack, "interface")
        by_layer: dict[int, list[ReplaceWeights]] = {}
        for layer, es in edits.items():
            for e in [es] if isinstance(es, ReplaceWeights) else list(es):
                if not isinstance(e, ReplaceWeights):
                    raise InputError(f"a reweighting is a ReplaceWeights(head=h, mode=...), got {e!r}")
                assert e.head is not None  # ReplaceWeights refuses a missing head on construction
                adapter.check_head(int(layer), e.head, self.stack)
                by_layer.setdefault(int(layer), []).append(e)
        self._by_layer = by_layer

    def _trace(self) -> Trace:
        edit = {Site("pattern", layer, self.stack): es for layer, es in self._by_layer.items()}
        return Trace(self.adapter, edit=edit, path="interface")
