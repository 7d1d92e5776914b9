"""Own-handle hook bookkeeping: register hooks, remove exactly those, always.

Unlike hook cleanups that pop every hook on a module (including other people's), a
:class:`HookSet` keeps the handles it created and removes only them, in ``finally``.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch


class HookSet:
    """Handles of hooks registered by one capture or intervention."""

    def __init__(self):
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

    def __enter__(self):
        self._hooks = HookSet()
        try:
            self._register(self._hooks)
        except BaseException:
            self._hooks.remove()
            raise
        return self

    def __exit__(self, *exc) -> bool:
        self._hooks.remove()
        return False


@contextmanager
def eager_attention(model: Any) -> Iterator[str]:
    """Run ``model`` with eager attention inside the block, then restore its setting.

    SDPA and flash attention never materialise the probabilities; eager attention
    computes the same function and returns them. Yields a short statement of what was
    done (``"eager"`` or ``"eager (switched from sdpa)"``), recorded in captured maps.
    """
    config: Any = getattr(model, "config", None)
    previous = getattr(config, "_attn_implementation", None) if config is not None else None
    switch = previous not in (None, "eager") and hasattr(model, "set_attn_implementation")
    # models that dispatch on the config string themselves (Falcon) cannot be switched by
    # set_attn_implementation (it only warns): set the config field they read instead
    direct = switch and not type(model)._can_set_attn_implementation()
    if direct:
        config._attn_implementation_internal = "eager"
    elif switch:
        model.set_attn_implementation("eager")
    try:
        yield f"eager (switched from {previous})" if switch else "eager"
    finally:
        if direct:
            config._attn_implementation_internal = previous
        elif switch:
            model.set_attn_implementation(previous)


def count_hooks(model: torch.nn.Module) -> int:
    """Number of forward and forward-pre hooks on all modules of ``model``."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
