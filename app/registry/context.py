"""What an analysis' ``run`` reads: :class:`Context`, whose model, corpus, treebank and
maps are built on first use from the common options (so ``--help`` and analyses that
need no model import nothing heavy)."""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from probe.errors import InputError, NotApplicable


class Context:
    """The inputs of one run.

    Attributes (lazy; each built once, on first access):
        adapter: the live model (:func:`probe.models.load_model` of ``model``).
        corpus: the :class:`probe.inputs.Corpus` (``--text/--file/--conllu``, or a zoo
            model's evaluation set), fitted to the model's length limit.
        sentences: the treebank's :class:`probe.corpus.Sentence` s (``--conllu``).
        maps: one :class:`probe.maps.AttentionMaps` per corpus example.
        params: the analysis' parameters (defaults filled in).
        results: earlier analyses' results by name (the report fills it).
        workdir: where a CLI run's output is being written (renamed to ``--out`` at the
            end), or ``None``; for files an analysis produces while it runs.
        engine, address, workers: ``--engine local|stream|ray`` and its settings;
            ``engine_run`` turns them into :func:`probe.app.engine.run_job` arguments.

    ``say(line)`` prints a line for people (a chosen default, a warning), unless quiet.
    """

    def __init__(
        self,
        *,
        model: str = "minilm",
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
        #: the (temporary) output directory of a CLI run, for files written while running
        self.workdir = workdir
        self.engine, self.address, self.workers = engine or "local", address, workers
        self._adapter, self._corpus, self._maps = adapter, corpus, maps
        self._sentences: Optional[list] = None

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
        if not self.quiet:
            print(line, file=sys.stderr, flush=True)

    @property
    def progress(self) -> bool:
        """Show progress bars (not quiet)."""
        return not self.quiet

    @property
    def engine_run(self) -> Optional[dict]:
        """Keyword arguments of :func:`probe.app.engine.run_job` for ``--engine``, or
        ``None`` for ``local`` (the single-process path on whole maps).

        Raises:
            ValueError: ``--engine ray`` without Ray installed (says how to install it).
        """
        from probe.app.engine import engine_settings

        return engine_settings(self.engine, self.address, self.workers, self.device)

    # -- built on first use -----------------------------------------------------------------
    @property
    def adapter(self):
        if self._adapter is None:
            from probe.models import load_model

            self._adapter = load_model(self.model, device=self.device)
        return self._adapter

    @property
    def input_corpus(self):
        """The corpus as given, not yet fitted to the model (no model loaded: an engine's
        workers leave out what is too long for the model themselves)."""
        from probe.inputs import load_corpus

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
            from probe.inputs import fit_to_model

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
                from probe.corpus import read_conllu

                self._sentences = read_conllu(self.conllu, limit=self.limit)
            else:
                raise NotApplicable("this analysis needs a treebank: give --conllu (CoNLL-U with dependency heads)")
        return self._sentences

    @property
    def maps(self) -> list:
        if self._maps is None:
            from probe.capture import capture

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
