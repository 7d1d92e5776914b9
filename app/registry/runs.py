"""Opening a run: :func:`open_run`, the one way a command, the report and the Python API
get the :class:`probe.app.registry.Context` their analyses read.

A run is a model, its inputs, and how its maps are kept: on the ``local`` engine every
example's maps (captured on first use); on ``stream`` or ``ray`` with ``kept_examples``,
the whole corpus goes to the engine's accumulators and only the first ``kept_examples``
examples are captured whole (the report's pages and the analyses that need whole maps).
The engine is a property of the run (``ctx.engine``; ``ctx.runner`` runs an analysis'
jobs on it), not of each analysis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from probe.errors import InputError

from .context import Context

__all__ = ["Inputs", "open_run"]


@dataclass(frozen=True)
class Inputs:
    """What the user gave as input: ``--text`` (repeatable), ``--file`` or ``--conllu``
    (at most one of the three; none: a zoo model's own evaluation set)."""

    text: Sequence[str] = ()
    file: Optional[str] = None
    conllu: Optional[str] = None


def open_run(
    model: Any = "minilm",
    inputs: Any = None,
    *,
    limit: Optional[int] = None,
    device: str = "cpu",
    engine: str = "local",
    address: Optional[str] = None,
    workers: int = 2,
    kept_examples: Optional[int] = None,
    adapter=None,
    maps: Optional[list] = None,
    params: Optional[dict] = None,
    quiet: bool = True,
    batch_size: int = 16,
    workdir=None,
    settings: Optional[dict] = None,
    overrides: Optional[dict] = None,
    echo: Optional[bool] = None,
    indent: str = "",
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
        engine: ``local``, ``stream`` or ``ray`` (docs/scale.md); ``address``, ``workers``:
            its settings.
        kept_examples: on ``stream``/``ray``, the examples whose maps are kept: the run's
            ``corpus`` is the first ``kept_examples`` of the whole corpus, which stays the
            ``input_corpus`` the engine runs on. Ignored on ``local`` (every map is kept).
        adapter: an already loaded model (``model`` stays the spec an engine's workers load).
        maps: maps already captured, one per corpus example (not captured again).
        params, quiet, batch_size, workdir: see :class:`probe.app.registry.Context`.
        settings, overrides, echo, indent: the report's (see the Context); ``echo``
            defaults to ``not quiet``.

    Raises:
        InputError: an unknown engine, or a non-positive ``kept_examples``.
    """
    from . import ENGINES  # (the package imports this module)

    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")
    if kept_examples is not None and kept_examples < 1:
        raise InputError(f"kept_examples must be at least 1, got {kept_examples}")
    if adapter is None and model is not None and not isinstance(model, str):
        adapter, model = model, getattr(model, "name", None)
    given = inputs if isinstance(inputs, Inputs) else Inputs()
    corpus = None if inputs is None or isinstance(inputs, Inputs) else inputs
    ctx = Context(
        model=model,
        text=given.text,
        file=given.file,
        conllu=given.conllu,
        limit=limit,
        device=device,
        params=params,
        adapter=adapter,
        corpus=corpus,
        input_corpus=corpus,
        maps=maps,
        quiet=quiet,
        batch_size=batch_size,
        workdir=workdir,
        engine=engine,
        address=address,
        workers=workers,
        settings=settings,
        overrides=overrides,
        echo=echo,
        indent=indent,
    )
    if engine != "local" and kept_examples is not None and maps is None:
        ctx.keep_first(kept_examples)
    return ctx
