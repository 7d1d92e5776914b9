"""The one head notation: printed ``L2H8`` (layer 2, head 8), accepted as ``L2H8``,
``2.8``, ``2:8`` or ``2-8``; tables carry ``layer`` and ``head`` columns. The CLI's
options (:mod:`probe.app.cli.common`) and the Python API parse with these functions.

A head or layer given twice is refused (:class:`probe.errors.InputError` naming it): counting
it twice would weigh it double in a mean and label a group ``L0H1+L0H1``."""

from __future__ import annotations

from typing import Any

import re

from probe.errors import InputError

_HEAD = re.compile(r"^\s*(?:[Ll](\d+)\s*[Hh](\d+)|(\d+)\s*[.:\-]\s*(\d+))\s*$")


def head_name(layer: int, head: int) -> str:
    """``(2, 8)`` -> ``'L2H8'``: how heads are written for people everywhere."""
    return f"L{int(layer)}H{int(head)}"


def parse_head(text: Any) -> tuple:
    """``'L2H8'``, ``'2.8'``, ``'2:8'``, ``'2-8'`` or ``(2, 8)`` -> ``(2, 8)``.

    Raises:
        InputError: anything else (the message shows the accepted forms).
    """
    if isinstance(text, (tuple, list)) and len(text) == 2 and all(_is_index(x) for x in text):
        return int(text[0]), int(text[1])
    m = _HEAD.match(str(text)) if isinstance(text, (str, int)) and not isinstance(text, bool) else None
    if not m:
        raise InputError(f"expected a head as L2H8 (or 2.8, 2:8, 2-8), got {text!r}")
    layer, head = (m.group(1), m.group(2)) if m.group(1) is not None else (m.group(3), m.group(4))
    return int(layer), int(head)


def parse_heads(value: Any, name: str = "--heads") -> Any:
    """``'L1H0,1.1 1:3'`` -> ``[(1, 0), (1, 1), (1, 3)]`` (separated by commas, spaces or
    ``+``; each in a form of :func:`parse_head`); a list of such items is accepted too;
    ``None``, ``''`` and ``'all'`` -> ``None`` (every head).

    Raises:
        InputError: naming ``name``, for a part that is not a head, a head given twice, or
            a string of separators only (``','``: no head, which is not "every head").
    """
    if value is None or (isinstance(value, str) and value.strip() in ("", "all")):
        return None
    parts = re.split(r"[,\s+]+", value.strip()) if isinstance(value, str) else list(value)
    out = []
    for part in parts:
        if isinstance(part, str) and not part:
            continue
        try:
            head = parse_head(part)
        except InputError as exc:
            raise InputError(f"{name}: {exc}") from None
        if head in out:
            raise InputError(f"{name}: head {head_name(*head)} is given twice; name each head once")
        out.append(head)
    if not out and isinstance(value, str):  # ',' would silently mean "no head" and switch a test off
        raise InputError(f"{name}: {value!r} names no head; give heads like L0H3,L1H2 (or leave {name} out: all heads)")
    return out


def _is_index(x) -> bool:
    """A non-negative whole number (an int, or a string of digits)."""
    if isinstance(x, bool):
        return False
    if isinstance(x, int):
        return x >= 0
    return isinstance(x, str) and x.strip().isdigit()


def parse_int_list(value: Any, name: str = "--layers") -> Any:
    """``'0,2,5'`` or ``'0-3'`` -> ``[0, 2, 5]`` / ``[0, 1, 2, 3]``; ``None`` stays ``None``.

    Raises:
        InputError: naming ``name``, for a part that is not an integer or a range, an empty
            range (``3-1``), a number given twice (``0,0,1``; ``0-2,1``), or separators
            only (``','``).
    """
    if value is None or value == "":
        return None
    out: list = []
    if isinstance(value, (list, tuple)):
        for v in value:
            if isinstance(v, bool) or not isinstance(v, int) and not (isinstance(v, str) and _INT.match(v)):
                raise InputError(f"{name}: expected integers, got {v!r}")
            out.append(int(v))
    else:
        for part in str(value).split(","):
            part = part.strip()
            m = _RANGE.match(part)
            if m:
                a, b = int(m.group(1)), int(m.group(2))
                if b < a:
                    raise InputError(f"{name}: the range {part} is empty (write the smaller number first)")
                if b - a > 100_000:
                    raise InputError(f"{name}: the range {part} is too long (at most 100000 numbers)")
                out.extend(range(a, b + 1))
            elif _INT.match(part):
                out.append(int(part))
            elif part:
                raise InputError(f"{name}: expected integers like 0,2,5 or 0-3, got {value!r}")
    if not out and isinstance(value, str):
        raise InputError(f"{name}: {value!r} names no number; give numbers like 0,2,5 or 0-3 (or leave {name} out)")
    seen: set = set()
    for x in out:
        if x in seen:
            raise InputError(f"{name}: {x} is given twice; name each one once")
        seen.add(x)
    return out


_INT = re.compile(r"^\s*-?\d{1,9}\s*$")
_RANGE = re.compile(r"^(-?\d{1,9})\s*-\s*(-?\d{1,9})$")
