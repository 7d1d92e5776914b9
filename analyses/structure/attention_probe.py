"""The attention-only dependency probe of Clark et al. (2019), Section 4.2.

For a dependent ``i`` and a candidate head ``j`` the features are the attention of every
head in both directions, ``α_ij`` and ``α_ji`` (``2 · layers · heads`` numbers); the
candidate with the highest linear score is predicted as ``i``'s head. The ROOT is a
candidate too: its features are ``i``'s attention to the special tokens and the special
tokens' attention to ``i``, plus a ROOT indicator (a learned ROOT bias; the only
non-attention feature).

Clark et al. train the weights with a softmax over candidates; here a scikit-learn
``LogisticRegression`` is fitted on (dependent, candidate) pairs labelled "is the head"
and the argmax of its decision function over each word's candidates is the prediction.
Train and test sentences are disjoint (split by sentence). Score: UAS over all words.
Clark et al. report 61 UAS for the attention-only probe on WSJ with BERT-base.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from probe.errors import InputError

if TYPE_CHECKING:
    from probe.analyses.structure.word_graph import WordGraph

log = logging.getLogger(__name__)


def pair_features(graph: WordGraph) -> tuple[np.ndarray, np.ndarray]:
    """Candidate features of every word of one sentence.

    Args:
        graph: a :class:`probe.analyses.structure.word_graph.WordGraph` with ``W`` words.

    Returns:
        ``(features, candidate_mask)``: float32 ``[W, W + 1, 2·L·H + 1]`` (candidate
        ``W`` is the ROOT) and bool ``[W, W + 1]``, False on a word's own position.
    """
    a = graph.attention.float()
    L, H, W, _ = a.shape
    lh = L * H
    flat = a.reshape(lh, W, W)
    f = torch.zeros(W, W + 1, 2 * lh + 1)
    f[:, :W, :lh] = flat.permute(1, 2, 0)  # α_ij
    f[:, :W, lh : 2 * lh] = flat.permute(2, 1, 0)  # α_ji
    f[:, W, :lh] = graph.to_special.reshape(lh, W).T
    f[:, W, lh : 2 * lh] = graph.from_special.reshape(lh, W).T
    f[:, W, -1] = 1.0
    mask = torch.ones(W, W + 1, dtype=torch.bool)
    mask[torch.arange(W), torch.arange(W)] = False
    return f.numpy(), mask.numpy()


def _targets(graph) -> np.ndarray:
    """Gold candidate index of every word (``W`` for the root)."""
    h = graph.heads.numpy().copy()
    h[h < 0] = graph.n_words
    return h


class AttentionProbe:
    """Predict each word's head from attention alone (Clark et al. 2019).

    Args:
        C: inverse regularisation strength of the logistic regression.
        max_iter: solver iterations.

    Attributes (after ``fit``):
        coef_: ``[2·L·H + 1]`` weights (α_ij per head, then α_ji per head, then ROOT).
        intercept_: the bias (irrelevant to the argmax, kept for completeness).
        n_features_in_: ``2·L·H + 1``.
    """

    def __init__(self, C: float = 1.0, max_iter: int = 500):
        self.C = C
        self.max_iter = max_iter

    def fit(self, graphs: Sequence) -> "AttentionProbe":
        """Fit on the (dependent, candidate) pairs of ``graphs``.

        Raises:
            ValueError: no graphs, or graphs with different numbers of heads.
        """
        from sklearn.linear_model import LogisticRegression

        if not len(graphs):
            raise InputError("no training sentence for the attention probe")
        xs, ys = [], []
        for g in graphs:
            f, mask = pair_features(g)
            y = np.zeros(mask.shape, dtype=bool)
            y[np.arange(g.n_words), _targets(g)] = True
            xs.append(f[mask])
            ys.append(y[mask])
        widths = {x.shape[1] for x in xs}
        if len(widths) > 1:
            raise ValueError(f"sentences disagree on the number of heads (feature widths {sorted(widths)})")
        x, y = np.concatenate(xs), np.concatenate(ys)
        model = LogisticRegression(C=self.C, max_iter=self.max_iter)
        model.fit(x, y)
        self.model_ = model
        self.coef_ = model.coef_[0].copy()
        self.intercept_ = float(model.intercept_[0])
        self.n_features_in_ = x.shape[1]
        return self

    def predict(self, graphs: Sequence) -> list:
        """Predicted heads per sentence: int ``[W]``, 0-based, ``-1`` for ROOT."""
        if not hasattr(self, "coef_"):
            raise ValueError("the probe is not fitted: call fit(train_graphs) first")
        out = []
        for g in graphs:
            f, mask = pair_features(g)
            if f.shape[-1] != self.n_features_in_:
                raise ValueError(
                    f"sentence {g.index} has {f.shape[-1]} features, the probe was fitted on {self.n_features_in_}"
                )
            score = np.where(mask, f @ self.coef_, -np.inf)
            pred = score.argmax(1)
            pred[pred == g.n_words] = -1
            out.append(pred)
        return out

    def score(self, graphs: Sequence) -> float:
        """Unlabelled attachment score over all words of ``graphs``."""
        preds = self.predict(graphs)
        correct = sum(int((p == g.heads.numpy()).sum()) for p, g in zip(preds, graphs))
        total = sum(g.n_words for g in graphs)
        return correct / max(total, 1)


def split_by_sentence(n: int, test_fraction: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Shuffle ``n`` sentence indices and split them into (train, test) index arrays
    ``[n_train]``, ``[n_test]``.

    Raises:
        ValueError: ``test_fraction`` outside (0, 1) or too few sentences for both sides.
    """
    if not 0 < test_fraction < 1:
        raise InputError(f"test fraction must be between 0 and 1, got {test_fraction}")
    n_test = int(round(n * test_fraction))
    if n_test < 1 or n - n_test < 1:
        raise InputError(f"{n} sentences cannot be split into train and test; give more sentences")
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def probe_report(graphs: Sequence, test_fraction: float = 0.2, seed: int = 0, C: float = 1.0) -> dict:
    """Fit the attention-only probe on a sentence split and report UAS with baselines.

    Returns:
        a JSON-able dict: uas_test, uas_train, right_branching_uas_test,
        left_branching_uas_test, n_train_sentences, n_test_sentences, n_test_words,
        n_features, test_fraction, seed, C.

    Raises:
        ValueError: too few sentences to split.
    """
    from probe.analyses.structure.trees import branching_heads

    graphs = list(graphs)
    train_idx, test_idx = split_by_sentence(len(graphs), test_fraction, seed)
    train = [graphs[i] for i in train_idx]
    test = [graphs[i] for i in test_idx]
    probe = AttentionProbe(C=C).fit(train)
    words = sum(g.n_words for g in test)

    def branching(direction):
        return sum(int((branching_heads(g.n_words, direction) == g.heads.numpy()).sum()) for g in test) / words

    return {
        "uas_test": probe.score(test),
        "uas_train": probe.score(train),
        "right_branching_uas_test": branching("right"),
        "left_branching_uas_test": branching("left"),
        "n_train_sentences": len(train),
        "n_test_sentences": len(test),
        "n_test_words": words,
        "n_features": probe.n_features_in_,
        "test_fraction": test_fraction,
        "seed": seed,
        "C": C,
    }
