"""Each claim in one plain sentence, and the numbers its picture is drawn from.

A head page opens with a table of its claims (:mod:`probe.app.report.claim_table`): per
claim its status, one sentence without statistics (:func:`plain_sentence`) and its effect
with the 95% interval drawn against what it had to clear (:func:`drawn`: the floor the
claim is held to, and what the null model's heads reach, e.g. a re-initialised model's
95% head quantile). The p-values, tests and nulls stay in the claim's evidence sentence
(:func:`.evidence.claim_evidence`), one click away.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from . import thresholds as T
from .claim import DEPENDS

__all__ = ["Drawn", "COUNT_OF", "drawn", "plain_sentence"]

#: what a claim kind's ``count`` counts
COUNT_OF = {
    "pattern": "query rows",
    "structure": "instances",
    "necessity": "examples",
    "redundancy": "examples",
    "weights": "examples",
    "attribution": "examples",
}


#: an attribution method in words
REFERENCE_WORDS = {
    "ig": "integrated gradients",
    "saliency": "saliency",
    "input_x_gradient": "input × gradient",
    "blank_out": "blanking tokens out",
}


def _finite(v: Any) -> Optional[float]:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


@dataclass(frozen=True)
class Drawn:
    """What a claim's picture shows: ``value`` with its interval ``(low, high)`` (either
    end ``None`` when there is none), the ``floor`` it must clear and the ``null`` model's
    level (``None`` when there is none), in ``percent`` or plain units; ``lower`` when a
    smaller value is the stronger one (the max-attention rule)."""

    value: float
    low: Optional[float] = None
    high: Optional[float] = None
    floor: Optional[float] = None
    null: Optional[float] = None
    percent: bool = False
    lower: bool = False
    what: str = ""


def _pattern_drawn(c: Any) -> Optional[Drawn]:
    x = c.extra
    if c.threshold == "no role rule cleared":
        share = _finite(x.get("nearest_share"))
        if share is None:
            return None  # no rule came near: the largest shares are in the sentence
        same = x.get("null_feature") == x.get("nearest_feature")
        return Drawn(
            share,
            floor=_finite(x.get("nearest_threshold")),
            null=_finite(x.get("null_quantile")) if same else None,
            percent=True,
            what=str(x.get("nearest_feature", "")),
        )
    value = _finite(c.effect)
    if value is None:
        return None
    return Drawn(
        value,
        _finite(c.ci_low),
        _finite(c.ci_high),
        floor=_finite(c.null),
        null=_finite(x.get("null_quantile")),
        percent=True,
        lower=c.unit == "max_attention",
        what=str(c.unit),
    )


def drawn(kind: str, c: Any) -> Optional[Drawn]:
    """The numbers :class:`Drawn` of claim ``c`` (a :class:`.claim.Claim` of ``kind``), or
    ``None`` when it has no effect to draw (not tested, not enough evidence)."""
    if c.status in ("not tested", "not enough evidence"):
        return None
    x = c.extra
    if kind == "pattern":
        return _pattern_drawn(c)
    if kind == "attribution":  # decided on the share of examples whose τ is significant
        share = _finite(x.get("significant_share"))
        if share is None:
            return None
        return Drawn(share, floor=T.AGREEMENT_SHARE, percent=True, what="examples with a significant τ")
    value = _finite(c.effect)
    if value is None:
        return None
    if kind == "structure":
        return Drawn(value, _finite(c.ci_low), _finite(c.ci_high), floor=T.STRUCTURE_MARGIN, null=0.0,
                     percent=True, what="accuracy above the best fixed offset")  # fmt: skip
    null = x.get("null_harm") if kind == "redundancy" else x.get("null_quantile")
    return Drawn(value, _finite(c.ci_low), _finite(c.ci_high), floor=_finite(c.null), null=_finite(null),
                 what=str(x.get("objective") or c.unit))  # fmt: skip


def _pattern_sentence(c: Any) -> str:
    x = c.extra
    if c.status == "holds":
        past = " and past the null model's heads" if x.get("null_quantile") is not None else ""
        return f"Its attention follows the {c.statement} pattern: past the rule's threshold{past}."
    if c.threshold == "null_quantile":
        return f"It looks {x.get('nearest_rule') or c.statement}, but so do the null model's heads: no role is claimed."
    near = f" (nearest: {x['nearest_rule']})" if x.get("nearest_rule") else ""
    return f"No attention pattern clears its rule{near}; it attends {c.statement}."


def _causal_sentence(kind: str, c: Any) -> str:
    obj = c.extra.get("objective") or "the objective"
    holds, depends = c.status == "holds", c.status == DEPENDS
    if kind == "necessity":
        if depends:
            return f"Removing it harms {obj} under some removal baselines but not others."
        if c.extra.get("reading") == "screened out":  # never removed: the screen's bound is what it rests on
            return "The screen puts the harm of removing it under the bar: it was not removed exactly."
        return f"Removing it alone harms {obj}." if holds else f"Removing it alone does not harm {obj} past the floor."
    if kind == "weights":
        if holds and c.extra.get("reading") == "inert sink":
            return f"It parks its attention (a no-op head): spreading it harms {obj}."
        if holds:
            return f"Where it looks matters: uniform attention in its place harms {obj}."
        return f"Where it looks is not shown to matter: uniform attention harms {obj} less than the floor."
    if holds:
        return f"Removed with its look-alikes it harms {obj}, though not alone: it is redundant."
    return f"Removing it with its look-alikes does not harm {obj} past the floor either."


def plain_sentence(kind: str, c: Any, tests: str = "") -> str:
    """Claim ``c`` of ``kind`` in one sentence with no statistics in it. ``tests``: what
    the kind tests, in words (:class:`.protocol.ClaimTest`), said for a kind this module
    has no sentence of."""
    if c.status in ("not tested", "not enough evidence"):
        why = (c.reason or "").removeprefix("not tested: ").split("; ")[0].rstrip(".")
        return f"{c.status.capitalize()}" + (f": {why}." if why else ".")
    if kind == "pattern":
        return _pattern_sentence(c)
    if kind == "structure":
        if c.status == "holds":
            return f"It finds {c.statement} more often than the best fixed offset does."
        return f"It finds no dependency relation better than a fixed offset (its best: {c.statement})."
    if kind in ("necessity", "weights", "redundancy"):
        return _causal_sentence(kind, c)
    if kind == "attribution":
        ref = REFERENCE_WORDS.get(str(c.extra.get("reference")), c.extra.get("reference") or "the attributions")
        if c.status == "holds":
            return f"Its attention ranks tokens as {ref} does, in most examples."
        return f"Its attention does not rank tokens as {ref} does in enough examples."
    said = tests or c.statement or kind
    return f"{c.status.capitalize()}: {said}."
