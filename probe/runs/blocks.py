"""Jobs over blocks of a corpus, and where they run: the one contract between the
analyses and the engines.

A *job* is a small picklable object with ``run(adapter, items, indices, progress=False)
-> Part``: what to do with one block of the corpus (``items``, at corpus positions
``indices``). The same job runs in this process on the whole corpus as one block
(:class:`InProcess`) or in Ray actors one block at a time
(:func:`probe.app.engine.run.engine_runner`): a *runner* is any callable
``runner(job, items) -> [Part]`` (parts in input order) and the job's ``merge(parts)``
puts them together. An analysis takes a runner and never asks which engine it is.

:class:`StreamJob` is the job of every corpus statistic: it streams the block through
the model layer by layer (:func:`probe.runs.streaming.stream_layers`) into fresh copies of
accumulators (:mod:`probe.analyses.common.accumulate`); :func:`stream_into` runs it on a
runner and merges the accumulators.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, Sequence

from probe.errors import InputError

if TYPE_CHECKING:
    from probe.inputs.corpus import Corpus
    from probe.models.adapter import ModelAdapter

__all__ = [
    "Part",
    "Job",
    "Runner",
    "InProcess",
    "as_runner",
    "CorpusItem",
    "corpus_items",
    "item_text",
    "fit_items",
    "StreamJob",
    "Streamed",
    "stream_into",
    "fresh",
    "merge_all",
]


@dataclass(frozen=True)
class CorpusItem:
    """A text with optional word spans, and a zoo example with its ground truth (a zoo
    task's loss and accuracy need it): what a job reads of a corpus example."""

    text: str
    spans: Optional[tuple] = None
    example: Any = None


def corpus_items(corpus: Corpus) -> list:
    """A :class:`probe.inputs.corpus.Corpus` as picklable items: its treebank sentences when it
    has them, else :class:`CorpusItem` s (text, word spans, zoo example)."""
    if corpus.sentences:
        return list(corpus.sentences)
    n = len(corpus.texts)
    spans = corpus.word_spans or (None,) * n
    examples = corpus.examples if len(corpus.examples) == n else (None,) * n
    return [CorpusItem(t, tuple(s) if s is not None else None, e) for t, s, e in zip(corpus.texts, spans, examples)]


def item_text(item: Any) -> str:
    """The text of a corpus item: a string, or an object with ``.text``."""
    return item if isinstance(item, str) else item.text


@dataclass
class Part:
    """The result of one block: ``value`` (accumulators, ablation values, readouts or
    store records), the over-long items left out (``[(corpus index, n_tokens)]``), how
    many items the block had, when the job started and ended on its block
    (``time.time()`` of the worker's machine: where a run's time went) and the model's
    length limit in tokens, when the job checked it."""

    first: int
    value: Any
    long: list = field(default_factory=list)
    n_items: int = 0
    started: float = 0.0
    ended: float = 0.0
    limit: Optional[int] = None

    @property
    def seconds(self) -> float:
        return self.ended - self.started


class Job(Protocol):
    """What one block of the corpus is turned into (picklable: it travels to Ray actors)."""

    def run(self, adapter: ModelAdapter, items: Sequence, indices: Sequence[int], progress: bool = False) -> Part: ...


#: ``runner(job, items) -> [Part]``: runs ``job`` over ``items`` (all of them, in blocks
#: of its choosing) and returns the parts in input order
Runner = Callable[[Any, Sequence], list]


class InProcess:
    """The runner of this process: the whole corpus as one block, on ``adapter``
    (a :class:`probe.models.ModelAdapter`), with a progress bar when ``progress``."""

    def __init__(self, adapter: ModelAdapter, progress: bool = False) -> None:
        self.adapter, self.progress = adapter, progress

    def __call__(self, job: Any, items: Sequence) -> list:
        items = list(items)
        if not items:
            return []
        return [job.run(self.adapter, items, list(range(len(items))), progress=self.progress)]


def check_runs_on(runner: Any, adapter: Any) -> None:
    """Refuse a runner of this process bound to another model than ``adapter``: a job given to
    it would run on that model (a null model's removals on the trained one, say). Runners of
    other processes (an engine's actors) load their own model and are not checked here.

    Raises:
        InputError: ``runner`` is an :class:`InProcess` on another adapter.
    """
    if isinstance(runner, InProcess) and runner.adapter is not adapter:
        raise InputError(
            f"the runner runs {getattr(runner.adapter, 'name', 'another model')}, not "
            f"{getattr(adapter, 'name', 'this model')}: run this model's batches here (runner=None)"
        )


def as_runner(model: Any, progress: bool = False) -> Runner:
    """``model`` as a runner: a loaded :class:`probe.models.ModelAdapter` runs here
    (:class:`InProcess`); a runner (any other callable) is returned as it is."""
    from probe.models import ModelAdapter

    if isinstance(model, ModelAdapter):
        return InProcess(model, progress)
    if callable(model):
        return model
    raise InputError(f"expected a loaded model or a runner, got {type(model).__name__}")


def fit_items(adapter: ModelAdapter, items: Sequence, indices: Sequence[int], by_length: bool = False) -> tuple:
    """``(kept positions, [(index, n_tokens)] of the items beyond the model's limit)``:
    the positions in input order, or shortest first with ``by_length`` (batches of similar
    length carry little padding). As :func:`probe.inputs.corpus.fit_to_model` does for a corpus
    in one process, one batched tokenizer call."""
    lengths = [len(x) for x in adapter.tokenizer([item_text(it) for it in items], add_special_tokens=True)["input_ids"]]
    keep = [k for k, n in enumerate(lengths) if n <= adapter.max_length]
    if by_length:
        keep.sort(key=lambda k: lengths[k])
    long = [(int(indices[k]), n) for k, n in enumerate(lengths) if n > adapter.max_length]
    return keep, long


def fresh(accumulators: Sequence) -> list:
    """Empty copies of ``accumulators`` (each block starts from these)."""
    return [copy.deepcopy(a) for a in accumulators]


def merge_all(parts: Sequence[Sequence]) -> list:
    """Merge lists of accumulators position by position: ``parts[k][j]`` into ``parts[0][j]``.

    Raises:
        ValueError: no part, or parts of different lengths.
    """
    parts = list(parts)
    if not parts:
        raise ValueError("nothing to merge: no worker returned a result")
    first = list(parts[0])
    for p in parts[1:]:
        if len(p) != len(first):
            raise ValueError(f"cannot merge {len(p)} accumulators into {len(first)}")
        for a, b in zip(first, p):
            a.merge(b)
    return first


class StreamJob:
    """Stream the block into fresh copies of ``accumulators``; items longer than the
    model's limit are left out (``Part.long``). Accumulators that count whole examples
    get each example once with all its layers (:func:`probe.runs.streaming.feed` with
    ``join``) while a batch of every layer at the model's longest input fits
    :data:`probe.runs.streaming.JOIN_BYTES` (batches made smaller to fit), else every
    accumulator is fed layer by layer.

    Args:
        accumulators: empty accumulators (:mod:`probe.analyses.common.accumulate`).
        batch_size: examples per forward.
        last_rows: keep only the last ``k`` query rows (see :func:`probe.runs.streaming.stream_layers`).
    """

    def __init__(self, accumulators: Sequence, batch_size: int = 16, last_rows: Optional[int] = None) -> None:
        self.accumulators = list(accumulators)
        self.batch_size = batch_size
        self.last_rows = last_rows

    def run(self, adapter: ModelAdapter, items: Sequence, indices: Sequence[int], progress: bool = False) -> Part:
        from probe.runs.streaming import feed, join_batch_size, stream_layers

        started = time.time()
        keep, long = fit_items(adapter, items, indices, by_length=True)
        accs = fresh(self.accumulators)
        # whole examples where every layer of a batch fits (a function of the model: every
        # block decides alike), else layer by layer
        joined = join_batch_size(adapter, self.batch_size) if self.last_rows is None else 0
        stream_layers(
            adapter,
            [items[k] for k in keep],
            feed(accs, join=joined > 0),
            indices=[indices[k] for k in keep],
            batch_size=joined or self.batch_size,
            last_rows=self.last_rows,
            progress=progress and len(keep) > 1,
            total=len(keep),
        )
        return Part(
            first=int(indices[0]),
            value=accs,
            long=long,
            n_items=len(items),
            started=started,
            ended=time.time(),
            limit=adapter.max_length,
        )

    @staticmethod
    def merge(parts: Sequence[Part]) -> list:
        return merge_all([p.value for p in parts])


@dataclass
class Streamed:
    """Accumulators filled over a corpus: ``accumulators`` (merged, in the order given;
    read each with ``.result()``), ``long``: ``[(index, n_tokens)]`` of the items left out
    for being longer than the model's limit, ``seconds``: wall time of the pass."""

    accumulators: list
    long: list
    seconds: float = 0.0


def stream_into(
    runner: Any, items: Sequence, accumulators: Sequence, *, batch_size: int = 16, last_rows: Optional[int] = None
) -> Streamed:
    """Stream ``items`` through the model into ``accumulators`` on ``runner`` (a runner,
    or a loaded model: :func:`as_runner`).

    Raises:
        InputError: no item to stream, or every item longer than the model's limit.
    """
    t0 = time.perf_counter()
    items = list(items)
    parts = as_runner(runner)(StreamJob(accumulators, batch_size=batch_size, last_rows=last_rows), items)
    if not parts:
        raise InputError("the corpus is empty: nothing to analyse")
    long = sorted(x for p in parts for x in p.long)
    if len(long) == len(items):
        raise InputError(
            f"all {len(items)} input(s) are longer than the model's limit of {parts[0].limit} tokens: "
            "shorten or split them (one sentence per line)"
        )
    return Streamed(StreamJob.merge(parts), long, time.perf_counter() - t0)
