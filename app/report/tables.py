"""The index page's tables, strongest results first.

Each known table is sorted by its effect size (ablation: |Δ|; syntax and the structure
claim's table: the margin over the best fixed-offset baseline; importance: rank;
faithfulness: |τ|; roles: confidence), shows the count its numbers rest on, and greys the
rows whose count is under the minimum (they are shown, not trusted): for the structure
tables the structure claim's own minimum (:data:`probe.analyses.claims.thresholds.STRUCTURE_MIN_COUNT`,
:data:`CLAIM_MIN_COUNT`), so a table never trusts a relation the claim calls "not enough
evidence"; for the others the section's. Wide tables scroll sideways instead of being cut;
the full tables are in ``tables/*.csv``.
"""

from __future__ import annotations

from probe.analyses.claims import thresholds as T

from .html import esc, fmt

#: per (section, table): (sort key, ascending, columns shown first or None for all)
ORDER = {
    ("ablation", "ablation"): ("|delta|", False, ["layer", "head", "metric", "delta", "ci_low", "ci_high"]),
    ("importance", "importance"): ("rank", True, ["layer", "head", "importance", "rank", "method"]),
    ("syntax", "best"): (
        "margin",
        False,
        [
            "relation",
            "direction",
            "layer",
            "head",
            "accuracy",
            "baseline_accuracy",
            "baseline_offset",
            "margin",
            "count",
        ],
    ),
    ("syntax", "relations"): (
        "margin",
        False,
        ["relation", "direction", "layer", "head", "accuracy", "baseline_accuracy", "margin", "count"],
    ),
    ("claims", "structure"): (
        "margin",
        False,
        [
            "layer",
            "head",
            "relation",
            "direction",
            "accuracy",
            "baseline",
            "margin",
            "ci_low",
            "ci_high",
            "p",
            "significant",
            "count",
        ],
    ),
    ("faithfulness", "verdict"): ("|tau_ig|", False, None),
    ("faithfulness", "agreement"): ("|tau_mean|", False, None),
    ("roles", "roles"): (
        "confidence",
        False,
        [
            "layer",
            "head",
            "role",
            "confidence",
            "decided_by",
            "to_special",
            "to_punct",
            "positional_share",
            "positional_offset",
            "entropy_ratio",
            "n_examples",
            "n_rows",
        ],
    ),
    ("roles", "role_counts"): ("heads", False, None),
    ("rollout", "scores"): ("score", False, None),
}


#: tables whose minimum count is the structure claim's, whatever the section's own
CLAIM_MIN_COUNT = {
    ("syntax", "best"): T.STRUCTURE_MIN_COUNT,
    ("syntax", "relations"): T.STRUCTURE_MIN_COUNT,
    ("claims", "structure"): T.STRUCTURE_MIN_COUNT,
}


def min_count_of(section: str, name: str, section_min=None):
    """The count under which a row of this table is greyed: the claim's minimum for the
    structure tables (:data:`CLAIM_MIN_COUNT`), else the section's ``section_min``."""
    return CLAIM_MIN_COUNT.get((section, name), section_min)


def ranked(section: str, name: str, df, min_count=None):
    """``df`` sorted strongest first (see :data:`ORDER`) with its leading columns, rows
    whose ``count`` is under the table's minimum (:func:`min_count_of`) after all the others;
    a ``margin`` column (accuracy − best fixed-offset accuracy) is added to syntax tables.
    Unknown tables come back unchanged."""
    rule = ORDER.get((section, name))
    min_count = min_count_of(section, name, min_count)
    if rule is None or df is None or not len(df):
        return df
    df = _ranked(df, rule)
    if min_count is not None and "count" in df.columns:
        few = (df["count"] < min_count).to_numpy()
        df = df.iloc[list((~few).nonzero()[0]) + list(few.nonzero()[0])]
    return df


def _ranked(df, rule):
    key, ascending, columns = rule
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


def ranked_table(section: str, name: str, df, min_count=None, max_rows: int = 12) -> str:
    """:func:`ranked` as HTML: every cell escaped, at most ``max_rows`` rows, rows with
    ``count`` (or ``n_examples``) under ``min_count`` greyed, in a sideways-scrolling box."""
    if df is None or len(df) == 0:
        return '<p class="muted">(empty)</p>'
    min_count = min_count_of(section, name, min_count)
    df = ranked(section, name, df, min_count)
    count_col = next((c for c in ("count", "n_examples") if c in df.columns), None)
    head = "".join(f"<th>{esc(c)}</th>" for c in df.columns)
    body = []
    for rec in df.head(max_rows).to_dict("records"):
        few = (
            min_count is not None
            and count_col is not None
            and rec[count_col] == rec[count_col]
            and rec[count_col] < min_count
        )
        cls = ' class="few" title="fewer instances than the minimum: not trusted"' if few else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{esc(fmt(v, 3))}</td>" for v in rec.values()) + "</tr>")
    more = f'<p class="muted">top {max_rows} of {len(df)} rows; all in the CSV</p>' if len(df) > max_rows else ""
    whose = " (the structure claim's minimum)" if (section, name) in CLAIM_MIN_COUNT else ""
    legend = (
        f'<p class="muted">greyed: fewer than {min_count} instances{whose}</p>'
        if min_count is not None and count_col is not None
        else ""
    )
    return f'<div class="scroll"><table class="data"><tr>{head}</tr>{"".join(body)}</table></div>{more}{legend}'
