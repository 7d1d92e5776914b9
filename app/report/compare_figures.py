"""Figures of ``probe compare`` over a training run: every score against the step, and
the phase change (the ICL score beside the induction heads' score, Olsson et al. 2022)."""

from __future__ import annotations

from typing import Any

import math
from pathlib import Path

from .style import pyplot

__all__ = ["dynamics_figure", "phase_figure"]


def dynamics_figure(scores: Any, path: Any, highlight: Any = ()) -> Path:
    """One panel per measure, one line per head against the step (``highlight``:
    ``(layer, head)`` drawn thick and labelled)."""
    plt = pyplot()
    measures = list(dict.fromkeys(scores["measure"]))
    cols = min(4, len(measures))
    rows = math.ceil(len(measures) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.6 * rows), squeeze=False)
    for ax, name in zip(axes.flat, measures):
        s = scores[scores["measure"] == name]
        for (layer, head), g in s.groupby(["layer", "head"]):
            g = g.sort_values("step")
            thick = (int(layer), int(head)) in set(highlight)
            ax.plot(
                g["step"],
                g["value"],
                lw=2.2 if thick else 0.8,
                alpha=1 if thick else 0.45,
                label=f"L{layer}H{head}" if thick else None,
            )
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
        if highlight:
            ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(measures) :]:
        ax.axis("off")
    fig.supxlabel("training step", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def phase_figure(scores: Any, icl: Any, heads: Any, path: Any, phase: Any = None) -> Path:
    """The in-context-learning score (nats, with its 95% interval) and the induction
    score of ``heads`` against the step; the interval where each moves most shaded."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    icl = icl.sort_values("step")
    ax.plot(icl["step"], icl["icl"], color="#c44e52", marker="o", ms=3, label="ICL score (late − early loss)")
    ax.fill_between(icl["step"], icl["ci_low"], icl["ci_high"], color="#c44e52", alpha=0.2)
    ax.set_ylabel("ICL score (nats)", color="#c44e52")
    ax.set_xlabel("training step")
    ax2 = ax.twinx()
    for layer, head in heads:
        s = scores[(scores["measure"] == "induction") & (scores["layer"] == layer) & (scores["head"] == head)]
        s = s.sort_values("step")
        ax2.plot(s["step"], s["value"], color="#4c72b0", marker="s", ms=3, label=f"induction score L{layer}H{head}")
    ax2.set_ylabel("induction score", color="#4c72b0")
    ax2.set_ylim(0, 1)
    if phase is not None:
        for r in phase.itertuples():
            ax.axvspan(r.from_step, r.to_step, color="#999", alpha=0.12)
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=7, loc="center right")
    ax.set_title("zoo training run: the induction phase change", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
