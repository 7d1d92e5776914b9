"""Per-head attention heatmaps for the report, drawn fast.

For each example one seaborn heatmap (token labels, colour bar; scale fixed to [0, 1]
so that heads compare by eye) is drawn once; its pixels are kept, and for every head
that shows this example only the cells are repainted: the head's weights go through the
same colour map and are pasted, cell by cell, over the heatmap's area. 144 heatmaps cost
18 figure draws and 144 PNG encodings instead of 144 figure draws.
"""

from __future__ import annotations

from typing import Any

import logging
from pathlib import Path

import numpy as np

from .style import ATTENTION_CMAP, pyplot
from .fonts import font_for
from .tokens import maps_display_tokens

log = logging.getLogger(__name__)

CMAP = ATTENTION_CMAP


_plt = pyplot  # the one Agg-backed pyplot of style.py


def _template(m, dpi: int):
    """Draw the example's heatmap frame once: (RGBA pixels, cell area box, colour map)."""
    plt = _plt()
    import seaborn as sns

    keys = maps_display_tokens(m)
    queries = maps_display_tokens(m, query=True) if m.kind == "cross" else keys
    font_for(keys + queries)
    n = max(len(keys), len(queries))
    size = min(2.2 + 0.17 * n, 14)
    fig, ax = plt.subplots(figsize=(size + 0.8, size), dpi=dpi)
    sns.heatmap(
        np.zeros((len(queries), len(keys))),
        ax=ax,
        cmap=CMAP,
        vmin=0.0,
        vmax=1.0,
        square=True,
        xticklabels=keys,
        yticklabels=queries,
        cbar_kws={"shrink": 0.5},
    )
    ax.tick_params(axis="x", labelrotation=90, labelsize=7)
    ax.tick_params(axis="y", labelrotation=0, labelsize=7)
    ax.set_xlabel("key (attended to)", fontsize=8)
    ax.set_ylabel("query", fontsize=8)
    fig.tight_layout()
    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.buffer_rgba()).copy()
    box = ax.get_window_extent()
    height = pixels.shape[0]
    x0, x1 = int(round(box.x0)), int(round(box.x1))
    y0, y1 = int(round(height - box.y1)), int(round(height - box.y0))
    cmap = ax.collections[0].get_cmap()
    plt.close(fig)
    return pixels, (x0, y0, x1, y1), cmap


def paint(pixels: np.ndarray, box: tuple, cmap: Any, a: np.ndarray) -> np.ndarray:
    """A copy of ``pixels`` with the cell area ``box`` = (x0, y0, x1, y1) filled by
    ``a [query, key]`` through ``cmap`` (row 0 at the top, nearest-cell sampling)."""
    x0, y0, x1, y1 = box
    rows = np.minimum((np.arange(y1 - y0) + 0.5) * a.shape[0] / (y1 - y0), a.shape[0] - 1).astype(int)
    cols = np.minimum((np.arange(x1 - x0) + 0.5) * a.shape[1] / (x1 - x0), a.shape[1] - 1).astype(int)
    colours = cmap(np.clip(a, 0.0, 1.0), bytes=True)  # [q, k, 4] uint8
    out = pixels.copy()
    out[y0:y1, x0:x1] = colours[rows][:, cols]
    return out


def render_heatmaps(maps_list: Any, requests: dict, dpi: int = 80) -> list:
    """Draw heatmaps as PNG files.

    Args:
        maps_list: the examples (``AttentionMaps``), indexed by ``requests``' keys.
        requests: ``{example index: [(layer, head, path), ...]}``.
        dpi: resolution of the PNGs.

    Returns:
        The written paths.

    Raises:
        ValueError: a layer that was not captured or a head out of range.
    """
    from matplotlib.image import imsave

    written = []
    for ex, jobs in requests.items():
        m = maps_list[ex]
        pixels, box, cmap = _template(m, dpi)
        for layer, head, path in jobs:
            img = paint(pixels, box, cmap, m.head(layer, head).float().numpy())
            imsave(Path(path), img)
            written.append(Path(path))
    log.info("drew %d heatmaps on %d examples", len(written), len(requests))
    return written
