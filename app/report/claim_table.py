"""The table a head page opens with: one row per claim (its title and one plain sentence,
its status, its effect with the 95% interval drawn against the floor and the null model,
and the count it rests on); the statistics (tests, p-values, nulls) stay in the claims'
evidence list below it, folded in a ``<details>``
(:func:`probe.app.report.claims_html.claims_block`).

The sentence and the numbers drawn are :mod:`probe.analyses.claims.plain`'s; the picture
is a small inline SVG: a dot at the effect, a bar over its interval, a black tick at the
floor the claim is held to, a grey band up to what the null model's heads reach.
"""

from __future__ import annotations

from typing import Any, Optional

from .html import esc

#: the CSS class of each claim status (the head page's table and its evidence list)
STATUS_CLASS = {
    "holds": "ran",
    "does not hold": "muted",
    "depends on the baseline": "skipped",
    "not tested": "skipped",
    "not enough evidence": "skipped",
}

__all__ = ["claim_rows", "claims_table", "effect_svg", "LEGEND"]

#: the picture's key, printed under the table
LEGEND = (
    "dot: the effect; bar: its 95% interval; black tick: the floor the claim must clear; grey band: "
    "up to what the null model's heads reach (where the claim is calibrated on one)"
)

WIDTH, HEIGHT, PAD = 150, 16, 5
COLOURS = {"holds": "#1a7f37", "depends on the baseline": "#9a6700"}


def _num(v: Optional[float], percent: bool, signed: bool = True) -> str:
    from probe.analyses.claims.evidence import fmt

    if v is None:
        return "—"
    if not percent:
        return fmt(v, signed)
    decimals = 0
    while decimals < 2 and v not in (0.0, 1.0) and round(abs(v) * 10 ** (2 + decimals)) in (0, 10 ** (2 + decimals)):
        decimals += 1  # 0.998 is not "100%", nor 0.004 "0%"
    return f"{v:.{decimals}%}"


def effect_svg(d: Any, status: str) -> str:
    """The inline SVG of one :class:`probe.analyses.claims.plain.Drawn` (``status`` colours
    it: green where the claim holds, grey where it does not)."""
    marks = [v for v in (d.value, d.low, d.high, d.floor, d.null) if v is not None]
    lo, hi = min(0.0, *marks), max(marks)
    if hi - lo < 1e-12:
        hi = lo + 1.0
    lo, hi = lo - 0.04 * (hi - lo), hi + 0.04 * (hi - lo)

    def x(v: float) -> float:
        return PAD + (v - lo) / (hi - lo) * (WIDTH - 2 * PAD)

    colour = COLOURS.get(status, "#555555")
    parts = []
    if d.null is not None:
        a, b = (x(d.null), x(hi)) if d.lower else (x(lo), x(d.null))
        parts.append(f'<rect x="{a:.1f}" y="2" width="{max(b - a, 1):.1f}" height="{HEIGHT - 4}" fill="#dfe4ec"/>')
    if lo < 0 < hi:
        parts.append(
            f'<line x1="{x(0):.1f}" x2="{x(0):.1f}" y1="0" y2="{HEIGHT}" stroke="#bbb" stroke-dasharray="2,2"/>'
        )
    if d.low is not None and d.high is not None:
        a, b = x(d.low), x(d.high)
        parts.append(
            f'<rect x="{a:.1f}" y="{HEIGHT / 2 - 3:.1f}" width="{max(b - a, 1.5):.1f}" height="6" fill="{colour}" '
            f'fill-opacity="0.45"/>'
        )
    if d.floor is not None:
        parts.append(
            f'<line x1="{x(d.floor):.1f}" x2="{x(d.floor):.1f}" y1="0" y2="{HEIGHT}" stroke="#222" stroke-width="2"/>'
        )
    parts.append(f'<circle cx="{x(d.value):.1f}" cy="{HEIGHT / 2:.1f}" r="3.5" fill="{colour}"/>')
    label = _words(d)
    return (
        f'<svg class="cbar" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{esc(label)}"><title>{esc(label)}</title>{"".join(parts)}</svg>'
    )


def _words(d: Any) -> str:
    """The picture in words (its tooltip): effect, interval, floor and null."""
    p = d.percent
    said = f"{d.what + ' ' if d.what else ''}{_num(d.value, p)}"
    if d.low is not None and d.high is not None:
        said += f" [{_num(d.low, p)}, {_num(d.high, p)}]"
    if d.floor is not None:
        said += f"; floor {_num(d.floor, p, False)}"
    if d.null is not None:
        said += f"; null model {_num(d.null, p, False)}"
    return said


def claim_rows(claims: dict) -> list:
    """``[(title, status, sentence, Drawn or None, count words)]`` of one head's claims
    (``{kind: Claim}``), in the registered kinds' order."""
    from probe.analyses.claims.plain import COUNT_OF, drawn, plain_sentence
    from probe.analyses.claims.protocol import claim_kinds, claim_test

    rows = []
    for kind, c in claims.items():
        test = claim_test(kind) if kind in claim_kinds() else None
        title = test.title if test is not None else kind
        count = f"{c.count:,} {COUNT_OF.get(kind, '')}".strip() if c.count else "—"
        rows.append((title, c.status, plain_sentence(kind, c, test.tests if test else ""), drawn(kind, c), count))
    return rows


def claims_table(claims: dict) -> str:
    """The head's claims as the table its page opens with ('' for no claims)."""

    if not claims:
        return ""
    body = []
    for title, status, sentence, d, count in claim_rows(claims):
        if d is None:
            effect, against = '<span class="muted">—</span>', ""
        else:
            numbers = _num(d.value, d.percent)
            if d.low is not None and d.high is not None:
                numbers += f" [{_num(d.low, d.percent)}, {_num(d.high, d.percent)}]"
            effect = f'{effect_svg(d, status)} <span class="cnum">{esc(numbers)}</span>'
            against = "<br>".join(
                f"{w} {esc(_num(v, d.percent, False))}"
                for w, v in (("floor", d.floor), ("null", d.null))
                if v is not None
            )
        body.append(
            f'<tr><td><b>{esc(title)}</b><br><span class="plain">{esc(sentence)}</span></td>'
            f'<td><span class="{STATUS_CLASS.get(status, "muted")}">{esc(status)}</span></td>'
            f'<td class="ceff">{effect}</td><td class="muted cagainst">{against}</td><td>{esc(count)}</td></tr>'
        )
    return (
        '<table class="ctab"><tr><th>claim</th><th>status</th><th>effect, 95% interval</th><th>against</th>'
        f'<th>rests on</th></tr>{"".join(body)}</table><p class="muted legend-c">{esc(LEGEND)}</p>'
    )
