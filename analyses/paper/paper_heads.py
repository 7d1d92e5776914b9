"""Find the heads behind the appendix figures of Vaswani et al. (2017).

The appendix of "Attention Is All You Need" shows encoder self-attention of layer 5 of
6 on two sentences: Figure 3, many heads attend from "making" to "more" / "difficult"
(the long-distance completion "making … more difficult"); Figure 4, two heads attend
from "its" to "Law" (anaphora resolution). :func:`rank_heads` ranks every (layer, head)
of any model by the word-level attention from a query word to target word(s) — the
summed weight on the targets — and says whether the head's argmax (special tokens and
the query word itself excluded) is one of the targets. Word level follows Clark et al.
(2019): attention to a word sums its tokens' columns, from a word averages its rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence, Union

import pandas as pd

from probe.errors import InputError, NotApplicable

if TYPE_CHECKING:
    import torch

    from probe.maps import AttentionMaps, WordAttention
    from probe.models.adapter import ModelAdapter

LAW = "The Law will never be perfect, but its application should be just - this is what we are missing, in my opinion."
MAKING = (
    "It is in this spirit that a majority of American governments have passed new laws since "
    "2009 making the registration or voting process more difficult."
)


@dataclass(frozen=True)
class PaperSentence:
    """One appendix sentence: the text, the query word and the word(s) it should attend to."""

    name: str
    text: str
    query: str
    targets: tuple
    figure: str


#: The two appendix sentences of Vaswani et al. (2017), keyed by a short name.
SENTENCES = {
    "making": PaperSentence(
        "making", MAKING, "making", ("more", "difficult"), "Vaswani et al. 2017, Figure 3 (long-distance dependency)"
    ),
    "its": PaperSentence("its", LAW, "its", ("Law",), "Vaswani et al. 2017, Figure 4 (anaphora)"),
}

WordRef = Union[str, int]


def _word_attention(attention):
    """WordAttention from AttentionMaps (special tokens kept as units) or pass through."""
    if hasattr(attention, "word_level"):
        if attention.kind == "cross":
            raise NotApplicable(
                "rank_heads reads self-attention; for cross-attention use "
                "probe.analyses.paper.alignment (its rows are grouped by the word they produce)"
            )
        return attention.word_level(keep_special=True)
    if not hasattr(attention, "units"):
        raise InputError(f"expected AttentionMaps or WordAttention, got {type(attention).__name__}")
    return attention


def find_word(units: Sequence[str], is_special: Sequence[bool] | torch.Tensor, word: WordRef) -> int:
    """Index of ``word`` among the word units (special units never match).

    ``word`` is a unit index, or a string matched exactly, then case-insensitively
    (uncased models). Raises ``ValueError`` when it is absent (listing the words) or
    occurs more than once (pass its index instead).
    """
    special = [bool(s) for s in is_special]
    if isinstance(word, int) and not isinstance(word, bool):
        if not 0 <= word < len(units) or special[word]:
            raise InputError(f"unit {word} is not a word of this sentence (0..{len(units) - 1}, specials excluded)")
        return word
    word = str(word)
    for same in (lambda u: u == word, lambda u: u.lower() == word.lower()):
        hits = [i for i, u in enumerate(units) if not special[i] and same(u)]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            raise InputError(f"{word!r} occurs {len(hits)} times (units {hits}); pass the unit index instead")
    words = [u for u, s in zip(units, special) if not s]
    raise InputError(f"{word!r} is not a word of this sentence; its words are: {' '.join(words)}")


def query_weights(
    attention: AttentionMaps | WordAttention, query: WordRef
) -> tuple[torch.Tensor, tuple[str, ...], torch.Tensor, int]:
    """The attention from one word to every unit, for every head.

    Args:
        attention: self-attention :class:`probe.maps.AttentionMaps` of one sentence
            (``[layer, head, token, token]``) or its ``WordAttention``.
        query: the attending word (string or unit index).

    Returns:
        ``(weights, units, is_special, q)``: ``weights`` float tensor ``[layer, head,
        n_units]`` (sums to 1 over units, special tokens being units of their own), the
        unit labels, the special-unit mask, the query's unit index.
    """
    wa = _word_attention(attention)
    q = find_word(wa.units, wa.is_special, query)
    return wa.attentions[:, :, q, :].float(), tuple(wa.units), wa.is_special.clone(), q


def rank_heads(
    attention: AttentionMaps | WordAttention, query: WordRef, targets: Union[WordRef, Sequence[WordRef]]
) -> pd.DataFrame:
    """Rank all (layer, head) by the attention from ``query`` to ``targets``.

    Args:
        attention: self-attention :class:`probe.maps.AttentionMaps` of one sentence,
            ``attentions[layer, head, token, token]``, or its ``WordAttention``.
        query: the attending word ("its", "making"), string or unit index.
        targets: the word or words it should attend to ("Law"; "more", "difficult").

    Returns:
        DataFrame sorted by ``weight`` (descending), one row per head: ``rank`` (1 =
        best), ``layer`` (model layer index), ``head``, ``weight`` (summed word-level
        attention on the targets), ``is_argmax`` (the head's argmax over words, special
        tokens and the query word excluded, is a target), ``argmax_word``,
        ``argmax_weight``, ``uniform`` (the targets' share under uniform attention over
        the candidate words, a baseline for ``weight``).

    Raises:
        ValueError: cross-attention input, a query or target not in the sentence (or
            ambiguous), or a target equal to the query.
    """
    if isinstance(targets, (str, int)):
        targets = [targets]
    targets = list(targets)
    if not targets:
        raise InputError("give at least one target word")
    w, units, special, q = query_weights(attention, query)
    t_idx = sorted({find_word(units, special, t) for t in targets})
    if q in t_idx:
        raise InputError(f"the query word {units[q]!r} cannot also be a target")
    candidates = ~special
    candidates[q] = False
    n_cand = int(candidates.sum())
    masked = w.masked_fill(~candidates, -1.0)
    arg = masked.argmax(-1)  # [L, H]
    weight = w[:, :, t_idx].sum(-1)
    layers = list(attention.layers)
    recs = []
    for li, layer in enumerate(layers):
        for h in range(w.shape[1]):
            a = int(arg[li, h])
            recs.append(
                dict(
                    layer=layer,
                    head=h,
                    weight=float(weight[li, h]),
                    is_argmax=a in t_idx,
                    argmax_word=units[a],
                    argmax_weight=float(w[li, h, a]),
                    uniform=len(t_idx) / n_cand,
                )
            )
    df = pd.DataFrame.from_records(recs).sort_values(["weight", "layer", "head"], ascending=[False, True, True])
    df.insert(0, "rank", range(1, len(df) + 1))
    return df.reset_index(drop=True)


def top_heads(ranking: pd.DataFrame, k: int = 3) -> list:
    """The first ``k`` ``(layer, head)`` of a :func:`rank_heads` table."""
    if k < 1:
        raise InputError(f"k must be ≥ 1, got {k}")
    return [(int(r.layer), int(r.head)) for r in ranking.head(k).itertuples()]


def check_vocabulary(adapter: ModelAdapter, sentences: Sequence[PaperSentence]) -> None:
    """Refuse a model whose tokenizer turns a sentence's query or target word into its
    unknown token: the ranking would compare heads over ``[UNK]`` placeholders, not words.

    Raises:
        ValueError: naming the unknown words and the model (e.g. a zoo model trained on a
            synthetic vocabulary).
    """
    tok = adapter.tokenizer
    unk = getattr(tok, "unk_token_id", None)
    if unk is None:
        return  # byte-level vocabularies have no unknown token
    missing = []
    for s in sentences:
        for word in (s.query, *s.targets):
            ids = tok(" " + word, add_special_tokens=False)["input_ids"]
            if not ids or unk in ids:
                missing.append(word)
    if missing:
        raise NotApplicable(
            f"{adapter.name}'s vocabulary lacks {', '.join(repr(w) for w in missing)} (tokenized as "
            f"{tok.unk_token}): the paper's sentences need a model trained on English text, "
            "e.g. minilm or hf:<model>"
        )


def paper_rankings(adapter: ModelAdapter, names: Sequence[str] = tuple(SENTENCES)) -> dict:
    """Capture the appendix sentences with ``adapter`` and rank its heads for each.

    Returns ``{name: (AttentionMaps, ranking DataFrame)}`` for names in
    :data:`SENTENCES`. Raises ``ValueError`` for an unknown name, a model whose
    vocabulary lacks the query or target words (:func:`check_vocabulary`), or (from
    capture) for a model that cannot read the sentence.
    """
    from probe.runs.capture import capture

    bad = [n for n in names if n not in SENTENCES]
    if bad:
        raise InputError(f"unknown sentence(s) {bad}; known: {', '.join(SENTENCES)}")
    check_vocabulary(adapter, [SENTENCES[n] for n in names])
    maps = capture(adapter, [SENTENCES[n].text for n in names])
    out = {}
    for n, m in zip(names, maps):
        s = SENTENCES[n]
        out[n] = (m, rank_heads(m, s.query, s.targets))
    return out
