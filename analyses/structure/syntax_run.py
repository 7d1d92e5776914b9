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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

import pandas as pd

from probe.analyses.structure.attention_probe import probe_report
from probe.analyses.structure.coref import CorefAccuracy, coref_windows
from probe.analyses.structure.syntax import RelationAccuracy
from probe.analyses.structure.trees import tree_scores
from probe.analyses.structure.word_graph import Skipped
from probe.errors import InputError

if TYPE_CHECKING:
    from probe.inputs.readers import Sentence
    from probe.models.adapter import ModelAdapter
    from probe.runs.blocks import Runner

log = logging.getLogger(__name__)


@dataclass
class SyntaxResult:
    """What ``probe syntax`` computes: relation accuracies, trees, probe, what was skipped."""

    relations: RelationAccuracy
    trees: Optional[pd.DataFrame]
    probe: Optional[dict]
    skipped: Skipped
    skipped_counts: dict
    n_input: int
    seconds: dict = field(default_factory=dict)


def _long_rows(long, sentences, label=lambda i: i) -> list:
    """Skipped rows of the items left out for their length (``[(index, n_tokens)]``)."""
    rows = []
    for i, n in long:
        s = sentences[label(i)]
        rows.append((label(i), s.sent_id, s.line, f"{n} tokens, longer than the model's limit"))
    if rows:
        log.warning("%d inputs longer than the model's limit skipped", len(rows))
    return rows


def run_syntax(
    model: ModelAdapter | Runner,
    sentences: Sequence[Sentence],
    *,
    base: bool = False,
    tree_limit: int = 300,
    probe_limit: int = 1000,
    batch_size: int = 32,
    test_fraction: float = 0.2,
    seed: int = 0,
    progress: bool = False,
) -> SyntaxResult:
    """Stream a treebank through the model and run the relation, tree and probe analyses.

    Args:
        model: a :class:`models.ModelAdapter` (self-attention; runs here), or a runner of
            :mod:`probe.runs.blocks` (e.g. an engine's workers, a block of sentences each).
        sentences: :class:`probe.inputs.readers.Sentence` s (``read_conllu``).
        base: count base relations (``nmod:poss`` as ``nmod``).
        tree_limit: sentences (first in corpus order) to decode trees for; 0 = none.
        probe_limit: sentences for the attention probe (train + test); 0 = no probe.
        batch_size, progress: capture settings.
        test_fraction, seed: the probe's sentence split.

    Raises:
        InputError: no sentence, or no sentence left after skipping.
    """
    from probe.analyses.structure.streaming import KeptGraphs, LayerwiseRelations
    from probe.runs.blocks import as_runner, stream_into

    sentences = list(sentences)
    if not sentences:
        raise InputError("the treebank holds no sentence")
    t0 = time.perf_counter()
    keep = range(min(max(tree_limit, probe_limit), len(sentences)))
    streamed = stream_into(
        as_runner(model, progress), sentences, [LayerwiseRelations(base=base), KeptGraphs(keep)], batch_size=batch_size
    )
    relations, kept = streamed.accumulators
    t1 = time.perf_counter()
    sub = kept.result()
    trees = tree_scores(sub[:tree_limit]) if tree_limit and sub else None
    t2 = time.perf_counter()
    probe = None
    if probe_limit and len(sub[:probe_limit]) >= 2:
        probe = probe_report(sub[:probe_limit], test_fraction=test_fraction, seed=seed)
    t3 = time.perf_counter()
    skipped = Skipped(_long_rows(streamed.long, sentences) + list(relations.skipped))
    counts = {}
    if streamed.long:
        counts["longer than the model's limit"] = len(streamed.long)
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


@dataclass
class CorefResult:
    accuracy: CorefAccuracy
    skipped: Skipped
    n_windows: int
    seconds: dict = field(default_factory=dict)


def run_coref(
    model: ModelAdapter | Runner,
    sentences: Sequence[Sentence],
    numbers: Optional[Sequence[Sequence[str]]] = None,
    *,
    context: int = 2,
    batch_size: int = 16,
    progress: bool = False,
) -> CorefResult:
    """Stream coreference windows of a CorefUD treebank through the model and score every head.

    Args:
        model: a :class:`models.ModelAdapter` (runs here), or a runner of :mod:`probe.runs.blocks`.
        sentences: :class:`probe.inputs.readers.Sentence` s with ``Entity=`` in MISC.
        numbers: per sentence, each word's ``Number`` (:func:`probe.analyses.structure.coref_mentions.read_number`).
        context: preceding sentences of the same document in each window.

    Raises:
        InputError: no coreference annotation; NotApplicable: no pronoun with an antecedent.
    """
    from probe.analyses.structure.streaming import LayerwiseCoref
    from probe.runs.blocks import as_runner, stream_into

    t0 = time.perf_counter()
    sentences = list(sentences)
    windows = coref_windows(sentences, numbers, context=context)
    streamed = stream_into(as_runner(model, progress), windows, [LayerwiseCoref()], batch_size=batch_size)
    (acc,) = streamed.accumulators
    label = lambda i: windows[i].sentence_index  # noqa: E731
    rows = _long_rows(streamed.long, sentences, label)
    for i, _, _, reason in acc.skipped:
        s = sentences[label(i)]
        rows.append((label(i), s.sent_id, s.line, reason))
    return CorefResult(
        accuracy=acc.result(),
        skipped=Skipped(rows),
        n_windows=len(windows),
        seconds={"total": time.perf_counter() - t0},
    )
