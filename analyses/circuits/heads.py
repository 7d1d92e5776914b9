"""Head-level (node) circuits: the recovered-share curve for models whose residual stream is
not a sum of head writes (post-LayerNorm encoders such as MiniLM/BERT, BART), where the
edge-level mix of :mod:`.discovery` is not defined.

An edge circuit needs each receiver to read "its own" residual stream with some senders'
writes swapped; after a post-LN sublayer the stream is ``LN(x + Σ writes)``, renormalised
as a whole, so a sender's write no longer sits in it as a separable term and "the stream
without that edge" has no single meaning. Heads do: a **head circuit** ``H`` runs the clean
input with every head outside ``H`` writing its **corrupted** output (its ``z`` from the
corrupted run; MLPs, LayerNorms and the heads in ``H`` recompute) — interchange ablation at
the node level, as in the MIB benchmark's node circuits (Mueller et al. 2025) with the
corrupted run in place of a mean. Its faithfulness::

    faithfulness(H) = (m(H) − m(∅)) / (m(all heads) − m(∅))

``m(all heads)`` is the clean run, ``m(∅)`` the run with every head corrupted (embeddings
and MLPs still read the clean input, so ``m(∅)`` is not ``m(corrupted)``).

Heads are added by decreasing ``|node score|``; a head's node score is the sum of the
signed scores of its outgoing edges (to later heads' q/k/v and to the output). For EAP that
sum is exactly attribution patching of the head's output, ``Δz_s · ∂m/∂z_s`` (the chain
rule through every receiver input, each taken with the other heads frozen; Syed et al.
2023); for exact path patching it is the sum of the edges' separate effects.

Shapes: ``HeadCurve.curve`` one row per ``k`` (``n_heads, objective, faithfulness``).
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

from probe.errors import InputError
from probe.interventions.paths import HeadOutputOverride, head_sites, site_name

from .discovery import CircuitCurve, check_share, curve_of
from .path_patching import MAX_ROWS, chunks, repeat_ref, record_head_outputs

if TYPE_CHECKING:
    from probe.analyses.common.objective import Objective
    from probe.models.adapter import ModelAdapter

__all__ = ["HeadCurve", "head_circuit_objective", "head_recovery_curve", "node_scores"]


def node_scores(adapter: ModelAdapter, scores: pd.DataFrame, column: str = "effect") -> pd.DataFrame:
    """``layer, head, site, score``: per head the sum of ``column`` over its outgoing edges
    (``scores`` has the edge columns of :func:`.path_patching.path_patch`)."""
    summed = scores.groupby(["sender_layer", "sender_head"])[column].sum()
    rows = [
        {"layer": int(l), "head": int(h), "site": site_name(adapter, int(l)), "score": float(v)}
        for (l, h), v in summed.items()
    ]
    return pd.DataFrame(rows, columns=["layer", "head", "site", "score"])


@torch.no_grad()
def head_circuit_objective(
    adapter: ModelAdapter,
    clean: Any,
    corrupted: Any,
    objective: Objective,
    circuits: Sequence[Sequence[tuple]],
    *,
    batch_size: int = 8,
    max_rows: int = MAX_ROWS,
) -> np.ndarray:
    """Mean objective of each head circuit (a set of ``(layer, head)``, layers as head
    sites), every other head writing its corrupted output: ``[len(circuits)]``. One row block
    per circuit, ``max_rows`` rows per forward.

    Raises:
        ValueError: unpaired corpora, a pair of different lengths, a head that does not exist.
    """
    clean, corrupted = as_corpus(clean), as_corpus(corrupted)
    objective = given_objective(objective, adapter, clean)
    n_sites, n_heads = len(head_sites(adapter)), adapter.n_heads
    keep = torch.zeros(len(circuits), n_sites, n_heads, dtype=torch.bool)
    for j, c in enumerate(circuits):
        for layer, head in c:
            if not (0 <= layer < n_sites and 0 <= head < n_heads):
                raise InputError(
                    f"head {layer}.{head} does not exist ({adapter.name}: {n_sites} layers x {n_heads} heads)"
                )
            keep[j, layer, head] = True
    sums = np.zeros(len(circuits))
    for _idx, cb, kb in paired_batches(adapter, objective, clean, corrupted, batch_size):
        b = cb.rows
        _, out = record_head_outputs(adapter, objective, cb)
        ref = objective.reference(out, cb)
        z_corr, _ = record_head_outputs(adapter, objective, kb)
        for part in chunks(list(range(len(circuits))), max_rows // b):
            k = len(part)
            mask = keep[part]  # [k, sites, heads]

            def mix(layer, z, mask=mask, k=k, b=b, z_corr=z_corr):
                m = mask[:, layer].repeat_interleave(b, 0).to(z.device)[:, None, :, None]  # [k·b, 1, heads, 1]
                return torch.where(m, z, z_corr[layer].repeat(k, 1, 1, 1).to(z.dtype))

            big = cb.repeat(k)
            with HeadOutputOverride(adapter, mix):
                got = objective.score(objective.forward(adapter, big), big, repeat_ref(ref, k)).double().reshape(k, b)
            sums[part] += got.sum(1).cpu().numpy()
    return sums / len(clean)


@dataclass(frozen=True)
class HeadCurve(CircuitCurve):
    """Recovered share vs number of kept heads.

    Attributes:
        curve: ``n_heads, objective, faithfulness``; ranking: ``(layer, head)`` in the order
            added; circuit: the shortest prefix reaching ``share``; nodes: :func:`node_scores`.
    """

    nodes: pd.DataFrame


def head_recovery_curve(
    adapter: ModelAdapter,
    clean: Any,
    corrupted: Any,
    objective: Objective,
    scores: pd.DataFrame,
    *,
    share: float = 0.9,
    sizes: Sequence[int] | None = None,
    batch_size: int = 8,
) -> HeadCurve:
    """Faithfulness of the top-``k`` heads by ``|node score|`` (from the edge scores'
    ``effect``) for ``k`` in ``sizes`` (default 0..all heads).

    Raises:
        ValueError: ``share`` outside (0, 1], a graph whose full cut changes nothing.
    """
    check_share(share)
    nodes = node_scores(adapter, scores)
    every = [(l, h) for l in range(len(head_sites(adapter))) for h in range(adapter.n_heads)]
    scored = nodes.reindex(nodes["score"].abs().sort_values(ascending=False, kind="stable").index)
    ranking = [(int(r.layer), int(r.head)) for r in scored.itertuples()]
    ranking += [x for x in every if x not in set(ranking)]  # heads with no outgoing edge last
    sizes = list(range(len(ranking) + 1)) if sizes is None else sorted({int(k) for k in sizes} | {0, len(ranking)})
    values = head_circuit_objective(
        adapter, clean, corrupted, objective, [ranking[:k] for k in sizes], batch_size=batch_size
    )
    full, empty = float(values[-1]), float(values[0])
    curve, circuit = curve_of("n_heads", sizes, values, full, empty, ranking, share)
    return HeadCurve(
        curve=curve, ranking=tuple(ranking), circuit=circuit, share=share, full=full, empty=empty, nodes=nodes
    )
