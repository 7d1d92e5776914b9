"""What the report shows of an analysis, declared beside the analysis.

Each registered :class:`probe.app.registry.Analysis` carries a :class:`Presentation`
(``Analysis.shows``), written in its own module (``app/registry/analyses/<name>.py``). The
report (:mod:`probe.app.report`) iterates over the registered analyses and reads these
declarations; it knows no section by name. A presentation says:

- ``evidence``: what the analysis says about each head (``evidence(result) ->
  {(layer, head): [HeadEvidence, …]}``, :mod:`probe.app.registry.evidence`), and the
  evidence ``kinds`` it declares;
- ``block``: the titled block of a head page (:class:`HeadBlock`);
- ``tables``: how its index-page tables are sorted, which columns lead and the count
  under which a row is greyed (:class:`TableView`);
- ``verdict``: its part of the one-line verdict of reports built without claims
  (:class:`VerdictHint`);
- ``mark``: the mark of a head's grid cell (:class:`HeadMark`);
- ``tag``: a few words in a head's grid cell beside its role (:class:`GridTag`);
- ``streamed``: what an engine computes of it over the whole corpus (:class:`Streamed`);
- ``claims``: its evidence is the heads' claims (shown at the top of a head page and as
  ``claims`` in summary.json, not among the other evidence): ``claims(result) -> HeadClaims``
  gives them (the verdicts are read from them);
- ``notes_beside_claims``: its notes as the claims read them (the roles' counts per role
  follow the pattern claims, as its table does).

A new analysis that shows nothing declares nothing: the report lists its tables and its
per-head facts under its title.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    from . import Result

__all__ = [
    "CLAIMS_FIELD",
    "GridTag",
    "HeadBlock",
    "HeadMark",
    "Presentation",
    "Streamed",
    "TableView",
    "VerdictHint",
    "VERDICT_SLOTS",
]

#: the field of summary.json (format "attention-probe report 1") that holds a head's claims
#: and the claims' overview, whichever analysis makes them
CLAIMS_FIELD = "claims"
#: the parts of a verdict line, in the order they are joined: what the head does, how much
#: it matters (joined by ", "), and remarks (each after "; ")
VERDICT_SLOTS = ("what", "effect", "remark")


@dataclass(frozen=True)
class HeadBlock:
    """A titled block of a head page.

    Attributes:
        title: the block's heading.
        render: ``render(data, layer, head) -> str``: HTML from the report's data
            (:class:`probe.app.report.build.ReportData`; its ``evidence``), ``""`` when
            the analysis says nothing about this head.
        order: position on the page (smaller first; blocks before sections without one).
    """

    title: str
    render: Callable[[Any, int, int], str]
    order: int = 100


@dataclass(frozen=True)
class TableView:
    """How one of the analysis' tables is shown on the index page (strongest first).

    Attributes:
        sort: the column sorted on (``|col|``: by absolute value; ``margin``: accuracy −
            ``baseline_accuracy``, added when missing).
        ascending: sort order.
        columns: the columns shown first (``None``: all, as they are).
        min_count: rows whose ``count`` is under it are greyed and put last; ``None``: the
            section's own ``summary["min_count"]``.
        min_count_source: who set ``min_count`` (said in the legend), or ``""``.
        colour: a signed column whose cells are tinted by value (red above 0, blue below,
            the strongest shown row the deepest), or ``None``.
        beside_claims: ``beside_claims(df, claims) -> df``: the shown rows as the claims
            read them (``claims``: ``{(layer, head): {kind: Claim}}`` when the claims
            ran), e.g. a role whose pattern claim does not hold in parentheses with the
            claim's status beside it; ``None``: shown as they are.
    """

    sort: str
    ascending: bool = False
    columns: Optional[tuple] = None
    min_count: Optional[int] = None
    min_count_source: str = ""
    colour: Optional[str] = None
    beside_claims: Optional[Callable[[Any, dict], Any]] = None


@dataclass(frozen=True)
class VerdictHint:
    """The analysis' part of the fallback verdict (:func:`probe.app.report.verdict.verdict`).

    Attributes:
        slot: one of :data:`VERDICT_SLOTS`: ``what`` (the first hint that says something
            wins), ``effect`` (every hint's part, joined by ", "), ``remark`` (each after "; ").
        say: ``say(by_kind, cls, sep) -> str``: ``by_kind`` maps an evidence kind to the
            head's first headline :class:`probe.app.registry.evidence.HeadEvidence` of it
            (every section's), ``cls``/``sep`` name the first and last special tokens;
            ``""`` when it has nothing to say.
    """

    slot: str
    say: Callable[[dict, str, str], str]

    def __post_init__(self) -> None:
        if self.slot not in VERDICT_SLOTS:
            raise ValueError(f"verdict slot must be one of {VERDICT_SLOTS}, got {self.slot!r}")


@dataclass(frozen=True)
class HeadMark:
    """The symbol of a head's grid cell and page title, saying how much the head matters.

    Attributes:
        mark: ``mark(evidence, n_heads_total) -> (symbol, why)`` from the head's evidence
            of this analysis, or ``None`` when it has none.
        order: the first mark (smallest ``order``) that is not ``None`` is shown.
    """

    mark: Callable[[list, int], Optional[tuple]]
    order: int = 100


@dataclass(frozen=True)
class GridTag:
    """A few words in a head's grid cell, under its role (the decoder taxonomy's roles).

    Attributes:
        tag: ``tag(evidence) -> str`` from the head's evidence of this analysis (``""``: none).
        legend: what the tags mean, printed under the grid when any cell has one.
    """

    tag: Callable[[list], str]
    legend: str = ""


@dataclass(frozen=True)
class Streamed:
    """What an engine (``probe report --engine stream|ray``) computes of the analysis.

    Attributes:
        whole: what is computed over the whole corpus, in words (``""``: nothing).
        part: another part of its work done on the engine, in words (``""``: none).
    """

    whole: str = ""
    part: str = ""


@dataclass(frozen=True)
class Presentation:
    """What the report shows of one analysis (see the module docstring)."""

    evidence: Optional[Callable[[Any], dict]] = None  # takes the analysis' own result type
    kinds: tuple = ()
    block: Optional[HeadBlock] = None
    tables: dict = field(default_factory=dict)
    verdict: tuple = ()
    mark: Optional[HeadMark] = None
    tag: Optional[GridTag] = None
    streamed: Optional[Streamed] = None
    claims: Optional[Callable[[Any], Any]] = None  # (result) -> HeadClaims; set: the evidence is the claims
    #: ``notes_beside_claims(result, claims) -> [line, …]``: the section's notes as the
    #: claims read them (``claims``: ``{(layer, head): {kind: Claim}}`` when the claims ran),
    #: on the index page and in summary.json; ``None``: its notes as they are
    notes_beside_claims: Optional[Callable[[Any, dict], list]] = None

    def notes(self, result: Result, claims: Optional[dict]) -> list:
        """The notes the report shows of ``result``: :attr:`notes_beside_claims` when the
        claims ran and the analysis declares it, else the result's own."""
        if claims and self.notes_beside_claims is not None:
            return list(self.notes_beside_claims(result, claims))
        return list(result.notes)

    def head_evidence(self, result: Result) -> dict:
        """``{(layer, head): [HeadEvidence, …]}`` of ``result`` (``{}`` when the analysis
        declares no evidence)."""
        return self.evidence(result) if self.evidence is not None else {}
