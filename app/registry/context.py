"""What an analysis' ``run`` reads: :class:`Context`, the one context of a run (a command,
the report, a notebook's :func:`probe.app.registry.run`), opened by
:func:`probe.app.registry.runs.open_run`. Its model, corpus, treebank and maps are built
on first use from the common options (so ``--help`` and analyses that need no model
import nothing heavy); the engine is a property of the run; earlier analyses' results are
read by their type (:meth:`Context.result_of`)."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Optional, TypeVar

from probe.errors import InputError, NotApplicable

from .run_corpus import RunCorpus
from .run_parts import Inputs, Params, ReportState

__all__ = ["Context", "Inputs", "Params", "ReportState"]

if TYPE_CHECKING:
    from pathlib import Path

    from probe.analyses.common.objective import Objective
    from probe.app.engine.kind import Engine
    from probe.inputs.corpus import Corpus
    from probe.models import ModelAdapter

log = logging.getLogger(__name__)

R = TypeVar("R")


def _local(device: str) -> Engine:
    from probe.app.engine.kind import Engine

    return Engine("local", device=device)


@dataclass
class _Built:
    """What a run builds on first use and keeps (shared by every analysis' view of it)."""

    adapter: Any = None
    maps: Optional[list] = None
    sentences: Optional[list] = None
    #: use -> (Objective, why), or the exception its resolution raised
    objectives: dict = field(default_factory=dict)
    #: the uses that did not know the named objective (``auto`` there)
    fell_back: set = field(default_factory=set)
    #: the lines said for people, in order (:meth:`Context.say`)
    said: list = field(default_factory=list)
    #: stage name -> its value on this run (:mod:`probe.app.registry.stages`)
    stages: dict = field(default_factory=dict)


class Context:
    """One run, frozen once open (:func:`probe.app.registry.runs.open_run`): the model,
    one corpus with its views (:attr:`corpus`), the engine, the objective resolved once
    per use, the runner; and the parameters of the analysis reading it (:attr:`params`,
    fixed per analysis: :meth:`with_params` gives an analysis its own view of the run).

    Attributes (lazy; each built once, on first access):
        adapter: the live model (:func:`probe.models.load_model` of ``model``), or
            ``None`` for a run on maps alone (``model`` given as ``None``).
        corpus: the run's one :class:`probe.app.registry.run_corpus.RunCorpus`:
            ``corpus.as_given`` (as the user gave it, not fitted), ``corpus.whole``
            (every example fitted to the model) and ``corpus.kept`` (the examples whose
            maps are held: ``whole``, or a kept sample of it on a stream or Ray engine).
        sentences: the treebank's :class:`probe.inputs.readers.Sentence` s (``--conllu``).
        maps: one :class:`probe.maps.AttentionMaps` per ``corpus.kept`` example, in order.
        params: the running analysis' parameters (defaults filled in; read-only).
        report: the report's state, apart from the run (:class:`ReportState`: results so
            far, skipped reasons, streamed statistics, settings, representative examples).
            Read earlier results by type with :meth:`result_of`.
        workdir: where a CLI run's output is being written (renamed to ``--out`` at the
            end), or ``None``; for files an analysis produces while it runs.
        engine: the run's :class:`probe.app.engine.kind.Engine` (``local``, ``stream`` or
            ``ray`` with its settings), validated when it was made; ``engine_run`` turns
            it into :func:`probe.app.engine.run_job` arguments.
        objective_spec: the objective the user named (``--objective``: a name, ``auto``, an
            :class:`probe.analyses.common.objective.Objective` or a callable); analyses read
            it resolved, once per use, with :meth:`objective`.
        said: the lines said for people so far (:meth:`say`), in order.
        inputs, limit, device, model: what the user gave (:class:`Inputs`: ``--text``,
            ``--file`` or ``--conllu``; ``--limit``, ``--device``, ``--model``).

    ``say(line)`` states a choice made for the user (a chosen default, a warning): logged,
    kept in :attr:`said` (the report shows them in its settings) and, when ``echo``,
    printed to stderr.
    """

    model: Any
    inputs: Inputs
    limit: Optional[int]
    device: str
    params: Params
    workdir: Optional[Path]
    engine: Engine
    objective_spec: Any
    report: ReportState
    corpus: RunCorpus
    _quiet: bool
    _batch_size: int
    _objective_fallback: bool
    _echo: bool
    _indent: str
    _built: _Built

    def __init__(
        self,
        *,
        model: Any = "minilm",
        inputs: Optional[Inputs] = None,
        limit: Optional[int] = None,
        device: str = "cpu",
        params: Optional[dict] = None,
        adapter: Optional[ModelAdapter] = None,
        corpus: Optional[Corpus] = None,
        kept_examples: Optional[int] = None,
        maps: Optional[list] = None,
        quiet: bool = False,
        batch_size: int = 16,
        workdir: Optional[Path] = None,
        engine: Optional[Engine] = None,
        objective: Any = "auto",
        objective_fallback: bool = False,
        report: Optional[ReportState] = None,
        echo: Optional[bool] = None,
        indent: str = "",
    ):
        fix = self.__dict__
        fix["model"] = model
        fix["inputs"] = inputs if inputs is not None else Inputs()
        fix["limit"], fix["device"] = limit, device
        fix["params"] = Params(params or {})
        fix["_quiet"], fix["_batch_size"] = quiet, batch_size
        #: the (temporary) output directory of a CLI run, for files written while running
        fix["workdir"] = workdir
        fix["engine"] = engine if engine is not None else _local(device)
        fix["objective_spec"] = objective
        #: a name a use does not know means ``auto`` there (the report: one --objective, many uses)
        fix["_objective_fallback"] = objective_fallback
        #: the report's mutable state, apart from the run (an empty one outside a report)
        fix["report"] = report if report is not None else ReportState()
        fix["_echo"] = (not quiet) if echo is None else echo
        fix["_indent"] = indent
        fix["_built"] = _Built(adapter=adapter, maps=maps)
        fix["corpus"] = RunCorpus(self._given_corpus, lambda: self.adapter, given=corpus, keep=kept_examples)

    def __setattr__(self, name: str, value: Any) -> None:
        """A run is frozen once open: its model, inputs, corpus, engine, objective and
        parameters are what :func:`probe.app.registry.runs.open_run` (and, for an
        analysis' parameters, :meth:`with_params`) gave; what it builds on first use is
        kept inside it, and what a report gathers lives in :attr:`report`.

        Raises:
            AttributeError: always.
        """
        raise AttributeError(
            f"a run is frozen: {name} is fixed when it opens (open_run; an analysis' parameters: "
            "ctx.with_params), report state goes in ctx.report"
        )

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a run is frozen: {name} is fixed when it opens")

    def with_params(self, params: Optional[dict]) -> Context:
        """This run as one analysis reads it: the same model, corpus, engine, objectives,
        caches and report (shared, not copied), with ``params`` as :attr:`params` (the
        report's section runner gives each section its own; this run is unchanged)."""
        view = object.__new__(Context)
        view.__dict__.update(self.__dict__)
        view.__dict__["params"] = Params(params or {})
        return view

    # -- what the user gave ---------------------------------------------------------------
    @property
    def has_input(self) -> bool:
        return bool(self.inputs.text or self.inputs.file or self.inputs.conllu)

    @property
    def is_zoo(self) -> bool:
        return str(self.model).startswith("zoo:") or str(getattr(self._built.adapter, "name", "")).startswith("zoo:")

    @property
    def zoo_task(self) -> Optional[str]:
        name = str(getattr(self._built.adapter, "name", None) or self.model)
        return name.split(":", 1)[1] if name.startswith("zoo:") else None

    def read_store(self, path: Any) -> Any:
        """The :class:`probe.store.directory.Store` at ``path``, refused when the run's model
        is not the one that captured it (:func:`probe.store.provenance.refuse_other_model`;
        the weights fingerprint is compared, loading the model, only when the names differ)."""
        from probe.store.directory import Store
        from probe.store.provenance import refuse_other_model

        store = Store(path)
        if self.model is not None or self._built.adapter is not None:

            def fingerprint() -> str:
                from probe.models.fingerprint import weights_fingerprint

                return weights_fingerprint(self.adapter.model)

            refuse_other_model(path, store.manifest, self.model_name, fingerprint)
        return store

    def say(self, line: str, echo: bool = True) -> None:
        """A line for people (a choice made for the user, e.g. the objective): logged, kept
        in :attr:`said` (the report shows them in its settings: the index page and
        summary.json) and, when the run echoes and ``echo``, printed to stderr once."""
        log.info("%s", line)
        said = self._built.said
        if line not in said:
            said.append(line)
            if self._echo and echo:
                print(f"{self._indent}{line}", file=sys.stderr, flush=True)

    @property
    def said(self) -> tuple:
        """The lines said for people so far (:meth:`say`), in order, each once."""
        return tuple(self._built.said)

    @property
    def progress(self) -> bool:
        """Show progress bars (not quiet)."""
        return not self._quiet

    # -- the engine -------------------------------------------------------------------------
    @property
    def engine_run(self) -> Optional[dict]:
        """Keyword arguments of :func:`probe.app.engine.run_job` for the run's engine, or
        ``None`` for ``local`` (every example's maps held; nothing streamed).

        Raises:
            InputError: ``ray`` without Ray installed (says how to install it).
        """
        return None if self.engine.holds_every_map else self.engine.job_settings()

    @property
    def runner(self) -> Any:
        """Where this run's jobs over the corpus run (:mod:`probe.runs.blocks`: ``runner(job,
        items) -> [Part]``): this process on :attr:`adapter` for ``local`` and ``stream``
        (:class:`probe.runs.blocks.InProcess`, with progress bars unless quiet), a pool of Ray
        actors that each load :attr:`engine_model` for ``ray``
        (:func:`probe.app.engine.run.engine_runner`). Analyses take it and never ask
        which engine it is.

        Raises:
            InputError: ``ray`` without Ray installed (says how to install it).
        """
        if self.engine.in_process:
            from probe.runs.blocks import InProcess

            return InProcess(self.adapter, self.progress)
        from probe.app.engine.run import engine_runner

        return engine_runner(self.engine_model, **self.engine.job_settings())

    @property
    def model_name(self) -> str:
        """The model's name without loading it: its spec, or the loaded adapter's name
        when the run was opened on an adapter."""
        return self.model if isinstance(self.model, str) else self.adapter.name

    @property
    def engine_model(self) -> Any:
        """What the engine's workers load: the model's spec, or in this process the model
        already loaded (not loaded twice)."""
        if self.engine.in_process and self._built.adapter is not None:
            return self._built.adapter
        if self.model is None or not isinstance(self.model, str):
            return self.adapter.name
        return self.model

    # -- results of earlier analyses ----------------------------------------------------------
    def result_of(self, kind: type[R]) -> Optional[R]:
        """The result of type ``kind`` (a :mod:`probe.app.registry.results` class) an
        analysis of this run produced, or ``None`` when none did (not chosen, skipped or
        failed)."""
        for result in self.report.results.values():
            if type(result) is kind:
                return result
        return None

    def why_no_result(self, kind: type) -> str:
        """Why :meth:`result_of` gives ``None`` for ``kind``: the reason the analysis that
        produces it was skipped or failed on this run, else that it did not run."""
        from . import registered

        names = [a.name for a in registered() if a.produces is kind] or [kind.__name__]
        for name in names:
            if name in self.report.skipped:
                return self.report.skipped[name]
        return f"the {names[0]} section did not run"

    # -- named stages of the run (probe.app.registry.stages) ----------------------------------
    @property
    def stages(self) -> dict:
        """stage name -> its value on this run (each computed once; every analysis' view of
        the run shares them)."""
        return self._built.stages

    def stage(self, stage: Any, reader: Any = None) -> Any:
        """The value of ``stage`` (:class:`probe.app.registry.stages.Stage`) on this run, or
        ``None`` when it was not made: the report computes it before its first reader runs; a
        lone command computes it when its analysis, ``reader``, first asks."""
        from .stages import stage_value

        return stage_value(self, stage, reader)

    # -- the objective, resolved once per use ---------------------------------------------
    def objective(self, use: str) -> Objective:
        """The run's objective for ``use`` (one of
        :data:`probe.analyses.common.objective.USES`): :attr:`objective_spec` resolved by
        :func:`probe.analyses.common.objective.resolve_objective` against the model and the
        whole corpus the first time a use asks, printed with why (:meth:`say`), and kept:
        each use is resolved once per run, whichever analyses ask.

        A named objective that the use does not know (``--objective similarity-structure``
        for faithfulness' explain) is resolved as ``auto`` there, said in one line, when
        :attr:`objective_spec` was given for several uses (the report); alone it is refused.

        Raises:
            InputError: an unknown name (listing the known ones), or ``auto`` without a model.
            NotApplicable: the objective does not fit the model (naming those that do), or
                ``auto`` found nothing for this use (the analysis is skipped with the reason).
        """
        return self._resolved(use, echo=True)[0]

    def _resolved(self, use: str, echo: bool) -> tuple:
        """``(Objective, why)`` of ``use``, resolved the first time (said; printed when ``echo``)."""
        objectives = self._built.objectives
        if use not in objectives:
            try:
                objectives[use] = self._resolve(use, echo)
            except (InputError, NotApplicable) as exc:
                objectives[use] = exc
        got = objectives[use]
        if isinstance(got, Exception):
            raise got
        return got

    def open_objectives(self, uses: Iterable[str], readers: Optional[dict] = None) -> None:
        """Resolve the objective now for each of ``uses`` (the report's sections'), before
        any forward; each is kept for the analyses that ask (:meth:`objective`). With
        ``readers`` (``{use: [section, …]}``) the run prints one line naming the run's
        objective once, as the pages name it, and how the other sections measure it
        (``objective: similarity-structure (claims), measured per example as embedding-drift
        (ablation, importance) and per input as similarity (faithfulness)``); each use's why
        stays in :attr:`said` (the report's settings: the index and summary.json).

        Raises:
            InputError: a named objective that none of ``uses`` knows (listing the names),
                or one that does not fit the model or corpus (naming those that do).
        """
        from probe.analyses.common.objective_names import FORMS, known_for

        uses = list(dict.fromkeys(uses))
        spec = self.objective_spec
        for use in uses:
            try:
                self._resolved(use, echo=readers is None)
            except NotApplicable as exc:  # named by the user it is a bad input; auto: the sections skip
                if isinstance(spec, str) and known_for(spec, use):
                    raise InputError(f"--objective {spec}: {exc.reason}") from None
        if readers and self._echo:
            print(f"{self._indent}{self._objectives_line(uses, readers)}", file=sys.stderr, flush=True)
        if uses and all(use in self._built.fell_back for use in uses):
            names = list(dict.fromkeys(n for use in uses for n in FORMS[use]))
            raise InputError(f"unknown objective {spec!r}; known: {', '.join(names)}, auto")

    def _objectives_line(self, uses: list, readers: dict) -> str:
        """:func:`probe.analyses.common.objective_names.objective_line` of the uses resolved."""
        from probe.analyses.common.objective_names import objective_line

        got = {use: self._built.objectives.get(use) for use in uses}
        names = {u: (getattr(g[0], "called", str(g[0])) if isinstance(g, tuple) else None) for u, g in got.items()}
        fell = [u for u in uses if u in self._built.fell_back]
        return objective_line(names, readers, fell, self.objective_spec)

    def objective_why(self, use: str) -> str:
        """Why :meth:`objective` chose what it did for ``use`` (``named``, ``given`` or the
        reason ``auto`` chose it)."""
        return self._resolved(use, echo=True)[1]

    def _resolve(self, use: str, echo: bool) -> tuple:
        from probe.analyses.common.objective import resolve_objective

        spec = self.objective_spec
        # the one resolution of this use; a name it does not know is auto here (said) when the
        # run serves several uses (the report): ``resolve_objective`` adds the use to ``fell_back``
        fell_back = self._built.fell_back
        fallback = fell_back if self._objective_fallback else None
        obj, why = resolve_objective(spec, self.adapter, self.corpus.whole, use=use, fallback=fallback)
        note = f"--objective {spec} is not one {use} knows, so auto; " if use in fell_back else ""
        shown = obj.describe() if use == "corpus" else obj.called
        self.say(f"objective: {shown} ({note}{why}; choose with --objective)", echo=echo)
        return obj, why

    # -- built on first use -----------------------------------------------------------------
    @property
    def adapter(self) -> Any:
        built = self._built
        if built.adapter is None and self.model is not None:
            from probe.models import load_model

            built.adapter = load_model(self.model, device=self.device)
        return built.adapter

    def _given_corpus(self) -> Corpus:
        """The corpus the user gave (``corpus.as_given``), loaded: ``--text/--file/--conllu``
        with ``--limit``, or a zoo model's evaluation set."""
        from probe.inputs.corpus import load_corpus

        return load_corpus(
            text=self.inputs.text or None,
            file=self.inputs.file,
            conllu=self.inputs.conllu,
            limit=self.limit,
            model=self.model if not self.has_input else None,
        )

    @property
    def sentences(self) -> list:
        built = self._built
        if built.sentences is None:
            kept = self.corpus.kept_if_built()
            if kept is not None and kept.sentences:
                built.sentences = list(kept.sentences)
            elif self.inputs.conllu:
                from probe.inputs.readers import read_conllu

                built.sentences = read_conllu(self.inputs.conllu, limit=self.limit)
            else:
                raise NotApplicable("this analysis needs a treebank: give --conllu (CoNLL-U with dependency heads)")
        return built.sentences

    @property
    def maps(self) -> list:
        built = self._built
        if built.maps is None:
            from probe.runs.capture import capture

            c = self.corpus.kept
            built.maps = capture(
                self.adapter,
                list(c.texts),
                word_spans=list(c.word_spans) if c.word_spans else None,
                targets=list(c.targets) if c.targets else None,
                batch_size=self._batch_size,
                progress=self.progress and len(c) > 1,
            )
        return built.maps

    def accumulated(self, name: str) -> dict:
        """The accumulators analysis ``name`` declares (``Analysis.accumulators``), filled
        over the run's corpus: by the engine's streamed pass when one ran (the whole
        corpus), else from the held maps (:func:`probe.runs.streaming.feed_maps`). Each is
        read with ``.result()`` (which may raise ``NotApplicable``).

        Raises:
            KeyError: no analysis of that name; ``TypeError``: it declares none.
        """
        if name in self.report.streamed:
            return self.report.streamed[name]
        from probe.runs.streaming import feed_maps, held_items

        from . import get

        declare = get(name).accumulators  # (ctx, corpus) -> {key: accumulator}
        if declare is None:
            raise TypeError(f"analysis {name!r} declares no accumulators")
        accs = declare(self, self.corpus.kept)
        feed_maps(list(accs.values()), self.maps, items=held_items(self.corpus.kept))
        self.report.streamed[name] = accs
        return accs

    @property
    def maps_captured(self) -> bool:
        """Whether the maps are held (given, or captured by an earlier access)."""
        return self._built.maps is not None

    # -- what the report shows ------------------------------------------------------------------
    @property
    def layers(self) -> tuple:
        return tuple(self.maps[0].layers)

    @property
    def n_heads(self) -> int:
        return self.maps[0].n_heads
