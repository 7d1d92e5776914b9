"""A head's evidence in words and small pictures, for its report page.

Every sentence and number here is a field of the head's evidence objects
(:class:`probe.app.registry.evidence.HeadEvidence`, ``data.evidence``), which each
analysis declares once beside itself; this module only lays them out: each section that
ran becomes its evidence's sentences (the parts the object marks ``strong`` in bold) and,
where a picture says more, a small inline SVG drawn from the same objects: the attention
profile as bars, the head's effect among all heads' effects, the head's accuracy against a
baseline per relation. Which block a section gets, its title and its order are the
section's own declaration (``Analysis.shows.block``,
:mod:`probe.app.registry.presentation`); this module knows no section by name. Raw values stay in
``tables/*.csv`` and ``summary.json``.
"""

from __future__ import annotations

from typing import Any

import math
from typing import Optional

from probe.app.registry.evidence import HeadEvidence

from .html import esc
from .style import ACCENT, MUTED, number

W = 460  # width of the inline plots (px)


def _f(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def items(data: Any, layer: int, head: int, section: str, kind: Optional[str] = None) -> list:
    """The head's evidence objects from ``section`` (of ``kind`` when given), in order."""
    return [
        ev for ev in data.evidence.get((layer, head), ()) if ev.section == section and (kind is None or ev.kind == kind)
    ]


def one(data: Any, layer: int, head: int, section: str, kind: str) -> Any:
    """The head's first ``(section, kind)`` evidence object, or ``None``."""
    found = items(data, layer, head, section, kind)
    return found[0] if found else None


def every_head(data: Any, section: str, kind: str) -> list:
    """Every head's value of the evidence ``(section, kind)`` (a strip's grey ticks)."""
    return [
        ev.value
        for key in sorted(data.evidence)
        for ev in data.evidence[key]
        if (ev.section, ev.kind) == (section, kind)
    ]


def sentence(ev: HeadEvidence) -> str:
    """``ev.text`` as HTML (escaped), the parts it marks ``strong`` in bold."""
    out, pos = [], 0
    for part in ev.strong:
        i = ev.text.find(part, pos) if part else -1
        if i < 0:
            continue
        out += [esc(ev.text[pos:i]), f"<b>{esc(part)}</b>"]
        pos = i + len(part)
    out.append(esc(ev.text[pos:]))
    return "".join(out)


# ---- small SVG plots -------------------------------------------------------------------
def bars_svg(items: list, *, unit_max: float = 1.0, percent: bool = True, label_w: int = 150) -> str:
    """Horizontal bars ``[(label, value, colour)]`` scaled to ``unit_max``; value printed."""
    row = 18
    h = row * len(items) + 4
    bar_w = W - label_w - 60
    out = [f'<svg class="ev" width="{W}" height="{h}" viewBox="0 0 {W} {h}" role="img">']
    for i, (label, value, colour) in enumerate(items):
        y = 2 + i * row
        v = max(0.0, _f(value) or 0.0)
        w = bar_w * min(v / unit_max, 1.0) if unit_max > 0 else 0
        out.append(
            f'<text x="{label_w - 6}" y="{y + 13}" text-anchor="end" class="evl">{esc(label)}</text>'
            f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="12" fill="{colour}"/>'
            f'<text x="{label_w + w + 4:.1f}" y="{y + 13}" class="evl">'
            f"{esc(number(value, percent=percent, digits=2))}</text>"
        )
    out.append("</svg>")
    return "".join(out)


def strip_svg(values: list, mine: float, ci: Optional[tuple] = None, *, xlabel: str = "") -> str:
    """All heads' values as grey ticks on one axis, this head's in colour with its CI."""
    vals = [v for v in (_f(x) for x in values) if v is not None]
    lo_all = min(vals + [0.0, mine] + ([ci[0]] if ci else []))
    hi_all = max(vals + [0.0, mine] + ([ci[1]] if ci else []))
    span = (hi_all - lo_all) or 1.0
    x0, x1, h = 20, W - 20, 56

    def x(v):
        return x0 + (v - lo_all) / span * (x1 - x0)

    out = [
        f'<svg class="ev" width="{W}" height="{h}" viewBox="0 0 {W} {h}" role="img">',
        f'<line x1="{x0}" x2="{x1}" y1="30" y2="30" stroke="#ccc"/>',
        f'<line x1="{x(0):.1f}" x2="{x(0):.1f}" y1="14" y2="38" stroke="#888" stroke-dasharray="2,2"/>',
    ]
    out += [
        f'<line x1="{x(v):.1f}" x2="{x(v):.1f}" y1="22" y2="38" stroke="{MUTED}" stroke-opacity="0.6"/>' for v in vals
    ]
    if ci:
        out.append(
            f'<line x1="{x(ci[0]):.1f}" x2="{x(ci[1]):.1f}" y1="30" y2="30" stroke="{ACCENT}" stroke-width="4"/>'
        )
    out.append(f'<circle cx="{x(mine):.1f}" cy="30" r="5" fill="{ACCENT}"/>')
    out.append(
        f'<text x="{x0}" y="52" class="evl">{esc(number(lo_all, digits=2))}</text>'
        f'<text x="{x1}" y="52" class="evl" text-anchor="end">{esc(number(hi_all, digits=2))}</text>'
        f'<text x="{(x0 + x1) / 2}" y="11" class="evl" text-anchor="middle">{esc(xlabel)}</text>'
    )
    out.append("</svg>")
    return "".join(out)


def versus_svg(rows: list, *, label_w: int = 90, min_count: int = 0) -> str:
    """Per row ``(label, accuracy, baseline, count)``: a bar for the head's accuracy and a
    black tick for the baseline (both in [0, 1]); rows under ``min_count`` pale; a legend line per mark."""
    row = 18
    legend = ["bar: this head (blue above the tick, grey not)", "tick: the best fixed offset"]
    legend += ["pale: fewer instances than the claim needs"] if min_count else []
    h = row * len(rows) + 6 + 14 * len(legend)  # the legend a line per item, each within the width
    bar_w = W - label_w - 130
    out = [f'<svg class="ev" width="{W}" height="{h}" viewBox="0 0 {W} {h}" role="img">']
    for i, (label, acc, base, count) in enumerate(rows):
        y = 2 + i * row
        a, b = _f(acc) or 0.0, _f(base) or 0.0
        few = int(count) < min_count
        colour = "#dddddd" if few else ACCENT if a > b else MUTED
        note = f" (n={int(count)} &lt; {min_count})" if few else f" (n={int(count)})"
        dim = ' opacity="0.5"' if few else ""
        out.append(
            f'<text x="{label_w - 6}" y="{y + 13}" text-anchor="end" class="evl"'
            f"{dim}>{esc(label)}</text>"
            f'<rect x="{label_w}" y="{y + 3}" width="{bar_w * a:.1f}" height="12" fill="{colour}"/>'
            f'<line x1="{label_w + bar_w * b:.1f}" x2="{label_w + bar_w * b:.1f}" y1="{y + 1}" '
            f'y2="{y + 17}" stroke="#111" stroke-width="2"/>'
            f'<text x="{label_w + bar_w + 6}" y="{y + 13}" class="evl">{a:.0%} / {b:.0%}{note}</text>'
        )
    y = 2 + len(rows) * row + 12
    out += [f'<text x="{label_w}" y="{y + 14 * k}" class="evl">{line}</text>' for k, line in enumerate(legend)]
    out.append("</svg>")
    return "".join(out)


# ---- the page's blocks, as the analyses declare them -----------------------------------
def paragraphs(section: str, kind: str) -> Any:
    """A :class:`probe.app.registry.presentation.HeadBlock` renderer: the head's
    ``(section, kind)`` evidence, one paragraph each."""

    def block(data, layer: int, head: int) -> str:
        return "".join(f"<p>{sentence(ev)}</p>" for ev in items(data, layer, head, section, kind))

    return block


def _skipped(o) -> str:
    return (
        f'<p class="muted">{esc(o.title)}: <span class="{esc(o.status)}">{esc(o.status)}</span> — {esc(o.reason)}</p>'
    )


def _facts(data, layer: int, head: int, name: str) -> str:
    """The head's facts of a section that declares no evidence, named for people."""
    facts = data.facts.get((layer, head), {}).get(name) or {}
    body = "".join(f"<li>{esc(str(k).replace('_', ' '))}: {esc(number(v, digits=2))}</li>" for k, v in facts.items())
    return f"<ul>{body}</ul>" if body else ""


def evidence_html(data: Any, layer: int, head: int) -> str:
    """The head's evidence: one titled block per section that ran and says something (its
    declared :class:`probe.app.registry.presentation.HeadBlock`, else its sentences, else
    its facts), in the blocks' order, then the sections without a block; one muted line per
    section that failed (with the reason). A skipped section is listed once, with its reason,
    on the index, not on every head page (a decoder's pages do not speak of syntax that was
    never parsed). A section whose evidence is the
    heads' claims shows them at the top of the page (:mod:`.claims_html`), not here."""
    from probe.app.registry import registered

    shows = {a.name: a.shows for a in registered()}
    status = {o.name: o for o in data.outcomes}
    blocks = sorted((s.block.order, name) for name, s in shows.items() if s.block is not None and name in status)
    order = [name for _, name in blocks] + [n for n in status if n not in {name for _, name in blocks}]
    out = []
    for name in order:
        o, shown = status[name], shows.get(name)
        if o.status == "skipped":
            continue
        if o.status != "ran":
            out.append(_skipped(o))
            continue
        title = o.title
        if shown is not None and shown.block is not None:
            title, body = shown.block.title, shown.block.render(data, layer, head)
        elif not (shown is not None and shown.claims) and items(data, layer, head, name):
            body = "".join(f"<p>{sentence(ev)}</p>" for ev in items(data, layer, head, name))
        else:  # a section that declares no evidence: its facts
            body = _facts(data, layer, head, name)
        if body:
            out.append(f'<section class="evidence"><h3>{esc(title)}</h3>{body}</section>')
    return "".join(out)
