"""The decoder head taxonomy, scored as its papers define it, on their own probe inputs.

Each score is a pure function of attention patterns ``[example, layer, head, query, key]``
on **repeated random tokens**: ``<bos>`` then ``T`` random tokens then the same ``T``
again (Olsson et al. 2022's probe; TransformerLens's head detector uses the same
sequences). Positions: ``0`` is ``<bos>``, the first copy ``1..T``, the second ``T+1..2T``.

* previous-token score: mean over queries ``i ≥ 1`` of ``A[i, i-1]``
  (TransformerLens's ``previous_token_head`` detection pattern);
* duplicate-token score: mean over the second copy of ``A[i, i-T]`` (attention to the
  earlier occurrence of the same token);
* induction (prefix-matching) score, Olsson et al. (2022): mean over the second copy of
  ``A[i, i-T+1]`` (attention to the token *after* the earlier occurrence);
* sink score α₁, Gu et al. (2024, "When attention sink emerges"): mean over queries of the
  attention to the first token; a head is a sink head when α₁ > ε, and the model's
  Sink₁^ε is the fraction of its heads that are, with ε = 0.3 as in the paper.

TransformerLens's ``detect_head`` (``error_measure="mul"``, its default) scores the first three
patterns on the same sequences but divides by all ``N = 1 + 2T`` rows, the ones its pattern
leaves empty included: its previous-token score is ours × (N−1)/N, its duplicate-token and
induction scores ours × T/N (``tests/test_transformer_lens.py`` checks both to 1e-5).

A head takes a role when its score clears the role's threshold (:data:`THRESHOLDS`; the
pattern scores are attention mass, so 0.4 means 40% of each query's attention on the
one position the role names; random tokens make content matches other than the repeat
improbable). Not here yet: the copying half of Olsson's induction definition (the OV
circuit's positive eigenvalues), successor heads (Gould et al. 2023) and retrieval heads
(Wu et al. 2024), which need an unembedding-space and a needle-in-a-haystack probe.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd
import torch

from probe.errors import InputError

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = [
    "THRESHOLDS",
    "SINK_EPSILON",
    "repeated_random_tokens",
    "probe_tokens",
    "previous_token_scores",
    "duplicate_token_scores",
    "induction_scores",
    "sink_scores",
    "sink_ratio",
    "DecoderHeadScores",
    "decoder_head_scores",
]

#: Gu et al. (2024)'s ε for Sink₁^ε
SINK_EPSILON = 0.3
#: role -> the score a head must exceed (attention mass on the named position)
THRESHOLDS = {"previous_token": 0.4, "duplicate_token": 0.4, "induction": 0.4, "sink": SINK_EPSILON}


def repeated_random_tokens(
    token_ids: Iterable[int], n_tokens: int, n_examples: int, bos_id: int, seed: int = 0
) -> torch.Tensor:
    """``[n_examples, 1 + 2·n_tokens]``: ``bos_id``, then ``n_tokens`` distinct tokens drawn
    from ``token_ids`` without replacement, then the same tokens again.

    Raises:
        InputError: fewer candidate tokens than ``n_tokens``, or ``n_tokens`` < 2.
    """
    ids = torch.as_tensor(list(token_ids), dtype=torch.long)
    if n_tokens < 2 or len(ids) < n_tokens:
        raise InputError(f"repeated random tokens need 2 <= n_tokens <= {len(ids)} candidate tokens, got {n_tokens}")
    g = torch.Generator().manual_seed(seed)
    rows = [ids[torch.randperm(len(ids), generator=g)[:n_tokens]] for _ in range(n_examples)]
    first = torch.stack(rows)
    bos = torch.full((n_examples, 1), bos_id, dtype=torch.long)
    return torch.cat([bos, first, first], dim=1)


def _check(patterns: torch.Tensor) -> torch.Tensor:
    if patterns.dim() != 5 or patterns.shape[-1] != patterns.shape[-2]:
        raise InputError(f"patterns are [example, layer, head, query, key], got {tuple(patterns.shape)}")
    return patterns.float()


def _diagonal_mean(patterns: torch.Tensor, queries: torch.Tensor, offset: int) -> torch.Tensor:
    """``[layer, head]``: mean over examples and ``queries`` of ``A[i, i - offset]``."""
    a = _check(patterns)
    keys = queries - offset
    return a[..., queries, keys].mean(dim=(0, -1))


def previous_token_scores(patterns: torch.Tensor) -> torch.Tensor:
    """``[layer, head]``: mean of ``A[i, i-1]`` over queries ``i ≥ 1``."""
    n = patterns.shape[-1]
    return _diagonal_mean(patterns, torch.arange(1, n), 1)


def duplicate_token_scores(patterns: torch.Tensor, n_tokens: int) -> torch.Tensor:
    """``[layer, head]``: mean over the second copy of ``A[i, i-T]`` (the same token earlier)."""
    return _diagonal_mean(patterns, torch.arange(n_tokens + 1, 2 * n_tokens + 1), n_tokens)


def induction_scores(patterns: torch.Tensor, n_tokens: int) -> torch.Tensor:
    """``[layer, head]``: mean over the second copy of ``A[i, i-T+1]`` (the token after the
    earlier occurrence; Olsson et al. 2022's prefix matching)."""
    return _diagonal_mean(patterns, torch.arange(n_tokens + 1, 2 * n_tokens + 1), n_tokens - 1)


def sink_scores(patterns: torch.Tensor) -> torch.Tensor:
    """``[layer, head]``: α₁, the mean over examples and queries of the attention to the first
    token (Gu et al. 2024)."""
    return _check(patterns)[..., 0].mean(dim=(0, -1))


def sink_ratio(scores: torch.Tensor, epsilon: float = SINK_EPSILON) -> float:
    """Sink₁^ε: the fraction of heads whose α₁ exceeds ``epsilon`` (Gu et al. 2024); ``scores``
    holds one α₁ per head (``[layer, head]``, any shape)."""
    return float((scores > epsilon).float().mean())


@dataclass(frozen=True)
class DecoderHeadScores:
    """Per-head scores and roles; ``sink_ratio`` is the model's Sink₁^ε."""

    table: pd.DataFrame
    sink_ratio: float
    n_tokens: int
    n_examples: int

    def heads(self, role: str) -> list:
        """``[(layer, head)]`` that take ``role``."""
        t = self.table
        return [(int(r.layer), int(r.head)) for r in t[t[role + "_head"]].itertuples()]

    def to_frame(self) -> pd.DataFrame:
        return self.table


def probe_tokens(adapter: ModelAdapter, n_tokens: int = 10, n_examples: int = 16, seed: int = 0) -> torch.Tensor:
    """The probe input of :func:`decoder_head_scores`: ``[n_examples, 1 + 2·n_tokens]``
    repeated random tokens of ``adapter``'s vocabulary (its special tokens excluded) after its
    ``bos`` (else ``cls``, else 0), on the adapter's device.

    Raises:
        InputError: the sequence does not fit the model's positions, or the vocabulary is
            too small.
    """
    if 1 + 2 * n_tokens > adapter.max_length:
        raise InputError(f"1 + 2·{n_tokens} tokens exceed {adapter.name}'s {adapter.max_length} positions")
    tok = adapter.tokenizer
    special = set(getattr(tok, "all_special_ids", []) or [])
    vocab = [i for i in range(len(tok)) if i not in special]
    bos = getattr(tok, "bos_token_id", None)
    bos = bos if bos is not None else (getattr(tok, "cls_token_id", None) or 0)
    return repeated_random_tokens(vocab, n_tokens, n_examples, int(bos), seed).to(adapter.device)


def decoder_head_scores(
    adapter: ModelAdapter, n_tokens: int = 10, n_examples: int = 16, seed: int = 0
) -> DecoderHeadScores:
    """Every head's previous-token, duplicate-token, induction and sink scores on repeated
    random tokens of ``adapter``'s vocabulary (its special tokens excluded), one traced
    forward; a column ``<role>_head`` per role (score > :data:`THRESHOLDS`).

    Raises:
        InputError: the sequence does not fit the model's positions, or the vocabulary is
            too small.
    """
    from probe.tracing.trace import trace

    ids = probe_tokens(adapter, n_tokens, n_examples, seed)
    cache = trace(adapter, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, read="pattern")
    patterns = cache.stack("pattern").transpose(0, 1)  # [example, layer, head, q, k]
    scores = {
        "previous_token": previous_token_scores(patterns),
        "duplicate_token": duplicate_token_scores(patterns, n_tokens),
        "induction": induction_scores(patterns, n_tokens),
        "sink": sink_scores(patterns),
    }
    n_layers, n_heads = scores["sink"].shape
    rows = []
    for layer in range(n_layers):
        for head in range(n_heads):
            row: dict = {"layer": layer, "head": head}
            for role, s in scores.items():
                row[role] = float(s[layer, head])
                row[role + "_head"] = row[role] > THRESHOLDS[role]
            rows.append(row)
    return DecoderHeadScores(pd.DataFrame(rows), sink_ratio(scores["sink"]), n_tokens, n_examples)
