"""One trace: read and edit any site of a live model, the one place that hooks it.

TransformerLens's ``run_with_cache`` / ``run_with_hooks`` and nnsight's ``model.trace``
in one function over the sites of :mod:`probe.models.sites`::

    cache = trace(adapter, ["The cat sat."], read="pattern")          # every layer's pattern
    cache["blocks.0.attn.hook_pattern"]                               # [batch, head, q, k]
    cache = trace(adapter, texts, edit={"blocks.1.attn.hook_z": Zero(head=2)}, read=["blocks.1.hook_resid_post"])
    cache.output                                                      # the model's output

:class:`Trace` is the same as a context manager, for forwards run by other code (every
forward inside the block is read and edited). How each site is reached is chosen once,
per stack (``path="auto"``): attention weights and the per-head output through
transformers' attention interface where the model's attention calls it
(:mod:`probe.tracing.attention_interface`), else forward hooks with eager attention
(:func:`probe.tracing.hooks.eager_attention`); residual, value and output-projection sites by
hooks on the modules the adapter names. Hooks are own-handle (:class:`probe.models.hooks.HookSet`)
and removed on exit, also after an exception; traces nest; nothing is global.

``restart_from=Restart(layer, hidden, context)`` runs layers ``< layer`` as pass-throughs
and feeds ``hidden`` into ``layer`` (with ``context``, the clean output-projection input of
``layer``, its attention is skipped too): a sweep of edits in layer ``l`` need not
recompute what comes before (:func:`probe.models.sites.supports_restart`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence, Union

import torch

from probe.errors import InputError
from probe.tracing.cache import Cache
from probe.tracing.site_keys import available_sites
from probe.tracing.trace_context import Restart, Trace

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["trace", "run_with_cache", "run_with_hooks"]


def _batch(adapter: ModelAdapter, inputs: Any) -> dict:
    """Model inputs from texts, encodings or a ready batch (encoder-decoder: the texts are
    also the decoder's targets, teacher forcing)."""
    if isinstance(inputs, Mapping):
        return dict(inputs)
    items: list = [inputs] if isinstance(inputs, str) else list(inputs)
    if items and not isinstance(items[0], str):  # encodings
        batch = adapter.batch(items)
        if adapter.arch == "encoder-decoder":
            batch.update(adapter.decoder_inputs(adapter.encode_batch([e.text for e in items], target=True)))
        return batch
    return adapter.inputs_of(items)


def trace(
    adapter: ModelAdapter,
    inputs: Any,
    read: Union[Iterable, Mapping, str, Callable] = (),
    edit: Optional[Mapping] = None,
    *,
    rows: Optional[Sequence[int]] = None,
    restart_from: Optional[Restart] = None,
    stack: Optional[str] = None,
    path: str = "auto",
    keep_grad: bool = False,
    grad: Optional[Callable] = None,
    stop_before: Optional[int] = None,
) -> Cache:
    """Run ``adapter``'s model once on ``inputs`` (texts, encodings or a batch dict) with
    ``edit`` applied, and return the :class:`Cache` of ``read`` (shapes in its docstring),
    with ``cache.output`` the model's output. Arguments as :class:`Trace`; ``read`` may also
    be a predicate over site names (``lambda n: n.endswith("hook_q")``: every site the
    model has whose name passes). Without ``keep_grad`` or ``grad`` the forward runs
    without autograd.

    ``grad``: ``fn(output) -> scalar``; the gradient of that scalar at every read site is
    in ``cache.grad(name)`` (same shape as the site), from the same forward.

    ``stop_before``: as :class:`Trace`'s (``n_layers``: after the last layer, TransformerLens's
    ``stop_at_layer``); ``cache.output`` is then ``None``.

    Example (TransformerLens: ``model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.hook_z",
    zero_head_2)])``)::

        cache = trace(adapter, ["The cat sat."], edit={"blocks.1.attn.hook_z": Zero(head=2)},
                      read=["blocks.1.hook_resid_post"])
    """
    if grad is not None and stop_before is not None:
        raise InputError("grad= needs the model's output: a forward that stops before it has none")
    batch = _batch(adapter, inputs)
    keep = keep_grad or grad is not None
    out = None  # where the forward stops (stop_before), the model returns nothing
    with (
        Trace(
            adapter, read, edit, rows=rows, restart_from=restart_from, stack=stack, path=path, keep_grad=keep,
            stop_before=stop_before,
        ) as tr,
        torch.set_grad_enabled(keep),
    ):  # fmt: skip
        out = adapter.model(**batch)
        if grad is not None:
            names = list(tr.cache)
            values = [tr.cache[n] for n in names]
            scalar = grad(out)
            if not torch.is_tensor(scalar) or scalar.numel() != 1:
                raise InputError("grad= must return a scalar tensor of the model's output (e.g. a loss)")
            grads = torch.autograd.grad(scalar, values, allow_unused=True)
            for n, g in zip(names, grads):
                tr.cache.set_grad(n, g)
    tr.cache.output, tr.cache.inputs = out, batch
    return tr.cache


def run_with_cache(
    adapter: ModelAdapter, inputs: Any, names: Union[Iterable, str, None] = None, **kwargs: Any
) -> tuple:
    """TransformerLens's ``run_with_cache``: ``(output, cache)`` of every site (``names``:
    some sites or kinds)."""
    cache = trace(adapter, inputs, read=available_sites(adapter) if names is None else names, **kwargs)
    return cache.output, cache


def run_with_hooks(adapter: ModelAdapter, inputs: Any, fwd_hooks: Sequence[tuple] = (), **kwargs: Any) -> Any:
    """TransformerLens's ``run_with_hooks``: the output with ``fn(value, ctx)`` applied at
    each ``(site, fn)`` of ``fwd_hooks``."""
    edit: dict = {}
    for name, fn in fwd_hooks:
        edit.setdefault(name, []).append(fn)
    return trace(adapter, inputs, edit=edit, **kwargs).output
