"""What each head writes over a corpus: its direct logit attribution to the corpus's own
next tokens, and the tokens its output raises most there.

Batched forwards of texts of near lengths (:func:`.stream.decompose_texts`). At every position ``p`` but the last, a
head's DLA to the token that follows (:mod:`.dla`: ``(g ⊙ c_p / s_p) · W_U[next]``, the
final norm folded) is averaged over the text's positions; over texts, the mean and its
percentile bootstrap interval (Efron 1979; :func:`probe.analyses.common.bootstrap.bootstrap_mean_ci`,
every head on the same resamples, as the claims' :func:`probe.analyses.claims.statistics.mean_ci` draws them). What the head *promotes* is read from the same pass: its folded output
``g ⊙ c_p / s_p`` averaged over every position of every text, through the unembedding —
its DLA to every token at once, the tokens it raises most on this corpus (Elhage et al.
2021; nostalgebraist 2020 for reading the stream through the unembedding). Causal LMs only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import pandas as pd
import torch

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["CorpusWrites", "corpus_writes"]


@dataclass(frozen=True)
class CorpusWrites:
    """``table``: ``layer, head, dla, ci_low, ci_high, count`` (each head's mean DLA to the
    next token over ``count`` texts, 95% bootstrap interval); ``promoted``: ``layer, head,
    rank, token, token_str, dla`` (the tokens each head's mean folded output raises most, > 0);
    ``n_texts``, ``n_positions``: what they rest on; ``skipped``: texts of one token (no
    next token to read)."""

    table: pd.DataFrame
    promoted: pd.DataFrame
    n_texts: int
    n_positions: int
    skipped: int

    def to_frame(self) -> pd.DataFrame:
        return self.table


def _one_text(one: tuple) -> tuple:
    """``(dla [heads], written [heads, d_model] summed over positions, n_positions, index)``
    of one text's :func:`.claim.stream_head_dla`."""
    dla, stream, heads, positions = one
    read = slice(positions[0], positions[-1] + 1)  # read_directions' positions are one run
    # Σ_p g ⊙ centre(c_p) / s_p = g ⊙ centre(Σ_p c_p / s_p): the fold is linear
    summed = torch.einsum("cpd,p->cd", stream.parts[:, read], 1.0 / stream.scale[read])  # [components, d]
    written = stream.fold.linear(summed[heads])  # [heads, d]
    index = stream.labels[heads.numpy()][["layer", "head"]].reset_index(drop=True)
    return dla.numpy(), written, len(positions), index


def _promoted(adapter: ModelAdapter, mean_written: torch.Tensor, index: pd.DataFrame, k: int) -> pd.DataFrame:
    """The ``k`` tokens each head's mean folded output raises most (``W_U · w``, blocks of
    heads); only tokens it raises (DLA > 0): a head that writes nothing lists none."""
    from .folding import unembedding

    w_u, _ = unembedding(adapter)
    w_u = w_u.float().cpu()
    dec = adapter.tokenizer.decode
    rows = []
    for i in range(0, len(index), 64):
        logits = mean_written[i : i + 64].float() @ w_u.T  # [block, vocab]
        vals, idx = logits.topk(k, dim=-1)
        for j, (vr, ir) in enumerate(zip(vals.tolist(), idx.tolist())):
            layer, head = int(index.at[i + j, "layer"]), int(index.at[i + j, "head"])
            rows += [(layer, head, r, t, dec([t]), v) for r, (v, t) in enumerate(zip(vr, ir)) if v > 0]
    return pd.DataFrame(rows, columns=["layer", "head", "rank", "token", "token_str", "dla"])


def corpus_writes(
    adapter: ModelAdapter, texts: Sequence[str], k: int = 5, n_boot: int = 1000, seed: int = 0
) -> CorpusWrites:
    """What each head writes on ``texts`` (module docstring).

    Raises:
        InputError: no text of two tokens or more (no next token to read anywhere).
        NotApplicable: not a causal LM with a foldable final norm (:func:`.stream.decompose`).
    """
    from probe.analyses.common.bootstrap import bootstrap_mean_ci
    from probe.errors import InputError

    from .claim import texts_head_dla

    effects, written, n_positions, index = {}, None, 0, None
    for i, got in texts_head_dla(adapter, texts):
        if got is None:
            continue
        one = _one_text(got)
        effects[i] = one[0]
        written = one[1] if written is None else written + one[1]
        n_positions += one[2]
        index = one[3]
    if written is None or index is None:
        raise InputError("every text is one token: there is no next token whose logit a head writes; give longer texts")
    e = np.stack([effects[i] for i in sorted(effects)], axis=1)  # [heads, texts], in the texts' order
    low, high = bootstrap_mean_ci(e, n_boot=n_boot, seed=seed)  # every head on the same resamples of the texts
    table = index.assign(dla=e.mean(1), ci_low=low, ci_high=high, count=e.shape[1])
    promoted = _promoted(adapter, written / n_positions, index, k)
    return CorpusWrites(table, promoted, e.shape[1], n_positions, len(texts) - e.shape[1])
