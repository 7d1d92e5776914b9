"""Restart a forward at layer ``l`` from a cached residual stream: views of :class:`probe.tracing.trace_context.Trace`.

An ablation of a head in layer ``l`` leaves layers ``0..l−1`` unchanged, so a sweep
need not recompute them. :class:`ResidualCache` records, during a clean forward, the
hidden state entering every layer ``[batch, seq, dim]`` (the ``resid_pre`` sites).
:class:`RestartFrom` then runs the model's own forward with layers ``0..l−1`` replaced by
a pass-through and the input of layer ``l`` replaced by the cached state
(:class:`probe.tracing.trace_context.Restart`). Everything after layer ``l`` — later layers, final norm,
task head, attention-mask construction — is the model's own code, so the result equals a
full forward with the same interventions; only the embeddings (a lookup) are recomputed.

Supported: the families of :data:`probe.models.architectures.RESTARTABLE_FAMILIES` (layers
take the residual stream as their first argument, return it as their output, and share no
state across layers); elsewhere callers fall back to full forwards (:func:`supports_restart`).
T5 is excluded (its relative position bias is computed in layer 0 and passed on), as are
encoder-decoder models.

Restart at the output projection. An edit of the per-head output site of layer ``l``
(the input of its attention output projection, ``[batch, seq, n_heads·head_dim]``, the
``proj_in`` site) leaves layer ``l``'s queries, keys, values and attention probabilities
unchanged. With ``contexts=True`` :class:`ResidualCache` also records that site's clean
value per layer; :class:`RestartFrom` given ``context`` stubs layer ``l``'s attention
module so that it returns what it would have computed from the cached site:
``(context, None)`` where the module ends *before* the output projection (BERT's
``attention.self``), ``(proj(context), None)`` where it ends with it (DistilBERT
``out_lin``, GPT-2 ``c_proj`` + dropout, Llama ``o_proj``). The projection is called as a
module, so an edit of the ``z`` site still applies. Exact in eval mode only (dropout after
the projection is skipped): :func:`supports_site_restart`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

import torch

from probe.models.architectures import RESTARTABLE_FAMILIES
from probe.models.sites import Site, layer_modules, supports_restart, supports_site_restart
from probe.tracing.trace_context import Restart, Trace

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = [
    "RESTART_FAMILIES",
    "supports_restart",
    "supports_site_restart",
    "layer_modules",
    "ResidualCache",
    "RestartFrom",
]

#: kept for callers of the old name; the table lives with the architectures
RESTART_FAMILIES = tuple(sorted(RESTARTABLE_FAMILIES))


class ResidualCache(Trace):
    """Record the hidden state entering each layer: ``.inputs[l]`` ``[batch, seq, dim]``
    (detached), for the last forward run inside the block; with ``contexts=True`` also
    the per-head output site of each layer, ``.contexts[l]`` ``[batch, seq,
    n_heads·head_dim]`` (the input of its attention output projection)."""

    def __init__(self, adapter: ModelAdapter, stack: Optional[str] = None, contexts: bool = False) -> None:
        stack = stack or adapter.default_stack
        self.layers = layer_modules(adapter, stack)
        self.inputs: dict[int, torch.Tensor] = {}
        self.contexts: dict[int, torch.Tensor] = {}

        def keep(into: dict, layer: int) -> Callable:
            return lambda x, ctx: into.__setitem__(layer, x.detach())

        read = {Site("resid_pre", i, stack): keep(self.inputs, i) for i in range(len(self.layers))}
        if contexts:
            read.update({Site("proj_in", i, stack): keep(self.contexts, i) for i in range(len(self.layers))})
        super().__init__(adapter, read=read, stack=stack, path="hooks")


class RestartFrom(Trace):
    """Inside the block, model forwards skip layers ``< layer`` and feed ``hidden``
    ``[rows, seq, dim]`` into ``layer``; the model must be run on ``rows`` rows.

    With ``context`` ``[rows, seq, n_heads·head_dim]`` (the clean per-head output site
    of ``layer``, from ``ResidualCache(contexts=True)``), ``layer``'s attention module
    is not run either: it returns the result of its output projection applied to
    ``context`` (see the module docstring), so the run restarts at that projection.

    Raises:
        ValueError: a family without restart support (or without site restart, given
            ``context``), a context that does not fit ``hidden``, or a row/shape
            mismatch at run time.
    """

    def __init__(
        self,
        adapter: ModelAdapter,
        layer: int,
        hidden: torch.Tensor,
        stack: Optional[str] = None,
        context: Optional[torch.Tensor] = None,
    ) -> None:
        self.layer = int(layer)
        self.hidden = hidden
        self.context = context
        super().__init__(adapter, restart_from=Restart(int(layer), hidden, context), stack=stack, path="hooks")
