"""Edge attribution patching (EAP, Syed et al. 2023) and EAP with integrated gradients
(EAP-IG, Hanna et al. 2024): a first-order estimate of every edge's path-patching effect
from a few forward and backward passes.

The exact effect of edge ``s -> r.c`` (:mod:`.path_patching`) changes the receiver input
``x_rc`` by ``Δx_rc ≈ J_rc,s Δz_s`` (``Δz_s = z_s^corr − z_s^clean``, ``J`` the Jacobian
of the receiver input with respect to the sender's output with all other heads frozen:
through the residual stream, LayerNorms and MLPs) and the objective by
``g_rc · Δx_rc`` (``g_rc = ∂m/∂x_rc`` in the clean model). So::

    score(s -> r.c) = Δz_s · J_rc,sᵀ g_rc

Pass 1 computes every ``g_rc`` at once (one backward); pass 2 computes every ``J_rc,sᵀ
g_rc`` at once: one row block per receiver, heads frozen to ``z_clean + δ`` with ``δ = 0``
a leaf, the block's objective ``g_rc · x_rc`` (the output's block: ``g_out · x_out``, ``x_out``
the final representation, :func:`probe.interventions.paths.final_site`), one
backward; ``∂/∂δ_s`` of block ``rc`` is ``J_rc,sᵀ g_rc`` for all senders. On a model whose
residual stream is a plain sum (no MLPs, no LayerNorm) the estimate is exact in ``J`` and
first order only in ``g``.

EAP-IG replaces ``g_rc`` by its mean over ``steps`` inputs whose token embeddings
interpolate from the corrupted to the clean ones (``α = k/steps``, ``k = 1..steps``, the
Riemann sum of Hanna et al. 2024); ``J`` stays at the clean input. Scores are divided by
the corruption's total change, as the exact effects are.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch
from probe.analyses.common.metrics import as_corpus
from probe.analyses.common.objective import Objective, given_objective
from probe.analyses.necessity.patching import corruption_gap, paired_batches

from probe.errors import InputError
from probe.interventions.paths import (
    EmbeddingMix,
    EmbeddingRecorder,
    FinalRepresentation,
    HeadOutputOverride,
    ProjectionHooks,
)

from .edges import OUTPUT, all_edges, edge_row, grouped, receivers_of
from .path_patching import MAX_ROWS, chunks, record_head_outputs

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["METHODS", "AttributionResult", "edge_attribution"]

METHODS = ("eap", "eap-ig")


@dataclass(frozen=True)
class AttributionResult:
    """Per-edge scores: ``table`` as :class:`.path_patching.PathPatchingResult`'s with
    ``score`` (raw, mean over pairs) and ``effect`` (score / corruption's change)."""

    table: pd.DataFrame
    clean: np.ndarray
    corrupted: np.ndarray
    edges: tuple
    method: str
    metric: str
    passes: int

    def to_frame(self) -> pd.DataFrame:
        return self.table.copy()


def _embeddings(adapter, objective, batch) -> torch.Tensor:
    with torch.no_grad(), EmbeddingRecorder(adapter) as rec:
        objective.forward(adapter, batch)
    assert rec.value is not None  # the forward ran the embedding
    return rec.value


def _receiver_grads(adapter, objective, cb, kb, ref, layers: list, method: str, steps: int) -> dict:
    """``{(layer, c): ∂m/∂x [b, s, slots, dh]}`` (EAP: at clean; EAP-IG: mean over the path)."""
    alphas = [1.0] if method == "eap" else [k / steps for k in range(1, steps + 1)]
    mix = None
    if method == "eap-ig":
        mix = EmbeddingMix(adapter, _embeddings(adapter, objective, kb), _embeddings(adapter, objective, cb))
    total: dict = {}
    for a in alphas:
        with torch.enable_grad(), ExitStack() as stack:
            if mix is not None:
                mix.alpha = a
                stack.enter_context(mix)
            rec = stack.enter_context(ProjectionHooks(adapter, layers, record=True, keep_graph=True))
            fin = stack.enter_context(FinalRepresentation(adapter))
            out = objective.forward(adapter, cb)
            m = objective.score(out, cb, ref).sum()
            keys = list(rec.outputs) + [OUTPUT]
            tensors = [rec.outputs[k] for k in keys[:-1]] + [fin.value]
            grads = torch.autograd.grad(m, tensors, allow_unused=True)
        for k, t, g in zip(keys, tensors, grads):
            g = torch.zeros_like(t) if g is None else g.detach()
            total[k] = total.get(k, 0) + g / len(alphas)
    return total


def _jacobian_pass(adapter, objective, cb, ref, z_clean, receivers: list, grads: dict):
    """``{receiver: {layer: ∂(the block's linearised objective)/∂δ [b, s, heads, dh]}}`` for ``receivers``."""
    b, k = cb.rows, len(receivers)
    big = cb.repeat(k)
    deltas = {
        l: torch.zeros((k * b,) + tuple(z.shape[1:]), dtype=z.dtype, device=z.device, requires_grad=True)
        for l, z in z_clean.items()
    }

    def frozen(l, z):
        return z_clean[l].repeat(k, 1, 1, 1) + deltas[l]

    layers = sorted({l for l, _, c in receivers if c != OUTPUT})
    with torch.enable_grad():
        with (
            HeadOutputOverride(adapter, frozen),
            FinalRepresentation(adapter) as fin,
            ProjectionHooks(adapter, layers, record=True, keep_graph=True) as rec,
        ):
            objective.forward(adapter, big)
        scalar = torch.zeros((), dtype=torch.float64)
        for j, (l, slot, c) in enumerate(receivers):
            rows = slice(j * b, (j + 1) * b)
            if c == OUTPUT:  # the output's input: the final representation
                assert fin.value is not None  # read by the forward above
                x = fin.value[rows]
                scalar = scalar + (x * grads[OUTPUT].to(x.dtype)).sum()
            else:
                x = rec.outputs[(l, c)][rows, :, slot]
                scalar = scalar + (x * grads[(l, c)][:, :, slot].to(x.dtype)).sum()
        keys = sorted(deltas)
        got = torch.autograd.grad(scalar, [deltas[l] for l in keys], allow_unused=True)
    out_grads: dict = {}
    for j, r in enumerate(receivers):
        rows = slice(j * b, (j + 1) * b)
        out_grads[r] = {l: (g[rows] if g is not None else None) for l, g in zip(keys, got)}
    return out_grads


def edge_attribution(
    adapter: ModelAdapter,
    clean: Any,
    corrupted: Any,
    objective: Objective,
    method: str = "eap",
    *,
    steps: int = 5,
    batch_size: int = 8,
    max_rows: int = MAX_ROWS,
    edges: list | None = None,
    progress: bool = False,
) -> AttributionResult:
    """EAP or EAP-IG scores of every edge of the head graph (or of ``edges``).

    Raises:
        ValueError: an unknown method, unpaired corpora, a corruption that does not
            change the objective, a metric without gradients.
    """
    if method not in METHODS:
        raise InputError(f"unknown attribution method {method!r}; use one of {', '.join(METHODS)}")
    if steps < 1:
        raise InputError(f"steps must be >= 1, got {steps}")
    clean, corrupted = as_corpus(clean), as_corpus(corrupted)
    objective = given_objective(objective, adapter, clean)
    if not objective.differentiable:
        raise InputError(
            f"objective {objective.name!r} has no gradient; edge attribution needs a differentiable objective (e.g. loss)"
        )
    edges = list(all_edges(adapter) if edges is None else edges)
    receivers = receivers_of(edges)
    layers = sorted({l for l, _, c in receivers if c != OUTPUT})
    n = len(clean)
    c_vals, k_vals = np.zeros(n), np.zeros(n)
    per = np.zeros((len(edges), n))
    index_of: dict = {}
    for i, e in enumerate(edges):
        index_of.setdefault((e.receiver_layer, e.receiver_slot, e.channel), []).append(i)
    passes = 0
    for idx, cb, kb in paired_batches(adapter, objective, clean, corrupted, batch_size, progress):
        b = cb.rows
        z_clean, out = record_head_outputs(adapter, objective, cb)
        ref = objective.reference(out, cb)
        c_vals[idx] = objective.score(out, cb, ref).double().cpu().numpy()
        z_corr, out_k = record_head_outputs(adapter, objective, kb)
        k_vals[idx] = objective.score(out_k, kb, ref).double().cpu().numpy()
        dz = {l: z_corr[l] - z_clean[l] for l in z_clean}
        grads = _receiver_grads(adapter, objective, cb, kb, ref, layers, method, steps)
        passes = (1 if method == "eap" else steps) + 2
        for part in chunks(receivers, max_rows // b):
            jac = _jacobian_pass(adapter, objective, cb, ref, z_clean, part, grads)
            passes += 1
            for r in part:
                for i in index_of[r]:
                    e = edges[i]
                    g = jac[r].get(e.sender_layer)
                    if g is None:
                        continue
                    s = (dz[e.sender_layer][:, :, e.sender_head] * g[:, :, e.sender_head]).sum((-1, -2))
                    per[i, idx] = s.double().cpu().numpy()
    gap = -corruption_gap(objective, c_vals, k_vals)
    table = pd.DataFrame([edge_row(e, grouped(adapter)) for e in edges])
    table["score"] = per.mean(1)
    table["effect"] = per.mean(1) / gap
    return AttributionResult(
        table=table,
        clean=c_vals,
        corrupted=k_vals,
        edges=tuple(edges),
        method=method,
        metric=objective.name,
        passes=passes,
    )
