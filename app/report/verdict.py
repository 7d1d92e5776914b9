"""The one-line verdict per head.

When the claims section ran (the default), the verdict is the combined sentence of the
head's claims (:func:`claims_verdict`, :mod:`probe.analyses.claims.summary`), which never
states more than the claims do. :func:`verdict` is the fallback for reports built without
it (``--sections`` naming others): a line joined from the hints the sections declare
(``Analysis.shows.verdict``, :class:`probe.app.registry.presentation.VerdictHint`), each
reading the evidence; this module knows no section by name.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

from probe.app.registry.evidence import HeadEvidence

#: how far above its positional baseline a relation must be to call a head syntactic
#: (Voita et al. 2019's 10 points)
SYNTAX_MARGIN = 10.0
#: and how accurate (percent) before the relation is worth a verdict
SYNTAX_MIN_ACCURACY = 30.0
#: an ablation effect smaller than this share of the largest head's "changes little"
MATTERS_FRACTION = 0.5


def num(x: Any) -> "float | None":
    """``x`` as a float, ``None`` when it is not a number or NaN."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def pct(x: Any) -> "float | None":
    """Accuracy as a percentage, whether given as a fraction or as percent."""
    v = num(x)
    if v is None:
        return None
    return v * 100 if v <= 1.0 else v


#: what a section that did not run says: nothing (no label, value, interval or numbers)
SILENT = HeadEvidence("", "")


def _headlines(evidence: Iterable[HeadEvidence]) -> dict:
    """kind -> the first headline :class:`probe.app.registry.evidence.HeadEvidence` of that kind."""
    out: dict = {}
    for ev in evidence:
        if ev.headline:
            out.setdefault(ev.kind, ev)
    return out


def claims_verdict(claims: dict) -> str:
    """The verdict from a head's claims (kind -> :class:`probe.analyses.claims.claim.Claim`)."""
    from probe.analyses.claims.summary import summary_sentence

    return summary_sentence(claims)


def _said(by: dict, cls: str, sep: str) -> dict:
    """slot -> the non-empty parts the registered analyses' hints say, in registry order."""
    from probe.app.registry import registered

    out: dict = {}
    for analysis in registered():
        for hint in analysis.shows.verdict:
            text = hint.say(by, cls, sep)
            if text:
                out.setdefault(hint.slot, []).append(text)
    return out


def verdict(evidence: Iterable[HeadEvidence], cls: str = "[CLS]", sep: str = "[SEP]") -> str:
    """The one-line verdict of a head from its evidence (the
    :class:`probe.app.registry.evidence.HeadEvidence` of every section that ran).

    Each registered analysis' hints (``Analysis.shows.verdict``) read the head's first
    headline evidence of each kind; the line is the first ``what`` said, then the
    ``effect`` parts joined by ", " (after " and " when it starts "matters", else "; "),
    then each ``remark`` after "; ".
    """
    said = _said(_headlines(evidence), cls, sep)
    what = (said.get("what") or [""])[0]
    effect = ", ".join(said.get("effect", ()))
    if what and effect:
        joiner = " and " if effect.startswith("matters") else "; "
        line = what + joiner + effect
    else:
        line = what or effect
    for remark in said.get("remark", ()):
        line = f"{line}; {remark}" if line else remark
    return line or "no evidence yet (no role, syntax or ablation section ran)"
