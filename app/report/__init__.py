"""Report layer: figures and per-head reports built from the analyses' tidy tables.

matplotlib/seaborn are imported lazily inside functions (Agg backend). Public API::

    from probe.app.report import build_report, head_view, show
    build_report("report", model="minilm")      # the same as `probe report --out report`
    show(maps, layer, head)                     # head view inline in a notebook (also probe.show)
    show(maps)                                  # model view: every head as a thumbnail

The look of every figure (colour maps, role palette, rounding) is in :mod:`.style`.
"""

from __future__ import annotations

from typing import Any


def build_report(*args: Any, **kwargs: Any) -> Any:
    """See :func:`probe.app.report.build.build_report`."""
    from .build import build_report as _build

    return _build(*args, **kwargs)


def head_view(*args: Any, **kwargs: Any) -> Any:
    """See :func:`probe.app.report.head_view.head_view`."""
    from .head_view import head_view as _view

    return _view(*args, **kwargs)


def show(*args: Any, **kwargs: Any) -> Any:
    """See :func:`probe.app.report.model_view.show`."""
    from .model_view import show as _show

    return _show(*args, **kwargs)
