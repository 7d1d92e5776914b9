"""The run's one corpus and its views: :class:`RunCorpus` (``ctx.corpus``).

A run has one corpus. Its views differ in how far the run has fitted and cut it; each
is built once, on first use, and says who reads it:

* ``as_given``: what the user gave, before the model is loaded;
* ``whole``: every example fitted to the model's length limit;
* ``kept``: the examples whose maps the run holds (``whole``, or its first
  ``kept_examples`` on a stream or Ray engine).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

from probe.errors import InputError

if TYPE_CHECKING:
    from probe.inputs.corpus import Corpus

__all__ = ["RunCorpus"]


class RunCorpus:
    """The run's one corpus, seen three ways (each view built once, on first use).

    Attributes (read-only):
        as_given: the corpus as given (``--text/--file/--conllu`` with ``--limit``, or a zoo
            model's set), not fitted to the model; read where the model is not loaded yet or
            an engine's workers leave out what is too long themselves (the report's engine
            pass, ``probe roles``, patching, circuits, logit attribution). Once a sample is
            kept it is ``whole``, the corpus the engine streams.
        whole: every example fitted to the model's length limit; the objective is resolved
            on it and the model-running analyses run over it (ablation, importance,
            faithfulness, the claims' causal tests).
        kept: the examples whose maps the run holds (``ctx.maps``, one per example):
            ``whole``, or its first ``keep`` examples on a stream or Ray engine; the map
            analyses and the report's pages read it.

    Args:
        load: loads the corpus as given (called at most once).
        adapter: the run's model (loaded on first call) that ``whole`` is fitted to.
        given: a corpus already fitted (the run opened on it): every view starts from it.
        keep: hold the maps of the first ``keep`` examples only (``None``: all).
    """

    __slots__ = ("_load", "_adapter", "_keep", "_given", "_whole", "_kept")

    def __init__(
        self,
        load: Callable[[], Corpus],
        adapter: Callable[[], Any],
        *,
        given: Optional[Corpus] = None,
        keep: Optional[int] = None,
    ) -> None:
        self._load, self._adapter, self._keep = load, adapter, keep
        self._given: Optional[Corpus] = given
        self._whole: Optional[Corpus] = given
        self._kept: Optional[Corpus] = None if given is None else _cut(given, keep)

    @property
    def as_given(self) -> Corpus:
        # a kept sample was cut from the whole, which is then what the engine streams
        return self.whole if self._keep is not None else self._as_loaded()

    @property
    def whole(self) -> Corpus:
        if self._whole is None:
            from probe.inputs.corpus import fit_to_model

            adapter = self._adapter()
            whole = fit_to_model(self._as_loaded(), adapter)
            if not len(whole):
                raise InputError(f"every example is longer than the model's {adapter.max_length} tokens")
            self._whole = whole
        return self._whole

    @property
    def kept(self) -> Corpus:
        if self._kept is None:
            self._kept = _cut(self.whole, self._keep)
        return self._kept

    def kept_if_built(self) -> Optional[Corpus]:
        """``kept`` when it is built already (given, or read before), else ``None``:
        nothing is loaded or fitted."""
        return self._kept

    def _as_loaded(self) -> Corpus:
        if self._given is None:
            self._given = self._load()
        return self._given


def _cut(corpus: Corpus, keep: Optional[int]) -> Corpus:
    """The first ``keep`` examples of ``corpus`` (all of them for ``None`` or more)."""
    return corpus if keep is None or keep >= len(corpus) else corpus.subset(range(keep))
