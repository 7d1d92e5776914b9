"""Figures of attention maps (seaborn, imported lazily, Agg backend)."""

from __future__ import annotations

from typing import Any

from pathlib import Path
from typing import Optional

from .style import ATTENTION_CMAP, pyplot
from .fonts import font_for
from .tokens import maps_display_tokens

_plt = pyplot  # the one Agg-backed pyplot of style.py


def attention_heatmap(maps: Any, layer: int, head: int, path: Any, title: Optional[str] = None) -> Any:
    """Save a heatmap of one head's attention (rows: queries, columns: keys), with token
    labels, to ``path`` (PNG/SVG/PDF by extension). Returns the path.

    Raises:
        ValueError: layer not captured or head out of range (from ``maps.head``).
    """
    a = maps.head(layer, head).float().numpy()
    plt = _plt()
    import seaborn as sns

    k_labels = maps_display_tokens(maps)
    q_labels = maps_display_tokens(maps, query=True) if maps.kind == "cross" else k_labels
    font_for(k_labels + q_labels)
    n = max(len(maps.tokens), len(q_labels))
    size = min(4 + 0.28 * n, 30)
    fig, ax = plt.subplots(figsize=(size, size * 0.85))
    sns.heatmap(
        a,
        ax=ax,
        cmap=ATTENTION_CMAP,
        vmin=0,
        vmax=1,
        square=True,
        xticklabels=k_labels,
        yticklabels=q_labels,
        cbar_kws={"shrink": 0.6, "label": "attention weight"},
    )
    return finish_heatmap(
        fig,
        ax,
        path,
        "key (attended to)",
        "query (attending)",
        title or f"layer {layer}, head {head} ({maps.meta.get('model', '')})",
    )


def finish_heatmap(fig: Any, ax: Any, path: Any, xlabel: str, ylabel: str, title: str) -> Path:
    """Label a token heatmap (x labels vertical), save it to ``path`` and close it."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.tick_params(axis="x", labelrotation=90)
    ax.tick_params(axis="y", labelrotation=0)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path
