"""The report's view pages: ``model.html`` (every head of a sentence as a thumbnail, as
bertviz's model view, Vig 2019) and ``compare.html`` (two heads side by side, and raw
attention vs rollout vs flow for one sentence, Abnar & Zuidema 2020).

Both embed one-byte weights (:func:`probe.app.report.head_view.quantise`) of the
corpus's representative sentences and the views' JavaScript; nothing is fetched.
"""

from __future__ import annotations

from typing import Any

from pathlib import Path

import numpy as np

from probe.app.registry.results import RolloutResult

from .examples import representative_examples
from .head_view import HeadView, head_view_js
from .html import esc, link, page, script_json
from .model_view import ModelView
from .tokens import maps_display_tokens
from .style import ACCENT, MUTED, is_trivial, number

MODEL_FILE = "model.html"
COMPARE_FILE = "compare.html"
#: representative sentences offered by the views' example selectors
VIEW_EXAMPLES = 4


def view_examples(ctx: Any) -> tuple:
    """``(example indices, titles)`` of the views' example selector: the report's
    representatives (the paper's sentences first), then short examples."""
    idx = list(dict.fromkeys(list(ctx.report.representatives) + representative_examples(ctx.maps, k=VIEW_EXAMPLES)))
    idx = idx[:VIEW_EXAMPLES]
    titles = []
    for i in idx:
        words = str(ctx.maps[i].text or "").split()
        titles.append(f"{i}: " + " ".join(words[:6]) + (" …" if len(words) > 6 else ""))
    return idx, titles


def model_page(data: Any) -> str:
    ctx = data.ctx
    idx, titles = view_examples(ctx)
    view = ModelView([ctx.maps[i] for i in idx], titles=titles, href="heads/L{layer}H{head}.html")
    body = (
        f"<nav>{link('index.html', 'index')}{link(COMPARE_FILE, 'compare')}</nav>"
        f"<h1>Model view: every head at once</h1>"
        f"<p>One square per head (rows: layers, columns: heads): its attention on the chosen sentence, rows "
        f"attending to columns, colour from 0 (palest, a light peach) to 1 (darkest) as in the heatmaps. Vertical stripes are "
        f"heads that send every token to one position ([CLS], [SEP]); a line just below the diagonal is a "
        f"previous-token head. Click a square to open the head.</p>{view.fragment(include_script=False)}"
    )
    return page("Model view", body, scripts=[head_view_js()])


def _pane(src_id: str, data_, initial, title) -> str:
    d = dict(data_, initial=list(initial), title=title)
    d.pop("examples")
    return (
        f'<div class="probe-head-view" data-probe-head-view data-source="{src_id}">'
        f'<script type="application/json">{script_json(d)}</script></div>'
    )


def token_rows_svg(tokens: Any, rows: dict, position: int) -> str:
    """One sentence's input tokens (rows, in sentence order) × methods (columns): a bar
    per token per method, its length proportional to the score from 0 (a full bar = the
    method's highest-scoring word), so 0.52 against 0.53 looks as close as it is; special
    tokens, punctuation and the output position itself are grey, clipped to a full bar,
    every score printed beside its bar."""
    methods = list(rows)
    col_w, label_w, row_h = 150, 110, 17
    trivial = [is_trivial(t) or j == position for j, t in enumerate(tokens)]
    width, height = label_w + col_w * len(methods), 22 + row_h * len(tokens)
    out = [f'<svg class="ev" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">']
    for c, m in enumerate(methods):
        out.append(f'<text x="{label_w + c * col_w}" y="13" class="evl" font-weight="bold">{esc(m)}</text>')
    for c, m in enumerate(methods):
        s = np.asarray(rows[m], dtype=float)
        words = [s[j] for j in range(len(tokens)) if not trivial[j]] or list(s)
        hi = max(words)
        for j, v in enumerate(s):
            y = 20 + j * row_h
            w = (min(max(v / hi, 0.0), 1.0) if hi > 0 else 0.0) * (col_w - 50)  # the axis starts at 0
            colour = MUTED if trivial[j] else ACCENT
            out.append(
                f'<rect x="{label_w + c * col_w}" y="{y + 3}" width="{max(w, 0):.1f}" height="11" '
                f'fill="{colour}"/><text x="{label_w + c * col_w + max(w, 0) + 3:.1f}" y="{y + 13}" '
                f'class="evl" font-size="10">{esc(number(v, digits=2))}</text>'
            )
    for j, t in enumerate(tokens):
        out.append(
            f'<text x="{label_w - 6}" y="{33 + j * row_h}" text-anchor="end" class="evl"'
            + (' fill="#999"' if trivial[j] else "")
            + f">{esc(t)}</text>"
        )
    out.append("</svg>")
    return "".join(out)


def _methods_block(data) -> str:
    res = data.ctx.result_of(RolloutResult)
    if res is None or res.scores is None:
        return '<p class="muted">Rollout and flow were not computed (the rollout section did not run).</p>'
    table = res.scores
    parts = []
    for ex, t in table.groupby("example", sort=True):
        m = data.ctx.maps[int(ex)]
        pos = int(t["output_position"].iloc[0])
        t = t[t["output_position"] == pos]
        rows = {"raw attention (last layer)": m.attentions[-1].float().mean(0)[pos].numpy()}
        for method, g in t.groupby("method", sort=False):
            rows[str(method)] = g.sort_values("input_position")["score"].to_numpy()
        shown = maps_display_tokens(m)
        parts.append(
            f"<h3>Example {int(ex)}, output position {pos} ({esc(shown[pos])})</h3>"
            f'<p class="sent">{esc(m.text)}</p>{token_rows_svg(shown, rows, pos)}'
        )
    return "".join(parts)


def compare_page(data: Any) -> str:
    ctx = data.ctx
    idx, titles = view_examples(ctx)
    shared = HeadView([ctx.maps[i] for i in idx], titles=titles).data()
    src = f'<script type="application/json" id="probe-compare-data">{script_json(shared)}</script>'
    layers = list(data.layers)
    a = (0, 0)
    b = (len(layers) - 1, min(1, data.n_heads - 1))
    panes = (
        f'<div class="pair">{_pane("probe-compare-data", shared, a, "A")}'
        f"{_pane('probe-compare-data', shared, b, 'B')}</div>"
    )
    body = (
        f"<nav>{link('index.html', 'index')}{link(MODEL_FILE, 'model view')}</nav>"
        f"<h1>Compare</h1><h2>Two heads side by side</h2>"
        f"<p>Choose a sentence, a layer and a head on each side.</p>{src}{panes}"
        f"<h2>Raw attention vs rollout vs flow</h2>"
        f"<p>How much each input token feeds one output position: the last layer's attention (mean over "
        f"heads), attention rollout and attention flow (Abnar &amp; Zuidema 2020). In each column a bar's "
        f"length is its score from 0 (full: the highest-scoring word), so a nearly flat method looks flat; "
        f"the values are printed beside the bars; special tokens, punctuation and the position itself are grey and do not set the scale. Token attributions (integrated gradients) "
        f"need a target: see <code>probe faithfulness</code>.</p>{_methods_block(data)}"
    )
    return page("Compare heads and methods", body, scripts=[head_view_js()])


def write_views(data: Any, out: Path) -> list:
    """Write ``model.html`` and ``compare.html`` under ``out``; returns the paths."""
    paths = []
    for name, build in ((MODEL_FILE, model_page), (COMPARE_FILE, compare_page)):
        p = Path(out) / name
        p.write_text(build(data), encoding="utf-8")
        paths.append(p)
    return paths
