"""Token scores to word scores, aggregated the way attention is (Clark et al., 2019).

Attention *to* a word is the sum over its tokens' columns; any per-token importance
(an attribution, a rollout row) is summed over a word's tokens the same way, so that
attention-based and gradient-based scores are compared on the same units. Special tokens
and tokens outside every word belong to no word and are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["to_words", "n_words_of", "ScoreSet"]


def n_words_of(word_ids: Sequence, words: Sequence = ()) -> int:
    """Number of words: ``len(words)`` when known, else one more than the largest id."""
    ids = [w for w in word_ids if w is not None]
    return max(len(words), (max(ids) + 1) if ids else 0)


def to_words(scores: ArrayLike, word_ids: Sequence[int | None], n_words: int, mean: bool = False) -> np.ndarray:
    """Sum token scores ``[..., n_tokens]`` over each word's tokens: ``[..., n_words]``;
    ``mean=True`` averages them instead (a word's score then does not grow with the number
    of pieces it was split into).

    Words no token covers get 0 (the adapter lists them as ``unaligned_words``).

    Raises:
        ValueError: ``scores`` whose last axis is not one entry per token.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.shape[-1] != len(word_ids):
        raise ValueError(f"scores have {s.shape[-1]} token entries for {len(word_ids)} tokens")
    m = np.zeros((len(word_ids), n_words))
    for t, w in enumerate(word_ids):
        if w is not None and w < n_words:
            m[t, w] = 1.0
    if mean:
        m = m / np.maximum(m.sum(0, keepdims=True), 1.0)
    return s @ m


@dataclass(frozen=True)
class ScoreSet:
    """Several token-score vectors of one example, one per key ``(method, layer, head)``.

    Attributes:
        index: the example's position in its corpus.
        keys: ``k`` tuples ``(method, layer, head)``; ``layer``/``head`` are ``-1`` where
            the score is not one layer's or one head's (rollout, attributions, a layer's
            head mean has ``head = -1``).
        scores: float64 ``[k, n_tokens]``.
        word_ids, words: the example's token-to-word alignment.

    Raises:
        ValueError: shapes that disagree.
    """

    index: int
    keys: tuple
    scores: np.ndarray
    word_ids: tuple
    words: tuple = ()

    def __post_init__(self):
        s = np.asarray(self.scores, dtype=np.float64)
        if s.ndim != 2 or s.shape != (len(self.keys), len(self.word_ids)):
            raise ValueError(f"scores must be [keys, tokens] = ({len(self.keys)}, {len(self.word_ids)}); got {s.shape}")
        object.__setattr__(self, "scores", s)
        object.__setattr__(self, "keys", tuple(tuple(k) for k in self.keys))

    @property
    def n_words(self) -> int:
        return n_words_of(self.word_ids, self.words)

    def word_scores(self, mean: bool = False) -> np.ndarray:
        """``[k, n_words]``: each key's token scores summed (``mean``: averaged) over each word's tokens."""
        return to_words(self.scores, self.word_ids, self.n_words, mean=mean)
