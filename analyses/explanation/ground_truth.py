"""Evidence recovery: does a method rank the gold evidence word first?

On a task whose evidence is known by construction (``zoo:agreement``: the subject head
noun decides the verb's number; the UD probe: the subject of the root), every scoring
method — each attention head and layer, rollout, flow, each attribution — ranks the words
of each example by ``|score|``. Reported per method: the rate at which the gold word is
ranked first (strictly above every other word) and its mean rank (1 = first; ties share
the mean of their ranks), next to the chance levels ``mean(1/n_words)`` and
``mean((n_words+1)/2)``. This is the ground-truth check of Abnar & Zuidema (2020, verb
number agreement) and of attribution benchmarks with known evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

import numpy as np

from probe.analyses.common.word_scores import ScoreSet
from probe.errors import InputError

__all__ = ["EvidenceRecovery", "evidence_recovery", "gold_rank"]


def gold_rank(scores: np.ndarray, gold: int) -> tuple:
    """``(rank, first)`` of word ``gold`` in ``scores`` ``[n_words]`` ranked by magnitude.

    ``rank`` = 1 + #(larger) + #(ties)/2; ``first``: strictly larger than every other word.

    Raises:
        ValueError: ``gold`` outside ``0..n_words−1``.
    """
    s = np.abs(np.asarray(scores, dtype=np.float64))
    if not 0 <= gold < s.shape[0]:
        raise InputError(f"gold word {gold} out of range: the example has words 0..{s.shape[0] - 1}")
    g = s[gold]
    greater = int((s > g).sum())
    ties = int((s == g).sum()) - 1
    return 1.0 + greater + ties / 2.0, greater == 0 and ties == 0


@dataclass(frozen=True)
class EvidenceRecovery:
    """Per method ``(method, layer, head)``: ``n_examples, top1_rate, mean_rank`` plus
    the chance rows (``method == "chance"``); ``per_example`` holds every rank."""

    per_example: pd.DataFrame
    summary: pd.DataFrame

    def to_frame(self) -> pd.DataFrame:
        """The :attr:`summary`."""
        return self.summary


def evidence_recovery(score_sets: Sequence[Sequence[ScoreSet]], gold: Sequence[int]) -> EvidenceRecovery:
    """Gold-evidence ranks for every scoring method.

    Args:
        score_sets: one or more lists of :class:`ScoreSet` (e.g. attention scores and
            attributions), each list with one entry per example, in the same order.
        gold: per example, the word index of the evidence.

    Returns:
        :class:`EvidenceRecovery`.

    Raises:
        ValueError: lists of different lengths, no examples, a gold index out of range.
    """
    import pandas as pd

    gold = [int(g) for g in gold]
    if not gold:
        raise InputError("no examples with gold evidence")
    for lst in score_sets:
        if len(lst) != len(gold):
            raise ValueError(f"{len(lst)} score sets for {len(gold)} gold evidence words")
    rows, chance = [], []
    for e, g in enumerate(gold):
        n_words = 0
        for lst in score_sets:
            ss = lst[e]
            w = ss.word_scores()
            n_words = w.shape[1]
            for key, s in zip(ss.keys, w):
                rank, first = gold_rank(s, g)
                rows.append((ss.index, *key, n_words, rank, first))
        chance.append((1.0 / n_words, (n_words + 1) / 2.0))
    per = pd.DataFrame(rows, columns=["example", "method", "layer", "head", "n_words", "rank", "first"])
    summary = (
        per.groupby(["method", "layer", "head"], sort=False)
        .agg(n_examples=("rank", "size"), top1_rate=("first", "mean"), mean_rank=("rank", "mean"))
        .reset_index()
    )
    c = np.asarray(chance)
    summary.loc[len(summary)] = ["chance", -1, -1, len(gold), float(c[:, 0].mean()), float(c[:, 1].mean())]
    return EvidenceRecovery(per_example=per, summary=summary)
