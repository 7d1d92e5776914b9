"""The machine-readable outputs: ``summary.json`` and ``report.md`` (same numbers as the
HTML pages), and the sections' tables as CSV."""

from __future__ import annotations

from typing import Any

import json
import math
from pathlib import Path

from probe.app.registry.presentation import CLAIMS_FIELD

from .html import joined
from .tables import notes_shown


def _clean(v):
    """JSON-able, with NaN as ``null`` and numpy scalars as Python numbers."""
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def _head_entries(data) -> list:
    """summary.json's ``heads``: per head its verdict, page, claims, facts and evidence."""
    from probe.app.registry import registered

    claim_sections = {a.name for a in registered() if a.shows.claims}
    heads = []
    for layer in data.layers:
        for h in range(data.n_heads):
            entry = {
                "layer": layer,
                "head": h,
                "verdict": data.verdicts[(layer, h)],
                "page": f"heads/L{layer}H{h}.html",
            }
            if data.claims is not None and (layer, h) in data.claims.claims:
                entry[CLAIMS_FIELD] = data.claims.head_dict((layer, h))
            entry["facts"] = _clean(data.facts.get((layer, h), {}))
            # the objects the head's page renders (the claims' are under CLAIMS_FIELD, with their evidence)
            entry["evidence"] = [
                ev.to_dict() for ev in data.evidence.get((layer, h), ()) if ev.section not in claim_sections
            ]
            heads.append(entry)
    return heads


def summary_dict(data: Any) -> dict:
    """Everything the report says, as one JSON-able dict."""
    ctx = data.ctx
    heads = _head_entries(data)
    claims = data.claims.claims if data.claims is not None else None
    return _clean(
        {
            "format": "attention-probe report 1",
            "model": ctx.report.settings.get("model_info") or {"name": ctx.report.settings.get("model")},
            "corpus": {
                "source": ctx.corpus.kept.source,
                "examples": len(ctx.maps),
                "tokens": sum(m.n_tokens for m in ctx.maps),
                "skipped": dict(ctx.corpus.kept.skipped or {}),
                "representatives": list(ctx.report.representatives),
            },
            "settings": {k: v for k, v in ctx.report.settings.items() if k != "model_info"},
            "sections": [
                dict(
                    o.to_dict(),
                    notes=notes_shown(o.name, o.result, claims),
                    summary=o.result.summary,
                    tables=[f"tables/{o.name}_{n}.csv" for n in o.result.tables],
                )
                for o in data.outcomes
            ],
            CLAIMS_FIELD: _claims_overview(data),
            "heads": heads,
            "seconds": round(data.seconds, 2),
        }
    )


def _claims_overview(data) -> dict:
    """Heads per claim and status, and the thresholds in force (with their sources)."""
    claims = data.claims
    if claims is None:
        return {}
    from probe.analyses.claims.thresholds import thresholds_in_force

    counts = claims.counts()
    return {
        "counts": {k: {s: int(n) for s, n in row.items()} for k, row in counts.iterrows()},
        "thresholds": thresholds_in_force(),
    }


def _claim_cell(c: dict) -> str:
    """A claim in a few words for the Markdown table: status, statement, effect [CI], n."""
    out = c["status"]
    if (c.get("evidence") or {}).get("text"):
        return f"{out}: {c['evidence']['text']}"
    if c.get("statement"):
        out += f": {c['statement']}"
    if c.get("effect") is not None and c["status"] in ("holds", "does not hold", "depends on the baseline"):
        ci = (
            f" [{c['ci_low']:.3g}, {c['ci_high']:.3g}]"
            if c.get("ci_low") is not None and c.get("ci_high") is not None
            else ""
        )
        out += f" ({c['effect']:.3g}{ci}, n={c.get('count')})"
    elif c["status"] in ("not tested", "not enough evidence") and c.get("reason"):
        out += f" ({c['reason']})"
    return out


