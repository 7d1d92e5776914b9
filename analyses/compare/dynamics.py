"""A training run's checkpoints: every score against the step, and where they change.

Olsson et al. (2022) find induction heads forming in a *phase change*: within a short
window of training the in-context-learning score (loss late in the context minus early)
drops and the induction heads' prefix-matching score rises, together. Here, for the
checkpoints of one run measured on the same inputs, :func:`scores_by_step` tabulates each
head's mean score per step, :func:`icl_by_step` the in-context-learning score with its
bootstrap interval, and :func:`phase_change` the interval of steps where each moves most.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pandas as pd

from probe.analyses.common.bootstrap import bootstrap_mean_ci
from probe.errors import InputError

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["scores_by_step", "icl_by_step", "phase_change", "top_heads"]


def _step(m: Any, i: int) -> int:
    return int(m.step) if m.step is not None else i


def scores_by_step(measurements: Sequence) -> pd.DataFrame:
    """``checkpoint, step, layer, head, measure, value``: each head's mean over examples of
    every measure, per checkpoint (step: the card's, else the checkpoint's position)."""
    rows = []
    for i, m in enumerate(measurements):
        for name, v in m.values.items():
            with np.errstate(invalid="ignore"):
                means = np.nanmean(v, 0) if np.isfinite(v).any() else np.full(v.shape[1], np.nan)
            for k, value in enumerate(means):
                rows.append((m.label, _step(m, i), int(m.layers[k // m.n_heads]), k % m.n_heads, name, float(value)))
    return pd.DataFrame(rows, columns=["checkpoint", "step", "layer", "head", "measure", "value"])


def icl_by_step(measurements: Sequence, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """``checkpoint, step, icl, ci_low, ci_high, n``: the in-context-learning score
    (:func:`.measure.icl_scores`, nats) per checkpoint that has one."""
    rows = []
    for i, m in enumerate(measurements):
        if m.icl is None:
            continue
        low, high = bootstrap_mean_ci(m.icl, n_boot=n_boot, seed=seed)
        rows.append((m.label, _step(m, i), float(m.icl.mean()), float(low), float(high), len(m.icl)))
    return pd.DataFrame(rows, columns=["checkpoint", "step", "icl", "ci_low", "ci_high", "n"])


def top_heads(scores: pd.DataFrame, measure: str, k: int = 1) -> list:
    """The ``k`` heads with the highest ``measure`` at the last step: ``[(layer, head)]``."""
    last = scores[(scores["measure"] == measure) & (scores["step"] == scores["step"].max())]
    best = last.sort_values("value", ascending=False).head(k)
    return [(int(r.layer), int(r.head)) for r in best.itertuples()]


def phase_change(steps: Sequence[int] | np.ndarray, series: Mapping[str, ArrayLike]) -> pd.DataFrame:
    """Where each series moves most between consecutive checkpoints.

    Args:
        steps: ``[C]`` the checkpoints' steps, increasing.
        series: name -> ``[C]`` values at those steps.

    Returns:
        ``series, from_step, to_step, change, share``: per series, the interval with the
        largest ``|change|`` and its share of the series' total absolute movement.

    Raises:
        InputError: fewer than 3 checkpoints, or steps that do not increase.
    """
    steps = np.asarray(steps, dtype=np.float64)
    if len(steps) < 3:
        raise InputError(f"a phase change needs 3 or more checkpoints of one run, got {len(steps)}")
    if np.any(np.diff(steps) <= 0):
        raise InputError(f"the checkpoints' steps must increase, got {steps.astype(int).tolist()}")
    rows = []
    for name, values in series.items():
        d = np.diff(np.asarray(values, dtype=np.float64))
        j = int(np.nanargmax(np.abs(d)))
        total = float(np.nansum(np.abs(d)))
        rows.append((name, int(steps[j]), int(steps[j + 1]), float(d[j]), float(abs(d[j]) / total) if total else 0.0))
    return pd.DataFrame(rows, columns=["series", "from_step", "to_step", "change", "share"])
