"""One sentence per head that combines its claims and never states more than they do."""

from __future__ import annotations

from typing import Any

from .claim import DEPENDS


def _num(c, digits: int = 3) -> str:
    v = c.effect
    return "" if v != v else f"{v:+.{digits}g}"


#: a pattern rule's feature in words (the share it is a share of)
UNIT_WORDS = {
    "argmax_prev": "of rows peak on the previous token",
    "argmax_next": "of rows peak on the next token",
    "argmax_self": "of rows peak on the token itself",
    "argmax_rare": "of rows peak on the rarest token",
    "to_special": "of its attention on special tokens",
    "to_punct": "of its attention on punctuation",
    "induction": "of its attention on induction targets",
    "duplicate": "of its attention on earlier copies",
    "entropy_ratio": "of a uniform row's entropy",
    "max_attention": "mean largest weight of a row",
}


def pattern_words(p: Any) -> str:
    """``previous-token head (99% of rows peak on the previous token)``."""
    unit = UNIT_WORDS.get(p.unit, p.unit)
    where = f", most on {p.extra['parks_on']}" if p.extra.get("parks_on") else ""
    return f"{p.statement} head ({p.effect:.0%} {unit}{where})"


def _registered_words(claims: dict) -> list:
    """The words of the claim kinds that declare their own (``ClaimTest.summary``), in order."""
    from .protocol import claim_tests

    said = (t.summary(claims[t.kind]) for t in claim_tests() if t.summary is not None and t.kind in claims)
    return [w for w in said if w]


def summary_sentence(claims: dict) -> str:
    """``claims``: kind -> :class:`.claim.Claim`. Holds are stated with their number;
    a necessity or weights test that did not hold is stated as *not shown alone*; a
    registered kind with its own words (``ClaimTest.summary``) adds them last."""
    parts = []
    p = claims.get("pattern")
    if p is not None:
        if p.holds:
            parts.append(pattern_words(p))
        elif p.status == "does not hold":
            parts.append(f"attends {p.statement}")
    s = claims.get("structure")
    if s is not None and s.holds:
        parts.append(
            f"follows {s.statement} ({s.extra.get('accuracy', float('nan')):.0%} vs {s.null:.0%} "
            f"best offset, n={s.count})"
        )
    n = claims.get("necessity")
    r = claims.get("redundancy")
    if n is not None and n.holds:
        parts.append(
            f"needed alone ({n.extra.get('objective')} harm {n.effect:+.3g} "
            f"[{n.ci_low:+.3g}, {n.ci_high:+.3g}], floor {n.null:.3g}, n={n.count})"
        )
    elif n is not None and n.status == DEPENDS:
        parts.append(f"needed alone under some baselines only ({n.reason})")
    elif r is not None and r.holds:
        parts.append(f"redundant: {r.statement}")
    elif n is not None and n.status == "does not hold":
        parts.append("not shown to be needed alone")
    w = claims.get("weights")
    if w is not None and w.holds:
        if w.extra.get("reading") == "inert sink":
            parts.append(
                f"{w.statement}; spreading it harms {w.extra.get('objective')} by {w.effect:+.3g} "
                f"(removing it: {w.extra.get('removal_harm', float('nan')):+.3g})"
            )
        else:
            parts.append(
                f"where it looks matters ({w.statement}: uniform weights harm "
                f"{w.extra.get('objective')} by {w.effect:+.3g})"
            )
    a = claims.get("attribution")
    if a is not None and a.holds:
        parts.append(f"agrees with {a.extra.get('reference', 'attributions')} (τ {a.effect:+.2f})")
    top1 = a.extra.get("evidence_top1_rate") if a is not None else None
    if a is not None and top1 is not None and top1 >= 0.5:
        parts.append(f"ranks the evidence word first in {top1:.0%} of {a.count} examples")
    parts += _registered_words(claims)
    if not parts:
        return "no claim could be tested"
    text = "; ".join(parts)
    return text[0].upper() + text[1:]