def claims_markdown(summary: dict) -> list:
    """The claims of every head as Markdown lines (counts, thresholds, one row per head)."""
    from probe.analyses.claims.claim import STATUSES
    from probe.analyses.claims.protocol import claim_kinds

    kinds = claim_kinds()

    ov = summary.get(CLAIMS_FIELD) or {}
    if not ov:
        return []
    lines = [
        "",
        "## Claims",
        "",
        "| claim |" + "".join(f" {s} |" for s in STATUSES),
        "| --- |" + " --- |" * len(STATUSES),
    ]
    for kind, row in ov["counts"].items():
        lines.append(f"| {kind} |" + "".join(f" {row.get(s, 0)} |" for s in STATUSES))
    lines += ["", "Thresholds in force:", ""]
    for name, t in ov["thresholds"].items():
        lines.append(f"- {_md(name)} = {_md(t['value'])}: {_md(t['source'])}")
    lines += [
        "",
        "| layer | head | summary |" + "".join(f" {k} |" for k in kinds),
        "| --- | --- | --- |" + " --- |" * len(kinds),
    ]
    for h in summary["heads"]:
        c = h.get(CLAIMS_FIELD) or {}
        lines.append(
            f"| {h['layer']} | {h['head']} | {_md(h['verdict'])} |"
            + "".join(f" {_md(_claim_cell(c[k])) if k in c else ''} |" for k in kinds)
        )
    return lines


def _md(s) -> str:
    return str(s).replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def _evidence_cells(head: dict) -> dict:
    """kind -> the head's headline evidence in a few words (its ``brief``), from summary.json."""
    out: dict = {}
    for ev in head.get("evidence", ()):
        if ev["headline"] and ev["kind"] not in out:
            value = ev.get("value")
            out[ev["kind"]] = ev.get("brief") or ev.get("label") or ("" if value is None else f"{value:.4g}")
    pattern = (head.get(CLAIMS_FIELD) or {}).get("pattern")
    if out.get("role") and pattern is not None and pattern["status"] != "holds":
        out["role"] = f"({out['role']}; pattern claim: {pattern['status']})"  # the rule names it, the claim does not
    return out


def report_markdown(summary: dict) -> str:
    """``report.md`` from :func:`summary_dict` (so both hold the same numbers)."""
    m, c = summary["model"], summary["corpus"]
    lines = [
        f"# Attention report: {_md(m.get('name'))}",
        "",
        f"- model: {_md(m.get('name'))} ({m.get('layers', '?')} layers × {m.get('heads', '?')} heads)",
        f"- corpus: {_md(c['source'])}, {c['examples']} examples, {c['tokens']} tokens",
    ]
    for why, n in c["skipped"].items():
        lines.append(f"- skipped examples: {n} {_md(why)}")
    for k, v in summary["settings"].items():
        if k != "model":  # written above, with its shape
            lines.append(f"- {_md(k)}: {_md('none' if v is None else joined(v))}")
    lines += ["", "## Sections", "", "| section | status | reason | seconds |", "| --- | --- | --- | --- |"]
    for s in summary["sections"]:
        lines.append(f"| {_md(s['title'])} | {s['status']} | {_md(s['reason'])} | {s['seconds']} |")
    for s in summary["sections"]:
        for note in s["notes"]:
            lines.append(f"\n{_md(s['name'])}: {_md(note)}")
    cells = [_evidence_cells(h) for h in summary["heads"]]
    keys = list(dict.fromkeys(k for row in cells for k in row))
    lines += [
        "",
        "## Heads",
        "",
        "| layer | head | verdict |" + "".join(f" {k} |" for k in keys),
        "| --- | --- | --- |" + " --- |" * len(keys),
    ]
    for h, row in zip(summary["heads"], cells):
        lines.append(
            f"| {h['layer']} | {h['head']} | {_md(h['verdict'])} |" + "".join(f" {_md(row.get(k, ''))} |" for k in keys)
        )
    lines += claims_markdown(summary)
    return "\n".join(lines) + "\n"


def write_tables(data: Any, out: Path) -> list:
    """Each section's tables as ``tables/<section>_<name>.csv``; returns the paths."""
    paths = []
    (out / "tables").mkdir(exist_ok=True)
    for o in data.outcomes:
        for name, table in o.result.tables.items():
            p = out / "tables" / f"{o.name}_{name}.csv"
            table.to_csv(p, index=False)
            paths.append(p)
    return paths


def write_summary(data: Any, out: Path) -> dict:
    summary = summary_dict(data)
    (out / "summary.json").write_text(
        json.dumps(summary, indent=1, ensure_ascii=False, allow_nan=False), encoding="utf-8"
    )
    (out / "report.md").write_text(report_markdown(summary), encoding="utf-8")
    return summary
