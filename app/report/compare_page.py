"""The page of ``probe compare``: checkpoints side by side, head by head.

For each compared pair, the head grid coloured by how far each head's pattern moved
(Jensen–Shannon divergence, bits) with the flagged heads outlined, then the heads with the
largest changes first and every flagged change with its interval; for a training run, the
scores against the step (:mod:`.compare_figures`). Every string from a user (checkpoint
labels, paths, the corpus's name) is escaped (:func:`.html.esc`); the numbers come from
:class:`probe.analyses.compare.run.Comparison` and nothing here computes a statistic.
"""

from __future__ import annotations

from typing import Any

from pathlib import Path

from .html import esc, fmt, frame_table, kv_table, page

__all__ = ["compare_page", "write_compare_page"]


def _shade(value: float, top: float) -> str:
    """A white-to-red background for ``value`` in ``[0, top]``."""
    if not top or value != value:
        return "#f4f4f4"
    t = max(0.0, min(1.0, value / top))
    g = int(255 - 175 * t)
    return f"rgb(255,{g},{g})"


def head_grid(heads: Any, top: float) -> str:
    """One pair's ``layer × head`` grid (rows: layers); cells show the JSD, flagged heads
    outlined and listing their flagged measures in the tooltip."""
    layers = sorted(heads["layer"].unique())
    n_heads = int(heads["head"].max()) + 1
    by = {(int(r.layer), int(r.head)): r for r in heads.itertuples()}
    cols = "".join(f"<th>H{h}</th>" for h in range(n_heads))
    rows = []
    for layer in layers:
        cells = []
        for h in range(n_heads):
            r = by.get((int(layer), h))
            if r is None:
                cells.append("<td></td>")
                continue
            style = f"background:{_shade(r.jsd, top)}" + (";outline:3px solid #222" if r.flagged else "")
            tip = f"L{layer}H{h}: JSD {fmt(r.jsd)}" + (f"; flagged: {r.flagged_measures}" if r.flagged else "")
            mark = "<br>&#9679;" if r.flagged else ""
            cells.append(f'<td style="{style}" title="{esc(tip)}">{esc(fmt(r.jsd, 2))}{mark}</td>')
        rows.append(f"<tr><th>L{layer}</th>{''.join(cells)}</tr>")
    return f'<table class="grid"><tr><th></th>{cols}</tr>{"".join(rows)}</table>'


def compare_page(comparison: Any, figures: Any = ()) -> str:
    """The HTML of the page (``figures``: image file names beside it, with captions)."""
    c = comparison
    parts = [f"<h1>{esc('Checkpoints compared: ' + ' → '.join(map(str, c.checkpoints['label'])))}</h1>"]
    parts.append(kv_table({"examples": c.n_examples, "inputs": c.source}))
    for w in c.warnings:
        parts.append(f'<p class="verdict">{esc(w)}</p>')
    shown = c.checkpoints[["label", "step", "family", "layers", "heads", "fingerprint", "source"]]
    parts.append("<h2>Checkpoints</h2>" + frame_table(shown, max_rows=200))
    top = float(c.heads["jsd"].max()) if len(c.heads) else 0.0
    for (a, b), g in c.heads.groupby(["from", "to"], sort=False):
        flagged = g[g["flagged"]]
        parts.append(f"<h2>{esc(a)} → {esc(b)}</h2>")
        parts.append(
            f"<p>{len(flagged)} of {len(g)} heads flagged (a measure's change significant at the FDR and at "
            "least its floor). Cells: the pattern's Jensen–Shannon divergence in bits (darker: moved more); "
            "outlined: flagged.</p>"
        )
        parts.append(head_grid(g, top))
        parts.append("<h3>Largest changes first</h3>" + frame_table(g.drop(columns=["from", "to"]), max_rows=20))
        ch = c.changes[(c.changes["from"] == a) & (c.changes["to"] == b) & c.changes["flagged"]]
        ch = ch.reindex(ch["change"].abs().sort_values(ascending=False).index)
        parts.append("<h3>Flagged changes, with 95% intervals</h3>" + frame_table(ch, max_rows=40))
        res = c.attribution.get((a, b))
        if res is not None:
            parts.append(
                f"<h3>Attribution: heads patched from {esc(a)} into {esc(b)}</h3><p>objective {esc(res.objective)}: "
                f"{esc(a)} {fmt(res.score_a)}, {esc(b)} {fmt(res.score_b)}; change to explain {fmt(res.total)} "
                f"[{fmt(res.total_ci[0])}, {fmt(res.total_ci[1])}]</p>" + frame_table(res.table, max_rows=20)
            )
    if c.phase is not None:
        parts.append("<h2>Phase change</h2>" + frame_table(c.phase))
    for name, caption in figures:
        parts.append(
            f'<figure><img src="{esc(name)}" alt="{esc(caption)}" style="max-width:100%">'
            f"<figcaption>{esc(caption)}</figcaption></figure>"
        )
    for note in c.notes:
        parts.append(f'<p class="muted">{esc(note)}</p>')
    return page("probe compare", "\n".join(parts))


def write_compare_page(comparison: Any, path: Any, figures: Any = ()) -> Path:
    """Write :func:`compare_page` to ``path``; returns it."""
    path = Path(path)
    path.write_text(compare_page(comparison, figures), encoding="utf-8")
    return path
