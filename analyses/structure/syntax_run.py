"""Run the syntax and coreference probes on a live model over a treebank.

:func:`run_syntax` captures every sentence once (length-sorted batches, so little
padding), turns each into a :class:`~probe.analyses.structure.word_graph.WordGraph` as it streams by and
feeds the relation counts (:func:`probe.analyses.structure.syntax.relation_accuracy`); the first
``tree_limit`` / ``probe_limit`` sentences (corpus order) are kept for the tree decoder
and the attention probe. Peak memory: one batch plus the kept sentences.

:func:`run_coref` does the same for coreference windows (:mod:`probe.analyses.structure.coref`).
Sentences beyond the model's length limit and sentences whose words cannot be aligned
to tokens are skipped, counted and listed (never evaluated half-aligned).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Optional

from probe.analyses.structure.attention_probe import probe_report
from probe.analyses.structure.coref import coref_accuracy, coref_windows
from probe.analyses.structure.syntax import relation_accuracy
from probe.analyses.structure.trees import tree_scores
from probe.analyses.structure.word_graph import AlignmentError, Skipped, word_attention, word_graphs
from probe.errors import InputError

log = logging.getLogger(__name__)


@dataclass
class SyntaxResult:
    """What ``probe syntax`` computes: relation accuracies, trees, probe, what was skipped."""

    relations: object  # RelationAccuracy
    trees: object  # DataFrame
    probe: Optional[dict]
    skipped: Skipped
    skipped_counts: dict
    n_input: int
    seconds: dict = field(default_factory=dict)


def _token_lengths(adapter, texts) -> list:
    return [len(ids) for ids in adapter.tokenizer(list(texts), add_special_tokens=True)["input_ids"]]


def _fit(adapter, texts, skipped: Skipped, sentences, label=lambda i: i) -> list:
    """Indices of the texts that fit the model, shortest first; the others are listed."""
    lengths = _token_lengths(adapter, texts)
    keep = []
    for i, n in enumerate(lengths):
        if n <= adapter.max_length:
            keep.append(i)
        else:
            s = sentences[label(i)]
            skipped.rows.append((label(i), s.sent_id, s.line, f"{n} tokens, longer than {adapter.max_length}"))
    if len(keep) < len(lengths):
        log.warning(
            "%d of %d inputs longer than %d tokens skipped", len(lengths) - len(keep), len(lengths), adapter.max_length
        )
    return sorted(keep, key=lambda i: lengths[i])


def run_syntax(
    adapter,
    sentences,
    *,
    base: bool = False,
    tree_limit: int = 300,
    probe_limit: int = 1000,
    batch_size: int = 32,
    test_fraction: float = 0.2,
    seed: int = 0,
    progress: bool = False,
) -> SyntaxResult:
    """Capture a treebank and run the relation, tree and probe analyses.

    Args:
        adapter: a :class:`models.ModelAdapter` (self-attention).
        sentences: :class:`probe.corpus.Sentence` s (``read_conllu``).
        base: count base relations (``nmod:poss`` as ``nmod``).
        tree_limit: sentences (first in corpus order) to decode trees for; 0 = none.
        probe_limit: sentences for the attention probe (train + test); 0 = no probe.
        batch_size, progress: capture settings.
        test_fraction, seed: the probe's sentence split.

    Raises:
        ValueError: no sentence, or no sentence left after skipping.
    """
    from probe.capture import iter_capture

    sentences = list(sentences)
    if not sentences:
        raise InputError("the treebank holds no sentence")
    t0 = time.perf_counter()
    skipped = Skipped([])
    order = _fit(adapter, [s.text for s in sentences], skipped, sentences)
    n_long = len(skipped)
    keep_ids = set(sorted(order)[: max(tree_limit, probe_limit)])
    stream = iter_capture(
        adapter,
        [sentences[i].text for i in order],
        word_spans=[sentences[i].spans for i in order],
        batch_size=batch_size,
        progress=progress,
        total=len(order),
    )
    kept = {}

    def graphs():
        for g in word_graphs(stream, sentences, indices=order, skipped=skipped):
            if g.index in keep_ids:
                kept[g.index] = g
            yield g

    relations = relation_accuracy(graphs(), base=base)
    t1 = time.perf_counter()
    sub = [kept[i] for i in sorted(kept)]
    trees = tree_scores(sub[:tree_limit]) if tree_limit and sub else None
    t2 = time.perf_counter()
    probe = None
    if probe_limit and len(sub[:probe_limit]) >= 2:
        probe = probe_report(sub[:probe_limit], test_fraction=test_fraction, seed=seed)
    t3 = time.perf_counter()
    counts = {}
    if n_long:
        counts[f"longer than {adapter.max_length} tokens"] = n_long
    if len(skipped) > n_long:
        counts["words not aligned to tokens"] = len(skipped) - n_long
    return SyntaxResult(
        relations=relations,
        trees=trees,
        probe=probe,
        skipped=skipped,
        skipped_counts=counts,
        n_input=len(sentences),
        seconds={"capture_and_relations": t1 - t0, "trees": t2 - t1, "probe": t3 - t2},
    )


@dataclass
class CorefResult:
    accuracy: object  # CorefAccuracy
    skipped: Skipped
    n_windows: int
    seconds: dict = field(default_factory=dict)


def run_coref(
    adapter, sentences, numbers=None, *, context: int = 2, batch_size: int = 16, progress: bool = False
) -> CorefResult:
    """Capture coreference windows of a CorefUD treebank and score every head.

    Args:
        adapter: a :class:`models.ModelAdapter`.
        sentences: :class:`probe.corpus.Sentence` s with ``Entity=`` in MISC.
        numbers: per sentence, each word's ``Number`` (:func:`probe.analyses.structure.coref_mentions.read_number`).
        context: preceding sentences of the same document in each window.

    Raises:
        ValueError: no coreference annotation, or no pronoun with an antecedent.
    """
    from probe.capture import iter_capture

    t0 = time.perf_counter()
    sentences = list(sentences)
    windows = coref_windows(sentences, numbers, context=context)
    skipped = Skipped([])
    order = _fit(adapter, [w.text for w in windows], skipped, sentences, label=lambda i: windows[i].sentence_index)
    stream = iter_capture(
        adapter,
        [windows[i].text for i in order],
        word_spans=[windows[i].spans for i in order],
        batch_size=batch_size,
        progress=progress,
        total=len(order),
    )

    def pairs():
        for maps, i in zip(stream, order):
            w = windows[i]
            try:
                a, _, _ = word_attention(maps, len(w.words))
            except AlignmentError as exc:
                s = sentences[w.sentence_index]
                log.warning("window ending at sentence %s skipped: %s", s.sent_id, exc)
                skipped.rows.append((w.sentence_index, s.sent_id, s.line, str(exc)))
                continue
            yield w, a, maps.layers

    acc = coref_accuracy(pairs())
    return CorefResult(
        accuracy=acc, skipped=skipped, n_windows=len(windows), seconds={"total": time.perf_counter() - t0}
    )
