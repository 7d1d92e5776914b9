"""The parts of a run that are plain data: what the user gave (:class:`Inputs`), what a
report gathers apart from the run (:class:`ReportState`) and the running analysis'
parameters (:class:`Params`); the run itself is :class:`probe.app.registry.context.Context`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

__all__ = ["Inputs", "Params", "ReportState"]


@dataclass(frozen=True)
class Inputs:
    """What the user gave as input: ``--text`` (repeatable), ``--file`` or ``--conllu``
    (at most one of the three; none: a zoo model's own evaluation set)."""

    text: Sequence[str] = ()
    file: Optional[str] = None
    conllu: Optional[str] = None


@dataclass
class ReportState:
    """What a report gathers while its sections run, kept apart from the run they read
    (:class:`Context`: the model, corpus, engine and objective). The report owns it
    (:mod:`probe.app.report`); a command's or ``probe.run``'s run has an empty one.

    Attributes:
        results: analysis name -> the :class:`probe.app.registry.Result` it produced;
            written by the report's section runner (:mod:`probe.app.report.sections`) alone
            (analyses read them by type: :meth:`Context.result_of`).
        skipped: analysis name -> why it was skipped or failed (later sections give the reason).
        streamed: analysis name -> its declared accumulators (``Analysis.accumulators``)
            filled by an engine's pass over the whole corpus (:meth:`Context.accumulated`
            fills them from the held maps when no engine did).
        on_engine: the streamed statistics of the whole corpus
            (:class:`probe.app.report.engine_sections.EngineRun`), or ``None``.
        settings: JSON-able settings shown in the report (model, limit, and under
            ``choices`` the lines the run said, :attr:`Context.said`, copied by the report:
            :func:`probe.app.report.sections.note_choices`).
        representatives: example indices shown on every page (the report's
            :func:`probe.app.report.examples.representative_examples` when empty).
        overrides: section parameters the user set for every section that declares them
            (``probe report --max-model-examples/--explained-examples``); the section runner
            gives each section its parameters (:meth:`Context.with_params`).
    """

    results: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    streamed: dict = field(default_factory=dict)
    on_engine: Optional[Any] = None
    settings: dict = field(default_factory=dict)
    representatives: list = field(default_factory=list)
    overrides: dict = field(default_factory=dict)


class Params(dict):
    """The running analysis' parameters (its declared ones, defaults filled in): read-only,
    fixed when the analysis starts (:meth:`Context.with_params`)."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("an analysis' parameters are fixed when it starts: give them to ctx.with_params(...)")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = _refuse

    def __reduce__(self) -> tuple:  # pickled and copied without __setitem__
        return (Params, (dict(self),))
