"""Own-handle hook bookkeeping: the one place a hook is registered on a model.

Unlike hook cleanups that pop every hook on a module (including other people's), a
:class:`HookSet` keeps the handles it created and removes only them, in ``finally``.
Every reader and editor of a live model is a view of :class:`probe.tracing.trace_context.Trace`, which
registers its hooks through this module; the adapter's discovery at load time (which
attention modules a forward calls, :mod:`probe.models.adapter`) is the one other user,
on this floor below the trace.
"""

from __future__ import annotations

from typing import Callable, Self

import torch

__all__ = ["HookSet", "HookContext"]


class HookSet:
    """Handles of hooks registered by one capture or intervention."""

    def __init__(self) -> None:
        self._handles: list = []

    def forward(self, module: torch.nn.Module, fn: Callable, with_kwargs: bool = False) -> None:
        self._handles.append(module.register_forward_hook(fn, with_kwargs=with_kwargs))

    def pre(self, module: torch.nn.Module, fn: Callable, with_kwargs: bool = False) -> None:
        self._handles.append(module.register_forward_pre_hook(fn, with_kwargs=with_kwargs))

    def remove(self) -> None:
        while self._handles:
            self._handles.pop().remove()

    def __len__(self) -> int:
        return len(self._handles)


class HookContext:
    """Base of context managers that register hooks on enter and remove exactly those
    on exit — also when registering or the forward inside the block raised.

    Subclasses implement :meth:`_register` (add hooks to the given :class:`HookSet`).
    """

    def _register(self, hooks: HookSet) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._hooks = HookSet()
        try:
            self._register(self._hooks)
        except BaseException:
            self._hooks.remove()
            raise
        return self

    def __exit__(self, *exc: object) -> bool:
        self._hooks.remove()
        return False
