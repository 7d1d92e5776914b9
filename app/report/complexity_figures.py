"""The figure of ``probe complexity``: FLOPs, wall time and peak memory against n."""

from __future__ import annotations

from typing import Any

from pathlib import Path


def complexity_plot(grid: Any, path: Any) -> Path:
    """Log–log FLOPs, wall time and peak memory against n, one column per chosen d
    (``grid``: the ``layer, n, d, flops, time_s, peak_bytes`` table); returns ``path``."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    ds = sorted(grid["d"].unique())
    ds = sorted({ds[0], ds[len(ds) // 2], ds[-1]})
    metrics = [("flops", "FLOPs"), ("time_s", "wall time (s)"), ("peak_bytes", "peak memory (bytes)")]
    fig, axes = plt.subplots(len(metrics), len(ds), figsize=(4.2 * len(ds), 9), squeeze=False)
    for col, d in enumerate(ds):
        part = grid[grid["d"] == d]
        for row, (metric, label) in enumerate(metrics):
            ax = axes[row][col]
            for kind, sub in part.groupby("layer", sort=False):
                ax.plot(sub["n"], sub[metric], marker="o", ms=3, label=kind)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("n")
            ax.set_ylabel(label)
            if row == 0:
                ax.set_title(f"d = {d}")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
