"""Figures in the style of Vaswani et al. (2017, appendix) and D2L-style alignment heatmaps.

:func:`paper_figure` draws the words of a sentence twice, in two columns (left: the
attending side, right: the attended side), and a line from the chosen word to every
word, one colour per head, opacity and width by the attention weight — the layout of
the paper's Figures 3–5. :func:`alignment_heatmaps` draws the word-level cross-attention
of every head (target words as rows, source words as columns, as in Dive into Deep
Learning's ``show_heatmaps``) with the gold links outlined and each head's alignment
error rate (Och & Ney 2003) in its title. matplotlib is imported lazily, Agg backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from probe.errors import InputError

from .style import ATTENTION_CMAP, cmap, pyplot

#: head colours (matplotlib tab10 without grey), one per selected head
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


_plt = pyplot  # the one Agg-backed pyplot of style.py


def paper_figure(
    attention: Any,
    query: Any,
    heads: Sequence,
    path: Any,
    targets: Sequence = (),
    title: Optional[str] = None,
    dpi: int = 100,
) -> Path:
    """Draw the attention from one word, for a few heads, as in the paper's appendix.

    Args:
        attention: self-attention :class:`probe.maps.AttentionMaps` of one sentence
            (``[layer, head, token, token]``) or its ``WordAttention``.
        query: the attending word (string or unit index).
        heads: ``(layer, head)`` pairs to draw, one colour each (at most 8), e.g.
            ``probe.analyses.paper.paper_heads.top_heads(ranking, 3)``.
        path: where to save (PNG/SVG/PDF by extension).
        targets: words to print in bold on the right (the expected targets).
        title: figure title (default: the query word).
        dpi: resolution of raster output.

    Returns:
        the path written.

    Raises:
        ValueError: no heads or more than 8, a head not in the maps, a word not in the
            sentence (from :func:`probe.analyses.paper.paper_heads.find_word`).
    """
    from probe.analyses.paper.paper_heads import find_word, query_weights

    heads = [(int(layer), int(h)) for layer, h in heads]
    if not heads or len(heads) > len(COLORS):
        raise InputError(f"give 1..{len(COLORS)} (layer, head) pairs to draw, got {len(heads)}")
    w, units, special, q = query_weights(attention, query)
    rows = _head_rows(w, list(attention.layers), heads)
    bold = {find_word(units, special, t) for t in targets}
    n = len(units)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.2, 0.9 + 0.24 * n), dpi=dpi)
    ys = np.arange(n)[::-1].astype(float)
    _words(ax, units, special, q, bold, ys)
    _lines(ax, heads, rows, units, q, bold, ys)
    ax.set_xlim(-0.9, 1.9)
    ax.set_ylim(-1.0, n)
    ax.axis("off")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=8, frameon=False, ncol=1)
    ax.set_title(title or f"attention from {units[q]!r}", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return path


def _head_rows(w: Any, layers: list, heads: list) -> list:
    """Each head's weights from the query word (``w``: ``[layer, head, unit]``), in ``heads`` order.

    Raises:
        InputError: a head that is not in the maps.
    """
    rows = []
    for layer, h in heads:
        if layer not in layers or not 0 <= h < w.shape[1]:
            raise InputError(f"head ({layer}, {h}) is not in these maps: layers {layers}, heads 0..{w.shape[1] - 1}")
        rows.append(w[layers.index(layer), h].numpy())
    return rows


def _words(ax: Any, units: Sequence[str], special: Any, q: int, bold: set, ys: Any) -> None:
    """The sentence twice: attending words on the left (the query highlighted), attended on
    the right (``bold``: the expected targets); special tokens grey."""
    x_left, x_right = 0.0, 1.0
    for i, u in enumerate(units):
        grey = "#8a8a8a" if bool(special[i]) else "black"
        ax.text(
            x_left - 0.03,
            ys[i],
            u,
            ha="right",
            va="center",
            fontsize=9,
            color=grey,
            fontweight="bold" if i == q else "normal",
            bbox=dict(boxstyle="round,pad=0.15", fc="#ffe9a8", ec="none") if i == q else None,
        )
        ax.text(
            x_right + 0.03,
            ys[i],
            u,
            ha="left",
            va="center",
            fontsize=9,
            color=grey,
            fontweight="bold" if i in bold else "normal",
        )


def _lines(ax: Any, heads: list, rows: list, units: Sequence[str], q: int, bold: set, ys: Any) -> None:
    """One colour per head: a line from the query to each word, as thick and opaque as its
    weight (under 0.01 not drawn), and a legend entry with its top word and the targets' weight."""
    x_left, x_right = 0.0, 1.0
    spread = 0.6 / max(len(heads), 2)  # lines of different heads side by side, within a row
    for c, ((layer, h), row) in enumerate(zip(heads, rows)):
        color = COLORS[c]
        dy = (c - (len(heads) - 1) / 2) * spread
        for k, weight in enumerate(row):
            if weight < 0.01:
                continue
            ax.plot(
                [x_left, x_right],
                [ys[q] + dy, ys[k] + dy],
                color=color,
                alpha=float(min(1.0, weight)),
                linewidth=0.5 + 3.0 * float(weight),
                solid_capstyle="round",
                zorder=10 - c,
            )
        top = int(np.argmax(row))
        label = f"layer {layer}, head {h}: "
        if bold:
            label += f"{' + '.join(units[i] for i in sorted(bold))} {sum(row[i] for i in bold):.2f}, "
        ax.plot([], [], color=color, linewidth=3, label=label + f"top {units[top]!r} {row[top]:.2f}")


