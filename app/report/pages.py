"""The report's HTML pages: ``index.html`` (layer × head grid, sorted tables) and
``heads/L{l}H{h}.html`` (claims, evidence in words and small plots, heatmaps, head view).

Built from a :class:`probe.app.report.build.ReportData`; every corpus string is escaped
(:func:`probe.app.report.html.esc`), JSON in scripts goes through ``script_json``.
"""

from __future__ import annotations

from typing import Any

import os
from pathlib import Path

from probe.analyses.patterns.vocabulary import PROFILE, base_role

from .claims_html import head_claims_html
from .evidence import evidence_html
from .head_view import HeadView, head_view_js
from .html import esc, kv_table, link, page
from .style import ROLE_ABBREV, ROLE_COLOURS
from .tables import notes_shown, order_said, ranked_table
from .views_pages import COMPARE_FILE, MODEL_FILE, view_examples


def head_file(layer: int, head: int) -> str:
    return f"L{layer}H{head}.html"


def role_label(role: Any) -> str:
    role = str(role or "")
    if role.startswith("syntactic"):
        inner = role[len("syntactic") :].strip(" ()")
        return inner or "syn"
    return ROLE_ABBREV.get(role, role[:7])


def importance_mark(evidence: list, n_heads_total: int) -> tuple:
    """(symbol, explanation) marking how much a head matters, from its evidence: the first
    mark the registered analyses declare (``Analysis.shows.mark``, by its ``order``: the
    importance rank before the ablation interval), else ``("", "")``."""
    from probe.app.registry import registered

    marks = sorted((a.shows.mark for a in registered() if a.shows.mark is not None), key=lambda m: m.order)
    for m in marks:
        found = m.mark(evidence, n_heads_total)
        if found is not None:
            return found
    return "", ""


def grid_tags(data: Any, layer: int, head: int) -> tuple:
    """``([tag, …], [legend, …])``: the words each registered analysis declaring a
    :class:`probe.app.registry.presentation.GridTag` puts in the head's grid cell, from the
    head's evidence of that analysis, and the legends of those that said something."""
    from probe.app.registry import registered

    tags, legends = [], []
    for a in registered():
        if a.shows.tag is None:
            continue
        said = a.shows.tag.tag([ev for ev in data.evidence.get((layer, head), ()) if ev.section == a.name])
        if said:
            tags.append(said)
            legends.append(a.shows.tag.legend)
    return tags, legends


def _role(data, layer: int, head: int):
    """The head's ``role`` evidence, or ``None`` (the roles section did not run)."""
    return next((ev for ev in data.evidence.get((layer, head), ()) if ev.kind == "role"), None)


def _role_label(data, layer: int, head: int) -> str:
    ev = _role(data, layer, head)
    return ev.label if ev is not None else ""


def process_seconds() -> tuple:
    """``(seconds, what)``: seconds since this Python process started (Linux: from
    ``/proc``), so that the index's build time equals the command's wall time; elsewhere
    ``(None, …)``."""
    try:
        with open("/proc/self/stat") as fh:
            start_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK"), "from the start of the process"
    except (OSError, ValueError, IndexError, AttributeError):
        return None, ""


def _built_in(data) -> str:
    seconds, what = process_seconds()
    if seconds is not None and seconds >= data.seconds:
        return f"{seconds:.0f} s ({what} to writing this page: start-up, model loading, capture, analyses)"
    return f"{data.seconds:.0f} s (the analyses only)"


def _sections_list(data) -> str:
    items = []
    for o in data.outcomes:
        why = f": {esc(o.reason)}" if o.reason else ""
        items.append(
            f'<li><b>{esc(o.title)}</b> ({esc(o.name)}) — <span class="{esc(o.status)}">'
            f"{esc(o.status)}</span>{why}"
            + (f' <span class="muted">{o.seconds:.1f} s</span>' if o.status == "ran" else "")
            + "</li>"
        )
    return "<ul>" + "".join(items) + "</ul>"


def claim_line(data: Any, layer: int, head: int) -> str:
    """One line for tooltips: the head's verdict (the claims' summary when they exist)."""
    return str(data.verdicts.get((layer, head), ""))


def _legend_name(role: str) -> str:
    """A base role as the grid's legend names it: the heads no rule names share one entry."""
    return "attends … (no rule cleared: its largest shares)" if role == PROFILE else role


#: the legend line for a role the roles section names but its pattern claim does not hold
UNHELD = (
    "(role in parentheses, cell left white): the roles section's rule names it, but the head's pattern "
    "claim does not hold against the null model, so it is not painted as one"
)


