"""Ablate or patch a *set* of heads together.

Single-head sweeps (:mod:`probe.analyses.necessity.ablation`, :mod:`probe.analyses.necessity.patching`) miss what
redundant heads do: when several heads implement the same step, removing any one of
them changes little, removing all of them removes the step. Circuit analyses therefore
intervene on groups — e.g. every induction head at once (Olsson et al. 2022) or the
name-mover heads of Wang et al. (2023).

* :func:`ablate_group` — zero- or mean-ablate all heads of the group in the same
  forward; per-example ``delta = ablated − clean`` with a bootstrap CI.
* :func:`patch_group` — for pairs of clean/corrupted inputs, write every head of the
  group's clean output into the corrupted run; ``restored = (patched − corrupted) /
  (clean − corrupted)`` with a bootstrap CI over pairs (ratio of means).

Both run one full forward per chunk and intervention with the same hooks as the
single-head tools (:class:`probe.interventions.heads.HeadIntervention`), so a group of one
head reproduces the single-head result exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch

from probe.analyses.necessity.ablation import check_heads, check_mode, position_kind_means, row_values, scorer
from probe.analyses.common.bootstrap import bootstrap_mean_ci
from probe.analyses.common.metrics import as_corpus
from probe.analyses.common.objective import Objective, given_objective
from probe.analyses.necessity.patching import corruption_gap, paired_batches, ratio_ci
from probe.analyses.necessity.sweep import clean_run, restart_path, sweep_batch, trim_lengths
from probe.errors import InputError

__all__ = ["GroupResult", "ablate_group", "patch_group"]


@dataclass(frozen=True)
class GroupResult:
    """One intervention on a group of heads.

    Attributes:
        heads: the ``(layer, head)`` pairs intervened on together.
        metric: the metric's name; kind: ``zero`` | ``mean`` | ``patch``.
        clean: ``[n]`` metric per example (per pair for ``patch``).
        intervened: ``[n]`` metric with the group ablated (or patched into the corrupted run).
        corrupted: ``[n]`` metric of the corrupted run (``patch`` only, else ``None``).
        effect: mean ``intervened − clean`` (ablation) or the restored fraction (patching);
        ci_low, ci_high: its bootstrap confidence interval.
    """

    heads: tuple
    metric: str
    kind: str
    clean: np.ndarray
    intervened: np.ndarray
    corrupted: Optional[np.ndarray]
    effect: float
    ci_low: float
    ci_high: float

    def summary(self) -> dict:
        """A flat dict (heads as ``"l.h+l.h"``), for tables and JSON."""
        out = {
            "heads": "+".join(f"{l}.{h}" for l, h in self.heads),
            "metric": self.metric,
            "kind": self.kind,
            "clean": float(self.clean.mean()),
            "intervened": float(self.intervened.mean()),
        }
        if self.corrupted is not None:
            out["corrupted"] = float(self.corrupted.mean())
        out.update(effect=self.effect, ci_low=self.ci_low, ci_high=self.ci_high)
        return out


def _need_heads(adapter, heads, stack):
    if not heads:
        raise InputError("give at least one (layer, head) to intervene on")
    return check_heads(adapter, heads, stack)


@torch.no_grad()
def ablate_group(
    adapter,
    corpus,
    heads: Sequence,
    objective: Objective,
    mode: str = "zero",
    *,
    batch_size: int = 16,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    stack: Optional[str] = None,
) -> GroupResult:
    """Ablate all ``heads`` at once and measure ``objective`` on every example.

    Args:
        heads: ``(layer, head)`` pairs, all removed in the same forward.
        metric, mode: as in :func:`probe.analyses.necessity.ablation.sweep_heads` (``mean``: the
            per-position-kind corpus mean of each head's output).

    Raises:
        ValueError: no heads, a head out of range, an unknown mode or a metric that does
            not apply.
    """
    corpus = as_corpus(corpus)
    objective = given_objective(objective, adapter, corpus)
    check_mode(mode)
    heads = _need_heads(adapter, heads, stack)
    means = position_kind_means(adapter, corpus, objective, batch_size, stack) if mode == "mean" else None
    n = len(corpus)
    clean, ablated = np.zeros(n), np.zeros(n)
    path = restart_path(adapter, stack)
    for idx, batch in objective.batches(adapter, corpus, batch_size, by_length=True):
        run = clean_run(adapter, objective.forward, batch, [], stack=stack, path=path)
        ref = objective.reference(run.output, batch)
        clean[idx] = objective.score(run.output, batch, ref).double().cpu().numpy()
        values = {} if means is None else {layer: row_values(means, layer, batch) for layer, _ in heads}
        r = sweep_batch(
            adapter,
            objective.forward,
            scorer(objective, ref),
            batch,
            run,
            [tuple(heads)],
            lambda j, layer: values.get(layer),  # noqa: B023 (this batch's)
            stack=stack,
            path=path,
            trim=trim_lengths(adapter, objective, batch),
        )
        ablated[idx] = r[0].double().cpu().numpy()
    low, high = bootstrap_mean_ci((ablated - clean)[None], n_boot=n_boot, confidence=confidence, seed=seed)
    return GroupResult(
        heads=tuple(heads),
        metric=objective.name,
        kind=mode,
        clean=clean,
        intervened=ablated,
        corrupted=None,
        effect=float((ablated - clean).mean()),
        ci_low=float(low[0]),
        ci_high=float(high[0]),
    )


@torch.no_grad()
def patch_group(
    adapter,
    clean,
    corrupted,
    heads: Sequence,
    objective: Objective,
    *,
    batch_size: int = 16,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    stack: Optional[str] = None,
) -> GroupResult:
    """Patch all ``heads``' clean outputs into the corrupted run at once.

    Args:
        clean, corrupted: paired corpora of equal size, each pair of equal token length.

    Raises:
        ValueError: as :func:`probe.analyses.necessity.patching.patch_heads` (unpaired inputs, a metric
            the corruption does not change), or no heads.
    """
    clean, corrupted = as_corpus(clean), as_corpus(corrupted)
    objective = given_objective(objective, adapter, clean)
    heads = _need_heads(adapter, heads, stack)
    n = len(clean)
    c_vals, k_vals, p_vals = np.zeros(n), np.zeros(n), np.zeros(n)
    path = restart_path(adapter, stack)
    layers = sorted({layer for layer, _ in heads})
    for idx, cb, kb in paired_batches(adapter, objective, clean, corrupted, batch_size):
        source = clean_run(adapter, objective.forward, cb, layers, stack=stack)  # the clean head outputs
        ref = objective.reference(source.output, cb)
        c_vals[idx] = objective.score(source.output, cb, ref).double().cpu().numpy()
        run = clean_run(adapter, objective.forward, kb, [], stack=stack, path=path)  # the run patched into
        k_vals[idx] = objective.score(run.output, kb, ref).double().cpu().numpy()
        r = sweep_batch(
            adapter,
            objective.forward,
            scorer(objective, ref),
            kb,
            run,
            [tuple(heads)],
            lambda j, layer: source.z[layer],  # noqa: B023 (this batch's)
            stack=stack,
            path=path,
        )
        p_vals[idx] = r[0].double().cpu().numpy()
    gap = corruption_gap(objective, c_vals, k_vals)
    low, high = ratio_ci(c_vals, k_vals, p_vals[None], n_boot, confidence, seed)
    return GroupResult(
        heads=tuple(heads),
        metric=objective.name,
        kind="patch",
        clean=c_vals,
        intervened=p_vals,
        corrupted=k_vals,
        effect=float((p_vals.mean() - k_vals.mean()) / gap),
        ci_low=float(low[0]),
        ci_high=float(high[0]),
    )
