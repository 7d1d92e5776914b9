"""Interactive head view (:class:`HeadView`) and the static line view (:func:`line_view_svg`).

Both draw one example's attention as two columns of tokens joined by lines whose width
and opacity grow with the weight, in the style of the attention figures in the appendix
of Vaswani et al. (2017) and of bertviz's head view (Vig 2019). The head view is a
self-contained HTML/JavaScript component (``assets/probe_views.js``, inlined; no CDN, no
network): pick an example, a layer, a head and a token, and hide special tokens and
punctuation. It works in a report page opened from a file and in notebooks
(``_repr_html_``, Jupyter and VS Code).

Weights travel quantised to one byte (``round(255 · w)``, base64): 72 heads of a
30-token sentence weigh ~80 kB instead of ~400 kB of decimal JSON.
"""

from __future__ import annotations

from typing import Any

import base64
import uuid
from functools import lru_cache
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from probe.errors import InputError

from .html import VIEW_CSS, esc, script_json
from .style import ACCENT, is_trivial
from .tokens import maps_display_tokens

ASSET = Path(__file__).with_name("assets") / "probe_views.js"


@lru_cache(maxsize=1)
def head_view_js() -> str:
    """The views' JavaScript source (shipped with the package; head, model and compare views)."""
    return ASSET.read_text(encoding="utf-8")


def quantise(a: Any) -> str:
    """``a`` (weights in [0, 1], any shape) as base64 of ``uint8(round(255 · a))``, C order."""
    q = np.clip(np.rint(np.asarray(a, dtype=np.float32) * 255.0), 0, 255).astype(np.uint8)
    return base64.b64encode(q.tobytes()).decode("ascii")


def dequantise(text: str, shape: Any) -> np.ndarray:
    """Inverse of :func:`quantise` (float32 in [0, 1], rounded to 1/255)."""
    return np.frombuffer(base64.b64decode(text), dtype=np.uint8).reshape(shape).astype(np.float32) / 255.0


def pick_heads(maps: Any, layers: Any, heads: Any) -> Any:
    """``(layers, heads)`` to show of ``maps`` (None: all), each checked against the maps."""
    layers = list(maps.layers) if layers is None else [int(x) for x in layers]
    heads = list(range(maps.n_heads)) if heads is None else [int(h) for h in heads]
    for h in heads:
        if not 0 <= h < maps.n_heads:
            raise InputError(f"head {h} out of range 0..{maps.n_heads - 1}")
    for layer in layers:
        maps.layer(layer)  # raises ValueError naming the captured layers
    return layers, heads


def example_data(m: Any, layers: Any, heads: Any, title: str = "") -> dict:
    """One example for the browser: tokens, which are trivial, and the quantised weights
    ``[layer, head, query, key]`` of the chosen layers and heads."""
    idx = [m.layers.index(layer) for layer in layers]
    a = m.attentions.float()[idx][:, heads].numpy()
    raw = [str(t) for t in m.tokens]
    keys = maps_display_tokens(m)  # readable: byte-level BPE decoded, SentencePiece ▁ as ␣
    queries = maps_display_tokens(m, query=True) if m.kind == "cross" else None
    special = [bool(s) for s in m.special_mask.tolist()] if m.special_mask is not None else [False] * len(keys)
    return {
        "title": title,
        "text": str(m.text or ""),
        "tokens": keys,
        "query_tokens": queries,
        "trivial": [s or is_trivial(t) or is_trivial(r) for s, t, r in zip(special, keys, raw)],
        "nq": int(a.shape[2]),
        "nk": int(a.shape[3]),
        "w": quantise(a),
    }


