"""Integrated gradients that are right before they are compared: the completeness gate.

IG's attributions sum to ``f(x) − f(x')`` (completeness, Sundararajan et al. 2017, their
Proposition 1); the Riemann/Gauss–Legendre approximation misses it by captum's
convergence delta. :func:`gate_ig` re-attributes every example whose relative error
``|delta| / |f(x) − f(x')|`` exceeds :data:`TOLERANCE` with twice the steps, then twice
again, up to :data:`MAX_STEPS_FACTOR` × the steps asked for; an example still beyond it
is excluded from every comparison with IG and counted (:class:`IGGate`), never used.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter
    from .attributions import Attributions

__all__ = ["TOLERANCE", "MAX_STEPS_FACTOR", "IGGate", "gate_ig", "relative_errors"]

#: largest relative completeness error an example may have to enter a verdict
TOLERANCE = 0.01
#: the most steps tried, as a multiple of the steps asked for
MAX_STEPS_FACTOR = 8


@dataclass(frozen=True)
class IGGate:
    """What the gate did. ``passed``: indices of examples within :data:`TOLERANCE`;
    ``excluded``: the others; ``steps``: per example, the steps its IG was computed with;
    ``errors``: per example, the final relative error; ``start``: the steps every example
    was first computed with."""

    passed: tuple
    excluded: tuple
    steps: tuple
    errors: tuple
    start: int = 0

    def to_dict(self) -> dict:
        err = np.asarray(self.errors, dtype=np.float64)
        used = err[list(self.passed)] if self.passed else np.array([np.nan])
        return {
            "tolerance": TOLERANCE,
            "n": len(self.errors),
            "excluded": len(self.excluded),
            "excluded_share": len(self.excluded) / max(1, len(self.errors)),
            "start_steps": self.start,
            "max_steps": int(max(self.steps)) if self.steps else 0,
            "median_steps": float(np.median(self.steps)) if self.steps else 0.0,
            "steps_counts": {int(k): int(v) for k, v in zip(*np.unique(self.steps, return_counts=True))},
            "max_relative_error_used": float(np.nanmax(used)) if self.passed else None,
        }


def relative_errors(attrs: Attributions) -> np.ndarray:
    """``[n]`` ``|delta| / |f(x) − f(x')|`` per example of :class:`.attributions.Attributions`."""
    return np.array(attrs.completeness()["relative_error"], dtype=np.float64)  # a writable copy


def gate_ig(adapter: ModelAdapter, target: Any, encodings: Any, attrs: Any, n_steps: int, **kw: Any) -> tuple:
    """``(attrs, IGGate)``: ``attrs`` with the IG of every example beyond
    :data:`TOLERANCE` recomputed with more steps (doubling, up to
    :data:`MAX_STEPS_FACTOR` × ``n_steps``); ``kw`` go to :func:`.attributions.attribute`."""
    from .attributions import attribute

    examples = list(attrs.examples)
    err = relative_errors(attrs)
    steps = [n_steps] * len(examples)
    s = n_steps
    while s < MAX_STEPS_FACTOR * n_steps:
        todo = [i for i, e in enumerate(err) if not e <= TOLERANCE]
        if not todo:
            break
        s *= 2
        again = attribute(adapter, target, [encodings[i] for i in todo], methods=("ig",), n_steps=s, **kw)
        for i, ex in zip(todo, again.examples):
            scores = dict(examples[i].scores, ig=ex.scores["ig"])
            examples[i] = replace(examples[i], scores=scores, ig_delta=ex.ig_delta, baseline_value=ex.baseline_value)
            steps[i] = s
            gap = ex.value - ex.baseline_value
            err[i] = abs(ex.ig_delta) / max(abs(gap), 1e-12)
    passed = tuple(i for i, e in enumerate(err) if e <= TOLERANCE)
    excluded = tuple(i for i in range(len(err)) if i not in set(passed))
    out = replace(attrs, examples=tuple(examples), settings=dict(attrs.settings, ig_steps_per_example=steps))
    errors = tuple(float(e) for e in err)
    return out, IGGate(passed=passed, excluded=excluded, steps=tuple(steps), errors=errors, start=n_steps)