def _role_held(data: Any, layer: int, head: int) -> bool:
    """Whether the grid may paint the head's role: always when the claims did not run; when
    they did, only if its pattern claim holds (a random model's heads all look "broad" to
    the roles' rule, and none holds the claim)."""
    by_head = data.claims.claims if data.claims is not None else {}
    pattern = by_head.get((layer, head), {}).get("pattern")
    return pattern is None or pattern.status == "holds"


def _grid(data) -> str:
    n_total = len(data.layers) * data.n_heads
    head_row = "".join(f"<th>H{h}</th>" for h in range(data.n_heads))
    rows = []
    legends: list = []
    for layer in data.layers:
        cells = []
        for h in range(data.n_heads):
            tags, said = grid_tags(data, layer, h)
            legends += [x for x in said if x and x not in legends]
            tagged = f'<br><span class="tag">{esc(" ".join(tags))}</span>' if tags else ""
            full = _role_label(data, layer, h)
            role = base_role(full)
            held = _role_held(data, layer, h)
            colour = ROLE_COLOURS.get(role, "#eeeeee") if role and held else "#ffffff"
            sym, why = importance_mark(data.evidence.get((layer, h), []), n_total)
            tip = f"L{layer}H{h}: {claim_line(data, layer, h)}" + (f" ({why})" if why else "")
            label = (
                (esc(role_label(full)) if held else f'<span class="muted">({esc(role_label(full))})</span>')
                if role
                else "&nbsp;"
            )
            if role and not held and UNHELD not in legends:
                legends.append(UNHELD)
            cells.append(
                f'<td style="background:{colour}"><a href="heads/{head_file(layer, h)}" '
                f'title="{esc(tip)}">L{layer}H{h}<br>{label} <span class="imp">{esc(sym)}</span>{tagged}'
                f"</a></td>"
            )
        rows.append(f"<tr><th>L{layer}</th>{''.join(cells)}</tr>")
    used = sorted(
        {
            base_role(_role_label(data, layer, h))
            for layer in data.layers
            for h in range(data.n_heads)
            if _role_held(data, layer, h)
        }
        - {""}
    )
    legend = "".join(
        f'<span style="background:{ROLE_COLOURS.get(r, "#eeeeee")}">{esc(_legend_name(r))}</span>' for r in used
    )
    legend = (
        (
            f'<p class="legend">{legend} &nbsp; ★ top 10% importance, ● top 30% or a significant '
            f"ablation effect, · little effect</p>"
        )
        if used
        else ('<p class="muted">Cells are not coloured: the roles section did not run.</p>')
    )
    legend += "".join(f'<p class="legend">{esc(x)}</p>' for x in legends)
    return f'<div class="scroll"><table class="grid"><tr><th></th>{head_row}</tr>{"".join(rows)}</table></div>{legend}'


def _min_count(o):
    return (o.result.summary or {}).get("min_count")


def _section_blocks(data) -> str:
    out = []
    claims = data.claims.claims if data.claims is not None else None
    for o in data.outcomes:
        if o.status != "ran":
            continue
        parts = [f"<h3>{esc(o.title)}</h3>"]
        parts += [f"<p>{esc(n)}</p>" for n in notes_shown(o.name, o.result, claims)]
        for name, table in o.result.tables.items():
            order = order_said(o.name, name, table)
            parts.append(
                f'<p class="muted">{esc(name)}: {len(table)} rows, {order} — '
                f"{link(f'tables/{o.name}_{name}.csv', 'CSV')}</p>"
            )
            parts.append(ranked_table(o.name, name, table, min_count=_min_count(o), claims=claims))
        out.append("".join(parts))
    return "".join(out)


def _views_links() -> str:
    return (
        f'<p class="views">{link(MODEL_FILE, "Model view: every head at once")} '
        f"{link(COMPARE_FILE, 'Compare two heads; raw attention vs rollout vs flow')}</p>"
    )


