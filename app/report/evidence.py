"""A head's evidence in words and small pictures, for its report page.

Every sentence and number here is a field of the head's evidence objects
(:class:`probe.app.registry.evidence.HeadEvidence`, ``data.evidence``), which each
analysis declares once beside itself; this module only lays them out: each section that
ran becomes its evidence's sentences (the parts the object marks ``strong`` in bold) and,
where a picture says more, a small inline SVG drawn from the same objects: the attention
profile as bars, the head's ablation effect among all heads' effects, the head's syntax
accuracy against the fixed-offset baseline per relation. Raw values stay in
``tables/*.csv`` and ``summary.json``.
"""

from __future__ import annotations

import math

from .html import esc
from .style import ACCENT, MUTED, number

W = 460  # width of the inline plots (px)


def _f(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def items(data, layer: int, head: int, section: str, kind=None) -> list:
    """The head's evidence objects from ``section`` (of ``kind`` when given), in order."""
    return [
        ev for ev in data.evidence.get((layer, head), ()) if ev.section == section and (kind is None or ev.kind == kind)
    ]


def _one(data, layer, head, section, kind):
    found = items(data, layer, head, section, kind)
    return found[0] if found else None


def _every_head(data, section: str, kind: str) -> list:
    """Every head's value of the evidence ``(section, kind)`` (a strip's grey ticks)."""
    return [
        ev.value
        for key in sorted(data.evidence)
        for ev in data.evidence[key]
        if (ev.section, ev.kind) == (section, kind)
    ]


def sentence(ev) -> str:
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
def bars_svg(items, *, unit_max: float = 1.0, percent: bool = True, label_w: int = 150) -> str:
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


def strip_svg(values, mine: float, ci=None, *, xlabel: str = "") -> str:
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


def versus_svg(rows, *, label_w: int = 90, min_count: int = 0) -> str:
    """Per row ``(label, accuracy, baseline, count)``: a bar for the head's accuracy and a
    black tick for the baseline (both in [0, 1]); rows under ``min_count`` greyed."""
    row = 18
    h = row * len(rows) + 20
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
    out.append(
        f'<text x="{label_w}" y="{y}" class="evl">bar: this head · tick: best fixed offset'
        f"{' · grey: fewer instances than the claim needs' if min_count else ''}</text></svg>"
    )
    return "".join(out)


# ---- one block per section ---------------------------------------------------------------
#: bar colours of an attention profile's parts (the others: the accent)
PROFILE_COLOURS = {"[CLS] / first token": "#bdbdbd", "[SEP] / last token": "#bdbdbd", "punctuation": "#f4a6b7"}


def _roles(data, layer, head) -> str:
    role = _one(data, layer, head, "roles", "role")
    if role is None:
        return ""
    pattern = _one(data, layer, head, "claims", "pattern")
    if pattern is not None and pattern.status != "holds" and role.label:
        # the pattern claim decides whether a role is stated; the roles section's label is then only the closest rule
        out = f"<p>Closest rule (the pattern claim does not hold, so no role is claimed): {sentence(role)}</p>"
    else:
        out = f"<p>{sentence(role)}</p>"
    for profile in items(data, layer, head, "roles", "profile"):
        bars = [(label, value, PROFILE_COLOURS.get(label, ACCENT)) for label, value in profile.parts]
        out += f"<p>{sentence(profile)}</p>" + (bars_svg(bars) if bars else "")
    return out


def _necessity(data, layer, head) -> str:
    """The necessity claim's evidence with every head's effect as a strip."""
    ev = _one(data, layer, head, "claims", "necessity")
    text = f"<p>{esc(ev.text)}.</p>"
    if ev.status not in ("holds", "does not hold"):
        return text
    return text + strip_svg(
        _every_head(data, "claims", "necessity"),
        ev.value,
        ev.ci,
        xlabel=f"{ev.numbers.get('objective', '')} harm of mean-ablation: every head (grey), this head (blue, with CI)",
    )


def _ablation(data, layer, head) -> str:
    if _one(data, layer, head, "claims", "necessity") is not None:
        return _necessity(data, layer, head)
    ev = _one(data, layer, head, "ablation", "ablation")
    if ev is None:
        return ""
    xlabel = f"Δ {ev.unit}: every head (grey), this head (blue, with CI)"
    return f"<p>{sentence(ev)}</p>" + strip_svg(
        _every_head(data, "ablation", "ablation"), ev.value, ev.ci, xlabel=xlabel
    )


def _paragraphs(section: str, kind: str):
    """A block that is the head's ``(section, kind)`` evidence, one paragraph each."""

    def block(data, layer, head) -> str:
        return "".join(f"<p>{sentence(ev)}</p>" for ev in items(data, layer, head, section, kind))

    return block


def _syntax(data, layer, head) -> str:
    """The structure claim's evidence (one answer per head), then this head's relations
    sorted by margin over the best fixed offset, rows under the claim's minimum greyed."""
    parts = [f"<p>{esc(ev.text)}.</p>" for ev in items(data, layer, head, "claims", "structure")]
    rows = items(data, layer, head, "syntax", "relation")
    for intro in items(data, layer, head, "syntax", "relations") if rows else ():
        parts.append(f"<p>{sentence(intro)}</p>")
        floor = int(intro.floor)
        parts.append(versus_svg([(r.label, r.value, r.number("baseline"), r.count) for r in rows], min_count=floor))
    return "".join(parts)


BLOCKS = (
    ("roles", "What it attends to", _roles),
    ("syntax", "Syntax", _syntax),
    ("ablation", "Does the model need it?", _ablation),
    ("importance", "Importance", _paragraphs("importance", "importance")),
    ("faithfulness", "Is its attention an explanation?", _paragraphs("faithfulness", "faithfulness")),
)
#: sections whose evidence the page shows elsewhere: the claims list at its top (and the
#: necessity and structure claims inside the blocks above)
SHOWN_ELSEWHERE = ("claims",)


def evidence_html(data, layer: int, head: int) -> str:
    """The head's evidence: one titled block per section that ran and says something,
    and one muted line per section that was skipped or failed (with the reason)."""
    status = {o.name: o for o in data.outcomes}
    out = []
    known = {name: (title, block) for name, title, block in BLOCKS}
    order = [n for n, _, _ in BLOCKS if n in status] + [n for n in status if n not in known]
    if "ablation" not in status and _one(data, layer, head, "claims", "necessity") is not None:
        out.append(
            f'<section class="evidence"><h3>Does the model need it?</h3>{_necessity(data, layer, head)}</section>'
        )
    for name in order:
        o = status[name]
        if o.status != "ran":
            out.append(
                f'<p class="muted">{esc(o.title)}: <span class="{esc(o.status)}">{esc(o.status)}'
                f"</span> — {esc(o.reason)}</p>"
            )
            continue
        if name in known:
            title, block = known[name]
            body = block(data, layer, head)
        elif name not in SHOWN_ELSEWHERE and items(data, layer, head, name):  # no block of its own: its sentences
            title, body = o.title, "".join(f"<p>{sentence(ev)}</p>" for ev in items(data, layer, head, name))
        else:  # a section that declares no evidence: its facts, named for people
            title, facts = o.title, data.facts.get((layer, head), {}).get(name) or {}
            body = "".join(
                f"<li>{esc(str(k).replace('_', ' '))}: {esc(number(v, digits=2))}</li>" for k, v in facts.items()
            )
            body = f"<ul>{body}</ul>" if body else ""
        if body:
            out.append(f'<section class="evidence"><h3>{esc(title)}</h3>{body}</section>')
    return "".join(out)
