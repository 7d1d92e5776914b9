"""HTML building blocks of the report: escaping, JSON for ``<script>``, page frame, tables.

Every string that can come from the corpus (tokens, sentences) or from a user passes
through :func:`esc` before it lands in HTML; JSON placed inside a ``<script>`` element
goes through :func:`script_json`, which escapes ``<``, ``>`` and ``&`` so that a token
such as ``</script>`` cannot close the element.
"""

from __future__ import annotations

from typing import Any

import html
import json
import math
from typing import Iterable, Mapping, Optional

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1200px;
 color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table.kv td{padding:2px 10px 2px 0;vertical-align:top}table.kv td:first-child{color:#666}
table.data{border-collapse:collapse;font-size:.9em;display:block;overflow-x:auto;max-width:100%}table.data td,table.data th{border:1px solid #ddd;
 padding:2px 6px;text-align:right}table.data th{background:#f4f4f4}
table.grid{border-collapse:separate;border-spacing:3px}table.grid th{font-weight:normal;color:#666;
 font-size:.85em}
table.grid td{width:64px;height:44px;text-align:center;border-radius:4px;font-size:.72em}
table.grid td a{display:block;color:#111;text-decoration:none;height:100%;line-height:1.25;
 padding-top:3px}
table.grid td a:hover{outline:2px solid #333}table.grid .tag{font-size:.9em;font-weight:bold}
.imp{font-size:1.15em}.muted{color:#777}.verdict{font-size:1.15em;background:#f6f8fa;
 padding:.6em .8em;border-left:4px solid #4c72b0}
.skipped{color:#9a6700}.failed{color:#b00020}.ran{color:#1a7f37}
.legend span{display:inline-block;padding:2px 8px;margin:2px;border-radius:3px;font-size:.85em}
.sent{font-family:Georgia,serif;background:#fafafa;padding:.4em .6em}
.phv-bar{font-size:.9em;margin:.3em 0}.phv-bar label{margin-right:1em}.phv-title{font-weight:bold;
 margin-right:1em}.phv-hint{color:#888}
.phv-tok{font:13px sans-serif;cursor:pointer;fill:#222}.phv-on{fill:#c44e52;font-weight:bold}
.phv-line{stroke:#4c72b0}
figure{display:inline-block;margin:.5em 1em .5em 0;vertical-align:top}figcaption{font-size:.85em;color:#555}
nav a{margin-right:1em}
.scroll{overflow-x:auto;max-width:100%}.scroll table.data{display:table}tr.few td{color:#aaa;background:#fafafa}
.ev{display:block;margin:.3em 0 .8em}.evl{font:12px sans-serif;fill:#333}section.evidence p{margin:.4em 0}
.phv-sentence{font-family:Georgia,serif;color:#444;margin:.2em 0 .4em}.phv-dim{fill:#bbb}
.claims{background:#f6f8fa;padding:.6em .8em;border-left:4px solid #4c72b0}
table.ctab{border-collapse:collapse;font-size:.92em;margin:.4em 0}table.ctab td,table.ctab th{border-bottom:1px solid #e4e4e4;
 padding:4px 10px 4px 0;text-align:left;vertical-align:middle}table.ctab th{font-weight:600;color:#555}
table.ctab .plain{color:#333}table.ctab td.ceff,table.ctab td.cagainst{white-space:nowrap}.cbar{vertical-align:middle}
.cnum{font-variant-numeric:tabular-nums;font-size:.9em}.legend-c{font-size:.8em;margin:.2em 0 .6em}
details.cstats summary{cursor:pointer;color:#4c72b0}
.views a{margin-right:1.2em}.pair{display:flex;flex-wrap:wrap;gap:1.5em}.pair>div{flex:1 1 520px;min-width:0}
"""


#: the views' CSS when they are shown outside a report page (notebooks)
VIEW_CSS = (
    ".phv-bar{font:13px sans-serif;margin:.3em 0}.phv-bar label{margin-right:1em}"
    ".phv-title{font-weight:bold;margin-right:1em}.phv-hint{color:#888}"
    ".phv-tok{font:13px sans-serif;cursor:pointer;fill:#222}.phv-on{fill:#c44e52;font-weight:bold}"
    ".phv-dim{fill:#bbb}.pmv-grid{display:grid;gap:4px}.pmv-cell{font:10px sans-serif;color:#555;"
    "text-align:center;text-decoration:none}.pmv-cell canvas{width:72px;height:72px;"
    "image-rendering:pixelated;border:1px solid #ddd;display:block}.pmv-cell:hover canvas{"
    "outline:2px solid #333}"
)


def esc(value: Any) -> str:
    """``str(value)`` escaped for HTML text and attribute values (quotes included)."""
    return html.escape("" if value is None else str(value), quote=True)


def script_json(obj: Any) -> str:
    """JSON safe to place inside a ``<script>`` element: ``<``, ``>``, ``&`` and the
    line separators U+2028/U+2029 are written as ``\\uXXXX`` escapes."""
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False, default=_json_default)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _json_default(x):
    if hasattr(x, "item"):
        return x.item()
    if hasattr(x, "tolist"):
        return x.tolist()
    return str(x)


def joined(value: Any) -> Any:
    """A list or tuple of settings or sayings as one line (``"a; b"``), not its Python repr;
    anything else unchanged."""
    return "; ".join(str(v) for v in value) if isinstance(value, (list, tuple)) else value


def fmt(value: Any, digits: int = 3) -> str:
    """A number formatted for humans: ``digits`` significant digits (see
    :func:`probe.app.report.style.number`), ``—`` for missing/NaN; other values as ``str``."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return str(joined(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) or hasattr(value, "dtype"):
        from .style import number

        try:
            v = float(value)
        except (TypeError, ValueError):
            return str(value)
        if math.isnan(v):
            return "—"
        if v == int(v) and abs(v) < 1e6:
            return str(int(v))
        return number(v, digits=digits)
    return str(value)


def page(title: str, body: str, *, scripts: Iterable[str] = ()) -> str:
    """A complete HTML document: escaped ``title``, ``body`` (already HTML), inline CSS and
    inline ``scripts`` (JavaScript source, trusted: shipped with the package)."""
    js = "".join(f"<script>{s}</script>\n" for s in scripts)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}{VIEW_CSS}</style></head>\n<body>\n{body}\n{js}</body></html>\n"
    )


def kv_table(rows: Mapping | Iterable, digits: int = 3) -> str:
    """Two-column table of ``(label, value)`` pairs, both escaped."""
    items = rows.items() if isinstance(rows, Mapping) else rows
    cells = "".join(f"<tr><td>{esc(k)}</td><td>{esc(fmt(v, digits))}</td></tr>" for k, v in items)
    return f'<table class="kv">{cells}</table>'


def frame_table(df: Any, max_rows: int = 30, digits: int = 3) -> str:
    """A pandas DataFrame as an HTML table, every cell escaped; at most ``max_rows`` rows."""
    if df is None or len(df) == 0:
        return '<p class="muted">(empty)</p>'
    head = "".join(f"<th>{esc(c)}</th>" for c in df.columns)
    body = []
    for row in df.head(max_rows).itertuples(index=False):
        body.append("<tr>" + "".join(f"<td>{esc(fmt(v, digits))}</td>" for v in row) + "</tr>")
    more = f'<p class="muted">{len(df) - max_rows} more rows in the CSV</p>' if len(df) > max_rows else ""
    return f'<table class="data"><tr>{head}</tr>{"".join(body)}</table>{more}'


def link(href: str, text: str, title: Optional[str] = None) -> str:
    t = f' title="{esc(title)}"' if title else ""
    return f'<a href="{esc(href)}"{t}>{esc(text)}</a>'
