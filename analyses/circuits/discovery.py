"""Circuit discovery: the smallest set of edges that recovers a stated share of the
objective, and the curve of recovered share vs number of edges.

A circuit ``C`` is run on the clean input with every edge outside it carrying the
sender's corrupted output into its receiver (:class:`probe.interventions.paths.EdgeMixer`; Wang et al.
2022, Conmy et al. 2023). Its faithfulness, as in the MIB benchmark (Mueller et al. 2025)::

    faithfulness(C) = (m(C) − m(∅)) / (m(full) − m(∅))

``m(full)`` is the clean run (every edge kept), ``m(∅)`` the run with every edge of the
graph cut. Edges are added in decreasing ``|score|`` (any ranking: exact path patching,
EAP, EAP-IG); the circuit is the shortest prefix reaching ``share``. Pre-LayerNorm
decoders only (the mix is additive in the residual stream, LayerNorm recomputed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TYPE_CHECKING

import numpy as np
import pandas as pd
import torch
from probe.analyses.common.metrics import as_corpus
from probe.analyses.common.objective import given_objective
from probe.analyses.necessity.patching import paired_batches

from probe.errors import InputError, NotApplicable
from probe.interventions.paths import EdgeMixer, n_kv_heads, residual_sites

from .edges import Edge, all_edges, check_edge
from .path_patching import record_head_outputs

if TYPE_CHECKING:
    from probe.analyses.common.objective import Objective
    from probe.models.adapter import ModelAdapter

__all__ = ["CircuitCurve", "circuit_objective", "drop_masks", "faithfulness", "recovery_curve"]


def drop_masks(adapter: ModelAdapter, kept: Sequence[Edge], graph: Sequence[Edge]) -> dict:
    """The :class:`probe.interventions.paths.EdgeMixer` masks cutting every edge of ``graph`` not in ``kept``."""
    n_heads, n_kv, n_layers = adapter.n_heads, n_kv_heads(adapter), adapter.n_layers
    keep = set(kept)
    masks: dict = {}
    for lr in range(1, n_layers):
        for c in ("q", "k", "v"):
            masks[(lr, c)] = torch.zeros(n_heads if c == "q" else n_kv, lr * n_heads, dtype=torch.bool)
    masks["out"] = torch.zeros(n_layers * n_heads, dtype=torch.bool)
    for e in graph:
        if e in keep:
            continue
        s = e.sender_layer * n_heads + e.sender_head
        if e.to_output:
            masks["out"][s] = True
        else:
            masks[(e.receiver_layer, e.channel)][e.receiver_slot, s] = True
    return masks


@torch.no_grad()
def circuit_objective(
    adapter: ModelAdapter,
    clean: Any,
    corrupted: Any,
    objective: Objective,
    circuits: Sequence[Sequence[Edge]],
    graph: Sequence[Edge] | None = None,
    *,
    batch_size: int = 16,
) -> np.ndarray:
    """Mean objective of each circuit (``[len(circuits)]``), one forward per circuit and batch.

    Raises:
        ValueError: a model whose residual stream is not additive, unpaired corpora.
    """
    residual_sites(adapter)  # refuses post-LN models with a message
    clean, corrupted = as_corpus(clean), as_corpus(corrupted)
    objective = given_objective(objective, adapter, clean)
    graph = list(all_edges(adapter) if graph is None else graph)
    masks = [drop_masks(adapter, c, graph) for c in circuits]
    sums = np.zeros(len(circuits))
    for _idx, cb, kb in paired_batches(adapter, objective, clean, corrupted, batch_size):
        _, out = record_head_outputs(adapter, objective, cb)
        ref = objective.reference(out, cb)
        z_corr, _ = record_head_outputs(adapter, objective, kb)
        for j, mask in enumerate(masks):
            with EdgeMixer(adapter, z_corr, mask):
                out = objective.forward(adapter, cb)
            sums[j] += float(objective.score(out, cb, ref).double().sum())
    return sums / len(clean)


def faithfulness(value: float | np.ndarray | Sequence[float], full: float, empty: float) -> np.ndarray:
    """``(value − empty) / (full − empty)`` (MIB), elementwise: the shape of ``value``.

    Raises:
        NotApplicable: the graph's cut changes nothing (``full == empty``).
    """
    if abs(full - empty) < 1e-12:
        raise NotApplicable(
            "cutting every edge does not change the objective: faithfulness is undefined "
            "(the corrupted input does not reach the output through the heads)"
        )
    return (np.asarray(value, dtype=float) - empty) / (full - empty)


@dataclass(frozen=True)
class CircuitCurve:
    """Recovered share vs number of kept edges (the ``|score|`` order).

    Attributes:
        curve: ``n_edges, objective, faithfulness``.
        ranking: edges in the order they were added.
        circuit: the shortest prefix reaching ``share`` (all edges if none does).
        share: the target share; full, empty: ``m(full)`` and ``m(∅)``.
    """

    curve: pd.DataFrame
    ranking: tuple
    circuit: tuple
    share: float
    full: float
    empty: float

    @property
    def reached(self) -> bool:
        return bool((self.curve["faithfulness"] >= self.share).any())


def recovery_curve(
    adapter: ModelAdapter,
    clean: Any,
    corrupted: Any,
    objective: Objective,
    scores: pd.DataFrame,
    *,
    share: float = 0.9,
    sizes: Sequence[int] | None = None,
    graph: Sequence[Edge] | None = None,
    batch_size: int = 16,
) -> CircuitCurve:
    """Faithfulness of the top-``k`` edges by ``|effect|`` for ``k`` in ``sizes`` (default:
    0..all); ``scores`` has the edge columns of :func:`.path_patching.path_patch` and ``effect``.

    Raises:
        ValueError: ``share`` outside (0, 1], a post-LN model, an empty graph cut.
    """
    check_share(share)
    order = scores.reindex(scores["effect"].abs().sort_values(ascending=False, kind="stable").index)
    ranking = [
        check_edge(
            adapter,
            Edge(int(r.sender_layer), int(r.sender_head), int(r.receiver_layer), int(r.receiver_slot), str(r.channel)),
        )
        for r in order.itertuples()
    ]
    graph = list(all_edges(adapter) if graph is None else graph)
    sizes = list(range(len(ranking) + 1)) if sizes is None else sorted({int(k) for k in sizes} | {0, len(ranking)})
    values = circuit_objective(
        adapter, clean, corrupted, objective, [ranking[:k] for k in sizes] + [graph], graph, batch_size=batch_size
    )
    full, empty = float(values[-1]), float(values[0])  # sizes start at 0: the empty circuit
    curve, circuit = curve_of("n_edges", sizes, values[:-1], full, empty, ranking, share)
    return CircuitCurve(curve=curve, ranking=tuple(ranking), circuit=circuit, share=share, full=full, empty=empty)


def check_share(share: float) -> None:
    """``ValueError`` unless ``0 < share <= 1``."""
    if not 0 < share <= 1:
        raise InputError(f"share must be in (0, 1], got {share}")


def curve_of(
    unit: str,
    sizes: Sequence[int],
    values: np.ndarray | Sequence[float],
    full: float,
    empty: float,
    ranking: Sequence,
    share: float,
) -> tuple:
    """``(curve, circuit)``: the table ``unit, objective, faithfulness`` of circuits of
    ``sizes`` with objective ``values`` (each ``[len(sizes)]``), and the shortest prefix of ``ranking`` reaching
    ``share`` (all of it if none does)."""
    curve = pd.DataFrame({unit: sizes, "objective": values, "faithfulness": faithfulness(values, full, empty)})
    hit = curve.index[curve["faithfulness"] >= share]
    k = int(curve.loc[hit[0], unit]) if len(hit) else len(ranking)
    return curve, tuple(ranking[:k])
