"""Write a :class:`probe.analyses.compare.run.Comparison`: tidy CSVs, ``compare.json``,
the figures of a run, and the side-by-side page (:mod:`.compare_page`)."""

from __future__ import annotations

from typing import Any

import json
from pathlib import Path

from probe.app.registry import jsonable

__all__ = ["write_comparison"]


def write_comparison(comparison: Any, directory: Any) -> list:
    """Write every table, the summary, the figures and ``compare.html`` into
    ``directory``; returns the paths."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    c = comparison
    tables = {"checkpoints": c.checkpoints, "changes": c.changes, "heads": c.heads, "scores": c.scores}
    if len(c.icl):
        tables["icl"] = c.icl
    if c.phase is not None:
        tables["phase"] = c.phase
    if c.attribution:
        import pandas as pd

        tables["attribution"] = pd.concat(
            [r.table.assign(**{"from": a, "to": b}) for (a, b), r in c.attribution.items()], ignore_index=True
        )
    paths = []
    for name, frame in tables.items():
        frame.to_csv(d / f"{name}.csv", index=False)
        paths.append(d / f"{name}.csv")
    (d / "compare.json").write_text(json.dumps(c.summary(), indent=2, default=jsonable) + "\n")
    paths.append(d / "compare.json")
    figures = []
    if len(c.checkpoints) >= 3:
        from .compare_figures import dynamics_figure, phase_figure

        dynamics_figure(c.scores, d / "dynamics.png", highlight=c.induction_heads)
        figures.append(("dynamics.png", "every score of every head against the step"))
        if len(c.icl) and c.induction_heads:
            phase_figure(c.scores, c.icl, c.induction_heads, d / "phase.png", phase=c.phase)
            figures.append(("phase.png", "ICL score and the induction head's score against the step"))
    from .compare_page import write_compare_page

    paths.extend(d / f for f, _ in figures)
    paths.append(write_compare_page(c, d / "compare.html", figures))
    return paths
