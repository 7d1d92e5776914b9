"""Attention rollout (Abnar & Zuidema, 2020, "Quantifying Attention Flow in Transformers").

Definitions (see REFERENCES.md):

* head combination: ``A_l`` = mean over heads of layer ``l`` (or a chosen non-negative
  head weighting, renormalised per layer so rows still sum to 1);
* residual adjustment: ``Â_l = 0.5·A_l + 0.5·I``, rows renormalised;
* rollout: ``R_1 = Â_1``, ``R_l = Â_l · R_{l−1}``. Row ``i`` of ``R_L`` says how much input
  token ``j`` feeds output position ``i``.

A single row ``e_iᵀ Â_L ⋯ Â_1`` is computed as ``L`` vector × matrix products,
``O(L·n²)``, not as the ``O(L·n³)`` chain of matrix products. Many examples of different
lengths are rolled out together (:func:`rollout_batch`): examples of equal length are
stacked and rolled out with batched matmuls.

For causal (decoder) attention the maps are lower-triangular; so is every product of
them, hence rollout never moves mass from a future token (checked in the tests).

Shapes: ``[layer, head, query, key]`` per example, as everywhere in the toolkit.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Sequence, Union

import torch

from probe.errors import InputError, NotApplicable
from probe.analyses.common.token_scores import TokenScores, output_positions_for

if TYPE_CHECKING:
    from probe.maps import AttentionMaps

log = logging.getLogger(__name__)

__all__ = [
    "validate_attention",
    "combine_heads",
    "residual_adjust",
    "rollout",
    "rollout_batch",
    "rollout_maps",
]

HeadSpec = Union[str, Sequence[int], torch.Tensor, None]

ROW_TOL = 1e-3


def validate_attention(a: torch.Tensor, *, name: str = "attention", causal: bool = False) -> None:
    """Check that ``a[..., n, n]`` holds square, row-stochastic attention maps.

    Args:
        a: tensor whose last two dimensions are ``[query, key]``.
        name: how to call the input in error messages.
        causal: also require no mass above the diagonal (no attention to the future).

    Raises:
        InputError: not a tensor of at least 2 dimensions, not finite, negative entries,
            rows not summing to 1 (tolerance 1e-3), or — when ``causal`` — mass on future
            keys; the message says which and how far off.
        NotApplicable: maps that are not square (cross-attention: rollout and flow are
            not defined there).
    """
    if not torch.is_tensor(a):
        raise InputError(f"{name} must be a torch tensor, got {type(a).__name__}")
    if a.dim() < 2:
        raise InputError(f"{name} must be at least [query, key]; got shape {tuple(a.shape)}")
    q, k = a.shape[-2:]
    if q != k:
        raise NotApplicable(
            f"{name} maps must be square (self-attention, query = key); got {q} × {k}. "
            "Rollout and flow are not defined for cross-attention."
        )
    if a.numel() == 0:
        return
    sums = a.sum(-1, dtype=torch.float64)  # NaN/inf anywhere in a row shows in its sum
    if not torch.isfinite(sums).all():
        raise InputError(f"{name} contains NaN or infinite values")
    low = a.amin().item()
    if low < -1e-6:
        raise InputError(f"{name} has negative entries (min {low:.3g}); pass probabilities")
    off = (sums - 1).abs().max().item()
    if off > ROW_TOL:
        raise InputError(
            f"{name} rows must sum to 1 over keys (worst row off by {off:.3g}); pass softmax probabilities, not scores"
        )
    if causal:
        future = torch.triu(a, diagonal=1).abs().max().item()
        if future > 1e-6:
            raise InputError(f"{name} is declared causal but puts up to {future:.3g} on future keys")


def combine_heads(attn: torch.Tensor, heads: HeadSpec = "mean") -> torch.Tensor:
    """Combine heads: ``[..., L, H, n, n] -> [..., L, n, n]``.

    Args:
        attn: attention ``[..., layer, head, query, key]``.
        heads: ``"mean"`` (head mean, as Abnar & Zuidema), a sequence of head indices
            (mean over those heads, in every layer), or non-negative weights ``[H]`` or
            ``[L, H]`` (renormalised to sum 1 per layer so rows still sum to 1);
            ``None`` means ``attn`` is already combined and is returned as is.

    Raises:
        ValueError: unknown string, head index out of range, weights of the wrong shape,
            negative, or summing to 0 in some layer.
    """
    if heads is None:
        return attn
    if attn.dim() < 4:
        raise InputError(
            f"attention must be [..., layer, head, query, key]; got shape {tuple(attn.shape)} "
            "(pass heads=None for maps already combined over heads)"
        )
    L, H = attn.shape[-4], attn.shape[-3]
    if isinstance(heads, str):
        if heads != "mean":
            raise InputError(f"heads must be 'mean', head indices or weights; got {heads!r}")
        return attn.mean(-3)
    if not torch.is_tensor(heads):
        idx = [int(h) for h in heads]
        if not idx:
            raise InputError("heads: empty head selection")
        bad = [h for h in idx if not 0 <= h < H]
        if bad:
            raise InputError(f"heads {bad} out of range 0..{H - 1}")
        w = torch.zeros(H, dtype=attn.dtype)
        w[idx] = 1.0
        heads = w
    w = heads.to(attn.dtype)
    if w.shape == (H,):
        w = w.expand(L, H)
    if w.shape != (L, H):
        raise InputError(f"head weights must have shape ({H},) or ({L}, {H}); got {tuple(w.shape)}")
    if (w < 0).any():
        raise InputError("head weights must be non-negative (rows must stay probabilities)")
    total = w.sum(-1, keepdim=True)
    if (total <= 0).any():
        raise InputError("head weights sum to 0 in some layer")
    w = w / total
    return torch.einsum("...lhqk,lh->...lqk", attn, w)


def residual_adjust(a: torch.Tensor, residual: float = 0.5) -> torch.Tensor:
    """``Â = (1 − r)·A + r·I`` with rows renormalised (Abnar & Zuidema use r = 0.5).

    Shape ``[..., n, n]`` in and out. ``residual=0`` returns the maps renormalised.
    """
    if not 0.0 <= residual <= 1.0:
        raise InputError(f"residual weight must lie in [0, 1], got {residual}")
    n = a.shape[-1]
    eye = torch.eye(n, dtype=a.dtype, device=a.device)
    out = (1.0 - residual) * a + residual * eye
    return out / out.sum(-1, keepdim=True).clamp_min(torch.finfo(a.dtype).tiny)


def rollout(
    attn: torch.Tensor,
    *,
    heads: HeadSpec = "mean",
    residual: float = 0.5,
    output_positions: Sequence[int] | None = None,
    causal: bool = False,
    validate: bool = True,
) -> torch.Tensor:
    """Attention rollout of one example or a batch of equal-length examples.

    Args:
        attn: ``[..., L, H, n, n]`` (or ``[..., L, n, n]`` with ``heads=None``).
        heads: head combination, see :func:`combine_heads`.
        residual: weight of the identity in the residual adjustment (0.5 in the paper).
        output_positions: rows to compute; ``None`` = the full matrix ``R_L``.
        causal: require lower-triangular maps (no attention to the future).
        validate: check the input maps (see :func:`validate_attention`).

    Returns:
        ``[..., n, n]`` (full) or ``[..., k, n]`` for ``k`` output positions, in float64
        when the input is float64, else float32. Every row sums to 1.

    Raises:
        ValueError: invalid maps or output positions out of range.
    """
    if validate:
        validate_attention(attn, causal=causal)
    a = combine_heads(attn, heads)
    if a.dim() < 3:
        raise InputError(f"need at least [layer, query, key] after combining heads; got {tuple(a.shape)}")
    if a.dtype not in (torch.float32, torch.float64):
        a = a.float()
    a = residual_adjust(a, residual)
    n = a.shape[-1]
    L = a.shape[-3]
    if output_positions is None:
        r = a[..., 0, :, :]
        for l in range(1, L):
            r = a[..., l, :, :] @ r
        return r
    pos = output_positions_for(n, output_positions)
    v = a[..., L - 1, list(pos), :]  # e_iᵀ Â_L
    for l in range(L - 2, -1, -1):
        v = v @ a[..., l, :, :]
    return v


def rollout_batch(
    examples: Sequence[torch.Tensor],
    *,
    heads: HeadSpec = "mean",
    residual: float = 0.5,
    output_positions: Union[str, Sequence[Sequence[int]], None] = None,
    kind: str = "self",
    bucket_size: int = 512,
    validate: bool = True,
) -> list:
    """Rollout of many examples of different lengths, batched in torch.

    Each example is validated and head-combined (one pass over its maps each); the
    combined maps of equal length are stacked (at most ``bucket_size`` at a time) and
    rolled out with batched matmuls. No padding: the work is that of the examples
    themselves plus one set of batched calls per length.

    Args:
        examples: attention tensors ``[L, H, n_b, n_b]`` (same ``L`` and ``H``), or
            ``[L, n_b, n_b]`` with ``heads=None``.
        heads, residual: as in :func:`rollout`.
        output_positions: ``None`` = the default row of each example (position 0 for
            ``kind="self"``, the last token for ``"causal"``); ``"all"`` = full matrices;
            or one sequence of positions per example.
        kind: ``"self"`` or ``"causal"`` (causal maps are also checked lower-triangular).
        bucket_size: most examples stacked at once (bounds memory).
        validate: check every example's maps.

    Returns:
        list (input order) of float32/float64 tensors ``[k_b, n_b]`` (``[n_b, n_b]`` for
        ``"all"``).

    Raises:
        ValueError: invalid maps (naming the example), mismatched layer/head counts, bad
            positions.
    """
    if bucket_size < 1:
        raise InputError("bucket_size must be at least 1")
    examples = list(examples)
    if not examples:
        return []
    lead = 3 if heads is None else 4
    shapes = set()
    for b, ex in enumerate(examples):
        if not torch.is_tensor(ex) or ex.dim() != lead:
            want = "[layer, query, key]" if heads is None else "[layer, head, query, key]"
            raise InputError(f"example {b} must be a {lead}-D tensor {want}")
        shapes.add(tuple(ex.shape[:-2]))
    if len(shapes) != 1:
        raise InputError(f"all examples need the same layer/head counts; got {sorted(shapes)}")
    lengths = [ex.shape[-1] for ex in examples]
    full = isinstance(output_positions, str)
    if full and output_positions != "all":
        raise InputError(f"output_positions must be None, 'all' or per-example lists; got {output_positions!r}")
    if output_positions is None or full:
        rows = [None if full else output_positions_for(n, None, kind=kind) for n in lengths]
    else:
        if len(output_positions) != len(examples):
            raise InputError(f"{len(output_positions)} position lists for {len(examples)} examples")
        rows = [output_positions_for(n, p) for n, p in zip(lengths, output_positions)]  # type: ignore[arg-type]  # per-example lists here: 'all' was handled above
    groups: dict = {}
    for b, n in enumerate(lengths):
        groups.setdefault(n, []).append(b)
    out: list = [None] * len(examples)
    L = next(iter(shapes))[0]
    for n, members in groups.items():
        for start in range(0, len(members), bucket_size):
            idx = members[start : start + bucket_size]
            parts = []
            for b in idx:
                if validate:
                    validate_attention(examples[b], name=f"example {b}", causal=kind == "causal")
                parts.append(combine_heads(examples[b], heads))
            a = torch.stack(parts)
            if a.dtype not in (torch.float32, torch.float64):
                a = a.float()
            a = residual_adjust(a, residual)
            if full:
                r = a[:, 0]
                for l in range(1, L):
                    r = torch.bmm(a[:, l], r)
                for i, b in enumerate(idx):
                    out[b] = r[i]
                continue
            k = max(len(rows[b]) for b in idx)
            sel = torch.zeros(len(idx), k, dtype=torch.long)
            for i, b in enumerate(idx):
                sel[i, : len(rows[b])] = torch.as_tensor(rows[b], dtype=torch.long)
            v = torch.gather(a[:, L - 1], 1, sel[:, :, None].expand(-1, -1, n))
            for l in range(L - 2, -1, -1):
                v = torch.bmm(v, a[:, l])
            for i, b in enumerate(idx):
                out[b] = v[i, : len(rows[b])]
    return out


def rollout_maps(
    maps: AttentionMaps,
    *,
    heads: HeadSpec = "mean",
    residual: float = 0.5,
    output_positions: Sequence[int] | None = None,
    all_positions: bool = False,
) -> TokenScores:
    """Rollout of one :class:`probe.maps.AttentionMaps` as :class:`TokenScores`.

    The captured layers must be consecutive (rollout composes adjacent layers).
    Default output position: [CLS] (position 0) for self-attention, the last token for
    causal attention; ``all_positions`` gives the full matrix.

    Raises:
        ValueError: cross-attention maps, non-consecutive layers, bad positions.
    """
    check_rollable(maps)
    pos = output_positions_for(maps.n_tokens, output_positions, kind=maps.kind, all_positions=all_positions)
    scores = rollout(
        maps.attentions,
        heads=heads,
        residual=residual,
        output_positions=pos,
        causal=maps.kind == "causal",
    )
    return TokenScores(
        maps.tokens,
        pos,
        scores.double(),
        "rollout",
        {"residual": residual, "heads": heads_meta(heads), "layers": list(maps.layers)},
    )


def check_rollable(maps: AttentionMaps) -> None:
    """Refuse maps rollout cannot compose: cross-attention, or layers that are not consecutive.

    Raises:
        NotApplicable: cross-attention maps.
        InputError: captured layers with a gap, naming them.
    """
    if maps.kind == "cross":
        raise NotApplicable("rollout and flow need self- or causal attention, not cross-attention")
    layers = list(maps.layers)
    if layers != list(range(layers[0], layers[0] + len(layers))):
        raise InputError(
            f"rollout composes consecutive layers; the captured layers are {layers}. "
            "Capture all layers (or a consecutive range)."
        )


def heads_meta(heads: HeadSpec) -> str | list[int] | None:
    """``heads`` as JSON-able metadata: the spec string, a list of head indices, or None."""
    if heads is None or isinstance(heads, str):
        return heads
    if torch.is_tensor(heads):
        return heads.tolist()
    return [int(h) for h in heads]
