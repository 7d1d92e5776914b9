"""The memory budget: how many rows one model forward may carry, sized from the input
length, so that peak memory does not grow with the longest input.

A forward with gradients (head importance, attributions) keeps every layer's
activations for the backward pass: per row of ``n`` tokens about

    bytes(n) = 4 · L · (c_attn · H · n² + c_ff · n · d_ff + c_hidden · n · d)

(float32; ``L`` layers, ``H`` heads, ``d`` hidden size, ``d_ff`` feed-forward size). The
constants were measured on the bundled MiniLM (bench/bench_report.py; a row of 393
tokens took 72 MiB with gradients) and rounded up. Without gradients a forward keeps
about a third of it.

The budget (``--memory-budget``, default :data:`DEFAULT_BUDGET`) bounds the whole
process; one forward's activations may take :data:`WORKSPACE_FRACTION` of it (the
rest: the interpreter, torch, the model, the captured maps and the allocator's slack).
A budget too small for one row of the longest input is refused at once, naming the
smallest budget that works (:func:`check_budget`).

Analyses ask :func:`rows_for` (how many rows of ``n`` tokens fit one forward) under
the budget in force (:func:`memory_budget` sets it for a block of code).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from probe.errors import InputError
from probe.models.batching import ONE_LENGTH, one_length_batches

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = [
    "DEFAULT_BUDGET",
    "WORKSPACE_FRACTION",
    "check_budget",
    "current_budget",
    "format_size",
    "length_groups",
    "PADDING",
    "memory_budget",
    "parse_size",
    "row_bytes",
    "rows_for",
    "smallest_budget",
]

GiB = 1 << 30
MiB = 1 << 20
#: default budget of the whole process: fits a 16 GB laptop with room for everything else
DEFAULT_BUDGET = 2 * GiB
#: share of the budget one forward's activations may use
WORKSPACE_FRACTION = 1 / 8
#: measured on MiniLM with gradients (see the module docstring), rounded up
C_ATTN, C_FF, C_HIDDEN = 1.5, 1.5, 6.0
NO_GRAD_SHARE = 1 / 3

_BUDGET: contextvars.ContextVar[int] = contextvars.ContextVar("probe_memory_budget", default=DEFAULT_BUDGET)


def parse_size(text: str | int | float) -> int:
    """Bytes from ``"4G"``, ``"512M"``, ``"1.5GiB"``, ``"2000000000"`` (a plain number is bytes).

    Raises:
        ValueError: not a size, or not positive.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b)?\s*", str(text), re.IGNORECASE)
        if not m:
            raise InputError(f"memory budget {text!r} is not a size: write e.g. 4G, 1500M or 2.5GiB")
        value = float(m.group(1)) * {"": 1, "k": 1 << 10, "m": MiB, "g": GiB, "t": 1 << 40}[m.group(2).lower()]
    if not value > 0:
        raise InputError(f"memory budget must be positive, got {text!r}")
    return int(value)


def format_size(n: float) -> str:
    """``1.50 GiB`` / ``880 MiB``."""
    return f"{n / GiB:.2f} GiB" if n >= GiB else f"{math.ceil(n / MiB)} MiB"


def _dims(adapter: ModelAdapter) -> tuple:
    cfg = adapter.config
    d = next((int(getattr(cfg, k)) for k in ("hidden_size", "n_embd", "d_model", "dim") if getattr(cfg, k, None)), 768)
    ff = next(
        (
            int(getattr(cfg, k))
            for k in ("intermediate_size", "n_inner", "d_ff", "hidden_dim", "encoder_ffn_dim", "ffn_dim")
            if getattr(cfg, k, None)
        ),
        4 * d,
    )
    layers = adapter.n_layers
    if adapter.arch == "encoder-decoder":
        layers *= 2
    return layers, adapter.n_heads, d, ff


