"""Which head attends along which dependency relation (Clark et al. 2019, Table 1).

For every UD relation and every (layer, head), at word level, the accuracy of

* ``dep_to_head``: the word that the dependent attends to most is its gold head;
* ``head_to_dep``: the word that attends most *to* the dependent is its gold head (the
  transposed map, as in Clark et al.'s code, ``attn.T``): one instance per dependent in
  both directions, so counts match and a head with several dependents of a relation can
  be right for each of them.

On a causal model (a decoder) a word sees only the words on its left, so a dependent
whose head lies to its right cannot attend to it (``dep_to_head``) and a head cannot
attend to a dependent on its right (``head_to_dep``): those instances are *not
applicable (causal)*, not misses. Each direction's accuracy and baseline then count only
the instances it can reach (the baseline's offsets on that side: −3…−1 for
``dep_to_head``, +1…+3 for ``head_to_dep``), and a relation and direction with none is
not applicable (:data:`NOT_APPLICABLE_CAUSAL`; accuracy NaN).

As in Clark et al.'s code, a word's attention to itself and to special tokens is ignored
in the argmax; a word that puts no attention on any other word predicts nothing (a
miss). The root word (head 0) is excluded. Alongside, the fixed-offset baseline: the
head is the word at ``i + k`` for ``k`` in −3…+3 (``k ≠ 0``), best ``k`` per relation.

Everything is vectorised over layers, heads and words: one ``argmax`` per sentence gives
``[direction, layer, head, word]`` predictions; the counts per relation are one
``np.add.at`` over the whole corpus.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Optional, Sequence

import numpy as np
import torch

from probe.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

    from probe.analyses.structure.word_graph import WordGraph

DIRECTIONS = ("dep_to_head", "head_to_dep")
OFFSETS = (-3, -2, -1, 1, 2, 3)
#: what a relation and direction a causal model cannot attend shows instead of an accuracy
NOT_APPLICABLE_CAUSAL = "not applicable (causal)"


def reachable_counts(counts: np.ndarray, left: Optional[np.ndarray], causal: bool) -> np.ndarray:
    """``[direction, relation]``: the instances each direction can attend. ``counts
    [relation]`` all instances, ``left [relation]`` those whose head lies left of the
    dependent; on a causal model ``dep_to_head`` reaches the left ones and ``head_to_dep``
    the rest; otherwise both reach every instance."""
    counts = np.asarray(counts)
    if not causal or left is None:
        return np.stack([counts, counts])
    left = np.asarray(left)
    return np.stack([left, counts - left])


def reachable_offsets(offsets: Sequence[int], direction: int, causal: bool) -> np.ndarray:
    """Indices into ``offsets`` of the baseline offsets ``direction`` can reach (every one
    but on a causal model: the negative ones for ``dep_to_head``, the positive for
    ``head_to_dep``)."""
    off = np.asarray(offsets)
    if not causal:
        return np.arange(len(off))
    return np.nonzero(off < 0 if direction == 0 else off > 0)[0]


def base_relation(deprel: str) -> str:
    """``nmod:poss`` → ``nmod`` (the UD base relation)."""
    return deprel.split(":", 1)[0]


def argmax_predictions(attention: torch.Tensor) -> torch.Tensor:
    """The most attended other word, both directions.

    Args:
        attention: word-level ``[layer, head, word, word]`` (specials already removed).

    Returns:
        long ``[2, layer, head, word]``: ``[0]`` the argmax of each word's row (the word
        it attends to most), ``[1]`` the argmax of its column (the word attending to it
        most); self excluded; ``-1`` where all candidates have zero attention.
    """
    a = attention.float()
    n = a.shape[-1]
    eye = torch.eye(n, dtype=torch.bool)
    out = []
    for m in (a, a.transpose(-1, -2)):
        m = m.masked_fill(eye, -1.0)
        val, idx = m.max(-1)
        out.append(torch.where(val > 0, idx, torch.full_like(idx, -1)))
    return torch.stack(out)


@dataclass(frozen=True)
class RelationAccuracy:
    """Hit counts of every head on every relation, accumulated over a corpus.

    Attributes:
        relations: relation labels, indexing the second axis of ``hits``.
        hits: int ``[direction, relation, layer, head]``.
        counts: int ``[relation]``: instances (non-root words with that relation).
        offset_hits: int ``[relation, offset]`` for the offsets in ``offsets``.
        offsets: the fixed offsets tried by the baseline.
        layers: model layer index of each layer.
        n_sentences: sentences evaluated.
        left: int ``[relation]``: instances whose gold head lies left of the dependent
            (``None``: not counted).
        causal: the counts are a causal model's (see the module: directions count only
            the instances they can reach).
    """

    relations: tuple
    hits: np.ndarray
    counts: np.ndarray
    offset_hits: np.ndarray
    offsets: tuple
    layers: tuple
    n_sentences: int
    left: Optional[np.ndarray] = None
    causal: bool = False

    @property
    def reachable(self) -> np.ndarray:
        """``[direction, relation]`` instances each direction can attend (:func:`reachable_counts`)."""
        return reachable_counts(self.counts, self.left, self.causal)

    def with_all(self) -> "RelationAccuracy":
        """Add the pooled relation ``all`` (every non-root word), as in Clark et al."""
        if "all" in self.relations:
            return self
        return RelationAccuracy(
            relations=self.relations + ("all",),
            hits=np.concatenate([self.hits, self.hits.sum(1, keepdims=True)], 1),
            counts=np.append(self.counts, self.counts.sum()),
            offset_hits=np.concatenate([self.offset_hits, self.offset_hits.sum(0, keepdims=True)], 0),
            offsets=self.offsets,
            layers=self.layers,
            n_sentences=self.n_sentences,
            left=None if self.left is None else np.append(self.left, self.left.sum()),
            causal=self.causal,
        )

    def to_frame(self) -> pd.DataFrame:
        """Tidy table: relation, direction, layer, head, accuracy, hits, count (the
        instances the direction can reach), note (:data:`NOT_APPLICABLE_CAUSAL` where a
        causal model reaches none: accuracy NaN)."""
        import pandas as pd

        D, R, L, H = self.hits.shape
        d, r, l, h = np.meshgrid(np.arange(D), np.arange(R), np.arange(L), np.arange(H), indexing="ij")
        counts = self.reachable[d.ravel(), r.ravel()]
        hits = self.hits.ravel()
        return pd.DataFrame(
            {
                "relation": np.asarray(self.relations, dtype=object)[r.ravel()],
                "direction": np.asarray(DIRECTIONS, dtype=object)[d.ravel()],
                "layer": np.asarray(self.layers)[l.ravel()],
                "head": h.ravel(),
                "accuracy": np.where(counts > 0, hits / np.maximum(counts, 1), np.nan),
                "hits": hits,
                "count": counts,
                "note": np.where((counts == 0) & self.causal, NOT_APPLICABLE_CAUSAL, ""),
            }
        )

    def direction_baselines(self) -> pd.DataFrame:
        """Best fixed offset per relation and direction over the instances the direction
        reaches (the same as :meth:`baselines` on both directions but on a causal model):
        relation, direction, baseline_offset, baseline_accuracy (NaN where none is
        reached), count, note."""
        import pandas as pd

        reach = self.reachable
        rows = []
        for r, rel in enumerate(self.relations):
            for d, direction in enumerate(DIRECTIONS):
                idx = reachable_offsets(self.offsets, d, self.causal)
                k = idx[int(self.offset_hits[r, idx].argmax())]
                n = int(reach[d, r])
                rows.append(
                    {
                        "relation": rel,
                        "direction": direction,
                        "baseline_offset": int(self.offsets[k]),
                        "baseline_accuracy": self.offset_hits[r, k] / n if n else float("nan"),
                        "count": n,
                        "note": NOT_APPLICABLE_CAUSAL if self.causal and not n else "",
                    }
                )
        return pd.DataFrame(rows)

    def baselines(self) -> pd.DataFrame:
        """Best fixed offset per relation: relation, baseline_offset, baseline_accuracy, count."""
        import pandas as pd

        best = self.offset_hits.argmax(1)
        acc = self.offset_hits[np.arange(len(self.relations)), best] / np.maximum(self.counts, 1)
        return pd.DataFrame(
            {
                "relation": list(self.relations),
                "baseline_offset": np.asarray(self.offsets)[best],
                "baseline_accuracy": acc,
                "count": self.counts,
            }
        )

    def best(self, min_count: int = 20, relations: Optional[Sequence[str]] = None) -> pd.DataFrame:
        """One row per relation and direction: the best head beside the best offset.

        Columns: relation, direction, layer, head, accuracy, baseline_offset,
        baseline_accuracy (over the instances the direction reaches: :meth:`direction_baselines`),
        count, flagged (``count < min_count``), note (:data:`NOT_APPLICABLE_CAUSAL` where a
        causal model reaches none: accuracies NaN), sorted by count.

        Raises:
            ValueError: a requested relation that the treebank does not have.
        """
        import pandas as pd

        rel_index = {r: i for i, r in enumerate(self.relations)}
        if relations:
            missing = [r for r in relations if r not in rel_index]
            if missing:
                raise InputError(
                    f"the treebank has no {', '.join(map(repr, missing))} relation; it has: "
                    f"{', '.join(sorted(r for r in self.relations))}"
                )
            chosen = [rel_index[r] for r in relations]
        else:
            chosen = list(range(len(self.relations)))
        base = self.direction_baselines().set_index(["relation", "direction"])
        reach = self.reachable
        rows = []
        L, H = self.hits.shape[2:]
        for r in chosen:
            for d, direction in enumerate(DIRECTIONS):
                flat = int(self.hits[d, r].argmax())
                layer, head = divmod(flat, H)
                n = int(reach[d, r])
                b = base.loc[(self.relations[r], direction)]
                rows.append(
                    {
                        "relation": self.relations[r],
                        "direction": direction,
                        "layer": self.layers[layer],
                        "head": head,
                        "accuracy": self.hits[d, r, layer, head] / n if n else float("nan"),
                        "baseline_offset": int(b.baseline_offset),
                        "baseline_accuracy": float(b.baseline_accuracy),
                        "count": n,
                        "flagged": bool(n < min_count),
                        "note": str(b.note),
                    }
                )
        df = pd.DataFrame(rows)
        return df.sort_values(
            ["count", "relation", "direction"], ascending=[False, True, True], kind="stable"
        ).reset_index(drop=True)


def relation_accuracy(graphs: Iterable, base: bool = False, offsets: Sequence[int] = OFFSETS) -> RelationAccuracy:
    """Accuracy of every head on every relation over a corpus (Clark et al. 2019).

    Args:
        graphs: :class:`probe.analyses.structure.word_graph.WordGraph` s (any iterable; consumed once).
        base: group by base relation (``nmod:poss`` counted as ``nmod``).
        offsets: fixed offsets for the baseline.

    Returns:
        a :class:`RelationAccuracy` (``.to_frame()``, ``.best()``, ``.with_all()``).

    Raises:
        ValueError: no sentence, no non-root word, or graphs with different layers/heads.
    """
    counter = RelationCounter(base=base, offsets=offsets)
    for g in graphs:
        counter.update(g)
    return counter.result()


class RelationCounter:
    """The sums behind :class:`RelationAccuracy`, one sentence at a time: ``update(graph)``,
    ``merge(other)`` (another part of the corpus, relations matched by label),
    ``result()``. Integer counts, so merged results equal one pass exactly.

    Memory: ``[direction, relation, layer, head]`` integers; nothing per sentence.
    """

    def __init__(self, base: bool = False, offsets: Sequence[int] = OFFSETS):
        self.base = base
        self.offsets = tuple(int(o) for o in offsets)
        self.vocab: dict = {}
        # [direction, relation, layer, head], [relation], [relation, offset]; made by the first graph
        self.hits: Any = None
        self.counts: Any = None
        self.offset_hits: Any = None
        self.left: Any = None  # [relation]: instances whose head lies left of the dependent
        self.causal: Optional[bool] = None
        self.shape: Any = None
        self.layers: tuple[int, ...] = ()
        self.n_sentences = 0

    def _grow(self, n_relations: int) -> None:
        R = len(self.counts)
        if n_relations > R:
            L, H = self.shape
            pad = n_relations - R
            self.hits = np.concatenate([self.hits, np.zeros((2, pad, L, H), dtype=np.int64)], 1)
            self.counts = np.append(self.counts, np.zeros(pad, dtype=np.int64))
            self.left = np.append(self.left, np.zeros(pad, dtype=np.int64))
            self.offset_hits = np.concatenate([self.offset_hits, np.zeros((pad, len(self.offsets)), np.int64)], 0)

    def _start(self, shape: Sequence[int], layers: Sequence[int]) -> None:
        if self.shape is None:
            L, H = self.shape = tuple(shape)
            self.layers = tuple(layers)
            self.hits = np.zeros((2, 0, L, H), dtype=np.int64)
            self.counts = np.zeros(0, dtype=np.int64)
            self.left = np.zeros(0, dtype=np.int64)
            self.offset_hits = np.zeros((0, len(self.offsets)), dtype=np.int64)
        elif tuple(shape) != self.shape:
            raise InputError(
                f"{shape[0]}×{shape[1]} layers×heads after {self.shape[0]}×{self.shape[1]}: "
                "one model's capture at a time"
            )

    def _kind(self, causal: bool) -> None:
        if self.causal is None:
            self.causal = bool(causal)
        elif self.causal != bool(causal):
            raise InputError("causal and bidirectional maps in one count: one model's capture at a time")

    def update(self, g: WordGraph) -> None:
        """Add one :class:`WordGraph` (``attention [L, H, W, W]``)."""
        L, H = g.attention.shape[:2]
        self._start((L, H), g.layers)
        self._kind(getattr(g, "causal", False))
        self.n_sentences += 1
        keep = g.heads >= 0
        if not bool(keep.any()):
            return
        labels = [base_relation(r) if self.base else r for r, k in zip(g.deprels, keep.tolist()) if k]
        rel = np.array([self.vocab.setdefault(x, len(self.vocab)) for x in labels], dtype=np.int64)
        self._grow(len(self.vocab))
        R = len(self.vocab)
        pred = argmax_predictions(g.attention)[..., keep].reshape(2 * L * H, -1).numpy()
        gold = g.heads[keep].numpy()
        hits = _grouped_sum(pred == gold[None, :], rel, R)  # [2LH, R]
        self.hits += hits.reshape(2, L, H, R).transpose(0, 3, 1, 2)
        self.counts += np.bincount(rel, minlength=R)
        pos = torch.nonzero(keep).flatten().numpy()
        self.left += np.bincount(rel[gold < pos], minlength=R)
        off = np.asarray(self.offsets, dtype=np.int64)
        np.add.at(self.offset_hits, rel, (pos[:, None] + off[None, :] == gold[:, None]).astype(np.int64))

    def merge(self, other: "RelationCounter") -> "RelationCounter":
        """Add ``other``'s counts (relations matched by label) and return ``self``."""
        if (other.base, other.offsets) != (self.base, self.offsets):
            raise ValueError("cannot merge relation counts with another base/offsets setting")
        if other.shape is None:
            return self
        self._start(other.shape, other.layers)
        self._kind(bool(other.causal))
        for label in sorted(other.vocab, key=other.vocab.__getitem__):
            self.vocab.setdefault(label, len(self.vocab))
        self._grow(len(self.vocab))
        to = np.array([self.vocab[label] for label in sorted(other.vocab, key=other.vocab.__getitem__)], dtype=np.int64)
        self.hits[:, to] += other.hits
        self.counts[to] += other.counts
        self.left[to] += other.left
        self.offset_hits[to] += other.offset_hits
        self.n_sentences += other.n_sentences
        return self

    def result(self) -> RelationAccuracy:
        if self.n_sentences == 0:
            raise InputError("no sentence to evaluate: the treebank is empty or every sentence was skipped")
        if not self.vocab:
            raise InputError("no dependency to evaluate: every word is a root")
        return RelationAccuracy(
            relations=tuple(sorted(self.vocab, key=self.vocab.__getitem__)),
            hits=self.hits.copy(),
            counts=self.counts.copy(),
            offset_hits=self.offset_hits.copy(),
            offsets=self.offsets,
            layers=self.layers,
            n_sentences=self.n_sentences,
            left=self.left.copy(),
            causal=bool(self.causal),
        )


def _grouped_sum(values: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """``values [k, N]`` summed over N within ``groups [N]`` → ``[k, n_groups]`` (one BLAS
    matmul; float64 holds these integer counts exactly)."""
    onehot = np.zeros((len(groups), n_groups), dtype=np.float64)
    onehot[np.arange(len(groups)), groups] = 1.0
    return np.rint(values.astype(np.float64) @ onehot).astype(np.int64)
