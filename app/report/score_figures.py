"""Figures of input-token scores per output position (rollout, flow, attributions).

The trivial part of these scores (an output position's score on itself, and on special
tokens and punctuation, Abnar & Zuidema 2020's [CLS]/[SEP] mass) is often most of the
total; drawn on one colour scale it makes every word look the same. So:

* for a few output positions, :func:`token_scores_heatmap` draws the *words ranked by
  score as bars* (one panel per position) and lists the trivial tokens apart, in grey,
  with their share;
* for many positions (``--all-positions``), a heatmap whose colour scale is set by the
  words only (trivial cells hatched grey, their values in the CSV).
"""

from __future__ import annotations

from typing import Any

from pathlib import Path
from typing import Optional

import numpy as np

from .style import ACCENT, ATTENTION_CMAP, MUTED, is_trivial, pyplot
from .fonts import font_for
from .tokens import display_tokens

#: most output positions drawn as ranked bars; more become a heatmap
MAX_BAR_PANELS = 4
#: most words per bar panel
MAX_BARS = 15


def trivial_mask(tokens: Any, position: Optional[int] = None) -> np.ndarray:
    """``[n]`` bool: special tokens, punctuation, and ``position`` itself."""
    mask = np.array([is_trivial(t) for t in tokens], dtype=bool)
    if position is not None and 0 <= position < len(mask):
        mask[position] = True
    return mask


def split_top(tokens: Any, row: Any, position: Optional[int] = None, k: int = 5) -> tuple:
    """``(words, trivial)``: the ``k`` highest-scoring non-trivial tokens and all trivial
    ones (highest first), each a list of ``(index, token, score)``."""
    row = np.asarray(row, dtype=float)
    mask = trivial_mask(tokens, position)
    order = np.argsort(-row, kind="stable")
    words = [(int(j), str(tokens[j]), float(row[j])) for j in order if not mask[j]][:k]
    trivial = [(int(j), str(tokens[j]), float(row[j])) for j in order if mask[j]]
    return words, trivial


def _bars(scores, path, title, xlabel):
    plt = pyplot()
    k = len(scores.output_positions)
    shown = display_tokens(scores.tokens)
    font_for(shown)
    n_words = min(MAX_BARS, int((~trivial_mask(scores.tokens)).sum()) or 1)
    fig, axes = plt.subplots(1, k, figsize=(4.8 * k, 1.6 + 0.28 * (n_words + 3)), squeeze=False)
    for r, (ax, p) in enumerate(zip(axes[0], scores.output_positions)):
        words, trivial = split_top(shown, scores.scores[r], p, k=MAX_BARS)
        labels = [f"{t} ({j})" for j, t, _ in words][::-1]
        ax.barh(range(len(words)), [s for _, _, s in words][::-1], color=ACCENT)
        ax.set_yticks(range(len(words)), labels, fontsize=9)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("input word (position), ranked")
        share = sum(s for _, _, s in trivial)
        total = float(np.sum(scores.scores[r])) or 1.0
        apart = ", ".join(f"{t} {s:.2f}" for _, t, s in trivial[:4]) + (" …" if len(trivial) > 4 else "")
        ax.set_title(f"output position {p} ({shown[p]})", fontsize=10)
        ax.text(
            0.0,
            -0.16 - 0.02 * max(0, 12 - len(words)) / 4,
            f"not shown: itself, special tokens and punctuation, {share / total:.0%} of the total\n({apart})",
            transform=ax.transAxes,
            fontsize=8,
            color=MUTED,
            va="top",
            wrap=True,
        )
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _heatmap(scores, path, title, xlabel):
    import seaborn as sns

    plt = pyplot()
    s = scores.scores
    shown = display_tokens(scores.tokens)
    font_for(shown)
    k, n = s.shape
    mask = np.array([trivial_mask(scores.tokens, p) for p in scores.output_positions])
    words = s[~mask]
    vmax = float(words.max()) if words.size else float(s.max())
    fig, ax = plt.subplots(figsize=(min(4 + 0.32 * n, 30), min(2.2 + 0.3 * k, 30)))
    ax.set_facecolor("#c4c4c4")
    sns.heatmap(
        np.where(mask, np.nan, s),
        ax=ax,
        cmap=ATTENTION_CMAP,
        vmin=0,
        vmax=max(vmax, 1e-9),
        xticklabels=shown,
        yticklabels=[f"{p} {shown[p]}" for p in scores.output_positions],
        cbar_kws={"shrink": 0.8, "label": xlabel},
    )
    ax.set_xlabel("input token (grey: itself, special tokens, punctuation; not on the colour scale)")
    ax.set_ylabel("output position")
    ax.set_title(title)
    ax.tick_params(axis="x", labelrotation=90)
    ax.tick_params(axis="y", labelrotation=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def token_scores_heatmap(scores: Any, path: Any, title: Optional[str] = None) -> Path:
    """Save the figure of a :class:`probe.analyses.common.token_scores.TokenScores` to
    ``path`` (PNG/SVG/PDF by extension): ranked bars for up to :data:`MAX_BAR_PANELS`
    output positions, else a heatmap scaled by the words. Returns the path."""
    path = Path(path)
    title = title or scores.method
    xlabel = f"{scores.method or 'score'}: share of the output position's input"
    if len(scores.output_positions) <= MAX_BAR_PANELS:
        return _bars(scores, path, title, xlabel)
    return _heatmap(scores, path, title, xlabel)


token_scores_figure = token_scores_heatmap