def alignment_heatmaps(
    maps: Any,
    path: Any,
    gold: Optional[Sequence] = None,
    aer: Optional[dict] = None,
    title: Optional[str] = None,
    dpi: int = 100,
) -> Any:
    """Heatmaps of a cross-attention map's heads at word level, target rows × source columns.

    Args:
        maps: cross-attention :class:`probe.maps.AttentionMaps` of one sentence pair
            (``[layer, head, n_target + 1, n_source + 1]`` token level); rows are
            grouped by the target word they produce
            (:func:`probe.analyses.paper.alignment.cross_word_attention`), the last column is the
            attention on the source's special tokens (``</s>``).
        path: where to save.
        gold: the gold alignment (one source index per target word, or pairs); its
            links are outlined in blue.
        aer: optional ``{(layer, head): AER}`` printed in each panel's title.
        title: figure title (default: the model name from ``maps.meta``).

    Returns:
        the path written.

    Raises:
        ValueError: not a cross-attention map, or gold links outside the sentence.
    """
    from probe.analyses.paper.alignment import cross_word_attention, gold_links

    w = cross_word_attention(maps, special_column=True).numpy()  # [L, H, T, S + 1]: last = on </s>
    n_l, n_h, n_t, n_s = w.shape
    links = gold_links(gold, n_t, n_s - 1) if gold is not None else set()
    special = [t for t, s in zip(maps.tokens, maps.special_mask.tolist()) if s]
    columns = list(maps.words) + ["/".join(dict.fromkeys(special)) or "(special)"]
    plt = _plt()
    cell = 0.42
    fig, axes = plt.subplots(
        n_l, n_h, figsize=(n_h * (1.6 + cell * n_s), n_l * (1.3 + cell * n_t)), dpi=dpi, squeeze=False
    )
    from matplotlib.patches import Rectangle

    img = None
    for li in range(n_l):
        for h in range(n_h):
            ax = axes[li, h]
            img = ax.imshow(w[li, h], cmap=cmap(ATTENTION_CMAP), vmin=0.0, vmax=1.0, aspect="equal")
            for t, s in links:
                ax.add_patch(Rectangle((s - 0.5, t - 0.5), 1, 1, fill=False, ec="#1f77b4", lw=1.8))
            ax.set_xticks(range(n_s), columns, rotation=90, fontsize=8)
            ax.set_yticks(range(n_t), list(maps.query_words), fontsize=8)
            name = f"layer {maps.layers[li]}, head {h}"
            if aer and (maps.layers[li], h) in aer:
                name += f"\nAER {aer[(maps.layers[li], h)]:.3f}"
            ax.set_title(name, fontsize=9)
            if h == 0:
                ax.set_ylabel("target (query)", fontsize=8)
            if li == n_l - 1:
                ax.set_xlabel("source (key)", fontsize=8)
    fig.colorbar(img, ax=axes.ravel().tolist(), shrink=0.6)
    fig.suptitle(title or str(maps.meta.get("model", "cross-attention")), fontsize=10)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return path
