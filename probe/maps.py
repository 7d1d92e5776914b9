"""The one core type for captured attention: :class:`AttentionMaps`.

Shape convention, written once for the whole toolkit::

    attentions[layer, head, query, key]

for one example, float32 (or float16 when stored that way). For self- and causal
attention ``query`` and ``key`` index the same tokens; for cross-attention ``query``
indexes the target (decoder) tokens and ``key`` the source (encoder) tokens. Rows (over
keys) sum to 1. Padding is never stored.

Word level follows Clark et al. (2019), "What Does BERT Look At?": attention *to* a word
is the sum over its tokens' columns; attention *from* a word is the mean over its tokens'
rows. Special tokens stay in the token-level map; at word level they either become units
of their own (``keep_special=True``, rows still sum to 1) or are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Optional, Sequence

import torch

from probe.errors import InputError

KINDS = ("self", "causal", "cross")


@dataclass(frozen=True)
class AttentionMaps:
    """Attention of one example: ``attentions[layer, head, query, key]``.

    Attributes:
        attentions: float tensor ``[n_layers_captured, n_heads, n_query, n_key]``.
        tokens: key-side tokens (length ``n_key``).
        word_ids: for each key-side token, the index of the word it belongs to, or
            ``None`` for special tokens and tokens outside every word.
        special_mask: bool tensor ``[n_key]``, True at special tokens ([CLS], <s>, …).
        words: the words that ``word_ids`` index (may be empty when unknown).
        layers: the model layer index of each captured layer (partial capture keeps
            the true indices).
        kind: ``"self"``, ``"causal"`` or ``"cross"``.
        query_tokens / query_word_ids / query_special_mask / query_words: the
            query side, only for cross-attention (``None`` means same as key side).
        text: the input text, when known.
        meta: free-form JSON-able facts (model name, how weights were obtained, …).
        validate: check values (finite, rows sum to 1); producers whose values are
            softmax outputs by construction (capture) skip the two extra passes.

    Raises:
        ValueError: on construction, when shapes disagree, values are not finite
            or rows do not sum to 1 (tolerance 1e-3 for non-empty rows).
    """

    attentions: torch.Tensor
    tokens: tuple
    word_ids: tuple
    special_mask: torch.Tensor
    words: tuple = ()
    layers: tuple = ()
    kind: str = "self"
    query_tokens: Optional[tuple] = None
    query_word_ids: Optional[tuple] = None
    query_special_mask: Optional[torch.Tensor] = None
    query_words: Optional[tuple] = None
    text: str = ""
    meta: dict = field(default_factory=dict)
    validate: bool = field(default=True, repr=False, compare=False)

    def __post_init__(self) -> None:
        a = self.attentions
        if not torch.is_tensor(a) or a.dim() != 4:
            raise InputError(
                "attentions must be a 4-D tensor [layer, head, query, key]; got "
                f"{tuple(a.shape) if torch.is_tensor(a) else type(a).__name__}"
            )
        L, H, Q, K = a.shape
        object.__setattr__(self, "tokens", tuple(self.tokens))
        object.__setattr__(self, "word_ids", tuple(self.word_ids))
        object.__setattr__(self, "words", tuple(self.words))
        if self.kind not in KINDS:
            raise InputError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if len(self.tokens) != K:
            raise InputError(f"{len(self.tokens)} tokens for {K} attention keys")
        if len(self.word_ids) != K:
            raise InputError(f"{len(self.word_ids)} word ids for {K} attention keys")
        mask = torch.as_tensor(self.special_mask, dtype=torch.bool)
        if mask.shape != (K,):
            raise InputError(f"special_mask has shape {tuple(mask.shape)}, expected ({K},)")
        object.__setattr__(self, "special_mask", mask)
        layers = tuple(int(x) for x in self.layers) if self.layers else tuple(range(L))
        if len(layers) != L:
            raise InputError(f"{len(layers)} layer indices for {L} captured layers")
        object.__setattr__(self, "layers", layers)
        if self.kind == "cross":
            if self.query_tokens is None or len(self.query_tokens) != Q:
                raise InputError("cross-attention needs query_tokens, one per query row")
            object.__setattr__(self, "query_tokens", tuple(self.query_tokens))
            qw = self.query_word_ids if self.query_word_ids is not None else (None,) * Q
            object.__setattr__(self, "query_word_ids", tuple(qw))
            qm = self.query_special_mask
            qm = torch.zeros(Q, dtype=torch.bool) if qm is None else torch.as_tensor(qm, dtype=torch.bool)
            object.__setattr__(self, "query_special_mask", qm)
            object.__setattr__(self, "query_words", tuple(self.query_words or ()))
        elif Q != K:
            raise InputError(f"{self.kind}-attention must be square, got query {Q} × key {K}")
        if not self.validate:  # trusted producer (capture: softmax output); shapes checked above
            return
        if a.numel() and not torch.isfinite(a).all():
            raise InputError("attention contains NaN or infinite values")
        if a.numel():
            sums = a.float().sum(-1)
            tol = 1e-3 if a.dtype == torch.float32 or a.dtype == torch.float64 else 1e-2
            if ((sums - 1).abs() > tol).any():
                worst = (sums - 1).abs().max().item()
                raise InputError(
                    f"attention rows must sum to 1 over keys (worst row off by {worst:.3g}); "
                    "pass probabilities, not scores"
                )

    # ---- shape helpers -------------------------------------------------------
    @property
    def n_layers(self) -> int:
        """Captured layers."""
        return self.attentions.shape[0]

    @property
    def n_heads(self) -> int:
        """Heads per layer (captured)."""
        return self.attentions.shape[1]

    @property
    def n_tokens(self) -> int:
        """Key positions ``n_key``."""
        return self.attentions.shape[-1]

    def layer(self, model_layer: int) -> torch.Tensor:
        """Attention of one model layer, ``[head, query, key]``."""
        try:
            i = self.layers.index(int(model_layer))
        except ValueError:
            raise InputError(f"layer {model_layer} was not captured; captured layers: {list(self.layers)}") from None
        return self.attentions[i]

    def head(self, model_layer: int, head: int) -> torch.Tensor:
        """Attention of one head, ``[query, key]``."""
        if not 0 <= head < self.n_heads:
            raise InputError(f"head {head} out of range 0..{self.n_heads - 1}")
        return self.layer(model_layer)[head]

    def with_attentions(self, attentions: torch.Tensor) -> "AttentionMaps":
        """A copy with other attention values (same tokens); validates again."""
        return replace(self, attentions=attentions)

    # ---- word level ----------------------------------------------------------
    def word_level(self, keep_special: bool = True) -> "WordAttention":
        """Aggregate to words as Clark et al. (2019) did.

        Cross-attention: query rows are grouped by the decoder's *input* token at each
        step (the start token, then target word j−1), which is what the row reads. The
        row that *produces* target word j is the one whose input is word j−1; for word
        alignments group by the produced word instead (``probe.analyses.paper.alignment``).

        Returns a :class:`WordAttention` whose ``attentions`` are
        ``[layer, head, n_units, n_units]`` (cross: ``[.., n_query_units, n_key_units]``),
        units being the words in order, and each special token as a unit of its own
        when ``keep_special`` (so rows still sum to 1). Tokens that are neither
        special nor inside a word are left out of both sides.
        """
        key_units, key_labels, key_special = _units(
            self.tokens, self.word_ids, self.special_mask, self.words, keep_special
        )
        if self.kind == "cross":
            q_units, q_labels, q_special = _units(
                self.query_tokens,
                self.query_word_ids,
                self.query_special_mask,
                self.query_words,
                keep_special,
            )
        else:
            q_units, q_labels, q_special = key_units, key_labels, key_special
        a = self.attentions.float()
        to_unit = _membership(key_units, len(key_labels), a.shape[-1])  # [K, U]
        from_unit = _membership(q_units, len(q_labels), a.shape[-2])  # [Q, Uq]
        counts = from_unit.sum(0).clamp(min=1)
        summed_cols = a @ to_unit  # [L, H, Q, U]
        word = (from_unit.T @ summed_cols) / counts[:, None]  # [L, H, Uq, U]
        return WordAttention(
            attentions=word,
            units=tuple(key_labels),
            is_special=torch.tensor(key_special, dtype=torch.bool),
            query_units=tuple(q_labels),
            query_is_special=torch.tensor(q_special, dtype=torch.bool),
            layers=self.layers,
        )


@dataclass(frozen=True)
class WordAttention:
    """Word-level attention ``[layer, head, query_unit, key_unit]`` (Clark et al. 2019).

    ``units`` are words (and special tokens, when kept) in order; ``is_special`` marks
    the special-token units, to exclude them from argmax evaluations.
    """

    attentions: torch.Tensor
    units: tuple
    is_special: torch.Tensor
    query_units: tuple
    query_is_special: torch.Tensor
    layers: tuple

    @property
    def word_positions(self) -> torch.Tensor:
        """Indices of non-special units (the words), ``[n_words]``."""
        return torch.nonzero(~self.is_special).flatten()

    def words_only(self) -> torch.Tensor:
        """Attention restricted to word units, ``[layer, head, n_qwords, n_words]``."""
        q = torch.nonzero(~self.query_is_special).flatten()
        k = self.word_positions
        return self.attentions[:, :, q][:, :, :, k]


def _units(
    tokens: Any,
    word_ids: Any,
    special_mask: Any,
    words: Any,
    keep_special: bool,
) -> tuple[list[int], list[str], list[bool]]:
    """Map each token to a unit index (or -1); return (unit per token, labels, special).

    ``tokens`` ``[n]``, ``word_ids`` ``[n]`` (None: a token of no word), ``special_mask``
    bool ``[n]`` (the key or the query side of a map) and ``words`` (the example's words)."""
    unit_of_token = []
    labels, special = [], []
    word_unit = {}
    for t, (tok, wid) in enumerate(zip(tokens, word_ids)):
        if bool(special_mask[t]):
            if keep_special:
                labels.append(tok)
                special.append(True)
                unit_of_token.append(len(labels) - 1)
            else:
                unit_of_token.append(-1)
        elif wid is None:
            unit_of_token.append(-1)
        else:
            if wid not in word_unit:
                word_unit[wid] = len(labels)
                labels.append(words[wid] if wid < len(words) else tok)
                special.append(False)
            unit_of_token.append(word_unit[wid])
    return unit_of_token, labels, special


def _membership(unit_of_token: Sequence[int], n_units: int, n_tokens: int) -> torch.Tensor:
    """One-hot ``[n_tokens, n_units]``: token t belongs to unit ``unit_of_token[t]`` (−1: none)."""
    idx = torch.as_tensor(list(unit_of_token), dtype=torch.long)
    m = torch.zeros(n_tokens, n_units)
    rows = torch.nonzero(idx >= 0).flatten()
    m[rows, idx[rows]] = 1.0
    return m
