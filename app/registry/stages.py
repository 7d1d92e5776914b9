"""Named stages of a run: work several analyses read, computed once per run.

A :class:`Stage` is a computation over the run (its model, corpus, objectives, runner) whose
value more than one analysis reads — the shared decided pass of the causal claims
(:mod:`probe.app.registry.removal_stages`) is one: the ablation section's table and the
necessity and weights claims read the same removals. An analysis declares what it reads in
its registration, ``Analysis(..., reads=(DECIDED("necessity"),))``: a :class:`Read` of the
stage, with the parts it asks for and whether its asking starts the stage (``starts``) or
only joins a stage another reader starts (its parts then ride on the same pass). The
report's section runner (:mod:`probe.app.report.sections`) computes each stage once, just
before the first section that reads it runs, from the asks of every section of the run that
reads it; a lone command (``probe ablate``, :func:`probe.app.registry.run`) computes it the
first time its analysis asks. Readers take the value with ``ctx.stage(STAGE)``
(``None``: the stage was not made on this run) and never ask which analysis made it.

A stage's ``compute(ctx, asks)`` takes the run and the :class:`Ask` s of its readers (each
reader's parts and its parameters: its defaults, report parameters and the report's
overrides), and returns the value, or ``None`` when no reader's ask applies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

__all__ = ["Ask", "Read", "Stage", "compute_stage", "reads_of", "stage_value"]


@dataclass(frozen=True)
class Read:
    """An analysis' declaration that it reads ``stage``.

    Attributes:
        stage: the :class:`Stage` read.
        parts: the parts of it this reader asks for (the stage names them).
        starts: this reader's ask makes the stage run; ``False``: it only joins a stage
            another reader starts (its parts ride on that pass) or reads it when made.
        when: ``when(params) -> bool``: whether this reader asks at all with its parameters
            (the ablation section reads the decided pass only for mean-ablation of every
            head); default: always.
    """

    stage: "Stage"
    parts: tuple = ()
    starts: bool = True
    when: Optional[Callable[[dict], bool]] = None

    def asks(self, params: dict) -> bool:
        """Whether this reader asks for the stage with ``params``."""
        return self.when is None or bool(self.when(params))


@dataclass(frozen=True)
class Ask:
    """One reader's ask of a stage on this run: who, its parts, whether it starts the
    stage, and its parameters (defaults, report parameters, overrides filled in)."""

    reader: str
    parts: tuple
    starts: bool
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Stage:
    """A named stage of a run (see the module docstring).

    Attributes:
        name: its name (the key of its value on the run).
        title: what it computes, in one line.
        compute: ``compute(ctx, asks: [Ask]) -> value or None``.
        parts: the parts a reader may ask for.
    """

    name: str
    title: str
    compute: Callable[[Any, list], Any]
    parts: tuple = ()

    def __call__(self, *parts: str, starts: bool = True, when: Optional[Callable[[dict], bool]] = None) -> Read:
        """A :class:`Read` of this stage asking for ``parts``.

        Raises:
            TypeError: a part the stage does not have (a developer's error, in a declaration).
        """
        bad = [p for p in parts if p not in self.parts]
        if bad:
            raise TypeError(f"stage {self.name!r} has no part(s) {bad}; known: {', '.join(self.parts)}")
        return Read(self, tuple(parts), starts, when)


def reads_of(analysis: Any, stage: Stage) -> Optional[Read]:
    """The :class:`Read` of ``stage`` that ``analysis`` declares, or ``None``."""
    return next((r for r in getattr(analysis, "reads", ()) if r.stage is stage), None)


def compute_stage(ctx: Any, stage: Stage, readers: Sequence[tuple]) -> Any:
    """Compute ``stage`` on the run ``ctx`` once, from ``readers`` (``[(analysis, params)]``:
    each analysis of the run that declares it, with its parameters), and keep it on the run;
    a stage already computed on this run is not computed again. Returns its value."""
    cache = ctx.stages
    if stage.name not in cache:
        asks = []
        for analysis, params in readers:
            read = reads_of(analysis, stage)
            if read is not None and read.asks(params):
                asks.append(Ask(analysis.name, read.parts, read.starts, dict(params)))
        cache[stage.name] = stage.compute(ctx, asks) if any(a.starts for a in asks) else None
    return cache[stage.name]


def stage_value(ctx: Any, stage: Stage, analysis: Any = None) -> Any:
    """The value of ``stage`` on the run ``ctx``: the one the report computed before its first
    reader ran, or, on a lone command's run, computed now for ``analysis`` (the reader
    asking, with ``ctx.params``). ``None``: the stage was not made."""
    if stage.name in ctx.stages or analysis is None:
        return ctx.stages.get(stage.name)
    return compute_stage(ctx, stage, [(analysis, ctx.params)])
