"""Figure of input-token scores per output position (rollout, flow, …): a heatmap."""

from __future__ import annotations

from typing import Optional


def token_scores_heatmap(scores, path, title: Optional[str] = None):
    """Save a heatmap of an :class:`probe.analyses.common.token_scores.TokenScores` (rows: output
    positions, columns: input tokens) to ``path`` (PNG/SVG/PDF by extension).

    Returns the path.
    """
    import seaborn as sns

    from .figures import _plt, finish_heatmap

    plt = _plt()

    s = scores.scores
    k, n = s.shape
    width = min(4 + 0.32 * n, 30)
    height = min(1.6 + 0.3 * k, 30)
    fig, ax = plt.subplots(figsize=(width, height))
    sns.heatmap(s, ax=ax, cmap="magma", vmin=0, vmax=max(float(s.max()), 1e-9),
                xticklabels=list(scores.tokens),
                yticklabels=[f"{p} {scores.tokens[p]}" for p in scores.output_positions],
                cbar_kws={"shrink": 0.7})
    return finish_heatmap(fig, ax, path, "input token", "output position", title or scores.method)
