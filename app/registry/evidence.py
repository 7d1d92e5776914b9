"""Per-head evidence: what one analysis says about one head, as one object.

An analysis declares its evidence once, next to the analysis: its presentation
(``Analysis.shows.evidence``, :mod:`probe.app.registry.presentation`) is a function
``evidence(result) -> {(layer, head): [HeadEvidence, …]}``, written in the analysis' own
module from its own result's tables. Head pages, the verdict,
``report.md`` and ``summary.json`` render those objects and nothing else, so no renderer
knows a column of another section's table, and a count printed beside an interval is the
``count`` of the object: the examples the analysis really ran on, never the corpus size.

:func:`collect` gathers every result's evidence by head.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Optional

__all__ = ["HeadEvidence", "collect", "finite"]


def finite(v: Any) -> bool:
    """``v`` is a finite number (not ``None``, a string, NaN or ±inf)."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True)
class HeadEvidence:
    """One statement of one analysis about one head, in words and numbers.

    Attributes:
        section: the analysis that produced it (``ablation``, ``roles``, …).
        kind: what it is about within the section (``ablation``, ``role``, ``profile``,
            ``relation``, a claim kind, …).
        text: the sentence, plain text; every number in it is formatted from the fields
            below, so a renderer that prints ``text`` cannot contradict them.
        value: the effect or score (in ``unit``); NaN when the statement has none.
        interval: ``(low, high)``, its 95% interval (NaN, NaN when none).
        count: how many instances ``value`` and ``interval`` rest on (``count_of``: examples,
            sentences, query tokens, instances), or ``None``.
        unit: what ``value`` is in (the metric, ``confidence``, ``Kendall τ``, ``accuracy``).
        label: a categorical answer (the role, the relation, the verdict), or ``""``.
        brief: the statement in a few words, for a table cell (report.md's head table).
        strong: parts of ``text`` a page shows in bold, in the order they occur.
        headline: one column of report.md's head table (``False`` for details a page draws:
            an attention profile, one relation among many, a claim with its own table).
        parts: ``(label, value)`` pairs a page draws as a picture (an attention profile).
        numbers: every other number the text quotes or a verdict reads, by name.
        status, test, floor: a claim's status, the test and the threshold it was held to.
    """

    section: str
    kind: str
    text: str = ""
    value: float = float("nan")
    interval: tuple = (float("nan"), float("nan"))
    count: Optional[int] = None
    count_of: str = ""
    unit: str = ""
    label: str = ""
    brief: str = ""
    strong: tuple = ()
    headline: bool = True
    parts: tuple = ()
    numbers: dict = field(default_factory=dict)
    status: str = ""
    test: str = ""
    floor: float = float("nan")

    @property
    def ci(self) -> Optional[tuple]:
        """``interval`` when both ends are finite, else ``None``."""
        lo, hi = self.interval
        return (float(lo), float(hi)) if finite(lo) and finite(hi) else None

    def number(self, name: str) -> Optional[float]:
        """``numbers[name]`` when it is a finite number, else ``None``."""
        v: Any = self.numbers.get(name)
        return float(v) if finite(v) else None

    def to_dict(self) -> dict:
        """JSON-able (NaN → ``None``, numpy scalars → Python numbers), without the fields
        that say nothing (empty, ``None``, NaN) beside ``section``, ``kind`` and ``text``."""

        def clean(v: Any) -> Any:
            if hasattr(v, "item"):
                v = v.item()
            if isinstance(v, float) and not math.isfinite(v):
                return None
            if isinstance(v, dict):
                return {str(k): clean(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [clean(x) for x in v]
            return v

        keep = ("section", "kind", "text", "headline")
        d = clean(asdict(self))
        return {k: v for k, v in d.items() if k in keep or v not in (None, "", [], {}, [None, None])}


def collect(ran: Iterable[tuple]) -> dict:
    """``{(layer, head): [HeadEvidence, …]}`` of every ``(analysis, result)`` in ``ran``
    (in order), as each analysis declares it (``analysis.shows.head_evidence(result)``)."""
    out: dict = {}
    for analysis, result in ran:
        for key, items in analysis.shows.head_evidence(result).items():
            out.setdefault((int(key[0]), int(key[1])), []).extend(items)
    return out
