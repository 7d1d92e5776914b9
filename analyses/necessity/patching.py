"""Activation patching of single heads: the causal test of circuit analysis.

For pairs of clean and corrupted inputs of the same length, run the corrupted input
with one head's output replaced by its output on the clean input, and report the
restored fraction of the metric (Vig et al. 2020; Meng et al. 2022; Wang et al. 2023)::

    restored = (patched − corrupted) / (clean − corrupted)

1 means the head alone carries what the corruption removed; 0 means it carries none
of it. The metric's targets (labels, the clean embedding for drift) come from the
clean input. Batched like :mod:`probe.analyses.necessity.ablation`: one forward per layer and chunk
carries every head's patch (a row per head) and restarts at the patched layer from the
corrupted run's cached residual stream.

The bootstrap CI resamples pairs and recomputes the ratio of means.
"""

from __future__ import annotations

import logging
import random
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from probe.analyses.necessity.ablation import check_heads, run_rows
from probe.analyses.common.bootstrap import resample_counts
from probe.analyses.common.metrics import as_corpus
from probe.analyses.common.objective import Objective, given_objective
from probe.tracing.restart import ResidualCache, supports_restart
from probe.errors import InputError, NotApplicable
from probe.interventions.heads import HeadOutputRecorder

log = logging.getLogger(__name__)

__all__ = ["PatchingResult", "patch_heads", "corrupt_zoo", "ratio_ci"]

COLUMNS = ["layer", "head", "metric", "clean", "corrupted", "patched", "restored", "ci_low", "ci_high"]


@dataclass(frozen=True)
class PatchingResult:
    """Per-head restored fractions.

    Attributes:
        table: ``layer, head, metric, clean, corrupted, patched, restored, ci_low, ci_high``.
        clean, corrupted: ``[n_pairs]`` metric per pair; patched: ``[n_heads, n_pairs]``.
        path: ``layer-restart`` or ``full forward``.
    """

    table: pd.DataFrame
    clean: np.ndarray
    corrupted: np.ndarray
    patched: np.ndarray
    heads: tuple
    path: str

    def to_frame(self) -> pd.DataFrame:
        return self.table.copy()


def corrupt_zoo(task: str, examples: Sequence[dict], seed: int = 0) -> list:
    """Corrupted partners for zoo evaluation examples.

    ``induction``: the first copy of the prefix is replaced by distinct tokens that do
    not occur in it, so the second copy (same tokens, same targets) can no longer be
    copied from context.

    Raises:
        ValueError: for a task without a corruption.
    """
    if task != "induction":
        raise InputError(f"no built-in corruption for zoo:{task}; give corrupted inputs (--corrupted-file)")
    from probe.models.zoo import induction

    rng = random.Random(seed)
    out = []
    for e in examples:
        L = e["prefix_len"]
        prefix = e["words"][:L]
        fresh = rng.sample([w for w in induction.VOCAB if w not in prefix], L)
        words = fresh + prefix
        out.append(dict(e, text=" ".join(words), words=words))
    return out


def ratio_ci(clean, corrupted, patched, n_boot, confidence, seed):
    """Percentile interval of the restored fraction over resampled pairs, per head (NaN
    from a single pair: no interval)."""
    n = clean.shape[0]
    if n < 2:
        nan = np.full(patched.shape[0], np.nan)
        return nan, nan.copy()
    counts = resample_counts(n, n_boot, seed)
    c, k = counts @ clean / n, counts @ corrupted / n  # [n_boot]
    p = patched @ counts.T / n  # [heads, n_boot]
    with np.errstate(divide="ignore", invalid="ignore"):
        r = (p - k[None]) / (c - k)[None]
    alpha = (1 - confidence) / 2
    return np.nanquantile(r, alpha, axis=1), np.nanquantile(r, 1 - alpha, axis=1)


def _check_pair(cb, kb, idx: Sequence[int]) -> None:
    """Raise naming the first pair of ``idx`` whose clean and corrupted batches differ in length."""
    bad = torch.nonzero(cb.lengths != kb.lengths).flatten()
    if bad.numel() or cb.inputs["input_ids"].shape != kb.inputs["input_ids"].shape:
        r = int(bad[0]) if bad.numel() else 0
        raise InputError(
            f"pair {idx[r]}: clean and corrupted inputs tokenize to different lengths "
            f"({int(cb.lengths[r])} vs {int(kb.lengths[r])}); "
            "patching needs position-aligned pairs"
        )


