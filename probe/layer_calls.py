"""Layer identity by call, not by module: :class:`LayerCalls`.

An adapter lists one module per layer. Most models have a module of their own per layer;
some call one module for several layers (ALBERT shares one layer's weights across all
its layers; Lan et al., 2020). A hook on such a module fires once per layer, so which
layer a call belongs to is its place among that module's calls in the forward: the
``k``-th call of a module listed at layers ``[i0, i1, …]`` is layer ``i_k``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import torch


class LayerCalls:
    """Which layer the ongoing call of each module is.

    Reads like the ``{module: layer}`` dict it replaces (``get``, ``in``, ``[]``, iteration
    over the modules that serve a wanted layer), restricted to ``wanted`` layers: a call of
    a layer not wanted reads as absent.

    Args:
        per_layer: the module of each layer, in layer order (a module may repeat).
        wanted: layer indices to answer for (default all).

    A module listed once always answers its layer. A shared module answers the layer of
    its current call once :meth:`advance` was called for the call (a forward pre-hook,
    :meth:`register`); the count restarts at every forward of the model.
    """

    def __init__(self, per_layer: Sequence[torch.nn.Module], wanted: Iterable[int] | None = None):
        self._layers: dict = {}
        for i, m in enumerate(per_layer):
            self._layers.setdefault(m, []).append(i)
        self.wanted = set(range(len(per_layer))) if wanted is None else {int(x) for x in wanted}
        self._count = dict.fromkeys(self._layers, 0)
        self._now = {m: ls[0] for m, ls in self._layers.items()}

    @property
    def shared(self) -> list:
        """Modules that serve more than one layer."""
        return [m for m, ls in self._layers.items() if len(ls) > 1]

    def advance(self, module: torch.nn.Module) -> int:
        """Start the next call of ``module``; returns its layer."""
        layers = self._layers[module]
        k = self._count[module]
        self._count[module] = k + 1
        self._now[module] = layers[k % len(layers)]
        return self._now[module]

    def reset(self) -> None:
        self._count = dict.fromkeys(self._count, 0)

    def get(self, module, default=None):
        layer = self._now.get(module)
        return layer if layer is not None and layer in self.wanted else default

    def __contains__(self, module) -> bool:
        return self.get(module) is not None

    def __getitem__(self, module) -> int:
        layer = self.get(module)
        if layer is None:
            raise KeyError(module)
        return layer

    def __iter__(self) -> Iterator[torch.nn.Module]:
        return iter([m for m, ls in self._layers.items() if self.wanted.intersection(ls)])

    def __len__(self) -> int:
        return len(list(iter(self)))

    def register(self, hooks, model: torch.nn.Module | None = None) -> None:
        """Forward pre-hooks (on ``hooks``, a :class:`probe.hooks.HookSet`) that advance each
        shared module's count, and restart the counts at every forward of ``model``."""
        shared = self.shared
        if not shared:
            return
        if model is not None:
            hooks.pre(model, lambda module, args: self.reset())
        for m in shared:
            hooks.pre(m, lambda module, args: (self.advance(module), None)[1])


def pre_hooks_by_layer(
    hooks, model: torch.nn.Module, per_layer: Sequence[torch.nn.Module], layers: Iterable[int], make_fn
) -> None:
    """Register, on each module that serves one of ``layers``, one forward pre-hook that
    calls ``make_fn(layer)(module, args)`` for the layer of the ongoing call (and does nothing
    on calls of other layers): per-layer hooks that stay right where layers share a module."""
    calls = LayerCalls(per_layer, layers)
    fns = {layer: make_fn(layer) for layer in calls.wanted}
    if calls.shared:
        hooks.pre(model, lambda module, args: calls.reset())

    def fn(module, args):
        layer = calls.advance(module)
        return fns[layer](module, args) if layer in fns else None

    for module in calls:
        hooks.pre(module, fn)
