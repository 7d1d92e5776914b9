"""Fine-tune attribution: which heads' changes explain the change in the objective.

For checkpoints A (e.g. the base model) and B (its fine-tune) on the same inputs, each
head's output (``blocks.{l}.attn.hook_z``, ``[batch, pos, head, d_head]``) is patched from
A's run into B's, one head at a time, and B's objective measured (activation patching,
Meng et al. 2022, across models instead of across inputs: one edit of the one trace,
:class:`probe.tracing.edits.Patch`). Per example ``e`` and head ``h``::

    effect[e, h]  = score(B with h from A) − score(B)
    total[e]      = score(A) − score(B)               (the change to explain, A's side)
    explained[h]  = mean_e effect[e, h] / mean_e total[e]

``explained = 1``: that head's output alone turns B back into A on the objective; the
heads a fine-tune rewired carry most of it. Scores are the objective's raw scores
(:mod:`probe.analyses.common.metrics`; for ``embedding-drift``, the drift from B's own
embedding, so ``score(B) = 0``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from probe.analyses.common.bootstrap import bootstrap_mean_ci
from probe.errors import InputError

if TYPE_CHECKING:
    from probe.analyses.common.objective import Objective
    from probe.models.adapter import ModelAdapter

__all__ = ["AttributionResult", "attribute_change"]


@dataclass(frozen=True)
class AttributionResult:
    """Per-head attribution of the objective's change from B back to A.

    Attributes:
        table: ``layer, head, effect, ci_low, ci_high, explained`` (effect: the mean
            score change of B with the head patched from A, with its bootstrap interval
            over examples; explained: its share of ``total``), largest ``|effect|`` first.
        total: the mean of ``score(A) − score(B)``; ``total_ci``: its interval.
        score_a, score_b: the mean scores; ``objective``: the objective's name.
        effects: ``[examples, L·H]`` per-example effects (heads layer-major).
    """

    table: pd.DataFrame
    total: float
    total_ci: tuple
    score_a: float
    score_b: float
    objective: str
    effects: np.ndarray

    def to_frame(self) -> pd.DataFrame:
        return self.table.copy()


def _z_sites(adapter: ModelAdapter) -> list[str]:
    return [f"blocks.{layer}.attn.hook_z" for layer in range(adapter.n_layers)]


@torch.no_grad()
def attribute_change(
    adapter_a: ModelAdapter,
    adapter_b: ModelAdapter,
    corpus: Any,
    objective: Objective,
    *,
    batch_size: int = 8,
    n_boot: int = 1000,
    seed: int = 0,
) -> AttributionResult:
    """Patch each head's output from ``adapter_a`` into ``adapter_b`` on ``corpus`` and
    measure the objective (module docstring).

    Raises:
        InputError: checkpoints of different shape, an empty corpus.
        NotApplicable: an objective that does not fit the model.
    """
    from probe.analyses.common.objective import given_objective

    if (adapter_a.n_layers, adapter_a.n_heads) != (adapter_b.n_layers, adapter_b.n_heads):
        raise InputError(
            f"{adapter_a.name} has {adapter_a.n_layers}×{adapter_a.n_heads} heads, {adapter_b.name} "
            f"{adapter_b.n_layers}×{adapter_b.n_heads}: attribution patches head for head"
        )
    if not len(corpus):
        raise InputError("no examples to attribute on")
    obj = given_objective(objective, adapter_b, corpus)
    score_a, score_b, patched = _patched_scores(adapter_a, adapter_b, corpus, obj, batch_size)
    L, H = adapter_b.n_layers, adapter_b.n_heads
    effects = patched - score_b[:, None]
    total = score_a - score_b
    low, high = bootstrap_mean_ci(effects.T, n_boot=n_boot, seed=seed)
    t_low, t_high = bootstrap_mean_ci(total, n_boot=n_boot, seed=seed)
    mean_total = float(total.mean())
    effect = effects.mean(0)
    table = pd.DataFrame(
        {
            "layer": np.repeat(np.arange(L), H),
            "head": np.tile(np.arange(H), L),
            "effect": effect,
            "ci_low": low,
            "ci_high": high,
            "explained": effect / mean_total if abs(mean_total) > 1e-12 else np.nan,
        }
    )
    table = table.reindex(table["effect"].abs().sort_values(ascending=False, kind="stable").index)
    return AttributionResult(
        table=table.reset_index(drop=True),
        total=mean_total,
        total_ci=(float(t_low), float(t_high)),
        score_a=float(score_a.mean()),
        score_b=float(score_b.mean()),
        objective=getattr(obj, "spec", obj.name),
        effects=effects,
    )


def _patched_scores(
    adapter_a: ModelAdapter, adapter_b: ModelAdapter, corpus: Any, objective: Objective, batch_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(score_a [n], score_b [n], patched [n, layers·heads])``: the objective of each
    example on either checkpoint, and on ``adapter_b`` with one head's output taken from
    ``adapter_a``."""
    from probe.tracing.edits import Patch
    from probe.tracing.trace_context import Trace

    L, H = adapter_b.n_layers, adapter_b.n_heads
    n = len(corpus)
    score_a, score_b = np.zeros(n), np.zeros(n)
    patched = np.zeros((n, L * H))
    sites = _z_sites(adapter_b)
    for idx, batch in objective.batches(adapter_b, corpus, batch_size):
        with Trace(adapter_a, read=sites) as tr:
            out_a = objective.forward(adapter_a, batch)
        out_b = objective.forward(adapter_b, batch)
        ref = objective.reference(out_b, batch)
        score_b[idx] = objective.score(out_b, batch, ref).double().cpu().numpy()
        score_a[idx] = objective.score(out_a, batch, ref).double().cpu().numpy()
        for layer in range(L):
            z = tr.cache[sites[layer]]  # [batch, pos, head, d_head]
            for h in range(H):
                edit = {sites[layer]: Patch(value=z[:, :, h].clone(), head=h)}
                with Trace(adapter_b, edit=edit):
                    out = objective.forward(adapter_b, batch)
                patched[idx, layer * H + h] = objective.score(out, batch, ref).double().cpu().numpy()
    return score_a, score_b, patched
