"""The decoder head taxonomy, scored as its papers define it, on their own probe inputs.

Each score is a pure function of attention patterns ``[example, layer, head, query, key]``.

**The repeated-token probe** (Olsson et al. 2022, "In-context Learning and Induction Heads":
prefix matching averaged over the second copy of a repeated random sequence; TransformerLens's
``detect_head`` scores the same sequences): ``<bos>`` then ``T`` random tokens then the same
``T`` again, ``T = 50`` and 16 sequences by default (:data:`REPEAT_TOKENS`,
:data:`PROBE_EXAMPLES`; TransformerLens's demos and ARENA's induction exercises use 50 — a
score is only comparable at the same ``T``, so the output writes it). The token pool is the
tokenizer's vocabulary within the embedding, its special tokens left out, drawn uniformly
without replacement within a copy. Positions: ``0`` is ``<bos>`` (TransformerLens's
``to_tokens`` prepends it), the first copy ``1..T``, the second ``T+1..2T``.

* previous-token score: mean over queries ``i ≥ 1`` of ``A[i, i-1]``
  (TransformerLens's ``previous_token_head`` detection pattern);
* duplicate-token score: mean over the second copy of ``A[i, i-T]`` (attention to the
  earlier occurrence of the same token);
* induction (prefix-matching) score, Olsson et al. (2022): mean over the second copy of
  ``A[i, i-T+1]`` (attention to the token *after* the earlier occurrence);
* content score (content heads): the mean over examples and queries ``i ≥ 1`` of the
  total-variation distance ``½ Σ_j |A_X[i, j] − A_Y[i, j]|`` between the head's rows on the
  repeated sequence ``X`` and on ``Y``, distinct random tokens of the same length: ``0`` when
  the pattern is a function of positions only, ``1`` when the tokens decide it entirely. A
  head is *content* over 0.5 (ours).
* positional score, Voita et al. (2019, "Analyzing Multi-Head Self-Attention"): the share of
  the rows ``i ≥ 1`` of both ``X`` and ``Y`` whose largest weight falls at the head's most
  common relative offset ``j − i`` (kept as ``positional_offset``: −1 the previous token, 0
  itself); a head is *positional* at ≥ 0.9, the paper's "at least 90% of the time", on both
  draws of tokens (an induction head that attends to itself where nothing repeats points
  elsewhere on the second copy). A low content score alone does not make a head positional:
  a re-initialised model's near-uniform heads have one (93% of SmolLM2's re-initialised
  heads score ≤ 0.1) while their largest weight wanders.

**The sink probe** (Gu et al. 2024, "When Attention Sink Emerges in Language Models"): ``L = 64``
tokens (:data:`SINK_LENGTH`), random tokens of the same pool after what the tokenizer puts
first when it encodes text (its ``<bos>``/``[CLS]``; nothing for a tokenizer that prepends
nothing, such as SmolLM2's or GPT-2's: then the first token is the first random token).
α₁ = the mean over examples and all ``L`` queries of the attention to position 0; a head is a
sink head when α₁ > ε = 0.3, the paper's ε, and the model's Sink₁^ε is the share of heads
that are.

TransformerLens's ``detect_head`` (``error_measure="mul"``, its default) scores the first three
patterns on the same sequences but divides by all ``N = 1 + 2T`` rows, the ones its pattern
leaves empty included: its previous-token score is ours × (N−1)/N, its duplicate-token and
induction scores ours × T/N. The table carries those too (``*_tl`` columns), equal to
``detect_head``'s on the same weights (``tests/test_transformer_lens.py``,
``tests/test_smollm2.py``).

A head takes a role when its score clears the role's threshold (:data:`THRESHOLDS`; the
pattern scores are attention mass, so 0.4 means 40% of each query's attention on the
one position the role names). TransformerLens and Olsson et al. give no threshold: 0.4 is
ours, calibrated on a re-initialised model of the same architecture (null share in the
output, measured in docs/patterns.md). The copying half of Olsson's induction definition
and successor heads are read from the weights (:mod:`.decoder_circuits`), retrieval heads
from needle-in-a-haystack decoding (:mod:`.retrieval_heads`); :mod:`.decoder_taxonomy`
gathers them all.
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
    "REPEAT_TOKENS",
    "PROBE_EXAMPLES",
    "SINK_LENGTH",
    "TL_COLUMNS",
    "sink_probe_tokens",
    "repeated_random_tokens",
    "probe_tokens",
    "previous_token_scores",
    "duplicate_token_scores",
    "induction_scores",
    "sink_scores",
    "sink_ratio",
    "probe_vocabulary",
    "content_scores",
    "positional_scores",
    "POSITIONAL_SHARE",
    "CONTENT_MIN",
    "DecoderHeadScores",
    "decoder_head_scores",
]

#: Gu et al. (2024)'s ε for Sink₁^ε
SINK_EPSILON = 0.3
#: role -> the score a head must exceed (attention mass on the named position)
THRESHOLDS = {"previous_token": 0.4, "duplicate_token": 0.4, "induction": 0.4, "sink": SINK_EPSILON}
#: random tokens per copy of the repeated probe (TransformerLens's demos / ARENA use 50)
REPEAT_TOKENS = 50
#: sequences per probe (ours: the papers average over their corpus and state no count)
PROBE_EXAMPLES = 16
#: Gu et al. (2024)'s sequence length T for Sink₁^ε
SINK_LENGTH = 64
#: role -> the TransformerLens ``detect_head`` name its ``*_tl`` column equals
TL_COLUMNS = {
    "previous_token": "previous_token_head",
    "duplicate_token": "duplicate_token_head",
    "induction": "induction_head",
}
#: content score over which a head is a content head (ours)
CONTENT_MIN = 0.5
#: share of rows whose largest weight is at one relative offset from which a head is positional (Voita et al. 2019)
POSITIONAL_SHARE = 0.9


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


def probe_vocabulary(adapter: ModelAdapter) -> tuple:
    """``(token ids, bos id)``: the ids a probe input draws from (the tokenizer's, within the
    embedding, special tokens left out) and the id it starts with (``bos``, else ``cls``, else 0)."""
    tok = adapter.tokenizer
    special = set(getattr(tok, "all_special_ids", []) or [])
    n_embedded = int(getattr(adapter.embeddings(), "num_embeddings", len(tok)))
    vocab = [i for i in range(min(len(tok), n_embedded)) if i not in special]
    bos = getattr(tok, "bos_token_id", None)
    return vocab, int(bos if bos is not None else (getattr(tok, "cls_token_id", None) or 0))


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


def content_scores(patterns_x: torch.Tensor, patterns_y: torch.Tensor) -> torch.Tensor:
    """``[layer, head]``: the mean total-variation distance between the rows ``i ≥ 1`` of two
    pattern stacks ``[example, layer, head, n, n]`` on different tokens at the same positions."""
    a, b = _check(patterns_x)[..., 1:, :], _check(patterns_y)[..., 1:, :]
    if a.shape != b.shape:
        raise InputError(f"content scores compare patterns of one shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    return 0.5 * (a - b).abs().sum(-1).mean(dim=(0, -1))


def positional_scores(patterns: torch.Tensor) -> tuple:
    """``(share, offset)``, each ``[layer, head]``: over every example and row ``i ≥ 1`` of
    ``patterns`` ``[example, layer, head, n, n]``, the relative offset ``j − i`` (≤ 0 under
    a causal mask) of each row's largest weight, the head's most common one (``offset``) and
    the share of rows at it (``share``), Voita et al. (2019)'s positional-head reading. Ties
    go to the earliest key (``argmax``), so exactly uniform rows point at position 0, whose
    offset moves with the row. (:mod:`.role_features`' ``positional_share`` is the same
    reading over a corpus, offsets −2…2 and special tokens left out; here every offset of a
    probe's stacked patterns.)"""
    p = _check(patterns)[..., 1:, :]
    n = p.shape[-1]
    rows = torch.arange(1, n, device=p.device)
    offset = p.argmax(-1) - rows + (n - 1)  # [example, layer, head, n-1], shifted to 0 .. 2n-2
    layers, heads = p.shape[1], p.shape[2]
    flat = offset.permute(1, 2, 0, 3).reshape(layers, heads, -1)
    counts = torch.zeros(layers, heads, 2 * n - 1, device=p.device).scatter_add_(
        -1, flat, torch.ones(flat.shape, device=p.device)
    )
    best = counts.max(-1)
    return (best.values / flat.shape[-1]).cpu(), (best.indices - (n - 1)).cpu()


@dataclass(frozen=True)
class DecoderHeadScores:
    """Per-head scores and roles; ``sink_ratio`` is the model's Sink₁^ε; ``sink_length`` the
    sink probe's length and ``sink_first`` what its first token is (in words)."""

    table: pd.DataFrame
    sink_ratio: float
    n_tokens: int
    n_examples: int
    sink_length: int = SINK_LENGTH
    sink_first: str = "<bos>"

    def heads(self, role: str) -> list:
        """``[(layer, head)]`` that take ``role``."""
        t = self.table
        return [(int(r.layer), int(r.head)) for r in t[t[role + "_head"]].itertuples()]

    def to_frame(self) -> pd.DataFrame:
        return self.table


def probe_tokens(
    adapter: ModelAdapter, n_tokens: int = REPEAT_TOKENS, n_examples: int = PROBE_EXAMPLES, seed: int = 0
) -> torch.Tensor:
    """The probe input of :func:`decoder_head_scores`: ``[n_examples, 1 + 2·n_tokens]``
    repeated random tokens of ``adapter``'s vocabulary (its special tokens excluded) after its
    ``bos`` (else ``cls``, else 0), on the adapter's device.

    Raises:
        InputError: the sequence does not fit the model's positions, or the vocabulary is
            too small.
    """
    if 1 + 2 * n_tokens > adapter.max_length:
        raise InputError(f"1 + 2·{n_tokens} tokens exceed {adapter.name}'s {adapter.max_length} positions")
    vocab, bos = probe_vocabulary(adapter)
    return repeated_random_tokens(vocab, n_tokens, n_examples, bos, seed).to(adapter.device)


def text_prefix(adapter: ModelAdapter) -> list:
    """The token ids the tokenizer puts before a text's own (``[bos]``, ``[cls]`` or ``[]``)."""
    tok = adapter.tokenizer
    plain = tok.encode("a", add_special_tokens=False)
    full = tok.encode("a")
    k = next((i for i in range(len(full)) if full[i : i + len(plain)] == plain), 0)
    return [int(t) for t in full[:k]]


def sink_probe_tokens(
    adapter: ModelAdapter, length: int = SINK_LENGTH, n_examples: int = PROBE_EXAMPLES, seed: int = 0
) -> tuple:
    """``(ids [n_examples, length], first)``: Gu et al. (2024)'s random-token input — what the
    tokenizer puts first when it encodes text, then random tokens of the probe pool up to
    ``length``; ``first`` says what position 0 holds. ``length`` is cut to the model's
    positions.

    Raises:
        InputError: fewer than 2 positions, or a vocabulary too small.
    """
    length = min(int(length), adapter.max_length)
    prefix = text_prefix(adapter)
    vocab, _ = probe_vocabulary(adapter)
    n = length - len(prefix)
    if n < 1 or len(vocab) < n:
        raise InputError(f"a sink probe of {length} tokens does not fit {adapter.name} ({len(vocab)} tokens)")
    g = torch.Generator().manual_seed(seed + 2)
    pool = torch.as_tensor(vocab, dtype=torch.long)
    rows = [
        torch.cat([torch.tensor(prefix, dtype=torch.long), pool[torch.randperm(len(pool), generator=g)[:n]]])
        for _ in range(n_examples)
    ]
    first = (
        f"the tokenizer's {adapter.tokenizer.convert_ids_to_tokens(prefix[0])}"
        if prefix
        else "a random token (the tokenizer prepends nothing)"
    )
    return torch.stack(rows).to(adapter.device), first


def _patterns_of(adapter: ModelAdapter, x: torch.Tensor) -> torch.Tensor:
    """``[example, layer, head, q, k]`` of one traced forward over ``x`` (float32, on the CPU),
    which stops after the last layer where the model allows (no final norm, no vocabulary
    projection: the patterns need no logits)."""
    from probe.models.sites import after_last_layer
    from probe.tracing.trace import trace

    ones = torch.ones_like(x)
    cache = trace(
        adapter, {"input_ids": x, "attention_mask": ones}, read="pattern", stop_before=after_last_layer(adapter)
    )
    return cache.stack("pattern").transpose(0, 1).float().cpu()


def decoder_head_scores(
    adapter: ModelAdapter,
    n_tokens: int = REPEAT_TOKENS,
    n_examples: int = PROBE_EXAMPLES,
    seed: int = 0,
    sink_length: int = SINK_LENGTH,
) -> DecoderHeadScores:
    """Every head's previous-token, duplicate-token and induction scores on repeated random
    tokens and its sink α₁ on Gu et al.'s random-token probe (module docstring), a column
    ``<role>_head`` per role (score > :data:`THRESHOLDS`), TransformerLens's ``detect_head``
    scores (``<role>_tl``), and the content score against a forward on distinct random tokens
    (``content``, ``content_head``) and the positional share and offset on both draws
    (``positional``, ``positional_offset``, ``positional_head``; on the repeated probe alone
    when the vocabulary is too small for distinct tokens).

    Raises:
        InputError: a sequence does not fit the model's positions, or the vocabulary is
            too small.
    """
    ids = probe_tokens(adapter, n_tokens, n_examples, seed)
    vocab, bos = probe_vocabulary(adapter)
    patterns = _patterns_of(adapter, ids)
    if len(vocab) >= 2 * n_tokens:  # Y: as many distinct tokens, no repeat
        other = repeated_random_tokens(vocab, 2 * n_tokens, n_examples, bos, seed + 1)[:, : 1 + 2 * n_tokens]
        distinct = _patterns_of(adapter, other.to(adapter.device))
        content = content_scores(patterns, distinct)
        positional, offset = positional_scores(torch.cat([patterns, distinct]))
    else:
        content = torch.full(patterns.shape[1:3], float("nan"))
        positional, offset = positional_scores(patterns)
    sink_ids, first = sink_probe_tokens(adapter, sink_length, n_examples, seed)
    n = 1 + 2 * n_tokens
    scores = {
        "previous_token": previous_token_scores(patterns),
        "duplicate_token": duplicate_token_scores(patterns, n_tokens),
        "induction": induction_scores(patterns, n_tokens),
        "sink": sink_scores(_patterns_of(adapter, sink_ids)),
    }
    tl_factor = {"previous_token": (n - 1) / n, "duplicate_token": n_tokens / n, "induction": n_tokens / n}
    n_layers, n_heads = scores["sink"].shape
    rows = []
    for layer in range(n_layers):
        for head in range(n_heads):
            row: dict = {"layer": layer, "head": head}
            for role, s in scores.items():
                row[role] = float(s[layer, head])
                row[role + "_head"] = row[role] > THRESHOLDS[role]
            row.update({role + "_tl": row[role] * f for role, f in tl_factor.items()})
            c = float(content[layer, head])
            share = float(positional[layer, head])
            row.update(content=c, content_head=c > CONTENT_MIN, positional=share)
            row.update(positional_offset=int(offset[layer, head]), positional_head=share >= POSITIONAL_SHARE)
            rows.append(row)
    return DecoderHeadScores(
        pd.DataFrame(rows), sink_ratio(scores["sink"]), n_tokens, n_examples, int(sink_ids.shape[1]), first
    )
