"""Word-level attention of a treebank sentence, aligned to its gold tree: :class:`WordGraph`.

The syntax analyses (relation heads, trees, the attention probe) all start from the same
object: for one sentence, the attention between its treebank words for every captured
layer and head, with the special tokens taken out, next to the gold heads and relations.

Word level follows Clark et al. (2019), "What Does BERT Look At?": attention *to* a word
is the sum over its tokens' columns; attention *from* a word is the mean over its
tokens' rows. It equals ``maps.word_level(keep_special=True)`` restricted to the word
units, computed here with one matrix product per sentence (no Python loop over tokens).

A sentence whose words cannot all be aligned to tokens (a word that no token covers)
is never evaluated half-aligned: :func:`word_graph` raises :class:`AlignmentError` and
:func:`word_graphs` skips it, logs it and lists it in its ``skipped`` record.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator, Optional

import torch

from probe.errors import InputError, NotApplicable

if TYPE_CHECKING:
    import pandas as pd

    from probe.maps import AttentionMaps
    from probe.inputs.readers import Sentence

log = logging.getLogger(__name__)


class AlignmentError(InputError):
    """The captured tokens do not cover every treebank word of the sentence."""


@dataclass(frozen=True)
class WordGraph:
    """Word-level attention of one sentence with its gold dependency tree.

    Attributes:
        attention: ``[layer, head, word, word]`` float32: row ``i`` is the attention
            *from* word ``i``, column ``j`` the attention *to* word ``j``. Special tokens
            are excluded, so rows sum to ``1 - to_special``.
        to_special: ``[layer, head, word]``: attention from each word to all special
            tokens together ([CLS], [SEP], …).
        from_special: ``[layer, head, word]``: attention to each word from the special
            tokens (mean over the special tokens' rows).
        heads: ``[word]`` long: gold head of each word, 0-based, ``-1`` for the root.
        deprels: the gold relation of each word (full UD label, e.g. ``nmod:poss``).
        layers: model layer index of each captured layer.
        index: position of the sentence in its corpus.
        causal: the maps are a causal model's (a word attends only to itself and the words
            on its left: a relation whose head lies to its right cannot be attended from
            the dependent, nor one whose head lies to its left from the head).
    """

    attention: torch.Tensor
    to_special: torch.Tensor
    from_special: torch.Tensor
    heads: torch.Tensor
    deprels: tuple
    layers: tuple
    index: int = 0
    causal: bool = False

    @property
    def n_words(self) -> int:
        return self.attention.shape[-1]


def gold_heads(sentence: Sentence) -> torch.Tensor:
    """0-based gold heads of a :class:`probe.inputs.readers.Sentence` (``-1`` = root), ``[word]``."""
    return torch.tensor([h - 1 for h in sentence.heads], dtype=torch.long)


def word_graph(maps: AttentionMaps, sentence: Sentence, index: int = 0) -> WordGraph:
    """Align one captured example with its treebank sentence.

    Args:
        maps: :class:`probe.maps.AttentionMaps` of the sentence's text, captured with the
            sentence's word spans (so ``maps.word_ids`` index the treebank words).
        sentence: the :class:`probe.inputs.readers.Sentence`.
        index: its position in the corpus (kept on the result).

    Returns:
        a :class:`WordGraph` with ``attention`` ``[L, H, W, W]``, ``W = len(sentence)``.

    Raises:
        AlignmentError: a treebank word got no token (``maps.meta["unaligned_words"]``
            or a word index without tokens), or the maps index more words than the
            sentence has.
        ValueError: cross-attention maps (words must be on both sides).
    """
    attention, to_special, from_special = word_attention(maps, len(sentence.words))
    return WordGraph(
        attention=attention,
        to_special=to_special,
        from_special=from_special,
        heads=gold_heads(sentence),
        deprels=tuple(sentence.deprels),
        layers=tuple(maps.layers),
        index=index,
        causal=maps.kind == "causal",
    )


def word_attention(maps: AttentionMaps, n_words: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Word-level attention of ``maps`` over ``n_words`` words, specials split off.

    Returns:
        ``(attention [L, H, W, W], to_special [L, H, W], from_special [L, H, W])`` as in
        :class:`WordGraph`.

    Raises:
        AlignmentError: a word without tokens, or tokens of a word beyond ``n_words``.
        ValueError: cross-attention maps.
    """
    if maps.kind == "cross":
        raise NotApplicable("syntax analyses need self-attention maps, got cross-attention")
    unaligned = maps.meta.get("unaligned_words") or []
    if unaligned:
        raise AlignmentError(f"words {list(unaligned)} got no token")
    ids = torch.tensor(
        [-1 if w is None or s else int(w) for w, s in zip(maps.word_ids, maps.special_mask.tolist())], dtype=torch.long
    )
    if len(ids) and int(ids.max()) >= n_words:
        raise AlignmentError(f"maps index word {int(ids.max())} but the sentence has {n_words} words")
    member = (ids[:, None] == torch.arange(n_words)[None, :]).float()  # [K, W]
    for w, t in maps.meta.get("absorbed_words") or []:  # a word without a token of its own
        if w < n_words:  # shares the token that absorbed its characters
            member[t, w] = 1.0
    counts = member.sum(0)
    if n_words and bool((counts == 0).any()):
        missing = torch.nonzero(counts == 0).flatten().tolist()
        raise AlignmentError(f"words {missing} got no token")
    a = maps.attentions.float()
    mean_rows = member / counts.clamp(min=1)  # [K, W], column w averages w's rows
    attention = mean_rows.T @ a @ member  # [L, H, W, W]
    special = maps.special_mask
    to_special = (a[..., special].sum(-1)) @ mean_rows  # [L, H, W]
    if bool(special.any()):
        from_special = (a[:, :, special, :] @ member).mean(-2)  # [L, H, W]
    else:
        from_special = torch.zeros(a.shape[0], a.shape[1], n_words)
    return attention, to_special, from_special


