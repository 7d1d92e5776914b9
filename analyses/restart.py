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

The layer modules are the ancestors of the adapter's attention modules named by the
layer-index group of the family's pattern (``encoder.layer.{i}``, ``h.{i}``, …).
Supported: families whose layers take the residual stream as their first argument,
return it as their output, and share no state across layers (:data:`RESTART_FAMILIES`);
elsewhere callers fall back to full forwards (:func:`supports_restart`). T5 is
excluded (its relative position bias is computed in layer 0 and passed on), as are
encoder-decoder models.
"""

from __future__ import annotations

import re
from typing import Optional

import torch

from models.architectures import ARCHITECTURES
from probe.hooks import HookContext, HookSet

__all__ = ["RESTART_FAMILIES", "supports_restart", "layer_modules", "ResidualCache", "RestartFrom"]

RESTART_FAMILIES = ("bert", "distilbert", "gpt2", "llama")


def supports_restart(adapter, stack: Optional[str] = None) -> bool:
    """True when :class:`RestartFrom` is exact for this model and stack."""
    stack = stack or adapter.default_stack
    return adapter.family in RESTART_FAMILIES and adapter.arch != "encoder-decoder" and stack == adapter.default_stack


def layer_modules(adapter, stack: Optional[str] = None) -> list:
    """The transformer layer (block) module of each layer, in order.

    Raises:
        ValueError: when the layers cannot be located.
    """
    stack = stack or adapter.default_stack
    pattern = re.compile(ARCHITECTURES[adapter.family][stack]["attention"])
    modules = dict(adapter.model.named_modules())
    found = {}
    for name in modules:
        m = pattern.search(name)
        if m:
            found[int(m.group(1))] = modules[name[: m.end(1)]]
    if not found:
        raise ValueError(f"cannot locate the layer modules of {adapter.name}")
    return [found[i] for i in sorted(found)]


def _hidden(args, kwargs):
    return args[0] if args else kwargs["hidden_states"]


class ResidualCache(HookContext):
    """Record the hidden state entering each layer: ``.inputs[l]`` ``[batch, seq, dim]``
    (detached), for the last forward run inside the block."""

    def __init__(self, adapter, stack: Optional[str] = None):
        self.layers = layer_modules(adapter, stack)
        self.inputs: dict[int, torch.Tensor] = {}

    def _register(self, hooks: HookSet) -> None:
        for i, layer in enumerate(self.layers):
            def fn(module, args, kwargs, i=i):
                self.inputs[i] = _hidden(args, kwargs).detach()
            hooks.pre(layer, fn, with_kwargs=True)


class RestartFrom:
    """Inside the block, model forwards skip layers ``< layer`` and feed ``hidden``
    ``[rows, seq, dim]`` into ``layer``; the model must be run on ``rows`` rows.

    Raises:
        ValueError: a family without restart support, or a row/shape mismatch at run time.
    """

    def __init__(self, adapter, layer: int, hidden: torch.Tensor, stack: Optional[str] = None):
        if not supports_restart(adapter, stack):
            raise ValueError(f"layer restart is not supported for {adapter.name} ({adapter.family}); "
                             "use full forwards")
        self.layers = layer_modules(adapter, stack)
        if not 0 <= layer < len(self.layers):
            raise ValueError(f"layer {layer} out of range: {adapter.name} has layers 0..{len(self.layers) - 1}")
        self.layer = int(layer)
        self.hidden = hidden
        self._hooks = HookSet()
        self._stubbed: list = []

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
                saved = layer.__dict__.get("forward")
                layer.forward = lambda *a, **k: _hidden(a, k)
                self._stubbed.append((layer, saved))
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
