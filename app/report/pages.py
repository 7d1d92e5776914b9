"""The report's HTML pages: ``index.html`` (layer × head grid) and ``heads/L{l}H{h}.html``.

Built from a :class:`probe.app.report.build.ReportData`; every corpus string is escaped
(:func:`probe.app.report.html.esc`), JSON in scripts goes through ``script_json``.
"""

from __future__ import annotations

from .claims_html import head_claims_html
from .head_view import HeadView, head_view_js, line_view_svg
from .html import esc, fmt, frame_table, kv_table, link, page

ROLE_COLOURS = {
    "previous-token": "#8fd3ff", "next-token": "#9fe3c4", "self": "#ffe08a", "special-token": "#d0d0d0",
    "punctuation": "#f4b6c2", "broad": "#c7b8ff", "rare-word": "#ffb86b", "induction": "#ff8a80",
    "duplicate-token": "#b0e57c", "syntactic": "#5fbf9f", "coreference": "#f3a0ff",
    "mixed/unclear": "#f7f7f7",
}
ABBREV = {"previous-token": "prev", "next-token": "next", "self": "self", "special-token": "special",
          "punctuation": "punct", "broad": "broad", "rare-word": "rare", "induction": "induct",
          "duplicate-token": "dup", "coreference": "coref", "mixed/unclear": "?"}


def head_file(layer: int, head: int) -> str:
    return f"L{layer}H{head}.html"


def base_role(role) -> str:
    role = str(role or "")
    return "syntactic" if role.startswith("syntactic") else role


def role_label(role) -> str:
    role = str(role or "")
    if role.startswith("syntactic"):
        inner = role[len("syntactic"):].strip(" ()")
        return inner or "syn"
    return ABBREV.get(role, role[:7])


def importance_mark(facts: dict, n_heads_total: int) -> tuple:
    """(symbol, explanation) marking how much a head matters."""
    rank = facts.get("importance_rank")
    if rank is not None and rank == rank:
        r = float(rank) / max(n_heads_total, 1)
        sym = "★" if r <= 0.1 else "●" if r <= 0.3 else "·"
        return sym, f"importance rank {int(rank)}/{n_heads_total}"
    lo, hi = facts.get("ablation_ci_low"), facts.get("ablation_ci_high")
    if lo is not None and hi is not None and lo == lo and hi == hi:
        return ("●", "ablation effect's CI excludes 0") if (lo > 0 or hi < 0) else ("·", "ablation: no effect")
    return "", ""


def _sections_list(data) -> str:
    items = []
    for o in data.outcomes:
        why = f": {esc(o.reason)}" if o.reason else ""
        items.append(f"<li><b>{esc(o.title)}</b> ({esc(o.name)}) — <span class=\"{esc(o.status)}\">"
                     f"{esc(o.status)}</span>{why}"
                     + (f" <span class=\"muted\">{o.seconds:.1f}s</span>" if o.status == "ran" else "")
                     + "</li>")
    return "<ul>" + "".join(items) + "</ul>"


def _grid(data) -> str:
    n_total = len(data.layers) * data.n_heads
    head_row = "".join(f"<th>H{h}</th>" for h in range(data.n_heads))
    rows = []
    for layer in data.layers:
        cells = []
        for h in range(data.n_heads):
            f = data.flat_facts(layer, h)
            role = base_role(f.get("role"))
            colour = ROLE_COLOURS.get(role, "#eeeeee") if role else "#ffffff"
            sym, why = importance_mark(f, n_total)
            tip = f"L{layer}H{h}: {data.verdicts[(layer, h)]}" + (f" ({why})" if why else "")
            label = esc(role_label(f.get("role"))) if role else "&nbsp;"
            cells.append(f"<td style=\"background:{colour}\"><a href=\"heads/{head_file(layer, h)}\" "
                         f"title=\"{esc(tip)}\">L{layer}H{h}<br>{label} <span class=\"imp\">{esc(sym)}</span>"
                         f"</a></td>")
        rows.append(f"<tr><th>L{layer}</th>{''.join(cells)}</tr>")
    used = sorted({base_role(data.flat_facts(layer, h).get("role")) for layer in data.layers
                   for h in range(data.n_heads)} - {""})
    legend = "".join(f"<span style=\"background:{ROLE_COLOURS.get(r, '#eeeeee')}\">{esc(r)}</span>" for r in used)
    legend = (f"<p class=\"legend\">{legend} &nbsp; ★ top 10% importance, ● top 30% or a significant "
              f"ablation effect, · little effect</p>") if used else (
        "<p class=\"muted\">Cells are not coloured: the roles section did not run.</p>")
    return f"<table class=\"grid\"><tr><th></th>{head_row}</tr>{''.join(rows)}</table>{legend}"


