"""Iterative head pruning by importance, against a random order (Michel et al. 2019).

At each step the least important ``step_fraction`` of all heads (among those still on)
are switched off (gate 0), importance being recomputed on the pruned model
(:func:`probe.analyses.necessity.importance.head_importance` with the current mask), and the metric is
measured on the pruned model (drift and loss always against the *unpruned* clean run).
The random baseline removes the same number of heads per step in a seeded random
order. Michel et al. find 20% (WMT) to 60% (SST-2) of heads prunable without a
noticeable loss.

Output: :class:`PruningResult` with a tidy ``table``: ``order, step, n_pruned,
fraction, metric, value, delta, pruned`` (``pruned``: the heads removed at that step,
``"layer:head"`` joined by spaces).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd
import torch

from probe.analyses.necessity.importance import head_importance
from probe.analyses.common.metrics import as_corpus, prepare
from probe.analyses.common.objective import Objective, given_objective
from probe.errors import InputError
from probe.interventions.heads import HeadGates

log = logging.getLogger(__name__)

__all__ = ["PruningResult", "pruning_curve", "masked_metric"]


@dataclass(frozen=True)
class PruningResult:
    """Metric along the pruning curves (see the module docstring).

    Attributes:
        table: one row per (order, step).
        clean: the unpruned model's mean metric.
        higher_is_better: direction of the metric.
    """

    table: pd.DataFrame
    clean: float
    metric: str
    higher_is_better: bool = False

    def to_frame(self) -> pd.DataFrame:
        return self.table.copy()

    def prunable(self, threshold: float, order: str = "importance") -> int:
        """How many heads go before the metric first worsens by more than ``threshold``
        (the largest ``n_pruned`` of the steps before the first that passes it)."""
        t = self.table[self.table["order"] == order].sort_values("step")
        worse = -t["delta"] if self.higher_is_better else t["delta"]
        over = np.flatnonzero(worse.to_numpy() > threshold)
        upto = t if over.size == 0 else t.iloc[: over[0]]
        return int(upto["n_pruned"].max()) if len(upto) else 0


@torch.no_grad()
def masked_metric(adapter, chunks, objective, mask: torch.Tensor, stack: Optional[str] = None) -> float:
    """Mean metric over prepared ``chunks`` with head gates ``mask`` ``[layers, heads]``."""
    total, n = 0.0, 0
    with HeadGates(adapter, mask.to(adapter.device), stack=stack):
        for ch in chunks:
            out = objective.forward(adapter, ch.batch)
            total += float(objective.score(out, ch.batch, ch.reference).double().sum())
            n += ch.batch.rows
    return total / max(n, 1)


def pruning_curve(
    adapter,
    corpus,
    objective: Objective,
    *,
    method: str = "auto",
    step_fraction: float = 0.1,
    max_fraction: float = 1.0,
    random_orders: int = 1,
    seed: int = 0,
    batch_size: int = 16,
    n_steps: int = 16,
    stack: Optional[str] = None,
    progress: bool = False,
) -> PruningResult:
    """Prune heads iteratively by importance and in random order; measure the metric.

    Args:
        method: importance method (``auto`` | ``gradient`` | ``ig``).
        step_fraction: fraction of all heads removed per step (Michel et al.: 0.1).
        max_fraction: stop once this fraction of heads is pruned.
        random_orders: number of random orders (each its own seed) as baseline.
        n_steps: integration steps when importance is ``ig``.

    Raises:
        ValueError: fractions outside (0, 1], a metric that does not apply, an unknown
            method.
    """
    from tqdm.auto import tqdm

    if not 0 < step_fraction <= 1 or not 0 < max_fraction <= 1:
        raise InputError(f"step_fraction and max_fraction must be in (0, 1], got {step_fraction}, {max_fraction}")
    corpus = as_corpus(corpus)
    objective = given_objective(objective, adapter, corpus)
    L, H = adapter.n_layers_of(stack), adapter.n_heads
    total = L * H
    per_step = max(1, int(round(step_fraction * total)))
    limit = min(total, int(math.floor(max_fraction * total + 1e-9)))
    chunks = prepare(adapter, corpus, objective, batch_size)
    clean = masked_metric(adapter, chunks, objective, torch.ones(L, H), stack)
    rows = []

    def record(order, step, mask, removed):
        value = masked_metric(adapter, chunks, objective, mask, stack)
        rows.append(
            {
                "order": order,
                "step": step,
                "n_pruned": int((mask == 0).sum()),
                "fraction": float((mask == 0).sum()) / total,
                "metric": objective.name,
                "value": value,
                "delta": value - clean,
                "pruned": " ".join(f"{l}:{h}" for l, h in removed),
            }
        )

    n_iter = -(-limit // per_step)
    mask = torch.ones(L, H)
    record("importance", 0, mask, [])
    for step in tqdm(range(1, n_iter + 1), disable=not progress, desc="pruning"):
        k = min(per_step, limit - int((mask == 0).sum()))
        alive = torch.nonzero(mask.flatten()).flatten()
        if k < alive.numel():
            imp = head_importance(
                adapter, corpus, objective, method, mask=mask, chunks=chunks, stack=stack, n_steps=n_steps
            )
            scores = torch.as_tensor(imp.scores).flatten()[alive]
            drop = alive[torch.argsort(scores, stable=True)[:k]]
        else:
            drop = alive
        mask = mask.clone()
        mask.view(-1)[drop] = 0
        record("importance", step, mask, [(int(i) // H, int(i) % H) for i in drop])
    for r in range(random_orders):
        order = np.random.default_rng(seed + r).permutation(total)
        name = "random" if random_orders == 1 else f"random-{r}"
        mask = torch.ones(L, H)
        record(name, 0, mask, [])
        for step in range(1, n_iter + 1):
            picked = order[(step - 1) * per_step : min(step * per_step, limit)]
            mask = mask.clone()
            mask.view(-1)[torch.as_tensor(picked)] = 0
            record(name, step, mask, [(int(i) // H, int(i) % H) for i in picked])
    return PruningResult(
        table=pd.DataFrame(rows), clean=clean, metric=objective.name, higher_is_better=objective.higher_is_better
    )
