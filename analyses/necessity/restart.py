"""Restart a forward at layer ``l`` from a cached residual stream.

An ablation of a head in layer ``l`` leaves layers ``0..l−1`` unchanged, so a sweep
need not recompute them. :class:`ResidualCache` records, during a clean forward, the
hidden state entering every layer ``[batch, seq, dim]`` (a forward-pre hook with
kwargs on each layer module). :class:`RestartFrom` then runs the model's own forward
with layers ``0..l−1`` replaced by a pass-through (an instance-level ``forward``
override, restored in ``finally``) and the input of layer ``l`` replaced by the cached
state (repeated over the batch rows). Everything after layer ``l`` — later layers,
final norm, task head, attention-mask construction — is the model's own code, so the
result equals a full forward with the same interventions; only the embeddings (a
lookup) are recomputed.

The layer modules are the ancestors of the adapter's attention modules
(:meth:`ModelAdapter.attention_modules`) at their layer-index path component
(``encoder.layer.{i}``, ``h.{i}``, …). Supported: the families of
:data:`models.architectures.RESTARTABLE_FAMILIES` (layers take the residual stream as
their first argument, return it as their output, and share no state across layers);
elsewhere callers fall back to full forwards (:func:`supports_restart`). T5 is
excluded (its relative position bias is computed in layer 0 and passed on), as are
encoder-decoder models.

Restart at the output projection. An edit of the per-head output site of layer ``l``
(the input of its attention output projection, ``[batch, seq, n_heads·head_dim]``)
leaves layer ``l``'s queries, keys, values and attention probabilities unchanged, so
those need not be recomputed either. With ``contexts=True`` :class:`ResidualCache` also
records that site's clean value per layer; :class:`RestartFrom` given ``context`` stubs
layer ``l``'s attention module (the ``attention`` entry of
:data:`models.architectures.ARCHITECTURES`) so that it returns what it would have
computed from the cached site: ``(context, None)`` where the module ends *before* the
output projection (BERT's ``attention.self``), ``(proj(context), None)`` where it ends
with it (DistilBERT ``out_lin``, GPT-2 ``c_proj`` + dropout, Llama ``o_proj``). The
projection is called as a module, so :class:`probe.interventions.HeadIntervention`'s
hook on it still edits the site. Exact in eval mode only (dropout after the projection
is skipped): :func:`supports_site_restart`.
"""

from __future__ import annotations

from typing import Optional

import torch

from probe.hooks import HookContext, HookSet
from probe.models.architectures import RESTARTABLE_FAMILIES

__all__ = ["RESTART_FAMILIES", "supports_restart", "supports_site_restart", "layer_modules", "ResidualCache",
           "RestartFrom"]

#: kept for callers of the old name; the table lives with the architectures
RESTART_FAMILIES = tuple(sorted(RESTARTABLE_FAMILIES))


def supports_restart(adapter, stack: Optional[str] = None) -> bool:
    """True when :class:`RestartFrom` is exact for this model and stack."""
    stack = stack or adapter.default_stack
    return adapter.family in RESTARTABLE_FAMILIES and adapter.arch != "encoder-decoder" and stack == adapter.default_stack


def supports_site_restart(adapter, stack: Optional[str] = None) -> bool:
    """True when :class:`RestartFrom` with ``context`` is exact: layer restart is, every
    family in :data:`RESTARTABLE_FAMILIES` returns ``(output, weights)`` from its attention
    module with ``output`` the site or its projection, and the model is in eval mode."""
    return supports_restart(adapter, stack) and not adapter.model.training


def layer_modules(adapter, stack: Optional[str] = None) -> list:
    """The transformer layer (block) module of each layer, in order.

    Raises:
        ValueError: when the layers cannot be located.
    """
    attention = adapter.attention_modules(stack)  # the adapter's lookup in the architectures table
    names = {id(m): n for n, m in adapter.model.named_modules()}
    modules = dict(adapter.model.named_modules())
    out = []
    for i, module in enumerate(attention):
        parts = names[id(module)].split(".")
        # the layer module: the path up to the first component that is the layer index
        k = next((k for k, part in enumerate(parts) if part == str(i)), None)
        if k is None:
            raise ValueError(f"cannot locate the layer modules of {adapter.name}")
        out.append(modules[".".join(parts[: k + 1])])
    return out


