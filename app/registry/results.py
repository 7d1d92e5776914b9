"""What the analyses that others read produce, as types.

An analysis declares ``produces`` (one of these, or the plain :class:`Result`) and
``consumes`` (the types it reads when the analyses producing them ran). A reader asks
the run for an object by its type, ``ctx.result_of(AblationResult)``, and gets the
typed result, or ``None`` when no analysis of the run produced it; it never names
another analysis or one of its dictionary keys. The keys a result keeps in its
``tables``/``data`` are known to its own class alone (the properties below), so a
result saved by a resumable report (:mod:`probe.app.report.resume`) and loaded back as
its class reads the same.

Only results that other analyses read need a class here; an analysis nobody reads returns
a plain :class:`Result` (or a class of its own module). What a result shows on head pages
is declared by its analysis (``Analysis.shows``, :mod:`probe.app.registry.presentation`).
"""

from __future__ import annotations

from typing import Any, Optional

from . import Result

__all__ = [
    "AblationResult",
    "ClaimsResult",
    "FaithfulnessResult",
    "ImportanceResult",
    "RolesResult",
    "RolloutResult",
    "SyntaxResult",
]


class AblationResult(Result):
    """The single-head ablation sweep (``ablation``): table ``ablation`` (``layer, head,
    metric, mode, clean, ablated, delta, ci_low, ci_high``), the sweep itself and, when its
    values were read from one, the claims' removal sweep."""

    @property
    def table(self) -> Any:
        return self.tables.get("ablation")

    @property
    def sweep(self) -> Any:
        """:class:`probe.analyses.necessity.ablation.SweepResult`: per-example scores
        (``ablated``: ``[head, example]``), reused by the claims' removals."""
        return self.data.get("sweep")

    @property
    def removals(self) -> Any:
        """:class:`probe.analyses.claims.removal.RemovalSweep` of every head in this
        section's mode on the claims' objective, when the section read its values from it
        (the claims then reuse it), else ``None``."""
        return self.data.get("removals")

    @property
    def n_examples(self) -> Optional[int]:
        """Examples the sweep ran on (the count behind its intervals), or ``None``."""
        ablated = getattr(self.sweep, "ablated", None)
        return int(ablated.shape[1]) if ablated is not None else None


class ImportanceResult(Result):
    """Head importance (``importance``): table ``importance`` (``layer, head, …``)."""

    @property
    def table(self) -> Any:
        return self.tables.get("importance")


class FaithfulnessResult(Result):
    """Attention against attributions (``faithfulness``): table ``verdict`` per head, the
    target explained and the run's numbers (``summary``: ``n_examples``, ``target``, …)."""

    @property
    def verdict(self) -> Any:
        return self.tables.get("verdict")

    @property
    def target(self) -> Optional[str]:
        return self.data.get("target")

    @property
    def n_examples(self) -> Optional[int]:
        return (self.summary or {}).get("n_examples")


class SyntaxResult(Result):
    """Dependency relations against positional baselines (``syntax``): tables ``best``
    (the best head per relation and direction) and ``relations``."""

    @property
    def best(self) -> Any:
        return self.tables.get("best")

    @property
    def relations(self) -> Any:
        return self.tables.get("relations")


class RolesResult(Result):
    """Head roles (``roles``): table ``roles`` (``layer, head, role, confidence, …``)."""

    @property
    def roles(self) -> Any:
        return self.tables.get("roles")


class RolloutResult(Result):
    """The report's rollout and flow (``rollout``): table ``scores`` (``example, method,
    output_position, input_position, score``)."""

    @property
    def scores(self) -> Any:
        return self.tables.get("scores")


class ClaimsResult(Result):
    """Every head's claims (``claims``): the
    :class:`probe.analyses.claims.heads.HeadClaims` and their tables."""

    @property
    def claims(self) -> Any:
        return self.data.get("claims")
