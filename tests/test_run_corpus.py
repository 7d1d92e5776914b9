"""The run's one corpus and its views (:class:`probe.app.registry.run_corpus.RunCorpus`,
``ctx.corpus``): ``as_given`` loaded without the model, ``whole`` fitted to it, ``kept``
the examples whose maps are held; each built once, on first use. These replace the three
corpora the run held side by side (``corpus``, ``input_corpus``, ``whole_corpus``)."""

from __future__ import annotations

import pytest

from probe.errors import InputError
from probe.inputs.corpus import Corpus

TEXTS = (
    "The cat sat.",
    "A dog ran home.",
    "word " * 200,
    "Birds sing.",
)  # the third: past the tiny RoBERTa's 128 tokens


class _Calls:
    """Counts what the views ask for: the loader's and the model's calls."""

    def __init__(self, adapter, texts=TEXTS):
        self.loads = self.models = 0
        self._adapter, self._texts = adapter, texts

    def load(self) -> Corpus:
        self.loads += 1
        return Corpus(texts=self._texts, source="given")

    def adapter(self):
        self.models += 1
        return self._adapter


def test_each_view_is_built_once_and_as_given_needs_no_model(tiny_models):
    from probe.app.registry.run_corpus import RunCorpus

    calls = _Calls(tiny_models["roberta"])
    corpus = RunCorpus(calls.load, calls.adapter)
    assert corpus.kept_if_built() is None and (calls.loads, calls.models) == (0, 0)  # nothing yet
    given = corpus.as_given
    assert given.texts == TEXTS and (calls.loads, calls.models) == (1, 0)  # loaded, the model untouched
    whole = corpus.whole
    assert whole.texts == TEXTS[:2] + TEXTS[3:] and whole.skipped == {"longer than 128 tokens": 1}
    assert corpus.kept is whole and corpus.as_given is given and corpus.whole is whole
    assert (calls.loads, calls.models) == (1, 1) and corpus.kept_if_built() is whole


def test_a_kept_sample_is_cut_from_the_whole_which_the_engine_streams(tiny_models):
    from probe.app.registry.run_corpus import RunCorpus

    calls = _Calls(tiny_models["roberta"])
    corpus = RunCorpus(calls.load, calls.adapter, keep=2)
    assert corpus.kept.texts == TEXTS[:2] and len(corpus.whole) == 3
    assert corpus.as_given is corpus.whole  # what an engine streams: the fitted whole a sample was cut from
    given = Corpus(texts=TEXTS[:2] + TEXTS[3:])
    opened = RunCorpus(calls.load, calls.adapter, given=given, keep=1)  # a run opened on a fitted corpus
    assert opened.whole is given and opened.as_given is given and opened.kept.texts == TEXTS[:1]
    assert RunCorpus(calls.load, calls.adapter, given=given, keep=5).kept is given  # keep past the end: all
    assert calls.loads == 1  # the given corpus is never loaded again


def test_a_corpus_with_every_example_too_long_is_refused_in_one_line(tiny_models):
    from probe.app.registry.run_corpus import RunCorpus

    corpus = RunCorpus(_Calls(tiny_models["roberta"], texts=("word " * 200,)).load, lambda: tiny_models["roberta"])
    with pytest.raises(InputError, match="longer than"):
        _ = corpus.whole


def test_the_views_are_read_only(tiny_models):
    from probe.app.registry.run_corpus import RunCorpus

    corpus = RunCorpus(_Calls(tiny_models["roberta"]).load, lambda: tiny_models["roberta"])
    for name in ("as_given", "whole", "kept"):
        with pytest.raises(AttributeError):
            setattr(corpus, name, Corpus(texts=("x",)))


def test_the_run_reads_its_corpus_through_the_views(tiny_models):
    """``ctx.corpus`` is the run's one RunCorpus: the maps are one per ``kept`` example, the
    objective is resolved on ``whole``; the old names are gone."""
    from probe.app.registry import Inputs, open_run

    ctx = open_run(tiny_models["roberta"], Inputs(text=TEXTS))
    assert len(ctx.maps) == len(ctx.corpus.kept) == 3 and len(ctx.corpus.as_given) == 4
    assert not hasattr(ctx, "whole_corpus") and not hasattr(ctx, "input_corpus")
