"""Ablation metric values as an accumulator: a sweep split over workers, merged.

Each example's clean and ablated metric values depend on that example alone
(:func:`probe.analyses.necessity.ablation.sweep_values`), so a corpus split in blocks
(Ray workers, :mod:`probe.app.engine`) gives the same per-example values block by block;
:class:`AblationSums` collects them by corpus index and returns the
:class:`~probe.analyses.necessity.ablation.SweepResult` of the whole corpus, bootstrap
intervals included (Michel et al. 2019's single-head ablation).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from probe.analyses.necessity.ablation import SweepResult, sweep_result
from probe.errors import InputError

__all__ = ["AblationSums"]


class AblationSums:
    """Per-example metric values of a sweep, filled part by part (the accumulator of
    :mod:`probe.analyses.common.accumulate` for ablation): ``add(indices, clean,
    ablated)``, ``merge(other)``, ``result()`` → the :class:`SweepResult` that
    :func:`sweep_heads` returns on the whole corpus. The bootstrap needs every example's
    value, so memory is ``n_heads × n_examples`` floats (8 GB for 1,024 heads × 10⁶
    examples; the sums ``Σ delta`` alone are in ``delta_sums``).
    """

    def __init__(
        self, heads: Sequence, mode: str, metric_name: str, n_boot: int = 1000, confidence: float = 0.95, seed: int = 0
    ):
        self.heads = [tuple(int(x) for x in h) for h in heads]
        self.mode, self.metric_name = mode, metric_name
        self.n_boot, self.confidence, self.seed = n_boot, confidence, seed
        self.values: dict = {}  # corpus index -> (clean, ablated [n_heads])
        self.path = ""

    def add(self, indices: Sequence[int], clean: np.ndarray, ablated: np.ndarray, path: str = "") -> None:
        for k, i in enumerate(indices):
            self.values[int(i)] = (float(clean[k]), np.asarray(ablated[:, k], dtype=np.float64))
        self.path = self.path or path

    def update(self, layer, maps, meta) -> None:
        raise ValueError(
            "ablation values come from forwards with interventions, not from captured maps; "
            "fill AblationSums with add()"
        )

    def merge(self, other: "AblationSums") -> "AblationSums":
        if other.heads != self.heads or (other.mode, other.metric_name) != (self.mode, self.metric_name):
            raise ValueError("cannot merge ablation values of other heads, mode or metric")
        self.values.update(other.values)
        self.path = self.path or other.path
        return self

    @property
    def delta_sums(self) -> np.ndarray:
        """``Σ (ablated − clean)`` per head over the examples added so far."""
        return sum((a - c for c, a in self.values.values()), np.zeros(len(self.heads)))

    def result(self) -> SweepResult:
        """Raises ValueError without examples."""
        if not self.values:
            raise InputError("no ablation values: no example was swept")
        order = sorted(self.values)
        clean = np.array([self.values[i][0] for i in order])
        ablated = np.stack([self.values[i][1] for i in order], 1)
        return sweep_result(
            self.heads, clean, ablated, self.mode, self.metric_name, self.path, self.n_boot, self.confidence, self.seed
        )
