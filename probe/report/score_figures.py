"""Figure of input-token scores per output position (rollout, flow, …): a heatmap."""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def token_scores_heatmap(scores, path, title: Optional[str] = None):
    """Save a heatmap of an :class:`analyses.token_scores.TokenScores` (rows: output
    positions, columns: input tokens) to ``path`` (PNG/SVG/PDF by extension).

    Returns the path.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import seaborn as sns

    s = scores.scores
    k, n = s.shape
    width = min(4 + 0.32 * n, 30)
    height = min(1.6 + 0.3 * k, 30)
    fig, ax = plt.subplots(figsize=(width, height))
    sns.heatmap(s, ax=ax, cmap="magma", vmin=0, vmax=max(float(s.max()), 1e-9),
                xticklabels=list(scores.tokens),
                yticklabels=[f"{p} {scores.tokens[p]}" for p in scores.output_positions],
                cbar_kws={"shrink": 0.7})
    ax.set_xlabel("input token")
    ax.set_ylabel("output position")
    ax.set_title(title or scores.method)
    ax.tick_params(axis="x", labelrotation=90)
    ax.tick_params(axis="y", labelrotation=0)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
