"""How far a head's attention pattern moved between two checkpoints on the same inputs.

For each example, layer, head and (non-special) query row ``i``, the Jensen–Shannon
divergence (Lin 1991) between the two checkpoints' attention rows, in bits (``[0, 1]``)::

    JSD(p, q) = ½ KL(p ‖ m) + ½ KL(q ‖ m),   m = ½ (p + q)

averaged over the example's query rows: one value per ``(example, layer, head)``. Clark
et al. (2019) cluster heads by the same divergence between heads of one model; here it
is one head against itself in another checkpoint.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from probe.errors import InputError

__all__ = ["row_jsd", "pattern_divergence"]


def row_jsd(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen–Shannon divergence in bits over the last axis of two stacks of distributions
    of the same shape ``[..., keys]``; returns ``[...]`` in ``[0, 1]``."""
    p, q = p.double(), q.double()
    m = 0.5 * (p + q)
    kl = lambda a: (torch.special.xlogy(a, a) - torch.special.xlogy(a, m)).sum(-1)  # noqa: E731
    return (0.5 * kl(p) + 0.5 * kl(q)).clamp(min=0.0) / np.log(2.0)


def pattern_divergence(maps_a: Sequence, maps_b: Sequence) -> np.ndarray:
    """``[examples, layers, heads]``: the mean over each example's non-special query rows
    of the JSD between checkpoint A's and B's attention (:class:`probe.maps.AttentionMaps`
    of the same inputs, in the same order).

    Raises:
        InputError: different numbers of examples, or an example whose maps differ in
            shape or tokens between the two (not the same inputs, or not the same
            architecture).
    """
    if len(maps_a) != len(maps_b):
        raise InputError(f"{len(maps_a)} examples against {len(maps_b)}: compare checkpoints on the same inputs")
    if not len(maps_a):
        raise InputError("no examples to compare")
    out = []
    for e, (a, b) in enumerate(zip(maps_a, maps_b)):
        if a.attentions.shape != b.attentions.shape:
            raise InputError(
                f"example {e}: maps of shape {tuple(a.attentions.shape)} against {tuple(b.attentions.shape)} "
                "[layer, head, query, key]: the checkpoints differ in shape or tokenization"
            )
        if tuple(a.tokens) != tuple(b.tokens):
            raise InputError(f"example {e}: the checkpoints tokenize it differently; compare one tokenizer's models")
        keep = ~a.special_mask if a.kind != "cross" else ~a.query_special_mask
        if not bool(keep.any()):
            keep = torch.ones_like(keep)
        d = row_jsd(a.attentions[:, :, keep], b.attentions[:, :, keep])  # [L, H, rows]
        out.append(d.mean(-1).numpy())
    return np.stack(out)
