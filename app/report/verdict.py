"""The one-line verdict per head.

When the claims section ran (the default), the verdict is the combined sentence of the
head's claims (:func:`claims_verdict`, :mod:`probe.analyses.claims.summary`), which never
states more than the claims do. :func:`verdict` is the fallback for reports built without
it (``--sections`` naming others): a line from the evidence the sections declared.
"""

from __future__ import annotations

import math

from probe.app.registry.evidence import HeadEvidence

#: how far above its positional baseline a relation must be to call a head syntactic
#: (Voita et al. 2019's 10 points)
SYNTAX_MARGIN = 10.0
#: and how accurate (percent) before the relation is worth a verdict
SYNTAX_MIN_ACCURACY = 30.0
#: an ablation effect smaller than this share of the largest head's "changes little"
MATTERS_FRACTION = 0.5


def _num(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def _pct(x):
    """Accuracy as a percentage, whether given as a fraction or as percent."""
    v = _num(x)
    if v is None:
        return None
    return v * 100 if v <= 1.0 else v


#: what a section that did not run says: nothing (no label, value, interval or numbers)
_SILENT = HeadEvidence("", "")


def _headlines(evidence) -> dict:
    """kind -> the first headline :class:`probe.app.registry.evidence.HeadEvidence` of that kind."""
    out: dict = {}
    for ev in evidence:
        if ev.headline:
            out.setdefault(ev.kind, ev)
    return out


def _what(by: dict, cls: str, sep: str) -> str:
    r, syn = by.get("role", _SILENT), by.get("syntax", _SILENT)
    role = r.label
    rel = syn.label or None
    acc, base = _pct(syn.value), _pct(syn.number("baseline"))
    syntactic = (
        rel is not None
        and acc is not None
        and base is not None
        and acc - base >= SYNTAX_MARGIN
        and acc >= SYNTAX_MIN_ACCURACY
    )
    if role.startswith("syntactic") or (not role and syntactic) or (role.startswith("attends ") and syntactic):
        if rel is not None and acc is not None and base is not None:
            return f"looks syntactic ({rel}, {acc:.0f}% vs {base:.0f}% baseline)"
        return f"looks syntactic ({role})"
    if role == "special-token":
        c, s = r.number("to_cls") or 0.0, r.number("to_sep") or 0.0
        return f"attends to {sep if s >= c else cls} ({max(c, s):.0%} of its attention)"
    if role in ("previous-token", "next-token", "self"):
        share = r.number("positional_share")
        where = {"previous-token": "the previous token", "next-token": "the next token", "self": "the token itself"}[
            role
        ]
        return f"attends to {where}" + (f" ({share:.0%} of rows peak there)" if share is not None else "")
    if role == "broad":
        return "attends broadly (no single token stands out)"
    if role == "punctuation":
        p = r.number("to_punct")
        return "attends to punctuation" + (f" ({p:.0%})" if p is not None else "")
    if role.startswith("attends "):  # no rule named it: its two largest components
        return role
    if role:
        return f"looks like a {role} head"
    return ""


def _effect(by: dict) -> str:
    ev = by.get("ablation", _SILENT)
    d = _num(ev.value)
    if d is None:
        return ""
    name, ci = ev.unit or "effect", ev.ci
    if ci is not None and ci[0] <= 0.0 <= ci[1]:
        return f"ablating it changes nothing ({name} {d:+.3g}, CI [{ci[0]:+.3g}, {ci[1]:+.3g}])"
    rel = ev.number("relative")
    if rel is not None and rel < MATTERS_FRACTION:
        return f"ablating it changes little ({name} {d:+.3g}, {rel:.0%} of the largest head effect)"
    return f"matters ({name} {d:+.3g})"


def _faithful(by: dict) -> str:
    ev = by.get("faithfulness", _SILENT)
    v = ev.label
    if not v:
        return ""
    tau, ref = _num(ev.value), ev.numbers.get("reference") or ""
    if v == "weights irrelevant":  # permuting one head alone changed nothing: not "meaningless"
        return "permuting its weights alone changes nothing"
    return f"weights {v} with {ref or 'attributions'}" + (f" (τ {tau:+.2f})" if tau is not None else "")


def claims_verdict(claims: dict) -> str:
    """The verdict from a head's claims (kind -> :class:`probe.analyses.claims.claim.Claim`)."""
    from probe.analyses.claims.summary import summary_sentence

    return summary_sentence(claims)


def verdict(evidence, cls: str = "[CLS]", sep: str = "[SEP]") -> str:
    """The one-line verdict of a head from its evidence (the
    :class:`probe.app.registry.evidence.HeadEvidence` of every section that ran).

    Read: the ``role`` (its label and ``numbers``: ``to_cls``, ``to_sep``, ``to_punct``,
    ``positional_share``), the ``syntax`` best relation (label, accuracy, ``numbers["baseline"]``),
    the ``ablation`` effect (value, interval, unit, ``numbers["relative"]``), the
    ``importance`` rank (``numbers``: ``rank``, ``of``) and the ``faithfulness`` verdict
    (label, τ, ``numbers["reference"]``).
    """
    by = _headlines(evidence)
    what, effect = _what(by, cls, sep), _effect(by)
    imp = by.get("importance", _SILENT)
    rank, of = imp.number("rank"), imp.number("of")
    if rank is not None:
        r = f"importance rank {rank:.0f}" + (f"/{of:.0f}" if of is not None else "")
        effect = f"{effect}, {r}" if effect else r
    if what and effect:
        joiner = " and " if effect.startswith("matters") else "; "
        line = what + joiner + effect
    else:
        line = what or effect
    faith = _faithful(by)
    if faith:
        line = f"{line}; {faith}" if line else faith
    return line or "no evidence yet (no role, syntax or ablation section ran)"
