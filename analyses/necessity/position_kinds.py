"""The position kinds of a model's inputs, and a head's mean output per kind.

Mean-ablation replaces a head's output by what it writes *on average at that position*
(Wang et al. 2022, "Interpretability in the Wild"). Positions of different kinds get
different averages: each special token the tokenizer inserts or knows ([CLS], [SEP],
BOS, EOS, [MASK] …; the padding token never, it is not a position) is its own kind,
content positions are one kind, and in a decoder the first position (where attention
sinks, Xiao et al. 2023) is its own kind when it is not already a special token.
Pooling kinds puts at one position what the head writes at another: MiniLM's L0H9
writes a large vector at [CLS] and a small one at [SEP], and a mean pooled over both
made it look necessary (issue 58).

:func:`position_kinds` names the kinds of an adapter; :meth:`PositionKinds.index` is the
one map from a batch to each position's kind; :class:`KindMeans` holds the per-kind means
``[n_kinds, n_layers, n_heads, head_dim]`` and the one mean over all positions (what a
kind absent from the means' corpus gets, and the ``one-mean`` baseline).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

__all__ = ["PositionKinds", "KindMeans", "position_kinds", "CONTENT", "FIRST"]

#: the kind of every position that is neither a special token nor (decoders) the first
CONTENT = "content"
#: a decoder's first position when it is not a special token (the attention sink)
FIRST = "first position"


@dataclass(frozen=True)
class PositionKinds:
    """The position kinds of one model.

    Attributes:
        names: each kind's name, in index order: ``content``, then (decoders) ``first
            position``, then one per special token (its token text).
        token_ids: the special token id of each kind (``-1`` for content and first).
        first_apart: whether a first position that is not special is a kind of its own.
    """

    names: tuple
    token_ids: tuple
    first_apart: bool

    @property
    def n(self) -> int:
        return len(self.names)

    def index(self, batch: Any) -> torch.Tensor:
        """``[rows, seq]`` long: each position's kind index (padding positions read 0,
        content; every caller masks them out).

        ``batch``: a :class:`probe.analyses.common.batch.MetricBatch` (right-padded
        ``input_ids``, ``attention_mask``, the ``special`` mask)."""
        ids = batch.inputs["input_ids"]
        valid = batch.inputs["attention_mask"].bool()
        special = batch.special.to(ids.device).bool() if batch.special is not None else torch.zeros_like(valid)
        kind = torch.zeros(ids.shape, dtype=torch.long, device=ids.device)
        if self.first_apart:
            first = torch.zeros_like(valid)
            first[:, 0] = True
            kind[first & valid & ~special] = self.names.index(FIRST)
        for k, tid in enumerate(self.token_ids):
            if tid >= 0:
                kind[special & valid & (ids == tid)] = k
        return kind

    def describe(self) -> str:
        return ", ".join(self.names)


def position_kinds(adapter: Any) -> PositionKinds:
    """The kinds of ``adapter``'s positions (module docstring): the tokenizer's special
    tokens that mark structure (:func:`probe.inputs.corpus.special_token_ids`, the
    ``[UNK]`` token excluded as text, the padding token excluded unless it is also its
    BOS/EOS/CLS/SEP), content, and for a decoder the first position."""
    from probe.inputs.corpus import special_token_ids

    tok = adapter.tokenizer
    structural = {getattr(tok, f"{k}_token_id", None) for k in ("bos", "eos", "cls", "sep")} - {None}
    pad = getattr(tok, "pad_token_id", None)
    ids = [i for i in special_token_ids(tok) if i != pad or i in structural]
    names = [CONTENT] + ([FIRST] if adapter.arch == "decoder" else [])
    token_ids = [-1] * len(names) + ids
    names += [str(tok.convert_ids_to_tokens(int(i))) for i in ids]
    return PositionKinds(tuple(names), tuple(int(i) for i in token_ids), adapter.arch == "decoder")


@dataclass(frozen=True)
class KindMeans:
    """Every head's mean output per position kind (Wang et al. 2022's mean-ablation value).

    Attributes:
        values: ``[n_kinds, n_layers, n_heads, head_dim]`` float32; a kind absent from the
            means' corpus holds the one overall mean.
        overall: ``[n_layers, n_heads, head_dim]``: the one mean over all positions.
        kinds: the :class:`PositionKinds` the rows of ``values`` follow.
        counts: positions averaged per kind (0: absent, the overall mean stands in).
    """

    values: torch.Tensor
    overall: torch.Tensor
    kinds: PositionKinds
    counts: tuple

    def at(self, layer: int, batch: Any) -> torch.Tensor:
        """``[rows, seq, n_heads, head_dim]``: each position's kind mean of ``layer``."""
        kind = self.kinds.index(batch)
        return self.values[:, layer].to(kind.device)[kind]

    def one_mean(self) -> KindMeans:
        """The same means with every kind given the one overall mean (the ``one-mean`` baseline)."""
        return replace(self, values=self.overall[None].expand_as(self.values).clone())

    def absent(self) -> list:
        return [name for name, c in zip(self.kinds.names, self.counts) if c == 0]

    def describe(self) -> str:
        """The kinds in words, with their counts and the kinds absent (stated in the notes)."""
        present = ", ".join(f"{n} ({c:,})" for n, c in zip(self.kinds.names, self.counts) if c)
        absent = self.absent()
        return f"per position kind: {present}" + (
            f"; absent from the means' examples, so given the one mean over all positions: {', '.join(absent)}"
            if absent
            else ""
        )

    def to_dict(self) -> dict:
        return {
            "kinds": list(self.kinds.names),
            "positions": {n: int(c) for n, c in zip(self.kinds.names, self.counts)},
            "absent": self.absent(),
        }
