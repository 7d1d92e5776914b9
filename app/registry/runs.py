"""Opening a run: :func:`open_run`, the one way a command, the report and the Python API
get the :class:`probe.app.registry.Context` their analyses read.

A run is a model, its inputs, and how its maps are kept: on the ``local`` engine every
example's maps (captured on first use); on ``stream`` or ``ray`` with ``kept_examples``,
the whole corpus goes to the engine's accumulators and only the first ``kept_examples``
examples are captured whole (the report's pages and the analyses that need whole maps).
The engine is a property of the run (``ctx.engine``, one
:class:`probe.app.engine.kind.Engine`; ``ctx.runner`` runs an analysis' jobs on it), not of
each analysis; so is the objective (``ctx.objective(use)``: the one ``--objective``,
resolved once per use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from probe.errors import InputError

from .context import Context, Inputs, ReportState

if TYPE_CHECKING:
    from pathlib import Path

    from probe.app.engine.kind import Engine
    from probe.models import ModelAdapter

__all__ = ["Inputs", "open_run", "engine_of"]


def open_run(
    model: Any = "minilm",
    inputs: Any = None,
    *,
    limit: Optional[int] = None,
    device: str = "cpu",
    engine: Union[str, Engine] = "local",
    objective: Any = "auto",
    kept_examples: Optional[int] = None,
    adapter: Optional[ModelAdapter] = None,
    maps: Optional[list] = None,
    params: Optional[dict] = None,
    quiet: bool = True,
    batch_size: int = 16,
    workdir: Optional[Path] = None,
    report: Optional[ReportState] = None,
    echo: Optional[bool] = None,
    indent: str = "",
    objective_fallback: bool = False,
) -> Context:
    """Open the run whose context the analyses read; nothing heavy happens here (the
    model, corpus and maps are built on first use).

    Args:
        model: a :func:`probe.models.load_model` spec, a loaded adapter, or ``None`` for
            a run on given ``maps`` alone (analyses that need a live model are skipped).
        inputs: an :class:`Inputs` (loaded with ``limit`` and fitted to the model on
            first use), a :class:`probe.inputs.corpus.Corpus` already fitted (the run's corpus
            as is), or ``None`` (a zoo model's own set).
        limit, device: the common options.
        engine: an :class:`probe.app.engine.kind.Engine` (``ray`` with its address and
            workers), or its name (docs/scale.md).
        objective: the one objective option (a name, ``auto``, an ``Objective`` or a
            callable), resolved once per use by ``ctx.objective(use)``;
            ``objective_fallback``: a name a use does not know means ``auto`` there (the
            report's many uses), instead of an error.
        kept_examples: on ``stream``/``ray``, the examples whose maps are kept: the run's
            ``corpus.kept`` is the first ``kept_examples`` of ``corpus.whole``, which is the
            corpus the engine runs on. Ignored on ``local`` (every map is kept).
        adapter: an already loaded model (``model`` stays the spec an engine's workers load).
        maps: maps already captured, one per corpus example (not captured again).
        params: the parameters of the one analysis the run is opened for (a command's,
            ``probe.run``'s); the report gives each section its own
            (:meth:`probe.app.registry.Context.with_params`).
        quiet, batch_size, workdir: see :class:`probe.app.registry.Context`.
        report, echo, indent: the report's (its :class:`ReportState`: results, settings,
            the section overrides …; see the Context); ``echo``
            defaults to ``not quiet``.

    Raises:
        InputError: an unknown engine, or a non-positive ``kept_examples``.
    """
    from probe.app.engine.kind import Engine

    run_engine = engine if isinstance(engine, Engine) else Engine(engine, device=device)
    if kept_examples is not None and kept_examples < 1:
        raise InputError(f"kept_examples must be at least 1, got {kept_examples}")
    if adapter is None and model is not None and not isinstance(model, str):
        adapter, model = model, getattr(model, "name", None)
    given = inputs if isinstance(inputs, Inputs) else Inputs()
    corpus = None if inputs is None or isinstance(inputs, Inputs) else inputs
    ctx = Context(
        model=model,
        inputs=given,
        limit=limit,
        device=device,
        params=params,
        adapter=adapter,
        corpus=corpus,
        kept_examples=kept_examples if not run_engine.holds_every_map and maps is None else None,
        maps=maps,
        quiet=quiet,
        batch_size=batch_size,
        workdir=workdir,
        engine=run_engine,
        objective=objective,
        objective_fallback=objective_fallback,
        report=report,
        echo=echo,
        indent=indent,
    )
    return ctx


def engine_of(
    name: Optional[str],
    engines: Sequence[str],
    analysis: str,
    *,
    address: Optional[str] = None,
    workers: int = 2,
    device: str = "cpu",
) -> Engine:
    """The :class:`probe.app.engine.kind.Engine` an analysis runs on: ``name`` (``None``: the
    first of its ``engines``, or ``local`` when it declares none), validated once.

    Raises:
        InputError: an unknown engine, or one the analysis does not run on (one line naming
            those it does).
    """
    from probe.app.engine.kind import Engine

    offered = tuple(engines) or ("local",)
    if name in (None, "auto") and "auto" not in offered:
        name = offered[0]
    if name == "local" and "local" not in offered and "stream" in offered:
        name = "stream"  # one process either way: this analysis always streams its corpus
    engine = Engine(name or offered[0], address=address, workers=workers, device=device)
    if engine.name not in offered:
        raise InputError(f"{analysis} runs with --engine {' or '.join(offered)}, not {engine.name!r}")
    return engine