class HeadView:
    """Interactive view of attention on one or more examples.

    Args:
        maps: an :class:`probe.maps.AttentionMaps`, or a list of them (an example
            selector appears; all must have the same layers and heads).
        layers / heads: the model layers and heads to include (default all captured);
            fewer heads make a smaller page.
        initial: ``(layer, head)`` shown first (default the first included).
        title: a caption (escaped).
        titles: one caption per example (default ``example 0``, ``example 1`` …).

    Raises:
        ValueError: a layer that was not captured, a head out of range, ``initial``
            not among the included layers/heads, no example.
    """

    def __init__(
        self,
        maps: Any,
        layers: Optional[Sequence[int]] = None,
        heads: Optional[Sequence[int]] = None,
        initial: Optional[tuple] = None,
        title: str = "",
        titles: Optional[Sequence[str]] = None,
    ) -> None:
        examples = list(maps) if isinstance(maps, (list, tuple)) else [maps]
        if not examples:
            raise InputError("the head view needs at least one example")
        self.layers, self.heads = pick_heads(examples[0], layers, heads)
        for m in examples[1:]:
            pick_heads(m, self.layers, self.heads)
        self.examples = examples
        self.maps = examples[0]
        self.title = title
        self.titles = list(titles) if titles is not None else [f"example {i}" for i in range(len(examples))]
        if initial is None:
            initial = (self.layers[0], self.heads[0])
        if initial[0] not in self.layers or initial[1] not in self.heads:
            raise InputError(
                f"initial (layer, head) {tuple(initial)} is not among the layers "
                f"{self.layers} and heads {self.heads} of this view"
            )
        self.initial = (self.layers.index(initial[0]), self.heads.index(initial[1]))

    def data(self) -> dict:
        """The JSON-able data the component draws (weights quantised, see :func:`quantise`)."""
        return {
            "layers": self.layers,
            "heads": self.heads,
            "initial": list(self.initial),
            "title": self.title,
            "accent": ACCENT,
            "examples": [example_data(m, self.layers, self.heads, t) for m, t in zip(self.examples, self.titles)],
        }

    def weights(self, example: int = 0) -> np.ndarray:
        """The embedded weights of one example, ``[layer, head, query, key]`` (as the browser sees them)."""
        e = self.data()["examples"][example]
        return dequantise(e["w"], (len(self.layers), len(self.heads), e["nq"], e["nk"]))

    def fragment(self, include_script: bool = True) -> str:
        """An HTML fragment: the component's root ``<div>`` with its data; with
        ``include_script`` also the views' JavaScript (harmless when repeated)."""
        uid = f"phv-{uuid.uuid4().hex[:10]}"
        html_ = (
            f'<div class="probe-head-view" id="{uid}" data-probe-head-view>'
            f'<script type="application/json">{script_json(self.data())}</script></div>'
        )
        if include_script:
            html_ += f"<style>{VIEW_CSS}</style><script>{head_view_js()}</script>"
        return html_

    def _repr_html_(self) -> str:
        return self.fragment(include_script=True)

    def save(self, path: Any) -> Path:
        """Write a standalone HTML page holding the view; returns the path."""
        from .html import page

        path = Path(path)
        path.write_text(
            page(self.title or "head view", self.fragment(include_script=False), scripts=[head_view_js()]),
            encoding="utf-8",
        )
        return path


def head_view(maps: Any, layer: Optional[int] = None, head: Optional[int] = None, **kwargs: Any) -> HeadView:
    """A :class:`HeadView` of ``maps`` (one example or a list), opened at ``(layer, head)``.

    Raises:
        ValueError: as :class:`HeadView`.
    """
    first = maps[0] if isinstance(maps, (list, tuple)) else maps
    initial = None
    if layer is not None or head is not None:
        initial = (first.layers[0] if layer is None else int(layer), 0 if head is None else int(head))
    return HeadView(maps, initial=initial, **kwargs)


def line_view_svg(
    maps: Any,
    layer: int,
    head: int,
    *,
    min_weight: float = 0.05,
    max_tokens: int = 60,
    row_height: int = 16,
    col_width: int = 130,
    gap: int = 140,
) -> str:
    """Static SVG of one head on one example: query tokens left, key tokens right, a line
    per weight ≥ ``min_weight`` with width and opacity by weight. Tokens are escaped;
    examples longer than ``max_tokens`` are cut (said in the caption).

    Raises:
        ValueError: layer not captured or head out of range.
    """
    a = maps.head(layer, head).float()
    keys = maps_display_tokens(maps)
    queries = maps_display_tokens(maps, query=True) if maps.kind == "cross" else keys
    nq, nk = min(len(queries), max_tokens), min(len(keys), max_tokens)
    a = a[:nq, :nk].numpy()
    n = max(nq, nk)
    width, height = 2 * col_width + gap, n * row_height + 8
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="attention lines, layer {layer} head {head}">'
    ]
    x1, x2 = col_width, col_width + gap
    for i, j in zip(*np.nonzero(a >= min_weight)):
        w = float(a[i, j])
        parts.append(
            f'<line x1="{x1}" y1="{8 + i * row_height}" x2="{x2}" y2="{8 + j * row_height}" '
            f'stroke="{ACCENT}" stroke-width="{0.4 + 4.5 * w:.1f}" '
            f'stroke-opacity="{min(1.0, 0.15 + w):.2f}"/>'
        )
    for i, tok in enumerate(queries[:nq]):
        parts.append(
            f'<text x="{x1 - 5}" y="{12 + i * row_height}" text-anchor="end" '
            f'font-size="12" font-family="sans-serif">{esc(tok)}</text>'
        )
    for j, tok in enumerate(keys[:nk]):
        parts.append(
            f'<text x="{x2 + 5}" y="{12 + j * row_height}" font-size="12" font-family="sans-serif">{esc(tok)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
