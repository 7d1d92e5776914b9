"""Which examples the report draws: the representative sentences shown on every page
and the sharpest example of each head. (What the sections read is the run's one
:class:`probe.app.registry.Context`.)"""

from __future__ import annotations

from typing import Any

import torch

#: the two sentences of the attention figures in Vaswani et al. (2017), appendix
PAPER_SENTENCES = (
    "It is in this spirit that a majority of American governments have passed new laws since 2009 "
    "making the registration or voting process more difficult.",
    "The Law will never be perfect, but its application should be just - this is what we are missing, in my opinion.",
)

#: longest example (tokens) drawn as a heatmap or line view
MAX_FIGURE_TOKENS = 40


def representative_examples(maps: Any, k: int = 2, max_tokens: int = MAX_FIGURE_TOKENS) -> list:
    """Up to ``k`` example indices: the paper's sentences when present, then the first
    examples of at most ``max_tokens`` tokens (falling back to the shortest)."""
    norm = lambda s: " ".join(str(s).split())  # noqa: E731
    paper = {norm(s): r for r, s in enumerate(PAPER_SENTENCES)}
    found = sorted((paper[norm(m.text)], i) for i, m in enumerate(maps) if norm(m.text) in paper)
    out = [i for _, i in found][:k]
    for i, m in enumerate(maps):
        if len(out) >= k:
            break
        if i not in out and m.n_tokens <= max_tokens:
            out.append(i)
    if not out:
        out = [min(range(len(maps)), key=lambda i: maps[i].n_tokens)]
    return out


def sharpest_examples(maps: Any, max_tokens: int = MAX_FIGURE_TOKENS, pool: int = 6) -> torch.Tensor:
    """Per (layer index, head), the example where the head's mean row maximum is
    largest: ``[layer, head]`` of example indices. Candidates: the first ``pool``
    examples of at most ``max_tokens`` tokens (else any), so that few distinct examples
    need drawing."""
    cand = ([i for i, m in enumerate(maps) if m.n_tokens <= max_tokens] or list(range(len(maps))))[:pool]
    sharp = torch.stack([maps[i].attentions.float().max(-1).values.mean(-1) for i in cand])  # [E, L, H]
    return torch.tensor(cand)[sharp.argmax(0)]
