"""One circuit study of a model: exact path patching, EAP and EAP-IG on the same pairs,
their rank agreement (Spearman, over the edges patched exactly), the recovery curve of
the chosen ranking and, where the edges are known, ROC AUC and precision/recall.
Pure composition of :mod:`.path_patching`, :mod:`.attribution`, :mod:`.discovery` and
:mod:`.known`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import pandas as pd

from .attribution import edge_attribution
from .discovery import CircuitCurve, recovery_curve
from .edges import all_edges
from .path_patching import path_patch

__all__ = ["CircuitStudy", "study_circuit", "rank_agreement"]


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
    curve: Optional[CircuitCurve]
    known: dict = field(default_factory=dict)
    gap: float = 0.0
    notes: tuple = ()


def study_circuit(adapter, clean, corrupted, metric, *, share: float = 0.9, ranking: str = "exact",
                  steps: int = 5, batch_size: int = 8, known=None) -> CircuitStudy:
    """Run the three scorings, the curve for ``ranking`` (``exact`` | ``eap`` | ``eap_ig``)
    and, with ``known`` edges, the recovery statistics of each ranking."""
    from probe.paths import additive_residual

    if ranking not in ("exact", "eap", "eap_ig"):
        raise ValueError(f"unknown ranking {ranking!r}; use exact, eap or eap_ig")
    edges = all_edges(adapter)
    exact = path_patch(adapter, clean, corrupted, metric, edges, batch_size=batch_size)
    eap = edge_attribution(adapter, clean, corrupted, metric, "eap", batch_size=batch_size)
    ig = edge_attribution(adapter, clean, corrupted, metric, "eap-ig", steps=steps, batch_size=batch_size)
    scores = exact.table.rename(columns={"effect": "exact"}).drop(columns=["delta"])
    scores["eap"], scores["eap_ig"] = eap.table["effect"].to_numpy(), ig.table["effect"].to_numpy()
    agreement = {"eap": rank_agreement(scores["exact"], scores["eap"]),
                 "eap_ig": rank_agreement(scores["exact"], scores["eap_ig"])}
    notes = []
    curve = None
    if additive_residual(adapter):
        curve = recovery_curve(adapter, clean, corrupted, metric, scores.assign(effect=scores[ranking]),
                               share=share, graph=edges, batch_size=batch_size)
    else:
        notes.append(f"{adapter.name} is not a pre-LayerNorm decoder: no circuit curve (edges cannot be mixed "
                     "additively in its residual stream); edge scores only")
    stats = {}
    if known is not None:
        from .known import recovery_stats

        for col in ("exact", "eap", "eap_ig"):
            circuit = curve.circuit if (curve is not None and col == ranking) else \
                _top(scores, col, len(known))
            stats[col] = recovery_stats(scores.assign(effect=scores[col]), known, circuit, adapter)
    return CircuitStudy(scores=scores, agreement=agreement, curve=curve, known=stats, gap=exact.gap,
                        notes=tuple(notes))


def _top(scores: pd.DataFrame, col: str, k: int) -> list:
    from .edges import edge_from_row

    order = scores.reindex(scores[col].abs().sort_values(ascending=False, kind="stable").index).head(k)
    return [edge_from_row(r) for _, r in order.iterrows()]
