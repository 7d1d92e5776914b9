"""A head's evidence in words and small pictures, for its report page.

Each section that ran and has facts about the head becomes a few sentences with units,
confidence intervals and counts (numbers rounded by :func:`probe.app.report.style.number`
to what their uncertainty supports), and, where a picture says more, a small inline SVG:
the attention profile as bars, the head's ablation effect among all heads' effects, the
head's syntax accuracy against the fixed-offset baseline per relation. Raw values stay in
``tables/*.csv`` and ``summary.json``.
"""

from __future__ import annotations

import math

from probe.app.registry.results import AblationResult, FaithfulnessResult, RolesResult, SyntaxResult

from .html import esc
from .style import ACCENT, MUTED, number

W = 460  # width of the inline plots (px)


def _f(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def _result(data, kind):
    """The run's result of type ``kind``, or ``None`` (its section did not run)."""
    return data.ctx.result_of(kind)


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
def _roles(data, layer, head, f) -> str:
    role = f.get("role")
    if not role:
        return ""
    t = getattr(_result(data, RolesResult), "roles", None)
    n_ex = n_rows = None
    if t is not None:
        r = t[(t["layer"] == layer) & (t["head"] == head)]
        if len(r):
            n_ex, n_rows = r.iloc[0].get("n_examples"), r.iloc[0].get("n_rows")
    over = (
        f" over {int(n_rows)} query tokens in {int(n_ex)} sentences" if n_rows is not None and n_ex is not None else ""
    )
    text = (
        f"<p>Role: <b>{esc(role)}</b>, confidence {esc(number(f.get('confidence'), digits=2))} "
        f"(0 = no rule cleared, 1 = far past its threshold). Why: {esc(f.get('decided_by', ''))}.</p>"
        f"<p>Where its attention goes, on average{esc(over)}:</p>"
    )
    items = [
        ("[CLS] / first token", f.get("to_cls"), "#bdbdbd"),
        ("[SEP] / last token", f.get("to_sep"), "#bdbdbd"),
        ("punctuation", f.get("to_punct"), "#f4a6b7"),
        ("previous token", f.get("prev"), ACCENT),
        ("itself", f.get("self"), ACCENT),
        ("next token", f.get("next"), ACCENT),
    ]
    items = [i for i in items if _f(i[1]) is not None]
    return text + (bars_svg(items) if items else "")


def _necessity(data, layer, head) -> str:
    """The necessity evidence (the claims' own object) with every head's effect as a strip."""
    from probe.analyses.claims.evidence import claim_evidence

    claims = data.claims.claims
    c = claims[(layer, head)]["necessity"]
    ev = claim_evidence("necessity", c)
    text = f"<p>{esc(ev.text)}.</p>"
    if c.status not in ("holds", "does not hold"):
        return text
    values = [by["necessity"].effect for by in claims.values()]
    ci = (c.ci_low, c.ci_high) if c.ci_low == c.ci_low and c.ci_high == c.ci_high else None
    return text + strip_svg(
        values,
        c.effect,
        ci,
        xlabel=f"{c.extra.get('objective', '')} harm of mean-ablation: every head (grey), this head (blue, with CI)",
    )


def _sweep_count(data) -> int | None:
    """Examples the ablation sweep ran on (the count of its intervals)."""
    res = _result(data, AblationResult)
    return res.n_examples if res is not None else None


def _ablation(data, layer, head, f) -> str:
    claims = getattr(data, "claims", None)
    if claims is not None and (layer, head) in claims.claims and "necessity" in claims.claims[(layer, head)]:
        return _necessity(data, layer, head)
    d = _f(f.get("ablation_delta"))
    if d is None:
        return ""
    lo, hi = _f(f.get("ablation_ci_low")), _f(f.get("ablation_ci_high"))
    ci = (lo, hi) if lo is not None and hi is not None else None
    metric = f.get("ablation_metric", "metric")
    t = getattr(_result(data, AblationResult), "table", None)
    n = _sweep_count(data)
    rank = ""
    if t is not None and len(t):
        bigger = int((t["delta"].abs() > abs(d)).sum())
        rank = f" It ranks {bigger + 1} of {len(t)} heads by the size of the effect."
    over = f"{n} examples" if n is not None else "the examples swept"
    text = (
        f"<p>{esc(f.get('ablation_mode', 'zero')).capitalize()}-ablation of this head (Michel et al. 2019) "
        f"changes the {esc(metric)} by <b>{esc(number(d, ci, signed=True))}</b> (95% bootstrap CI over "
        f"{esc(over)}).{esc(rank)}</p>"
    )
    if t is None or not len(t):
        return text
    return text + strip_svg(t["delta"], d, ci, xlabel=f"Δ {metric}: every head (grey), this head (blue, with CI)")


def _importance(data, layer, head, f) -> str:
    imp = _f(f.get("importance"))
    if imp is None:
        return ""
    rank, of = _f(f.get("importance_rank")), _f(f.get("importance_of"))
    return (
        f"<p>Importance by {esc(f.get('importance_method', ''))} over head gates (Michel et al. 2019), "
        f"normalised per layer: <b>{esc(number(imp, digits=2))}</b>"
        + (f", rank {int(rank)} of {int(of)}" if rank is not None and of is not None else "")
        + ".</p>"
    )


def _excluded() -> tuple:
    """Relations the structure claim never states (punct, the pooled 'all', root)."""
    from probe.analyses.claims import thresholds as T

    return tuple(T.STRUCTURE_EXCLUDED)


def _syntax(data, layer, head, f) -> str:
    """The structure claim's evidence (one answer per head), then this head's relations
    sorted by margin over the best fixed offset, rows under the claim's minimum greyed."""
    from probe.analyses.claims import thresholds as T
    from probe.analyses.claims.evidence import claim_evidence

    syntax = _result(data, SyntaxResult)
    t, best = (syntax.relations, syntax.best) if syntax is not None else (None, None)
    claims = getattr(data, "claims", None)
    parts = []
    if claims is not None and (layer, head) in claims.claims:
        parts.append(f"<p>{esc(claim_evidence('structure', claims.claims[(layer, head)]['structure']).text)}.</p>")
    if t is None or best is None:
        return "".join(parts)
    mine = t[
        (t["layer"] == layer)
        & (t["head"] == head)
        & (t["direction"] == "dep_to_head")
        & ~t["relation"].isin(_excluded())
    ]
    base = best[best["direction"] == "dep_to_head"].set_index("relation")["baseline_accuracy"]
    mine = mine[mine["relation"].isin(base.index)]
    if not len(mine):
        return "".join(parts)
    floor = T.STRUCTURE_MIN_COUNT
    mine = mine.assign(
        margin=mine["accuracy"].to_numpy() - base.loc[mine["relation"]].to_numpy(),
        enough=mine["count"].to_numpy() >= floor,
    )
    mine = mine.sort_values(["enough", "margin"], ascending=False).head(8)
    parts.append(
        f"<p>Per relation (dependent → head), sorted by margin over the best fixed offset (Clark et al. "
        f"2019); relations with fewer than {floor} instances, the claim's minimum, are greyed:</p>"
    )
    parts.append(
        versus_svg([(r.relation, r.accuracy, base[r.relation], r.count) for r in mine.itertuples()], min_count=floor)
    )
    return "".join(parts)


def _faithfulness(data, layer, head, f) -> str:
    v = f.get("faith_verdict")
    if not v:
        return ""
    res = _result(data, FaithfulnessResult)
    n = res.n_examples if res else None
    taus = {
        k[len("faith_tau_") :]: _f(x)
        for k, x in f.items()
        if k.startswith("faith_tau_") and not k.endswith("significant")
    }
    parts = []
    for ref, tau in taus.items():
        share = _f(f.get(f"faith_tau_{ref}_significant"))
        parts.append(
            f"Kendall τ between its attention and the {esc(ref.upper())} attributions: "
            f"<b>{esc(number(tau, digits=2, signed=True))}</b> (mean over {n or '?'} sentences"
            + (
                f"; significant at p &lt; 0.05 in {esc(number(share, percent=True, digits=2))} of them"
                if share is not None
                else ""
            )
            + ")."
        )
    tvd = _f(f.get("faith_tvd_median"))
    if tvd is not None:
        parts.append(
            f"Permuting its attention moves the output distribution by a median total variation of "
            f"{esc(number(tvd, digits=2))} (Jain &amp; Wallace 2019)."
        )
    parts.append(f"Verdict: <b>{esc(v)}</b>.")
    return "<p>" + " ".join(parts) + "</p>"


BLOCKS = (
    ("roles", "What it attends to", _roles),
    ("syntax", "Syntax", _syntax),
    ("ablation", "Does the model need it?", _ablation),
    ("importance", "Importance", _importance),
    ("faithfulness", "Is its attention an explanation?", _faithfulness),
)


def evidence_html(data, layer: int, head: int) -> str:
    """The head's evidence: one titled block per section that ran and says something,
    and one muted line per section that was skipped or failed (with the reason)."""
    flat = data.flat_facts(layer, head)
    status = {o.name: o for o in data.outcomes}
    out = []
    known = {name: (title, block) for name, title, block in BLOCKS}
    order = [n for n, _, _ in BLOCKS if n in status] + [n for n in status if n not in known]
    claims = getattr(data, "claims", None)
    if "ablation" not in status and claims is not None and (layer, head) in claims.claims:
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
            body = block(data, layer, head, flat)
        else:  # a section this page has no sentences for yet: its facts, named for people
            title, facts = o.title, data.facts.get((layer, head), {}).get(name) or {}
            body = "".join(
                f"<li>{esc(str(k).replace('_', ' '))}: {esc(number(v, digits=2))}</li>" for k, v in facts.items()
            )
            body = f"<ul>{body}</ul>" if body else ""
        if body:
            out.append(f'<section class="evidence"><h3>{esc(title)}</h3>{body}</section>')
    return "".join(out)
