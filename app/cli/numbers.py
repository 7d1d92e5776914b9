"""``Number``: the one click type of every numeric option (finite, in range).

``click.FLOAT`` and ``click.FloatRange`` accept ``nan`` and ``inf`` (a NaN passes any range
check, since it compares false); this type refuses both, and checks ranges, with the
validator the Python API uses too (:func:`probe.app.registry.validate.check_number`).
"""

from __future__ import annotations

from typing import Any, Optional

import click


class Number(click.ParamType):
    """A finite ``int`` or ``float`` option within ``[min, max]`` (``(min, max]`` with
    ``min_open``); a bad value is one ``Error: Invalid value for '--x': …`` line, exit 2."""

    def __init__(
        self, kind: type = float, min: Optional[float] = None, max: Optional[float] = None, min_open: bool = False
    ):
        self.kind, self.min, self.max, self.min_open = kind, min, max, min_open
        self.name = "integer" if kind is int else "float"

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        from probe.app.registry.validate import check_number
        from probe.errors import InputError

        name = param.opts[0] if param is not None and param.opts else "value"
        try:
            return check_number(value, name, self.kind, self.min, self.max, self.min_open)
        except InputError as exc:
            self.fail(str(exc).removeprefix(f"{name}: "), param, ctx)

    def get_metavar(self, param: click.Parameter, ctx: Optional[click.Context] = None) -> str:
        return "INTEGER" if self.kind is int else "FLOAT"

    def __repr__(self) -> str:
        return f"Number({self.kind.__name__}, min={self.min}, max={self.max})"


def integer(min: Optional[int] = None, max: Optional[int] = None) -> Number:
    """A whole-number option (``min=1`` for counts)."""
    return Number(int, min, max)


def real(min: Optional[float] = None, max: Optional[float] = None, min_open: bool = False) -> Number:
    """A finite real-number option."""
    return Number(float, min, max, min_open)
