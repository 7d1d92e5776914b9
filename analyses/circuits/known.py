"""Circuits whose edges are known, and how well edge scores recover them.

* ``zoo:relay``: set by hand, its card lists the edges (``0.0 -> 1.0.v``, ``1.0 -> out``).
* ``zoo:induction``: the circuit of Olsson et al. (2022): the previous-token head of
  layer 0 feeds every induction head of layer 1 through its **keys**, and the induction
  heads write the answer to the output. The heads are found from their attention (not
  from any edge score): the layer-0 head attending most to ``i − 1``, and the layer-1
  heads whose mean attention to the induction target is above ``INDUCTION_FLOOR``.

Scoring against known edges as in the ACDC paper (Conmy et al. 2023): the ROC AUC of
``|score|`` over all edges, and the precision/recall of a recovered circuit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from probe.errors import InputError, NotApplicable

from .edges import Edge, parse_edge

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["INDUCTION_FLOOR", "induction_heads", "known_edges", "recovery_stats"]

INDUCTION_FLOOR = 0.3


def induction_heads(
    adapter: ModelAdapter, examples: Sequence[Mapping[str, Any]]
) -> tuple[tuple[int, int], list[tuple[int, int]]]:
    """``(previous-token head (0, h), [induction heads (1, h)])`` of a 2-layer induction model,
    from the mean attention over ``examples`` (zoo:induction evaluation examples)."""
    from probe.runs.capture import capture

    maps = capture(adapter, [e["text"] for e in examples], batch_size=64)
    n_heads = adapter.n_heads
    prev, ind, n_prev, n_ind = np.zeros(n_heads), np.zeros(n_heads), 0, 0
    for m, e in zip(maps, examples):
        a = m.attentions.double().numpy()  # [layer, head, q, k]; token = word + 1 (<s> first)
        n = a.shape[-1]
        q = np.arange(2, n)
        prev += a[0][:, q, q - 1].sum(-1)
        n_prev += len(q)
        for j, t in e["induction_target"].items():
            ind += a[1][:, int(j) + 1, int(t) + 1]
            n_ind += 1
    prev, ind = prev / max(1, n_prev), ind / max(1, n_ind)
    return (0, int(prev.argmax())), [(1, int(h)) for h in np.flatnonzero(ind > INDUCTION_FLOOR)]


def known_edges(adapter: ModelAdapter, examples: Sequence[Mapping[str, Any]] | None = None) -> list[Edge]:
    """The known edges of a zoo model (``zoo:relay``, ``zoo:induction``).

    Raises:
        ValueError: a model without known edges.
    """
    task = (adapter.card or {}).get("task") if adapter.name.startswith("zoo:") else None
    if task == "relay":
        return [parse_edge(adapter, t) for t in adapter.card["ground_truth"]["edges"]]
    if task == "induction":
        if not examples:
            from probe.models import zoo

            examples = zoo.eval_examples("induction", n=100)
        (pl, ph), ind = induction_heads(adapter, examples)
        out = [Edge(pl, ph, l, h, "k") for l, h in ind] + [Edge(l, h, -1, -1, "out") for l, h in ind]
        return out
    raise NotApplicable(f"{adapter.name} has no known circuit; known circuits: zoo:relay, zoo:induction")


def recovery_stats(scores: pd.DataFrame, known: Sequence[Edge], circuit: Sequence[Edge], adapter: ModelAdapter) -> dict:
    """ROC AUC of ``|effect|`` against the known edges over the whole graph, and the
    precision/recall of ``circuit`` (a list of edges).

    Raises:
        ValueError: known edges that are all or none of the scored edges (AUC undefined).
    """
    from sklearn.metrics import roc_auc_score

    keys = [
        Edge(int(r.sender_layer), int(r.sender_head), int(r.receiver_layer), int(r.receiver_slot), str(r.channel))
        for r in scores.itertuples()
    ]
    truth = np.array([k in set(known) for k in keys])
    if truth.all() or not truth.any():
        raise InputError("the known edges must be some but not all of the scored edges")
    auc = float(roc_auc_score(truth, scores["effect"].abs().to_numpy()))
    found = set(circuit)
    tp = len(found & set(known))
    return {
        "auc": auc,
        "precision": tp / len(found) if found else float("nan"),
        "recall": tp / len(known),
        "n_known": len(known),
        "n_found": len(found),
        "n_edges": len(keys),
    }


def matched_random_circuits(graph: list, known: list, draws: int = 20, seed: int = 0) -> list:
    """``draws`` random edge sets with the known set's composition: as many head -> output
    edges and as many head -> head edges of each channel as ``known`` has, drawn from
    ``graph`` (the null a known circuit is compared with: output edges alone carry more
    than a random q/k/v edge in any model)."""
    rng = np.random.default_rng(seed)
    kinds: dict = {}
    for e in graph:
        kinds.setdefault(e.channel, []).append(e)
    need: dict = {}
    for e in known:
        need[e.channel] = need.get(e.channel, 0) + 1
    out = []
    for _ in range(draws):
        pick = []
        for c, k in need.items():
            pool = kinds.get(c, [])
            pick += [pool[i] for i in rng.choice(len(pool), min(k, len(pool)), replace=False)]
        out.append(pick)
    return out
