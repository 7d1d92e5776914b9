"""What an analysis' ``run`` reads: :class:`Context`, the one context of a run (a command,
the report, a notebook's :func:`probe.app.registry.run`), opened by
:func:`probe.app.registry.runs.open_run`. Its model, corpus, treebank and maps are built
on first use from the common options (so ``--help`` and analyses that need no model
import nothing heavy); the engine is a property of the run; earlier analyses' results are
read by their type (:meth:`Context.result_of`)."""

from __future__ import annotations

import logging
import sys
from typing import Any, Optional, Sequence, TypeVar

from probe.errors import InputError, NotApplicable

log = logging.getLogger(__name__)

R = TypeVar("R")


class Context:
    """The inputs of one run.

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
        results: what the analyses that ran produced, by analysis name; written by the
            report's runner (:mod:`probe.app.report.sections`) alone. Read them by type
            with :meth:`result_of`.
        skipped: analysis name -> why it was skipped (later analyses may give the reason).
        workdir: where a CLI run's output is being written (renamed to ``--out`` at the
            end), or ``None``; for files an analysis produces while it runs.
        engine, address, workers: ``local|stream|ray`` and its settings; ``engine_run``
            turns them into :func:`probe.app.engine.run_job` arguments.
        on_engine: the report's streamed statistics of the whole corpus
            (:class:`probe.app.report.engine_sections.EngineRun`), or ``None``.
        streamed: analysis name -> its declared accumulators (``Analysis.accumulators``)
            filled by an engine's pass over the whole corpus; :meth:`accumulated` fills
            them from the held maps when no engine did.
        settings: JSON-able settings shown in the report (model, limit, choices made …).
        overrides: parameters the user set for every analysis that declares them
            (``probe report --objective/--target/--max-model-examples``).
        representatives: example indices shown on every report page (the report's
            :func:`probe.app.report.examples.representative_examples` when not given).

    ``say(line)`` states a choice made for the user (a chosen default, a warning): logged,
    kept under ``settings["choices"]`` and, when ``echo``, printed to stderr.
    """

    def __init__(
        self,
        *,
        model: Any = "minilm",
        text: Optional[Sequence[str]] = None,
        file=None,
        conllu=None,
        limit: Optional[int] = None,
        device: str = "cpu",
        params: Optional[dict] = None,
        adapter=None,
        corpus=None,
        maps=None,
        quiet: bool = False,
        batch_size: int = 16,
        workdir=None,
        engine: str = "local",
        address: Optional[str] = None,
        workers: int = 2,
        input_corpus=None,
        settings: Optional[dict] = None,
        overrides: Optional[dict] = None,
        echo: Optional[bool] = None,
        indent: str = "",
        representatives: Optional[list] = None,
    ):
        self.model = model
        self.text = tuple(text or ())
        self.file = file
        self.conllu = conllu
        self.limit = limit
        self.device = device
        self.params = dict(params or {})
        self.quiet = quiet
        self.batch_size = batch_size
        self.results: dict = {}
        self.skipped: dict = {}
        #: the (temporary) output directory of a CLI run, for files written while running
        self.workdir = workdir
        self.engine, self.address, self.workers = engine or "local", address, workers
        self.on_engine: Optional[Any] = None
        self.streamed: dict = {}
        self.settings: dict = settings if settings is not None else {}
        self.overrides: dict = dict(overrides or {})
        self.echo = (not quiet) if echo is None else echo
        self.indent = indent
        self._adapter, self._corpus, self._maps = adapter, corpus, maps
        self._input_corpus = input_corpus
        self._whole = None  # the corpus a kept sample was cut from (keep_first)
        self._sentences: Optional[list] = None
        #: example indices shown on every report page (the report chooses them)
        self.representatives: list = list(representatives or ())

    # -- what the user gave ---------------------------------------------------------------
    @property
    def has_input(self) -> bool:
        return bool(self.text or self.file or self.conllu)

    @property
    def is_zoo(self) -> bool:
        return str(self.model).startswith("zoo:") or str(getattr(self._adapter, "name", "")).startswith("zoo:")

    @property
    def zoo_task(self) -> Optional[str]:
        name = str(getattr(self._adapter, "name", None) or self.model)
        return name.split(":", 1)[1] if name.startswith("zoo:") else None

    def say(self, line: str) -> None:
        """A line for people (a choice made for the user, e.g. the objective): logged, kept
        under ``settings["choices"]`` (the report's index page and summary.json) and, when
        ``echo``, printed to stderr once."""
        log.info("%s", line)
        choices = self.settings.setdefault("choices", [])
        if line not in choices:
            choices.append(line)
            if self.echo:
                print(f"{self.indent}{line}", file=sys.stderr, flush=True)

    @property
    def progress(self) -> bool:
        """Show progress bars (not quiet)."""
        return not self.quiet

    # -- the engine -------------------------------------------------------------------------
    @property
    def engine_run(self) -> Optional[dict]:
        """Keyword arguments of :func:`probe.app.engine.run_job` for the run's engine, or
        ``None`` for ``local`` (the single-process path on whole maps).

        Raises:
            ValueError: ``ray`` without Ray installed (says how to install it).
        """
        from probe.app.engine import engine_settings

        return engine_settings(self.engine, self.address, self.workers, self.device)

    @property
    def runner(self):
        """Where this run's jobs over the corpus run (:mod:`probe.runs.blocks`: ``runner(job,
        items) -> [Part]``): this process on :attr:`adapter` for ``local`` and ``stream``
        (:class:`probe.runs.blocks.InProcess`, with progress bars unless quiet), a pool of Ray
        actors that each load :attr:`engine_model` for ``ray``
        (:func:`probe.app.engine.run.engine_runner`). Analyses take it and never ask
        which engine it is.

        Raises:
            InputError: ``ray`` without Ray installed (says how to install it).
        """
        run = self.engine_run
        if run is None or run["engine"] == "local":
            from probe.runs.blocks import InProcess

            return InProcess(self.adapter, self.progress)
        from probe.app.engine.run import engine_runner

        return engine_runner(self.engine_model, **run)

    @property
    def model_name(self) -> str:
        """The model's name without loading it: its spec, or the loaded adapter's name
        when the run was opened on an adapter."""
        return self.model if isinstance(self.model, str) else self.adapter.name

    @property
    def engine_model(self):
        """What the engine's workers load: the model's spec, or for ``stream`` the model
        this process already loaded (not loaded twice)."""
        if self.engine == "stream" and self._adapter is not None:
            return self._adapter
        if self.model is None or not isinstance(self.model, str):
            return self.adapter.name
        return self.model

    # -- results of earlier analyses ----------------------------------------------------------
    def result_of(self, kind: type[R]) -> Optional[R]:
        """The result of type ``kind`` (a :mod:`probe.app.registry.results` class) an
        analysis of this run produced, or ``None`` when none did (not chosen, skipped or
        failed)."""
        for result in self.results.values():
            if type(result) is kind:
                return result
        return None

    # -- built on first use -----------------------------------------------------------------
    @property
    def adapter(self):
        if self._adapter is None and self.model is not None:
            from probe.models import load_model

            self._adapter = load_model(self.model, device=self.device)
        return self._adapter

    @property
    def input_corpus(self):
        """The corpus as given, not yet fitted to the model (no model loaded: an engine's
        workers leave out what is too long for the model themselves); the whole corpus
        when the run was opened on one."""
        if self._input_corpus is not None:
            return self._input_corpus
        from probe.inputs.corpus import load_corpus

        return load_corpus(
            text=self.text or None,
            file=self.file,
            conllu=self.conllu,
            limit=self.limit,
            model=self.model if not self.has_input else None,
        )

    @property
    def corpus(self):
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
            elif self.conllu:
                from probe.inputs.readers import read_conllu

                self._sentences = read_conllu(self.conllu, limit=self.limit)
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
                batch_size=self.batch_size,
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
        if name in self.streamed:
            return self.streamed[name]
        from probe.runs.streaming import feed_maps, held_items

        from . import get

        declare = get(name).accumulators  # (ctx, corpus) -> {key: accumulator}
        if declare is None:
            raise TypeError(f"analysis {name!r} declares no accumulators")
        accs = declare(self, self.corpus)
        feed_maps(list(accs.values()), self.maps, items=held_items(self.corpus))
        self.streamed[name] = accs
        return accs

    @property
    def whole_corpus(self):
        """The whole fitted corpus the run analyses: ``corpus``, unless the run holds the
        maps of a kept sample only (:meth:`keep_first`), then the corpus it was cut from
        (an engine streams it; the model-running analyses take their examples from it)."""
        return self._whole if self._whole is not None else self.corpus

    def keep_first(self, n: int) -> None:
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
