"""The perturbations behind the *necessity* nulls and the *weights* claim, as values of a
head's output ``z`` (the removal sweep, :mod:`probe.analyses.claims.removal`, runs them):

* ``uniform`` — the head's attention replaced by uniform weights over the keys it may
  see, its values kept: ``z_u = mean_k V_k`` (where it looks, not whether it contributes);
* ``random`` nulls — the perturbation ``δ`` (``z`` or ``z − z_u``) turned in a random
  direction: the head's output becomes ``z − Q δ`` with ``Q`` a random orthogonal
  ``[head_dim, head_dim]`` matrix per (example, head). What is compared is the *change* of
  the head's output: removal changes it by ``−z``, the null by ``−Q z``, and ``|Q z| = |z|``
  at every position. So the null moves the head's output by exactly as much as the real
  perturbation, in a random direction (context for a removal's harm, never a test).
"""

from __future__ import annotations

import torch

__all__ = ["uniform_output", "random_rotations", "rotate"]


def uniform_output(values: torch.Tensor, mask: torch.Tensor, causal: bool) -> torch.Tensor:
    """Head outputs under uniform attention over the keys a query may see.

    Args:
        values: ``[b, seq, heads, head_dim]``; mask: ``[b, seq]`` (1 = real token).
        causal: query ``i`` sees keys ``0..i`` only.

    Returns:
        ``[b, seq, heads, head_dim]``.
    """
    b, s = mask.shape
    w = mask[:, None, :].to(values.dtype).expand(b, s, s)
    if causal:
        w = w * torch.ones(s, s, dtype=values.dtype, device=values.device).tril()
    w = w / w.sum(-1, keepdim=True).clamp(min=1)
    return torch.einsum("bqk,bkhd->bqhd", w, values)


def random_rotations(b: int, h: int, d: int, generator: torch.Generator) -> torch.Tensor:
    """``[b, h, d, d]`` random orthogonal matrices (QR of a Gaussian, signs fixed: Haar)."""
    g = torch.randn(b * h, d, d, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(g)
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))[:, None, :]
    return q.reshape(b, h, d, d)


def rotate(delta: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``delta [b, seq, h, d]`` turned by ``q [b, h, d, d]`` (norms kept at every position)."""
    return torch.einsum("bshd,bhde->bshe", delta, q.to(delta.dtype).to(delta.device))
