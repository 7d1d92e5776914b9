"""The corpus commands on an engine: roles, syntax, coreference, ablation and capture.

Each function takes a model *spec* (each worker loads it), runs the streaming
accumulators (or the ablation sweep, or the store writer) through
:func:`probe.app.engine.run.run_job` on ``engine="local"`` or ``"ray"``, and returns
the same result object as the single-process function it mirrors:

===================  ==============================================================
:func:`roles`        :func:`probe.analyses.patterns.roles.roles_report`
:func:`syntax`       :func:`probe.analyses.structure.syntax_run.run_syntax`
:func:`coref`        :func:`probe.analyses.structure.syntax_run.run_coref`
:func:`ablate`       :func:`probe.analyses.necessity.ablation.sweep_heads` (zero mode)
:func:`capture`      :func:`probe.pipeline.capture_corpus` (a resumable store)
===================  ==============================================================

The report does not mirror its sections here: they declare their accumulators
(``Analysis.accumulators``), :func:`stream_declared` fills them in one pass, and the
removal sweeps run their batches through :func:`removal_runner`.
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

from probe.errors import InputError

from .jobs import AblateJob, RemovalJob, StoreJob, StreamJob
from .run import CorpusItem, run_job

__all__ = [
    "roles",
    "syntax",
    "coref",
    "ablate",
    "capture",
    "corpus_items",
    "stream_declared",
    "removal_runner",
]


def corpus_items(corpus) -> list:
    """A :class:`probe.inputs.Corpus` as picklable items (text, word spans, zoo example)."""
    n = len(corpus.texts)
    spans = corpus.word_spans or (None,) * n
    examples = corpus.examples if len(corpus.examples) == n else (None,) * n
    return [CorpusItem(t, tuple(s) if s is not None else None, e) for t, s, e in zip(corpus.texts, spans, examples)]


def _stream(model, items, accumulators, run, batch_size):
    job = StreamJob(accumulators, batch_size=batch_size)
    parts = run_job(model, items, job, **run)
    if not parts:
        raise InputError("the corpus is empty: nothing to analyse")
    return StreamJob.merge(parts), sorted(x for p in parts for x in p.long)


def roles(
    model,
    corpus,
    *,
    syntax_table=None,
    coreference=None,
    n_clusters: Optional[int] = 8,
    cluster_examples: Optional[int] = 100,
    seed: int = 0,
    level: str = "token",
    min_examples: int = 100,
    batch_size: int = 16,
    thresholds: Optional[dict] = None,
    **run,
):
    """Head roles of ``corpus`` (a :class:`probe.inputs.Corpus`); ``run``: engine settings
    of :func:`run_job` (``engine``, ``address``, ``workers``, ``device``, …).

    The head × head divergences of the clustering need every layer of an example at
    once; they use the first ``cluster_examples`` examples, kept whole.
    """
    from probe.analyses.common.accumulate import KeptExamples, PunctuationShare
    from probe.analyses.patterns.head_clusters import HeadDivergenceAccumulator
    from probe.analyses.patterns.role_features import LayerwiseHeadFeatures
    from probe.analyses.patterns.roles import RoleClassifier, report_from

    items = corpus_items(corpus)
    keep = range(min(cluster_examples or len(items), len(items))) if n_clusters else ()
    (token, word, kept, punct), _ = _stream(
        model,
        items,
        [LayerwiseHeadFeatures("token"), LayerwiseHeadFeatures("word"), KeptExamples(keep), PunctuationShare()],
        run,
        batch_size,
    )
    clf = RoleClassifier(level=level, min_examples=min_examples, **(thresholds or {}))
    clf.punct_chance_ = punct.result()  # as RoleClassifier.fit counts it over the same maps
    clf.fit_tables(
        {"token": token.result(), "word": word.result()}, token.n_examples, syntax=syntax_table, coreference=coreference
    )
    div = None
    if n_clusters:
        div = HeadDivergenceAccumulator(cluster_examples)
        for m in kept.result():
            div.update(m)
    return report_from(clf, div, n_clusters, seed)


def _long_rows(long, sentences, limit_text):
    return [(i, sentences[i].sent_id, sentences[i].line, f"{n} tokens, longer than {limit_text}") for i, n in long]


def syntax(
    model,
    sentences: Sequence,
    *,
    base: bool = False,
    tree_limit: int = 300,
    probe_limit: int = 1000,
    batch_size: int = 32,
    test_fraction: float = 0.2,
    seed: int = 0,
    **run,
):
    """:func:`probe.analyses.structure.syntax_run.run_syntax` on an engine. The trees and
    the probe use the first ``max(tree_limit, probe_limit)`` sentences of the corpus
    (kept whole as word graphs), the relation counts every sentence."""
    from probe.analyses.structure.attention_probe import probe_report
    from probe.analyses.structure.streaming import KeptGraphs, LayerwiseRelations
    from probe.analyses.structure.syntax_run import SyntaxResult
    from probe.analyses.structure.trees import tree_scores
    from probe.analyses.structure.word_graph import Skipped

    sentences = list(sentences)
    if not sentences:
        raise InputError("the treebank holds no sentence")
    t0 = time.perf_counter()
    keep = range(min(max(tree_limit, probe_limit), len(sentences)))
    (relations, kept), long = _stream(
        model, sentences, [LayerwiseRelations(base=base), KeptGraphs(keep)], run, batch_size
    )
    t1 = time.perf_counter()
    sub = kept.result()
    trees = tree_scores(sub[:tree_limit]) if tree_limit and sub else None
    t2 = time.perf_counter()
    probe = (
        probe_report(sub[:probe_limit], test_fraction=test_fraction, seed=seed)
        if probe_limit and len(sub[:probe_limit]) >= 2
        else None
    )
    t3 = time.perf_counter()
    skipped = Skipped(_long_rows(long, sentences, "the model's limit") + relations.skipped)
    counts = {}
    if long:
        counts["longer than the model's limit"] = len(long)
    if relations.skipped:
        counts["words not aligned to tokens"] = len(relations.skipped)
    return SyntaxResult(
        relations=relations.result(),
        trees=trees,
        probe=probe,
        skipped=skipped,
        skipped_counts=counts,
        n_input=len(sentences),
        seconds={"capture_and_relations": t1 - t0, "trees": t2 - t1, "probe": t3 - t2},
    )


def coref(model, sentences: Sequence, numbers=None, *, context: int = 2, batch_size: int = 16, **run):
    """:func:`probe.analyses.structure.syntax_run.run_coref` on an engine."""
    from probe.analyses.structure.coref import coref_windows
    from probe.analyses.structure.streaming import LayerwiseCoref
    from probe.analyses.structure.syntax_run import CorefResult
    from probe.analyses.structure.word_graph import Skipped

    t0 = time.perf_counter()
    sentences = list(sentences)
    windows = coref_windows(sentences, numbers, context=context)
    (acc,), long = _stream(model, windows, [LayerwiseCoref()], run, batch_size)
    rows = []
    for i, reason in [(i, f"{n} tokens, longer than the model's limit") for i, n in long] + [
        (row[0], row[3]) for row in acc.skipped
    ]:
        s = sentences[windows[i].sentence_index]
        rows.append((windows[i].sentence_index, s.sent_id, s.line, reason))
    return CorefResult(
        accuracy=acc.result(),
        skipped=Skipped(rows),
        n_windows=len(windows),
        seconds={"total": time.perf_counter() - t0},
    )


def ablate(
    model,
    corpus,
    metric: str = "loss",
    mode: str = "zero",
    heads=None,
    *,
    layers=None,
    batch_size: int = 8,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    **run,
):
    """Single-head zero-ablation sweep on an engine → :class:`SweepResult` (the per-example
    values of each block, merged by corpus index, then one bootstrap as in one process).

    Raises:
        ValueError: ``mode="mean"`` (the corpus mean of every head is not known to a block).
    """
    if mode != "zero":
        raise InputError(
            "the engine runs zero-ablation; mean-ablation needs the whole corpus's head means "
            "first: run it with --engine local"
        )
    job = AblateJob(
        metric=metric,
        heads=heads,
        batch_size=batch_size,
        n_boot=n_boot,
        confidence=confidence,
        seed=seed,
        layers=layers,
    )
    parts = run_job(model, corpus_items(corpus), job, **run)
    if not parts:
        raise InputError("the corpus is empty: nothing to ablate")
    return AblateJob.merge(parts).result()


def capture(
    model,
    corpus,
    out,
    *,
    manifest: dict,
    store_dtype: str = "float32",
    batch_size: int = 16,
    layers: Optional[Sequence[int]] = None,
    **run,
):
    """Capture ``corpus`` into the store ``out``: each worker writes the shard of its
    block, the driver appends the index in input order as blocks finish. Resumable
    after a worker or the driver was killed: examples in the index are not redone.

    Args:
        corpus: the whole :class:`probe.inputs.Corpus` (items beyond the model's limit
            are left out by the workers, keeping corpus indices as example ids).
        manifest: the store manifest, :func:`probe.pipeline.store_manifest`.
    """
    from probe.store import Store, StoreWriter

    with StoreWriter(out, manifest, dtype=store_dtype) as writer:  # the driver holds the store's lock
        job = StoreJob(str(out), dtype=store_dtype, batch_size=batch_size, layers=layers)
        run_job(
            model,
            corpus_items(corpus),
            job,
            on_part=lambda part: writer.append_index(part.value),
            skip=writer.done,
            **run,
        )
    return Store(out)


def stream_declared(model, corpus, declared: dict, *, batch_size: int = 16, **run) -> dict:
    """The accumulators the report's sections declare (``Analysis.accumulators``), filled
    in one streamed pass over every example of ``corpus`` (a fitted
    :class:`probe.inputs.Corpus`), in this process or Ray's workers (``run``:
    :func:`probe.app.engine.run_job` settings); the items are its treebank sentences, or
    its texts with word spans.

    Args:
        declared: ``{analysis: {key: accumulator}}`` (empty accumulators).

    Returns:
        ``{"filled": {analysis: {key: accumulator}}`` (merged over the workers),
        ``"long": [(index, n_tokens)]`` left out, ``"seconds"``: wall time of the pass}.
    """
    t0 = time.perf_counter()
    items = list(corpus.sentences) if corpus.sentences else corpus_items(corpus)
    keys = [(name, key) for name, by_key in declared.items() for key in by_key]
    filled: dict = {name: {} for name in declared}
    long: list = []
    if keys:
        merged, long = _stream(model, items, [declared[name][key] for name, key in keys], run, batch_size)
        for (name, key), acc in zip(keys, merged):
            filled[name][key] = acc
    return {"filled": filled, "long": long, "seconds": time.perf_counter() - t0}


def removal_runner(model, **run):
    """A ``runner`` for :func:`probe.analyses.claims.removal.removal_sweep` that runs the
    sweep's batches on an engine (``run``: :func:`run_job` settings; on Ray each actor
    loads ``model``, a spec, and runs a block of batches): ``runner(plan, batches) ->
    [BatchReadouts]``."""

    def runner(plan, batches) -> list:
        parts = run_job(model, list(batches), RemovalJob(plan), **run)
        return RemovalJob.merge(parts)

    return runner
