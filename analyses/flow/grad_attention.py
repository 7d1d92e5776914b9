"""Gradient-weighted attention rollout (Chefer et al., 2021, "Generic Attention-model
Explainability for Interpreting Bi-Modal and Encoder-Decoder Transformers"; the head
weighting of "Transformer Interpretability Beyond Attention Visualization").

Per layer: ``Ā_l = mean_h (∇A_l ⊙ A_l)⁺`` (the attention weighted by the gradient of the
explained scalar, positive part, head mean); ``B_l = I + Ā_l`` with rows renormalised
(REFERENCES.md; Chefer's unnormalised update ``R ← R + Ā R`` differs from this only by a
per-row scale); then ``R = B_L ⋯ B_1``. The gradients come from
:func:`probe.runs.grads.attention_gradients`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch

from probe.analyses.flow.rollout import check_rollable, rollout, validate_attention
from probe.analyses.common.token_scores import TokenScores, output_positions_for

if TYPE_CHECKING:
    from probe.runs.grads import AttentionGradients

__all__ = ["grad_weighted_attention", "grad_rollout", "grad_rollout_maps"]


def grad_weighted_attention(attn: torch.Tensor, grads: torch.Tensor) -> torch.Tensor:
    """``Ā = mean_h (grads ⊙ attn)⁺``: ``[L, H, n, n]`` × 2 -> ``[L, n, n]`` (not normalised).

    Raises:
        ValueError: invalid attention or gradients of another shape.
    """
    validate_attention(attn)
    if grads.shape != attn.shape:
        raise ValueError(f"gradients {tuple(grads.shape)} must match attention {tuple(attn.shape)}")
    if attn.dim() != 4:
        raise ValueError(f"attention must be [layer, head, n, n]; got {tuple(attn.shape)}")
    return (grads * attn).clamp_min(0).mean(1)


def grad_rollout(
    attn: torch.Tensor,
    grads: torch.Tensor,
    *,
    output_positions: Sequence[int] | None = None,
    causal: bool = False,
) -> torch.Tensor:
    """Gradient-weighted rollout: ``[n, n]`` (or ``[k, n]`` rows), rows summing to 1.

    Raises:
        ValueError: as :func:`grad_weighted_attention`; future mass when ``causal``.
    """
    if causal:
        validate_attention(attn, causal=True)
    a = grad_weighted_attention(attn, grads).double()
    b = a + torch.eye(a.shape[-1], dtype=a.dtype)
    b = b / b.sum(-1, keepdim=True)
    return rollout(b, heads=None, residual=0.0, output_positions=output_positions, validate=False)


def grad_rollout_maps(
    result: AttentionGradients, *, output_positions: Sequence[int] | None = None, all_positions: bool = False
) -> TokenScores:
    """Gradient-weighted rollout of a :class:`probe.runs.grads.AttentionGradients` (maps and
    gradients ``[layer, head, n, n]``): scores ``[output positions, n]``."""
    maps = result.maps
    check_rollable(maps)
    pos = output_positions_for(maps.n_tokens, output_positions, kind=maps.kind, all_positions=all_positions)
    scores = grad_rollout(maps.attentions, result.grads, output_positions=pos, causal=maps.kind == "causal")
    return TokenScores(
        maps.tokens, pos, scores, "grad-rollout", {"target": result.target, "target_value": result.target_value}
    )
