"""Dependency trees decoded from attention and their attachment score.

For each head (and each layer's head-mean, and the mean over all heads) and each
sentence, the maximum spanning arborescence over the word-level attention (Chu–Liu–
Edmonds, as in Raganato & Tiedemann 2018 and Mareček & Rosa 2019) is compared with the
gold tree by unlabelled attachment score (UAS, every word including the root counted).

Edge scores: the edge ``h → d`` (``h`` heads ``d``) scores ``attention[d, h]``, the
attention of the dependent to its head (Clark et al.'s dep→head reading). Every edge
from the artificial ROOT scores a constant ``root_score`` (default −1) below every
attention weight, so the optimum has exactly one word under ROOT (any second root child
could hang from another word at no loss) and that word is the one whose incoming
attention is cheapest to give up.

Baselines (Clark et al. 2019): right-branching (each word's head is the next word, the
last word is the root — Clark's 26 UAS on WSJ, equal to their offset +1 baseline) and
left-branching (each word's head is the previous word, the first word is the root).

:func:`max_arborescence` is an exact NumPy Chu–Liu–Edmonds, checked against
``networkx.maximum_spanning_arborescence`` in the tests (same total score) and about an
order of magnitude faster per tree (``bench/bench_syntax.py``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Iterable, Optional

import numpy as np
import torch

from probe.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

    from probe.analyses.structure.word_graph import WordGraph

log = logging.getLogger(__name__)


def _find_cycle(heads: np.ndarray) -> Optional[list]:
    """A cycle of the head pointers (list of nodes), or ``None``; ``-1`` ends a path."""
    state = np.zeros(len(heads), dtype=np.int8)  # 0 new, 1 on current path, 2 finished
    for start in range(len(heads)):
        path, v = [], start
        while v != -1 and state[v] == 0:
            state[v] = 1
            path.append(v)
            v = int(heads[v])
        if v != -1 and state[v] == 1:
            return path[path.index(v) :]
        for u in path:
            state[u] = 2
    return None


def max_arborescence(scores: np.ndarray) -> np.ndarray:
    """Maximum spanning arborescence rooted at node 0 (Chu–Liu–Edmonds, exact).

    Args:
        scores: ``[n, n]`` with ``scores[d, h]`` the score of the edge ``h → d``; node 0 is
            the root (row 0 and the diagonal are ignored). ``-inf`` forbids an edge.

    Returns:
        int ``[n]``: the head of each node, ``-1`` for node 0, maximising
        ``sum(scores[d, heads[d]])``.

    Raises:
        ValueError: not a square matrix, or some node has no finite incoming edge.
    """
    s = np.array(scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] != s.shape[1]:
        raise ValueError(f"scores must be a square [n, n] matrix, got shape {s.shape}")
    n = len(s)
    np.fill_diagonal(s, -np.inf)
    s[0, :] = -np.inf
    if n > 1 and not np.isfinite(s[1:]).any(1).all():
        raise ValueError("some node has no finite incoming edge: no spanning arborescence exists")
    return _cle(s)


def _cle(s: np.ndarray) -> np.ndarray:
    heads = s.argmax(1)
    heads[0] = -1
    cycle = _find_cycle(heads)
    if cycle is None:
        return heads
    cyc = np.array(cycle)
    in_cycle = np.zeros(len(s), dtype=bool)
    in_cycle[cyc] = True
    rest = np.nonzero(~in_cycle)[0]  # contains the root
    m = len(rest) + 1  # contracted graph: rest + one node for the cycle
    t = np.full((m, m), -np.inf)
    t[:-1, :-1] = s[np.ix_(rest, rest)]
    leaving = s[np.ix_(rest, cyc)]  # edges cycle → rest node
    leave_from = leaving.argmax(1)
    t[:-1, -1] = leaving.max(1)
    entering = s[np.ix_(cyc, rest)] - s[cyc, heads[cyc]][:, None]  # edges rest → cycle, cycle edge broken
    enter_at = entering.argmax(0)
    t[-1, :-1] = entering.max(0)
    t[0, :] = -np.inf
    sub = _cle(t)
    new = heads.copy()
    sub_rest = sub[:-1]
    from_cycle = sub_rest == m - 1
    normal = ~from_cycle & (sub_rest >= 0)
    new[rest[normal]] = rest[sub_rest[normal]]
    new[rest[from_cycle]] = cyc[leave_from[from_cycle]]
    h = sub[-1]
    new[cyc[enter_at[h]]] = rest[h]
    new[0] = -1
    return new


def attention_tree(attention: torch.Tensor | np.ndarray, root_score: float = -1.0) -> np.ndarray:
    """Decode a dependency tree from one word-level attention map.

    Args:
        attention: ``[word, word]``, row = attending word (the dependent).
        root_score: score of every ROOT → word edge (keep it below every attention
            weight for a single root).

    Returns:
        int ``[word]``: 0-based head of each word, ``-1`` for the root.
    """
    a = np.asarray(attention, dtype=np.float64)
    n = a.shape[-1]
    s = np.empty((n + 1, n + 1))
    s[1:, 1:] = a
    s[1:, 0] = root_score
    return max_arborescence(s)[1:] - 1


def branching_heads(n: int, direction: str) -> np.ndarray:
    """Right-branching (head = next word, last = root) or left-branching (head =
    previous word, first = root) heads ``[n]`` of an ``n``-word sentence, 0-based, −1 root."""
    if direction == "right":
        h = np.arange(1, n + 1)
        h[-1] = -1
    elif direction == "left":
        h = np.arange(-1, n - 1)
    else:
        raise InputError(f"direction must be 'right' or 'left', got {direction!r}")
    return h


def tree_scores(graphs: Iterable[WordGraph], root_score: float = -1.0, limit: Optional[int] = None) -> pd.DataFrame:
    """UAS of the trees decoded from every head, every layer's head-mean and the mean of
    all heads, beside the branching baselines.

    Args:
        graphs: :class:`probe.analyses.structure.word_graph.WordGraph` s.
        root_score: see :func:`attention_tree`.
        limit: use the first ``limit`` graphs only (trees cost one decode per head).

    Returns:
        DataFrame with columns source (``head`` | ``layer_mean`` | ``all_mean`` |
        ``right_branching`` | ``left_branching``), layer, head (nullable ints),
        uas, correct, count; sorted by uas, best first.

    Raises:
        ValueError: no sentence to evaluate.
    """
    import pandas as pd

    correct: Optional[np.ndarray] = None
    base = {"right_branching": 0, "left_branching": 0}
    total, n_sent = 0, 0
    layers: tuple = ()
    for g in graphs:
        if limit is not None and n_sent >= limit:
            break
        a = g.attention.float()
        L, H, W, _ = a.shape
        maps = torch.cat([a.reshape(L * H, W, W), a.mean(1), a.mean((0, 1))[None]]).numpy()
        gold = g.heads.numpy()
        if correct is None:
            correct, layers = np.zeros(len(maps), dtype=np.int64), g.layers
        for k, m in enumerate(maps):
            correct[k] += int((attention_tree(m, root_score) == gold).sum())
        base["right_branching"] += int((branching_heads(W, "right") == gold).sum())
        base["left_branching"] += int((branching_heads(W, "left") == gold).sum())
        total += W
        n_sent += 1
    if not n_sent or not total:
        raise InputError("no sentence to decode trees from: the treebank is empty or every sentence was skipped")
    assert correct is not None  # set by the first sentence (n_sent > 0)
    L, H = len(layers), (len(correct) - len(layers) - 1) // len(layers)
    rows: list[tuple] = [("head", layers[k // H], k % H) for k in range(L * H)]
    rows += [("layer_mean", layers[i], None) for i in range(L)] + [("all_mean", None, None)]
    df = pd.DataFrame(rows, columns=["source", "layer", "head"])
    df["correct"] = correct
    for name, c in base.items():
        df.loc[len(df)] = [name, None, None, c]
    df["count"] = total
    df["uas"] = df["correct"] / total
    df["layer"] = df["layer"].astype("Int64")
    df["head"] = df["head"].astype("Int64")
    df.attrs["n_sentences"] = n_sent
    cols = ["source", "layer", "head", "uas", "correct", "count"]
    return df[cols].sort_values("uas", ascending=False, kind="stable").reset_index(drop=True)
