"""Retrieval heads (Wu et al. 2024, "Retrieval Head Mechanistically Explains Long-Context
Factuality"): the copy-paste retrieval score on needle-in-a-haystack inputs.

The input, built from the model's own vocabulary (special tokens left out): ``<bos>``, a
haystack of distinct random tokens with a needle of ``k + 1`` distinct random tokens
inserted at a depth, then the needle's first token as the cue. The model decodes ``k``
tokens greedily; the answer it should give is the rest of the needle, ``k`` tokens.

At each decoding step the query is the last position ``q`` and the model emits ``w``. A head
*copies* there when ``w`` is a needle token and the key the head attends to most,
``argmax_j A[q, j]``, lies in the needle and holds ``w`` (Wu et al.'s copy-paste). Its
retrieval score on one input is ``|g_h ∩ k| / |k|``: the share of the answer's tokens it
copied at least once; the head's score is the mean over inputs. A head is a retrieval head
when the score exceeds 0.1 (:data:`RETRIEVAL_THRESHOLD`, as in the paper, where 3–6% of
heads do). A model that never emits a needle token gives every head 0: the score reads
what the heads do when the model retrieves.

Shapes: ``ids`` ``[example, n]``; ``patterns`` ``[example, layer, head, query, key]`` of one
forward over the decoded sequence (a causal model's rows are those of each decoding step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

import pandas as pd
import torch

from probe.errors import InputError

if TYPE_CHECKING:
    from probe.models.adapter import ModelAdapter

__all__ = ["RETRIEVAL_THRESHOLD", "NeedleInputs", "needle_inputs", "copy_paste_scores", "retrieval_scores"]

#: Wu et al. (2024): a head with retrieval score above 0.1 is a retrieval head
RETRIEVAL_THRESHOLD = 0.1


@dataclass(frozen=True)
class NeedleInputs:
    """``ids`` ``[example, 1 + n_context + 1]`` (``<bos>``, haystack with the needle, the cue);
    ``needle`` ``[example, k + 1]`` token ids; ``start`` ``[example]``: the needle's first position."""

    ids: torch.Tensor
    needle: torch.Tensor
    start: torch.Tensor


def needle_inputs(
    token_ids: Iterable[int], n_context: int, answer_len: int, n_examples: int, bos_id: int, seed: int = 0
) -> NeedleInputs:
    """Needle-in-a-haystack inputs (module docstring); the needle's depth is drawn per example
    (uniform over the places it fits, Wu et al. vary it over the context).

    Raises:
        InputError: the context cannot hold the needle, or the vocabulary is too small for
            ``n_context`` distinct tokens.
    """
    ids = torch.as_tensor(list(token_ids), dtype=torch.long)
    k = answer_len + 1
    if answer_len < 1 or n_context < k + 1 or len(ids) < n_context:
        raise InputError(
            f"a needle of {k} tokens needs n_context >= {k + 1} and as many distinct tokens "
            f"(got n_context {n_context}, {len(ids)} tokens)"
        )
    g = torch.Generator().manual_seed(seed)
    rows, needles, starts = [], [], []
    for _ in range(n_examples):
        draw = ids[torch.randperm(len(ids), generator=g)[:n_context]]
        needle, hay = draw[:k], draw[k:]
        at = int(torch.randint(0, n_context - k + 1, (1,), generator=g))
        context = torch.cat([hay[:at], needle, hay[at:]])
        rows.append(torch.cat([torch.tensor([bos_id]), context, needle[:1]]))
        needles.append(needle)
        starts.append(1 + at)
    return NeedleInputs(torch.stack(rows), torch.stack(needles), torch.tensor(starts))


def copy_paste_scores(patterns: torch.Tensor, ids: torch.Tensor, inputs: NeedleInputs) -> torch.Tensor:
    """``[layer, head]``: the mean over examples of ``|g_h ∩ answer| / |answer|`` (module
    docstring). ``ids`` ``[example, n0 + steps]`` is the decoded sequence (the first ``n0`` =
    ``inputs.ids``' width); ``patterns`` is its forward's ``[example, layer, head, n, n]``."""
    n0 = inputs.ids.shape[1]
    answer_len = inputs.needle.shape[1] - 1
    n_ex, n_layers, n_heads = patterns.shape[:3]
    top = patterns[..., n0 - 1 : ids.shape[1] - 1, :].argmax(-1)  # [ex, L, H, steps]: each step's top key
    score = torch.zeros(n_layers, n_heads)
    for e in range(n_ex):
        s = int(inputs.start[e])
        span = range(s + 1, s + 1 + answer_len)  # the answer's positions in the haystack
        answer = {t: i for i, t in enumerate(inputs.needle[e, 1:].tolist())}  # token -> its slot (distinct)
        copied = torch.zeros(n_layers, n_heads, answer_len, dtype=torch.bool)
        for step, q in enumerate(range(n0 - 1, ids.shape[1] - 1)):
            w = int(ids[e, q + 1])
            if w not in answer:
                continue
            j = top[e, ..., step]  # [L, H]
            hit = (j >= span.start) & (j < span.stop) & (ids[e][j] == w)
            copied[..., answer[w]] |= hit
        score += copied.sum(-1).float() / answer_len
    return score / n_ex


def retrieval_scores(
    adapter: ModelAdapter, n_context: int = 24, answer_len: int = 4, n_examples: int = 16, seed: int = 0
) -> pd.DataFrame:
    """``layer, head, retrieval, retrieval_head``: every head's copy-paste retrieval score on
    ``n_examples`` needle inputs of ``adapter``'s vocabulary, decoded greedily; the table's
    ``attrs["answer_recall"]`` is the share of answer tokens the model emitted (what the
    scores rest on).

    Raises:
        InputError: the input with its decoded answer does not fit the model's positions.
    """
    from probe.tracing.trace import trace

    total = 1 + n_context + 1 + answer_len
    if total > adapter.max_length:
        raise InputError(f"a needle input of {total} tokens exceeds {adapter.name}'s {adapter.max_length} positions")
    from .decoder_heads import probe_vocabulary

    vocab, bos = probe_vocabulary(adapter)
    inputs = needle_inputs(vocab, n_context, answer_len, n_examples, bos, seed)
    ids = inputs.ids.to(adapter.device)
    with torch.no_grad():
        for _ in range(answer_len):  # greedy decoding; one forward per step (tiny inputs)
            logits = adapter.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
            ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    cache = trace(adapter, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, read="pattern")
    patterns = cache.stack("pattern").transpose(0, 1).float().cpu()  # [example, layer, head, q, k]
    ids = ids.cpu()
    scores = copy_paste_scores(patterns, ids, inputs)
    emitted = ids[:, inputs.ids.shape[1] :]
    recall = float((emitted == inputs.needle[:, 1:]).float().mean())
    rows = [
        {
            "layer": layer,
            "head": h,
            "retrieval": float(scores[layer, h]),
            "retrieval_head": float(scores[layer, h]) > RETRIEVAL_THRESHOLD,
        }
        for layer in range(scores.shape[0])
        for h in range(scores.shape[1])
    ]
    table = pd.DataFrame(rows)
    table.attrs.update(answer_recall=recall, n_examples=n_examples, answer_len=answer_len)
    return table