@dataclass
class Skipped:
    """Sentences left out of an evaluation: ``rows`` of (index, sent_id, line, reason)."""

    rows: list

    def __len__(self) -> int:
        return len(self.rows)

    def to_frame(self) -> pd.DataFrame:
        """``index, sent_id, line, reason``: one row per sentence left out."""
        import pandas as pd

        return pd.DataFrame(self.rows, columns=["index", "sent_id", "line", "reason"])


def word_graphs(
    maps_iter: Iterable[AttentionMaps],
    sentences: Sequence[Sentence],
    indices: Optional[Iterable[int]] = None,
    skipped: Optional[Skipped] = None,
) -> Iterator[WordGraph]:
    """Yield a :class:`WordGraph` per (maps, sentence) pair, skipping misaligned ones.

    Args:
        maps_iter: captured maps, in the order of ``indices`` (or of ``sentences``).
        sentences: the treebank sentences (indexable).
        indices: which sentence each maps belongs to (default 0, 1, 2, …).
        skipped: a :class:`Skipped` that collects the sentences left out, with the reason;
            each is logged at INFO level, and their number once at WARNING level.
    """
    indices = iter(indices) if indices is not None else iter(range(len(sentences)))
    n_skipped = 0
    for maps, i in zip(maps_iter, indices):
        s = sentences[i]
        try:
            yield word_graph(maps, s, index=i)
        except AlignmentError as exc:
            n_skipped += 1
            log.info("sentence %s (line %s) skipped: %s", s.sent_id or i, s.line, exc)
            if skipped is not None:
                skipped.rows.append((i, s.sent_id, s.line, str(exc)))
    if n_skipped:
        log.warning(
            "%d sentence(s) skipped because some word got no token of its own (listed in "
            "skipped.csv; e.g. UD's 'It'+'s' inside the single token 'its')",
            n_skipped,
        )
