"""Norm-based attention (Kobayashi et al., 2020, "Attention is Not Only a Weight").

Head ``h`` of a layer adds to position ``i`` the vector ``Σ_j α_ij f_h(x_j)`` with
``f_h(x) = (x W_V + b_V)_h · W_O^h`` (the head's slice of the value projection, including
its bias ``b_V``, mapped through the head's columns of the output projection; the output
bias ``b_O`` is excluded because it is added once per position, not per token — as in the
paper). The norm-based weight is ``‖α_ij f_h(x_j)‖ = α_ij ‖f_h(x_j)‖``. Tokens such as
[CLS], [SEP] and punctuation receive large ``α`` but have small ``‖f(x)‖`` (the paper's
Section 4), so their norm-based share is much smaller than their attention share.

:func:`norm_rollout` rolls out these weights: per layer, head-mean of the norm weights,
rows renormalised to sum to 1, then rollout as in :mod:`probe.analyses.flow.rollout` (residual
adjustment 0.5·N + 0.5·I).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch

from probe.analyses.flow.rollout import check_rollable, rollout, validate_attention
from probe.analyses.common.token_scores import TokenScores, output_positions_for

if TYPE_CHECKING:
    from probe.runs.values import ValueCapture

__all__ = ["value_norms", "norm_weights", "norm_rollout", "norm_rollout_maps"]


def value_norms(values: torch.Tensor, w_o: torch.Tensor) -> torch.Tensor:
    """``‖f_h(x_j)‖`` per layer, head and token.

    Args:
        values: ``[L, n, H, dh]`` value-projection outputs ``x W_V + b_V`` per head.
        w_o: ``[L, d, H·dh]`` output projection weights (``y = W z`` orientation).

    Returns:
        ``[L, H, n]`` norms.

    Raises:
        ValueError: shapes that do not fit together.
    """
    if values.dim() != 4 or w_o.dim() != 3:
        raise ValueError(
            f"values must be [L, n, H, dh] and w_o [L, d, H*dh]; got {tuple(values.shape)} and {tuple(w_o.shape)}"
        )
    L, n, H, dh = values.shape
    if w_o.shape[0] != L or w_o.shape[2] != H * dh:
        raise ValueError(f"w_o {tuple(w_o.shape)} does not fit values {tuple(values.shape)}")
    w = w_o.reshape(L, w_o.shape[1], H, dh).to(values.dtype)
    f = torch.einsum("lnhe,ldhe->lhnd", values, w)  # [L, H, n, d]
    return f.norm(dim=-1)


def norm_weights(alpha: torch.Tensor, values: torch.Tensor, w_o: torch.Tensor) -> torch.Tensor:
    """Norm-based attention ``‖α_ij f_h(x_j)‖``: ``[L, H, n, n]`` (query ``i``, key ``j``).

    Args:
        alpha: attention ``[L, H, n, n]``.
        values, w_o: as in :func:`value_norms`.

    Raises:
        ValueError: invalid attention or shapes that disagree.
    """
    validate_attention(alpha, name="alpha")
    norms = value_norms(values, w_o)
    if norms.shape != (alpha.shape[0], alpha.shape[1], alpha.shape[-1]):
        raise ValueError(f"attention {tuple(alpha.shape)} and values (giving norms {tuple(norms.shape)}) disagree")
    return alpha.to(norms.dtype) * norms[:, :, None, :]


def norm_rollout(
    alpha: torch.Tensor,
    values: torch.Tensor,
    w_o: torch.Tensor,
    *,
    residual: float = 0.5,
    output_positions: Sequence[int] | None = None,
    causal: bool = False,
) -> torch.Tensor:
    """Rollout over norm-based weights: ``[n, n]`` or ``[k, n]`` (rows sum to 1).

    Per layer ``N_l = mean_h ‖α f_h‖`` with rows renormalised; then
    :func:`probe.analyses.flow.rollout.rollout` with the given residual weight.
    """
    w = norm_weights(alpha, values, w_o).mean(1)
    w = w / w.sum(-1, keepdim=True).clamp_min(1e-30)
    return rollout(w, heads=None, residual=residual, output_positions=output_positions, causal=causal)


def norm_rollout_maps(
    capture: ValueCapture,
    *,
    residual: float = 0.5,
    output_positions: Sequence[int] | None = None,
    all_positions: bool = False,
) -> TokenScores:
    """Norm-based rollout of a :class:`probe.runs.values.ValueCapture` as :class:`TokenScores`
    (scores ``[output positions, n]``)."""
    maps = capture.maps
    check_rollable(maps)
    pos = output_positions_for(maps.n_tokens, output_positions, kind=maps.kind, all_positions=all_positions)
    scores = norm_rollout(
        maps.attentions,
        capture.values,
        capture.w_o,
        residual=residual,
        output_positions=pos,
        causal=maps.kind == "causal",
    )
    return TokenScores(
        maps.tokens,
        pos,
        scores.double(),
        "norm-rollout",
        {"residual": residual, "weights": "Kobayashi et al. 2020 ‖α f(x)‖"},
    )
