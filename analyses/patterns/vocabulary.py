"""One vocabulary for what a head attends to, shared by ``probe roles`` and the pattern claim.

A head is named by a role when a rule of :data:`RULES` clears its threshold, the same rule
for both (:func:`choose_rule`: the largest normalised margin ``(v − t) / (1 − t)``, ties in
the order of :data:`RULES`; a share on punctuation or on the rarest token must also be
twice what a head attending at random gets; ``broad`` also when the mean largest weight of
a row is at most its threshold); otherwise by its two largest components,
``"attends 35% [CLS], 7% itself"`` (:func:`profile_role`). Role names are the same strings
everywhere ("special-token", not "attends to [CLS]": where the head parks its attention is
in its profile). There is no "mixed/unclear". Thresholds come from Voita et al. (2019),
Clark et al. (2019) and Olsson et al. (2022); each caller passes its own values.
"""

from __future__ import annotations

from typing import Mapping, Optional

__all__ = [
    "COMPONENTS",
    "PROFILE",
    "RULES",
    "Rule",
    "base_role",
    "choose_rule",
    "nearest_rule",
    "profile_words",
    "profile_role",
    "component_names",
]

#: profile components: feature column -> words ({cls}/{sep}: the model's special tokens)
COMPONENTS = {
    "prev": "previous token",
    "next": "next token",
    "self": "itself",
    "to_cls": "{cls}",
    "to_sep": "{sep}",
    "to_punct": "punctuation",
    "to_rare": "the rarest token",
    "induction": "induction target",
    "duplicate": "earlier copies of its token",
}
#: the base role of a head named by its profile
PROFILE = "profile"


def component_names(cls: str = "[CLS]", sep: str = "[SEP]") -> dict:
    return {c: w.format(cls=cls, sep=sep) for c, w in COMPONENTS.items()}


def profile_words(shares: dict, names: dict, k: int = 2) -> str:
    """``"43% [CLS], 31% next token"``: the ``k`` largest components (NaN left out)."""
    items = sorted(((v, c) for c, v in shares.items() if v == v and v is not None), reverse=True)[:k]
    return ", ".join(f"{v:.0%} {names[c]}" for v, c in items)


def base_role(role: object) -> str:
    """``"syntactic (nsubj)"`` → ``"syntactic"``; ``"attends 35% [CLS], …"`` (a profile) →
    :data:`PROFILE`; other roles unchanged; ``None`` → ``""``."""
    role = "" if role is None else str(role)
    if role.startswith("attends "):
        return PROFILE
    return role.split(" (", 1)[0].strip()


def profile_role(shares: dict, names: dict) -> str:
    """The role string of a head no rule names: ``"attends 43% [CLS], 31% next token"``."""
    return f"attends {profile_words(shares, names)}"


#: the role rules, in tie-break order: (role, feature, threshold key)
RULES = (
    ("induction", "induction", "induction"),
    ("duplicate-token", "duplicate", "duplicate"),
    ("previous-token", "argmax_prev", "positional"),
    ("next-token", "argmax_next", "positional"),
    ("self", "argmax_self", "positional"),
    ("rare-word", "argmax_rare", "rare"),
    ("special-token", "to_special", "special"),
    ("punctuation", "to_punct", "punctuation"),
    ("broad", "entropy_ratio", "broad_entropy_ratio"),
)
#: chance share per rule feature: what a head attending at random gets (``over_chance`` × it to count)
_CHANCE = {"argmax_rare": "rare_chance", "to_punct": "punct_chance"}

Rule = tuple  # (role, feature, effective threshold, value)


def _rule_values(shares: Mapping, thresholds: Mapping, over_chance: float) -> list:
    """``[(role, feature, effective threshold, value)]`` for every rule with a value."""
    out = []
    for role, feat, key in RULES:
        v = shares.get(feat)
        if v is None or not v == v or key not in thresholds:
            continue
        t = float(thresholds[key])
        chance = shares.get(_CHANCE.get(feat, ""))
        if chance is not None and chance == chance:
            t = max(t, over_chance * float(chance))
        out.append((role, feat, t, float(v)))
    return out


def choose_rule(
    shares: Mapping, thresholds: Mapping, over_chance: float = 2.0, broad_max_attention: Optional[float] = None
) -> Optional[Rule]:
    """The rule that names a head, or ``None`` (name it by its profile).

    Args:
        shares: feature → value (``argmax_prev``, ``to_special``, …, ``rare_chance`` and
            ``punct_chance`` for the chance bars, ``max_attention`` for broad-by-peak).
        thresholds: threshold key of :data:`RULES` → value.
        over_chance: how many times the chance share a punctuation / rare-word share must be.
        broad_max_attention: ``broad`` also when ``max_attention`` ≤ this (no rule cleared).

    Returns:
        ``(role, feature, threshold, value)``: the cleared rule with the largest
        ``(value − threshold) / (1 − threshold)``, the first of :data:`RULES` on a tie.
    """
    best, margin = None, -float("inf")
    for role, feat, t, v in _rule_values(shares, thresholds, over_chance):
        if v < t:
            continue
        m = (v - t) / (1 - t) if t < 1 else 0.0
        if m > margin:
            best, margin = (role, feat, t, v), m
    peak = shares.get("max_attention")
    if best is None and broad_max_attention is not None and peak is not None and peak == peak:
        if float(peak) <= broad_max_attention:
            best = ("broad", "max_attention", float(broad_max_attention), float(peak))
    return best


def nearest_rule(shares: Mapping, thresholds: Mapping, over_chance: float = 2.0) -> Optional[Rule]:
    """The rule a head no rule names comes closest to (largest ``value / threshold``), or ``None``."""
    vals = [r for r in _rule_values(shares, thresholds, over_chance) if r[2] > 0]
    return max(vals, key=lambda r: r[3] / r[2], default=None)