def paired_batches(adapter, objective, clean, corrupted, batch_size: int, progress: bool = False):
    """Yield ``(indices, clean_batch, corrupted_batch)`` over paired corpora; the corrupted
    batch carries the clean one's targets (``aux``), so the metric scores both against
    the clean answer.

    Raises:
        ValueError: corpora of different sizes, or a pair of different token lengths.
    """
    from tqdm.auto import tqdm

    from probe.analyses.common.batch import by_one_length

    if len(clean) != len(corrupted):
        raise InputError(f"{len(clean)} clean and {len(corrupted)} corrupted inputs: give them in pairs")
    n = len(clean)
    batches = [list(range(s, min(n, s + batch_size))) for s in range(0, n, batch_size)]
    for idx in tqdm(by_one_length(adapter, batches, clean.texts), disable=not progress, desc="patching"):
        cb = objective.make_batch(adapter, clean, idx)
        kb = objective.make_batch(adapter, corrupted, idx)
        _check_pair(cb, kb, idx)
        yield idx, cb, replace(kb, aux=cb.aux)


def corruption_gap(objective, clean: np.ndarray, corrupted: np.ndarray) -> float:
    """``mean(clean) − mean(corrupted)``; raises when it is 0 (restored fraction undefined)."""
    gap = clean.mean() - corrupted.mean()
    if abs(gap) < 1e-12:
        raise NotApplicable(
            f"the corruption does not change {objective.name} (clean = corrupted = "
            f"{clean.mean():.4g}): the restored fraction is undefined"
        )
    return float(gap)


@torch.no_grad()
def patch_heads(
    adapter,
    clean,
    corrupted,
    objective: Objective,
    heads: Optional[Sequence] = None,
    *,
    batch_size: int = 8,
    restart: bool = True,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    stack: Optional[str] = None,
    progress: bool = False,
) -> PatchingResult:
    """Patch each head's clean output into the corrupted run, pair by pair.

    Args:
        clean, corrupted: paired corpora (or lists of texts) of equal size; each pair
            must tokenize to the same length.
        objective: as in :func:`probe.analyses.necessity.ablation.sweep_heads`.

    Raises:
        ValueError: corpora of different sizes, a pair of different token lengths
            (naming it), a metric that does not apply, a head out of range, or a metric
            that the corruption does not change (restored fraction undefined).
    """
    clean, corrupted = as_corpus(clean), as_corpus(corrupted)
    objective = given_objective(objective, adapter, clean)
    heads = check_heads(adapter, heads, stack)
    use_restart = restart and supports_restart(adapter, stack)
    by_layer: dict[int, list] = {}
    for j, (layer, head) in enumerate(heads):
        by_layer.setdefault(layer, []).append((j, head))
    n = len(clean)
    c_vals, k_vals, p_vals = np.zeros(n), np.zeros(n), np.zeros((len(heads), n))
    for idx, cb, kb in paired_batches(adapter, objective, clean, corrupted, batch_size, progress):
        with HeadOutputRecorder(adapter, stack=stack) as rec:
            out = objective.forward(adapter, cb)
        ref = objective.reference(out, cb)
        c_vals[idx] = objective.score(out, cb, ref).double().cpu().numpy()
        with ExitStack() as ctx:
            cache: Any = (
                ctx.enter_context(ResidualCache(adapter, stack)) if use_restart else None
            )  # None unless restarting
            out = objective.forward(adapter, kb)
        k_vals[idx] = objective.score(out, kb, ref).double().cpu().numpy()
        for layer, items in by_layer.items():
            residual = cache.inputs[layer] if use_restart else None
            s = run_rows(adapter, objective, kb, ref, layer, [h for _, h in items], rec.outputs[layer], residual, stack)
            p_vals[np.ix_([j for j, _ in items], idx)] = s.double().cpu().numpy()
    restored = (p_vals.mean(1) - k_vals.mean()) / corruption_gap(objective, c_vals, k_vals)
    low, high = ratio_ci(c_vals, k_vals, p_vals, n_boot, confidence, seed)
    table = pd.DataFrame(
        {
            "layer": [l for l, _ in heads],
            "head": [h for _, h in heads],
            "metric": objective.name,
            "clean": c_vals.mean(),
            "corrupted": k_vals.mean(),
            "patched": p_vals.mean(1),
            "restored": restored,
            "ci_low": low,
            "ci_high": high,
        },
        columns=COLUMNS,
    )
    return PatchingResult(
        table=table,
        clean=c_vals,
        corrupted=k_vals,
        patched=p_vals,
        heads=tuple(heads),
        path="layer-restart" if use_restart else "full forward",
    )
