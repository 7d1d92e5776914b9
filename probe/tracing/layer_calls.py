"""Layer identity by call, not by module: :class:`LayerCalls`.

An adapter lists one module per layer. Most models have a module of their own per layer;
some call one module for several layers (ALBERT shares one layer's weights across all
its layers; Lan et al., 2020). A hook on such a module fires once per layer, so which
layer a call belongs to is its place among that module's calls in the forward: the
``k``-th call of a module listed at layers ``[i0, i1, …]`` is layer ``i_k``.

This module only counts; :class:`probe.tracing.trace_context.Trace` (the one place that hooks a model)
advances the count from a forward pre-hook on each shared module and restarts it at
every forward of the model, and dispatches each site's work to the layer of the call.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from typing import Optional

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
    its current call once :meth:`advance` was called for the call; :meth:`reset` restarts
    the count (at every forward of the model).
    """

    def __init__(self, per_layer: Sequence[torch.nn.Module], wanted: Iterable[int] | None = None) -> None:
        layers: dict = {}
        for i, m in enumerate(per_layer):
            layers.setdefault(m, []).append(i)
        self._setup(layers, set(range(len(per_layer))) if wanted is None else {int(x) for x in wanted})

    @classmethod
    def of(cls, served: Mapping[torch.nn.Module, Sequence[int]]) -> "LayerCalls":
        """From ``{module: the layers it serves, in call order}`` (modules of different
        per-layer lists, e.g. attention modules and output projections, in one count)."""
        out = cls.__new__(cls)
        out._setup({m: list(ls) for m, ls in served.items()}, {i for ls in served.values() for i in ls})
        return out

    def _setup(self, layers: dict, wanted: set) -> None:
        self._layers = layers
        self.wanted = wanted
        self._count = dict.fromkeys(self._layers, 0)
        self._now = {m: ls[0] for m, ls in self._layers.items()}
        self.shared_set = {m for m, ls in self._layers.items() if len(ls) > 1}

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

    def current(self, module: torch.nn.Module) -> int:
        """The layer of ``module``'s ongoing call (wanted or not)."""
        return self._now[module]

    def reset(self) -> None:
        """Forget the calls counted so far (at the start of each forward of the model)."""
        self._count = dict.fromkeys(self._count, 0)

    def get(self, module: object, default: Optional[int] = None) -> Optional[int]:
        """The layer whose call of ``module`` is running, else ``default``."""
        layer = self._now.get(module)
        return layer if layer is not None and layer in self.wanted else default

    def __contains__(self, module: object) -> bool:
        return self.get(module) is not None

    def __getitem__(self, module: torch.nn.Module) -> int:
        layer = self.get(module)
        if layer is None:
            raise KeyError(module)
        return layer

    def __iter__(self) -> Iterator[torch.nn.Module]:
        return iter([m for m, ls in self._layers.items() if self.wanted.intersection(ls)])

    def __len__(self) -> int:
        return len(list(iter(self)))