def _hidden(args, kwargs):
    return args[0] if args else kwargs["hidden_states"]


class ResidualCache(HookContext):
    """Record the hidden state entering each layer: ``.inputs[l]`` ``[batch, seq, dim]``
    (detached), for the last forward run inside the block; with ``contexts=True`` also
    the per-head output site of each layer, ``.contexts[l]`` ``[batch, seq,
    n_heads·head_dim]`` (the input of its attention output projection)."""

    def __init__(self, adapter, stack: Optional[str] = None, contexts: bool = False):
        self.layers = layer_modules(adapter, stack)
        self.projections = adapter.head_output_modules(stack) if contexts else []
        self.inputs: dict[int, torch.Tensor] = {}
        self.contexts: dict[int, torch.Tensor] = {}

    def _register(self, hooks: HookSet) -> None:
        for i, layer in enumerate(self.layers):
            def fn(module, args, kwargs, i=i):
                self.inputs[i] = _hidden(args, kwargs).detach()
            hooks.pre(layer, fn, with_kwargs=True)
        for i, proj in enumerate(self.projections):
            def site(module, args, i=i):
                self.contexts[i] = args[0].detach()
            hooks.pre(proj, site)


class RestartFrom:
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

    def __init__(self, adapter, layer: int, hidden: torch.Tensor, stack: Optional[str] = None,
                 context: Optional[torch.Tensor] = None):
        if not supports_restart(adapter, stack):
            raise ValueError(f"layer restart is not supported for {adapter.name} ({adapter.family}); "
                             "use full forwards")
        self.layers = layer_modules(adapter, stack)
        if not 0 <= layer < len(self.layers):
            raise ValueError(f"layer {layer} out of range: {adapter.name} has layers 0..{len(self.layers) - 1}")
        self.layer = int(layer)
        self.hidden = hidden
        self.context = context
        if context is not None:
            if not supports_site_restart(adapter, stack):
                raise ValueError(f"restart at the output projection needs {adapter.name} in eval mode")
            if tuple(context.shape[:2]) != tuple(hidden.shape[:2]):
                raise ValueError(f"context {tuple(context.shape)} does not fit the residual {tuple(hidden.shape)}")
            self.attention = adapter.attention_modules(stack)[self.layer]
            self.projection = adapter.head_output_modules(stack)[self.layer]
            # does the attention module's output already include the projection?
            self.projected = any(m is self.projection for m in self.attention.modules())
        self._hooks = HookSet()
        self._stubbed: list = []

    def _attention_from_site(self, *args, **kwargs):
        """Stand-in for the attention module's forward: ``(output, None)`` from the site
        (its rows are checked against the batch by :meth:`_replace`, which runs first)."""
        return (self.projection(self.context) if self.projected else self.context), None

    def _stub(self, module, forward) -> None:
        saved = module.__dict__.get("forward")
        module.forward = forward
        self._stubbed.append((module, saved))

    def _replace(self, module, args, kwargs):
        h = _hidden(args, kwargs)
        if tuple(h.shape) != tuple(self.hidden.shape):
            raise ValueError(f"cached residual {tuple(self.hidden.shape)} does not fit the batch {tuple(h.shape)}")
        new = self.hidden.to(h.dtype)
        if args:
            return (new,) + tuple(args[1:]), kwargs
        return args, dict(kwargs, hidden_states=new)

    def __enter__(self) -> "RestartFrom":
        try:
            for layer in self.layers[: self.layer]:
                self._stub(layer, lambda *a, **k: _hidden(a, k))
            if self.context is not None:
                self._stub(self.attention, self._attention_from_site)
            self._hooks.pre(self.layers[self.layer], self._replace, with_kwargs=True)
        except BaseException:
            self._restore()
            raise
        return self

    def _restore(self) -> None:
        self._hooks.remove()
        while self._stubbed:
            layer, saved = self._stubbed.pop()
            if saved is None:
                del layer.forward
            else:
                layer.forward = saved

    def __exit__(self, *exc) -> bool:
        self._restore()
        return False