def row_bytes(adapter: ModelAdapter, n_tokens: int, grad: bool = True) -> int:
    """Estimated activation bytes of one row of ``n_tokens`` tokens in one forward
    (kept for the backward when ``grad``)."""
    layers, heads, d, ff = _dims(adapter)
    n = max(int(n_tokens), 1)
    b = 4.0 * layers * (C_ATTN * heads * n * n + C_FF * n * ff + C_HIDDEN * n * d)
    return int(b if grad else b * NO_GRAD_SHARE)


def current_budget() -> int:
    """The budget in force (bytes)."""
    return _BUDGET.get()


@contextlib.contextmanager
def memory_budget(total: int | None) -> Iterator[int]:
    """Run a block under a budget of ``total`` bytes (``None``: the default)."""
    token = _BUDGET.set(int(total) if total else DEFAULT_BUDGET)
    try:
        yield _BUDGET.get()
    finally:
        _BUDGET.reset(token)


def workspace(total: int | None = None) -> int:
    """Bytes one forward's activations may take under ``total`` (default: in force)."""
    return int((total or current_budget()) * WORKSPACE_FRACTION)


def rows_for(adapter: ModelAdapter, n_tokens: int, cap: int | None = None, grad: bool = True) -> int:
    """How many rows of ``n_tokens`` tokens fit one forward under the budget (≥ 1; at
    most ``cap``). The budget was checked against the longest input by
    :func:`check_budget`, so 1 always fits there."""
    rows = max(1, int(workspace() // max(row_bytes(adapter, n_tokens, grad), 1)))
    return min(rows, cap) if cap else rows


def smallest_budget(adapter: ModelAdapter, longest_tokens: int, grad: bool = True) -> int:
    """The least budget under which one row of ``longest_tokens`` tokens fits a forward."""
    return int(math.ceil(row_bytes(adapter, longest_tokens, grad) / WORKSPACE_FRACTION))


def check_budget(adapter: ModelAdapter, longest_tokens: int, total: int | None = None, grad: bool = True) -> None:
    """Refuse a budget in which one row of the longest input does not fit.

    Raises:
        ValueError: naming the smallest budget that works.
    """
    total = total or current_budget()
    need = smallest_budget(adapter, longest_tokens, grad)
    if need > total:
        raise InputError(
            f"--memory-budget {format_size(total)} is too small: one forward of the longest input "
            f"({longest_tokens} tokens) with gradients needs about "
            f"{format_size(row_bytes(adapter, longest_tokens, grad))} of activations, which is "
            f"{WORKSPACE_FRACTION:.3g} of the budget; the smallest budget that works is "
            f"{format_size(need)} (or shorten the inputs: --window/--truncate)"
        )


#: the padding a group of examples whose values do not depend on each other may carry, as a
#: share of its tokens (:func:`length_groups`' ``waste``): attributions and the writes' streams
PADDING = 0.15


def length_groups(
    lengths: Sequence[int], adapter: ModelAdapter, cap: int, grad: bool = True, waste: float | None = None
) -> list:
    """Example indices in groups for one forward each: longest first, each group as many
    examples (at most ``cap``) as fit the budget at its longest length; with ``waste``, a
    group also closes before an example that would make its padded tokens (its size × its
    first, longest, length) exceed ``1 + waste`` times its own tokens (examples of one
    forward whose values do not depend on the others': padding costs every layer as much as a
    token does).

    Returns a list of index lists covering ``range(len(lengths))`` once; each of one
    length where the model runs one length per batch (``adapter.batching``).
    """
    order = sorted(range(len(lengths)), key=lambda i: -int(lengths[i]))
    groups, i = [], 0
    while i < len(order):
        longest = int(lengths[order[i]])
        take = order[i : i + rows_for(adapter, longest, cap, grad)]
        if waste is not None:
            tokens = 0
            for k, j in enumerate(take):  # the first always fits: its padding is 0
                tokens += int(lengths[j])
                if (k + 1) * longest > (1.0 + waste) * tokens:
                    take = take[:k]
                    break
        groups.append(take)
        i += len(take)
    if adapter.batching == ONE_LENGTH:
        return list(one_length_batches(groups, [int(n) for n in lengths]))
    return groups
