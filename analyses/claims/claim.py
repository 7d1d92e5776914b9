"""One claim about one head: :class:`Claim` (its kinds: :mod:`.protocol`)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

#: a causal claim that holds under some removal baselines and not others (:mod:`.baselines`)
DEPENDS = "depends on the baseline"
#: the outcomes of a claim
STATUSES = ("holds", "does not hold", DEPENDS, "not tested", "not enough evidence")


@dataclass(frozen=True)
class Claim:
    """A per-head statement with its evidence.

    Attributes:
        kind: a registered claim kind (:func:`.protocol.claim_kinds`).
        status: one of :data:`STATUSES`.
        statement: what is claimed, in words ("previous-token", "det (dep→head)", …).
        effect: the effect size (unit in ``unit``); ``ci_low``/``ci_high`` its interval.
        count: instances it rests on (rows, dependencies, examples).
        null: what the effect was compared with (a number, e.g. the baseline).
        threshold: the name of the threshold in :mod:`.thresholds` it was judged by.
        reason: why it is not tested / not enough evidence, or the one-line evidence.
        extra: other numbers (p-value, ranks, profile …).
    """

    kind: str
    status: str
    statement: str = ""
    effect: float = float("nan")
    ci_low: float = float("nan")
    ci_high: float = float("nan")
    count: int = 0
    null: float = float("nan")
    unit: str = ""
    threshold: str = ""
    reason: str = ""
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        from .protocol import claim_kinds

        if self.status not in STATUSES:
            raise ValueError(f"claim status must be one of {STATUSES}, got {self.status!r}")
        if self.kind not in claim_kinds():
            raise ValueError(f"claim kind must be one of {claim_kinds()}, got {self.kind!r}")

    @property
    def holds(self) -> bool:
        return self.status == "holds"

    def to_dict(self) -> dict:
        """JSON-able (NaN → None)."""

        def clean(v: Any) -> Any:
            if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
                return None
            if hasattr(v, "item"):
                return clean(v.item())
            if isinstance(v, dict):
                return {str(k): clean(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [clean(x) for x in v]
            return v

        d = asdict(self)
        d.pop("kind")
        return clean(d)


def not_tested(kind: str, reason: str, **kw: Any) -> Claim:
    """A claim of ``kind`` that was not tested, with the reason."""
    return Claim(kind, "not tested", reason=reason, **kw)
