"""Outputs of ``probe syntax`` / ``probe coref``: CSV/JSON tables and the relation × head
heatmap (matplotlib/seaborn imported lazily, Agg backend)."""

from __future__ import annotations

from typing import Any

import json
import logging
from pathlib import Path
from typing import Optional, Sequence

from probe.errors import NotApplicable

from .style import ATTENTION_CMAP, pyplot

log = logging.getLogger(__name__)


_plt = pyplot  # the one Agg-backed pyplot of style.py


def relation_heatmap(
    relations_frame: Any, path: Any, min_count: int = 20, direction: str = "dep_to_head", title: Optional[str] = None
) -> Path:
    """Heatmap of accuracy per relation (rows, by frequency) × head (columns ``L{layer}H{head}``)
    for the relations with at least ``min_count`` instances; saved to ``path``.

    Raises:
        NotApplicable: no relation has ``min_count`` instances.
    """
    df = relations_frame[(relations_frame.direction == direction) & (relations_frame["count"] >= min_count)]
    if df.empty:
        raise NotApplicable(f"no relation has {min_count} instances for the heatmap; lower --min-count")
    df = df.assign(column="L" + df.layer.astype(str) + "H" + df["head"].astype(str))  # as every other output
    order = df.drop_duplicates("relation").sort_values("count", ascending=False).relation.tolist()
    cols = df.drop_duplicates("column").sort_values(["layer", "head"]).column.tolist()
    table = df.pivot(index="relation", columns="column", values="accuracy").loc[order, cols]
    plt = _plt()
    import seaborn as sns

    fig, ax = plt.subplots(figsize=(max(6, 0.16 * len(cols) + 3), max(3, 0.3 * len(order) + 1.5)))
    sns.heatmap(
        table,
        ax=ax,
        cmap=ATTENTION_CMAP,
        vmin=0,
        vmax=1,
        cbar_kws={"label": "accuracy"},
        xticklabels=True,
        yticklabels=True,
    )
    ax.set_xlabel("head")
    ax.set_ylabel("relation")
    ax.tick_params(axis="x", labelsize=6, labelrotation=90)
    ax.set_title(title or f"{direction.replace('_', ' ')}: accuracy of the most-attended word")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_syntax_report(
    result: Any, out: Any, min_count: int = 20, relations: Optional[Sequence[str]] = None, meta: Optional[dict] = None
) -> dict:
    """Write relations.csv, best.csv, trees.csv, probe.json, skipped.csv, summary.json and
    relations_heatmap.png under ``out``; return ``{name: path}``.

    Raises:
        ValueError: a requested relation the treebank lacks (from ``best``).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rel = result.relations.with_all()
    paths = {}
    frame = rel.to_frame()
    frame.to_csv(out / "relations.csv", index=False)
    paths["relations"] = out / "relations.csv"
    best = rel.best(min_count=min_count, relations=relations)
    best.to_csv(out / "best.csv", index=False)
    paths["best"] = out / "best.csv"
    if result.trees is not None:
        result.trees.to_csv(out / "trees.csv", index=False)
        paths["trees"] = out / "trees.csv"
    if result.probe is not None:
        (out / "probe.json").write_text(json.dumps(result.probe, indent=2))
        paths["probe"] = out / "probe.json"
    result.skipped.to_frame().to_csv(out / "skipped.csv", index=False)
    paths["skipped"] = out / "skipped.csv"
    summary = {
        "n_input": result.n_input,
        "n_evaluated": rel.n_sentences,
        "skipped": result.skipped_counts,
        "min_count": min_count,
        "seconds": result.seconds,
        **(meta or {}),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    paths["summary"] = out / "summary.json"
    try:
        paths["heatmap"] = relation_heatmap(
            frame[frame.relation != "all"], out / "relations_heatmap.png", min_count=min_count
        )
    except NotApplicable as exc:
        log.warning("no heatmap: %s", exc.reason)
    return paths


def write_coref_report(result: Any, out: Any, meta: Optional[dict] = None) -> dict:
    """Write coref.csv (every head and baseline per setting), coref_best.csv, skipped.csv
    and summary.json under ``out``; return ``{name: path}``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    result.accuracy.to_frame().to_csv(out / "coref.csv", index=False)
    result.accuracy.best().to_csv(out / "coref_best.csv", index=False)
    result.skipped.to_frame().to_csv(out / "skipped.csv", index=False)
    summary = {
        "n_windows": result.n_windows,
        "n_skipped": len(result.skipped),
        "pronouns": int(result.accuracy.counts[0]),
        "seconds": result.seconds,
        **(meta or {}),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return {
        name: out / f
        for name, f in [
            ("coref", "coref.csv"),
            ("best", "coref_best.csv"),
            ("skipped", "skipped.csv"),
            ("summary", "summary.json"),
        ]
    }
