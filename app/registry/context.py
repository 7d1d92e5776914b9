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
from typing import TYPE_CHECKING, Any, Iterable, Optional, Sequence, TypeVar

from probe.errors import InputError, NotApplicable

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
        settings: JSON-able settings shown in the report (model, limit, the choices
            :meth:`Context.say` states).
        representatives: example indices shown on every page (the report's
            :func:`probe.app.report.examples.representative_examples` when empty).
        overrides: section parameters the user set for every section that declares them
            (``probe report --max-model-examples/--explained-examples``).
        produces: the result types of the sections this report runs (work several
            sections share is a named stage of the run instead: :mod:`probe.app.registry.stages`).
    """

    results: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    streamed: dict = field(default_factory=dict)
    on_engine: Optional[Any] = None
    settings: dict = field(default_factory=dict)
    representatives: list = field(default_factory=list)
    overrides: dict = field(default_factory=dict)
    produces: tuple = ()


#: what a frozen run still lets change: the parameters of the analysis that is running
_SET_PER_ANALYSIS = frozenset({"params"})


class Context:
    """One run, frozen once open (:func:`probe.app.registry.runs.open_run`): the model,
    one corpus with its views (``corpus``: the kept examples whose maps are held;
    ``whole_corpus``: every fitted example; ``input_corpus``: as given, for an engine's
    workers), the engine, the objective resolved once per use, the runner.

    Attributes (lazy; each built once, on first access):
        adapter: the live model (:func:`probe.models.load_model` of ``model``), or
            ``None`` for a run on maps alone (``model`` given as ``None``).
        corpus: the :class:`probe.inputs.corpus.Corpus` (``--text/--file/--conllu``, or a zoo
            model's evaluation set), fitted to the model's length limit; on a stream or
            Ray engine with ``kept_examples``, the kept sample whose maps are held.
        input_corpus: the corpus as given, not fitted (an engine's workers leave out
            what is too long themselves), or the whole corpus the run was opened on.
        sentences: the treebank's :class:`probe.inputs.readers.Sentence` s (``--conllu``).
        maps: one :class:`probe.maps.AttentionMaps` per corpus example, in order.
        params: the running analysis' parameters (defaults filled in).
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
        inputs, limit, device, model: what the user gave (:class:`Inputs`: ``--text``,
            ``--file`` or ``--conllu``; ``--limit``, ``--device``, ``--model``).

    ``say(line)`` states a choice made for the user (a chosen default, a warning): logged,
    kept under ``report.settings["choices"]`` and, when ``echo``, printed to stderr.
    """

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
        self.model = model
        self.inputs: Inputs = inputs if inputs is not None else Inputs()
        self.limit = limit
        self.device = device
        self.params = dict(params or {})
        self._quiet, self._batch_size = quiet, batch_size
        #: the (temporary) output directory of a CLI run, for files written while running
        self.workdir = workdir
        self.engine: Engine = engine if engine is not None else _local(device)
        self.objective_spec = objective
        #: a name a use does not know means ``auto`` there (the report: one --objective, many uses)
        self._objective_fallback = objective_fallback
        self._objectives: dict = {}  # use -> (Objective, why) or the exception its resolution raised
        self._fell_back: set = set()  # the uses that did not know the named objective (auto there)
        #: the report's mutable state, apart from the run (an empty one outside a report)
        self.report: ReportState = report if report is not None else ReportState()
        self._echo = (not quiet) if echo is None else echo
        self._indent = indent
        self._adapter, self._corpus, self._maps = adapter, corpus, maps
        self._input_corpus = corpus  # a corpus given is the run's whole corpus as is
        self._whole: Optional[Corpus] = None  # the corpus a kept sample was cut from (keep_first)
        self._sentences: Optional[list] = None
        self._stages: dict = {}  # stage name -> its value on this run (probe.app.registry.stages)

        self._frozen = True  # the run is fixed from here on (see __setattr__)

    def __setattr__(self, name: str, value: Any) -> None:
        """A run is frozen once open: its model, inputs, engine and objective are what
        :func:`probe.app.registry.runs.open_run` gave; only the running analysis'
        ``params`` (set by the report's section runner) and the lazily built caches
        change. What a report gathers lives in :attr:`report`.

        Raises:
            AttributeError: any other attribute set after the run opened.
        """
        if name.startswith("_") or name in _SET_PER_ANALYSIS or not getattr(self, "_frozen", False):
            object.__setattr__(self, name, value)
            return
        raise AttributeError(
            f"a run is frozen: {name} is fixed when it opens (open_run); report state goes in ctx.report"
        )

    # -- what the user gave ---------------------------------------------------------------
    @property
    def has_input(self) -> bool:
        return bool(self.inputs.text or self.inputs.file or self.inputs.conllu)

    @property
    def is_zoo(self) -> bool:
        return str(self.model).startswith("zoo:") or str(getattr(self._adapter, "name", "")).startswith("zoo:")

    @property
    def zoo_task(self) -> Optional[str]:
        name = str(getattr(self._adapter, "name", None) or self.model)
        return name.split(":", 1)[1] if name.startswith("zoo:") else None

    def read_store(self, path: Any) -> Any:
        """The :class:`probe.store.directory.Store` at ``path``, refused when the run's model
        is not the one that captured it (:func:`probe.store.provenance.refuse_other_model`;
        the weights fingerprint is compared, loading the model, only when the names differ)."""
        from probe.store.directory import Store
        from probe.store.provenance import refuse_other_model

        store = Store(path)
        if self.model is not None or self._adapter is not None:

            def fingerprint() -> str:
                from probe.models.fingerprint import weights_fingerprint

                return weights_fingerprint(self.adapter.model)

            refuse_other_model(path, store.manifest, self.model_name, fingerprint)
        return store

    def say(self, line: str) -> None:
        """A line for people (a choice made for the user, e.g. the objective): logged, kept
        under ``settings["choices"]`` (the report's index page and summary.json) and, when
        ``echo``, printed to stderr once."""
        log.info("%s", line)
        choices = self.report.settings.setdefault("choices", [])
        if line not in choices:
            choices.append(line)
            if self._echo:
                print(f"{self._indent}{line}", file=sys.stderr, flush=True)

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
        if self.engine.in_process and self._adapter is not None:
            return self._adapter
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
        """stage name -> its value on this run (each computed once)."""
        return self._stages

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
        if use not in self._objectives:
            try:
                self._objectives[use] = self._resolve(use)
            except (InputError, NotApplicable) as exc:
                self._objectives[use] = exc
        got = self._objectives[use]
        if isinstance(got, Exception):
            raise got
        return got[0]

    def open_objectives(self, uses: Iterable[str], readers: Optional[dict] = None) -> None:
        """Resolve the objective now for each of ``uses`` (the report's sections'), before
        any forward; each is kept for the analyses that ask (:meth:`objective`). With
        ``readers`` (``{use: [section, …]}``) the run prints one line naming each objective
        with the sections measured by it (``objective: similarity-structure (claims),
        embedding-drift (ablation, importance)``), the names the pages use; each one's why
        stays in ``settings["choices"]`` (the index and summary.json).

        Raises:
            InputError: a named objective that none of ``uses`` knows (listing the names),
                or one that does not fit the model or corpus (naming those that do).
        """
        from probe.analyses.common.objective_names import FORMS, known_for

        uses = list(dict.fromkeys(uses))
        spec = self.objective_spec
        echo, self._echo = self._echo, self._echo and readers is None
        try:
            for use in uses:
                try:
                    self.objective(use)
                except NotApplicable as exc:  # named by the user it is a bad input; auto: the sections skip
                    if isinstance(spec, str) and known_for(spec, use):
                        raise InputError(f"--objective {spec}: {exc.reason}") from None
        finally:
            self._echo = echo
        if readers and echo:
            print(f"{self._indent}{self._objectives_line(uses, readers)}", file=sys.stderr, flush=True)
        if uses and all(use in self._fell_back for use in uses):
            names = list(dict.fromkeys(n for use in uses for n in FORMS[use]))
            raise InputError(f"unknown objective {spec!r}; known: {', '.join(names)}, auto")

    def _objectives_line(self, uses: list, readers: dict) -> str:
        """``objective: <name> (<sections>), …`` of the uses resolved (one name once, with
        every section measured by it), the uses that fell back to auto said after."""
        by_name: dict = {}
        for use in uses:
            got = self._objectives.get(use)
            name = getattr(got[0], "called", str(got[0])) if isinstance(got, tuple) else "none (skipped)"
            by_name.setdefault(name, []).extend(readers.get(use, [use]))
        said = ", ".join(f"{name} ({', '.join(dict.fromkeys(who))})" for name, who in by_name.items())
        fell = [u for u in uses if u in self._fell_back]
        if fell:
            said += f"; --objective {self.objective_spec} is not one {', '.join(fell)} knows, so auto there"
        return f"objective: {said}; why each: the index's settings; choose with --objective"

    def objective_why(self, use: str) -> str:
        """Why :meth:`objective` chose what it did for ``use`` (``named``, ``given`` or the
        reason ``auto`` chose it)."""
        self.objective(use)
        return self._objectives[use][1]

    def _resolve(self, use: str) -> tuple:
        from probe.analyses.common.objective import resolve_objective
        from probe.analyses.common.objective_names import NOUNS

        spec = self.objective_spec
        # the one resolution of this use; a name it does not know is auto here (said) when the
        # run serves several uses (the report): ``resolve_objective`` adds the use to ``_fell_back``
        fallback = self._fell_back if self._objective_fallback else None
        obj, why = resolve_objective(spec, self.adapter, self.whole_corpus, use=use, fallback=fallback)
        note = f"--objective {spec} is not one {use} knows, so auto; " if use in self._fell_back else ""
        shown = obj.describe() if use == "corpus" else obj.called
        self.say(f"{NOUNS[use]}: {shown} ({note}{why}; choose with --objective)")
        return obj, why

    # -- built on first use -----------------------------------------------------------------
    @property
    def adapter(self) -> Any:
        if self._adapter is None and self.model is not None:
            from probe.models import load_model

            self._adapter = load_model(self.model, device=self.device)
        return self._adapter

    @property
    def input_corpus(self) -> Corpus:
        """The corpus as given, not yet fitted to the model (no model loaded: an engine's
        workers leave out what is too long for the model themselves); the whole corpus
        when the run was opened on one."""
        if self._input_corpus is not None:
            return self._input_corpus
        from probe.inputs.corpus import load_corpus

        return load_corpus(
            text=self.inputs.text or None,
            file=self.inputs.file,
            conllu=self.inputs.conllu,
            limit=self.limit,
            model=self.model if not self.has_input else None,
        )

    @property
    def corpus(self) -> Corpus:
        if self._corpus is None:
            from probe.inputs.corpus import fit_to_model

            self._corpus = fit_to_model(self.input_corpus, self.adapter)
            if not len(self._corpus):
                raise InputError(f"every example is longer than the model's {self.adapter.max_length} tokens")
        return self._corpus

    @property
    def sentences(self) -> list:
        if self._sentences is None:
            if self._corpus is not None and self._corpus.sentences:
                self._sentences = list(self._corpus.sentences)
            elif self.inputs.conllu:
                from probe.inputs.readers import read_conllu

                self._sentences = read_conllu(self.inputs.conllu, limit=self.limit)
            else:
                raise NotApplicable("this analysis needs a treebank: give --conllu (CoNLL-U with dependency heads)")
        return self._sentences

    @property
    def maps(self) -> list:
        if self._maps is None:
            from probe.runs.capture import capture

            c = self.corpus
            self._maps = capture(
                self.adapter,
                list(c.texts),
                word_spans=list(c.word_spans) if c.word_spans else None,
                targets=list(c.targets) if c.targets else None,
                batch_size=self._batch_size,
                progress=self.progress and len(c) > 1,
            )
        return self._maps

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
        accs = declare(self, self.corpus)
        feed_maps(list(accs.values()), self.maps, items=held_items(self.corpus))
        self.report.streamed[name] = accs
        return accs

    @property
    def whole_corpus(self) -> Corpus:
        """The whole fitted corpus the run analyses: ``corpus``, unless the run holds the
        maps of a kept sample only (``kept_examples`` of :func:`probe.app.registry.runs.open_run`), then the corpus it was cut from
        (an engine streams it; the model-running analyses take their examples from it)."""
        return self._whole if self._whole is not None else self.corpus

    def _keep_first(self, n: int) -> None:
        """Hold the maps of the first ``n`` examples only: ``corpus`` becomes them and
        ``input_corpus`` and :attr:`whole_corpus` stay the whole (fitted) corpus, for an
        engine to stream."""
        whole = self.corpus
        self._input_corpus = self._whole = whole
        if n < len(whole):
            self._corpus = whole.subset(range(n))

    @property
    def maps_captured(self) -> bool:
        """Whether the maps are held (given, or captured by an earlier access)."""
        return self._maps is not None

    # -- what the report shows ------------------------------------------------------------------
    @property
    def layers(self) -> tuple:
        return tuple(self.maps[0].layers)

    @property
    def n_heads(self) -> int:
        return self.maps[0].n_heads