def index_html(data: Any) -> str:
    """The report's front page."""
    ctx = data.ctx
    model = dict(ctx.report.settings.get("model_info") or {})
    summary = {
        "model": model.get("name", ctx.report.settings.get("model")),
        "layers × heads": f"{len(data.layers)} × {data.n_heads}",
        "model source": model.get("source", ""),
        "corpus": ctx.corpus.kept.source or "text",
        "examples": len(ctx.maps),
        "tokens": sum(m.n_tokens for m in ctx.maps),
    }
    for why, n in (ctx.corpus.kept.skipped or {}).items():
        summary[f"skipped ({why})"] = n
    for k, v in ctx.report.settings.items():
        if k not in ("model_info", "model"):
            summary[f"setting: {k}"] = v
    summary["built in"] = data.built_in = _built_in(data)  # the one run time: the CLI says the same
    examples, titles = view_examples(ctx)  # every head, so as many sentences as the budget allows
    k = _within_budget([ctx.maps[i] for i in examples[:2]])
    view = HeadView([ctx.maps[i] for i in examples[:k]], titles=titles[:k], initial=_showcase(data)).fragment(
        include_script=False
    )
    # what a reader came for first: the head grid and the head view; the settings below, folded
    corpus_name = Path(str(summary["corpus"])).name or str(summary["corpus"])  # the full path is in the settings
    built = str(summary["built in"]).split(" (")[0]
    line = (
        f"{esc(summary['layers × heads'])} heads, {esc(summary['examples'])} examples from "
        f"{esc(corpus_name)}; built in {esc(built)}"
    )
    body = (
        f'<h1>Attention report: {esc(summary["model"])}</h1><p class="muted">{line}</p>'
        f"<h2>Heads</h2>{_views_links()}<p>Each cell links to the head's page; colour: role; mark: "
        f"importance. Hover for the verdict.</p>{_grid(data)}"
        f"<h2>Head view</h2>{view}"
        f"<h2>Sections</h2>{_sections_list(data)}"
        f"<details><summary><b>Corpus, model and settings</b></summary>{kv_table(summary)}</details>"
        f"{_section_blocks(data)}"
        f'<p class="muted">Machine-readable: {link("summary.json", "summary.json")}, '
        f"{link('report.md', 'report.md')}, tables/*.csv</p>"
    )
    return page(f"Attention report — {summary['model']}", body, scripts=[head_view_js()])


#: bytes of quantised weights the index's head view may embed (the page stays under 300 kB)
INDEX_VIEW_BYTES = 180_000


def _within_budget(maps_list) -> int:
    """How many of ``maps_list`` (at least one) fit :data:`INDEX_VIEW_BYTES` as base64 bytes."""
    total = 0
    for k, m in enumerate(maps_list):
        total += m.attentions[..., 0, 0].numel() * m.attentions.shape[-2] * m.attentions.shape[-1] * 4 // 3
        if total > INDEX_VIEW_BYTES:
            return max(k, 1)
    return len(maps_list)


def _showcase(data) -> tuple:
    """The head the index's head view opens at: the most confident positional or syntactic
    head (their lines read at a glance), else the first head."""
    best, key = (data.layers[0], 0), -1.0
    for layer in data.layers:
        for h in range(data.n_heads):
            ev = _role(data, layer, h)
            role = base_role(ev.label) if ev is not None else ""
            conf = ev.value if ev is not None else None
            if role in ("previous-token", "next-token", "syntactic") and conf is not None and conf > key:
                best, key = (layer, h), float(conf)
    return best


def head_html(data: Any, layer: int, head: int, figures: dict) -> str:
    """The page of one head. ``figures``: ``[(example index, heatmap file name)]``."""
    ctx = data.ctx
    n_total = len(data.layers) * data.n_heads
    layers = list(data.layers)
    i = layers.index(layer) * data.n_heads + head
    order = [(layer_, h) for layer_ in layers for h in range(data.n_heads)]
    nav = [link("../index.html", "index"), link(f"../{MODEL_FILE}", "model view")]
    if i > 0:
        nav.append(link(head_file(*order[i - 1]), "← L{}H{}".format(*order[i - 1])))
    if i + 1 < len(order):
        nav.append(link(head_file(*order[i + 1]), "L{}H{} →".format(*order[i + 1])))
    sym, why = importance_mark(data.evidence.get((layer, head), []), n_total)
    parts = [
        f"<nav>{''.join(nav)}</nav><h1>Layer {layer}, head {head}"
        + (f' <span class="imp" title="{esc(why)}">{esc(sym)}</span>' if sym else "")
        + "</h1>",
        head_claims_html(data, layer, head),
        "<h2>Evidence</h2>",
        evidence_html(data, layer, head),
    ]
    examples, titles = view_examples(ctx)
    view = HeadView([ctx.maps[e] for e in examples], layers=[layer], heads=[head], titles=titles).fragment(
        include_script=False
    )
    parts.append(
        f"<h2>Head view</h2><p>Lines join each token (left) to the tokens it attends to (right); "
        f"width and opacity grow with the weight.</p>{view}"
    )
    parts.append("<h2>Heatmaps</h2>")
    for ex, png in figures:
        m = ctx.maps[ex]
        parts.append(
            f'<p class="sent">example {ex}: {esc(m.text)}</p>'
            f'<figure><img src="{esc(png)}" alt="heatmap of layer {layer} head {head} on example {ex}">'
            f"<figcaption>rows attend to columns; colour: weight from 0 (palest, a light peach) to 1 (darkest)"
            f"</figcaption></figure>"
        )
    return page(f"L{layer}H{head} — {data.verdicts[(layer, head)]}", "".join(parts), scripts=[head_view_js()])


__all__ = ["index_html", "head_html", "head_file"]
