"""The model view: every layer × head of one example as a thumbnail heatmap (after
bertviz's ``model_view``, Vig 2019), drawn in the browser from one-byte weights with the
report's colour map; a click opens the head's page. And :func:`show`, the notebook entry
point of the views.
"""

from __future__ import annotations

from typing import Any

import uuid
from pathlib import Path
from typing import Optional, Sequence

from probe.errors import InputError

from .head_view import VIEW_CSS, HeadView, pick_heads, example_data, head_view, head_view_js
from .html import script_json
from .style import cmap_stops


class ModelView:
    """All heads of one or more examples as thumbnails.

    Args:
        maps: an :class:`probe.maps.AttentionMaps` or a list of them (an example selector
            appears; all must share layers and heads).
        titles: one caption per example.
        href: link of a thumbnail, with ``{layer}`` and ``{head}`` placeholders (the
            report's ``heads/L{layer}H{head}.html``); ``""`` links nowhere.

    Raises:
        ValueError: no example, or examples with different layers/heads.
    """

    def __init__(self, maps: Any, titles: Optional[Sequence[str]] = None, href: str = "") -> None:
        examples = list(maps) if isinstance(maps, (list, tuple)) else [maps]
        if not examples:
            raise InputError("the model view needs at least one example")
        self.layers, self.heads = pick_heads(examples[0], None, None)
        for m in examples[1:]:
            if list(m.layers) != self.layers or m.n_heads != len(self.heads):
                raise InputError("the model view's examples must come from one model capture (same layers and heads)")
        self.examples = examples
        self.titles = list(titles) if titles is not None else [f"example {i}" for i in range(len(examples))]
        self.href = href or "#L{layer}H{head}"

    def data(self) -> dict:
        return {
            "layers": self.layers,
            "heads": self.heads,
            "cmap": cmap_stops(32),
            "href": self.href,
            "examples": [example_data(m, self.layers, self.heads, t) for m, t in zip(self.examples, self.titles)],
        }

    def fragment(self, include_script: bool = True) -> str:
        uid = f"pmv-{uuid.uuid4().hex[:10]}"
        out = (
            f'<div class="probe-model-view" id="{uid}" data-probe-model-view>'
            f'<script type="application/json">{script_json(self.data())}</script></div>'
        )
        if include_script:
            out += f"<style>{VIEW_CSS}</style><script>{head_view_js()}</script>"
        return out

    def _repr_html_(self) -> str:
        return self.fragment(include_script=True)

    def save(self, path: Any) -> Path:
        from .html import page

        path = Path(path)
        path.write_text(
            page("model view", self.fragment(include_script=False), scripts=[head_view_js()]), encoding="utf-8"
        )
        return path


def show(maps: Any, layer: Optional[int] = None, head: Optional[int] = None, *, view: Optional[str] = None) -> Any:
    """Show attention inline in a notebook (Jupyter, VS Code; no network): the head view
    opened at ``(layer, head)``, or with neither given the model view of every head.

    Args:
        maps: one :class:`probe.maps.AttentionMaps` or a list (an example selector appears).
        layer, head: the head to open.
        view: ``"head"`` or ``"model"`` to choose explicitly.

    Returns:
        A :class:`HeadView` or :class:`ModelView`: displayed by ``_repr_html_``, saved
        with ``.save(path)``.

    Raises:
        ValueError: an unknown ``view``, a layer not captured, a head out of range.
    """
    if view is None:
        view = "model" if layer is None and head is None else "head"
    if view == "model":
        return ModelView(maps)
    if view == "head":
        return head_view(maps, layer, head)
    raise InputError(f"unknown view {view!r}: use 'head' or 'model'")


__all__ = ["HeadView", "ModelView", "show"]
