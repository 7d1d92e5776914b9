"""One vocabulary for what a head attends to, shared by ``probe roles`` and the pattern claim.

A head is named by a role when a rule clears its threshold (:mod:`.roles`,
:mod:`probe.analyses.claims.pattern`); otherwise by its two largest components,
``"attends 35% [CLS], 7% itself"`` (:func:`profile_role`). There is no "mixed/unclear".
"""

from __future__ import annotations

__all__ = ["COMPONENTS", "PROFILE", "profile_words", "profile_role", "component_names"]

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


def profile_role(shares: dict, names: dict) -> str:
    """The role string of a head no rule names: ``"attends 43% [CLS], 31% next token"``."""
    return f"attends {profile_words(shares, names)}"
