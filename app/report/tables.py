"""The index page's tables, strongest results first.

Each table an analysis declares (``Analysis.shows.tables``:
:class:`probe.app.registry.presentation.TableView`) is sorted by its effect size, shows
the count its numbers rest on, and greys the rows whose count is under the minimum (they
are shown, not trusted): the table's own minimum where it declares one (the structure
tables: the structure claim's, so a table never trusts a relation the claim calls "not
enough evidence"), else the section's. Wide tables scroll sideways instead of being cut;
the full tables are in ``tables/*.csv``. This module knows no section by name.
"""

from __future__ import annotations

from typing import Any, Optional

from .html import esc, fmt


def view_of(section: str, name: str) -> Any:
    """The :class:`probe.app.registry.presentation.TableView` the analysis ``section``
    declares for its table ``name``, or ``None`` (an unknown section or table)."""
    from probe.app.registry import registered

    shows = {a.name: a.shows for a in registered()}.get(section)
    return shows.tables.get(name) if shows is not None else None


def notes_shown(section: str, result: Any, claims: Optional[dict]) -> list:
    """The notes the report shows of section ``section``'s ``result``: as its presentation
    reads them beside ``claims`` (``{(layer, head): {kind: Claim}}``, or ``None`` when the
    claims did not run; :meth:`probe.app.registry.presentation.Presentation.notes`)."""
    from probe.app.registry import registered

    shows = {a.name: a.shows for a in registered()}.get(section)
    return shows.notes(result, claims) if shows is not None else list(result.notes)


def order_said(section: str, name: str, df: Any) -> str:
    """How :func:`ranked` orders this table, as its caption says it: "strongest first" only
    where the analysis declares a view whose sort column the table has; otherwise the rows
    stay in the analysis' own order and the caption says so."""
    view = view_of(section, name)
    key = view.sort.strip("|") if view is not None else None
    if key is not None and (key in df.columns or (key == "margin" and "baseline_accuracy" in df.columns)):
        return "strongest first"
    return "in the analysis' order"


def min_count_of(section: str, name: str, section_min: Optional[int] = None) -> Optional[int]:
    """The count under which a row of this table is greyed: the table's declared minimum
    (the structure tables: the claim's), else the section's ``section_min``."""
    view = view_of(section, name)
    return view.min_count if view is not None and view.min_count is not None else section_min


def ranked(section: str, name: str, df: Any, min_count: Optional[int] = None) -> Any:
    """``df`` sorted strongest first (its declared :class:`TableView`) with its leading
    columns, rows whose ``count`` is under the table's minimum (:func:`min_count_of`) after
    all the others; a ``margin`` column (accuracy − best fixed-offset accuracy) is added
    where it sorts on one. Undeclared tables come back unchanged."""
    view = view_of(section, name)
    min_count = min_count_of(section, name, min_count)
    if view is None or df is None or not len(df):
        return df
    df = _ranked(df, view)
    if min_count is not None and "count" in df.columns:
        few = (df["count"] < min_count).to_numpy()
        df = df.iloc[list((~few).nonzero()[0]) + list(few.nonzero()[0])]
    return df


def _ranked(df: Any, view: Any) -> Any:
    key, ascending, columns = view.sort, view.ascending, view.columns
    if key == "margin" and "margin" not in df.columns and "baseline_accuracy" in df.columns:
        df = df.assign(margin=df["accuracy"] - df["baseline_accuracy"])
    if key.startswith("|"):
        col = key.strip("|")
        if col in df.columns:
            df = df.reindex(df[col].abs().sort_values(ascending=ascending, kind="stable").index)
    elif key in df.columns:
        df = df.sort_values(key, ascending=ascending, kind="stable")
    if columns:
        df = df[[c for c in columns if c in df.columns]]
    return df


def ranked_table(
    section: str,
    name: str,
    df: Any,
    min_count: Optional[int] = None,
    max_rows: int = 12,
    claims: Optional[dict] = None,
) -> str:
    """:func:`ranked` as HTML: every cell escaped, at most ``max_rows`` rows, rows with
    ``count`` (or ``n_examples``) under ``min_count`` greyed, in a sideways-scrolling box;
    with ``claims`` (``{(layer, head): {kind: Claim}}``) the rows as the table's declared
    ``beside_claims`` reads them."""
    if df is None or len(df) == 0:
        return '<p class="muted">(empty)</p>'
    min_count = min_count_of(section, name, min_count)
    df = ranked(section, name, df, min_count)
    view = view_of(section, name)
    if claims and view is not None and view.beside_claims is not None:
        df = view.beside_claims(df, claims)
    count_col = next((c for c in ("count", "n_examples") if c in df.columns), None)
    head = "".join(f"<th>{esc(c)}</th>" for c in df.columns)
    tint = _tint(df.head(max_rows), None if view is None else view.colour)
    body = []
    for rec in df.head(max_rows).to_dict("records"):
        few = (
            min_count is not None
            and count_col is not None
            and rec[count_col] == rec[count_col]
            and rec[count_col] < min_count
        )
        cls = ' class="few" title="fewer instances than the minimum: not trusted"' if few else ""
        cells = "".join(f"<td{tint(c, v)}>{esc(fmt(v, 3))}</td>" for c, v in rec.items())
        body.append(f"<tr{cls}>{cells}</tr>")
    more = f'<p class="muted">top {max_rows} of {len(df)} rows; all in the CSV</p>' if len(df) > max_rows else ""
    whose = f" ({view.min_count_source})" if view is not None and view.min_count_source else ""
    legend = (
        f'<p class="muted">greyed: fewer than {min_count} instances{whose}</p>'
        if min_count is not None and count_col is not None
        else ""
    )
    return f'<div class="scroll"><table class="data"><tr>{head}</tr>{"".join(body)}</table></div>{more}{legend}'


def _tint(shown: Any, column: Optional[str]) -> Any:
    """``tint(col, value) -> ' style="…"'``: the cells of the declared signed ``column``
    tinted red (above 0) or blue (below), opacity |value| over the largest |value| shown."""
    import math

    top = 0.0
    if column is not None and column in shown.columns:
        vals = [abs(float(v)) for v in shown[column] if isinstance(v, (int, float)) and math.isfinite(float(v))]
        top = max(vals, default=0.0)

    def tint(col: str, value: Any) -> str:
        if col != column or top == 0 or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
            return ""
        rgb = "214,39,40" if value > 0 else "31,119,180"
        return f' style="background:rgba({rgb},{abs(float(value)) / top * 0.6:.2f})"'

    return tint
