"""One circuit study of a model: exact path patching, EAP and EAP-IG on the same pairs,
their rank agreement (Spearman, over the edges patched exactly), the recovery curve of
the chosen ranking and, where the edges are known, ROC AUC and precision/recall.
Pure composition of :mod:`.path_patching`, :mod:`.attribution`, :mod:`.discovery` and
:mod:`.known`."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from .attribution import edge_attribution
from .discovery import CircuitCurve, recovery_curve
from .edges import all_edges
from .path_patching import path_patch

__all__ = ["CircuitStudy", "rank_agreement", "study_circuit"]


def rank_agreement(a: pd.Series, b: pd.Series) -> float:
    """Spearman correlation of two edge-score columns (signed effects)."""
    from scipy.stats import spearmanr

    return float(spearmanr(a.to_numpy(), b.to_numpy())[0])


@dataclass(frozen=True)
class CircuitStudy:
    """``scores``: one row per edge with ``exact``, ``eap``, ``eap_ig`` effects; ``agreement``:
    Spearman of each attribution vs exact; ``curve``: the circuit curve (None for post-LN
    models); ``known``: recovery statistics per ranking (where edges are known)."""

    scores: pd.DataFrame
    agreement: dict
    curve: CircuitCurve | None
    known: dict = field(default_factory=dict)
    gap: float = 0.0
    notes: tuple = ()


def study_circuit(
    adapter,
    clean,
    corrupted,
    metric,
    *,
    share: float = 0.9,
    ranking: str = "exact",
    steps: int = 5,
    batch_size: int = 8,
    known=None,
    exact_edges=None,
) -> CircuitStudy:
    """Run the three scorings, the curve for ``ranking`` (``exact`` | ``eap`` | ``eap_ig``)
    and, with ``known`` edges, the recovery statistics of each ranking. ``exact_edges``
    (default: all) limits exact path patching to those edges (the others' ``exact`` is NaN;
    the agreement is taken over the edges checked).

    Raises:
        ValueError: an unknown ranking, ``ranking="exact"`` with a subset of edges, and
            whatever the scorings refuse (edges, unpaired inputs, a corruption that does not
            change the objective).
    """
    from probe.paths import additive_residual

    if ranking not in ("exact", "eap", "eap_ig"):
        raise ValueError(f"unknown ranking {ranking!r}; use exact, eap or eap_ig")
    edges = all_edges(adapter)
    checked = edges if exact_edges is None else list(dict.fromkeys(exact_edges))
    if len(checked) < len(edges) and (ranking == "exact" or known is not None):
        raise ValueError(
            "ranking the whole graph by exact path patching needs every edge patched: "
            "drop --edge, or rank by eap_ig (--ranking eap_ig) without known-edge statistics"
        )
    exact = path_patch(adapter, clean, corrupted, metric, checked, batch_size=batch_size)
    eap = edge_attribution(adapter, clean, corrupted, metric, "eap", batch_size=batch_size)
    ig = edge_attribution(adapter, clean, corrupted, metric, "eap-ig", steps=steps, batch_size=batch_size)
    scores = eap.table.drop(columns=["score"]).rename(columns={"effect": "eap"})
    scores["eap_ig"] = ig.table["effect"].to_numpy()
    scores["exact"] = scores["edge"].map(dict(zip(exact.table["edge"], exact.table["effect"])))
    both = scores.dropna(subset=["exact"])
    agreement = {
        "eap": rank_agreement(both["exact"], both["eap"]),
        "eap_ig": rank_agreement(both["exact"], both["eap_ig"]),
        "n_edges": len(both),
    }
    notes = []
    curve = None
    if additive_residual(adapter):
        curve = recovery_curve(
            adapter,
            clean,
            corrupted,
            metric,
            scores.assign(effect=scores[ranking]),
            share=share,
            graph=edges,
            batch_size=batch_size,
        )
    else:
        notes.append(
            f"{adapter.name} is not a pre-LayerNorm decoder: no circuit curve (edges cannot be mixed "
            "additively in its residual stream); edge scores only"
        )
    stats = {}
    if known is not None:
        from .known import recovery_stats

        for col in ("exact", "eap", "eap_ig"):
            circuit = curve.circuit if (curve is not None and col == ranking) else _top(scores, col, len(known))
            stats[col] = recovery_stats(scores.assign(effect=scores[col]), known, circuit, adapter)
    return CircuitStudy(scores=scores, agreement=agreement, curve=curve, known=stats, gap=exact.gap, notes=tuple(notes))


def _top(scores: pd.DataFrame, col: str, k: int) -> list:
    from .edges import edge_from_row

    order = scores.reindex(scores[col].abs().sort_values(ascending=False, kind="stable").index).head(k)
    return [edge_from_row(r) for _, r in order.iterrows()]
