"""Figures for ablation, importance, pruning and patching tables (matplotlib/seaborn,
imported lazily, Agg backend). Each function reads a tidy table and writes one figure."""

from __future__ import annotations

from typing import Any

from pathlib import Path
from typing import Optional

from probe.errors import InputError

from .style import DIVERGING_CMAP, pyplot, set_wrapped_title

_plt = pyplot  # the one Agg-backed pyplot of style.py


def head_heatmap(
    table: Any, value: str, path: Any, title: str = "", center: Optional[float] = 0.0, cmap: str = DIVERGING_CMAP
) -> Any:
    """Layer × head heatmap of column ``value`` of a ``layer, head, …`` table; returns the path.

    Raises:
        ValueError: when the table lacks ``layer``, ``head`` or ``value``.
    """
    missing = {"layer", "head", value} - set(table.columns)
    if missing:
        raise InputError(f"table lacks column(s) {', '.join(sorted(missing))}")
    plt = _plt()
    import seaborn as sns

    grid = table.pivot_table(index="layer", columns="head", values=value, aggfunc="mean")
    # at least 3.6 in wide: the colour bar's label and the title need the room on a 2-head model
    fig, ax = plt.subplots(figsize=(max(3.6, 1.2 + 0.5 * grid.shape[1]), 1.4 + 0.45 * grid.shape[0]))
    sns.heatmap(
        grid,
        ax=ax,
        cmap=cmap,
        center=center,
        annot=grid.size <= 100,
        fmt=".2g",
        annot_kws={"size": 6},
        cbar_kws={"label": value},
    )
    set_wrapped_title(fig, ax, title or value, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def pruning_plot(table: Any, path: Any, threshold: Optional[float] = None, title: str = "") -> Any:
    """Metric change against the fraction of heads pruned, one line per order."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for order, t in table.groupby("order", sort=False):
        t = t.sort_values("n_pruned")
        ax.plot(t["fraction"] * 100, t["delta"], marker="o", ms=3, label=order)
    if threshold is not None:
        ax.axhline(threshold, color="grey", ls="--", lw=0.8, label=f"threshold {threshold:g}")
    metric = table["metric"].iloc[0] if len(table) else ""
    ax.set_xlabel("heads pruned (%)")
    ax.set_ylabel(f"Δ {metric}")
    ax.set_title(title or f"pruning by importance vs random ({metric})")
    ax.legend(frameon=False)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
