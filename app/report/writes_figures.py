"""The logit lens of one example as a figure (matplotlib, imported lazily, Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .style import pyplot, set_wrapped_title

__all__ = ["logit_lens_figure"]


def logit_lens_figure(table: Any, path: Any, title: str = "") -> Path:
    """The answer's probability (left axis) and rank (right axis, log scale) at each stage of
    a ``layer, stage, rank, probability, top`` logit-lens table, the top token of each stage
    written under its point; returns the path."""
    plt = pyplot()
    t = table.reset_index(drop=True)
    labels = [f"{int(r.layer)} {str(r.stage).replace('resid_', '')}" for r in t.itertuples()]
    fig, ax = plt.subplots(figsize=(max(5.0, 0.28 * len(t) + 2), 3.6))
    x = range(len(t))
    ax.plot(x, t["probability"], marker="o", ms=3, color="tab:blue", label="probability")
    ax.set_ylabel("probability of the answer", color="tab:blue")
    ax.set_ylim(-0.02, 1.02)
    ranks = ax.twinx()
    ranks.plot(x, t["rank"] + 1, marker=".", ms=3, color="tab:red", label="rank")
    ranks.set_yscale("log")
    ranks.invert_yaxis()
    ranks.set_ylabel("rank (1 = top)", color="tab:red")
    step = max(1, len(t) // 30)
    ax.set_xticks(list(x)[::step])
    ax.set_xticklabels(labels[::step], rotation=90, fontsize=6)
    for i, r in enumerate(t.itertuples()):
        if i % step == 0:
            ax.annotate(str(r.top).split("|")[0][:10], (i, 0), fontsize=5, rotation=90, va="bottom", ha="center")
    set_wrapped_title(fig, ax, title or "logit lens", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
