"""Exact path patching between heads (Wang et al. 2022; Goldowsky-Dill et al. 2023).

For a clean input and its corrupted partner (same length), the effect of edge
``sender -> receiver.c`` is measured in two forwards, both on the clean input:

1. the sender's output is replaced by its corrupted output and **every other head is
   frozen** to its clean output (MLPs and LayerNorms recompute: the path runs through the
   residual stream and the MLPs between the two heads, as in Wang et al. 2022); the
   receiver's ``c`` input (its slice of the q/k/v projection output) is recorded. The
   same forward's objective is the effect of ``sender -> out`` (the sender reaching the
   output through the residual stream and MLPs, not through later heads).
2. the clean model runs with only that receiver input replaced by the recorded one;
   everything downstream recomputes.

Nothing is linearised (LayerNorm is recomputed in both runs), so this is exact for any
architecture with separate or GPT-2-fused q/k/v projections (post-LN encoders included).
Encoder-decoders (BART, T5) too: every head of every stack (encoder, decoder self- and
cross-attention) is frozen in step 1, so an encoder head's edge into a cross-attention's
keys runs through the rest of the encoder (MLPs, norms, the final encoder norm) only.
The effect is reported as the share of the corruption's total effect the path carries::

    effect = (m(path patched) − m(clean)) / (m(corrupted) − m(clean))

Batched: step 1 carries one row block per sender, step 2 one row block per edge.
Shapes: ``PathPatchingResult.per_example`` is ``[n_edges, n_pairs]`` (raw ``m − m(clean)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch
from probe.analyses.common.metrics import MetricBatch, as_corpus
from probe.analyses.common.objective import Objective, given_objective
from probe.analyses.necessity.patching import corruption_gap, paired_batches

from probe.errors import InputError
from probe.interventions.paths import HeadOutputOverride, ProjectionHooks, head_sites

from .edges import Edge, all_edges, check_edge, edge_row, grouped

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["MAX_ROWS", "PathPatchingResult", "chunks", "path_patch", "record_head_outputs", "repeat_ref"]

MAX_ROWS = 256


@dataclass(frozen=True)
class PathPatchingResult:
    """Per-edge effects.

    Attributes:
        table: ``edge, sender_layer, sender_head, receiver_layer, receiver_slot, channel,
            delta, effect`` (``delta`` the mean raw change of the objective, ``effect`` it
            divided by the corruption's total change).
        clean, corrupted: ``[n_pairs]`` objective per pair; per_example: ``[n_edges, n_pairs]``.
    """

    table: pd.DataFrame
    clean: np.ndarray
    corrupted: np.ndarray
    per_example: np.ndarray
    edges: tuple
    metric: str

    @property
    def gap(self) -> float:
        return float(self.corrupted.mean() - self.clean.mean())

    def to_frame(self) -> pd.DataFrame:
        return self.table.copy()


def record_head_outputs(
    adapter: ModelAdapter, objective: Objective, batch: MetricBatch, reference: Any = None
) -> tuple:
    """One forward of ``batch``: ``({layer: z [rows, seq, heads, dh]}, outputs)`` (no grad)."""
    z: dict = {}

    def keep(layer, value):
        z[layer] = value.detach().clone()

    with torch.no_grad(), HeadOutputOverride(adapter, keep):
        out = objective.forward(adapter, batch)
    return z, out


def chunks(items: list, size: int) -> list:
    """``items`` in consecutive lists of at most ``size`` (at least 1)."""
    size = max(1, size)
    return [items[i : i + size] for i in range(0, len(items), size)]


def repeat_ref(ref: torch.Tensor | None, k: int) -> torch.Tensor | None:
    """A metric reference ``[rows, ...]`` stacked ``k`` times (as :meth:`MetricBatch.repeat`)."""
    return None if ref is None else ref.repeat(k, *([1] * (ref.dim() - 1)))


def _sender_runs(adapter, objective, cb, ref, z_clean, z_corr, layer: int, heads: list, record_from: int):
    """Step 1 for senders ``heads`` of ``layer``: ``(objective [k, b], {(l, c): [k·b, s, slots, dh]})``."""
    b, k = cb.rows, len(heads)
    big = cb.repeat(k)

    def freeze(l, z):
        if l < layer:
            return None
        new = z_clean[l].repeat(k, 1, 1, 1)
        if l == layer:
            for j, h in enumerate(heads):
                new[j * b : (j + 1) * b, :, h] = z_corr[l][:, :, h]
        return new

    layers = list(range(record_from, len(head_sites(adapter))))
    with torch.no_grad(), HeadOutputOverride(adapter, freeze), ProjectionHooks(adapter, layers, record=True) as rec:
        out = objective.forward(adapter, big)
    m = objective.score(out, big, repeat_ref(ref, k)).double().reshape(k, b)
    return m, rec.outputs


def _receiver_runs(adapter, objective, cb, ref, edges: list, sender_pos: dict, recorded: dict):
    """Step 2 for ``edges``: objective ``[len(edges), b]``."""
    b, k = cb.rows, len(edges)
    big = cb.repeat(k)
    patches: dict = {}
    for j, e in enumerate(edges):
        js = sender_pos[e.sender_head]
        value = recorded[(e.receiver_layer, e.channel)][js * b : (js + 1) * b, :, e.receiver_slot]
        rows = torch.arange(j * b, (j + 1) * b, device=value.device)
        patches.setdefault((e.receiver_layer, e.channel), []).append((rows, e.receiver_slot, value))
    layers = sorted({e.receiver_layer for e in edges})
    with torch.no_grad(), ProjectionHooks(adapter, layers, patches=patches):
        out = objective.forward(adapter, big)
    return objective.score(out, big, repeat_ref(ref, k)).double().reshape(k, b)


def path_patch(
    adapter: ModelAdapter,
    clean: Any,
    corrupted: Any,
    objective: Objective,
    edges: Sequence[Edge] | None = None,
    *,
    batch_size: int = 8,
    max_rows: int = MAX_ROWS,
    progress: bool = False,
) -> PathPatchingResult:
    """Exact path patching of ``edges`` (default: every edge of the head graph).

    Args:
        clean, corrupted: paired corpora (or text lists) of equal size, pairs of equal length.
        objective: the run's resolved :class:`probe.analyses.common.objective.Objective`.
        max_rows: rows per forward (senders or edges × pairs of a batch).

    Raises:
        ValueError: unpaired corpora, a pair of different lengths, an edge that does not
            exist or whose receiver is not after its sender, a corruption that does not
            change the objective.
    """
    clean, corrupted = as_corpus(clean), as_corpus(corrupted)
    objective = given_objective(objective, adapter, clean)
    edges = list(all_edges(adapter) if edges is None else [check_edge(adapter, e) for e in edges])
    if not edges:
        raise InputError("no edges to patch")
    index = {e: i for i, e in enumerate(edges)}
    n = len(clean)
    c_vals, k_vals = np.zeros(n), np.zeros(n)
    per = np.zeros((len(edges), n))
    by_sender_layer: dict = {}
    for e in edges:
        by_sender_layer.setdefault(e.sender_layer, {}).setdefault(e.sender_head, []).append(e)
    for idx, cb, kb in paired_batches(adapter, objective, clean, corrupted, batch_size, progress):
        b = cb.rows
        z_clean, out = record_head_outputs(adapter, objective, cb)
        ref = objective.reference(out, cb)
        m_clean = objective.score(out, cb, ref).double()
        z_corr, out_k = record_head_outputs(adapter, objective, kb)
        c_vals[idx] = m_clean.cpu().numpy()
        k_vals[idx] = objective.score(out_k, kb, ref).double().cpu().numpy()
        for layer, senders in sorted(by_sender_layer.items()):
            for heads in chunks(sorted(senders), max_rows // b):
                m, recorded = _sender_runs(adapter, objective, cb, ref, z_clean, z_corr, layer, heads, layer + 1)
                pos = {h: j for j, h in enumerate(heads)}
                for h in heads:
                    for e in senders[h]:
                        if e.to_output:
                            per[index[e], idx] = (m[pos[h]] - m_clean).cpu().numpy()
                inner = [e for h in heads for e in senders[h] if not e.to_output]
                for part in chunks(inner, max_rows // b):
                    mp = _receiver_runs(adapter, objective, cb, ref, part, pos, recorded)
                    for j, e in enumerate(part):
                        per[index[e], idx] = (mp[j] - m_clean).cpu().numpy()
    gap = -corruption_gap(objective, c_vals, k_vals)  # m(corrupted) − m(clean), refused when 0
    g = grouped(adapter)
    table = pd.DataFrame([edge_row(e, g) for e in edges])
    table["delta"] = per.mean(1)
    table["effect"] = per.mean(1) / gap
    return PathPatchingResult(
        table=table, clean=c_vals, corrupted=k_vals, per_example=per, edges=tuple(edges), metric=objective.name
    )
