"""Validators of parameter values, shared by the CLI's options and the Python API.

One rule for every number a user gives: it parses as the declared kind, is finite (NaN
and ±inf are refused: ``--threshold nan`` would compare false with everything and prune
every head), and lies in the declared range. Heads and layer lists go through the one
notation (:mod:`probe.app.registry.notation`), which refuses repeats. Each validator raises
:class:`probe.errors.InputError` naming the option.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from probe.errors import InputError

#: the largest whole number an option may hold (beyond it torch and numpy overflow)
INT_LIMIT = 2**62


def _bound(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def check_number(
    value: Any,
    name: str,
    kind: type = float,
    min: Optional[float] = None,
    max: Optional[float] = None,
    min_open: bool = False,
) -> Any:
    """``value`` as a finite ``kind`` (``int`` or ``float``) within ``[min, max]``
    (``(min, max]`` with ``min_open``).

    Raises:
        InputError: not a number of that kind, NaN or infinite, or out of range.
    """
    if isinstance(value, bool):
        raise InputError(f"{name}: expected a number, got {value!r}")
    try:
        if kind is int:
            if isinstance(value, float):
                if not value.is_integer():
                    raise ValueError
                number: Any = int(value)
            else:
                number = int(str(value).strip()) if isinstance(value, str) else int(value)
        else:
            number = float(str(value).strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError, OverflowError):
        what = "a whole number" if kind is int else "a number"
        raise InputError(f"{name}: expected {what}, got {value!r}") from None
    if kind is float and not math.isfinite(number):
        raise InputError(f"{name}: expected a finite number, got {value!r} (NaN and infinity are not values)")
    if kind is int and abs(number) > INT_LIMIT:
        raise InputError(f"{name}: {number} is too large (at most {INT_LIMIT})")
    if min is not None and (number <= min if min_open else number < min):
        raise InputError(f"{name}: must be {'>' if min_open else '≥'} {_bound(min)}, got {value!r}")
    if max is not None and number > max:
        raise InputError(f"{name}: must be ≤ {_bound(max)}, got {value!r}")
    return number


def check_param(p: Any, value: Any) -> Any:
    """A declared parameter's value (:class:`probe.app.registry.Param`) checked and in its
    declared type: numbers by :func:`check_number`, ``"heads"``/``"ints"`` through the one
    notation (repeats refused). ``None`` stays ``None``.

    Raises:
        InputError: naming the option.
    """
    from .notation import parse_heads, parse_int_list

    if value is None:
        return None
    if p.multiple and isinstance(value, (list, tuple)) and p.type in (int, float, "heads", "ints"):
        return tuple(_one(p, v, parse_heads, parse_int_list) for v in value)
    return _one(p, value, parse_heads, parse_int_list)


def _one(p: Any, value: Any, parse_heads, parse_int_list) -> Any:
    if value is None:
        return None
    if p.type in (int, float):
        return check_number(value, p.option, p.type, p.min, getattr(p, "max", None), getattr(p, "min_open", False))
    if p.type == "heads":
        return parse_heads(value, p.option)
    if p.type == "ints":
        return parse_int_list(value, p.option)
    return value


def check_heads_in_model(analysis: Any, ctx: Any) -> None:
    """Every head an analysis' ``"heads"`` parameters name (``--heads``, ``--group``, …)
    checked against the run's model before the analysis runs (issue 59, row 7: ``--group
    L5H0`` on a 2-layer model was refused only after the patching ran).

    Raises:
        InputError: naming the option, the head and the model's range.
    """
    from probe.errors import InputError

    named = [(p, ctx.params.get(p.name)) for p in analysis.params if p.type == "heads"]
    named = [(p, v) for p, v in named if v]
    if not named or (ctx.model is None and getattr(ctx, "_adapter", None) is None):
        return
    adapter = ctx.adapter
    for p, value in named:
        groups = value if p.multiple else (value,)
        for heads in groups:
            for layer, head in heads or ():
                try:
                    adapter.check_head(layer, head)
                except InputError as exc:
                    raise InputError(f"{p.option} L{layer}H{head}: {exc}") from None
