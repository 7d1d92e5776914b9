"""The one head notation: printed ``L2H8`` (layer 2, head 8), accepted as ``L2H8``,
``2.8``, ``2:8`` or ``2-8``; tables carry ``layer`` and ``head`` columns. The CLI's
options (:mod:`probe.app.cli.common`) and the Python API parse with these functions."""

from __future__ import annotations

import re

_HEAD = re.compile(r"^\s*(?:[Ll](\d+)\s*[Hh](\d+)|(\d+)\s*[.:\-]\s*(\d+))\s*$")


def head_name(layer: int, head: int) -> str:
    """``(2, 8)`` -> ``'L2H8'``: how heads are written for people everywhere."""
    return f"L{int(layer)}H{int(head)}"


def parse_head(text) -> tuple:
    """``'L2H8'``, ``'2.8'``, ``'2:8'``, ``'2-8'`` or ``(2, 8)`` -> ``(2, 8)``.

    Raises:
        ValueError: anything else (the message shows the accepted forms).
    """
    if isinstance(text, (tuple, list)) and len(text) == 2:
        return int(text[0]), int(text[1])
    m = _HEAD.match(str(text))
    if not m:
        raise ValueError(f"expected a head as L2H8 (or 2.8, 2:8, 2-8), got {text!r}")
    layer, head = (m.group(1), m.group(2)) if m.group(1) is not None else (m.group(3), m.group(4))
    return int(layer), int(head)


def parse_heads(value, name: str = "--heads"):
    """``'L1H0,1.1 1:3'`` -> ``[(1, 0), (1, 1), (1, 3)]`` (separated by commas, spaces or
    ``+``; each in a form of :func:`parse_head`); a list of such items is accepted too;
    ``None``, ``''`` and ``'all'`` -> ``None`` (every head).

    Raises:
        ValueError: naming ``name``, for a part that is not a head.
    """
    if value is None or (isinstance(value, str) and value.strip() in ("", "all")):
        return None
    parts = re.split(r"[,\s+]+", value.strip()) if isinstance(value, str) else list(value)
    out = []
    for part in parts:
        if isinstance(part, str) and not part:
            continue
        try:
            out.append(parse_head(part))
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return out


def parse_int_list(value, name: str = "--layers"):
    """``'0,2,5'`` or ``'0-3'`` -> ``[0, 2, 5]`` / ``[0, 1, 2, 3]``; ``None`` stays ``None``.

    Raises:
        ValueError: naming ``name``, for a part that is not an integer or a range.
    """
    if value is None or value == "":
        return None
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    out = []
    try:
        for part in str(value).split(","):
            part = part.strip()
            if "-" in part[1:]:
                a, b = part.split("-", 1)
                out.extend(range(int(a), int(b) + 1))
            elif part:
                out.append(int(part))
    except ValueError:
        raise ValueError(f"{name}: expected integers like 0,2,5 or 0-3, got {value!r}") from None
    return out