def _section_blocks(data) -> str:
    out = []
    for o in data.outcomes:
        if o.status != "ran":
            continue
        parts = [f"<h3>{esc(o.title)}</h3>"]
        parts += [f"<p>{esc(n)}</p>" for n in o.result.notes]
        for name, table in o.result.tables.items():
            parts.append(f"<p class=\"muted\">{esc(name)}: {len(table)} rows — "
                         f"{link(f'tables/{o.name}_{name}.csv', 'CSV')}</p>")
            parts.append(frame_table(table, max_rows=12))
        out.append("".join(parts))
    return "".join(out)


def index_html(data) -> str:
    """The report's front page."""
    ctx = data.ctx
    model = dict(ctx.settings.get("model_info") or {})
    summary = {"model": model.get("name", ctx.settings.get("model")),
               "layers × heads": f"{len(data.layers)} × {data.n_heads}",
               "model source": model.get("source", ""),
               "corpus": ctx.corpus.source or "text", "examples": len(ctx.maps),
               "tokens": sum(m.n_tokens for m in ctx.maps)}
    for why, n in (ctx.corpus.skipped or {}).items():
        summary[f"skipped ({why})"] = n
    for k, v in ctx.settings.items():
        if k not in ("model_info",):
            summary[f"setting: {k}"] = v
    summary["built in"] = f"{data.seconds:.1f}s"
    rep = ctx.representatives[0]
    view = HeadView(ctx.maps[rep], title=f"example {rep}").fragment(include_script=False)
    body = (f"<h1>Attention report: {esc(summary['model'])}</h1>"
            f"<h2>Corpus, model and settings</h2>{kv_table(summary)}"
            f"<h2>Sections</h2>{_sections_list(data)}"
            f"<h2>Heads</h2><p>Each cell links to the head's page; colour: role; mark: importance. "
            f"Hover for the verdict.</p>{_grid(data)}"
            f"<h2>Head view</h2><p class=\"sent\">{esc(ctx.maps[rep].text)}</p>{view}"
            f"{_section_blocks(data)}"
            f"<p class=\"muted\">Machine-readable: {link('summary.json', 'summary.json')}, "
            f"{link('report.md', 'report.md')}, tables/*.csv</p>")
    return page(f"Attention report — {summary['model']}", body, scripts=[head_view_js()])


def head_html(data, layer: int, head: int, figures: dict) -> str:
    """The page of one head. ``figures``: ``[(example index, heatmap file name)]``."""
    ctx = data.ctx
    n_total = len(data.layers) * data.n_heads
    layers = list(data.layers)
    i = layers.index(layer) * data.n_heads + head
    order = [(layer_, h) for layer_ in layers for h in range(data.n_heads)]
    nav = [link("../index.html", "index")]
    if i > 0:
        nav.append(link(head_file(*order[i - 1]), "← L{}H{}".format(*order[i - 1])))
    if i + 1 < len(order):
        nav.append(link(head_file(*order[i + 1]), "L{}H{} →".format(*order[i + 1])))
    parts = [f"<nav>{''.join(nav)}</nav><h1>Layer {layer}, head {head}</h1>",
             head_claims_html(data, layer, head)]
    flat = data.flat_facts(layer, head)
    if flat.get("role"):
        parts.append(f"<p>role: <b>{esc(flat['role'])}</b> (confidence {esc(fmt(flat.get('confidence')))}) — "
                     f"{esc(flat.get('decided_by', ''))}</p>")
    sym, why = importance_mark(flat, n_total)
    if why:
        parts.append(f"<p>{esc(sym)} {esc(why)}</p>")
    parts.append("<h2>Representative sentences</h2>")
    for ex, png in figures:
        m = ctx.maps[ex]
        parts.append(f"<p class=\"sent\">example {ex}: {esc(m.text)}</p>"
                     f"<figure><img src=\"{esc(png)}\" alt=\"heatmap of layer {layer} head {head} on example {ex}\">"
                     f"<figcaption>heatmap (rows attend to columns)</figcaption></figure>"
                     f"<figure>{line_view_svg(m, layer, head)}<figcaption>line view (weights ≥ 0.05)"
                     f"</figcaption></figure>")
    parts.append("<h2>Evidence</h2>")
    for o in data.outcomes:
        facts = data.facts.get((layer, head), {}).get(o.name)
        if o.status == "ran" and facts:
            parts.append(f"<h3>{esc(o.title)}</h3>{kv_table(facts)}")
        elif o.status != "ran":
            parts.append(f"<p class=\"muted\">{esc(o.title)}: <span class=\"{esc(o.status)}\">{esc(o.status)}"
                         f"</span> — {esc(o.reason)}</p>")
    rep = ctx.representatives[0]
    view = HeadView(ctx.maps[rep], layers=[layer], heads=[head],
                    title=f"example {rep}").fragment(include_script=False)
    parts.append(f"<h2>Head view</h2>{view}")
    return page(f"L{layer}H{head} — {fmt(data.verdicts[(layer, head)])}", "".join(parts), scripts=[head_view_js()])
