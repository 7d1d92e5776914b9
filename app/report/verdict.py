"""The one-line verdict per head.

When the claims section ran (the default), the verdict is the combined sentence of the
head's claims (:func:`claims_verdict`, :mod:`probe.analyses.claims.summary`), which never
states more than the claims do. :func:`verdict` is the fallback for reports built without
it (``--sections`` naming others): a line from the facts the sections gathered.
"""

from __future__ import annotations

import math

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


def _what(f: dict, cls: str, sep: str) -> str:
    role = str(f.get("role") or "")
    rel, acc, base = f.get("syntax_relation"), _pct(f.get("syntax_accuracy")), _pct(f.get("syntax_baseline"))
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
        c, s = _num(f.get("to_cls")) or 0.0, _num(f.get("to_sep")) or 0.0
        return f"attends to {sep if s >= c else cls} ({max(c, s):.0%} of its attention)"
    if role in ("previous-token", "next-token", "self"):
        share = _num(f.get("positional_share"))
        where = {"previous-token": "the previous token", "next-token": "the next token", "self": "the token itself"}[
            role
        ]
        return f"attends to {where}" + (f" ({share:.0%} of rows peak there)" if share is not None else "")
    if role == "broad":
        return "attends broadly (no single token stands out)"
    if role == "punctuation":
        p = _num(f.get("to_punct"))
        return "attends to punctuation" + (f" ({p:.0%})" if p is not None else "")
    if role.startswith("attends "):  # no rule named it: its two largest components
        return role
    if role:
        return f"looks like a {role} head"
    return ""


def _effect(f: dict) -> str:
    d, lo, hi = _num(f.get("ablation_delta")), _num(f.get("ablation_ci_low")), _num(f.get("ablation_ci_high"))
    name = f.get("ablation_metric") or "effect"
    if d is None:
        return ""
    if lo is not None and hi is not None and lo <= 0.0 <= hi:
        return f"ablating it changes nothing ({name} {d:+.3g}, CI [{lo:+.3g}, {hi:+.3g}])"
    rel = _num(f.get("ablation_relative"))
    if rel is not None and rel < MATTERS_FRACTION:
        return f"ablating it changes little ({name} {d:+.3g}, {rel:.0%} of the largest head effect)"
    return f"matters ({name} {d:+.3g})"


def _faithful(f: dict) -> str:
    v = f.get("faith_verdict")
    if not v:
        return ""
    tau = next((_num(x) for k, x in f.items() if k.startswith("faith_tau_") and not k.endswith("significant")), None)
    ref = next((k[len("faith_tau_") :] for k in f if k.startswith("faith_tau_") and not k.endswith("significant")), "")
    if v == "weights irrelevant":  # permuting one head alone changed nothing: not "meaningless"
        return "permuting its weights alone changes nothing"
    return f"weights {v} with {ref or 'attributions'}" + (f" (τ {tau:+.2f})" if tau is not None else "")


def claims_verdict(claims: dict) -> str:
    """The verdict from a head's claims (kind -> :class:`probe.analyses.claims.claim.Claim`)."""
    from probe.analyses.claims.summary import summary_sentence

    return summary_sentence(claims)


def verdict(facts: dict, cls: str = "[CLS]", sep: str = "[SEP]") -> str:
    """The one-line verdict of a head from its merged facts (column name -> value).

    Known facts: ``role``, ``to_cls``, ``to_sep``, ``to_punct``, ``positional_share``
    (roles); ``syntax_relation``, ``syntax_accuracy``, ``syntax_baseline`` (syntax);
    ``ablation_delta``, ``ablation_ci_low``, ``ablation_ci_high``, ``ablation_metric``
    ``ablation_relative`` (ablation); ``importance_rank``, ``importance_of`` (importance);
    ``faith_verdict``, ``faith_tau_<attribution>`` (faithfulness).
    """
    what, effect = _what(facts, cls, sep), _effect(facts)
    rank, of = _num(facts.get("importance_rank")), _num(facts.get("importance_of"))
    if rank is not None:
        r = f"importance rank {rank:.0f}" + (f"/{of:.0f}" if of is not None else "")
        effect = f"{effect}, {r}" if effect else r
    if what and effect:
        joiner = " and " if effect.startswith("matters") else "; "
        line = what + joiner + effect
    else:
        line = what or effect
    faith = _faithful(facts)
    if faith:
        line = f"{line}; {faith}" if line else faith
    return line or "no evidence yet (no role, syntax or ablation section ran)"
