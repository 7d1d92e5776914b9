"""Interactive head view (:class:`HeadView`) and the static line view (:func:`line_view_svg`).

Both draw one example's attention as two columns of tokens joined by lines whose width
and opacity grow with the weight, in the style of the attention figures in the appendix
of Vaswani et al. (2017). The head view is a self-contained HTML/JavaScript component
(``assets/head_view.js``, inlined; no CDN, no network): pick a layer, a head and a token.
It works in a report page opened from a file and in notebooks (``_repr_html_``).
"""

from __future__ import annotations

import uuid
from functools import lru_cache
from pathlib import Path
from typing import Optional, Sequence

from .html import esc, script_json

ASSET = Path(__file__).with_name("assets") / "head_view.js"


@lru_cache(maxsize=1)
def head_view_js() -> str:
    """The component's JavaScript source (shipped with the package)."""
    return ASSET.read_text(encoding="utf-8")


def _pick(maps, layers, heads):
    layers = list(maps.layers) if layers is None else [int(x) for x in layers]
    heads = list(range(maps.n_heads)) if heads is None else [int(h) for h in heads]
    for h in heads:
        if not 0 <= h < maps.n_heads:
            raise ValueError(f"head {h} out of range 0..{maps.n_heads - 1}")
    for layer in layers:
        maps.layer(layer)  # raises ValueError naming the captured layers
    return layers, heads


class HeadView:
    """Interactive view of one example's attention.

    Args:
        maps: an :class:`probe.maps.AttentionMaps`.
        layers / heads: the model layers and heads to include (default all captured);
            fewer heads make a smaller page.
        initial: ``(layer, head)`` shown first (default the first included).
        title: a caption (escaped).
        digits: decimals kept per weight in the embedded data.

    Raises:
        ValueError: a layer that was not captured, a head out of range, ``initial``
            not among the included layers/heads.
    """

    def __init__(self, maps, layers: Optional[Sequence[int]] = None, heads: Optional[Sequence[int]] = None,
                 initial: Optional[tuple] = None, title: str = "", digits: int = 3):
        self.layers, self.heads = _pick(maps, layers, heads)
        self.maps = maps
        self.title = title
        self.digits = digits
        if initial is None:
            initial = (self.layers[0], self.heads[0])
        if initial[0] not in self.layers or initial[1] not in self.heads:
            raise ValueError(f"initial (layer, head) {tuple(initial)} is not among the layers "
                             f"{self.layers} and heads {self.heads} of this view")
        self.initial = (self.layers.index(initial[0]), self.heads.index(initial[1]))

    def data(self) -> dict:
        """The JSON-able data the component draws (weights rounded to ``digits``)."""
        m = self.maps
        a = m.attentions.float()
        idx = [m.layers.index(layer) for layer in self.layers]
        sub = a[idx][:, self.heads].numpy().round(self.digits)
        return {
            "tokens": [str(t) for t in m.tokens],
            "query_tokens": [str(t) for t in m.query_tokens] if m.kind == "cross" else None,
            "layers": self.layers,
            "heads": self.heads,
            "attn": sub.tolist(),
            "initial": list(self.initial),
            "title": self.title,
        }

    def fragment(self, include_script: bool = True) -> str:
        """An HTML fragment: the component's root ``<div>`` with its data; with
        ``include_script`` also the component's JavaScript (harmless when repeated)."""
        uid = f"phv-{uuid.uuid4().hex[:10]}"
        html_ = (f"<div class=\"probe-head-view\" id=\"{uid}\" data-probe-head-view>"
                 f"<script type=\"application/json\">{script_json(self.data())}</script></div>")
        if include_script:
            html_ += f"<script>{head_view_js()}</script>"
        return html_

    def _repr_html_(self) -> str:
        return self.fragment(include_script=True)

    def save(self, path) -> Path:
        """Write a standalone HTML page holding the view; returns the path."""
        from .html import page

        path = Path(path)
        path.write_text(page(self.title or "head view", self.fragment(include_script=False),
                             scripts=[head_view_js()]), encoding="utf-8")
        return path


def head_view(maps, layer: Optional[int] = None, head: Optional[int] = None, **kwargs) -> HeadView:
    """A :class:`HeadView` of ``maps``, opened at ``(layer, head)`` when given.

    Raises:
        ValueError: as :class:`HeadView`.
    """
    initial = None
    if layer is not None or head is not None:
        initial = (maps.layers[0] if layer is None else int(layer), 0 if head is None else int(head))
    return HeadView(maps, initial=initial, **kwargs)


def line_view_svg(maps, layer: int, head: int, *, min_weight: float = 0.05, max_tokens: int = 60,
                  row_height: int = 16, col_width: int = 130, gap: int = 140) -> str:
    """Static SVG of one head on one example: query tokens left, key tokens right, a line
    per weight ≥ ``min_weight`` with width and opacity by weight. Tokens are escaped;
    examples longer than ``max_tokens`` are cut (said in the caption).

    Raises:
        ValueError: layer not captured or head out of range.
    """
    a = maps.head(layer, head).float()
    keys = list(maps.tokens)
    queries = list(maps.query_tokens) if maps.kind == "cross" else keys
    nq, nk = min(len(queries), max_tokens), min(len(keys), max_tokens)
    a = a[:nq, :nk].numpy()
    n = max(nq, nk)
    width, height = 2 * col_width + gap, n * row_height + 8
    parts = [f"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" "
             f"viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"attention lines, layer {layer} head {head}\">"]
    x1, x2 = col_width, col_width + gap
    for i in range(nq):
        for j in range(nk):
            w = float(a[i, j])
            if w >= min_weight:
                parts.append(f"<line x1=\"{x1}\" y1=\"{8 + i * row_height}\" x2=\"{x2}\" y2=\"{8 + j * row_height}\" "
                             f"stroke=\"#4c72b0\" stroke-width=\"{0.4 + 4.5 * w:.2f}\" "
                             f"stroke-opacity=\"{min(1.0, 0.15 + w):.2f}\"/>")
    for i, tok in enumerate(queries[:nq]):
        parts.append(f"<text x=\"{x1 - 5}\" y=\"{12 + i * row_height}\" text-anchor=\"end\" "
                     f"font-size=\"12\" font-family=\"sans-serif\">{esc(tok)}</text>")
    for j, tok in enumerate(keys[:nk]):
        parts.append(f"<text x=\"{x2 + 5}\" y=\"{12 + j * row_height}\" font-size=\"12\" "
                     f"font-family=\"sans-serif\">{esc(tok)}</text>")
    parts.append("</svg>")
    return "".join(parts)
