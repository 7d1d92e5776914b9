"""The trace core's hook tools beside the own-handle hooks of :mod:`probe.models.hooks`
(:class:`~probe.models.hooks.HookSet`, :class:`~probe.models.hooks.HookContext`): eager
attention inside a block, and a count of the hooks on a model (tests check none is left
behind)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch

__all__ = ["eager_attention", "count_hooks"]


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
            try:
                model.set_attn_implementation(previous)
            except ValueError:  # a sub-model that never ran it (RT-DETR's ResNet backbone has no SDPA)
                config._attn_implementation_internal = previous


def count_hooks(model: torch.nn.Module) -> int:
    """Number of forward and forward-pre hooks on all modules of ``model``."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
