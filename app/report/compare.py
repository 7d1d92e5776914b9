"""Compare two reports' ``summary.json``: per-head facts and section summaries, floats to
a tolerance (``probe report --engine local`` against ``--engine stream|ray``; used by
``bench/compare_summaries.py`` and the engine tests)."""

from __future__ import annotations

from typing import Any

import math

from probe.errors import InputError

__all__ = ["TIMINGS", "TOLERANCE", "close", "fact_differences", "fact_count"]

#: relative or absolute: what "equal" means between two engines' floats
TOLERANCE = 1e-6
#: keys whose values measure the run (wall time), not its results: present in both, never compared
TIMINGS = frozenset({"seconds"})


def close(a: Any, b: Any, tol: float = TOLERANCE) -> bool:
    """``a == b`` with floats equal to ``tol`` (relative or absolute), through dicts and lists;
    a dict's :data:`TIMINGS` must be in both, their values are not compared."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=tol, abs_tol=tol)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(k in TIMINGS or close(a[k], b[k], tol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y, tol) for x, y in zip(a, b))
    return a == b


def _facts(head: dict) -> dict:
    """A head's facts by section, its claims included (section ``claims:<kind>``: every
    field of the claim, its evidence and extra numbers)."""
    out = dict(head.get("facts") or {})
    for kind, claim in (head.get("claims") or {}).items():
        out[f"claims:{kind}"] = claim
    return out


def fact_differences(a: dict, b: dict, tol: float = TOLERANCE) -> list:
    """``(layer, head, section, fact, value in a, value in b)`` for every per-head fact the
    two summaries do not share within ``tol`` (a fact one of them lacks: ``None`` there);
    each claim's fields count as facts of section ``claims:<kind>``.

    Raises:
        InputError: the summaries list other heads (different models or layers).
    """
    out = []
    for ha, hb in zip(a["heads"], b["heads"], strict=True):
        if (ha["layer"], ha["head"]) != (hb["layer"], hb["head"]):
            raise InputError(
                f"the summaries list other heads: L{ha['layer']}H{ha['head']} vs L{hb['layer']}H{hb['head']}"
            )
        facts_a, facts_b = _facts(ha), _facts(hb)
        for sec in sorted(set(facts_a) | set(facts_b)):
            fa, fb = facts_a.get(sec, {}), facts_b.get(sec, {})
            for k in sorted(set(fa) | set(fb)):
                if k not in fa or k not in fb or not close(fa[k], fb[k], tol):
                    out.append((ha["layer"], ha["head"], sec, k, fa.get(k), fb.get(k)))
    return out


def fact_count(summary: dict) -> tuple:
    """``(facts, claim fields)`` compared by :func:`fact_differences` in ``summary``."""
    facts = sum(len(f) for h in summary["heads"] for f in (h.get("facts") or {}).values())
    claims = sum(len(c) for h in summary["heads"] for c in (h.get("claims") or {}).values())
    return facts, claims
