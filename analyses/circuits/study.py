"""One circuit study of a model: exact path patching, EAP and EAP-IG on the same pairs,
their rank agreement (Spearman, over the edges patched exactly), the recovery curve of
the chosen ranking and, where the edges are known, ROC AUC and precision/recall.
Pure composition of :mod:`.path_patching`, :mod:`.attribution`, :mod:`.discovery` and
:mod:`.known`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from probe.errors import InputError

from .attribution import edge_attribution
from .discovery import CircuitCurve, recovery_curve
from .edges import all_edges, edge_from_row
from .heads import HeadCurve, head_recovery_curve
from .path_patching import path_patch

if TYPE_CHECKING:
    from probe.analyses.common.objective import Objective
    from probe.models.adapter import ModelAdapter

__all__ = ["CircuitStudy", "rank_agreement", "study_circuit"]


def rank_agreement(a: pd.Series, b: pd.Series) -> float:
    """Spearman correlation of two edge-score columns (signed effects)."""
    from scipy.stats import spearmanr

    return float(spearmanr(a.to_numpy(), b.to_numpy())[0])


@dataclass(frozen=True)
class CircuitStudy:
    """``scores``: one row per edge with ``exact``, ``eap``, ``eap_ig`` effects (``exact`` NaN
    where not patched); ``agreement``: Spearman of each attribution vs exact over the edges
    patched; ``curve``: the edge circuit curve (pre-LN decoders, else None); ``head_curve``:
    the head circuit curve (:mod:`.heads`; models without an additive residual stream);
    ``known``: recovery statistics per ranking (where edges are known)."""

    scores: pd.DataFrame
    agreement: dict
    curve: CircuitCurve | None
    known: dict = field(default_factory=dict)
    gap: float = 0.0
    notes: tuple = ()
    head_curve: HeadCurve | None = None


def study_circuit(
    adapter: ModelAdapter,
    clean: Any,
    corrupted: Any,
    objective: Objective,
    *,
    share: float = 0.9,
    ranking: str = "exact",
    steps: int = 5,
    batch_size: int = 8,
    known: Any = None,
    exact_edges: Any = None,
    exact_top: int | None = None,
) -> CircuitStudy:
    """Run the three scorings, the curve for ``ranking`` (``exact`` | ``eap`` | ``eap_ig``)
    and, with ``known`` edges, the recovery statistics of each ranking. ``exact_edges``
    (default: all) limits exact path patching to those edges (the others' ``exact`` is NaN;
    the agreement is taken over the edges checked); ``exact_top`` limits it to the
    ``exact_top`` edges EAP-IG ranks highest by ``|score|`` (the attributions run first, on
    every edge).

    Raises:
        ValueError: an unknown ranking, ``ranking="exact"`` with a subset of edges, and
            whatever the scorings refuse (edges, unpaired inputs, a corruption that does not
            change the objective).
    """
    from probe.interventions.paths import additive_residual

    if ranking not in ("exact", "eap", "eap_ig"):
        raise InputError(f"unknown ranking {ranking!r}; use exact, eap or eap_ig")
    edges = all_edges(adapter)
    checked = edges if exact_edges is None else list(dict.fromkeys(exact_edges))
    partial = len(checked) < len(edges) or (exact_top is not None and exact_top < len(edges))
    if partial and (ranking == "exact" or known is not None):
        raise InputError(
            "ranking the whole graph by exact path patching needs every edge patched: "
            "drop --edge, or rank by eap_ig (--ranking eap_ig) without known-edge statistics"
        )
    eap = edge_attribution(adapter, clean, corrupted, objective, "eap", batch_size=batch_size)
    ig = edge_attribution(adapter, clean, corrupted, objective, "eap-ig", steps=steps, batch_size=batch_size)
    scores = eap.table.drop(columns=["score"]).rename(columns={"effect": "eap"})
    scores["eap_ig"] = ig.table["effect"].to_numpy()
    if exact_edges is None and exact_top is not None and exact_top < len(edges):
        top = scores.reindex(scores["eap_ig"].abs().sort_values(ascending=False, kind="stable").index)
        checked = [edge_from_row(r) for _, r in top.head(max(1, int(exact_top))).iterrows()]
    exact = path_patch(adapter, clean, corrupted, objective, checked, batch_size=batch_size)
    scores["exact"] = scores["edge"].map(dict(zip(exact.table["edge"], exact.table["effect"])))
    both = scores.dropna(subset=["exact"])
    agreement = {
        "eap": rank_agreement(both["exact"], both["eap"]),
        "eap_ig": rank_agreement(both["exact"], both["eap_ig"]),
        "n_edges": len(both),
    }
    notes = []
    curve = head_curve = None
    if len(checked) < len(edges):
        notes.append(
            f"exact path patching on {len(checked)} of {len(edges)} edges"
            + (f" (the top {len(checked)} by |EAP-IG|)" if exact_edges is None else " (those named)")
            + "; the others have EAP and EAP-IG scores only"
        )
    pair, graded = (adapter, clean, corrupted, objective), scores.assign(effect=scores[ranking])
    if additive_residual(adapter):
        curve = recovery_curve(*pair, graded, share=share, graph=edges, batch_size=batch_size)
    else:
        head_curve = head_recovery_curve(*pair, graded, share=share, batch_size=batch_size)
        why = (
            "an encoder-decoder (the edge mixer covers one pre-LayerNorm stack, not the encoder output "
            "cross-attention reads)"
            if adapter.arch == "encoder-decoder"
            else "not a pre-LayerNorm decoder: its residual stream is renormalised after every sublayer"
        )
        notes.append(
            f"{adapter.name} is {why}, so an edge circuit is not defined; the curve is over heads instead (heads "
            f"outside the circuit write their corrupted output; heads ranked by the sum of their outgoing "
            f"{ranking} edge scores)"
        )
    stats = {}
    if known is not None:
        from .known import recovery_stats

        for col in ("exact", "eap", "eap_ig"):
            circuit = curve.circuit if (curve is not None and col == ranking) else _top(scores, col, len(known))
            stats[col] = recovery_stats(scores.assign(effect=scores[col]), known, circuit, adapter)
    return CircuitStudy(
        scores=scores,
        agreement=agreement,
        curve=curve,
        known=stats,
        gap=exact.gap,
        notes=tuple(notes),
        head_curve=head_curve,
    )


def _top(scores: pd.DataFrame, col: str, k: int) -> list:
    order = scores.reindex(scores[col].abs().sort_values(ascending=False, kind="stable").index).head(k)
    return [edge_from_row(r) for _, r in order.iterrows()]
